"""Exact one-sided derivatives of piecewise-polynomial numpy programs: the oracle of asd's tests.

Along the ray ``x + delta * v``, ``delta -> 0+``, every branch of a piecewise-polynomial program
is eventually fixed, so the program is a polynomial in ``delta`` there. Evaluating it on truncated
power series in ``delta`` with exact rational coefficients (`Series`) therefore decides every
branch the way the ray does: by the sign of the leading nonzero coefficient ("lexicographic"
evaluation). From the value series, ``f(x)`` is the delta**0 coefficient and ``f'(x; v)`` the
delta**1 coefficient. Carrying a forward-mode gradient alongside (`Jet`) gives
``lim grad f(x + delta * v)`` as the delta**0 coefficients of the gradient series.

Programs run unchanged on numpy object arrays of `Series` or `Jet`: numpy's object loops call the
elements' operators (``np.maximum`` uses ``>=``, ``np.minimum`` ``<=``, ``np.abs`` ``abs``, ``@``
and ``np.dot`` ``*`` and ``+``, ``x ** 2`` ``__pow__`` with a Python int).

Example:
    >>> import numpy as np
    >>> relu = lambda x: np.maximum(x, 0.0)
    >>> value, grad = limiting_gradient(lambda x: relu(x) - relu(-x), 0.0, -1.0)
    >>> value, grad[()]
    (Fraction(0, 1), Fraction(1, 1))
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import numpy as np

from asd.core.series import (
    _NOT_POLYNOMIAL,
    DEFAULT_ORDER,
    Series,
    _comparison,
    _not_polynomial,
    object_array,
    to_fraction,
)

__all__ = [
    "DEFAULT_ORDER",
    "DegenerateTie",
    "Jet",
    "Series",
    "as_fractions",
    "directional_derivative",
    "jet_ray",
    "limiting_gradient",
    "limiting_jacobian",
    "series_ray",
    "solve_fractions",
    "to_fraction",
]

class DegenerateTie(ArithmeticError):
    """A branch the ray cannot decide, so the limiting gradient is not determined by ``v``.

    Raised by `Jet` comparisons and ``abs`` when the compared quantity ``h`` vanishes identically
    along the ray (to the truncation order) while its gradient at ``x`` does not: the ray then runs
    along the kink, and the two branches give different limiting gradients. With ``tie_order``,
    also when ``h`` shows only beyond that order. Callers skip such cases.
    """


def solve_fractions(M: list[list[Fraction]], r: list[Fraction]) -> list[Fraction] | None:
    """``M⁻¹ r`` exactly (Gaussian elimination in Fractions), None where ``M`` is singular:
    the linear algebra of independent oracles (KKT systems of an active set)."""
    n = len(M)
    a = [list(row) + [v] for row, v in zip(M, r, strict=True)]
    for col in range(n):
        piv = next((i for i in range(col, n) if a[i][col] != 0), None)
        if piv is None:
            return None
        a[col], a[piv] = a[piv], a[col]
        for i in range(n):
            if i != col and a[i][col] != 0:
                f = a[i][col] / a[col][col]
                a[i] = [u - f * w for u, w in zip(a[i], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def as_fractions(a: Any) -> np.ndarray:
    """``a`` (a number, nested list or array) as an object array of exact Fractions."""
    a = np.asarray(a)
    return object_array([to_fraction(e) for e in a.flat], a.shape)


class Jet:
    """Forward-mode dual number over `Series`: a value and its gradient w.r.t. every input.

    Both are series along the ray; comparisons and ``abs`` look at the value only and decide by
    its sign for small ``delta``. Where the compared quantity ``h`` is undecided (zero to the
    truncation order, or beyond ``tie_order`` when given), the branch is harmless if the gradient
    of ``h`` at ``x`` (its delta**0 coefficients) vanishes -- the branches of max, abs and of the
    continuous ``where`` forms then have the same limiting gradient -- and a `DegenerateTie`
    otherwise. After a harmless tie only the delta**0 gradient coefficients are meaningful, which
    is all the oracle reads.

    ``tie_order=1`` mimics first-order rules such as the paper's (decide by ``h``, then by its
    derivative along ``v``): ties that only a higher order breaks, where the branch matters, are
    reported as `DegenerateTie` too, since such rules may pick the other branch there.
    """

    __slots__ = ("grad", "tie_order", "value")

    value: Series
    grad: tuple[Series, ...]
    tie_order: int | None

    def __init__(self, value: Series, grad: Iterable[Series], tie_order: int | None = None) -> None:
        self.value = value
        self.grad = tuple(grad)
        self.tie_order = tie_order

    def _coerce(self, other: Any) -> Jet | None:
        if isinstance(other, Jet):
            return other
        constant = self.value._coerce(other)
        if constant is None:
            return None
        return Jet(constant, (Series._new([], constant.order),) * len(self.grad), self.tie_order)

    def _with(self, value: Series, grad: Iterable[Series]) -> Jet:
        return Jet(value, grad, self.tie_order)

    # ----- arithmetic -----

    def __add__(self, other: Any) -> Jet:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        return self._with(self.value + other.value, map(operator.add, self.grad, other.grad))

    __radd__ = __add__

    def __neg__(self) -> Jet:
        return self._with(-self.value, map(operator.neg, self.grad))

    def __pos__(self) -> Jet:
        return self

    def __sub__(self, other: Any) -> Jet:
        other = self._coerce(other)
        return NotImplemented if other is None else self + -other

    def __rsub__(self, other: Any) -> Jet:
        other = self._coerce(other)
        return NotImplemented if other is None else other + -self

    def __mul__(self, other: Any) -> Jet:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        a, b = self.value, other.value
        return self._with(a * b, (ga * b + a * gb for ga, gb in zip(self.grad, other.grad)))

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Jet:
        other = self._coerce(other)
        if other is None:
            return NotImplemented
        inverse = other.value.reciprocal()
        quotient = self.value * inverse
        grad = ((ga - quotient * gb) * inverse for ga, gb in zip(self.grad, other.grad))
        return self._with(quotient, grad)

    def __rtruediv__(self, other: Any) -> Jet:
        other = self._coerce(other)
        return NotImplemented if other is None else other / self

    def __pow__(self, n: int) -> Jet:
        value = self.value**n  # validates n
        if n == 0:
            return self._with(value, (g * 0 for g in self.grad))
        slope = n * self.value ** (n - 1)
        return self._with(value, (slope * g for g in self.grad))

    def __abs__(self) -> Jet:
        return -self if self._branch_sign() < 0 else self

    # ----- order -----

    def _branch_sign(self) -> int:
        """The sign of the value along the ray, raising `DegenerateTie` where the branch matters."""
        k = self.value.valuation()
        undecided = k is None or (self.tie_order is not None and k > self.tie_order)
        if undecided and any(g.coefficient(0) for g in self.grad):
            gradient = ", ".join(str(g.coefficient(0)) for g in self.grad)
            where = "vanishes along the ray" if k is None else f"shows only at delta^{k}"
            raise DegenerateTie(
                f"a compared quantity {where} but its gradient at x, [{gradient}], does not:"
                " the branch (and the limiting gradient) is not determined by the direction;"
                " skip this case or choose another direction"
            )
        return self.value.sign()

    def _compare(self, other: Any) -> int:
        other = self._coerce(other)
        return NotImplemented if other is None else (self - other)._branch_sign()

    __lt__ = _comparison(operator.lt)
    __le__ = _comparison(operator.le)
    __gt__ = _comparison(operator.gt)
    __ge__ = _comparison(operator.ge)
    __hash__ = None

    def __eq__(self, other: Any) -> Any:
        """Equality of values along the ray (not a branch decision, so never degenerate)."""
        other = self._coerce(other)
        return NotImplemented if other is None else self.value == other.value

    def __ne__(self, other: Any) -> Any:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_POLYNOMIAL:
            return _not_polynomial("Jet", name)
        raise AttributeError(f"'Jet' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"Jet({self.value!r}, grad={list(self.grad)!r})"


# ----- the ray x + delta * v -----


def _ray(x: Any, v: Any) -> tuple[np.ndarray, np.ndarray]:
    x, v = as_fractions(x), as_fractions(v)
    if x.shape != v.shape:
        raise ValueError(f"x and v must have the same shape, got {x.shape} and {v.shape}")
    return x, v


def series_ray(x: Any, v: Any, order: int = DEFAULT_ORDER) -> np.ndarray:
    """The object array of `Series` ``x + delta * v``: feed it to ``f`` for ``f(x + delta * v)``."""
    x, v = _ray(x, v)
    return object_array([Series((a, b), order) for a, b in zip(x.flat, v.flat)], x.shape)


def jet_ray(x: Any, v: Any, order: int = DEFAULT_ORDER, tie_order: int | None = None,
            w: Any = None, power: int = 12) -> np.ndarray:
    """The object array of `Jet` ``x + delta * v`` seeded with the identity gradient.

    With ``w``, the curve ``x + delta * v + delta**power * w``: for programs whose tied
    quantities have degree below ``power`` along ``v``, every term of the ray's own series
    outweighs every term with ``w``, so the limit along the curve is the lexicographic limit
    along ``[v, w]`` that decides ties persisting along ``v`` (asd's tie contract).
    """
    x, v = _ray(x, v)
    w = np.zeros(x.shape, dtype=object) if w is None else _ray(x, w)[1]
    if w.any() and power > order:
        raise ValueError(f"power {power} must not exceed the truncation order {order}")
    zero, one = Series((), order), Series((1,), order)
    jets = [
        Jet(Series((a, b, *[0] * (power - 2), c) if c else (a, b), order),
            [one if j == i else zero for j in range(x.size)], tie_order)
        for i, (a, b, c) in enumerate(zip(x.flat, v.flat, w.flat))
    ]
    return object_array(jets, x.shape)


def _value(element: Any, order: int) -> Series:
    """One output element's value series (f may return Jets, Series or plain numbers)."""
    if isinstance(element, Jet):
        return element.value
    if isinstance(element, Series):
        return element
    return Series(element, order)


def _gradient(element: Any, size: int) -> list[Fraction]:
    """The delta**0 coefficients of an output element's gradient (zero for constants)."""
    if isinstance(element, Jet):
        return [g.coefficient(0) for g in element.grad]
    return [Fraction(0)] * size


def limiting_gradient(
    f: Callable[[np.ndarray], Any],
    x: Any,
    v: Any,
    order: int = DEFAULT_ORDER,
    *,
    tie_order: int | None = None,
    w: Any = None,
) -> tuple[Fraction, np.ndarray]:
    """``(f(x), lim grad f(x + delta * v))`` as delta -> 0+, exactly, for scalar ``f``.

    ``f`` receives an object array of `Jet` shaped like ``x`` and must return a scalar (a number,
    `Jet` or 0-d array). The gradient is an object array of Fractions shaped like ``x``. Raises
    `DegenerateTie` where ``v`` does not determine the limit (see `Jet` for ``tie_order``);
    with ``w`` the limit is the lexicographic one along ``[v, w]`` (see `jet_ray`).
    """
    xs = jet_ray(x, v, order, tie_order, w)
    out = np.asarray(f(xs), dtype=object)
    if out.shape != ():
        raise ValueError(f"f must return a scalar, got shape {out.shape}; use limiting_jacobian")
    element = out[()]
    gradient = object_array(_gradient(element, xs.size), xs.shape)
    return _value(element, order).coefficient(0), gradient


def limiting_jacobian(
    f: Callable[[np.ndarray], Any],
    x: Any,
    v: Any,
    order: int = DEFAULT_ORDER,
    *,
    tie_order: int | None = None,
    w: Any = None,
) -> np.ndarray:
    """``lim J f(x + delta * v)`` for array-valued ``f``: Fractions, ``out.shape + x.shape``
    (lexicographic along ``[v, w]`` with ``w``, see `jet_ray`)."""
    xs = jet_ray(x, v, order, tie_order, w)
    out = np.asarray(f(xs), dtype=object)
    rows = [_gradient(element, xs.size) for element in out.flat]
    return object_array([g for row in rows for g in row], out.shape + xs.shape)


def directional_derivative(
    f: Callable[[np.ndarray], Any], x: Any, v: Any, order: int = DEFAULT_ORDER
) -> Fraction | np.ndarray:
    """The one-sided derivative ``f'(x; v)``: the delta**1 coefficient of ``f(x + delta * v)``.

    Any output shape: a Fraction for scalar ``f``, else an object array of Fractions. Needs no
    gradients, so it is exact even at ties the direction cannot break (``f`` is continuous).
    """
    out = np.asarray(f(series_ray(x, v, order)), dtype=object)
    slopes = object_array([_value(e, order).coefficient(1) for e in out.flat], out.shape)
    return slopes[()] if slopes.ndim == 0 else slopes
