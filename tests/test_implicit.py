"""asd.implicit: solution maps against exact oracles at their kinks.

Oracles: closed forms on the active set (lasso, box-QP), and one-sided difference quotients of
the solution map computed exactly in rational arithmetic by an independent solver (active-set
enumeration with `fractions.Fraction`), along the same direction; for an LP at a degenerate
vertex the pieces' Jacobians are enumerated exactly and asd's must be one of them (an element
of the Clarke Jacobian). Where the solution map is not Lipschitz, `NotLipschitzError`.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import asd
from asd.implicit.qp import qp_layer
from asd.testing.exact import solve_fractions

DELTA = Fraction(1, 2**20)


# ----- exact rational solvers (independent of asd) -----

def _frac(a):
    return [[Fraction(float(v)) for v in row] for row in np.atleast_2d(a)]


def exact_qp(P, q, G, h):
    """``argmin ½xᵀPx + qᵀx s.t. Gx <= h`` (P ≻ 0 or an LP with a unique vertex) exactly, by
    enumerating active sets and checking the KKT conditions in Fractions."""
    n, m = len(q), len(h)
    best = None
    for k in range(min(n, m) + 1):
        for act in itertools.combinations(range(m), k):
            K = [[P[i][j] for j in range(n)] + [G[a][i] for a in act] for i in range(n)]
            K += [[G[a][j] for j in range(n)] + [Fraction(0)] * k for a in act]
            sol = solve_fractions(K, [-v for v in q] + [h[a] for a in act])
            if sol is None:
                continue
            x, lam = sol[:n], sol[n:]
            if any(v < 0 for v in lam):
                continue
            if any(sum(G[i][j] * x[j] for j in range(n)) > h[i] for i in range(m)):
                continue
            best = x if best is None else best
            assert best == x, "the exact QP solution is not unique"
    return best


def quotient(solve, theta, direction):
    """The exact one-sided quotient ``(x(θ + δd) - x(θ)) / δ`` for a piecewise affine map."""
    x0 = solve(theta)
    x1 = solve([t + DELTA * d for t, d in zip(theta, direction, strict=True)])
    return np.array([float((b - a) / DELTA) for a, b in zip(x0, x1, strict=True)])


def limiting_jacobian(solve, theta, direction):
    """``lim J x(θ + δd)`` for a piecewise affine map: exact differences on the piece that
    ``θ + δd`` lies in (steps δ² ≪ δ stay on it)."""
    base = [t + DELTA * d for t, d in zip(theta, direction, strict=True)]
    x0 = solve(base)
    cols = []
    for i in range(len(theta)):
        step = list(base)
        step[i] += DELTA * DELTA
        cols.append([float((b - a) / (DELTA * DELTA)) for a, b in
                     zip(x0, solve(step), strict=True)])
    return np.array(cols).T


# ----- root / fixed_point: lasso by its proximal-gradient fixed point -----

X = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, -1.0, 1.0]])
Y = np.array([2.0, 1.0, 1.0, 2.0])
ALPHA = 0.125  # below 1 / ||X||²


def soft(v, t):
    return asd.relu(v - t) - asd.relu(-v - t)


def lasso_T(beta, lam, y):
    return soft(beta - ALPHA * (X.T @ (X @ beta - y)), ALPHA * lam)


def exact_lasso(theta):
    """``argmin ½|Xβ - y|² + λ|β|₁`` exactly: enumerate sign patterns, solve the active
    system in Fractions, keep the one satisfying the optimality conditions (X has full
    column rank, so it is unique)."""
    lam, y = theta[0], theta[1:]
    n = X.shape[1]
    XtX = _frac(X.T @ X)
    xty = [sum(Fraction(X[i, j]) * y[i] for i in range(X.shape[0])) for j in range(n)]
    for signs in itertools.product((-1, 0, 1), repeat=n):
        act = [i for i in range(n) if signs[i]]
        M = [[XtX[i][j] for j in act] for i in act]
        sol = solve_fractions(M, [xty[i] - lam * signs[i] for i in act]) if act else []
        if sol is None:
            continue
        beta = [Fraction(0)] * n
        for i, v in zip(act, sol, strict=True):
            beta[i] = v
        if any(beta[i] * signs[i] <= 0 for i in act):
            continue
        grad = [xty[i] - sum(XtX[i][j] * beta[j] for j in range(n)) for i in range(n)]
        if all(abs(grad[i]) <= lam for i in range(n) if not signs[i]):
            return beta
    raise AssertionError("no lasso solution found")


def lasso_solve(lam, y):
    beta = exact_lasso([Fraction(float(lam))] + [Fraction(float(v)) for v in y])
    return np.array([float(b) for b in beta])


LASSO = asd.implicit.fixed_point(lasso_T, lasso_solve, name="lasso")
LAM_MAX = float(np.max(np.abs(X.T @ Y)))  # every coefficient is 0 from here on: a kink


def _lasso_theta(lam, y=Y):
    return [Fraction(lam)] + [Fraction(float(v)) for v in y]


@pytest.mark.parametrize("lam", [LAM_MAX, 2.0, 1.0], ids=["kink at lambda_max", "2", "1"])
def test_lasso_directional_and_jacobian_match_exact_quotients(lam):
    theta = _lasso_theta(lam)
    rng = np.random.default_rng(3)
    for k in range(3):
        d = rng.choice([-1.0, -0.5, 0.5, 1.0], size=5) if k else np.array([-1.0, 0, 0, 0, 0])
        dfrac = [Fraction(float(v)) for v in d]
        want = quotient(exact_lasso, theta, dfrac)

        def f(lam_y):
            return LASSO(lam_y[0], lam_y[1:])

        z = np.array([lam, *Y])
        _, got = asd.directional(f)(z, d)
        np.testing.assert_allclose(got, want, atol=1e-9)
        J = asd.jacobian(f, direction=d)(z)
        np.testing.assert_allclose(J, limiting_jacobian(exact_lasso, theta, dfrac), atol=1e-9)


def test_lasso_kink_closed_form_on_the_active_set():
    """At λ_max the coefficients with |X_jᵀy| = λ_max (here two, tied) enter as λ decreases:
    dβ_A/dλ = -(X_AᵀX_A)⁻¹ sign(X_Aᵀy) from the left, 0 from the right (the closed form on
    the active set)."""
    corr = X.T @ Y
    act = np.flatnonzero(np.abs(corr) == LAM_MAX)
    want = -np.linalg.solve(X[:, act].T @ X[:, act], np.sign(corr[act]))
    down = asd.jacobian(lambda lam: LASSO(lam, Y), direction=-1.0)(LAM_MAX)
    up = asd.jacobian(lambda lam: LASSO(lam, Y), direction=1.0)(LAM_MAX)
    np.testing.assert_allclose(down[act], want, atol=1e-12)
    assert np.array_equal(up, np.zeros(3))
    assert LASSO.last.element.startswith("limiting Jacobian")


# ----- box-QP by its projected-gradient fixed point: a weakly active bound -----

Q = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.25], [0.0, 0.25, 1.5]])
LO, HI = np.zeros(3), np.ones(3)


def box_T(x, c):
    return asd.projections.box(x - 0.25 * (Q @ x + c), LO, HI)


def exact_box(theta):
    G = [[Fraction(1 if i == j else 0) for j in range(3)] for i in range(3)]
    G += [[Fraction(-1 if i == j else 0) for j in range(3)] for i in range(3)]
    return exact_qp(_frac(Q), list(theta), G, [Fraction(1)] * 3 + [Fraction(0)] * 3)


BOX = asd.implicit.fixed_point(box_T, lambda c: np.array([float(v) for v in exact_box(
    [Fraction(float(v)) for v in c])]), name="box_qp")
X_STAR = np.array([1.0, 0.5, 0.0])  # x1 at its upper bound, x3 at its lower bound
C_DEGENERATE = -Q @ X_STAR          # gradient 0 there: both bounds weakly active


@pytest.mark.parametrize("seed", range(4))
def test_box_qp_weakly_active_bounds(seed):
    c = C_DEGENERATE
    theta = [Fraction(float(v)) for v in c]
    d = np.random.default_rng(seed).choice([-1.0, -0.5, 0.5, 1.0], size=3)
    dfrac = [Fraction(float(v)) for v in d]
    _, got = asd.directional(BOX)(c, d)
    np.testing.assert_allclose(got, quotient(exact_box, theta, dfrac), atol=1e-9)
    J = asd.jacobian(BOX, direction=d)(c)
    np.testing.assert_allclose(J, limiting_jacobian(exact_box, theta, dfrac), atol=1e-9)
    free = np.flatnonzero(np.abs(J).sum(axis=0) > 0)  # closed form: -(Q_II)⁻¹ on the free set
    np.testing.assert_allclose(J[np.ix_(free, free)], -np.linalg.inv(Q[np.ix_(free, free)]),
                               atol=1e-9)


def test_not_lipschitz_solution_maps_are_refused():
    singular = asd.implicit.root(lambda y, t: asd.relu(y) - t, lambda t: np.zeros(1))
    with pytest.raises(asd.NotLipschitzError, match="singular element"):
        asd.jacobian(singular, direction=np.array([1.0]))(np.zeros(1))
    folded = asd.implicit.root(lambda y, t: asd.abs(y) - t, lambda t: np.zeros(1))
    with pytest.raises(asd.NotLipschitzError, match=r"coherently oriented|singular"):
        asd.jacobian(folded, direction=np.array([1.0]))(np.zeros(1))


def test_inaccurate_solver_is_refused():
    bad = asd.implicit.root(lambda y, t: y - t, lambda t: t + 1e-3)
    with pytest.raises(asd.ASDError, match="residual"):
        asd.jacobian(bad)(np.ones(2))


# ----- qp: an LP at a degenerate vertex, exactly -----

G3 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
H3 = np.array([1.0, 1.0, 2.0])  # the vertex (1, 1) has three active constraints
Q3 = np.array([-1.0, -2.0])


def lp_h(h):
    return asd.implicit.qp(np.zeros((2, 2)), Q3, None, None, G3, h)


def exact_lp_h(theta):
    return exact_qp([[Fraction(0)] * 2] * 2, [Fraction(-1), Fraction(-2)], _frac(G3),
                    list(theta))


def _piece_jacobians():
    """The Jacobians of the vertex map on each pair of the three constraints."""
    out = []
    for pair in itertools.combinations(range(3), 2):
        M = G3[list(pair)]
        J = np.zeros((2, 3))
        J[:, list(pair)] = np.linalg.inv(M)
        out.append(J)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_lp_degenerate_vertex_exact(seed):
    d = np.random.default_rng(seed).choice([-1.0, -0.5, 0.5, 1.0], size=3)
    theta = [Fraction(float(v)) for v in H3]
    dfrac = [Fraction(float(v)) for v in d]
    _, got = asd.directional(lp_h)(H3, d)
    np.testing.assert_allclose(got, quotient(exact_lp_h, theta, dfrac), atol=1e-12)
    J = asd.jacobian(lp_h, direction=d)(H3)
    np.testing.assert_allclose(J, limiting_jacobian(exact_lp_h, theta, dfrac), atol=1e-12)
    assert any(np.allclose(J, Jp) for Jp in _piece_jacobians()), "not a piece's Jacobian"
    g = asd.subgrad(lambda h: asd.sum(lp_h(h)), direction=d)(H3)
    np.testing.assert_allclose(g, J.sum(axis=0), atol=1e-12)


def test_lp_cost_is_locally_constant_and_cost_ties_are_refused():
    """At a nondegenerate LP vertex dx*/dq = 0 exactly (not 1e-8); a cost parallel to an
    edge makes the optimum a face: refused."""
    J = asd.jacobian(lambda q: asd.implicit.qp(np.zeros((2, 2)), q, None, None, G3,
                                               np.array([1.0, 1.0, 3.0])), seed=0)(Q3)
    assert np.array_equal(J, np.zeros((2, 2)))
    with pytest.raises(asd.NotLipschitzError):
        asd.jacobian(lambda h: asd.implicit.qp(np.zeros((2, 2)), np.array([-1.0, -1.0]),
                                               None, None, G3, h),
                     direction=np.array([0.0, 0.0, -1.0]))(H3)


# ----- qp: all data, against forward differences of the re-solved QP away from kinks -----

def test_qp_differentiable_in_all_data():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((4, 4))
    P = M @ M.T + np.eye(4)
    q = rng.standard_normal(4)
    A = rng.standard_normal((1, 4))
    b = np.array([0.5])
    G = np.vstack([np.eye(4), -np.eye(4)])
    h = np.concatenate([0.3 * np.ones(4), 0.3 * np.ones(4)])
    data = [P, q, A, b, G, h]
    x = asd.implicit.qp(*data)
    assert qp_layer().last["active"].size > 0  # some bounds active, strictly
    for i, v in enumerate(data):
        def f(v, i=i):
            args = list(data)
            args[i] = v
            return asd.implicit.qp(*args)
        J = np.asarray(asd.jacobian(f, seed=0)(v)).reshape(4, -1)
        t = rng.standard_normal(v.shape)
        if i == 0:
            t = t + t.T
        eps = 1e-6
        fd = (np.asarray(f(v + eps * t)) - x) / eps
        np.testing.assert_allclose(J @ t.ravel(), fd, atol=2e-5)
        pull = asd.vjp(f, seed=0)(v)[1](np.ones(4))
        np.testing.assert_allclose(np.ravel(pull), J.sum(axis=0), atol=1e-10)


# ----- conic: the residual map, against qp and diffcp -----

def test_conic_lp_matches_qp():
    A = np.vstack([G3, -np.eye(2)])
    b = np.concatenate([np.array([1.0, 1.0, 3.0]), np.zeros(2)])
    c = np.array([-1.0, -2.0])
    x = asd.implicit.conic(A, b, c, {"l": 5})[0]
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-9)
    Jc = asd.jacobian(lambda b: asd.implicit.conic(A, b, c, {"l": 5})[0], seed=1)(b)
    Jq = asd.jacobian(lambda b: asd.implicit.qp(np.zeros((2, 2)), c, None, None, A, b),
                      seed=1)(b)
    np.testing.assert_allclose(Jc, Jq, atol=1e-8)


def _soc_problem():
    A = np.vstack([np.zeros((1, 2)), -np.eye(2)])
    b = np.array([1.0, 0.0, 0.0])
    return A, b, np.array([-1.0, -0.5])


def test_conic_soc_against_closed_form():
    """max c·x over the unit disc: x* = -c/|c|, dx*/dc = -(I - x xᵀ)/|c|."""
    A, b, c = _soc_problem()
    x = asd.implicit.conic(A, b, c, {"q": [3]})[0]
    np.testing.assert_allclose(x, -c / np.linalg.norm(c), atol=1e-9)
    J = asd.jacobian(lambda c: asd.implicit.conic(A, b, c, {"q": [3]})[0], seed=0)(c)
    xs = -c / np.linalg.norm(c)
    np.testing.assert_allclose(J, -(np.eye(2) - np.outer(xs, xs)) / np.linalg.norm(c),
                               atol=1e-8)


def test_conic_agrees_with_diffcp_at_a_regular_point():
    diffcp = pytest.importorskip("diffcp")
    A, b, c = _soc_problem()
    import scipy.sparse as sp
    _, _, _, _, adjoint = diffcp.solve_and_derivative(sp.csc_matrix(A), b, c, {"q": [3]},
                                                      eps=1e-12)
    _, db, dc = adjoint(np.array([1.0, 0.0]), np.zeros(3), np.zeros(3))
    ours = asd.subgrad(lambda c: asd.implicit.conic(A, b, c, {"q": [3]})[0][0], seed=0)(c)
    np.testing.assert_allclose(ours, dc, atol=1e-5)
    ours_b = asd.subgrad(lambda b: asd.implicit.conic(A, b, c, {"q": [3]})[0][0], seed=0)(b)
    np.testing.assert_allclose(ours_b, db, atol=1e-5)


def test_conic_exp_cone():
    """max x s.t. (x, 1, t) in the exp cone, t <= 2: x* = log 2 (e^x <= t), dx*/dt = 1/t."""
    # variables (x, t): s = b - A v must be in K = nonneg (2 - t >= 0) x exp cone (x, 1, t)
    A = np.array([[0.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [0.0, -1.0]])
    b = np.array([2.0, 0.0, 1.0, 0.0])
    c = np.array([-1.0, 0.0])
    x = asd.implicit.conic(A, b, c, {"l": 1, "ep": 1})[0]
    np.testing.assert_allclose(x, [np.log(2.0), 2.0], atol=1e-7)
    g = asd.subgrad(lambda b: asd.implicit.conic(A, b, c, {"l": 1, "ep": 1})[0][0],
                    seed=0)(b)
    assert g[0] == pytest.approx(0.5, abs=1e-6)


# ----- frameworks -----

def test_as_torch_layer_gradient_is_asds_pullback():
    torch = pytest.importorskip("torch")
    layer = asd.implicit.as_torch(lp_h, seed=0)
    h = torch.tensor(H3, requires_grad=True)
    (layer(h) * torch.tensor([1.0, 1.0], dtype=torch.float64)).sum().backward()
    # the degenerate vertex: the gradient is one piece's, never a blend
    assert any(np.allclose(h.grad.numpy(), J.sum(axis=0)) for J in _piece_jacobians())


def test_as_jax_layer():
    jax = pytest.importorskip("jax")
    layer = asd.implicit.as_jax(lambda c: asd.implicit.conic(*_soc_problem()[:2], c,
                                                             {"q": [3]})[0])
    c = _soc_problem()[2]
    g = jax.grad(lambda c: layer(c)[0])(jax.numpy.asarray(c))
    xs = -c / np.linalg.norm(c)
    want = (-(np.eye(2) - np.outer(xs, xs)) / np.linalg.norm(c))[0]
    np.testing.assert_allclose(np.asarray(g), want, atol=1e-5)


def test_lp_degenerate_vertex_against_diffcp():
    """diffcp's derivative at the degenerate vertex is a blend of the three pieces (inside
    their hull, so a Clarke element, but a limiting Jacobian along no direction): along each
    direction it mispredicts the one-sided derivative, which asd gives exactly."""
    diffcp = pytest.importorskip("diffcp")
    import scipy.sparse as sp
    *_, D, _ = diffcp.solve_and_derivative(sp.csc_matrix(G3), H3, Q3, {"l": 3}, eps=1e-12)
    theirs = np.stack([D(sp.csc_matrix((3, 2)), e, np.zeros(2))[0] for e in np.eye(3)], axis=1)
    assert not any(np.allclose(theirs, J, atol=1e-3) for J in _piece_jacobians())
    theta = [Fraction(float(v)) for v in H3]
    for d in np.array([[0.0, 0.0, -1.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]]):
        want = quotient(exact_lp_h, theta, [Fraction(float(v)) for v in d])
        assert np.max(np.abs(theirs @ d - want)) > 0.1
        np.testing.assert_allclose(asd.directional(lp_h)(H3, d)[1], want, atol=1e-12)


def test_conic_psd_and_power_cone_blocks():
    """min <C, X> s.t. tr X = 1, X ⪰ 0 is the bottom eigenvector's outer product (SCS's
    scaled lower triangle); max z s.t. (x, y, z) in the power cone (α = ½), x = h1, y = h2 is
    z = √(h1 h2), whose gradient in h is (√(h2/h1), √(h1/h2))/2."""
    C = np.array([[2.0, 0.5], [0.5, 1.0]])
    c = np.array([C[0, 0], np.sqrt(2) * C[1, 0], C[1, 1]])
    A = np.vstack([[1.0, 0.0, 1.0], -np.eye(3)])
    x = asd.implicit.conic(A, np.array([1.0, 0, 0, 0]), c, {"z": 1, "s": [2]})[0]
    v = np.linalg.eigh(C)[1][:, 0]
    np.testing.assert_allclose(x, [v[0] ** 2, np.sqrt(2) * v[0] * v[1], v[1] ** 2], atol=1e-9)
    A2 = np.vstack([[[1.0, 0, 0], [0, 1, 0]], -np.eye(3)])
    b2 = np.array([1.0, 4.0, 0, 0, 0])
    c2 = np.array([0, 0, -1.0])
    g = asd.subgrad(lambda b: asd.implicit.conic(A2, b, c2, {"z": 2, "p": [0.5]})[0][2],
                    seed=0)(b2)
    np.testing.assert_allclose(g[:2], [1.0, 0.25], atol=1e-8)
