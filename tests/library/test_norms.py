"""Norms (library/norms.py) at zero vectors, zero entries and ties, and away from them.

l1, l-infinity and the induced matrix norms are piecewise linear: their references run on the
exact Fraction oracle. l2 and p-norms are checked against mpmath at 60 digits (one-sided
differences along the direction, never central), and against the closed form ``d / ||d||`` at
a zero vector.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.testing import check_rule
from asd.testing.strategies import directions, kink_arrays, tied_arrays


def ref_pnorm(p, axis=None, keepdims=False):
    def ref(a):
        return np.sum(np.abs(a) ** p, axis=axis, keepdims=keepdims) ** (1 / p)

    return ref


def ref_l2(axis=None, keepdims=False):
    def ref(a):
        return np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims))

    return ref


# name, asd function, reference, shape, exact oracle
CASES = [
    ("l2", lambda x: asd.norm(x), ref_l2(), (3,), False),
    ("l2 np.linalg.norm axis 1 keepdims", lambda x: np.linalg.norm(x, axis=1, keepdims=True),
     ref_l2(1, True), (2, 3), False),
    ("l2_norm axis 0", lambda x: asd.l2_norm(x, axis=0), ref_l2(0), (2, 2), False),
    ("p = 3", lambda x: np.linalg.norm(x, ord=3), ref_pnorm(3), (3,), False),
    ("p = 1.5", lambda x: asd.pnorm(x, 1.5), ref_pnorm(1.5), (3,), False),
    ("fro", lambda x: np.linalg.norm(x, ord="fro"), ref_l2(), (2, 2), False),
    ("frobenius_norm batch", lambda x: asd.frobenius_norm(x), ref_l2((-2, -1)), (2, 2, 2),
     False),
    ("l1", lambda x: np.linalg.norm(x, ord=1), lambda a: np.sum(np.abs(a)), (4,), True),
    ("l1_norm axis -1", lambda x: asd.l1_norm(x, axis=-1), lambda a: np.sum(np.abs(a), -1),
     (2, 3), True),
    ("linf", lambda x: np.linalg.norm(x, ord=np.inf), lambda a: np.max(np.abs(a)), (4,), True),
    ("linf_norm keepdims", lambda x: asd.linf_norm(x, axis=0, keepdims=True),
     lambda a: np.max(np.abs(a), axis=0, keepdims=True), (3, 2), True),
    ("-inf", lambda x: np.linalg.norm(x, ord=-np.inf), lambda a: np.min(np.abs(a)), (3,), True),
    ("matrix 1", lambda x: np.linalg.norm(x, ord=1),
     lambda a: np.max(np.sum(np.abs(a), axis=0)), (2, 3), True),
    ("matrix inf", lambda x: np.linalg.norm(x, ord=np.inf),
     lambda a: np.max(np.sum(np.abs(a), axis=1)), (3, 2), True),
    ("matrix -1 axes (2, 0) keepdims", lambda x: asd.norm(x, ord=-1, axis=(2, 0), keepdims=True),
     lambda a: np.min(np.sum(np.abs(a), axis=2, keepdims=True), axis=0, keepdims=True),
     (2, 2, 3), True),
]
IDS = [c[0] for c in CASES]


def points(shape):
    """Zero vectors, planted zero entries, ties of |x|, and plain dyadic points."""
    zeros = st.just(np.zeros(shape))
    return st.one_of(zeros, kink_arrays(shape, (0.0,)), tied_arrays(shape))


# The mpmath oracle takes forward differences (step h = 1e-30) at x + δv (δ = 1e-20); at an
# entry where x + δv is exactly 0, |t|**p has error h**(p-1) / δ**(p-2) there, up to ~1e-5 for
# p = 1.5. A wrong branch is off by O(0.1), so the mpmath cases use atol 1e-4 and the exact
# closed form of the limiting gradient below pins them down to rounding.
MPMATH_ATOL = 1e-4


@pytest.mark.parametrize("name, fn, ref, shape, exact", CASES, ids=IDS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_norm_on_kinks(name, fn, ref, shape, exact, data):
    x = data.draw(points(shape), label="x")
    # At a zero vector whose tangent is zero too the limit along v does not exist (asd takes
    # 0 there, tested below); the mpmath differences would see 1, so those cases use
    # directions without zero entries.
    v = data.draw(directions(shape, allow_zero_entries=exact), label="v")
    check_rule(fn, x, direction=v, reference=ref, exact=exact, name=name,
               atol=None if exact else MPMATH_ATOL)


def pnorm_limiting_gradient(x, v, p):
    """``lim grad ||x + δv||_p``: the gradient at x, or at v where x = 0 (0 where v = 0 too)."""
    at = x if np.any(x) else v
    if not np.any(at):
        return np.zeros_like(x)
    norm = np.sum(np.abs(at) ** p) ** (1 / p)
    return np.sign(at) * (np.abs(at) / norm) ** (p - 1)


@pytest.mark.parametrize("p", [2.0, 3.0, 1.5, 4.0])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_pnorm_limiting_gradient_closed_form(p, data):
    x = data.draw(points((4,)), label="x")
    v = data.draw(directions((4,)), label="v")
    g = asd.subgrad(lambda z: asd.pnorm(z, p), direction=v)(x)
    np.testing.assert_allclose(g, pnorm_limiting_gradient(x, v, p), rtol=1e-14, atol=1e-15)
    rows = np.stack([x, np.zeros(4)])
    j = asd.jacobian(lambda z: asd.pnorm(z, p, axis=1), direction=np.stack([v, v]))(rows)
    np.testing.assert_allclose(j[0, 0], pnorm_limiting_gradient(x, v, p), rtol=1e-14)
    np.testing.assert_allclose(j[1, 1], pnorm_limiting_gradient(np.zeros(4), v, p), rtol=1e-14)


@pytest.mark.parametrize("name, fn, ref, shape, exact", CASES, ids=IDS)
def test_norm_off_kinks(name, fn, ref, shape, exact):
    x = np.random.default_rng(3).uniform(0.5, 2.0, shape) * np.where(
        np.arange(int(np.prod(shape))).reshape(shape) % 2, 1, -1)
    check_rule(fn, x, reference=ref, exact=exact, name=name, n_directions=2, seed=1)


@pytest.mark.parametrize("name, fn, ref, shape, exact", CASES, ids=IDS)
def test_norm_value_matches_numpy(name, fn, ref, shape, exact):
    x = np.arange(int(np.prod(shape)), dtype=float).reshape(shape) - 1.5
    np.testing.assert_allclose(fn(x), ref(x), rtol=1e-15)


# ----- the branch at a zero vector: d / ||d||, and 0 when d = 0 -----

@settings(max_examples=40, deadline=None)
@given(v=directions((4,), allow_zero_entries=True))
def test_l2_at_zero_is_the_normalized_tangent(v):
    g = asd.subgrad(asd.norm, direction=v)(np.zeros(4))
    np.testing.assert_allclose(g, v / np.linalg.norm(v), rtol=1e-15)


def test_l2_at_zero_with_zero_tangent_follows_the_next_direction():
    """x stays at 0 along the whole ray: the second direction w decides, and the branch is
    the norm's gradient along w, a unit vector (the Clarke set is the unit ball)."""

    def f(x, y):
        return asd.norm(x) + y

    w = (np.array([3.0, 0.0, -4.0]), 7.0)
    gx, gy = asd.subgrad(f, argnums=(0, 1), directions=[(np.zeros(3), 1.0), w])(np.zeros(3), 2.0)
    np.testing.assert_allclose(gx, [0.6, 0.0, -0.8], rtol=1e-15)
    assert gy == 1.0


@pytest.mark.parametrize("p", [2.0, 3.0])
@pytest.mark.parametrize("v0", [1.0, -0.5])
def test_zero_vector_with_zero_tangent_follows_the_series(p, v0):
    """Inner values (x1 - x0², x1 + 2 x0²) stay 0 to first order along (v0, 0), then move along
    δ² v0² (-1, 2): the limiting gradient is grad||.||(-1, 2) applied to their Jacobian."""
    e = np.eye(2)

    def f(x):
        return asd.pnorm((x[1] - x[0] * x[0]) * e[0] + (x[1] + 2 * x[0] * x[0]) * e[1], p)

    g = asd.subgrad(f, direction=np.array([v0, 0.0]))(np.zeros(2))
    u = pnorm_limiting_gradient(np.array([-1.0, 2.0]), np.zeros(2), p)
    np.testing.assert_allclose(g, [0.0, u.sum()], rtol=1e-14)


def test_zero_rows_and_nonzero_rows_together():
    x = np.array([[0.0, 0.0], [3.0, -4.0]])
    v = np.array([[1.0, 1.0], [5.0, 5.0]])
    j = asd.jacobian(lambda a: np.linalg.norm(a, axis=1), direction=v)(x)
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(j, [[[s, s], [0, 0]], [[0, 0], [0.6, -0.8]]], rtol=1e-15)


def test_residual_norm_at_an_exact_fit():
    """||A x - b|| at a zero residual: the subgradient is A^T d / ||d|| with d = A v."""
    a = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, -1.0]])
    x = np.array([1.0, 1.0])
    b = a @ x
    v = np.array([0.5, -1.0])
    g = asd.subgrad(lambda z: np.linalg.norm(a @ z - b), direction=v)(x)
    d = a @ v
    np.testing.assert_allclose(g, a.T @ d / np.linalg.norm(d), rtol=1e-14)


# ----- stable and exact away from 0 -----

@pytest.mark.parametrize("scale", [2.0 ** 600, 2.0 ** -600, 1.0, 2.0 ** -1070])
def test_l2_is_stable_for_huge_and_tiny_entries(scale):
    x = np.array([3.0, 4.0]) * scale
    value, g = asd.value_and_subgrad(asd.norm)(x)
    assert value == 5 * scale  # exact: the scaling is by a power of two
    np.testing.assert_allclose(g, [0.6, 0.8], rtol=1e-15)


def test_p_norm_stable_for_huge_entries():
    x = np.array([1.0, 2.0, 2.0]) * 2.0 ** 500
    value, g = asd.value_and_subgrad(lambda z: asd.pnorm(z, 3))(x)
    want = 17 ** (1 / 3)
    assert value / 2.0 ** 500 == pytest.approx(want, rel=1e-15)
    np.testing.assert_allclose(g, np.array([1.0, 4.0, 4.0]) / want ** 2, rtol=1e-14)


@pytest.mark.parametrize("p", [2.0, 3.0, 1.5])
@pytest.mark.parametrize("x", [[1e308, 1e308], [1.2e308, -1e308, 0.0], [1e-320, 1e-320],
                               [5e-324, 0.0, -5e-324]], ids=["max", "max3", "tiny", "subnormal"])
def test_p_norms_at_the_float_limits(p, x):
    """Entries near the float maximum (whose squares, and whose power-of-two ceiling 2**1024,
    overflow) and subnormal ones: value and gradient against mpmath at 60 digits."""
    import mpmath

    x = np.array(x)
    value, g = asd.value_and_subgrad(lambda z: asd.pnorm(z, p))(x)
    with mpmath.workdps(60):
        xs = [mpmath.mpf(float(v)) for v in x]
        want = mpmath.fsum(abs(v) ** p for v in xs) ** (1 / mpmath.mpf(p))
        grad = [mpmath.sign(v) * (abs(v) / want) ** (p - 1) for v in xs]
    assert float(value) == pytest.approx(float(want), rel=1e-14)
    np.testing.assert_allclose(g, [float(e) for e in grad], rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("p", [1100.0, 2000.0])
def test_high_p_norm_does_not_underflow(p):
    """``0.6**2000`` underflows: the largest entry must be scaled to 1, not to a power of two."""
    x = np.array([0.6, -0.3])
    value, g = asd.value_and_subgrad(lambda z: asd.pnorm(z, p))(x)
    assert float(value) == pytest.approx(0.6, rel=1e-15)
    np.testing.assert_allclose(g, [1.0, 0.0], atol=1e-15)


def test_float32_preserved():
    x = np.array([0.0, 3.0, 4.0], np.float32)
    value, g = asd.value_and_subgrad(lambda z: np.linalg.norm(z))(x)
    assert value.dtype == np.float32 and g.dtype == np.float32
    assert value == 5


@pytest.mark.parametrize("order", [0.5, -1, -2.5])
def test_vector_norms_below_one_away_from_zero_entries(order):
    x = np.array([0.5, -2.0, 1.25])
    check_rule(lambda x: np.linalg.norm(x, order), x, n_directions=2, exact=False,
               reference=lambda x: np.sum(np.abs(x) ** order) ** (1 / order))


# ----- errors -----

@pytest.mark.parametrize("kwargs, error", [
    ({"ord": 0}, asd.NotLipschitzError),
    ({"ord": 0.5}, asd.NotLipschitzError),  # arange(4) has a zero entry
    ({"ord": -1.5}, asd.NotLipschitzError),
    ({"ord": "fro"}, ValueError),
    ({"axis": (0, 1, 2), "reshape": (1, 2, 2)}, ValueError),
])
def test_norm_errors(kwargs, error):
    shape = kwargs.pop("reshape", (4,))
    with pytest.raises(error):
        asd.subgrad(lambda x: asd.norm(x, **kwargs))(np.arange(4.0).reshape(shape))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=9),
       st.sampled_from([np.float64, np.float32]), st.booleans())
def test_the_2_norm_of_all_entries_is_numpys_bit_for_bit(entries, dtype, matrix):
    """numpy campaign seed 3016: ``np.linalg.norm(x)`` is ``sqrt(x.ravel() @ x.ravel())``, a
    BLAS dot whose rounding differs from a pairwise sum of squares in the last bit (1 in 8
    random vectors): asd's value is numpy's wherever that sum is a normal float."""
    x = np.array(entries, dtype=dtype)
    if matrix and x.size % 3 == 0:
        x = x.reshape(3, -1)
    squares = x.ravel() @ x.ravel()
    if not squares >= np.finfo(dtype).tiny:  # numpy's underflows: asd's is the true norm
        assert asd.l2_norm(x) > 0 or not np.any(x)
        return
    value, _ = asd.value_and_subgrad(lambda y: np.linalg.norm(y))(x)
    assert value == np.linalg.norm(x) and np.asarray(value).dtype == np.linalg.norm(x).dtype
