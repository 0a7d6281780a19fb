"""The benchmark programs: each a loss written once against an ``ops`` namespace, its
parameters and data, and a hand-written numpy forward+backward where one is short enough.

Every program returns a scalar loss of ``params`` (a list of arrays: all weights, so the
subgradient is taken with respect to every one of them). ``build(quick)`` gives the sizes of
the full run or of the CI smoke run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Benchmark:
    """One program at one size and dtype, with everything needed to time and check it.

    ``ties`` says the program has exact ties by construction: frameworks that fix a value at
    kinks then return a different element, so only the direction-aware hand-written
    reference (given asd's direction) is compared with asd. ``hand(params, data,
    direction)`` returns ``(value, grads)``; ``direction`` is used only when ``ties``.
    """

    name: str
    about: str
    dtype: np.dtype
    params: list
    data: tuple
    loss: Callable
    hand: Callable | None = None
    hand_label: str = "numpy fwd+bwd"
    ties: bool = False
    notes: dict = field(default_factory=dict)
    untied: list | None = None  # the same program's parameters at a point without ties
    clarke: int = 0  # time a compiled asd.clarke with this many directions too


# ----- multilayer perceptrons (wide, tied, deep and narrow) -----

def mlp_loss(ops, params, data):
    x, y = data
    h = x
    for i in range(0, len(params) - 2, 2):
        h = ops.relu(h @ params[i] + params[i + 1])
    d = h @ params[-2] + params[-1] - y
    return (d * d).sum() * (0.5 / x.shape[0])


def mlp_hand(params, data, direction=None):
    """Plain reverse mode: forward storing the activations, then the backward pass."""
    x, y = data
    hs, masks, h = [x], [], x
    for i in range(0, len(params) - 2, 2):
        z = h @ params[i] + params[i + 1]
        h = np.maximum(z, 0)
        hs.append(h)
        masks.append(z > 0)
    return _mlp_backward(params, hs, masks, h, y)


def _mlp_backward(params, hs, slopes, h, y):
    """The squared loss and the backward pass through layers with the given relu slopes."""
    d = h @ params[-2] + params[-1] - y
    scale = 0.5 / hs[0].shape[0]
    g = d * (2 * scale)
    grads = [None] * len(params)
    for layer in range(len(params) // 2 - 1, -1, -1):
        grads[2 * layer] = hs[layer].T @ g
        grads[2 * layer + 1] = g.sum(axis=0)
        if layer:
            g = (g @ params[2 * layer].T) * slopes[layer - 1]
    return (d * d).sum() * scale, grads


def draw_direction(params, rng=None) -> list:
    """A direction uniform on the unit sphere of all parameters, as asd draws one."""
    rng = np.random.default_rng() if rng is None else rng
    draws = [rng.standard_normal(np.shape(p)) for p in params]
    norm = np.sqrt(sum(float(np.sum(d * d)) for d in draws))
    return [(d / norm).astype(p.dtype) for d, p in zip(draws, params, strict=True)]


def mlp_hand_tangent(params, data, direction=None):
    """The hand-written ASD of the MLP: forward with a dense tangent, relu slopes chosen by
    the tangent where ``z == 0`` (the ray's side), then the backward pass."""
    x, y = data
    v = draw_direction(params) if direction is None else direction
    hs, slopes, h, t = [x], [], x, None
    for i in range(0, len(params) - 2, 2):
        z = h @ params[i] + params[i + 1]
        tz = (0 if t is None else t @ params[i]) + h @ v[i] + v[i + 1]
        slope = np.where(z == 0, tz >= 0, z > 0)
        h, t = np.maximum(z, 0), tz * slope
        hs.append(h)
        slopes.append(slope)
    return _mlp_backward(params, hs, slopes, h, y)


def mlp_params(sizes, dtype, rng, bias: float) -> list:
    params = []
    for a, b in itertools.pairwise(sizes):
        params.append((rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(dtype))
        params.append(np.full(b, bias, dtype))
    return params


def mlp(dtype, quick: bool, *, ties: bool = False) -> Benchmark:
    rng = np.random.default_rng(0)
    batch, sizes = (32, [784, 64, 64, 64, 10]) if quick else (256, [784, 512, 512, 512, 10])
    x = rng.standard_normal((batch, sizes[0])).astype(dtype)
    y = rng.standard_normal((batch, sizes[-1])).astype(dtype)
    if ties:
        x[: batch // 4] = 0.0  # with zero biases these rows are exactly 0 in every layer
    params = mlp_params(sizes, dtype, rng, 0.0 if ties else 0.01)
    arch = "-".join(map(str, sizes))
    kind = "mlp-ties" if ties else "mlp"
    about = (f"ReLU MLP {arch}, batch {batch}"
             + (": 1/4 of the rows zero, zero biases (ties in every layer)" if ties else ""))
    return Benchmark(f"{kind} {np.dtype(dtype).name}", about, np.dtype(dtype), params, (x, y),
                     mlp_loss, mlp_hand_tangent if ties else mlp_hand,
                     "numpy fwd+tangent+bwd" if ties else "numpy fwd+bwd", ties)


def deep_narrow(quick: bool) -> Benchmark:
    rng = np.random.default_rng(1)
    batch, depth = (16, 20) if quick else (256, 20)
    sizes = [64] * depth + [10]
    x = rng.standard_normal((batch, 64))
    y = rng.standard_normal((batch, 10))
    return Benchmark("deep-narrow float64", f"ReLU net, {depth} layers of width 64, batch "
                     f"{batch}", np.dtype(np.float64), mlp_params(sizes, np.float64, rng, 0.01),
                     (x, y), mlp_loss, mlp_hand)


# ----- a small CNN with max pooling -----

def cnn_loss(ops, params, data):
    x, y = data
    w1, b1, w2, b2, w3, b3 = params
    h = ops.maxpool2(ops.relu(ops.conv2d(x, w1) + b1.reshape(1, -1, 1, 1)))
    h = ops.maxpool2(ops.relu(ops.conv2d(h, w2) + b2.reshape(1, -1, 1, 1)))
    d = h.reshape(x.shape[0], -1) @ w3 + b3 - y
    return (d * d).sum() * (0.5 / x.shape[0])


def cnn(quick: bool) -> Benchmark:
    rng = np.random.default_rng(2)
    batch = 4 if quick else 64
    x = rng.standard_normal((batch, 1, 30, 30))
    y = rng.standard_normal((batch, 10))
    params = [rng.standard_normal((8, 1, 3, 3)) / 3, np.full(8, 0.01),
              rng.standard_normal((16, 8, 3, 3)) / np.sqrt(72), np.full(16, 0.01),
              rng.standard_normal((16 * 6 * 6, 10)) / 24, np.zeros(10)]
    return Benchmark("cnn float64", f"conv(1->8,3x3)-relu-maxpool2-conv(8->16,3x3)-relu-"
                     f"maxpool2-dense, 30x30 input, batch {batch}", np.dtype(np.float64),
                     params, (x, y), cnn_loss)


# ----- a small CNN whose pooling windows hold dead relus (issue 24) -----

def small_cnn_loss(ops, params, data):
    """``Conv2d(1, 3, 3, padding=1) -> ReLU -> MaxPool2d(2) -> Linear`` (``x`` comes padded)."""
    x, y = data
    w1, b1, w2, b2 = params
    h = ops.maxpool2(ops.relu(ops.conv2d(x, w1) + b1.reshape(1, -1, 1, 1)))
    d = h.reshape(x.shape[0], -1) @ w2 + b2 - y
    return (d * d).sum() * (0.5 / x.shape[0])


def _conv_valid(x, w):
    """Valid cross-correlation of ``(N, C, H, W)`` with ``(O, C, k, k)``."""
    k = w.shape[-1]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return np.einsum("ncijpq,ocpq->noij", win, w), win


def small_cnn_hand(params, data, direction=None):
    """The hand-written ASD of `small_cnn_loss`: a relu at 0 takes the side of its tangent,
    a pooling window the largest (value, tangent), the first of equal ones; then backprop."""
    x, y = data
    w1, b1, w2, b2 = params
    v = draw_direction(params) if direction is None else direction
    z, win = _conv_valid(x, w1)
    z = z + b1.reshape(1, -1, 1, 1)
    tz = _conv_valid(x, v[0])[0] + v[1].reshape(1, -1, 1, 1)
    slope = np.where(z == 0, tz >= 0, z > 0)
    r, rt = np.maximum(z, 0), tz * slope
    n, c, hh, ww = r.shape

    def windows(a):
        return a.reshape(n, c, hh // 2, 2, ww // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
            n, c, hh // 2, ww // 2, 4)

    vals, keys = windows(r), windows(rt)
    best = vals == vals.max(-1, keepdims=True)
    keys = np.where(best, keys, -np.inf)
    sel = np.argmax(best & (keys == keys.max(-1, keepdims=True)), -1)
    pooled = np.take_along_axis(vals, sel[..., None], -1)[..., 0]
    flat = pooled.reshape(n, -1)
    d = flat @ w2 + b2 - y
    g = d / n
    g_pooled = (g @ w2.T).reshape(pooled.shape)
    g_win = np.zeros(vals.shape)
    np.put_along_axis(g_win, sel[..., None], g_pooled[..., None], -1)
    g_r = g_win.reshape(n, c, hh // 2, ww // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        r.shape)
    g_z = g_r * slope
    return (d * d).sum() * (0.5 / n), [np.einsum("noij,ncijpq->ocpq", g_z, win),
                                       g_z.sum(axis=(0, 2, 3)), flat.T @ g, g.sum(axis=0)]


def small_cnn(quick: bool, zero_weights: bool = False) -> Benchmark:
    """The CNN of issue 24 at a random init (many pooling windows of dead relus), or with
    zero conv weights (every relu on its kink); 'asd untied': the same call with the conv's
    bias raised so that no relu is dead or tied."""
    rng = np.random.default_rng(6)
    batch = 8
    x = np.pad(rng.standard_normal((batch, 1, 6, 6)), [(0, 0), (0, 0), (1, 1), (1, 1)])
    y = rng.standard_normal((batch, 10))
    params = [rng.standard_normal((3, 1, 3, 3)) / 3, rng.standard_normal(3) * 0.1,
              rng.standard_normal((27, 10)) / 5, np.zeros(10)]
    untied = [params[0], params[1] + 10.0, params[2], params[3]]
    if zero_weights:
        params = [np.zeros_like(params[0]), np.zeros(3), params[2], params[3]]
    name = "cnn-zero-weights" if zero_weights else "cnn-dead-windows"
    about = ("conv(1->3,3x3,pad 1)-relu-maxpool2-dense, 6x6 input, batch 8, "
             + ("zero conv weights and bias: every relu tied" if zero_weights else
                "random init: pooling windows of dead relus")
             + "; 'asd untied': the conv bias raised by 10 (no relu dead or tied)")
    return Benchmark(f"{name} float64", about, np.dtype(np.float64), params, (x, y),
                     small_cnn_loss, small_cnn_hand, "numpy fwd+tangent+bwd", ties=True,
                     untied=untied)


# ----- a 1000-operation scalar chain (per-operation overhead) -----

def chain_loss(ops, params, data):
    (y,) = params
    for _ in range(data[0]):
        y = ops.abs(y * 0.9 + 0.1) - 0.05
    return y


def chain_hand(params, data, direction=None):
    (y,) = params
    signs = []
    for _ in range(data[0]):
        z = y * 0.9 + 0.1
        signs.append(1.0 if z >= 0 else -1.0)
        y = abs(z) - 0.05
    g = 1.0
    for s in reversed(signs):
        g *= 0.9 * s
    return y, [np.asarray(g)]


def scalar_chain(quick: bool) -> Benchmark:
    blocks = 50 if quick else 250
    return Benchmark("scalar-chain float64", f"{4 * blocks} scalar operations (y = |0.9 y + "
                     "0.1| - 0.05, repeated)", np.dtype(np.float64), [np.asarray(0.3)],
                     (blocks,), chain_loss, chain_hand)


def max_chain_loss(ops, params, data):
    (y,) = params
    for _ in range(data[0]):
        y = ops.maximum(y * 0.9 + 0.1, y * 0.3)
    return y


def max_chain_hand(params, data, direction=None):
    (y,) = params
    y = float(y)
    picks = []
    for _ in range(data[0]):
        a, b = y * 0.9 + 0.1, y * 0.3
        picks.append(a >= b)
        y = a if a >= b else b
    g = 1.0
    for first in reversed(picks):
        g *= 0.9 if first else 0.3
    return y, [np.asarray(g)]


def max_chain(quick: bool) -> Benchmark:
    """The chain issue 24 measured at 43x hand-written code: a maximum of two affine maps,
    taken at a numpy float64 scalar (which skipped the generated path then)."""
    steps = 60 if quick else 333
    return Benchmark("max-chain float64", f"{4 * steps} scalar operations (y = max(0.9 y + "
                     "0.1, 0.3 y), repeated) at a numpy float64 scalar", np.dtype(np.float64),
                     [np.float64(0.7)], (steps,), max_chain_loss, max_chain_hand)


# ----- a small hinge-loss SVM with an l1 term (per-call overhead of a tiny model) -----

def svm_loss(ops, params, data):
    (w,) = params
    X, y = data
    return ops.relu(1.0 - y * (X @ w)).mean() + 0.1 * ops.abs(w).sum()


def svm_hand(params, data, direction=None):
    (w,) = params
    X, y = data
    margin = 1.0 - y * (X @ w)
    active = margin > 0
    value = np.maximum(margin, 0).mean() + 0.1 * np.abs(w).sum()
    return value, [-(X.T @ (y * active)) / len(y) + 0.1 * np.sign(w)]


def svm(quick: bool) -> Benchmark:
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((4, 2)), np.array([1.0, -1.0, 1.0, -1.0])
    return Benchmark("svm float64", "hinge-loss SVM + l1 term, 4 samples x 2 features (the "
                     "per-call overhead of a tiny objective)", np.dtype(np.float64),
                     [np.array([0.3, -0.2])], (X, y), svm_loss, svm_hand, clarke=64)


# ----- a chain whose every tie only the exact series decides (the tie contract's cost) -----

def series_chain_loss(ops, params, data):
    """``y <- relu(y + s) - relu(-(y + s))`` with ``s = x0² + x1²``: at x = 0 every relu meets
    ``y + s == 0`` with a zero tangent along every direction, and only the series along the
    ray (``δ²|v|²``) decides; the value is ``blocks * s + x0 + 2 x1``."""
    (x,) = params
    s = x[0] * x[0] + x[1] * x[1]
    y = s * 0.0
    for _ in range(data[0]):
        h = y + s
        y = ops.relu(h) - ops.relu(-h)
    return y + x[0] + 2.0 * x[1]


def series_chain_hand(params, data, direction=None):
    """The chain is ``blocks * (x0² + x1²) + x0 + 2 x1`` written with kinks: smooth."""
    (x,) = params
    return data[0] * float(x @ x) + x[0] + 2.0 * x[1], [2.0 * data[0] * x + np.array([1.0, 2.0])]


def series_chain(quick: bool) -> Benchmark:
    blocks = 100 if quick else 2000  # 5 operations a block: 10^4 nodes
    return Benchmark("series-chain float64", f"{5 * blocks}-node chain at x = 0, every tie "
                     "decided by the exact series; 'asd untied': the same chain at x = (1, 1)",
                     np.dtype(np.float64), [np.zeros(2)], (blocks,), series_chain_loss,
                     series_chain_hand, "closed form", ties=True, untied=[np.ones(2)])


# ----- a projection-heavy program: unrolled projected gradient onto a box -----

def projection_loss(ops, params, data):
    (q,) = params
    a, target, steps, eta, projector = data
    project = getattr(ops, projector)  # "clip" (numpy.clip) or "box" (asd.projections.box)
    x = project(q * eta, -1.0, 1.0)
    for _ in range(steps - 1):
        x = project(x - (x @ a - q) * eta, -1.0, 1.0)
    d = x - target
    return (d * d).sum() * 0.5


def projection_hand(params, data, direction=None):
    (q,) = params
    a, target, steps, eta, _ = data
    masks, x = [], None
    for _ in range(steps):
        pre = q * eta if x is None else x - (x @ a - q) * eta
        masks.append((pre > -1.0) & (pre < 1.0))
        x = np.clip(pre, -1.0, 1.0)
    d = x - target
    g_x, g_q = d, np.zeros_like(q)
    for k in range(steps - 1, -1, -1):
        g_pre = g_x * masks[k]
        g_q += g_pre * eta
        if k:
            g_x = g_pre - (g_pre @ a.T) * eta
    return (d * d).sum() * 0.5, [g_q]


def projection(quick: bool, projector: str = "clip") -> Benchmark:
    """Unrolled projected gradient; asd projects with ``numpy.clip`` or, for ``"box"``, with
    ``asd.projections.box`` (the peers use their clip either way)."""
    rng = np.random.default_rng(3)
    batch, n, steps = (4, 16, 5) if quick else (64, 100, 30)
    m = rng.standard_normal((n, n))
    a = m @ m.T / n
    q = rng.standard_normal((batch, n)) * 3
    target = rng.uniform(-1, 1, (batch, n))
    name = "projection" if projector == "clip" else "projection-box"
    return Benchmark(f"{name} float64", f"{steps} projected-gradient steps onto a box "
                     f"({projector}), {batch} problems of size {n}", np.dtype(np.float64),
                     [q], (a, target, steps, 0.1, projector), projection_loss, projection_hand)


# ----- a sort-based loss: sum of the k largest scores of every row -----

def sort_loss(ops, params, data):
    (w,) = params
    x, k = data
    return ops.top_sum(x @ w, k)


def sort_hand(params, data, direction=None):
    (w,) = params
    x, k = data
    s = x @ w
    top = np.argsort(s, axis=1)[:, -k:]
    g = np.zeros_like(s)
    np.put_along_axis(g, top, 1.0, axis=1)
    return np.take_along_axis(s, top, axis=1).sum(), [x.T @ g]


def sort_topk(quick: bool) -> Benchmark:
    rng = np.random.default_rng(4)
    batch, d = (8, 16) if quick else (256, 128)
    x = rng.standard_normal((batch, d))
    w = rng.standard_normal((d, 16)) / np.sqrt(d)
    return Benchmark("sort-topk float64", f"sum of the 4 largest of 16 scores per row, batch "
                     f"{batch}", np.dtype(np.float64), [w], (x, 4), sort_loss, sort_hand)


def build(quick: bool = False) -> list[Benchmark]:
    """All programs, in table order."""
    return [
        mlp(np.float32, quick), mlp(np.float64, quick),
        mlp(np.float32, quick, ties=True), mlp(np.float64, quick, ties=True),
        cnn(quick), small_cnn(quick), small_cnn(quick, zero_weights=True), deep_narrow(quick),
        scalar_chain(quick), max_chain(quick), svm(quick), projection(quick),
        projection(quick, "box"), sort_topk(quick), series_chain(quick),
    ]
