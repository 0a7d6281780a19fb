"""Ties the first order leaves open, decided by the exact series of the input along the ray.

The inputs here are curved (``u(x) = (1 + x0², x1 - x0²)`` along ``v = (1, 0)`` has a zero tangent
but a nonzero second order), or they sit within rounding of a kink without being on it (the float
``(0.6, 0.8)`` has norm ``1 + 2.2e-17``). Oracles: exact limiting gradients on Fraction jets
(`asd.testing.exact`), closed forms, mpmath at 60 digits for curved sets, and hull membership of
the Clarke set (`asd.clarke(...).contains`). Directions are coordinate vectors orthogonal to the
tied quantity's gradient, so the first order is tied and only the series decides.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from asd.library import projections as proj_lib
from asd.library import spectral as spec_lib

import asd
import asd.numpy as anp
from asd.errors import UnsupportedError
from asd.result import LEXICOGRAPHIC
from asd.testing.exact import limiting_gradient
from tests.library.test_projections import ref_threshold

P = asd.projections
S = asd.spectral
E0 = np.array([1.0, 0.0])
C = np.array([1.0, 2.0])


def _array(values, like):
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out.reshape(np.shape(like))


def ref_l1(x, r=1):
    u = list(x.flat)
    if sum(abs(v) for v in u) <= r:
        return _array(u, x)
    tau = ref_threshold([abs(v) for v in u], r)
    return _array([max(v - tau, 0) + min(v + tau, 0) for v in u], x)


def ref_standard_simplex(x, r=1):
    u = list(x.flat)
    if sum(max(v, 0) for v in u) <= r:
        return _array([max(v, 0) for v in u], x)
    tau = ref_threshold(u, r)
    return _array([max(v - tau, 0) for v in u], x)


def ref_l2_inside(x, r=1):
    u = list(x.flat)
    assert sum(v * v for v in u) <= r * r  # Fraction jets have no sqrt: inside only
    return _array(u, x)


def ref_halfspace(a, b):
    def halfspace(x):
        u = list(x.flat)
        h = max(sum(ai * v for ai, v in zip(a, u)) - b, 0) / sum(ai * ai for ai in a)
        return _array([v - h * ai for v, ai in zip(u, a)], x)
    return halfspace


def _exact(f, x, v):
    return np.array([float(g) for g in limiting_gradient(f, x, v)[1]])


def _in_clarke(f, x, g):
    return asd.clarke(f, n=64, seed=0)(x).contains(g)


# ----- polyhedral sets along curved inputs (exact Fraction jets) -----

U_CURVED = {  # u(x), each with a zero tangent along v = (1, 0) at x = 0
    "brief": lambda x: (1 + x[0] ** 2, x[1] - x[0] ** 2),
    "crossed": lambda x: (1 + x[0] ** 2 + x[1], x[0] - x[0] ** 2),
    "inward": lambda x: (1 - x[0] ** 2 + x[1], 2 * x[0] ** 2 + x[0] * x[1]),
}
POLYHEDRAL = {"l1_ball": (P.l1_ball, ref_l1),
              "standard_simplex": (P.standard_simplex, ref_standard_simplex),
              "halfspace": (lambda y: P.halfspace(y, E0, 1.0), ref_halfspace([1, 0], 1))}


@pytest.mark.parametrize("set_name, u_name", [
    (s, u) for s in sorted(POLYHEDRAL) for u in sorted(U_CURVED)
    if (s, u) != ("l1_ball", "brief")])  # a tie to every order: the test after this one
def test_polyhedral_sets_decide_by_the_curvature_of_their_input(set_name, u_name):
    proj, ref = POLYHEDRAL[set_name]
    u = U_CURVED[u_name]

    def f(x):
        return anp.sum(proj(anp.stack(list(u(x)))) * C)

    def f_exact(x):
        y = ref(_array(u(x), np.zeros(2)))
        return y[0] * int(C[0]) + y[1] * int(C[1])

    x = np.zeros(2)
    g = asd.subgrad(f, direction=E0)(x)
    np.testing.assert_allclose(g, _exact(f_exact, x, E0), atol=1e-12)
    if u_name != "inward":  # its pieces meet in cusps that random rays (the sampler) miss
        assert _in_clarke(f, x, g)


def test_l1_ball_brief_case_is_the_lexicographic_element_although_the_ray_stays_on_a_kink():
    """``‖u‖₁ = 1 + 2δ²`` leaves the ball; the second entry then sits on ``|u₂| = τ`` to every
    order along v, so the second direction w decides (the tie contract): the result is the
    exact limit along ``x + δv + δ¹²w``, and never the identity the first order picked (its
    region is the single point 0)."""
    def f(x):
        return anp.sum(P.l1_ball(anp.stack([1 + x[0] ** 2, x[1] - x[0] ** 2])) * C)

    def f_exact(x):
        y = POLYHEDRAL["l1_ball"][1](_array([1 + x[0] * x[0], x[1] - x[0] * x[0]], np.zeros(2)))
        return y[0] * int(C[0]) + y[1] * int(C[1])

    for w, want in (([0.0, -1.0], [0.0, 1.5]), ([1.0, 1.0], [0.0, 0.0])):
        r = asd.asd(f, directions=[E0, np.array(w)])(np.zeros(2))
        np.testing.assert_allclose(r.subgradient, want, atol=1e-12)
        lex = limiting_gradient(f_exact, np.zeros(2), E0, w=np.array(w))[1]
        np.testing.assert_allclose(r.subgradient, np.asarray(lex, dtype=float), atol=1e-12)
        assert r.element == LEXICOGRAPHIC
    assert _in_clarke(f, np.zeros(2), np.array([0.0, 1.5]))
    assert not _in_clarke(f, np.zeros(2), np.array([0.0, 2.0]))  # the identity's gradient


@pytest.mark.parametrize("u_name", sorted(U_CURVED))
def test_simplex_threshold_system_on_series(u_name):
    u = U_CURVED[u_name]

    def f(x):
        return anp.sum(P.simplex(anp.stack(list(u(x)) + [0.5 + 0 * x[0]])) * np.array([1., 2, 3]))

    def f_exact(x):
        w = list(u(x)) + [Fraction(1, 2) + 0 * x[0]]
        tau = ref_threshold(w, 1)
        y = [max(v - tau, 0) for v in w]
        return y[0] + 2 * y[1] + 3 * y[2]

    g = asd.subgrad(f, direction=E0)(np.zeros(2))
    np.testing.assert_allclose(g, _exact(f_exact, np.zeros(2), E0), atol=1e-12)


# ----- exact arithmetic over tolerance at float points -----

def test_l2_ball_decides_the_float_point_exactly():
    x = np.array([0.6, 0.8])
    h = Fraction(0.6) ** 2 + Fraction(0.8) ** 2 - 1
    assert h > 0  # the float point lies outside the unit ball, by 2.2e-17
    _, dy = asd.directional(P.l2_ball)(x, np.array([-1.0, 0.0]))
    np.testing.assert_allclose(dy, [-0.64, 0.48], atol=1e-15)
    inside = np.array([0.6, np.nextafter(0.8, 0.0)])
    assert Fraction(inside[0]) ** 2 + Fraction(inside[1]) ** 2 < 1
    _, dy = asd.directional(P.l2_ball)(inside, np.array([-1.0, 0.0]))
    np.testing.assert_array_equal(dy, [-1.0, 0.0])


def test_halfspace_decides_the_float_point_exactly():
    a, x = np.array([0.1, 0.2]), np.array([1.0, 1.0])
    h = Fraction(0.1) + Fraction(0.2) - Fraction(0.3)
    assert h > 0 and float(np.sum(a * x)) - 0.3 < 1e-16
    _, dy = asd.directional(lambda y: P.halfspace(y, a, 0.3))(x, np.array([0.0, -1.0]))
    w = a / np.linalg.norm(a)
    np.testing.assert_allclose(dy, np.array([0.0, -1.0]) - w * (w @ [0.0, -1.0]), atol=1e-15)


def test_l2_ball_along_curved_inputs():
    """``(1 + x0² + x1, x0 - x0²)`` leaves the unit ball along (1, 0) at second order; the
    tangent-to-the-sphere ``(1 - x0² + x1, x0)`` stays in (``‖u‖² = 1 - δ² + δ⁴``)."""
    def leave(x):
        return anp.sum(P.l2_ball(anp.stack([1 + x[0] ** 2 + x[1], x[0] - x[0] ** 2])) * C)

    # outside: J = I - e0 e0ᵀ at u = e0, du/dx = [[0, 1], [1, 0]]: gradient (c2, 0)
    np.testing.assert_allclose(asd.subgrad(leave, direction=E0)(np.zeros(2)), [2.0, 0.0],
                               atol=1e-12)

    def stay(x):
        return anp.sum(P.l2_ball(anp.stack([1 - x[0] ** 2 + x[1], x[0]])) * C)

    def stay_exact(x):
        y = ref_l2_inside(_array([1 - x[0] ** 2 + x[1], x[0]], np.zeros(2)))
        return y[0] + 2 * y[1]

    g = asd.subgrad(stay, direction=E0)(np.zeros(2))
    np.testing.assert_allclose(g, _exact(stay_exact, np.zeros(2), E0), atol=1e-12)


def test_soc_boundary_along_a_curved_input():
    """``(1, 1 - x0², x0)``: ``t² - |z|² = δ² - δ⁴ > 0``, the ray enters the cone although its
    tangent (0, 0, 1) is tangent to the boundary (which alone would leave)."""
    def f(x):
        return anp.sum(P.soc(anp.stack([1 + 0 * x[0], 1 - x[0] ** 2, x[0]])) * np.array([1., 2, 3]))

    # inside: identity, gradient of (1, 1 - x0², x0)·(1, 2, 3) = (3, 0) at 0
    np.testing.assert_allclose(asd.subgrad(f, direction=E0)(np.zeros(2)), [3.0, 0.0],
                               atol=1e-12)


# ----- spectral functions along curved inputs -----

def _diag(h):
    return h * np.diag([0.0, 1.0])


def relu_exact(x):
    return max(x[1] - x[0] ** 2, 0)


@pytest.mark.parametrize("name, f", [
    ("lambda_max", lambda x: S.lambda_max(_diag(x[1] - x[0] ** 2))),
    ("topk_eigsum", lambda x: S.topk_eigsum(_diag(x[1] - x[0] ** 2), 1)),
    ("eigvalsh", lambda x: S.eigvalsh(_diag(x[1] - x[0] ** 2))[1]),
    ("psd", lambda x: anp.sum(P.psd(_diag(x[1] - x[0] ** 2)))),
    ("nuclear_norm", lambda x: (S.nuclear_norm(_diag(x[1] - x[0] ** 2))
                                + S.nuclear_norm(-_diag(x[1] - x[0] ** 2))) / 2),
])
def test_spectral_ties_decided_by_the_curvature(name, f):
    """Each is ``relu(h)`` (or ``|h|``) of ``h = x1 - x0²``, tied with the fixed zero eigenvalue;
    along (1, 0) ``h = -δ²``: the limiting gradient is that of the zero branch."""
    g = asd.subgrad(f, direction=E0)(np.zeros(2))
    if name == "nuclear_norm":
        expected = -np.array([0.0, 1.0])  # |h| = -h along the ray
    else:
        expected = _exact(relu_exact, np.zeros(2), E0)
    np.testing.assert_allclose(g, expected, atol=1e-12)
    assert _in_clarke(f, np.zeros(2), g)


def test_psd_curvature_beside_a_positive_eigenvalue():
    """``diag(1, 0, h)`` projected: only ``h = x1 - x0²`` along (1, 0) decides; with a positive
    rest eigenvalue the second-order matrix has both the rest's and the input's terms."""
    def f(x):
        X = np.diag([1.0, 0.0, 0.0]) + (x[1] - x[0] ** 2) * np.diag([0.0, 0.0, 1.0]) \
            + x[0] * np.diag([0.0, 0.0, 0.0])
        return anp.sum(P.psd(X) * np.diag([1.0, 2.0, 3.0]))

    np.testing.assert_allclose(asd.subgrad(f, direction=E0)(np.zeros(2)), [0.0, 0.0],
                               atol=1e-12)
    np.testing.assert_allclose(asd.subgrad(f, direction=np.array([0.0, 1.0]))(np.zeros(2)),
                               [0.0, 3.0], atol=1e-12)


def test_topk_on_an_exactly_diagonal_matrix_with_a_tiny_gap():
    X = np.diag([1e6, 1e6 + 9e-10, 0.0])  # within 8 n eps max|λ| = 5e-9, yet not tied
    assert X[1, 1] > X[0, 0]
    G = asd.subgrad(lambda X: S.topk_eigsum(X, 1), direction=np.diag([1.0, 0.0, 0.0]))(X)
    np.testing.assert_array_equal(G, np.diag([0.0, 1.0, 0.0]))
    lam, _, tol = spec_lib.eigh_ties(X)
    assert tol == 0 and lam.tolist() == [0.0, 1e6, 1e6 + 9e-10]


# ----- distance along tangents to curved sets -----

def _mp_grad_dist(dist, x, d):
    """The gradient of ``dist`` at ``x + δd`` by 60-digit central differences (step 1e-40);
    ``dist`` is of order δ² there, far above the step, and its gradient within O(δ) of the
    limit."""
    with mpmath.workdps(60):
        delta = mpmath.mpf("1e-12")
        y = [mpmath.mpf(float(a)) + delta * mpmath.mpf(float(b)) for a, b in zip(x, d)]
        h = mpmath.mpf("1e-40")
        out = []
        for i in range(len(y)):
            up, dn = list(y), list(y)
            up[i] += h
            dn[i] -= h
            out.append(float((dist(up) - dist(dn)) / (2 * h)))
    return np.array(out)


def test_distance_to_the_l2_ball_along_a_tangent():
    x, d = np.array([0.6, 0.8]) * 2, np.array([-0.8, 0.6])

    def dist(y):
        return max(mpmath.sqrt(sum(v * v for v in y)) - 2, 0)

    g = asd.subgrad(lambda z: P.distance(z, P.l2_ball, 2.0), direction=d)(x)
    np.testing.assert_allclose(g, _mp_grad_dist(dist, x, d), atol=1e-10)
    assert np.linalg.norm(g) > 0.99


def test_distance_to_soc_along_a_tangent():
    x, d = np.array([1.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])

    def dist(y):
        t, nz = y[0], mpmath.sqrt(y[1] ** 2 + y[2] ** 2)
        return max((nz - t) / mpmath.sqrt(2), 0) if nz > -t else mpmath.sqrt(t * t + nz * nz)

    g = asd.subgrad(lambda z: P.distance(z, P.soc), direction=d)(x)
    np.testing.assert_allclose(g, _mp_grad_dist(dist, x, d), atol=1e-10)


def test_distance_to_psd_along_a_tangent():
    X = np.diag([1.0, 0.0])
    D = np.array([[0.0, 1.0], [1.0, 0.0]])  # eigenvalue 0 moves as -δ²
    G = asd.subgrad(lambda Y: P.distance(Y, P.psd), direction=D)(X)
    np.testing.assert_allclose(G, [[0.0, 0.0], [0.0, -1.0]], atol=1e-12)


def test_distance_to_the_nuclear_ball_along_a_tangent_refuses():
    X, D = np.diag([1.0, 0.0]), np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(UnsupportedError, match="nuclear_ball"):
        asd.subgrad(lambda Y: P.distance(Y, P.nuclear_ball), direction=D)(X)


def test_distance_inside_and_radius_defaults():
    x = np.array([0.3, -0.4, 2.0])
    for name in sorted(proj_lib.BALLS - {"nuclear_ball"}):
        assert float(P.distance(x, name)) == pytest.approx(float(P.distance(x, name, 1.0)))
    g = asd.subgrad(lambda z: P.distance(z, "l2_ball"), direction=np.array([-1.0, 0.0]))(
        np.array([1.0, 0.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0])  # the ray enters the ball


# ----- every tie decided another way than by the engine is reported -----

def test_series_and_tolerance_decisions_are_reported(monkeypatch):
    seen = []

    def record(how, count=1):
        seen.append((how, count))

    monkeypatch.setattr(proj_lib, "record_tie_decision", record)
    monkeypatch.setattr(spec_lib, "record_tie_decision", record)
    asd.directional(P.l2_ball)(np.array([0.6, 0.8]), np.array([-1.0, 0.0]))
    assert seen == []  # decided by the exact value: no tie
    asd.subgrad(lambda x: anp.sum(P.l2_ball(anp.stack([1 + x[0] ** 2, x[1]]))),
                direction=E0)(np.zeros(2))
    assert seen == [("series", 1)]
    seen.clear()

    def through_arcsin(x):  # an ancestor the exact series cannot follow
        return P.l2_ball(anp.stack([anp.arcsin(x[0]) + 1.0, x[1]]))

    asd.jacobian(through_arcsin, direction=np.array([0.0, 1.0]))(np.zeros(2))
    assert seen == [("tolerance", 1)]
    seen.clear()
    R = np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2)
    asd.subgrad(S.lambda_max, direction=np.diag([1.0, 0.0]))(R @ np.eye(2) @ R.T)
    assert seen and seen[0][0] == "tolerance"
