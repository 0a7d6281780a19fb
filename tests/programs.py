"""Random straight-line nonsmooth programs with planted ties, as hypothesis strategies.

A `Program` is plain data: a list of `Op` (name, indices of earlier values, static parameters);
value 0 is the input. `run` interprets it with plain numpy calls, so one program runs on float
arrays, on asd's traced arrays, and on object arrays of the oracle's `Series` and `Jet`.

Random points almost never sit on a kink, and away from kinks every AD tool is right. So the
strategies put the point *on* kinks: inputs repeat a few small values (zeros, equal entries),
``add_constant`` may shift chosen entries exactly to zero or onto another value, and binary ops may
take the same value twice (``subtract(a, a)``). Directions have zeros and repeated entries too, so
some ties are broken only at second order or not at all (`DegenerateTie`).

Library ops (clip, the activation family, max/min/sort/top-k/median/pooling/cummax, l1 and
l-infinity norms, polyhedral projections) run as the library's function on traced arrays and as
an independent plain-numpy reference everywhere else (`LIBRARY`); their builders put entries on
the breakpoints, on the clip bounds, and on each other (equal entries for the order ops).

Every number is a small dyadic rational and programs are short (at most 7 drawn steps, some
planting a tie first, then the sums of unused values added in, so that every op counts). The
strategy keeps only programs whose float64 evaluation is exact with every value below 2**12, so
float results can be compared exactly with the oracle's Fractions.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import asd
from asd.extend import is_traced
from asd.testing.exact import (
    DegenerateTie,
    Jet,
    Series,
    as_fractions,
    jet_ray,
    series_ray,
    to_fraction,
)

MAX_STEPS = 7  # each step is one op, or two when it first plants a tie
MAX_SIZE = 16  # elements per value, so broadcasting cannot blow up
MAX_MAGNITUDE = Fraction(2**12)  # bounds on every value keep products, sums and gradients exact
MAX_DENOMINATOR = 2**20  # in float64 (53-bit significand)

X_ENTRIES = (0.0, 1.0, -1.0, 0.5, -0.5, 0.75, -1.5, 2.0)  # few values: repeats make ties
V_ENTRIES = (1.0, -1.0, 0.0, 2.0, -0.5, 0.25, 3.0)  # zeros and repeats make degenerate ties
CONSTANTS = (1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 0.75, -0.25, 3.0)
DIVISORS = (2.0, -2.0, 0.5, -0.5, 4.0, 1.0, -0.25)  # powers of two: division stays exact


@dataclass(frozen=True)
class Op:
    """One step ``value = name(*values[args], **params)``; array constants are nested tuples."""

    name: str
    args: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    """A straight-line program; ``shapes[k]`` is the shape of value ``k`` (``shapes[0]``: input).

    ``reduce``: `run` sums a non-scalar result (scalar programs for subgradients).
    """

    ops: tuple[Op, ...]
    shapes: tuple[tuple[int, ...], ...]
    reduce: bool = True

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints falsifying programs as this listing too."""
        printer.text(repr(self))

    def __repr__(self) -> str:
        lines = [f"Program(input {self.shapes[0]}{', summed' if self.reduce else ''}):"]
        for k, op in enumerate(self.ops, start=1):
            args = " ".join(f"%{i}" for i in op.args)
            params = " ".join(f"{key}={value}" for key, value in op.params.items())
            lines.append(f"  %{k} = {op.name} {args} {params}".rstrip() + f"  # {self.shapes[k]}")
        return "\n".join(lines)


# ----- interpretation: plain numpy, whatever the array type -----


def _where(a: Any, b: Any, *ramp: Any, cmp: str) -> Any:
    """``where`` forms continuous across ``a == b``: a max, or ``g + (a - b) * p`` against ``g``."""
    condition = a > b if cmp == ">" else a >= b
    if not ramp:
        return np.where(condition, a, b)
    g, p = ramp
    return np.where(condition, g + (a - b) * p, g)


def _matmul(a: Any, b: Any = None, *, constant: Any = None) -> Any:
    return a @ (constant if b is None else b)


def _dot(a: Any, b: Any = None, *, constant: Any = None) -> Any:
    return np.dot(a, constant if b is None else b)


# ----- library ops: asd's function on traced arrays, a plain numpy reference otherwise -----
# The reference is written with the few numpy calls that also run on object arrays of exact
# series (maximum, minimum, abs, sort, cumsum, arithmetic), never with the library itself, so
# the oracle checks the library's rule against an independent program for the same function.


def _library(traced: Callable[..., Any], reference: Callable[..., Any]) -> Callable[..., Any]:
    """An op that calls ``traced`` (asd's primitive) when an argument is traced."""

    def op(*args: Any, **params: Any) -> Any:
        return (traced if any(is_traced(a) for a in args) else reference)(*args, **params)

    return op


def _clip(a: Any, lo: Any, hi: Any) -> Any:
    return np.minimum(np.maximum(a, lo), hi)


def _bounded(a: Any, *, lo: Any, hi: Any) -> Any:
    return _clip(a, lo, hi)


def _reduce(ufunc: np.ufunc, a: Any, *, axis: int | None, keepdims: bool) -> Any:
    return ufunc.reduce(a, axis, keepdims=keepdims)


def _leaky_relu(a: Any, *, negative_slope: float) -> Any:
    return np.where(a >= 0, a, a * negative_slope)


def _huber(a: Any, *, delta: float) -> Any:
    """``m (a - m / 2)`` with ``m = clip(a, -delta, delta)``: both pieces in one formula."""
    m = _clip(a, -delta, delta)
    return m * (a - m / 2)


def _axis_sorted(a: Any, axis: int | None) -> tuple[Any, int]:
    """``a`` sorted along ``axis`` (flattened for None) and the axis sorted along."""
    return (np.sort(a, axis=None), 0) if axis is None else (np.sort(a, axis=axis), axis)


def _topk_sum(a: Any, *, k: int, axis: int) -> Any:
    """The sum of the ``k`` largest, added largest first as ``asd.topk_sum`` adds them (its
    rounding is its own, not numpy's: summed smallest first, the float can differ in the
    last bit, numpy campaign seed 3001)."""
    if axis is None:
        a, axis = np.ravel(a), 0
    s = -np.sort(-np.asarray(a), axis=axis)
    return np.sum(np.take(s, range(k), axis=axis), axis=axis)


def _median(a: Any, *, axis: int | None) -> Any:
    s, axis = _axis_sorted(a, axis)
    n = s.shape[axis]
    middle = np.take(s, sorted({(n - 1) // 2, n // 2}), axis=axis)
    return np.sum(middle, axis=axis) / middle.shape[axis]


def _max_pool1d(a: Any, *, window: int, stride: int, padding: int) -> Any:
    """Windows over the last axis; the -inf padding never wins, so windows just shrink."""
    n = a.shape[-1]
    starts = range(-padding, n + padding - window + 1, stride)
    windows = [a[..., max(s, 0) : min(s + window, n)] for s in starts]
    return np.stack([np.maximum.reduce(w, axis=-1) for w in windows], axis=-1)


def _simplex(a: Any, *, radius: float) -> Any:
    """``max(a - tau, 0)`` with ``tau = max_k (sum of the k largest - radius) / k``."""
    u = np.sort(np.ravel(a))[::-1]
    tau = np.maximum.reduce((np.cumsum(u) - radius) / np.arange(1, u.size + 1))
    return np.maximum(a - tau, 0.0)


LIBRARY: dict[str, Callable[..., Any]] = {
    # piecewise (library/piecewise.py)
    "clip": _library(lambda a, *, lo, hi: asd.clip(a, lo, hi), _bounded),
    "clip_traced": _library(asd.clip, _clip),
    "hardtanh": _library(lambda a, *, lo, hi: asd.hardtanh(a, lo, hi), _bounded),
    "leaky_relu": _library(asd.leaky_relu, _leaky_relu),
    "relu6": _library(asd.relu6, lambda a: _clip(a, 0.0, 6.0)),
    "hard_sigmoid": _library(asd.hard_sigmoid, lambda a: _clip(a + 3.0, 0.0, 6.0) / 6),
    "soft_threshold": _library(
        lambda a, *, lam: asd.soft_threshold(a, lam), lambda a, *, lam: a - _clip(a, -lam, lam)
    ),
    "hinge": _library(asd.hinge, lambda a: np.maximum(1.0 - a, 0.0)),
    "huber": _library(asd.huber, _huber),
    # order (library/order.py)
    "max": _library(asd.max, partial(_reduce, np.maximum)),
    "min": _library(asd.min, partial(_reduce, np.minimum)),
    "sort": _library(asd.sort, lambda a, *, axis: np.sort(a, axis=axis)),
    "topk_sum": _library(lambda a, *, k, axis: asd.topk_sum(a, k, axis), _topk_sum),
    "median": _library(asd.median, _median),
    "max_pool1d": _library(
        lambda a, *, window, stride, padding: asd.max_pool1d(a, window, stride, padding),
        _max_pool1d,
    ),
    "cummax": _library(asd.cummax, lambda a, *, axis: np.maximum.accumulate(a, axis=axis)),
    # norms (library/norms.py)
    "l1_norm": _library(asd.l1_norm, lambda a, *, axis: np.sum(np.abs(a), axis=axis)),
    "linf_norm": _library(asd.linf_norm, lambda a, *, axis: np.maximum.reduce(np.abs(a), axis)),
    # projections (library/projections.py)
    "proj_nonneg": _library(asd.projections.nonneg, lambda a: np.maximum(a, 0.0)),
    "proj_box": _library(lambda a, *, lo, hi: asd.projections.box(a, lo, hi), _bounded),
    "proj_linf_ball": _library(
        lambda a, *, radius: asd.projections.linf_ball(a, radius),
        lambda a, *, radius: _clip(a, -radius, radius),
    ),
    "proj_simplex": _library(lambda a, *, radius: asd.projections.simplex(a, radius), _simplex),
}
RATIONAL = {"hard_sigmoid", "proj_simplex"}
"""Ops whose derivatives may leave the dyadic rationals (1/6, 1/k): see `derivatives_are_dyadic`
and `hard_sigmoid_is_flat`."""
ARRAY_PARAMS = ("constant", "lo", "hi", "lam")  # nested tuples become float arrays


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "negative": operator.neg,
    "divide_by_constant": lambda a, *, constant: a / constant,
    "add_constant": lambda a, *, constant: a + constant,
    "multiply_constant": lambda a, *, constant: a * constant,
    "integer_power": lambda a, *, exponent: a**exponent,
    "sum": lambda a, *, axis: np.sum(a, axis=axis),
    "matmul": _matmul,
    "dot": _dot,
    "index": lambda a, *, key: a[key],
    "relu": lambda a: np.maximum(a, 0.0),
    "abs": np.abs,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "where": _where,
    # smooth structure and contraction (library/smooth.py): polynomial, so the oracle is exact
    "square": np.square,
    "transpose": np.transpose,
    "reshape": lambda a, *, shape: np.reshape(a, shape),
    "cumsum": lambda a, *, axis: np.cumsum(a, axis=axis),
    "prod": lambda a, *, axis: np.prod(a, axis=axis),
    "diff": lambda a, *, axis: np.diff(a, axis=axis),
    "concatenate": lambda a, b, *, axis: np.concatenate([a, b], axis=axis),
    "stack": lambda a, b: np.stack([a, b]),
    "pad": lambda a, *, width: np.pad(a, width),
    "take": lambda a, *, indices: np.take(a, indices),
    "einsum": lambda a, b, *, spec: np.einsum(spec, a, b),
    **LIBRARY,
}


def apply(op: Op, values: Sequence[Any]) -> Any:
    """The value of ``op`` given all earlier values."""
    params = dict(op.params)
    for key in ARRAY_PARAMS:
        if isinstance(params.get(key), tuple):
            params[key] = np.array(params[key], dtype=float)
    return IMPLEMENTATIONS[op.name](*(values[i] for i in op.args), **params)


def evaluate(program: Program, x: Any) -> list[Any]:
    """All values of ``program`` at ``x`` (value 0 is ``x`` itself)."""
    values = [x]
    for op in program.ops:
        values.append(apply(op, values))
    return values


def assert_exact(actual, expected, what):
    """``actual`` (floats) equals ``expected`` (Fractions) exactly, shape included."""
    actual, expected = np.asarray(actual, dtype=float), as_fractions(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert np.all(as_fractions(actual) == expected), (
        f"{what}: {actual.tolist()} != {expected.astype(float).tolist()} (exact: {expected})"
    )


def run(program: Program, x: Any) -> Any:
    """The program's result at ``x``: the last value, summed if ``program.reduce``."""
    out = evaluate(program, x)[-1]
    return np.sum(out) if program.reduce and program.shapes[-1] != () else out


def _fractions(value: Any) -> np.ndarray:
    """An exactly evaluated value (Series of order 0, or float zeros from relu) as Fractions."""
    value = np.asarray(value, dtype=object)
    exact = [e.coefficient(0) if isinstance(e, Series) else to_fraction(e) for e in value.flat]
    return np.array(exact, dtype=object).reshape(value.shape)


def _exact_input(x: Any) -> np.ndarray:
    """``x`` as order-0 Series: exact numbers that, unlike Fraction, keep float constants exact."""
    return series_ray(x, np.zeros(np.shape(x)), order=0)


def exact_values(program: Program, x: Any) -> list[np.ndarray]:
    """All values of ``program`` at ``x`` in exact rational arithmetic, as Fraction arrays."""
    return [_fractions(value) for value in evaluate(program, _exact_input(x))]


def run_exact(program: Program, x: Any) -> Fraction | np.ndarray:
    """`run` in exact rational arithmetic: a Fraction, or an object array of Fractions."""
    out = _fractions(run(program, _exact_input(x)))
    return out[()] if out.ndim == 0 else out


def float_is_exact(program: Program, x: Any) -> bool:
    """Whether float64 evaluation is exact at ``x``, with room to spare for derivatives."""
    floats = evaluate(program, np.asarray(x, dtype=float))
    for exact, approx in zip(exact_values(program, x), floats, strict=True):
        if exact.shape != np.shape(approx) or not np.all(exact == as_fractions(approx)):
            return False
        if any(abs(e) > MAX_MAGNITUDE or e.denominator > MAX_DENOMINATOR for e in exact.flat):
            return False
    return True


def _dyadic(values: Any) -> bool:
    exact = as_fractions(values)
    return all(e.denominator & (e.denominator - 1) == 0 and e.denominator <= MAX_DENOMINATOR
               and abs(e) <= MAX_MAGNITUDE for e in exact.flat)


def derivatives_are_dyadic(program: Program, x: Any, v: Any) -> bool:
    """Whether the exact derivatives of every value (its one-sided derivative along ``v`` and
    its limiting Jacobian) are float64 numbers.

    Programs with `RATIONAL` ops (slopes 1/6, 1/k) are kept only where they are, so that asd's
    floats can be compared exactly: intermediates count too, since ``2/3 - 1/3 - 1/3`` is not
    0 in floats. Where ``v`` does not decide the Jacobians (`DegenerateTie`, skipped by the
    tests) only the one-sided derivatives are checked.
    """
    slopes = evaluate(program, series_ray(x, v, order=1))
    if not all(_dyadic(_coefficients(value, 1)) for value in slopes):
        return False
    try:
        jets = evaluate(program, jet_ray(x, v))
    except DegenerateTie:
        return True
    return all(_dyadic([g.coefficient(0) for e in np.asarray(value, dtype=object).flat
                        if isinstance(e, Jet) for g in e.grad]) for value in jets)


def hard_sigmoid_is_flat(program: Program, x: Any, v: Any) -> bool:
    """Whether every ``hard_sigmoid`` entry sits on a flat piece along the ray ``x + δv``.

    Its slope 1/6 is the float ``1/6`` in asd, so a product such as ``9/16 * (1/6) = 3/32``
    rounds in floats although it is dyadic: only the flat pieces compare exactly. Entries at
    the kinks ±3 stay when the ray leaves outwards (or runs along the kink), so the direction
    test at the kinks is kept; entries the ray moves inside are dropped.
    """
    series = evaluate(program, series_ray(x, v, order=2))
    for op in program.ops:
        if op.name == "hard_sigmoid":
            for e in np.asarray(series[op.args[0]], dtype=object).flat:
                s = e if isinstance(e, Series) else Series(e)
                if (s - 3).sign() < 0 and (s + 3).sign() > 0:
                    return False
    return True


def _coefficients(value: Any, k: int) -> list[Fraction]:
    return [e.coefficient(k) for e in np.asarray(value, dtype=object).flat
            if isinstance(e, Series)]


def tied_entries(program: Program, x: Any) -> int:
    """How many entries reach a kink op exactly at its kink (what the strategies aim at)."""
    values = exact_values(program, x)
    count = 0
    for op in program.ops:
        if op.name in ("relu", "abs"):
            count += np.count_nonzero(values[op.args[0]] == 0)
        elif op.name in ("maximum", "minimum", "where"):
            a, b = np.broadcast_arrays(values[op.args[0]], values[op.args[1]])
            count += np.count_nonzero(a == b)
        elif op.name in LIBRARY:
            count += _library_ties(op, [values[i] for i in op.args])
    return count


def _rows(a: np.ndarray, axis: int | None) -> np.ndarray:
    """``a`` as rows along ``axis`` (all entries for None)."""
    return a.reshape(1, -1) if axis is None else np.moveaxis(a, axis, -1).reshape(
        -1, a.shape[axis])


def _repeats(row: np.ndarray, among: Any = None) -> int:
    """Entries of ``row`` equal to another entry (only those equal to ``among`` if given)."""
    flat = list(row)
    return sum(1 for e in flat if flat.count(e) > 1 and (among is None or e == among))


def _library_ties(op: Op, args: list[np.ndarray]) -> int:
    """Entries at which a library op's value alone does not decide its branch (exact values)."""
    a, p = args[0], op.params
    if op.name in KINKS_AT:
        return sum(int(np.count_nonzero(a == b)) for b in set(KINKS_AT[op.name](**p)))
    if op.name in ("clip", "hardtanh", "proj_box", "clip_traced"):
        lo, hi = (args[1], args[2]) if op.name == "clip_traced" else (
            as_fractions(p["lo"]), as_fractions(p["hi"]))
        a, lo, hi = np.broadcast_arrays(a, lo, hi)
        upper = np.maximum(a, lo) if op.name == "clip_traced" else a  # lo vs hi: traced
        return int(np.count_nonzero((a == lo) | (upper == hi)))
    if op.name == "proj_simplex":
        a = np.atleast_1d(a)
        out = np.atleast_1d(_simplex(np.asarray(a, dtype=object), radius=p["radius"]))
        tau = (a - out)[out > 0][0]  # out = a - tau on the support
        return int(np.count_nonzero(a == tau))
    if op.name == "l1_norm":
        return int(np.count_nonzero(a == 0))
    if op.name == "linf_norm":
        mags = np.abs(a)
        return int(np.count_nonzero(a == 0)) + sum(
            _repeats(row, max(row)) for row in _rows(mags, p["axis"]))
    if op.name in ("max", "min"):
        pick = max if op.name == "max" else min
        return sum(_repeats(row, pick(row)) for row in _rows(a, p["axis"]))
    if op.name == "cummax":
        count = 0
        for row in _rows(a, p["axis"]):
            count += sum(1 for i in range(1, len(row)) if row[i] == max(row[:i]))
        return count
    if op.name == "max_pool1d":
        n, w, s, pad = a.shape[-1], p["window"], p["stride"], p["padding"]
        windows = [a[..., max(t, 0) : min(t + w, n)] for t in range(-pad, n + pad - w + 1, s)]
        rows = [row for win in windows for row in win.reshape(-1, win.shape[-1])]
        return sum(_repeats(row, max(row)) for row in rows)
    axis = p.get("axis", -1)
    return sum(_repeats(row) for row in _rows(a, axis))  # sort, topk_sum, median


KINKS_AT: dict[str, Callable[..., tuple[float, ...]]] = {
    "leaky_relu": lambda negative_slope: (0.0,),
    "relu6": lambda: (0.0, 6.0),
    "hard_sigmoid": lambda: (-3.0, 3.0),
    "soft_threshold": lambda lam: (lam, -lam),
    "hinge": lambda: (1.0,),
    "huber": lambda delta: (delta, -delta),
    "proj_nonneg": lambda: (0.0,),
    "proj_linf_ball": lambda radius: (radius, -radius),
}
"""The breakpoints of elementwise library ops with scalar parameters (for `tied_entries`)."""


# ----- generation -----


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast shape, or None if incompatible or too large."""
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        return None
    return shape if np.prod(shape, dtype=int) <= MAX_SIZE else None


def _plain(array: np.ndarray) -> Any:
    """A float array as plain data: nested tuples of floats (a float for 0-d)."""
    if array.ndim == 0:
        return float(array)
    return tuple(_plain(row) for row in array)


def _entries(draw: Any, shape: tuple[int, ...], pool: Sequence[float]) -> np.ndarray:
    size = int(np.prod(shape, dtype=int))
    flat = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
    return np.array(flat, dtype=float).reshape(shape)


def _few_values(draw: Any, shape: tuple[int, ...], pool: Sequence[float]) -> np.ndarray:
    """An array of the first entry of ``pool`` and at most two others, so that entries tie."""
    few = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2))
    return _entries(draw, shape, [pool[0], *few])


class _Draft:
    """A program being drawn, with the exact value of every step so far to plant ties on."""

    def __init__(self, draw: Any, x: np.ndarray) -> None:
        self.draw = draw
        self.ops: list[Op] = []
        self.computed: list[Any] = [_exact_input(x)]  # what `apply` consumes
        self.values: list[np.ndarray] = [as_fractions(x)]  # the same, as Fractions

    def emit(self, op: Op) -> int:
        """Append ``op``; return the index of its value."""
        self.computed.append(apply(op, self.computed))
        self.values.append(_fractions(self.computed[-1]))
        self.ops.append(op)
        return len(self.ops)

    def shape(self, i: int) -> tuple[int, ...]:
        return self.values[i].shape

    def pick(
        self, fits: Callable[[tuple[int, ...]], bool] | None = None, latest: bool = True
    ) -> int:
        """A value whose shape ``fits``; with ``latest``, half the time the newest (deep chains)."""
        candidates = [i for i, value in enumerate(self.values) if not fits or fits(value.shape)]
        assume(candidates)  # none fits (an operand past MAX_SIZE broadcasts with nothing)
        if latest and self.draw(st.booleans()):
            return candidates[-1]
        return self.draw(st.sampled_from(candidates))

    def constant(self, shape: tuple[int, ...], pool: Sequence[float] = CONSTANTS) -> Any:
        """A constant parameter: a float, or nested tuples of floats shaped ``shape``."""
        if not shape or self.draw(st.booleans()):
            return self.draw(st.sampled_from(pool))
        return _plain(_entries(self.draw, shape, pool))

    def shift_onto(self, a: int, target: Any) -> int:
        """Emit ``a + c`` equal to ``target`` (0 or an array) on random entries: planted ties."""
        value = self.values[a]
        planted = _entries(self.draw, value.shape, (True, False)).astype(bool)
        random = np.broadcast_to(as_fractions(self.constant(value.shape)), value.shape)
        constant = np.where(planted, target - value, random).astype(float)
        return self.emit(Op("add_constant", (a,), {"constant": _plain(constant)}))

    def gather_dead_ends(self) -> None:
        """Add the sums of unused values into the result, so that every op (and tie) counts."""
        used = {i for op in self.ops for i in op.args}
        for i in range(1, len(self.ops)):
            if i not in used:
                self.emit(Op("add", (len(self.ops), self.emit(Op("sum", (i,), {"axis": None})))))

    def maybe_zero(self, a: int) -> int:
        """Half the time, shift ``a`` so that some entries are exactly zero."""
        return self.shift_onto(a, 0) if self.draw(st.booleans()) else a

    def maybe_tie(self, a: int, b: int) -> tuple[int, int]:
        """Half the time, shift ``a`` or ``b`` so that some broadcast entries of both are equal."""
        shape = _broadcast(self.shape(a), self.shape(b))
        if not self.draw(st.booleans()):
            return a, b
        if self.shape(a) == shape:
            return self.shift_onto(a, self.values[b]), b
        if self.shape(b) == shape:
            return a, self.shift_onto(b, self.values[a])
        return a, b


Builder = Callable[[_Draft], object]


def _unary(name: str, **param_strategies: st.SearchStrategy) -> Builder:
    def build(d: _Draft) -> None:
        params = {key: d.draw(strategy) for key, strategy in param_strategies.items()}
        d.emit(Op(name, (d.pick(),), params))

    return build


def _kink(name: str) -> Builder:
    """An elementwise kink at 0 (relu, abs), often on a value shifted to hit it."""

    def build(d: _Draft) -> None:
        d.emit(Op(name, (d.maybe_zero(d.pick()),)))

    return build


def _binary(name: str, plant_ties: bool = False) -> Builder:
    def build(d: _Draft) -> None:
        a = d.pick()
        b = d.pick(lambda shape: _broadcast(d.shape(a), shape) is not None, latest=False)
        d.emit(Op(name, d.maybe_tie(a, b) if plant_ties else (a, b)))

    return build


def _multiply_constant(d: _Draft) -> None:
    a = d.pick()
    d.emit(Op("multiply_constant", (a,), {"constant": d.constant(d.shape(a))}))


def _add_constant(d: _Draft) -> None:
    """``a + c``, half the time with ``c`` landing entries on 0 or on another value."""
    a = d.pick()
    if d.draw(st.booleans()):
        b = d.pick(lambda shape: _broadcast(shape, d.shape(a)) == d.shape(a), latest=False)
        d.shift_onto(a, d.values[b] if d.draw(st.booleans()) else 0)
    else:
        d.emit(Op("add_constant", (a,), {"constant": d.constant(d.shape(a))}))


def _sum(d: _Draft) -> None:
    a = d.pick()
    ndim = len(d.shape(a))
    d.emit(Op("sum", (a,), {"axis": d.draw(st.sampled_from([None, *range(-ndim, ndim)]))}))


def _index(d: _Draft) -> None:
    a = d.pick(lambda shape: len(shape) >= 1)
    n = d.shape(a)[0]
    i = d.draw(st.integers(0, n - 1))
    keys = [i, i - n, slice(i, None), slice(None, i + 1, 2), slice(None, None, -1)]
    d.emit(Op("index", (a,), {"key": d.draw(st.sampled_from(keys))}))


def _matmul_builder(name: str) -> Builder:
    """``a @ b`` with ``b`` another value of matching inner dimension, or a constant."""

    def build(d: _Draft) -> None:
        a = d.pick(lambda shape: len(shape) >= 1)
        n = d.shape(a)[-1]

        def fits(shape: tuple[int, ...]) -> bool:
            return len(shape) >= 1 and shape[0 if len(shape) == 1 else -2] == n

        if d.draw(st.booleans()) and any(fits(value.shape) for value in d.values):
            d.emit(Op(name, (a, d.pick(fits, latest=False))))
        else:
            shape = d.draw(st.sampled_from([(n,), (n, 1), (n, 2), (n, 3)]))
            d.emit(Op(name, (a,), {"constant": _plain(_entries(d.draw, shape, CONSTANTS))}))

    return build


def _where(d: _Draft) -> None:
    """``where(a > b, a, b)`` or ``where(a > b, g + (a - b) * p, g)``, often at planted ties."""
    a = d.pick()
    b = d.pick(lambda shape: _broadcast(d.shape(a), shape) is not None, latest=False)
    a, b = d.maybe_tie(a, b)
    params = {"cmp": d.draw(st.sampled_from([">", ">="]))}
    if d.draw(st.booleans()):
        d.emit(Op("where", (a, b), params))
        return
    shape = _broadcast(d.shape(a), d.shape(b))
    g = d.pick(lambda s: _broadcast(shape, s) is not None, latest=False)
    p = d.pick(lambda s: _broadcast(shape, d.shape(g), s) is not None, latest=False)
    d.emit(Op("where", (a, b, g, p), params))


# ----- smooth structure and contraction ops (library/smooth.py) -----


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=int))


def _pick_or_any(d: _Draft, fits: Callable[[tuple[int, ...]], bool]) -> int | None:
    """A value whose shape ``fits``, or None when there is none yet."""
    if not any(fits(value.shape) for value in d.values):
        return None
    return d.pick(fits)


def _reshape(d: _Draft) -> None:
    a = d.pick()
    n = _size(d.shape(a))
    options = [(n,), (1, n), (n, 1)] + ([(2, n // 2)] if n % 2 == 0 and n > 2 else [])
    d.emit(Op("reshape", (a,), {"shape": d.draw(st.sampled_from(options))}))


def _along_axis(name: str, min_length: int = 1) -> Builder:
    """``name(a, axis=k)`` for an axis of length ``min_length`` or more (transpose otherwise)."""

    def build(d: _Draft) -> None:
        a = _pick_or_any(d, lambda shape: any(n >= min_length for n in shape))
        if a is None:
            d.emit(Op("transpose", (d.pick(),)))
            return
        shape = d.shape(a)
        axis = d.draw(st.sampled_from([k for k, n in enumerate(shape) if n >= min_length]))
        d.emit(Op(name, (a,), {"axis": axis - len(shape) if d.draw(st.booleans()) else axis}))

    return build


def _prod(d: _Draft) -> None:
    a = d.pick()
    ndim = len(d.shape(a))
    d.emit(Op("prod", (a,), {"axis": d.draw(st.sampled_from([None, *range(ndim)]))}))


def _join(name: str) -> Builder:
    """``concatenate`` or ``stack`` of two values of one shape (often the same value twice)."""

    def build(d: _Draft) -> None:
        small = 1 if name == "concatenate" else 0
        a = _pick_or_any(d, lambda s: len(s) >= small and _size(s) <= MAX_SIZE // 2)
        if a is None:
            d.emit(Op("transpose", (d.pick(),)))
            return
        b = d.pick(lambda s: s == d.shape(a), latest=False)
        if name == "stack":
            d.emit(Op("stack", (a, b)))
            return
        axis = d.draw(st.sampled_from(range(len(d.shape(a)))))
        d.emit(Op("concatenate", (a, b), {"axis": axis}))

    return build


def _pad(d: _Draft) -> None:
    a = _pick_or_any(d, lambda s: len(s) == 1 and _size(s) <= 8)
    if a is None:
        d.emit(Op("transpose", (d.pick(),)))
        return
    width = d.draw(st.sampled_from([(1, 0), (0, 1), (1, 2)]))
    d.emit(Op("pad", (a,), {"width": width}))


def _take(d: _Draft) -> None:
    a = d.pick()
    n = _size(d.shape(a))
    indices = d.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
    d.emit(Op("take", (a,), {"indices": tuple(indices)}))


def _einsum(d: _Draft) -> None:
    """Contractions of two values (often one value twice): both operand maps are exercised."""
    a = d.pick(lambda s: len(s) <= 2)
    shape = d.shape(a)
    if len(shape) == 0:
        b = d.pick(lambda s: len(s) <= 1, latest=False)
        spec = ",->" if d.shape(b) == () else ",i->i"
    elif len(shape) == 1:
        b = d.pick(lambda s: s == shape, latest=False)
        specs = ["i,i->", "i,i->i"] + (["i,j->ij"] if shape[0] ** 2 <= MAX_SIZE else [])
        spec = d.draw(st.sampled_from(specs))
    else:
        b = d.pick(lambda s: s == shape, latest=False)
        specs = ["ij,ij->j", "ij,ij->", "ij,ik->jk"]
        if shape[0] == shape[1]:
            specs.append("ii,ij->j")
        if shape[0] ** 2 <= MAX_SIZE:
            specs.append("ij,kj->ik")
        spec = d.draw(st.sampled_from(specs))
    d.emit(Op("einsum", (a, b), {"spec": spec}))


# ----- library ops: planted on their breakpoints and on ties among entries -----


def _plant(d: _Draft, a: int, points: Sequence[float]) -> int:
    """Mostly, shift ``a`` so that random entries land on breakpoints from ``points``."""
    if not d.draw(st.integers(0, 3)):
        return a
    return d.shift_onto(a, as_fractions(_entries(d.draw, d.shape(a), points)))


def _elementwise(name: str, breakpoints: Callable[..., Sequence[float]], **params: Any) -> Builder:
    """``name(a, **params)``; ``params`` are strategies, ``breakpoints(**drawn)`` the kinks."""

    def build(d: _Draft) -> None:
        drawn = {key: d.draw(strategy) for key, strategy in params.items()}
        d.emit(Op(name, (_plant(d, d.pick(), breakpoints(**drawn)),), drawn))

    return build


def _bounds(d: _Draft, shape: tuple[int, ...], pool: Sequence[float]) -> tuple[Any, Any]:
    """Constant bounds ``lo <= hi`` (scalars or arrays shaped ``shape``), sometimes equal."""
    lo, hi = d.constant(shape, pool), d.constant(shape, pool)
    lo_a, hi_a = np.broadcast_arrays(np.asarray(lo, dtype=float), np.asarray(hi, dtype=float))
    low, high = np.minimum(lo_a, hi_a), np.maximum(lo_a, hi_a)
    return (_plain(low), _plain(high)) if low.ndim else (float(low), float(high))


def _clip_builder(name: str, arrays: bool) -> Builder:
    """clip-like ops with constant bounds; the input lands on the bounds (or beyond them)."""

    def build(d: _Draft) -> None:
        a = d.pick()
        shape = d.shape(a) if arrays else ()
        lo, hi = _bounds(d, shape, BOUNDS)
        if name == "proj_linf_ball":
            radius = abs(d.draw(st.sampled_from(BOUNDS)))
            points = (radius, -radius, 2 * radius)
            d.emit(Op(name, (_plant(d, a, points),), {"radius": radius}))
            return
        if d.draw(st.booleans()):
            target = np.where(_entries(d.draw, d.shape(a), (True, False)).astype(bool),
                              np.broadcast_to(as_fractions(lo), d.shape(a)),
                              np.broadcast_to(as_fractions(hi), d.shape(a)))
            a = d.shift_onto(a, target)
        d.emit(Op(name, (a,), {"lo": lo, "hi": hi}))

    return build


def _clip_traced(d: _Draft) -> None:
    """``clip(a, lo, hi)`` with traced bounds: ``a`` shifted onto a bound, or ``lo is hi``."""
    a = d.pick()
    lo = d.pick(lambda s: _broadcast(d.shape(a), s) == d.shape(a), latest=False)
    hi = lo if d.draw(st.booleans()) else d.pick(
        lambda s: _broadcast(d.shape(a), s) == d.shape(a), latest=False)
    if d.draw(st.booleans()):
        a = d.shift_onto(a, d.values[d.draw(st.sampled_from([lo, hi]))])
    d.emit(Op("clip_traced", (a, lo, hi)))


def _hard_sigmoid(d: _Draft) -> None:
    """Every entry moved onto a kink (±3) or a flat piece (see `hard_sigmoid_is_flat`)."""
    a = d.pick()
    target = as_fractions(_entries(d.draw, d.shape(a), (-3.0, 3.0, 4.5, -4.5, 6.0)))
    constant = np.asarray(target - d.values[a], dtype=float)
    d.emit(Op("hard_sigmoid", (d.emit(Op("add_constant", (a,), {"constant": _plain(constant)})),)))


def _plant_equal(d: _Draft, a: int) -> int:
    """Mostly, shift random entries of ``a`` onto others (its max, min, a neighbour)."""
    value = d.values[a]
    if value.ndim == 0 or not d.draw(st.integers(0, 3)):
        return a
    kind = d.draw(st.sampled_from(["max", "min", "roll", "flip"]))
    if kind == "max":
        target = np.full(value.shape, max(value.flat), dtype=object)
    elif kind == "min":
        target = np.full(value.shape, min(value.flat), dtype=object)
    else:
        axis = d.draw(st.sampled_from(range(value.ndim)))
        target = np.roll(value, 1, axis) if kind == "roll" else np.flip(value, axis)
    return d.shift_onto(a, target)


def _weigh(d: _Draft, a: int) -> None:
    """Mostly, weigh the entries of ``a`` (an order op's result) by distinct constants,
    so that which entry a tie sends where shows in the gradient of a sum."""
    if d.shape(a) and d.draw(st.integers(0, 3)):
        weights = _entries(d.draw, d.shape(a), CONSTANTS)
        d.emit(Op("multiply_constant", (a,), {"constant": _plain(weights)}))


def _order(name: str, axis_none: bool = True, keepdims: bool = False) -> Builder:
    """An order op over an axis (or all entries), on an array with planted equal entries."""

    def build(d: _Draft) -> None:
        a = _pick_or_any(d, lambda s: len(s) >= 1)
        if a is None:
            d.emit(Op("abs", (d.pick(),)))
            return
        a = _plant_equal(d, a)
        if name in ("l1_norm", "linf_norm"):
            a = d.maybe_zero(a)
        ndim = len(d.shape(a))
        axes = ([None] if axis_none else []) + list(range(-ndim, ndim))
        params: dict[str, Any] = {"axis": d.draw(st.sampled_from(axes))}
        if keepdims:
            params["keepdims"] = d.draw(st.booleans())
        if name == "topk_sum":
            params["axis"] = params["axis"] if params["axis"] is not None else -1
            params["k"] = d.draw(st.integers(1, d.shape(a)[params["axis"]]))
        _weigh(d, d.emit(Op(name, (a,), params)))

    return build


def _max_pool1d(d: _Draft) -> None:
    a = _pick_or_any(d, lambda s: len(s) >= 1 and s[-1] >= 2)
    if a is None:
        d.emit(Op("abs", (d.pick(),)))
        return
    a = _plant_equal(d, a)
    n = d.shape(a)[-1]
    window = d.draw(st.integers(1, n))
    stride = d.draw(st.integers(1, window))
    padding = d.draw(st.integers(0, window // 2))
    params = {"window": window, "stride": stride, "padding": padding}
    _weigh(d, d.emit(Op("max_pool1d", (a,), params)))


def _simplex_builder(d: _Draft) -> None:
    a = _plant_equal(d, d.pick())
    radius = d.draw(st.sampled_from([1.0, 0.5, 2.0]))
    _weigh(d, d.emit(Op("proj_simplex", (a,), {"radius": radius})))


BOUNDS = (0.0, 1.0, -1.0, 0.5, -0.5, 2.0)
SLOPES = (0.25, 0.5, 0.0, 2.0, -0.5)


BUILDERS: dict[str, Builder] = {
    "add": _binary("add"),
    "subtract": _binary("subtract"),
    "multiply": _binary("multiply"),
    "negative": _unary("negative"),
    "divide_by_constant": _unary("divide_by_constant", constant=st.sampled_from(DIVISORS)),
    "add_constant": _add_constant,
    "multiply_constant": _multiply_constant,
    "integer_power": _unary("integer_power", exponent=st.sampled_from([2, 3])),
    "sum": _sum,
    "matmul": _matmul_builder("matmul"),
    "dot": _matmul_builder("dot"),
    "index": _index,
    "relu": _kink("relu"),
    "abs": _kink("abs"),
    "maximum": _binary("maximum", plant_ties=True),
    "minimum": _binary("minimum", plant_ties=True),
    "where": _where,
    "square": _unary("square"),
    "transpose": _unary("transpose"),
    "reshape": _reshape,
    "cumsum": _along_axis("cumsum"),
    "prod": _prod,
    "diff": _along_axis("diff", min_length=2),
    "concatenate": _join("concatenate"),
    "stack": _join("stack"),
    "pad": _pad,
    "take": _take,
    "einsum": _einsum,
    "clip": _clip_builder("clip", arrays=True),
    "clip_traced": _clip_traced,
    "hardtanh": _clip_builder("hardtanh", arrays=False),
    "leaky_relu": _elementwise(
        "leaky_relu", lambda negative_slope: (0.0,), negative_slope=st.sampled_from(SLOPES)
    ),
    "relu6": _elementwise("relu6", lambda: (0.0, 6.0)),
    "hard_sigmoid": _hard_sigmoid,
    "soft_threshold": _elementwise(
        "soft_threshold", lambda lam: (lam, -lam, 0.0), lam=st.sampled_from([0.0, 0.5, 1.0, 2.0])
    ),
    "hinge": _elementwise("hinge", lambda: (1.0,)),
    "huber": _elementwise(
        "huber", lambda delta: (delta, -delta, 0.0), delta=st.sampled_from([0.5, 1.0, 2.0])
    ),
    "max": _order("max", keepdims=True),
    "min": _order("min", keepdims=True),
    "sort": _order("sort"),
    "topk_sum": _order("topk_sum", axis_none=False),
    "median": _order("median"),
    "max_pool1d": _max_pool1d,
    "cummax": _order("cummax", axis_none=False),
    "l1_norm": _order("l1_norm"),
    "linf_norm": _order("linf_norm"),
    "proj_nonneg": _elementwise("proj_nonneg", lambda: (0.0,)),
    "proj_box": _clip_builder("proj_box", arrays=True),
    "proj_linf_ball": _clip_builder("proj_linf_ball", arrays=False),
    "proj_simplex": _simplex_builder,
}
assert BUILDERS.keys() == IMPLEMENTATIONS.keys()

_NEED_AN_ARRAY = {"index", "matmul", "dot"}
# Kinks (and library ops) drawn more often, and first: the simplest program hypothesis tries
# is then a kink.
_KINKS = ["relu", "abs", "maximum", "minimum", "where"]
_WEIGHTED_NAMES = [*_KINKS, *LIBRARY, *BUILDERS]

array_shapes = st.tuples(st.integers(1, 4)) | st.tuples(st.integers(1, 3), st.integers(1, 3))
shapes = st.just(()) | array_shapes


@st.composite
def _programs(
    draw: Any, reduce: bool, input_shapes: st.SearchStrategy, rational: bool = False,
    names: tuple[str, ...] | None = None,
) -> tuple:
    shape = draw(input_shapes)
    x = _few_values(draw, shape, X_ENTRIES)
    v = _few_values(draw, shape, V_ENTRIES)
    assume(np.any(v))
    d = _Draft(draw, x)
    allowed = [n for n in _WEIGHTED_NAMES if (rational or n not in RATIONAL)
               and (names is None or n in names)]
    for _ in range(draw(st.sampled_from(range(1, MAX_STEPS + 1)))):
        names = [n for n in allowed if n not in _NEED_AN_ARRAY or d.values[0].ndim]
        BUILDERS[draw(st.sampled_from(names))](d)
    d.gather_dead_ends()
    program = Program(tuple(d.ops), tuple(value.shape for value in d.values), reduce)
    assume(float_is_exact(program, x))
    if any(op.name in RATIONAL for op in program.ops):
        assume(hard_sigmoid_is_flat(program, x, v) and derivatives_are_dyadic(program, x, v))
    return program, x, v


def programs(rational: bool = False, names: tuple[str, ...] | None = None
             ) -> st.SearchStrategy[tuple[Program, np.ndarray, np.ndarray]]:
    """``(program, x, v)``: a scalar program, a point on its kinks, a nonzero direction.

    With ``rational``, `RATIONAL` ops are drawn too, kept where the derivatives along ``v`` are
    dyadic: exact comparisons then hold along ``v`` only, not along other directions.
    ``names`` restricts the drawn ops (builders may still plant ties with others).
    """
    return _programs(reduce=True, input_shapes=shapes, rational=rational, names=names)


def vector_programs(
    rational: bool = False, names: tuple[str, ...] | None = None,
) -> st.SearchStrategy[tuple[Program, np.ndarray, np.ndarray]]:
    """Like `programs`, but `run` returns the last value itself, an array (for Jacobians)."""
    return _programs(reduce=False, input_shapes=array_shapes, rational=rational,
                     names=names).filter(
        lambda case: case[0].shapes[-1] != ()
    )
