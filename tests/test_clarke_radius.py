"""asd.clarke(radius=ε): the Goldstein ε-subdifferential, near-ties found by the rules.

Oracles: for a maximum of affine pieces the ε-subdifferential sampled here is the hull of the
gradients of the pieces within reach (value gap <= ε·(|a_i|₁ + |a_j|₁), the first-order reach
of the snap), known in closed form; its min-norm element comes from an independent NNLS on
those gradients. Points are put 1e-9 from kinks by rounding, so the Clarke set at x itself
is a single gradient while the ε-sample must find every piece.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import nnls

import asd
from asd.errors import ArgumentError, ArgumentTypeError


def as_set(rows) -> set:
    return {tuple(np.round(np.ravel(r), 12).tolist()) for r in np.asarray(rows, dtype=float)}


def min_norm_oracle(G: np.ndarray) -> np.ndarray:
    E = np.vstack([G.T, np.ones(len(G))])
    e = np.zeros(E.shape[0])
    e[-1] = 1.0
    w, _ = nnls(E, e)
    return G.T @ (w / w.sum())


def test_radius_zero_is_the_clarke_sample_bit_for_bit():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 3)), rng.standard_normal(6)
    f = lambda x: np.max(a @ x + b) + asd.relu(x[0])  # noqa: E731
    x = np.array([0.0, 0.3, -0.2])
    s0, s = asd.clarke(f, seed=4)(x), asd.clarke(f, seed=4, radius=0)(x)
    assert s.gradients.tobytes() == s0.gradients.tobytes()
    assert s.counts.tolist() == s0.counts.tolist() and s.radius == 0.0 and not s.near_ties


def test_abs_near_its_kink():
    near = asd.clarke(asd.abs, seed=0, radius=1e-6)(1e-9)
    assert as_set(near.gradients) == {(-1.0,), (1.0,)}
    assert near.is_stationary() and near.stationarity.upper == 0.0
    assert [t.primitive for t in near.near_ties] == ["abs"]
    exact = asd.clarke(asd.abs, seed=0)(1e-9)
    assert exact.is_singleton and exact.stationarity.upper == 1.0
    far = asd.clarke(asd.abs, seed=0, radius=1e-10)(1e-9)  # the kink is outside the ball
    assert far.is_singleton and not far.near_ties


@st.composite
def near_lp_optima(draw):
    """``max_i a_i·x + b_i`` at a point where ``k`` pieces are active to within 1e-9
    (rounding), other pieces far below. The active gradients are ``s (u_i - w) R``: distinct
    signed basis vectors ``u_i`` shifted by ``w`` (each piece then keeps a normal cone of
    mass >= 1/4, as in test_clarke.py, so 512 directions hit every one), rotated by a random
    orthogonal ``R`` (which keeps the masses). ``w`` is a convex combination of the ``u_i``
    (0 in the hull: an LP optimum) or a point of ``[-1/2, 1/2]^d``."""
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    pieces = draw(st.lists(st.sampled_from([(j, s) for j in range(d) for s in (1, -1)]),
                           min_size=1, max_size=min(2 * d, 5), unique=True))
    u = np.zeros((len(pieces), d))
    for i, (j, sign) in enumerate(pieces):
        u[i, j] = sign
    if draw(st.booleans()):
        w = rng.dirichlet(np.ones(len(pieces))) @ u
    else:
        w = rng.uniform(-0.5, 0.5, d)
    rot, _ = np.linalg.qr(rng.standard_normal((d, d)))
    a_act = rng.uniform(0.5, 3.0) * (u - w) @ rot.T
    k = len(pieces)
    a_far = rng.standard_normal((3, d))
    x = np.round(rng.uniform(-1, 1, d), 3)
    b_act = 1.0 - a_act @ x + rng.uniform(-1e-9, 1e-9, k)  # active to within 1e-9
    b_far = -a_far @ x - rng.uniform(1.0, 2.0, 3)
    order = rng.permutation(k + 3)
    a = np.vstack([a_act, a_far])[order]
    b = np.r_[b_act, b_far][order]
    return a, b, x, a_act, seed


@settings(max_examples=40, deadline=None)
@given(near_lp_optima(), st.sampled_from(["reduce", "chain"]))
def test_near_lp_optimum_finds_every_piece_active_within_reach(case, form):
    a, b, x, a_act, seed = case
    if form == "reduce":
        def f(z):
            return np.max(a @ z + b)
    else:
        def f(z):
            y = a @ z + b
            out = y[0]
            for i in range(1, len(b)):
                out = np.maximum(out, y[i])
            return out
    s = asd.clarke(f, n=512, seed=seed, radius=1e-6)(x)
    # the sample is sound: only gradients of pieces active somewhere in the ball (each taken
    # at a point of the ball), so an active piece is inside or undetermined, never outside
    assert as_set(s.gradients) <= as_set(a_act)
    for g in a_act:
        assert s.contains(g, tol=1e-9).verdict != "outside"
    z = min_norm_oracle(a_act)
    assert float(np.linalg.norm(s.min_norm())) >= float(np.linalg.norm(z)) - 1e-9
    if s.is_stationary(1e-9):  # certified from the inner hull: the true set must agree
        assert np.linalg.norm(z) <= 1e-9
    assert asd.clarke(f, n=8, seed=seed)(x).is_singleton  # radius 0 sees one piece


def test_the_issue_case_lp_optimum_with_six_pieces_active_to_1e9():
    """The issue's report: 20 affine pieces, 6 active to 1e-9 at the LP optimum."""
    rng = np.random.default_rng(7)
    d = 5
    act = rng.standard_normal((d + 1, d))
    w = rng.uniform(0.5, 1.5, d + 1)
    act[-1] = -(w[:-1] @ act[:-1]) / w[-1]
    a = np.vstack([act, rng.standard_normal((14, d))])
    x_star = rng.uniform(-1, 1, d)
    b = 2.0 - a @ x_star
    b[d + 1:] -= rng.uniform(0.5, 1.0, 14)
    x = x_star + rng.uniform(-1e-9, 1e-9, d) / 10 ** 0.5

    def f(z):
        return np.max(a @ z + b)

    exact = asd.clarke(f, seed=0)(x)
    assert exact.is_singleton and not exact.is_stationary(1e-3)
    s = asd.clarke(f, n=512, seed=0, radius=1e-7)(x)
    assert as_set(s.gradients) == as_set(act)
    assert s.is_stationary(1e-9)


def test_relu_network_near_kinks_by_rounding():
    """relu(h) with h = 0.1 + 0.2 - 0.3 (5.6e-17 by rounding): both slopes in the ball."""
    h = 0.1 + 0.2 - 0.3
    assert h != 0

    def f(x):
        return asd.relu(x[0] + h) - 0.5 * x[1]

    s = asd.clarke(f, seed=1, radius=1e-12)(np.zeros(2))
    assert as_set(s.gradients) == {(1.0, -0.5), (0.0, -0.5)}
    assert asd.clarke(f, seed=1)(np.zeros(2)).is_singleton


def test_clip_and_minimum_near_ties():
    s = asd.clarke(lambda x: np.clip(x, -1.0, 1.0), seed=0, radius=1e-6)(1.0 - 1e-9)
    assert as_set(s.gradients) == {(0.0,), (1.0,)}
    s = asd.clarke(lambda x: np.minimum(x[0], x[1] + 1e-9), seed=0, radius=1e-6)(np.zeros(2))
    assert as_set(s.gradients) == {(1.0, 0.0), (0.0, 1.0)}
    np.testing.assert_allclose(s.min_norm(), [0.5, 0.5], atol=1e-12)


def test_reach_follows_the_lipschitz_constant():
    """max(10 x, 0) at x = -1e-7: the tie is 1e-6 away in value; a ball of radius 2e-7
    reaches it (|10 x| moves by 2e-6), one of radius 5e-8 does not."""
    f = lambda x: np.maximum(10 * x, 0.0)  # noqa: E731
    assert as_set(asd.clarke(f, seed=0, radius=2e-7)(-1e-7).gradients) == {(0.0,), (10.0,)}
    assert as_set(asd.clarke(f, seed=0, radius=5e-8)(-1e-7).gradients) == {(0.0,)}


def test_points_add_gradients_from_the_ball():
    # sort has no snap: its near-tie is found by the random points of the ball
    f = lambda x: np.sort(x)[0]  # noqa: E731
    x = np.array([0.0, 1e-9])
    s = asd.clarke(f, seed=0, radius=1e-6, points=16)(x)
    assert as_set(s.gradients) == {(1.0, 0.0), (0.0, 1.0)}
    assert asd.clarke(f, seed=0, radius=1e-6)(x).is_singleton


@pytest.mark.parametrize("bad, error", [(-1.0, ArgumentError), (np.inf, ArgumentError),
                                        ("1e-3", ArgumentTypeError), (True, ArgumentTypeError)])
def test_bad_radius_is_refused(bad, error):
    with pytest.raises(error, match="radius"):
        asd.clarke(asd.abs, radius=bad)


def test_points_need_a_radius():
    with pytest.raises(ArgumentError, match="radius > 0"):
        asd.clarke(asd.abs, points=3)


def test_compiled_epsilon_sample_is_the_plain_one():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [3.0, 1.0]])
    b = np.array([0.0, 1e-9, -2e-9, -5.0])

    def f(x):
        return np.max(a @ x + b) + asd.relu(x[0] - 1e-10)

    plain = asd.clarke(f, n=32, seed=1, radius=1e-6)
    compiled = asd.jit(plain)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = 1e-9 * rng.standard_normal(2)
        want, got = plain(x), compiled(x)
        assert got.gradients.tobytes() == want.gradients.tobytes()
        assert got.near_ties == want.near_ties and got.radius == want.radius == 1e-6
        # piece i of the max (argmax of a_i·v) plus the relu's side (sign of v_0): the
        # combination "piece (1, 0) with the relu off" needs v_1 < v_0 < 0 < v_1 + 2 v_0
        assert as_set(want.gradients) == {(2.0, 0.0), (1.0, 1.0), (0.0, -1.0), (0.0, 1.0),
                                          (-1.0, -1.0)}
    assert compiled.traces == 1
