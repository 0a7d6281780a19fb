"""Neural-network primitives: convolution, average pooling, batch norm, elu and the losses.

Convolution is one primitive for every spatial rank (``conv1d`` and ``conv2d`` are views of
it). It is linear in each operand, so its rule needs no tie handling: the push of an input
tangent is the same convolution, and the pull is its adjoint, the transposed convolution
(upsample the cotangent by the stride, pad it by the dilated kernel extent, correlate with
the flipped kernel). Both are vectorized with sliding windows and one ``einsum``; the only
Python loop is over spatial axes. Average pooling is a depthwise convolution with a constant
kernel, so it shares that code.

On torch and JAX arrays the convolution and its two adjoints are per-library kernels
(``conv``, ``conv_pull_x``, ``conv_pull_w`` in `asd.extend.kernel`'s table): a tangent batch
axis is folded into the samples (input) or into the groups (weight), so each push or pull is
one library call. elu, the losses and batch norm are written against the array API; numpy
values keep the code below unchanged.

``elu`` has a single kink at 0 where its pieces have slopes 1 (right) and ``alpha`` (left);
the rule takes the piece the direction enters. The losses are smooth and their rules return
one structured map (a weighted sum) rather than a graph of small steps.
"""

from __future__ import annotations

import functools
import math
import string

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from asd.errors import ShapeError, UnsupportedError
from asd.extend import (
    Closure,
    Diagonal,
    FanIn,
    Primitive,
    from_host,
    is_foreign,
    is_host,
    is_traced,
    kernel,
    namespace,
    ray_nonnegative,
    register_kernel,
    to_host,
)

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
    if padding == ((0, 0),) * nd:  # a static parameter
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


# ----- the convolution kernels (`asd.extend.kernel`): one entry per array library -----
# conv(x, w, ...) -> (N, O, out...) of an unpadded x (N, C, L...) padded by ((lo, hi), ...);
# conv_pull_x(ct, w, in_shape, ...) and conv_pull_w(x, ct, w, ...) are its adjoints in x and
# in w. None takes a tangent batch axis: the rule folds it (into N, or into the groups).


def _np_conv(x, w, stride, padding, dilation, groups):
    return _correlate(_pad(x, padding), w, stride, dilation, groups)


def _np_conv_pull_x(ct, w, in_shape, stride, padding, dilation, groups):
    return _transposed(ct, w, in_shape, padding, stride, dilation, groups, False)


def _np_conv_pull_w(x, ct, w, stride, padding, dilation, groups):
    return _weight_grad(_pad(x, padding), ct, w.shape[2:], stride, dilation, groups, False)


def _torch_pad(x, padding):
    import torch

    flat = [p for lo_hi in reversed(padding) for p in lo_hi]
    return x if flat == [0] * len(flat) else torch.nn.functional.pad(x, flat)


def _torch_conv(x, w, stride, padding, dilation, groups):
    import torch

    nd = len(stride)
    return torch.convolution(_torch_pad(x, padding), w.to(x.dtype), None, list(stride),
                             [0] * nd, list(dilation), False, [0] * nd, groups)


def _torch_conv_pull_x(ct, w, in_shape, stride, padding, dilation, groups):
    """torch's own ``convolution_backward`` for the input alone, as autograd runs it (it
    reads the input's shape, not its values, so zeros of that shape stand in; in the
    pipeline it is a few percent faster than the transposed convolution). Asymmetric
    padding, which it cannot express: a transposed convolution onto the padded input,
    cropped to the input."""
    import torch

    nd = len(stride)
    symmetric = [lo for lo, _ in padding] == [hi for _, hi in padding]
    if symmetric:
        shape = ct.new_zeros(tuple(in_shape))
        return torch.ops.aten.convolution_backward(
            ct, shape, w.to(ct.dtype), None, list(stride), [lo for lo, _ in padding],
            list(dilation), False, [0] * nd, groups, [True, False, False])[0]
    spatial = tuple(in_shape[-nd:])
    kernel_ = tuple(w.shape[2:])
    extra = [n + lo + hi - ((o - 1) * s + d * (k - 1) + 1)   # rows no window reached
             for n, (lo, hi), o, s, d, k in zip(spatial, padding, ct.shape[2:], stride,
                                                 dilation, kernel_)]
    up = torch.convolution(ct, w.to(ct.dtype), None, list(stride), [0] * nd, list(dilation),
                           True, extra, groups)
    crop = (Ellipsis,) + tuple(slice(lo, lo + n) for (lo, _), n in zip(padding, spatial))
    return up[crop]


def _torch_conv_pull_w(x, ct, w, stride, padding, dilation, groups):
    import torch

    nd = len(stride)
    _, grad_w, _ = torch.ops.aten.convolution_backward(
        ct, _torch_pad(x, padding).to(ct.dtype), w.to(ct.dtype), None, list(stride),
        [0] * nd, list(dilation), False, [0] * nd, groups, [False, True, False])
    return grad_w


def _jax_conv(x, w, stride, padding, dilation, groups):
    """The convolution; ungrouped with several input channels it is written channels last,
    for the reason `_jax_conv_pull_x` gives: a staged sweep pushes tangents through it
    inside a ``lax.cond`` branch, where XLA's CPU backend kept ``(N, C, L...)`` and ran it
    about 2x slower. (With one input channel the branch's own kernel was the faster one.)"""
    import jax.numpy as jnp
    from jax import lax

    nd = len(stride)
    if groups == 1 and x.shape[1] > 1 and 0 not in tuple(x.shape) + tuple(w.shape):
        rhs = jnp.transpose(w.astype(x.dtype), tuple(range(2, nd + 2)) + (1, 0))  # (K..., C, O)
        out = lax.conv_general_dilated(
            _to_last(x, nd), rhs, tuple(stride), [tuple(p) for p in padding],
            rhs_dilation=tuple(dilation), dimension_numbers=_channels_last(nd),
            precision=lax.Precision.HIGHEST)
        return jnp.transpose(out, (0, nd + 1) + tuple(range(1, nd + 1)))
    return lax.conv_general_dilated(x, w.astype(x.dtype), tuple(stride),
                                    [tuple(p) for p in padding], rhs_dilation=tuple(dilation),
                                    feature_group_count=groups,
                                    precision=lax.Precision.HIGHEST)


def _channels_last(nd: int):
    """Dimension numbers of a channels-last convolution: ``(N, L..., C)`` by ``(K..., I, O)``
    to ``(N, L..., O)``, the layout XLA's CPU backend runs on its fast (Eigen) kernels."""
    from jax import lax

    last = (0, nd + 1) + tuple(range(1, nd + 1))
    return lax.ConvDimensionNumbers(last, (nd + 1, nd) + tuple(range(nd)), last)


def _to_last(a, nd: int):
    """``(A, B, L...)`` as ``(A, L..., B)``."""
    import jax.numpy as jnp

    return jnp.transpose(a, (0,) + tuple(range(2, nd + 2)) + (1,))


def _jax_conv_pull_x(ct, w, in_shape, stride, padding, dilation, groups):
    """The transposed convolution. Ungrouped, it is written channels last (the cotangent
    upsampled by the stride, padded by the dilated kernel extent, correlated with the flipped
    kernel, then cropped to the input): XLA's CPU backend puts convolutions it meets in
    another layout into this one, except inside a ``lax.cond`` branch, where a staged
    sweep's reverse pass runs and a conv's adjoint written by ``jax.vjp`` ran 3-10x slower."""
    import jax
    import jax.numpy as jnp

    nd = len(stride)
    if groups == 1 and 0 not in tuple(ct.shape):  # (an empty output: the vjp below)
        from jax import lax

        kernel_ = tuple(w.shape[2:])
        spatial = tuple(in_shape[2:])
        padded = tuple(n + lo + hi for n, (lo, hi) in zip(spatial, padding, strict=True))
        reach = tuple(d * (k - 1) for k, d in zip(kernel_, dilation, strict=True))
        extra = tuple(p - ((o - 1) * s + 1 + r) for p, o, s, r in  # rows no window read
                      zip(padded, ct.shape[2:], stride, reach, strict=True))
        rhs = jnp.flip(w.astype(ct.dtype), tuple(range(2, nd + 2)))  # (O, C, K...)
        rhs = jnp.transpose(rhs, tuple(range(2, nd + 2)) + (0, 1))  # (K..., O, C)
        out = lax.conv_general_dilated(
            _to_last(ct, nd), rhs, (1,) * nd,
            [(r, r + e) for r, e in zip(reach, extra, strict=True)], lhs_dilation=tuple(stride),
            rhs_dilation=tuple(dilation), dimension_numbers=_channels_last(nd),
            precision=lax.Precision.HIGHEST)
        crop = (slice(None),) + tuple(slice(lo, lo + n) for (lo, _), n in
                                      zip(padding, spatial, strict=True))
        return jnp.transpose(out[crop], (0, nd + 1) + tuple(range(1, nd + 1)))
    _, vjp = jax.vjp(lambda x: _jax_conv(x, w.astype(ct.dtype), stride, padding, dilation,
                                         groups), jnp.zeros(tuple(in_shape), ct.dtype))
    return vjp(ct)[0]


def _jax_conv_pull_w(x, ct, w, stride, padding, dilation, groups):
    """``dW[o, c, k] = sum ct[n, o, i] x[n, c, s*i + d*k]``. Ungrouped, it is written as a
    channels-last convolution of ``x`` (channels as the batch, samples as the features) by
    the cotangent (dilated by the stride), for the reason `_jax_conv_pull_x` gives."""
    import jax

    nd = len(stride)
    if groups == 1 and 0 not in tuple(ct.shape):  # (an empty output: the vjp below)
        import jax.numpy as jnp
        from jax import lax

        lhs = jnp.transpose(x.astype(ct.dtype), (1,) + tuple(range(2, nd + 2)) + (0,))
        rhs = jnp.transpose(ct, tuple(range(2, nd + 2)) + (0, 1))  # (out..., N, O)
        out = lax.conv_general_dilated(
            lhs, rhs, tuple(dilation), [tuple(p) for p in padding],
            rhs_dilation=tuple(stride), dimension_numbers=_channels_last(nd),
            precision=lax.Precision.HIGHEST)  # (C, >= K..., O): rows past the kernel dropped
        out = out[(slice(None),) + tuple(slice(0, k) for k in w.shape[2:])]
        return jnp.transpose(out, (nd + 1, 0) + tuple(range(1, nd + 1)))
    _, vjp = jax.vjp(lambda v: _jax_conv(x.astype(ct.dtype), v, stride, padding, dilation,
                                         groups), w.astype(ct.dtype))
    return vjp(ct)[0]


for _lib, _fns in (("numpy", (_np_conv, _np_conv_pull_x, _np_conv_pull_w)),
                   ("torch", (_torch_conv, _torch_conv_pull_x, _torch_conv_pull_w)),
                   ("jax", (_jax_conv, _jax_conv_pull_x, _jax_conv_pull_w))):
    for _name, _fn in zip(("conv", "conv_pull_x", "conv_pull_w"), _fns, strict=True):
        register_kernel(_name, _lib, _fn)


class ConvMap(Closure):
    """A convolution's map in one operand, with its magnitude: the same convolution with the
    other operand's absolute values, built when asked. It bounds the rounding of a tangent
    pushed through the layer (`asd.core.ties`) and says which outputs no input moves
    (`Trace.reach`: a layer of zero weights), so a staged sweep needs no decision where the
    ties it meets behind the layer cannot change the gradient."""

    __slots__ = ("_magnitude",)

    def __init__(self, push, pull, in_shape, out_shape, magnitude):
        super().__init__(push, pull, in_shape, out_shape)
        self._magnitude = magnitude

    def magnitude(self):
        return self._magnitude()


def _conv_maps_xp(x, w, xp, stride, padding, dilation, groups, *, weight: bool = True):
    """``(ans, map in x, map in w)`` of the convolution on another library's arrays, through
    its kernels; a tangent batch axis is folded into the samples (x) or the groups (w)."""
    ans = kernel("conv", xp)(x, w, stride, padding, dilation, groups)
    out = tuple(ans.shape)
    map_x, map_w = _conv_closures_xp(x, w, xp, out, stride, padding, dilation, groups)
    magnitudes = functools.cache(lambda: _conv_closures_xp(
        xp.abs(x), xp.abs(w), xp, out, stride, padding, dilation, groups))
    return (ans, ConvMap(map_x._push, map_x._pull, tuple(x.shape), out,
                         lambda: magnitudes()[0]),
            ConvMap(map_w._push, map_w._pull, tuple(w.shape), out, lambda: magnitudes()[1])
            if weight else None)


def _conv_closures_xp(x, w, xp, out, stride, padding, dilation, groups):
    """The maps in x and in w of the convolution of ``x`` and ``w`` (output shape ``out``)
    on another library's arrays."""
    conv_k = kernel("conv", xp)
    pull_x_k, pull_w_k = kernel("conv_pull_x", xp), kernel("conv_pull_w", xp)
    args = (stride, padding, dilation, groups)
    x_shape, w_shape = tuple(x.shape), tuple(w.shape)

    def push_x(t):
        if t.ndim == len(x_shape) + 1:
            b = t.shape[0]
            y = conv_k(xp.reshape(t, (-1,) + x_shape[1:]), w, *args)
            return xp.reshape(y, (b,) + out)
        return conv_k(t, w, *args)

    def pull_x(ct):
        if ct.ndim == len(out) + 1:
            b = ct.shape[0]
            r = pull_x_k(xp.reshape(ct, (-1,) + out[1:]), w, (b * x_shape[0],) + x_shape[1:],
                         *args)
            return xp.reshape(r, (b,) + x_shape)
        return pull_x_k(ct, w, x_shape, *args)

    def push_w(t):
        if t.ndim == len(w_shape) + 1:  # (z, O, C/G, K...) as z more output channels per group
            z, o, nd = t.shape[0], w_shape[0], len(stride)
            g = groups
            tw = xp.reshape(t, (z, g, o // g) + w_shape[1:])
            tw = xp.permute_dims(tw, (1, 0) + tuple(range(2, tw.ndim)))
            y = conv_k(x, xp.reshape(tw, (g * z * (o // g),) + w_shape[1:]), *args)
            y = xp.reshape(y, (out[0], g, z, o // g) + out[2:])
            y = xp.permute_dims(y, (2, 0, 1) + tuple(range(3, 4 + nd)))
            return xp.reshape(y, (z,) + out)
        return conv_k(x, t, *args)

    def pull_w(ct):
        if ct.ndim == len(out) + 1:
            return xp.stack([pull_w_k(x, ct[i, ...], w, *args) for i in range(ct.shape[0])])
        return pull_w_k(x, ct, w, *args)

    return Closure(push_x, pull_x, x_shape, out), Closure(push_w, pull_w, w_shape, out)


def _conv_impl(x, w, stride, padding, dilation, groups):
    if is_host(x) and is_host(w):
        return _correlate(_pad(np.asarray(x), padding), np.asarray(w), stride, dilation, groups)
    return kernel("conv", namespace(x, w))(x, w, stride, padding, dilation, groups)


conv_p = Primitive("conv", _conv_impl, array_api=True)


def _same_library(x, w):
    """``(x, w, xp)``: both operands in one library (a numpy operand moves to the other's)."""
    xp = namespace(x, w)
    if is_host(x):
        x = from_host(np.asarray(x), w, "like")
    if is_host(w):
        w = from_host(np.asarray(w), x, "like")
    return x, w, xp


@conv_p.defrule
def conv_rule(xs, dxs, stride, padding, dilation, groups):
    """On other libraries' arrays the maps run the library's own convolution kernels."""
    if not (is_host(xs[0]) and is_host(xs[1])):
        ans, map_x, map_w = _conv_maps_xp(*_same_library(*xs), stride, padding, dilation,
                                          groups)
        return ans, FanIn(map_x, map_w)
    x, w = np.asarray(xs[0]), np.asarray(xs[1])
    ans = _correlate(_pad(x, padding), w, stride, dilation, groups)
    maps = _conv_closures(x, w, ans.shape, stride, padding, dilation, groups)
    magnitudes = functools.cache(lambda: _conv_closures(
        np.abs(x), np.abs(w), ans.shape, stride, padding, dilation, groups))
    return ans, FanIn(*(ConvMap(m._push, m._pull, m.in_shape, m.out_shape,
                                lambda i=i: magnitudes()[i]) for i, m in enumerate(maps)))


def _conv_closures(x, w, out, stride, padding, dilation, groups):
    """The maps in x and in w of the convolution of numpy ``x`` and ``w`` (output ``out``)."""
    xp = _pad(x, padding)
    nb_out = len(out) + 1

    def push_x(t):
        batched = t.ndim == x.ndim + 1
        tp = _pad(t, padding)
        return _correlate(tp, w, stride, dilation, groups, "x" if batched else "")

    def pull_x(ct):
        return _transposed(ct, w, x.shape, padding, stride, dilation, groups, ct.ndim == nb_out)

    def push_w(t):
        return _correlate(xp, t, stride, dilation, groups, "w" if t.ndim == w.ndim + 1 else "")

    def pull_w(ct):
        return _weight_grad(xp, ct, w.shape[2:], stride, dilation, groups, ct.ndim == nb_out)

    return Closure(push_x, pull_x, x.shape, out), Closure(push_w, pull_w, w.shape, out)


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
    if is_traced(v):
        return v.reshape((-1,) + (1,) * nd)
    if is_host(v):
        return np.reshape(v, (-1,) + (1,) * nd)
    return namespace(v).reshape(v, (-1,) + (1,) * nd)


def conv1d(x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-d convolution, ``x (N, C, L)``; see `conv`."""
    return conv(x, w, bias, stride, padding, dilation, groups)


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """2-d convolution, ``x (N, C, H, W)``; see `conv`."""
    return conv(x, w, bias, stride, padding, dilation, groups)


# ----- average pooling: a depthwise convolution with a constant kernel -----

def _avg_weight_xp(x, kernel, divisor):
    """The depthwise kernel of average pooling in ``x``'s library, dtype and device."""
    return from_host(np.full((x.shape[1], 1) + kernel, 1.0 / divisor), x, "like")


def _avg_impl(x, kernel, stride, padding, divisor):
    nd = len(kernel)
    c = np.shape(x)[1]
    if not is_host(x):
        return _conv_impl(x, _avg_weight_xp(x, kernel, divisor), stride, padding, (1,) * nd, c)
    w = np.ones((c, 1) + kernel, np.result_type(x, np.float32))
    return _correlate(_pad(np.asarray(x), padding), w, stride, (1,) * nd, c) / divisor


avg_pool_p = Primitive("avg_pool", _avg_impl, array_api=True)


@avg_pool_p.defrule
def avg_pool_rule(xs, dxs, kernel, stride, padding, divisor):
    """Another library's arrays: the convolution's maps with the constant depthwise kernel."""
    (x,) = xs
    if not is_host(x):
        ans, map_x, _ = _conv_maps_xp(x, _avg_weight_xp(x, kernel, divisor), namespace(x),
                                      stride, padding, (1,) * len(kernel), x.shape[1],
                                      weight=False)
        return ans, map_x
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

    pool = ConvMap(push, pull, x.shape, ans.shape, lambda: pool)  # |w| = w
    return ans, pool


def avg_pool(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """Average pooling over the trailing spatial axes of ``x (N, C, L...)`` (PyTorch's); any
    other number of leading axes (none: ``x (L...)``, as `asd.max_pool1d` takes) is pooled
    the same way, each leading index on its own.

    Padding counts as zeros in the average (``count_include_pad=True``, the default of
    ``torch.nn.AvgPool``); without padding the flag makes no difference.

    >>> import numpy as np
    >>> avg_pool(np.arange(4.0).reshape(1, 1, 4), 2)
    array([[[0.5, 2.5]]])
    >>> avg_pool(np.arange(4.0), (2,))
    array([0.5, 2.5])
    """
    nd = len(kernel_size) if isinstance(kernel_size, tuple | list) else np.ndim(x) - 2
    shape = tuple(np.shape(x))
    kernel = _tuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None or stride == [] else _tuple(stride, nd, "stride")
    pad = _tuple(padding, nd, "padding")
    if nd < 1 or len(shape) < nd:
        raise ShapeError(f"avg_pool over {max(nd, 1)} spatial axes needs an array with at "
                         f"least {max(nd, 1)} axes, got shape {shape}")
    spatial, lead = shape[len(shape) - nd:], shape[:len(shape) - nd]
    for n, k, s, p in zip(spatial, kernel, stride, pad, strict=True):
        if k < 1 or s < 1 or p < 0 or 2 * p > k or n + 2 * p < k:
            raise ShapeError(
                f"avg_pool: kernel {kernel}, stride {stride}, padding {pad} do not fit the "
                f"spatial shape {spatial} (need kernel >= 1, stride >= 1, 0 <= padding <= "
                "kernel / 2, and the padded input at least as long as the kernel)")
    if max(pad) > 0 and not count_include_pad:
        raise UnsupportedError("avg_pool with padding and count_include_pad=False")
    # the primitive pools (N, C, L...): other leading axes are one batch of channels
    batched = len(lead) == 2
    if not batched:
        x = x.reshape((1, math.prod(lead)) + spatial)
    y = avg_pool_p(x, kernel=kernel, stride=stride, padding=tuple((p, p) for p in pad),
                   divisor=float(np.prod(kernel)))
    return y if batched else y.reshape(lead + tuple(y.shape[2:]))


def avg_pool1d(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """1-d average pooling over the last axis of ``x (N, C, L)`` (or ``(L,)``, ``(C, L)``,
    any leading axes); see `avg_pool`."""
    return avg_pool(x, _tuple(kernel_size, 1, "kernel_size"),
                    None if stride is None else _tuple(stride, 1, "stride"), padding,
                    count_include_pad)


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
    """2-d average pooling over the last two axes of ``x (N, C, H, W)`` (or ``(H, W)``,
    any leading axes); see `avg_pool`."""
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
    if is_foreign(running_mean) or is_foreign(running_var):
        xp = namespace(running_mean, running_var)
        mean, scale = running_mean, 1.0 / xp.sqrt(running_var + eps)
    else:
        mean, scale = np.asarray(running_mean), 1.0 / np.sqrt(np.asarray(running_var) + eps)
    y = (x - _channel(mean, nd)) * _channel(scale, nd)
    if weight is not None:
        y = y * _channel(weight, nd)
    if bias is not None:
        y = y + _channel(bias, nd)
    return y


# ----- elu: kink at 0 with slopes alpha (left) and 1 (right) -----

def _elu_impl(x, alpha):
    if not is_host(x):
        xp = namespace(x)
        return xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, xp.zeros_like(x))))
    x = np.asarray(x)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


elu_p = Primitive("elu", _elu_impl, array_api=True)


def _elu_rule_xp(x, dx, alpha, xp):
    if not xp.isdtype(x.dtype, "real floating"):
        x = xp.astype(x, xp.asarray(0.0).dtype)  # the library's default float
    neg = alpha * xp.exp(xp.minimum(x, xp.zeros_like(x)))
    ans = xp.where(x > 0, x, neg - alpha)
    right = ray_nonnegative(x, dx)
    return ans, Diagonal(xp.where(right, xp.ones_like(neg), neg), tuple(x.shape))


@elu_p.defrule
def elu_rule(xs, dxs, alpha):
    """The side of the kink at 0 the ray enters (`ray_nonnegative`) takes slope 1."""
    (x,) = xs
    if not is_host(x):
        return _elu_rule_xp(x, dxs[0], alpha, namespace(x))
    x = np.asarray(x)
    neg = alpha * np.exp(np.minimum(x, 0))
    ans = np.where(x > 0, x, neg - alpha).astype(np.result_type(x, np.float32), copy=False)
    right = ray_nonnegative(x, dxs[0])
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


def _ce_parts_xp(z, target, xp):
    """`_ce_parts` in another library (integer targets compared with the class indices)."""
    two_d = z.ndim >= 2
    zz = z if two_d else z[None, ...]
    m = xp.max(zz, axis=1, keepdims=True)
    lse = m + xp.log(xp.sum(xp.exp(zz - m), axis=1, keepdims=True))
    if is_host(target):
        target = from_host(np.asarray(target), zz)
    if xp.isdtype(target.dtype, "integral"):
        tt = xp.expand_dims(target if two_d else target[None, ...], axis=1)
        classes = from_host(np.arange(zz.shape[1]).reshape((1, -1) + (1,) * (zz.ndim - 2)),
                            tt, tt.dtype)
        onehot = xp.astype(tt == classes, zz.dtype)
    else:
        onehot = xp.astype(target if two_d else target[None, ...], zz.dtype)
    losses = xp.sum(onehot * (lse - zz), axis=1)
    grad = xp.exp(zz - lse) * xp.sum(onehot, axis=1, keepdims=True) - onehot
    return losses, grad if two_d else grad[0, ...]


def _ce_impl(z, target, reduction):
    if not is_host(z):
        xp = namespace(z)
        losses, _ = _ce_parts_xp(z, target, xp)
        return xp.mean(losses) if reduction == "mean" else xp.sum(losses)
    losses, _ = _ce_parts(z, to_host(target))
    return np.mean(losses) if reduction == "mean" else np.sum(losses)


cross_entropy_p = Primitive("cross_entropy", _ce_impl, array_api=True)


def _ce_rule_xp(z, target, reduction, xp):
    losses, grad = _ce_parts_xp(z, target, xp)
    n = 1
    for k in losses.shape:
        n *= k
    ans = xp.mean(losses) if reduction == "mean" else xp.sum(losses)
    if reduction == "mean":
        grad = grad / n
    axes = tuple(range(-z.ndim, 0))
    shape = tuple(z.shape)

    def push(t):
        return xp.sum(t * grad, axis=axes)

    def pull(ct):
        return xp.reshape(ct, tuple(ct.shape) + (1,) * len(shape)) * grad

    return ans, FanIn(Closure(push, pull, shape, ()), None)


@cross_entropy_p.defrule
def cross_entropy_rule(xs, dxs, reduction):
    """Another library's logits: computed there; the targets stay constants of that library."""
    z, target = xs
    if not is_host(z):
        return _ce_rule_xp(z, target, reduction, namespace(z))
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
    return cross_entropy_p(logits, target if is_foreign(target) else np.asarray(target),
                           reduction=reduction)


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
