"""Certificates for ``library/projections.py`` (a baseline; the family's owner may refine it).

A projection's kinks are where the active set (or, for curved sets, the side of the
boundary) changes. At points on those kinks, along random directions, the rule's Dini
derivative must match a one-sided difference quotient, and its limiting Jacobian the
forward-difference Jacobian at ``x + δv``: a floating-point check labelled "numeric".
"""

from __future__ import annotations

import numpy as np
from asd.library import projections as P

from .registry import NumericLimitProof

X3 = np.array([1.0, 0.0, -0.5])
A = np.array([1.0, 1.0, 0.0])


def proof(prim, fn, *points, k=3):
    return NumericLimitProof((prim,), fn, [(x, k) for x in points])


PROOFS = [
    proof(P.zeros_p, P.zeros, X3),
    proof(P.reals_p, P.reals, X3),
    proof(P.nonneg_p, P.nonneg, X3),
    proof(P.nonpos_p, P.nonpos, X3),
    proof(P.box_p, lambda x: P.box(x, -0.5, 1.0), X3),
    proof(P.linf_ball_p, lambda x: P.linf_ball(x, 1.0), X3),
    proof(P.hyperplane_p, lambda x: P.hyperplane(x, A, 1.0), X3),
    proof(P.halfspace_p, lambda x: P.halfspace(x, A, 1.0), X3),
    proof(P.l1_ball_p, lambda x: P.l1_ball(x, 1.5), X3),
    proof(P.l2_ball_p, lambda x: P.l2_ball(x, 1.0), np.array([0.6, 0.8, 0.0])),
    proof(P.simplex_p, lambda x: P.simplex(x, 1.0), X3, np.array([0.5, 0.5, 0.0])),
    proof(P.standard_simplex_p, lambda x: P.standard_simplex(x, 1.0), X3),
    proof(P.soc_p, P.soc, np.array([1.0, 0.6, 0.8]), np.zeros(3)),
    proof(P.rsoc_p, P.rsoc, np.array([1.0, 0.5, 1.0])),
    proof(P.psd_p, P.psd, np.diag([1.0, 0.0])),
    proof(P.nuclear_ball_p, lambda X: P.nuclear_ball(X, 1.0), np.diag([1.0, 0.5])),
    proof(P.distance_p, lambda x: P.distance(x, "nonneg"), X3),
]

__all__ = ["PROOFS"]
