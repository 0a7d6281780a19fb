"""Projections at their kinks: limiting Jacobians against one-sided oracles along the same ray.

For every set and every kind of kink (faces, vertices, boundaries, the cone apex, points on the
cone's and on the polar's boundary, PSD matrices with multiple zero eigenvalues, tied singular
values) and four random directions ``d``, ``asd.jacobian(proj, direction=d)(x)`` must equal
``lim J P(x + δd)`` as δ ↓ 0. The oracle is `asd.testing.check_rule`: exact Fraction power
series for the polyhedral sets, forward differences at ``x + δd`` in 60-digit mpmath for the
curved ones (δ = 1e-20, step 1e-30), with references written independently below as plain
scalar code (and mpmath's own eigen/singular value decompositions). Every Jacobian must also
be symmetric with eigenvalues in [0, 1], as limits of Jacobians of projections onto convex sets
are. Kink points are exact in binary (integers and dyadic rationals) so the oracle sees the very
same kink asd sees.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from asd.library.projections import RULES
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
import asd.numpy as anp
from asd.errors import ASDError, ShapeError, UnsupportedError
from asd.extend import Dense, FixedTangent
from asd.testing import check_rule
from asd.testing.precise import to_mpf

P = asd.projections


# ----- independent references: scalar code that runs on floats, Fractions series, Precise -----

def _array(values, like) -> np.ndarray:
    out = np.empty(len(values), dtype=object if np.asarray(like).dtype == object else float)
    out[:] = list(values)
    return out.reshape(np.shape(like))


def _sqrt(v):
    return v.sqrt() if hasattr(v, "sqrt") else math.sqrt(v)


def ref_threshold(u, r):
    """The largest candidate ``(sum of top k - r) / k`` whose k-th entry is above it."""
    total, tau = 0, None
    for k, s in enumerate(sorted(u, reverse=True)):
        total = total + s
        cand = (total - r) / (k + 1)
        if s > cand:
            tau = cand
    return tau


def ref_simplex(x, r=1.0):
    u = list(x.flat)
    tau = ref_threshold(u, r)
    return _array([max(v - tau, 0) for v in u], x)


def ref_standard_simplex(x, r=1.0):
    u = list(x.flat)
    if sum(max(v, 0) for v in u) <= r:
        return _array([max(v, 0) for v in u], x)
    return ref_simplex(x, r)


def ref_l1(x, r=1.0):
    u = list(x.flat)
    if sum(abs(v) for v in u) <= r:
        return _array(u, x)
    tau = ref_threshold([abs(v) for v in u], r)
    return _array([max(v - tau, 0) + min(v + tau, 0) for v in u], x)


def ref_l2(x, r=1.0):
    u = list(x.flat)
    n2 = sum(v * v for v in u)
    if n2 <= r * r:
        return _array(u, x)
    scale = r / _sqrt(n2)
    return _array([v * scale for v in u], x)


def ref_box(lo, hi):
    def box(x):
        return _array([min(max(v, a), b) for v, a, b in
                       zip(x.flat, np.broadcast_to(lo, x.shape).flat,
                           np.broadcast_to(hi, x.shape).flat)], x)
    return box


def ref_halfspace(a, b, equality=False):
    def halfspace(x):
        u = list(x.flat)
        h = sum(ai * v for ai, v in zip(a, u)) - b
        s = (h if equality else max(h, 0)) / float(np.dot(a, a))
        return _array([v - s * ai for v, ai in zip(u, a)], x)
    return halfspace


def ref_soc(x):
    t, z = x[0], list(x[1:])
    nz = _sqrt(sum(v * v for v in z) + 0 * t)
    if nz <= t:
        return _array(list(x), x)
    if nz <= -t:
        return _array([0 * t] * len(x), x)
    c = (t + nz) / 2
    return _array([c] + [c * v / nz for v in z], x)


def _rotate(x):
    h = _sqrt(x[0] * 0 + 0.5)
    return _array([(x[0] + x[1]) * h, (x[0] - x[1]) * h] + list(x[2:]), x)


def ref_rsoc(x):
    return _rotate(ref_soc(_rotate(x)))


def _mp(X) -> mpmath.matrix:
    return mpmath.matrix([[to_mpf(v) for v in row] for row in X])


def _unmp(M, shape) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for i in range(shape[0]):
        for j in range(shape[1]):
            out[i, j] = M[i, j]
    return out


def ref_psd(X):
    S = (X + X.T) / 2
    if X.dtype != object:
        lam, V = np.linalg.eigh(S)
        return (V * np.maximum(lam, 0)) @ V.T
    E, Q = mpmath.eigsy(_mp(S))
    n = X.shape[0]
    L = mpmath.diag([max(E[i], 0) for i in range(n)])
    return _unmp(Q * L * Q.T, X.shape)


def ref_nuclear(r):
    def nuclear(X):
        if X.dtype != object:
            return P.nuclear_ball(X, r)
        U, S, V = mpmath.svd_r(_mp(X))
        s = [S[i] for i in range(len(S))]
        if sum(s) <= r:
            return X
        tau = ref_threshold(s, r)
        L = mpmath.diag([max(v - tau, 0) for v in s])
        return _unmp(U * L * V, X.shape)
    return nuclear


# ----- the kink table: (id, projection, point, reference, oracle is exact) -----

A3 = np.array([1.0, 2.0, -1.0])
LO = np.array([-1.0, -1.0, 0.0, 0.0])
HI = np.array([1.0, 1.0, 2.0, 0.0])
B4 = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [2.0, -1.0]])  # rank 2
C4 = np.array([[1.0], [0.0], [-1.0], [1.0]])


def _perm_sign(n, seed):
    """An exact orthogonal matrix (signed permutation) to hide diagonal structure."""
    rng = np.random.default_rng(seed)
    return np.eye(n)[rng.permutation(n)] * rng.choice([-1.0, 1.0], n)


Q3, Q2 = _perm_sign(3, 1), _perm_sign(2, 2)
HADAMARD = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0],
                     [1.0, -1.0, -1.0, 1.0]])  # orthogonal up to the factor 2

CASES = [
    ("zeros", P.zeros, np.array([0.0, 1.0, -2.0]), lambda x: 0 * x, True),
    ("reals", P.reals, np.array([0.0, 1.0, -2.0]), lambda x: 1 * x, True),
    ("nonneg faces", P.nonneg, np.array([0.0, 0.0, 1.0, -1.0]),
     lambda x: _array([max(v, 0) for v in x.flat], x), True),
    ("nonneg vertex", P.nonneg, np.zeros(4), lambda x: _array([max(v, 0) for v in x.flat], x),
     True),
    ("nonpos vertex", P.nonpos, np.array([0.0, 0.0, 2.0]),
     lambda x: _array([min(v, 0) for v in x.flat], x), True),
    ("box faces", lambda x: P.box(x, LO, HI), np.array([-1.0, 1.0, 0.5, 0.0]), ref_box(LO, HI),
     True),
    ("box vertex", lambda x: P.box(x, LO, HI), np.array([-1.0, -1.0, 2.0, 0.0]),
     ref_box(LO, HI), True),
    ("linf faces", lambda x: P.linf_ball(x, 1.0), np.array([1.0, -1.0, 0.5, 2.0]),
     ref_box(-1.0, 1.0), True),
    ("linf vertex", lambda x: P.linf_ball(x, 1.0), np.array([1.0, 1.0, -1.0]),
     ref_box(-1.0, 1.0), True),
    ("hyperplane", lambda x: P.hyperplane(x, A3, 1.0), np.array([1.0, 0.0, 0.0]),
     ref_halfspace(A3, 1.0, equality=True), True),
    ("halfspace boundary", lambda x: P.halfspace(x, A3, 1.0), np.array([1.0, 0.5, 1.0]),
     ref_halfspace(A3, 1.0), True),
    ("halfspace outside", lambda x: P.halfspace(x, A3, 1.0), np.array([3.0, 0.5, 1.0]),
     ref_halfspace(A3, 1.0), True),
    ("l1 boundary face", lambda x: P.l1_ball(x, 1.0), np.array([0.5, -0.5, 0.0, 0.0]),
     ref_l1, True),
    ("l1 vertex", lambda x: P.l1_ball(x, 1.0), np.array([0.0, -1.0, 0.0]), ref_l1, True),
    ("l1 outside tie", lambda x: P.l1_ball(x, 1.0), np.array([1.0, -1.0, 0.5, 0.0]), ref_l1,
     True),
    ("l1 center", lambda x: P.l1_ball(x, 1.0), np.zeros(3), ref_l1, True),
    ("simplex face", P.simplex, np.array([0.5, 0.5, 0.0, 0.0]), ref_simplex, True),
    ("simplex vertex", P.simplex, np.array([1.0, 0.0, 0.0]), ref_simplex, True),
    ("simplex outside tie", lambda x: P.simplex(x, 1.5), np.array([1.5, 1.0, 0.5, 0.0]),
     lambda x: ref_simplex(x, 1.5), True),
    ("simplex all tied", P.simplex, np.full(4, 0.25), ref_simplex, True),
    ("std simplex face", P.standard_simplex, np.array([0.5, 0.5, 0.0, 0.0]),
     ref_standard_simplex, True),
    ("std simplex inside zeros", P.standard_simplex, np.array([0.25, 0.0, 0.5, -1.0]),
     ref_standard_simplex, True),
    ("std simplex vertex", P.standard_simplex, np.array([0.0, 1.0, 0.0]), ref_standard_simplex,
     True),
    ("std simplex origin", P.standard_simplex, np.zeros(3), ref_standard_simplex, True),
    ("std simplex outside tie", lambda x: P.standard_simplex(x, 1.5),
     np.array([1.5, 1.0, 0.5, 0.0]), lambda x: ref_standard_simplex(x, 1.5), True),
    ("l2 boundary", lambda x: P.l2_ball(x, 5.0), np.array([3.0, 4.0, 0.0]),
     lambda x: ref_l2(x, 5.0), False),
    ("l2 outside", lambda x: P.l2_ball(x, 1.0), np.array([3.0, 4.0, 0.0]), ref_l2, False),
    ("l2 center", lambda x: P.l2_ball(x, 1.0), np.zeros(3), ref_l2, False),
    ("soc apex", P.soc, np.zeros(4), ref_soc, False),
    ("soc boundary", P.soc, np.array([5.0, 3.0, 4.0, 0.0]), ref_soc, False),
    ("soc polar boundary", P.soc, np.array([-5.0, 3.0, 0.0, 4.0]), ref_soc, False),
    ("soc between", P.soc, np.array([0.0, 3.0, 4.0]), ref_soc, False),
    ("soc 1-d apex", P.soc, np.zeros(1), ref_soc, False),
    ("rsoc apex", P.rsoc, np.zeros(3), ref_rsoc, False),
    ("rsoc boundary", P.rsoc, np.array([1.0, 2.0, 2.0, 0.0]), ref_rsoc, False),
    ("rsoc face u=0", P.rsoc, np.array([0.0, 1.0, 0.0]), ref_rsoc, False),
    ("rsoc polar boundary", P.rsoc, np.array([-1.0, -2.0, 0.0, 2.0]), ref_rsoc, False),
    ("psd zero matrix", P.psd, np.zeros((3, 3)), ref_psd, False),
    ("psd rank 2, null dim 2", P.psd, B4 @ B4.T, ref_psd, False),
    ("psd mixed signs, null dim 1", P.psd, B4 @ B4.T - C4 @ C4.T, ref_psd, False),
    ("psd mixed signs, null dim 2", P.psd, np.diag([3.0, 0.0, 0.0, -2.0]), ref_psd, False),
    ("psd repeated nonzero", P.psd, HADAMARD @ np.diag([2.0, 2.0, 0.0, 0.0]) @ HADAMARD.T / 4,
     ref_psd, False),
    ("nuclear boundary, zero sv", lambda X: P.nuclear_ball(X, 1.0),
     Q2 @ np.diag([1.0, 0.0]), ref_nuclear(1.0), False),
    ("nuclear boundary, rectangular", lambda X: P.nuclear_ball(X, 2.0),
     np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), ref_nuclear(2.0), False),
    ("nuclear outside tie", lambda X: P.nuclear_ball(X, 1.5),
     Q3 @ np.diag([1.5, 1.0, 0.5]) @ Q3.T, ref_nuclear(1.5), False),
    ("nuclear outside repeated", lambda X: P.nuclear_ball(X, 1.0),
     np.diag([2.0, 2.0, 0.0]), ref_nuclear(1.0), False),
    ("nuclear inside", lambda X: P.nuclear_ball(X, 4.0), np.array([[1.0, 2.0], [0.0, -1.0]]),
     ref_nuclear(4.0), False),
]


def _directions(x, seed, k=4):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(np.shape(x)) for _ in range(k)]


def assert_projection_jacobian(J, n):
    """Symmetric with eigenvalues in [0, 1]: what limits of projection Jacobians are."""
    J = np.asarray(J).reshape(n, n)
    assert np.allclose(J, J.T, atol=1e-10), "the limiting Jacobian is not symmetric"
    eig = np.linalg.eigvalsh((J + J.T) / 2)
    assert eig.min() >= -1e-10 and eig.max() <= 1 + 1e-10, f"eigenvalues {eig} outside [0, 1]"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_limiting_jacobian_at_kinks(case):
    name, proj, x, ref, exact = case
    dirs = _directions(x, abs(hash(name)) % 2**32)
    report = check_rule(proj, x, directions=dirs, reference=ref, exact=exact, name=name,
                        rtol=1e-9)
    assert report.checks["jacobian"] == 4 and not report.skipped
    for d in dirs:
        assert_projection_jacobian(asd.jacobian(proj, direction=d)(x), x.size)


# ----- hypothesis: random kink points of the polyhedral sets, exact oracle -----

SMALL = st.sampled_from([0.0, 0.0, 0.25, -0.25, 0.5, -0.5, 1.0, -1.0, 0.75])
POLYHEDRAL = [
    (lambda x: P.simplex(x, 1.0), ref_simplex),
    (lambda x: P.standard_simplex(x, 1.0), ref_standard_simplex),
    (lambda x: P.l1_ball(x, 1.0), ref_l1),
    (lambda x: P.linf_ball(x, 0.5), ref_box(-0.5, 0.5)),
]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(POLYHEDRAL) - 1), st.lists(SMALL, min_size=2, max_size=5),
       st.integers(0, 2**31))
def test_polyhedral_kinks_hypothesis(which, values, seed):
    """Entries from a small dyadic pool land on faces, vertices and threshold ties."""
    proj, ref = POLYHEDRAL[which]
    x = np.array(values)
    dirs = _directions(x, seed, k=2)
    check_rule(proj, x, directions=dirs, reference=ref, exact=True)
    for d in dirs:
        assert_projection_jacobian(asd.jacobian(proj, direction=d)(x), x.size)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(POLYHEDRAL) - 1), st.lists(SMALL, min_size=2, max_size=5),
       st.lists(SMALL, min_size=5, max_size=5))
def test_polyhedral_degenerate_directions_hypothesis(which, values, direction):
    """Dyadic directions with zeros and repeats: the ray may stay on a kink. The Dini
    derivative J d must still be exact, and wherever the ray decides, so must J."""
    proj, ref = POLYHEDRAL[which]
    x = np.array(values)
    d = np.array(direction[:x.size])
    if not d.any():
        d[0] = 1.0
    check_rule(proj, x, direction=d, reference=ref, exact=True)
    assert_projection_jacobian(asd.jacobian(proj, direction=d)(x), x.size)


# ----- tangent directions: the ray leaves a curved boundary at second order -----

def mp_limiting_jacobian(ref, x, d, delta="1e-12", h="1e-40"):
    """Forward differences at ``x + δd`` in 80 digits, for rays that leave at second order."""
    with mpmath.workdps(80):
        delta, h = mpmath.mpf(delta), mpmath.mpf(h)
        base = np.array([to_mpf(a) + delta * to_mpf(b) for a, b in zip(x.flat, d.flat)],
                        dtype=object).reshape(x.shape)
        f0 = ref(base).ravel()
        cols = []
        for i in range(x.size):
            step = base.copy().ravel()
            step[i] = step[i] + h
            cols.append((ref(step.reshape(x.shape)).ravel() - f0) / h)
        return np.array([[float(c[j]) for c in cols] for j in range(x.size)])


TANGENT_CASES = [
    ("l2", lambda x: P.l2_ball(x, 5.0), lambda x: ref_l2(x, 5.0), np.array([3.0, 4.0, 0.0]),
     np.array([-4.0, 3.0, 1.0])),
    ("soc cone", P.soc, ref_soc, np.array([5.0, 3.0, 4.0]), np.array([0.6, 0.0, 1.0])),
    ("soc polar", P.soc, ref_soc, np.array([-5.0, 3.0, 4.0]), np.array([-0.6, 0.0, 1.0])),
]


@pytest.mark.parametrize("case", TANGENT_CASES, ids=[c[0] for c in TANGENT_CASES])
def test_tangent_to_curved_boundary_leaves_the_set(case):
    _, proj, ref, x, d = case
    J = asd.jacobian(proj, direction=d)(x)
    np.testing.assert_allclose(J, mp_limiting_jacobian(ref, x, d), atol=1e-9)
    assert not np.allclose(J, np.eye(x.size)) and not np.allclose(J, 0)


def test_ray_along_the_boundary_takes_the_inside_piece():
    """A ray that stays on the kink (here along the cone's generator) takes the inside side."""
    x = np.array([5.0, 3.0, 4.0])
    assert np.array_equal(asd.jacobian(P.soc, direction=x)(x), np.eye(3))
    assert np.array_equal(asd.jacobian(P.nonneg, direction=np.zeros(2) + [1.0, 0.0])(
        np.zeros(2)), np.eye(2))


# ----- the PSD cone: the direction restricted to the null space decides -----

def test_psd_null_space_rule():
    """At X with a null space N of dimension 3, J(w wᵀ) = w wᵀ for eigenvectors w of D on N with
    positive eigenvalue and 0 for negative ones; directions mixing N and range(X) get 1."""
    X = np.diag([2.0, 0.0, 0.0, 0.0])
    rng = np.random.default_rng(7)
    D = rng.standard_normal((4, 4))
    D = D + D.T
    J = asd.jacobian(P.psd, direction=D)(X).reshape(16, 16)
    mu, W = np.linalg.eigh(D[1:, 1:])
    for m, w in zip(mu, W.T):
        v = np.concatenate([[0.0], w])
        H = np.outer(v, v)
        np.testing.assert_allclose(J @ H.ravel(), (H if m > 0 else 0 * H).ravel(), atol=1e-12)
    mixed = np.zeros((4, 4))
    mixed[0, 1] = mixed[1, 0] = 1.0
    np.testing.assert_allclose(J @ mixed.ravel(), mixed.ravel(), atol=1e-12)


@pytest.mark.parametrize("a, b", [(1.0, 2.0), (2.0, 1.0)])
def test_psd_second_order_decides_when_the_null_block_of_d_vanishes(a, b):
    """X = diag(2, -2, 0, 0) and D zero on the null direction e2 (first order silent there):
    its eigenvalue moves as δ²(b² - a²)/2 through the couplings a (to λ = 2) and b (to λ = -2),
    so e2 enters the cone iff b > a. Oracle: 80-digit differences at δ = 1e-12."""
    X = np.diag([2.0, -2.0, 0.0, 0.0])
    D = np.zeros((4, 4))
    D[0, 2] = D[2, 0] = a
    D[1, 2] = D[2, 1] = b
    D[3, 3] = -1.0
    J = asd.jacobian(P.psd, direction=D)(X)
    want = mp_limiting_jacobian(ref_psd, X, D).reshape(J.shape)
    np.testing.assert_allclose(J, want, atol=1e-9)
    e2 = np.zeros((4, 4))
    e2[2, 2] = 1.0
    assert J.reshape(16, 16)[10, 10] == pytest.approx(1.0 if b > a else 0.0)


@pytest.mark.parametrize("v", [[1.0, 0.0], [-1.0, 0.0], [0.5, 1.0], [2.0, -1.0]])
def test_psd_sign_decided_by_the_input_curvature(v):
    """sum(psd(diag(x1 - x0², 1))) along (±1, 0) at 0: the entry is -δ² along the ray, so the
    projection zeroes it and the gradient in x1 is 0 (a simple zero eigenvalue whose first
    order is 0 used to count as entering). Exact oracle."""
    def f(x):
        X = anp.stack([anp.stack([x[1] - x[0] ** 2, 0 * x[0]]),
                       anp.stack([0 * x[0], 0 * x[0] + 1])])
        return anp.sum(P.psd(X))

    check_rule(f, np.zeros(2), direction=np.array(v),
               reference=lambda x: np.maximum(x[1] - x[0] ** 2, 0) + 1, exact=True)


def mp_psd_jacobian(X, D, delta="1e-20", dps=150):
    """The PSD projection's Jacobian at ``X + δD`` in mpmath (distinct eigenvalues there):
    ``H -> V (Γ ∘ VᵀHV) Vᵀ`` with ``Γ_ij`` the divided differences of ``max(λ, 0)``."""
    with mpmath.workdps(dps):
        d = mpmath.mpf(delta)
        A = mpmath.matrix([[to_mpf(x) + d * to_mpf(v) for x, v in zip(rx, rv)]
                           for rx, rv in zip(X, D)])
        E, Q = mpmath.eigsy(A)
        n = A.rows
        lam = [E[i] for i in range(n)]
        G = [[(max(lam[i], 0) - max(lam[j], 0)) / (lam[i] - lam[j]) if i != j else
              (1 if lam[i] > 0 else 0) for j in range(n)] for i in range(n)]
        Vm = np.array([[Q[r, i] for i in range(n)] for r in range(n)], dtype=object)
        cols = []
        for k in range(n * n):
            H = np.zeros((n, n), dtype=object)
            H[k // n, k % n] = mpmath.mpf(1)
            H = (H + H.T) / 2
            M = Vm.T @ H @ Vm
            cols.append((Vm @ np.array([[G[i][j] * M[i, j] for j in range(n)]
                                        for i in range(n)], dtype=object) @ Vm.T).ravel())
        return np.array([[float(c[j]) for c in cols] for j in range(n * n)])


@pytest.mark.parametrize("c", [0.5, -0.5])
def test_psd_sign_opening_at_third_order_along_a_straight_ray(c):
    """diag(0, 1, -1) along a straight ray coupling e1 equally to e2 and e3: the zero
    eigenvalue has first order 0 and second order a²/(0 - 1) + a²/(0 + 1) = 0; the third
    (through D22 = c) decides whether it enters the cone."""
    a = 0.75
    X = np.diag([0.0, 1.0, -1.0])
    D = np.zeros((3, 3))
    D[0, 1] = D[1, 0] = D[0, 2] = D[2, 0] = a
    D[1, 1] = c
    for Q in (np.eye(3), Q3):
        Xq, Dq = Q @ X @ Q.T, Q @ D @ Q.T
        J = asd.jacobian(P.psd, direction=Dq)(Xq).reshape(9, 9)
        np.testing.assert_allclose(J, mp_psd_jacobian(Xq, Dq), atol=1e-9)
        assert_projection_jacobian(J, 9)


@pytest.mark.parametrize("push, joins", [(0.0, False), (0.5, True), (2.0, True)])
def test_nuclear_ball_tie_undecided_at_first_order(push, joins):
    """σ = (1.5, 1, 0.5), r = 1.5: τ = 0.5 ties σ3, and D33 = τ' = (D11 + D22)/2 leaves the tie
    open at first order. The second order decides: coupling σ3 to the extra null column
    (``push``) raises it above the threshold. Oracle: 80-digit differences at δ = 1e-12."""
    X = np.zeros((3, 4))
    X[0, 0], X[1, 1], X[2, 2] = 1.5, 1.0, 0.5
    D = np.zeros((3, 4))
    D[0, 0], D[2, 2], D[2, 3], D[0, 1], D[1, 2] = 1.0, 0.5, push, 0.3, -0.4
    proj = lambda Z: P.nuclear_ball(Z, 1.5)  # noqa: E731
    J = asd.jacobian(proj, direction=D)(X).reshape(12, 12)
    np.testing.assert_allclose(J, mp_limiting_jacobian(ref_nuclear(1.5), X, D), atol=1e-10)
    assert (J[10, 10] > 0.5) == joins
    assert_projection_jacobian(J, 12)


@pytest.mark.parametrize("seed", range(3))
def test_nuclear_ball_boundary_left_at_second_order(seed):
    """On the boundary with ||X + δD||_* = r + O(δ²): convexity makes the second order
    positive, so the ray leaves the ball and the Jacobian is not the identity."""
    a, b = np.random.default_rng(seed).standard_normal(2)
    X, D = np.diag([1.0, 0.0]), np.array([[-1.0, a], [b, 1.0]])
    J = asd.jacobian(lambda Z: P.nuclear_ball(Z, 1.0), direction=D)(X).reshape(4, 4)
    np.testing.assert_allclose(J, mp_limiting_jacobian(ref_nuclear(1.0), X, D), atol=1e-10)
    assert not np.allclose(J, np.eye(4))


def test_psd_symmetrizes_asymmetric_input():
    X = np.array([[1.0, 2.0], [0.0, -1.0]])
    np.testing.assert_allclose(P.psd(X), P.psd((X + X.T) / 2))
    J = asd.jacobian(P.psd)(X).reshape(4, 4)
    skew = np.array([0.0, 1.0, -1.0, 0.0])
    np.testing.assert_allclose(J @ skew, 0, atol=1e-12)


# ----- distance to a set and its subgradient -----

DISTANCE_CASES = [
    ("outside simplex", np.array([1.0, 1.0, -1.0]), "simplex", (1.0,), ref_simplex),
    ("on l2 sphere", np.array([3.0, 4.0]), P.l2_ball, (5.0,), lambda x: ref_l2(x, 5.0)),
    ("soc apex", np.zeros(3), P.soc, (), ref_soc),
    ("psd null", B4 @ B4.T, P.psd, (), ref_psd),
]


@pytest.mark.parametrize("case", DISTANCE_CASES, ids=[c[0] for c in DISTANCE_CASES])
def test_distance_subgradient(case):
    _, x, s, params, ref = case

    def dist_ref(z):
        r = (z - ref(z)).ravel()
        return _sqrt(sum(v * v for v in r))

    dirs = _directions(x, 3)
    check_rule(lambda z: P.distance(z, s, *params), x, directions=dirs, reference=dist_ref,
               exact=False, rtol=1e-8)


# ----- distance at points of the set: every set, inward, outward and tangent rays -----

HS_A, BOX_LO, BOX_HI = np.array([1.0, 1.0]), np.array([0.0, 0.0]), np.array([1.0, 1.0])
SKEW = np.array([[0.0, 1.0], [1.0, 0.0]])


def ref_nonneg(x):
    return _array([max(v, 0) for v in x.flat], x)


def ref_nonpos(x):
    return _array([min(v, 0) for v in x.flat], x)


# (set, params, reference projection, point, {direction label: direction}); every point is
# in the set: on faces, edges, vertices, curved boundaries, apexes, and inside.
DISTANCE_TABLE = [
    ("zeros", (), lambda x: 0 * x, np.zeros(2), {"any": [1.0, -2.0]}),
    ("reals", (), lambda x: 1 * x, np.array([1.0, 2.0]), {"any": [1.0, -2.0]}),
    ("nonneg", (), ref_nonneg, np.array([0.0, 1.0]),
     {"in": [1.0, 0.0], "out": [-1.0, 0.0], "along": [0.0, 1.0], "mixed": [-1.0, 1.0]}),
    ("nonneg", (), ref_nonneg, np.zeros(2),
     {"in": [1.0, 2.0], "out": [-1.0, -1.0], "edge": [0.0, 1.0], "half": [-1.0, 1.0]}),
    ("nonpos", (), ref_nonpos, np.array([0.0, -1.0]),
     {"in": [-1.0, 0.0], "out": [1.0, 0.0], "along": [0.0, 1.0]}),
    ("box", (BOX_LO, BOX_HI), ref_box(BOX_LO, BOX_HI), np.array([0.5, 1.0]),
     {"in": [0.0, -1.0], "out": [0.0, 1.0], "along": [1.0, 0.0]}),
    ("box", (BOX_LO, BOX_HI), ref_box(BOX_LO, BOX_HI), np.array([1.0, 1.0]),
     {"in": [-1.0, -1.0], "out": [1.0, -1.0], "edge": [0.0, -1.0]}),
    ("box", (BOX_LO, BOX_HI), ref_box(BOX_LO, BOX_HI), np.array([0.25, 0.5]),
     {"any": [1.0, -3.0]}),
    ("linf_ball", (1.0,), ref_box(-1.0, 1.0), np.array([1.0, 1.0]),
     {"in": [-1.0, -1.0], "out": [1.0, -1.0], "edge": [-1.0, 0.0]}),
    ("hyperplane", (HS_A, 1.0), ref_halfspace(HS_A, 1.0, equality=True), np.array([0.5, 0.5]),
     {"out": [1.0, 0.0], "along": [1.0, -1.0]}),
    ("halfspace", (HS_A, 1.0), ref_halfspace(HS_A, 1.0), np.array([0.5, 0.5]),
     {"in": [-1.0, 0.0], "out": [1.0, 1.0], "along": [1.0, -1.0]}),
    ("l1_ball", (1.0,), ref_l1, np.array([1.0, 0.0]),
     {"in": [-1.0, 0.0], "out": [1.0, 0.0], "edge": [-1.0, 1.0], "corner out": [0.0, 1.0]}),
    ("simplex", (1.0,), ref_simplex, np.array([1.0, 0.0, 0.0]),
     {"edge": [-1.0, 1.0, 0.0], "out": [1.0, 0.0, 0.0], "below": [0.0, 0.0, -1.0]}),
    ("simplex", (1.0,), ref_simplex, np.array([0.5, 0.5, 0.0]),
     {"along": [1.0, -1.0, 0.0], "off": [0.0, 0.0, 1.0]}),
    ("standard_simplex", (1.0,), ref_standard_simplex, np.array([0.5, 0.5, 0.0]),
     {"in": [-1.0, -1.0, 1.0], "out": [1.0, 0.0, 0.0], "face": [-1.0, -1.0, 0.0]}),
    ("standard_simplex", (1.0,), ref_standard_simplex, np.zeros(3),
     {"in": [1.0, 1.0, 1.0], "out": [-1.0, 0.0, 0.0]}),
    ("l2_ball", (1.0,), ref_l2, np.array([1.0, 0.0]),
     {"in": [-1.0, 0.0], "out": [1.0, 0.0], "tangent": [0.0, 1.0], "in tangent": [-1.0, 1.0]}),
    ("l2_ball", (1.0,), ref_l2, np.array([0.5, 0.0]), {"any": [1.0, 3.0]}),
    ("soc", (), ref_soc, np.array([1.0, 1.0, 0.0]),
     {"in (issue)": [2.0, -1.0, 2.0], "out": [-1.0, 1.0, 0.0], "generator": [1.0, 1.0, 0.0],
      "tangent": [0.0, 0.0, 1.0], "tangent 2": [1.0, 1.0, 1.0]}),
    ("soc", (), ref_soc, np.array([5.0, 3.0, 4.0]), {"in (issue)": [2.0, -1.0, 2.0]}),
    ("soc", (), ref_soc, np.zeros(3),
     {"in": [1.0, 0.0, 0.0], "polar": [-1.0, 0.0, 0.0], "boundary": [1.0, 1.0, 0.0],
      "between": [0.0, 1.0, 0.0]}),
    ("rsoc", (), ref_rsoc, np.array([1.0, 2.0, 2.0]),
     {"in": [1.0, 1.0, 0.0], "out": [-1.0, 0.0, 0.0], "tangent": [0.0, 2.0, 1.0]}),
    ("rsoc", (), ref_rsoc, np.array([0.0, 1.0, 0.0]),
     {"in": [1.0, 0.0, 0.0], "out": [-1.0, 0.0, 0.0], "tangent": [0.0, 0.0, 1.0]}),
    ("rsoc", (), ref_rsoc, np.zeros(3), {"in": [1.0, 1.0, 0.0], "out": [-1.0, -1.0, 0.0]}),
    ("psd", (), ref_psd, np.diag([1.0, 0.0]),
     {"in": np.diag([0.0, 1.0]), "out": np.diag([0.0, -1.0]), "tangent": SKEW,
      "along": np.diag([1.0, 0.0]), "skew": np.array([[0.0, 1.0], [-1.0, 0.0]])}),
    ("psd", (), ref_psd, np.zeros((2, 2)),
     {"in": np.eye(2), "out": -np.eye(2), "mixed": np.diag([1.0, -1.0])}),
    ("nuclear_ball", (1.0,), ref_nuclear(1.0), np.diag([1.0, 0.0]),
     {"in": np.diag([-1.0, 0.0]), "out": np.diag([1.0, 0.0]), "flat": np.diag([-1.0, 1.0])}),
    ("nuclear_ball", (1.0,), ref_nuclear(1.0), np.diag([0.5, 0.0]), {"any": SKEW}),
]
DISTANCE_RAYS = [(s, params, ref, x, np.array(v, dtype=float).reshape(np.shape(x)),
                  f"{s} {np.ravel(x).tolist()} {label}")
                 for s, params, ref, x, dirs in DISTANCE_TABLE for label, v in dirs.items()]


def _mp_array(a) -> np.ndarray:
    return np.array([mpmath.mpf(float(v)) for v in np.ravel(a)], dtype=object).reshape(
        np.shape(a))


def _mp_residual(ref, z):
    r = np.ravel(z - ref(z))
    return r, mpmath.sqrt(mpmath.fsum(v * v for v in r))


def distance_oracle(ref, x, v):
    """``(dist'(x; v), lim ∇dist(x + δv) or None)`` from the reference projection at 80
    digits: the one-sided quotient at δ = 1e-30, and the unit residual at δ = 1e-12 where the
    ray leaves the set (also at second order: the residual is then 1e-24, far above the
    working precision), 0 where it enters the interior, None where it stays on the boundary
    (any element of ``N(x) ∩ B`` is then a limit along some continuation of the ray)."""
    with mpmath.workdps(80):
        X, V = _mp_array(x), _mp_array(v)
        delta = mpmath.mpf("1e-30")
        dini = (_mp_residual(ref, X + delta * V)[1] - _mp_residual(ref, X)[1]) / delta
        y = X + mpmath.mpf("1e-12") * V
        r, nr = _mp_residual(ref, y)
        if nr > mpmath.mpf("1e-50"):
            return float(dini), np.array([float(e / nr) for e in r]).reshape(np.shape(x))
        rho = mpmath.mpf("1e-20")
        for i in range(x.size):
            for sgn in (1, -1):
                e = np.zeros(x.size, dtype=object)
                e[i] = sgn * rho
                if _mp_residual(ref, y + e.reshape(np.shape(x)))[1] > mpmath.mpf("1e-60"):
                    return float(dini), None
        return float(dini), np.zeros(np.shape(x))


@pytest.mark.parametrize("case", DISTANCE_RAYS, ids=[c[-1] for c in DISTANCE_RAYS])
def test_distance_at_points_of_the_set(case):
    """dist'(x; v) is the one-sided quotient (>= 0 on the set) and the subgradient the limit
    of ∇dist along the ray: the unit residual where the ray leaves (at first order or, for a
    curved boundary, at second), 0 where it enters the interior; where the ray stays on the
    boundary, an element of the Clarke set ``N(x) ∩ B`` (the next direction decides). Today
    soc at (1, 1, 0) along (2, -1, 2) gave dist' = -2.12, and halfspace/box/hyperplane with
    array parameters raised an internal TypeError on inward rays."""
    s, params, ref, x, v, _ = case
    f = lambda z: P.distance(z, s, *params)  # noqa: E731
    value, dini = asd.directional(f)(x, v)
    g = asd.subgrad(f, direction=v)(x)
    want_dini, want_g = distance_oracle(ref, x, v)
    assert float(value) <= 1e-15  # rsoc's rotation by √½ rounds
    assert float(dini) >= -1e-12
    assert float(dini) == pytest.approx(want_dini, abs=1e-9)
    assert float(np.sum(g * v)) == pytest.approx(float(dini), abs=1e-9)
    if want_g is not None:
        np.testing.assert_allclose(g, want_g, atol=1e-8)
        return
    assert np.linalg.norm(g) <= 1 + 1e-9
    rng = np.random.default_rng(0)
    for _ in range(20):  # g is a normal: <g, y - x> <= 0 for every y in the set
        y = np.asarray(ref(x + rng.standard_normal(np.shape(x)) * 2.0), dtype=float)
        assert float(np.sum(g * (y - x))) <= 1e-9


@pytest.mark.parametrize("v", [[1.0, 0.0], [-1.0, 0.0], [1.0, 1.0], [0.5, -1.0]])
def test_distance_leaving_a_polyhedral_set_through_the_input_curvature(v):
    """dist(x1 - x0², nonneg) at 0 along (±1, 0): the input leaves the set at second order
    (-δ²), where the first-order residual is 0; the residual's exact series gives the
    gradient (0, -1) (0 before). Exact oracle: the distance is max(x0² - x1, 0)."""
    def f(x):
        return P.distance(anp.stack([x[1] - x[0] ** 2, 0 * x[0] + 1]), "nonneg")

    check_rule(f, np.zeros(2), direction=np.array(v),
               reference=lambda x: np.maximum(x[0] ** 2 - x[1], 0), exact=True)


def test_distance_to_the_nuclear_ball_along_a_tangent_is_refused():
    """Leaving the nuclear ball at second order: asd does not derive that residual and says
    so (rather than returning 0)."""
    with pytest.raises(UnsupportedError, match="tangent to the ball's boundary"):
        asd.subgrad(lambda X: P.distance(X, P.nuclear_ball, 1.0),
                    direction=np.array([[0.0, 1.0], [0.0, 0.0]]))(np.diag([1.0, 0.0]))


def test_distance_is_zero_and_flat_inside():
    g = asd.subgrad(lambda x: P.distance(x, P.l2_ball, 2.0))(np.array([0.5, 0.5]))
    assert np.array_equal(g, np.zeros(2))
    g = asd.subgrad(lambda x: P.distance(x, "nonneg"), direction=np.array([1.0, -2.0]))(
        np.zeros(2))
    np.testing.assert_allclose(g, [0.0, -1.0])


# ----- structure, batching, errors -----

STRUCTURE_CASES = [
    ("simplex", (np.array([1.5, 1.0, 0.5, 0.0]), 1.5)),
    ("l1_ball", (np.array([1.0, -1.0, 0.5, 0.0]), 1.0)),
    ("l2_ball", (np.array([3.0, 4.0, 0.0]), 1.0)),
    ("soc", (np.array([0.0, 3.0, 4.0]),)),
    ("psd", (B4 @ B4.T,)),
    ("nuclear_ball", (np.diag([2.0, 2.0, 0.0]), 1.0)),
]


@pytest.mark.parametrize("name, args", STRUCTURE_CASES, ids=[c[0] for c in STRUCTURE_CASES])
def test_maps_are_structured_and_batched(name, args):
    """The rule's map is never Dense; a batch of tangents pushes and pulls in one call."""
    x = args[0]
    rng = np.random.default_rng(0)
    dxs = [FixedTangent(rng.standard_normal(x.shape))] + [FixedTangent(0.0)] * (len(args) - 1)
    _, lin = RULES[name](args, dxs)
    m = lin.maps[0] if hasattr(lin, "maps") else lin
    assert not isinstance(m, Dense)
    batch = rng.standard_normal((5, *x.shape))
    pushed = m.push(batch)
    assert pushed.shape == batch.shape
    np.testing.assert_allclose(pushed[2], m.push(batch[2]), atol=1e-12)
    np.testing.assert_allclose(m.pull(batch), pushed, atol=1e-12)  # self-adjoint


@pytest.mark.parametrize("call, error", [
    (lambda: P.l2_ball(np.ones(2), -1.0), ASDError),
    (lambda: P.box(np.ones(2), 1.0, 0.0), ASDError),
    (lambda: P.psd(np.ones((2, 3))), ShapeError),
    (lambda: P.hyperplane(np.ones(2), np.zeros(2), 1.0), ASDError),
    (lambda: P.distance(np.ones(2), "sphere"), UnsupportedError),
])
def test_errors(call, error):
    with pytest.raises(error):
        call()


def test_traced_radius_is_refused():
    with pytest.raises(UnsupportedError, match="radius"):
        asd.subgrad(lambda r: P.l2_ball(np.array([3.0, 4.0]), r).sum())(1.0)


def test_box_bounds_are_differentiable():
    x, lo, hi = np.array([-2.0, 0.5, 3.0]), np.zeros(3), np.ones(3)
    g_lo, g_hi = asd.subgrad(lambda lo, hi: P.box(x, lo, hi).sum(), argnums=(0, 1))(lo, hi)
    np.testing.assert_allclose(g_lo, [1.0, 0.0, 0.0])
    np.testing.assert_allclose(g_hi, [0.0, 0.0, 1.0])


@pytest.mark.parametrize("name", sorted(RULES))
def test_float32_stays_float32(name):
    args = {"box": (0.0, 1.0), "hyperplane": (np.ones(4, np.float32), 1.0),
            "halfspace": (np.ones(4, np.float32), 0.5)}.get(name, ())
    x = np.array([[0.5, 0.5], [0.0, -1.0]], np.float32)
    x = x if name in ("psd", "nuclear_ball") else x.ravel()
    fn = getattr(P, name)
    value = fn(x, *args)
    traced, g = asd.value_and_subgrad(lambda z: fn(z, *args).sum(), seed=1)(x)
    assert value.dtype == np.float32 and traced.dtype == np.float32 and g.dtype == np.float32


# ----- the examples this module backs (they assert their own claims) -----

@pytest.mark.parametrize("script", ["semismooth_newton.py", "qp_sensitivity.py"])
def test_example_runs(script, capsys):
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / script
    assert runpy.run_path(str(path))["main"]() == 0
    assert "FAIL" not in capsys.readouterr().out


# ----- hypothesis: small integer symmetric matrices, full of multiple zero eigenvalues -----

@st.composite
def integer_symmetric(draw, n=3):
    """``B Bᵀ - C Cᵀ`` from small integer factors: exact in binary, often singular, often with
    a null space of dimension >= 2 and repeated nonzero eigenvalues."""
    rank_b, rank_c = draw(st.integers(0, 2)), draw(st.integers(0, 1))
    entries = st.integers(-1, 1)
    B = np.array(draw(st.lists(entries, min_size=n * rank_b, max_size=n * rank_b)),
                 float).reshape(n, rank_b)
    C = np.array(draw(st.lists(entries, min_size=n * rank_c, max_size=n * rank_c)),
                 float).reshape(n, rank_c)
    return B @ B.T - C @ C.T


@settings(max_examples=12, deadline=None)
@given(integer_symmetric(), st.integers(0, 2**31))
def test_psd_kinks_hypothesis(X, seed):
    dirs = _directions(X, seed, k=2)
    check_rule(P.psd, X, directions=dirs, reference=ref_psd, exact=False, rtol=1e-8)
    for d in dirs:
        assert_projection_jacobian(asd.jacobian(P.psd, direction=d)(X), X.size)
