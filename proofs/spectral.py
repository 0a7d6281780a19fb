"""Certificates for ``library/spectral.py`` (a baseline; the family's owner may refine it).

Spectral functions kink where eigenvalues coincide. At repeated eigenvalues, along random
symmetric directions, the rule's Dini derivative must match a one-sided difference quotient
and its limiting Jacobian the forward-difference Jacobian at ``X + δV``: a floating-point
check labelled "numeric".
"""

from __future__ import annotations

import numpy as np
from asd.library import spectral as S

from .registry import NumericLimitProof

I2 = np.eye(2)
D = np.diag([1.0, 1.0, 0.0])


def proof(prim, fn, *points, k=3):
    return NumericLimitProof((prim,), fn, [(x, k) for x in points],
                             note="n/a (eigenvalue ties)")


PROOFS = [
    proof(S.eigvalsh_p, S.eigvalsh, I2, D),
    proof(S.lambda_min_p, S.lambda_min, I2, D),
    proof(S.topk_eigsum_p, lambda X: S.topk_eigsum(X, 1), I2, D),
    proof(S.spectral_norm_p, S.spectral_norm, I2, np.diag([1.0, -1.0])),
    proof(S.nuclear_norm_p, S.nuclear_norm, np.diag([1.0, 0.0]), D),
]

__all__ = ["PROOFS"]
