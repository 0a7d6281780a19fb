"""Random straight-line nonsmooth programs with planted ties, as hypothesis strategies.

A `Program` is plain data: a list of `Op` (name, indices of earlier values, static parameters);
value 0 is the input. `run` interprets it with plain numpy calls, so one program runs on float
arrays, on asd's traced arrays, and on object arrays of the oracle's `Series` and `Jet`.

Random points almost never sit on a kink, and away from kinks every AD tool is right. So the
strategies put the point *on* kinks: inputs repeat a few small values (zeros, equal entries),
``add_constant`` may shift chosen entries exactly to zero or onto another value, and binary ops may
take the same value twice (``subtract(a, a)``). Directions have zeros and repeated entries too, so
some ties are broken only at second order or not at all (`DegenerateTie`).

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
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from asd.testing.exact import Series, as_fractions, series_ray, to_fraction

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
}


def apply(op: Op, values: Sequence[Any]) -> Any:
    """The value of ``op`` given all earlier values."""
    params = dict(op.params)
    if isinstance(params.get("constant"), tuple):
        params["constant"] = np.array(params["constant"], dtype=float)
    return IMPLEMENTATIONS[op.name](*(values[i] for i in op.args), **params)


def evaluate(program: Program, x: Any) -> list[Any]:
    """All values of ``program`` at ``x`` (value 0 is ``x`` itself)."""
    values = [x]
    for op in program.ops:
        values.append(apply(op, values))
    return values


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
    return count


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
}
assert BUILDERS.keys() == IMPLEMENTATIONS.keys()

_NEED_AN_ARRAY = {"index", "matmul", "dot"}
# Kinks drawn more often, and first: the simplest program hypothesis tries is then a kink.
_KINKS = ["relu", "abs", "maximum", "minimum", "where"]
_WEIGHTED_NAMES = [*_KINKS, *BUILDERS]

array_shapes = st.tuples(st.integers(1, 4)) | st.tuples(st.integers(1, 3), st.integers(1, 3))
shapes = st.just(()) | array_shapes


@st.composite
def _programs(draw: Any, reduce: bool, input_shapes: st.SearchStrategy) -> tuple:
    shape = draw(input_shapes)
    x = _few_values(draw, shape, X_ENTRIES)
    v = _few_values(draw, shape, V_ENTRIES)
    assume(np.any(v))
    d = _Draft(draw, x)
    for _ in range(draw(st.sampled_from(range(1, MAX_STEPS + 1)))):
        names = [n for n in _WEIGHTED_NAMES if n not in _NEED_AN_ARRAY or d.values[0].ndim]
        BUILDERS[draw(st.sampled_from(names))](d)
    d.gather_dead_ends()
    program = Program(tuple(d.ops), tuple(value.shape for value in d.values), reduce)
    assume(float_is_exact(program, x))
    return program, x, v


def programs() -> st.SearchStrategy[tuple[Program, np.ndarray, np.ndarray]]:
    """``(program, x, v)``: a scalar program, a point on its kinks, a nonzero direction."""
    return _programs(reduce=True, input_shapes=shapes)


def vector_programs() -> st.SearchStrategy[tuple[Program, np.ndarray, np.ndarray]]:
    """Like `programs`, but `run` returns the last value itself, an array (for Jacobians)."""
    return _programs(reduce=False, input_shapes=array_shapes).filter(
        lambda case: case[0].shapes[-1] != ()
    )
