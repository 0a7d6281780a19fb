"""Certificates for ``library/norms.py``.

The p-norm with 1 < p < inf is smooth except at 0, a semialgebraic kink that is not a
finite branching program of the input. Its gradient is positively homogeneous of degree 0,
so along any ray ``δv`` (δ > 0) it is constant: ``∇f(δv) = ∇f(v)``. sympy checks that
identity symbolically, which makes ``∇f(v)`` the limiting gradient along ``v`` (a Clarke
subgradient at 0); the rule must return it. The l1 and l-infinity norms are compositions of
certified primitives (abs, sum, max), so they need no separate certificate.
"""

from __future__ import annotations

import sympy as sp
from asd.library import norms

from .registry import LimitProof


def _p_norm(p):
    return lambda xs: sum(sp.Abs(x) ** p for x in xs) ** (sp.Integer(1) / p)


PROOFS = [
    LimitProof((norms.pnorm_p,), lambda x: norms.pnorm(x, 2.0),
               lambda xs: sp.sqrt(sum(x * x for x in xs)), title="pnorm (p=2)"),
    LimitProof((norms.pnorm_p,), lambda x: norms.pnorm(x, 3.0), _p_norm(3), title="pnorm (p=3)"),
]

__all__ = ["PROOFS"]
