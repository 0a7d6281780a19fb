"""Certificates for ``library/update.py``: item assignment and copy are linear, so sympy's
Jacobian of the same numpy code run on symbols must equal the rule's."""

from __future__ import annotations

import numpy as np
from asd.library import update as U

from .registry import SymbolicProof

PAIR = (np.array([0.3, 1.7, 0.9, -0.4]), np.array([1.1, -2.5]))


def _assign(y, v):
    y = U.copy(y)
    y[[0, 2]] = v
    y[1:2] = v[1] * 2.0
    return y


def _assign_reference(y, v):
    y = np.array(y, copy=True)
    y[[0, 2]] = v
    y[1:2] = v[1] * 2.0
    return y


PROOFS = [
    SymbolicProof((U.update_p, U.copy_p), _assign, [PAIR], _assign_reference),
]

__all__ = ["PROOFS"]
