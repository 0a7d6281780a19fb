"""Positions computed from traced values (argmax, argmin, argsort, top-k indices) used as
indices: decided along the ray like any branch, allowed where the gather is continuous.

The oracle is the same function written without positions (``x[argmax(x)] == max(x)``,
``take_along_axis(x, argsort(x)) == sort(x)``) evaluated exactly on power series along the
ray (``asd.testing.exact``); hypothesis puts the points on ties and draws directions with zero
and repeated entries, so ties are decided by the tangent and by the series.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import asd
import asd.numpy as anp
from asd.testing import exact
from asd.testing.strategies import directions, tied_arrays

W = np.array([1.0, 2.0, 3.0, 4.0])
C = np.array([0.5, -1.0, 2.0, 1.5])

# (name, program with positions, the same program without them, for the exact oracle)
GATHERS = [
    ("x[argmax(x)]", lambda x: x[np.argmax(x)] * 3.0, lambda x: np.max(x) * 3),
    ("x[argmin(x)]", lambda x: x[np.argmin(x)], lambda x: np.min(x)),
    ("take(x, argmax)", lambda x: np.take(x, np.argmax(x)), lambda x: np.max(x)),
    ("take_along_axis(x, argsort)", lambda x: np.take_along_axis(x, np.argsort(x), -1) @ W,
     lambda x: np.sort(x) @ W),
    ("x[argsort(x)]", lambda x: x[np.argsort(x)] @ W, lambda x: np.sort(x) @ W),
    ("x[argsort(-x)]", lambda x: x[np.argsort(-x)] @ W, lambda x: np.sort(x)[::-1] @ W),
    ("top-2 indices", lambda x: x[np.argsort(x)[-2:]] @ W[:2], lambda x: np.sort(x)[-2:] @ W[:2]),
    ("take_along_axis(x, argmax keepdims)",
     lambda x: np.take_along_axis(x, np.argmax(x, axis=0, keepdims=True), 0)[0] * 3.0,
     lambda x: np.max(x) * 3),
    ("take_along_axis(x, expand_dims(argmin))",
     lambda x: np.take_along_axis(x, np.expand_dims(np.argmin(x), 0), 0).sum(),
     lambda x: np.min(x)),
    ("curved input", lambda x: (x * x)[np.argmax(x * x)] + x[np.argmax(x)] * C[0],
     lambda x: np.max(x * x) + np.max(x) * C[0]),
]


@pytest.mark.parametrize("name, f, ref", GATHERS, ids=[g[0] for g in GATHERS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_gathers_at_ties_are_the_exact_limiting_gradient(name, f, ref, data):
    x = data.draw(tied_arrays((4,)))
    v = data.draw(directions((4,)))
    try:
        value, want = exact.limiting_gradient(ref, x, v)
    except exact.DegenerateTie:
        assume(False)  # the tie persists along v: the lexicographic rule decides (issue 11)
    got_value, g = asd.value_and_subgrad(f, direction=v)(x)
    np.testing.assert_array_equal(g, np.asarray(want, dtype=float), err_msg=name)
    assert got_value == float(value)
    _, dini = asd.directional(f)(x, v)
    assert dini == float(exact.directional_derivative(ref, x, v))


@pytest.mark.parametrize("v, want", [
    (np.array([1.0, 2.0, 0.0]), [0.0, 1.0, 0.0]),   # the tangent decides
    (np.array([2.0, 1.0, 0.0]), [1.0, 0.0, 0.0]),
    (np.array([0.0, 0.0, 1.0]), [1.0, 0.0, 0.0]),   # the tie persists: the first position
])
def test_argmax_gather_picks_the_position_the_ray_enters(v, want):
    x = np.array([1.0, 1.0, 0.0])
    np.testing.assert_array_equal(asd.subgrad(lambda x: x[np.argmax(x)], direction=v)(x), want)


def test_a_tie_decided_by_the_series_picks_the_right_position():
    # along (1, 0) at 0: x0 - x0**2 and x0**2 - x0 tie to first order; the series decides
    f = lambda x: anp.stack([x[0] - x[0] ** 2, x[0] ** 2 - x[0], 0 * x[1]])  # noqa: E731
    g = lambda x: f(x)[np.argmax(f(x))]  # noqa: E731
    np.testing.assert_array_equal(asd.subgrad(g, direction=np.array([1.0, 0.0]))(np.zeros(2)),
                                  [1.0, 0.0])
    np.testing.assert_array_equal(asd.subgrad(g, direction=np.array([-1.0, 0.0]))(np.zeros(2)),
                                  [-1.0, 0.0])


def test_gathered_values_that_differ_at_tied_positions_raise_naming_the_node():
    x = np.array([1.0, 1.0, 0.0])
    with pytest.raises(asd.NotLipschitzError, match=r"%\d+ = gather_at .*argmax.*jumps"):
        asd.subgrad(lambda x: (x * W[:3])[np.argmax(x)], direction=np.ones(3))(x)
    with pytest.raises(asd.NotLipschitzError, match="argsort"):
        asd.subgrad(lambda x: (x * W[:3])[np.argsort(x)[-1:]].sum(), seed=0)(x)
    # the tied positions outside the selected ones do not matter: entry 2 is not tied
    g = asd.subgrad(lambda x: (x * W[:3])[np.argsort(x)[:1]].sum(), seed=0)(x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 3.0])


def test_other_traced_indices_still_raise():
    x = np.array([1.0, 2.0])
    with pytest.raises(asd.NotLipschitzError, match="only positions computed by argmax"):
        asd.subgrad(lambda x: x[x > 0].sum())(x)
    with pytest.raises(asd.NotLipschitzError, match="argmax is discontinuous"):
        asd.subgrad(lambda x: (np.argmax(x) * x).sum())(np.array([2.0, 2.0]))  # tied


def test_positions_behind_stop_gradient_are_constants():
    x = np.array([1.0, 1.0, 0.0])
    for v in (np.array([1.0, 2.0, 0.0]), np.array([2.0, 1.0, 0.0])):
        g = asd.subgrad(lambda x: (x * W[:3])[asd.stop_gradient(np.argmax(x))], direction=v)(x)
        np.testing.assert_array_equal(g, [1.0, 0.0, 0.0])  # numpy's position, frozen
    g = asd.subgrad(lambda x: x.max() * asd.stop_gradient(np.argmax(x) + 1.0),
                    direction=np.array([1.0, 2.0, 0.0]))(x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.0])


def test_rows_and_columns():
    X = np.array([[1.0, 2.0], [3.0, 3.0]])
    v = np.array([[0.0, 0.0], [1.0, -1.0]])
    J = asd.jacobian(lambda X: np.take_along_axis(X, np.argsort(X, axis=1), 1), direction=v)(X)
    want = asd.jacobian(lambda X: np.sort(X, axis=1), direction=v)(X)
    np.testing.assert_array_equal(J, want)
    Y = np.array([[1.0, 2.0], [1.0, 2.0]])
    J = asd.jacobian(lambda X: X[np.argmax(X[:, 0])], direction=v)(Y)
    np.testing.assert_array_equal(J, [[[0.0, 0.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]]])


def _simplex_by_sort(x, r=1.0):
    """The textbook projection onto the simplex, indexing with argsort:
    tau = max_k (sum of the k largest - r) / k."""
    u = x[np.argsort(-x)]
    return asd.relu(x - anp.max((np.cumsum(u) - r) / np.arange(1, x.size + 1)))


@pytest.mark.parametrize("x", [np.array([0.5, 0.5, 0.0]), np.array([0.8, 0.8, 0.1]),
                               np.array([0.2, 0.2, 0.2])])
@pytest.mark.parametrize("v", [np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 1.0]),
                               np.array([-1.0, 0.5, 2.0])])
def test_sort_based_simplex_projection_matches_the_library_projection(x, v):
    J = asd.jacobian(_simplex_by_sort, direction=v)(x)
    np.testing.assert_allclose(J, asd.jacobian(asd.projections.simplex, direction=v)(x),
                               atol=1e-12)
    np.testing.assert_allclose(_simplex_by_sort(x), asd.projections.simplex(x), atol=1e-12)


def test_keys_held_on_a_neighbourhood_keep_numpys_order_and_gather_without_a_refusal():
    """numpy campaign seed 3018: keys from a clip whose bounds are equal are constant near
    the point, so their ties keep numpy's stable order there and the gathered values, though
    they differ, do not jump (they were refused). Keys tied but moving are still refused."""
    lo = np.array([[0.0], [-0.5], [-0.5]])

    def f(x):
        keys = np.clip(x, lo, lo) + np.array([[-0.5], [0.0], [0.0]])  # all -0.5, held
        vals = np.clip(x, lo, lo) + np.array([[-0.5], [0.0], [3.0]]) + x
        return np.take_along_axis(vals, np.argsort(keys, axis=0, stable=True), axis=0).sum()

    x, v = np.array([[-1.0], [0.0], [0.0]]), np.array([[2.0], [-0.5], [2.0]])
    assert asd.directional(f)(x, v) == (0.5, 3.5)
    assert np.array_equal(asd.subgrad(f, direction=v)(x), np.ones((3, 1)))

    def moving(x):
        return np.take_along_axis(x + np.array([0.0, 1.0, 2.0]),
                                  np.argsort(x * 1.0, stable=True), 0).sum()

    with pytest.raises(asd.NotLipschitzError, match="gather different values"):
        asd.directional(moving)(np.zeros(3), np.array([1.0, 2.0, 3.0]))
