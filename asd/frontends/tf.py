"""TensorFlow programs in, correct subgradients out: ``asd.tf.subgrad`` and ``asd.tf.function``.

TensorFlow picks a fixed derivative at every kink (``relu'(0) = 0``, ``maximum`` sends a tie to
its first argument), which does not compose: ``relu(x) - relu(-x)`` is the identity, yet its
``tf.GradientTape`` gradient at 0 is 0. These functions trace the function with
``tf.function`` and interpret the graph's operations with asd's library (below), so the answer
is an element of the Clarke subdifferential.

- ``subgrad(fn, *tensors, argnums=0, seed=None, direction=None)``: ``fn`` is a function or a
  Keras model / layer (or ``tf.Module``) returning a scalar. ``argnums`` is an int or a tuple of
  ints (positions in ``tensors``), or ``'params'`` for the trainable variables ``fn`` reads
  (then the result, and a given ``direction``, are dicts ``{name: tensor}``: a model's
  variables by their Keras path below the model, ``'dense/kernel'``; a function's captured
  model ``mlp`` gives ``'mlp/dense/kernel'``, a captured ``tf.Variable`` ``w`` gives ``'w'``);
  ``'params'`` may also appear inside a tuple. With ``direction=v`` the result is the limiting
  gradient ``lim ∇f(x + δv)``, δ ↓ 0. Results are TF tensors in the inputs' dtype.
- ``value_and_subgrad``: the same with the value.
- ``function(fn, seed=None)``: ``fn`` as a ``tf.custom_gradient`` whose gradient is asd's
  vector-limiting-Jacobian product; ``tf.GradientTape`` on anything built with it gets correct
  subgradients, for the inputs and for the trainable variables ``fn`` reads.
- ``program(fn, *tensors)``: the imported ``asd.Program``.

This module is ``asd.frontends.tf``, published as ``asd.tf``; ``import asd`` does not import
it, so TensorFlow is imported only when ``asd.tf`` is first used.

How a graph becomes an asd program: ``tf.function(fn).get_concrete_function(specs)`` gives the
graph as TensorFlow operations (``Relu``, ``MatMul``, ``BiasAdd``, ``Conv2D``, ``MaxPool``,
``SelectV2``...). `TfProgram` evaluates its operations on numpy or traced arrays, mapping
every one that depends on the differentiated inputs to an asd library function (`OPS`).
Variables are captured resources: ``ReadVariableOp`` reads the value asd is given for a
trainable variable, or the variable's current value for a non-trainable one. A nested
``tf.function`` (``PartitionedCall``, ``StatefulPartitionedCall``) is interpreted
recursively, like JAX's ``pjit``. Operations on constants only (shape arithmetic,
``Const``, ``Fill``) are run by TensorFlow itself: they carry no derivative. An operation
that depends on the differentiated inputs and has no mapping raises `asd.UnsupportedError`
when the program is imported, naming the operation type, the node and the fix; nothing
falls back to TensorFlow's own derivative, which is exactly the fixed choice at a kink that
asd replaces.

``sqrt(reduce_sum(x * x))`` (``tf.norm``) becomes ``asd.norm``: ``sqrt`` alone is not
Lipschitz at 0, the norm is (TensorFlow returns NaN for the gradient of ``tf.norm`` at 0).

Imported programs are cached per input signature and per everything the trace could have
captured: the identity, shape and dtype of the variables, and the values of the Python objects
``fn`` reaches (closure cells, globals it names, default arguments, the attributes of the
objects it is bound to, recursively). Changing a captured Python number retraces; assigning
new values to variables does not need to (they are read on every call).

>>> import tensorflow as tf, asd.tf
>>> f = lambda x: tf.reduce_sum(tf.nn.relu(x) - tf.nn.relu(-x))
>>> asd.tf.subgrad(f, tf.zeros(3))
<tf.Tensor: shape=(3,), dtype=float32, numpy=array([1., 1., 1.], dtype=float32)>
>>> x = tf.Variable(tf.zeros(3))
>>> with tf.GradientTape() as tape:                                   # TensorFlow's own answer
...     y = f(x)
>>> tape.gradient(y, x).numpy()
array([0., 0., 0.], dtype=float32)
>>> g = asd.tf.function(lambda x: tf.nn.relu(x) - tf.nn.relu(-x))
>>> with tf.GradientTape() as tape:
...     y = tf.reduce_sum(g(x))
>>> tape.gradient(y, x).numpy()
array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

import functools
import hashlib
import linecache
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context as _context
from tensorflow.python.eager import execute as _execute

import asd
from asd.errors import (
    ArgumentError,
    ArgumentTypeError,
    NotLipschitzError,
    TracerBoolError,
    UnsupportedError,
)
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
    full = spread + common.zeros(tuple(v for r, n in zip(reps, shape) for v in (r, n)), x)
    return full.reshape(tuple(r * n for r, n in zip(reps, shape)))


def _broadcast_to(x, shape, **_):
    return x + common.zeros(_ints(shape), x)


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


# ----- the importer -----

def _package_dirs() -> tuple[str, ...]:
    """The folders of TensorFlow, Keras and asd: frames there are not the user's source."""
    import keras

    return tuple(os.path.dirname(m.__file__) + os.sep for m in (tf, keras, asd))


def _describe(op) -> str:
    """The node's name and the user's source line that created it."""
    stack = ""
    try:
        skip = _package_dirs()
        user = [f for f in op.traceback if not f.filename.startswith(skip)]
        if user:
            frame = user[-1]
            line = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            stack = f", source {frame.filename}:{frame.lineno}" + (f" `{line}`" if line else "")
    except Exception:  # source locations are a courtesy; never fail on them
        stack = ""
    return f"node '{op.name}'{stack}"


def _attrs(op) -> dict[str, Any]:
    out = {}
    for name in op.node_def.attr:
        if not name.startswith("_"):
            out[name] = op.get_attr(name)
    return out


def _attr_value(op, name: str):
    """An attribute as TensorFlow's eager executor takes it (types as enums, shapes as lists)."""
    v = op.get_attr(name)
    if isinstance(v, tf.DType):
        return v.as_datatype_enum
    if isinstance(v, list):
        return [e.as_datatype_enum if isinstance(e, tf.DType) else e for e in v]
    if hasattr(v, "dim") and hasattr(v, "unknown_rank"):
        return None if v.unknown_rank else [d.size for d in v.dim]
    return v


def _run_tf(op, vals: list) -> list:
    """Run one operation with TensorFlow itself, eagerly, on plain values: how ops on
    constants (shape arithmetic, ``Fill``, ``Range``) are evaluated. No derivative flows
    through them."""
    if op.type == "Const":
        return [tf.make_ndarray(op.get_attr("value"))]
    attrs: list = []
    for name in op.node_def.attr:
        if not name.startswith("_"):
            attrs += [name, _attr_value(op, name)]
    inputs = [tf.constant(np.asarray(v), dtype=t.dtype) for v, t in zip(vals, op.inputs,
                                                                         strict=True)]
    outs = _execute.execute(op.type, len(op.outputs), inputs, tuple(attrs), _context.context())
    return [o.numpy() for o in outs]


class _Variable:
    """A captured variable: its resource placeholder in the graph, its name and its object."""

    __slots__ = ("name", "trainable", "variable")

    def __init__(self, name: str, variable):
        self.name, self.variable = name, variable
        self.trainable = bool(variable.trainable)


class _Body:
    """One graph (the traced function's, or a function it calls) as an interpreter: `check`
    classifies its tensors once, `run` evaluates it on numpy or traced arrays."""

    def __init__(self, graph, library, static: dict | None = None):
        self.graph, self.library = graph, library
        self.operations = graph.get_operations()
        self.inputs = [t.name for t in graph.inputs]
        self.outputs = [t.name for t in graph.outputs]
        self.static: dict[str, Any] = dict(static or {})   # computed once, at import
        self.calls: dict[str, _Body] = {}

    def check(self, live: list[bool]) -> list[bool]:
        """Raise `UnsupportedError` for the first op without a mapping on the differentiated
        path; compute the ops on constants only; return which outputs are live."""
        live_names = {n for n, f in zip(self.inputs, live, strict=True) if f}
        varying = set(self.inputs) - set(self.static)   # inputs change from call to call
        for op in self.operations:
            ins = [t.name for t in op.inputs]
            outs = [t.name for t in op.outputs]
            if op.type in STATE_UPDATES or _random(op.type):
                raise UnsupportedError(
                    f"TensorFlow operation {op.type} ({_describe(op)}) "
                    + ("writes a variable as the function runs" if op.type in STATE_UPDATES
                       else "draws random numbers as the function runs")
                    + " (a layer in training mode: batch normalization updating its statistics, "
                    "dropout drawing its mask). asd's program is a function of its inputs: it "
                    "would differentiate another draw than the forward's. Call the model with "
                    "training=False, or pass the random values in as an input.")
            if op.type == "Placeholder" or not outs:
                continue
            if op.type in CALLS:
                body = self._callee(op)
                outs_live = body.check([i in live_names for i in ins])
                live_names.update(o for o, f in zip(outs, outs_live, strict=True) if f)
                if all(i in self.static for i in ins):
                    self.static.update(zip(outs, body.run([self.static[i] for i in ins]),
                                           strict=True))
                else:
                    varying.update(outs)
                continue
            if any(i in live_names for i in ins) and op.type not in LOCALLY_CONSTANT:
                if op.type in VARIABLE_READS or op.type in OPS:
                    live_names.update(outs)
                    continue
                raise UnsupportedError(
                    f"TensorFlow operation {op.type} has no asd mapping ({_describe(op)}). asd "
                    "never falls back to TensorFlow's own derivative at a kink. Rewrite it with "
                    "a supported operation, or register a handler on numpy/traced arrays: "
                    f"asd.frontends.tf.OPS[{op.type!r}] = fn (the op's inputs positionally, "
                    "its attributes as keywords)."
                )
            if op.type in VARIABLE_READS or any(i in varying or i in live_names for i in ins):
                varying.update(outs)
                continue
            try:   # depends on nothing that changes between calls: computed once, here
                vals = _run_tf(op, [self.static[i] for i in ins])
            except Exception as e:  # raised again, with the node, if the value is ever used
                vals = [_Failed(op, e)] * len(outs)
            self.static.update(zip(outs, vals, strict=True))
        return [o in live_names for o in self.outputs]

    def _callee(self, op) -> _Body:
        body = self.calls.get(op.name)
        if body is None:
            name = op.get_attr("f").name
            for graph in self.library:
                try:
                    function = graph._get_function(name)
                except Exception:  # not registered in this graph's library: try the next
                    function = None
                if function is not None:
                    break
            else:
                raise UnsupportedError(f"TensorFlow {op.type} ({_describe(op)}) calls "
                                       f"{name!r}, which the importer cannot find")
            body = _Body(function.graph, (function.graph, *self.library))
            self.calls[op.name] = body
        return body

    def run(self, values: list) -> list:
        """Evaluate the graph on its inputs' values (numpy or traced arrays)."""
        env: dict[str, Any] = dict(self.static)
        for name, x in zip(self.inputs, values, strict=True):
            env.setdefault(name, x)
        producer: dict[str, Any] = {}
        for op in self.operations:
            outs = [t.name for t in op.outputs]
            if op.type in SKIPPED or not outs or outs[0] in self.static:
                continue
            vals = [env[t.name] for t in op.inputs]
            for v in vals:
                if isinstance(v, _Failed):
                    v.raise_()
            if op.type in CALLS:
                result = self._callee(op).run(vals)
            else:
                result = self._run(op, vals, env, producer)
            for name, value in zip(outs, result, strict=True):
                env[name] = value
                producer[name] = op
        return [env[o] for o in self.outputs]

    def _run(self, op, vals, env, producer) -> list:
        if op.type in VARIABLE_READS:
            return [vals[0]]
        if not any(common.is_traced(v) for v in vals) or op.type in LOCALLY_CONSTANT:
            try:
                return _run_tf(op, [_raw(v) for v in vals])
            except Exception as e:
                raise UnsupportedError(f"TensorFlow could not run {op.type} on constants "
                                       f"({_describe(op)}): {e}") from e
        squares = _sum_of_squares(op, producer) if op.type == "Sqrt" else None
        if squares is not None:
            base, axes, keep = squares
            return [_norm_over(env[base], axes, keep)]
        handler = OPS[op.type]
        try:
            out = handler(*vals, **_attrs(op))
        except asd.ASDError as e:
            raise type(e)(f"{e} [while importing TensorFlow {op.type}, {_describe(op)}]") from e
        return list(out) if len(op.outputs) > 1 else [out]


NO_GRADIENT = {"StopGradient", "ZerosLike", "OnesLike"}
"""Operations through which TensorFlow's tape carries no gradient."""


def _reaching(body: _Body) -> set[str]:
    """The tensors a gradient of the outputs reaches, walking back as the tape does: through
    floating values and variable handles, never through `NO_GRADIENT` operations (a call of
    another graph conservatively passes to all its inputs)."""
    need = set(body.outputs)
    for op in reversed(body.operations):
        if op.type in NO_GRADIENT or not any(t.name in need for t in op.outputs):
            continue
        need.update(t.name for t in op.inputs
                    if t.dtype.is_floating or t.dtype.is_complex or t.dtype == tf.resource)
    return need


class TfProgram:
    """``fn``'s ``tf.function`` graph at example inputs, as a function of numpy (or traced)
    arrays: ``numpy_fn(*inputs, params=None)``; ``params`` maps the trainable variables' names
    to arrays and defaults to their current values (`params`)."""

    def __init__(self, fn: Callable, example: tuple, live: tuple | None = None):
        self.fn = fn
        specs = [tf.TensorSpec(_shape(t), _tf_dtype(t)) for t in example]
        try:   # no autograph: Python control flow stays Python, not tf.cond / tf.while_loop
            self.concrete = tf.function(_callable(fn), autograph=False).get_concrete_function(
                *specs)
        except tf.errors.OperatorNotAllowedInGraphError as e:
            raise TracerBoolError(
                f"Python control flow on a tensor while importing {fn!r} ({e}). A Python "
                "branch at a tie would ignore the direction asd decides ties by: write it with "
                "tf.where, tf.maximum, tf.nn.relu or another mapped operation."
            ) from e
        graph = self.concrete.graph
        self.graph = graph
        names = _variable_names(fn)
        by_handle = {id(v.handle): v for v in self.concrete.variables}
        self.variables: dict[str, _Variable] = {}      # placeholder tensor name -> variable
        captured: dict[str, np.ndarray] = {}           # placeholder tensor name -> constant
        used: set[str] = set()
        for external, internal in graph.captures:
            var = by_handle.get(id(external))
            if var is None:
                if external.dtype == tf.resource:
                    raise UnsupportedError(f"TensorFlow resource capture {internal.name} that "
                                           "is not a variable (a lookup table or dataset)")
                captured[internal.name] = external.numpy()
                continue
            name = names.get(id(var)) or var.name.split(":")[0]
            base, k = name, 1
            while name in used:
                name, k = f"{base}_{k}", k + 1
            used.add(name)
            self.variables[internal.name] = _Variable(name, var)
        self.param_names = [v.name for v in self.variables.values() if v.trainable]
        self.body = _Body(graph, (graph,), captured)
        self.inputs = self.body.inputs[:len(example)]
        flat_out = tf.nest.flatten(self.concrete.structured_outputs, expand_composites=True)
        self.outputs = [o.name if tf.is_tensor(o) else o for o in flat_out]
        self.body.outputs = [o for o in self.outputs if isinstance(o, str)]
        nums = range(len(example)) if live is None else [a for a in live if a != "params"]
        live_args = {i for i in nums
                     if np.dtype(_tf_dtype(example[i]).as_numpy_dtype).kind == "f"}
        with_params = live is None or "params" in live
        self.body.check([i in live_args if i < len(example) else
                         (with_params and n in self.variables and self.variables[n].trainable)
                         for i, n in enumerate(self.body.inputs)])
        reaching = _reaching(self.body)
        self.reached_inputs = [name in reaching for name in self.inputs]
        """Which inputs a gradient of the outputs reaches (`function` gives the others None,
        as the tape does)."""
        self.reached_variables = {v.name for name, v in self.variables.items()
                                  if name in reaching}
        """The variables read on a path a gradient takes (not only behind StopGradient)."""

    def params(self) -> dict[str, np.ndarray]:
        """Current values of the trainable variables ``fn`` reads, by name."""
        return {v.name: v.variable.numpy() for v in self.variables.values() if v.trainable}

    def numpy_fn(self, *inputs, params: dict | None = None):
        """Evaluate the program; ``params`` defaults to the variables' current values."""
        params = self.params() if params is None else params
        values = list(inputs)
        for name in self.body.inputs[len(inputs):]:
            v = self.variables.get(name)
            values.append(None if v is None else
                          params[v.name] if v.trainable else v.variable.numpy())
        outs = iter(self.body.run(values))
        flat = [next(outs) if isinstance(o, str) else o for o in self.outputs]
        return tf.nest.pack_sequence_as(self.concrete.structured_outputs, flat,
                                        expand_composites=True)


class _Failed:
    """A constant TensorFlow could not compute at import (kept so that an unused one costs
    nothing): any use raises the error, naming the node."""

    __slots__ = ("error", "op")

    def __init__(self, op, error: Exception):
        self.op, self.error = op, error

    def raise_(self):
        raise UnsupportedError(f"TensorFlow could not run {self.op.type} on constants "
                               f"({_describe(self.op)}): {self.error}") from self.error


def _sum_of_squares(op, producer) -> tuple[str, tuple[int, ...], bool] | None:
    """``(x, axes, keepdims)`` when ``op`` is ``Sqrt(Sum(x * x))`` or ``Sqrt(Sum(Square(x)))``
    (``tf.norm``'s spelling)."""
    total = producer.get(op.inputs[0].name)
    if total is None or total.type != "Sum":
        return None
    square = producer.get(total.inputs[0].name)
    if square is None:
        return None
    ins = [t.name for t in square.inputs]
    if not ((square.type == "Mul" and ins[0] == ins[1]) or square.type == "Square"):
        return None
    axis = tf.get_static_value(total.inputs[1])
    if axis is None:
        return None
    ndim = len(square.inputs[0].shape)
    return ins[0], _axes(axis, ndim), bool(total.get_attr("keep_dims"))


def _norm_over(x, axes: tuple[int, ...], keepdims: bool):
    """The Euclidean norm over ``axes`` (several axes are flattened into one)."""
    norm = _lib("norm")
    shape = np.shape(x)
    rest = tuple(a for a in range(len(shape)) if a not in axes)
    moved = _transpose(x, rest + axes)
    y = norm(moved.reshape(tuple(shape[a] for a in rest) + (-1,)), axis=-1)
    if keepdims:
        y = y.reshape(tuple(1 if a in axes else n for a, n in enumerate(shape)))
    return y


# ----- what fn reaches: its variables' names, and the fingerprint that keys the cache -----

def _callable(fn: Callable) -> Callable:
    """What ``tf.function`` traces: a plain function calling ``fn`` (models and layers too)."""
    return lambda *args: fn(*args)


def _is_variable(v) -> bool:
    return isinstance(v, tf.Variable) or _keras_variable(v) is not None


def _keras_variable(v):
    """The ``tf.Variable`` inside a Keras 3 variable, else None."""
    inner = getattr(v, "_value", None) if hasattr(v, "path") else None
    return inner if isinstance(inner, tf.Variable) else None


def _tf_variable(v):
    """The ``tf.Variable`` behind a TensorFlow or Keras variable."""
    inner = _keras_variable(v)
    return v if inner is None else inner


def _owned_variables(obj) -> list[tuple[str, Any]]:
    """``(name relative to obj, tf.Variable)`` for a Keras layer/model or a ``tf.Module``."""
    out = []
    prefix = f"{getattr(obj, 'name', '')}/"
    for v in getattr(obj, "variables", ()) or ():
        inner = _keras_variable(v)
        if inner is not None:
            path = str(v.path)
            out.append((path[len(prefix):] if path.startswith(prefix) else path, inner))
        elif isinstance(v, tf.Variable):
            out.append((v.name.split(":")[0], v))
    return out


def _reached(fn) -> list[tuple[str, Any]]:
    """The named objects ``fn`` reaches directly: itself if it owns variables, the object a
    method is bound to, closure cells and the globals its code names."""
    found: list[tuple[str, Any]] = []
    if hasattr(fn, "variables") and not isinstance(fn, types.FunctionType):
        found.append(("", fn))
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        found.append(("self", owner))
    func = getattr(fn, "python_function", fn)
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None) or ()
    if code is not None:
        for name, cell in zip(code.co_freevars, cells):
            try:
                found.append((name, cell.cell_contents))
            except ValueError:
                continue
        globs = getattr(func, "__globals__", {})
        for name in _code_names(code):
            if name in globs:
                found.append((name, globs[name]))
    return found


def _code_names(code) -> list[str]:
    """The global names a code object and the functions defined in it refer to."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_code_names(const))
    return names


def _variable_names(fn, names: dict[int, str] | None = None, seen: set | None = None
                    ) -> dict[int, str]:
    """id(tf.Variable) -> the name `subgrad` reports it under (see the module docstring).
    Functions ``fn`` calls (plain or ``tf.function``) are searched too: a variable is named
    after the closure or global variable that holds it, wherever the first one is found."""
    names = {} if names is None else names
    seen = set() if seen is None else seen
    seen.add(id(fn))
    for label, obj in _reached(fn):
        if isinstance(obj, types.ModuleType):
            continue
        if _is_variable(obj):
            names.setdefault(id(_tf_variable(obj)), label)
        elif hasattr(obj, "variables") and not isinstance(obj, type):
            try:
                owned = _owned_variables(obj)
            except Exception:  # an object whose .variables is not a list of variables
                continue
            for rel, var in owned:
                names.setdefault(id(var), f"{label}/{rel}" if label else rel)
        elif (isinstance(obj, types.FunctionType | types.MethodType)
              or hasattr(obj, "python_function")):
            module = (getattr(obj, "__module__", None) or "").split(".")[0]
            if module not in _LIBRARIES and id(obj) not in seen:
                _variable_names(obj, names, seen)
    return names


_LEAVES = (type(None), bool, int, float, complex, str, bytes)
_LIBRARIES = ("tensorflow", "keras", "numpy", "asd", "jax", "torch", "scipy", "tf_keras",
              "builtins", "functools", "typing", "collections", "abc")
_DEPTH = 12


def _fingerprint(obj, seen: dict, depth: int = 0):
    """A hashable summary of what a trace of ``fn`` can capture from ``obj``: values for Python
    data, identity, shape and dtype for variables (their values are read on every call)."""
    if isinstance(obj, _LEAVES):
        return (type(obj).__name__, obj)
    if isinstance(obj, np.ndarray | np.generic):
        a = np.ascontiguousarray(obj)
        return ("array", a.shape, a.dtype.str, hashlib.blake2b(a.tobytes()).hexdigest())
    if _is_variable(obj):
        var = _tf_variable(obj)
        return ("variable", id(var), tuple(var.shape), var.dtype.name, bool(var.trainable))
    if isinstance(obj, tf.Tensor):
        if hasattr(obj, "numpy") and obj.dtype != tf.resource:
            return _fingerprint(obj.numpy(), seen, depth)
        return ("tensor", id(obj))
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, type):
        return ("type", id(obj))
    key = id(obj)
    if key in seen:
        return ("seen", seen[key])
    seen[key] = len(seen)
    if depth > _DEPTH:
        return ("deep", type(obj).__qualname__, key)
    sub = functools.partial(_fingerprint, seen=seen, depth=depth + 1)
    if isinstance(obj, list | tuple):
        return (type(obj).__name__, tuple(sub(e) for e in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((repr(k), sub(v)) for k, v in obj.items()))
    if isinstance(obj, set | frozenset):
        return ("set", tuple(sorted(repr(e) for e in obj)))
    if isinstance(obj, functools.partial):
        return ("partial", sub(obj.func), sub(obj.args), sub(obj.keywords))
    if isinstance(obj, types.MethodType):
        return ("method", sub(obj.__self__), sub(obj.__func__))
    if hasattr(obj, "python_function"):     # a tf.function
        return ("tf.function", sub(obj.python_function))
    if isinstance(obj, types.FunctionType):
        if (obj.__module__ or "").split(".")[0] in _LIBRARIES:
            return ("library function", key)
        return ("function", id(obj.__code__), sub(obj.__defaults__), sub(obj.__kwdefaults__),
                tuple(sub(value) for _, value in _reached(obj)))
    if isinstance(obj, types.BuiltinFunctionType | types.CodeType):
        return ("builtin", key)
    state = getattr(obj, "__dict__", None)
    slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())
             if isinstance(s, str)]
    if state is None and not slots:
        return ("opaque", type(obj).__qualname__, key)
    fields = dict(state or {})
    for s in slots:
        if s not in fields and hasattr(obj, s):
            fields[s] = getattr(obj, s)
    return ("object", id(type(obj)), tuple((k, sub(v)) for k, v in fields.items()
                                           if not k.startswith("__")))


# ----- the public functions -----

def _tf_dtype(t) -> tf.DType:
    return t.dtype if isinstance(t, tf.Tensor | tf.Variable) else tf.as_dtype(
        np.asarray(t).dtype)


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, tf.Tensor | tf.Variable):
        return t.numpy()
    return np.asarray(t)


_CACHE: dict[tuple, TfProgram] = {}


def _identity(fn) -> tuple:
    """Who ``fn`` is: a bound method is made afresh on every attribute access, so it is its
    object and function."""
    if isinstance(fn, types.MethodType):
        return (id(fn.__self__), id(fn.__func__))
    return (id(fn),)


def _shape(t) -> tuple:
    return tuple(t.shape) if isinstance(t, tf.Tensor | tf.Variable) else np.shape(t)


def _signature(tensors) -> tuple:
    return tuple((_shape(t), _tf_dtype(t).name) for t in tensors)


def import_program(fn: Callable, *tensors, live: tuple | None = None) -> TfProgram:
    """Trace ``fn`` at example tensors, cached per signature and per what the trace can
    capture (see the module docstring): a stale program is never replayed."""
    head = (_identity(fn), _signature(tensors), live)
    cached = _CACHE.get(head + (_fingerprint(fn, {}),))
    if cached is not None and _identity(cached.fn) == head[0]:
        return cached
    if len(_CACHE) > 64:
        _CACHE.clear()
    prog = TfProgram(fn, tuple(tensors), live)
    _CACHE[head + (_fingerprint(fn, {}),)] = prog   # after the trace: a lazily built model
    return prog


def program(fn: Callable, *tensors) -> asd.Program:
    """The asd ``Program`` of a TensorFlow function or Keras model at example tensors."""
    prog = import_program(fn, *tensors)
    arrays = [_to_numpy(t) for t in tensors]
    return asd.trace(lambda *xs: prog.numpy_fn(*xs[:-1], params=xs[-1]))(*arrays, prog.params())


def _prepare(fn, tensors, argnums):
    """The program, the tensors as arrays, and ``argnums`` as positions of asd's sweep
    (``len(tensors)`` for the variables; ``-1`` is the last tensor, as in Python)."""
    n = len(tensors)
    nums = common.argnums_with_params(argnums, n)
    picked = (nums,) if isinstance(nums, int) else nums
    prog = import_program(fn, *tensors, live=tuple("params" if a == n else a for a in picked))
    if n in picked and not prog.param_names:
        raise ArgumentError("argnums='params' but the function reads no trainable variables")
    return prog, [_to_numpy(t) for t in tensors], nums


def _direction(direction):
    if direction is None:
        return None
    if isinstance(direction, dict):
        return {k: _to_numpy(v) for k, v in direction.items()}
    if isinstance(direction, list | tuple):
        return type(direction)(_direction(d) for d in direction)
    return _to_numpy(direction)


def _as_tf(g, dtype=None):
    if isinstance(g, dict):
        return {k: _as_tf(v, dtype) for k, v in g.items()}
    if isinstance(g, list | tuple):
        return type(g)(_as_tf(v, dtype) for v in g)
    a = np.asarray(g)
    return tf.constant(a if dtype is None else a.astype(dtype))


def value_and_subgrad(fn: Callable, *tensors, argnums=0, seed=None, direction=None):
    """``(value, subgradient)`` of a scalar TensorFlow function, both as TF tensors."""
    prog, arrays, nums = _prepare(fn, tensors, argnums)

    def f(*xs):
        return prog.numpy_fn(*xs[:-1], params=xs[-1])

    value, g = asd.value_and_subgrad(f, nums, seed=seed, direction=_direction(direction))(
        *arrays, prog.params())
    return _as_tf(value), _as_tf(g)


def subgrad(fn: Callable, *tensors, argnums=0, seed=None, direction=None):
    """A Clarke subgradient of scalar ``fn(*tensors)``, as TF tensors (see ``asd.tf``)."""
    return value_and_subgrad(fn, *tensors, argnums=argnums, seed=seed, direction=direction)[1]


# ----- the drop-in custom gradient -----

def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with TensorFlow's gradient replaced by asd's (see ``asd.tf.function``).

    The gradient runs on the host (``tf.py_function``), so it also works inside a
    ``tf.function``-compiled training step. Keyword arguments holding tensors are inputs
    too; the others (``training=False``) are fixed, like ``tf.function``'s Python arguments.
    The gradient is a first derivative: differentiating it again (an outer tape over a
    gradient penalty) raises `asd.UnsupportedError`.
    """
    callers: dict[tuple, Callable] = {}

    def wrapped(*inputs, **kwargs):
        target = fn
        if kwargs:
            target, inputs = common.positional(fn, inputs, kwargs, callers, _is_tensor_input)
        return _drop_in(target, seed, [tf.convert_to_tensor(t) for t in inputs])

    wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapped.__doc__ = f"{wrapped.__name__} with asd's subgradient as its gradient."
    return wrapped


def _is_tensor_input(value) -> bool:
    """A keyword argument that is an input of the drop-in: a tensor, variable or array. A
    container holding them is refused (it would be captured as a constant, with no
    gradient)."""
    if isinstance(value, tf.Tensor | tf.Variable | np.ndarray):
        return True
    if any(isinstance(v, tf.Tensor | tf.Variable | np.ndarray) for v in tf.nest.flatten(value)):
        raise ArgumentTypeError(
            f"a keyword argument holding tensors in a {type(value).__name__}: asd.tf.function "
            "takes tensors as keyword arguments one by one (each is an input with a "
            "gradient); a tensor inside a container would be fixed at trace time.")
    return False


def _vjp(fn: Callable, seed, inputs, cts, var_handles):
    """The incoming gradient pulled back through asd's sweep of ``fn``'s program, on the
    host: the inputs' gradients and the variables' (None for those ``fn`` does not own)."""
    prog = import_program(fn, *inputs)
    arrays = [_to_numpy(t) for t in inputs]
    cts_np = [None if c is None else _to_numpy(c) for c in cts]
    wants = [i for i, a in enumerate(arrays) if np.issubdtype(a.dtype, np.floating)]
    by_handle = {id(v.variable.handle): v.name for v in prog.variables.values()
                 if v.trainable}
    var_names = [by_handle.get(h) for h in var_handles]
    nums = tuple(wants) + ((len(arrays),) if any(var_names) else ())

    def scalarized(*xs):
        out = prog.numpy_fn(*xs[:-1], params=xs[-1])
        total = 0.0
        for o, c in zip(tf.nest.flatten(out), cts_np, strict=True):
            if c is not None:
                total = total + (o * c).sum()
        return total

    grads_in: list = [np.zeros_like(a) for a in arrays]
    grads_vars: list = [None] * len(var_names)
    if nums:
        g = asd.subgrad(scalarized, nums, seed=seed)(*arrays, prog.params())
        for i, gi in zip(nums, g, strict=True):
            if i == len(arrays):
                grads_vars = [None if n is None else gi[n] for n in var_names]
            else:
                grads_in[i] = np.asarray(gi, dtype=arrays[i].dtype)
    return grads_in, grads_vars


def _drop_in(fn: Callable, seed, inputs: list):
    """``fn(*inputs)`` as a ``tf.custom_gradient`` whose gradient is `_vjp` on the host."""

    @tf.custom_gradient
    def inner(*xs):
        out = fn(*xs)

        def grad(*cts, variables=None):
            variables = list(variables or [])
            handles = [id(_tf_variable(v).handle) for v in variables]
            flat_in = list(xs)
            dtypes = [x.dtype for x in flat_in] + [v.dtype for v in variables]

            def host(*flat):
                n = len(flat_in)
                gi, gv = _vjp(fn, seed, list(flat[:n]), list(flat[n:]), handles)
                return [np.asarray(a, dtype=d.as_numpy_dtype) for a, d in zip(
                    gi + [np.zeros(v.shape) if g is None else g
                          for g, v in zip(gv, variables, strict=True)],
                    dtypes, strict=True)]

            results = _first_order_only(tf.py_function(host, flat_in + list(cts), dtypes), fn,
                                        variables)
            in_reached, var_reached = _gradient_reaches(fn, flat_in, variables)
            grads_in = [r if x.dtype.is_floating and reached else None for x, r, reached in
                        zip(flat_in, results[:len(flat_in)], in_reached, strict=True)]
            grads_vars = [r if reached else None for r, reached in
                          zip(results[len(flat_in):], var_reached, strict=True)]
            return (grads_in, grads_vars) if variables else grads_in

        return out, grad

    return inner(*inputs)


def _gradient_reaches(fn: Callable, inputs: list, variables: list) -> tuple[list, list]:
    """Which inputs and variables a gradient of ``fn``'s outputs reaches (the others get
    None, as from the tape: an optimizer then leaves a variable read only behind
    ``tf.stop_gradient`` alone). The program is imported outside any graph being built, at
    inputs of the same shapes; with a shape unknown there, everything counts as reached."""
    shapes = [_shape(x) for x in inputs]
    if any(d is None for shape in shapes for d in shape):
        return [True] * len(inputs), [True] * len(variables)
    with tf.init_scope():
        prog = import_program(fn, *(tf.zeros(shape, x.dtype) for shape, x in
                                    zip(shapes, inputs, strict=True)))
    by_handle = {id(v.variable.handle): v.name for v in prog.variables.values()}
    return prog.reached_inputs, [by_handle.get(id(_tf_variable(v).handle)) in
                                 prog.reached_variables for v in variables]


def _first_order_only(results: list, fn: Callable, variables: list) -> list:
    """The gradients, unchanged, with a gradient that refuses: asd gives first derivatives
    only, and ``tf.py_function``'s own gradient would make a gradient penalty through the
    drop-in silently contribute nothing. The variables' values are inputs of the mark: the
    host reads them, so without it an outer tape would see no path from them to the
    gradients (a gradient penalty's parameter gradient would silently miss its term)."""
    label = getattr(fn, "__qualname__", type(fn).__qualname__)
    n = len(results)

    @tf.custom_gradient
    def mark(*grads_and_variables):
        grads = grads_and_variables[:n]

        def refuse(*cts, variables=None):
            raise UnsupportedError(
                f"a gradient computed through asd.tf.function({label}) is being "
                "differentiated again (an outer GradientTape over a gradient penalty, a "
                "Hessian-vector product). asd gives first derivatives only (a limiting "
                "gradient has no derivative at a kink): compute the term that differentiates "
                "a gradient with the model itself, and the rest of the loss through "
                "asd.tf.function.")

        return [tf.identity(g) for g in grads], refuse

    return list(mark(*results, *(tf.convert_to_tensor(v) for v in variables)))
