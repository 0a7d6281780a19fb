"""scipy.special on traced arrays (library/special.py): the ufuncs dispatch to asd's rules;
values equal scipy's and derivatives equal mpmath's (50 digits) or central differences at
generic points; the tricky points (xlogy at x = 0, log_ndtr far in the tails, logsumexp with
negative b) against scipy; the poles and non-Lipschitz points are refused, naming the node."""

from __future__ import annotations

import subprocess
import sys

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sc
from asd.library import special as asp_lib
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
import asd.scipy.special as asp
from asd.testing.strategies import boundary_points, directions

mp.mp.dps = 50

# name, scipy ufunc, mpmath function, points
UNARY = [
    ("gammaln", sc.gammaln, lambda x: mp.log(abs(mp.gamma(x))),
     [0.3, 2.5, 7.25, 40.0, -0.5, -2.25]),
    ("gamma", sc.gamma, mp.gamma, [0.3, 2.5, 7.25, -0.5, -1.7]),
    ("digamma", sc.digamma, mp.digamma, [0.3, 2.5, 7.25, -0.5, -2.25]),
    ("psi", sc.psi, mp.digamma, [0.3, 2.5]),
    ("erf", sc.erf, mp.erf, [-2.1, -0.3, 0.0, 0.7, 3.5]),
    ("erfc", sc.erfc, mp.erfc, [-2.1, -0.3, 0.0, 0.7, 8.0]),
    ("erfinv", sc.erfinv, mp.erfinv, [-0.99, -0.3, 0.0, 0.7]),
    ("erfcinv", sc.erfcinv, lambda x: mp.erfinv(1 - x), [0.01, 0.3, 1.0, 1.7]),
    ("expit", sc.expit, lambda x: 1 / (1 + mp.exp(-x)), [-30.0, -0.3, 0.0, 2.0]),
    ("logit", sc.logit, lambda x: mp.log(x / (1 - x)), [1e-6, 0.3, 0.5, 0.99]),
    ("ndtr", sc.ndtr, mp.ncdf, [-5.0, -0.3, 0.0, 2.0]),
    ("log_ndtr", sc.log_ndtr, lambda x: mp.log(mp.ncdf(x)),
     [-100.0, -38.0, -5.0, -0.3, 0.0, 2.0, 9.0]),
    ("ndtri", sc.ndtri, lambda p: mp.sqrt(2) * mp.erfinv(2 * p - 1), [1e-10, 0.05, 0.5, 0.9]),
]


def _mp_derivative(f, x: float) -> float:
    return float(mp.diff(f, mp.mpf(x)))


@pytest.mark.parametrize("name, ufunc, ref, points", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ufuncs_dispatch_and_differentiate_as_mpmath(name, ufunc, ref, points):
    x = np.array(points)
    value, g = asd.value_and_subgrad(lambda x: ufunc(x).sum())(x)
    np.testing.assert_allclose(value, ufunc(x).sum(), rtol=1e-14)
    want = np.array([_mp_derivative(ref, p) for p in points])
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-300)
    # the program records the rule's primitive, not a conversion of the traced array
    program = asd.trace(lambda x: ufunc(x).sum())(x)
    assert (name if name != "expit" else "sigmoid").replace("psi", "digamma") in str(program)


def test_polygamma_differentiates_to_the_next_order():
    x = np.array([0.3, 2.5, -0.5, -2.25])
    for n in range(4):
        g = asd.subgrad(lambda x, n=n: asp.polygamma(n, x).sum())(x)
        want = [float(mp.polygamma(n + 1, p)) for p in x]
        np.testing.assert_allclose(g, want, rtol=1e-10)
        np.testing.assert_allclose(asp.polygamma(n, x), sc.polygamma(n, x), rtol=1e-14)


def test_polygamma_takes_one_constant_nonnegative_integer_order():
    with pytest.raises(asd.UnsupportedError, match="nonnegative integer order"):
        asd.subgrad(lambda x: asp.polygamma(np.array([0, 1]), x).sum())(np.ones(2))
    with pytest.raises(asd.UnsupportedError, match="nonnegative integer order"):
        asd.subgrad(lambda x: asp.polygamma(-1, x).sum())(np.ones(2))


def test_scipys_own_polygamma_cannot_see_a_traced_array_and_says_so():
    with pytest.raises(asd.TracerBoolError, match="converted to a plain numpy array"):
        asd.subgrad(lambda x: sc.polygamma(1, x).sum())(np.ones(2))


def _central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


BINARY = [
    ("beta", sc.beta, np.array([0.7, 2.5, 1.3, -0.5]), np.array([1.5, 0.4, 3.0, 2.25])),
    ("betaln", sc.betaln, np.array([0.7, 2.5, 1.3, 30.0]), np.array([1.5, 0.4, 3.0, 20.0])),
    ("xlogy", sc.xlogy, np.array([0.7, -2.5, 1.3, 4.0]), np.array([1.5, 0.4, 3.0, 1e-3])),
    ("xlog1py", sc.xlog1py, np.array([0.7, -2.5, 1.3, 4.0]), np.array([1.5, -0.4, 3.0, 1e-3])),
]


@pytest.mark.parametrize("name, ufunc, a, b", BINARY, ids=[b[0] for b in BINARY])
def test_binary_ufuncs_against_central_differences(name, ufunc, a, b):
    value, (ga, gb) = asd.value_and_subgrad(lambda a, b: ufunc(a, b).sum(), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(value, ufunc(a, b).sum(), rtol=1e-14)
    np.testing.assert_allclose(ga, _central(lambda a: ufunc(a, b).sum(), a), rtol=1e-6)
    np.testing.assert_allclose(gb, _central(lambda b: ufunc(a, b).sum(), b), rtol=1e-6)


@pytest.mark.parametrize("name, ufunc, density", [
    ("gammainc", sc.gammainc, lambda a, x: np.exp(sc.xlogy(a - 1, x) - x - sc.gammaln(a))),
    ("gammaincc", sc.gammaincc, lambda a, x: -np.exp(sc.xlogy(a - 1, x) - x - sc.gammaln(a))),
    ("stdtr", sc.stdtr, lambda df, t: np.exp(sc.gammaln((df + 1) / 2) - sc.gammaln(df / 2))
     / np.sqrt(df * np.pi) * (1 + t * t / df) ** (-(df + 1) / 2)),
])
def test_integrals_differentiate_in_x_to_their_density(name, ufunc, density):
    p = np.array([0.7, 2.5, 1.0, 13.0])
    x = np.array([1.5, 0.4, 3.0, 9.0]) * (1 if name != "stdtr" else -1)
    g = asd.subgrad(lambda x: ufunc(p, x).sum())(x)
    np.testing.assert_allclose(g, density(p, x), rtol=1e-12)
    np.testing.assert_allclose(g, _central(lambda x: ufunc(p, x).sum(), x), rtol=1e-6, atol=1e-9)


def test_gammainc_at_zero_for_a_at_least_one():
    # a = 1: the density at 0 is 1; a = 2: 0
    g = asd.subgrad(lambda x: sc.gammainc(np.array([1.0, 2.0]), x).sum())(np.zeros(2))
    np.testing.assert_array_equal(g, [1.0, 0.0])


@pytest.mark.parametrize("ufunc, sign", [(sc.betainc, 1.0), (sc.betaincc, -1.0)])
def test_betainc_differentiates_in_x_as_mpmath(ufunc, sign):
    a = np.array([0.7, 2.5, 1.0, 13.0, 4.0])
    b = np.array([1.5, 0.4, 3.0, 9.0, 1.0])
    x = np.array([0.3, 0.9, 0.05, 0.6, 1.0])  # x = 1 with b = 1: the density is a
    value, g = asd.value_and_subgrad(lambda x: ufunc(a, b, x).sum())(x)
    np.testing.assert_allclose(value, ufunc(a, b, x).sum(), rtol=1e-14)
    want = [sign * float(mp.diff(lambda t, p=p, q=q: mp.betainc(p, q, 0, t, regularized=True),
                                 mp.mpf(t0), direction=-1 if t0 == 1 else 0))
            for p, q, t0 in zip(a, b, x, strict=True)]
    np.testing.assert_allclose(g, want, rtol=1e-11)


def test_betainc_refusals():
    with pytest.raises(asd.NotLipschitzError, match=r"= betainc .*infinite slope"):
        asd.subgrad(lambda x: sc.betainc(0.5, 2.0, x).sum())(np.array([0.0, 0.5]))
    with pytest.raises(asd.NotLipschitzError, match=r"= betaincc .*infinite slope"):
        asd.subgrad(lambda x: sc.betaincc(2.0, 0.5, x).sum())(np.array([1.0, 0.5]))
    with pytest.raises(asd.UnsupportedError, match="betainc with a traced a or b"):
        asd.subgrad(lambda b: sc.betainc(2.0, b, 0.3).sum())(np.array([1.0, 2.0]))
    with pytest.raises(asd.NonFiniteError, match=r"= betainc .*not finite"):
        asd.subgrad(lambda x: sc.betainc(2.0, 2.0, x).sum())(np.array([1.5, 0.5]))


# ----- the gamma and beta cdfs on the whole line: kinks at the support's edges -----

def _mp_cdf(name: str, params, z) -> mp.mpf:
    """The standard cdf (or sf) at ``z`` by mpmath, constant outside the support."""
    if name.startswith("gamma"):
        cdf = mp.gammainc(params[0], 0, max(z, 0), regularized=True)
    else:
        cdf = mp.betainc(params[0], params[1], 0, min(max(z, 0), 1), regularized=True)
    return cdf if name.endswith("cdf") else 1 - cdf


def _one_sided(name: str, params, z: float, v: float) -> float:
    """``(F(z + h v) - F(z)) / h`` at 120 digits with ``h = 1e-80``: the one-sided derivative
    along ``v``; its error is ``O(h)`` where ``F`` is smooth on that side, ``O(h**(p - 1))`` at
    an edge with exponent ``p > 1`` (1e-40 for the smallest, 1.5)."""
    with mp.workdps(120):
        h = mp.mpf("1e-80")
        z = mp.mpf(z)
        return float((_mp_cdf(name, params, z + h * v) - _mp_cdf(name, params, z)) / h)


CDFS = {"gamma_cdf": asp_lib.gamma_cdf, "gamma_sf": asp_lib.gamma_sf,
        "beta_cdf": asp_lib.beta_cdf, "beta_sf": asp_lib.beta_sf}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CDFS)), st.sampled_from([1.0, 1.5, 2.0, 3.25]),
       st.sampled_from([1.0, 1.5, 2.0, 0.5]), boundary_points((5,), 0.0, 1.0),
       directions((5,)))
def test_cdfs_on_the_line_are_the_one_sided_derivative_along_the_ray(name, a, b, z, v):
    """On the edges (a, b >= 1 there), inside and outside the support: the Dini derivative
    and the Jacobian's diagonal equal mpmath's one-sided quotients along ``v``."""
    params = (a,) if name.startswith("gamma") else (a, b)
    if name.startswith("beta") and b < 1:
        z = np.where(z == 1.0, 0.5, z)  # b < 1 at z = 1 is refused (tested below)
    f = lambda z: CDFS[name](*params, z)  # noqa: E731
    value, dini = asd.directional(f)(z, v)
    want_value = [float(_mp_cdf(name, params, mp.mpf(t))) for t in z]
    np.testing.assert_allclose(value, want_value, rtol=1e-13, atol=1e-15)
    want = [_one_sided(name, params, t, d) for t, d in zip(z, v, strict=True)]
    np.testing.assert_allclose(dini, want, rtol=1e-12, atol=1e-15)
    jac = np.diag(asd.jacobian(f, direction=v)(z))
    moving = v != 0
    np.testing.assert_allclose(jac[moving] * v[moving], np.asarray(want)[moving], rtol=1e-12,
                               atol=1e-15)
    assert np.all(np.isfinite(jac))


@pytest.mark.parametrize("name, params, edge", [
    ("gamma_cdf", (0.5,), 0.0), ("gamma_sf", (0.3,), 0.0), ("beta_cdf", (0.5, 2.0), 0.0),
    ("beta_cdf", (2.0, 0.5), 1.0), ("beta_sf", (0.7, 0.7), 1.0),
])
@pytest.mark.parametrize("v", [1.0, -1.0])
def test_cdfs_at_an_edge_with_infinite_density_are_not_lipschitz(name, params, edge, v):
    z = np.array([0.5, edge])
    with pytest.raises(asd.NotLipschitzError,
                       match=rf"%\d+ = {name}\b.*edge z = {edge:g}.*density is infinite.*"
                             rf"\[{edge}\]"):
        asd.subgrad(lambda z: CDFS[name](*params, z).sum(), direction=np.array([1.0, v]))(z)


@pytest.mark.parametrize("name, params", [("gamma_cdf", (0.5,)), ("beta_sf", (0.5, 0.5))])
def test_cdfs_with_infinite_edge_density_work_off_the_edge(name, params):
    # below the support the cdf is constant, whatever the density does at the edge
    z = np.array([-1.0, 0.25, 3.0])
    g = asd.subgrad(lambda z: CDFS[name](*params, z).sum())(z)
    want = [_one_sided(name, params, t, 1.0) for t in z]
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-300)


# ----- the tricky points -----

def test_xlogy_at_x_zero_y_positive_is_smooth():
    y = np.array([0.5, 2.0])
    gx, gy = asd.subgrad(lambda x, y: sc.xlogy(x, y).sum(), argnums=(0, 1))(np.zeros(2), y)
    np.testing.assert_allclose(gx, np.log(y), rtol=1e-15)
    np.testing.assert_array_equal(gy, [0.0, 0.0])
    gx, gy = asd.subgrad(lambda x, y: sc.xlog1py(x, y).sum(), argnums=(0, 1))(np.zeros(2), y)
    np.testing.assert_allclose(gx, np.log1p(y), rtol=1e-15)
    np.testing.assert_array_equal(gy, [0.0, 0.0])


def test_xlogy_with_a_constant_zero_x_is_zero_for_every_y():
    # 0 * log(y) is identically 0 in y, at y = 0 and y < 0 too
    g = asd.subgrad(lambda y: sc.xlogy(np.zeros(3), y).sum())(np.array([0.0, -1.0, 2.0]))
    np.testing.assert_array_equal(g, np.zeros(3))


def test_xlogy_at_the_origin_with_x_traced_is_not_lipschitz():
    with pytest.raises(asd.NotLipschitzError, match=r"= xlogy .*x = 0, y = 0"):
        asd.subgrad(lambda x: sc.xlogy(x, np.array([0.0, 1.0])).sum())(np.zeros(2))
    with pytest.raises(asd.NotLipschitzError, match=r"= xlog1py .*1 \+ y = 0"):
        asd.subgrad(lambda x: sc.xlog1py(x, np.array([-1.0, 1.0])).sum())(np.zeros(2))


def test_xlogy_at_y_zero_with_x_nonzero_is_not_finite():
    with pytest.raises(asd.NonFiniteError, match=r"= xlogy .*not finite"):
        asd.subgrad(lambda y: sc.xlogy(np.array([1.0, 1.0]), y).sum())(np.array([0.0, 1.0]))


@pytest.mark.parametrize("x", [-40.0, -200.0, -1e4, 40.0])
def test_log_ndtr_far_in_the_tails(x):
    value, g = asd.value_and_subgrad(lambda x: sc.log_ndtr(x))(x)
    assert value == sc.log_ndtr(x)
    want = float(mp.npdf(x) / mp.ncdf(x))  # d/dx log Phi(x)
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_expit_is_the_library_sigmoid():
    g = asd.subgrad(lambda x: sc.expit(x).sum())(np.array([-800.0, 0.0, 800.0]))
    np.testing.assert_array_equal(g, [0.0, 0.25, 0.0])


def test_float32_stays_float32():
    x = np.array([0.5, 2.5], dtype=np.float32)
    g = asd.subgrad(lambda x: sc.gammaln(x).sum())(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, sc.digamma(x.astype(float)), rtol=1e-6)


# ----- refusals at the poles and edges -----

@pytest.mark.parametrize("fn, name", [
    (sc.gammaln, "gammaln"), (sc.gamma, "gamma"), (sc.digamma, "digamma"),
    (lambda x: asp.polygamma(2, x), "polygamma"),
])
@pytest.mark.parametrize("pole", [0.0, -1.0, -3.0])
def test_gamma_poles_are_refused_naming_node_and_value(fn, name, pole):
    x = np.array([1.5, pole])
    with pytest.raises(asd.NonFiniteError, match=rf"%1 = {name}\b.*pole.*\[{pole}\]"):
        asd.subgrad(lambda x: fn(x).sum())(x)


@pytest.mark.parametrize("fn, x, name", [
    (sc.logit, 0.0, "logit"), (sc.logit, 1.0, "logit"), (sc.erfinv, 1.0, "erfinv"),
    (sc.erfinv, -1.0, "erfinv"), (sc.erfcinv, 0.0, "erfcinv"), (sc.ndtri, 0.0, "ndtri"),
    (sc.ndtri, 1.0, "ndtri"), (sc.logit, 1.5, "logit"), (sc.gamma, 200.0, "gamma"),
])
def test_infinite_values_are_refused(fn, x, name):
    with pytest.raises(asd.NonFiniteError, match=rf"%1 = {name}\b.*not finite.*\[{x}\]"):
        asd.subgrad(lambda x: fn(x).sum())(np.array([x, 0.5]))


def test_beta_refusals():
    with pytest.raises(asd.NonFiniteError, match="pole"):
        asd.subgrad(lambda a: sc.beta(a, 2.0).sum())(np.array([0.0, 1.0]))
    with pytest.raises(asd.NonFiniteError, match="pole"):
        asd.subgrad(lambda b: sc.betaln(1.5, b).sum())(np.array([-2.0, 1.0]))
    with pytest.raises(asd.UnsupportedError, match="a \\+ b is a nonpositive integer"):
        asd.subgrad(lambda a: sc.beta(a, -0.5).sum())(np.array([-0.5, 1.0]))


def test_gammainc_refusals():
    with pytest.raises(asd.NotLipschitzError, match=r"= gammainc .*infinite slope"):
        asd.subgrad(lambda x: sc.gammainc(0.5, x).sum())(np.array([0.0, 1.0]))
    with pytest.raises(asd.UnsupportedError, match="traced a"):
        asd.subgrad(lambda a: sc.gammainc(a, 2.0).sum())(np.array([1.0, 2.0]))
    with pytest.raises(asd.UnsupportedError, match="traced df"):
        asd.subgrad(lambda df: sc.stdtr(df, 0.3).sum())(np.array([1.0, 2.0]))


def test_keywords_other_than_out_are_refused():
    with pytest.raises(asd.UnsupportedError, match=r"scipy\.special\.erf with where"):
        asd.subgrad(lambda x: sc.erf(x, where=True).sum())(np.ones(2))


# ----- logsumexp, softmax, log_softmax -----

A = np.array([[0.3, -1.2, 2.5], [1.0, 1.0, -0.5]])


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_matches_scipy(axis, keepdims):
    b = np.array([[1.0, 2.0, 0.5], [0.25, 3.0, 1.0]])
    for kw in ({}, {"b": b}):
        got = asp.logsumexp(A, axis=axis, keepdims=keepdims, **kw)
        np.testing.assert_allclose(got, sc.logsumexp(A, axis=axis, keepdims=keepdims, **kw),
                                   rtol=1e-14)
        f = lambda a, kw=kw: asp.logsumexp(a, axis=axis, keepdims=keepdims, **kw).sum()  # noqa: E731
        ref = lambda a, kw=kw: sc.logsumexp(a, axis=axis, keepdims=keepdims, **kw).sum()  # noqa: E731
        np.testing.assert_allclose(asd.subgrad(f)(A), _central(ref, A), rtol=1e-7)


def test_logsumexp_gradient_in_b():
    b = np.array([1.0, 3.0, 0.5])
    a = np.array([0.3, -1.2, 2.5])
    g = asd.subgrad(lambda b: asp.logsumexp(a, b=b))(b)
    np.testing.assert_allclose(g, np.exp(a) / np.sum(b * np.exp(a)), rtol=1e-14)


def test_logsumexp_with_negative_b_and_return_sign():
    a = np.array([0.3, -1.2, 2.5])
    b = np.array([1.0, 2.0, -0.5])  # the sum is negative
    (r, sign), want = asp.logsumexp(a, b=b, return_sign=True), sc.logsumexp(a, b=b,
                                                                            return_sign=True)
    np.testing.assert_allclose(r, want[0], rtol=1e-14)
    assert sign == want[1] == -1
    ga, gb = asd.subgrad(lambda a, b: asp.logsumexp(a, b=b, return_sign=True)[0],
                         argnums=(0, 1))(a, b)
    ref = lambda a, b: sc.logsumexp(a, b=b, return_sign=True)[0]  # noqa: E731
    np.testing.assert_allclose(ga, _central(lambda a: ref(a, b), a), rtol=1e-7)
    np.testing.assert_allclose(gb, _central(lambda b: ref(a, b), b), rtol=1e-7)
    # per row: one positive, one negative sum
    rows = np.array([[0.0, 1.0], [1.0, 0.0]])
    br = np.array([[1.0, -2.0], [1.0, -2.0]])
    (r, sign) = asp.logsumexp(rows, axis=1, b=br, return_sign=True)
    want = sc.logsumexp(rows, axis=1, b=br, return_sign=True)
    np.testing.assert_allclose(r, want[0], rtol=1e-14)
    np.testing.assert_array_equal(sign, want[1])


def test_logsumexp_of_a_negative_sum_without_the_sign_is_refused():
    with pytest.raises(asd.NonFiniteError, match="not finite"):
        asd.subgrad(lambda a: asp.logsumexp(a, b=np.array([1.0, -2.0])))(np.zeros(2))


def test_logsumexp_of_large_values_does_not_overflow():
    a = np.array([1000.0, 1000.0])
    v, g = asd.value_and_subgrad(lambda a: asp.logsumexp(a, b=np.array([1.0, 3.0])))(a)
    np.testing.assert_allclose(v, sc.logsumexp(a, b=[1.0, 3.0]), rtol=1e-15)
    np.testing.assert_allclose(g, [0.25, 0.75], rtol=1e-14)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_softmax_and_log_softmax_match_scipy(axis):
    np.testing.assert_allclose(asp.softmax(A, axis=axis), sc.softmax(A, axis=axis), rtol=1e-14)
    np.testing.assert_allclose(asp.log_softmax(A, axis=axis), sc.log_softmax(A, axis=axis),
                               rtol=1e-14)
    w = np.arange(A.size, dtype=float).reshape(A.shape)
    for ours, theirs in ((asp.softmax, sc.softmax), (asp.log_softmax, sc.log_softmax)):
        g = asd.subgrad(lambda a, ours=ours: (ours(a, axis=axis) * w).sum())(A)
        ref = _central(lambda a, theirs=theirs: (theirs(a, axis=axis) * w).sum(), A)
        np.testing.assert_allclose(g, ref, rtol=1e-7, atol=1e-9)


# ----- hypothesis: generic points -----

@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 30.0), st.floats(-3.0, 3.0))
def test_gammaln_and_xlogy_at_random_points(x, c):
    g = asd.subgrad(lambda x: sc.gammaln(x))(x)
    np.testing.assert_allclose(g, float(mp.digamma(x)), rtol=1e-12, atol=1e-14)
    gc, gx = asd.subgrad(lambda c, x: sc.xlogy(c, x), argnums=(0, 1))(c, x)
    np.testing.assert_allclose([gc, gx], [np.log(x), c / x], rtol=1e-14)


@settings(max_examples=40, deadline=None)
@given(st.floats(-8.0, 8.0))
def test_error_functions_at_random_points(x):
    g = asd.subgrad(lambda x: sc.erf(x) + 2 * sc.log_ndtr(x) - sc.ndtr(x))(x)
    want = float(2 / mp.sqrt(mp.pi) * mp.exp(-mp.mpf(x) ** 2)
                 + 2 * mp.npdf(x) / mp.ncdf(x) - mp.npdf(x))
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-300)


# ----- the namespace, lazy loading, other array libraries -----

def test_the_namespace_mirrors_scipy_special():
    from asd.library import special

    assert asp.gammaln is special.gammaln and asp.logsumexp is special.logsumexp
    assert asp.i0 is sc.i0 and asp.euler is sc.euler
    assert "gammaln" in dir(asp) and "i0" in dir(asp)


def test_the_rules_load_the_first_time_a_traced_array_meets_scipy_special():
    code = ("import sys, numpy as np, asd; import scipy.special as sc\n"
            "assert 'asd.library.special' not in sys.modules\n"
            "print(asd.subgrad(lambda x: sc.gammaln(x))(2.0))\n"
            "assert 'asd.library.special' in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    np.testing.assert_allclose(float(out), sc.digamma(2.0), rtol=1e-14)


def test_a_scipy_special_ufunc_without_a_rule_is_refused_by_name():
    with pytest.raises(asd.UnsupportedError, match=r"scipy\.special\.i0 has no asd rule"):
        asd.subgrad(lambda x: sc.i0(x))(1.0)


def test_other_array_libraries_are_refused_clearly():
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.5, 2.0], dtype=torch.float64)
    with pytest.raises(asd.UnsupportedError, match=r"gammaln met torch arrays.*numpy arrays only"):
        asd.subgrad(lambda x: sc.gammaln(x).sum())(x)
