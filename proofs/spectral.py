"""Certificates for ``library/spectral.py`` (a baseline; the family's owner may refine it).

Spectral functions kink where eigenvalues coincide. On 2 x 2 symmetric matrices
``[[a, b], [b, c]]`` the eigenvalues have a closed form, ``(a + c)/2 ± sqrt(((a - c)/2)**2 +
b**2)``, whose gradient is homogeneous of degree 0 about the kink (the identity for
lambda_max/lambda_min, zero for the norms): sympy checks ``∇f(X0 + δV) = ∇f(X0 + V)``, which
makes ``∇f(X0 + V)`` the limiting gradient along ``V``, and the rule must return it. Larger
matrices get a floating-point check: at repeated eigenvalues, along random directions, the
Dini derivative against a one-sided difference quotient and the limiting Jacobian against
forward differences at ``X + δV`` (labelled "numeric").
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from asd.library import spectral as S

from .registry import LimitProof, NumericLimitProof

I2 = np.eye(2)
D = np.diag([1.0, 1.0, 0.0])


def sym2(x):
    """The symmetric 2 x 2 matrix [[a, b], [b, c]] of a traced vector (a, b, c)."""
    return np.reshape(x[np.array([0, 1, 1, 2])], (2, 2))


def _gap(a, b, c):
    return sp.sqrt(((a - c) / 2) ** 2 + b ** 2)


def lam_max(xs):
    a, b, c = xs
    return (a + c) / 2 + _gap(a, b, c)


def lam_min(xs):
    a, b, c = xs
    return (a + c) / 2 - _gap(a, b, c)


def closed_form(prim, fn, formula, at, title):
    return LimitProof((prim,), lambda x: fn(sym2(x)), formula, at=at, title=title,
                      kink="repeated eigenvalue", continuity="continuous (eigenvalue)")


def proof(prim, fn, *points, k=3):
    return NumericLimitProof((prim,), fn, [(x, k) for x in points],
                             note="n/a (eigenvalue ties)")


PROOFS = [
    closed_form(S.topk_eigsum_p, lambda X: S.topk_eigsum(X, 1), lam_max, (1.0, 0.0, 1.0),
                "topk_eigsum (k=1, 2x2 at I)"),
    closed_form(S.lambda_min_p, S.lambda_min, lam_min, (1.0, 0.0, 1.0), "lambda_min (2x2 at I)"),
    closed_form(S.spectral_norm_p, S.spectral_norm,
                lambda xs: sp.Abs((xs[0] + xs[2]) / 2) + _gap(*xs), (0.0, 0.0, 0.0),
                "spectral_norm (2x2 at 0)"),
    closed_form(S.nuclear_norm_p, S.nuclear_norm,
                lambda xs: sp.Abs(lam_max(xs)) + sp.Abs(lam_min(xs)), (0.0, 0.0, 0.0),
                "nuclear_norm (2x2 at 0)"),
    proof(S.eigvalsh_p, S.eigvalsh, I2, D),
    proof(S.lambda_min_p, S.lambda_min, I2, D),
    proof(S.topk_eigsum_p, lambda X: S.topk_eigsum(X, 1), I2, D),
    proof(S.spectral_norm_p, S.spectral_norm, I2, np.diag([1.0, -1.0])),
    proof(S.nuclear_norm_p, S.nuclear_norm, np.diag([1.0, 0.0]), D),
]

__all__ = ["PROOFS"]
