"""Piecewise primitives: relu, abs, maximum, minimum, clip, the activation family, comparisons
and where, and user-defined piecewise polynomials.

Every rule here follows the paper's Algorithm 7: away from a tie the branch is fixed; at a
tie (``x == 0``, ``a == b``, ``lhs == rhs``) the branch is the one the ray ``x + δv``
enters. Rules state each switching quantity to `ray_compare` (or `ray_nonnegative`), which
decides every tied entry by the tie contract, and select branches with ``where``; a jump of
``where`` is stated to `refuse_where`. No rule branches in Python on a value, so every rule
runs on numpy, torch and JAX arrays (``xp = namespace(x)``) and inside ``jax.jit``, where the
tie services decide by first order and count what first order leaves open.
"""

from __future__ import annotations

import operator
from fractions import Fraction

import numpy as np

from asd.errors import ArgumentTypeError, NotLipschitzError, UndecidedTieError, UnsupportedError
from asd.extend import (
    Diagonal,
    FanIn,
    Mask,
    Primitive,
    comparison_of,
    defpiecewise,
    from_host,
    is_host,
    is_traced,
    namespace,
    numpy_dtype,
    operation_of,
    ray_compare,
    ray_nonnegative,
    record_jump,
    refuse_where,
    register_kernel,
    register_method,
    register_numpy,
    to_host,
    within_reach,
)

# ----- relu and abs (written out: they are on every hot path) -----

def _array(x):
    """``(xp, x)``: the namespace of ``x``, and numpy values as numpy arrays."""
    xp = namespace(x)
    return xp, (np.asarray(x) if xp is np else x)


def _relu_impl(x):
    return np.maximum(x, 0) if is_host(x) else namespace(x).maximum(x, 0.0)


relu_p = Primitive("relu", _relu_impl, array_api=True)


def _torch_positive(x):
    """``x > 0`` as 0/1 in ``x``'s dtype in one pass: torch writes a comparison into a float
    tensor ~5x faster than it makes a bool one and converts it."""
    import torch

    return torch.gt(x, 0, out=torch.empty_like(x))


register_kernel("positive", "torch", _torch_positive)


@relu_p.defrule
def relu_rule(xs, dxs):
    xp, x = _array(xs[0])
    if xp is np:
        return _relu_impl(x), Diagonal(ray_nonnegative(x, dxs[0]), x.shape)
    return _relu_impl(x), Mask(ray_nonnegative(x, dxs[0], mask_dtype=True), tuple(x.shape))


abs_p = Primitive("abs", lambda x: np.abs(x) if is_host(x) else namespace(x).abs(x),
                  array_api=True)


@abs_p.defrule
def abs_rule(xs, dxs):
    xp, x = _array(xs[0])
    positive = ray_nonnegative(x, dxs[0])
    if xp is np:
        return np.abs(x), Diagonal(np.where(positive, 1.0, -1.0).astype(x.dtype), x.shape)
    return xp.abs(x), Diagonal(xp.astype(positive, x.dtype) * 2.0 - 1.0, tuple(x.shape))


# ----- maximum and minimum: ties decided along the ray by the tie service -----
# (``ray_compare`` gives 0 only where the operands are equal near x: either one is right then)

def _operands(*xs):
    """``(xp, xs)``: the namespace of the operands, each an array of it on the same device
    (Python numbers become arrays of the first array's dtype)."""
    xp = namespace(*xs)
    if xp is np:
        return np, xs
    arrays = [x for x in xs if not is_host(x)]
    like = next((x for x in arrays if xp.isdtype(x.dtype, "real floating")), arrays[0])
    return xp, tuple(x if not is_host(x) else from_host(
        np.asarray(x), like, None if np.asarray(x).dtype == bool else "like") for x in xs)


def _binary_impl(np_op, xp_name):
    def impl(a, b):
        if is_host(a) and is_host(b):
            return np_op(a, b)
        xp, (a, b) = _operands(a, b)
        return getattr(xp, xp_name)(a, b)

    impl.__name__ = np_op.__name__
    return impl


def _select_rule(op, sign_of_first):
    def rule(xs, dxs):
        a, b = xs
        ans = op(a, b)
        out = tuple(np.shape(ans))
        xp = namespace(a, b)
        pick_a = xp.asarray(sign_of_first * ray_compare(a, dxs[0], b, dxs[1]) >= 0)
        return ans, FanIn(Diagonal(pick_a, tuple(np.shape(a)), out),
                          Diagonal(~pick_a, tuple(np.shape(b)), out))

    return rule


_maximum = _binary_impl(np.maximum, "maximum")
_minimum = _binary_impl(np.minimum, "minimum")
maximum_p = Primitive("maximum", _maximum, _select_rule(_maximum, 1), array_api=True)
minimum_p = Primitive("minimum", _minimum, _select_rule(_minimum, -1), array_api=True)


# ----- snaps: near-ties within a ball's reach, for asd.clarke(radius=...) -----

@relu_p.defsnap
@abs_p.defsnap
def _snap_kink(xs, rs, **_):
    """relu, abs: ``x`` within reach of 0 becomes 0."""
    (x,), (r,) = xs, rs
    near = within_reach(x, np.zeros_like(x), r)
    return [np.where(near, 0.0, x).astype(x.dtype)], int(np.count_nonzero(near))


@maximum_p.defsnap
@minimum_p.defsnap
def _snap_pair(xs, rs, **_):
    """maximum, minimum: where ``|a - b| <= r_a + r_b`` the full-shaped operand takes the
    other's value (the tie the ball reaches); both broadcast is left to exact ties."""
    a, b = xs
    out = np.broadcast_shapes(a.shape, b.shape)
    a_b, b_b = np.broadcast_to(a, out), np.broadcast_to(b, out)
    near = within_reach(a_b, b_b, np.broadcast_to(rs[0], out) + np.broadcast_to(rs[1], out))
    if a.shape == out:
        return [np.where(near, b_b, a).astype(a.dtype), b], int(np.count_nonzero(near))
    if b.shape == out:
        return [a, np.where(near, a_b, b).astype(b.dtype)], int(np.count_nonzero(near))
    return xs, 0


def relu(x):
    """max(x, 0), with the branch at x = 0 chosen by the direction (not a fixed 0)."""
    return relu_p(x)


def absolute(x):
    """|x|; at 0 the slope is the sign of the tangent (+1 when it is 0 too)."""
    return abs_p(x)


def _complex_operand(x) -> bool:
    """Whether ``x`` (traced, an array, a Python or numpy number) holds complex values."""
    if x is None:
        return False
    if is_traced(x):
        return numpy_dtype(x.value).kind == "c"
    return isinstance(x, complex) or np.asarray(x).dtype.kind == "c"


def _real_order(name: str, *operands) -> None:
    """Refuse complex operands of an order primitive (maximum, minimum, clip) by name: numpy
    orders complex numbers lexicographically (real part, then imaginary part), a comparison
    that picks a complex number, not a real one a derivative could follow."""
    bad = [x for x in operands if _complex_operand(x)]
    if not bad:
        return
    shown = "a traced complex array" if is_traced(bad[0]) else f"the complex constant {bad[0]!r}"
    call = ", ".join(f"%{x._id}" if is_traced(x) else repr(x) for x in operands if x is not None)
    raise ArgumentTypeError(
        f"numpy.{name}({call}) with {shown}: numpy orders complex numbers lexicographically (real "
        "part first, then the imaginary part) and returns a complex result; asd differentiates "
        f"real programs, where {name} compares real numbers. Compare the real parts "
        f"(np.{name}(x, c.real) for a constant c: with a zero imaginary part that is the real "
        "part of numpy's result), or keep a complex quantity as two real arrays (its real and "
        "imaginary parts).")


def maximum(a, b, **kwargs):
    if kwargs:
        raise UnsupportedError(f"numpy.maximum with {', '.join(kwargs)}")
    _real_order("maximum", a, b)
    if not is_traced(a) and np.ndim(a) == 0 and a == 0 and is_traced(b):
        return relu_p(b)
    if not is_traced(b) and np.ndim(b) == 0 and b == 0 and is_traced(a):
        return relu_p(a)
    return maximum_p(a, b)


def minimum(a, b, **kwargs):
    if kwargs:
        raise UnsupportedError(f"numpy.minimum with {', '.join(kwargs)}")
    _real_order("minimum", a, b)
    return minimum_p(a, b)


# ----- clip: minimum(maximum(x, lo), hi) in one node, bounds constant or traced -----

def _clip_impl(x, lo, hi):
    return _minimum(_maximum(x, lo), hi)


clip_p = Primitive("clip", _clip_impl, array_api=True)


@clip_p.defrule
def clip_rule(xs, dxs):
    """The sequential program ``minimum(maximum(x, lo), hi)``: each tie goes to the side the
    sweep enters (`ray_compare`: tangents, exact series, then the next lexicographic direction
    where the ray runs along the bound; the first operand ``x`` only where ``x`` equals the
    bound near the point, when both sides agree). One exception: where ``lo == hi`` near the
    point the interval is a point, so the output follows the bound whatever ``x`` does.

    The minimum step compares what the maximum step chose: ``x`` against ``hi`` where it chose
    ``x``, ``lo`` against ``hi`` where it chose ``lo``; each comparison is stated on those
    entries only (`_only`), so the ties decided and reported are the sequential program's."""
    x, lo, hi = xs
    ans = _clip_impl(x, lo, hi)
    out = tuple(np.shape(ans))
    xp, arrays = _operands(x, lo, hi)
    x_b, lo_b, hi_b = (xp.broadcast_to(a, out) for a in arrays)
    # the maximum step: x (else lo), ties by the ray
    pick_x = xp.where(x_b == lo_b, _ray_sign(dxs, x, dxs[0], lo, dxs[1]) >= 0, x_b > lo_b)
    mid = xp.where(pick_x, x_b, lo_b)
    high_tie = mid == hi_b
    at_x, at_lo = high_tie & pick_x, high_tie & ~pick_x
    # the minimum step: max(x, lo) (else hi); x == hi where x was chosen, lo == hi elsewhere
    pick_mid = xp.where(at_x, _ray_sign(dxs, _only(at_x, x_b), dxs[0], hi, dxs[2]) <= 0,
                        xp.where(at_lo, _ray_sign(dxs, _only(at_lo, lo_b), dxs[1], hi, dxs[2])
                                 < 0, mid < hi_b))
    # lo == hi near the point: the interval is a point, the output is the bound
    point = high_tie & (lo_b == hi_b)
    pick_mid = pick_mid & ~(point & (_ray_sign(dxs, _only(point, lo_b), dxs[1], hi, dxs[2])
                                     == 0))
    d_x = pick_mid & pick_x
    d_lo = pick_mid & ~pick_x
    return ans, FanIn(Diagonal(d_x, tuple(np.shape(x)), out),
                      Diagonal(d_lo, tuple(np.shape(lo)), out),
                      Diagonal(~pick_mid, tuple(np.shape(hi)), out))


def _ray_sign(dxs, a, da, b, db):
    """`ray_compare` of ``a`` and ``b`` in a rule whose lazy tangents are ``dxs``. Where
    neither operand moves with the direction (constant bounds), or both are one traced value
    (``clip(x, lo, lo)``), a tie is an equality near the point, so the sign is the values'
    (0 at a tie): the eager sweep proves it by the series, a staged sweep is told it here
    (`ray_compare` learns of the sweep from its operands' lazy tangents only, and first order
    cannot tell an equality from a flat tie)."""
    if _sweep_mode(dxs) and (_same_node(da, db) or not (_lazy(da) or _lazy(db))):
        xp, (a, b) = _operands(a, b)
        return xp.astype(a > b, xp.int8) - xp.astype(a < b, xp.int8)
    return ray_compare(a, da, b, db)


def _lazy(dx) -> bool:
    """Whether ``dx`` is a sweep's lazy tangent (its operand moves with the direction)."""
    return getattr(dx, "trace", None) is not None


def _sweep_mode(dxs):
    """The staged mode of the sweep the rule's lazy tangents ``dxs`` belong to (False:
    eager)."""
    trace = next((d.trace for d in dxs if _lazy(d)), None)
    return getattr(trace, "staged", False)


def _only(mask, a):
    """``a`` at the entries ``mask``, NaN elsewhere: an operand of `ray_compare` whose ties
    can only be at ``mask`` (NaN ties nothing), so a rule states a comparison on some
    entries without indexing them (no data-dependent shape)."""
    return namespace(mask, a).where(mask, a, np.nan)


@clip_p.defsnap
def _snap_clip(xs, rs, **_):
    """clip: ``x`` within reach of a bound becomes the bound."""
    x, lo, hi = xs
    if x.shape != np.broadcast_shapes(x.shape, np.shape(lo), np.shape(hi)):
        return xs, 0
    near_lo = within_reach(x, np.broadcast_to(lo, x.shape), rs[0] + rs[1])
    near_hi = within_reach(x, np.broadcast_to(hi, x.shape), rs[0] + rs[2])
    snapped = np.where(near_lo, lo, np.where(near_hi, hi, x)).astype(x.dtype)
    return [snapped, lo, hi], int(np.count_nonzero(near_lo | near_hi))


def clip(x, lo=None, hi=None, out=None, **kwargs):
    """``numpy.clip``: ``minimum(maximum(x, lo), hi)``, bounds scalars or arrays, traced or not.

    At ``x == lo`` or ``x == hi`` the direction decides which side the ray enters; ``lo > hi``
    gives ``hi`` everywhere, as in numpy. ``None`` leaves that side open.

    >>> import numpy as np, asd
    >>> float(asd.subgrad(lambda x: asd.clip(x, 0.0, 1.0), direction=-1.0)(1.0))
    1.0
    >>> float(asd.subgrad(lambda x: asd.clip(x, 0.0, 1.0), direction=1.0)(1.0))
    0.0
    """
    if "a_min" in kwargs or "a_max" in kwargs:
        lo, hi = kwargs.pop("a_min", lo), kwargs.pop("a_max", hi)
    if "min" in kwargs or "max" in kwargs:
        lo, hi = kwargs.pop("min", lo), kwargs.pop("max", hi)
    if out is not None or kwargs:
        extra = ["out"] * (out is not None) + list(kwargs)
        raise UnsupportedError(f"numpy.clip with {', '.join(extra)}")
    if lo is None and hi is None:
        raise ValueError("clip needs at least one of the bounds lo, hi")
    _real_order("clip", x, lo, hi)
    if hi is None:
        return maximum(x, lo)
    if lo is None:
        return minimum(x, hi)
    return clip_p(x, lo, hi)


# ----- the activation family: each declared from its breakpoints and pieces -----
# A piece is a coefficient list [c0, c1, ...] (c0 + c1 x + ...); continuity is checked exactly.

leaky_relu_p = defpiecewise("leaky_relu", lambda negative_slope: (
    [0.0], [[0.0, negative_slope], [0.0, 1.0]]))
relu6_p = defpiecewise("relu6", [0.0, 6.0], [[0.0], [0.0, 1.0], [6.0]])
hardtanh_p = defpiecewise("hardtanh", lambda lo, hi: ([lo, hi], [[lo], [0.0, 1.0], [hi]]))
hard_sigmoid_p = defpiecewise("hard_sigmoid", [-3.0, 3.0],
                              [[0.0], [Fraction(1, 2), Fraction(1, 6)], [1.0]])
soft_threshold_p = defpiecewise("soft_threshold", lambda lam: (
    [-lam, lam], [[lam, 1.0], [0.0], [-lam, 1.0]]))
hinge_p = defpiecewise("hinge", [1.0], [[1.0, -1.0], [0.0]])
huber_p = defpiecewise("huber", lambda delta: (
    [-delta, delta], [[-Fraction(delta) ** 2 / 2, -delta], [0, 0, Fraction(1, 2)],
                      [-Fraction(delta) ** 2 / 2, delta]]))


def _static(name: str, **params) -> dict:
    for key, value in params.items():
        if is_traced(value) or np.ndim(value) != 0:
            raise UnsupportedError(
                f"{name}: the parameter {key} must be a constant Python number (it fixes the "
                f"breakpoints), got {value!r}. Write the function with asd.clip, "
                "asd.maximum or asd.where for traced or array-valued parameters."
            )
    return {k: float(v) for k, v in params.items()}


def leaky_relu(x, negative_slope: float = 0.01):
    """``x`` for ``x >= 0``, ``negative_slope * x`` below; the direction decides at 0.

    >>> import asd
    >>> [float(asd.subgrad(asd.leaky_relu, direction=v)(0.0)) for v in (1.0, -1.0)]
    [1.0, 0.01]
    """
    return leaky_relu_p(x, **_static("leaky_relu", negative_slope=negative_slope))


def relu6(x):
    """``min(max(x, 0), 6)`` (MobileNet's activation).

    >>> import asd
    >>> [float(asd.subgrad(asd.relu6, direction=v)(6.0)) for v in (1.0, -1.0)]
    [0.0, 1.0]
    """
    return relu6_p(x)


def hardtanh(x, lo: float = -1.0, hi: float = 1.0):
    """``clip(x, lo, hi)`` with constant bounds (PyTorch's ``hardtanh``); traced bounds go to
    `clip`.

    >>> import numpy as np, asd
    >>> asd.hardtanh(np.array([-2.0, 0.5, 3.0]))
    array([-1. ,  0.5,  1. ])
    """
    if is_traced(lo) or is_traced(hi) or np.ndim(lo) or np.ndim(hi):
        return clip(x, lo, hi)
    if lo > hi:
        raise ValueError(f"hardtanh needs lo <= hi, got lo={lo}, hi={hi}")
    return hardtanh_p(x, **_static("hardtanh", lo=lo, hi=hi))


def hard_sigmoid(x):
    """``relu6(x + 3) / 6``: 0 below -3, 1 above 3, linear between.

    >>> import numpy as np, asd
    >>> asd.hard_sigmoid(np.array([-3.0, 0.0, 3.0]))
    array([0. , 0.5, 1. ])
    """
    return hard_sigmoid_p(x)


def soft_threshold(x, lam):
    """``sign(x) * max(|x| - lam, 0)``: the proximal map of ``lam * ||.||_1`` (ISTA, lasso).

    A traced or array ``lam`` is written as ``x - clip(x, -lam, lam)``, with the same ties.

    >>> import numpy as np, asd
    >>> asd.soft_threshold(np.array([-2.0, 0.5, 3.0]), 1.0)
    array([-1.,  0.,  2.])
    """
    if is_traced(lam) or np.ndim(lam):
        return x - clip(x, -lam, lam)
    if lam < 0:
        raise ValueError(f"soft_threshold needs lam >= 0, got {lam}")
    return soft_threshold_p(x, **_static("soft_threshold", lam=lam))


def hinge(x):
    """``max(0, 1 - x)``: the SVM loss of a margin ``x``; at ``x == 1`` the direction decides.

    >>> import asd
    >>> [float(asd.subgrad(asd.hinge, direction=v)(1.0)) for v in (1.0, -1.0)]
    [0.0, -1.0]
    """
    return hinge_p(x)


def huber(x, delta: float = 1.0):
    """``x**2 / 2`` for ``|x| <= delta``, ``delta * (|x| - delta / 2)`` outside (C^1).

    >>> import numpy as np, asd
    >>> asd.huber(np.array([-3.0, 0.5, 1.0]), delta=1.0)
    array([2.5  , 0.125, 0.5  ])
    """
    if delta <= 0:
        raise ValueError(f"huber needs delta > 0, got {delta}")
    return huber_p(x, **_static("huber", delta=delta))


def piecewise_polynomial(breakpoints, pieces, name: str = "piecewise_polynomial") -> Primitive:
    """A user-defined continuous univariate piecewise polynomial as an elementwise primitive.

    ``pieces[i]`` is the coefficient list ``[c0, c1, ...]`` of ``c0 + c1 x + ...`` on
    ``[breakpoints[i-1], breakpoints[i]]`` (``len(pieces) == len(breakpoints) + 1``).
    Continuity at each breakpoint is checked exactly with Fractions; a jump raises
    `NotLipschitzError`, since a discontinuous function has no subgradient.

    >>> import numpy as np, asd
    >>> smooth_relu = asd.piecewise_polynomial([0.0, 1.0], [[0.0], [0.0, 0.0, 0.5], [-0.5, 1.0]])
    >>> smooth_relu(np.array([-1.0, 0.5, 2.0]))
    array([0.   , 0.125, 1.5  ])
    >>> asd.piecewise_polynomial([0.0], [[0.0], [1.0]])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    asd.errors.NotLipschitzError: piecewise_polynomial: piece 0 ends at 0.0 but piece 1 ...
    """
    breakpoints = [float(b) for b in breakpoints]
    if breakpoints != sorted(set(breakpoints)):
        raise ValueError(f"{name}: breakpoints must be strictly increasing, got {breakpoints}")
    for piece in pieces:
        if callable(piece) or (isinstance(piece, tuple) and [p for p in piece if callable(p)]):
            raise ValueError(f"{name}: pieces are coefficient lists [c0, c1, ...]; for other "
                             "smooth pieces use asd.extend.defpiecewise")
    return defpiecewise(name, breakpoints, [list(p) for p in pieces])


# ----- comparisons: discontinuous values that `where` reads as branch conditions -----

COMPARISONS = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal,
               "==": np.equal, "!=": np.not_equal}
OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
             "==": operator.eq, "!=": operator.ne}


def _compare(op: str):
    """The comparison ``op``: numpy's ufunc on numpy values, the operator on others'."""
    np_fn, py_op = COMPARISONS[op], OPERATORS[op]

    def compare(a, b):
        return np_fn(a, b) if is_host(a) and is_host(b) else py_op(a, b)

    compare.__name__ = np_fn.__name__
    return compare


COMPARE = {op: _compare(op) for op in COMPARISONS}
comparison_prims = {op: Primitive(fn.__name__, COMPARE[op], comparison=op, array_api=True)
                    for op, fn in COMPARISONS.items()}


# ----- logical operators on comparisons: &, |, ^, ~ and numpy's logical_* -----
# A comparison's value is the side its ray enters at a tie, with the jump recorded (the rule
# in library/discontinuous.py); a logical operator is a plain function of such booleans, so
# it jumps only where they do: no jump of its own, and the engine's continuity check replays
# it with each side. `where` reads a tree of them as one condition (`where_logic_p`).

def _all_host(xs) -> bool:
    """Whether every operand is a numpy value (a type test: numpy's own function applies)."""
    return all(map(is_host, xs))


def _all_boolean(xs) -> bool:
    """Whether every operand has a boolean dtype (a type test)."""
    return all(map(_boolean, xs))


def _boolean(x) -> bool:
    """Whether ``x`` holds booleans: its dtype named ``bool`` in any library (numpy cannot
    read torch's dtypes)."""
    dtype = getattr(x, "dtype", None)
    return type(x) is bool or str(np.result_type(x) if dtype is None else dtype).rsplit(
        ".")[-1] == "bool"


def _logical_impl(np_fn, xp_name):
    def impl(*xs):
        if _all_host(xs):
            return np_fn(*xs)
        xp, xs = _operands(*xs)
        return getattr(xp, xp_name)(*xs)

    impl.__name__ = np_fn.__name__
    return impl


LOGICAL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
           "not": np.logical_not}
logical_prims = {kind: Primitive(fn.__name__, _logical_impl(fn, fn.__name__), array_api=True)
                 for kind, fn in LOGICAL.items()}


def _truth(x, name: str):
    """``x`` as booleans: a traced boolean as it is, other traced values as ``x != 0`` (a
    comparison, deciding its ties along the ray); constants as numpy booleans."""
    if is_traced(x):
        if _boolean(x):
            return x
        if not np.issubdtype(numpy_dtype(x), np.number):
            raise UnsupportedError(f"numpy.{name} of a traced {x.dtype} array")
        return comparison_prims["!="](x, 0.0)
    return np.asarray(x, dtype=bool) if is_host(x) else x


def _logical(kind: str):
    name = LOGICAL[kind].__name__

    def logical(*xs, **kwargs):
        if [k for k, v in kwargs.items() if v is not None]:
            raise UnsupportedError(f"numpy.{name} with {', '.join(kwargs)} on traced arrays: "
                                   "call it with its operands only and use the result")
        return logical_prims[kind](*(_truth(x, name) for x in xs))

    logical.__name__ = name
    logical.__doc__ = (f"``numpy.{name}`` of comparisons of traced values (or ``x != 0``): a "
                       "boolean that jumps where they do; as `where`'s condition each tie is "
                       "decided along the ray.")
    return logical


logical_and, logical_or = _logical("and"), _logical("or")
logical_xor, logical_not = _logical("xor"), _logical("not")


def _integral(x) -> bool:
    """Whether ``x`` holds booleans or integers (a Python int or bool, or such a dtype)."""
    if _boolean(x):
        return True
    if type(x) is int:
        return True
    dtype = getattr(x, "dtype", None)
    try:
        return dtype is not None and np.dtype(numpy_dtype(x)).kind in "iu"
    except TypeError:
        return False


def _all_integral(xs) -> bool:
    """Whether every operand holds booleans or integers (a type test)."""
    return all(map(_integral, xs))


bits_prims = {kind: Primitive(f"bits_{name}", _logical_impl(fn, name), array_api=True)
              for kind, fn, name in (("and", np.bitwise_and, "bitwise_and"),
                                     ("or", np.bitwise_or, "bitwise_or"),
                                     ("xor", np.bitwise_xor, "bitwise_xor"),
                                     ("not", np.invert, "bitwise_invert"))}
"""Integer bits of traced integers and booleans (``~(x > 0) & (y > 0)`` of Python floats,
whose ``~`` is Python's integer inversion): discrete values with no tangent, whose jumps are
their comparisons', as a traced boolean's are."""


def _bitwise(kind: str, numpy_fn):
    """``&``, ``|``, ``^``, ``~``: logical on booleans (numpy's meaning for them), numpy's
    bits on integers (discrete, as booleans are); floats have no bits, as numpy says."""
    logical = _logical(kind)

    def bitwise(*xs, **kwargs):
        if _all_boolean(xs):
            return logical(*xs, **kwargs)
        if _all_integral(xs) and not [k for k, v in kwargs.items() if v is not None]:
            return bits_prims[kind](*xs)
        raise UnsupportedError(
            f"numpy.{numpy_fn.__name__} of traced non-boolean values "
            f"({', '.join(str(getattr(x, 'dtype', type(x).__name__)) for x in xs)}): on "
            "booleans (comparisons) it is logical and works, on integers it is numpy's bits; "
            "floats have none. Compare first: (x > 0) & (y > 0).")

    bitwise.__name__ = numpy_fn.__name__
    return bitwise


def _where_impl(cond, a, b):
    if is_host(cond) and is_host(a) and is_host(b):
        return np.where(cond, a, b)
    xp, (cond, a, b) = _operands(cond, a, b)
    return xp.where(cond, a, b)


# ----- where -----

def _where_cmp_impl(lhs, rhs, a, b, op):
    return _where_impl(COMPARE[op](lhs, rhs), a, b)


where_cmp_p = Primitive("where", _where_cmp_impl, array_api=True)


@where_cmp_p.defrule
def where_cmp_rule(xs, dxs, op):
    """``a`` where ``lhs op rhs`` on the ray, else ``b``. A tied condition takes the side the
    ray enters (`ray_compare`); where that side is not an equality near the point and
    ``a != b`` the output jumps, which is refused (`refuse_where`)."""
    lhs, rhs, a, b = xs
    cond = COMPARE[op](lhs, rhs)
    ans = _where_impl(cond, a, b)
    out = tuple(np.shape(ans))
    xp, (cond, lhs_, rhs_, a_, b_) = _operands(cond, lhs, rhs, a, b)
    cond = xp.broadcast_to(cond, out)
    if not (dxs[0].is_zero and dxs[1].is_zero):  # the condition moves with the direction
        # the side changes the result unless both sides are the same traced value
        same = _same_node(dxs[2], dxs[3])
        side, on_ray = _condition_side(lhs, dxs[0], rhs, dxs[1], (a, dxs[2], b, dxs[3]),
                                       same)
        if not same:
            _refuse_parting_on_the_ray(on_ray, (a, dxs[2], b, dxs[3]), out,
                                       f"where(lhs {op} rhs, a, b)")
        tie = xp.broadcast_to(lhs_ == rhs_, out)
        a_b, b_b = xp.broadcast_to(a_, out), xp.broadcast_to(b_, out)
        # a tie that is an equality near x keeps one side there; any other switches sides
        jump = tie & (a_b != b_b) & (side != 0)
        refuse_where(jump, lambda: _where_jump(f"where(lhs {op} rhs, a, b) jumps: the "
                                               "condition is tied (lhs == rhs) at", jump,
                                               a_b, b_b))
        _count_open_sides(tie & (side == 0), a_b, b_b, dxs, same)
        # side 0: lhs == rhs along the ray (and every further direction), so the comparison
        # reads its exact value; beside the ray it may not hold (x < |x| along +1)
        below, above = bool(COMPARE[op](0.0, 1.0)), bool(COMPARE[op](1.0, 0.0))
        _equal_along_the_ray(ans, tie & (a_b != b_b) & (side == 0),
                             (a_b if below else b_b, a_b if above else b_b), side)
        cond = xp.where(tie, OPERATORS[op](side, 0), cond)
    return ans, FanIn(None, None, Diagonal(cond, tuple(np.shape(a)), out),
                      Diagonal(~cond, tuple(np.shape(b)), out))


def _equal_along_the_ray(ans, held, sides: tuple, side=None) -> None:
    """The tied entries ``held`` of a ``where`` whose condition's operands are equal along
    the ray (``ray_compare`` gave 0) while ``a != b``: equal near the point only where every
    node above chose its piece by the values alone (`Trace.settled`: the engine drops them
    there) or where the operands cannot reach the other side (`Trace.unreachable`, with
    ``side``, for one comparison); anywhere else they are a jump (``sides``: the value below
    and above, or ``a`` and ``b``), and the engine checks the output's continuity across it
    (``np.where(x < np.abs(x), 1.0, 0.0)`` at 0 along +1 jumps from the left: refused)."""
    if side is None:
        record_jump(ans, held, sides, still=held)
    else:
        record_jump(ans, held, sides, still=held, crossing=(0, 1), entered=side)


def _condition_side(lhs, dl, rhs, dr, branches: tuple, same: bool):
    """`ray_compare` of a where's condition ``lhs - rhs``, and its ``beyond`` mask (None:
    no tie the ray stays on). A tie flat to first order along every direction whose series
    cannot be proven (`UndecidedTieError` under ``strict``) is refused only where the side
    changes the result: where the branches ``a``, ``b`` differ there (their own
    `ray_compare`: in value, first order along ``v, w1, ...`` or series). Where they agree,
    either side gives the same value and one-sided derivative, and the same gradient almost
    surely (the contract's ``flat``), so the tie takes side 0 (the condition's value at the
    point), as one equal near the point does."""
    if same:  # where(c, x, x): no side changes anything
        return ray_compare(lhs, dl, rhs, dr, record=True, beyond=True)
    try:
        return ray_compare(lhs, dl, rhs, dr, record=True, strict=True, beyond=True)
    except UndecidedTieError as e:
        error = e
    side, on_ray = ray_compare(lhs, dl, rhs, dr, beyond=True)
    a, da, b, db = branches
    differ = ray_compare(a, da, b, db) != 0
    xp, (lhs_, rhs_) = _operands(lhs, rhs)
    shape = tuple(np.broadcast_shapes(tuple(side.shape), tuple(differ.shape)))
    flat = xp.broadcast_to((lhs_ == rhs_) & (side == 0), shape)
    refuse_where(flat & xp.broadcast_to(differ, shape), lambda: error)
    return side, on_ray


def _refuse_parting_on_the_ray(on_ray, branches: tuple, out: tuple, what: str) -> None:
    """Refuse where the condition stays tied all along the ray (``on_ray``: a further
    direction chose its side) while the branches, equal at the point, part along the ray.

    A continuous ``where`` has ``a == b`` wherever its condition can change near the point,
    so on a ray that stays on the tie (not an equality near the point: the condition does
    change beside it) ``a`` and ``b`` agree all along it. Where they part, the result along
    the ray is the condition's own value there, not the side a further direction chose, and
    it jumps arbitrarily near the point: ``where(x + c > y + c, x, 0)`` at 0 along (1, 1)."""
    if on_ray is None:
        return
    a, da, b, db = branches
    sign, beyond = ray_compare(a, da, b, db, beyond=True)
    along = np.asarray(to_host(sign)) != 0  # a != b along v (or at the point)
    if beyond is not None:
        along = along & ~np.broadcast_to(beyond, along.shape)
    a_, b_ = (np.asarray(to_host(x)) for x in (a, b))
    parting = (np.broadcast_to(on_ray, out) & np.broadcast_to(along, out)
               & np.broadcast_to(a_ == b_, out))
    refuse_where(parting, lambda: NotLipschitzError(
        f"{what}: the condition is tied all along the ray at {int(np.count_nonzero(parting))} "
        "entries (a further direction chose its side, but it changes beside the ray) where "
        "the branches, equal at the point, part along the ray, so the function jumps "
        "arbitrarily near the point. Make both branches agree where the condition ties, or "
        "use a continuous primitive (asd.maximum, asd.relu)."))


def _same_node(da, db) -> bool:
    """Whether two lazy tangents are those of one traced value (``where(c, x, x)``)."""
    k = getattr(da, "k", None)
    return k is not None and k == getattr(db, "k", None)


def _where_jump(what: str, jump, a, b, which: str = "where a != b") -> NotLipschitzError:
    """The refusal of a ``where`` whose tied condition switches between ``a != b``."""
    jump, a, b = to_host(jump), to_host(a), to_host(b)
    return NotLipschitzError(
        f"{what} {int(np.count_nonzero(jump))} entries {which} (e.g. a = "
        f"{a[jump][:3].tolist()}, b = {b[jump][:3].tolist()}), so the function is "
        "discontinuous there. Make both branches agree on the boundary, or use a "
        "continuous primitive."
    )


def _count_open_sides(flat, a, b, dxs, same: bool) -> None:
    """In a staged sweep: count as undecided the tied entries ``flat`` whose side the first
    order left at 0 (a condition whose composite linearization is 0, taken as either side by
    `ray_compare`) where the side matters: ``a != b`` there, or ``a`` and ``b`` move with
    the direction (their linearizations differ unless they are one value). The eager sweep
    decides those by the exact series; nothing is counted there. ``dxs`` are the rule's
    lazy tangents, ``a``'s and ``b``'s last."""
    trace = _staged_trace(*dxs)
    if trace is None:
        return
    xp = namespace(flat)
    matters = a != b
    if not same:
        for d in dxs[-2:]:
            k = getattr(d, "k", None)
            if k is not None:
                reach = trace.reach(k)
                matters = matters | (True if reach is None
                                     else xp.broadcast_to(reach != 0, tuple(flat.shape)))
    refuse_where(flat & matters, lambda: None)


def _staged_trace(*dxs):
    """The sweep of the lazy tangents ``dxs`` if it is a full staged sweep, else None."""
    trace = next((d.trace for d in dxs if _lazy(d)), None)
    return trace if getattr(trace, "staged", False) == "full" else None


select_p = Primitive("select", _where_impl, array_api=True)


@select_p.defrule
def select_rule(xs, dxs):
    cond, a, b = xs
    ans = _where_impl(cond, a, b)
    out = tuple(np.shape(ans))
    xp, (cond, _, _) = _operands(cond, a, b)
    if cond.dtype != xp.bool:  # a number selects by its truth (-2 is true: ~(-2) is not false)
        cond = cond != 0
    cond = xp.broadcast_to(cond, out)
    return ans, FanIn(None, Diagonal(cond, tuple(np.shape(a)), out),
                      Diagonal(~cond, tuple(np.shape(b)), out))


# ----- where of a logical combination of comparisons -----
# The condition is a tree (``&``, ``|``, ``^``, ``~``) over comparisons and constant masks,
# its leaves' operands inputs of one node. Each tied comparison takes the side its ray enters
# (`ray_compare`, as `where_cmp_rule` does); the output jumps at an entry where a != b and the
# tree's value changes when its tied comparisons take other truth values (each can, near x:
# both sides of a tie that is not an equality on a neighbourhood are entered by some ray).

def _leaf_values(xs, leaves, out):
    """Each leaf's booleans at the point, broadcast to ``out`` (``xs`` are arrays of one
    library, `_operands`)."""
    xp = namespace(*xs)
    values, pos = [], 0
    for leaf in leaves:
        if leaf[0] == "cmp":
            values.append(xp.broadcast_to(COMPARE[leaf[1]](xs[pos], xs[pos + 1]), out))
            pos += 2
        else:
            values.append(xp.broadcast_to(xp.astype(xp.asarray(xs[pos]), xp.bool), out))
            pos += 1
    return values


BOOLEAN = {"and": operator.and_, "or": operator.or_, "xor": operator.xor}
"""The logical operators on boolean arrays of any library (numpy's ``&`` is logical_and)."""


def _evaluate(tree, leaves: list):
    kind = tree[0]
    if kind == "leaf":
        return leaves[tree[1]]
    if kind == "not":
        return ~_evaluate(tree[1], leaves)
    return BOOLEAN[kind](_evaluate(tree[1], leaves), _evaluate(tree[2], leaves))


def _where_logic_impl(*xs, tree, leaves):
    xp, xs = _operands(*xs)
    out = tuple(np.broadcast_shapes(*(tuple(np.shape(x)) for x in xs)))
    return xp.where(_evaluate(tree, _leaf_values(xs, leaves, out)), xs[-2], xs[-1])


where_logic_p = Primitive("where_logic", _where_logic_impl, array_api=True)


@where_logic_p.defrule
def where_logic_rule(xs, dxs, tree, leaves):
    """``where`` of a logical tree of comparisons: each tied comparison takes the side its
    ray enters (`ray_compare`); the output jumps, and is refused, where ``a != b`` and the
    tree's value changes when the tied comparisons that are not equalities near the point
    take other truth values (each can: both sides of such a tie are entered by some ray)."""
    xp, arrays = _operands(*xs)
    out = tuple(np.broadcast_shapes(*(tuple(np.shape(x)) for x in xs)))
    a, b = (xp.broadcast_to(x, out) for x in arrays[-2:])
    ans = _where_logic_impl(*xs, tree=tree, leaves=leaves)
    same = _same_node(dxs[-2], dxs[-1])
    # free: tied entries that can take either value; equal: tied entries equal along the ray
    ray, free, equal, open_, pos, beyond = [], [], [], None, 0, []
    for leaf, value in zip(leaves, _leaf_values(arrays, leaves, out), strict=True):
        width = 2 if leaf[0] == "cmp" else 1
        lhs, dl = xs[pos], dxs[pos]
        rhs, dr = (xs[pos + 1], dxs[pos + 1]) if width == 2 else (None, None)
        tie = None if width == 1 or (dl.is_zero and dr.is_zero) else xp.broadcast_to(
            arrays[pos] == arrays[pos + 1], out)
        pos += width
        if tie is None:  # a constant mask, or a comparison of constants: no tie to decide
            ray.append(value)
            free.append(None)
            equal.append(None)
            beyond.append(None)
            continue
        side, on_ray = _condition_side(lhs, dl, rhs, dr, (xs[-2], dxs[-2], xs[-1], dxs[-1]),
                                       same)
        beyond.append(None if on_ray is None else from_host(
            np.array(np.broadcast_to(on_ray, out)), a))
        ray.append(xp.where(tie, OPERATORS[leaf[1]](side, 0), value))
        free.append(tie & (side != 0))
        equal.append(tie & (side == 0))
        open_ = tie & (side == 0) if open_ is None else open_ | (tie & (side == 0))
    cond_ray = _evaluate(tree, ray)
    on_ray = [i for i, m in enumerate(beyond) if m is not None]
    if on_ray and not same:  # ties the ray stays on that change the tree's value
        _refuse_parting_on_the_ray(
            np.asarray(to_host(_changes(tree, ray, beyond, on_ray, cond_ray))),
            (xs[-2], dxs[-2], xs[-1], dxs[-1]), out, "where(condition, a, b)")
    tied = [i for i, m in enumerate(free) if m is not None]
    if tied:  # which tied comparisons, taking another value, change the tree's value
        jump = _changes(tree, ray, free, tied, cond_ray) & (a != b)
        refuse_where(jump, lambda: _where_jump(
            "where(condition, a, b) jumps: the condition combines comparisons that are tied "
            "(lhs == rhs) at", jump, a, b,
            "where its value changes with their sides and a != b"))
        _count_open_sides(open_, a, b, dxs, same)
        # comparisons equal along the ray: a jump unless equal near the point too
        _equal_along_the_ray(ans, _changes(tree, ray, equal, tied, cond_ray) & (a != b),
                             (a, b))
    maps = [None] * (len(xs) - 2)
    return ans, FanIn(*maps, Diagonal(cond_ray, tuple(np.shape(xs[-2])), out),
                      Diagonal(~cond_ray, tuple(np.shape(xs[-1])), out))


def _changes(tree, ray: list, flips: list, tied: list[int], cond_ray):
    """Where the tree's value changes when the tied comparisons take other truth values at
    their entries ``flips[i]`` (every combination: a handful of leaves)."""
    xp = namespace(cond_ray)
    changed = xp.zeros_like(cond_ray)
    for bits in range(1 << len(tied)):
        leaf_vals = list(ray)
        for j, i in enumerate(tied):
            leaf_vals[i] = xp.where(flips[i], bool(bits >> j & 1), ray[i])
        changed = changed | (_evaluate(tree, leaf_vals) != cond_ray)
    return changed


def _condition_tree(cond, operands: list, leaves: list):
    """``cond`` as a tree over comparisons and constants (their operands appended to
    ``operands``, their kinds to ``leaves``), or None if some part is another traced value."""
    cmp = comparison_of(cond)
    if cmp is not None:
        op, lhs, rhs = cmp
        operands += [lhs, rhs]
        leaves.append(("cmp", op))
        return ("leaf", len(leaves) - 1)
    if not is_traced(cond):
        operands.append(np.asarray(cond, dtype=bool) if is_host(cond) else cond)
        leaves.append(("const",))
        return ("leaf", len(leaves) - 1)
    made = operation_of(cond)
    kind = next((k for k, p in logical_prims.items() if made and made[0] is p), None)
    if kind is None:
        return None
    subtrees = [_condition_tree(x, operands, leaves) for x in made[1]]
    return None if None in subtrees else (kind, *subtrees)


def where(cond, a=None, b=None):
    """``where(cond, a, b)``; with ``cond`` a comparison of traced values, or a logical
    combination of them (``&``, ``|``, ``^``, ``~``), ties follow the direction, and a jump
    (``a != b`` where the tied condition changes) raises.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.sum(np.where((x > 0) & (x < 2), x, 0.0)))(np.array([1.0, 3.0]))
    array([1., 0.])
    """
    if a is None or b is None:
        raise UnsupportedError("numpy.where with one argument (nonzero) on traced arrays: the "
                               "positions are integers, with nothing to differentiate; call "
                               "it on plain arrays, outside the differentiated function")
    cmp = comparison_of(cond)
    if cmp is not None:
        op, lhs, rhs = cmp
        return where_cmp_p(lhs, rhs, a, b, op=op)
    if is_traced(cond):
        operands, leaves = [], []
        tree = _condition_tree(cond, operands, leaves)
        if tree is not None:
            return where_logic_p(*operands, a, b, tree=tree, leaves=tuple(leaves))
        # another traced boolean: its value is the side the ray enters; a jump above it that
        # reaches the output is checked for continuity by the engine (`record_jump`)
    return select_p(np.asarray(cond, dtype=bool) if is_host(cond) else cond, a, b)


# ----- numpy dispatch -----

register_numpy(np.maximum, maximum)
register_numpy(np.minimum, minimum)
register_numpy(np.absolute, absolute)
register_numpy(np.where, where)
register_numpy(np.clip, clip)
register_method("clip", clip)
for _op, _fn in COMPARISONS.items():
    register_numpy(_fn, comparison_prims[_op])
for _np_fn, _fn in [(np.logical_and, logical_and), (np.logical_or, logical_or),
                    (np.logical_xor, logical_xor), (np.logical_not, logical_not)]:
    register_numpy(_np_fn, _fn)
for _np_fn, _kind in [(np.bitwise_and, "and"), (np.bitwise_or, "or"), (np.bitwise_xor, "xor"),
                      (np.invert, "not")]:
    register_numpy(_np_fn, _bitwise(_kind, _np_fn))

abs = absolute

__all__ = [  # logical_* are numpy's (np.logical_and, &): boolean, with no ASD routine
    "abs", "absolute", "clip", "hard_sigmoid", "hardtanh", "hinge", "huber", "leaky_relu",
    "maximum", "minimum", "piecewise_polynomial", "relu", "relu6", "soft_threshold", "where",
]
