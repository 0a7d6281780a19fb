"""Certificates for ``library/statistics.py``.

var, std, average, cov and ptp are compositions of certified primitives (arithmetic, sum,
the l2 norm, max and min), so they need none of their own. The one primitive, the correlation
``C_ij / sqrt(C_ii C_jj)`` of a covariance matrix, is smooth where its rule accepts the input
(every variance positive; it refuses the rest): its Jacobian is checked against sympy's.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from asd.library import statistics

from .registry import SymbolicProof


def _correlation(C):
    n = C.shape[0]
    return np.array([[C[i, j] / sp.sqrt(C[i, i] * C[j, j]) for j in range(n)]
                     for i in range(n)], dtype=object)


C3 = np.array([[2.0, 0.3, -0.5], [0.3, 1.5, 0.2], [-0.5, 0.2, 0.8]])
C2 = np.array([[0.7, -1.1], [0.4, 3.0]])  # not symmetric: the formula is read entrywise

PROOFS = [
    SymbolicProof((statistics.correlation_p,), statistics.correlation_p, [(C3,), (C2,)],
                  _correlation),
]

__all__ = ["PROOFS"]
