"""Neural-network primitives: convolution, average pooling, batch norm, elu and the losses.

Convolution is one primitive for every spatial rank (``conv1d`` and ``conv2d`` are views of
it). It is linear in each operand, so its rule needs no tie handling: the push of an input
tangent is the same convolution, and the pull is its adjoint, the transposed convolution
(upsample the cotangent by the stride, pad it by the dilated kernel extent, correlate with
the flipped kernel). Both are vectorized with sliding windows and one ``einsum``; the only
Python loop is over spatial axes. Average pooling is a depthwise convolution with a constant
kernel, so it shares that code.

``elu`` has a single kink at 0 where its pieces have slopes 1 (right) and ``alpha`` (left);
the rule takes the piece the direction enters. The losses are smooth and their rules return
one structured map (a weighted sum) rather than a graph of small steps.
"""

from __future__ import annotations

import string

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from asd.errors import ShapeError, UnsupportedError
from asd.extend import Closure, Diagonal, FanIn, Primitive, is_traced, tie_sign

# ----- convolution: correlation of windows, and its adjoint -----


def _tuple(v, n: int, what: str) -> tuple[int, ...]:
    if isinstance(v, int | np.integer):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    if len(v) != n:
        raise ShapeError(f"{what} needs {n} entries for {n} spatial dims, got {v}")
    return v


def _pad(x: np.ndarray, padding: tuple[tuple[int, int], ...]) -> np.ndarray:
    nd = len(padding)
    if not any(lo or hi for lo, hi in padding):
        return x
    return np.pad(x, [(0, 0)] * (x.ndim - nd) + list(padding))


def _windows(xp: np.ndarray, kernel, stride, dilation) -> np.ndarray:
    """``xp[..., c, s*i + d*k]`` as an array ``(..., c, out..., k...)`` (a strided view)."""
    nd = len(kernel)
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    axes = tuple(range(xp.ndim - nd, xp.ndim))
    win = sliding_window_view(xp, extent, axis=axes)
    index = (Ellipsis,) + tuple(slice(None, None, s) for s in stride) + tuple(
        slice(None, None, d) for d in dilation)
    return win[index]


def _letters(nd: int) -> tuple[str, str]:
    spatial = string.ascii_lowercase[8:8 + nd]      # i j k ...
    kern = string.ascii_lowercase[16:16 + nd]       # q r s ...
    return spatial, kern


def _correlate(xp, w, stride, dilation, groups: int, batched: str = "") -> np.ndarray:
    """Grouped cross-correlation of a padded input ``(b?, N, C, L...)`` with ``(O, C/G, K...)``.

    ``batched`` is ``"x"`` or ``"w"`` when that operand carries a leading batch axis.
    """
    nd = len(stride)
    sp, kn = _letters(nd)
    win = _windows(xp, w.shape[-nd:], stride, dilation)       # (b?, N, C, out..., K...)
    lead = win.shape[:-(2 * nd + 1)]
    c = win.shape[-(2 * nd + 1)]
    win = win.reshape(lead + (groups, c // groups) + win.shape[-2 * nd:])
    wg = w.reshape(w.shape[:-(nd + 2)] + (groups, w.shape[-(nd + 2)] // groups)
                   + w.shape[-(nd + 1):])
    bx = "z" if batched == "x" else ""
    bw = "z" if batched == "w" else ""
    spec = f"{bx}ngc{sp}{kn},{bw}goc{kn}->{'z' if batched else ''}ngo{sp}"
    out = np.einsum(spec, win, wg, optimize=True)
    return out.reshape(out.shape[:out.ndim - nd - 2] + (-1,) + out.shape[out.ndim - nd:])


def _weight_grad(xp, ct, kernel, stride, dilation, groups: int, batched: bool) -> np.ndarray:
    """``dW[o, c, k] = sum ct[n, o, i] xp[n, c, s*i + d*k]`` (the cotangent of the weight)."""
    nd = len(kernel)
    sp, kn = _letters(nd)
    win = _windows(xp, kernel, stride, dilation)
    c = win.shape[1]
    win = win.reshape((win.shape[0], groups, c // groups) + win.shape[2:])
    o = ct.shape[-(nd + 1)]
    ctg = ct.reshape(ct.shape[:-(nd + 1)] + (groups, o // groups) + ct.shape[-nd:])
    b = "z" if batched else ""
    out = np.einsum(f"{b}ngo{sp},ngc{sp}{kn}->{b}goc{kn}", ctg, win, optimize=True)
    return out.reshape(out.shape[:len(b)] + (o, c // groups) + tuple(kernel))


def _transposed(ct, w, in_shape, padding, stride, dilation, groups: int,
                batched: bool) -> np.ndarray:
    """The adjoint of ``x -> conv(x, w)``: a transposed convolution of the cotangent."""
    nd = w.ndim - 2
    kernel = w.shape[2:]
    lead = ct.shape[:ct.ndim - nd - 2] if batched else ()
    ct = ct.reshape((-1,) + ct.shape[-(nd + 1):]) if batched else ct
    spatial_in = tuple(in_shape[-nd:])
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(spatial_in, padding))
    out_sp = ct.shape[-nd:]
    up_len = tuple((o - 1) * s + 1 for o, s in zip(out_sp, stride))
    up = np.zeros(ct.shape[:-nd] + up_len, ct.dtype)
    up[(Ellipsis,) + tuple(slice(None, None, s) for s in stride)] = ct
    pads = tuple((d * (k - 1), p - u) for k, d, p, u in zip(kernel, dilation, padded, up_len))
    up = _pad(up, pads)
    # weight (O, C/G, K) -> (C, O/G, K) flipped: the kernel of the transposed correlation
    o, cg = w.shape[:2]
    wt = w.reshape((groups, o // groups, cg) + kernel).swapaxes(1, 2)
    wt = wt.reshape((groups * cg, o // groups) + kernel)
    wt = wt[(Ellipsis,) + (slice(None, None, -1),) * nd]
    dxp = _correlate(up, wt, (1,) * nd, dilation, groups)
    crop = (Ellipsis,) + tuple(slice(lo, lo + n) for (lo, _), n in zip(padding, spatial_in))
    dx = dxp[crop]
    return dx.reshape(lead + tuple(in_shape)) if batched else dx


def _conv_impl(x, w, stride, padding, dilation, groups):
    return _correlate(_pad(np.asarray(x), padding), np.asarray(w), stride, dilation, groups)


conv_p = Primitive("conv", _conv_impl)


@conv_p.defrule
def conv_rule(xs, dxs, stride, padding, dilation, groups):
    x, w = np.asarray(xs[0]), np.asarray(xs[1])
    xp = _pad(x, padding)
    ans = _correlate(xp, w, stride, dilation, groups)

    def push_x(t):
        batched = t.ndim == x.ndim + 1
        tp = _pad(t, padding)
        return _correlate(tp, w, stride, dilation, groups, "x" if batched else "")

    def pull_x(ct):
        return _transposed(ct, w, x.shape, padding, stride, dilation, groups,
                           ct.ndim == ans.ndim + 1)

    def push_w(t):
        return _correlate(xp, t, stride, dilation, groups, "w" if t.ndim == w.ndim + 1 else "")

    def pull_w(ct):
        return _weight_grad(xp, ct, w.shape[2:], stride, dilation, groups,
                            ct.ndim == ans.ndim + 1)

    return ans, FanIn(Closure(push_x, pull_x, x.shape, ans.shape),
                      Closure(push_w, pull_w, w.shape, ans.shape))


def conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """N-d convolution (cross-correlation, as in PyTorch): ``x (N, C, L...)``, ``w (O, C/G, K...)``.

    ``padding`` is an int, one int per spatial axis, or ``((lo, hi), ...)``; ``bias`` (O,)
    is added per output channel. Inputs without a batch axis (``(C, L...)``) are accepted.

    >>> import numpy as np
    >>> conv(np.arange(5.0)[None, None], np.ones((1, 1, 2)))
    array([[[1., 3., 5., 7.]]])
    """
    nd = np.ndim(w) - 2
    if nd < 1:
        raise ShapeError(f"conv: the weight needs shape (out, in/groups, kernel...), got "
                         f"{np.shape(w)}")
    unbatched = np.ndim(x) == nd + 1
    if unbatched:
        x = x[None]
    if np.ndim(x) != nd + 2:
        raise ShapeError(f"conv: input of shape {np.shape(x)} does not fit a weight of shape "
                         f"{np.shape(w)} ({nd} spatial dims)")
    c, o = np.shape(x)[1], np.shape(w)[0]
    if c % groups or o % groups or np.shape(w)[1] != c // groups:
        raise ShapeError(f"conv: {c} input channels, weight {np.shape(w)} and groups={groups} "
                         "do not fit (weight must be (out, in/groups, ...))")
    if isinstance(padding, str):
        raise UnsupportedError(f"conv with padding={padding!r}; give the padding in numbers")
    if isinstance(padding, int | np.integer):
        pads = ((int(padding), int(padding)),) * nd
    else:
        pads = tuple((p, p) if isinstance(p, int | np.integer) else (int(p[0]), int(p[1]))
                     for p in padding)
        if len(pads) != nd:
            raise ShapeError(f"conv: padding {padding} does not have {nd} entries")
    y = conv_p(x, w, stride=_tuple(stride, nd, "stride"), padding=pads,
               dilation=_tuple(dilation, nd, "dilation"), groups=int(groups))
    if bias is not None:
        y = y + _channel(bias, nd)
    return y[0] if unbatched else y


def _channel(v, nd: int):
    return v.reshape((-1,) + (1,) * nd) if is_traced(v) else np.reshape(v, (-1,) + (1,) * nd)


def conv1d(x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-d convolution, ``x (N, C, L)``; see `conv`."""
    return conv(x, w, bias, stride, padding, dilation, groups)


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """2-d convolution, ``x (N, C, H, W)``; see `conv`."""
    return conv(x, w, bias, stride, padding, dilation, groups)


# ----- average pooling: a depthwise convolution with a constant kernel -----

def _avg_impl(x, kernel, stride, padding, divisor):
    nd = len(kernel)
    c = np.shape(x)[1]
    w = np.ones((c, 1) + kernel, np.result_type(x, np.float32))
    return _correlate(_pad(np.asarray(x), padding), w, stride, (1,) * nd, c) / divisor


avg_pool_p = Primitive("avg_pool", _avg_impl)


@avg_pool_p.defrule
def avg_pool_rule(xs, dxs, kernel, stride, padding, divisor):
    (x,) = xs
    x = np.asarray(x)
    nd = len(kernel)
    c = x.shape[1]
    w = np.ones((c, 1) + kernel, np.result_type(x, np.float32)) / divisor
    ans = _correlate(_pad(x, padding), w, stride, (1,) * nd, c)

    def push(t):
        return _correlate(_pad(t, padding), w, stride, (1,) * nd, c,
                          "x" if t.ndim == x.ndim + 1 else "")

    def pull(ct):
        return _transposed(ct, w, x.shape, padding, stride, (1,) * nd, c, ct.ndim == ans.ndim + 1)

    return ans, Closure(push, pull, x.shape, ans.shape)


def avg_pool(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """Average pooling over the trailing spatial axes of ``x (N, C, L...)`` (PyTorch's).

    Padding counts as zeros in the average (``count_include_pad=True``, the default of
    ``torch.nn.AvgPool``); without padding the flag makes no difference.

    >>> import numpy as np
    >>> avg_pool(np.arange(4.0).reshape(1, 1, 4), 2)
    array([[[0.5, 2.5]]])
    """
    nd = len(kernel_size) if isinstance(kernel_size, tuple | list) else np.ndim(x) - 2
    unbatched = np.ndim(x) == nd + 1
    if unbatched:
        x = x[None]
    kernel = _tuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None or stride == [] else _tuple(stride, nd, "stride")
    pad = _tuple(padding, nd, "padding")
    if any(pad) and not count_include_pad:
        raise UnsupportedError("avg_pool with padding and count_include_pad=False")
    y = avg_pool_p(x, kernel=kernel, stride=stride, padding=tuple((p, p) for p in pad),
                   divisor=float(np.prod(kernel)))
    return y[0] if unbatched else y


def avg_pool1d(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """1-d average pooling, ``x (N, C, L)``; see `avg_pool`."""
    return avg_pool(x, _tuple(kernel_size, 1, "kernel_size"),
                    None if stride is None else _tuple(stride, 1, "stride"), padding,
                    count_include_pad)


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """2-d average pooling, ``x (N, C, H, W)``; see `avg_pool`."""
    return avg_pool(x, _tuple(kernel_size, 2, "kernel_size"),
                    None if stride is None else _tuple(stride, 2, "stride"), padding,
                    count_include_pad)


# ----- batch norm (inference): an affine map per channel -----

def batch_norm(x, running_mean, running_var, weight=None, bias=None, eps: float = 1e-5):
    """Batch normalization with frozen statistics (eval mode), channels on axis 1.

    ``(x - mean) / sqrt(var + eps) * weight + bias``: affine in ``x``, and in ``weight`` and
    ``bias`` too, so module parameters can be differentiated through it. The statistics are
    constants (they are buffers, not parameters, in eval mode).

    >>> import numpy as np
    >>> batch_norm(np.ones((1, 2)), np.zeros(2), np.full(2, 4.0), eps=0.0)
    array([[0.5, 0.5]])
    """
    nd = np.ndim(x) - 2
    if is_traced(running_mean) or is_traced(running_var):
        raise UnsupportedError("batch_norm with traced running statistics; in eval mode they "
                               "are constants (pass them as numpy arrays)")
    scale = 1.0 / np.sqrt(np.asarray(running_var) + eps)
    y = (x - _channel(np.asarray(running_mean), nd)) * _channel(scale, nd)
    if weight is not None:
        y = y * _channel(weight, nd)
    if bias is not None:
        y = y + _channel(bias, nd)
    return y


# ----- elu: kink at 0 with slopes alpha (left) and 1 (right) -----

def _elu_impl(x, alpha):
    x = np.asarray(x)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


elu_p = Primitive("elu", _elu_impl)


@elu_p.defrule
def elu_rule(xs, dxs, alpha):
    (x,) = xs
    x = np.asarray(x)
    neg = alpha * np.exp(np.minimum(x, 0))
    ans = np.where(x > 0, x, neg - alpha).astype(np.result_type(x, np.float32), copy=False)
    right = np.asarray(x > 0)
    tie = x == 0
    if tie.any():
        right[tie] = tie_sign(x, dxs[0], 0.0, None, tie) >= 0
    slope = np.where(right, 1.0, neg).astype(ans.dtype, copy=False)
    return ans, Diagonal(slope, x.shape)


def elu(x, alpha: float = 1.0):
    """``x`` for ``x > 0``, ``alpha (exp(x) - 1)`` otherwise; at 0 the direction picks the slope.

    >>> import asd
    >>> float(asd.subgrad(lambda x: elu(x, 0.5), direction=-1.0)(0.0))
    0.5
    """
    return elu_p(x, alpha=float(alpha))


# ----- losses -----

def _logsumexp(z, axis):
    m = np.max(z, axis=axis, keepdims=True)
    return m + np.log(np.sum(np.exp(z - m), axis=axis, keepdims=True))


def _ce_parts(z, target):
    """Per-sample losses and the gradient wrt the logits (classes on axis 1 or the only axis)."""
    z = np.asarray(z)
    two_d = z.ndim >= 2
    zz = z if two_d else z[None]
    lse = _logsumexp(zz, 1)
    t = np.asarray(target)
    if np.issubdtype(t.dtype, np.integer):
        tt = t if two_d else t[None]
        onehot = np.zeros_like(zz)
        np.put_along_axis(onehot, np.expand_dims(tt, 1), 1.0, axis=1)
    else:
        onehot = t if two_d else t[None]
    losses = np.sum(onehot * (lse - zz), axis=1)
    grad = np.exp(zz - lse) * np.sum(onehot, axis=1, keepdims=True) - onehot
    return losses, grad if two_d else grad[0]


def _ce_impl(z, target, reduction):
    losses, _ = _ce_parts(z, target)
    return np.mean(losses) if reduction == "mean" else np.sum(losses)


cross_entropy_p = Primitive("cross_entropy", _ce_impl)


@cross_entropy_p.defrule
def cross_entropy_rule(xs, dxs, reduction):
    z, target = xs
    z = np.asarray(z)
    losses, grad = _ce_parts(z, target)
    ans = np.mean(losses) if reduction == "mean" else np.sum(losses)
    if reduction == "mean":
        grad = grad / losses.size
    grad = grad.astype(np.result_type(z, np.float32), copy=False)
    axes = tuple(range(-z.ndim, 0))

    def push(t):
        return np.sum(t * grad, axis=axes)

    def pull(ct):
        ct = np.asarray(ct)
        return ct.reshape(ct.shape + (1,) * z.ndim) * grad

    return np.asarray(ans, dtype=grad.dtype), FanIn(Closure(push, pull, z.shape, ()), None)


def cross_entropy(logits, target, reduction: str = "mean"):
    """Softmax cross-entropy of ``logits (N, C)`` (or ``(C,)``) against integer class labels
    ``target (N,)`` or class probabilities ``(N, C)`` (PyTorch's ``F.cross_entropy``).

    Smooth in the logits; the targets are constants.

    >>> import numpy as np
    >>> round(float(cross_entropy(np.zeros((1, 4)), np.array([2]))), 6)  # log 4
    1.386294
    """
    if reduction not in ("mean", "sum"):
        raise UnsupportedError(f"cross_entropy with reduction={reduction!r} (mean or sum)")
    if is_traced(target):
        raise UnsupportedError("cross_entropy with traced targets: targets must be constants")
    return cross_entropy_p(logits, np.asarray(target), reduction=reduction)


def mse_loss(prediction, target, reduction: str = "mean"):
    """Mean (or summed) squared error, as ``F.mse_loss``.

    >>> import numpy as np
    >>> float(mse_loss(np.array([1.0, 3.0]), np.zeros(2)))
    5.0
    """
    d = prediction - target
    sq = d * d
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    raise UnsupportedError(f"mse_loss with reduction={reduction!r} (mean or sum)")


__all__ = [
    "avg_pool", "avg_pool1d", "avg_pool2d", "batch_norm", "conv", "conv1d", "conv2d",
    "cross_entropy", "elu", "mse_loss",
]
