"""A tie whose cone holds ``det`` is decided by the exact series along v, as any polynomial's
(fuzz campaign, seed 2921): ``relu(det(M(x)) - c)`` tied at second order along v took the
next direction's side, since ``np.linalg.det`` cannot run on exact series; the gradient along
v was then another branch's. ``det`` now expands exact matrices by their first row.

The oracle is `asd.testing.exact.limiting_gradient` on the same program with the
determinant written out (Leibniz), evaluated on exact jets along v.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest

import asd
from asd.testing.exact import limiting_gradient


def _leibniz(M):
    n = len(M)
    total = 0
    for p in permutations(range(n)):
        sign = (-1) ** sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n))
        term = 1
        for i in range(n):
            term = term * M[i][p[i]]
        total = total + sign * term
    return total


def _matrix(x, n):
    """A matrix whose determinant ties with 1 at second order at x = (1, 1) along (1, -1):
    the diagonal holds x0 x1 (1 - d**2 along the ray) beside ones."""
    rows = [[0.0] * n for _ in range(n)]
    for i in range(n):
        rows[i][i] = 1.0
    rows[0][0] = x[0] * x[1]
    if n > 1:
        rows[0][1] = 0.5
        rows[1][0] = 0.0
    return rows


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("v", [(1.0, -1.0), (-1.0, 1.0), (1.0, 1.0), (-1.0, -1.0)])
def test_a_tie_through_det_is_decided_along_v(n, v):
    def f(x):
        M = _matrix(x, n)
        return asd.relu(np.linalg.det(asd.numpy.array(M)) - 1.0)

    def exact(x):
        d = _leibniz(_matrix(x, n)) - 1
        return d if d > 0 else 0 * d

    x = np.array([1.0, 1.0])
    _, want = limiting_gradient(exact, x, np.array(v))
    got = asd.subgrad(f, direction=np.array(v))(x)
    # the branch is exact; its gradient, det's cofactors from an SVD, is within rounding
    np.testing.assert_allclose(got, np.array(want, dtype=float), rtol=1e-12, atol=0)
