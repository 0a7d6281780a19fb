"""Discontinuous primitives: sign, floor, ceil, round, rint, trunc, heaviside, angle (of real
arrays), floor_divide and remainder (``//``, ``%``), any/all, and the rules of the
comparisons.

Each is piecewise constant (remainder: slope 1) away from its jumps, so there it contributes
a zero derivative and nothing is refused: ``np.sum(x < y) + 0.0`` at a generic point is
fine. At a jump (``x == 0`` for sign, ``x`` an integer for floor, ...) the rule returns the
value on the side the ray ``x + δv`` enters (decided by `ray_compare`, like every tie) and
reports the jump with `record_jump`: the engine then refuses a differentiated output the jump
reaches with `NotLipschitzError`, unless re-evaluating the output with the jump's value at
the point and with every one-sided limit gives the same number (``x * sign(x)`` at 0 is
``|x|``), as ``where`` checks that its two sides agree where its condition is tied. Where the
ray stays on the jump (its input equals the jump's location all along it, so a further
direction chose the side: ``x > flip(x)`` at 0 along (1, 1)), the output's tangent along the
ray must be the same with the jump at its value at the point and on every side, too.
``asd.stop_gradient`` cuts the jump off.
"""

from __future__ import annotations

import numpy as np

from asd.errors import UnsupportedError
from asd.extend import (
    Diagonal,
    FanIn,
    Primitive,
    from_host,
    is_host,
    is_traced,
    namespace,
    numpy_dtype,
    ray_compare,
    record_jump,
    register_method,
    register_numpy,
)

from .order import argmax, argmin
from .piecewise import COMPARE, COMPARISONS, OPERATORS, _only, _operands, comparison_prims

# ----- the shared rule: value on the entered side, the jump reported -----
# Every rule here is written against the array API (``xp = namespace(x)``; numpy values keep
# numpy's own calls, so their results are numpy's bit for bit) and states its jump as masks:
# the side each entry on a jump takes comes from `ray_compare`, the jump goes to
# `record_jump` (recorded eagerly where an entry is on it, counted by a staged sweep where it
# reaches a differentiated output), so no rule branches on a value and all of them run inside
# ``jax.jit``.

def _unary(np_fn, xp_name: str):
    """numpy's function on numpy values, the array API's ``xp_name`` on other libraries'."""
    def fn(x):
        return np_fn(x) if is_host(x) else getattr(namespace(x), xp_name)(x)

    fn.__name__ = np_fn.__name__
    return fn


def _binary(np_fn, xp_name: str):
    def fn(x, c):
        if is_host(x) and is_host(c):
            return np_fn(x, c)
        xp, (x, c) = _operands(x, c)
        return getattr(xp, xp_name)(x, c)

    fn.__name__ = np_fn.__name__
    return fn


def _param(c, like):
    """A constant parameter (a divisor) beside ``like``: as it is for numpy, else a Python
    number or an array of ``like``'s library and dtype."""
    if is_host(like) or np.ndim(c) == 0:
        return c if is_host(like) else float(c)
    return from_host(np.asarray(c), like, "like")


def _on_side(ans, mask, side, left, right):
    """``ans`` with the entries ``mask`` replaced by the limit on the side entered (``side``
    > 0: ``right``, < 0: ``left``, 0: the value at the point), in ``ans``'s dtype."""
    xp = namespace(ans, mask)
    out = xp.where(mask & (side > 0), right, xp.where(mask & (side < 0), left, ans))
    return xp.astype(out, ans.dtype)


def defjump(name: str, impl, jumps, limits, *, discontinuous: bool = True) -> Primitive:
    """An elementwise primitive of one traced input that jumps where ``jumps(x)`` holds.

    ``limits(x, ans) -> (left, right)`` gives the one-sided limits as ``x`` decreases to and
    increases to the point (read only on the jump entries). Piecewise constant unless
    ``discontinuous`` is False, when the slope is 1 (``remainder``). ``impl``, ``jumps`` and
    ``limits`` are written against the array API (numpy's own calls on numpy values).
    """
    prim = Primitive(name, impl, discontinuous=discontinuous, array_api=True, jumps=True)
    prim.jump_at = jumps

    def jump_rule(xs, dxs, **params):
        xp = namespace(xs[0])
        x = np.asarray(xs[0]) if xp is np else xs[0]
        ans = xp.asarray(impl(x, **params))
        out = tuple(ans.shape)  # the parameters (a divisor array) may broadcast x
        mask = xp.broadcast_to(jumps(x, **params), out)
        lin = None if discontinuous else Diagonal(xp.ones_like(ans), tuple(x.shape), out)
        left, right = (xp.broadcast_to(s, out) for s in limits(x, ans, **params))
        # the sign of x - (x at the jump) along the ray: its tangent, then its exact series
        side, on_ray = ray_compare(x, dxs[0], _only(mask, xp.broadcast_to(x, out)), None,
                                   beyond=True)
        record_jump(ans, mask, (left, right), still=mask & (side == 0), on_ray=on_ray,
                    crossing=(0,), entered=side)
        return _on_side(ans, mask, side, left, right), lin

    jump_rule.__name__ = f"{name}_rule"
    prim.defrule(jump_rule)
    return prim


def _integer(x):
    xp = namespace(x)
    return xp.isfinite(x) & (x == xp.floor(x))


def _half(x):
    xp = namespace(x)
    return xp.isfinite(x) & (x - xp.floor(x) == 0.5)


def _full_like(ans, value):
    return namespace(ans).full_like(ans, value)


_floor, _ceil = _unary(np.floor, "floor"), _unary(np.ceil, "ceil")

sign_p = defjump("sign", _unary(np.sign, "sign"), lambda x: x == 0,
                 lambda x, ans: (_full_like(ans, -1), _full_like(ans, 1)))
floor_p = defjump("floor", _floor, _integer, lambda x, ans: (ans - 1, ans))
ceil_p = defjump("ceil", _ceil, _integer, lambda x, ans: (ans, ans + 1))
trunc_p = defjump("trunc", _unary(np.trunc, "trunc"), lambda x: _integer(x) & (x != 0),
                  lambda x, ans: (ans - 1 * (x > 0), ans + 1 * (x <= 0)))
rint_p = defjump("rint", _unary(np.rint, "round"), _half,
                 lambda x, ans: (_floor(x), _ceil(x)))


def _scaled(x, decimals):
    """``x * 10**decimals`` as numpy's round computes it (a division for decimals < 0)."""
    x = np.asarray(x) if is_host(x) else x
    return x * 10.0 ** decimals if decimals >= 0 else x / 10.0 ** -decimals


def _unscaled(t, decimals):
    return t / 10.0 ** decimals if decimals >= 0 else t * 10.0 ** -decimals


def _round(x, decimals=0):
    """``numpy.round``: numpy's on numpy values; elsewhere the same steps (scale, round half
    to even, scale back), which is how numpy computes it."""
    if is_host(x):
        return np.round(x, decimals)
    xp = namespace(x)
    return xp.round(x) if decimals == 0 else _unscaled(xp.round(_scaled(x, decimals)), decimals)


def _angle(x, deg=False):
    """``numpy.angle`` of a real array: ``arctan2(0, x)`` (pi below 0 and at -0.0)."""
    if is_host(x):
        return np.angle(x, deg)
    xp = namespace(x)
    a = xp.atan2(xp.zeros_like(x), x)
    return a * (180 / np.pi) if deg else a


def _heaviside(x, h0):
    if is_host(x):
        return np.heaviside(x, h0)
    xp = namespace(x)
    return xp.where(x < 0, 0.0, xp.where(x > 0, 1.0, xp.where(x == 0, float(h0), x)))


round_p = defjump(
    "round", _round, lambda x, decimals=0: _half(_scaled(x, decimals)),
    lambda x, ans, decimals=0: (_unscaled(_floor(_scaled(x, decimals)), decimals),
                                _unscaled(_ceil(_scaled(x, decimals)), decimals)))
angle_p = defjump("angle", _angle, lambda x, deg=False: x == 0,
                  lambda x, ans, deg=False: (_full_like(ans, 180.0 if deg else np.pi),
                                             _full_like(ans, 0.0)))
heaviside_p = defjump("heaviside", _heaviside, lambda x, h0: x == 0,
                      lambda x, ans, h0: (_full_like(ans, 0.0), _full_like(ans, 1.0)))


# floor_divide and remainder by a constant c: q = floor(x / c) jumps where c divides x
# (np.remainder is computed exactly, so the test is exact); increasing x moves x / c up for
# c > 0 and down for c < 0. remainder = x - c q has slope 1 and jumps by c there.

_floor_divide = _binary(np.floor_divide, "floor_divide")
_remainder = _binary(np.remainder, "remainder")


def _divides(x, c):
    return namespace(x).isfinite(x) & (_remainder(x, _param(c, x)) == 0)


floor_divide_p = defjump(
    "floor_divide", lambda x, c: _floor_divide(x, _param(c, x)), _divides,
    lambda x, ans, c: (ans - 1 * (_param(c, x) > 0), ans - 1 * (_param(c, x) < 0)))
remainder_p = defjump(
    "remainder", lambda x, c: _remainder(x, _param(c, x)), _divides,
    lambda x, ans, c: (ans + _param(c, x) * (_param(c, x) > 0),
                       ans + _param(c, x) * (_param(c, x) < 0)), discontinuous=False)


# With a traced divisor y (or a constant x over a traced y): q = floor(x / y) jumps where
# y divides x exactly (the remainder is exact); there t = x / y equals the integer q exactly,
# so the side is the sign of t - q along the ray (t is an input of the primitive: its series
# and further directions decide a tie its tangent leaves, as for every comparison). Below
# the jump the quotient is q - 1 and the remainder y; above, q and 0. The remainder's
# slopes are 1 in x and -floor(t) in y on the side entered.

def _divmod_xy_rule(remainder: bool):
    def divmod_xy_rule(xs, dxs):
        xp, (x, y, t) = _operands(*xs)
        if xp is np:
            x, y, t = (np.asarray(v) for v in (x, y, t))
        with np.errstate(divide="ignore", invalid="ignore"):
            q = _floor_divide(x, y)
            ans = _remainder(x, y) if remainder else q
            out = tuple(ans.shape)
            exact = np.fmod(x, y) == 0 if xp is np else _remainder(x, y) == 0
            mask = xp.broadcast_to(xp.isfinite(q) & exact, out)
        q_b = xp.broadcast_to(q, out)
        side, on_ray = ray_compare(t, dxs[2], _only(mask, q_b), None, beyond=True)
        left = xp.broadcast_to(y if remainder else q - 1, out)
        # side 0: y divides x all along the ray (x % x: no jump where `record_jump` can
        # tell that it does so near x; x / x's series is flat, not proven constant)
        record_jump(ans, mask, (left, ans), still=mask & (side == 0), still_if_flat=True,
                    on_ray=on_ray, crossing=(2,), entered=side)
        below = mask & (side < 0)
        ans = _on_side(ans, mask, side, left, ans)
        if not remainder:
            return ans, None
        dtype = np.result_type(ans, float) if xp is np else ans.dtype
        slope = xp.astype(q_b, dtype) - xp.astype(below, dtype)
        return ans, FanIn(Diagonal(xp.ones_like(ans), tuple(x.shape), out),
                          Diagonal(-slope, tuple(y.shape), out), None)

    divmod_xy_rule.__name__ = f"{'remainder' if remainder else 'floor_divide'}_xy_rule"
    return divmod_xy_rule


remainder_xy_p = Primitive("remainder_xy", lambda x, y, t: _remainder(x, y),
                           _divmod_xy_rule(True), array_api=True, jumps=True)
floor_divide_xy_p = Primitive("floor_divide_xy", lambda x, y, t: _floor_divide(x, y),
                              _divmod_xy_rule(False), discontinuous=True, array_api=True)


def _comparison_rule(op):
    """A comparison as a number: constant away from ``lhs == rhs``, a jump there, where the
    value is the side the ray enters (`ray_compare`; the exact value where they are equal
    near the point). Written against the array API: on torch or JAX arrays the comparison
    and its ties stay on the device."""
    fn, compare = COMPARISONS[op], COMPARE[op]
    below, above = bool(fn(0.0, 1.0)), bool(fn(1.0, 0.0))

    def comparison_rule(xs, dxs):
        a, b = xs
        xp, (a_, b_) = _operands(a, b)
        ans = compare(a, b)
        ans = np.asarray(ans) if xp is np else ans
        out = tuple(ans.shape)
        mask = xp.broadcast_to(a_ == b_, out)
        side, on_ray = ray_compare(a, dxs[0], b, dxs[1], beyond=True)
        record_jump(ans, mask, (_full_like(mask, below), _full_like(mask, above)),
                    still=mask & (side == 0), on_ray=on_ray, crossing=(0, 1),
                    entered=side)
        return xp.where(mask, OPERATORS[op](side, 0), ans), None

    comparison_rule.__name__ = f"{fn.__name__}_rule"
    return comparison_rule


for _op, _prim in comparison_prims.items():
    _prim.defrule(_comparison_rule(_op))


any_p = Primitive("any", lambda x, axis=None: np.any(x, axis=axis), discontinuous=True)
all_p = Primitive("all", lambda x, axis=None: np.all(x, axis=axis), discontinuous=True)


# ----- public functions -----

def _constant(name: str, what: str, c, fix: str):
    if is_traced(c):
        raise UnsupportedError(f"{name} with a traced {what}: its jumps move with it. {fix}")
    return c


def _no_options(name: str, kwargs: dict) -> None:
    extra = [k for k, v in kwargs.items() if k != "out" or v is not None]
    if extra:
        raise UnsupportedError(f"numpy.{name} with {', '.join(extra)} on traced arrays")


def sign(x, **kwargs):
    """-1, 0 or 1. Constant away from 0; at 0 a jump, allowed only where the output stays
    continuous (``x * sign(x)``).

    >>> import asd
    >>> [float(asd.subgrad(lambda x: x * asd.sign(x), direction=v)(0.0)) for v in (1.0, -1.0)]
    [1.0, -1.0]
    """
    _no_options("sign", kwargs)
    return sign_p(x)


def floor(x, **kwargs):
    """The largest integer <= x: constant between integers, a jump at each integer.

    >>> import numpy as np, asd
    >>> float(asd.subgrad(lambda x: x - np.floor(x))(2.5))
    1.0
    """
    _no_options("floor", kwargs)
    return floor_p(x)


def ceil(x, **kwargs):
    """The smallest integer >= x: constant between integers, a jump at each integer."""
    _no_options("ceil", kwargs)
    return ceil_p(x)


def trunc(x, **kwargs):
    """``x`` rounded toward 0: jumps at the nonzero integers (continuous at 0)."""
    _no_options("trunc", kwargs)
    return trunc_p(x)


def rint(x, **kwargs):
    """The nearest integer (halves to even): a jump at each half-integer."""
    _no_options("rint", kwargs)
    return rint_p(x)


def round_(x, decimals=0, out=None):
    """``numpy.round``: jumps where ``x * 10**decimals`` (as numpy computes it) is a
    half-integer."""
    if out is not None:
        raise UnsupportedError("numpy.round with out= on traced arrays")
    return round_p(x, decimals=int(decimals))


def angle(z, deg=False):
    """``numpy.angle`` of a real array: 0 for ``x >= 0``, pi below (180 with ``deg``; numpy
    gives pi at -0.0 too). Constant away from 0, a jump there.

    >>> import numpy as np, asd
    >>> float(asd.subgrad(lambda x: np.angle(x) + x)(-2.0))
    1.0
    """
    return angle_p(z, deg=bool(deg))


def heaviside(x, h0, **kwargs):
    """0 below 0, 1 above, ``h0`` at 0 (a constant): a jump at 0."""
    _no_options("heaviside", kwargs)
    return heaviside_p(x, h0=_constant(
        "heaviside", "h0", h0, "Pass h0 as a constant (it is the value at 0 only), or write "
        "asd.numpy.where(x > 0, 1.0, where(x < 0, 0.0, h0))."))


def floor_divide(x, c, **kwargs):
    """``x // c``: jumps where ``c`` divides ``x`` (``c`` constant or traced: then the
    jumps move with it, decided along the ray like any tie).

    >>> import asd
    >>> float(asd.subgrad(lambda x: x // 2.0 + x)(3.0))
    1.0
    """
    _no_options("floor_divide", kwargs)
    if is_traced(c):
        x = _weak(x, c)
        return floor_divide_xy_p(x, c, x / c)
    return floor_divide_p(x, c=c)


def _weak(x, c):
    """A Python number ``x`` beside a traced floating ``c`` in ``c``'s dtype, as numpy
    promotes it (``2.0 % x`` of a float32 ``x`` is float32); anything else as it is."""
    dtype = numpy_dtype(c.value)  # numpy's name of a torch or JAX dtype too
    if type(x) in (int, float) and dtype.kind == "f":
        return np.asarray(x, dtype=dtype)
    return x


def remainder(x, c, **kwargs):
    """``x % c``: ``x - c * floor(x / c)``, slopes 1 in ``x`` and ``-floor(x / c)`` in a
    traced ``c`` away from the multiples of ``c``, where it jumps by ``c``.

    >>> import asd
    >>> float(asd.subgrad(lambda x: x % 2.0)(3.0))
    1.0
    >>> float(asd.subgrad(lambda c: 7.0 % c)(2.0))
    -3.0
    """
    _no_options("remainder", kwargs)
    if is_traced(c):
        x = _weak(x, c)
        return remainder_xy_p(x, c, x / c)
    return remainder_p(x, c=c)


def divmod_(x, c, **kwargs):
    """``divmod(x, c)``: ``(x // c, x % c)`` for a constant ``c``."""
    return floor_divide(x, c, **kwargs), remainder(x, c, **kwargs)


def any_(x, axis=None, out=None, keepdims=False, **kwargs):
    """Whether any entry is true (a logical value: it jumps wherever its input does)."""
    if out is not None or keepdims or kwargs:
        raise UnsupportedError("numpy.any with out=, keepdims= or where= on traced arrays")
    return any_p(x, axis=axis)


def all_(x, axis=None, out=None, keepdims=False, **kwargs):
    """Whether every entry is true (a logical value: it jumps wherever its input does)."""
    if out is not None or keepdims or kwargs:
        raise UnsupportedError("numpy.all with out=, keepdims= or where= on traced arrays")
    return all_p(x, axis=axis)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|a - b| <= atol + rtol |b|``, numpy's test: a comparison of traced values (its ties
    decided along the ray, a jump where it switches).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.sum(np.where(np.isclose(x, 1.0), 0.0, x)))(np.array([1.0, 2.0]))
    array([0., 1.])
    """
    if is_traced(rtol) or is_traced(atol):
        raise UnsupportedError("numpy.isclose with a traced rtol or atol: pass constants")
    diff = abs(a - b)
    return comparison_prims["<="](diff, atol + rtol * abs(b))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``all(isclose(a, b))`` as a traced boolean, where numpy returns a Python bool: like a
    comparison, it can be a `where` condition or a number (a jump where it switches), and
    ``if np.allclose(x, y):`` raises `TracerBoolError`, as ``if x > y:`` does (a Python
    branch on traced values ignores the direction); ``asd.stop_gradient(x).value`` gives
    plain arrays to check outside the program."""
    return all_(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


# ----- numpy dispatch -----

for _np_fn, _fn in [
    (np.sign, sign), (np.floor, floor), (np.ceil, ceil), (np.trunc, trunc), (np.fix, trunc),
    (np.rint, rint), (np.round, round_), (np.around, round_), (np.heaviside, heaviside),
    (np.floor_divide, floor_divide), (np.remainder, remainder), (np.divmod, divmod_),
    (np.any, any_), (np.all, all_), (np.angle, angle), (np.isclose, isclose),
    (np.allclose, allclose),
]:
    register_numpy(_np_fn, _fn)
for _name, _fn in [("round", round_), ("any", any_), ("all", all_), ("argmax", argmax),
                   ("argmin", argmin)]:
    register_method(_name, _fn)

mod = remainder
around = round = round_

__all__ = ["allclose", "angle", "around", "ceil", "floor", "floor_divide", "heaviside",
           "isclose", "mod", "remainder", "rint", "round", "sign", "trunc"]
