"""The neural-network primitives on torch and JAX arrays: conv, pooling, batch norm, elu, losses.

Each program runs on numpy (the reference, verified by the rest of the suite) and on torch
(float64, float32) and JAX with the same directions; results must come back in the
arguments' library, dtype and device. Max pooling is run on planted ties (constant inputs,
duplicated entries, windows of dead ReLUs) along coordinate vectors, which keep most ties
alive so the second direction decides them; torch autograd at random points (off the kinks)
is an independent oracle.
"""

from __future__ import annotations

import numpy as np
import pytest

import asd
from asd.core import backend

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
F = torch.nn.functional

from tests.array_libraries import LIBRARIES, LIBS, host, same_kind  # noqa: E402
from tests.array_libraries import compare as shared_compare  # noqa: E402

RNG = np.random.default_rng(11)


def tol(dtype) -> float:
    return 1e-10 if dtype == np.float64 else 1e-4


def compare(f, args, lib, **kw):
    """`tests.array_libraries.compare` at this module's tolerances."""
    return shared_compare(f, args, lib, tol, **kw)


def coordinate(shape, i: int) -> np.ndarray:
    e = np.zeros(int(np.prod(shape)))
    e[i] = 1.0
    return e.reshape(shape)


# ----- convolution -----

CONVS = [  # (input shape, weight shape, stride, padding, dilation, groups)
    ((2, 4, 9), (6, 2, 3), 2, 1, 2, 2),
    ((1, 3, 7), (2, 3, 2), 1, ((2, 0),), 1, 1),
    ((2, 2, 6, 5), (4, 1, 3, 2), (2, 1), (1, 2), (1, 2), 2),
    ((1, 3, 5, 5), (3, 3, 2, 2), 1, ((0, 1), (1, 0)), 1, 1),
    ((1, 2, 4, 4, 3), (2, 2, 2, 2, 1), (1, 2, 1), 1, 1, 1),
]


def conv_program(spec):
    _, _, stride, padding, dilation, groups = spec

    def f(x, w, b):
        y = asd.conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return asd.numpy.sum(asd.relu(y) * y) + 0.5 * asd.numpy.sum(y)

    return f


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("spec", CONVS, ids=lambda s: f"{len(s[0]) - 2}d-{s[2]}-{s[3]}-{s[4]}"
                         f"-g{s[5]}")
def test_conv_matches_numpy_in_input_weight_and_bias(lib, spec):
    x_shape, w_shape = spec[:2]
    args = (RNG.standard_normal(x_shape), RNG.standard_normal(w_shape),
            RNG.standard_normal(w_shape[0]))
    compare(conv_program(spec), args, lib, seed=4)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("spec", [CONVS[0], CONVS[2]], ids=["1d", "2d"])
def test_conv_jacobians_in_input_and_weight_match_numpy(lib, mode, spec):
    """The batched pushes and pulls: a tangent batch folded into the samples (input) or the
    groups (weight)."""
    conv, dtype = LIBRARIES[lib]
    x_shape, w_shape, stride, padding, dilation, groups = spec
    x, w = RNG.standard_normal(x_shape), RNG.standard_normal(w_shape)

    def f(x, w):
        return asd.conv(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)

    ref = asd.jacobian(f, (0, 1), mode=mode, seed=0)(x.astype(dtype), w.astype(dtype))
    got = asd.jacobian(f, (0, 1), mode=mode, seed=0)(conv(x), conv(w))
    for g, r in zip(got, ref, strict=True):
        assert type(g) is type(conv(x)) and tuple(g.shape) == r.shape
        np.testing.assert_allclose(host(g), r, atol=tol(dtype))


@pytest.mark.parametrize("lib", LIBS)
def test_conv_directional_derivative_matches_numpy(lib):
    conv, dtype = LIBRARIES[lib]
    f = conv_program(CONVS[2])
    args = [RNG.standard_normal(s) for s in (CONVS[2][0], CONVS[2][1], (4,))]
    vs = [RNG.standard_normal(np.shape(a)) for a in args]

    def g(x):
        return f(x, args[1], args[2])

    value, dot = asd.directional(g)(conv(args[0]), conv(vs[0]))
    ref_value, ref_dot = asd.directional(g)(args[0].astype(dtype), vs[0].astype(dtype))
    assert type(dot) is type(conv(args[0]))
    np.testing.assert_allclose(float(dot), float(ref_dot), rtol=tol(dtype), atol=tol(dtype))
    np.testing.assert_allclose(float(value), float(ref_value), rtol=tol(dtype))


def test_conv_kernels_agree_with_numpy_directly():
    """The torch and JAX kernels against numpy's, batch-free, for every table entry."""
    for spec in CONVS:
        x_shape, w_shape, stride, padding, dilation, groups = spec
        nd = len(x_shape) - 2
        stride, dilation = (stride,) * nd if isinstance(stride, int) else stride, (
            (dilation,) * nd if isinstance(dilation, int) else dilation)
        if isinstance(padding, int):
            padding = ((padding, padding),) * nd
        else:
            padding = tuple((p, p) if isinstance(p, int) else p for p in padding)
        x, w = RNG.standard_normal(x_shape), RNG.standard_normal(w_shape)
        args = (stride, padding, dilation, groups)
        y = backend.kernel("conv", np)(x, w, *args)
        ct = RNG.standard_normal(y.shape)
        gx = backend.kernel("conv_pull_x", np)(ct, w, x.shape, *args)
        gw = backend.kernel("conv_pull_w", np)(x, ct, w, *args)
        # the pulls are the adjoints of the push
        np.testing.assert_allclose(np.vdot(ct, y), np.vdot(gx, x), rtol=1e-10)
        np.testing.assert_allclose(np.vdot(gw, w), np.vdot(ct, y), rtol=1e-10)
        for xp, to in ((backend.namespace(torch.ones(1)), torch.tensor),
                       (jnp, lambda a: jnp.asarray(a, dtype=jnp.float32))):
            tol_ = 1e-12 if xp is not jnp else 1e-4
            np.testing.assert_allclose(host(backend.kernel("conv", xp)(to(x), to(w), *args)), y,
                                       atol=tol_)
            np.testing.assert_allclose(host(backend.kernel("conv_pull_x", xp)(
                to(ct), to(w), x.shape, *args)), gx, atol=tol_)
            np.testing.assert_allclose(host(backend.kernel("conv_pull_w", xp)(
                to(x), to(ct), to(w), *args)), gw, atol=tol_)


@pytest.mark.parametrize("pull", ["conv_pull_x", "conv_pull_w"])
def test_jax_conv_pulls_are_channels_last_convolutions(pull):
    """XLA's CPU backend runs a convolution on its fast kernels only in the channels-last
    layout, and inside a ``lax.cond`` branch (a staged sweep's reverse pass) it does not
    convert one written in another layout: the ungrouped pulls are written in that layout
    (their values: `test_conv_kernels_agree_with_numpy_directly`)."""
    x, w = jnp.ones((2, 3, 9, 8)), jnp.ones((4, 3, 3, 2))
    args = ((2, 1), ((1, 1), (0, 0)), (1, 2), 1)
    ct = backend.kernel("conv", jnp)(x, w, *args)
    fn = {"conv_pull_x": lambda c: backend.kernel(pull, jnp)(c, w, x.shape, *args),
          "conv_pull_w": lambda c: backend.kernel(pull, jnp)(x, c, w, *args)}[pull]
    convs = [e for e in jax.make_jaxpr(fn)(ct).eqns if e.primitive.name ==
             "conv_general_dilated"]
    assert convs
    for e in convs:
        lhs, rhs, out = e.params["dimension_numbers"]
        assert tuple(lhs) == tuple(out) == (0, 3, 1, 2) and tuple(rhs) == (3, 2, 0, 1)


def test_torch_sweeps_never_run_the_numpy_convolution(monkeypatch):
    import asd.library.nn as nn

    def refuse(*args, **kwargs):
        raise AssertionError("numpy convolution code ran on a torch sweep")

    for name in ("_correlate", "_transposed", "_weight_grad", "_pad"):
        monkeypatch.setattr(nn, name, refuse)
    f = conv_program(CONVS[2])

    def g(x, w, b):
        return f(x, w, b) + asd.numpy.sum(asd.avg_pool2d(x, 2, padding=1))

    args = [torch.tensor(RNG.standard_normal(s)) for s in (CONVS[2][0], CONVS[2][1], (4,))]
    grads = asd.subgrad(g, (0, 1, 2))(*args)
    assert all(type(a) is torch.Tensor for a in grads)
    asd.jacobian(lambda x: asd.avg_pool1d(x, 2), mode="forward")(torch.ones(1, 2, 4))


# ----- average pooling and batch norm -----

@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("kernel,stride,padding",
                         [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 0))])
def test_avg_pool_matches_numpy(lib, kernel, stride, padding):
    def f(x):
        y = asd.avg_pool2d(x, kernel, stride, padding)
        return asd.numpy.sum(asd.relu(y - 0.1) * y)

    compare(f, (RNG.standard_normal((2, 3, 6, 7)),), lib, seed=1)


@pytest.mark.parametrize("lib", LIBS)
def test_avg_pool_jacobian_matches_numpy(lib):
    conv, dtype = LIBRARIES[lib]
    x = RNG.standard_normal((1, 2, 5))
    for mode in ("forward", "reverse"):
        f = lambda x: asd.avg_pool1d(x, 2, 1, 1)  # noqa: E731
        ref = asd.jacobian(f, mode=mode)(x.astype(dtype))
        got = asd.jacobian(f, mode=mode)(conv(x))
        np.testing.assert_allclose(host(got), ref, atol=tol(dtype))


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("stats", ["library", "numpy"])
def test_batch_norm_matches_numpy(lib, stats):
    conv, dtype = LIBRARIES[lib]
    mean, var = RNG.standard_normal(3), RNG.uniform(0.5, 2.0, 3)
    const = conv if stats == "library" else (lambda a: np.asarray(a, dtype))

    def make(c):
        def f(x, weight, bias):
            y = asd.batch_norm(x, c(mean), c(var), weight, bias)
            return asd.numpy.sum(asd.relu(y) * y)
        return f

    args = (RNG.standard_normal((2, 3, 4, 4)), RNG.standard_normal(3), RNG.standard_normal(3))
    ref_value, ref = asd.value_and_subgrad(make(lambda a: np.asarray(a, dtype)), (0, 1, 2),
                                           seed=2)(*[a.astype(dtype) for a in args])
    value, got = asd.value_and_subgrad(make(const), (0, 1, 2), seed=2)(*[conv(a) for a in args])
    np.testing.assert_allclose(float(value), float(ref_value), rtol=tol(dtype))
    for g, r, a in zip(got, ref, args, strict=True):
        same_kind(g, conv(a))
        np.testing.assert_allclose(host(g), r, atol=tol(dtype) * max(1, np.abs(r).max()))


# ----- max pooling: planted ties decided exactly like on numpy -----

def pool_program(window, stride, padding, d):
    pool = asd.max_pool1d if d == 1 else asd.max_pool2d

    def f(x):
        y = pool(asd.relu(x), window, stride, padding)
        return asd.numpy.sum(y * asd.numpy.reshape(asd.numpy.arange(y.size) % 3 + 1.0, y.shape))

    return f


def tied_inputs(shape):
    """Inputs whose windows tie: constant, duplicated entries, and dead ReLUs."""
    dup = np.repeat(RNG.standard_normal(int(np.prod(shape)) // 2 + 1), 2)[:int(np.prod(shape))]
    dead = -np.abs(RNG.standard_normal(shape))
    dead.reshape(-1)[::5] = 0.7
    return {"constant": np.zeros(shape), "ones": np.ones(shape),
            "duplicated": dup.reshape(shape), "dead": dead}


POOLS = [((2, 2, 8), 2, None, 0, 1), ((2, 2, 7), 3, 2, 1, 1), ((1, 2, 4, 4), 2, None, 0, 2),
         ((1, 2, 5, 4), (3, 2), (2, 1), (1, 1), 2)]


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("pool", POOLS, ids=lambda p: f"{p[4]}d-{p[1]}-{p[2]}-{p[3]}")
@pytest.mark.parametrize("kind", ["constant", "ones", "duplicated", "dead"])
def test_max_pool_ties_along_coordinates_match_numpy(lib, pool, kind):
    shape, window, stride, padding, d = pool
    x = tied_inputs(shape)[kind]
    f = pool_program(window, stride, padding, d)
    w = RNG.standard_normal(shape)
    n = int(np.prod(shape))
    for i in (0, 3, n - 1):
        compare(f, (x,), lib, directions=[[coordinate(shape, i)], [w]])
    compare(f, (x,), lib, direction=[coordinate(shape, 1)], seed=6)  # the seeded second draw


@pytest.mark.parametrize("lib", LIBS)
def test_max_pool_exact_ties_match_numpy_and_the_diagnostics(lib):
    """Entries equal near the point (a duplicated input feeding the pool) and ties the
    tangent leaves open: the series / lowest-index decisions are the numpy ones."""
    conv, dtype = LIBRARIES[lib]

    def f(x):
        y = asd.numpy.concatenate([x, x])  # every window holds x twice: ties persist
        y = asd.numpy.reshape(y, (1, 1, -1))
        return asd.numpy.sum(asd.max_pool1d(y * y - x[0], 2, 1))

    x, v = np.array([0.0, 1.0, -1.0, 0.0]), coordinate((4,), 0)
    ref = asd.value_and_subgrad(f, direction=v, diagnostics=True)(x.astype(dtype))
    got = asd.value_and_subgrad(f, direction=conv(v), diagnostics=True)(conv(x))
    same_kind(got[1], conv(x))
    np.testing.assert_allclose(host(got[1]), ref[1], atol=tol(dtype))
    assert [str(d) for d in got[2].decisions] == [str(d) for d in ref[2].decisions]


def test_max_pool_copies_only_the_tied_windows_to_the_host(monkeypatch):
    import asd.core.ordering as ordering

    copied = []

    def recording(a):
        if not backend.is_host(a):  # a copy off the device (numpy's own arrays are not)
            copied.append(tuple(np.shape(a)))
        return backend.to_host(a)

    monkeypatch.setattr(ordering, "to_host", recording)
    x = np.random.default_rng(3).uniform(1.0, 2.0, (1, 2, 32))  # relu kills nothing
    x[0, 1, 5] = x[0, 1, 6] = 10.0  # one tied window (of 16)
    f = pool_program(4, None, 0, 1)
    got = asd.subgrad(f, direction=torch.tensor(coordinate(x.shape, 6)))(torch.tensor(x))
    ref = asd.subgrad(f, direction=coordinate(x.shape, 6))(x)
    np.testing.assert_array_equal(host(got), ref)
    assert (1, 4) in copied  # the tied window's values
    assert max(int(np.prod(c)) for c in copied) <= 16  # one int or bool per window at most


# ----- elu and the losses -----

@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("i", [0, 1, 5])
def test_elu_at_its_kink_along_coordinates_matches_numpy(lib, i):
    x = np.array([0.0, 0.0, -1.0, 0.5, 0.0, 0.0])
    c = np.array([1.0, -2.0, 3.0, 1.0, 2.0, -1.0])
    w = np.linspace(-1.0, 1.0, 6)

    def f(x):
        return asd.numpy.sum(asd.elu(x, 0.5) * c)

    got, _ = compare(f, (x,), lib, directions=[[coordinate((6,), i)], [w]])
    # at 0 the ray enters the right piece (slope 1) where e_i, then w, is positive
    right = (coordinate((6,), i) > 0) | ((coordinate((6,), i) == 0) & (w > 0))
    slope = np.where(x > 0, 1.0, np.where(x < 0, 0.5 * np.exp(x), np.where(right, 1.0, 0.5)))
    np.testing.assert_allclose(host(got[0]), c * slope, rtol=1e-6)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("target", ["int-library", "int-numpy", "probabilities"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_and_mse_match_numpy(lib, target, reduction):
    conv, dtype = LIBRARIES[lib]
    labels = np.array([2, 0, 1, 2])
    probs = RNG.dirichlet(np.ones(3), 4)
    if target == "int-library":
        t = torch.tensor(labels) if lib.startswith("torch") else jnp.asarray(labels)
    elif target == "int-numpy":
        t = labels
    else:
        t = conv(probs)
    ref_t = probs.astype(dtype) if target == "probabilities" else labels
    goal = RNG.standard_normal((4, 3))

    def make(t, goal):
        def f(z, w):
            logits = asd.elu(z @ w)
            return (asd.cross_entropy(logits, t, reduction)
                    + asd.mse_loss(logits, goal, reduction))
        return f

    z, w = RNG.standard_normal((4, 5)), RNG.standard_normal((5, 3))
    ref_value, ref = asd.value_and_subgrad(make(ref_t, goal.astype(dtype)), (0, 1))(
        z.astype(dtype), w.astype(dtype))
    value, got = asd.value_and_subgrad(make(t, conv(goal)), (0, 1))(conv(z), conv(w))
    assert type(value) is type(conv(z))
    np.testing.assert_allclose(float(value), float(ref_value), rtol=tol(dtype))
    for g, r, a in zip(got, ref, (z, w), strict=True):
        same_kind(g, conv(a))
        np.testing.assert_allclose(host(g), r, atol=tol(dtype))


@pytest.mark.parametrize("lib", LIBS)
def test_cross_entropy_of_one_sample_and_of_spatial_logits(lib):
    def f(z, y):
        return asd.cross_entropy(z, np.array(1)) + asd.cross_entropy(y, np.array([[0, 2]]))

    compare(f, (RNG.standard_normal(3), RNG.standard_normal((1, 3, 2))), lib)


# ----- torch autograd at random points: an independent oracle -----

def cnn_asd(x, w1, b1, w2, b2, gamma, beta, w3, mean, var, labels):
    h = asd.conv2d(x, w1, b1, padding=1)
    h = asd.max_pool2d(asd.relu(h), 2)
    h = asd.conv1d(asd.numpy.reshape(h, (h.shape[0], h.shape[1], -1)), w2, b2, stride=2,
                   dilation=2, groups=2)
    h = asd.batch_norm(h, mean, var, gamma, beta)
    h = asd.avg_pool1d(asd.elu(h), 2, padding=1)
    z = asd.numpy.reshape(h, (h.shape[0], -1)) @ w3
    return asd.cross_entropy(z, labels) + 0.1 * asd.mse_loss(z, z * 0.0 + 1.0)


def cnn_torch(x, w1, b1, w2, b2, gamma, beta, w3, mean, var, labels):
    h = F.conv2d(x, w1, b1, padding=1)
    h = F.max_pool2d(F.relu(h), 2)
    h = F.conv1d(h.reshape(h.shape[0], h.shape[1], -1), w2, b2, stride=2, dilation=2, groups=2)
    h = F.batch_norm(h, mean, var, gamma, beta, training=False)
    h = F.avg_pool1d(F.elu(h), 2, padding=1)
    z = h.reshape(h.shape[0], -1) @ w3
    return F.cross_entropy(z, labels) + 0.1 * F.mse_loss(z, torch.ones_like(z))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_small_cnn_matches_torch_autograd_at_random_points(dtype, seed):
    rng = np.random.default_rng(seed)
    shapes = [(2, 3, 6, 6), (4, 3, 3, 3), (4,), (6, 2, 2), (6,), (6,), (6,), (18, 5)]
    params = [torch.tensor(rng.standard_normal(s), dtype=dtype) for s in shapes]
    mean = torch.tensor(rng.standard_normal(6), dtype=dtype)
    var = torch.tensor(rng.uniform(0.5, 2.0, 6), dtype=dtype)
    labels = torch.tensor([1, 4])
    leaves = [p.clone().requires_grad_(True) for p in params]
    loss = cnn_torch(*leaves, mean, var, labels)
    expected = torch.autograd.grad(loss, leaves)
    value, got = asd.value_and_subgrad(
        lambda *ps: cnn_asd(*ps, mean, var, labels), tuple(range(len(params))), seed=seed)(
        *params)
    t = 1e-10 if dtype == torch.float64 else 2e-4
    assert type(value) is torch.Tensor and value.dtype == dtype
    np.testing.assert_allclose(float(value), float(loss.detach()), rtol=t)
    for g, e in zip(got, expected, strict=True):
        assert type(g) is torch.Tensor and g.dtype == dtype and g.device == e.device
        np.testing.assert_allclose(host(g), host(e), atol=t * max(1.0, float(e.abs().max())))


# ----- what a library lacks refuses, clearly -----

def test_a_library_without_a_conv_kernel_refuses_instead_of_copying(monkeypatch):
    monkeypatch.delitem(backend.KERNELS["conv"], "jax")
    with pytest.raises(asd.UnsupportedError, match=r"conv has no jax implementation.*"
                       r"register_kernel\('conv', 'jax'"):
        asd.subgrad(lambda x: asd.numpy.sum(asd.conv1d(x, np.ones((1, 1, 2)))))(
            jnp.ones((1, 1, 4)))
    with pytest.raises(asd.UnsupportedError, match="conv_pull_x has no cupy implementation"):
        backend.kernel("conv_pull_x", type("cp", (), {"__name__": "cupy"})())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_cnn_on_a_gpu_stays_there_and_matches_the_cpu():
    rng = np.random.default_rng(5)
    shapes = [(2, 3, 6, 6), (4, 3, 3, 3), (4,), (6, 2, 2), (6,), (6,), (6,), (18, 5)]
    params = [torch.tensor(rng.standard_normal(s)) for s in shapes]
    consts = [torch.tensor(rng.standard_normal(6)), torch.tensor(rng.uniform(0.5, 2.0, 6)),
              torch.tensor([1, 4])]

    def run(device):
        cs = [c.to(device) for c in consts]
        return asd.subgrad(lambda *ps: cnn_asd(*ps, *cs), tuple(range(len(params))), seed=0)(
            *[p.to(device) for p in params])

    for g, c in zip(run("cuda"), run("cpu"), strict=True):
        assert g.device.type == "cuda" and g.dtype == torch.float64
        np.testing.assert_allclose(host(g), host(c), atol=1e-10)
