"""Norms, eigenvalue functions and projections at entries near the float maximum.

Each is checked against the same function at the input divided by a power of two (exact), with
the value scaled back: positively homogeneous functions must agree to rounding, and their
(scale-free) subgradients and Jacobians exactly as at the small input. Squaring 1e300 overflows,
so any unscaled ``sum(x**2)``, ``B*B/gap`` or ``(X + X.T)/2`` on the way would show as inf/nan or a
NonFiniteError here.
"""

from __future__ import annotations

import numpy as np
import pytest

import asd
import asd.numpy as anp

S, P = asd.spectral, asd.projections
SCALE = 2.0 ** 996  # about 6.7e299: exact to divide by
BIG = np.array([[1.5, 0.5, -1.0], [0.5, -0.25, 0.75], [-1.0, 0.75, 1.0]]) * SCALE

HOMOGENEOUS = {
    "l2_norm": lambda x: asd.norm(x),
    "l1_norm": lambda x: asd.norm(x, 1),
    "linf_norm": lambda x: asd.norm(x, np.inf),
    "frobenius": lambda X: asd.norm(X, "fro"),
    "lambda_max": S.lambda_max,
    "lambda_min": S.lambda_min,
    "topk_eigsum": lambda X: S.topk_eigsum(X, 2),
    "spectral_norm": S.spectral_norm,
    "nuclear_norm": S.nuclear_norm,
    "eigvalsh_sum": lambda X: anp.sum(S.eigvalsh(X) * np.array([1.0, -2.0, 3.0])),
    "distance_l2": lambda x: P.distance(x, P.l2_ball, 1.0),
}


@pytest.mark.parametrize("name", sorted(HOMOGENEOUS))
@pytest.mark.parametrize("size", [1e300, 2e307])
def test_values_and_subgradients_at_huge_entries(name, size):
    f = HOMOGENEOUS[name]
    X = BIG / SCALE * (size / 2.0)  # entries up to 0.75 size, values (sums) still finite
    c = 2.0 ** np.frexp(size)[1]
    small = X / c
    value, g = asd.value_and_subgrad(f, seed=0)(X)
    value_s, g_s = asd.value_and_subgrad(f, seed=0)(small)
    assert np.isfinite(value) and np.all(np.isfinite(g))
    if name == "distance_l2":  # far outside the unit ball: the unit residual, x / |x|
        assert float(value) == pytest.approx(np.linalg.norm(small) * c, rel=1e-13)
        np.testing.assert_allclose(g, small / np.linalg.norm(small), atol=1e-13)
        return
    assert float(value) == pytest.approx(float(value_s) * c, rel=1e-13)
    np.testing.assert_allclose(g, g_s, atol=1e-13)


@pytest.mark.parametrize("fn", [S.lambda_max, S.spectral_norm, lambda X: S.topk_eigsum(X, 1)])
def test_ties_at_huge_entries_follow_the_direction(fn):
    X = 1e300 * np.eye(2)
    G = asd.subgrad(fn, direction=np.diag([1e300, -1e300]))(X)
    np.testing.assert_allclose(G, np.diag([1.0, 0.0]), atol=1e-15)


def test_psd_second_order_at_huge_entries():
    """``diag(b, 0)`` along ``b [[0, 1], [1, 0]]``: the zero eigenvalue moves as ``-δ² b``
    (second order: ``B²/gap`` with ``B ~ b``), so it leaves the cone."""
    b = 1e300
    D = np.array([[0.0, b], [b, 0.0]])
    J = asd.jacobian(P.psd, direction=D)(np.diag([b, 0.0])).reshape(4, 4)
    J1 = asd.jacobian(P.psd, direction=D / b)(np.diag([1.0, 0.0])).reshape(4, 4)
    assert np.all(np.isfinite(J))
    np.testing.assert_allclose(J, J1, atol=1e-14)
    assert J[3, 3] == 0.0  # the leaving direction


def test_l2_ball_projection_at_huge_entries():
    x = np.array([1e308, 1e308])
    y, dy = asd.directional(P.l2_ball)(x, np.array([1.0, 0.0]))
    np.testing.assert_allclose(y, [np.sqrt(0.5)] * 2, rtol=1e-15)
    assert np.all(np.isfinite(dy))
