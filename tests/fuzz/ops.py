"""The fuzzer's operation table: each op's numpy, torch and JAX spellings, its oracle, its builder.

An entry says how one step ``value = name(*values[args], **params)`` of a `tests.programs.Program`
is computed:

- ``numpy``: the spelling under test, called on float arrays (numpy's own value), on asd's traced
  arrays, and -- unless ``exact`` is given -- on the oracle's object arrays (`Series`, `Jet`,
  `oracle.MpDual`), whose elements numpy's object loops drive through their operators;
- ``exact``: the oracle's evaluator where numpy's spelling cannot run on those objects (floor,
  ``%``, ``var``, ``vdot``, the smooth functions);
- ``torch`` / ``jax``: the same program in the framework's own operators (None: no spelling; the
  framework strategies then never draw the op, see `framework_names`);
- ``kind``: ``"poly"`` (piecewise polynomial: the exact oracle applies), ``"jump"`` (piecewise
  constant or with jumps, e.g. ``//``, ``%``, ``np.sign``, ``c[argmax(x)]``: asd must refuse with
  `asd.NotLipschitzError` exactly where a jump reaches the output), ``"smooth"`` (transcendental:
  the mpmath oracle);
- ``builder``: draws the op's arguments and parameters on a `Draft`, planting ties (equal
  entries, zeros, points on breakpoints and jumps) the way tests/programs.py does;
- ``source``: the numpy spelling as Python source, so that every finding prints a reproducer.

The ops of tests/programs.py (arithmetic, kinks, order statistics, norms, projections, structure)
come in with their builders and numpy spellings; this module adds their framework spellings and
the rest of what docs/numpy-coverage.md and the ndarray methods claim: reductions and methods,
``// % **`` and comparisons combined with ``& | ~ ^``, piecewise-constant functions, in-place
writes, constants of every dtype (numpy scalars, 0-d, read-only, masked, complex arrays), the
smooth ufuncs and a few linear-algebra functions.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests import programs as base
from tests.programs import Op, _Draft

# ----- frameworks, imported on first use -----


def _torch() -> Any:
    import torch

    return torch


def _jnp() -> Any:
    import jax.numpy as jnp

    return jnp


def _jax() -> Any:
    import jax

    return jax


def _F() -> Any:
    import torch.nn.functional as F

    return F


# ----- elementwise helpers that run on the oracle's objects too -----


def _is_lazy(e: Any) -> bool:
    """An oracle element (Series, Jet or MpDual): everything that is not a plain number."""
    return not isinstance(e, numbers_types)


numbers_types = (int, float, Fraction, np.number, bool, np.bool_)


def _elementwise(fn: Callable[..., Any], nin: int = 1) -> Callable[..., Any]:
    """``fn`` mapped over (broadcast) arrays of any element type, as an object array."""
    ufunc = np.frompyfunc(fn, nin, 1)

    def apply(*args: Any) -> Any:
        return ufunc(*args)

    return apply


def _constant_like(e: Any, value: Any) -> Any:
    """``value`` as a constant of ``e``'s kind: a Series/Jet/MpDual with no derivative."""
    coerce = getattr(e, "_coerce", None)
    if coerce is not None:
        return coerce(Fraction(value) if not isinstance(value, float) else value)
    return value


def _base_and_side(e: Any) -> tuple[Fraction, int]:
    """An element's value at the point and the side the ray leaves it to (-1, 0, 1)."""
    from tests.fuzz.oracle import base_and_side

    return base_and_side(e)


def _record_jump(e: Any) -> None:
    from tests.fuzz.oracle import record_jump

    record_jump(e)


def _undecided_side(e: Any) -> None:
    """The ray runs along a jump (its input stays on it): the gradient oracles cannot tell
    which side's piece the limiting gradient belongs to (asd decides by a later direction),
    so a Jet raises DegenerateTie (the oracle then tries [v, w]) and an MpDual Undecided."""
    from tests.fuzz.oracle import undecided_side

    undecided_side(e)


def _piecewise_constant(fn: Callable[[Fraction, int], Fraction]) -> Callable[[Any], Any]:
    """An elementwise piecewise-constant function for the oracle: ``fn(c, side)`` is its value
    just to the ``side`` of ``c`` (side 0: at ``c`` itself). Where the two sides differ the
    point is on a jump, which the oracle records (asd may then refuse)."""

    def apply(e: Any) -> Any:
        if not _is_lazy(e):
            return fn(Fraction(e), 0)
        c, side = _base_and_side(e)
        if fn(c, 1) != fn(c, -1) or fn(c, 0) != fn(c, 1):
            _record_jump(e)
            if side == 0:
                _undecided_side(e)
        return _constant_like(e, fn(c, side))

    return _elementwise(apply)


def _floor(c: Fraction, side: int) -> Fraction:
    f = Fraction(math.floor(c))
    return f - 1 if side < 0 and f == c else f


def _ceil(c: Fraction, side: int) -> Fraction:
    f = Fraction(math.ceil(c))
    return f + 1 if side > 0 and f == c else f


def _trunc(c: Fraction, side: int) -> Fraction:
    return _floor(c, side) if c > 0 or (c == 0 and side >= 0) else _ceil(c, side)


def _rint(c: Fraction, side: int) -> Fraction:
    """Round half to even (numpy's rint/round) just beside ``c``."""
    f = math.floor(c)
    if c - f == Fraction(1, 2):
        if side:
            return Fraction(f + 1 if side > 0 else f)
        return Fraction(f if f % 2 == 0 else f + 1)
    return Fraction(round(c))


def _sign(c: Fraction, side: int) -> Fraction:
    return Fraction((c > 0) - (c < 0)) if c else Fraction(side)


def _step(c: Fraction, side: int, *, at_zero: Fraction) -> Fraction:
    """heaviside(h, at_zero), or a comparison used as a number."""
    if c:
        return Fraction(int(c > 0))
    return Fraction(int(side > 0)) if side else at_zero


EXACT_FLOOR = _piecewise_constant(_floor)


def _exact_floor_divide(a: Any, b: Any) -> Any:
    return EXACT_FLOOR(_divide(a, b))


def _divide(a: Any, b: Any) -> Any:
    return np.asarray(a, dtype=object) / np.asarray(b, dtype=object)


def _exact_remainder(a: Any, b: Any) -> Any:
    return np.asarray(a, dtype=object) - np.asarray(b, dtype=object) * _exact_floor_divide(a, b)


def _exact_var(a: Any, *, axis: Any = None) -> Any:
    a = np.asarray(a, dtype=object)
    mean = np.mean(a, axis=axis, keepdims=True)
    return np.mean((a - mean) * (a - mean), axis=axis)


def _call_method(name: str) -> Callable[..., Any]:
    """The method ``name`` of an element (MpDual's smooth functions), elementwise."""
    return _elementwise(lambda e: getattr(e, name)() if _is_lazy(e) else getattr(np, name)(e))


# ----- the table -----


@dataclass(frozen=True)
class Entry:
    """One op (see the module docstring)."""

    numpy: Callable[..., Any]
    builder: Callable[[Draft], None]
    source: str
    kind: str = "poly"
    torch: Callable[..., Any] | None = None
    jax: Callable[..., Any] | None = None
    exact: Callable[..., Any] | None = None
    params_as_arrays: tuple[str, ...] = ("constant", "lo", "hi", "lam", "weights")
    exact_floats: bool | Callable[[int], bool] = True  # False: numpy's own float algorithm
    # rounds even on dyadic inputs (det by LU), so derivatives are compared within rounding,
    # not bit for bit; a callable: whether so for a reduction of that many entries


def exact_floats(op: Op, shapes: Sequence[tuple[int, ...]], index: int) -> bool:
    """Whether ``op`` (step ``index`` of a program with ``shapes``) computes exact floats on
    exact operands, its derivatives included (`Entry.exact_floats`)."""
    rule = TABLE[op.name].exact_floats
    if not callable(rule):
        return rule
    entries = math.prod(shapes[op.args[0]]) // max(math.prod(shapes[index]), 1)
    return rule(entries)


def _dyadic_count(n: int) -> bool:
    """A mean's partials are 1/n, floats only where n is a power of 2: reverse mode rounds
    (0.5 + 2 + 0.5) / 3 as 0.5/3 + 2/3 + 0.5/3 = 0.9999999999999999 (campaign seed 3001),
    though every step's gradient (forward) is a float."""
    return n & (n - 1) == 0


TABLE: dict[str, Entry] = {}


def register(name: str, numpy: Callable[..., Any], builder: Callable[[Draft], None],
             source: str, **fields: Any) -> None:
    TABLE[name] = Entry(numpy, builder, source, **fields)


def _xp(fn: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """numpy and JAX spellings of ``fn(xp, *args, **params)`` (jax.numpy mirrors numpy)."""
    return {"numpy": partial(fn, np), "jax": lambda *a, **k: fn(_jnp(), *a, **k)}


# ----- a draft that plants ties on numpy's own float values -----


class Draft(_Draft):
    """tests.programs' draft, evaluating each step with this table in float64.

    The planted ties are ties of the float program, which is what asd sees; whether the
    exact oracle applies is decided afterwards (`oracle.choose`).
    """

    def __init__(self, draw: Any, x: np.ndarray) -> None:
        self.draw = draw
        self.ops = []
        self.computed = [np.asarray(x, dtype=float)]
        self.values = [base.as_fractions(x)]

    def emit(self, op: Op) -> int:
        with np.errstate(all="ignore"):
            value = apply(op, self.computed)
        value = np.asarray(value)
        if isinstance(value, np.ma.MaskedArray):
            value = np.ma.getdata(value)
        if value.dtype.kind == "c":
            value = value.real
        value = value.astype(float)
        if not np.all(np.isfinite(value)) or (value.size and np.max(np.abs(value)) > 2.0**40):
            from hypothesis import reject

            reject()
        self.computed.append(value)
        self.values.append(base.as_fractions(value))
        self.ops.append(op)
        return len(self.ops)


# ----- applying an op -----


def params_for(op: Op, convert: Callable[[np.ndarray], Any] | None = None) -> dict[str, Any]:
    """The op's parameters with nested tuples as float arrays (or ``convert``-ed)."""
    entry = TABLE[op.name]
    params = dict(op.params)
    for key in entry.params_as_arrays:
        if isinstance(params.get(key), tuple):
            array = np.array(params[key], dtype=float)
            params[key] = array if convert is None else convert(array)
    return params


def apply(op: Op, values: Sequence[Any]) -> Any:
    """The numpy spelling of ``op`` on earlier values (floats or traced)."""
    return TABLE[op.name].numpy(*(values[i] for i in op.args), **params_for(op))


def _object(value: Any) -> np.ndarray:
    """An oracle value as an object array (a bare Series or MpDual as a 0-d one)."""
    if isinstance(value, np.ndarray):
        return value if value.dtype == object else value.astype(object)
    out = np.empty((), dtype=object)
    out[()] = value
    return out


def apply_exact(op: Op, values: Sequence[Any]) -> Any:
    """``op`` on the oracle's object arrays."""
    entry = TABLE[op.name]
    fn = entry.exact or entry.numpy
    return fn(*(_object(values[i]) for i in op.args), **params_for(op))


def fractions_of(c: Any) -> np.ndarray:
    """A numpy constant's values as exact Fractions (bools as 0 and 1)."""
    c = np.asarray(np.ma.getdata(c))
    if c.dtype.kind == "b":
        c = c.astype(int)
    return base.as_fractions(c)


def apply_framework(op: Op, values: Sequence[Any], framework: str) -> Any:
    """``op`` spelled in ``framework`` ('torch' or 'jax') on its arrays."""
    entry = TABLE[op.name]
    args = [values[i] for i in op.args]
    like = args[0]
    if framework == "torch":
        torch = _torch()

        def convert(a: np.ndarray) -> Any:
            return torch.as_tensor(a, dtype=like.dtype)

        return entry.torch(*args, **params_for(op, convert))

    def convert_jax(a: np.ndarray) -> Any:
        return _jnp().asarray(a, dtype=like.dtype)

    return entry.jax(*args, **params_for(op, convert_jax))


def framework_names(framework: str) -> tuple[str, ...]:
    """The ops with a spelling in ``framework``: what its strategies draw from."""
    return tuple(name for name, e in TABLE.items() if getattr(e, framework) is not None)


# ----- torch and JAX spellings of tests/programs.py's ops -----


def _t_axis(axis: Any) -> dict[str, Any]:
    return {} if axis is None else {"dim": axis}


def _t_index(a: Any, *, key: Any) -> Any:
    if isinstance(key, slice) and key.step is not None and key.step < 0:
        return _torch().flip(a, [0])[slice(None, None, -key.step)]
    return a[key]


def _t_reduce(fn_name: str) -> Callable[..., Any]:
    def reduce(a: Any, *, axis: Any, keepdims: bool = False) -> Any:
        torch = _torch()
        if axis is None:
            out = getattr(torch, fn_name)(a)
            return out.reshape((1,) * a.ndim) if keepdims else out
        return getattr(torch, fn_name)(a, dim=axis, keepdim=keepdims)

    return reduce


def _t_sort(a: Any, *, axis: Any) -> Any:
    return _torch().sort(a.reshape(-1) if axis is None else a, dim=-1 if axis is None else axis
                         ).values


def _t_topk_sum(a: Any, *, k: int, axis: int) -> Any:
    return _torch().topk(a, k, dim=axis).values.sum(dim=axis)


def _j_topk_sum(a: Any, *, k: int, axis: int) -> Any:
    jnp = _jnp()
    moved = jnp.moveaxis(a, axis, -1)
    return _jax().lax.top_k(moved, k)[0].sum(axis=-1)


def _middle(xp: Any, a: Any, axis: Any, sort: Callable[..., Any]) -> Any:
    """The median as the mean of the middle order statistics (torch's own median is the lower
    one, numpy's the mean of both)."""
    s = sort(a)
    n = s.shape[-1]
    picks = sorted({(n - 1) // 2, n // 2})
    return sum(s[..., i] for i in picks) / len(picks)


def _t_median(a: Any, *, axis: Any) -> Any:
    torch = _torch()
    moved = a.reshape(-1) if axis is None else torch.movedim(a, axis, -1)
    return _middle(torch, moved, axis, lambda s: torch.sort(s, dim=-1).values)


def _t_max_pool1d(a: Any, *, window: int, stride: int, padding: int) -> Any:
    F = _F()
    if a.ndim == 1:
        return F.max_pool1d(a[None], window, stride, padding)[0]
    return F.max_pool1d(a, window, stride, padding)


def _j_max_pool1d(a: Any, *, window: int, stride: int, padding: int) -> Any:
    jax, jnp = _jax(), _jnp()
    dims = (1,) * (a.ndim - 1) + (window,)
    strides = (1,) * (a.ndim - 1) + (stride,)
    pads = ((0, 0),) * (a.ndim - 1) + ((padding, padding),)
    return jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, dims, strides, pads)


def _t_cummax(a: Any, *, axis: int) -> Any:
    return _torch().cummax(a, dim=axis).values


def _j_cummax(a: Any, *, axis: int) -> Any:
    return _jax().lax.cummax(a, axis=axis % a.ndim)


def _t_norm(order: float) -> Callable[..., Any]:
    def norm(a: Any, *, axis: Any) -> Any:
        return _torch().linalg.vector_norm(a, order, **_t_axis(axis))

    return norm


def _j_norm(order: float) -> Callable[..., Any]:
    def norm(a: Any, *, axis: Any) -> Any:
        return _jnp().linalg.vector_norm(a, ord=order, axis=axis)

    return norm


def _t_where(a: Any, b: Any, *ramp: Any, cmp: str) -> Any:
    torch = _torch()
    condition = a > b if cmp == ">" else a >= b
    if not ramp:
        return torch.where(condition, a, b)
    g, p = ramp
    return torch.where(condition, g + (a - b) * p, g + 0 * (a - b))


def _j_where(a: Any, b: Any, *ramp: Any, cmp: str) -> Any:
    return _xp_where(_jnp(), a, b, *ramp, cmp=cmp)


def _xp_where(xp: Any, a: Any, b: Any, *ramp: Any, cmp: str) -> Any:
    condition = a > b if cmp == ">" else a >= b
    if not ramp:
        return xp.where(condition, a, b)
    g, p = ramp
    return xp.where(condition, g + (a - b) * p, g)


def _t_clip(a: Any, *, lo: Any, hi: Any) -> Any:
    torch = _torch()
    return torch.minimum(torch.maximum(a, torch.as_tensor(lo, dtype=a.dtype)),
                         torch.as_tensor(hi, dtype=a.dtype))


def _matmul_with(mm: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def matmul(a: Any, b: Any = None, *, constant: Any = None) -> Any:
        return mm(a, constant if b is None else b)

    return matmul


def _t_pad(a: Any, *, width: tuple[int, int]) -> Any:
    return _F().pad(a, width)


def _t_take(a: Any, *, indices: tuple[int, ...]) -> Any:
    torch = _torch()
    return torch.take(a, torch.tensor(indices))


def _t_huber(a: Any, *, delta: float) -> Any:
    torch = _torch()
    return _F().huber_loss(a, torch.zeros_like(a), reduction="none", delta=delta)


def _xp_huber(xp: Any, a: Any, *, delta: float) -> Any:
    m = xp.clip(a, -delta, delta)
    return m * (a - m / 2)


def _t_transpose(a: Any) -> Any:
    return a.permute(*reversed(range(a.ndim))) if a.ndim > 1 else a


def _t_soft_threshold(a: Any, *, lam: Any) -> Any:
    torch = _torch()
    lam = torch.as_tensor(lam, dtype=a.dtype)
    return a - torch.minimum(torch.maximum(a, -lam), lam)


def _j_soft_threshold(a: Any, *, lam: Any) -> Any:
    return a - _jnp().clip(a, -lam, lam)


_PROGRAM_SPELLINGS: dict[str, tuple[str, Callable[..., Any] | None, Callable[..., Any] | None]] = {
    # name: (source, torch, jax)
    "add": ("{0} + {1}", operator.add, operator.add),
    "subtract": ("{0} - {1}", operator.sub, operator.sub),
    "multiply": ("{0} * {1}", operator.mul, operator.mul),
    "negative": ("-{0}", operator.neg, operator.neg),
    "divide_by_constant": ("{0} / {constant}", lambda a, *, constant: a / constant,
                           lambda a, *, constant: a / constant),
    "add_constant": ("{0} + {constant}", lambda a, *, constant: a + constant,
                     lambda a, *, constant: a + constant),
    "multiply_constant": ("{0} * {constant}", lambda a, *, constant: a * constant,
                          lambda a, *, constant: a * constant),
    "integer_power": ("{0} ** {exponent}", lambda a, *, exponent: a**exponent,
                      lambda a, *, exponent: a**exponent),
    "sum": ("np.sum({0}, axis={axis})", lambda a, *, axis: _torch().sum(a, **_t_axis(axis)),
            lambda a, *, axis: _jnp().sum(a, axis=axis)),
    "matmul": ("{0} @ {1|constant}", _matmul_with(operator.matmul),
               _matmul_with(operator.matmul)),
    "dot": ("np.dot({0}, {1|constant})", _matmul_with(lambda a, b: _torch().matmul(a, b)),
            _matmul_with(lambda a, b: _jnp().dot(a, b))),
    "index": ("{0}[{key}]", _t_index, lambda a, *, key: a[key]),
    "relu": ("np.maximum({0}, 0.0)", lambda a: _torch().relu(a), lambda a: _jax().nn.relu(a)),
    "abs": ("np.abs({0})", lambda a: _torch().abs(a), lambda a: _jnp().abs(a)),
    "maximum": ("np.maximum({0}, {1})", lambda a, b: _torch().maximum(a, b),
                lambda a, b: _jnp().maximum(a, b)),
    "minimum": ("np.minimum({0}, {1})", lambda a, b: _torch().minimum(a, b),
                lambda a, b: _jnp().minimum(a, b)),
    "where": ("where_ramp({0}, {1}, {2+}, cmp={cmp!r})", _t_where, _j_where),
    "square": ("np.square({0})", lambda a: _torch().square(a), lambda a: _jnp().square(a)),
    "transpose": ("np.transpose({0})", _t_transpose, lambda a: _jnp().transpose(a)),
    "reshape": ("np.reshape({0}, {shape})", lambda a, *, shape: a.reshape(shape),
                lambda a, *, shape: _jnp().reshape(a, shape)),
    "cumsum": ("np.cumsum({0}, axis={axis})", lambda a, *, axis: _torch().cumsum(a, dim=axis),
               lambda a, *, axis: _jnp().cumsum(a, axis=axis)),
    "prod": ("np.prod({0}, axis={axis})", lambda a, *, axis: _torch().prod(a, **_t_axis(axis))
             if axis is not None else _torch().prod(a),
             lambda a, *, axis: _jnp().prod(a, axis=axis)),
    "diff": ("np.diff({0}, axis={axis})", lambda a, *, axis: _torch().diff(a, dim=axis),
             lambda a, *, axis: _jnp().diff(a, axis=axis)),
    "concatenate": ("np.concatenate([{0}, {1}], axis={axis})",
                    lambda a, b, *, axis: _torch().cat([a, b], dim=axis),
                    lambda a, b, *, axis: _jnp().concatenate([a, b], axis=axis)),
    "stack": ("np.stack([{0}, {1}])", lambda a, b: _torch().stack([a, b]),
              lambda a, b: _jnp().stack([a, b])),
    "pad": ("np.pad({0}, {width})", _t_pad, lambda a, *, width: _jnp().pad(a, width)),
    "take": ("np.take({0}, {indices})", _t_take,
             lambda a, *, indices: _jnp().take(a, _jnp().array(indices))),
    "einsum": ("np.einsum({spec!r}, {0}, {1})", lambda a, b, *, spec: _torch().einsum(spec, a, b),
               lambda a, b, *, spec: _jnp().einsum(spec, a, b)),
    "clip": ("asd.clip({0}, {lo}, {hi})", _t_clip, lambda a, *, lo, hi: _jnp().clip(a, lo, hi)),
    "clip_traced": ("asd.clip({0}, {1}, {2})",
                    lambda a, lo, hi: _torch().minimum(_torch().maximum(a, lo), hi),
                    lambda a, lo, hi: _jnp().minimum(_jnp().maximum(a, lo), hi)),
    "hardtanh": ("asd.hardtanh({0}, {lo}, {hi})",
                 lambda a, *, lo, hi: _F().hardtanh(a, lo, hi),
                 lambda a, *, lo, hi: _jnp().clip(a, lo, hi)),
    "leaky_relu": ("asd.leaky_relu({0}, {negative_slope})",
                   lambda a, *, negative_slope: _F().leaky_relu(a, negative_slope),
                   lambda a, *, negative_slope: _jax().nn.leaky_relu(a, negative_slope)),
    "relu6": ("asd.relu6({0})", lambda a: _F().relu6(a), lambda a: _jax().nn.relu6(a)),
    "hard_sigmoid": ("asd.hard_sigmoid({0})", lambda a: _F().hardsigmoid(a),
                     lambda a: _jax().nn.hard_sigmoid(a)),
    "soft_threshold": ("asd.soft_threshold({0}, {lam})", _t_soft_threshold,
                       _j_soft_threshold),
    "hinge": ("asd.hinge({0})", lambda a: _torch().clamp(1.0 - a, min=0.0),
              lambda a: _jnp().maximum(1.0 - a, 0.0)),
    "huber": ("asd.huber({0}, {delta})", _t_huber, lambda a, *, delta: _xp_huber(
        _jnp(), a, delta=delta)),
    "max": ("asd.max({0}, axis={axis}, keepdims={keepdims})", _t_reduce("amax"),
            lambda a, *, axis, keepdims: _jnp().max(a, axis=axis, keepdims=keepdims)),
    "min": ("asd.min({0}, axis={axis}, keepdims={keepdims})", _t_reduce("amin"),
            lambda a, *, axis, keepdims: _jnp().min(a, axis=axis, keepdims=keepdims)),
    "sort": ("asd.sort({0}, axis={axis})", _t_sort,
             lambda a, *, axis: _jnp().sort(a, axis=axis)),
    "topk_sum": ("asd.topk_sum({0}, {k}, {axis})", _t_topk_sum, _j_topk_sum),
    "median": ("asd.median({0}, axis={axis})", _t_median,
               lambda a, *, axis: _jnp().median(a, axis=axis)),
    "max_pool1d": ("asd.max_pool1d({0}, {window}, {stride}, {padding})", _t_max_pool1d,
                   _j_max_pool1d),
    "cummax": ("asd.cummax({0}, axis={axis})", _t_cummax, _j_cummax),
    "l1_norm": ("asd.l1_norm({0}, axis={axis})", _t_norm(1.0), _j_norm(1.0)),
    "linf_norm": ("asd.linf_norm({0}, axis={axis})", _t_norm(math.inf), _j_norm(math.inf)),
    "proj_nonneg": ("asd.projections.nonneg({0})", lambda a: _torch().clamp(a, min=0.0),
                    lambda a: _jnp().maximum(a, 0.0)),
    "proj_box": ("asd.projections.box({0}, {lo}, {hi})", _t_clip,
                 lambda a, *, lo, hi: _jnp().clip(a, lo, hi)),
    "proj_linf_ball": ("asd.projections.linf_ball({0}, {radius})",
                       lambda a, *, radius: _torch().clamp(a, -radius, radius),
                       lambda a, *, radius: _jnp().clip(a, -radius, radius)),
    "proj_simplex": ("asd.projections.simplex({0}, {radius})", None, None),
}

for _name, (_source, _torch_spelling, _jax_spelling) in _PROGRAM_SPELLINGS.items():
    register(_name, base.IMPLEMENTATIONS[_name], base.BUILDERS[_name], _source,
             torch=_torch_spelling, jax=_jax_spelling)
assert TABLE.keys() == base.IMPLEMENTATIONS.keys()


# ----- builders for the new ops -----


def _with_ndim(d: Draft, low: int = 1, high: int = 9) -> int | None:
    """A value with ``low <= ndim <= high``, or None."""
    return base._pick_or_any(d, lambda s: low <= len(s) <= high)


def _axis(d: Draft, shape: tuple[int, ...], none: bool = True) -> Any:
    ndim = len(shape)
    return d.draw(st.sampled_from(([None] if none else []) + list(range(-ndim, ndim))))


def _reduction(name: str, *, none: bool = True, keepdims: bool = False, order: bool = False,
               min_ndim: int = 0, **param_strategies: st.SearchStrategy) -> Callable[[Draft], None]:
    """``name(a, axis=...)``; order reductions get equal entries planted first."""

    def build(d: Draft) -> None:
        a = _with_ndim(d, max(min_ndim, 0 if none else 1))
        if a is None:
            d.emit(Op("abs", (d.pick(),)))
            return
        if order:
            a = base._plant_equal(d, a)
        params: dict[str, Any] = {"axis": _axis(d, d.shape(a), none)}
        if keepdims:
            params["keepdims"] = d.draw(st.booleans())
        params.update({k: d.draw(s) for k, s in param_strategies.items()})
        base._weigh(d, d.emit(Op(name, (a,), params)))

    return build


def _unary(name: str, fits: Callable[[tuple[int, ...]], bool] = lambda s: True,
           params: Callable[[Draft, tuple[int, ...]], dict[str, Any]] = lambda d, s: {},
           plant: Callable[[Draft, int], int] = lambda d, a: a) -> Callable[[Draft], None]:
    """``name(a, **params(d, a.shape))`` for a value whose shape ``fits``."""

    def build(d: Draft) -> None:
        a = base._pick_or_any(d, fits)
        if a is None:
            d.emit(Op("negative", (d.pick(),)))
            return
        a = plant(d, a)
        d.emit(Op(name, (a,), params(d, d.shape(a))))

    return build


def _binary_same(name: str, fits: Callable[[tuple[int, ...]], bool] = lambda s: True,
                 params: Callable[[Draft, tuple[int, ...]], dict[str, Any]] = lambda d, s: {},
                 same_shape: bool = True) -> Callable[[Draft], None]:
    """``name(a, b)`` with ``b`` of ``a``'s shape (often ``a`` itself), or broadcastable."""

    def build(d: Draft) -> None:
        a = base._pick_or_any(d, fits)
        if a is None:
            d.emit(Op("negative", (d.pick(),)))
            return
        shape = d.shape(a)
        if same_shape:
            b = d.pick(lambda s: s == shape, latest=False)
        else:
            b = d.pick(lambda s: fits(s) and base._broadcast(shape, s) is not None, latest=False)
        d.emit(Op(name, (a, b), params(d, shape)))

    return build


def _plant_multiples(step: Fraction | float, offset: float = 0.0) -> Callable[[Draft, int], int]:
    """Mostly, shift entries of ``a`` onto multiples of ``step`` (plus ``offset``): jumps."""

    def plant(d: Draft, a: int) -> int:
        if not d.draw(st.integers(0, 3)):
            return a
        value = d.values[a]
        multiples = np.vectorize(lambda e: Fraction(math.floor(e / Fraction(step))) *
                                 Fraction(step) + Fraction(offset), otypes=[object])(value)
        return d.shift_onto(a, multiples)

    return plant


def _tie_pair(d: Draft, shape: tuple[int, ...] | None = None) -> tuple[int, int]:
    """Two values to compare (broadcastable, result no larger than ``shape``), often tied."""
    a = d.pick(lambda s: shape is None or base._broadcast(shape, s) == shape)
    target = shape if shape is not None else d.shape(a)
    b = d.pick(lambda s: base._broadcast(target, s) == target, latest=False)
    return d.maybe_tie(a, b)


# ----- numpy functions and ndarray methods: reductions, order statistics, structure -----


def _method(name: str, **fixed: Any) -> Callable[..., Any]:
    def call(a: Any, *args: Any, **params: Any) -> Any:
        return getattr(a, name)(*args, **fixed, **params)

    return call


def _t_method_reduce(fn_name: str) -> Callable[..., Any]:
    def reduce(a: Any, *, axis: Any = None, keepdims: bool = False) -> Any:
        return _t_reduce(fn_name)(a, axis=axis, keepdims=keepdims)

    return reduce


register("mean", **_xp(lambda xp, a, *, axis: xp.mean(a, axis=axis)),
         builder=_reduction("mean"), source="np.mean({0}, axis={axis})",
         torch=lambda a, *, axis: _torch().mean(a, **_t_axis(axis)), exact_floats=_dyadic_count)
register("method_sum", _method("sum"), _reduction("method_sum", keepdims=True),
         "{0}.sum(axis={axis}, keepdims={keepdims})", torch=_t_method_reduce("sum"),
         jax=_method("sum"))
register("method_mean", _method("mean"), _reduction("method_mean", keepdims=True),
         "{0}.mean(axis={axis}, keepdims={keepdims})",
         torch=lambda a, *, axis, keepdims: a.mean(**_t_axis(axis), keepdim=keepdims)
         if axis is not None else a.mean().reshape((1,) * a.ndim if keepdims else ()),
         jax=_method("mean"), exact_floats=_dyadic_count)
register("method_max", _method("max"), _reduction("method_max", keepdims=True, order=True),
         "{0}.max(axis={axis}, keepdims={keepdims})", torch=_t_method_reduce("amax"),
         jax=_method("max"))
register("method_min", _method("min"), _reduction("method_min", keepdims=True, order=True),
         "{0}.min(axis={axis}, keepdims={keepdims})", torch=_t_method_reduce("amin"),
         jax=_method("min"))
register("method_prod", _method("prod"), _reduction("method_prod"), "{0}.prod(axis={axis})",
         torch=lambda a, *, axis: _torch().prod(a, **_t_axis(axis)) if axis is not None
         else _torch().prod(a), jax=_method("prod"))
register("method_cumsum", _method("cumsum"), _reduction("method_cumsum"),
         "{0}.cumsum(axis={axis})",
         torch=lambda a, *, axis: _torch().cumsum(a.reshape(-1) if axis is None else a,
                                                  dim=0 if axis is None else axis),
         jax=lambda a, *, axis: _jnp().cumsum(a, axis=axis))
register("amax", **_xp(lambda xp, a, *, axis: xp.amax(a, axis=axis)),
         builder=_reduction("amax", order=True), source="np.amax({0}, axis={axis})",
         torch=lambda a, *, axis: _t_reduce("amax")(a, axis=axis))
register("amin", **_xp(lambda xp, a, *, axis: xp.amin(a, axis=axis)),
         builder=_reduction("amin", order=True), source="np.amin({0}, axis={axis})",
         torch=lambda a, *, axis: _t_reduce("amin")(a, axis=axis))
register("ptp", **_xp(lambda xp, a, *, axis: xp.ptp(a, axis=axis)),
         builder=_reduction("ptp", order=True), source="np.ptp({0}, axis={axis})",
         torch=lambda a, *, axis: _t_reduce("amax")(a, axis=axis) - _t_reduce("amin")(
             a, axis=axis))
register("np_median", **_xp(lambda xp, a, *, axis: xp.median(a, axis=axis)),
         builder=_reduction("np_median", order=True), source="np.median({0}, axis={axis})",
         torch=_t_median)
register("percentile",
         **_xp(lambda xp, a, *, q, axis: xp.percentile(a, q, axis=axis)),
         builder=_reduction("percentile", order=True,
                            q=st.sampled_from([0.0, 25.0, 50.0, 75.0, 100.0])),
         source="np.percentile({0}, {q}, axis={axis})",
         torch=lambda a, *, q, axis: _torch().quantile(a, q / 100, **_t_axis(axis))
         if axis is not None else _torch().quantile(a.reshape(-1), q / 100))
register("quantile", **_xp(lambda xp, a, *, q, axis: xp.quantile(a, q, axis=axis)),
         builder=_reduction("quantile", order=True, none=False,
                            q=st.sampled_from([0.0, 0.25, 0.5, 1.0])),
         source="np.quantile({0}, {q}, axis={axis})",
         torch=lambda a, *, q, axis: _torch().quantile(a, q, dim=axis))
register("cumprod", **_xp(lambda xp, a, *, axis: xp.cumprod(a, axis=axis)),
         builder=_reduction("cumprod", none=False), source="np.cumprod({0}, axis={axis})",
         torch=lambda a, *, axis: _torch().cumprod(a, dim=axis))


def _partition_params(d: Draft, shape: tuple[int, ...]) -> dict[str, Any]:
    axis = d.draw(st.sampled_from(range(-len(shape), len(shape))))
    return {"axis": axis, "kth": d.draw(st.integers(0, shape[axis] - 1))}


def _xp_kth(xp: Any, a: Any, *, kth: int, axis: int) -> Any:
    return xp.take(xp.partition(a, kth, axis=axis), kth, axis=axis)


register("partition_kth", **_xp(_xp_kth),
         builder=_unary("partition_kth", lambda s: len(s) >= 1, _partition_params,
                        base._plant_equal),
         source="np.take(np.partition({0}, {kth}, axis={axis}), {kth}, axis={axis})",
         torch=lambda a, *, kth, axis: _torch().kthvalue(a, kth + 1, dim=axis).values)


def _average_params(d: Draft, shape: tuple[int, ...]) -> dict[str, Any]:
    weights = base._entries(d.draw, shape, (1.0, 2.0, 0.5, 4.0))
    return {"weights": base._plain(weights)}


register("average",
         **_xp(lambda xp, a, *, weights: xp.average(a, weights=weights)),
         builder=_unary("average", lambda s: len(s) >= 1, _average_params),
         source="np.average({0}, weights={weights})",
         torch=lambda a, *, weights: (a * weights).sum() / weights.sum(),
         exact_floats=False)  # its slopes are w / sum(w), rounded even on dyadic operands


def _flip_params(d: Draft, shape: tuple[int, ...]) -> dict[str, Any]:
    return {"axis": d.draw(st.sampled_from(range(len(shape))))}


def _roll_params(d: Draft, shape: tuple[int, ...]) -> dict[str, Any]:
    return {"shift": d.draw(st.integers(-2, 2)),
            "axis": d.draw(st.sampled_from(range(len(shape))))}


register("flip", **_xp(lambda xp, a, *, axis: xp.flip(a, axis=axis)),
         builder=_unary("flip", lambda s: len(s) >= 1, _flip_params),
         source="np.flip({0}, axis={axis})",
         torch=lambda a, *, axis: _torch().flip(a, [axis]))
register("roll", **_xp(lambda xp, a, *, shift, axis: xp.roll(a, shift, axis=axis)),
         builder=_unary("roll", lambda s: len(s) >= 1, _roll_params),
         source="np.roll({0}, {shift}, axis={axis})",
         torch=lambda a, *, shift, axis: _torch().roll(a, shift, dims=axis))


def _k_param(low: int, high: int) -> Callable[[Draft, tuple[int, ...]], dict[str, Any]]:
    return lambda d, s: {"k": d.draw(st.integers(low, high))}


def _two_d(s: tuple[int, ...]) -> bool:
    return len(s) == 2


register("rot90", **_xp(lambda xp, a, *, k: xp.rot90(a, k)),
         builder=_unary("rot90", _two_d, _k_param(1, 3)), source="np.rot90({0}, {k})",
         torch=lambda a, *, k: _torch().rot90(a, k, [0, 1]))
register("tril", **_xp(lambda xp, a, *, k: xp.tril(a, k)),
         builder=_unary("tril", _two_d, _k_param(-1, 1)), source="np.tril({0}, {k})",
         torch=lambda a, *, k: _torch().tril(a, k))
register("triu", **_xp(lambda xp, a, *, k: xp.triu(a, k)),
         builder=_unary("triu", _two_d, _k_param(-1, 1)), source="np.triu({0}, {k})",
         torch=lambda a, *, k: _torch().triu(a, k))
register("trace", **_xp(lambda xp, a: xp.trace(a)), builder=_unary("trace", _two_d),
         source="np.trace({0})", torch=lambda a: _torch().trace(a))
register("diag", **_xp(lambda xp, a: xp.diag(a)),
         builder=_unary("diag", lambda s: len(s) == 2 or (len(s) == 1 and s[0] <= 4)),
         source="np.diag({0})", torch=lambda a: _torch().diag(a))
register("ediff1d", **_xp(lambda xp, a: xp.ediff1d(a)),
         builder=_unary("ediff1d", lambda s: 1 <= len(s) and base._size(s) >= 2),
         source="np.ediff1d({0})", torch=lambda a: _torch().diff(a.reshape(-1)))
register("tile", **_xp(lambda xp, a: xp.tile(a, 2)),
         builder=_unary("tile", lambda s: base._size(s) <= 8), source="np.tile({0}, 2)",
         torch=lambda a: a.repeat(*((1,) * (a.ndim - 1)), 2) if a.ndim else a.reshape(1).repeat(
             2))
register("repeat", **_xp(lambda xp, a, *, axis: xp.repeat(a, 2, axis=axis)),
         builder=_unary("repeat", lambda s: 1 <= len(s) and base._size(s) <= 8,
                        lambda d, s: {"axis": d.draw(st.sampled_from(range(len(s))))}),
         source="np.repeat({0}, 2, axis={axis})",
         torch=lambda a, *, axis: _torch().repeat_interleave(a, 2, dim=axis))
register("moveaxis", **_xp(lambda xp, a: xp.moveaxis(a, 0, -1)),
         builder=_unary("moveaxis", lambda s: len(s) >= 1), source="np.moveaxis({0}, 0, -1)",
         torch=lambda a: _torch().movedim(a, 0, -1))
register("rollaxis", lambda a: np.rollaxis(a, -1), _unary("rollaxis", lambda s: len(s) >= 1),
         "np.rollaxis({0}, -1)", torch=lambda a: _torch().movedim(a, -1, 0),
         jax=lambda a: _jnp().rollaxis(a, -1))
register("nan_to_num", **_xp(lambda xp, a: xp.nan_to_num(a)), builder=_unary("nan_to_num"),
         source="np.nan_to_num({0})", torch=lambda a: _torch().nan_to_num(a))
register("expand_squeeze", **_xp(lambda xp, a, *, axis: xp.squeeze(xp.expand_dims(a, axis),
                                                                   axis)),
         builder=_unary("expand_squeeze", params=lambda d, s: {
             "axis": d.draw(st.integers(-len(s) - 1, len(s)))}),
         source="np.squeeze(np.expand_dims({0}, {axis}), {axis})",
         torch=lambda a, *, axis: a.unsqueeze(axis).squeeze(axis))
register("atleast_2d", **_xp(lambda xp, a: xp.atleast_2d(a)),
         builder=_unary("atleast_2d"), source="np.atleast_2d({0})",
         torch=lambda a: _torch().atleast_2d(a))
register("broadcast_to", **_xp(lambda xp, a: xp.broadcast_to(a, (2, *a.shape))),
         builder=_unary("broadcast_to", lambda s: base._size(s) <= 8),
         source="np.broadcast_to({0}, (2, *{0}.shape))",
         torch=lambda a: a.expand(2, *a.shape))
register("method_T", lambda a: a.T, _unary("method_T"), "{0}.T",
         torch=_t_transpose, jax=lambda a: a.T)
register("method_ravel", _method("ravel"), _unary("method_ravel"), "{0}.ravel()",
         torch=lambda a: a.reshape(-1), jax=_method("ravel"))
register("method_flatten", _method("flatten"), _unary("method_flatten"), "{0}.flatten()",
         torch=lambda a: a.reshape(-1), jax=_method("flatten"))
register("method_reshape", lambda a: a.reshape(-1, 1), _unary("method_reshape"),
         "{0}.reshape(-1, 1)", torch=lambda a: a.reshape(-1, 1), jax=lambda a: a.reshape(-1, 1))
register("method_squeeze", lambda a: a.reshape((1, *a.shape)).squeeze(), _unary(
    "method_squeeze"), "{0}.reshape((1, *{0}.shape)).squeeze()",
    torch=lambda a: a.reshape((1, *a.shape)).squeeze(),
    jax=lambda a: a.reshape((1, *a.shape)).squeeze())
register("method_swapaxes", lambda a: a.swapaxes(0, -1), _unary("method_swapaxes",
                                                                lambda s: len(s) >= 1),
         "{0}.swapaxes(0, -1)", torch=lambda a: a.swapaxes(0, -1),
         jax=lambda a: a.swapaxes(0, -1))
register("method_transpose", _method("transpose"), _unary("method_transpose"),
         "{0}.transpose()", torch=_t_transpose, jax=_method("transpose"))
register("method_copy", _method("copy"), _unary("method_copy"), "{0}.copy()",
         torch=lambda a: a.clone(), jax=lambda a: a.copy())
register("method_clip", lambda a, *, lo, hi: a.clip(lo, hi),
         _unary("method_clip", params=lambda d, s: dict(zip(
             ("lo", "hi"), sorted(d.draw(st.lists(st.sampled_from(base.BOUNDS), min_size=2,
                                                  max_size=2))), strict=True)),
             plant=lambda d, a: d.shift_onto(a, d.draw(st.sampled_from([-1.0, 0.0, 1.0])))
             if d.draw(st.booleans()) else a),
         "{0}.clip({lo}, {hi})", torch=lambda a, *, lo, hi: a.clamp(lo, hi),
         jax=lambda a, *, lo, hi: a.clip(lo, hi))
register("np_clip", **_xp(lambda xp, a, *, lo, hi: xp.clip(a, lo, hi)),
         builder=_unary("np_clip", params=lambda d, s: {
             "lo": d.draw(st.sampled_from([None, -1.0, 0.0])),
             "hi": d.draw(st.sampled_from([1.0, 0.5, 2.0]))},
             plant=lambda d, a: d.maybe_zero(a)),
         source="np.clip({0}, {lo}, {hi})",
         torch=lambda a, *, lo, hi: _torch().clamp(a, lo, hi))
register("method_dot", lambda a, b: a.dot(b),
         _binary_same("method_dot", lambda s: len(s) == 1), "{0}.dot({1})",
         torch=lambda a, b: a.dot(b), jax=lambda a, b: a.dot(b))


def _exact_vdot(a: Any, b: Any) -> Any:
    return np.sum(np.ravel(a) * np.ravel(b))


register("vdot", **_xp(lambda xp, a, b: xp.vdot(a, b)), builder=_binary_same("vdot"),
         source="np.vdot({0}, {1})", exact=_exact_vdot,
         torch=lambda a, b: (a.reshape(-1) * b.reshape(-1)).sum())
register("outer", **_xp(lambda xp, a, b: xp.outer(a, b)),
         builder=_binary_same("outer", lambda s: base._size(s) <= 4),
         source="np.outer({0}, {1})",
         torch=lambda a, b: _torch().outer(a.reshape(-1), b.reshape(-1)))
register("inner", **_xp(lambda xp, a, b: xp.inner(a, b)),
         builder=_binary_same("inner", lambda s: 1 <= len(s) and base._size(s) <= 4),
         source="np.inner({0}, {1})", torch=lambda a, b: _torch().inner(a, b))
register("kron", **_xp(lambda xp, a, b: xp.kron(a, b)),
         builder=_binary_same("kron", lambda s: base._size(s) <= 4),
         source="np.kron({0}, {1})", torch=lambda a, b: _torch().kron(a, b))
register("tensordot", **_xp(lambda xp, a, b, *, axes: xp.tensordot(a, b, axes)),
         builder=_binary_same("tensordot", lambda s: 1 <= len(s) and base._size(s) <= 4,
                              lambda d, s: {"axes": d.draw(st.sampled_from(
                                  [0, 1] if s[-1] == s[0] else [0]))}),
         source="np.tensordot({0}, {1}, {axes})",
         torch=lambda a, b, *, axes: _torch().tensordot(a, b, axes))
register("hstack", **_xp(lambda xp, a, b: xp.hstack([a, b])),
         builder=_binary_same("hstack", lambda s: base._size(s) <= 8),
         source="np.hstack([{0}, {1}])", torch=lambda a, b: _torch().hstack([a, b]))
register("vstack", **_xp(lambda xp, a, b: xp.vstack([a, b])),
         builder=_binary_same("vstack", lambda s: base._size(s) <= 8),
         source="np.vstack([{0}, {1}])", torch=lambda a, b: _torch().vstack([a, b]))
register("column_stack", **_xp(lambda xp, a, b: xp.column_stack([a, b])),
         builder=_binary_same("column_stack", lambda s: 1 <= len(s) <= 2 and base._size(s) <= 8),
         source="np.column_stack([{0}, {1}])",
         torch=lambda a, b: _torch().column_stack([a, b]))
register("append", **_xp(lambda xp, a, b: xp.append(a, b)),
         builder=_binary_same("append", lambda s: base._size(s) <= 8),
         source="np.append({0}, {1})",
         torch=lambda a, b: _torch().cat([a.reshape(-1), b.reshape(-1)]))
register("fmax", **_xp(lambda xp, a, b: xp.fmax(a, b)),
         builder=base._binary("fmax", plant_ties=True), source="np.fmax({0}, {1})",
         exact=np.maximum, torch=lambda a, b: _torch().fmax(a, b))
register("fmin", **_xp(lambda xp, a, b: xp.fmin(a, b)),
         builder=base._binary("fmin", plant_ties=True), source="np.fmin({0}, {1})",
         exact=np.minimum, torch=lambda a, b: _torch().fmin(a, b))


# ----- operators and ufuncs by name: + - * ** and the function spellings -----


def _plant_zero(d: Draft, a: int) -> int:
    return d.maybe_zero(a)


register("np_add", **_xp(lambda xp, a, b: xp.add(a, b)), builder=base._binary("np_add"),
         source="np.add({0}, {1})", torch=lambda a, b: _torch().add(a, b))
register("np_subtract", **_xp(lambda xp, a, b: xp.subtract(a, b)),
         builder=base._binary("np_subtract"), source="np.subtract({0}, {1})",
         torch=lambda a, b: _torch().subtract(a, b))
register("np_multiply", **_xp(lambda xp, a, b: xp.multiply(a, b)),
         builder=base._binary("np_multiply"), source="np.multiply({0}, {1})",
         torch=lambda a, b: _torch().multiply(a, b))
register("true_divide", **_xp(lambda xp, a, *, c: xp.true_divide(a, c)),
         builder=_unary("true_divide", params=lambda d, s: {
             "c": d.draw(st.sampled_from(base.DIVISORS))}),
         source="np.true_divide({0}, {c})", torch=lambda a, *, c: _torch().true_divide(a, c))
register("np_power", **_xp(lambda xp, a, *, n: xp.power(a, n)),
         builder=_unary("np_power", params=lambda d, s: {"n": d.draw(st.integers(0, 4))},
                        plant=_plant_zero),
         source="np.power({0}, {n})", torch=lambda a, *, n: _torch().pow(a, n))
register("pow_operator", lambda a, *, n: a**n,
         _unary("pow_operator", params=lambda d, s: {"n": d.draw(st.integers(0, 4))},
                plant=_plant_zero),
         "{0} ** {n}", torch=lambda a, *, n: a**n, jax=lambda a, *, n: a**n)
register("np_positive", **_xp(lambda xp, a: xp.positive(a)), builder=_unary("np_positive"),
         source="np.positive({0})", torch=lambda a: _torch().positive(a))
register("np_absolute", **_xp(lambda xp, a: xp.absolute(a)),
         builder=_unary("np_absolute", plant=_plant_zero), source="np.absolute({0})",
         torch=lambda a: _torch().absolute(a))
register("np_fabs", **_xp(lambda xp, a: xp.fabs(a)),
         builder=_unary("np_fabs", plant=_plant_zero), source="np.fabs({0})", exact=np.abs,
         torch=lambda a: _torch().abs(a))


# ----- comparisons combined with & | ~ ^: where and select, continuous by construction -----
# A boolean expression L over comparisons a_i > b_i selects g + P p or g, where P is the product
# of the compared differences: on the boundary of {L} some a_i = b_i, so both sides are g there
# and the program stays continuous (and locally Lipschitz) whatever L is.


def _logic(xp: Any, conditions: Sequence[Any], expr: Any, spelling: str) -> Any:
    """The boolean expression ``expr`` (nested tuples over condition indices) evaluated."""
    if isinstance(expr, int):
        return conditions[expr]
    op, *args = expr
    values = [_logic(xp, conditions, e, spelling) for e in args]
    if spelling == "functions":
        fn = {"and": xp.logical_and, "or": xp.logical_or, "xor": xp.logical_xor,
              "not": xp.logical_not}[op]
        return fn(*values)
    if op == "not":
        return ~values[0]
    return {"and": operator.and_, "or": operator.or_, "xor": operator.xor}[op](*values)


def _compare(a: Any, b: Any, cmp: str) -> Any:
    return {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}[cmp](a, b)


def _where_logic(xp: Any, *args: Any, cmps: tuple[str, ...], expr: Any, spelling: str,
                 python_bools: bool = False) -> Any:
    """``python_bools``: the conditions are Python bools in numpy's own run (comparisons of
    Python floats), whose ``~`` is integer inversion (``~True == -2``, true); the oracles'
    object arrays give numpy bools, so they are told (`tests.fuzz.harness.expect`)."""
    n = len(cmps)
    pairs, (g, p) = args[: 2 * n], args[2 * n:]
    conditions = [_compare(pairs[2 * i], pairs[2 * i + 1], c) for i, c in enumerate(cmps)]
    if python_bools:
        conditions = [bool(c) for c in conditions]
    product = pairs[0] - pairs[1]
    for i in range(1, n):
        product = product * (pairs[2 * i] - pairs[2 * i + 1])
    if spelling == "select":
        second = g - product * p
        return xp.select([_logic(xp, conditions, expr, "operators"), conditions[0]],
                         [g + product * p, second], g)
    return xp.where(_logic(xp, conditions, expr, spelling), g + product * p, g)


def _t_where_logic(*args: Any, cmps: tuple[str, ...], expr: Any, spelling: str) -> Any:
    torch = _torch()

    class _TorchXp:
        where = staticmethod(torch.where)
        logical_and = staticmethod(torch.logical_and)
        logical_or = staticmethod(torch.logical_or)
        logical_xor = staticmethod(torch.logical_xor)
        logical_not = staticmethod(torch.logical_not)

        @staticmethod
        def select(conditions: list[Any], choices: list[Any], default: Any) -> Any:
            out = default + 0 * choices[0]
            for c, v in reversed(list(zip(conditions, choices, strict=True))):
                out = torch.where(c, v, out)
            return out

    return _where_logic(_TorchXp, *args, cmps=cmps, expr=expr, spelling=spelling)


_EXPRS = [("and", 0, 1), ("or", 0, 1), ("xor", 0, 1), ("not", 0), ("and", 0, ("not", 1)),
          ("or", ("not", 0), 1), ("xor", ("and", 0, 1), 2), ("not", ("or", 0, ("xor", 1, 2)))]


def _where_logic_builder(d: Draft) -> None:
    expr = d.draw(st.sampled_from(_EXPRS))
    n = 3 if _uses(expr, 2) else 2
    anchor = d.pick()
    shape = d.shape(anchor)
    args: list[int] = []
    for _ in range(n):
        a, b = _tie_pair(d, shape if d.draw(st.booleans()) else None)
        args += [a, b]
    shape = base._broadcast(*(d.shape(i) for i in args))
    if shape is None:
        d.emit(Op("abs", (anchor,)))
        return
    g = d.pick(lambda s: base._broadcast(shape, s) is not None, latest=False)
    p = d.pick(lambda s: base._broadcast(shape, d.shape(g), s) is not None, latest=False)
    cmps = tuple(d.draw(st.sampled_from([">", ">=", "<", "<="])) for _ in range(n))
    spelling = d.draw(st.sampled_from(["operators", "functions", "select"]))
    d.emit(Op("where_logic", (*args, g, p), {"cmps": cmps, "expr": expr, "spelling": spelling}))


def _uses(expr: Any, index: int) -> bool:
    if isinstance(expr, int):
        return expr == index
    return any(_uses(e, index) for e in expr[1:])


register("where_logic", **_xp(_where_logic), builder=_where_logic_builder,
         source="where_logic({args}, cmps={cmps}, expr={expr}, spelling={spelling!r})",
         torch=_t_where_logic)


# ----- sorting by another array's order -----


def _argsort_take(xp: Any, a: Any, b: Any, *, axis: int) -> Any:
    return xp.take_along_axis(a, xp.argsort(b, axis=axis, stable=True), axis=axis)


def _t_argsort_take(a: Any, b: Any, *, axis: int) -> Any:
    torch = _torch()
    return torch.take_along_dim(a, torch.argsort(b, dim=axis, stable=True), dim=axis)


def _sorted_by_builder(d: Draft) -> None:
    """``take_along_axis(a, argsort(b))``: ``a`` itself (a sort: continuous) or another value
    (a permutation that jumps where ``b`` ties)."""
    a = _with_ndim(d)
    if a is None:
        d.emit(Op("abs", (d.pick(),)))
        return
    a = base._plant_equal(d, a)
    b = a if d.draw(st.booleans()) else base._plant_equal(
        d, d.pick(lambda s: s == d.shape(a), latest=False))
    axis = d.draw(st.sampled_from(range(-len(d.shape(a)), len(d.shape(a)))))
    d.emit(Op("sorted_by", (a, b), {"axis": axis}))


def _exact_argsort_take(a: Any, b: Any, *, axis: int) -> Any:
    """``take_along_axis(a, argsort(b))`` on oracle elements, recording a jump where ``b`` ties
    at the point between positions whose ``a`` values differ (the permutation then jumps)."""
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    base_a = np.vectorize(lambda e: _base_and_side(e)[0] if _is_lazy(e) else Fraction(e),
                          otypes=[object])(a)
    base_b = np.vectorize(lambda e: _base_and_side(e)[0] if _is_lazy(e) else Fraction(e),
                          otypes=[object])(b)
    lanes_a = np.moveaxis(base_a, axis, -1).reshape(-1, a.shape[axis])
    lanes_b = np.moveaxis(base_b, axis, -1).reshape(-1, b.shape[axis])
    # b constant along the ray (a saturated clip) still moves near the point, where its tie
    # breaks both ways: the jump is recorded on any traced element (asd refuses the gather,
    # README.md "Positions as indices")
    lazy = next((e for e in (*b.flat, *a.flat) if _is_lazy(e)), None)
    rays_a = np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])
    rays_b = np.moveaxis(b, axis, -1).reshape(-1, b.shape[axis])
    for la, lb, ra, rb in zip(lanes_a, lanes_b, rays_a, rays_b, strict=True):
        for i in range(len(lb)):
            for j in range(i + 1, len(lb)):
                if lb[i] != lb[j] or lazy is None:
                    continue
                # values apart at the point, or b tied all along the ray (its order beside
                # the ray is not the ray's) with values that part along it (F71)
                if la[i] != la[j] or (_same_along_the_ray(rb[i], rb[j])
                                      and not _same_along_the_ray(ra[i], ra[j])) \
                        or _parts_beside(ra[i], ra[j], rb[i], rb[j]):
                    _record_jump(lazy)
    return _argsort_take(np, a, b, axis=axis)


def _parts_beside(ai: Any, aj: Any, bi: Any, bj: Any) -> bool:
    """Whether gathered values equal at a tie of their keys part on the keys' tie surface
    near the point (Jets: their gradients at the point). On that surface the keys'
    difference has gradient ``gk``; the values' difference ``ga`` must be a multiple of it
    (a sort: ``ga = gk``), else the gather jumps arbitrarily near the point."""
    from asd.testing.exact import Jet

    if not all(isinstance(e, Jet) for e in (ai, aj, bi, bj)):
        return False
    ga = [(p - q).coefficient(0) for p, q in zip(ai.grad, aj.grad, strict=True)]
    gk = [(p - q).coefficient(0) for p, q in zip(bi.grad, bj.grad, strict=True)]
    if not any(ga):
        return False
    lead = next((i for i, g in enumerate(gk) if g), None)
    if lead is None:
        return True
    ratio = ga[lead] / gk[lead]
    return any(a != ratio * k for a, k in zip(ga, gk, strict=True))


def _same_along_the_ray(p: Any, q: Any) -> bool:
    """Whether two oracle elements agree along the ray as far as the oracle sees: equal
    series (a Jet's value series), or an MpDual's equal first-order tangents."""
    from asd.testing.exact import Jet, Series
    from tests.fuzz.oracle import MpDual

    p, q = (e.value if isinstance(e, Jet) else e for e in (p, q))
    if isinstance(p, MpDual) or isinstance(q, MpDual):
        return all(isinstance(e, MpDual) for e in (p, q)) and p.t == q.t
    d = p - q
    return d.sign() == 0 if isinstance(d, Series) else d == 0


register("sorted_by", **_xp(_argsort_take), builder=_sorted_by_builder, kind="jump",
         exact=_exact_argsort_take,
         source="np.take_along_axis({0}, np.argsort({1}, axis={axis}, stable=True), "
                "axis={axis})", torch=_t_argsort_take)


# ----- piecewise-constant functions and functions with jumps -----


def _jump(name: str, numpy: Callable[..., Any], exact: Callable[..., Any], source: str,
          plant: Callable[[Draft, int], int],
          params: Callable[[Draft, tuple[int, ...]], dict[str, Any]] = lambda d, s: {},
          **spellings: Any) -> None:
    register(name, numpy, _unary(name, params=params, plant=plant), source, kind="jump",
             exact=exact, **spellings)


def _divisor_params(d: Draft, shape: tuple[int, ...]) -> dict[str, Any]:
    return {"c": d.draw(st.sampled_from([2.0, -2.0, 0.5, 1.0, -0.25, 4.0]))}


def _plant_on_divisor(d: Draft, a: int) -> int:
    return _plant_multiples(Fraction(1, 2))(d, a)


_jump("floor_divide", lambda a, *, c: a // c,
      lambda a, *, c: _exact_floor_divide(a, c), "{0} // {c}", _plant_on_divisor,
      _divisor_params, torch=lambda a, *, c: _torch().floor_divide(a, c),
      jax=lambda a, *, c: a // c)
_jump("remainder", lambda a, *, c: a % c, lambda a, *, c: _exact_remainder(a, c),
      "{0} % {c}", _plant_on_divisor, _divisor_params,
      torch=lambda a, *, c: _torch().remainder(a, c), jax=lambda a, *, c: a % c)
_jump("np_floor", np.floor, _piecewise_constant(_floor), "np.floor({0})",
      _plant_multiples(1), torch=lambda a: _torch().floor(a), jax=lambda a: _jnp().floor(a))
_jump("np_ceil", np.ceil, _piecewise_constant(_ceil), "np.ceil({0})", _plant_multiples(1),
      torch=lambda a: _torch().ceil(a), jax=lambda a: _jnp().ceil(a))
_jump("np_trunc", np.trunc, _piecewise_constant(_trunc), "np.trunc({0})", _plant_multiples(1),
      torch=lambda a: _torch().trunc(a), jax=lambda a: _jnp().trunc(a))
_jump("np_rint", np.rint, _piecewise_constant(_rint), "np.rint({0})",
      _plant_multiples(1, 0.5), torch=lambda a: _torch().round(a),
      jax=lambda a: _jnp().rint(a))
_jump("method_round", lambda a: a.round(), _piecewise_constant(_rint), "{0}.round()",
      _plant_multiples(1, 0.5), torch=lambda a: a.round(), jax=lambda a: a.round())
_jump("np_sign", np.sign, _piecewise_constant(_sign), "np.sign({0})", _plant_zero,
      torch=lambda a: _torch().sign(a), jax=lambda a: _jnp().sign(a))
_jump("heaviside", lambda a, *, h0: np.heaviside(a, h0),
      lambda a, *, h0: _piecewise_constant(partial(_step, at_zero=Fraction(h0)))(a),
      "np.heaviside({0}, {h0})", _plant_zero,
      lambda d, s: {"h0": d.draw(st.sampled_from([0.0, 0.5, 1.0]))},
      torch=lambda a, *, h0: _torch().heaviside(a, _torch().tensor(h0, dtype=a.dtype)),
      jax=lambda a, *, h0: _jnp().heaviside(a, h0))


def _step_multiply(a: Any, b: Any, c: Any, *, cmp: str) -> Any:
    return a * _compare(b, c, cmp)


def _exact_step_multiply(a: Any, b: Any, c: Any, *, cmp: str) -> Any:
    """``a * (b > c)``: the comparison as a number, with its jump recorded."""
    h = np.asarray(b, dtype=object) - np.asarray(c, dtype=object)
    sign = -1 if cmp in ("<", "<=") else 1
    at_zero = Fraction(int(cmp in (">=", "<=")))
    step = _piecewise_constant(partial(_step, at_zero=at_zero))(h * sign)
    return np.asarray(a, dtype=object) * step


def _step_multiply_builder(d: Draft) -> None:
    a = d.pick()
    b, c = _tie_pair(d, d.shape(a) if d.draw(st.booleans()) else None)
    if base._broadcast(d.shape(a), d.shape(b), d.shape(c)) is None:
        d.emit(Op("abs", (a,)))
        return
    if d.draw(st.booleans()):  # a vanishes where b = c: the product is continuous there
        a = d.emit(Op("subtract", (b, c)))
    d.emit(Op("step_multiply", (a, b, c), {"cmp": d.draw(st.sampled_from([">", ">=", "<"]))}))


register("step_multiply", _step_multiply, _step_multiply_builder,
         "{0} * ({1} {cmp} {2})", kind="jump", exact=_exact_step_multiply,
         torch=_step_multiply, jax=_step_multiply)


def _argmax_pick(a: Any, table: Any) -> Any:
    """``c[argmax(a)]`` with ``c`` a constant table: piecewise constant in ``a``."""
    return np.asarray(table, dtype=float)[np.argmax(a)]


def _exact_argmax_take(a: Any, *, table: Any) -> Any:
    flat = np.ravel(np.asarray(a, dtype=object))
    # the argmax along the ray (first of the tied maxima, as numpy) and at the point itself
    at = [_base_and_side(e)[0] if _is_lazy(e) else Fraction(e) for e in flat]
    top = max(at)
    first_at_point = at.index(top)
    along = int(np.argmax(flat)) if any(_is_lazy(e) for e in flat) else first_at_point
    tied = [i for i, e in enumerate(at) if e == top]
    if len(tied) > 1:
        # a jump where the tied positions read different entries; where they read equal
        # ones the value does not jump, but asd cannot see the plain table (numpy indexes
        # it through __index__) and refuses a tied argmax as its index, as README.md
        # ("Positions as indices") documents: NotLipschitzError is acceptable there too
        _record_jump(flat[tied[0]])
    value = Fraction(table[along])
    anchor = next((e for e in flat if _is_lazy(e)), None)
    return value if anchor is None else _constant_like(anchor, value)


def _argmax_take_builder(d: Draft) -> None:
    a = base._plant_equal(d, d.pick())
    table = tuple(d.draw(st.sampled_from(base.CONSTANTS)) for _ in range(base._size(d.shape(a))))
    out = d.emit(Op("argmax_take", (a,), {"table": table}))
    d.emit(Op("multiply", (out, d.pick(latest=False))))


register("argmax_take", lambda a, *, table: _argmax_pick(a, table), _argmax_take_builder,
         "np.array({table!r})[np.argmax({0})]", kind="jump", exact=_exact_argmax_take,
         params_as_arrays=(),
         torch=lambda a, *, table: _torch().tensor(table, dtype=a.dtype)[_torch().argmax(a)],
         jax=lambda a, *, table: _jnp().asarray(table, dtype=a.dtype)[_jnp().argmax(a)])


def _traced_divisor_builder(name: str) -> Callable[[Draft], None]:
    """``a % b`` or ``a // b`` with a traced divisor kept away from 0 (``|b| + 1``)."""

    def build(d: Draft) -> None:
        a = _plant_on_divisor(d, d.pick())
        b = d.pick(lambda s: base._broadcast(d.shape(a), s) is not None, latest=False)
        b = d.emit(Op("add_constant", (d.emit(Op("abs", (b,))),), {"constant": 1.0}))
        d.emit(Op(name, (a, b)))

    return build


register("remainder_traced", lambda a, b: a % b, _traced_divisor_builder("remainder_traced"),
         "{0} % {1}", kind="jump", exact=_exact_remainder,
         torch=lambda a, b: _torch().remainder(a, b), jax=lambda a, b: a % b)
register("floor_divide_traced", lambda a, b: a // b,
         _traced_divisor_builder("floor_divide_traced"), "{0} // {1}", kind="jump",
         exact=_exact_floor_divide, torch=lambda a, b: _torch().floor_divide(a, b),
         jax=lambda a, b: a // b)


# ----- in-place writes -----


def _key_params(d: Draft, shape: tuple[int, ...]) -> dict[str, Any]:
    n = shape[0]
    i = d.draw(st.integers(0, n - 1))
    return {"key": d.draw(st.sampled_from([i, slice(0, i + 1), slice(None, None, 2), i - n]))}


def _setitem(a: Any, b: Any, *, key: Any) -> Any:
    out = a.copy()
    out[key] = b[key]
    return out


def _as_slice(key: Any, n: int) -> slice:
    """An int key as the one-entry slice at it (a view, where an int gives a copy)."""
    if isinstance(key, slice):
        return key
    i = key % n
    return slice(i, i + 1)


def _setitem_view(a: Any, b: Any, *, key: Any) -> Any:
    """A write through a view of a copy: ``out`` must see it."""
    out = a.copy()
    where = _as_slice(key, np.shape(a)[0])
    view = out[where]
    view[...] = b[where] * 2.0
    return out


def _iadd(a: Any, b: Any, *, key: Any) -> Any:
    out = a.copy()
    out[key] += b[key]
    return out


def _exact_inplace(fn: Callable[..., Any]) -> Callable[..., Any]:
    def apply(a: Any, b: Any, *, key: Any) -> Any:
        return fn(np.array(a, dtype=object), np.array(b, dtype=object), key=key)

    return apply


def _t_setitem(kind: str) -> Callable[..., Any]:
    def apply(a: Any, b: Any, *, key: Any) -> Any:
        out = a.clone()
        k = _as_slice(key, a.shape[0]) if kind == "view" else _t_key(key, a.shape[0])
        if kind == "iadd":
            out[k] = out[k] + b[k]
        else:
            out[k] = b[k] * (2.0 if kind == "view" else 1.0)
        return out

    return apply


def _t_key(key: Any, n: int) -> Any:
    return key if not isinstance(key, int) else key % n


def _j_setitem(kind: str) -> Callable[..., Any]:
    def apply(a: Any, b: Any, *, key: Any) -> Any:
        if kind == "iadd":
            return a.at[key].add(b[key])
        if kind == "view":
            key = _as_slice(key, a.shape[0])
        return a.at[key].set(b[key] * (2.0 if kind == "view" else 1.0))

    return apply


def _inplace_builder(name: str) -> Callable[[Draft], None]:
    def build(d: Draft) -> None:
        a = _with_ndim(d)
        if a is None:
            d.emit(Op("abs", (d.pick(),)))
            return
        b = d.pick(lambda s: s == d.shape(a), latest=False)
        d.emit(Op(name, (a, b), _key_params(d, d.shape(a))))

    return build


register("setitem", _setitem, _inplace_builder("setitem"), "setitem({0}, {1}, key={key})",
         exact=_exact_inplace(_setitem), torch=_t_setitem("set"), jax=_j_setitem("set"))
register("setitem_view", _setitem_view, _inplace_builder("setitem_view"),
         "setitem_view({0}, {1}, key={key})", exact=_exact_inplace(_setitem_view),
         torch=_t_setitem("view"), jax=_j_setitem("view"))
register("iadd", _iadd, _inplace_builder("iadd"), "iadd({0}, {1}, key={key})",
         exact=_exact_inplace(_iadd), torch=_t_setitem("iadd"), jax=_j_setitem("iadd"))


def _into_constant(a: Any, *, key: Any, fill: float) -> Any:
    """``c = np.full(shape, fill); c[key] = a[key]``: a traced value written into a constant."""
    out = np.full(np.shape(a), fill)
    out[key] = a[key]
    return out


def _exact_into_constant(a: Any, *, key: Any, fill: float) -> Any:
    out = np.full(np.shape(a), Fraction(fill), dtype=object)
    out[key] = np.asarray(a, dtype=object)[key]
    return out


register("setitem_constant", _into_constant,
         _unary("setitem_constant", lambda s: len(s) >= 1,
                lambda d, s: {**_key_params(d, s), "fill": d.draw(st.sampled_from([0.0, 1.5]))}),
         "setitem_constant({0}, key={key}, fill={fill})", exact=_exact_into_constant,
         torch=lambda a, *, key, fill: _torch().full_like(a, fill).index_put(
             (_torch().tensor(_t_key(key, a.shape[0])),), a[_t_key(key, a.shape[0])])
         if isinstance(key, int) else _t_into_constant(a, key, fill),
         jax=lambda a, *, key, fill: _jnp().full_like(a, fill).at[key].set(a[key]))


def _t_into_constant(a: Any, key: Any, fill: float) -> Any:
    out = _torch().full_like(a, fill)
    out[key] = a[key]
    return out


# ----- constants of every dtype -----

CONSTANT_KINDS: dict[str, tuple[Any, ...]] = {
    # kind: values drawn for it
    "py_int": (0, 3, -2, 2**60), "py_bool": (True, False), "py_float": (0.5, -1.25),
    "bool": (True, False), "int8": (-3, 7, 0), "int16": (-300, 2), "int32": (5, -2**31),
    "int64": (3, 2**53 + 1, -(2**62)), "uint8": (200, 1), "uint16": (65535, 3),
    "complex128": (1.5 + 0j, 0.5 - 2j), "complex64": (1 + 1j,), "py_complex": (2j, 1 + 0j),
    "py_huge": (1e300, -1e308),
    "uint32": (2**32 - 1, 2), "uint64": (2**63, 5, 2**64 - 1), "float16": (0.5, 65504.0, 0.1),
    "float32": (0.1, -2.5), "float64": (0.75, -0.1), "longdouble": (0.5, 0.1),
    "0d_int8": (-3, 4), "0d_float32": (0.1, 1.5), "0d_bool": (True,), "0d_uint64": (2**63,),
    "array_int8": (1, -2, 3), "array_uint8": (255, 1, 0), "array_float16": (0.5, -0.25, 0.1),
    "array_bool": (True, False), "array_int64": (2**53 + 1, 1, -3),
    "readonly": (0.5, -1.0, 2.0), "broadcast_view": (0.5, -1.0), "strided_view": (1.0, -0.5),
    "fortran": (1.0, 2.0, -1.0), "masked": (1.0, -2.0, 0.5),
}
CONSTANT_OPS = ("+", "-", "r-", "*", "maximum", "minimum")


def make_constant(kind: str, values: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """The constant a program step uses: a numpy/Python scalar or an array of ``kind``."""
    if kind.startswith("py_"):
        return {"py_int": int, "py_bool": bool, "py_float": float, "py_complex": complex,
                "py_huge": float}[kind](values[0])
    if kind.startswith("0d_"):
        return np.array(values[0], dtype=np.dtype(kind[3:]))
    if (not kind.startswith("array_") and kind in np.sctypeDict) or kind == "longdouble":
        return np.dtype(kind).type(values[0])
    flat = [values[i % len(values)] for i in range(base._size(shape))]
    if kind.startswith("array_"):
        return np.array(flat, dtype=np.dtype(kind[6:])).reshape(shape)
    array = np.array(flat, dtype=float).reshape(shape)
    if kind == "readonly":
        array.setflags(write=False)
        return array
    if kind == "broadcast_view":
        return np.broadcast_to(np.array(flat[:1], dtype=float), shape)
    if kind == "strided_view":
        return np.repeat(array.ravel(), 2)[::2].reshape(shape)
    if kind == "fortran":
        return np.asfortranarray(array)
    mask = np.arange(array.size).reshape(shape) % 2 == 1
    return np.ma.array(array, mask=mask)


def _constant_op(a: Any, c: Any, op: str) -> Any:
    if op == "+":
        return a + c
    if op == "-":
        return a - c
    if op == "r-":
        return c - a
    if op == "*":
        return a * c
    return (np.maximum if op == "maximum" else np.minimum)(a, c)


def _dtype_constant(a: Any, *, kind: str, values: tuple[Any, ...], op: str) -> Any:
    return _constant_op(a, make_constant(kind, values, np.shape(a)), op)


def _exact_dtype_constant(a: Any, *, kind: str, values: tuple[Any, ...], op: str) -> Any:
    """The constant exactly (masked entries by their data, as the values under the mask; a
    complex constant by its real part: numpy's result is then complex, which asd must refuse,
    so only the real program is ever compared)."""
    c = make_constant(kind, values, np.shape(a))
    if np.iscomplexobj(c):
        c = np.real(c)
    return _constant_op(np.asarray(a, dtype=object), fractions_of(c), op)


def _dtype_constant_builder(d: Draft) -> None:
    a = d.pick()
    kind = d.draw(st.sampled_from(sorted(CONSTANT_KINDS)))
    if not kind.startswith(("py_", "0d_")) and kind not in np.sctypeDict and not d.shape(a):
        kind = "0d_float32"
    values = tuple(d.draw(st.lists(st.sampled_from(CONSTANT_KINDS[kind]), min_size=1,
                                   max_size=3)))
    d.emit(Op("dtype_constant", (a,), {"kind": kind, "values": values,
                                        "op": d.draw(st.sampled_from(CONSTANT_OPS))}))


def _t_dtype_constant(a: Any, *, kind: str, values: tuple[Any, ...], op: str) -> Any:
    c = np.ma.getdata(make_constant(kind, values, tuple(a.shape)))
    torch = _torch()
    t = torch.as_tensor(np.asarray(c, dtype=float), dtype=a.dtype)
    return _constant_op(a, t, op) if op not in ("maximum", "minimum") else (
        torch.maximum if op == "maximum" else torch.minimum)(a, t)


def _j_dtype_constant(a: Any, *, kind: str, values: tuple[Any, ...], op: str) -> Any:
    jnp = _jnp()
    c = jnp.asarray(np.asarray(np.ma.getdata(make_constant(kind, values, a.shape)), dtype=float),
                    dtype=a.dtype)
    if op in ("maximum", "minimum"):
        return getattr(jnp, op)(a, c)
    return _constant_op(a, c, op)


register("dtype_constant", _dtype_constant, _dtype_constant_builder,
         "{0} {op} make_constant({kind!r}, {values}, {0}.shape)", exact=_exact_dtype_constant,
         torch=_t_dtype_constant, jax=_j_dtype_constant, params_as_arrays=())


def _complex_part(a: Any, *, c: tuple[float, float], part: str, spelling: str) -> Any:
    """``(a * c).real`` (or ``.imag``, ``np.real``, ``np.imag``) with a complex constant ``c``."""
    z = a * complex(*c)
    if spelling == "method":
        return z.real if part == "real" else z.imag
    return np.real(z) if part == "real" else np.imag(z)


def _exact_complex_part(a: Any, *, c: tuple[float, float], part: str, spelling: str) -> Any:
    return np.asarray(a, dtype=object) * Fraction(c[0] if part == "real" else c[1])


register("complex_part", _complex_part,
         _unary("complex_part", params=lambda d, s: {
             "c": d.draw(st.sampled_from([(1.5, 0.0), (0.5, -2.0), (0.0, 1.0)])),
             "part": d.draw(st.sampled_from(["real", "imag"])),
             "spelling": d.draw(st.sampled_from(["method", "function"]))}),
         "({0} * complex(*{c})).{part}", exact=_exact_complex_part, params_as_arrays=(),
         torch=lambda a, *, c, part, spelling: getattr(a * complex(*c), part),
         jax=lambda a, *, c, part, spelling: getattr(a * complex(*c), part))


# ----- linear algebra with exact evaluators -----


def _exact_det(a: Any) -> Any:
    a = np.asarray(a, dtype=object)
    n = a.shape[-1]
    if n == 1:
        return a[0, 0]
    if n == 2:
        return a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]
    return sum(((-1) ** j) * a[0, j] * _exact_det(np.delete(a[1:], j, axis=1)) for j in range(n))


def _square_builder(name: str) -> Callable[[Draft], None]:
    """``name(A)`` for a square matrix: a 2-D square value, or a value reshaped to one."""

    def build(d: Draft) -> None:
        a = base._pick_or_any(d, lambda s: len(s) == 2 and s[0] == s[1])
        if a is None:
            a = base._pick_or_any(d, lambda s: base._size(s) in (4, 9, 1))
            if a is None:
                d.emit(Op("abs", (d.pick(),)))
                return
            n = round(math.sqrt(base._size(d.shape(a))))
            a = d.emit(Op("reshape", (a,), {"shape": (n, n)}))
        d.emit(Op(name, (a,)))

    return build


register("det", **_xp(lambda xp, a: xp.linalg.det(a)), builder=_square_builder("det"),
         source="np.linalg.det({0})", exact=_exact_det, exact_floats=False,
         torch=lambda a: _torch().linalg.det(a))


def _exact_matrix_norm(a: Any, *, order: Any) -> Any:
    a = np.abs(np.asarray(a, dtype=object))
    if order == 1:
        return np.maximum.reduce(np.sum(a, axis=0))
    return np.maximum.reduce(np.sum(a, axis=1))


def _exact_vector_norm(a: Any, *, order: Any) -> Any:
    a = np.abs(np.ravel(np.asarray(a, dtype=object)))
    if order == 1:
        return np.sum(a)
    return (np.maximum if order == math.inf else np.minimum).reduce(a)


def _norm_builder(d: Draft) -> None:
    a = _with_ndim(d, 1, 2)
    if a is None:
        d.emit(Op("abs", (d.pick(),)))
        return
    a = d.maybe_zero(base._plant_equal(d, a))
    orders = [1, math.inf] + ([-math.inf] if len(d.shape(a)) == 1 else [])
    d.emit(Op("np_norm", (a,), {"order": d.draw(st.sampled_from(orders))}))


def _np_norm(xp: Any, a: Any, *, order: Any) -> Any:
    return xp.linalg.norm(a, order)


def _exact_np_norm(a: Any, *, order: Any) -> Any:
    return (_exact_matrix_norm if np.ndim(a) == 2 else _exact_vector_norm)(a, order=order)


register("np_norm", **_xp(_np_norm), builder=_norm_builder, source="np.linalg.norm({0}, {order})",
         exact=_exact_np_norm,
         torch=lambda a, *, order: _torch().linalg.norm(a, order))


# ----- smooth functions (the mpmath oracle) -----

_SMOOTH_DOMAIN = {
    # name: (domain, torch name, jax spelling); domain 'any', 'bounded' (|a| <= 2),
    # 'small' (|a| <= 1) or 'positive' (applied to |a| + c, c > 0)
    "exp": "bounded", "expm1": "bounded", "sinh": "bounded", "cosh": "bounded",
    "tan": "small", "sin": "any", "cos": "any", "tanh": "any", "arctan": "any",
    "arcsinh": "any", "log": "positive", "log1p": "positive", "sqrt": "positive",
    "cbrt": "positive", "reciprocal": "positive", "log2": "positive", "exp2": "bounded",
}
_TORCH_NAMES = {"arctan": "atan", "arcsinh": "asinh", "cbrt": None, "log2": "log2",
                "exp2": "exp2"}


def _domain(d: Draft, a: int, domain: str) -> int:
    """``a`` moved into the function's domain by ops that are themselves fuzzed (clip, abs)."""
    if domain == "any":
        return a
    if domain in ("bounded", "small"):
        bound = 2.0 if domain == "bounded" else 1.0
        return d.emit(Op("clip", (a,), {"lo": -bound, "hi": bound}))
    shift = d.draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]))
    return d.emit(Op("add_constant", (d.emit(Op("abs", (a,))),), {"constant": shift}))


def _smooth_builder(name: str) -> Callable[[Draft], None]:
    def build(d: Draft) -> None:
        d.emit(Op(name, (_domain(d, d.pick(), _SMOOTH_DOMAIN[name]),)))

    return build


def _t_smooth(name: str) -> Callable[[Any], Any] | None:
    torch_name = _TORCH_NAMES.get(name, name)
    if torch_name is None:
        return None
    return lambda a: getattr(_torch(), torch_name)(a)


for _name in _SMOOTH_DOMAIN:
    register(_name, getattr(np, _name), _smooth_builder(_name), f"np.{_name}({{0}})",
             kind="smooth", exact=_call_method(_name), torch=_t_smooth(_name),
             jax=(lambda n: lambda a: getattr(_jnp(), n)(a))(_name))


def _binary_smooth(name: str) -> None:
    register(name, getattr(np, name), base._binary(name, plant_ties=True),
             f"np.{name}({{0}}, {{1}})", kind="smooth",
             exact=_elementwise(lambda a, b: _binary_dual(name, a, b), 2),
             torch=lambda a, b: getattr(_torch(), name)(a, b),
             jax=lambda a, b: getattr(_jnp(), name)(a, b))


def _binary_dual(name: str, a: Any, b: Any) -> Any:
    """``name(a, b)`` on MpDuals (a constant on one side promoted by the other's `_coerce`)."""
    if _is_lazy(a):
        return getattr(a, name)(b)
    if _is_lazy(b):
        return getattr(b._coerce(a), name)(b)
    return getattr(np, name)(float(a), float(b))


_binary_smooth("hypot")
_binary_smooth("logaddexp")


def _where_nan(a: Any) -> Any:
    """``where(a > 0, a * sqrt(a), 0)``: numpy's value is finite, the branch not taken is NaN
    where ``a < 0`` (continuous, with slope 0 at ``a = 0``)."""
    return np.where(a > 0, a * np.sqrt(a), 0.0)


def _exact_where_nan(a: Any) -> Any:
    positive = a > 0
    inside = np.where(positive, a, 1.0)
    power = _elementwise(lambda e: e.power(1.5) if _is_lazy(e) else float(e) ** 1.5)(inside)
    return np.where(positive, power, 0.0)


register("where_nan", _where_nan,
         _unary("where_nan", plant=lambda d, a: d.maybe_zero(a)),
         "np.where({0} > 0, {0} * np.sqrt({0}), 0.0)", kind="smooth", exact=_exact_where_nan,
         torch=lambda a: _torch().where(a > 0, a * _torch().sqrt(a), 0.0),
         jax=lambda a: _jnp().where(a > 0, a * _jnp().sqrt(a), 0.0))


def _power_builder(d: Draft) -> None:
    """``|a| ** p`` with a float exponent ``p > 1``: Lipschitz at 0, with slope 0 there."""
    a = d.emit(Op("abs", (d.maybe_zero(d.pick()),)))
    d.emit(Op("float_power", (a,), {"p": d.draw(st.sampled_from([1.5, 2.5, 3.0, 2.0]))}))


register("float_power", lambda a, *, p: a**p, _power_builder, "{0} ** {p}", kind="smooth",
         exact=lambda a, *, p: _elementwise(lambda e: e.power(p) if _is_lazy(e) else e**p)(a),
         torch=lambda a, *, p: a**p, jax=lambda a, *, p: a**p)


def _norm2_builder(d: Draft) -> None:
    d.emit(Op("norm2", (d.maybe_zero(d.pick()),)))


register("norm2", lambda a: np.linalg.norm(a), _norm2_builder, "np.linalg.norm({0})",
         kind="smooth", exact=lambda a: _norm2_exact(a),
         torch=lambda a: _torch().linalg.vector_norm(a),
         jax=lambda a: _jnp().linalg.norm(a))


def _norm2_exact(a: Any) -> Any:
    from tests.fuzz.oracle import MpDual

    return MpDual.norm(list(np.ravel(np.asarray(a, dtype=object))))


def _var_builder(name: str) -> Callable[[Draft], None]:
    def build(d: Draft) -> None:
        a = _with_ndim(d)
        if a is None:
            d.emit(Op("abs", (d.pick(),)))
            return
        if name == "method_std":  # std is sqrt(var): keep the variance away from 0
            a = d.emit(Op("concatenate", (d.emit(Op("method_ravel", (a,))),
                                          d.emit(Op("method_ravel", (d.emit(Op(
                                              "add_constant", (a,), {"constant": 1.0})),)))),
                          {"axis": 0}))
        d.emit(Op(name, (a,), {"axis": _axis(d, d.shape(a))}))

    return build


def _exact_std(a: Any, *, axis: Any) -> Any:
    return _call_method("sqrt")(np.asarray(_exact_var(a, axis=axis), dtype=object))


register("method_var", lambda a, *, axis: a.var(axis=axis), _var_builder("method_var"),
         "{0}.var(axis={axis})", exact=_exact_var,
         torch=lambda a, *, axis: a.var(**_t_axis(axis), correction=0),
         jax=lambda a, *, axis: a.var(axis=axis), exact_floats=_dyadic_count)
register("method_std", lambda a, *, axis: a.std(axis=axis), _var_builder("method_std"),
         "{0}.std(axis={axis})", kind="smooth", exact=_exact_std,
         torch=lambda a, *, axis: a.std(**_t_axis(axis), correction=0),
         jax=lambda a, *, axis: a.std(axis=axis), exact_floats=_dyadic_count)


# ----- names by family, for the strategies -----

def names_of(kind: str) -> tuple[str, ...]:
    return tuple(name for name, e in TABLE.items() if e.kind == kind)


KINKS = ("relu", "abs", "maximum", "minimum", "where", "where_logic", "np_clip", "method_max",
         "fmax", "sort", "np_median", "step_multiply", "floor_divide", "remainder")
"""Drawn more often (and first): the simplest program hypothesis shrinks to is a kink."""

UNPLANTED = {"proj_simplex", "hard_sigmoid"}
"""tests.programs' RATIONAL ops (slopes 1/6, 1/k): drawn only where ``rational`` is asked."""


# ----- the reproducer's source -----


def _render(value: Any) -> str:
    if isinstance(value, tuple) and value and isinstance(value[0], tuple | float):
        return f"np.array({value!r})"
    if isinstance(value, slice):
        parts = ["" if p is None else str(p) for p in (value.start, value.stop, value.step)]
        return ":".join(parts).rstrip(":") or ":"
    return repr(value)


def source_line(k: int, op: Op) -> str:
    """``x{k} = <numpy spelling>``: one line of a program's reproducer."""
    template = TABLE[op.name].source
    args = [f"x{i}" for i in op.args]
    params = {key: value if key in ("op", "part") else _render(value)
              for key, value in op.params.items()}
    template = template.replace("{1|constant}", "{1}" if len(args) > 1 else "{constant}")
    template = template.replace("{2+}", ", ".join(args[2:]) or "")
    template = template.replace("{args}", ", ".join(args))
    for key, value in op.params.items():
        template = template.replace(f"{{{key}!r}}", repr(value))
    try:
        return f"x{k} = " + template.format(*args, **params)
    except (IndexError, KeyError):
        return f"x{k} = {op.name}({', '.join(args)}, **{op.params!r})"


# ----- the helpers a reproducer's source calls -----

where_ramp = base.IMPLEMENTATIONS["where"]
setitem, setitem_view, iadd, setitem_constant = _setitem, _setitem_view, _iadd, _into_constant


def where_logic(*args: Any, **params: Any) -> Any:
    """``where`` over comparisons combined with ``& | ~ ^`` (see `_where_logic`)."""
    return _where_logic(np, *args, **params)


REPRODUCER_HEADER = ("import numpy as np\nimport asd\nfrom tests.fuzz.ops import iadd, "
                     "make_constant, setitem, setitem_constant, setitem_view, where_logic, "
                     "where_ramp\n")
