"""Certificates for ``library/elementwise.py``: the smooth formulas against sympy's
derivatives (off the kinks), arctan2's jump across the negative x axis like the other jumps,
and the identities on real input; hypot (numpy's value, the 2-norm's rule over the pair)
against sympy off the origin and as a limit at it. fmax/fmin, fabs and the degree conversions
are written with primitives certified elsewhere (maximum/minimum, abs, multiply)."""

from __future__ import annotations

import numpy as np
import sympy as sp
from asd.library import elementwise as E

from .registry import DiscontinuousProof, LimitProof, SymbolicProof

X = (np.array([0.3, -0.55, 0.8]),)
PAIR = (np.array([0.3, 1.7, -0.9]), np.array([1.1, -0.4, 2.5]))


def elementwise(fn):
    """A scalar sympy function of one or two arguments mapped over object arrays."""
    return lambda *xs: np.vectorize(fn, otypes=[object])(*xs)


PROOFS = [
    SymbolicProof((E.logaddexp_p,), E.logaddexp, [PAIR],
                  elementwise(lambda a, b: sp.log(sp.exp(a) + sp.exp(b)))),
    SymbolicProof((E.logaddexp2_p,), E.logaddexp2, [PAIR],
                  elementwise(lambda a, b: sp.log(2 ** a + 2 ** b, 2))),
    SymbolicProof((E.hypot_pair_p,), E.hypot, [PAIR],
                  elementwise(lambda a, b: sp.sqrt(a * a + b * b))),
    LimitProof((E.hypot_pair_p,), lambda x: E.hypot(x[0], x[1]),
               lambda xs: sp.sqrt(xs[0] ** 2 + xs[1] ** 2), dim=2, title="hypot at (0, 0)"),
    SymbolicProof((E.arctan2_p,), E.arctan2, [PAIR], elementwise(sp.atan2)),
    DiscontinuousProof((E.arctan2_p,), lambda p: E.arctan2(p[0], p[1]) + p[1], at=(0.0, -1.0),
                       away=(0.5, -1.0), slope="smooth", title="arctan2 (cut x < 0, y = 0)"),
    SymbolicProof((E.arccosh_p,), E.arccosh, [(np.array([1.5, 2.0, 7.25]),)],
                  elementwise(sp.acosh)),
    SymbolicProof((E.sinc_p,), E.sinc, [X, (np.array([1e-4, -2e-3, 2.5]),)],
                  elementwise(lambda a: sp.sin(sp.pi * a) / (sp.pi * a))),
    SymbolicProof((E.conjugate_p,), E.conjugate, [X], lambda x: x, what="identity"),
    SymbolicProof((E.nan_to_num_p,), E.nan_to_num, [X], lambda x: x,
                  what="identity on finite entries (non-finite ones are constants)"),
]

__all__ = ["PROOFS"]
