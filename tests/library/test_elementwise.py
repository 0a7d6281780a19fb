"""Elementwise functions (library/elementwise.py): each against a plain-numpy reference with
`check_rule` (exact oracle where the reference is piecewise polynomial, 80-digit mpmath
otherwise), on the kinks (ties of fmax/fmin, 0 for fabs, the origin for hypot, the cut of
arctan2) and at generic points; refusals checked for their message."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.testing import check_rule
from asd.testing.strategies import directions, kink_arrays

A = np.array([0.3, -1.2, 2.5])
B = np.array([1.1, 0.4, -0.7])

# name, function of two arrays, reference
PAIRS = [
    ("logaddexp", np.logaddexp, lambda a, b: np.log(np.exp(a) + np.exp(b))),
    ("logaddexp2", np.logaddexp2, lambda a, b: np.log2(np.exp2(a) + np.exp2(b))),
    ("hypot", np.hypot, lambda a, b: np.sqrt(a * a + b * b)),
    ("arctan2", np.arctan2, lambda y, x: np.arctan(y / x) + np.array([0.0, 0.0, np.pi])),
    ("fmax", np.fmax, np.maximum),
    ("fmin", np.fmin, np.minimum),
]
UNARY = [
    ("arccosh", np.arccosh, np.arccosh, np.array([1.5, 2.0, 7.25])),
    ("sinc", np.sinc, lambda a: np.sin(np.pi * a) / (np.pi * a), np.array([0.3, -1.2, 2.5])),
    ("sinc near 0", np.sinc, lambda a: np.sin(np.pi * a) / (np.pi * a),
     np.array([1e-4, -3e-4, 2e-3])),
    ("fabs", np.fabs, np.abs, A),
    ("deg2rad", np.deg2rad, lambda a: a * (np.pi / 180.0), A),
    ("radians", np.radians, lambda a: a * (np.pi / 180.0), A),
    ("rad2deg", np.rad2deg, lambda a: a * (180.0 / np.pi), A),
    ("degrees", np.degrees, lambda a: a * (180.0 / np.pi), A),
    ("nan_to_num", np.nan_to_num, lambda a: a * 1.0, A),
    ("real", np.real, lambda a: a * 1.0, A),
    ("conjugate", np.conjugate, lambda a: a * 1.0, A),
    ("imag", lambda x: np.imag(x) + x, lambda a: a * 1.0, A),
    ("real_if_close", np.real_if_close, lambda a: a * 1.0, A),
    ("iscomplex/isreal", lambda x: np.where(np.iscomplex(x) | ~np.isreal(x), 0.0, x) * x,
     lambda a: a * a, A),
    ("nan_to_num of inf", lambda x: np.sin(np.nan_to_num(x + NONFINITE)),
     lambda a: np.sin(a + np.array([0.0, 0.0, 0.0])) * np.array([1.0, 0.0, 0.0])
     + np.sin(np.nan_to_num(NONFINITE)) * np.array([0.0, 1.0, 1.0]), A),
]
NONFINITE = np.array([0.0, np.nan, -np.inf])


@pytest.mark.parametrize("name, fn, ref", PAIRS, ids=[p[0] for p in PAIRS])
def test_binary_at_a_generic_point(name, fn, ref):
    check_rule(fn, A, B, reference=ref, name=name, n_directions=3)


@pytest.mark.parametrize("name, fn, ref, x", UNARY, ids=[u[0] for u in UNARY])
def test_unary_at_a_generic_point(name, fn, ref, x):
    check_rule(fn, x, reference=ref, name=name, n_directions=3)


def test_values_are_numpy_values():
    for _, fn, _ in PAIRS:
        assert asd.jacobian(lambda a, fn=fn: fn(a, B), argnums=0)(A).shape == (3, 3)
        value, _ = asd.value_and_subgrad(lambda a, fn=fn: np.sum(fn(a, B)))(A)
        assert value == np.sum(fn(A, B))
    for _, fn, _, x in UNARY:
        value, _ = asd.value_and_subgrad(lambda a, fn=fn: np.sum(fn(a)))(x)
        assert value == np.sum(fn(x))


@pytest.mark.parametrize("fn, ref", [(np.fmax, np.maximum), (np.fmin, np.minimum)],
                         ids=["fmax", "fmin"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_fmax_fmin_on_ties(fn, ref, data):
    a = data.draw(kink_arrays((4,), (0.0, 1.0)), label="a")
    b = a + np.array(data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.5, -1.0]), min_size=4,
                                        max_size=4), label="b - a"))
    v = (data.draw(directions((4,)), label="va"), data.draw(directions((4,)), label="vb"))
    check_rule(fn, a, b, direction=v, reference=ref, exact=True, name=fn.__name__)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_fabs_on_zero(data):
    x = data.draw(kink_arrays((4,), (0.0,)), label="x")
    v = data.draw(directions((4,)), label="v")
    check_rule(np.fabs, x, direction=v, reference=np.abs, exact=True, name="fabs")


@pytest.mark.parametrize("v", [[3.0, -4.0], [0.0, 1.0], [-1.0, 0.0], [0.5, 0.5]])
def test_hypot_at_the_origin_is_the_norm_gradient_along_v(v):
    v = np.array(v)
    f = lambda z: np.hypot(z[:1], z[1:]).sum()  # noqa: E731
    np.testing.assert_allclose(asd.subgrad(f, direction=v)(np.zeros(2)), v / np.linalg.norm(v),
                               rtol=1e-15)
    check_rule(lambda a, b: np.hypot(a, b), np.zeros(2), np.array([0.0, 2.0]),
               direction=(v, v[::-1]), reference=lambda a, b: np.sqrt(a * a + b * b),
               name="hypot at 0")


def test_arctan2_refuses_the_origin():
    with pytest.raises(asd.NotLipschitzError, match=r"arctan2.*y = x = 0.*hypot"):
        asd.subgrad(lambda p: np.arctan2(p[0], p[1]))(np.zeros(2))


def test_arctan2_jump_across_the_negative_axis():
    p = np.array([0.0, -2.0])
    with pytest.raises(asd.NotLipschitzError, match=r"%\d+ = arctan2 .*jumps here"):
        asd.subgrad(lambda p: np.arctan2(p[0], p[1]))(p)
    # its square is continuous there: the side the ray enters gives the derivative
    for vy, angle in ((1.0, np.pi), (-1.0, -np.pi)):
        def ref(y, x, angle=angle):
            return (angle + np.arctan(y / x)) ** 2

        check_rule(lambda y, x: np.arctan2(y, x) ** 2, p[:1], p[1:],
                   direction=(np.array([vy]), np.array([0.5])), reference=ref,
                   name="arctan2 squared on the cut")


def test_arccosh_refuses_one_and_nan_input_is_named():
    with pytest.raises(asd.NotLipschitzError, match=r"arccosh.*x = 1"):
        asd.subgrad(lambda x: np.arccosh(x))(1.0)
    with pytest.raises(asd.NonFiniteError, match="fmax"):
        asd.subgrad(lambda x: np.fmax(np.log(x - 2.0), 0.0))(1.0)


def test_sinc_at_zero():
    assert asd.value_and_subgrad(np.sinc)(0.0) == (1.0, 0.0)


def test_nan_to_num_makes_non_finite_entries_constants():
    """autograd's test: nan_to_num(x + y) with y holding NaN and infinities has slope 1 at
    the finite entries and 0 at the others (x + inf is inf near the point too); it raised
    NonFiniteError. A pole (log at 0) is still refused, naming the node."""
    y = np.array([0.0, np.nan, np.inf, -np.inf])
    x = np.array([0.3, -1.2, 2.5, 0.7])
    g = asd.subgrad(lambda x: np.sum(np.sin(np.nan_to_num(x + y))))(x)
    np.testing.assert_array_equal(g, [np.cos(0.3), 0.0, 0.0, 0.0])
    assert asd.value_and_subgrad(lambda x: np.sum(np.nan_to_num(x + y, posinf=2.0)))(x)[0] \
        == np.sum(np.nan_to_num(x + y, posinf=2.0))
    with pytest.raises(asd.NonFiniteError, match=r"%\d+ = log"):
        asd.subgrad(lambda x: np.sum(np.nan_to_num(np.log(x))))(np.array([0.0, 1.0]))


def test_complex_predicates_of_real_arrays_are_constants():
    def f(x):
        assert np.isrealobj(x) and not np.iscomplexobj(x)
        assert np.iscomplex(x).tolist() == [False] * 3 and np.isreal(x).all()
        return np.sum(np.real_if_close(x) * x)

    np.testing.assert_array_equal(asd.subgrad(f)(A), 2 * A)
