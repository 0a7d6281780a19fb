"""Certificates for ``library/discontinuous.py``.

Each primitive jumps: differentiating an output it reaches at a jump must raise, and off the
jumps it is locally constant (remainder: slope 1), so asd's gradient is the difference
quotient there. Where a composite is continuous across a jump (``x * sign(x)`` is ``|x|``,
``frac(x)(1 - frac(x))`` with ``frac`` from floor or ``%``) the rule check against the exact
oracle of the continuous reference shows that the side the ray enters gives the one-sided
derivative.
"""

from __future__ import annotations

import numpy as np
from asd.library import discontinuous as D

from .registry import DiscontinuousProof, OracleProof

AWAY = (0.25, 1.375)  # off the jumps of every primitive here (none is at a half-integer)


def _jump(prim, fn, at=(0.0, 1.0), slope="0"):
    return DiscontinuousProof((prim,), lambda x: (fn(x) + x).sum(), at=at, away=AWAY,
                              slope=slope)


KINKED = np.array([0.0, 1.0, -2.0])
V = np.array([1.0, -1.0, 0.5])


def _bump(frac):
    """``frac (1 - frac)``: continuous across the integers where ``frac`` jumps 1 -> 0."""
    return frac * (1.0 - frac)


def _bump_reference(a):
    """The same bump on the two pieces meeting at the integers ``KINKED``."""
    return np.where(a >= KINKED, _bump(a - KINKED), _bump(a - KINKED + 1.0))

PROOFS = [
    _jump(D.sign_p, np.sign),
    _jump(D.floor_p, np.floor),
    _jump(D.ceil_p, np.ceil),
    _jump(D.trunc_p, np.trunc),
    _jump(D.rint_p, np.rint, at=(0.5, 1.0)),
    _jump(D.round_p, np.round, at=(2.5, 1.0)),
    _jump(D.heaviside_p, lambda x: np.heaviside(x, 0.5)),
    _jump(D.angle_p, np.angle),
    _jump(D.floor_divide_p, lambda x: x // 0.5),
    _jump(D.remainder_p, lambda x: x % 0.5, slope="1"),
    DiscontinuousProof((D.remainder_xy_p,), lambda p: np.sum(p[0] % p[1] + p), at=(2.0, 1.0),
                       away=(2.3, 0.75), slope="1 in x, -floor(x / c) in c",
                       title="remainder_xy (traced divisor)"),
    DiscontinuousProof((D.floor_divide_xy_p,), lambda p: np.sum(p[0] // p[1] + p),
                       at=(-3.0, 1.5), away=(2.3, 0.75), title="floor_divide_xy (traced divisor)"),
    _jump(D.any_p, lambda x: np.any(x > 0.0) * 1.0),
    _jump(D.all_p, lambda x: np.all(x >= 0.0) * 1.0),
    OracleProof((D.sign_p,), lambda x: x * np.sign(x), [((KINKED,), V), ((KINKED,), -V)],
                reference=np.abs, note="x sign(x) = |x|", title="sign (continuous use)"),
    OracleProof((D.floor_p,), lambda x: _bump(x - np.floor(x)), [((KINKED,), V),
                                                                 ((KINKED,), -V)],
                reference=_bump_reference, note="frac(x)(1 - frac(x))",
                title="floor (continuous use)"),
    OracleProof((D.remainder_p,), lambda x: _bump(x % 1.0), [((KINKED,), V), ((KINKED,), -V)],
                reference=_bump_reference, note="frac(x)(1 - frac(x))",
                title="remainder (continuous use)"),
]

__all__ = ["PROOFS"]
