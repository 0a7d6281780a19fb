"""Certified Clarke sets (issue 26): inner samples, outer enclosures, verdicts, stationarity.

Oracles, none of them asd:
- the exact Clarke set of a small piecewise-linear program at a point, by enumerating every
  activation pattern realizable near it: a pattern is realizable iff the open cone of
  directions that produces it is nonempty, an LP feasibility problem (HiGHS);
- regular programs in closed form (L1 regression: ``{Aᵀs : s_i = sign r_i, or in [-1, 1]
  where r_i = 0}``; max-affine: the hull of the active pieces);
- hull membership and the min-norm point of the exact set by LP / NNLS on its vertices;
- for ε-samples of max-affine functions, whether a piece is active somewhere in the ball:
  a closed-form pairwise exclusion, and an SLSQP distance only where it is far from ε.

The hypothesis battery runs ``ASD_CLARKE_BATTERY`` examples per property (default 20 in CI;
``ASD_CLARKE_BATTERY=500`` is the full battery, docs/clarke.md).
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog, minimize, nnls

import asd
from asd.analysis.enclosure import Enclosure

EXAMPLES = int(os.environ.get("ASD_CLARKE_BATTERY", "20"))


# ----- oracles -----

def realizable(rows: np.ndarray, signs: np.ndarray) -> bool:
    """Whether ``{v : signs_i rows_i · v > 0}`` is a nonempty open cone (LP, scaled to >= 1)."""
    if not len(rows):
        return True
    res = linprog(np.zeros(rows.shape[1]), A_ub=-(signs[:, None] * rows), b_ub=-np.ones(len(rows)),
                  bounds=[(-1e6, 1e6)] * rows.shape[1], method="highs")
    return res.status == 0


def relu_net_clarke(W1, b1, w2, x) -> np.ndarray:
    """Vertices (as rows) of the exact Clarke set of ``w2 · relu(W1 x + b1)`` at ``x``."""
    z = W1 @ x + b1
    # a tied unit with a zero row stays at 0 near x: its slope multiplies a zero row
    tied = np.flatnonzero((z == 0) & np.any(W1 != 0, axis=1))
    base = (z > 0).astype(float)
    out = []
    for pattern in itertools.product([0.0, 1.0], repeat=len(tied)):
        s = np.asarray(pattern)
        if realizable(W1[tied], 2 * s - 1):
            act = base.copy()
            act[tied] = s
            out.append(W1.T @ (w2 * act))
    return np.unique(np.round(np.asarray(out), 12), axis=0)


def max_affine_clarke(A, b, x) -> np.ndarray:
    """Vertices of the exact Clarke set of ``max(A x + b)``: the active pieces."""
    y = A @ x + b
    return np.unique(A[y == y.max()], axis=0)


def hull_distance(V: np.ndarray, g: np.ndarray) -> float:
    """Max-norm distance from ``g`` to the hull of the rows of ``V`` (LP)."""
    m, n = V.shape
    res = linprog(np.r_[np.zeros(m), 1.0],
                  A_ub=np.block([[V.T, -np.ones((n, 1))], [-V.T, -np.ones((n, 1))]]),
                  b_ub=np.r_[g, -g], A_eq=np.r_[np.ones(m), 0.0][None], b_eq=[1.0],
                  bounds=(0, None), method="highs")
    return float(res.fun)


def min_norm(V: np.ndarray) -> float:
    """dist(0, hull of the rows of V) by Lawson and Hanson's NNLS."""
    E = np.vstack([V.T, np.ones((1, len(V)))])
    e = np.zeros(E.shape[0])
    e[-1] = 1.0
    u, _ = nnls(E, e)
    return float(np.linalg.norm(V.T @ (u / u.sum())))


def check_sides(sample, V: np.ndarray, rng, probes: int = 12) -> dict:
    """inner ⊆ true ⊆ outer, and every verdict true; returns counts for the report."""
    scale = max(1.0, float(np.max(np.abs(V))))
    enc: Enclosure = sample.enclosure
    for g in np.asarray(sample.gradients).reshape(len(sample), -1):     # inner ⊆ true
        assert hull_distance(V, g) <= 1e-9 * scale
    for _ in range(8):                                                  # true ⊆ outer
        d = rng.standard_normal(V.shape[1])
        assert np.max(V @ d) <= enc.support(d)[0] + 1e-9 * scale * np.abs(d).sum()
    counts = {"inside": 0, "outside": 0, "undetermined": 0}
    for _ in range(probes):                                             # verdicts
        w = rng.dirichlet(np.ones(len(V)))
        g = w @ V + rng.choice([0.0, 1e-3, 0.3, 2.0]) * rng.standard_normal(V.shape[1])
        m = sample.contains(g)
        counts[m.verdict] += 1
        truth = hull_distance(V, g)
        if m == "inside":
            assert truth <= 1e-8 * scale, (g, truth)
        elif m == "outside":
            assert truth > 0, (g, m)
            assert m.margin <= np.sqrt(V.shape[1]) * truth + 1e-9     # the margin is proven
    st_ = sample.stationarity
    true = min_norm(V)
    assert st_.lower <= true + 1e-9 * scale and true <= st_.upper + 1e-9 * scale
    return counts


# ----- the cases -----

def test_inactive_piece_is_not_in_the_epsilon_sample():
    """max(A x + b), A = [[5, 5], [-5, -5]], b = [0, -1.6e-5], ε = 1e-6: the second piece is
    below the first everywhere in the ball (by 1.6e-5 - 10 √2 ε > 0), so dist(0, ∂_ε f) is
    |(5, 5)| = 7.07; the first-order reach bound used to let it in (stationarity 0)."""
    A, b = np.array([[5.0, 5.0], [-5.0, -5.0]]), np.array([0.0, -1.6e-5])
    s = asd.clarke(lambda x: np.max(A @ x + b), radius=1e-6, seed=0)(np.zeros(2))
    assert s.gradients.tolist() == [[5.0, 5.0]]
    st_ = s.stationarity
    assert st_.upper == pytest.approx(np.sqrt(50.0), rel=1e-12)
    assert st_.lower == pytest.approx(np.sqrt(50.0), rel=1e-9)      # the enclosure agrees


def test_a_kink_2000_radii_away_through_a_cancelling_map():
    W = np.array([[1000.0, -999.0], [-1000.0, 1000.0]])

    def f(x):
        return -x[1] + 2 * asd.relu((W @ x).sum() - 2.0)

    st_ = asd.optimize.stationarity(f, np.zeros(2), 1e-3)
    assert st_.upper == pytest.approx(1.0, rel=1e-12)          # was 0: relu's other side
    assert st_.lower == pytest.approx(1.0, rel=1e-9)           # (W x).sum() = x1 exactly
    assert st_.sample.gradients.tolist() == [[0.0, -1.0]]


def test_relu_network_never_says_outside_for_a_limiting_gradient():
    """Linear(3, 4) -> ReLU -> Linear(4, 1) with the first bias 0 at x = 0: the all-inactive
    pattern's gradient 0 is a limiting gradient (its cone is 0.54% of directions for this
    seed's weights); a sample that misses it must say undetermined, never outside."""
    rng = np.random.default_rng(0)
    W1, w2 = rng.standard_normal((4, 3)), rng.standard_normal(4)
    f = lambda x: w2 @ asd.relu(W1 @ x)  # noqa: E731
    V = relu_net_clarke(W1, np.zeros(4), w2, np.zeros(3))
    assert hull_distance(V, np.zeros(3)) <= 1e-12                   # 0 is in the Clarke set
    for seed in range(6):
        s = asd.clarke(f, n=64, seed=seed)(np.zeros(3))
        verdict = s.contains(np.zeros(3))
        assert verdict != "outside"
        assert verdict == "inside" or verdict.settle
        check_sides(s, V, rng)


def test_l1_regression_at_its_optimum_is_certified_exactly():
    """sum |A x - b| at an optimum with 8 zero residuals (2^8 pieces): the program is regular,
    the enclosure is the Clarke set, and stationarity is exactly [0, 0] at ε = 0 and at the
    default certificate radius; minimize from the optimum succeeds with that certificate."""
    rng = np.random.default_rng(3)
    d, k, m = 4, 8, 14
    AT, AN = rng.standard_normal((k, d)), 0.05 * rng.standard_normal((m - k, d))
    sigma = np.sign(rng.standard_normal(m - k))
    sT = np.linalg.lstsq(AT.T, -AN.T @ sigma, rcond=None)[0]        # A_Tᵀ s_T = -A_Nᵀ σ
    assert np.max(np.abs(sT)) < 1
    x_star = rng.integers(-3, 4, d).astype(float)
    A = np.vstack([AT, AN])
    b = A @ x_star
    b[k:] -= sigma * rng.uniform(1, 2, m - k)        # residuals A x* - b: 0 on T, sign σ else
    f = lambda x: np.sum(np.abs(A @ x - b))  # noqa: E731
    assert np.count_nonzero(A @ x_star - b == 0) == k
    s = asd.clarke(f, n=64, seed=0)(x_star)
    assert s.enclosure.exact
    assert s.stationarity.upper == 0.0 and s.stationarity.lower == 0.0
    eps = asd.optimize.stationarity(f, x_star, 1e-6)
    assert eps.upper == 0.0
    res = asd.optimize.minimize(f, x_star, maxiter=5)
    assert res.success and res.stationarity.upper == 0.0


def test_regular_enclosures_are_the_closed_form_sets():
    rng = np.random.default_rng(5)
    # L1 with two zero residuals and one positive: {Aᵀ s}, s = (s1, s2, 1), s1, s2 in [-1, 1]
    A = rng.integers(-3, 4, (3, 2)).astype(float)
    b = np.array([0.0, 0.0, -1.0])
    s = asd.clarke(lambda x: np.sum(np.abs(A @ x - b)), seed=0)(np.zeros(2))
    enc = s.enclosure
    assert enc.exact
    for _ in range(20):
        d = rng.standard_normal(2)
        closed = abs(A[0] @ d) + abs(A[1] @ d) + A[2] @ d
        assert enc.support(d)[0] == pytest.approx(closed, abs=1e-12)
    # the norm of a residual at 0: the unit ball's image
    B = rng.standard_normal((3, 2))
    enc = asd.clarke(lambda x: asd.norm(B @ x), seed=0)(np.zeros(2)).enclosure
    assert enc.exact
    d = rng.standard_normal(2)
    assert enc.support(d)[0] == pytest.approx(np.linalg.norm(B @ d), rel=1e-12)
    # max(|x1|, x2) (max of a regular function with nonnegative weights): a triangle
    enc = asd.clarke(lambda x: asd.maximum(asd.abs(x[0]), x[1]), seed=0)(np.zeros(2)).enclosure
    assert enc.exact
    for d in rng.standard_normal((20, 2)):
        assert enc.support(d)[0] == pytest.approx(max(abs(d[0]), d[1]), abs=1e-12)


def test_not_regular_is_not_called_exact():
    assert not asd.clarke(lambda x: -asd.abs(x), seed=0)(0.0).enclosure.exact
    assert not asd.clarke(lambda x: asd.minimum(x[0], x[1]), seed=0)(np.zeros(2)).enclosure.exact
    s = asd.clarke(lambda x: asd.relu(x) - asd.relu(-x), seed=0)(0.0)   # = x, but not proven
    assert not s.enclosure.exact and s.contains(0.5) == "undetermined"
    assert s.contains(1.0) == "inside" and s.contains(3.0) == "outside"


def test_unknown_ties_make_the_enclosure_unbounded_and_say_why():
    s = asd.clarke(lambda x: np.linalg.svd(np.diag(x), compute_uv=False) @ np.array([1.0, 2.0]),
                   seed=0)(np.zeros(2))
    assert s.enclosure.unbounded and "svdvals" in s.enclosure.unbounded[0]
    m = s.contains(np.array([10.0, 10.0]))
    assert m == "undetermined" and "unbounded" in m.settle
    assert s.stationarity.lower == 0.0



def test_inside_is_not_called_for_a_point_within_the_lp_tolerance():
    """The hull of {(0, 0), (0, 6)} and g = (5.5e-7, 9.3e-3): 9e-8 away once scaled, below
    HiGHS's feasibility tolerance, so its optimum read 0 and ``contains`` said inside (found
    by the relu battery). The distance is now what the LP's weights achieve."""
    s = asd.clarke(lambda z: 3 * asd.relu(2 * z[1]), n=64, seed=0)(np.zeros(2))
    g = np.array([5.52530791e-07, 9.26058223e-03])
    assert s.distance(g) == pytest.approx(5.52530791e-07, rel=1e-9)
    assert s.contains(g) == "outside"


def test_outside_is_not_stated_where_the_enclosure_contradicts_the_sample(monkeypatch):
    """A separating half-space that cuts off one of asd's own sampled gradients (a proven
    element) is not a proof: rounding in float32 linearizations produced such bounds in a
    training run (issue 28's study). The verdict is then undetermined, with the reason."""
    from asd.analysis.sets import Nearest

    s = asd.clarke(asd.abs, n=8, seed=0)(0.0)
    assert s.contains(1.5) == "outside"                     # the honest enclosure [-1, 1]
    enc = s.enclosure

    def contradicting(g):                                   # claims h(+1) = 0.3 < 1
        return Nearest(np.array([0.3]), 1.2, 1.2, np.array([1.0]), np.ones(1),
                       np.zeros((1, 1)))

    monkeypatch.setattr(enc, "nearest", contradicting)
    m = s.contains(1.5)
    assert m == "undetermined" and "beyond the enclosure" in m.settle

# ----- the hypothesis battery -----

@st.composite
def relu_nets(draw):
    """``w2 · relu(W1 x + b1)`` with small integer weights and ``b1 = -W1 x`` on the tied
    units, so their pre-activations are exactly 0 at ``x``."""
    d = draw(st.integers(1, 3))
    h = draw(st.integers(1, 5))
    ints = st.integers(-3, 3).map(float)
    W1 = np.array(draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=h,
                                max_size=h)))
    w2 = np.array(draw(st.lists(ints, min_size=h, max_size=h)))
    x = np.array(draw(st.lists(st.integers(-2, 2).map(float), min_size=d, max_size=d)))
    tied = np.array(draw(st.lists(st.booleans(), min_size=h, max_size=h)))
    offsets = np.array(draw(st.lists(st.integers(1, 3).map(float), min_size=h, max_size=h)))
    b1 = -W1 @ x + np.where(tied, 0.0, offsets * np.sign(np.arange(h) % 2 - 0.5))
    return W1, b1, w2, x, draw(st.integers(0, 2**16))


@settings(max_examples=EXAMPLES, deadline=None)
@given(relu_nets())
def test_battery_relu_networks(case):
    W1, b1, w2, x, seed = case
    V = relu_net_clarke(W1, b1, w2, x)
    s = asd.clarke(lambda z: w2 @ asd.relu(W1 @ z + b1), n=64, seed=seed)(x)
    check_sides(s, V, np.random.default_rng(seed))


@st.composite
def max_affines(draw):
    d = draw(st.integers(1, 3))
    p = draw(st.integers(1, 6))
    ints = st.integers(-3, 3).map(float)
    A = np.array(draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=p,
                               max_size=p)))
    x = np.array(draw(st.lists(st.integers(-2, 2).map(float), min_size=d, max_size=d)))
    gaps = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, 2.5]), min_size=p,
                                  max_size=p)))
    b = -A @ x - gaps                                      # the pieces with gap 0 are tied
    return A, b, x, draw(st.integers(0, 2**16))


@settings(max_examples=EXAMPLES, deadline=None)
@given(max_affines())
def test_battery_max_affine(case):
    A, b, x, seed = case
    V = max_affine_clarke(A, b, x)
    s = asd.clarke(lambda z: np.max(A @ z + b), n=64, seed=seed)(x)
    assert s.enclosure.exact                       # regular: the enclosure is the set
    counts = check_sides(s, V, np.random.default_rng(seed))
    assert counts["undetermined"] == 0             # and every verdict is decided


def active_somewhere(A, b, x, eps, i) -> bool | None:
    """Whether piece ``i`` is the maximum somewhere in the ball: None where the numerical
    distance from ``x`` to its region is within a factor 2 of ``eps`` (then not asked)."""
    others = [j for j in range(len(A)) if j != i]
    if any((A[j] - A[i]) @ x + b[j] - b[i] > eps * np.linalg.norm(A[j] - A[i])
           for j in others):
        return False                               # one piece is above it on the whole ball
    cons = [{"type": "ineq", "fun": lambda y, j=j: (A[i] - A[j]) @ y + b[i] - b[j]}
            for j in others]
    res = minimize(lambda y: np.sum((y - x) ** 2), x.copy(), constraints=cons,
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
    dist = np.sqrt(res.fun) if res.success else None
    if dist is None or eps / 2 < dist < 2 * eps:
        return None
    return dist <= eps / 2


@settings(max_examples=EXAMPLES, deadline=None)
@given(max_affines(), st.sampled_from([1e-3, 0.1, 0.5]))
def test_battery_epsilon_samples_hold_only_pieces_active_in_the_ball(case, eps):
    A, b, x, seed = case
    rng = np.random.default_rng(seed)
    x = x + rng.uniform(-1, 1, x.size) * eps
    s = asd.clarke(lambda z: np.max(A @ z + b), n=32, seed=seed, radius=eps)(x)
    active = [active_somewhere(A, b, x, eps, i) for i in range(len(A))]
    assume(all(a is not None for a in active))
    V = np.unique(A[np.asarray(active, bool)], axis=0)
    for g in np.asarray(s.gradients).reshape(len(s), -1):
        assert hull_distance(V, g) <= 1e-9, (g, V)                  # inner ⊆ ∂_ε f
    enc = s.enclosure
    for _ in range(8):                                              # ∂_ε f ⊆ outer
        d = rng.standard_normal(x.size)
        assert np.max(V @ d) <= enc.support(d)[0] + 1e-9 * np.abs(d).sum()
    true = min_norm(V)
    assert s.stationarity.lower <= true + 1e-9 <= s.stationarity.upper + 2e-9


# ----- order primitives: sort, topk_sum, max_pool (issue 26: the hull of tied candidates) -----

def ordered_pieces(A: np.ndarray, y: np.ndarray, groups: list[np.ndarray]):
    """Every way the tied groups of ``y = A x + b`` can be ordered near ``x`` (each group a
    permutation, listed smallest first), kept where the open cone of directions giving it
    is nonempty (LP). Pairs with equal rows of ``A`` stay tied near ``x``: no constraint."""
    for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
        rows = [A[b] - A[a] for p in perms for a, b in itertools.pairwise(p)
                if np.any(A[b] != A[a])]
        if realizable(np.asarray(rows).reshape(-1, A.shape[1]), np.ones(len(rows))):
            yield perms


def sorted_clarke(A, b, c, x) -> np.ndarray:
    """Vertices of the exact Clarke set of ``c · sort(A x + b)`` at ``x``: each realizable
    order of the tied values is a piece with gradient ``Σ_j c_j A[order_j]``."""
    y = A @ x + b
    base = np.argsort(y, kind="stable")
    groups = [base[y[base] == v] for v in np.unique(y) if np.count_nonzero(y == v) > 1]
    out = []
    for perms in ordered_pieces(A, y, groups):
        order = base.copy()
        for g, p in zip(groups, perms, strict=True):
            order[np.isin(base, g)] = p
        out.append(c @ A[order])
    return np.unique(np.round(np.asarray(out), 12), axis=0)


def pooled_clarke(A, b, w, windows, x) -> np.ndarray:
    """Vertices of the exact Clarke set of ``Σ_k w_k max(y[windows_k])``, ``y = A x + b``:
    a choice of maximizer per window is a piece where some direction makes each chosen entry
    strictly above the other tied entries of its window (one LP for all windows: they
    overlap)."""
    y = A @ x + b
    tied = [win[y[win] == y[win].max()] for win in windows]
    out = []
    for pick in itertools.product(*tied):
        rows = [A[p] - A[q] for p, win in zip(pick, tied, strict=True) for q in win
                if np.any(A[p] != A[q])]
        if realizable(np.asarray(rows).reshape(-1, A.shape[1]), np.ones(len(rows))):
            out.append(sum(wk * A[p] for wk, p in zip(w, pick, strict=True)))
    return np.unique(np.round(np.asarray(out), 12), axis=0)


@st.composite
def tied_affine_maps(draw, n: int):
    """``A x + b`` with ``n`` small-integer rows whose values at ``x = 0`` are drawn from
    {0, 1}: ties in groups of up to ``n``, rows sometimes equal (ties that persist)."""
    d = draw(st.integers(1, 3))
    ints = st.integers(-2, 2).map(float)
    A = np.array(draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=n,
                               max_size=n)))
    b = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 1.0]), min_size=n, max_size=n)))
    return A, b, np.zeros(d), draw(st.integers(0, 2**16))


@settings(max_examples=EXAMPLES, deadline=None)
@given(tied_affine_maps(4), st.lists(st.integers(-2, 2).map(float), min_size=4, max_size=4))
def test_battery_sort(case, c):
    A, b, x, seed = case
    c = np.asarray(c)
    V = sorted_clarke(A, b, c, x)
    s = asd.clarke(lambda z: np.sort(A @ z + b) @ c, n=64, seed=seed)(x)
    check_sides(s, V, np.random.default_rng(seed))


@settings(max_examples=EXAMPLES, deadline=None)
@given(tied_affine_maps(5), st.integers(1, 4))
def test_battery_topk_sum(case, k):
    A, b, x, seed = case
    c = (np.arange(5) >= 5 - k).astype(float)           # the k largest: the last k sorted
    V = sorted_clarke(A, b, c, x)
    s = asd.clarke(lambda z: asd.topk_sum(A @ z + b, k), n=64, seed=seed)(x)
    counts = check_sides(s, V, np.random.default_rng(seed))
    if s.enclosure.exact:                                 # convex: exact where one copy
        assert counts["undetermined"] == 0


@settings(max_examples=EXAMPLES, deadline=None)
@given(tied_affine_maps(6), st.lists(st.integers(0, 2).map(float), min_size=2, max_size=2))
def test_battery_max_pool_overlapping_windows(case, w):
    """``y`` as a 2 x 3 image, 2 x 2 windows at stride 1: two windows sharing a column."""
    A, b, x, seed = case
    w = np.asarray(w)
    windows = [np.array([0, 1, 3, 4]), np.array([1, 2, 4, 5])]
    V = pooled_clarke(A, b, w, windows, x)
    s = asd.clarke(lambda z: asd.max_pool2d((A @ z + b).reshape(1, 1, 2, 3), 2, stride=1)
                   .ravel() @ w, n=64, seed=seed)(x)
    assert s.enclosure.exact                              # nonnegative sum of maxima: regular
    counts = check_sides(s, V, np.random.default_rng(seed))
    assert counts["undetermined"] == 0


def test_sort_at_a_full_tie_certifies_outside_by_the_sum():
    """``2 sort(x)_1 + sort(x)_0`` at 0: every element sums to 3, so 0 is certified outside
    (the hull of the permutations of (1, 2, 0) does not reach it) and the centroid inside."""
    s = asd.clarke(lambda x: 2 * np.sort(x)[1] + np.sort(x)[0], seed=0)(np.zeros(3))
    assert s.contains(np.zeros(3)) == "outside"
    assert s.contains(np.ones(3)) == "inside"
    assert s.stationarity.lower == pytest.approx(np.sqrt(3.0), rel=1e-9)


@st.composite
def repeated_eigenvalues(draw):
    """``λ_k(D + Σ x_i B_i)`` at ``x = 0``: ``D`` diagonal with repeated entries (exact
    eigenvalues, so the cluster is known), ``B_i`` small-integer symmetric matrices."""
    n, d = 3, draw(st.integers(1, 3))
    mu = np.sort(np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 1.0]), min_size=n,
                                        max_size=n))))
    ints = st.integers(-2, 2).map(float)
    B = [np.array(draw(st.lists(ints, min_size=n * n, max_size=n * n))).reshape(n, n)
         for _ in range(d)]
    B = [M + M.T for M in B]
    return mu, B, draw(st.integers(0, n - 1)), draw(st.integers(0, 2**16))


@settings(max_examples=EXAMPLES, deadline=None)
@given(repeated_eigenvalues())
def test_battery_eigvalsh_at_a_repeated_eigenvalue(case):
    """Every eigenvalue of a cluster with eigenspace basis ``U`` has the Clarke set
    ``{(⟨B_i, U Z Uᵀ⟩)_i : Z ⪰ 0, tr Z = 1}``, whose support function is
    ``h(d) = λ_max(Uᵀ B(d) U)`` (closed form, not asd): sampled gradients satisfy
    ``d·g <= h(d)``, the enclosure's support is at least ``h(d)``, and every ``outside``
    verdict's direction separates ``g`` from the true set."""
    mu, B, k, seed = case
    rng = np.random.default_rng(seed)
    D = np.diag(mu)
    s = asd.clarke(lambda x: asd.spectral.eigvalsh(D + sum(xi * Bi for xi, Bi in
                                                        zip(x, B, strict=True)))[k],
                   n=64, seed=seed)(np.zeros(len(B)))
    U = np.eye(3)[:, mu == mu[k]]

    def h(d):
        return np.linalg.eigvalsh(U.T @ sum(di * Bi for di, Bi in zip(d, B, strict=True)) @ U)[-1]

    enc = s.enclosure
    assert not enc.unbounded
    for _ in range(8):
        d = rng.standard_normal(len(B))
        assert enc.support(d)[0] >= h(d) - 1e-9 * np.abs(d).sum()          # true ⊆ outer
        for g in np.asarray(s.gradients).reshape(len(s), -1):
            assert g @ d <= h(d) + 1e-9 * np.abs(d).sum()                 # inner ⊆ true
    for _ in range(12):
        g = rng.standard_normal(len(B)) * rng.choice([0.1, 1.0, 5.0])
        m = s.contains(g)
        if m == "outside":
            assert m.direction @ g - h(m.direction) >= m.margin - 1e-9      # truly outside


@settings(max_examples=EXAMPLES, deadline=None)
@given(repeated_eigenvalues(), st.sampled_from(["topk_eigsum", "lambda_max", "lambda_min"]))
def test_battery_eigenvalue_sums_at_a_cut_cluster(case, name):
    """Ky Fan sums (lambda_max: k = 1) and lambda_min of ``D + Σ x_i B_i`` at 0: the Clarke
    set is ``P + {U Z Uᵀ : 0 ⪯ Z ⪯ I, tr Z = r}`` (``P`` the projector on the selected
    eigenvalues above the cut cluster ``U``, ``r`` its selected positions), whose support
    function is ``tr(P B(d)) +`` the sum of the ``r`` largest eigenvalues of ``Uᵀ B(d) U``."""
    mu, B, k, seed = case
    k = k + 1                                                  # 1 .. 3 largest
    D = np.diag(mu)
    fn = {"topk_eigsum": lambda X: asd.spectral.topk_eigsum(X, k),
          "lambda_max": asd.spectral.lambda_max, "lambda_min": asd.spectral.lambda_min}[name]
    select = {"topk_eigsum": np.arange(3) >= 3 - k, "lambda_max": np.arange(3) == 2,
              "lambda_min": np.arange(3) == 0}[name]
    s = asd.clarke(lambda x: fn(D + sum(xi * Bi for xi, Bi in zip(x, B, strict=True))),
                   n=64, seed=seed)(np.zeros(len(B)))
    cut = [v for v in np.unique(mu) if 0 < np.sum(select & (mu == v)) < np.sum(mu == v)]
    C = mu == cut[0] if cut else np.zeros(3, bool)
    r = int(np.sum(select & C))
    above = select & ~C

    def h(d):
        M = sum(di * Bi for di, Bi in zip(d, B, strict=True))
        tail = np.linalg.eigvalsh(M[np.ix_(C, C)])[::-1][:r].sum() if r else 0.0
        return np.trace(M[np.ix_(above, above)]) + tail

    enc = s.enclosure
    assert not enc.unbounded
    rng = np.random.default_rng(seed)
    for _ in range(8):
        d = rng.standard_normal(len(B))
        tol = 1e-9 * np.abs(d).sum()
        assert enc.support(d)[0] >= h(d) - tol                           # true ⊆ outer
        for g in np.asarray(s.gradients).reshape(len(s), -1):
            assert g @ d <= h(d) + tol                                    # inner ⊆ true
    for _ in range(12):
        g = rng.standard_normal(len(B)) * rng.choice([0.1, 1.0, 5.0])
        m = s.contains(g)
        if m == "outside":
            assert m.direction @ g - h(m.direction) >= m.margin - 1e-9
