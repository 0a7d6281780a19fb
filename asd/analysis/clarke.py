"""Sampling the Clarke subdifferential: many directions, one primal evaluation.

One ASD sweep gives one limiting gradient ``lim grad f(x + δv)``. ``asd.clarke`` collects
them for ``n`` directions and answers questions about their convex hull: membership (an LP),
the minimum-norm element (a small QP: the steepest-descent direction and the stationarity
measure of nonsmooth optimization) and whether ``x`` is Clarke stationary.

How the ``n`` sweeps share the work. A rule's linearization depends on the direction only
if the rule asked for a tangent, i.e. met a tie (the engine records those nodes in
``Trace.ties``); every other linearization is a function of the primal values alone. So:

1. one recording sweep gives all values and linearizations, and the set of tie nodes;
2. the directions walk through the tie nodes in program order as *groups* of directions
   whose linearizations so far coincide: for each group the tangents a tie rule needs are
   pushed as one batch, the rule is re-run per direction on the stored primal values, and
   the group splits by the linearization the rule returned;
3. one batched reverse sweep pulls one cotangent row per final group: through the shared
   linearizations as a batch, through each tie node with that group's own map.

A jump that reaches the output (continuously, or the sweep refuses: ``x * (x < 0)`` at 0)
breaks the premise: past it the values are the side the direction enters, and the
linearizations downstream read them (as the constant ``x < 0``). There each direction gets a
sweep of its own, and the sample no enclosure (its support function is infinite).

Directions come in antithetic pairs ``±v``, so both sides of every one-dimensional kink
are always sampled.

The Goldstein ε-subdifferential (``radius=ε``): the hull of the gradients at all points
within ``ε`` of ``x``. Its min-norm element is the stationarity measure of gradient sampling
and bundle methods, and at a point *near* a kink (an LP optimum reached to 1e-9) it is what
says "stationary" where the Clarke set at ``x`` alone, one gradient, cannot. The pieces a
sweep must reach are those active somewhere in the ball, and the rules find them: walking
the program in order, each node gets a *reach*, ``ε |u_k| ... |u_1| 1`` (the magnitudes of
the linearizations, the most its entries can move on the ball to first order; the maximum
over the linearizations a node's directions selected, so a kink inside the ball counts its
steeper side). A rule whose switching quantity is within reach of zero (``|x| <= r_x`` for
relu, ``|a - b| <= r_a + r_b`` for maximum, an entry within reach of a row's maximum) sees
its inputs *snapped* onto the tie and is re-run per direction like a rule at an exact tie,
so the directions split over every piece active within reach, decided by the tie contract
itself. Values downstream stay those at ``x``: a snap only changes which branches a rule
may take. ``points=m`` adds the gradients at ``m`` random points of the ball (Burke, Lewis
and Overton's gradient sampling), for near-ties of rules with no snap.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from scipy.optimize import linprog, nnls

from asd.analysis.enclosure import Enclosure, enclosure
from asd.analysis.sets import nearest, points_oracle, union_oracle
from asd.api import (
    ArgNums,
    _check_finite,
    _Inputs,
    _narrowed,
    _scalar_output,
    sweep_along,
    transform,
)
from asd.core import backend
from asd.core.linear import FanIn
from asd.core.primitive import ZeroTangent, rule_context
from asd.core.sweep import LazyTangent, Trace, missing_cone, push_direction
from asd.errors import ArgumentError, ArgumentTypeError, ASDError
from asd.result import Tie, ties_of
from asd.tree import flatten


class Membership:
    """The answer to "is ``g`` in the Clarke set?": ``verdict`` is ``"inside"``, ``"outside"``
    or ``"undetermined"``, each only as far as it is proven.

    - ``inside``: ``g`` is in the hull of limiting gradients asd found (within ``tol`` in
      the max norm), so it is a Clarke subgradient (every point of that hull is).
    - ``outside``: ``g`` is farther than ``tol`` from the outer enclosure, which contains the
      Clarke set: ``direction`` (unit) separates them, ``direction·g - h(direction) =
      margin > tol`` with ``h`` the enclosure's support function, evaluated exactly.
    - ``undetermined``: neither is proven. ``inner`` is the distance to the sampled hull,
      ``outer`` the proven lower bound on the distance to the Clarke set (the gap between
      them is what is unknown), and ``settle`` says what would decide it.

    Truthy only when ``inside`` (``if s.contains(g):`` reads "certified inside"); compare
    with the strings for the other answers.

    >>> import asd
    >>> s = asd.clarke(asd.abs, seed=0)(0.0)
    >>> s.contains(0.3), s.contains(1.5)
    (Membership('inside'), Membership('outside', margin=0.5))
    """

    __slots__ = ("verdict", "inner", "outer", "direction", "margin", "settle")

    def __init__(self, verdict: str, inner: float, outer: float, direction=None,
                 margin: float = 0.0, settle: str = ""):
        self.verdict, self.inner, self.outer = verdict, inner, outer
        self.direction, self.margin, self.settle = direction, margin, settle

    def __bool__(self) -> bool:
        return self.verdict == "inside"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self.verdict == other
        return NotImplemented

    __hash__ = None

    def __str__(self) -> str:
        return self.verdict

    def __repr__(self) -> str:
        if self.verdict == "outside":
            return f"Membership('outside', margin={self.margin:.3g})"
        if self.verdict == "undetermined":
            return (f"Membership('undetermined', inner={self.inner:.3g}, "
                    f"outer={self.outer:.3g})")
        return "Membership('inside')"


@dataclass(frozen=True)
class Stationarity:
    """dist(0, ∂_ε f(x)) as a certified interval ``[lower, upper]``, ``ε = radius``.

    ``upper`` (= ``measure``, the stationarity measure of nonsmooth optimization) is the norm
    of ``element``, a point of the hull of limiting gradients taken within ``ε`` of ``x`` (so
    ``upper <= tol`` proves ``x`` (ε, tol)-stationary in Goldstein's sense; Clarke stationary
    up to ``tol`` for ``ε = 0``). ``lower`` comes from the outer enclosure, which contains
    ∂_ε f(x): ``lower > 0`` proves ``x`` is not ε-stationary, with ``direction`` a descent
    direction of every element (``-direction`` decreases ``f`` at rate ``>= lower``).
    ``exact``: the two sides are proven equal (a regular program at ``ε = 0``, or bounds that
    met). ``sample`` is the `ClarkeSample` it rests on.
    """

    radius: float
    lower: float
    upper: float
    element: np.ndarray
    sample: ClarkeSample
    direction: np.ndarray | None = None
    exact: bool = False

    @property
    def measure(self) -> float:
        """The upper bound: the stationarity measure methods stop on."""
        return self.upper

    def __float__(self) -> float:
        return float(self.upper)

    def __format__(self, spec: str) -> str:
        return format(self.upper, spec) if spec else repr(self)

    def __repr__(self) -> str:
        return (f"Stationarity(radius={self.radius:.3g}, lower={self.lower:.3g}, "
                f"upper={self.upper:.3g}{', exact' if self.exact else ''})")


class ClarkeSample:
    """Distinct limiting gradients of ``f`` at ``x`` from ``n`` directions, their hull, and an
    outer enclosure of the Clarke set.

    The hull of the sampled gradients is an *inner* approximation of the Clarke
    subdifferential (every sampled gradient is a limiting gradient, so the hull lies inside
    the Clarke set, but a piece whose gradient no direction selected is missed). The
    `enclosure` is an *outer* one, from Clarke's chain rule (`asd.analysis.enclosure`): it
    contains the Clarke set, and *is* it on regular programs (``enclosure.exact``), where
    the inner side is the enclosure too. Questions are answered from both sides:
    `contains` is inside / outside / undetermined, `stationarity` an interval.

    ``gradients`` has shape ``(m, *x.shape)`` when one array (or number) is differentiated,
    and ``(m, N)`` over the flattened, concatenated leaves otherwise; ``directions`` likewise
    with ``n`` rows; ``counts[i]`` is how many directions produced ``gradients[i]``;
    ``value`` is ``f(x)``; ``ties`` lists the nodes whose rule met a tie (the only rules
    re-run per direction) and ``degenerate`` the degenerate ties met, summed over directions.
    ``radius`` is the ε of the sample (0: the Clarke set at ``x``) and ``near_ties`` the
    nodes whose rule found entries within reach of a tie inside the ball, with their counts.
    With ``radius > 0`` every gradient is one at a point of the ball (the rules' near-ties
    only propose points; a gradient is kept once a sweep at such a point produced it).
    """

    def __init__(self, value, flat_gradients: np.ndarray, counts: np.ndarray,
                 flat_directions: np.ndarray, shape: tuple | None,
                 degenerate: list[Tie], ties: list[Tie], radius: float = 0.0,
                 near_ties: list[Tie] | None = None, outer=None, exact_inner=None):
        self.value = value
        self._g = flat_gradients
        self.counts = counts
        self._v = flat_directions
        self._shape = shape
        self.degenerate = degenerate
        self.ties = ties
        self.radius = radius
        self.near_ties = [] if near_ties is None else near_ties
        # zero-argument callables building the enclosures on first use (they hold the trace)
        self._outer, self._exact_inner = outer, exact_inner
        self._cache: dict[str, Any] = {}

    # ----- the sample -----

    def _shaped(self, flat: np.ndarray) -> np.ndarray:
        return flat if self._shape is None else flat.reshape((len(flat), *self._shape))

    @property
    def gradients(self) -> np.ndarray:
        return self._shaped(self._g)

    @property
    def directions(self) -> np.ndarray:
        return self._shaped(self._v)

    @property
    def is_singleton(self) -> bool:
        """One distinct gradient: consistent with ``f`` being strictly differentiable at x."""
        return len(self._g) == 1

    def __len__(self) -> int:
        return len(self._g)

    def __repr__(self) -> str:
        eps = f", radius={self.radius:g}" if self.radius else ""
        return (f"ClarkeSample({len(self._g)} distinct gradients from {len(self._v)} "
                f"directions, value={self.value}{eps})")

    def _scale(self) -> float:
        return max(1.0, float(np.max(np.abs(self._g))))

    def _flat(self, g) -> np.ndarray:
        """``g`` as one flat vector: an array, or a structure like the arguments."""
        leaves, _ = flatten(g)
        g = np.concatenate([np.ravel(np.asarray(leaf, dtype=float)) for leaf in leaves])
        if g.size != self._g.shape[1]:
            raise ValueError(f"expected a vector with {self._g.shape[1]} entries (shaped like "
                             f"the differentiated arguments), got {g.size}")
        return g

    def with_gradients(self, extra) -> ClarkeSample:
        """A sample that also holds ``extra`` gradients (rows shaped like `gradients`).

        The caller vouches that they belong to the set sampled (gradients at points within
        ``radius`` of ``x``: gradient sampling's ball points); they enter the inner hull. At
        ``radius=0`` they come from elsewhere, so the result has no outer enclosure.

        >>> import asd
        >>> s = asd.clarke(asd.abs, n=2, seed=0)(1.0).with_gradients([-1.0])
        >>> s.is_stationary(), len(s)
        (True, 2)
        """
        extra = np.asarray(extra, dtype=float).reshape(-1, self._g.shape[1])
        flat, counts = _distinct(np.concatenate([self._g, extra]),
                                 np.concatenate([self.counts, np.ones(len(extra), int)]))
        if not self.radius:
            return ClarkeSample(self.value, flat, counts, self._v, self._shape,
                                self.degenerate, self.ties, self.radius, self.near_ties)
        out = ClarkeSample(self.value, flat, counts, self._v, self._shape, self.degenerate,
                           self.ties, self.radius, self.near_ties, self._outer,
                           self._exact_inner)
        out._cache = {k: v for k, v in self._cache.items() if k in ("outer", "exact_inner")}
        return out

    # ----- the two sides -----

    @property
    def enclosure(self):
        """The outer enclosure (`asd.analysis.enclosure.Enclosure`) of the Clarke set at
        ``x`` (of the ε-subdifferential for ``radius > 0``): built on first use."""
        if "outer" not in self._cache:
            self._cache["outer"] = None if self._outer is None else self._outer()
        return self._cache["outer"]

    def _exact_set(self):
        """An exact Clarke set inside the sampled one, or None: the enclosure at ``x`` where
        it is proven exact (for ``radius > 0``, the Clarke set at ``x`` is inside the
        ε-subdifferential)."""
        if "exact_inner" not in self._cache:
            enc = None if self._exact_inner is None else self._exact_inner()
            if enc is None and not self.radius:
                enc = self.enclosure
            self._cache["exact_inner"] = enc if enc is not None and enc.exact else None
        return self._cache["exact_inner"]

    def _inner_oracle(self):
        oracle = points_oracle(self._g)
        exact = self._exact_set()
        return oracle if exact is None else union_oracle([oracle, exact.support])

    # ----- questions about the hull -----

    def contains(self, g, tol: float | None = None) -> Membership:
        """Whether ``g`` is in the Clarke set, as far as it is proven (`Membership`).

        ``inside`` where ``g`` is within ``tol`` (max norm) of the inner hull (default
        ``1e-8 * max(1, max |gradient|)``: rounding), ``outside`` where the outer enclosure
        is farther than ``tol``, ``undetermined`` otherwise.

        >>> import asd
        >>> s = asd.clarke(asd.abs, n=8, seed=0)(0.0)
        >>> s.contains(0.3) == "inside", s.contains(1.5) == "outside"
        (True, True)
        """
        g = self._flat(g)
        tol = 1e-8 * self._scale() if tol is None else float(tol)
        if not np.all(np.isfinite(g)):
            return Membership("outside", np.inf, np.inf, None, np.inf,
                              "a gradient that is not finite is in no Clarke set")
        inner = self.distance(g)
        if inner <= tol:
            return Membership("inside", inner, 0.0)
        exact = self._exact_set()
        if exact is not None:
            near = exact.nearest(g)
            if float(np.max(np.abs(near.point - g))) <= tol:
                return Membership("inside", 0.0, 0.0)
            inner = min(inner, float(np.max(np.abs(near.point - g))))
        enc = self.enclosure
        if enc is None or enc.unbounded:
            why = "; ".join(enc.unbounded) if enc is not None else "no enclosure"
            return Membership("undetermined", inner, 0.0, settle=(
                f"the outer enclosure is unbounded ({why}); more directions (n) can still "
                "show it inside"))
        near = enc.nearest(g)
        if near.lower > tol:
            # the separating half-space must hold every sampled gradient (each a proven
            # element): where rounding (float32 linearizations) put one beyond it, the
            # enclosure is not trusted at this point and nothing is called outside
            d = np.asarray(near.direction, dtype=float)
            beyond = float(np.max(self._g @ d, initial=-np.inf)) - float(d @ g - near.lower)
            if beyond > tol:
                return Membership("undetermined", inner, 0.0, settle=(
                    f"a sampled gradient lies {beyond:.3g} beyond the enclosure's separating "
                    "half-space (rounding in the program's dtype): evaluate in float64"))
            return Membership("outside", inner, near.lower, near.direction, near.lower)
        settle = ("more directions (n, or asd audit --samples): the sampled hull may miss "
                  "pieces that the enclosure holds")
        if enc.relaxed:
            settle += f"; the enclosure is relaxed at {enc.relaxed[0]}"
        return Membership("undetermined", inner, max(near.lower, 0.0), settle=settle)

    def distance(self, g) -> float:
        """The max-norm distance from ``g`` to the hull of the sampled gradients.

        The LP ``min t  s.t.  λ >= 0, Σλ = 1, -t <= Gλ - g <= t``, solved by HiGHS, whose
        weights' distance is recomputed in float64: an upper bound, never below the true
        distance by HiGHS's feasibility tolerance (1e-7), so ``inside`` stays proven.

        >>> import asd
        >>> float(asd.clarke(asd.abs, n=8, seed=0)(0.0).distance(1.5))
        0.5
        """
        g = self._flat(g)
        scale = self._scale()
        G = self._g.T / scale  # (N, m): the generators as columns, entries in [-1, 1]
        g = g / scale
        size, m = G.shape
        ones = np.ones((size, 1))
        res = linprog(
            np.r_[np.zeros(m), 1.0],
            A_ub=np.block([[G, -ones], [-G, -ones]]),
            b_ub=np.concatenate([g, -g]),
            A_eq=np.r_[np.ones(m), 0.0][None],
            b_eq=[1.0],
            bounds=(0, None),
            method="highs",
        )
        if res.status != 0:
            raise ASDError(f"the hull distance LP did not finish: {res.message} (HiGHS "
                           f"status {res.status})")
        # HiGHS meets its constraints to 1e-7 only, so its optimum can read 0 for a point
        # 1e-7 away: the distance is what its weights achieve, recomputed here (an upper
        # bound on the true distance, so `contains` never calls a point inside that is not)
        lam = np.clip(res.x[:m], 0.0, None)
        lam = lam / lam.sum()
        return float(np.max(np.abs(G @ lam - g), initial=0.0)) * scale

    def min_norm(self) -> np.ndarray:
        """The minimum-norm element of the inner hull, shaped like one gradient.

        Its negative is the steepest-descent direction of nonsmooth optimization and its
        norm the stationarity measure (`stationarity`'s upper bound). The hull of the
        sampled gradients, joined with the exact Clarke set where the enclosure proves one.

        >>> import asd, numpy as np
        >>> s = asd.clarke(lambda x: asd.maximum(x[0], x[1]), n=16, seed=0)(np.zeros(2))
        >>> s.min_norm()
        array([0.5, 0.5])
        """
        z = self._solve_min_norm()[0]
        return self._shaped(z[None])[0]

    def min_norm_weights(self) -> np.ndarray:
        """Convex weights ``λ`` (one per gradient) with ``min_norm()`` the min-norm point of
        the sampled gradients' hull: ``λ @ gradients``."""
        return self._solve_min_norm()[1]

    def _solve_min_norm(self) -> tuple[np.ndarray, np.ndarray]:
        # Why NNLS rather than a general QP solver such as SLSQP on the simplex: the
        # min-norm point of conv{g_i} reduces exactly to one nonnegative least-squares
        # problem, u = argmin_{u >= 0} |[G; 1ᵀ] u - e|, e = (0, ..., 0, 1) (Lawson & Hanson's
        # least-distance trick). With w = G u and s = Σu, its optimality conditions read
        # g_i·w >= 1 - s, with equality where u_i > 0; so |w|² = s(1 - s), s > 0, and
        # z = w / s (weights u / s) satisfies (g_i - z)·z >= 0 for every i: z is the
        # projection of 0 onto the hull. The active-set solver terminates finitely with no
        # step size or stopping tolerance to tune, which SLSQP would need.
        if "min_norm" not in self._cache:
            scale = self._scale()
            G = self._g.T / scale
            E = np.vstack([G, np.ones((1, G.shape[1]))])
            e = np.zeros(E.shape[0])
            e[-1] = 1.0
            u, _ = nnls(E, e)
            weights = u / u.sum()
            z = G @ weights
            if np.linalg.norm(z) <= 64 * np.finfo(float).eps * np.sqrt(G.size):
                z = np.zeros_like(z)  # 0 is in the hull; what is left is rounding
            z = scale * z
            exact = self._exact_set()
            if exact is not None and np.any(z):
                near = nearest(self._inner_oracle(), np.zeros_like(z))
                if near.upper < np.linalg.norm(z):
                    z = near.point if near.upper > 64 * np.finfo(float).eps * scale \
                        else np.zeros_like(z)
            self._cache["min_norm"] = (z, weights)
        return self._cache["min_norm"]

    @property
    def stationarity(self) -> Stationarity:
        """dist(0, ∂_ε f(x)) as a certified interval (`Stationarity`): ``upper`` from the
        inner hull (`min_norm`), ``lower`` from the outer enclosure; equal on regular
        programs at ``radius=0``, where the enclosure is the Clarke set.

        >>> import asd, numpy as np
        >>> s = asd.clarke(asd.abs, seed=0, radius=1e-6)(1e-9).stationarity
        >>> s.lower, s.upper
        (0.0, 0.0)
        >>> asd.clarke(lambda x: np.max(x), seed=0)(np.array([1.0, 1.0])).stationarity
        Stationarity(radius=0, lower=0.707, upper=0.707, exact)
        """
        if "stationarity" not in self._cache:
            z = np.asarray(self._solve_min_norm()[0], dtype=float)
            upper = float(np.linalg.norm(z))
            lower, direction = 0.0, None
            enc = self.enclosure
            if enc is not None and enc.bounded and upper > 0:
                near = enc.nearest(np.zeros_like(z))
                lower, direction = min(near.lower, upper), near.direction
                if enc.exact:
                    upper = min(upper, near.upper)
                    z = near.point
            tight = upper - lower <= 1e-12 * max(1.0, upper)
            self._cache["stationarity"] = Stationarity(
                self.radius, lower, upper, self._shaped(z[None])[0], self, direction,
                tight or (enc is not None and enc.exact))
        return self._cache["stationarity"]

    def is_stationary(self, tol: float = 1e-8) -> bool:
        """Whether ``x`` is proven stationary up to ``tol``: the inner hull comes within
        ``tol`` (Euclidean) of 0 (`stationarity`'s upper bound).

        >>> import asd
        >>> at_kink, off_kink = asd.clarke(asd.abs, seed=0)(0.0), asd.clarke(asd.abs)(1.0)
        >>> at_kink.is_stationary(), off_kink.is_stationary()
        (True, False)
        """
        return bool(self.stationarity.upper <= tol)


def clarke(f: Callable, n: int = 64, *, seed=None, argnums: ArgNums = 0,
           directions=None, radius: float = 0.0, points: int = 0) -> Callable:
    """Return a function sampling the Clarke (or Goldstein ε-) subdifferential of scalar ``f``.

    ``n`` directions (antithetic pairs ``±v``, uniform on the unit sphere) share one primal
    evaluation: only the rules that met a tie are re-run per direction. The result is a
    `ClarkeSample`; its hull is an inner approximation of the Clarke set, exact for
    one-dimensional inputs and for piecewise-affine functions once every essentially active
    piece is hit. ``directions`` (shape ``(n, *x.shape)``, or ``(n, N)`` over the flattened
    leaves) replaces the random ones, for reproducible or structured designs.

    ``radius=ε > 0`` samples the Goldstein ε-subdifferential instead: rules whose switching
    quantity is within reach of a tie somewhere in the ball ``|y - x| <= ε`` are re-run at
    the tie (module docstring), so every piece active within reach contributes; ``points``
    adds the gradients at that many uniform random points of the ball (one array argument).
    ``radius=0`` is the exact Clarke sample, bit for bit.

    >>> import asd
    >>> s = asd.clarke(asd.abs, seed=0)(0.0)
    >>> sorted(s.gradients.tolist()), bool(s.contains(0.0)), float(s.min_norm())
    ([-1.0, 1.0], True, 0.0)
    >>> near = asd.clarke(asd.abs, seed=0, radius=1e-6)(1e-9)   # 1e-9 from the kink
    >>> sorted(near.gradients.tolist()), near.is_stationary()
    ([-1.0, 1.0], True)
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral | float) or n != int(n):
        raise ArgumentTypeError(f"n must be a whole number of directions, got {n!r}")
    if int(n) < 1:
        raise ArgumentError(f"n must be a positive number of directions, got {n}")
    n = int(n)
    radius = _check_radius(radius)
    if isinstance(points, bool) or not isinstance(points, numbers.Integral) or points < 0:
        raise ArgumentError(f"points must be a whole number >= 0 of sample points, got "
                            f"{points!r}")
    if points and not radius:
        raise ArgumentError("points > 0 samples the ball |y - x| <= radius: give radius > 0 "
                            "too (radius=0 is the Clarke set at x itself)")

    def wrapped(*args) -> ClarkeSample:
        inputs = _Inputs(args, argnums)
        dirs = (_antithetic(inputs, n, seed) if directions is None
                else _given(inputs, directions))
        # each direction swept at unit scale (exact powers of two: the same branches)
        leaf_dirs = _split_leaves(np.ldexp(dirs, -np.frexp(np.max(np.abs(dirs), axis=1,
                                                                  keepdims=True))[1]),
                                  inputs.leaves)
        trace, out, ids = sweep_along(f, inputs, [d[0] for d in leaf_dirs])
        traced = _scalar_output(out, trace)
        shape = inputs.leaves[0].shape if len(inputs.leaves) == 1 else None
        if traced is None:
            zero = _in_leaf_dtypes(np.zeros((1, dirs.shape[1])), inputs)
            return ClarkeSample(np.asarray(out)[()], zero, np.array([len(dirs)]), dirs, shape,
                                [], [], radius)
        k = traced._id
        trace.check_lipschitz(k)
        resweep = _Resweep(trace, ids, leaf_dirs)
        groups = resweep.split_at_ties(sorted(t for t in trace.ties if t <= k))
        outer = partial(enclosure, trace, k, ids, radius)
        exact_inner = partial(enclosure, trace, k, ids, 0.0)
        if resweep.jumps_reaching(k):
            grads, degenerate = _per_direction(f, inputs, leaf_dirs)
            counts = np.ones(len(grads), int)
            resweep.degenerate = degenerate
            outer, exact_inner = partial(_unbounded, dirs.shape[1], radius, (
                "a jump reaches the output at the point: the per-direction gradients are "
                "exact, but no enclosure of the Clarke set is built across a jump")), None
        else:
            grads = resweep.pull(k, groups)
            _check_finite(trace, k, [grads])
            counts = np.array([len(g.rows) for g in groups])
        near: dict[int, int] = {}
        if radius:
            grads, counts, near = _ball_sample(f, inputs, trace, k, ids, leaf_dirs, dirs,
                                               radius, grads, counts)
        flat, counts = _distinct(_in_leaf_dtypes(grads, inputs), counts)
        sample = ClarkeSample(np.asarray(traced.value)[()], flat, counts, dirs, shape,
                              ties_of(trace.nodes, resweep.degenerate),
                              ties_of(trace.nodes, trace.ties), radius,
                              ties_of(trace.nodes, near), outer=outer,
                              exact_inner=exact_inner)
        if points:
            sample = sample.with_gradients(_ball_gradients(f, args, argnums, inputs, radius,
                                                           points, seed))
        return sample

    wrapped.__doc__ = f"A sample of the Clarke subdifferential of {getattr(f, '__name__', f)}."
    return transform(wrapped, clarke, f, n=n, seed=seed, argnums=argnums, directions=directions,
                     radius=radius, points=points)


def _ball_sample(f, inputs: _Inputs, trace: Trace, k: int, ids: list[int],
                 leaf_dirs: list[np.ndarray], dirs: np.ndarray, radius: float,
                 grads: np.ndarray, counts: np.ndarray) -> tuple:
    """The ε-sample: the gradients at ``x`` (``grads``), and for every piece combination the
    rules' near-ties propose (`_Resweep.split_near`) that is not among them, the gradient at
    a point of the ball where that combination should hold: ``x + ε' v / |v|`` along the
    first direction ``v`` that proposed it, ``ε' = ε (1 - 2^-20)``. Only gradients computed
    at points of the ball are kept, so a piece the first-order reach merely allowed (inactive
    everywhere in the ball) never enters the sample (issue 26)."""
    resweep = _Resweep(trace, ids, leaf_dirs)
    candidates = resweep.split_near(k, radius)
    proposed = resweep.pull(k, candidates)
    tol = 1e-9 * max(1.0, float(np.max(np.abs(grads))), float(np.max(np.abs(proposed))))
    found = [grads]
    new_counts = [counts]
    for g, group in zip(proposed, candidates, strict=True):
        if np.min(np.max(np.abs(np.concatenate(found) - g), axis=1)) <= tol:
            continue
        witness = _gradient_in_ball(f, inputs, dirs[group.rows[0]], radius)
        if witness is not None:
            found.append(witness[None])
            new_counts.append(np.array([len(group.rows)]))
    return np.concatenate(found), np.concatenate(new_counts), resweep.near


def _gradient_in_ball(f, inputs: _Inputs, v: np.ndarray, radius: float) -> np.ndarray | None:
    """The limiting gradient along ``v`` at ``y = x + ε' v/|v|`` (one sweep there), or None
    where ``y`` does not land inside the ball (``|y - x| <= ε``, checked on the values)."""
    unit = v / np.linalg.norm(v)
    step = radius * (1.0 - 2.0 ** -20) * unit
    shifted = copy.copy(inputs)
    leaves, start = [], 0
    for x in inputs.leaves:
        part = step[start:start + x.size].reshape(x.shape)
        leaves.append(np.asarray(x + part.astype(x.dtype), dtype=x.dtype))
        start += x.size
    moved = np.concatenate([(np.asarray(y, float) - np.asarray(x, float)).ravel()
                            for y, x in zip(leaves, inputs.leaves, strict=True)])
    if np.linalg.norm(moved) > radius:
        return None
    shifted.leaves = leaves
    return _limiting_gradient(f, shifted, _split_leaves(unit[None], leaves))[0]


def _limiting_gradient(f, inputs: _Inputs, leaf_dirs: list[np.ndarray]) -> tuple:
    """``(gradient, degenerate ties)`` along the one direction ``leaf_dirs`` (one row per
    leaf), from a sweep of its own: every value, a jump's side included, is the one that
    direction enters."""
    trace, out, ids = sweep_along(f, inputs, [d[0] for d in leaf_dirs])
    traced = _scalar_output(out, trace)
    if traced is None:
        return _in_leaf_dtypes(np.zeros((1, sum(x.size for x in inputs.leaves))),
                               inputs)[0], {}
    kk = traced._id
    trace.check_lipschitz(kk)
    resweep = _Resweep(trace, ids, leaf_dirs)
    groups = resweep.split_at_ties(sorted(t for t in trace.ties if t <= kk))
    # (a rule re-run here meets the jumps the sweep along the same direction checked)
    g = resweep.pull(kk, groups)
    _check_finite(trace, kk, [g])
    return g[0], resweep.degenerate


def _per_direction(f, inputs: _Inputs, leaf_dirs: list[np.ndarray]) -> tuple:
    """The limiting gradient of each direction from a sweep of its own, and the degenerate
    ties they met (largest count per node).

    Where a jump reaches the output (continuously: ``x * (x < 0)`` at 0), the value past the
    jump is the side the direction enters, and the linearizations downstream read it as a
    constant: the shared re-sweep, which re-runs only the tie rules on the recording
    direction's values, would give every direction the recording direction's gradient."""
    grads, degenerate = [], {}
    for i in range(len(leaf_dirs[0])):
        g, deg = _limiting_gradient(f, inputs, [d[i:i + 1] for d in leaf_dirs])
        grads.append(g)
        for node, count in deg.items():
            degenerate[node] = max(degenerate.get(node, 0), count)
    return np.asarray(grads), degenerate


def _unbounded(size: int, radius: float, why: str) -> Enclosure:
    """An enclosure that proves nothing (the whole space), saying why."""
    return Enclosure(np.zeros(size), np.zeros((0, size)), np.zeros(0, int), [], False, [],
                     [why], radius)


def _check_radius(radius) -> float:
    if isinstance(radius, bool) or not isinstance(radius, numbers.Real):
        raise ArgumentTypeError(f"radius must be a real number >= 0 (the ε of the Goldstein "
                                f"ε-subdifferential), got {radius!r}")
    radius = float(radius)
    if not np.isfinite(radius) or radius < 0:
        raise ArgumentError(f"radius must be finite and >= 0, got {radius}: 0 samples the "
                            "Clarke set at x, ε > 0 the gradients within ε of x")
    return radius


def _ball_gradients(f, args: tuple, argnums, inputs: _Inputs, radius: float, points: int,
                    seed) -> np.ndarray:
    """Subgradients at ``points`` uniform random points of the ball ``|y - x| <= radius``."""
    from asd.api import subgrad

    if len(inputs.leaves) != 1 or not isinstance(argnums, numbers.Integral) or \
            not backend.is_host(inputs.leaves[0]):
        raise ArgumentError("points > 0 needs one differentiated numpy array or number "
                            "(argnums an int): sample several arguments by passing them as "
                            "one flat array")
    x = np.asarray(inputs.leaves[0], dtype=float)
    rng = np.random.default_rng(None if seed is None else [int(seed), 1])
    u = rng.standard_normal((points, x.size))
    u *= (radius * rng.random(points) ** (1.0 / x.size) / np.linalg.norm(u, axis=1))[:, None]
    out = []
    for step in u:  # one sweep per sample point, along its own random direction
        shifted = list(args)
        y = x + step.reshape(x.shape)
        shifted[argnums] = y if np.ndim(args[argnums]) else float(y)
        v = rng.standard_normal(x.shape)
        g = subgrad(f, argnums, direction=v if x.ndim else float(v))(*shifted)
        out.append(np.ravel(np.asarray(g, dtype=float)))
    return np.asarray(out)


# ----- directions -----

def _antithetic(inputs: _Inputs, n: int, seed) -> np.ndarray:
    """``n`` unit directions in the flattened joint input space, as pairs ``v, -v``."""
    size = sum(x.size for x in inputs.leaves)
    if size == 0:
        raise ArgumentError("the differentiated arguments are empty")
    rng = np.random.default_rng(seed)
    half = rng.standard_normal(((n + 1) // 2, size))
    half /= np.linalg.norm(half, axis=1, keepdims=True)
    return np.stack([half, -half], axis=1).reshape(-1, size)[:n]


def _given(inputs: _Inputs, directions) -> np.ndarray:
    size = sum(x.size for x in inputs.leaves)
    dirs = np.asarray(directions, dtype=float)
    if dirs.ndim == 0 or dirs.size % size or dirs.size == 0:
        raise ArgumentError(f"directions of shape {dirs.shape} do not hold whole directions of "
                         f"{size} entries (the differentiated arguments)")
    dirs = dirs.reshape(-1, size)
    if not np.all(np.isfinite(dirs)) or not np.all(np.any(dirs != 0, axis=1)):
        raise ArgumentError("every direction must be finite and nonzero")
    return dirs


def _split_leaves(dirs: np.ndarray, leaves: list[np.ndarray]) -> list[np.ndarray]:
    """The batch of directions as one ``(n, *leaf.shape)`` array per leaf, in its dtype."""
    out, start = [], 0
    for x in leaves:
        out.append(dirs[:, start:start + x.size].reshape((len(dirs), *x.shape)).astype(x.dtype))
        start += x.size
    return out


def _in_leaf_dtypes(grads: np.ndarray, inputs: _Inputs) -> np.ndarray:
    """The gradients with each numpy leaf's block rounded to that leaf's dtype, as
    `asd.subgrad` returns them (float32 stays float32): the reverse sweep runs in the
    output's dtype (float64 where a float64 constant promoted it), so a float32 argument's
    exact gradient 1 could come back as 1 + 2**-25. A finite gradient past the leaf dtype's
    range is refused, as `asd.subgrad` refuses it (float16's inf is no gradient)."""
    blocks, start = [], 0
    for i, x in enumerate(inputs.leaves):
        n = int(np.prod(np.shape(x), dtype=int))
        block = grads[:, start:start + n]
        dtype = np.asarray(x).dtype if backend.is_host(x) else None
        blocks.append(_narrowed(block, np.empty(0, dtype), inputs.describe(i))
                      if dtype is not None and dtype.kind == "f" else block)
        start += n
    return np.concatenate(blocks, axis=1) if blocks else grads


def _distinct(grads: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge gradients equal up to ``1e-9 * max(1, max |g|)`` in the max norm."""
    tol = 1e-9 * max(1.0, float(np.max(np.abs(grads), initial=0.0)))
    kept, kept_counts = [], []
    for g, c in zip(grads, counts, strict=True):
        if kept:
            close = np.max(np.abs(np.asarray(kept) - g), axis=1) <= tol
            if close.any():
                kept_counts[int(np.argmax(close))] += c
                continue
        kept.append(g)
        kept_counts.append(c)
    return np.asarray(kept), np.asarray(kept_counts)


# ----- the shared re-sweep -----

class _Group:
    """Directions (rows of the batch) whose tie linearizations coincide so far."""

    __slots__ = ("lins", "rows", "tangents")

    def __init__(self, rows: np.ndarray, lins: dict, tangents: dict):
        self.rows = rows  # indices into the n directions
        self.lins = lins  # tie node -> this group's linearization
        self.tangents = tangents  # node -> batched tangent (len(rows), *shape), or None for 0


class _DirectionView:
    """The parts of a trace that exact tie-breaking (``asd.core.ties``) reads, for one direction.

    ``asd.core.ties`` re-runs a tied quantity's ancestors on power series along ``x + δv``,
    starting from the inputs' tangents; here those are the given direction's, not the
    recording sweep's.
    """

    __slots__ = ("inputs", "nodes", "values", "series_memo", "lex", "lex_leaf", "lins_of",
                 "lex_tangents", "tangents")

    def __init__(self, trace: Trace, inputs: dict[int, np.ndarray], lins_of):
        self.nodes, self.values, self.inputs = trace.nodes, trace.values, inputs
        self.lex, self.lex_leaf, self.lins_of = trace.lex, trace.lex_leaf, lins_of
        self.series_memo: dict = {}
        self.lex_tangents: dict = {}
        self.tangents: dict = {}

    def lex_tangent(self, k: int, level: int) -> np.ndarray:
        """``w_level`` pushed through this direction's group of linearizations."""
        return push_direction(self.nodes, self.lins_of, lambda j: self.lex_leaf(j, level), k,
                              self.lex_tangents.setdefault(level, {}))

    def tangent(self, k: int) -> np.ndarray:
        """The given direction at input node ``k``; at another node, pushed through this
        direction's group of linearizations (``asd.core.ties`` reads those where a tie's
        exact series is out of reach and it falls back to first order)."""
        if k in self.inputs:
            return self.inputs[k]
        return push_direction(self.nodes, self.lins_of, self._seed, k, self.tangents)

    def _seed(self, j: int) -> np.ndarray:
        """Input node ``j``'s part of the direction (zero for one not differentiated)."""
        return self.inputs[j] if j in self.inputs else np.zeros(self.nodes[j].shape)


class _RowTangent(LazyTangent):
    """The lazy tangent a re-run rule sees: one row of a group's batched tangent.

    A ``LazyTangent`` of a `_DirectionView`, so a rule that breaks a degenerate tie along
    the exact ray follows this direction.
    """

    __slots__ = ("batch", "row")

    def __init__(self, view: _DirectionView, k: int, batch, row: int):
        super().__init__(view, k)
        self.batch, self.row = batch, row

    def __call__(self, index=None) -> np.ndarray:
        t = self.batch[self.row]
        return t if index is None else t[index]


class _Resweep:
    """Re-runs tie rules per direction on a finished trace; pulls per group in one batch."""

    def __init__(self, trace: Trace, ids: list[int], leaf_dirs: list[np.ndarray]):
        self.trace, self.ids, self.leaf_dirs = trace, ids, leaf_dirs
        self.degenerate: dict[int, int] = {}
        self.decisions: dict[tuple[int, str], int] = {}
        self.near: dict[int, int] = {}  # node -> entries snapped onto a tie (radius > 0)
        self.jumps: dict = {}  # node -> a jump a re-run rule met (`record_jump`)
        self.probes = np.random.default_rng(0)
        # one view per direction, kept across the tied nodes: its exact series along the
        # direction do not depend on the group (memoized once per sweep, as a sweep's are),
        # and its lexicographic tangents read maps a direction's group only ever refines
        self.views: dict[int, _DirectionView] = {}

    def record_degenerate(self, k: int, count: int) -> None:  # the rule-context hook
        self.degenerate[k] = self.degenerate.get(k, 0) + count

    def record_decision(self, k: int, how: str, count: int) -> None:  # the rule-context hook
        self.decisions[k, how] = self.decisions.get((k, how), 0) + count

    def record_jump(self, k: int, jump) -> None:  # the rule-context hook
        """A re-run rule's jump (`asd.core.primitive.record_jump`): kept, with the
        recording sweep's own, for `jumps_reaching`."""
        self.jumps[k] = jump

    def settled(self, k: int, flat_ok: bool = False) -> bool:  # the rule-context hook
        """`Trace.settled`, with this re-run's own decisions."""
        return (flat_ok or (k, "flat") not in self.decisions) and self.trace.settled(k, flat_ok)

    def jumps_reaching(self, out: int) -> list[int]:
        """The nodes at a jump, met by the recording sweep or by a rule re-run along
        another direction, whose values reach node ``out``: there a direction's value past
        the jump (the side it enters) differs from the recording direction's, and only a
        sweep of its own gives its gradient (`_per_direction`)."""
        trace = self.trace
        return sorted(set(trace.jumps_reaching(out)) | {
            j for j in trace.jumps_reaching(out, among=self.jumps)})

    def split_at_ties(self, tie_nodes: list[int]) -> list[_Group]:
        n = len(self.leaf_dirs[0])
        seeds = {i: d for i, d in zip(self.ids, self.leaf_dirs, strict=True)}
        groups = [_Group(np.arange(n), {}, seeds)]
        for k in tie_nodes:
            probe = self.probes.standard_normal(self.trace.nodes[k].shape)
            groups = [part for g in groups for part in self._split(g, k, probe)]
        return groups

    def split_near(self, out: int, radius: float) -> list[_Group]:
        """`split_at_ties` for the ball ``|y - x| <= radius``: every node up to ``out`` in
        order gets its reach; a rule with a snap (`Primitive.defsnap`, next to the rule in
        library/) whose switching quantity is within reach of a tie is re-run per direction
        on snapped inputs, as exact ties are."""
        trace = self.trace
        nodes, values = trace.nodes, trace.values
        n = len(self.leaf_dirs[0])
        seeds = {i: d for i, d in zip(self.ids, self.leaf_dirs, strict=True)}
        groups = [_Group(np.arange(n), {}, seeds)]
        reach: list = [None] * (out + 1)
        for k in range(out + 1):
            node = nodes[k]
            if node.prim is None or not node.active or trace.lins[k] is None:
                reach[k] = np.full(node.shape, radius if k in seeds else 0.0)
                continue
            snap = node.prim.snap
            snapped = None
            if snap is not None:
                xs, rs = [], []
                for r in node.args:
                    if type(r) is int:
                        xs.append(values[r])
                        rs.append(reach[r] if nodes[r].active else np.zeros(nodes[r].shape))
                    else:
                        xs.append(r.value)
                        rs.append(np.zeros(np.shape(r.value)))
                if not all(backend.is_host(x) for x in xs):
                    raise ArgumentError("radius > 0 snaps near-ties on numpy values: pass "
                                        "numpy arrays to asd.clarke (the sweep ran on another "
                                        "array library's values)")
                snapped, count = snap([np.asarray(x) for x in xs], rs, **node.params)
                if count:
                    self.near[k] = count
                else:
                    snapped = None
            if snapped is not None or k in trace.ties:
                probe = self.probes.standard_normal(node.shape)
                groups = [part for g in groups for part in self._split(g, k, probe, snapped)]
                lins = list({id(g.lins[k]): g.lins[k] for g in groups}.values())
            else:
                lins = [trace.lins[k]]
            reach[k] = _reach(nodes, trace.dargs.get(k, node.args), k, lins, reach)
        return groups

    def _lin(self, group: _Group, j: int):
        lin = group.lins.get(j)
        return self.trace.lins[j] if lin is None else lin

    def _tangent(self, group: _Group, k: int):
        """The batched tangent of node ``k`` for the group's directions (None means zero)."""
        nodes, memo = self.trace.nodes, group.tangents
        if k in memo:
            return memo[k]
        for j in missing_cone(nodes, k, memo):
            lin = self._lin(group, j)
            ins = [memo.get(r) if type(r) is int and nodes[r].active else None
                   for r in self.trace.dargs.get(j, nodes[j].args)]
            if lin is None:
                memo[j] = None
            elif type(lin) is FanIn:
                memo[j] = lin.push(*ins)
            else:
                memo[j] = None if ins[0] is None else lin.push(ins[0])
        return memo[k]

    def _split(self, group: _Group, k: int, probe: np.ndarray,
               snapped: list | None = None) -> list[_Group]:
        trace = self.trace
        node = trace.nodes[k]
        xs, dxs_batch = [], []
        for r in node.args:
            if type(r) is int:
                xs.append(trace.values[r])
                parent = trace.nodes[r]
                if parent.active:
                    t = self._tangent(group, r)
                    if t is None:
                        t = np.zeros((len(group.rows), *parent.shape), parent.dtype)
                    dxs_batch.append(t)
                else:
                    dxs_batch.append(ZeroTangent(parent.shape, parent.dtype))
            else:
                xs.append(r.value)
                dxs_batch.append(ZeroTangent(np.shape(r.value), np.result_type(r.value)))
        if snapped is not None:
            xs = snapped
        buckets: dict[bytes, tuple[list[int], Any]] = {}
        rule_context.trace, rule_context.node = self, k
        try:
            for row, direction in enumerate(group.rows):
                view = self.views.get(direction)
                if view is None:
                    view = self.views[direction] = _DirectionView(
                        trace, {i: d[direction] for i, d in
                                zip(self.ids, self.leaf_dirs, strict=True)}, None)
                view.lins_of = partial(self._lin, group)
                dxs = [d if isinstance(d, ZeroTangent) else _RowTangent(view, r, d, row)
                       for r, d in zip(node.args, dxs_batch, strict=True)]
                _, lin = node.prim.rule(xs, dxs, **node.params)
                key = _fingerprint(lin, probe)
                buckets.setdefault(key, ([], lin))[0].append(row)
        except ASDError as e:
            raise e.at(trace.describe(node.prim, node.args, node.params, k)) from None
        finally:
            rule_context.trace = None
        if len(buckets) == 1:
            ((_, lin),) = buckets.values()
            return [_Group(group.rows, {**group.lins, k: lin}, group.tangents)]
        parts = []
        for rows, lin in buckets.values():
            sel = np.asarray(rows)
            tangents = {j: None if t is None else t[sel] for j, t in group.tangents.items()}
            parts.append(_Group(group.rows[sel], {**group.lins, k: lin}, tangents))
        return parts

    def pull(self, out: int, groups: list[_Group]) -> np.ndarray:
        """One reverse sweep with one cotangent row per group; returns ``(n_groups, N)``."""
        trace = self.trace
        nodes, lins, wants = trace.nodes, trace.lins, trace.wants
        ng = len(groups)
        ct: list = [None] * len(nodes)  # an input after the output node has a zero row
        ct[out] = np.ones((ng, *nodes[out].shape), nodes[out].dtype)
        for k in range(out, -1, -1):
            c = ct[k]
            if c is None or lins[k] is None:
                continue
            ct[k] = None
            if k in groups[0].lins:
                parts = _stack([_pull_one(g.lins[k], c[i], wants[k])
                                for i, g in enumerate(groups)])
            else:
                parts = _pull_one(lins[k], c, wants[k])
            for r, p in zip(trace.dargs.get(k, nodes[k].args), parts, strict=True):
                if p is not None:
                    ct[r] = p if ct[r] is None else ct[r] + p
        rows = [np.zeros((ng, int(np.prod(nodes[i].shape, dtype=int)))) if ct[i] is None
                else np.broadcast_to(ct[i], (ng, *nodes[i].shape)).reshape(ng, -1)
                for i in self.ids]
        return np.concatenate(rows, axis=1)


def _reach(nodes: list, args: tuple, k: int, lins: list, reach: list) -> np.ndarray:
    """``max over lins |lin| reach(args)``: how far node ``k`` can move on the ball, to
    first order (inf where a map cannot bound itself); ``args`` are the nodes the maps read."""
    node = nodes[k]
    best = np.zeros(node.shape)
    for lin in lins:
        maps = lin.maps if type(lin) is FanIn else (lin,)
        total = np.zeros(node.shape)
        for m, r in zip(maps, args, strict=False):
            if m is None or type(r) is not int or not nodes[r].active:
                continue
            mag = m.magnitude()
            if mag is None:
                return np.full(node.shape, np.inf)
            total = total + np.asarray(backend.to_host(mag.push(reach[r])), dtype=float)
        best = np.maximum(best, total)
    return best


def _pull_one(lin, c, wants) -> tuple:
    if type(lin) is FanIn:
        return lin.pull(c, wants)
    return (lin.pull(c),) if wants[0] else (None,)


def _stack(per_group: list[tuple]) -> tuple:
    """Stack per-group cotangent tuples into batched ones (zeros where a group has None)."""
    out = []
    for parts in zip(*per_group, strict=True):
        present = [p for p in parts if p is not None]
        if not present:
            out.append(None)
            continue
        like = np.asarray(present[0])
        out.append(np.stack([np.zeros_like(like) if p is None else np.asarray(p)
                             for p in parts]))
    return tuple(out)


def _fingerprint(lin, probe: np.ndarray) -> bytes:
    """Bytes that are equal for equal linear maps: the pull of a fixed random cotangent.

    Two different linear maps pull a random vector to different results with probability
    one, and a rule that takes the same branch computes the same map bit for bit.
    """
    parts = lin.pull(probe) if type(lin) is FanIn else (lin.pull(probe),)
    return b"|".join(b"-" if p is None else np.ascontiguousarray(p).tobytes() for p in parts)
