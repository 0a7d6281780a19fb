"""Truncated power series in an infinitesimal δ > 0 with exact rational coefficients.

Along the ray ``x + δv`` every branch of a piecewise-polynomial program is eventually fixed, so
its values are polynomials in δ there, and comparing series by their leading nonzero coefficient
decides every branch exactly the way the ray does. The engine uses this to break ties that the
first-order tangent leaves open (``h == 0`` and ``ḣ == 0``, see ``asd.ray``); the exact oracle of
``asd.testing`` uses it to compute limiting gradients.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Sequence
from fractions import Fraction
from itertools import zip_longest
from typing import Any

import numpy as np

__all__ = ["DEFAULT_ORDER", "Series", "object_array", "to_fraction"]

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


def object_array(items: Sequence[Any], shape: tuple[int, ...]) -> np.ndarray:
    """An object array of ``items`` (flat, C order) without numpy looking inside them."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


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

    __slots__ = ("coeffs", "order")

    coeffs: tuple[Fraction, ...]
    order: int

    def __init__(self, coeffs: Sequence[Scalar] | Scalar = (), order: int = DEFAULT_ORDER) -> None:
        if not isinstance(coeffs, Sequence):
            coeffs = (coeffs,)
        self._set([to_fraction(c) for c in coeffs], order)

    def _set(self, coeffs: list[Fraction], order: int) -> None:
        """Store ``coeffs`` truncated after ``delta**order`` and without trailing zeros."""
        del coeffs[order + 1 :]
        while coeffs and not coeffs[-1]:
            coeffs.pop()
        self.coeffs = tuple(coeffs)
        self.order = order

    @classmethod
    def _new(cls, coeffs: list[Fraction], order: int) -> Series:
        """Construct from Fractions already checked (the arithmetic's fast path)."""
        series = object.__new__(cls)
        series._set(coeffs, order)
        return series

    def coefficient(self, k: int) -> Fraction:
        """The coefficient of ``delta**k`` (zero past the stored ones)."""
        return self.coeffs[k] if k < len(self.coeffs) else Fraction(0)

    def valuation(self) -> int | None:
        """The power of delta of the leading nonzero coefficient; None for the zero series."""
        return next((k for k, c in enumerate(self.coeffs) if c), None)

    def sign(self) -> int:
        """-1, 0 or 1: the sign of the represented function for all small ``delta > 0``."""
        k = self.valuation()
        return 0 if k is None else (1 if self.coeffs[k] > 0 else -1)

    # ----- arithmetic -----

    def _coerce(self, other: Any) -> Series | None:
        if isinstance(other, Series):
            return other
        if isinstance(other, numbers.Real):
            return Series._new([to_fraction(other)], self.order)
        return None

    def __add__(self, other: Any) -> Series:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        zero = Fraction(0)
        coeffs = [a + b for a, b in zip_longest(self.coeffs, other.coeffs, fillvalue=zero)]
        return Series._new(coeffs, min(self.order, other.order))

    __radd__ = __add__

    def __neg__(self) -> Series:
        return Series._new([-c for c in self.coeffs], self.order)

    def __pos__(self) -> Series:
        return self

    def __sub__(self, other: Any) -> Series:
        other = self._coerce(other)
        return NotImplemented if other is None else self + -other

    def __rsub__(self, other: Any) -> Series:
        other = self._coerce(other)
        return NotImplemented if other is None else other + -self

    def __mul__(self, other: Any) -> Series:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        order = min(self.order, other.order)
        a, b = self.coeffs, other.coeffs
        coeffs = [Fraction(0)] * max(0, min(len(a) + len(b) - 1, order + 1))
        for i, ai in enumerate(a[: order + 1]):
            if ai:
                for j, bj in enumerate(b[: order + 1 - i]):
                    coeffs[i + j] += ai * bj
        return Series._new(coeffs, order)

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
            b.append(-inverse * sum(a[k] * b[n - k] for k in range(1, min(n, len(a) - 1) + 1)))
        return Series._new(b, self.order)

    def __truediv__(self, other: Any) -> Series:
        other = self._coerce(other)
        return NotImplemented if other is None else self * other.reciprocal()

    def __rtruediv__(self, other: Any) -> Series:
        other = self._coerce(other)
        return NotImplemented if other is None else other * self.reciprocal()

    def __pow__(self, n: int) -> Series:
        if not isinstance(n, numbers.Integral) or n < 0:
            raise TypeError(f"Series ** {n!r}: only integer exponents >= 0 are polynomial")
        result, base = Series._new([Fraction(1)], self.order), self
        for bit in bin(int(n))[:1:-1]:
            if bit == "1":
                result = result * base
            base = base * base
        return result

    def __abs__(self) -> Series:
        return -self if self.sign() < 0 else self

    # ----- order -----

    def _compare(self, other: Any) -> int:
        other = self._coerce(other)
        return NotImplemented if other is None else (self - other).sign()

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
