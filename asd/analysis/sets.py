"""Convex sets given by a linear maximization oracle, and the distance questions asked of them.

The Clarke sets asd reports are convex, and every one it builds can answer one question
cheaply: *which of your points goes farthest along d?* (the support function
``h(d) = max_{c in C} d·c`` and a point attaining it). A finite set of gradients answers by
scanning them; an outer enclosure (`asd.analysis.enclosure`) by summing its factors' answers.
From that one oracle, `nearest` finds the point of ``C`` nearest to ``g`` (Wolfe's fully
corrective Frank-Wolfe: the nearest point of the hull of the points found so far, by NNLS,
then one oracle call) and, with it, two certified bounds on the distance:

- an *upper* bound ``|c - g|`` from a point ``c`` that is a convex combination of points of
  ``C`` (so in ``C``);
- a *lower* bound from the separating direction ``d = (g - c)/|g - c|``:
  ``dist(g, C) >= d·g - h(d)`` for every unit ``d``, exactly (the support function is
  evaluated in closed form, not estimated). A positive lower bound proves ``g`` outside ``C``,
  with ``d`` the separating direction and the bound the margin.

The bounds meet when the solver converges; they are both valid whenever it stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

Oracle = Callable[[np.ndarray], tuple[float, np.ndarray]]
"""``oracle(d) -> (h(d), c)``: the support function at ``d`` and a point ``c`` of the set
with ``d·c = h(d)``."""


def points_oracle(points: np.ndarray) -> Oracle:
    """The oracle of the hull of the rows of ``points``."""
    def oracle(d: np.ndarray) -> tuple[float, np.ndarray]:
        scores = points @ d
        i = int(np.argmax(scores))
        return float(scores[i]), points[i]

    return oracle


def union_oracle(oracles: list[Oracle]) -> Oracle:
    """The oracle of the hull of a union: the best of the parts."""
    def oracle(d: np.ndarray) -> tuple[float, np.ndarray]:
        return max((o(d) for o in oracles), key=lambda hc: hc[0])

    return oracle


@dataclass(frozen=True)
class Nearest:
    """The result of `nearest`: ``point`` in the set, ``upper = |point - g|``, ``lower`` a
    certified lower bound on ``dist(g, C)`` (0 when it cannot be positive), ``direction`` the
    unit vector that proves it (``direction·g - h(direction) = lower``), or None."""

    point: np.ndarray
    upper: float
    lower: float
    direction: np.ndarray | None
    weights: np.ndarray
    atoms: np.ndarray


def _min_norm_hull(atoms: np.ndarray) -> np.ndarray:
    """Convex weights of the min-norm point of the hull of the rows of ``atoms`` (Lawson and
    Hanson's reduction of the least-distance problem to one NNLS; `ClarkeSample.min_norm`)."""
    scale = max(1.0, float(np.max(np.abs(atoms))))
    E = np.vstack([atoms.T / scale, np.ones((1, len(atoms)))])
    e = np.zeros(E.shape[0])
    e[-1] = 1.0
    u, _ = nnls(E, e)
    if u.sum() <= 0:  # degenerate: NNLS returned 0 (cannot happen for finite atoms)
        u = np.ones(len(atoms))
    return u / u.sum()


def nearest(oracle: Oracle, g: np.ndarray, *, slack: float = 0.0, rtol: float = 1e-12,
            max_iter: int = 500) -> Nearest:
    """The point of the convex set with ``oracle`` nearest to ``g``, with certified bounds.

    Wolfe's method: keep the atoms (oracle points) found so far, take the nearest point ``c``
    of their hull, ask the oracle for the farthest point along ``g - c``; stop when it is no
    farther than ``c`` itself (up to ``rtol`` of the scale), which makes ``c`` the nearest
    point of the whole set. ``slack`` is subtracted from the lower bound: what rounding in
    the set's own construction may have moved its support function.

    >>> r = nearest(points_oracle(np.array([[1.0, 0.0], [0.0, 1.0]])), np.zeros(2))
    >>> np.round(r.point, 12).tolist(), round(r.upper, 12), round(r.lower, 12)
    ([0.5, 0.5], 0.707106781187, 0.707106781187)
    """
    g = np.asarray(g, dtype=float)
    A = (oracle(-g if np.any(g) else np.ones_like(g))[1] - g)[None]
    best_lower, best_dir = 0.0, None
    for _ in range(max_iter):
        w = _min_norm_hull(A)
        keep = w > 0
        A, w = A[keep], w[keep]
        z = w @ A                               # c - g for the current nearest point c
        norm = float(np.linalg.norm(z))
        scale = max(1.0, float(np.max(np.abs(A + g))), float(np.max(np.abs(g))))
        if norm <= 64 * np.finfo(float).eps * scale * np.sqrt(g.size):
            break
        d = -z / norm                           # from the set toward g
        h, c = oracle(d)
        lower = float(d @ g - h) - slack
        if lower > best_lower:
            best_lower, best_dir = lower, d
        # the Frank-Wolfe gap: how much farther than c the set reaches along d
        if h - float(d @ (z + g)) <= rtol * scale:
            break
        A = np.vstack([A, c - g])
    else:
        w = _min_norm_hull(A)
        A, w = A[w > 0], w[w > 0]
        norm = float(np.linalg.norm(w @ A))
    return Nearest(w @ A + g, norm, best_lower, best_dir, w, A + g)
