"""Certificates for ``library/statistics.py``.

var, average, cov and ptp are compositions of certified primitives (arithmetic, sum, max and
min), so they need none of their own. std is the l2 norm's rule of the deviations scaled by
``1 / sqrt(n - ddof)`` with numpy's value: checked against sympy off zero variance and as a
limit at it (the norm's kink). The correlation
``C_ij / sqrt(C_ii C_jj)`` of a covariance matrix, is smooth where its rule accepts the input
(every variance positive; it refuses the rest): its Jacobian is checked against sympy's.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from asd.library import statistics

from .registry import LimitProof, SymbolicProof


def _correlation(C):
    n = C.shape[0]
    return np.array([[C[i, j] / sp.sqrt(C[i, i] * C[j, j]) for j in range(n)]
                     for i in range(n)], dtype=object)


C3 = np.array([[2.0, 0.3, -0.5], [0.3, 1.5, 0.2], [-0.5, 0.2, 0.8]])
C2 = np.array([[0.7, -1.1], [0.4, 3.0]])  # not symmetric: the formula is read entrywise

X3 = np.array([0.3, -1.2, 0.55])


def _std_formula(xs):
    m = sum(xs) / len(xs)
    return sp.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


PROOFS = [
    SymbolicProof((statistics.std_p,), lambda x: statistics.std(x, ddof=1), [(X3,)],
                  lambda x: _std_formula(list(x)), what="sympy diff (ddof=1)"),
    LimitProof((statistics.std_p,), lambda x: statistics.std(x, ddof=1), _std_formula,
               at=(0.5, 0.5, 0.5), kink="zero variance (x = c 1)", title="std at zero variance"),
    SymbolicProof((statistics.correlation_p,), statistics.correlation_p, [(C3,), (C2,)],
                  _correlation),
]

__all__ = ["PROOFS"]
