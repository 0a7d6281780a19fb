"""Certificates for ``library/projections.py`` (a baseline; the family's owner may refine it).

Projections onto orthants, boxes and a halfspace are branching programs (relu, clip, and
one ``relu`` of the constraint's value), so they get the same proof as the piecewise family;
affine sets get sympy's Jacobian. For the other sets the kinks are where the active set (or,
for curved sets, the side of the boundary) changes: at points on those kinks, along random
directions, the rule's Dini derivative must match a one-sided difference quotient, and its
limiting Jacobian the forward-difference Jacobian at ``x + δv``: a floating-point check
labelled "numeric".
"""

from __future__ import annotations

import numpy as np
from asd.library import projections as P

from asd import branch, branching

from .piecewise import clip, hardtanh, relu, univariate_points
from .registry import NumericLimitProof, ProgramProof, SymbolicProof


@branching
def nonpos(x):
    return x if branch(-x) else 0


def _halfspace_part(x0, x1):  # a = (1, 1, 0), b = 1: x - a relu(<a, x> - b) / |a|^2
    s = x0 + x1 - 1
    return s if branch(s) else 0


@branching
def halfspace_0(x0, x1, x2):
    return x0 - _halfspace_part(x0, x1) / 2


@branching
def halfspace_1(x0, x1, x2):
    return x1 - _halfspace_part(x0, x1) / 2


@branching
def halfspace_2(x0, x1, x2):
    return x2


def boundary_points(seed: int) -> list:
    """Points on and off the plane x0 + x1 = 1, one vector per argument triple."""
    rng = np.random.default_rng(seed)
    pts = []
    for trial in range(6):
        t = float(rng.integers(-4, 5)) / 4
        on = trial < 4
        x = (np.array([t]), np.array([1 - t if on else t + 0.75]), np.array([0.5]))
        v = tuple(rng.normal(size=1) for _ in range(3))
        pts.append((x, v, True))
    return pts


def _component(k):
    return lambda X: P.halfspace(X[:, 0], A, 1.0)[k:k + 1]


def box_points(seed: int) -> list:
    """x on the bounds lo < hi (and between or outside them); generic directions."""
    rng = np.random.default_rng(seed)
    pts = []
    for _ in range(4):
        lo = rng.integers(-2, 2, 6).astype(float)
        hi = lo + rng.integers(1, 3, 6)
        x = np.choose(rng.integers(0, 3, 6), [lo, hi, rng.integers(-3, 4, 6).astype(float)])
        pts.append(((x, lo, hi), tuple(rng.normal(size=6) for _ in range(3)), True))
    return pts

X3 = np.array([1.0, 0.0, -0.5])
A = np.array([1.0, 1.0, 0.0])


def proof(prim, fn, *points, k=3):
    return NumericLimitProof((prim,), fn, [(x, k) for x in points])


PROOFS = [
    SymbolicProof((P.zeros_p,), P.zeros, [(X3,)], lambda x: x * 0, what="sympy diff"),
    SymbolicProof((P.reals_p,), P.reals, [(X3,)], lambda x: x, what="sympy diff"),
    SymbolicProof((P.hyperplane_p,), lambda x: P.hyperplane(x, A, 1.0), [(X3,)],
                  lambda x: x - A * (A @ x - 1) / (A @ A)),
    ProgramProof((P.nonneg_p,), relu, P.nonneg, univariate_points([0.0], 31)),
    ProgramProof((P.nonpos_p,), nonpos, P.nonpos, univariate_points([0.0], 32)),
    ProgramProof((P.box_p,), clip, P.box, box_points(33)),
    ProgramProof((P.linf_ball_p,), hardtanh, lambda x: P.linf_ball(x, 1.0),
                 univariate_points([-1.0, 1.0], 34)),
    ProgramProof((P.halfspace_p,), (halfspace_0, halfspace_1, halfspace_2),
                 tuple(_component(k) for k in range(3)), boundary_points(35), stacked=True),
    proof(P.l1_ball_p, lambda x: P.l1_ball(x, 1.5), X3),
    proof(P.l2_ball_p, lambda x: P.l2_ball(x, 5.0), np.array([3.0, 4.0, 0.0])),
    proof(P.simplex_p, lambda x: P.simplex(x, 1.0), X3, np.array([0.5, 0.5, 0.0])),
    proof(P.standard_simplex_p, lambda x: P.standard_simplex(x, 1.0), X3),
    proof(P.soc_p, P.soc, np.array([5.0, 3.0, 4.0]), np.zeros(3)),
    proof(P.rsoc_p, P.rsoc, np.array([1.0, 0.5, 1.0])),
    proof(P.psd_p, P.psd, np.diag([1.0, 0.0])),
    proof(P.nuclear_ball_p, lambda X: P.nuclear_ball(X, 1.0), np.diag([1.0, 0.5])),
    proof(P.distance_p, lambda x: P.distance(x, "nonneg"), X3),
    # the cones of MathOptInterface: curved boundaries, faces, the smooth region
    proof(P.exp_cone_p, P.exp_cone, np.array([0.0, 1.0, 1.0]), np.array([-1.0, 0.0, 2.0]),
          np.array([1.0, 1.0, 1.0])),
    proof(P.exp_cone_dual_p, P.exp_cone_dual, np.array([-1.0, -1.0, 1.0]),
          np.array([0.0, 1.0, 1.0])),
    proof(P.power_cone_p, lambda x: P.power_cone(x, 0.5), np.array([1.0, 4.0, 2.0]),
          np.array([1.0, -1.0, 0.0]), np.array([-1.0, -1.0, 2.0])),
    proof(P.power_cone_dual_p, lambda x: P.power_cone_dual(x, 0.3),
          np.array([1.0, 2.0, 0.5]), np.array([-1.0, 1.0, 1.0])),
]

__all__ = ["PROOFS"]
