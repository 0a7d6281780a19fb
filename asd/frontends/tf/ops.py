"""The TensorFlow op table: how each operation of a ``tf.function`` graph maps onto asd's library.

`OPS` maps an op type (``Relu``, ``Conv2D``...) to a handler on numpy or traced arrays: the
op's inputs positionally, its attributes as keywords. Extend it to teach the importer an
operation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

import asd
from asd.errors import NotLipschitzError, UnsupportedError
from asd.frontends import common

# ----- helpers -----


def _lib(name: str) -> Callable:
    return common.library_function(name, "TensorFlow operation")


def _raw(x):
    return common.numpy_value(x)






def _transpose(x, perm):
    perm = tuple(int(a) for a in perm)
    return x if perm == tuple(range(len(perm))) else np.transpose(x, perm)


def _ints(a) -> tuple[int, ...]:
    return tuple(int(i) for i in np.asarray(_raw(a)).reshape(-1))


def _axes(axis, ndim: int) -> tuple[int, ...]:
    return tuple(sorted({a % max(ndim, 1) for a in _ints(axis)}))


def _str(s) -> str:
    return s.decode() if isinstance(s, bytes) else str(s)


def _constant_operand(x, what: str):
    if common.is_traced(x):
        raise UnsupportedError(f"{what} computed from the differentiated inputs; compute it "
                               "from constants (shapes, Python numbers) instead")
    return _raw(x)


# ----- the op table: TensorFlow op type -> handler on numpy / traced arrays -----


def _bias_add(x, b, *, data_format=b"NHWC", **_):
    if _str(data_format).startswith("NC") and np.ndim(x) > 2:
        return x + b.reshape((-1,) + (1,) * (np.ndim(x) - 2))
    return x + b


def _matmul(a, b, *, transpose_a=False, transpose_b=False, adj_x=False, adj_y=False, **_):
    if transpose_a or adj_x:
        a = np.swapaxes(a, -1, -2)
    if transpose_b or adj_y:
        b = np.swapaxes(b, -1, -2)
    return a @ b


def _einsum(*xs, equation, **_):
    return np.einsum(_str(equation), *xs)


def _real_div(a, b, **_):
    return a / b


def _div_no_nan(a, b, **_):
    """``a / b``, 0 where ``b == 0``: a jump at ``b = 0``, so ``b`` must be a constant (Keras
    divides a loss sum by the constant sample count this way)."""
    b = _raw(b) if not common.is_traced(b) else None
    if b is None:
        raise NotLipschitzError("DivNoNan with a differentiated divisor: it jumps to 0 where the "
                                "divisor is 0. Use tf.math.divide (RealDiv) instead.")
    return a * np.where(b == 0, 0.0, 1.0 / np.where(b == 0, 1.0, b)).astype(_raw(b).dtype)


def _pow(a, b, **_):
    if not common.is_traced(b):
        b = _raw(b)
        if b.ndim == 0 and float(b) == int(b) and 0 <= int(b) <= 8:
            return a ** int(b)
    return a ** b


def _squared_difference(a, b, **_):
    d = a - b
    return d * d


def _add_n(*xs, **_):
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def _reduce(np_fn):
    def reduce(x, axis, *, keep_dims=False, **_):
        axes = _axes(_constant_operand(axis, "a reduction's axes"), np.ndim(x))
        return np_fn(x, axis=axes, keepdims=bool(keep_dims)) if axes else x

    return reduce


def _argminmax(np_fn):
    def arg(x, axis, *, output_type=tf.int64, **_):
        index = np_fn(x, axis=int(_raw(axis)))  # traced: discrete, using it as a number raises
        return index if common.is_traced(index) else np.asarray(index).astype(
            tf.as_dtype(output_type).as_numpy_dtype)

    return arg


def _select(cond, a, b, **_):
    if np.ndim(cond) == 1 and np.ndim(a) > 1 and not common.is_traced(cond):   # Select on rows
        cond = _raw(cond).reshape((-1,) + (1,) * (np.ndim(a) - 1))
    return _lib("where")(cond, a, b)


def _clip(x, lo, hi, **_):
    return np.clip(x, lo, hi)


def _leaky_relu(x, *, alpha=0.2, **_):
    return _lib("leaky_relu")(x, float(alpha))


def _selu(x, **_):
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return scale * _lib("elu")(x, alpha)


def _softsign(x, **_):
    return x / (1.0 + np.abs(x))


def _softmax(x, **_):
    return _lib("softmax")(x, axis=-1)


def _log_softmax(x, **_):
    return _lib("log_softmax")(x, axis=-1)


def _sparse_xent(logits, labels, **_):
    """Per-example ``-log softmax(logits)[label]``; the second output (TensorFlow's own
    backprop) is not computed."""
    t = _constant_operand(labels, "SparseSoftmaxCrossEntropyWithLogits labels").astype(int)
    logp = _lib("log_softmax")(logits, axis=-1)
    return [-logp[np.arange(t.shape[0]), t], NotComputed(
        "the backprop output of SparseSoftmaxCrossEntropyWithLogits")]


def _xent(logits, labels, **_):
    logp = _lib("log_softmax")(logits, axis=-1)
    return [-(labels * logp).sum(axis=-1), NotComputed(
        "the backprop output of SoftmaxCrossEntropyWithLogits")]


def _sort_desc(x, axis):
    return _flip(np.sort(x, axis=axis), axis)


def _top_k(x, k, *, sorted=True, **_):  # noqa: A002
    k = int(_raw(k))
    values = _sort_desc(x, -1)[..., :k]
    order = np.argsort(x, axis=-1, kind="stable")  # traced: discrete, refused as a number
    order = order[..., ::-1][..., :k]
    return [values, order if common.is_traced(order) else np.asarray(order).astype(np.int32)]


def _same_pads(size, kernel, stride, dilation):
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _spatial(data_format: str, ndim: int) -> tuple[bool, tuple[int, ...]]:
    channels_last = not data_format.startswith("NC")
    return channels_last, tuple(range(1, ndim - 1)) if channels_last else tuple(range(2, ndim))


def _to_nchw(x, channels_last):
    n = np.ndim(x)
    return _transpose(x, (0, n - 1) + tuple(range(1, n - 1))) if channels_last else x


def _from_nchw(y, channels_last):
    n = np.ndim(y)
    return _transpose(y, (0,) + tuple(range(2, n)) + (1,)) if channels_last else y


def _pads(padding, explicit, shape, axes, kernel, strides, dilations):
    padding = _str(padding)
    if padding == "VALID":
        return tuple((0, 0) for _ in axes)
    if padding == "EXPLICIT":
        pairs = np.asarray(explicit, dtype=int).reshape(-1, 2)
        return tuple(tuple(int(p) for p in pairs[a]) for a in axes)
    return tuple(_same_pads(int(shape[a]), k, s, d)
                 for a, k, s, d in zip(axes, kernel, strides, dilations))


def _conv(x, w, *, strides, padding, data_format=b"NHWC", dilations=None,
          explicit_paddings=(), depthwise=False, **_):
    """Conv2D / Conv3D / DepthwiseConv2dNative: TensorFlow's layouts (NHWC data, HWIO
    kernel) moved to asd.conv's (NCHW, OIHW)."""
    fmt = _str(data_format)
    channels_last, axes = _spatial(fmt, np.ndim(x))
    kernel_shape = np.shape(w)[:-2]
    stride = tuple(int(strides[a]) for a in axes)
    dilation = tuple(int(dilations[a]) for a in axes) if dilations else (1,) * len(axes)
    pads = _pads(padding, explicit_paddings, np.shape(x), axes, kernel_shape, stride, dilation)
    nd = len(axes)
    channels = np.shape(x)[-1 if channels_last else 1]
    if depthwise:   # (H, W, C, M) -> (C*M, 1, H, W), one group per input channel
        k = np.shape(w)
        wt = _transpose(w, (nd, nd + 1) + tuple(range(nd))).reshape((k[nd] * k[nd + 1], 1)
                                                                      + tuple(k[:nd]))
        groups = int(channels)
    else:           # (H, W, I, O) -> (O, I, H, W)
        wt = _transpose(w, (nd + 1, nd) + tuple(range(nd)))
        groups = int(channels) // int(np.shape(w)[nd])
    y = asd.conv(_to_nchw(x, channels_last), wt, None, stride, pads, dilation, groups)
    return _from_nchw(y, channels_last)


def _pool(kind: str):
    def pool(x, *, ksize, strides, padding, data_format=b"NHWC", explicit_paddings=(), **_):
        channels_last, axes = _spatial(_str(data_format), np.ndim(x))
        other = [a for a in range(np.ndim(x)) if a not in axes]
        if any(int(ksize[a]) != 1 or int(strides[a]) != 1 for a in other):
            raise UnsupportedError(f"{kind} over the batch or channel axis")
        kernel = tuple(int(ksize[a]) for a in axes)
        stride = tuple(int(strides[a]) for a in axes)
        pads = _pads(padding, explicit_paddings, np.shape(x), axes, kernel, stride,
                     (1,) * len(axes))
        if any(lo != hi for lo, hi in pads):
            raise UnsupportedError(f"{kind} with asymmetric padding {pads} (padding='SAME' on "
                                   "this size); pad the input explicitly or use 'VALID'")
        padding_ = tuple(lo for lo, _ in pads)
        xc = _to_nchw(x, channels_last)
        if kind == "MaxPool":
            if len(axes) not in (1, 2):
                raise UnsupportedError(f"MaxPool over {len(axes)} axes (1 or 2 supported)")
            pool_fn = _lib("max_pool1d" if len(axes) == 1 else "max_pool2d")
            y = pool_fn(xc, kernel, stride=stride, padding=padding_)
        else:
            if any(padding_):   # TensorFlow leaves the padding out of the count
                raise UnsupportedError(f"AvgPool with padding {pads} ('SAME' on this size): "
                                       "asd's average pooling counts padding in; pad "
                                       "explicitly or use 'VALID'")
            y = asd.avg_pool(xc, kernel, stride, 0)
        return _from_nchw(y, channels_last)

    return pool


def _fused_batch_norm(x, scale, offset, mean, var, *, epsilon=1e-3, data_format=b"NHWC",
                      is_training=False, **_):
    if is_training:
        raise UnsupportedError("FusedBatchNorm in training mode (batch statistics); call the "
                               "model with training=False")
    channels_last, _ = _spatial(_str(data_format), np.ndim(x))
    y = asd.batch_norm(_to_nchw(x, channels_last), _constant_operand(mean, "batch norm mean"),
                       _constant_operand(var, "batch norm variance"), scale, offset,
                       float(epsilon))
    return [_from_nchw(y, channels_last)] + [NotComputed("batch norm statistics")] * 5


def _reshape(x, shape, **_):
    return x.reshape(_ints(_constant_operand(shape, "a Reshape's shape")))


def _transpose_op(x, perm, **_):
    return _transpose(x, _ints(_constant_operand(perm, "a Transpose's permutation")))


def _expand_dims(x, axis, **_):
    a = int(_raw(axis)) % (np.ndim(x) + 1)
    return x.reshape(np.shape(x)[:a] + (1,) + np.shape(x)[a:])


def _squeeze(x, *, squeeze_dims=(), **_):
    shape = np.shape(x)
    dims = {int(d) % len(shape) for d in squeeze_dims} if squeeze_dims else {
        i for i, n in enumerate(shape) if n == 1}
    return x.reshape(tuple(n for i, n in enumerate(shape) if i not in dims))


def _strided_slice(x, begin, end, strides, *, begin_mask=0, end_mask=0, ellipsis_mask=0,
                   new_axis_mask=0, shrink_axis_mask=0, **_):
    begin, end, strides = (_ints(_constant_operand(a, "StridedSlice bounds"))
                           for a in (begin, end, strides))
    index: list[Any] = []
    new_axes = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if ellipsis_mask & bit:
            index.append(Ellipsis)
        elif new_axis_mask & bit:
            new_axes.append(i)
            index.append(slice(None, None, None))
        elif shrink_axis_mask & bit:
            index.append(b)
        else:
            index.append(slice(None if begin_mask & bit else b, None if end_mask & bit else e, s))
    if new_axes:   # insert the new axes first, then slice them as whole axes
        x = x.reshape(_with_new_axes(np.shape(x), index, new_axes))
    return x[tuple(index)]


def _with_new_axes(shape, index, new_axes):
    """The shape with size-1 axes where ``index`` has new axes (ellipsis expanded)."""
    out, it = [], iter(shape)
    consumed = sum(1 for k, i in enumerate(index) if i is not Ellipsis and k not in new_axes)
    for k, i in enumerate(index):
        if k in new_axes:
            out.append(1)
        elif i is Ellipsis:
            out.extend(next(it) for _ in range(len(shape) - consumed))
        else:
            out.append(next(it))
    out.extend(it)
    return tuple(out)


def _slice_op(x, begin, size, **_):
    begin, size = _ints(_constant_operand(begin, "Slice bounds")), _ints(size)
    return x[tuple(slice(b, None if n == -1 else b + n) for b, n in zip(begin, size))]


def _concat(*args, **_):
    *xs, axis = args
    return np.concatenate(xs, axis=int(_raw(axis)))


def _pack(*xs, axis=0, **_):
    return np.stack(xs, axis=int(axis))


def _unpack(x, *, num, axis=0, **_):
    axis = int(axis) % np.ndim(x)
    return [x[(slice(None),) * axis + (i,)] for i in range(int(num))]


def _gather(x, indices, axis=0, *, batch_dims=0, **_):
    if int(batch_dims) != 0:
        raise UnsupportedError(f"GatherV2 with batch_dims={batch_dims}")
    if common.is_traced(indices):
        raise NotLipschitzError("GatherV2 at positions computed from the differentiated input "
                                "(e.g. x[argmax(x)]): the position jumps where values tie. Use "
                                "a reduction such as tf.reduce_max instead.")
    return np.take(x, _raw(indices), axis=int(_raw(axis)))


def _pad(x, paddings, constant_values=0.0, **_):
    pads = tuple((int(lo), int(hi)) for lo, hi in np.asarray(_raw(paddings)))
    if common.is_traced(constant_values) or float(_raw(constant_values)) != 0.0:
        raise UnsupportedError("Pad with a nonzero or differentiated padding value")
    return _lib("pad")(x, pads)


def _tile(x, multiples, **_):
    reps = _ints(_constant_operand(multiples, "Tile multiples"))
    shape = np.shape(x)
    spread = x.reshape(tuple(v for n in shape for v in (1, n)))
    full = common.broadcast(spread, tuple(v for r, n in zip(reps, shape) for v in (r, n)))
    return full.reshape(tuple(r * n for r, n in zip(reps, shape)))


def _broadcast_to(x, shape, **_):
    return common.broadcast(x, _ints(shape))


def _cast(x, *, DstT, **_):
    new = np.dtype(tf.as_dtype(DstT).as_numpy_dtype)
    if np.issubdtype(new, np.floating):
        return x if np.result_type(_raw(x)) == new else x.astype(new)
    raise UnsupportedError(f"Cast to {new} of a differentiated value (a step function: "
                           "rounding to integers or booleans)")


def _flip(x, axis: int):
    return x[(slice(None),) * (axis % np.ndim(x)) + (slice(None, None, -1),)]


def _cumsum(x, axis, *, exclusive=False, reverse=False, **_):
    a = int(_constant_operand(axis, "Cumsum's axis"))
    y = np.cumsum(_flip(x, a) if reverse else x, axis=a)
    if exclusive:
        y = y - (_flip(x, a) if reverse else x)
    return _flip(y, a) if reverse else y


def _identity(x, **_):
    return x


def _identity_n(*xs, **_):
    return list(xs)


def _special(name: str) -> Callable:
    """A scipy.special function (its rule loads when a traced array first meets it)."""
    import scipy.special

    return getattr(scipy.special, name)


def _plain(fn: Callable) -> Callable:
    """A handler for an op whose attributes (``T``...) do not change the math."""

    def handler(*args, **_):
        return fn(*args)

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


class NotComputed:
    """An output asd does not compute (TensorFlow's own backprop beside a loss, batch norm's
    saved statistics). Any use raises, so a program that does use it fails loudly."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def _refuse(self, *args, **kwargs):
        raise UnsupportedError(f"{self.what} is not computed by asd's TensorFlow importer; "
                               "write the program with the operation's main result only.")

    __array__ = __array_ufunc__ = __array_function__ = _refuse
    __getitem__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = _refuse
    __len__ = __iter__ = __bool__ = __float__ = __int__ = __index__ = _refuse


OPS: dict[str, Callable] = {
    # arithmetic
    "AddV2": _plain(np.add), "Add": _plain(np.add), "Sub": _plain(np.subtract),
    "Mul": _plain(np.multiply), "RealDiv": _real_div, "Div": _real_div,
    "DivNoNan": _div_no_nan, "Neg": _plain(np.negative), "Square": _plain(lambda x: x * x),
    "Reciprocal": _plain(lambda x: 1.0 / x), "Inv": _plain(lambda x: 1.0 / x),
    "Pow": _pow, "SquaredDifference": _squared_difference, "AddN": _add_n,
    "BiasAdd": _bias_add, "MatMul": _matmul, "BatchMatMulV2": _matmul,
    "BatchMatMulV3": _matmul, "Einsum": _einsum,
    # elementwise
    "Abs": _plain(np.abs), "Exp": _plain(np.exp), "Log": _plain(np.log),
    "Log1p": _plain(np.log1p), "Expm1": _plain(np.expm1), "Sqrt": _plain(np.sqrt),
    "Rsqrt": _plain(lambda x: 1.0 / np.sqrt(x)), "Tanh": _plain(np.tanh),
    "Erf": _plain(lambda x: _special("erf")(x)), "Erfc": _plain(lambda x: _special("erfc")(x)),
    "Sigmoid": _plain(lambda x: _lib("sigmoid")(x)),
    "Softplus": _plain(lambda x: _lib("softplus")(x)), "Softsign": _softsign,
    "Sin": _plain(np.sin), "Cos": _plain(np.cos),
    # piecewise
    "Relu": _plain(lambda x: _lib("relu")(x)), "Relu6": _plain(lambda x: _lib("relu6")(x)),
    "LeakyRelu": _leaky_relu, "Elu": _plain(lambda x: _lib("elu")(x)), "Selu": _selu,
    "Maximum": _plain(lambda a, b: _lib("maximum")(a, b)),
    "Minimum": _plain(lambda a, b: _lib("minimum")(a, b)),
    "ClipByValue": _clip, "Select": _select, "SelectV2": _select,
    "Greater": _plain(np.greater), "GreaterEqual": _plain(np.greater_equal),
    "Less": _plain(np.less), "LessEqual": _plain(np.less_equal),
    "Equal": _plain(np.equal), "NotEqual": _plain(np.not_equal),
    # reductions and order
    "Sum": _reduce(np.sum), "Mean": _reduce(np.mean), "Max": _reduce(np.max),
    "Min": _reduce(np.min), "Prod": _reduce(np.prod), "Cumsum": _cumsum,
    "ArgMax": _argminmax(np.argmax), "ArgMin": _argminmax(np.argmin), "TopKV2": _top_k,
    # nn
    "Softmax": _softmax, "LogSoftmax": _log_softmax,
    "SparseSoftmaxCrossEntropyWithLogits": _sparse_xent,
    "SoftmaxCrossEntropyWithLogits": _xent,
    "Conv2D": _conv, "Conv3D": _conv,
    "DepthwiseConv2dNative": functools.partial(_conv, depthwise=True),
    "MaxPool": _pool("MaxPool"), "AvgPool": _pool("AvgPool"),
    "FusedBatchNormV3": _fused_batch_norm, "FusedBatchNorm": _fused_batch_norm,
    # structure
    "Identity": _identity, "IdentityN": _identity_n, "Snapshot": _identity,
    "PreventGradient": _identity, "EnsureShape": _identity, "CheckNumerics": _identity,
    "StopGradient": _plain(lambda x: asd.stop_gradient(x)),
    "Reshape": _reshape, "Transpose": _transpose_op, "ExpandDims": _expand_dims,
    "Squeeze": _squeeze, "StridedSlice": _strided_slice, "Slice": _slice_op,
    "ConcatV2": _concat, "Pack": _pack, "Unpack": _unpack, "GatherV2": _gather,
    "Pad": _pad, "PadV2": _pad, "Tile": _tile, "BroadcastTo": _broadcast_to, "Cast": _cast,
}
"""TensorFlow op type -> handler on numpy or traced arrays: the op's inputs positionally, its
attributes (``transpose_a``, ``data_format``...) as keywords. Handlers of ops with several
outputs return a list. Extend it to teach the importer an operation."""

LOCALLY_CONSTANT = {"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike", "IsFinite",
                    "IsNan", "IsInf"}
"""Ops whose result does not vary near any finite point (shapes, ``zeros_like``, finiteness
tests): TensorFlow computes them on the plain values and no derivative flows through them."""

VARIABLE_READS = {"ReadVariableOp"}
CALLS = {"PartitionedCall", "StatefulPartitionedCall"}
"""Calls of other graphs (a ``tf.function`` inside the traced one): interpreted recursively."""
SKIPPED = {"NoOp", "Placeholder", "Const", "AssertGuard", "Assert"}

STATE_UPDATES = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}
"""Writes to variables: a layer in training mode (batch normalization's moving statistics,
dropout's seed). asd's program is a function of its inputs, so it would drop the update, and
replay a draw the forward did not make: refused at import."""


def _random(op_type: str) -> bool:
    """Stateful random draws (``tf.random.*``, ``tf.nn.dropout``): evaluated apart from the
    forward, they would give asd another sample than the one the forward used."""
    return (op_type.startswith(("Random", "Stateful", "Rng", "TruncatedNormal",
                                "Multinomial"))
            and op_type not in CALLS)
