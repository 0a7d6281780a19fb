"""Truncated power series in an infinitesimal δ > 0 with exact rational coefficients.

Along the ray ``x + δv`` every branch of a piecewise-polynomial program is eventually fixed, so
its values are polynomials in δ there, and comparing series by their leading nonzero coefficient
decides every branch exactly the way the ray does. The engine uses this to break ties that the
first-order tangent leaves open (``h == 0`` and ``ḣ == 0``, see ``ties``); the exact oracle of
``asd.testing`` uses it to compute limiting gradients.
"""

from __future__ import annotations

import math
import numbers
import operator
import threading
from collections.abc import Callable, Sequence
from fractions import Fraction
from itertools import zip_longest
from typing import Any

import numpy as np

__all__ = [
    "BUDGET",
    "DEFAULT_ORDER",
    "Budget",
    "Interval",
    "RaySeries",
    "Series",
    "SeriesTooLarge",
    "TranscendentalConstant",
    "UnprovenSign",
    "object_array",
    "to_fraction",
]

DEFAULT_ORDER = 24
"""Highest power of delta kept. Ties whose sign shows only beyond it are taken as exact ties."""

Scalar = numbers.Real | Fraction

# Unary ufuncs that numpy's object loops call as methods (``np.sqrt(a)`` calls ``a.sqrt()``); none
# is a polynomial, so the oracle cannot evaluate them exactly.
_NOT_POLYNOMIAL = frozenset(
    "sqrt cbrt exp exp2 expm1 log log2 log10 log1p sin cos tan arcsin arccos arctan sinh cosh tanh"
    " arcsinh arccosh arctanh rint floor ceil trunc".split()
)


def to_fraction(a: Scalar) -> Fraction:
    """``a`` as an exact Fraction; floats convert exactly (``0.1`` is not ``1/10``)."""
    if isinstance(a, Fraction):
        return a
    if isinstance(a, numbers.Integral):
        return Fraction(int(a))
    if isinstance(a, numbers.Real):
        return Fraction(float(a))
    raise TypeError(f"expected an int, float or Fraction, got {type(a).__name__}: {a!r}")


def is_infinite(a: Any) -> bool:
    """Whether ``a`` is an infinite (or NaN) float: a constant series cannot hold it as a
    Fraction, so series arithmetic keeps it as the float itself (`Series` mixes with it as
    IEEE arithmetic does, and raises `NonFiniteSeries` where that would give NaN)."""
    return isinstance(a, float) and not math.isfinite(a)


class NonFiniteSeries(ArithmeticError):
    """Series arithmetic with an infinite constant that has no limit (``inf - inf``,
    ``0 * inf``): the value along the ray is NaN, so no sign can be read from it."""


def _infinite_result(value: float, what: str) -> float:
    if math.isnan(value):
        raise NonFiniteSeries(f"{what} is NaN along the ray")
    return value


def object_array(items: Sequence[Any], shape: tuple[int, ...]) -> np.ndarray:
    """An object array of ``items`` (flat, C order) without numpy looking inside them."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


class SeriesTooLarge(ArithmeticError):
    """The exact series ran past its budget (`budget`): its coefficients grew too large to
    compute in reasonable time (a transcendental constant's interval at a high order)."""


BUDGET = 5 * 10 ** 7
"""The work one exact evaluation may spend (`budget`): the bits of the coefficients each
product of two series multiplies, summed. Exact rational series of polynomial programs stay
far below it; a transcendental function of a nested ray at order 64, whose interval
coefficients reach thousands of bits, meets it within about a second instead of minutes."""


class _Running(threading.local):
    budget: Budget | None = None


_running = _Running()


class Budget:
    """A bound on exact series arithmetic: ``with b:`` charges every product of series inside
    the block to ``b`` (the bits of the coefficients multiplied, summed), and a product past
    what is left raises `SeriesTooLarge`. One budget serves several blocks (one evaluation
    of a tie's cone, node by node); outside every block nothing is counted."""

    __slots__ = ("left", "outer")

    def __init__(self, work: float | None = None):
        self.left, self.outer = BUDGET if work is None else work, None

    def __enter__(self) -> Budget:
        self.outer, _running.budget = _running.budget, self
        return self

    def __exit__(self, *exc: Any) -> None:
        _running.budget, self.outer = self.outer, None


def _bits(coeffs: tuple) -> int:
    """The largest coefficient's size in bits among ``coeffs`` (series count 1: their own
    products spend for their coefficients)."""
    size = 1
    for c in coeffs:
        if type(c) is Fraction:
            size = max(size, c.numerator.bit_length() + c.denominator.bit_length())
        elif isinstance(c, Interval):
            size = max(size, _bits((c.lo, c.hi)))
    return size


def _spend(a: tuple, b: tuple) -> None:
    """Charge the product of coefficient tuples ``a`` and ``b`` to the running `Budget`."""
    running = _running.budget
    if running is None:
        return
    running.left -= len(a) * len(b) * (_bits(a) + _bits(b))
    if running.left < 0:
        raise SeriesTooLarge(
            f"the exact series ran past its budget of {BUDGET:.0e} bit operations "
            f"(coefficients of {max(_bits(a), _bits(b))} bits)")


def _comparison(test: Callable[[int, int], bool]) -> Callable[[Any, Any], Any]:
    """A rich comparison decided by ``test(sign(self - other), 0)``."""

    def compare(self: Any, other: Any) -> Any:
        sign = self._compare(other)
        return sign if sign is NotImplemented else test(sign, 0)

    return compare


def _not_polynomial(kind: str, name: str) -> Callable[..., Any]:
    def unsupported(*args: Any) -> Any:
        raise TypeError(
            f"np.{name} is not supported on {kind}: the exact oracle evaluates piecewise-polynomial"
            " programs only (+ - * /, integer powers, abs, maximum/minimum, where on comparisons)"
        )

    return unsupported


class Series:
    """A power series in an infinitesimal ``delta > 0``, truncated after ``delta**order``.

    Coefficients are exact Fractions. A series is ordered like the function it represents for
    small ``delta``: by the sign of its leading nonzero coefficient; a series that is zero to the
    truncation order equals 0. Mixes with int, float (converted exactly) and Fraction.

    >>> d = Series([0, 1])
    >>> (1 + d) ** 2
    Series(1 + 2*d + d^2)
    >>> d ** 2 - 3 * d < 0 < d ** 5
    True
    """

    __slots__ = ("coeffs", "order", "var", "exact")

    coeffs: tuple[Any, ...]
    order: int
    var: int
    exact: bool

    def __init__(self, coeffs: Sequence[Any] | Scalar = (), order: int = DEFAULT_ORDER,
                 var: int = 0) -> None:
        if not isinstance(coeffs, Sequence):
            coeffs = (coeffs,)
        self._set([c if isinstance(c, Series) else to_fraction(c) for c in coeffs], order, var,
                  True)

    def _set(self, coeffs: list[Any], order: int, var: int, exact: bool) -> None:
        """Store ``coeffs`` truncated after ``delta**order`` and without trailing zeros.

        ``exact`` stays True only while nothing nonzero was cut off: the stored coefficients
        are then the whole function (a polynomial), so a series that stores none is proven
        zero. A trailing coefficient that is itself an unproven zero makes the whole inexact.
        """
        if any(coeffs[order + 1:]):
            exact = False
        del coeffs[order + 1 :]
        while coeffs and not coeffs[-1]:
            if isinstance(coeffs[-1], Series) and not coeffs[-1].exact:
                exact = False
            coeffs.pop()
        self.coeffs = tuple(coeffs)
        self.order = order
        self.var = var
        self.exact = exact

    @classmethod
    def _new(cls, coeffs: list[Any], order: int, var: int = 0, exact: bool = True) -> Series:
        """Construct from coefficients already checked (the arithmetic's fast path)."""
        series = object.__new__(cls)
        series._set(coeffs, order, var, exact)
        return series

    def with_constant(self, c: Any) -> Series:
        """This series with its constant term (at every nesting level) replaced by ``c``;
        itself where that is its constant already (the object is the quantity's identity:
        `__sub__` reads ``a - a`` as an exact 0)."""
        coeffs = list(self.coeffs) or [Fraction(0)]
        head = coeffs[0]
        new = head.with_constant(c) if isinstance(head, Series) else to_fraction(c)
        if new is head or (not isinstance(head, Series) and new == head and self.coeffs):
            return self
        coeffs[0] = new
        return type(self)._new(coeffs, self.order, self.var, self.exact)

    def coefficient(self, k: int) -> Any:
        """The coefficient of ``delta**k`` (zero past the stored ones)."""
        return self.coeffs[k] if k < len(self.coeffs) else Fraction(0)

    def valuation(self) -> int | None:
        """The power of delta of the leading nonzero coefficient; None for the zero series."""
        return next((k for k, c in enumerate(self.coeffs) if c), None)

    def sign(self) -> int:
        """-1, 0 or 1: the sign of the represented function for all small ``delta > 0``.

        A series stored as zero to the truncation order counts as 0 here; `proven_sign` tells
        that apart from a proof.
        """
        for c in self.coeffs:
            if c:
                if isinstance(c, Series | Interval):
                    return c.sign() or 0
                return 1 if c > 0 else -1
        return 0

    def proven_sign(self) -> int | None:
        """The sign where the stored coefficients prove it, None where truncation hides it.

        Nested series (coefficients that are series in an earlier, larger infinitesimal) are
        ordered lexicographically: the lowest power of this level's infinitesimal whose
        coefficient is not zero decides, by that coefficient's own sign. An unproven zero
        coefficient before it leaves the sign unproven.
        """
        for c in self.coeffs:
            if isinstance(c, Series):
                if c:
                    return c.proven_sign()
                if not c.exact:
                    return None
            elif isinstance(c, Interval):
                if c:
                    return c.sign()  # None where the interval still holds 0
            elif c:
                return 1 if c > 0 else -1
        return 0 if self.exact else None

    def hidden_by_truncation(self) -> bool:
        """Whether a higher order could prove the sign `proven_sign` leaves open (not when an
        interval coefficient that holds 0 decides it: its width does not shrink with order)."""
        for c in self.coeffs:
            if isinstance(c, Series):
                if c:
                    return c.hidden_by_truncation()
                if not c.exact:
                    return True
            elif isinstance(c, Interval):
                if c:
                    return False
            elif c:
                return False
        return not self.exact

    # ----- arithmetic -----

    def _coerce(self, other: Any) -> Series | None:
        """``other`` as a series in this one's variable; None where it belongs to a later one."""
        if isinstance(other, Series):
            if other.var == self.var:
                return other
            if other.var > self.var:
                return None
            return type(self)._new([other], self.order, self.var, True)
        if isinstance(other, numbers.Real):
            return type(self)._new([to_fraction(other)], self.order, self.var, True)
        if isinstance(other, Interval):
            return type(self)._new([other], self.order, self.var, True)
        return None

    def __add__(self, other: Any) -> Series:
        if is_infinite(other):  # a finite series plus an infinite constant
            return _infinite_result(other, f"{self!r} + {other}")
        if isinstance(other, numbers.Real) and other == 0 and not isinstance(other, bool):
            return self  # the same quantity (see `with_constant`)
        coerced = self._coerce(other)
        if coerced is None:  # a series in a later variable takes this one as a coefficient
            return other + self if isinstance(other, Series) else NotImplemented
        other = coerced
        zero = Fraction(0)
        coeffs = [a + b for a, b in zip_longest(self.coeffs, other.coeffs, fillvalue=zero)]
        return type(self)._new(coeffs, min(self.order, other.order), self.var,
                               self.exact and other.exact)

    __radd__ = __add__

    def __neg__(self) -> Series:
        return type(self)._new([-c for c in self.coeffs], self.order, self.var, self.exact)

    def __pos__(self) -> Series:
        return self

    def __sub__(self, other: Any) -> Series:
        if other is self:  # the same quantity: exactly 0, though its enclosures have width
            return type(self)._new([], self.order, self.var, True)
        if not isinstance(other, Series | Interval | numbers.Real):
            return NotImplemented
        return self + -other

    def __rsub__(self, other: Any) -> Series:
        if not isinstance(other, Series | Interval | numbers.Real):
            return NotImplemented
        return -self + other

    def __mul__(self, other: Any) -> Series:
        if is_infinite(other):  # the sign of the series along the ray times the infinity
            sign = self._sign_of(self) if self else 0
            return _infinite_result(other * sign if sign else math.nan, f"{self!r} * {other}")
        if isinstance(other, numbers.Real) and other == 1:
            return self  # the same quantity (see `with_constant`)
        coerced = self._coerce(other)
        if coerced is None:
            return other * self if isinstance(other, Series) else NotImplemented
        other = coerced
        order = min(self.order, other.order)
        a, b = self.coeffs, other.coeffs
        _spend(a, b)
        coeffs: list[Any] = [Fraction(0)] * max(0, min(len(a) + len(b) - 1, order + 1))
        for i, ai in enumerate(a[: order + 1]):
            if ai:
                for j, bj in enumerate(b[: order + 1 - i]):
                    if bj:
                        coeffs[i + j] = coeffs[i + j] + ai * bj
        exact = self.exact and other.exact and (not a or not b or len(a) + len(b) - 2 <= order)
        return type(self)._new(coeffs, order, self.var, exact)

    __rmul__ = __mul__

    def reciprocal(self) -> Series:
        """``1 / self`` as a power series; needs a nonzero constant term."""
        a = self.coeffs
        if not a or not a[0]:
            raise ZeroDivisionError(
                f"1/{self!r}: the constant term is zero, so the reciprocal is a Laurent series in"
                " delta (a pole at the point), which the oracle does not represent"
            )
        inverse = 1 / a[0]
        b = [inverse]
        for n in range(1, self.order + 1 if len(a) > 1 else 1):
            b.append(-inverse * sum((a[k] * b[n - k] for k in range(1, min(n, len(a) - 1) + 1)),
                                    Fraction(0)))
        exact = self.exact and len(a) == 1 and (not isinstance(inverse, Series) or inverse.exact)
        return type(self)._new(b, self.order, self.var, exact)

    def __truediv__(self, other: Any) -> Series:
        if is_infinite(other):
            if math.isnan(other):
                raise NonFiniteSeries(f"{self!r} / nan is NaN along the ray")
            return type(self)._new([], self.order, self.var, True)
        if isinstance(other, Series):
            return self * other.reciprocal()
        coerced = self._coerce(other)
        return NotImplemented if coerced is None else self * coerced.reciprocal()

    def __rtruediv__(self, other: Any) -> Series:
        if is_infinite(other):
            return self.__mul__(other) if self else _infinite_result(
                math.nan, f"{other} / {self!r}")
        if not isinstance(other, Series | Interval | numbers.Real):
            return NotImplemented
        return self.reciprocal() * other

    def __pow__(self, n: int) -> Series:
        if not isinstance(n, numbers.Integral) or n < 0:
            raise TypeError(f"Series ** {n!r}: only integer exponents >= 0 are polynomial")
        result, base = type(self)._new([Fraction(1)], self.order, self.var, True), self
        for bit in bin(int(n))[:1:-1]:
            if bit == "1":
                result = result * base
            base = base * base
        return result

    def __abs__(self) -> Series:
        return -self if self < 0 else self

    # ----- order -----

    def _compare(self, other: Any) -> int:
        if is_infinite(other):  # every finite series lies between -inf and inf
            return _infinite_result(-1 if other > 0 else 1 if other < 0 else other,
                                    f"{self!r} compared with nan")
        if not isinstance(other, Series | Interval | numbers.Real):
            return NotImplemented
        return self._sign_of(self - other)

    @staticmethod
    def _sign_of(diff: Series) -> int:
        return diff.sign()

    __lt__ = _comparison(operator.lt)
    __le__ = _comparison(operator.le)
    __gt__ = _comparison(operator.gt)
    __ge__ = _comparison(operator.ge)
    __eq__ = _comparison(operator.eq)
    __ne__ = _comparison(operator.ne)
    __hash__ = None

    def __bool__(self) -> bool:
        return bool(self.coeffs)

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_POLYNOMIAL:
            return _not_polynomial("Series", name)
        raise AttributeError(f"'Series' object has no attribute {name!r}")

    def __repr__(self) -> str:
        terms = [
            f"{c}" if k == 0 else f"{'' if c == 1 else f'{c}*'}d{'' if k == 1 else f'^{k}'}"
            for k, c in enumerate(self.coeffs)
            if c
        ]
        return f"Series({' + '.join(terms).replace('+ -', '- ') or '0'})"


# ----- series along the sweep's ray: strict signs, elementary functions at exact points -----

class UnprovenSign(ArithmeticError):
    """A comparison whose sign the series cannot prove: zero so far but truncated
    (``truncated``: a higher order may prove it), or held by an interval that contains 0."""

    def __init__(self, message: str, truncated: bool = True):
        super().__init__(message)
        self.truncated = truncated


class TranscendentalConstant(ArithmeticError):
    """An elementary function at a point where its Taylor coefficients are not rational."""


def _factorials(n: int) -> list[Fraction]:
    out, f = [], Fraction(1)
    for k in range(n + 1):
        out.append(1 / f)
        f *= k + 1
    return out


def _quotient(num: list[Fraction], den: list[Fraction]) -> list[Fraction]:
    """Taylor coefficients of ``num / den`` (``den[0] != 0``), as long as ``num``."""
    out: list[Fraction] = []
    for n in range(len(num)):
        out.append((num[n] - sum((den[k] * out[n - k] for k in range(1, min(n, len(den) - 1) + 1)),
                                 Fraction(0))) / den[0])
    return out


def _at_zero_coefficients(name: str, n: int) -> list[Fraction]:
    """The Taylor coefficients of ``name`` at 0 up to ``n`` (only that function's: tan's
    quotient alone costs more than a low-order series)."""
    inv = _factorials(n)
    alt = [Fraction((-1) ** (k // 2)) for k in range(n + 1)]
    zero = Fraction(0)
    tables: dict[str, Callable[[], list[Fraction]]] = {
        "exp": lambda: inv,
        "expm1": lambda: [zero, *inv[1:]],
        "log1p": lambda: [zero] + [Fraction((-1) ** (k + 1), k) for k in range(1, n + 1)],
        "sin": lambda: [alt[k] * inv[k] if k % 2 else zero for k in range(n + 1)],
        "cos": lambda: [zero if k % 2 else alt[k] * inv[k] for k in range(n + 1)],
        "sinh": lambda: [inv[k] if k % 2 else zero for k in range(n + 1)],
        "cosh": lambda: [zero if k % 2 else inv[k] for k in range(n + 1)],
        "arctan": lambda: [zero] + [alt[k] / k if k % 2 else zero for k in range(1, n + 1)],
        "arctanh": lambda: [zero] + [Fraction(1, k) if k % 2 else zero
                                     for k in range(1, n + 1)],
        "tan": lambda: _quotient(tables["sin"](), tables["cos"]()),
        "tanh": lambda: _quotient(tables["sinh"](), tables["cosh"]()),
    }
    return tables[name]()


_AT_ZERO = frozenset({"exp", "expm1", "log1p", "sin", "cos", "sinh", "cosh", "arctan",
                      "arctanh", "tan", "tanh"})
"""The functions whose Taylor coefficients at 0 are rational (`_at_zero_coefficients`)."""


def _taylor(name: str, c: Fraction, n: int) -> list[Fraction]:
    """``f^(k)(c) / k!`` for ``k <= n``, where they are rational; else `TranscendentalConstant`."""
    if name in _AT_ZERO and c == 0:
        return _at_zero_coefficients(name, n)
    if name == "log" and c == 1:
        return _at_zero_coefficients("log1p", n)
    if name in ("sqrt", "cbrt") and c > 0:
        p = 2 if name == "sqrt" else 3
        root = _exact_root(c, p)
        if root is not None:
            out, binom = [], Fraction(1)
            for k in range(n + 1):
                out.append(root * binom / c ** k)
                binom = binom * (Fraction(1, p) - k) / (k + 1)
            return out
    raise TranscendentalConstant(
        f"{name} at {c}: its Taylor coefficients there are not rational, so the series along "
        "the ray cannot be computed exactly"
    )


def _exact_root(c: Fraction, p: int) -> Fraction | None:
    def root(m: int) -> int | None:
        if m < 2:
            return m
        r = 1 << -(-m.bit_length() // p)  # above the root: Newton's integer steps descend
        while True:
            s = ((p - 1) * r + m // r ** (p - 1)) // p
            if s >= r:
                return r if r ** p == m else None
            r = s

    num, den = root(c.numerator), root(c.denominator)
    return None if num is None or den is None else Fraction(num, den)


ENDS = 320
"""Bits an `Interval`'s ends keep, relative to their size: past them an end is rounded
outward (down for ``lo``, up for ``hi``), so the enclosure stays true while exact Fraction
ends no longer grow with every product (a series of ``sqrt`` at 1/2 through a reciprocal
took seconds in gcds: numpy campaign seed 3001)."""


def _rounded(q: Fraction, way: int) -> Fraction:
    """``q`` rounded to `ENDS` significant bits towards ``way`` (-1 down, 1 up), unchanged
    where it already fits in about twice that."""
    n, d = q.numerator, q.denominator
    if n.bit_length() + d.bit_length() <= 2 * ENDS:
        return q
    shift = ENDS - (n.bit_length() - d.bit_length())  # q * 2**shift has ENDS integer bits
    num, den = (n << shift, d) if shift >= 0 else (n, d << -shift)
    m = num // den if way < 0 else -((-num) // den)  # floor or ceiling
    return Fraction(m, 1 << shift) if shift >= 0 else Fraction(m << -shift)


class Interval:
    """A real number known only to lie in ``[lo, hi]`` (exact Fraction ends): a transcendental
    coefficient such as ``exp(1/2)``, enclosed by mpmath's interval arithmetic. Arithmetic on
    Fraction ends is exact, so every result still encloses the true value; a sign is proven
    only where the interval excludes 0."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: Fraction, hi: Fraction):
        if lo != hi:  # widened outward, so the ends' size stays bounded (a point stays exact)
            lo, hi = _rounded(lo, -1), _rounded(hi, 1)
        self.lo, self.hi = lo, hi

    @staticmethod
    def of(other: Any) -> Interval | None:
        if isinstance(other, Interval):
            return other
        if isinstance(other, numbers.Real):
            f = to_fraction(other)
            return Interval(f, f)
        return None

    def sign(self) -> int | None:
        if self.lo > 0:
            return 1
        if self.hi < 0:
            return -1
        return 0 if self.lo == self.hi == 0 else None

    def __bool__(self) -> bool:
        return not self.lo == self.hi == 0

    def __add__(self, other: Any) -> Any:
        o = Interval.of(other)
        return NotImplemented if o is None else Interval(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __neg__(self) -> Interval:
        return Interval(-self.hi, -self.lo)

    def __sub__(self, other: Any) -> Any:
        if other is self:  # one real number less itself (interval arithmetic's dependency)
            return Interval(Fraction(0), Fraction(0))
        o = Interval.of(other)
        return NotImplemented if o is None else self + -o

    def __rsub__(self, other: Any) -> Any:
        o = Interval.of(other)
        return NotImplemented if o is None else o + -self

    def __mul__(self, other: Any) -> Any:
        o = Interval.of(other)
        if o is None:
            return NotImplemented
        ends = (self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi)
        return Interval(min(ends), max(ends))

    __rmul__ = __mul__

    def reciprocal(self) -> Interval:
        if self.sign() in (0, None):
            raise UnprovenSign(f"1/{self!r}: the interval holds 0")
        return Interval(1 / self.hi, 1 / self.lo)

    def __truediv__(self, other: Any) -> Any:
        o = Interval.of(other)
        return NotImplemented if o is None else self * o.reciprocal()

    def __rtruediv__(self, other: Any) -> Any:
        o = Interval.of(other)
        return NotImplemented if o is None else o * self.reciprocal()

    def __float__(self) -> float:
        return float((self.lo + self.hi) / 2)

    def __repr__(self) -> str:
        return f"Interval({float(self.lo)!r}, {float(self.hi)!r})"


PRECISION = 256
"""Bits of mpmath's interval arithmetic for transcendental constants."""


def _enclose(fn: str, c: Fraction) -> Interval:
    """``fn(c)`` enclosed in an `Interval` by mpmath's interval arithmetic (its own context, so
    no global precision changes); functions it lacks are written with ``exp`` and ``log``,
    and ``atan`` as ``Im log(1 + ic)`` through ``atan2``-free identities on the real line."""
    from mpmath.ctx_iv import MPIntervalContext

    ctx = MPIntervalContext()
    ctx.prec = PRECISION
    x = ctx.mpf(c.numerator) / c.denominator
    derived = {
        "sinh": lambda: (ctx.exp(x) - ctx.exp(-x)) / 2,
        "cosh": lambda: (ctx.exp(x) + ctx.exp(-x)) / 2,
        "tanh": lambda: 1 - 2 / (ctx.exp(2 * x) + 1),
        "atanh": lambda: ctx.log((1 + x) / (1 - x)) / 2,
        "cbrt": lambda: ctx.exp(ctx.log(x) / 3),
        "atan": lambda: _atan(ctx, x),
    }
    value = derived[fn]() if fn in derived else getattr(ctx, fn)(x)

    def exact(raw) -> Fraction:
        sign, man, exp, _ = raw
        return (-1) ** sign * Fraction(man) * Fraction(2) ** exp

    lo, hi = value._mpi_
    return Interval(exact(lo), exact(hi))


def _atan(ctx, x):
    """``atan(x)`` as an interval: ``2 atan(x / (1 + sqrt(1 + x²)))`` reduces the argument below
    1/2 twice, then the alternating Taylor series is summed with its remainder as a bound."""
    for _ in range(2):
        x = x / (1 + ctx.sqrt(1 + x * x))
    total, term, k = ctx.mpf(0), x, 1
    while True:
        total += term / k
        term = -term * x * x
        k += 2
        if k > 4 * PRECISION:
            break
    bound = abs(term) / k  # the alternating remainder after the last term
    return 4 * (total + ctx.mpf([-1, 1]) * bound)


def _horner(coeffs: list, u: Any) -> Any:
    out: Any = coeffs[-1]
    for c in coeffs[-2::-1]:
        out = out * u + c
    return out


def _at_zero(name: str, u: Any, n: int) -> Any:
    """``name(u)`` for a series ``u`` with zero constant term (rational Taylor coefficients)."""
    return _horner(_taylor(name, Fraction(0), n), u)


def _at_one(name: str, u: Any, n: int) -> Any:
    """``name(1 + u)`` for a series ``u`` with zero constant term (roots)."""
    return _horner(_taylor(name, Fraction(1), n), u)


def _anywhere(name: str, c: Fraction, rest: Any, n: int) -> Any:
    """``name(c + rest)`` by its addition theorem: enclosed constants at ``c`` times rational
    series of ``rest`` at 0 (``rest`` has zero constant term)."""
    if name in ("exp", "expm1"):
        e = _enclose("exp", c)
        tail = e * _at_zero("expm1", rest, n)
        return e + tail if name == "exp" else (e - 1) + tail
    if name in ("sin", "cos"):
        sin_c, cos_c = _enclose("sin", c), _enclose("cos", c)
        sin_r, cos_r = _at_zero("sin", rest, n), _at_zero("cos", rest, n)
        if name == "sin":
            return sin_c * cos_r + cos_c * sin_r
        return cos_c * cos_r - sin_c * sin_r
    if name in ("sinh", "cosh"):
        sinh_c, cosh_c = _enclose("sinh", c), _enclose("cosh", c)
        sinh_r, cosh_r = _at_zero("sinh", rest, n), _at_zero("cosh", rest, n)
        if name == "sinh":
            return sinh_c * cosh_r + cosh_c * sinh_r
        return cosh_c * cosh_r + sinh_c * sinh_r
    if name in ("tan", "tanh"):
        t, tr = _enclose(name, c), _at_zero(name, rest, n)
        return (t + tr) / (1 - t * tr) if name == "tan" else (t + tr) / (1 + t * tr)
    if name == "log" and c > 0:
        return _enclose("log", c) + _at_zero("log1p", rest / c, n)
    if name == "log1p" and c > -1:
        return _enclose("log1p", c) + _at_zero("log1p", rest / (1 + c), n)
    if name == "arctan":
        return _enclose("atan", c) + _at_zero("arctan", rest / (1 + c * c + c * rest), n)
    if name == "arctanh" and -1 < c < 1:
        return _enclose("atanh", c) + _at_zero("arctanh", rest / (1 - c * c - c * rest), n)
    if name in ("sqrt", "cbrt") and c != 0 and (name == "cbrt" or c > 0):
        root = _enclose(name, c) if c > 0 else -_enclose(name, -c)
        return root * _at_one(name, rest / c, n)
    raise TranscendentalConstant(f"{name} at {c}: outside its domain or not analytic there")


def _elementary(name: str) -> Callable[[RaySeries], RaySeries]:
    def apply(self: RaySeries) -> RaySeries:
        base: Any = self
        depth = 0
        while isinstance(base, Series):  # the constant term of every level
            base, depth = base.coefficient(0), depth + 1
        rest = self - base
        n = (self.order + 1) * depth  # every power past n vanishes in the truncated ring
        try:
            out = _horner(_taylor(name, base, n), rest)
        except TranscendentalConstant:
            out = _anywhere(name, to_fraction(base), rest, n)
        if not isinstance(out, Series):
            out = type(self)._new([out], self.order, self.var, True)
        if rest and out.exact:  # a transcendental function of a nonconstant series
            out = type(self)._new(list(out.coeffs), out.order, out.var, False)
        return out

    apply.__name__ = name
    return apply


_sqrt = _elementary("sqrt")


class RaySeries(Series):
    """A `Series` along the sweep's ray as the engine uses it: comparisons must be proven.

    Where truncation hides a sign (a difference that is zero so far but not known to be zero),
    a comparison raises `UnprovenSign` instead of calling it a tie, so the caller can raise
    the order or decide by the next direction. Elementary functions (exp, log, sin, ...)
    expand where their Taylor coefficients are rational (exp, sin, ... at 0; log at 1; roots
    of perfect squares) and raise `TranscendentalConstant` elsewhere.
    """

    __slots__ = ()

    @staticmethod
    def _sign_of(diff: Series) -> int:
        sign = diff.proven_sign()
        if sign is None:
            truncated = diff.hidden_by_truncation()
            why = "truncation" if truncated else "an interval that holds 0"
            raise UnprovenSign(f"the sign of {diff!r} is hidden by {why}", truncated)
        return sign

    # ----- the integer part: constant along the ray, its jumps decided by proven signs -----

    def __floor__(self) -> RaySeries:
        """The greatest integer ``n <= self`` for all small ``delta``: the integer below the
        point's value, less one where the value is an integer the series leaves downwards
        (``floor(1 - d) = 0``); the comparisons raise `UnprovenSign` where the series cannot
        tell (a truncated tail, an interval holding the integer)."""
        base: Any = self
        while isinstance(base, Series):
            base = base.coefficient(0)
        n = math.floor(base.lo if isinstance(base, Interval) else base)
        if self < n:
            n -= 1
        while self >= n + 1:  # only an interval's width leaves more than one candidate
            n += 1
        return type(self)._new([Fraction(n)], self.order, self.var, True)

    def __ceil__(self) -> RaySeries:
        return -math.floor(-self)

    def __trunc__(self) -> RaySeries:
        return math.floor(self) if self >= 0 else math.ceil(self)

    def rint(self) -> RaySeries:
        """The nearest integer, halves to even (numpy's rounding): a half the series leaves
        rounds to the side it enters; an exact half stays on the even integer."""
        n = math.floor(self + Fraction(1, 2))
        if n - self == Fraction(1, 2) and n.coeffs and n.coeffs[0] % 2:
            return n - 1
        return n

    def __floordiv__(self, other: Any) -> RaySeries:
        if not isinstance(other, Series | numbers.Real):
            return NotImplemented
        return math.floor(self / other)

    def __rfloordiv__(self, other: Any) -> RaySeries:
        if not isinstance(other, numbers.Real):
            return NotImplemented
        return math.floor(other / self)

    def __mod__(self, other: Any) -> RaySeries:
        """numpy's (and Python's) remainder ``x - c floor(x / c)``: the divisor's sign."""
        if not isinstance(other, Series | numbers.Real):
            return NotImplemented
        return self - other * (self // other)

    def __rmod__(self, other: Any) -> RaySeries:
        if not isinstance(other, numbers.Real):
            return NotImplemented
        return other - self * (other // self)

    def sqrt(self) -> RaySeries:
        """``sqrt`` along the ray; at 0 (a quantity ``c δ^(2k) (1 + u)`` that vanishes at
        the point to even order) ``sqrt(c) δ^k sqrt(1 + u)``, known to ``k`` orders less than
        ``self``: the norm of a row that leaves 0 only at second order."""
        if self.coefficient(0) or self.var or any(isinstance(c, Series) for c in self.coeffs):
            return _sqrt(self)
        sign = self._sign_of(self)  # UnprovenSign where truncation hides it
        if sign == 0:
            return self
        k = self.valuation()
        if k % 2 or sign < 0:
            raise TranscendentalConstant(
                f"sqrt of {self!r}: a leading term of odd order or negative sign is no power "
                "series along the ray")
        rest = type(self)._new(list(self.coeffs[k:]), self.order - k, self.var, self.exact)
        root = _sqrt(rest)
        return type(self)._new([Fraction(0)] * (k // 2) + list(root.coeffs),
                               self.order - k // 2, self.var, root.exact)

    exp = _elementary("exp")
    expm1 = _elementary("expm1")
    log = _elementary("log")
    log1p = _elementary("log1p")
    sin = _elementary("sin")
    cos = _elementary("cos")
    tan = _elementary("tan")
    sinh = _elementary("sinh")
    cosh = _elementary("cosh")
    tanh = _elementary("tanh")
    arctan = _elementary("arctan")
    arctanh = _elementary("arctanh")
    cbrt = _elementary("cbrt")


def leading_term(e: Any, top: int) -> tuple[tuple[int, ...], Any] | None:
    """Exponents (variables ``top`` down to 0) and coefficient of ``e``'s leading term."""
    exps: list[int] = []
    while isinstance(e, Series):
        exps += [0] * (top - e.var)
        k = e.valuation()
        if k is None:
            return None
        exps.append(k)
        top, e = e.var - 1, e.coeffs[k]
    if not e:
        return None
    return tuple(exps + [0] * (top + 1)), e


def _coefficient_at(e: Any, exps: tuple[int, ...], top: int) -> Any:
    for level, k in zip(range(top, -1, -1), exps, strict=True):
        if isinstance(e, Series) and e.var == level:
            e = e.coefficient(k)
        elif k:
            return Fraction(0)
    return e


def leading_vector(entries: Sequence[Any]) -> list[Fraction] | None:
    """The coefficient vector of the lexicographically leading monomial of a vector of series.

    A vector moving along the (nested) ray as ``ε^k c + …`` points, to leading order, along
    ``c``: the direction a norm or projection reads at a zero it leaves only at higher order or
    along a later direction. None when every entry is zero.
    """
    top = max((e.var for e in entries if isinstance(e, Series)), default=0)
    leads = [lead for e in entries if (lead := leading_term(e, top)) is not None]
    if not leads:
        return None
    exps = min(lead[0] for lead in leads)
    coeffs = [_coefficient_at(e, exps, top) for e in entries]
    return [Fraction(float(c)) if isinstance(c, Interval) else Fraction(c) for c in coeffs]
