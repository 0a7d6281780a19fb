"""Elementwise functions numpy users reach for beyond the smooth basics: logaddexp,
logaddexp2, hypot, arctan2, arccosh, sinc, fmax/fmin, fabs, degree conversions, nan_to_num,
and real/imag/conjugate/real_if_close/iscomplex/isreal of real arrays.

Where a function is one the library already has on real, non-NaN input it reuses that rule
(fmax is maximum, fabs is abs, hypot is the 2-norm of the pair, conjugate is the identity);
the others are primitives with their derivative formula. Their kinks: hypot at (0, 0) is the
norm's (the gradient of the norm at the tangent there); arctan2 jumps by 2 pi across the
negative x axis (handled like every jump, `library/discontinuous.py`) and is refused at
(0, 0); arccosh has an infinite slope at 1 and is refused there.
"""

from __future__ import annotations

import numpy as np

from asd.errors import NonFiniteError, NotLipschitzError, UnsupportedError
from asd.extend import (
    Closure,
    Diagonal,
    FanIn,
    Primitive,
    deflinear,
    defsmooth,
    identity,
    is_host,
    is_traced,
    namespace,
    numpy_dtype,
    ray_compare,
    read_value,
    record_jump,
    refuse_where,
    register_method,
    register_numpy,
    to_host,
)

from .norms import pnorm_p, pnorm_rule
from .piecewise import _only, _operands, absolute, maximum, minimum
from .smooth import _unary, multiply, stack


def _no_options(name: str, kwargs: dict) -> None:
    extra = [k for k, v in kwargs.items() if k != "out" or v is not None]
    if extra:
        raise UnsupportedError(f"numpy.{name} with {', '.join(extra)} on traced arrays")


def _pair_rule(name: str, impl, partials):
    """The rule of a smooth binary ufunc from ``partials(a, b, ans) -> (d/da, d/db)``."""

    def rule(xs, dxs):
        a, b = xs
        ans = impl(a, b)
        out = np.shape(ans)
        da, db = partials(np.asarray(a), np.asarray(b), ans)
        return ans, FanIn(Diagonal(np.broadcast_to(da, out), np.shape(a), out),
                          Diagonal(np.broadcast_to(db, out), np.shape(b), out))

    rule.__name__ = f"{name}_rule"
    return rule


# ----- log-sum-exp of two, smooth: the weights are the two-entry softmax -----

logaddexp_p = Primitive("logaddexp", np.logaddexp)
logaddexp_p.defrule(_pair_rule("logaddexp", np.logaddexp,
                               lambda a, b, ans: (np.exp(a - ans), np.exp(b - ans))))
logaddexp2_p = Primitive("logaddexp2", np.logaddexp2)
logaddexp2_p.defrule(_pair_rule("logaddexp2", np.logaddexp2,
                                lambda a, b, ans: (np.exp2(a - ans), np.exp2(b - ans))))


def logaddexp(a, b, **kwargs):
    """``log(exp(a) + exp(b))`` without overflow.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.logaddexp(x[0], x[1]))(np.zeros(2))
    array([0.5, 0.5])
    """
    _no_options("logaddexp", kwargs)
    return logaddexp_p(a, b)


def logaddexp2(a, b, **kwargs):
    """``log2(2**a + 2**b)`` without overflow."""
    _no_options("logaddexp2", kwargs)
    return logaddexp2_p(a, b)


# ----- hypot: the 2-norm of the pair -----

def _hypot_pair_impl(pair):
    """numpy's own ``hypot`` of the pair's two halves (last axis): its value and dtype, bit
    for bit (the 2-norm's ``sqrt(a*a + b*b)`` rounds differently, and float32 stays float32)."""
    if is_host(pair):
        pair = np.asarray(pair)
        return np.hypot(pair[..., 0], pair[..., 1])
    xp = namespace(pair)
    fn = getattr(xp, "hypot", None)
    if fn is None:
        return pnorm_p.impl(pair, p=2.0, axis=(pair.ndim - 1,), keepdims=False)
    return fn(pair[..., 0], pair[..., 1])


hypot_pair_p = Primitive("hypot", _hypot_pair_impl, array_api=True)


@hypot_pair_p.defrule
def hypot_pair_rule(xs, dxs):
    """The 2-norm's rule over the pair's last axis (its branch at (0, 0) is the gradient at
    the tangent, or at the exact series' leading term: `pnorm_rule`), with numpy's value."""
    (pair,) = xs
    _, lin = pnorm_rule(xs, dxs, p=2.0, axis=(len(pair.shape) - 1,), keepdims=False)
    return _hypot_pair_impl(pair), lin


def _hypot_dtype(a, b) -> np.dtype:
    """The dtype numpy's hypot gives these operands: Python numbers are weak (a float32
    array with 2.0 stays float32), arrays and numpy scalars count by their dtype."""
    def probe(x):
        if isinstance(x, (bool, int, float)):
            return x
        return np.zeros((), numpy_dtype(x) if is_traced(x) else np.result_type(x))

    return np.hypot(probe(a), probe(b)).dtype


def hypot(a, b, **kwargs):
    """``sqrt(a**2 + b**2)``, the 2-norm of each pair, with numpy's value and dtype: at
    (0, 0) the gradient of the norm at the tangent, as `asd.pnorm` gives it (Lipschitz, so
    nothing is refused).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.hypot(x[0], x[1]), direction=np.array([3.0, -4.0]))(
    ...     np.zeros(2))
    array([ 0.6, -0.8])
    """
    _no_options("hypot", kwargs)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    zeros = np.zeros(shape, _hypot_dtype(a, b))
    return hypot_pair_p(stack([a + zeros, b + zeros], axis=-1))


# ----- arctan2: smooth off the origin, a 2 pi jump across the negative x axis -----

def _arctan2_partials(y, x):
    r2 = x * x + y * y
    return x / r2, -y / r2


def _arctan2_impl(y, x):
    if is_host(y) and is_host(x):
        return np.arctan2(y, x)
    xp, (y, x) = _operands(y, x)
    return xp.atan2(y, x)


arctan2_p = Primitive("arctan2", _arctan2_impl, array_api=True, jumps=True)


@arctan2_p.defrule
def arctan2_rule(xs, dxs):
    """Smooth off the origin (refused there: `refuse_where`); across the negative x axis
    the angle jumps by 2 pi, to the side the ray enters (`ray_compare` of ``y`` with 0),
    the jump reported like every jump (`record_jump`)."""
    xp, (y, x) = _operands(*xs)
    if xp is np:
        y, x = np.asarray(y), np.asarray(x)
    ans = xp.asarray(_arctan2_impl(y, x))
    out = tuple(ans.shape)
    yb, xb = xp.broadcast_to(y, out), xp.broadcast_to(x, out)
    origin = (yb == 0) & (xb == 0)
    refuse_where(origin, lambda: NotLipschitzError(
        f"arctan2(y, x) at y = x = 0 ({int(np.count_nonzero(to_host(origin)))} entries): the "
        "angle takes every value near the origin, so it is not continuous there. Keep (y, x) "
        "away from the origin, or use asd.numpy.hypot for the radius."))
    dy, dx = _arctan2_partials(yb, xb)
    lin = FanIn(Diagonal(dy, tuple(y.shape), out), Diagonal(dx, tuple(x.shape), out))
    cut = (yb == 0) & (xb < 0)
    pi = xp.full_like(ans, np.pi)
    side = ray_compare(y, dxs[0], _only(cut, xp.zeros_like(ans)), None)
    record_jump(ans, cut, (-pi, pi))
    return xp.where(cut & (side > 0), pi, xp.where(cut & (side < 0), -pi, ans)), lin


def arctan2(y, x, **kwargs):
    """The angle of ``(x, y)``; its jump of 2 pi across the negative x axis is treated like
    `asd.floor`'s (refused where it reaches the output), and (0, 0) is refused.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda p: np.arctan2(p[0], p[1]))(np.array([1.0, 1.0]))
    array([ 0.5, -0.5])
    """
    _no_options("arctan2", kwargs)
    return arctan2_p(y, x)


# ----- arccosh, sinc: smooth on their domains -----

def _arccosh_slope(x, ans):
    """``1 / sqrt(x**2 - 1)``; at ``x = 1`` infinite, so a differentiated input there is
    refused (`refuse_where`: eagerly raised, counted undecided by a staged sweep)."""
    one = x == 1
    refuse_where(one, lambda: NotLipschitzError(
        f"arccosh is not Lipschitz at x = 1 (infinite slope) and "
        f"{int(np.count_nonzero(to_host(one)))} input entries are equal to 1. Keep the "
        "argument above 1, e.g. arccosh(1 + eps + relu(x - 1))."))
    return 1.0 / namespace(x).sqrt(x * x - 1.0)


arccosh_p = defsmooth("arccosh", _unary(np.arccosh, "acosh"), _arccosh_slope, array_api=True)


def arccosh(x, **kwargs):
    """``log(x + sqrt(x**2 - 1))`` for ``x >= 1``; at 1 its slope is infinite (refused where
    the input is differentiated).

    >>> import asd
    >>> float(asd.subgrad(asd.numpy.arccosh)(2.0)) == 1 / 3 ** 0.5
    True
    """
    _no_options("arccosh", kwargs)
    return arccosh_p(x)


def _sinc_slope(x, ans):
    """``(cos(pi x) - sinc(x)) / x``, by its series near 0 where that cancels."""
    small = np.abs(x) < 1e-3
    safe = np.where(small, 1.0, x)
    pi2 = np.pi ** 2
    series = x * (-pi2 / 3 + pi2 * pi2 * x * x / 30) + 0.0  # + 0.0: the slope at 0 is +0
    return np.where(small, series, (np.cos(np.pi * safe) - np.sinc(safe)) / safe)


sinc_p = defsmooth("sinc", np.sinc, _sinc_slope)


def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0 (numpy's normalized sinc); smooth everywhere.

    >>> import asd
    >>> float(asd.subgrad(asd.sinc)(0.0))
    0.0
    """
    return sinc_p(x)


# ----- the ones the library has: fmax/fmin, fabs, degrees, nan_to_num -----

def _finite(name: str, *xs) -> None:
    for x in xs:
        if is_traced(x) and not read_value(x, lambda v: bool(np.all(np.isfinite(to_host(v))))):
            raise NonFiniteError(
                f"{name} of {x!r}, which holds NaN or infinite entries: asd differentiates "
                f"finite values, where {name} is the same as its finite-input counterpart. "
                "Keep the values finite before this call.")


def fmax(a, b, **kwargs):
    """``maximum`` of finite traced values; a NaN in a constant operand is ignored, as fmax
    does (the traced value there: ``maximum`` with -inf)."""
    _no_options("fmax", kwargs)
    _finite("fmax", a, b)
    return maximum(*_nan_as(a, b, -np.inf))


def fmin(a, b, **kwargs):
    """``minimum`` of finite traced values; a NaN in a constant operand is ignored."""
    _no_options("fmin", kwargs)
    _finite("fmin", a, b)
    return minimum(*_nan_as(a, b, np.inf))


def _nan_as(a, b, fill) -> tuple:
    """``(a, b)`` with a constant operand's NaN entries replaced by ``fill`` (its dtype
    kept), which the other, traced, operand always beats."""
    def filled(c):
        if isinstance(c, float):  # a Python float stays weakly typed
            return fill if c != c else c
        if is_traced(c) or not is_host(c):
            return c
        arr = np.asarray(c)
        if arr.dtype.kind != "f":
            return c
        out = np.where(np.isnan(arr), arr.dtype.type(fill), arr)
        return out if np.ndim(c) else out[()]
    return filled(a), filled(b)


def fabs(x, **kwargs):
    """``abs``; at 0 the sign of the tangent decides."""
    _no_options("fabs", kwargs)
    return absolute(x)


def deg2rad(x, **kwargs):
    """``x * (pi / 180)``, the same product numpy computes."""
    _no_options("deg2rad", kwargs)
    return multiply(x, np.pi / 180.0)


def rad2deg(x, **kwargs):
    """``x * (180 / pi)``, the same product numpy computes."""
    _no_options("rad2deg", kwargs)
    return multiply(x, 180.0 / np.pi)


def _nan_to_num_impl(x, nan=0.0, posinf=None, neginf=None):
    return np.nan_to_num(x, copy=True, nan=nan, posinf=posinf, neginf=neginf)


nan_to_num_p = Primitive("nan_to_num", _nan_to_num_impl)


@nan_to_num_p.defrule
def nan_to_num_rule(xs, dxs, nan, posinf, neginf):
    """Finite entries pass through (slope 1); non-finite ones become the constants ``nan``,
    ``posinf``, ``neginf`` (slope 0: an entry that is NaN or infinite at the point is so
    near it too, an overflow or a constant operand such as ``x + inf``). The map selects
    with ``where``, so an infinite tangent there (``log`` at 0) does not become ``0 * inf``."""
    (x,) = xs
    x = np.asarray(x)
    keep = np.isfinite(x)

    def select(t):
        return np.where(keep, t, np.zeros((), np.result_type(t)))

    return _nan_to_num_impl(x, nan, posinf, neginf), Closure(select, select, x.shape, x.shape)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``numpy.nan_to_num``: the finite entries with slope 1, the non-finite ones replaced
    by constants (slope 0).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.sum(np.nan_to_num(x + np.array([0.0, np.inf]))))(np.ones(2))
    array([1., 0.])
    """
    if not is_traced(x):
        return np.nan_to_num(x, copy=copy, nan=nan, posinf=posinf, neginf=neginf)
    if is_traced(nan) or is_traced(posinf) or is_traced(neginf):
        raise UnsupportedError("numpy.nan_to_num with a traced nan=, posinf= or neginf=: they "
                               "replace non-finite entries; pass constants")
    return nan_to_num_p(x, nan=nan, posinf=posinf, neginf=neginf)


# ----- real input: real, imag, conjugate -----

conjugate_p = deflinear("conjugate", lambda x: np.array(x, copy=True),  # x is real
                        lambda i, o: identity(i))


def conjugate(x, **kwargs):
    """The complex conjugate; on the real arrays asd differentiates, the identity."""
    _no_options("conjugate", kwargs)
    return conjugate_p(x)


def real(x):
    """The real part: ``x`` itself for real input. A complex traced value (a complex
    constant times ``x``) is refused as its ``.real`` is, naming the user's line."""
    if is_traced(x) and np.dtype(x.dtype).kind == "c":
        return x.real
    return conjugate_p(x) if is_traced(x) else np.real(x)


def imag(x):
    """The imaginary part: zeros (a constant) for real input. A complex traced value is
    refused as its ``.imag`` is: zeros of its dtype would drop it from the program (a
    later write of a traced value into them was then refused as a plain-array store)."""
    if is_traced(x) and np.dtype(x.dtype).kind == "c":
        return x.imag
    return np.zeros(np.shape(x), np.result_type(x)) if is_traced(x) else np.imag(x)


def real_if_close(a, tol=100):
    """``a`` itself: a real array is returned unchanged, as numpy does."""
    return a if is_traced(a) else np.real_if_close(a, tol=tol)


def iscomplex(x):
    """False everywhere (a constant): asd's traced arrays are real."""
    return np.zeros(np.shape(x), bool) if is_traced(x) else np.iscomplex(x)


def isreal(x):
    """True everywhere (a constant): asd's traced arrays are real."""
    return np.ones(np.shape(x), bool) if is_traced(x) else np.isreal(x)


def isrealobj(x):
    """True: asd's traced arrays are real."""
    return True if is_traced(x) else np.isrealobj(x)


def iscomplexobj(x):
    """False: asd's traced arrays are real."""
    return False if is_traced(x) else np.iscomplexobj(x)


# ----- numpy dispatch -----

for _np_fn, _fn in [
    (np.logaddexp, logaddexp), (np.logaddexp2, logaddexp2), (np.hypot, hypot),
    (np.arctan2, arctan2), (np.arccosh, arccosh), (np.sinc, sinc), (np.fmax, fmax),
    (np.fmin, fmin), (np.fabs, fabs), (np.deg2rad, deg2rad), (np.radians, deg2rad),
    (np.rad2deg, rad2deg), (np.degrees, rad2deg), (np.nan_to_num, nan_to_num),
    (np.conjugate, conjugate), (np.real, real), (np.imag, imag),
    (np.real_if_close, real_if_close), (np.iscomplex, iscomplex), (np.isreal, isreal),
    (np.isrealobj, isrealobj), (np.iscomplexobj, iscomplexobj),
]:
    register_numpy(_np_fn, _fn)
register_method("conjugate", lambda x: conjugate_p(x))

conj = conjugate
degrees, radians = rad2deg, deg2rad

__all__ = ["arccosh", "arctan2", "conj", "conjugate", "deg2rad", "degrees", "fabs", "fmax",
           "fmin", "hypot", "imag", "iscomplex", "iscomplexobj", "isreal", "isrealobj", "logaddexp",
           "logaddexp2", "nan_to_num", "rad2deg", "radians", "real", "real_if_close", "sinc"]
