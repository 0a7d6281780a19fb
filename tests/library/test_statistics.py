"""Statistics on traced arrays, in plain numpy spelling, at their kinks and away from them.

Oracle: `asd.testing.check_rule` (exact Fractions for the polynomial and piecewise-polynomial
ones: var, cov, ptp, average; mpmath at 80 digits through ``sqrt`` for std and corrcoef).
Kinks: zero variance for std (the l2 norm at 0), ties of the maximum and minimum for ptp, along
coordinate vectors, random directions and directions that keep the ties alive.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from asd.library import statistics
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.errors import NotLipschitzError
from asd.testing import check_rule

RNG = np.random.default_rng(7)
X23 = np.array([[1.0, 2.0, 4.0], [0.5, -3.0, 3.5]])


def _eye(n):
    return list(np.eye(n))


# ----- var and std -----

@pytest.mark.parametrize("axis, ddof, keepdims", [(None, 0, False), (1, 1, False),
                                                  (0, 0, True), ((0, 1), 1, True)])
def test_var_generic_and_at_zero_variance(axis, ddof, keepdims):
    def f(x):
        return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)

    def ref(x):
        d = x - np.mean(x, axis=axis, keepdims=True)
        n = np.size(x) // np.size(np.mean(x, axis=axis))
        return np.sum(d * d, axis=axis, keepdims=keepdims) / (n - ddof)

    for x in (X23, np.full((2, 3), 1.5)):
        report = check_rule(f, x, n_directions=3, exact=True, reference=ref, name="var")
        assert report.oracle == "exact" and report.checks["jacobian"] == 3


def _std_reference(axis, ddof):
    def ref(x):
        d = x - np.mean(x, axis=axis, keepdims=True)
        n = np.prod([np.shape(x)[a] for a in np.atleast_1d(axis)]) if axis is not None \
            else np.size(x)
        return np.sqrt(np.sum(d * d, axis=axis) / (n - ddof))
    return ref


@pytest.mark.parametrize("axis, ddof", [(None, 0), (1, 1), (0, 0)])
def test_std_at_zero_variance_along_coordinates_and_random_directions(axis, ddof):
    """Every slice constant: the norm's rule gives the limiting gradient along each direction
    that moves every slice (one coordinate per slice; see the next tests for the others)."""
    x = np.full((2, 3), -0.75)
    coords = {None: [e.reshape(2, 3) for e in _eye(6)],
              0: [np.array([[1.0, 0, 1], [0, 1, 0]]), np.array([[0.0, 0, 1], [1, 1, 0]])],
              1: [np.array([[1.0, 0, 0], [0, 1, 0]]), np.array([[0.0, 0, 1], [1, 0, 0]])]}[axis]
    dirs = coords + [RNG.standard_normal((2, 3)) for _ in range(2)]
    report = check_rule(lambda a: np.std(a, axis=axis, ddof=ddof), x, directions=dirs,
                        reference=_std_reference(axis, ddof), exact=False, name="std")
    assert report.checks["jacobian"] == len(dirs)


def test_std_gradient_at_zero_variance_is_the_centered_direction():
    v = np.array([2.0, -1.0, 0.5, 0.5])
    c = v - v.mean()
    g = asd.subgrad(np.std, direction=v)(np.ones(4))
    np.testing.assert_allclose(g, c / np.linalg.norm(c) / 2.0, atol=1e-15)
    _, dini = asd.directional(np.std)(np.ones(4), v)
    np.testing.assert_allclose(dini, np.std(v), atol=1e-15)


def test_std_at_zero_variance_to_second_order():
    """x = z**2 at z = 0: the first-order tangent of x vanishes, the exact series decides."""
    dirs = [np.array([1.0, 0.0, -2.0]), np.array([0.5, 0.5, 0.5])]
    check_rule(lambda z: np.std(z * z), np.zeros(3), directions=dirs, exact=False,
               reference=lambda z: np.sqrt(np.sum((z * z - np.mean(z * z)) ** 2) / 3))


def test_std_along_a_direction_that_keeps_the_variance_zero():
    """v constant keeps every entry tied: the answer must lie in the Clarke set, the
    centered ball of radius 1/sqrt(n)."""
    g = asd.subgrad(np.std, direction=np.ones(5))(np.full(5, 3.0))
    assert abs(np.sum(g)) <= 1e-12 and np.linalg.norm(g) <= 1 / np.sqrt(5) + 1e-12
    _, dini = asd.directional(np.std)(np.full(5, 3.0), np.ones(5))
    assert dini == 0


def test_std_generic_point():
    check_rule(lambda a: np.std(a, axis=0), X23, n_directions=2, exact=False,
               reference=_std_reference(0, 0))


# ----- average -----

def test_average_with_traced_weights():
    a = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, 1.0]])
    w = np.array([0.5, 2.0, 1.0])
    check_rule(lambda a, w: np.average(a, axis=1, weights=w), a, w, n_directions=2,
               reference=lambda a, w: np.sum(a * w, axis=1) / np.sum(w), name="average")


def test_average_same_shape_weights_and_returned():
    w = np.abs(X23) + 0.25
    avg, scl = statistics.average(X23, axis=0, weights=w, returned=True)
    np.testing.assert_allclose(avg, np.average(X23, axis=0, weights=w))
    np.testing.assert_allclose(scl, w.sum(axis=0))
    check_rule(lambda a: np.average(a, weights=w), X23, n_directions=2, exact=True,
               reference=lambda a: np.sum(a * w) / np.sum(w))


def test_average_refuses_weights_summing_to_zero():
    with pytest.raises(ZeroDivisionError, match="sum to zero"):
        asd.subgrad(lambda w: np.average(np.ones(2), weights=w))(np.array([1.0, -1.0]))


# ----- cov and corrcoef -----

def _cov_reference(ddof):
    def ref(x):
        d = x - np.mean(x, axis=1, keepdims=True)
        return d @ d.T / (x.shape[1] - ddof)
    return ref


@pytest.mark.parametrize("bias", [False, True])
def test_cov_generic_and_at_zero_variance(bias):
    for x in (X23, np.array([[2.0, 2.0, 2.0], [1.0, -1.0, 0.0]])):
        check_rule(lambda a: np.cov(a, bias=bias), x, n_directions=2, exact=True,
                   reference=_cov_reference(0 if bias else 1), name="cov")


def test_cov_of_columns_with_y_and_weights():
    y = np.array([[1.0], [0.0], [2.0]])
    fw = np.array([1, 2, 1])
    aw = np.array([0.5, 1.0, 2.0])
    x = X23.T.copy()
    want = np.cov(x, y, rowvar=False, fweights=fw, aweights=aw)
    np.testing.assert_allclose(statistics.cov(x, y, rowvar=False, fweights=fw, aweights=aw),
                               want, rtol=1e-14)

    def ref(a):
        X = np.concatenate([a.T, y.T], axis=0)
        w = fw * aw
        avg = np.sum(X * w, axis=1, keepdims=True) / np.sum(w)
        fact = np.sum(w) - np.sum(w * aw) / np.sum(w)
        return ((X - avg) * w) @ (X - avg).T / fact

    check_rule(lambda a: np.cov(a, y, rowvar=False, fweights=fw, aweights=aw), x,
               n_directions=2, exact=True, reference=ref)


def test_corrcoef_generic_point():
    def ref(x):
        d = x - np.mean(x, axis=1, keepdims=True)
        c = d @ d.T
        s = np.sqrt(np.array([c[0, 0], c[1, 1]]))
        return c / s[:, None] / s[None, :]

    check_rule(lambda a: np.corrcoef(a), X23, n_directions=3, exact=False, reference=ref)


def test_corrcoef_refuses_zero_variance_naming_node_and_variable():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]])
    with pytest.raises(NotLipschitzError) as e:
        asd.subgrad(lambda a: np.corrcoef(a)[0, 1])(x)
    msg = str(e.value)
    assert "correlation" in msg and "variable(s) [1]" in msg and "variance [0.0]" in msg
    assert "np.cov" in msg  # the fix


def test_correlation_map_batches():
    from asd.extend import FixedTangent

    C = np.cov(X23)
    _, lin = statistics.correlation_rule((C,), [FixedTangent(np.zeros((2, 2)))])
    t = RNG.standard_normal((3, 2, 2))
    np.testing.assert_allclose(lin.push(t)[1], lin.push(t[1]), atol=1e-14)
    np.testing.assert_allclose(lin.pull(t)[2], lin.pull(t[2]), atol=1e-14)


# ----- ptp -----

TIED = np.array([1.0, 3.0, 3.0, 1.0, 2.0])


@pytest.mark.parametrize("v", [*_eye(5), np.array([0.0, 0.0, 0.0, 0.0, 1.0]),
                               np.array([-1.0, 1.0, 1.0, -1.0, 0.5])],
                         ids=[f"e{i}" for i in range(5)] + ["ties kept", "ties kept 2"])
def test_ptp_at_ties_of_max_and_min(v):
    """Coordinate vectors break one tie; the last two keep both ties alive (lexicographic)."""
    report = check_rule(np.ptp, TIED, direction=v, exact=True,
                        reference=lambda x: np.max(x) - np.min(x))
    assert report.oracle == "exact"


def test_ptp_tied_gradient_follows_the_direction():
    g = asd.subgrad(np.ptp, direction=np.array([0.0, -1.0, 1.0, -1.0, 0.0]))(TIED)
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, -1.0, 0.0])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(-2, 2), min_size=6, max_size=6), st.integers(0, 2**31))
def test_ptp_axis_hypothesis(entries, seed):
    x = np.array(entries, dtype=float).reshape(2, 3)
    v = np.random.default_rng(seed).choice([-1.0, 0.0, 1.0], size=(2, 3))
    if not v.any():
        v[0, 0] = 1.0
    check_rule(lambda a: np.ptp(a, axis=1), x, direction=v, exact=True,
               reference=lambda a: np.max(a, axis=1) - np.min(a, axis=1))


def test_doctests():
    assert doctest.testmod(statistics).failed == 0
