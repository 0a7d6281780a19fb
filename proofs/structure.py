"""Certificates for ``library/structure.py``. Its selections, splits and products are
compositions of primitives certified elsewhere (indexing, concatenate, multiply, prod,
where, sort); the one primitive of its own, ``scatter_add``, is linear, so sympy's Jacobian
of the sums it forms on symbols must equal the rule's."""

from __future__ import annotations

import numpy as np
from asd.library import structure as S

from .registry import SymbolicProof

POSITIONS = np.array([[2, 0, -1], [2, 2, 1]])
VALUES = (np.array([[0.3, -1.7, 0.9], [1.1, -0.4, 2.5]]),)


def _sums(v):
    """Entry ``p`` is the sum of the values at ``POSITIONS == p`` (``-1``: dropped)."""
    return np.array([sum(v[POSITIONS == p], 0) for p in range(4)], dtype=object)


PROOFS = [
    SymbolicProof((S.scatter_add_p,), lambda v: S.scatter_add(v, POSITIONS, 4), [VALUES],
                  _sums),
]

__all__ = ["PROOFS"]
