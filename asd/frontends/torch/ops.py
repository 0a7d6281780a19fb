"""The ATen table: how each PyTorch operation of an exported graph maps onto asd's library.

`ATEN` maps an ATen operator name (the overload packet: ``relu`` for ``aten.relu.default``) to
a handler called on numpy arrays, torch tensors or traced values; extend it to teach the
importer an operation. The handlers call asd's library by its documented names, so the sweep
differentiates them with asd's rules; on torch tensors some spell an operation through rules
that run natively (``leaky_relu`` as ``maximum(x, slope x)``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np
import torch

import asd
from asd.core import backend
from asd.errors import NonFiniteError, NotLipschitzError, TracerBoolError, UnsupportedError
from asd.extend import Diagonal, FanIn, Primitive, is_host, ray_compare, record_jump
from asd.frontends import common
from asd.frontends.torch.convert import HALF, _np_dtype, _to_numpy
from asd.library.elementwise import hypot_pair_p
from asd.library.piecewise import _only, _operands

# ----- helpers -----


def _lib(name: str) -> Callable:
    return common.library_function(name, "PyTorch operation")


def _raw(x):
    return common.numpy_value(x)




def _on_torch(*xs) -> bool:
    """Whether a handler runs natively: one of ``xs`` is a torch tensor or a traced value
    holding one (the numpy path never sees torch tensors)."""
    return any(isinstance(getattr(x, "value", x), torch.Tensor) for x in xs)


def _numpy_only(what: str):
    """The refusal that sends a program to the numpy path (`TorchProgram.backend`)."""
    return UnsupportedError(f"{what} runs on numpy arrays only so far (no array-API rule yet)")


def _dims(dim, ndim: int) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % max(ndim, 1) for d in dims)




def _flip(x, axis: int):
    """``x`` reversed along ``axis`` by an index array (torch tensors refuse negative steps)."""
    axis = axis % np.ndim(x)
    return x[(slice(None),) * axis + (np.arange(np.shape(x)[axis] - 1, -1, -1),)]


def _take(x, axis: int, stop: int):
    index = [slice(None)] * np.ndim(x)
    index[axis] = slice(0, stop)
    return x[tuple(index)]


REDUCTION = {0: "none", 1: "mean", 2: "sum"}


# ----- the ATen table: op name -> handler on numpy / traced arrays -----

def _add(a, b, alpha=1):
    return a + (b if alpha == 1 else alpha * b)


def _sub(a, b, alpha=1):
    return a - (b if alpha == 1 else alpha * b)


def _div(a, b, rounding_mode=None):
    """``torch.div``; with ``rounding_mode`` a step function through asd's jump rules:
    ``'floor'`` is numpy's ``floor_divide`` (PyTorch computes it by numpy's algorithm),
    ``'trunc'`` is ``trunc(a / b)`` of the rounded quotient, as PyTorch computes it."""
    if rounding_mode is None:
        return a / b
    if rounding_mode == "floor":
        return _floor_divide(a, b)
    if rounding_mode == "trunc":
        return np.trunc(a / b)
    raise UnsupportedError(f"aten.div with rounding_mode={rounding_mode!r}")


def _linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def _addmm(bias, a, b, beta=1, alpha=1):
    return beta * bias + alpha * (a @ b)


def _clamp(x, lo=None, hi=None):
    return asd.clip(x, lo, hi) if _on_torch(x) else np.clip(x, lo, hi)


def _leaky_relu(x, slope=0.01):
    if _on_torch(x):         # the same function through ported rules: max(x, slope x)
        return (asd.maximum if slope <= 1 else asd.minimum)(x, slope * x)
    return _lib("leaky_relu")(x, slope)


def _hardtanh(x, lo=-1.0, hi=1.0):
    return asd.clip(x, lo, hi) if _on_torch(x) else _lib("hardtanh")(x, lo, hi)


def _relu6(x):
    return asd.clip(x, 0.0, 6.0) if _on_torch(x) else _lib("relu6")(x)


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1.0 or input_scale != 1.0:
        return scale * _lib("elu")(input_scale * x, alpha)
    return _lib("elu")(x, alpha)


def _reduce(np_fn):
    def reduce(x, dim=None, keepdim=False, dtype=None):
        axes = _dims(dim, np.ndim(x))
        y = np_fn(x, axis=axes, keepdims=bool(keepdim))
        return y if dtype is None else y.astype(_np_dtype(dtype))

    return reduce


def _max_or_min(np_fn, arg_fn):
    def op(x, dim=None, keepdim=False):
        if dim is None:
            return np_fn(x)
        if not isinstance(dim, int):        # max.other / min.other: elementwise
            return (np.maximum if np_fn is np.max else np.minimum)(x, dim)
        values = np_fn(x, axis=dim, keepdims=bool(keepdim))
        if _on_torch(x):   # argmax has no array-API rule: the indices refuse any use
            return values, NotComputed(f"the indices of aten.{np_fn.__name__}.dim on torch "
                                       "tensors", numpy_only=True)
        indices = arg_fn(x, axis=dim)  # traced: discrete, so using it as a number raises
        return values, np.expand_dims(indices, dim) if keepdim else indices

    return op


def _sort(x, dim=-1, descending=False, stable=None):
    dim = dim % np.ndim(x)
    values = np.sort(x, axis=dim)
    indices = np.argsort(x, axis=dim, kind="stable")  # traced: discrete, refused as a number
    if descending:
        values, indices = _flip(values, dim), _flip(indices, dim)
    return values, indices


def _sort_stable(x, *, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


def _topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    dim = dim % np.ndim(x)
    values, indices = _sort(x, dim, descending=largest)
    return _take(values, dim, k), np.take(indices, np.arange(k), axis=dim)


def _median(x):
    flat = np.sort(x.reshape(-1))
    return flat[(flat.shape[0] - 1) // 2]


def _median_dim(x, dim, keepdim=False):
    """``torch.median(x, dim)``: the lower middle entry of each sorted row (PyTorch's choice
    for an even count; ties decided by sort's rule) and its position, which on torch
    tensors is not computed (argsort has no array-API rule: a use moves to numpy)."""
    dim = int(dim) % max(np.ndim(x), 1)
    k = (np.shape(x)[dim] - 1) // 2
    if _on_torch(x):
        values = _select(np.sort(x, axis=dim), dim, k)
        indices = NotComputed("the indices of aten.median.dim on torch tensors",
                              numpy_only=True)
    else:
        values, indices = (_select(v, dim, k) for v in _sort(x, dim))
    if keepdim:
        values = _unsqueeze(values, dim)
        indices = indices if isinstance(indices, NotComputed) else np.expand_dims(indices, dim)
    return values, indices


def _vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002
    axes = _dims(dim, np.ndim(x))
    if axes is None or len(axes) > 1:   # a vector norm over several axes: flatten them
        axes = tuple(range(np.ndim(x))) if axes is None else axes
        moved = np.transpose(x, tuple(a for a in range(np.ndim(x)) if a not in axes) + axes)
        flat = moved.reshape(np.shape(moved)[:np.ndim(x) - len(axes)] + (-1,))
        y = _lib("norm")(flat, ord=ord, axis=-1)
        if keepdim:
            y = y.reshape(tuple(1 if a in axes else n for a, n in enumerate(np.shape(x))))
        return y
    return _lib("norm")(x, ord=ord, axis=axes[0], keepdims=bool(keepdim))


def _norm_p(x, p=2, dim=None, keepdim=False, dtype=None):
    return _vector_norm(x, 2 if p is None else p, dim, keepdim)


def _linalg_norm(x, ord=None, dim=None, keepdim=False, dtype=None):  # noqa: A002
    """``torch.linalg.norm``: a vector norm over one axis (or, with ``ord`` None, the
    2-norm of all entries or of two axes: Frobenius), a matrix norm over two axes, which
    ``dim`` None means for a 2-D input with ``ord`` given (max column sum for 1, spectral
    for 2, 'fro', 'nuc', ...); not the vector norm of the flattened matrix (F46)."""
    axes = _dims(dim, np.ndim(x))
    if ord is None or (axes is None and np.ndim(x) == 1) or (axes and len(axes) == 1):
        return _vector_norm(x, 2 if ord is None else ord, dim, keepdim)
    if axes is None and np.ndim(x) != 2:
        raise UnsupportedError(f"aten.linalg_norm with ord={ord!r} of a {np.ndim(x)}-D input "
                               "and no dim (PyTorch requires a 1-D or 2-D input): give dim")
    return _lib("norm")(x, ord=ord, axis=(0, 1) if axes is None else axes,
                        keepdims=bool(keepdim))


def _softmax(x, dim, dtype_or_half=None):
    return _lib("softmax")(x, axis=dim)


def _log_softmax(x, dim, dtype_or_half=None):
    return _lib("log_softmax")(x, axis=dim)


def _attention(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """``softmax(q kᵀ · scale + mask) v``, PyTorch's scaled dot-product attention, and the
    row log-sum-exp its fused kernels also return; ``mask`` is a boolean keep-mask or an
    additive bias. Dropout is random: refused, as training-mode dropout is."""
    if dropout_p:
        raise UnsupportedError(f"scaled dot-product attention with dropout_p={dropout_p} "
                               "(random masks); call model.eval() or set dropout to 0")
    d = np.shape(q)[-1]
    scale = 1.0 / float(np.sqrt(d)) if scale is None else float(scale)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    n, m = np.shape(scores)[-2:]
    if is_causal:
        keep = np.tril(np.ones((n, m), bool))
        scores = np.where(keep, scores, -np.inf)
    if mask is not None:
        raw = common.numpy_value(mask) if not common.is_traced(mask) else None
        if raw is not None and np.asarray(raw).dtype == bool:
            scores = np.where(np.asarray(raw), scores, -np.inf)
        else:
            scores = scores + mask
    lse = _lib("logsumexp")(scores, axis=-1)
    return _lib("softmax")(scores, axis=-1) @ v, lse


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
          enable_gqa=False):
    return _attention(q, k, v, attn_mask, dropout_p, is_causal, scale)[0]


def _sdpa_flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
                scale=None):
    """``_scaled_dot_product_flash_attention`` (CUDA): output, logsumexp and bookkeeping
    (sequence offsets, maxima, RNG state, debug mask) no later node differentiates."""
    out, lse = _attention(q, k, v, None, dropout_p, is_causal, scale)
    n, m = np.shape(q)[-2], np.shape(k)[-2]
    none = np.zeros((), np.int64)
    return out, lse, none, none, n, m, none, none, np.zeros((0,), np.float32)


def _sdpa_efficient(q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                    is_causal=False, *, scale=None):
    """``_scaled_dot_product_efficient_attention`` (CUDA): output, logsumexp, RNG state."""
    out, lse = _attention(q, k, v, attn_bias, dropout_p, is_causal, scale)
    none = np.zeros((), np.int64)
    return out, lse, none, none


def _sdpa_cudnn(q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                is_causal=False, return_debug_mask=False, *, scale=None):
    """``_scaled_dot_product_cudnn_attention`` (CUDA): as the flash variant's outputs."""
    out, lse = _attention(q, k, v, attn_bias, dropout_p, is_causal, scale)
    n, m = np.shape(q)[-2], np.shape(k)[-2]
    none = np.zeros((), np.int64)
    return out, lse, none, none, n, m, none, none, np.zeros((0,), np.float32)


def _sdpa_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """``_scaled_dot_product_flash_attention_for_cpu``: output and logsumexp."""
    return _attention(q, k, v, attn_mask, dropout_p, is_causal, scale)


def _cross_entropy(z, target, weight=None, reduction=1, ignore_index=-100,
                   label_smoothing=0.0):
    if weight is not None:
        raise UnsupportedError("aten.cross_entropy_loss with class weights")
    if label_smoothing:
        # (1 - e) CE + e * the mean over classes of -log_softmax: a smooth composition
        smooth_part = -np.mean(_lib("log_softmax")(z, axis=1), axis=1)
        smooth_part = {0: smooth_part, 1: np.mean(smooth_part), 2: np.sum(smooth_part)}[
            int(reduction)]
        return (1.0 - label_smoothing) * _cross_entropy(
            z, target, None, reduction, ignore_index) + label_smoothing * smooth_part
    if _on_torch(z) and isinstance(target, torch.Tensor) and not target.is_floating_point() \
            and np.ndim(z) == 2 and reduction in (1, 2):
        # natively: -log_softmax(z)[i, t_i], a smooth composition of ported rules
        if bool((target == ignore_index).any()):
            raise UnsupportedError(f"aten.cross_entropy_loss with targets equal to "
                                   f"ignore_index ({ignore_index})")
        rows = torch.arange(target.shape[0], device=target.device)
        picked = -_lib("log_softmax")(z, axis=1)[rows, target]
        return picked.mean() if reduction == 1 else picked.sum()
    t = _static(target, "aten.cross_entropy_loss's target")
    if np.issubdtype(t.dtype, np.integer) and np.any(t == ignore_index):
        raise UnsupportedError(f"aten.cross_entropy_loss with targets equal to ignore_index "
                               f"({ignore_index})")
    return asd.cross_entropy(z, t, reduction=REDUCTION[reduction])


def _nll_loss(x, target, weight=None, reduction=1, ignore_index=-100):
    if weight is not None:
        raise UnsupportedError("aten.nll_loss with class weights")
    t = _static(target, "aten.nll_loss's target")
    picked = x[np.arange(t.shape[0]), t] if np.ndim(x) == 2 else x[t]
    return {0: -picked, 1: -picked.mean(), 2: -picked.sum()}[reduction]


def _mse(a, b, reduction=1):
    d = a - b
    sq = d * d
    return {0: sq, 1: sq.mean(), 2: sq.sum()}[reduction]


def _per_axis(v, nd: int) -> tuple[int, ...]:
    """An int, or a sequence of one entry or one per axis, as ``nd`` ints."""
    if isinstance(v, int | np.integer):
        return (int(v),) * nd
    v = tuple(int(a) for a in v)
    return v if len(v) == nd else v[:1] * nd


def _conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):
        nd = np.ndim(w) - 2
        if padding == "valid":
            padding = 0
        elif padding == "same":
            if any(s != 1 for s in _per_axis(stride, nd)):
                raise UnsupportedError("convolution with padding='same' and a stride")
            # PyTorch's split: the odd entry of the total padding goes on the high side
            total = [d * (k - 1) for d, k in zip(_per_axis(dilation, nd), np.shape(w)[2:],
                                                 strict=True)]
            padding = tuple((t // 2, t - t // 2) for t in total)
        else:
            raise UnsupportedError(f"convolution with padding={padding!r}")
    return asd.conv(x, w, b, stride, padding, dilation, groups)


def _conv_transposed(x, w, b, stride, padding, dilation, output_padding, groups):
    """A transposed convolution as the convolution it is: ``x`` spread on a grid of step
    ``stride`` (zeros between, and ``d (k - 1) - padding`` around, plus ``output_padding``
    at the end: one gather from the flat input and a zero), then convolved with the kernel
    flipped and its channel axes swapped."""
    if groups != 1:
        raise UnsupportedError("aten.convolution with transposed=True and groups > 1")
    nd = np.ndim(w) - 2
    st, pd, dl, op = (_per_axis(v, nd) for v in (stride, padding, dilation, output_padding))
    shape = np.shape(x)
    # the spread input has d (k - 1) - p zeros around it (and output_padding at the end)
    lead = [d * (k - 1) - p for d, k, p in zip(dl, np.shape(w)[2:], pd, strict=True)]
    if any(n < 0 for n in lead):
        raise UnsupportedError("aten.convolution with transposed=True and padding larger "
                               "than dilation * (kernel - 1)")
    grid = np.full(shape[:2] + tuple((n - 1) * s + 1 + 2 * g + o for n, s, g, o in
                                     zip(shape[2:], st, lead, op, strict=True)), -1)
    grid[(slice(None), slice(None)) + tuple(slice(g, g + (n - 1) * s + 1, s) for n, s, g in
                                            zip(shape[2:], st, lead, strict=True))] = \
        np.arange(int(np.prod(shape))).reshape(shape)
    spread = _lib("take_flat")(x, grid)
    kernel = w
    for axis in range(2, 2 + nd):
        kernel = _flip(kernel, axis)
    kernel = np.swapaxes(kernel, 0, 1)
    return asd.conv(spread, kernel, b, 1, 0, dl, 1)


def _convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        return _conv_transposed(x, w, b, stride, padding, dilation, output_padding, groups)
    return asd.conv(x, w, b, stride, padding, dilation, groups)


def _averaging(n_in: int, n_out: int) -> np.ndarray:
    """The ``(n_out, n_in)`` matrix of adaptive average pooling's windows along one axis:
    ``[floor(i n_in / n_out), ceil((i + 1) n_in / n_out))``."""
    i = np.arange(n_out)[:, None]
    lo, hi = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
    j = np.arange(n_in)[None, :]
    return ((j >= lo) & (j < hi)) / (hi - lo)


def _adaptive_avg_pool(x, output_size):
    """Adaptive average pooling as ``A_h x A_w^T``: linear, with PyTorch's windows."""
    out_h, out_w = (tuple(output_size) * 2)[:2] if len(output_size) == 1 else output_size
    h, w = np.shape(x)[-2:]
    dtype = backend.numpy_dtype(x)
    ah, aw = (_averaging(h, int(out_h)).astype(dtype), _averaging(w, int(out_w)).astype(dtype))
    return np.matmul(np.matmul(ah, x), aw.T)


def _adaptive_max_pool(x, output_size):
    h, w = np.shape(x)[-2:]
    out_h, out_w = (int(output_size[0]),) * 2 if len(output_size) == 1 else map(
        int, output_size)
    if h % out_h or w % out_w:
        raise UnsupportedError("adaptive_max_pool2d with windows of different sizes (input "
                               f"{h}x{w} to {out_h}x{out_w}); resize to a multiple first")
    kernel = (h // out_h, w // out_w)
    return [_lib("max_pool2d")(x, kernel, stride=kernel), NotComputed(
        "the indices of adaptive_max_pool2d")]


def _source_index(n_in: int, n_out: int, align_corners: bool, scale) -> np.ndarray:
    """PyTorch's source coordinate of each output position (area_pixel_compute_source_index)."""
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    ratio = 1.0 / scale if scale else n_in / n_out
    return np.maximum((dst + 0.5) * ratio - 0.5, 0.0)


def _interpolation(n_in: int, n_out: int, align_corners: bool, scale) -> np.ndarray:
    src = _source_index(n_in, n_out, align_corners, scale)
    lo = np.minimum(np.floor(src).astype(int), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    lam = src - lo
    a = np.zeros((n_out, n_in))
    np.add.at(a, (np.arange(n_out), lo), 1.0 - lam)
    np.add.at(a, (np.arange(n_out), hi), lam)
    return a


def _output_size(x, output_size, scale_factors, k: int) -> tuple[int, ...]:
    if output_size is not None:
        return tuple(int(n) for n in output_size)
    return tuple(int(np.floor(n * s)) for n, s in zip(np.shape(x)[-k:], scale_factors,
                                                      strict=True))


def _upsample_bilinear(x, output_size, align_corners, scale_factors=None):
    """Bilinear resampling: linear in ``x`` with PyTorch's weights, ``A_h x A_w^T``."""
    out = _output_size(x, output_size, scale_factors, 2)
    scales = tuple(scale_factors) if scale_factors else (None, None)
    h, w = np.shape(x)[-2:]
    dtype = backend.numpy_dtype(x)
    ah = _interpolation(h, out[0], bool(align_corners), scales[0]).astype(dtype)
    aw = _interpolation(w, out[1], bool(align_corners), scales[1]).astype(dtype)
    return np.matmul(np.matmul(ah, x), aw.T)


def _upsample_nearest(x, output_size, scale_factors=None):
    """Nearest resampling: a gather of the source rows and columns."""
    k = 2
    out = _output_size(x, output_size, scale_factors, k)
    scales = tuple(scale_factors) if scale_factors else (None,) * k
    index = []
    for n_in, n_out, s in zip(np.shape(x)[-k:], out, scales, strict=True):
        ratio = 1.0 / s if s else n_in / n_out
        index.append(np.minimum(np.floor(np.arange(n_out) * ratio).astype(int), n_in - 1))
    return x[..., index[0][:, None], index[1][None, :]]


def _constant_pad(x, pad, value=0.0):
    """``F.pad`` constant mode: ``pad`` pairs from the last axis; negative entries crop."""
    nd = np.ndim(x)
    pairs = [(0, 0)] * nd
    for i in range(len(pad) // 2):
        pairs[nd - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    crop = tuple(slice(-lo if lo < 0 else None, hi if hi < 0 else None) for lo, hi in pairs)
    x = x[crop]
    grow = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pairs)
    if not any(lo or hi for lo, hi in grow):
        return x
    if common.is_traced(value):
        raise UnsupportedError("constant_pad_nd with a differentiated padding value")
    return np.pad(x, grow, constant_values=float(value)) if float(value) else _lib("pad")(
        x, grow)


def _ceil_extension(x, nd: int, kernel, stride, padding):
    """``x`` with its last entry along each pooled axis repeated so that floor-mode pooling
    gives ceil mode's windows. Exact: a window reaching past the input starts inside it
    (PyTorch's rule), so it also holds the last entry, and a copy of an entry it already
    holds changes neither its maximum nor where the gradient goes."""
    ks, ps = _per_axis(kernel, nd), _per_axis(padding, nd)
    ss = ks if stride is None else _per_axis(stride, nd)
    shape = np.shape(x)
    for i, (k, s, p) in enumerate(zip(ks, ss, ps, strict=True)):
        axis = len(shape) - nd + i
        length = shape[axis]
        out = -(-(length + 2 * p - k) // s) + 1
        if (out - 1) * s >= length + p:
            out -= 1
        extra = (out - 1) * s + k - (length + 2 * p)
        if extra > 0:
            last = (slice(None),) * axis + (slice(length - 1, length),)
            x = np.concatenate([x] + [x[last]] * extra, axis=axis)
    return x


def _max_pool(nd: int):
    def pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        if dilation not in (1, [1] * nd, (1,) * nd, [1]):
            raise UnsupportedError(f"max_pool{nd}d with dilation={dilation}")
        kernel = tuple(kernel_size) if isinstance(kernel_size, list | tuple) else kernel_size
        stride = None if stride in ((), [], None) else (
            tuple(stride) if isinstance(stride, list | tuple) else stride)
        padding = tuple(padding) if isinstance(padding, list | tuple) else padding
        if ceil_mode:
            x = _ceil_extension(x, nd, kernel, stride, padding)
        return _lib(f"max_pool{nd}d")(x, kernel, stride=stride, padding=padding)

    return pool


def _max_pool_with_indices(nd: int):
    pool = _max_pool(nd)

    def op(*args, **kwargs):
        return pool(*args, **kwargs), NotComputed(f"the indices of max_pool{nd}d")

    return op


class NotComputed:
    """An output asd does not compute (the pooling indices that aten returns beside the
    values). Exported graphs carry it even when the model uses the values only; any use
    raises, so a model that does use it fails loudly instead of getting made-up indices."""

    __slots__ = ("numpy_only", "what")

    def __init__(self, what: str, numpy_only: bool = False):
        self.what, self.numpy_only = what, numpy_only

    def _refuse(self, *args, **kwargs):
        if self.numpy_only:       # the numpy path computes them: the program moves there
            raise _numpy_only(self.what)
        raise UnsupportedError(
            f"{self.what} are not computed by asd's importer (they are discrete, so no "
            "derivative flows through them); write the model with the pooled values only."
        )

    __array__ = __array_ufunc__ = __array_function__ = _refuse
    __getitem__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = _refuse
    __len__ = __iter__ = __bool__ = __float__ = __int__ = __index__ = _refuse


def _avg_pool(nd: int):
    def pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
        if ceil_mode or divisor_override is not None:
            raise UnsupportedError(f"avg_pool{nd}d with ceil_mode or divisor_override")
        stride = None if stride in ((), [], None) else stride
        return asd.avg_pool(x, tuple(kernel_size) if isinstance(kernel_size, list | tuple)
                            else (kernel_size,) * nd, stride, padding, count_include_pad)

    return pool


def _batch_norm_eval(x, w, b, mean, var, momentum, eps):
    return asd.batch_norm(x, _raw(mean), _raw(var), w, b, eps), None, None


def _batch_norm(x, w, b, mean, var, training, momentum, eps, cudnn_enabled=True):
    if training:
        raise UnsupportedError("batch_norm in training mode; call model.eval() first")
    return asd.batch_norm(x, _raw(mean), _raw(var), w, b, eps)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimensions: a smooth
    composition of arithmetic, mean and sqrt, so it runs natively as well."""
    axes = tuple(range(np.ndim(x) - len(normalized_shape), np.ndim(x)))
    centred = x - asd.mean(x, axis=axes, keepdims=True)
    y = centred / asd.sqrt(asd.mean(centred * centred, axis=axes, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _dropout(x, p=0.5, train=False):
    if train:
        raise UnsupportedError("dropout in training mode (random masks); call model.eval()")
    return x


def _view(x, shape):
    return x.reshape(tuple(shape))


def _flatten(x, start_dim=0, end_dim=-1):
    shape = np.shape(x)
    if not shape:
        return x.reshape((1,))
    s, e = start_dim % len(shape), end_dim % len(shape)
    return x.reshape(shape[:s] + (-1,) + shape[e + 1:])


def _unsqueeze(x, dim):
    dim = dim % (np.ndim(x) + 1)
    return x.reshape(np.shape(x)[:dim] + (1,) + np.shape(x)[dim:])


def _squeeze(x, dim=None):
    shape = np.shape(x)
    dims = set(range(len(shape))) if dim is None else set(_dims(dim, len(shape)) or ())
    return x.reshape(tuple(n for i, n in enumerate(shape) if not (i in dims and n == 1)))


def _permute(x, dims):
    return np.transpose(x, tuple(d % np.ndim(x) for d in dims))


def _transpose(x, d0, d1):
    return np.swapaxes(x, d0, d1)


def _t(x):
    return x if np.ndim(x) < 2 else np.swapaxes(x, 0, 1)


def _select(x, dim, index):
    idx = [slice(None)] * np.ndim(x)
    idx[dim % np.ndim(x)] = index
    return x[tuple(idx)]


def _slice(x, dim=0, start=None, end=None, step=1):
    idx = [slice(None)] * np.ndim(x)
    n = np.shape(x)[dim]
    idx[dim % np.ndim(x)] = slice(start, None if end is None or end >= n else end, step)
    return x[tuple(idx)]


def _index(x, indices):
    # traced indices stay traced: indexing with a discrete function of the input raises
    index = tuple(slice(None) if i is None else i for i in indices)
    return x[index]


def _expand(x, size, implicit=False):
    shape = tuple(np.shape(x)[i - (len(size) - np.ndim(x))] if s == -1 else s
                  for i, s in enumerate(size))
    if _on_torch(x):
        return asd.broadcast_to(x, shape)
    return common.broadcast(x, shape)


def _broadcast_tensors(tensors):
    shape = np.broadcast_shapes(*(tuple(np.shape(t)) for t in tensors))
    if _on_torch(*tensors):
        return [asd.broadcast_to(t, shape) if tuple(np.shape(t)) != shape else t
                for t in tensors]
    return [common.broadcast(t, shape) if np.shape(t) != shape else t for t in tensors]


def _to_copy(x, dtype=None, **kwargs):
    if dtype is None:
        return x
    if isinstance(dtype, torch.dtype) and not dtype.is_floating_point and common.is_traced(x) \
            and np.issubdtype(np.dtype(backend.numpy_dtype(x)), np.floating):
        if dtype == torch.bool:       # x.bool() is x != 0: a comparison, decided along the ray
            return x != 0
        raise UnsupportedError(
            f"a cast to {dtype} of a value computed from the differentiated inputs: a step "
            "function (it truncates), whose jumps asd cannot see through an integer dtype. "
            "Write torch.trunc(x) (the same numbers as floats; asd decides its jumps), or "
            "detach the value first if its integers are constants by intent.")
    if _on_torch(x):          # natively: half precision is computed in float32
        target = torch.float32 if dtype in HALF else dtype
        if getattr(x, "dtype", None) == target:
            return x
        raise _numpy_only(f"a cast to {dtype} (asd.astype)")
    return x.astype(_np_dtype(dtype))


def _where(cond, a, b):
    return np.where(cond, a, b)


def _identity(x, *args, **kwargs):
    return x


def _no_value(*args, **kwargs):
    """An export-time check (``_assert_tensor_metadata`` before a cast): no value."""
    return None


def _pow(x, p):
    return x ** p


def _trace(x):
    return (x * np.eye(*np.shape(x))).sum()


def _cat(tensors, dim=0):
    return np.concatenate(tensors, axis=dim)


def _stack(tensors, dim=0):
    return np.stack(tensors, axis=dim)


def _split_with_sizes(x, sizes, dim=0):
    return np.split(x, np.cumsum([int(n) for n in sizes])[:-1], axis=int(dim))


def _split(x, size, dim=0):
    n = np.shape(x)[int(dim)]
    return np.split(x, list(range(int(size), n, int(size))), axis=int(dim))


def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight``: a gather, whose pull scatter-adds (repeated tokens accumulate).
    ``padding_idx`` only changes PyTorch's own gradient (it zeroes that row's), not the
    function, so asd's subgradient keeps the row's true derivative."""
    if scale_grad_by_freq:
        raise UnsupportedError("aten.embedding with scale_grad_by_freq=True (a rescaled "
                               "gradient, not the gradient of the function)")
    if common.is_traced(indices):  # positions of the input: decided, or refused
        return weight[indices]
    return weight[_raw(indices).astype(np.intp)]


def _full_like(fill: float | None):
    """``full_like`` and friends: a constant of ``x``'s shape, whatever ``x``'s values, in
    ``x``'s array library (a torch tensor on its device on the native path)."""
    def like(x, *args, dtype=None, **_):
        value = args[0] if fill is None else fill
        raw = getattr(x, "value", x)
        if isinstance(raw, torch.Tensor):
            target = raw.dtype if dtype is None else dtype
            return torch.full(tuple(raw.shape), value, device=raw.device,
                              dtype=torch.float32 if target in HALF else target)
        np_dtype = _np_dtype(dtype) if dtype is not None else _raw(x).dtype
        return np.full(np.shape(x), value, dtype=np_dtype)

    return like


def _dtype_of(x):
    """The dtype of a (traced) tensor or array: a torch dtype or a numpy dtype."""
    raw = getattr(x, "value", x)
    return raw.dtype if isinstance(raw, torch.Tensor) else backend.numpy_dtype(x)


def _copy(dst, src, non_blocking=False):
    """``dst.copy_(src)`` (how ``h[:, 0] = 0.0`` and ``zero_()`` reach the graph) as the value
    it leaves: ``src`` broadcast to ``dst``'s shape, in ``dst``'s dtype; ``dst``'s old
    values are overwritten, so no derivative flows to them."""
    shape, dtype = tuple(np.shape(dst)), _dtype_of(dst)
    if not common.is_traced(src):         # a constant written in: PyTorch builds it
        raw = src if isinstance(src, torch.Tensor) else torch.as_tensor(np.asarray(src))
        like = getattr(dst, "value", dst)
        if isinstance(like, torch.Tensor):
            return raw.to(device=like.device, dtype=dtype).expand(shape).clone()
        return _to_numpy(raw.expand(shape).clone()).astype(dtype)
    out = asd.broadcast_to(src, shape) if _on_torch(src) else common.broadcast(src, shape)
    if _dtype_of(out) != dtype:
        out = _to_copy(out, dtype) if isinstance(dtype, torch.dtype) else out.astype(dtype)
    return out


def _argmax_or_min(np_fn):
    """``argmax``/``argmin``: positions, piecewise constant in ``x``. As in asd's numpy
    semantics they may be used as indices or behind ``detach``; used as numbers in the
    differentiated output they raise `asd.NotLipschitzError`."""
    def arg(x, dim=None, keepdim=False):
        if dim is None:
            out = np_fn(x)
            return np.reshape(out, (1,) * np.ndim(x)) if keepdim else out
        out = np_fn(x, axis=int(dim))
        return np.expand_dims(out, int(dim)) if keepdim else out

    return arg


def _item(x):
    """``.item()`` (``aten._local_scalar_dense``): a Python number. Of a constant (an index
    tensor, an integer argument) it is that number; of an integer computed from the input
    (``argmax(x).item()``) it stays asd's discrete value; of a floating value computed from
    the differentiated input it would fall out of the program (PyTorch's autograd drops it
    too), so it is refused, as asd refuses ``float()`` of a traced value."""
    if not common.is_traced(x):
        return _raw(x).item()
    if np.issubdtype(np.dtype(backend.numpy_dtype(x)), np.integer):
        return x
    raise TracerBoolError(
        ".item() of a value computed from the differentiated inputs: PyTorch returns a "
        "Python number that autograd no longer sees, so its derivative would be dropped. "
        "Keep it a tensor (x[0] instead of x[0].item()), or write x[0].detach() if it is a "
        "constant by intent.")


def _index_select(x, dim, index):
    return x[(slice(None),) * (int(dim) % max(np.ndim(x), 1)) + (index,)]


def _torch_value(a) -> torch.Tensor:
    """The values of a (traced) array as a CPU torch tensor (for PyTorch's own factorization
    at the point)."""
    raw = getattr(a, "value", a)
    return raw.detach().cpu() if isinstance(raw, torch.Tensor) else torch.from_numpy(
        np.ascontiguousarray(_raw(a)))


def _signs(mine, theirs: torch.Tensor) -> np.ndarray:
    """Per column of the vectors ``mine`` (asd's: numpy's signs at the point), the sign that
    makes them PyTorch's ``theirs``: both are one basis up to a sign per simple value, so
    the flip is a constant and the derivative that of PyTorch's vectors."""
    dots = np.sum(_raw(mine) * theirs.numpy(), axis=-2)
    return np.where(dots < 0, -1.0, 1.0).astype(_raw(mine).dtype)


def _svd(a, full_matrices=True, compute_uv=True, used=None):
    """``torch.linalg.svd`` through numpy.linalg.svd's rules: singular values everywhere,
    vectors where the singular values are simple and nonzero (refused elsewhere), each pair
    flipped to PyTorch's sign at the point; vectors nobody reads are not computed (their rule
    refuses repeated values, which the values alone do not). A batch of matrices goes to
    the library as it is (which refuses it where it takes one matrix only)."""
    if not compute_uv or (used is not None and not (used[0] or used[2])):
        return [NotComputed("U of svd"), np.linalg.svd(a, compute_uv=False),
                NotComputed("Vh of svd")]
    u, s, vh = np.linalg.svd(a, full_matrices=bool(full_matrices))
    ut = torch.linalg.svd(_torch_value(a), full_matrices=bool(full_matrices))[0]
    d = _signs(u, ut)
    return [u * d[..., None, :], s, vh * d[..., :, None]]


def _svd_old(x, some=True, compute_uv=True, used=None):
    """``torch.svd``: ``(U, S, V)`` with V, not its transpose."""
    if not compute_uv:
        raise UnsupportedError("torch.svd with compute_uv=False (zero-filled vectors); use "
                               "torch.linalg.svdvals")
    u, s, vh = _svd(x, not some, used=used)
    return [u, s, vh if isinstance(vh, NotComputed) else np.swapaxes(vh, -1, -2)]


def _eigh(a, uplo="L", compute_v=True, used=None):
    """``torch.linalg.eigh`` through numpy.linalg.eigh's rules (eigenvalues everywhere by the
    spectral rule, eigenvectors where the eigenvalues are simple and read), reading the
    ``uplo`` triangle as both do, each vector flipped to PyTorch's sign at the point."""
    if not compute_v or (used is not None and not used[1]):
        return [np.linalg.eigvalsh(a, UPLO=uplo), NotComputed("the vectors of eigvalsh")]
    w, v = np.linalg.eigh(a, UPLO=uplo)
    d = _signs(v, torch.linalg.eigh(_torch_value(a), UPLO=uplo)[1])
    return [w, v * d[..., None, :]]


def _gelu(x, approximate="none"):
    """GELU: ``x Φ(x)`` exactly (through ``scipy.special.erf``), or its tanh approximation."""
    if approximate == "tanh":
        c = float(np.sqrt(2.0 / np.pi))
        return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))
    import scipy.special

    return 0.5 * x * (1.0 + scipy.special.erf(x * float(1.0 / np.sqrt(2.0))))


def _group_norm(x, w, b, n, c, hw, groups, eps):
    """Group normalization of the batch's own statistics (a deterministic function of the
    input, whatever the mode); PyTorch's saved mean and rstd are not computed."""
    shape = np.shape(x)
    g = np.reshape(x, (int(n), int(groups), -1))
    centred = g - np.mean(g, axis=2, keepdims=True)
    out = centred / np.sqrt(np.mean(centred * centred, axis=2, keepdims=True) + eps)
    out = np.reshape(out, shape)
    channel = (1, int(c)) + (1,) * (len(shape) - 2)
    if w is not None:
        out = out * np.reshape(w, channel)
    if b is not None:
        out = out + np.reshape(b, channel)
    return [out, NotComputed("group_norm's mean"), NotComputed("group_norm's rstd")]


def _batch_norm_no_stats(x, w, b, training, momentum, eps):
    """``_native_batch_norm_legit.no_stats``: normalization by the batch's statistics with no
    running statistics to update (instance norm): a deterministic function of the input."""
    axes = (0,) + tuple(range(2, np.ndim(x)))
    centred = x - np.mean(x, axis=axes, keepdims=True)
    out = centred / np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True) + eps)
    channel = (1, -1) + (1,) * (np.ndim(x) - 2)
    if w is not None:
        out = out * np.reshape(w, channel)
    if b is not None:
        out = out + np.reshape(b, channel)
    return [out, NotComputed("batch norm's mean"), NotComputed("batch norm's rstd")]


def _index_put(x, indices, values, accumulate=False):
    """``x[indices] = values`` (or ``+=`` with ``accumulate``), as a new value."""
    key = tuple(slice(None) if i is None else _static(i, "aten.index_put").astype(np.intp)
                if np.issubdtype(_raw(i).dtype, np.integer) else _static(i, "aten.index_put")
                for i in indices)
    if accumulate:
        return _lib("add_at")(x, key, values)   # functional, repeated positions add up
    return _lib("setitem")(x, key, values)


def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    """``x`` with ``x[start:end:step]`` along ``dim`` replaced by ``src``, on a copy."""
    key = (slice(None),) * (int(dim) % np.ndim(x)) + (slice(start, end, step),)
    return _lib("setitem")(x, key, src)   # functional: x may be a constant, src traced


def _cdist(x1, x2, p=2.0, compute_mode=None):
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    if p == 2.0:
        return np.linalg.norm(diff, axis=-1)
    if p == 1.0:
        return np.sum(np.abs(diff), axis=-1)
    if p == float("inf"):
        return np.max(np.abs(diff), axis=-1)
    raise UnsupportedError(f"cdist with p={p}")


def _gather(x, dim, index, sparse_grad=False):
    """``torch.gather``: ``index`` may be smaller than ``x`` along the other axes, which
    ``take_along_axis`` does not allow, so ``x`` is cut to its extent there first."""
    dim = int(dim) % np.ndim(x)
    cut = tuple(slice(None) if a == dim else slice(0, n)
                for a, n in enumerate(np.shape(index)))
    if common.is_traced(index):  # positions of the input: decided where asd can, else read
        try:
            return np.take_along_axis(x[cut], index, axis=dim)
        except NotLipschitzError:  # reshaped positions (argmax with keepdim)
            index = _static(index, "torch.gather")
    return np.take_along_axis(x[cut], _raw(index).astype(np.intp), axis=dim)


def _take_along_dim(x, indices, dim=None):
    """``torch.take_along_dim``: numpy's take_along_axis (its decomposition wraps the
    positions with ``%``, which would hide argsort's positions from asd's tie decision);
    ``dim`` None reads the flattened input."""
    if dim is None and np.ndim(x) == 1 and np.ndim(indices) == 1:
        dim = 0
    if dim is None:
        return np.take_along_axis(np.reshape(x, (-1,)), np.reshape(indices, (-1,)), axis=0)
    dim = int(dim) % np.ndim(x)
    if common.is_traced(indices):
        return np.take_along_axis(x, indices, axis=dim)
    return np.take_along_axis(x, _raw(indices).astype(np.intp), axis=dim)


def _static(index, what: str):
    """An index's numbers: a constant's, or positions computed from a differentiated input
    (argmax, argsort) where no tie reaches them (constant near the point, read as a guard:
    `Tracer._locally_constant`); at a tie they jump, and reading them would fix one
    permutation silently: refused, with the fix."""
    if not common.is_traced(index):
        return _raw(index)
    value = index._locally_constant(what)
    if value is None:
        raise NotLipschitzError(
            f"{what} with values computed from a differentiated input as positions: they "
            "jump where its entries tie, and this operation would read them as constants. "
            "Detach them (.detach()) if they are constants by intent, or index with them "
            "directly (x[idx], torch.gather), where asd decides the ties.")
    return np.asarray(value)


def _centred(x, dim, keepdim):
    axes = _dims(dim, np.ndim(x)) or tuple(range(np.ndim(x)))
    count = int(np.prod([np.shape(x)[a] for a in axes]))
    return x - np.mean(x, axis=axes, keepdims=True), axes, count


def _var(x, dim=None, correction=None, keepdim=False):
    ddof = 1 if correction is None else float(correction)
    c, axes, count = _centred(x, dim, keepdim)
    return np.sum(c * c, axis=axes, keepdims=keepdim) / (count - ddof)


def _std(x, dim=None, correction=None, keepdim=False):
    """The norm of the centred entries over ``sqrt(n - ddof)``: Lipschitz at zero variance
    (the norm's rule decides it along the ray), unlike ``sqrt(var)``."""
    ddof = 1 if correction is None else float(correction)
    c, axes, count = _centred(x, dim, keepdim)
    rest = tuple(a for a in range(np.ndim(x)) if a not in axes)
    moved = np.reshape(np.transpose(c, rest + axes), tuple(np.shape(x)[a] for a in rest)
                       + (-1,))
    out = np.linalg.norm(moved, axis=-1) / float(np.sqrt(count - ddof))
    if keepdim:
        out = np.reshape(out, tuple(1 if a in axes else n for a, n in enumerate(np.shape(x))))
    return out


def _erf(name: str):
    def special(x):
        import scipy.special

        return getattr(scipy.special, name)(x)

    special.__name__ = name
    return special


# ----- step functions and their relatives: numpy's spellings, PyTorch's semantics -----
# floor, ceil, trunc, round, remainder and floor division go to asd's jump rules through
# numpy's names (a locally constant step has derivative 0; a jump the output sees is refused
# with NotLipschitzError), on numpy and on torch values alike.

def _round(x, decimals=0):
    """``torch.round`` (half to even, as numpy's): with ``decimals``, PyTorch scales by
    ``10**decimals`` (divides for negative ``decimals``), rounds and scales back, as numpy."""
    return np.round(x) if int(decimals) == 0 else np.round(x, int(decimals))


def _nan_free(c, fill: float):
    """A constant operand of fmax/fmin with its NaN entries replaced by ``fill`` (-inf for
    fmax, inf for fmin): PyTorch's fmax takes the other operand there, as ``maximum`` with
    -inf does. A traced operand stays (asd refuses NaN in it, with a NonFiniteError)."""
    if common.is_traced(c):
        return c
    raw = getattr(c, "value", c)
    if isinstance(raw, torch.Tensor):
        return torch.nan_to_num(raw, nan=fill, posinf=math.inf, neginf=-math.inf) \
            if raw.is_floating_point() else raw
    raw = np.asarray(raw)
    return np.where(np.isnan(raw), raw.dtype.type(fill), raw) \
        if np.issubdtype(raw.dtype, np.floating) else raw


def _finite_operands(name: str, *xs) -> None:
    """asd's fmax/fmin differentiate finite values (NaN in a traced operand is refused):
    tested here on the values at the point, whatever their library."""
    for x in xs:
        if common.is_traced(x):
            raw = x.value
            finite = bool(torch.isfinite(raw).all()) if isinstance(raw, torch.Tensor) \
                else bool(np.all(np.isfinite(raw)))
            if not finite:
                raise NonFiniteError(
                    f"aten.{name} of a value holding NaN or infinite entries: asd "
                    f"differentiates finite values, where {name} is maximum/minimum. Keep "
                    "the values finite before this call (torch.nan_to_num).")


def _fmax(a, b):
    """``torch.fmax``: the maximum, ignoring a NaN of either side: asd's ``maximum`` of
    finite traced values (its ties decided along the ray); a constant's NaN entries take
    the other side."""
    _finite_operands("fmax", a, b)
    return np.maximum(_nan_free(a, -math.inf), _nan_free(b, -math.inf))


def _fmin(a, b):
    """``torch.fmin``: as `_fmax`, with the minimum."""
    _finite_operands("fmin", a, b)
    return np.minimum(_nan_free(a, math.inf), _nan_free(b, math.inf))


def _as_operand(c, like):
    """A Python number beside a traced numpy array, as an array of its dtype: PyTorch
    computes ``c % x`` in ``x``'s dtype, and a 0-d float64 array would widen float32 (only
    Python numbers themselves are weak in numpy's promotion)."""
    if isinstance(c, int | float) and common.is_traced(like) and not _on_torch(like):
        return np.asarray(c, dtype=backend.numpy_dtype(like))
    return c


def _remainder(a, b):
    """``torch.remainder`` (all overloads, ``c % x`` too): numpy's, the divisor's sign."""
    return np.remainder(_as_operand(a, b), b)


def _floor_divide(a, b):
    """``torch.floor_divide`` and ``div(rounding_mode='floor')``: numpy's algorithm, which
    PyTorch's is."""
    return np.floor_divide(_as_operand(a, b), b)


def _fmod_value(x, y):
    """C's ``fmod`` (PyTorch's and numpy's, exact) on numpy or torch values."""
    if is_host(x) and is_host(y):
        return np.fmod(x, y)
    _, (x, y) = _operands(x, y)
    if not isinstance(x, torch.Tensor):
        raise _numpy_only("fmod on this array library")
    return torch.fmod(x, y)


def fmod_rule(xs, dxs):
    """``fmod(x, y) = x - y trunc(x / y)``, given ``t = x / y`` as a third input whose
    tangent (and series) decides the side of a jump. It jumps where ``y`` divides a nonzero
    ``x`` (the exact remainder is 0, so ``t`` is exactly the integer ``q``; not at ``x = 0``,
    where fmod is ``x`` nearby). As ``t`` rises to a ``q > 0`` the value tends to ``y``
    (``t - trunc(t)`` to 1), as it falls to a ``q < 0`` to ``-y``; on the other side it is
    0. Slopes: 1 in ``x``, ``-trunc(t)`` of the side entered in ``y``; the truncated
    quotient comes from the floor quotient (numpy's and PyTorch's exact ``floor_divide``),
    so it agrees with the remainder bit for bit."""
    xp, (x, y, t) = _operands(*xs)
    if xp is np:   # a Python number stays one (weak: a float32 x keeps its dtype)
        x, y, t = (v if isinstance(v, float | int) else np.asarray(v) for v in (x, y, t))
    with np.errstate(divide="ignore", invalid="ignore"):
        ans = xp.asarray(_fmod_value(x, y))
        out = tuple(ans.shape)
        floor_q = xp.floor_divide(x, y)
        q = floor_q + xp.astype((ans != 0) & ((x < 0) != (y < 0)), floor_q.dtype)
        mask = xp.broadcast_to(xp.isfinite(q) & (ans == 0) & (x != 0), out)
    q_b = xp.astype(xp.broadcast_to(q, out), ans.dtype)
    side, on_ray = ray_compare(t, dxs[2], _only(mask, q_b), None, beyond=True)
    y_b = xp.astype(xp.broadcast_to(xp.asarray(y), out), ans.dtype)
    zero = xp.zeros_like(ans)
    below = xp.where(q_b > 0, y_b, zero)     # the limit as t rises to q
    above = xp.where(q_b < 0, -y_b, zero)    # as t falls to q
    record_jump(ans, mask, (below, above), still=mask & (side == 0), still_if_flat=True,
                on_ray=on_ray, crossing=(2,), entered=side)
    below_q, above_q = mask & (side < 0), mask & (side > 0)
    # trunc(t) on the side entered: q - 1 below a positive q, q + 1 above a negative one
    slope = q_b - xp.astype(below_q & (q_b > 0), ans.dtype) \
        + xp.astype(above_q & (q_b < 0), ans.dtype)
    ans = xp.where(below_q, below, xp.where(above_q, above, ans))
    return ans, FanIn(Diagonal(xp.ones_like(ans), tuple(np.shape(x)), out),
                      Diagonal(-slope, tuple(np.shape(y)), out), None)


fmod_p = Primitive("fmod", lambda x, y, t: _fmod_value(x, y), fmod_rule, array_api=True)


def _fmod(x, y):
    """``torch.fmod``: C's fmod (the dividend's sign), through `fmod_p`."""
    if not (common.is_traced(x) or common.is_traced(y)):
        return _fmod_value(_raw(x), _raw(y))
    return fmod_p(x, y, x / y)


def _hypot(a, b):
    """``torch.hypot``: asd's (the 2-norm of the pair: at the origin the gradient of the norm
    along the ray), with numpy's value. On torch tensors with a constant operand the pair is
    stacked here (asd's ``hypot`` reads a constant's dtype through numpy)."""
    if not (_on_torch(a, b) and common.is_traced(a) != common.is_traced(b)):
        return np.hypot(a, b)
    shape = tuple(np.broadcast_shapes(tuple(np.shape(a)), tuple(np.shape(b))))

    def spread(c):
        if common.is_traced(c):
            return c if tuple(np.shape(c)) == shape else asd.broadcast_to(c, shape)
        return torch.as_tensor(c).expand(shape)

    return hypot_pair_p(np.stack([spread(a), spread(b)], axis=-1))


def _diagonal(x, offset=0, dim1=0, dim2=1):
    """``torch.diagonal``: numpy's (the diagonal becomes the last axis in both)."""
    nd = max(np.ndim(x), 1)
    return np.diagonal(x, int(offset), int(dim1) % nd, int(dim2) % nd)


def _kthvalue(x, k, dim=-1, keepdim=False):
    """``torch.kthvalue``: the ``k``-th smallest entry (``k`` from 1) along ``dim`` by asd's
    sort (its ties decided along the ray) and its position (discrete; on torch tensors not
    computed, as for median: a use moves the program to numpy)."""
    dim = int(dim) % max(np.ndim(x), 1)
    n = np.shape(x)[dim] if np.ndim(x) else 1
    if not 1 <= int(k) <= n:
        raise UnsupportedError(f"aten.kthvalue with k={k} out of range for {n} entries")
    if np.ndim(x) == 0:
        return x, np.zeros((), np.int64)
    if _on_torch(x):
        values = _select(np.sort(x, axis=dim), dim, int(k) - 1)
        indices = NotComputed("the indices of aten.kthvalue on torch tensors",
                              numpy_only=True)
    else:
        values, indices = (_select(v, dim, int(k) - 1) for v in _sort(x, dim))
    if keepdim:
        values = _unsqueeze(values, dim)
        indices = indices if isinstance(indices, NotComputed) else np.expand_dims(indices, dim)
    return values, indices


def _any(x, dim=None, keepdim=False):
    return np.any(x, axis=_dims(dim, np.ndim(x)), keepdims=keepdim)


ATEN: dict[str, Callable] = {
    # arithmetic
    "add": _add, "sub": _sub, "rsub": lambda a, b, alpha=1: _sub(b, a, alpha),
    "mul": operator.mul, "div": _div, "neg": operator.neg, "pow": _pow,
    "square": lambda x: x * x, "reciprocal": lambda x: 1.0 / x,
    "matmul": operator.matmul, "mm": operator.matmul, "bmm": operator.matmul,
    "mv": operator.matmul, "dot": operator.matmul, "addmm": _addmm, "linear": _linear,
    "trace": _trace,
    # elementwise functions
    "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
    "sigmoid": lambda x: _lib("sigmoid")(x),
    # piecewise activations
    "relu": lambda x: asd.relu(x),
    "leaky_relu": _leaky_relu, "hardtanh": _hardtanh, "relu6": _relu6, "elu": _elu,
    "clamp": _clamp, "clip": _clamp, "clamp_min": lambda x, lo: np.clip(x, lo, None),
    "clamp_max": lambda x, hi: np.clip(x, None, hi),
    "maximum": np.maximum, "minimum": np.minimum, "where": _where,
    "gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le,
    "eq": operator.eq, "ne": operator.ne,
    # reductions and order statistics
    "sum": _reduce(np.sum), "mean": _reduce(np.mean), "amax": _reduce(np.max),
    "amin": _reduce(np.min), "max": _max_or_min(np.max, np.argmax),
    "min": _max_or_min(np.min, np.argmin), "sort": _sort, "topk": _topk, "median": _median,
    "linalg_vector_norm": _vector_norm, "norm": _norm_p, "linalg_norm": _linalg_norm,
    # nn
    "scaled_dot_product_attention": _sdpa,
    "_scaled_dot_product_flash_attention": _sdpa_flash,
    "_scaled_dot_product_efficient_attention": _sdpa_efficient,
    "_scaled_dot_product_cudnn_attention": _sdpa_cudnn,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_cpu,
    "softmax": _softmax, "_softmax": _softmax, "log_softmax": _log_softmax,
    "_log_softmax": _log_softmax, "cross_entropy_loss": _cross_entropy,
    "nll_loss": _nll_loss, "nll_loss_forward": lambda *a: (_nll_loss(*a), None),
    "mse_loss": _mse, "conv1d": _conv, "conv2d": _conv, "convolution": _convolution,
    "max_pool1d": _max_pool(1), "max_pool2d": _max_pool(2),
    "max_pool1d_with_indices": _max_pool_with_indices(1),
    "max_pool2d_with_indices": _max_pool_with_indices(2),
    "avg_pool1d": _avg_pool(1), "avg_pool2d": _avg_pool(2),
    "_native_batch_norm_legit_no_training": _batch_norm_eval, "batch_norm": _batch_norm,
    "dropout": _dropout, "layer_norm": _layer_norm,
    # structure
    "view": _view, "reshape": _view, "_unsafe_view": _view, "flatten": _flatten,
    "unsqueeze": _unsqueeze, "squeeze": _squeeze, "permute": _permute,
    "transpose": _transpose, "t": _t, "select": _select, "slice": _slice, "index": _index,
    "expand": _expand, "broadcast_tensors": _broadcast_tensors, "cat": _cat, "stack": _stack,
    "clone": _identity, "contiguous": _identity, "alias": _identity,
    "lift_fresh_copy": _identity, "_to_copy": _to_copy, "to": _to_copy,
    "detach": lambda x: asd.stop_gradient(x),
    "split_with_sizes": _split_with_sizes, "split": _split, "embedding": _embedding,
    "logical_not": np.logical_not, "any": _any, "gelu": _gelu,
    # more elementwise functions, reductions and layers
    "expm1": np.expm1, "log1p": np.log1p, "log2": np.log2, "log10": np.log10,
    "exp2": np.exp2, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "atan2": np.arctan2,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "erf": _erf("erf"), "erfc": _erf("erfc"),
    "erfinv": _erf("erfinv"),
    "cumsum": lambda x, dim, dtype=None: np.cumsum(x, axis=int(dim)),
    "cumprod": lambda x, dim, dtype=None: np.cumprod(x, axis=int(dim)),
    "prod": lambda x, dim=None, keepdim=False, dtype=None: np.prod(
        x, axis=None if dim is None else int(dim), keepdims=keepdim),
    "var": _var, "std": _std, "_cdist_forward": _cdist,
    "flip": lambda x, dims: np.flip(x, axis=tuple(int(d) for d in dims)),
    "repeat": lambda x, repeats: np.tile(x, tuple(int(r) for r in repeats)),
    "gather": _gather, "take_along_dim": _take_along_dim,
    "index_put": _index_put, "slice_scatter": _slice_scatter,
    "copy": _copy, "index_select": _index_select, "_assert_tensor_metadata": _no_value,
    "sign": np.sign, "sgn": np.sign, "argmax": _argmax_or_min(np.argmax),
    "argmin": _argmax_or_min(np.argmin),
    "_local_scalar_dense": _item,
    # torch's decompositions of linalg_svd drop full_matrices and compute_uv: kept whole
    "linalg_svd": lambda a, full_matrices=True, driver=None, used=None: _svd(
        a, full_matrices, used=used),
    "linalg_svdvals": lambda a, driver=None: np.linalg.svd(a, compute_uv=False),
    "_linalg_svd": lambda a, full_matrices=True, compute_uv=True, driver=None, used=None: _svd(
        a, full_matrices, compute_uv, used),
    "svd": _svd_old, "linalg_eigh": lambda a, UPLO="L", used=None: _eigh(a, UPLO, used=used),
    "linalg_eigvalsh": lambda a, UPLO="L": np.linalg.eigvalsh(a, UPLO=UPLO),
    "_linalg_eigh": _eigh,
    "native_group_norm": _group_norm, "_native_batch_norm_legit.no_stats":
        _batch_norm_no_stats,
    "_adaptive_avg_pool2d": _adaptive_avg_pool, "adaptive_avg_pool2d": _adaptive_avg_pool,
    "adaptive_max_pool2d": _adaptive_max_pool,
    "upsample_bilinear2d": _upsample_bilinear, "upsample_nearest2d": _upsample_nearest,
    "constant_pad_nd": _constant_pad, "full_like": _full_like(None),
    "zeros_like": _full_like(0.0), "ones_like": _full_like(1.0), "empty_like": _full_like(0.0),
    # step functions (asd's jump rules) and their relatives
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "fix": np.trunc, "round": _round,
    "frac": lambda x: x - np.trunc(x), "remainder": _remainder, "fmod": _fmod,
    "floor_divide": _floor_divide, "fmax": _fmax, "fmin": _fmin, "hypot": _hypot,
    # & | ^ ~: numpy's, logical on booleans (comparisons, their ties decided along the ray)
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "bitwise_not": np.bitwise_not,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "diagonal": _diagonal, "kthvalue": _kthvalue,
}
"""ATen operator name (the overload packet, e.g. ``relu`` for ``aten.relu.default``) ->
handler on numpy or traced arrays. Extend it to teach the importer a new operation."""

USED = {"linalg_svd", "_linalg_svd", "svd", "linalg_eigh", "_linalg_eigh"}
"""Operations whose handler is told which results the graph reads (``used=``, by the
``getitem`` nodes after it): it skips the others (singular and eigen vectors, whose rules
refuse repeated values that the values alone handle)."""

ATEN["sort.stable"] = _sort_stable
ATEN["median.dim"] = _median_dim
