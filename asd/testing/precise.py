"""High-precision reals that plain numpy code runs on: the oracle for transcendental rules.

numpy's object-dtype loops call an element's operators for arithmetic and comparisons, and a
method of the ufunc's name for the others (``np.exp(a)`` calls ``a.exp()``). `Precise` wraps an
``mpmath.mpf`` and provides those methods, so an unchanged numpy reference such as
``lambda x: np.log1p(np.exp(x))`` evaluates at 80 significant digits on an object array of them.
That is what lets `asd.testing.check_rule` take one-sided difference quotients with a step of
1e-30 without rounding swamping the slope.

>>> import numpy as np
>>> with mpmath.workdps(40):
...     y = np.exp(precise_array(np.array([0.0, 1.0])))
>>> float(y[1].v) == float(np.exp(1.0))
True
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np

__all__ = ["DPS", "Precise", "precise_array", "to_mpf"]

DPS = 80
"""Decimal digits the checker works at: room for steps of 1e-45 with 30 digits to spare."""


def to_mpf(a: Any) -> mpmath.mpf:
    """``a`` (a Precise, an int, a float, a numpy scalar or an mpf) as an exact mpf."""
    if isinstance(a, Precise):
        return a.v
    if isinstance(a, mpmath.mpf):
        return a
    if isinstance(a, numbers.Integral):
        return mpmath.mpf(int(a))
    if isinstance(a, numbers.Real):
        return mpmath.mpf(float(a))  # binary floats convert exactly
    raise TypeError(f"expected a real number, got {type(a).__name__}: {a!r}")


def _real(value: Any, what: str) -> Precise:
    """Wrap an mpmath result, refusing complex values (a point outside the real domain)."""
    if isinstance(value, mpmath.mpc):
        if value.imag != 0:
            raise ValueError(f"{what} left the real domain (mpmath gave {value})")
        value = value.real
    if not mpmath.isfinite(value):
        raise ValueError(f"{what} is not finite ({value})")
    return Precise(value)


def _unary(name: str, fn: Callable[[mpmath.mpf], Any]) -> Callable[[Precise], Precise]:
    def method(self: Precise) -> Precise:
        return _real(fn(self.v), f"{name}({mpmath.nstr(self.v, 8)})")

    method.__name__ = name
    return method


def _binary(name: str, fn: Callable[[Any, Any], Any], reflected: bool = False):
    def method(self: Precise, other: Any) -> Any:
        try:
            o = to_mpf(other)
        except TypeError:
            return NotImplemented
        a, b = (o, self.v) if reflected else (self.v, o)
        return _real(fn(a, b), f"{name}({mpmath.nstr(a, 8)}, {mpmath.nstr(b, 8)})")

    method.__name__ = name
    return method


def _compare(test: Callable[[Any, Any], bool]):
    def method(self: Precise, other: Any) -> Any:
        try:
            return test(self.v, to_mpf(other))
        except TypeError:
            return NotImplemented

    return method


class Precise:
    """A real number carried at mpmath's working precision (see the module docstring)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = to_mpf(v)

    __add__ = _binary("add", lambda a, b: a + b)
    __radd__ = _binary("add", lambda a, b: a + b, reflected=True)
    __sub__ = _binary("subtract", lambda a, b: a - b)
    __rsub__ = _binary("subtract", lambda a, b: a - b, reflected=True)
    __mul__ = _binary("multiply", lambda a, b: a * b)
    __rmul__ = _binary("multiply", lambda a, b: a * b, reflected=True)
    __truediv__ = _binary("divide", lambda a, b: a / b)
    __rtruediv__ = _binary("divide", lambda a, b: a / b, reflected=True)
    __pow__ = _binary("power", mpmath.power)
    __rpow__ = _binary("power", mpmath.power, reflected=True)
    __lt__ = _compare(lambda a, b: a < b)
    __le__ = _compare(lambda a, b: a <= b)
    __gt__ = _compare(lambda a, b: a > b)
    __ge__ = _compare(lambda a, b: a >= b)
    __eq__ = _compare(lambda a, b: a == b)
    __ne__ = _compare(lambda a, b: a != b)
    __hash__ = None

    def __neg__(self) -> Precise:
        return Precise(-self.v)

    def __pos__(self) -> Precise:
        return self

    def __abs__(self) -> Precise:
        return Precise(abs(self.v))

    def __float__(self) -> float:
        return float(self.v)

    def __bool__(self) -> bool:
        return bool(self.v)

    def __repr__(self) -> str:
        return f"Precise({mpmath.nstr(self.v, 20)})"

    # The methods numpy's object loops call for these ufuncs.
    exp = _unary("exp", mpmath.exp)
    exp2 = _unary("exp2", lambda a: mpmath.power(2, a))
    expm1 = _unary("expm1", mpmath.expm1)
    log = _unary("log", mpmath.log)
    log2 = _unary("log2", lambda a: mpmath.log(a, 2))
    log10 = _unary("log10", mpmath.log10)
    log1p = _unary("log1p", mpmath.log1p)
    sqrt = _unary("sqrt", mpmath.sqrt)
    cbrt = _unary("cbrt", lambda a: mpmath.sign(a) * mpmath.cbrt(abs(a)))  # the real root
    sin = _unary("sin", mpmath.sin)
    cos = _unary("cos", mpmath.cos)
    tan = _unary("tan", mpmath.tan)
    arcsin = _unary("arcsin", mpmath.asin)
    arccos = _unary("arccos", mpmath.acos)
    arctan = _unary("arctan", mpmath.atan)
    sinh = _unary("sinh", mpmath.sinh)
    cosh = _unary("cosh", mpmath.cosh)
    tanh = _unary("tanh", mpmath.tanh)
    arcsinh = _unary("arcsinh", mpmath.asinh)
    arccosh = _unary("arccosh", mpmath.acosh)
    arctanh = _unary("arctanh", mpmath.atanh)


def precise_array(a: Any) -> np.ndarray:
    """An object array of `Precise` holding the entries of ``a`` exactly."""
    a = np.asarray(a)
    flat = np.empty(a.size, dtype=object)
    flat[:] = [Precise(e) for e in a.flat]
    return flat.reshape(a.shape)
