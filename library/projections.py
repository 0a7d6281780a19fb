"""Euclidean projections onto convex sets, with limiting Jacobians chosen by the direction.

Each projection is ONE primitive. Its rule returns the projection and, as linear map, the
limiting Jacobian along the tangent ``d`` of its input: ``lim ∇P(x + δd)`` as δ → 0+. Away
from kinks that is the ordinary Jacobian. At a kink the rule asks for the tangent and takes
the piece the ray ``x + δd`` enters:

- polyhedral sets (orthants, box, halfspace, simplices, l1 ball): the active set along the
  ray; for the simplex-like sets the threshold system ``u_i - τ(u)`` solved on the ray;
- l2 ball and second-order cones: the sign of the constraint (``|x|² - r²``, ``t² - |z|²``)
  along the ray (a tangent to a curved boundary leaves the set at second order);
- PSD cone and nuclear ball: the tied eigenvalues split along the ray as ``δμ + δ²ν``
  (see ``library/spectral.py``), which fixes the limit eigenbasis and which directions
  enter the cone.

A float test with the scale-aware tolerance ``8 n eps scale`` only filters: clear of a kink the
float comparison decides; at a near-tie the tied quantity is decided exactly along the ray
(`ray_signs`: the float value and tangent in rational arithmetic, then the exact series of the
input, `asd.core.ties.input_series`). Only eigenvalue clusters of a non-diagonal matrix (``eigh``
rounds), the cones' apex and inputs whose series cannot be computed are decided by the
tolerance, and each such decision is reported (``record_tie_decision("tolerance", count)``).

No rule branches on a tie itself: the orthants and boxes state their bounds to `ray_compare`,
the halfspace and the l2 ball their constraint to `ray_positive`, and the other sets their
near-ties to `exact_where` (the exact path above, run eagerly). In a staged sweep
(`asd.core.staged`) the orthants, boxes, halfspace and l2 ball decide by first order along
``v, w1, …`` as array operations (the constraint's value and slopes certified exact by
error-free transformations, `exact_dot`), the eager element wherever ``v`` decides; the other
sets' near-ties, which need the exact path, are counted undecided.
Where the ray stays on a kink to every order, the rule takes the side "inside the set"
(identity on that piece), the ``>=`` side of DESIGN.md. Every choice is a limit of Jacobians at
nearby points, so it is an element of the Clarke Jacobian, symmetric with eigenvalues in [0, 1].
Jacobians are structured: diagonal, diagonal plus low rank, or an action in an eigenbasis;
never a dense n x n matrix.

Set parameters (``a``, ``b``, ``radius``) are constants; only ``box`` also differentiates
with respect to its bounds. Matrix inputs of ``psd`` are symmetrized: ``psd(X)`` projects
``(X + X.T) / 2``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from asd.errors import ASDError, ShapeError, UndecidedTieError, UnsupportedError
from asd.extend import (
    Closure,
    Diagonal,
    FanIn,
    FixedTangent,
    Primitive,
    Series,
    SeriesUnavailable,
    Zero,
    ZeroTangent,
    identity,
    input_series,
    leading_vector,
    line,
    ray_compare,
    record_tie_decision,
    refuse_where,
)

from .spectral import (
    ORDER,
    RayMatrix,
    clusters,
    eigh_ties,
    embed,
    exact_where,
    gradient_map,
    lex_tangents,
    limit_eigh,
    pow2_scale,
    reach,
    sweep_mode,
    sym,
    tie_tolerance,
    vnorm,
)

SQRT_HALF = float(np.sqrt(0.5))


# ----- helpers -----

def _static(name: str, dxs, labels: tuple[str, ...]) -> None:
    """Refuse a set parameter that depends on the differentiated arguments."""
    for dx, label in zip(dxs, labels, strict=True):
        fixed_zero = isinstance(dx, FixedTangent) and not np.any(dx())
        if not getattr(dx, "is_zero", False) and not fixed_zero:
            raise UnsupportedError(
                f"projections.{name}: the set parameter {label!r} depends on the differentiated "
                f"arguments, but asd differentiates {name} with respect to x only. Pass "
                f"asd.stop_gradient({label}) if it is a constant by intent, or write the "
                "projection as a program of library primitives."
            )


def _radius(r, name: str) -> float:
    if np.ndim(r) != 0:
        raise ShapeError(f"projections.{name}: radius must be a scalar, got shape {np.shape(r)}")
    r = float(r)
    if not np.isfinite(r) or r < 0:
        raise ASDError(f"projections.{name}: radius = {r} must be finite and >= 0 (the set "
                       "is empty otherwise)")
    return r


def _floats(x) -> np.ndarray:
    """``x`` as floats; object arrays (exact series along the ray, ``input_series``) pass through so
    that the polyhedral projections' impls decide degenerate ties exactly."""
    x = np.asarray(x)
    return x if np.issubdtype(x.dtype, np.floating) or x.dtype == object else x.astype(float)


def _tail_sum(t: np.ndarray, nd: int) -> np.ndarray:
    """Sum over the last ``nd`` axes, keeping them (a leading batch axis survives)."""
    return np.sum(t, axis=tuple(range(np.ndim(t) - nd, np.ndim(t))), keepdims=True)


def _symmetric(push: Callable, shape: tuple) -> Closure:
    """A self-adjoint map: the pull is the push."""
    return Closure(push, push, shape, shape)


def _active_map(active: np.ndarray, signs: np.ndarray | None, shape: tuple) -> Closure:
    """``t -> m*t - m*s <m*s, t> / k``: the Jacobian of a soft threshold with a sum constraint.

    ``m`` is the active mask, ``s`` the signs (l1 ball) or ones (simplex), ``k = sum(m)``;
    the rank-one part keeps ``sum(s * P)`` fixed.
    """
    m = active.reshape(shape).astype(float)
    ms = m if signs is None else m * signs.reshape(shape)
    k = float(m.sum())
    nd = len(shape)

    def active_push(t):
        out = m * t
        return out - ms * (_tail_sum(ms * t, nd) / k) if k else out

    return _symmetric(active_push, shape)


def _rank_one_map(w: np.ndarray, scale: float, shape: tuple) -> Closure:
    """``t -> scale * (t - w <w, t>)`` for a unit vector ``w`` (normal cone directions)."""
    nd = len(shape)

    def rank_one_push(t):
        return scale * (t - w * _tail_sum(w * t, nd))

    return _symmetric(rank_one_push, shape)


def threshold(u: np.ndarray, r: float) -> float:
    """``τ`` with ``sum(max(u - τ, 0)) = r`` (``r > 0``), by one sort."""
    s = np.sort(u)[::-1]
    tau_k = (np.cumsum(s) - r) / np.arange(1, s.size + 1)
    tau = tau_k[np.flatnonzero(np.asarray(s > tau_k, dtype=bool))[-1]]
    return tau if u.dtype == object else float(tau)


def ray_threshold(c_active: np.ndarray, c_tied: np.ndarray) -> float:
    """``τ'`` with ``sum(c_active - τ') + sum(max(c_tied - τ', 0)) = 0``.

    This is the first-order change of the threshold along the ray: the always-active
    coordinates move with slope ``c_active``, the tied ones join when ``c_tied > τ'``.
    """
    s = np.sort(c_tied)[::-1]
    cs = np.concatenate([[0.0], np.cumsum(s)])
    count = c_active.size + np.arange(s.size + 1)
    if count[-1] == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        tau_k = (np.sum(c_active) + cs) / count
    joined = np.count_nonzero(s > tau_k[1:])
    if count[joined] == 0:
        return float(s[0])
    return float(tau_k[joined])


def ray_signs(x: np.ndarray, dx, tied: Callable[[np.ndarray], object], count: int) -> np.ndarray:
    """Signs along the ray ``x(x₀ + δv)`` of the quantities ``tied(series of x)``.

    A rule calls this only at a near-tie (its float test within ``tie_tolerance``) and decides
    that tie exactly. First on the straight line ``x + δẋ`` (asking for the tangent, so the
    sweep knows the rule met a tie): its constant and first-order coefficients are exact, so a
    point whose float norm misses the radius by one ulp is decided as the exact arithmetic says.
    Where those vanish, on the exact series of the input (``asd.core.ties.input_series``), whose
    higher coefficients carry its curvature (``u(x) = (1 + x0², x1 - x0²)`` along ``(1, 0)``).
    Where that series cannot be computed (a transcendental ancestor, too large a cone) the
    line's higher orders decide, blind to curvature, and the ``count`` decisions are reported
    as ``"tolerance"`` ones. The series reads the whole lexicographic sequence
    ``[v, w1, ...]`` (the tie contract), so a tie persisting along ``v`` is decided by the next
    direction; sign 0 is left only for a quantity that is zero near the point.
    """
    d = np.asarray(dx(), dtype=float).reshape(x.shape)
    h = np.asarray(tied(line(x, [d])), dtype=object)
    first = np.array([_leading_sign(e, 1) for e in h.flat], dtype=np.int8).reshape(h.shape)
    if np.all(first != 0):
        return first
    try:
        signs = _signs(tied(input_series(x, dx, x.shape)))
        if np.all(signs != 0):
            record_tie_decision("series", count)
            return signs
        # zero along the whole ray: every direction of the lexicographic sequence decides
        record_tie_decision("lexicographic", count)
        return _signs(tied(input_series(x, dx, x.shape, depth=None)))
    except SeriesUnavailable:
        record_tie_decision("tolerance", count)
        return _signs(h)


def _leading_sign(e, order: int) -> int:
    """Sign of the first nonzero coefficient of ``e`` up to ``δ**order`` (0 if none)."""
    if not isinstance(e, Series):
        return int(np.sign(e))
    for k in range(order + 1):
        c = e.coefficient(k)
        if c:
            return 1 if c > 0 else -1
    return 0


def _signs(series: np.ndarray) -> np.ndarray:
    """Sign of each series for small δ > 0 (0 where it vanishes to the truncation order)."""
    return np.array([e.sign() if isinstance(e, Series) else int(np.sign(e))
                     for e in np.ravel(series)], dtype=np.int8).reshape(np.shape(series))


# ----- one scalar switching quantity along the ray, eager or staged -----

_SPLIT = 134217729.0  # 2**27 + 1: Dekker's splitter for float64
_EXACT_RANGE = 2.0 ** 480  # products of split halves stay normal, sums finite, inside it
EPS = float(np.finfo(float).eps)
TINY = float(np.finfo(float).smallest_subnormal)


def _product_error(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``a * b - fl(a * b)``, exactly (Dekker's product, no fused multiply-add needed)."""
    def split(v):
        c = _SPLIT * v
        hi = c - (c - v)
        return hi, v - hi

    ah, al = split(a)
    bh, bl = split(b)
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _in_exact_range(v: np.ndarray) -> np.ndarray:
    """Every entry 0 or of a size where Dekker's split is exact (no overflow, no underflow)."""
    size = np.abs(v)
    return np.all((v == 0) | ((size <= _EXACT_RANGE) & (size >= 1 / _EXACT_RANGE)))


def exact_dot(u, w) -> tuple[np.ndarray, np.ndarray]:
    """``fl(Σ u_i w_i)`` (a sequential sum) and whether it is the exact value: every product
    and every partial sum certified exact by error-free transformations (Dekker's product,
    Knuth's sum), as arrays. The filter a staged sweep reads a switching quantity's sign by
    where its float value is within rounding of 0 (eagerly the exact rationals do)."""
    u, w = (np.asarray(a, dtype=float).reshape(-1) for a in (u, w))
    with np.errstate(all="ignore"):
        p = u * w
        sums = np.cumsum(p)
        prev, nxt = sums[:-1], p[1:]
        step = prev + nxt
        bb = step - prev
        sum_error = (prev - (step - bb)) + (nxt - bb)
        exact = _in_exact_range(u) & _in_exact_range(w) & np.all(_product_error(u, w, p) == 0) \
            & np.all(step == sums[1:]) & np.all(sum_error == 0)
    return (sums[-1] if sums.size else np.float64(0.0)), exact


def certain_sign(u, d) -> tuple[np.ndarray, np.ndarray]:
    """``fl(Σ u_i d_i)`` and whether its sign is the exact sum's: its size beats the bound
    ``γ Σ|u_i d_i|`` on the rounding of a float dot product (plus what underflow can lose)."""
    u, d = (np.asarray(a, dtype=float).reshape(-1) for a in (u, d))
    n = u.size
    with np.errstate(all="ignore"):
        s = np.sum(u * d)
        bound = 2.0 * (n + 2) * EPS * np.sum(np.abs(u * d)) + (n + 2) * TINY
    return s, np.isfinite(s) & (np.abs(s) > bound)


def slopes(u, dx) -> list[tuple]:
    """``(s, certain, zero)`` of ``s = <u, ẋ>`` along each of ``v, w1, …`` (`lex_tangents`):
    whether its float sign is the exact one, and whether it is certified exactly 0."""
    out = []
    for t in lex_tangents(dx):
        s, certain = certain_sign(u, t)
        total, exact = exact_dot(u, t)
        out.append((s, certain, exact & (total == 0)))
    return out


def ray_positive(value, near, dx, exact: Callable[[], object], staged_keys: Callable[[], tuple],
                 name: str) -> np.ndarray:
    """Whether a scalar switching quantity ``h`` of the input (its float ``value``) is positive
    along the ray, as a 0-d bool array; ``near`` says its float value is within rounding of 0.

    Clear of the tie the value decides. At a near-tie an eager sweep decides exactly
    (``exact()``: `ray_signs`, the line's rationals and then the input's series); a staged one
    reads ``staged_keys() -> (h0, h0_exact, slopes)`` (`slopes` of ``h`` along ``v, w1, …``):
    the value where it is certified exact and nonzero (as the eager rationals decide), else
    where ``h`` is certified 0 the first slope whose sign is certain, every one before it
    certified 0 (first order along ``v``: the eager decision; along a later direction: the
    lexicographic first-order element, as `ray_compare` decides staged), and counts the rest
    undecided (unless no input moves to first order)."""
    side = np.asarray(value > 0)
    mode = sweep_mode(dx)

    def undecided():
        return UndecidedTieError(f"projections.{name}: a near-tie first order cannot decide")

    if not mode:
        return exact_where(near, lambda: np.asarray(exact()), lambda: side)
    if mode == "values":
        refuse_where(near, undecided)
        return side
    h0, h0_exact, levels = staged_keys()
    decided = h0_exact & (h0 != 0)
    key = h0 > 0
    open_ = h0_exact & (h0 == 0)  # still tied: read the next slope
    for s, certain, zero in levels:
        key = np.where(open_ & certain, s > 0, key)
        decided = decided | (open_ & certain)
        open_ = open_ & zero
    side = np.where(near & decided, key, side)
    open_ = near & ~decided
    moves = reach(dx)
    if moves is not None:
        open_ = open_ & np.any(np.asarray(moves) != 0)
    refuse_where(open_, undecided)
    return np.asarray(side)


def _select(side, project: Callable, shape: tuple) -> Closure:
    """The self-adjoint map ``t -> project(t)`` where ``side`` holds, else the identity (a
    projection's two pieces, the side chosen by the sweep: no branch on it)."""
    def select_push(t):
        return np.where(side, project(t), t)

    return _symmetric(select_push, shape)


# ----- trivial sets: {0} and the whole space -----

zeros_p = Primitive("proj_zeros", lambda x: np.zeros_like(_floats(x)))


@zeros_p.defrule
def zeros_rule(xs, dxs):
    x = _floats(xs[0])
    return np.zeros_like(x), Zero(x.shape, x.shape)


reals_p = Primitive("proj_reals", lambda x: _floats(x).copy())


@reals_p.defrule
def reals_rule(xs, dxs):
    x = _floats(xs[0])
    return x.copy(), identity(x.shape)


# ----- orthants and boxes (elementwise) -----

nonneg_p = Primitive("proj_nonneg", lambda x: np.maximum(_floats(x), 0))


def _side(a, da, b, db, sign: int) -> np.ndarray:
    """Where ``a - b`` has the sign ``sign`` or is tied at 0 along the ray (`ray_compare`:
    values, then the tie contract), and neither is NaN (a NaN entry takes neither side)."""
    s = ray_compare(a, da, b, db)
    with np.errstate(invalid="ignore"):
        return ((s == sign) | ((s == 0) & (a == b))).astype(bool, copy=False)


@nonneg_p.defrule
def nonneg_rule(xs, dxs):
    x = _floats(xs[0])
    slope = _side(x, dxs[0], 0.0, None, 1)
    return np.maximum(x, 0), Diagonal(slope.astype(x.dtype), x.shape)


nonpos_p = Primitive("proj_nonpos", lambda x: np.minimum(_floats(x), 0))


@nonpos_p.defrule
def nonpos_rule(xs, dxs):
    x = _floats(xs[0])
    slope = _side(x, dxs[0], 0.0, None, -1)
    return np.minimum(x, 0), Diagonal(slope.astype(x.dtype), x.shape)


def _check_box(lo, hi, name: str) -> None:
    refuse_where(np.asarray(lo) > np.asarray(hi), lambda: ASDError(
        f"projections.{name}: some lower bound exceeds its upper bound, so the box is empty; "
        "pass lo <= hi elementwise"))


def _box_impl(x, lo, hi):
    _check_box(lo, hi, "box")
    return np.minimum(np.maximum(_floats(x), lo), hi)


def box_pieces(x, lo, hi, dxs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks ``(inside, at_lo, at_hi)`` of the piece the ray enters, in the output's shape.

    A tie ``x == lo`` follows the sign of ``x - lo`` along the ray (inside when >= 0; tangents
    first, then exact series: `ray_compare`), ``x == hi`` that of ``hi - x``; a degenerate
    box ``lo == hi`` is the constant ``lo``.
    """
    out = np.broadcast_shapes(np.shape(x), np.shape(lo), np.shape(hi))
    lob, hib = np.broadcast_to(lo, out), np.broadcast_to(hi, out)
    above = np.broadcast_to(_side(x, dxs[0], lo, dxs[1], 1), out)
    below = np.broadcast_to(_side(hi, dxs[2], x, dxs[0], 1), out)
    flat = lob == hib
    inside = above & below & ~flat
    at_lo = (~above & ~flat) | flat
    return inside, at_lo & ~inside, ~inside & ~at_lo


box_p = Primitive("proj_box", _box_impl)


@box_p.defrule
def box_rule(xs, dxs):
    x, lo, hi = _floats(xs[0]), np.asarray(xs[1], float), np.asarray(xs[2], float)
    _check_box(lo, hi, "box")
    ans = np.minimum(np.maximum(x, xs[1]), xs[2])
    out = np.shape(ans)
    inside, at_lo, at_hi = box_pieces(x, lo, hi, dxs)
    return ans, FanIn(Diagonal(inside.astype(float), x.shape, out),
                      Diagonal(at_lo.astype(float), lo.shape, out),
                      Diagonal(at_hi.astype(float), hi.shape, out))


linf_ball_p = Primitive(
    "proj_linf_ball", lambda x, r: np.clip(_floats(x), -_radius(r, "linf_ball"), r))


@linf_ball_p.defrule
def linf_ball_rule(xs, dxs):
    x, r = _floats(xs[0]), _radius(xs[1], "linf_ball")
    _static("linf_ball", dxs[1:], ("radius",))
    lo, hi = np.full(x.shape, -r), np.full(x.shape, r)
    zero = ZeroTangent(x.shape, x.dtype)  # the bounds are constants
    inside, _, _ = box_pieces(x, lo, hi, (dxs[0], zero, zero))
    return np.clip(x, -r, r), FanIn(Diagonal(inside.astype(x.dtype), x.shape), None)


# ----- hyperplane and halfspace -----

def _normal(a, x, name: str) -> tuple[np.ndarray, float]:
    a = np.asarray(a, dtype=float)
    if a.shape != np.shape(x):
        raise ShapeError(f"projections.{name}: a has shape {a.shape} but x has shape "
                         f"{np.shape(x)}; they must match")
    nrm = float(np.linalg.norm(a))
    if nrm == 0:
        raise ASDError(f"projections.{name}: a = 0 does not define a {name}; pass a nonzero "
                       "normal vector")
    return a, nrm


def _hyperplane_impl(x, a, b):
    x = _floats(x)
    a, nrm = _normal(a, x, "hyperplane")
    return (x - (np.sum(a * x) - b) / nrm**2 * a).astype(x.dtype, copy=False)


hyperplane_p = Primitive("proj_hyperplane", _hyperplane_impl)


@hyperplane_p.defrule
def hyperplane_rule(xs, dxs):
    x = _floats(xs[0])
    _static("hyperplane", dxs[1:], ("a", "b"))
    a, nrm = _normal(xs[1], x, "hyperplane")
    return _hyperplane_impl(x, a, xs[2]), FanIn(_rank_one_map(a / nrm, 1.0, x.shape), None,
                                                None)


def _halfspace_impl(x, a, b):
    x = _floats(x)
    a, nrm = _normal(a, x, "halfspace")
    h = np.sum(a * x) - b  # a series along the ray where x holds them (`distance`)
    h = max(h, 0) if x.dtype == object else max(float(h), 0.0)
    return (x - h / nrm**2 * a).astype(x.dtype, copy=False)


halfspace_p = Primitive("proj_halfspace", _halfspace_impl)


@halfspace_p.defrule
def halfspace_rule(xs, dxs):
    """Projects where ``h = <a, x> - b`` is positive along the ray; a near-tie (within rounding
    of the float ``h``) is decided by the exact series of ``h`` (`ray_signs`)."""
    x = _floats(xs[0])
    _static("halfspace", dxs[1:], ("a", "b"))
    a, nrm = _normal(xs[1], x, "halfspace")
    b = float(xs[2])
    h = np.sum(a * x) - b
    near = np.abs(h) <= tie_tolerance(x.size, np.sum(np.abs(a * x)) + abs(b))

    def halfspace_keys():
        h0, h0_exact = exact_dot(np.append(a, -b), np.append(x, 1.0))
        return h0, h0_exact, slopes(a, dxs[0])

    project = ray_positive(h, near, dxs[0],
                           lambda: ray_signs(x, dxs[0], lambda s: np.sum(a * s) - b, 1) > 0,
                           halfspace_keys, "halfspace")
    lin = _select(project, _rank_one_map(a / nrm, 1.0, x.shape), x.shape)
    return _halfspace_impl(x, a, b), FanIn(lin, None, None)


# ----- l2 ball -----

def _l2_impl(x, r):
    x, r = _floats(x), _radius(r, "l2_ball")
    nrm = vnorm(x)
    return np.where(nrm > r, x * (r / max(nrm, r)), x)


l2_ball_p = Primitive("proj_l2_ball", _l2_impl)


def l2_leaves(x: np.ndarray, r: float, dx) -> np.ndarray:
    """Whether the ray leaves the ball (a 0-d bool array): ``h = ||x||² - r²`` positive
    along it. The float norm decides only when it is clear of ``r`` by more than its
    rounding; otherwise the exact series of ``h`` does (a tangent to the sphere leaves at
    second order, a curved input may not), or in a staged sweep the exact value and then
    the first-order slope ``2<x, ẋ>`` where they are certain (`ray_positive`)."""
    nrm = vnorm(x)
    near = np.abs(nrm - r) <= tie_tolerance(x.size, max(nrm, r))

    def l2_keys():
        h0, h0_exact = exact_dot(np.append(x, -r), np.append(x, r))
        return h0, h0_exact, slopes(x, dx)

    return ray_positive(np.asarray(nrm - r), near, dx,
                        lambda: ray_signs(x, dx, lambda s: np.sum(s * s) - Fraction(r) ** 2, 1)
                        > 0, l2_keys, "l2_ball")


@l2_ball_p.defrule
def l2_ball_rule(xs, dxs):
    x, r = _floats(xs[0]), _radius(xs[1], "l2_ball")
    _static("l2_ball", dxs[1:], ("radius",))
    if r == 0:
        return np.zeros_like(x), FanIn(Zero(x.shape, x.shape), None)
    nrm = np.where(vnorm(x) > 0, vnorm(x), 1.0)  # 1 where x = 0: inside, never projected
    leaves = l2_leaves(x, r, dxs[0])
    scaled = _rank_one_map(x / nrm, np.minimum(r / nrm, 1.0), x.shape)
    return _l2_impl(x, r), FanIn(_select(leaves, scaled, x.shape), None)


# ----- simplex, standard simplex, l1 ball (soft thresholds with a sum constraint) -----

def _simplex_impl(x, r):
    x, r = _floats(x), _radius(r, "simplex")
    if r == 0:
        return np.zeros_like(x)
    u = x.reshape(-1)
    return np.maximum(x - threshold(u, r), 0)


simplex_p = Primitive("proj_simplex", _simplex_impl)


@simplex_p.defrule
def simplex_rule(xs, dxs):
    """Active set ``u_i > τ`` along the ray. Near-ties (within rounding of the float
    threshold) are decided by the threshold system solved on the exact series of the input:
    the same sort and running sums as the float ``threshold``, on series ordered as the ray
    orders them. An entry tied to every order counts as active (the ``>=`` side)."""
    x, r = _floats(xs[0]), _radius(xs[1], "simplex")
    _static("simplex", dxs[1:], ("radius",))
    if r == 0 or x.size == 0:
        return np.zeros_like(x), FanIn(Zero(x.shape, x.shape), None)
    u = x.reshape(-1)
    tau = threshold(u, r)
    h = u - tau
    tol = tie_tolerance(u.size, max(float(np.max(np.abs(u))), r))
    active, tied = h > tol, np.abs(h) <= tol

    def simplex_tied(s):
        s = s.reshape(-1)
        return s - threshold(s, r)

    active = exact_where(
        tied, lambda: ray_signs(x, dxs[0], simplex_tied, int(np.count_nonzero(tied))) >= 0,
        lambda: active)
    return np.maximum(x - tau, 0), FanIn(_active_map(active, None, x.shape), None)


def _standard_simplex_impl(x, r):
    x, r = _floats(x), _radius(r, "standard_simplex")
    p = np.maximum(x, 0)
    if p.sum() <= r:
        return p
    return np.maximum(x - threshold(x.reshape(-1), r), 0) if r > 0 else np.zeros_like(x)


standard_simplex_p = Primitive("proj_standard_simplex", _standard_simplex_impl)


@standard_simplex_p.defrule
def standard_simplex_rule(xs, dxs):
    """Uncoupled (``max(x, 0)``) while ``sum(max(x, 0)) <= r``, else the simplex's threshold.
    Near-ties of the sum or of the threshold are decided on the exact series of the input."""
    x, r = _floats(xs[0]), _radius(xs[1], "standard_simplex")
    _static("standard_simplex", dxs[1:], ("radius",))
    if r == 0 or x.size == 0:
        return np.zeros_like(x), FanIn(Zero(x.shape, x.shape), None)
    u = x.reshape(-1)
    tol = tie_tolerance(u.size, max(float(np.max(np.abs(u))), r))
    excess = float(np.sum(np.maximum(u, 0))) - r
    coupled = excess > 0
    tau = threshold(u, r) if coupled else 0.0
    h = u - tau
    tied = np.abs(h) <= tol

    def standard_simplex_tied(s):
        s = s.reshape(-1)
        excess = np.sum(np.maximum(s, 0)) - r
        rest = s - threshold(s, r) if excess > 0 else s
        return np.concatenate([[excess], rest])

    def standard_simplex_exact():
        signs = ray_signs(x, dxs[0], standard_simplex_tied, max(int(np.count_nonzero(tied)), 1))
        return signs[0] > 0, signs[1:] >= 0

    coupled, active = exact_where(np.append(tied, abs(excess) <= tol), standard_simplex_exact,
                                  lambda: (coupled, h > 0))
    ans = np.maximum(x - tau, 0)
    lin = _active_map(active, None, x.shape) if coupled else Diagonal(
        active.reshape(x.shape).astype(float), x.shape)
    return ans, FanIn(lin, None)


def _l1_impl(x, r):
    x, r = _floats(x), _radius(r, "l1_ball")
    a = np.abs(x)
    if a.sum() <= r:
        return x.copy()
    if r == 0:
        return np.zeros_like(x)
    return np.sign(x) * np.maximum(a - threshold(a.reshape(-1), r), 0)


l1_ball_p = Primitive("proj_l1_ball", _l1_impl)


@l1_ball_p.defrule
def l1_ball_rule(xs, dxs):
    """Soft threshold of ``|x|`` with the signs of ``x``, or the identity inside the ball.
    Near-ties of ``||x||_1 - r`` or of the threshold are decided on the exact series of the
    input: inside when ``||x(δ)||_1 <= r`` along the ray, else the active set of ``|x(δ)|``."""
    x, r = _floats(xs[0]), _radius(xs[1], "l1_ball")
    _static("l1_ball", dxs[1:], ("radius",))
    if r == 0 or x.size == 0:
        return np.zeros_like(x), FanIn(Zero(x.shape, x.shape), None)
    u = x.reshape(-1)
    a = np.abs(u)
    tol = tie_tolerance(u.size, max(float(np.max(a)), r))
    excess = float(a.sum()) - r
    ans = _l1_impl(x, r)
    if excess < -tol:
        return ans, FanIn(identity(x.shape), None)
    tau = threshold(a, r) if excess > 0 else 0.0
    h = a - tau
    tied = np.abs(h) <= tol

    def l1_tied(s):
        s = s.reshape(-1)
        a = np.abs(s)
        return np.concatenate([[np.sum(a) - r], s, a - threshold(a, r)])

    def l1_exact():
        out = ray_signs(x, dxs[0], l1_tied, max(int(np.count_nonzero(tied)), 1))
        if out[0] <= 0:  # the ray stays in the ball
            return ans, FanIn(identity(x.shape), None)
        signs, active = out[1:u.size + 1].astype(float), out[u.size + 1:] >= 0
        return ans, FanIn(_active_map(active, signs, x.shape), None)

    return exact_where(np.append(tied, excess <= tol), l1_exact, lambda: (
        ans, FanIn(_active_map(h > 0, np.sign(u), x.shape), None)))


# ----- second-order cones -----

def _vector(x, name: str, min_size: int) -> np.ndarray:
    x = _floats(x)
    if x.ndim != 1 or x.size < min_size:
        raise ShapeError(f"projections.{name} needs a vector of length >= {min_size}, got "
                         f"shape {x.shape}")
    return x


def _soc_value(x: np.ndarray) -> np.ndarray:
    t, z = x[0], x[1:]
    nz = float(np.linalg.norm(z))
    if nz <= t:
        return x.copy()
    if nz <= -t:
        return np.zeros_like(x)
    return ((t + nz) / 2 * np.concatenate([[1.0], z / nz])).astype(x.dtype, copy=False)


def _soc_between(w: np.ndarray, alpha: float, beta: float) -> Callable:
    """Jacobian between the cone and its polar: ``½[[1, wᵀ], [w, 2αI - 2βwwᵀ]]``."""

    def soc_push(v):
        v0, vz = v[..., :1], v[..., 1:]
        wz = np.sum(w * vz, axis=-1, keepdims=True)
        return np.concatenate([(v0 + wz) / 2, v0 * w / 2 + alpha * vz - beta * w * wz], axis=-1)

    return soc_push


def _soc_identity(v):
    return v


def _soc_zero(v):
    return np.zeros_like(v)


def soc_jacobian(x: np.ndarray, tangent: Callable[[], np.ndarray], ray_h: Callable[[], int],
                 depth: int = 0) -> Callable:
    """Push function of the limiting Jacobian of the SOC projection at ``x`` along the tangent.

    Interior, polar interior and the region between are smooth. On the cone's boundary
    ``t = |z|`` (and on the polar's, ``-t = |z|``) the ray leaves into the region between
    exactly when ``h = t² - |z|²`` turns negative along it; ``ray_h()`` gives that sign from
    the exact series of the input (`ray_signs`), so a tangent to the boundary (which leaves
    at second order) and a curved input are both decided exactly. At the apex the projection
    is positively homogeneous, so the Jacobian at ``δd`` is the one at ``d`` (itself resolved
    along ``d``, first order only: reported as a tolerance decision). Those are decided on
    the host (`exact_where`); a staged sweep takes the region the values give and counts them.
    """
    t, z = float(x[0]), x[1:]
    nz = vnorm(z)
    tol = tie_tolerance(x.size, max(abs(t), nz))
    near = (nz - abs(t) <= tol) & (t - nz <= tol) & (-t - nz <= tol)
    return exact_where(near, lambda: _soc_tied(x, tangent, ray_h, depth),
                       lambda: _soc_region(t, z, nz))


def _soc_region(t: float, z: np.ndarray, nz: float) -> Callable:
    """The push of the region ``(t, z)`` lies in by its values (the cone's side at a tie)."""
    if nz > abs(t):
        return _soc_between(z / nz, (t + nz) / (2 * nz), t / (2 * nz))
    return _soc_identity if t >= 0 else _soc_zero


def _soc_tied(x: np.ndarray, tangent: Callable[[], np.ndarray], ray_h: Callable[[], int],
              depth: int) -> Callable:
    """`soc_jacobian` on the boundary of the cone or of its polar, or at the apex: the exact
    path (the sign of ``h`` along the ray, the apex's direction), run eagerly."""
    t, z = float(x[0]), x[1:]
    nz = vnorm(z)
    tol = tie_tolerance(x.size, max(abs(t), nz))
    if nz <= tol and abs(t) <= tol:
        d = np.asarray(tangent(), dtype=float).reshape(x.shape)
        if depth or not np.any(d):
            return _soc_identity
        record_tie_decision("tolerance", 1)
        return soc_jacobian(d, lambda: d, lambda: _soc_line_sign(d), depth + 1)
    leaves = ray_h() < 0
    w = z / nz
    if t > 0:  # on the cone's boundary
        return _soc_between(w, 1.0, 0.5) if leaves else _soc_identity
    return _soc_between(w, 0.0, -0.5) if leaves else _soc_zero  # on the polar's boundary


def _soc_line_sign(d: np.ndarray) -> int:
    """Sign of ``h = t² - |z|²`` along the straight ray from the apex's direction ``d``
    (homogeneous: the sign of ``h(d)``, decided exactly on the float ``d``)."""
    s = line(d, [np.zeros_like(d)])
    return int(_signs(s[0] * s[0] - np.sum(s[1:] * s[1:])))


soc_p = Primitive("proj_soc", lambda x: _soc_value(_vector(x, "soc", 1)))


@soc_p.defrule
def soc_rule(xs, dxs):
    x = _vector(xs[0], "soc", 1)

    def soc_h():
        return int(ray_signs(x, dxs[0], lambda s: s[0] * s[0] - np.sum(s[1:] * s[1:]), 1))

    push = soc_jacobian(x, dxs[0], soc_h)
    return _soc_value(x), _symmetric(push, x.shape)


def _rotate(v: np.ndarray) -> np.ndarray:
    """The symmetric orthogonal involution taking the rotated cone to the standard one."""
    u, w = v[..., :1], v[..., 1:2]
    return np.concatenate([(u + w) * SQRT_HALF, (u - w) * SQRT_HALF, v[..., 2:]], axis=-1)


rsoc_p = Primitive("proj_rsoc", lambda x: _rotate(_soc_value(_rotate(_vector(x, "rsoc", 2)))))


@rsoc_p.defrule
def rsoc_rule(xs, dxs):
    x = _vector(xs[0], "rsoc", 2)
    y = _rotate(x)

    def rsoc_h():  # t² - |z|² of the rotated cone is 2uv - |w|², exact without the rotation
        return int(ray_signs(x, dxs[0], lambda s: 2 * s[0] * s[1] - np.sum(s[2:] * s[2:]), 1))

    push = soc_jacobian(y, lambda: _rotate(np.asarray(dxs[0](), dtype=float)), rsoc_h)

    def rsoc_push(v):
        return _rotate(push(_rotate(v)))

    return _rotate(_soc_value(y)), _symmetric(rsoc_push, x.shape)


# ----- spectral sets: PSD cone and nuclear-norm ball -----

def _lex_sign(levels: np.ndarray, tols: np.ndarray) -> np.ndarray:
    """Sign of the first coefficient (row) above its tolerance; 0 when all vanish."""
    nonzero = np.abs(levels) > tols[:, None]
    first = np.argmax(nonzero, axis=0)
    lead = np.take_along_axis(levels, first[None], axis=0)[0]
    return np.where(nonzero.any(axis=0), np.sign(lead), 0.0)


def divided_differences(e: np.ndarray, g: np.ndarray, tols: np.ndarray,
                        fallback: np.ndarray) -> np.ndarray:
    """``lim (g_i - g_j) / (e_i - e_j)`` for eigenvalue expansions ``e`` (levels x n).

    The first level where ``e_i`` and ``e_j`` differ decides; pairs that never differ (one
    cluster) take ``fallback_i and fallback_j``, the derivative of ``g`` there.
    """
    de = e[:, :, None] - e[:, None, :]
    dg = g[:, :, None] - g[:, None, :]
    differ = np.abs(de) > tols[:, None, None]
    level = np.argmax(differ, axis=0)[None]
    num = np.take_along_axis(dg, level, axis=0)[0]
    den = np.take_along_axis(de, level, axis=0)[0]
    some = differ.any(axis=0)
    ratio = np.divide(num, den, out=np.zeros_like(num), where=some)
    return np.where(some, ratio, np.logical_and.outer(fallback, fallback))


def _eigen_map(V: np.ndarray, gamma: np.ndarray, shape: tuple,
               diag_fix: Callable | None = None) -> Callable:
    """``T -> V (Γ ∘ Vᵀ sym(T) V) Vᵀ`` (+ a correction of the diagonal), batched."""

    def eigen_push(T):
        H = V.T @ sym(T) @ V
        out = gamma * H
        if diag_fix is not None:
            idx = np.arange(V.shape[1])
            out[..., idx, idx] += diag_fix(H[..., idx, idx])
        return V @ out @ V.T

    return eigen_push


def _square(X, name: str) -> np.ndarray:
    X = _floats(X)
    if X.ndim != 2 or X.shape[0] != X.shape[1]:
        raise ShapeError(f"projections.{name} needs a square matrix, got shape {X.shape}")
    return X


def _psd_impl(X):
    lam, V = np.linalg.eigh(sym(_square(X, "psd")))
    return (V * np.maximum(lam, 0)) @ V.T


psd_p = Primitive("proj_psd", _psd_impl)


def psd_levels(X: np.ndarray, dx):
    """The eigen-analysis of ``psd`` along the ray: ``(lam, V, levels, tols, null)``.

    Eigenvalues tied at 0 (``null``) enter or leave the cone as their expansion along the ray
    says (`asd.library.spectral.limit_eigh`: first order, then the exact series of the input,
    then the lexicographic directions); ``levels`` stacks ``λ`` and the expansion's
    coefficients in the limit basis ``V`` (only ``λ`` without a tie), each row with its
    rounding tolerance in ``tols``.
    """
    lam, V, tol = eigh_ties(sym(X))
    null = np.abs(lam) <= tol

    def psd_refined():
        labels = clusters(lam, tol)
        refine = np.zeros(labels[-1] + 1, bool)
        refine[labels[null]] = True
        V_, levels, tols = limit_eigh(lam, V, RayMatrix(X, dx, sym), refine, tol=tol,
                                      signs=True)
        return lam, V_, levels, tols, levels[0] == 0

    # without a kink the eigenvalues alone decide
    return exact_where(null, psd_refined, lambda: (lam, V, lam[None], np.array([tol]), null))


@psd_p.defrule
def psd_rule(xs, dxs):
    """Eigenvalues tied at 0 enter the cone or leave it as their expansion along the ray says
    (`psd_levels`); one that is 0 along every direction is 0 near the point, where both
    sides agree (counted as entering)."""
    X = _square(xs[0], "psd")
    lam, V, levels, tols, _ = psd_levels(X, dxs[0])
    ans = (V * np.maximum(lam, 0)) @ V.T
    active = _lex_sign(levels, tols) >= 0
    gamma = divided_differences(levels, levels * active, tols, active)
    return ans, _symmetric(_eigen_map(V, gamma, X.shape), X.shape)


def _threshold_levels(rate: np.ndarray, tau: float, active: np.ndarray, tied: np.ndarray,
                      tols: np.ndarray, boundary: bool):
    """Expansion of the l1 threshold along the ray, and the active set it leaves.

    ``rate[l]`` are the level-``l`` coefficients of the entries' magnitudes. Level by level,
    the entries still tied join when their rate beats the threshold's (``ray_threshold``);
    ties left at every level count as active. On the boundary (``tau = 0``) the first
    nonzero level of the threshold decides between leaving the ball (> 0) and staying in it;
    ``(None, active)`` when the ray stays in.
    """
    taus = [tau]
    undecided = boundary
    for level in range(1, rate.shape[0]):
        t = ray_threshold(rate[level, active], rate[level, tied])
        if undecided:
            if t < -tols[level]:
                return None, active
            undecided = t <= tols[level]
            t = 0.0 if undecided else t
        taus.append(t)
        joins = tied & (rate[level] > t + tols[level])
        tied = tied & (np.abs(rate[level] - t) <= tols[level])
        active = active | joins
    if undecided:
        return None, active
    return np.array(taus), active | tied


def _nuclear_impl(X, r):
    X, r = _floats(X), _radius(r, "nuclear_ball")
    if X.ndim != 2:
        raise ShapeError(f"projections.nuclear_ball needs a matrix, got shape {X.shape}")
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    if s.sum() <= r:
        return X.copy()
    if r == 0:
        return np.zeros_like(X)
    return (U * np.maximum(s - threshold(s, r), 0)) @ Vt


nuclear_ball_p = Primitive("proj_nuclear_ball", _nuclear_impl)


@nuclear_ball_p.defrule
def nuclear_ball_rule(xs, dxs):
    """Through ``E(X) = [[0, X], [Xᵀ, 0]]``: soft-thresholding its eigenvalues ``±σ`` with
    the l1 threshold of radius ``2r`` is ``E`` of the projection, so the l1-ball analysis runs
    on eigenvalues (with the spectral tie analysis), and ``J(Ẋ)`` is the top-right block of
    the embedded Jacobian applied to ``E(Ẋ)`` (self-adjoint, since ``E/√2`` is an isometry).
    """
    X, r = _floats(xs[0]), _radius(xs[1], "nuclear_ball")
    _static("nuclear_ball", dxs[1:], ("radius",))
    if X.ndim != 2:
        raise ShapeError(f"projections.nuclear_ball needs a matrix, got shape {X.shape}")
    m = X.shape[0]
    if r == 0:
        return np.zeros_like(X), FanIn(Zero(X.shape, X.shape), None)
    lam, V, tol = eigh_ties(embed(X))
    a = np.abs(lam)
    excess = float(a.sum()) - 2 * r
    if excess < -tol:
        return X.copy(), FanIn(identity(X.shape), None)
    boundary = excess <= tol
    tau = 0.0 if boundary else threshold(a, 2 * r)
    ans = X.copy() if boundary else ((V * (np.sign(lam) * np.maximum(a - tau, 0))) @ V.T)[:m, m:]
    h = a - tau
    active, tied = h > tol, np.abs(h) <= tol

    def nuclear_exact():
        record_tie_decision("tolerance", int(np.count_nonzero(tied)))
        snapped = np.where(tied, np.sign(lam) * tau, lam)
        V_, levels, tols = limit_eigh(snapped, V, RayMatrix(X, dxs[0], embed),
                                      np.ones(clusters(snapped, tol)[-1] + 1, bool), tol=tol,
                                      signs=True, full=True)
        signs = _lex_sign(levels, tols)
        taus, active_ = _threshold_levels(signs * levels, tau, active, tied, tols, boundary)
        if taus is None:  # the ray stays in the ball
            return X.copy(), FanIn(identity(X.shape), None)
        return _nuclear_map(X, ans, V_, levels, tols, signs, taus, active_)

    return exact_where(np.append(tied, boundary), nuclear_exact, lambda: _nuclear_map(
        X, ans, V, lam[None], np.array([tol]), np.sign(lam), np.array([tau]), active))


def _nuclear_map(X: np.ndarray, ans: np.ndarray, V: np.ndarray, levels: np.ndarray,
                 tols: np.ndarray, signs: np.ndarray, taus: np.ndarray, active: np.ndarray):
    """The projection and its Jacobian, from the embedding's eigen-analysis along the ray
    (the l1 threshold's soft-thresholding of the eigenvalues, `divided_differences`)."""
    m, N = X.shape[0], V.shape[0]
    act = active.astype(float)
    g = act * (levels - signs * taus[:, None])
    gamma = divided_differences(levels, g, tols, active)
    ms = act * signs
    k = float(act.sum())

    def l1_diag_fix(diag):
        return -ms * (np.sum(ms * diag, axis=-1, keepdims=True) / k) if k else 0 * diag

    embedded = _eigen_map(V, gamma, (N, N), l1_diag_fix)

    def nuclear_push(T):
        return embedded(embed(T))[..., :m, m:]

    ans = ans.astype(X.dtype, copy=False)
    return ans, FanIn(_symmetric(nuclear_push, X.shape), None)


# ----- distance to a set -----

RULES = {
    "zeros": zeros_rule, "reals": reals_rule, "nonneg": nonneg_rule, "nonpos": nonpos_rule,
    "box": box_rule, "hyperplane": hyperplane_rule, "halfspace": halfspace_rule,
    "l1_ball": l1_ball_rule, "l2_ball": l2_ball_rule, "linf_ball": linf_ball_rule,
    "simplex": simplex_rule, "standard_simplex": standard_simplex_rule, "soc": soc_rule,
    "rsoc": rsoc_rule, "psd": psd_rule, "nuclear_ball": nuclear_ball_rule,
}
IMPLS = {
    "zeros": zeros_p, "reals": reals_p, "nonneg": nonneg_p, "nonpos": nonpos_p, "box": box_p,
    "hyperplane": hyperplane_p, "halfspace": halfspace_p, "l1_ball": l1_ball_p,
    "l2_ball": l2_ball_p, "linf_ball": linf_ball_p, "simplex": simplex_p,
    "standard_simplex": standard_simplex_p, "soc": soc_p, "rsoc": rsoc_p, "psd": psd_p,
    "nuclear_ball": nuclear_ball_p,
}


def _distance_impl(x, *params, set):
    x = _floats(x)
    return np.linalg.norm(x - IMPLS[set].impl(x, *params))


distance_p = Primitive("distance", _distance_impl)


POLYHEDRAL = frozenset({"zeros", "reals", "nonneg", "nonpos", "box", "hyperplane", "halfspace",
                        "l1_ball", "linf_ball", "simplex", "standard_simplex"})
"""Sets whose projection is piecewise affine, so that its impl, run on the exact series of
the input along the ray, gives the residual's series exactly (balls of radius 0 are ``{0}``)."""


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    return v / vnorm(v)


def _ray_lead(x: np.ndarray, dx) -> np.ndarray | None:
    """The leading coefficient vector of ``x(x₀ + ε₁v + ε₂w₁ + …) - x``: where the input first
    moves along the lexicographic ray (None where it stays put along every direction)."""
    s = input_series(x, dx, x.shape, depth=None)
    c = leading_vector(list((s - x).ravel()))
    return None if c is None else np.array([float(e) for e in c]).reshape(x.shape)


def _polyhedral_residual(set: str, x: np.ndarray, params: tuple, dx) -> np.ndarray | None:
    """The unit limit of ``x(δ) - P(x(δ))`` along the lexicographic ray, exactly: the impl of a
    piecewise-affine projection runs on the input's exact series (ties inside decided as the
    ray decides them); None where the residual is 0 along every direction."""
    s = input_series(x, dx, x.shape, depth=None)
    r = s - IMPLS[set].impl(s, *params)
    c = leading_vector(list(np.ravel(r)))
    return None if c is None else _unit([float(e) for e in c]).reshape(x.shape)


def _cone_escape(x: np.ndarray, dx, rotated: bool) -> np.ndarray | None:
    """``soc`` (``rsoc``, through its rotation ``R``) on its boundary with a zero first-order
    residual: the residual near a boundary point ``(t, z)``, ``t = |z| > 0``, is along the
    normal ``(-1, z/|z|)/√2`` once the ray leaves (``h = t² - |z|²`` negative along it, decided
    exactly by `ray_signs`). At the apex the projection is positively homogeneous: what
    decides is where the ray first moves, its leading vector ``c`` (`_ray_lead`); outside the
    cone the residual is along ``c - P(c)``, on its boundary along the normal at ``c`` if the
    ray leaves there."""
    def h(s):  # t² - |z|², for rsoc 2uv - |w|² (the same quantity, without the rotation)
        return 2 * s[0] * s[1] - np.sum(s[2:] * s[2:]) if rotated else (
            s[0] * s[0] - np.sum(s[1:] * s[1:]))

    def normal(y):
        n = np.concatenate([[-1.0], y[1:] / vnorm(y[1:])]) * SQRT_HALF
        return _rotate(n) if rotated else n

    y = _rotate(x) if rotated else x
    t, nz = float(y[0]), vnorm(y[1:])
    tol = tie_tolerance(y.size, max(abs(t), nz))
    if t - nz > tol:  # inside
        return None
    if nz > tol:  # on the boundary, off the apex
        return normal(y) if ray_signs(x, dx, h, 1) < 0 else None
    c = _ray_lead(x, dx)
    if c is None:
        return None
    exact = [Fraction(float(e)) for e in c]
    hc = h(np.array(exact, dtype=object))
    cy = _rotate(c) if rotated else c
    if hc > 0 and cy[0] > 0:  # the ray moves into the interior
        return None
    if hc == 0 and cy[0] > 0:  # along the boundary: leaves where h turns negative
        return normal(cy) if ray_signs(x, dx, h, 1) < 0 else None
    res = c - (rsoc_p if rotated else soc_p).impl(c)
    return _unit(res) if np.any(res) else None


def _skew(a: np.ndarray) -> np.ndarray:
    return a * 0.5 - np.swapaxes(a, -1, -2) * 0.5


def _psd_escape(x: np.ndarray, dx) -> np.ndarray | None:
    """``psd`` with a zero first-order residual. The residual is ``skew(X) - Σ_(λ_i < 0) λ_i
    q_i q_iᵀ`` (``psd`` projects the symmetric part, so the PSD matrices are a thin set of all
    matrices): order by order along the ray, and then along the lexicographic directions, its
    leading term sums the skew part of the input's series and the zero eigenvalues whose
    expansion (`psd_levels`) first turns negative there. The expansion's rows along ``v`` are
    in the units `limit_eigh` reparametrizes the ray to (``X(a t) / b``), so the skew rows are
    brought to them (exact powers of two); the lexicographic rows are first-order terms in
    the input's own units on both sides."""
    lam, V, levels, tols, null = psd_levels(x, dx)
    ray = RayMatrix(x, dx, _skew)
    skew_v, skew_lex = ray.coefficients(), ray.lex()
    rows = 1 + ORDER + len(skew_lex)
    eig = np.zeros((rows, lam.size))
    eig[:levels.shape[0]] = np.where(np.abs(levels) > tols[:, None], levels, 0.0)[:rows]
    eig[0] = 0.0
    lead = np.argmax(eig != 0, axis=0)
    first = np.take_along_axis(eig, lead[None], axis=0)[0]
    leave = null & (first < 0)
    eb = int(np.frexp(pow2_scale(lam))[1]) - 1
    ec = int(np.frexp(pow2_scale(sym(np.asarray(dx(), dtype=float))))[1]) - 1
    for k in range(1, rows):
        on = leave & (lead == k)
        R = (V[:, on] * eig[k, on]) @ V[:, on].T
        if k <= ORDER and skew_v is not None:  # X_k a^k / b, a = b / cd
            R = R + np.ldexp(skew_v[k - 1], (k - 1) * eb - k * ec)
        elif k > ORDER:
            R = R + skew_lex[k - ORDER - 1]
        if np.any(R):
            return _unit(R)
    return None


def _escape(set: str, x: np.ndarray, params: tuple, dx, proj_map) -> np.ndarray:
    """``lim ∇dist(x(δ))`` at a point of the set: the unit limit of the residual
    ``x(δ) - P(x(δ))`` along the ray, 0 where the ray stays in the set.

    First order: the residual is ``δ (d - P'(x; d))`` (the projection's map along the ray).
    Where that vanishes, the residual's leading term comes from the exact series of the input
    (polyhedral sets, `_polyhedral_residual`) or from the exact sign of the constraint that
    curves the set (`l2_leaves`, `_cone_escape`, `_psd_escape`); each reads the lexicographic
    directions where the ray stays on the set's boundary.
    """
    d = np.asarray(dx(), dtype=float).reshape(x.shape)
    w = d - proj_map(d)
    if vnorm(w) > tie_tolerance(x.size, vnorm(d)):
        return _unit(w)
    radius = float(params[0]) if params and set in BALLS else None
    if set in POLYHEDRAL or radius == 0:
        g = _polyhedral_residual("zeros" if radius == 0 else set, x,
                                 () if radius == 0 else params, dx)
    elif set == "l2_ball":
        g = x / vnorm(x) if l2_leaves(x, radius, dx) else None
    elif set in ("soc", "rsoc"):
        g = _cone_escape(x, dx, set == "rsoc")
    elif set == "psd":
        g = _psd_escape(x, dx)
    else:  # nuclear_ball: its map is the identity where the ray stays in the ball
        if isinstance(proj_map, Diagonal) and proj_map.d is None:
            return np.zeros_like(x)
        raise UnsupportedError(
            "projections.distance to nuclear_ball: the ray is tangent to the ball's boundary "
            "(it leaves the ball, but its first-order residual vanishes), and asd does not "
            "derive the second-order residual of this set. Use a direction that is not "
            "tangent to the boundary, or write the distance as "
            "nuclear_norm(X - nuclear_ball(X, r)) away from the set.")
    return np.zeros_like(x) if g is None else np.asarray(g, dtype=float).reshape(x.shape)


@distance_p.defrule
def distance_rule(xs, dxs, set):
    """Outside the set the gradient is ``(x - P(x)) / dist``. On the set it is the unit limit
    of the residual along the ray (`_escape`), or 0 where the ray stays in the set: in every
    case ``lim ∇dist(x + δd)``, and ``dist'(x; d) = <g, d> >= 0``."""
    x = _floats(xs[0])
    _static("distance", dxs[1:], ("set parameter",) * (len(xs) - 1))
    ans, lin = RULES[set]((x, *xs[1:]), dxs)
    proj_map = lin.maps[0] if isinstance(lin, FanIn) else lin
    res = x - ans
    dist = vnorm(res)
    on_set = np.asarray(dist <= tie_tolerance(x.size, vnorm(x) + vnorm(ans)))
    g = exact_where(on_set, lambda: _escape(set, x, tuple(xs[1:]), dxs[0], proj_map),
                    lambda: res / np.where(dist > 0, dist, 1.0))
    return np.asarray(dist), FanIn(gradient_map(g, x.shape), *([None] * (len(xs) - 1)))


# ----- public functions -----

def zeros(x):
    """Projection onto ``{0}``: always zero, Jacobian 0."""
    return zeros_p(x)


def reals(x):
    """Projection onto the whole space: the identity."""
    return reals_p(x)


def nonneg(x):
    """Projection onto ``{x >= 0}``; at ``x_i = 0`` the slope follows the sign of ``d_i``.

    >>> import numpy as np, asd
    >>> asd.jacobian(asd.projections.nonneg, direction=np.array([1.0, -1.0]))(np.zeros(2))
    array([[1., 0.],
           [0., 0.]])
    """
    return nonneg_p(x)


def nonpos(x):
    """Projection onto ``{x <= 0}``."""
    return nonpos_p(x)


def box(x, lo, hi):
    """Projection onto ``{lo <= x <= hi}`` (broadcasting); differentiable in ``lo``, ``hi`` too."""
    return box_p(x, lo, hi)


def hyperplane(x, a, b):
    """Projection onto ``{y : <a, y> = b}`` (``a`` shaped like ``x``, ``b`` a scalar)."""
    return hyperplane_p(x, a, b)


def halfspace(x, a, b):
    """Projection onto ``{y : <a, y> <= b}``; on the boundary the sign of ``<a, d>`` decides."""
    return halfspace_p(x, a, b)


def l1_ball(x, radius=1.0):
    """Projection onto ``{||x||_1 <= radius}`` (entries of any shape form one vector)."""
    return l1_ball_p(x, radius)


def l2_ball(x, radius=1.0):
    """Projection onto ``{||x||_2 <= radius}``.

    >>> import numpy as np, asd
    >>> asd.jacobian(asd.projections.l2_ball, direction=np.array([1.0, 0.0]))(
    ...     np.array([1.0, 0.0]))
    array([[0., 0.],
           [0., 1.]])
    """
    return l2_ball_p(x, radius)


def linf_ball(x, radius=1.0):
    """Projection onto ``{max |x_i| <= radius}``."""
    return linf_ball_p(x, radius)


def simplex(x, radius=1.0):
    """Projection onto ``{x >= 0, sum(x) = radius}`` (the probability simplex scaled).

    >>> import numpy as np, asd
    >>> J = asd.jacobian(asd.projections.simplex, direction=np.array([1.0, 0.0, -1.0]))
    >>> J(np.array([0.5, 0.5, 0.0]))
    array([[ 0.5, -0.5,  0. ],
           [-0.5,  0.5,  0. ],
           [ 0. ,  0. ,  0. ]])
    """
    return simplex_p(x, radius)


def standard_simplex(x, radius=1.0):
    """Projection onto ``{x >= 0, sum(x) <= radius}``."""
    return standard_simplex_p(x, radius)


def soc(x):
    """Projection onto the second-order cone ``{(t, z) : ||z|| <= t}`` (``x[0]`` is ``t``).

    >>> import numpy as np, asd
    >>> asd.jacobian(asd.projections.soc, direction=np.array([1.0, 0.0]))(np.zeros(2))
    array([[1., 0.],
           [0., 1.]])
    """
    return soc_p(x)


def rsoc(x):
    """Projection onto the rotated cone ``{(u, v, w) : 2uv >= ||w||², u, v >= 0}``."""
    return rsoc_p(x)


def psd(X):
    """Projection of ``(X + X.T)/2`` onto the positive semidefinite cone.

    At zero eigenvalues the direction restricted to the null space decides which
    directions enter the cone.

    >>> import numpy as np, asd
    >>> J = asd.jacobian(asd.projections.psd, direction=np.diag([1.0, -1.0]))(np.zeros((2, 2)))
    >>> J.reshape(4, 4).diagonal()
    array([1.  , 0.25, 0.25, 0.  ])
    """
    return psd_p(X)


def nuclear_ball(X, radius=1.0):
    """Projection onto ``{||X||_* <= radius}`` (sum of singular values)."""
    return nuclear_ball_p(X, radius)


SETS: dict[Callable, str] = {
    zeros: "zeros", reals: "reals", nonneg: "nonneg", nonpos: "nonpos", box: "box",
    hyperplane: "hyperplane", halfspace: "halfspace", l1_ball: "l1_ball", l2_ball: "l2_ball",
    linf_ball: "linf_ball", simplex: "simplex", standard_simplex: "standard_simplex",
    soc: "soc", rsoc: "rsoc", psd: "psd", nuclear_ball: "nuclear_ball",
}


BALLS = frozenset({"l1_ball", "l2_ball", "linf_ball", "simplex", "standard_simplex",
                   "nuclear_ball"})
"""Sets whose radius defaults to 1.0, as in their projection functions."""


def distance(x, set, *params):
    """Euclidean distance from ``x`` to a set, e.g. ``distance(x, projections.l2_ball, 1.0)``.

    ``set`` is one of the projection functions (or its name); ``params`` are its parameters
    (a ball's or simplex's radius defaults to 1.0, as in its projection).
    Its subgradient is the unit residual outside the set, and inside the limiting gradient
    along the direction (0 unless the ray leaves the set).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: asd.projections.distance(x, "nonneg"),
    ...             direction=np.array([-1.0, 1.0]))(np.zeros(2))
    array([-1.,  0.])
    """
    name = SETS.get(set, set) if callable(set) else set
    if name not in RULES:
        raise UnsupportedError(f"projections.distance: unknown set {set!r}; use one of "
                               f"{sorted(RULES)}")
    if not params and name in BALLS:
        params = (1.0,)
    return distance_p(x, *params, set=name)


__all__ = ["box", "distance", "halfspace", "hyperplane", "l1_ball", "l2_ball", "linf_ball",
           "nonneg", "nonpos", "nuclear_ball", "psd", "reals", "rsoc", "simplex", "soc",
           "standard_simplex", "zeros"]


# ----- exponential and power cones (MathOptInterface's coordinate order) -----
#
# ExponentialCone (r, s, t): s e^(r/s) <= t, s > 0 (closure: r <= 0, s = 0, t >= 0);
# DualExponentialCone (u, v, w): -u e^(v/u) <= e w, u < 0 (closure: u = 0, v >= 0, w >= 0);
# PowerCone(α) (x, y, z): x^α y^(1-α) >= |z|, x, y >= 0;
# DualPowerCone(α) (u, v, w): (u/α)^α (v/(1-α))^(1-α) >= |w|, u, v >= 0.
# Each projection is one 3-vector primitive. Its rule finds the region the ray x + δd enters
# (the cone, its polar, a flat face, the smooth region between) from the signs of the
# coordinates along the ray (`ray_compare`, decided by the engine) and of the curved
# boundaries' defining functions (`_curved_sign`), and returns the limiting Jacobian there:
# the smooth region's Jacobian at the point, its limits on the curved boundaries (the tangent
# projection outside the cone, the rank-one map onto the generator outside the polar) and
# the closed-form limits where the smooth region meets an edge of a face (derived in
# docs/projections.md and checked against 60-digit solutions in tests/library/test_cones.py).
# The duals are the cones' Moreau complements: P_K*(x) = x + P_K(-x), J_K*(x; d) =
# I - J_K(-x; -d).

from asd.extend import Dense  # noqa: E402  (kept beside the cones they serve)

E = float(np.e)


def _cone3(x, name: str) -> np.ndarray:
    x = _floats(x)
    if x.shape != (3,):
        raise ShapeError(f"projections.{name} projects one 3-vector (MathOptInterface's order), "
                         f"got shape {x.shape}; project each cone's block separately")
    return x


def _alpha(alpha, name: str) -> float:
    if np.ndim(alpha) != 0 or not 0 < float(alpha) < 1:
        raise ASDError(f"projections.{name}: alpha = {alpha!r} must be a number in (0, 1)")
    return float(alpha)


def _curved_sign(h: float, grad: np.ndarray, x: np.ndarray, dx, scale: float) -> int:
    """The sign of a curved boundary's defining function ``h`` along the ray ``x + δẋ``.

    Clear of 0 the value decides; at a near-tie the first-order term ``∇h · ẋ`` does. A ray
    tangent to the boundary leaves the cone unless it runs along the generator through ``x``
    (the boundary of a convex cone is curved everywhere else), which is decided on the float
    tangent and reported as a tolerance decision: the input's own curvature is not read.
    """
    if abs(h) > tie_tolerance(3, scale):
        return 1 if h > 0 else -1
    d = np.asarray(dx(), dtype=float).reshape(3)
    h_dot = float(grad @ d)
    if abs(h_dot) > tie_tolerance(3, vnorm(grad) * vnorm(d)):
        return 1 if h_dot > 0 else -1
    record_tie_decision("tolerance", 1)
    along = vnorm(np.cross(x, d)) <= tie_tolerance(3, vnorm(x) * vnorm(d))
    return 0 if along else 1


def _rank_one_cone(g: np.ndarray) -> np.ndarray:
    """``ĝĝᵀ``: the limit Jacobian on the polar's boundary, onto the generator ``g``."""
    g = g / vnorm(g)
    return np.outer(g, g)


def _tangent_cone_map(n: np.ndarray) -> np.ndarray:
    """``I - n̂n̂ᵀ``: the limit Jacobian on the cone's curved boundary, leaving it."""
    n = n / vnorm(n)
    return np.eye(3) - np.outer(n, n)


def _sym3(J: np.ndarray) -> np.ndarray:
    return (J + J.T) / 2


def _bisect(f: Callable[[float], float], lo: float, hi: float, iters: int = 200) -> float:
    """A root of ``f`` in ``[lo, hi]`` with ``f(lo) < 0 < f(hi)``, by bisection to rounding."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _exp_scaled(rho: float, r: float, s: float, t: float) -> float:
    """Friberg's root function ``((ρ-1)r + s)e^ρ - (r - ρs)e^-ρ - (ρ²-ρ+1)t`` times
    ``e^-|ρ|`` (no overflow; the same sign)."""
    if rho >= 0:
        return ((rho - 1) * r + s) - (r - rho * s) * np.exp(-2 * rho) - (
            rho * rho - rho + 1) * t * np.exp(-rho)
    return ((rho - 1) * r + s) * np.exp(2 * rho) - (r - rho * s) - (
        rho * rho - rho + 1) * t * np.exp(rho)


def _exp_root(r: float, s: float, t: float) -> tuple[float, float, float]:
    """``(ρ, y, λ)`` of the projection in the smooth region: ``P = y(ρ, 1, e^ρ)``, residual
    ``λ(e^ρ, (1-ρ)e^ρ, -1)`` (Friberg 2021). The root is bracketed where ``y > 0`` and
    ``λ > 0``, on a log scale in ``η = r - ρs`` where ``s > 0`` and else in ``ε = (ρ-1)r + s``,
    so that ρ keeps its digits however small ``r`` or ``s`` is."""
    lo, hi = -745.0, 709.0
    if s <= 0:  # then r > 0
        def rho_of(le):
            return 1 + (np.exp(le) - s) / r

        def f(le):
            return _exp_scaled(rho_of(le), r, s, t)
    else:
        def rho_of(le):
            return (r - np.exp(le)) / s
        if r > 0:  # y > 0 needs η < (r² - rs + s²)/r
            hi = float(np.log((r * r - r * s + s * s) / r))

        def f(le):
            return -_exp_scaled(rho_of(le), r, s, t)
    le = _bisect(f, lo, hi)
    rho = rho_of(le)
    q = rho * rho - rho + 1
    eps, eta = (np.exp(le), r - rho * s) if s <= 0 else ((rho - 1) * r + s, np.exp(le))
    return float(rho), float(eps / q), float(eta * np.exp(-rho) / q)


def _exp_smooth(rho: float, y: float, lam: float) -> np.ndarray:
    """The Jacobian in the smooth region: implicit differentiation of
    ``v = y(ρ, 1, e^ρ) + λ(e^ρ, (1-ρ)e^ρ, -1)`` in ``(y, ρ, λ)``. Columns are scaled by
    ``e^-ρ`` where ``e^ρ`` is large (the map ``[∂P/∂y, ∂P/∂ρ, 0] M⁻¹`` does not change)."""
    e = np.exp(min(rho, 700.0))
    a = np.array([rho, 1.0, e])
    b = y * np.array([1.0, 0.0, e])
    n = np.array([e, (1 - rho) * e, -1.0])
    dn = lam * np.array([e, -rho * e, 0.0])
    c = 1.0 / max(1.0, e)
    M = np.stack([a * c, (b + dn) * c, n * c], axis=1)
    P = np.stack([a * c, b * c, np.zeros(3)], axis=1)
    return _sym3(P @ np.linalg.inv(M))


def _exp_params(x: np.ndarray, on_cone: bool, on_polar: bool) -> tuple[float, float, float]:
    r, s, t = (float(v) for v in x)
    if on_cone:  # on the cone's curved boundary: λ = 0
        return r / s, s, 0.0
    if on_polar:  # on the polar's curved boundary: y = 0
        rho = 1 - s / r
        return rho, 0.0, r * float(np.exp(-rho))
    return _exp_root(r, s, t)


@np.errstate(over="ignore")  # s e^(r/s) = inf compares right: that point is outside the cone
def _exp_value(x: np.ndarray) -> np.ndarray:
    r, s, t = (float(v) for v in x)
    if (s > 0 and s * np.exp(r / s) <= t) or (s == 0 and r <= 0 and t >= 0):
        return x.copy()
    if (r > 0 and r * np.exp(s / r) <= -E * t) or (r == 0 and s <= 0 and t <= 0):
        return np.zeros_like(x)
    if r <= 0 and s <= 0:
        return np.array([r, 0.0, max(t, 0.0)], dtype=x.dtype)
    rho, y, lam = _exp_root(r, s, t)
    return np.array([y * rho, y, t + lam], dtype=x.dtype)  # y e^ρ = t + λ, without overflow


DIAG = {key: np.diag(np.array(key, dtype=float)) for key in
        [(1, 0, 1), (1, 0, 0), (0, 0, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 0)]}


@np.errstate(over="ignore")  # an infinite s e^(r/s) or r e^(s/r) only decides a side
def exp_jacobian(x: np.ndarray, dx, signs: np.ndarray, depth: int = 0) -> np.ndarray:
    """The limiting Jacobian of the exponential cone's projection at ``x`` along the ray.

    ``signs`` are the signs of ``(r, s, t)`` along the ray (0: the coordinate stays 0, the
    side "inside the set" is taken). The regions: the cone (I), its polar (0), the face
    ``r < 0, s < 0`` (``P = (r, 0, max(t, 0))``) and the smooth region between; on its
    boundary the smooth region's Jacobian has the limits named case by case below.
    """
    r, s, t = (float(v) for v in x)
    sr, ss, st = (int(v) for v in signs)
    scale = max(abs(r), abs(s), abs(t))
    if scale == 0:  # the apex: P is positively homogeneous, so J(0; d) = J(d; d)
        d = np.asarray(dx(), dtype=float).reshape(3)
        if depth or vnorm(d) == 0:
            return np.eye(3)
        record_tie_decision("tolerance", 1)
        return exp_jacobian(d, lambda: d, np.sign(d).astype(int), depth + 1)

    def face(t_sign):  # P = (r, 0, max(t, 0)): t decides along the ray
        return DIAG[(1, 0, 1)] if t_sign >= 0 else DIAG[(1, 0, 0)]

    def smooth(on_cone=False, on_polar=False):
        return _exp_smooth(*_exp_params(x, on_cone, on_polar))

    if s > 0:
        ex = float(np.exp(r / s))
        h_cone = _curved_sign(s * ex - t, np.array([ex, ex * (1 - r / s), -1.0]), x, dx, scale)
        if h_cone <= 0:
            return np.eye(3)
        if r > 0:
            ep = float(np.exp(s / r))
            h_polar = _curved_sign(r * ep + E * t, np.array([ep * (1 - s / r), ep, E]), x, dx,
                                   scale)
            if h_polar <= 0:
                return np.zeros((3, 3))
            if abs(r * ep + E * t) <= tie_tolerance(3, scale):
                return _rank_one_cone(np.array([1 - s / r, 1.0, np.exp(1 - s / r)]))
        if abs(s * ex - t) <= tie_tolerance(3, scale):
            return _tangent_cone_map(np.array([ex, ex * (1 - r / s), -1.0]))
        return smooth()
    if r > 0:  # s <= 0: outside the cone; the polar or the smooth region
        ep = float(np.exp(s / r))
        h_polar = _curved_sign(r * ep + E * t, np.array([ep * (1 - s / r), ep, E]), x, dx,
                               scale)
        if h_polar <= 0:
            return np.zeros((3, 3))
        if abs(r * ep + E * t) <= tie_tolerance(3, scale):
            return _rank_one_cone(np.array([1 - s / r, 1.0, np.exp(1 - s / r)]))
        return smooth()
    # r <= 0 and s <= 0 from here on
    t_side = int(np.sign(t)) if t else st
    if s < 0 and r < 0:
        return face(t_side)
    if s < 0:  # r = 0: the face (r < 0), or r > 0 where the polar (t < 0) or the smooth
        if sr < 0:  # region meets the edge (0, 0, t): its Jacobian tends to diag(0, 0, 1)
            return face(t_side)
        return DIAG[(0, 0, 1)] if t_side >= 0 else np.zeros((3, 3))
    if r < 0:  # s = 0: the face (s < 0), the cone (t >= 0) or, for t < 0, the smooth
        if ss < 0:  # region along the edge (r, 0, 0): diag(1, 1, 0) there
            return face(t_side)
        return np.eye(3) if t_side > 0 or (t_side == 0 and ss == 0) else DIAG[(1, 1, 0)]
    # r = s = 0, t != 0: the edges (0, 0, t) of the cone (t > 0) and of the polar (t < 0)
    if t > 0:
        if ss > 0 or (ss == 0 and sr <= 0):
            return np.eye(3)
        return DIAG[(1, 0, 1)]  # the face (r < 0) or the smooth region's limit (r > 0)
    if sr > 0 or (sr == 0 and ss <= 0):
        return np.zeros((3, 3))
    if sr == 0:
        raise UnsupportedError(
            "projections.exp_cone at (0, 0, t < 0) with r held at 0 and s moving up: this "
            "limit of the smooth region is not derived; perturb r or use another direction")
    return DIAG[(1, 0, 0)]  # the edge of the face (s < 0) or the smooth region's limit


exp_cone_p = Primitive("proj_exp_cone", lambda x: _exp_value(_cone3(x, "exp_cone")))


@exp_cone_p.defrule
def exp_cone_rule(xs, dxs):
    x = _cone3(xs[0], "exp_cone")
    signs = ray_compare(x, dxs[0], 0.0)
    J = exp_jacobian(x, dxs[0], signs)
    return _exp_value(x), Dense(J.astype(x.dtype), x.shape, x.shape)


exp_cone_dual_p = Primitive("proj_exp_cone_dual",
                            lambda x: _cone3(x, "exp_cone_dual") + _exp_value(-_cone3(x, "")))


@exp_cone_dual_p.defrule
def exp_cone_dual_rule(xs, dxs):
    """Moreau: ``P_K*(x) = x + P_K(-x)``; the ray of ``-x`` is ``-d``."""
    x = _cone3(xs[0], "exp_cone_dual")
    signs = -ray_compare(x, dxs[0], 0.0)
    J = exp_jacobian(-x, lambda: -np.asarray(dxs[0](), dtype=float), signs)
    return x + _exp_value(-x), Dense((np.eye(3) - J).astype(x.dtype), x.shape, x.shape)


def _pow_root(x: float, y: float, z: float, alpha: float) -> tuple[float, float, float]:
    """``(X, Y, r)`` of the power cone's projection ``(X, Y, sign(z) r)`` in the smooth
    region (Hien 2015): ``X = (x + √(x² + 4αr(|z| - r)))/2``, ``Y`` likewise with ``1 - α``,
    and ``r ∈ (0, |z|)`` the root of ``X^α Y^(1-α) - r`` (decreasing), by bisection."""
    a = abs(z)

    def root_of(u, g):  # (u + √(u² + g))/2, without cancellation where u < 0
        s = np.sqrt(u * u + g)
        return 0.5 * (u + s) if u >= 0 else 0.5 * g / (s - u)

    def xy(r):
        g = r * (a - r)
        return root_of(x, 4 * alpha * g), root_of(y, 4 * (1 - alpha) * g)

    def f(r):
        X, Y = xy(r)
        return r - X ** alpha * Y ** (1 - alpha)

    r = _bisect(f, 0.0, a)
    X, Y = xy(r)
    return float(X), float(Y), float(r)


def _pow_smooth(X: float, Y: float, r: float, mu: float, alpha: float) -> np.ndarray:
    """The Jacobian in the smooth region (``z > 0``), from the KKT system of
    ``min ½|p - v|²`` s.t. ``g(p) = p_z - p_x^α p_y^(1-α) <= 0``: with ``H = I + μ∇²g``,
    ``J = H⁻¹ - H⁻¹∇g (∇gᵀH⁻¹∇g)⁻¹ ∇gᵀH⁻¹``."""
    g = np.array([-alpha * r / X, -(1 - alpha) * r / Y, 1.0])
    c = alpha * (1 - alpha) * r
    hess = c * np.array([[1 / X**2, -1 / (X * Y), 0.0], [-1 / (X * Y), 1 / Y**2, 0.0],
                         [0.0, 0.0, 0.0]])  # ∇²g = -∇²(p_x^α p_y^(1-α))
    Hi = np.linalg.inv(np.eye(3) + mu * hess)
    Hg = Hi @ g
    return _sym3(Hi - np.outer(Hg, Hg) / float(g @ Hg))


def _pow_value(v: np.ndarray, alpha: float) -> np.ndarray:
    x, y, z = (float(e) for e in v)
    if x >= 0 and y >= 0 and x**alpha * y**(1 - alpha) >= abs(z):
        return v.copy()
    if x <= 0 and y <= 0 and (-x / alpha)**alpha * (-y / (1 - alpha))**(1 - alpha) >= abs(z):
        return np.zeros_like(v)
    if z == 0:
        return np.array([max(x, 0.0), max(y, 0.0), 0.0], dtype=v.dtype)
    X, Y, r = _pow_root(x, y, z, alpha)
    return np.array([X, Y, np.copysign(r, z)], dtype=v.dtype)


def _edge_slope(near: float, far: float, alpha: float) -> float:
    """``lim ∂P_z/∂z`` at ``(x > 0, y < 0, 0)`` (``near = x``, ``far = |y|``, exponent α),
    where the projection lands on the edge ``(x, 0, 0)``: the cross-section ``y =
    (|z|/x^α)^(1/(1-α))`` has curvature 0 (α > ½), ``2/x`` (α = ½) or ∞ (α < ½) there, and
    the slope along a curve of curvature κ at distance ``|y|`` is ``1/(1 + κ|y|)``."""
    if alpha > 0.5:
        return 1.0
    if alpha < 0.5:
        return 0.0
    return near / (near + 2 * far)


def pow_jacobian(v: np.ndarray, dx, signs: np.ndarray, alpha: float,
                 depth: int = 0) -> np.ndarray:
    """The limiting Jacobian of the power cone's projection at ``v`` along the ray.

    Regions: the cone (I), its polar (0), the plane ``z = 0`` outside both (``P = (x⁺, y⁺,
    0)``) and the smooth region. ``z < 0`` is the mirror image of ``z > 0``. On the curved
    boundaries the smooth Jacobian tends to the tangent projection (leaving the cone) or to
    the rank-one map onto the generator orthogonal to ``v`` (leaving the polar); at the
    cone's edges ``(x, 0, 0)``, ``(0, y, 0)`` a ray leaving the cone meets the surface where
    its curvature times the distance vanishes, so the limit is the projection onto the
    edge's tangent plane ``diag(1, 0, 1)``, ``diag(0, 1, 1)``; the polar's edges likewise.
    """
    x, y, z = (float(e) for e in v)
    sx, sy, sz = (int(e) for e in signs)
    scale = max(abs(x), abs(y), abs(z))
    if scale == 0:  # the apex: homogeneous, J(0; d) = J(d; d)
        d = np.asarray(dx(), dtype=float).reshape(3)
        if depth or vnorm(d) == 0:
            return np.eye(3)
        record_tie_decision("tolerance", 1)
        return pow_jacobian(d, lambda: d, np.sign(d).astype(int), alpha, depth + 1)
    if z < 0 or (z == 0 and sz < 0):  # mirror z -> -z
        S = np.diag([1.0, 1.0, -1.0])
        return S @ pow_jacobian(S @ v, lambda: S @ np.asarray(dx(), dtype=float).reshape(3),
                                signs * np.array([1, 1, -1]), alpha, depth) @ S
    if z > 0:
        tol = tie_tolerance(3, scale)
        if x > 0 and y > 0:
            phi = x**alpha * y**(1 - alpha)
            grad = np.array([alpha * phi / x, (1 - alpha) * phi / y, -1.0])
            if _curved_sign(phi - z, grad, v, dx, scale) >= 0:
                return np.eye(3)
            if abs(phi - z) <= tol:
                return _tangent_cone_map(grad)
        if x < 0 and y < 0:
            a, b = -x, -y
            psi = (a / alpha)**alpha * (b / (1 - alpha))**(1 - alpha)
            grad = np.array([-alpha * psi / a, -(1 - alpha) * psi / b, -1.0])
            if _curved_sign(psi - z, grad, v, dx, scale) >= 0:
                return np.zeros((3, 3))
            if abs(psi - z) <= tol:  # the generator of the cone orthogonal to v
                gx, gy = alpha / a, (1 - alpha) / b
                return _rank_one_cone(np.array([gx, gy, gx**alpha * gy**(1 - alpha)]))
        X, Y, r = _pow_root(x, y, z, alpha)
        return _pow_smooth(X, Y, r, z - r, alpha)
    # z = 0 and the ray keeps z >= 0 (sz = 0: z stays 0, its column is never read)
    if x > 0 and y > 0:
        return np.eye(3)
    if x < 0 and y < 0:
        return np.zeros((3, 3))
    if x > 0 and y < 0:
        return np.diag([1.0, 0.0, _edge_slope(x, -y, alpha)])
    if x < 0 and y > 0:
        return np.diag([0.0, 1.0, _edge_slope(y, -x, 1 - alpha)])
    if y > 0:  # x = 0: the cone's edge (0, y, 0)
        return np.eye(3) if sx > 0 else DIAG[(0, 1, 1)]
    if x > 0:  # y = 0: the cone's edge (x, 0, 0)
        return np.eye(3) if sy > 0 else np.diag([1.0, 0.0, 1.0])
    if y < 0:  # x = 0: the polar's edge (0, y, 0)
        return np.zeros((3, 3)) if sx < 0 else np.diag([1.0, 0.0, 0.0])
    return np.zeros((3, 3)) if sy < 0 else DIAG[(0, 1, 0)]  # the polar's edge (x < 0, 0, 0)


def _pow_dual_value(v: np.ndarray, alpha: float) -> np.ndarray:
    return v + _pow_value(-v, alpha)


power_cone_p = Primitive(
    "proj_power_cone",
    lambda x, alpha: _pow_value(_cone3(x, "power_cone"), _alpha(alpha, "power_cone")))


@power_cone_p.defrule
def power_cone_rule(xs, dxs):
    x, alpha = _cone3(xs[0], "power_cone"), _alpha(xs[1], "power_cone")
    _static("power_cone", dxs[1:], ("alpha",))
    J = pow_jacobian(x, dxs[0], ray_compare(x, dxs[0], 0.0), alpha)
    return _pow_value(x, alpha), FanIn(Dense(J.astype(x.dtype), x.shape, x.shape), None)


power_cone_dual_p = Primitive(
    "proj_power_cone_dual",
    lambda x, alpha: _pow_dual_value(_cone3(x, "power_cone_dual"),
                                     _alpha(alpha, "power_cone_dual")))


@power_cone_dual_p.defrule
def power_cone_dual_rule(xs, dxs):
    """Moreau: ``P_K*(x) = x + P_K(-x)``; the ray of ``-x`` is ``-d``."""
    x, alpha = _cone3(xs[0], "power_cone_dual"), _alpha(xs[1], "power_cone_dual")
    _static("power_cone_dual", dxs[1:], ("alpha",))
    J = pow_jacobian(-x, lambda: -np.asarray(dxs[0](), dtype=float),
                     -ray_compare(x, dxs[0], 0.0), alpha)
    return _pow_dual_value(x, alpha), FanIn(Dense((np.eye(3) - J).astype(x.dtype), x.shape,
                                                  x.shape), None)


def exp_cone(x):
    """Projection onto the exponential cone ``{(r, s, t) : s e^(r/s) <= t, s > 0}`` (closed;
    MathOptInterface's ``ExponentialCone`` order).

    >>> import numpy as np, asd
    >>> asd.projections.exp_cone(np.array([-1.0, -1.0, 2.0]))  # the face s = 0
    array([-1.,  0.,  2.])
    >>> asd.jacobian(asd.projections.exp_cone, direction=np.array([0.0, -1.0, 0.0]))(
    ...     np.array([-1.0, 0.0, 2.0]))
    array([[1., 0., 0.],
           [0., 0., 0.],
           [0., 0., 1.]])
    """
    return exp_cone_p(x)


def exp_cone_dual(x):
    """Projection onto the dual exponential cone ``{(u, v, w) : -u e^(v/u) <= e w, u < 0}``
    (closed; ``DualExponentialCone``)."""
    return exp_cone_dual_p(x)


def power_cone(x, alpha):
    """Projection onto the power cone ``{(x, y, z) : x^α y^(1-α) >= |z|, x, y >= 0}``
    (``PowerCone(α)``, ``0 < α < 1``; α is a constant).

    >>> import numpy as np, asd
    >>> asd.projections.power_cone(np.array([1.0, 1.0, 2.0]), 0.5)
    array([1.33333333, 1.33333333, 1.33333333])
    """
    return power_cone_p(x, alpha)


def power_cone_dual(x, alpha):
    """Projection onto the dual power cone ``{(u, v, w) : (u/α)^α (v/(1-α))^(1-α) >= |w|,
    u, v >= 0}`` (``DualPowerCone(α)``)."""
    return power_cone_dual_p(x, alpha)


__all__ = [*__all__, "exp_cone", "exp_cone_dual", "power_cone", "power_cone_dual"]
