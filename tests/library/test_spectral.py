"""Spectral functions at repeated eigenvalues: the direction selects the branch.

Oracle: `asd.testing.check_rule` with references built on mpmath's own symmetric eigensolver and
SVD at 60 digits (one-sided differences at ``X + δD``, δ = 1e-20). Matrices with repeated
eigenvalues are built exactly in binary (integer or dyadic entries), so the oracle sees the same
exact ties asd detects with its tolerance. Formula tests check the specified subgradients: at a
multiple top eigenvalue ``q qᵀ`` with ``q`` the top eigenvector of ``D`` restricted to the top
eigenspace, and the second-order rule when ``D`` vanishes on that eigenspace.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
import asd.numpy as anp
from asd.errors import ShapeError, UnsupportedError
from asd.testing import check_rule
from asd.testing.precise import to_mpf

S = asd.spectral


def _mp_eigs(X) -> list:
    A = mpmath.matrix([[to_mpf(v) for v in row] for row in (X + X.T) / 2])
    E, _ = mpmath.eigsy(A)
    return sorted(E[i] for i in range(A.rows))


def _mp_svals(X) -> list:
    A = mpmath.matrix([[to_mpf(v) for v in row] for row in X])
    return sorted(mpmath.svd_r(A, compute_uv=False))


def ref_eigvalsh(X):
    if X.dtype != object:
        return np.linalg.eigvalsh((X + X.T) / 2)
    out = np.empty(X.shape[0], dtype=object)
    out[:] = _mp_eigs(X)
    return out


def ref_topk(k):
    def topk(X):
        if X.dtype != object:
            return np.sum(np.linalg.eigvalsh((X + X.T) / 2)[X.shape[0] - k:])
        return np.array(sum(_mp_eigs(X)[X.shape[0] - k:]), dtype=object)
    return topk


def ref_lambda_min(X):
    if X.dtype != object:
        return np.linalg.eigvalsh((X + X.T) / 2)[0]
    return np.array(_mp_eigs(X)[0], dtype=object)


def ref_svals(reduce):
    def norm(X):
        if X.dtype != object:
            s = np.linalg.svd(X, compute_uv=False)
        else:
            s = _mp_svals(X)
        return np.array(reduce(list(s)), dtype=object if X.dtype == object else float)
    return norm


H4 = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0],
               [1.0, -1.0, -1.0, 1.0]]) / 2  # orthogonal, exact in binary
C = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 1.0]])
TOP3 = 3 * np.eye(4) - np.outer(C[:, 0] + C[:, 1], C[:, 0] + C[:, 1])  # eigenvalue 3, mult 3
PAIRS = H4 @ np.diag([1.0, 1.0, 2.0, 2.0]) @ H4.T  # two double eigenvalues

CASES = [
    ("eigvalsh pairs", S.eigvalsh, PAIRS, ref_eigvalsh),
    ("eigvalsh triple", S.eigvalsh, TOP3, ref_eigvalsh),
    ("eigvalsh zero", S.eigvalsh, np.zeros((3, 3)), ref_eigvalsh),
    ("lambda_max triple top", S.lambda_max, TOP3, ref_topk(1)),
    ("lambda_max double top", S.lambda_max, PAIRS, ref_topk(1)),
    ("lambda_min double bottom", S.lambda_min, PAIRS, ref_lambda_min),
    ("topk k=1 in a pair", lambda X: S.topk_eigsum(X, 1), PAIRS, ref_topk(1)),
    ("topk k=2 between pairs", lambda X: S.topk_eigsum(X, 2), PAIRS, ref_topk(2)),
    ("topk k=3 in a pair", lambda X: S.topk_eigsum(X, 3), PAIRS, ref_topk(3)),
    ("topk k=2 in a triple", lambda X: S.topk_eigsum(X, 2), TOP3, ref_topk(2)),
    ("topk k=2 at zero", lambda X: S.topk_eigsum(X, 2), np.zeros((3, 3)), ref_topk(2)),
    ("spectral_norm identity 3x2", S.spectral_norm, np.eye(3, 2), ref_svals(max)),
    ("spectral_norm repeated top", S.spectral_norm, np.diag([2.0, -2.0, 1.0]), ref_svals(max)),
    ("spectral_norm zero", S.spectral_norm, np.zeros((2, 3)), ref_svals(max)),
    ("nuclear_norm rank 1", S.nuclear_norm, np.outer([1.0, 2.0, 0.0], [1.0, -1.0]),
     ref_svals(sum)),
    ("nuclear_norm zero", S.nuclear_norm, np.zeros((2, 2)), ref_svals(sum)),
    ("nuclear_norm repeated", S.nuclear_norm, np.diag([1.0, 1.0, 0.0]), ref_svals(sum)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_limiting_derivatives_at_repeated_eigenvalues(case):
    name, fn, X, ref = case
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    dirs = [rng.standard_normal(X.shape) for _ in range(4)]
    report = check_rule(fn, X, directions=dirs, reference=ref, exact=False, rtol=1e-8,
                        name=name)
    assert report.checks["jacobian"] == 4


def _top_space(X, tol=1e-9):
    lam, V = np.linalg.eigh(X)
    return V[:, lam >= lam[-1] - tol]


@pytest.mark.parametrize("seed", range(4))
def test_lambda_max_subgradient_is_restricted_top_eigenvector(seed):
    """At a multiple top eigenvalue: q qᵀ, q the top eigenvector of D on the top eigenspace."""
    D = np.random.default_rng(seed).standard_normal((4, 4))
    D = D + D.T
    Vt = _top_space(TOP3)
    mu, U = np.linalg.eigh(Vt.T @ D @ Vt)
    q = Vt @ U[:, -1]
    g = asd.subgrad(S.lambda_max, direction=D)(TOP3)
    np.testing.assert_allclose(g, np.outer(q, q), atol=1e-12)
    _, dini = asd.directional(S.lambda_max)(TOP3, D)
    np.testing.assert_allclose(dini, mu[-1], atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_topk_subgradient_splits_the_cut_cluster_by_the_direction(seed):
    D = np.random.default_rng(seed).standard_normal((4, 4))
    D = D + D.T
    _, V = np.linalg.eigh(PAIRS)
    top, low = V[:, 2:], V[:, :2]
    _, U = np.linalg.eigh(low.T @ D @ low)
    q = low @ U[:, -1]
    g = asd.subgrad(lambda X: S.topk_eigsum(X, 3), direction=D)(PAIRS)
    np.testing.assert_allclose(g, top @ top.T + np.outer(q, q), atol=1e-12)


def test_second_order_tie_break():
    """D vanishes on the top eigenspace of diag(1, 1, 0): λ_max(X + δD) = 1 + δ²(a² + b²) along
    q ∝ (a, b, 0), found by the second-order matrix; the first order cannot see it."""
    a, b = 0.6, -1.3
    X = np.diag([1.0, 1.0, 0.0])
    D = np.array([[0.0, 0.0, a], [0.0, 0.0, b], [a, b, 0.0]])
    q = np.array([a, b, 0.0]) / np.hypot(a, b)
    g = asd.subgrad(S.lambda_max, direction=D)(X)
    np.testing.assert_allclose(g, np.outer(q, q), atol=1e-12)
    delta = 1e-4
    _, V = np.linalg.eigh(X + delta * D)
    np.testing.assert_allclose(abs(V[:, -1] @ q), 1.0, atol=1e-6)


# ----- ties that first order leaves open: the exact series along the ray decides -----

def mp_eigh(X, D, delta="1e-20", dps=150):
    """Eigenvalues (ascending) and eigenvectors of ``X + δD`` in mpmath at ``dps`` digits: a
    split of order δ³ (1e-60) is far above the working precision there."""
    with mpmath.workdps(dps):
        d = mpmath.mpf(delta)
        A = mpmath.matrix([[to_mpf(x) + d * to_mpf(v) for x, v in zip(rx, rv)]
                           for rx, rv in zip(X, D)])
        E, Q = mpmath.eigsy(A)
        order = sorted(range(A.rows), key=lambda i: E[i])
        return ([float(E[i]) for i in order],
                np.array([[float(Q[r, i]) for i in order] for r in range(A.rows)]))


def third_order_tie(c, hidden):
    """diag(1, 1, 0, 0) along a straight ray that couples each top eigenvector to its own
    zero eigenvector (first order 0 on the top eigenspace, second order a² on both: tied) and
    moves e3 by c: the top pair splits at third order, as 1 + a²δ² + a²cδ³ for e1."""
    a = 0.75
    X = np.diag([1.0, 1.0, 0.0, 0.0])
    D = np.zeros((4, 4))
    D[0, 2] = D[2, 0] = D[1, 3] = D[3, 1] = a
    D[2, 2] = c
    Q = H4 if hidden else np.eye(4)
    return Q @ X @ Q.T, Q @ D @ Q.T


@pytest.mark.parametrize("c", [0.5, -0.5])
@pytest.mark.parametrize("hidden", [False, True], ids=["diagonal", "hidden"])
def test_ties_opening_at_third_order_along_a_straight_ray(c, hidden):
    """First and second order leave the top pair tied; asd used to keep eigh's basis there
    (e2 for diag(1, 1, 0, 0), wrong for c > 0). The gradients must be the limits of the
    eigenvectors' outer products at X + δD."""
    X, D = third_order_tie(c, hidden)
    _, Q = mp_eigh(X, D)
    top, low = np.outer(Q[:, -1], Q[:, -1]), np.outer(Q[:, 0], Q[:, 0])
    np.testing.assert_allclose(asd.subgrad(S.lambda_max, direction=D)(X), top, atol=1e-9)
    np.testing.assert_allclose(asd.subgrad(S.spectral_norm, direction=D)(X), top, atol=1e-9)
    np.testing.assert_allclose(asd.subgrad(lambda A: S.topk_eigsum(A, 3), direction=D)(X),
                               np.eye(4) - low, atol=1e-9)
    np.testing.assert_allclose(asd.subgrad(S.lambda_min, direction=-D)(-X), top, atol=1e-9)
    J = asd.jacobian(S.eigvalsh, direction=D)(X)
    for i in range(4):
        np.testing.assert_allclose(J[i], np.outer(Q[:, i], Q[:, i]), atol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_a_tie_persisting_along_the_ray_is_decided_by_the_next_direction(seed):
    """lambda_max at I along I: the pair stays tied to every order, so the next direction w
    of ``directions=[v, w]`` decides (the tie contract), not eigh's basis: q qᵀ with q the top
    eigenvector of sym(w); the result reports a lexicographic element."""
    W = np.random.default_rng(seed).standard_normal((3, 3))
    X = np.diag([1.0, 1.0, 0.0])
    D = np.diag([1.0, 1.0, 0.0])
    _, g, report = asd.value_and_subgrad(S.lambda_max, directions=[D, W],
                                         diagnostics=True)(X)
    _, U = np.linalg.eigh(((W + W.T) / 2)[:2, :2])
    q = np.concatenate([U[:, -1], [0.0]])
    np.testing.assert_allclose(g, np.outer(q, q), atol=1e-12)
    assert report.element.startswith("lexicographic")


def test_eigenvalue_order_decided_by_the_input_curvature():
    """eigvalsh(diag(x1 - x0², x1)) along (±1, 0) at 0: first order ties both eigenvalues at
    0; the series of the input (-δ² on the first) orders them. Exact oracle."""
    def f(x):
        return S.eigvalsh(anp.stack([anp.stack([x[1] - x[0] ** 2, 0 * x[0]]),
                                     anp.stack([0 * x[0], x[1]])]))

    def ref(x):
        a, b = x[1] - x[0] ** 2, x[1]
        return np.array([np.minimum(a, b), np.maximum(a, b)])

    for v in ([1.0, 0.0], [-1.0, 0.0], [0.5, 1.0]):
        check_rule(f, np.zeros(2), direction=np.array(v), reference=ref, exact=True)


def test_eigvalsh_jacobian_rows_follow_the_direction():
    D = np.diag([0.0, 2.0, 1.0, 3.0])
    J = asd.jacobian(S.eigvalsh, direction=D)(np.zeros((4, 4)))
    for k, i in enumerate(np.argsort(np.diag(D))):
        e = np.zeros((4, 4))
        e[i, i] = 1.0
        np.testing.assert_allclose(J[k], e, atol=1e-12)


def test_asymmetric_input_is_symmetrized():
    X = np.array([[2.0, 1.0], [-1.0, 0.0]])
    np.testing.assert_allclose(S.eigvalsh(X), np.linalg.eigvalsh((X + X.T) / 2))
    g = asd.subgrad(S.lambda_max)(X)
    np.testing.assert_allclose(g, g.T, atol=1e-14)


def test_spectral_norm_at_repeated_top_singular_value():
    X = np.diag([2.0, -2.0, 1.0])
    D = np.zeros((3, 3))
    D[1, 1] = -1.0  # grows |x_11|: the second singular pair wins
    g = asd.subgrad(S.spectral_norm, direction=D)(X)
    np.testing.assert_allclose(g, np.diag([0.0, -1.0, 0.0]), atol=1e-12)


def test_nuclear_norm_directional_derivative_on_the_null_space():
    """nuclear_norm'(X; D) = tr(Uᵀ D V) + ||U0ᵀ D V0||_* (exact, from the refined basis)."""
    X = np.diag([1.0, 0.0, 0.0])
    D = np.random.default_rng(5).standard_normal((3, 3))
    want = D[0, 0] + np.linalg.norm(D[1:, 1:], "nuc")
    _, dini = asd.directional(S.nuclear_norm)(X, D)
    np.testing.assert_allclose(dini, want, atol=1e-12)


def test_maps_are_batched():
    from asd.library.spectral import eigvalsh_rule

    from asd.extend import FixedTangent

    rng = np.random.default_rng(1)
    _, lin = eigvalsh_rule((PAIRS,), [FixedTangent(rng.standard_normal((4, 4)))])
    t = rng.standard_normal((3, 4, 4))
    np.testing.assert_allclose(lin.push(t)[1], lin.push(t[1]), atol=1e-12)
    c = rng.standard_normal((3, 4))
    np.testing.assert_allclose(lin.pull(c)[2], lin.pull(c[2]), atol=1e-12)


@pytest.mark.parametrize("call, error", [
    (lambda: S.eigvalsh(np.ones((2, 3))), ShapeError),
    (lambda: S.topk_eigsum(np.eye(2), 3), ShapeError),
    (lambda: S.topk_eigsum(np.eye(2), 1.0), UnsupportedError),
    (lambda: asd.subgrad(S.nuclear_norm)(np.ones(3)), ShapeError),
])
def test_errors(call, error):
    with pytest.raises(error):
        call()


@st.composite
def integer_symmetric(draw, n=3):
    """Symmetric matrices with entries in {-1, 0, 1} on a scaled identity: repeated
    eigenvalues are common (and exact, since the entries are)."""
    upper = draw(st.lists(st.integers(-1, 1), min_size=n * (n + 1) // 2,
                          max_size=n * (n + 1) // 2))
    X = np.zeros((n, n))
    X[np.triu_indices(n)] = upper
    X = X + np.triu(X, 1).T
    return X if draw(st.booleans()) else np.diag(np.diag(X))


@settings(max_examples=15, deadline=None)
@given(integer_symmetric(), st.integers(1, 3), st.integers(0, 2**31))
def test_topk_hypothesis(X, k, seed):
    D = np.random.default_rng(seed).standard_normal(X.shape)
    check_rule(lambda A: S.topk_eigsum(A, k), X, directions=[D], reference=ref_topk(k),
               exact=False, rtol=1e-8)
