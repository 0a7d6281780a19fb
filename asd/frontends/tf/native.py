"""The traced TensorFlow program, instrumented to say whether a tie matters.

`asd.tf.function` runs the user's function as TensorFlow code (its own kernels, compiled by
``tf.function``: no per-node Python of asd's) and uses TensorFlow's own gradient wherever no
tie matters (proofs/README.md, "Native gradients where no tie matters"): with every
nonsmooth operation strictly inside one of its pieces, the program is differentiable at the
point and its derivative is what reverse mode computes. `instrumented` traces the function
into the graph being built and, reading that graph's operations, appends for each operation on
the differentiated path whose derivative can depend on a branch a *margin*: a 0-d float32
tensor, positive unless one of its entries may sit on a kink (the same tests as PyTorch's
native path, `asd.frontends.torch.native`):

- ``Relu``, ``Abs``, ``Sign``, ``LeakyRelu``, ``Elu``, ``Selu`` at 0; ``Relu6`` and
  ``ClipByValue`` at a bound; ``Maximum``/``Minimum`` and the comparisons read by ``Select``
  where their two sides are equal;
- ``MaxPool`` and ``Max``/``Min``/``ArgMax``/``ArgMin`` reductions where two candidates share
  a window's extremum, **except** max-pooling windows and maxima whose value is exactly 0 over
  a ``Relu`` whose input has no 0 (dead units: every candidate has a zero gradient row);
- the points where a function is not Lipschitz or not finite: ``Sqrt``/``Rsqrt``/``Log``/
  fractional ``Pow`` at or below their singular point, division and ``Reciprocal`` by 0; and
  any non-finite output.

Operations differentiable everywhere on their domain (`SMOOTH`) need no margin. A program with
any other operation on its differentiated path (sorting, ``TopKV2``, ``Prod``, a nested
function call...) has no native form (`NotNative`): the drop-in sweeps it with asd at every
call, as before. Everything here runs at trace time: the margins are graph operations, so the
flag costs no host read per node (one per eager call, none under ``tf.function``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from asd.frontends.tf.ops import (
    CALLS,
    LOCALLY_CONSTANT,
    STATE_UPDATES,
    _pads,
    _random,
    _spatial,
    _str,
)

SMOOTH = frozenset({
    # arithmetic and products
    "AddV2", "Add", "Sub", "Mul", "Neg", "Square", "SquaredDifference", "AddN", "BiasAdd",
    "MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D", "Conv3D",
    "DepthwiseConv2dNative",
    # smooth elementwise functions
    "Exp", "Expm1", "Tanh", "Sigmoid", "Softplus", "Softsign", "Sin", "Cos", "Erf", "Erfc",
    # losses and normalisations (FusedBatchNorm in inference mode: checked below)
    "Softmax", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits",
    "SoftmaxCrossEntropyWithLogits",
    # linear pooling and reductions
    "AvgPool", "Sum", "Mean", "Cumsum",
    # structure
    "Identity", "IdentityN", "Snapshot", "EnsureShape", "CheckNumerics", "Reshape",
    "Transpose", "ExpandDims", "Squeeze", "StridedSlice", "Slice", "ConcatV2", "Pack",
    "Unpack", "Pad", "PadV2", "Tile", "BroadcastTo", "ReadVariableOp", "NoOp",
    # booleans (their ties are flagged at the comparison that made them)
    "Select", "SelectV2", "LogicalNot", "LogicalAnd", "LogicalOr",
})
"""TensorFlow op types differentiable at every point of their domain, whose TensorFlow
gradient is therefore the derivative (asd's element) wherever they are evaluated. Not
``Prod`` (its gradient divides by the entries), not ``DivNoNan`` with a differentiated
divisor (a jump at 0, refused by asd)."""

NO_GRADIENT = frozenset({"StopGradient", "PreventGradient", "ZerosLike", "OnesLike"})
"""Ops whose output carries no derivative: what depends on it only is not differentiated."""

# ----- the margins: 0-d float32 tensors, positive where no tie matters -----


def _f32(x) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def _positive() -> tf.Tensor:
    return tf.ones((), tf.float32)


def off_value(x, p=None) -> tf.Tensor:
    """``min |x - p|`` (``p`` 0 when None): 0 exactly where an entry equals ``p``."""
    x = tf.stop_gradient(x)
    d = x if p is None else x - tf.cast(tf.stop_gradient(p), x.dtype)
    return _f32(tf.reduce_min(tf.abs(d))) if d.shape.num_elements() != 0 else _positive()


def above(x, bound: float) -> tf.Tensor:
    """``min x - bound``: positive where every entry is above ``bound``."""
    x = tf.stop_gradient(x)
    return _f32(tf.reduce_min(x) - bound) if x.shape.num_elements() != 0 else _positive()


def apart(a, b) -> tf.Tensor:
    """``min |a - b|``: 0 where the two sides of a max/min or a comparison are equal."""
    a, b = tf.stop_gradient(a), tf.stop_gradient(b)
    if a.dtype == tf.bool:
        return 1.0 - _f32(tf.reduce_any(tf.equal(a, b)))
    return off_value(a - b)


def pool_margin(x, m, axes: tuple[int, ...], kernel, stride, pads, dead: bool) -> tf.Tensor:
    """Max pooling of ``x`` over ``axes`` to ``m``: positive unless two candidates of a window
    share its maximum (leaving out windows whose maximum is 0 when ``dead``). Per kernel
    offset, on strided slices of the (-inf) padded input, ``Σ sign(m - x_i)`` counts a window's
    entries below its maximum: the window ties where that is ``<= K - 2`` (``K`` offsets)."""
    x, m = tf.stop_gradient(x), tf.stop_gradient(m)
    ndim = len(x.shape)
    out = [m.shape[a] for a in axes]
    if tuple(kernel) == tuple(stride) and not any(p for pair in pads for p in pair):
        return _tiled_pool_margin(x, m, axes, kernel, out, dead)
    paddings = [[0, 0] for _ in range(ndim)]
    for a, n, k, s, (lo, hi) in zip(axes, out, kernel, stride, pads, strict=True):
        need = (n - 1) * s + k
        paddings[a] = [lo, max(hi, need - x.shape[a] - lo)]
    xp = tf.pad(x, paddings, constant_values=-math.inf) if any(
        p for pair in paddings for p in pair) else x
    below = None
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    for offset in offsets:
        index = [slice(None)] * ndim
        for a, o, s, n in zip(axes, offset, stride, out, strict=True):
            index[a] = slice(o, o + s * (n - 1) + 1, s)
        step = tf.sign(m - xp[tuple(index)])
        below = step if below is None else below + step
    k = len(offsets)
    if dead:            # m >= 0: windows at 0 move up by K, out of reach of the test
        return _f32(tf.reduce_min(below - k * tf.sign(m))) + 1.5
    return _f32(tf.reduce_min(below)) - (k - 1.5)


def _tiled_pool_margin(x, m, axes, kernel, out, dead: bool) -> tf.Tensor:
    """`pool_margin` for windows that tile the input (stride = kernel, no padding: Keras's
    default pooling): each pooled axis split into (windows, kernel), the entries equal to
    their window's maximum counted in one pass; a tie is a count of 2 or more."""
    index = [slice(None)] * len(x.shape)
    for a, n, k in zip(axes, out, kernel, strict=True):
        index[a] = slice(0, n * k)               # 'VALID' drops the last partial window
    x = x[tuple(index)]
    split, mb, window = [], [], []
    for a, n in enumerate(x.shape):
        if a in axes:
            k = kernel[axes.index(a)]
            split += [out[axes.index(a)], k]
            mb += [out[axes.index(a)], 1]
            window.append(len(split) - 1)
        else:
            split.append(n if n is not None else -1)
            mb.append(n if n is not None else -1)
    equal = tf.cast(tf.equal(tf.reshape(x, split), tf.reshape(m, mb)), tf.float32)
    count = tf.reduce_sum(equal, window)
    if dead:            # windows whose maximum is 0 over dead relus never count
        count = count * tf.cast(m > 0, tf.float32)
    return 1.5 - tf.reduce_max(count)


def reduce_margin(x, axes, dead: bool, largest: bool) -> tf.Tensor:
    """A max (or min) reduction over ``axes``: positive unless two entries share an extremum
    (leaving out maxima at 0 over dead relus when ``dead``), counted as in `pool_margin`."""
    x = tf.stop_gradient(x)
    ndim = len(x.shape)
    axes = tuple(sorted({int(a) % max(ndim, 1) for a in np.reshape(axes, -1)}))
    if not axes or x.shape.num_elements() == 0:
        return _positive()
    n = math.prod(x.shape[a] for a in axes)
    m = (tf.reduce_max if largest else tf.reduce_min)(x, axes, keepdims=True)
    below = tf.reduce_sum(tf.sign(m - x if largest else x - m), axes, keepdims=True)
    if dead:
        return _f32(tf.reduce_min(below - n * tf.sign(m))) + 1.5
    return _f32(tf.reduce_min(below)) - (n - 1.5)


def flag(margins: Sequence[tf.Tensor], outputs: Sequence[tf.Tensor]) -> tf.Tensor:
    """Whether a tie matters, as a 0-d bool tensor: some margin is not positive (NaN
    included), or an output is not finite."""
    sums = [tf.reduce_sum(_f32(tf.stop_gradient(o))) for o in outputs
            if o.dtype.is_floating]
    bad = tf.constant(False)
    if sums:
        bad = tf.logical_not(tf.reduce_all(tf.math.is_finite(tf.stack(sums))))
    if margins:
        bad = tf.logical_or(bad, tf.reduce_any(tf.logical_not(tf.stack(list(margins)) > 0)))
    return bad


# ----- which margin each operation gets -----


class NotNative(Exception):
    """A program without a native form (an operation outside `SMOOTH` and the flagged ones
    on its differentiated path)."""


def _static(t):
    """A constant operand's value (an axis, a pool size), or NotNative."""
    v = tf.get_static_value(t)
    if v is None:
        raise NotNative(f"{t.op.type} {t.op.name} has an operand computed at run time")
    return v


def _pool(op, dead: bool) -> tf.Tensor:
    x, m = op.inputs[0], op.outputs[0]
    fmt = _str(op.get_attr("data_format"))
    _, axes = _spatial(fmt, len(x.shape))
    ksize, strides = op.get_attr("ksize"), op.get_attr("strides")
    if not x.shape.is_fully_defined() or not m.shape.is_fully_defined():
        raise NotNative("MaxPool on a shape unknown at trace time")
    kernel = tuple(int(ksize[a]) for a in axes)
    stride = tuple(int(strides[a]) for a in axes)
    explicit = op.get_attr("explicit_paddings") if "explicit_paddings" in op.node_def.attr \
        else ()
    pads = _pads(op.get_attr("padding"), explicit, x.shape, axes, kernel, stride,
                 (1,) * len(axes))
    return pool_margin(x, m, axes, kernel, stride, pads, dead)


def margins_of(op, dead_relus: set, live: set) -> list[tf.Tensor]:
    """The margins of ``op``'s ties that may matter (none for a smooth op); `NotNative` for an
    op with neither. ``dead_relus`` holds the Relu outputs whose inputs have a margin, ``live``
    the names of the tensors that depend on the differentiated values."""
    kind = op.type
    ins = list(op.inputs)
    if kind in SMOOTH:
        return []
    if kind in ("Relu", "Abs", "Sign", "LeakyRelu", "Elu", "Selu"):
        if kind == "Relu":
            dead_relus.add(op.outputs[0].name)
        return [off_value(ins[0])]
    if kind == "Relu6":
        return [off_value(ins[0]), off_value(ins[0], 6.0)]
    if kind == "ClipByValue":
        return [off_value(ins[0], ins[1]), off_value(ins[0], ins[2])]
    if kind in ("Maximum", "Minimum", "Greater", "GreaterEqual", "Less", "LessEqual",
                "Equal", "NotEqual"):
        return [apart(ins[0], ins[1])]
    if kind == "MaxPool":
        return [_pool(op, ins[0].name in dead_relus)]
    if kind in ("Max", "Min", "ArgMax", "ArgMin"):
        largest = kind in ("Max", "ArgMax")
        dead = kind == "Max" and ins[0].name in dead_relus
        return [reduce_margin(ins[0], _static(ins[1]), dead, largest)]
    if kind in ("Sqrt", "Rsqrt", "Log"):
        return [above(ins[0], 0.0)]
    if kind == "Log1p":
        return [above(ins[0], -1.0)]
    if kind in ("Reciprocal", "Inv"):
        return [off_value(ins[0])]
    if kind in ("RealDiv", "Div"):
        return [off_value(ins[1])]
    if kind == "DivNoNan":
        if tf.get_static_value(ins[1]) is None:
            raise NotNative("DivNoNan by a computed divisor")
        return []
    if kind == "Pow":
        p = tf.get_static_value(ins[1])
        if p is None:
            raise NotNative("Pow of a computed exponent")
        p = np.asarray(p)
        if p.ndim == 0 and float(p).is_integer() and p >= 0:
            return []
        if p.ndim == 0 and float(p).is_integer():
            return [off_value(ins[0])]
        return [above(ins[0], 0.0)]
    if kind == "Cast":
        if op.outputs[0].dtype.is_floating:
            return []
        raise NotNative("Cast of a differentiated value to integers or booleans")
    if kind in ("FusedBatchNorm", "FusedBatchNormV3"):
        if op.get_attr("is_training"):
            raise NotNative(f"{kind} in training mode")
        return []
    if kind == "GatherV2":
        if any(t.name in live for t in ins[1:]):
            raise NotNative("GatherV2 at computed positions")
        return []
    raise NotNative(kind)


def instrumented(fn: Callable, inputs: Sequence) -> tuple:
    """Call ``fn(*inputs)`` in the graph being built (a ``tf.function`` body) and return
    ``(outputs, flag)``: its outputs and the 0-d bool tensor of a tie that matters. The
    differentiated values are the floating inputs and every variable read; an op depends on
    them when one of its inputs does. Raises `NotNative`."""
    graph = tf.compat.v1.get_default_graph()
    start = len(graph.get_operations())
    out = fn(*inputs)
    ops = graph.get_operations()[start:]
    live = {t.name for t in inputs if tf.is_tensor(t) and t.dtype.is_floating}
    flat = [o for o in tf.nest.flatten(out, expand_composites=True) if tf.is_tensor(o)]
    margins: list[tf.Tensor] = []
    dead_relus: set = set()
    for op in ops:
        if op.type in STATE_UPDATES or _random(op.type):   # asd refuses these: so does this
            raise NotNative(f"{op.type} (a variable write or a random draw)")
        if op.type == "ReadVariableOp":
            live.update(t.name for t in op.outputs)
            continue
        if not any(t.name in live for t in op.inputs):
            continue
        if op.type in NO_GRADIENT or op.type in LOCALLY_CONSTANT:
            continue
        if op.type in CALLS:
            raise NotNative(f"{op.type} (a nested function) on the differentiated path")
        margins += margins_of(op, dead_relus, live)
        live.update(t.name for t in op.outputs)
    return out, flag(margins, flat)
