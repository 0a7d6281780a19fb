"""The fuzzer's oracles: exact along the ray for piecewise polynomials, mpmath otherwise.

**Exact** (programs of "poly" and "jump" ops whose float evaluation is exact, `choose`): the
program runs on object arrays of `Series` in an infinitesimal ``delta`` along ``x + delta v``
(asd.testing.exact). Every branch is then decided the way the ray decides it, so the ``delta**1``
coefficient is the one-sided derivative ``f'(x; v)`` exactly, and `Jet` (a forward-mode gradient
over the same series) gives the limiting gradient ``lim grad f(x + delta v)`` where ``v`` decides
every tie that matters, and the lexicographic one along ``[v, w]`` (``x + delta v + delta**12
w``) where a tie persists along ``v`` -- asd's tie contract. Piecewise-constant ops (floor,
``%``, a comparison used as a number) run through `ops._piecewise_constant`, which records a
*jump* where the point sits on one; `continuity` then tells whether the program itself jumps.

**mpmath** (everything else: smooth ufuncs, non-dyadic means, float32 rounding): `MpDual`
elements carry numpy's own float primal (re-synchronised with numpy's evaluation after every
step, so every branch is decided on the very floats asd sees) and mpmath tangents and gradients
(50 digits). A tie the floats leave open is decided by the tangent along ``v``; where that is zero
too and the branches differ, the gradient oracle says it cannot decide (`Undecided`) and the
gradient checks are skipped for the case, counted; the one-sided derivative needs no decision.
Results are compared with a tolerance scaled by the largest tangent met (`close`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from asd.core.series import object_array
from asd.testing.exact import (
    DegenerateTie,
    Jet,
    Series,
    as_fractions,
    jet_ray,
    series_ray,
    to_fraction,
)
from tests.fuzz import ops
from tests.programs import Op, Program

mp = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp
mp.dps = 50

LEX_POWER = 12
"""The lexicographic curve ``x + delta v + delta**LEX_POWER w``: its ``w`` term outweighs no term
of the ray's own series below that degree (see asd.testing.exact.jet_ray)."""
ORDER = 16
"""Series truncation order: above LEX_POWER, and above the degree of the programs' tied
quantities (at most 7 steps of degree <= 4 products, in practice far below)."""


# ----- jumps of piecewise-constant ops -----

_JUMPS: list[Any] = []


def record_jump(element: Any) -> None:
    """A piecewise-constant op met its jump at the point (called by `ops`)."""
    _JUMPS.append(element)


@contextmanager
def recording_jumps():
    """Collect the jumps met while evaluating inside the block."""
    start = len(_JUMPS)
    found: list[Any] = []
    try:
        yield found
    finally:
        found.extend(_JUMPS[start:])
        del _JUMPS[start:]


FLAT_JUMP = "a piecewise-constant op's input is flat to first order at its jump"


def undecided_side(e: Any) -> None:
    """A piecewise-constant op whose input stays on its jump along the ray (see
    `ops._undecided_side`); harmless where the input has no gradient."""
    if isinstance(e, Jet) and any(g.coefficient(0) for g in e.grad):
        raise DegenerateTie("a piecewise-constant op's input stays on its jump along the ray")
    if isinstance(e, MpDual) and MpDual.decide_ties and any(e.g):
        raise Undecided("a piecewise-constant op's input stays on its jump along the ray")
    if isinstance(e, MpDual) and not any(e.g):
        # flat to first order in every direction (h = x - sin(x) at 0): the side is a
        # higher order's, which an MpDual does not carry; the value at the point (side 0)
        # would be a guess, so neither the tangent nor the gradient is decided
        raise Undecided(FLAT_JUMP)


def base_and_side(e: Any) -> tuple[Fraction, int]:
    """The value of an oracle element at the point and the side (-1, 0, 1) the ray takes."""
    if isinstance(e, Jet):
        e = e.value
    if isinstance(e, Series):
        c = e.coefficient(0)
        return c, (e - c).sign()
    if isinstance(e, MpDual):
        side = 0 if e.t == 0 else (1 if e.t > 0 else -1)
        return to_fraction(e.p), side
    return to_fraction(e), 0


# ----- evaluating programs -----

Step = Callable[[Any, Sequence[Any]], Any]


def evaluate(program: Program, x: Any, step: Step = ops.apply) -> list[Any]:
    """All values of ``program`` at ``x`` (value 0 is ``x``), each op run by ``step``."""
    values = [x]
    for op in program.ops:
        values.append(step(op, values))
    return values


def finish(program: Program, out: Any, total: Callable[[Any], Any] = np.sum) -> Any:
    """The program's result from its last value: summed when ``program.reduce``."""
    if program.reduce and program.shapes[-1] != ():
        return total(out)
    return out


def run(program: Program, x: Any) -> Any:
    """numpy's own result (or asd's, on traced arrays)."""
    return finish(program, evaluate(program, x)[-1])


def run_exact(program: Program, xs: Any) -> Any:
    """The result on the oracle's object arrays (Series, Jet, MpDual)."""
    return run_exact_steps(program, xs)[1]


def run_exact_steps(program: Program, xs: Any) -> tuple[list[Any], Any]:
    """`run_exact`'s every step and its result."""
    steps = evaluate(program, xs, ops.apply_exact)
    out = finish(program, np.asarray(steps[-1], dtype=object),
                 lambda a: np.sum(np.asarray(a, dtype=object)))
    return steps, out


def float_values(program: Program, x: np.ndarray) -> list[np.ndarray]:
    """numpy's own float evaluation, step by step (the hybrid oracle's primals)."""
    with np.errstate(all="ignore"):
        return [np.asarray(v) for v in evaluate(program, x)]


# ----- the exact oracle -----


def _fractions(value: Any) -> np.ndarray:
    value = np.asarray(value, dtype=object)
    flat = []
    for e in value.flat:
        if isinstance(e, Jet):
            e = e.value
        flat.append(e.coefficient(0) if isinstance(e, Series) else to_fraction(e))
    return np.array(flat, dtype=object).reshape(value.shape)


def exact_is_float(program: Program, x: np.ndarray, dtype: Any) -> bool:
    """Whether numpy's evaluation in ``dtype`` is exact at ``x`` (every step), with room for
    derivatives: the exact oracle then compares asd's floats exactly (tests.programs' rule)."""
    if any(ops.TABLE[op.name].kind == "smooth" for op in program.ops):
        return False
    try:
        with recording_jumps():
            exact = evaluate(program, series_ray(x, np.zeros(np.shape(x)), order=0),
                             ops.apply_exact)
    except (TypeError, ValueError, ZeroDivisionError, ArithmeticError):
        return False
    floats = float_values(program, np.asarray(x, dtype=dtype))
    for e, f in zip(exact, floats, strict=True):
        if isinstance(f, np.ma.MaskedArray):
            f = np.ma.getdata(f)
        if f.dtype.kind not in "fiub" or (e.__class__ is not np.ndarray and np.ndim(e) != f.ndim):
            return False
        e = _fractions(e)
        if e.shape != f.shape or not np.all(np.isfinite(f.astype(float))):
            return False
        if not np.all(e == as_fractions(f.astype(float))):
            return False
        if any(abs(c) > 2**12 or c.denominator > 2**20 for c in e.flat):
            return False
    return True


@dataclass
class Exact:
    """What the exact oracle knows about a case (all Fractions)."""

    value: np.ndarray  # f(x)
    ray_limit: np.ndarray  # lim f(x + delta v), delta -> 0+ (differs from value at a jump)
    derivative: np.ndarray  # f'(x; v)
    jumps: int  # piecewise-constant ops sitting on a jump at x
    discontinuous: bool  # a ray found on which f jumps at x
    float_path: bool = True  # every step's value and slope along v is a float64 number


def exact_oracle(program: Program, x: np.ndarray, v: np.ndarray) -> Exact:
    with recording_jumps() as jumps:
        value = _fractions(run_exact(program, series_ray(x, np.zeros(np.shape(x)), order=0)))
    with recording_jumps() as along:  # jumps only the ray's series show (F71: values that
        # part along a tie the ray stays on)
        steps, out = run_exact_steps(program, series_ray(x, v, ORDER))
    jumps = jumps or along
    out = np.asarray(out, dtype=object)
    limit = _fractions(out)
    derivative = np.array([_coefficient(e, 1) for e in out.flat], dtype=object).reshape(
        out.shape)
    # a limit along v other than the value is a jump whether or not an op recorded one (an
    # op on plain numbers, a reduction of constants, does not see the side it sits on)
    moved = not np.all(limit == value)
    discontinuous = moved or (bool(jumps) and _jumps_elsewhere(program, x, value))
    return Exact(value, limit, derivative, max(len(jumps), int(moved)), discontinuous,
                 all(map(_floats_on_path, steps)))


def _is_float(c: Any) -> bool:
    """Whether an exact number is a float64 number."""
    c = to_fraction(c)
    try:
        return Fraction(float(c)) == c
    except OverflowError:
        return False


def _floats_on_path(step: Any) -> bool:
    """Whether a step's exact values and first-order coefficients (a Series' value and
    slope, a Jet's value and gradient) are all float64 numbers. Where one is not (a mean of
    3 entries: slopes / 3), floats round on the way even when the final answer is a float
    (``1 + 0.75 * (-3.5 / 3) = 1/8``), so a result is compared within rounding, as
    `tests.fuzz.harness._inner_agrees` compares a gradient with rounded entries."""
    for e in np.ravel(np.asarray(step, dtype=object)):
        if isinstance(e, Jet):
            parts = [e.value.coefficient(0), *(g.coefficient(0) for g in e.grad)]
        elif isinstance(e, Series):
            parts = [e.coefficient(0), e.coefficient(1)]
        else:
            parts = [e]
        if not all(map(_is_float, parts)):
            return False
    return True


def _coefficient(e: Any, k: int) -> Fraction:
    return e.coefficient(k) if isinstance(e, Series) else Fraction(0) if k else to_fraction(e)


def _jumps_elsewhere(program: Program, x: np.ndarray, value: np.ndarray) -> bool:
    """Whether some ray other than ``v`` finds ``f`` jumping at ``x``: the coordinate
    directions both ways and a few fixed mixed ones."""
    for d in _other_directions(x):
        out = run_exact(program, series_ray(x, d, ORDER))
        if not np.all(_fractions(out) == value):
            return True
    return False


def _other_directions(x: np.ndarray) -> list[np.ndarray]:
    """The coordinate directions both ways and a few fixed mixed ones."""
    n = np.size(x)
    directions = [s * np.eye(n)[i] for i in range(n) for s in (1.0, -1.0)]
    directions += [np.cos(np.arange(n) * k + 1.0).round(3) for k in range(1, 4)]
    return [np.reshape(d, np.shape(x)) for d in directions if np.any(d)]


def hybrid_jumps_elsewhere(program: Program, x: np.ndarray, dtype: Any) -> bool:
    """Whether the mpmath oracle, along a ray other than ``v``, meets a piecewise-constant
    op on a jump at ``x`` (as `_jumps_elsewhere` for the exact oracle): along ``v`` a kink
    may take a constant piece, whose plain constant then hides the jump below it
    (``sign(max(-x, 0))`` at 0 along +1 meets the literal 0)."""
    for d in _other_directions(x):
        try:
            h = hybrid_oracle(program, x, d, dtype)
        except (Undecided, Singular):
            continue
        if h.jumps or h.flat_jump:
            return True
    return False


def second_direction(x: np.ndarray) -> np.ndarray:
    """A fixed dyadic ``w`` with distinct entries (as tests/test_random_programs.py)."""
    n = np.size(x)
    return (np.arange(1, n + 1) * (-1.0) ** np.arange(n) / 4).reshape(np.shape(x))


def exact_jacobian(program: Program, x: np.ndarray, v: np.ndarray
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(J, w)``: the limiting Jacobian along ``v`` (w None) or lexicographic along ``[v, w]``;
    ``(None, None)`` where neither decides it. Shape ``out.shape + x.shape``."""
    return exact_jacobian_path(program, x, v)[:2]


def jumps_beside(program: Program, x: np.ndarray, v: np.ndarray) -> bool:
    """Whether an op records a jump from the exact gradients at the point (a gather whose
    values part on its keys' tie surface: `ops._parts_beside`), which the series along ``v``
    alone do not show."""
    try:
        with recording_jumps() as found:
            run_exact_steps(program, jet_ray(x, v, ORDER, None, None, LEX_POWER))
    except DegenerateTie:
        return False
    return bool(found)


def exact_jacobian_path(program: Program, x: np.ndarray, v: np.ndarray
                        ) -> tuple[np.ndarray | None, np.ndarray | None, bool]:
    """`exact_jacobian`'s ``(J, w)`` and whether every step's value and gradient entries are
    float64 numbers (`_floats_on_path`): only then can floats equal J bit for bit."""
    for w in (None, second_direction(x)):
        try:
            with recording_jumps():
                xs = jet_ray(x, v, ORDER, None, w, LEX_POWER)
                steps, out = run_exact_steps(program, xs)
                out = np.asarray(out, dtype=object)
        except DegenerateTie:
            continue
        rows = [[g.coefficient(0) for g in e.grad] if isinstance(e, Jet)
                else [Fraction(0)] * xs.size for e in out.flat]
        jac = np.array([g for row in rows for g in row], dtype=object).reshape(
            out.shape + np.shape(x))
        return jac, w, all(map(_floats_on_path, steps))
    return None, None, True


# ----- the mpmath oracle -----


class Undecided(ArithmeticError):
    """A tie that neither the floats nor the first-order tangent decide, where it matters."""


class Singular(ArithmeticError):
    """A smooth function at a point where it is not Lipschitz (sqrt at 0, log at 0)."""


_ZERO = mp.mpf(0)
_NOISE = mp.mpf(10) ** -40
"""Tangents below this are ties: at 50 digits a mean of three equal tangents can differ from
each of them by 1e-50, which decided a tie that holds along the whole ray (campaign seed
2951), where the tie is left to the next direction (asd) or undecided (this oracle)."""


class MpDual:
    """numpy's float primal ``p`` with an mpmath tangent ``t`` along ``v`` and gradient ``g``."""

    __slots__ = ("g", "p", "t")

    decide_ties = True  # False: tangents only (a directional derivative needs no decision)

    def __init__(self, p: float, t: Any, g: Sequence[Any]) -> None:
        self.p, self.t, self.g = float(p), t, tuple(g)

    def _coerce(self, other: Any) -> MpDual | None:
        if isinstance(other, MpDual):
            return other
        if isinstance(other, (int, float, Fraction, np.number, bool, np.bool_)):
            return MpDual(float(other), _ZERO, (_ZERO,) * len(self.g))
        return None

    def _linear(self, p: float, a: Any, other: MpDual | None = None, b: Any = 0) -> MpDual:
        """``p`` with tangent and gradient ``a * self' + b * other'``."""
        if other is None:
            return MpDual(p, a * self.t, [a * g for g in self.g])
        return MpDual(p, a * self.t + b * other.t,
                      [a * g + b * h for g, h in zip(self.g, other.g, strict=True)])

    # ----- arithmetic -----

    def __add__(self, other: Any) -> MpDual:
        o = self._coerce(other)
        return NotImplemented if o is None else self._linear(self.p + o.p, 1, o, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> MpDual:
        o = self._coerce(other)
        return NotImplemented if o is None else self._linear(self.p - o.p, 1, o, -1)

    def __rsub__(self, other: Any) -> MpDual:
        o = self._coerce(other)
        return NotImplemented if o is None else o - self

    def __neg__(self) -> MpDual:
        return self._linear(-self.p, -1)

    def __pos__(self) -> MpDual:
        return self

    def __mul__(self, other: Any) -> MpDual:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return self._linear(self.p * o.p, mp.mpf(o.p), o, mp.mpf(self.p))

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> MpDual:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        if o.p == 0:
            raise Singular("division by zero")
        q = mp.mpf(self.p) / mp.mpf(o.p)
        return self._linear(self.p / o.p, 1 / mp.mpf(o.p), o, -q / mp.mpf(o.p))

    def __rtruediv__(self, other: Any) -> MpDual:
        o = self._coerce(other)
        return NotImplemented if o is None else o / self

    def __pow__(self, n: Any) -> MpDual:
        if isinstance(n, (int, np.integer)) and n >= 0:
            if n == 0:
                return self._linear(1.0, 0)
            return self._linear(self.p**int(n), int(n) * mp.mpf(self.p) ** (int(n) - 1))
        return self.power(float(n))

    def __abs__(self) -> MpDual:
        return -self if self._sign() < 0 else self

    # ----- order: numpy's floats, then the tangent -----

    def _sign(self) -> int:
        if self.p:
            return 1 if self.p > 0 else -1
        if abs(self.t) > _NOISE:
            return 1 if self.t > 0 else -1
        if MpDual.decide_ties and any(abs(g) > mp.mpf(10) ** -30 for g in self.g):
            raise Undecided("a tie the first-order tangent leaves open, where the branches "
                            "differ")
        return 0

    def _compare(self, other: Any) -> int:
        o = self._coerce(other)
        return NotImplemented if o is None else (self - o)._sign()

    def __lt__(self, other: Any) -> bool:
        return self._compare(other) < 0

    def __le__(self, other: Any) -> bool:
        return self._compare(other) <= 0

    def __gt__(self, other: Any) -> bool:
        return self._compare(other) > 0

    def __ge__(self, other: Any) -> bool:
        return self._compare(other) >= 0

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        o = self._coerce(other)
        return NotImplemented if o is None else self.p == o.p and self.t == o.t

    def __ne__(self, other: Any) -> bool:  # type: ignore[override]
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __float__(self) -> float:
        return self.p

    def __repr__(self) -> str:
        return f"MpDual({self.p!r}, t={mpmath.nstr(self.t, 8)})"

    # ----- smooth functions: value from mpmath at the float primal, slope analytic -----

    def _smooth(self, value: Any, slope: Any) -> MpDual:
        return self._linear(float(value), slope)

    def _at(self) -> Any:
        return mp.mpf(self.p)

    def exp(self) -> MpDual:
        e = mp.exp(self._at())
        return self._smooth(e, e)

    def exp2(self) -> MpDual:
        e = mp.power(2, self._at())
        return self._smooth(e, e * mp.log(2))

    def expm1(self) -> MpDual:
        return self._smooth(mp.expm1(self._at()), mp.exp(self._at()))

    def _positive(self, name: str) -> Any:
        if self.p <= 0:
            raise Singular(f"{name} at {self.p}")
        return self._at()

    def log(self) -> MpDual:
        a = self._positive("log")
        return self._smooth(mp.log(a), 1 / a)

    def log2(self) -> MpDual:
        a = self._positive("log2")
        return self._smooth(mp.log(a, 2), 1 / (a * mp.log(2)))

    def log1p(self) -> MpDual:
        if self.p <= -1:
            raise Singular(f"log1p at {self.p}")
        return self._smooth(mp.log1p(self._at()), 1 / (1 + self._at()))

    def sqrt(self) -> MpDual:
        a = self._positive("sqrt")
        r = mp.sqrt(a)
        return self._smooth(r, 1 / (2 * r))

    def cbrt(self) -> MpDual:
        a = self._positive("cbrt")
        r = mp.cbrt(a)
        return self._smooth(r, 1 / (3 * r * r))

    def reciprocal(self) -> MpDual:
        if self.p == 0:
            raise Singular("reciprocal at 0")
        a = self._at()
        return self._smooth(1 / a, -1 / (a * a))

    def power(self, p: float) -> MpDual:
        a = self._at()
        if self.p < 0 or (self.p == 0 and p < 1):
            raise Singular(f"power {p} at {self.p}")
        slope = _ZERO if self.p == 0 else p * mp.power(a, p - 1)
        return self._smooth(mp.power(a, p), slope)

    def sin(self) -> MpDual:
        return self._smooth(mp.sin(self._at()), mp.cos(self._at()))

    def cos(self) -> MpDual:
        return self._smooth(mp.cos(self._at()), -mp.sin(self._at()))

    def tan(self) -> MpDual:
        t = mp.tan(self._at())
        return self._smooth(t, 1 + t * t)

    def tanh(self) -> MpDual:
        t = mp.tanh(self._at())
        return self._smooth(t, 1 - t * t)

    def sinh(self) -> MpDual:
        return self._smooth(mp.sinh(self._at()), mp.cosh(self._at()))

    def cosh(self) -> MpDual:
        return self._smooth(mp.cosh(self._at()), mp.sinh(self._at()))

    def arctan(self) -> MpDual:
        a = self._at()
        return self._smooth(mp.atan(a), 1 / (1 + a * a))

    def arcsinh(self) -> MpDual:
        a = self._at()
        return self._smooth(mp.asinh(a), 1 / mp.sqrt(1 + a * a))

    def logaddexp(self, other: Any) -> MpDual:
        o = self._coerce(other)
        a, b = self._at(), mp.mpf(o.p)
        top = max(a, b)
        s = mp.exp(a - top) + mp.exp(b - top)
        return self._linear(float(top + mp.log(s)), mp.exp(a - top) / s, o, mp.exp(b - top) / s)

    def hypot(self, other: Any) -> MpDual:
        return MpDual.norm([self, self._coerce(other)])

    @staticmethod
    def norm(entries: list[Any]) -> MpDual:
        """The Euclidean norm; at 0 its one-sided derivative is |tangent| and its limiting
        gradient along v the tangent direction (Lipschitz there, not differentiable)."""
        duals = [e for e in entries if isinstance(e, MpDual)]
        if not duals:
            return math.sqrt(sum(float(e) ** 2 for e in entries))
        es = [duals[0]._coerce(e) for e in entries]
        r = mp.sqrt(sum(mp.mpf(e.p) ** 2 for e in es))
        if r:
            weights = [mp.mpf(e.p) / r for e in es]
        else:
            rt = mp.sqrt(sum(e.t**2 for e in es))
            if not rt:
                if MpDual.decide_ties and any(any(g for g in e.g) for e in es):
                    raise Undecided("the norm at 0 along a direction that stays at 0")
                rt = mp.mpf(1)
            weights = [e.t / rt for e in es]
        n = len(es[0].g)
        t = sum((w * e.t for w, e in zip(weights, es, strict=True)), _ZERO)
        g = [sum((w * e.g[i] for w, e in zip(weights, es, strict=True)), _ZERO)
             for i in range(n)]
        return MpDual(float(r), t, g)


def _sync(out: Any, primal: np.ndarray) -> np.ndarray:
    """``out`` (object array) with every element's primal replaced by numpy's float."""
    out = np.asarray(out, dtype=object)
    primal = np.asarray(np.ma.getdata(primal))
    if primal.dtype.kind == "c":
        primal = primal.real
    if out.shape != primal.shape:
        raise ValueError(f"oracle shape {out.shape} != numpy's {primal.shape}")
    synced = [MpDual(p, e.t, e.g) if isinstance(e, MpDual) else float(p)
              for e, p in zip(out.flat, primal.astype(float).flat, strict=True)]
    return object_array(synced, out.shape)


@dataclass
class Hybrid:
    """What the mpmath oracle knows: numpy's values, tangents, and (if decided) the Jacobian."""

    value: Any  # numpy's own result
    derivative: np.ndarray  # mp tangents, shaped like the result
    jacobian: np.ndarray | None  # mp, out.shape + x.shape; None where Undecided
    scale: Any  # the largest tangent or gradient entry met: the tolerance's yardstick
    jumps: int
    singular: str | None  # a smooth function met a point where it is not Lipschitz
    undecided: str | None = None
    notes: list[str] = field(default_factory=list)
    flat_jump: bool = False  # an attempt stopped at a jump whose input is flat to first order


def _duals(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    n = np.size(x)
    one, zero = mp.mpf(1), _ZERO
    flat = [MpDual(p, mp.mpf(float(d)), [one if j == i else zero for j in range(n)])
            for i, (p, d) in enumerate(zip(np.ravel(x), np.ravel(v), strict=True))]
    return object_array(flat, np.shape(x))


def _beyond_float64(a: np.ndarray) -> bool:
    """Whether ``a`` holds extended-precision values that float64 does not represent."""
    a = np.asarray(np.ma.getdata(a))
    if a.dtype.kind not in "fc" or a.dtype.itemsize <= (8 if a.dtype.kind == "f" else 16):
        return False
    with np.errstate(all="ignore"):
        return bool(np.any(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
                           .astype(a.dtype) != a))


def _ray_primal(op: Op, ray: list[np.ndarray], out: Any, jumped: bool) -> np.ndarray:
    """numpy's float value of ``op`` on the ray-side primals ``ray``: numpy's own at the
    point, except where ``op`` is piecewise constant and sits on a jump that the ray leaves
    to another piece (``floor(3 - delta) = 2``, numpy's floor at the point is 3). There the
    oracle's side value replaces numpy's, so that what follows (``floor(.) * |x|``, whose
    slope is the side value's) is differentiated on the piece the ray is on; elsewhere the
    primals stay numpy's floats (ties decided on the very floats asd sees)."""
    with np.errstate(all="ignore"):
        primal = np.asarray(ops.apply(op, ray))
    if not jumped or primal.dtype.kind != "f" or isinstance(primal, np.ma.MaskedArray):
        return primal
    out = np.asarray(out, dtype=object)
    if out.shape != primal.shape:
        return primal
    side = np.array([float(e.p if isinstance(e, MpDual) else e) for e in out.flat],
                    dtype=float).reshape(primal.shape)
    with np.errstate(all="ignore"):
        off = np.abs(side - primal) > 2.0**-8 * np.maximum(1.0, np.abs(primal))
    return np.where(off, side.astype(primal.dtype), primal)


def hybrid_oracle(program: Program, x: np.ndarray, v: np.ndarray, dtype: Any) -> Hybrid:
    """The mpmath oracle at numpy's own floats (see the module docstring)."""
    xf = np.asarray(x, dtype=dtype)
    primals = float_values(program, xf)
    if any(_beyond_float64(p) for p in primals):
        raise Undecided("numpy computes in extended precision here (a longdouble constant) "
                        "and the mpmath oracle's primals are float64: its ties would be "
                        "decided on other values than numpy's")
    value = finish(program, primals[-1])
    results: dict[bool, Any] = {}
    scale = mp.mpf(0)
    jumps = 0
    singular = undecided = None
    flat_jump = False
    for decide in (False, True):
        MpDual.decide_ties = decide
        done = 0  # the jumps met by the ops that completed
        try:
            with recording_jumps():
                start = len(_JUMPS)
                values, ray = [_duals(xf, v)], [xf]
                for op in program.ops:
                    met = len(_JUMPS)
                    out = ops.apply_exact(op, values)
                    done = len(_JUMPS) - start
                    ray.append(_ray_primal(op, ray, out, len(_JUMPS) > met))
                    values.append(_sync(out, ray[-1]))
                    for e in values[-1].flat:
                        if isinstance(e, MpDual):
                            scale = max(scale, abs(e.t), *(abs(g) for g in e.g))
                out = np.asarray(finish(program, values[-1],
                                        lambda a: np.sum(np.asarray(a, dtype=object))),
                                 dtype=object)
            results[decide] = out
        except Singular as e:
            singular = str(e)
            break
        except Undecided as e:
            undecided = str(e)
            flat_jump = flat_jump or str(e) == FLAT_JUMP
        finally:
            MpDual.decide_ties = True
            # a jump an op met and passed is at the point whatever a later op leaves
            # undecided (a tied argmax as a plain index, which asd refuses as documented);
            # the op that stopped at its own jump, flat there, is not counted: whether its
            # input reaches the other side is what the oracle could not tell (F42)
            jumps = max(jumps, done)
    n = np.size(x)

    def tangent(e: Any) -> Any:
        return e.t if isinstance(e, MpDual) else _ZERO

    def grad(e: Any) -> list[Any]:
        return list(e.g) if isinstance(e, MpDual) else [_ZERO] * n

    derivative = jacobian = None
    if False in results:
        out = results[False]
        derivative = object_array([tangent(e) for e in out.flat], out.shape)
    if True in results:
        out = results[True]
        rows = [grad(e) for e in out.flat]
        jacobian = object_array([g for row in rows for g in row], out.shape + np.shape(x))
    return Hybrid(value, derivative, jacobian, scale, jumps, singular, undecided,
                  flat_jump=flat_jump)


# ----- comparing -----


def close(actual: Any, expected: np.ndarray, scale: Any, dtype: Any) -> bool:
    """``actual`` (floats) equals ``expected`` (mp or Fraction) up to a rounding tolerance
    scaled by ``scale``, the largest tangent or gradient entry the program met."""
    actual = np.asarray(actual, dtype=float)
    expected = np.asarray(expected, dtype=object)
    if actual.shape != expected.shape:
        return False
    rtol = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 2e-4,
            np.dtype(np.float16): 2e-2}.get(np.dtype(dtype), 1e-9)
    yard = mp.mpf(float(scale)) + 1
    return all(abs(mp.mpf(float(a)) - mp.mpf(e if not isinstance(e, Fraction) else
                                              mp.mpf(e.numerator) / e.denominator))
               <= rtol * (abs(mp.mpf(e if not isinstance(e, Fraction) else
                                     mp.mpf(e.numerator) / e.denominator)) + yard)
               for a, e in zip(actual.flat, expected.flat, strict=True))


def exactly(actual: Any, expected: np.ndarray) -> bool:
    """``actual`` (floats) equals ``expected`` (Fractions) exactly, shape included."""
    actual = np.asarray(actual)
    if actual.dtype.kind not in "fiub" or actual.shape != np.shape(expected):
        return False
    return bool(np.all(as_fractions(actual.astype(float)) == np.asarray(expected, dtype=object)))


def contract(jacobian: np.ndarray, ct: np.ndarray, ndim_in: int) -> np.ndarray:
    """``ct . J`` over the output axes: the vector-Jacobian product of the oracle's J."""
    jacobian = np.asarray(jacobian, dtype=object)
    out_axes = jacobian.ndim - ndim_in
    ct = np.asarray(ct, dtype=object).reshape(jacobian.shape[:out_axes])
    flat = jacobian.reshape(int(np.prod(ct.shape, dtype=int)), -1)
    total = np.sum(flat * ct.reshape(-1, 1), axis=0) if flat.shape[0] else np.zeros(
        flat.shape[1], dtype=object)
    return np.asarray(total, dtype=object).reshape(jacobian.shape[out_axes:])


def inner(g: np.ndarray, v: np.ndarray) -> Any:
    """``<g, v>`` exactly (Fractions) or in mp."""
    return sum((a * b for a, b in zip(np.ravel(np.asarray(g, dtype=object)),
                                      np.ravel(as_fractions(v)), strict=True)), Fraction(0))


# ----- the random direction asd draws from a seed -----


def drawn_direction(seed: int, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """The unnormalized direction asd's sweep draws from ``seed`` for leaves of ``shapes``
    (asd.core.sweep.LazyDirection: one stream per leaf, standard normals in float64). Branch
    choices do not change under positive scaling, so the oracle may follow it exactly."""
    streams = np.random.SeedSequence(seed).spawn(len(shapes))
    return [np.random.default_rng(s).standard_normal(shape) for s, shape in
            zip(streams, shapes, strict=True)]


def mp_value(e: Any) -> Any:
    if isinstance(e, Fraction):
        return mp.mpf(e.numerator) / e.denominator
    return mp.mpf(e)


def fractions_to_float(a: np.ndarray) -> np.ndarray:
    return np.vectorize(float, otypes=[float])(np.asarray(a, dtype=object)) if np.size(a) else \
        np.zeros(np.shape(a))
