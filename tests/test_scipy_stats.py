"""asd.scipy.stats: every function's value equals scipy.stats at several parameter values,
and its gradient in every traced argument equals central differences of scipy's own
function (float64); the multivariate normal's gradient in the covariance is checked along
symmetric perturbations. The gamma and beta cdfs are checked at the support's edges along rays
in ``(x, loc, scale)`` against mpmath's one-sided difference quotients. Refusals (a traced df,
a or b in the cdfs, an edge with infinite density, traced counts, points outside the support,
nonpositive scales) are checked for their message."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import scipy.special as sc
import scipy.stats as ss
from hypothesis import given, settings
from hypothesis import strategies as hst

import asd
import asd.scipy.stats as st

X = np.array([-0.7, 0.3, 1.9])


def _central(f, args, i, h=1e-6):
    """Central differences of the scalar ``f(*args)`` in ``args[i]``."""
    x = np.asarray(args[i], dtype=float)
    g = np.zeros_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = h
        up = [*args[:i], x + e, *args[i + 1:]]
        down = [*args[:i], x - e, *args[i + 1:]]
        g.flat[j] = (np.sum(f(*up)) - np.sum(f(*down))) / (2 * h)
    return g


def check(ours, theirs, args, traced, rtol=1e-6, atol=1e-9):
    """Values equal scipy's; the gradient of the sum in each traced argument equals central
    differences of scipy's function."""
    args = [np.asarray(a, dtype=float) for a in args]
    np.testing.assert_allclose(ours(*args), theirs(*args), rtol=1e-12, atol=1e-300)
    grads = asd.subgrad(lambda *a: ours(*a).sum(), argnums=tuple(traced))(*args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for i, g in zip(traced, grads, strict=True):
        np.testing.assert_allclose(g, _central(theirs, args, i), rtol=rtol, atol=atol,
                                   err_msg=f"argument {i}")


# ----- normal -----

NORM_PARAMS = [(0.0, 1.0), (0.5, 2.0), (-1.0, 0.3)]


@pytest.mark.parametrize("method", ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"])
@pytest.mark.parametrize("loc, scale", NORM_PARAMS)
def test_norm(method, loc, scale):
    check(getattr(st.norm, method), getattr(ss.norm, method), [X, loc, scale], (0, 1, 2))


def test_norm_logcdf_and_logsf_far_in_the_tails():
    x = np.array([-40.0, -12.0, 12.0, 40.0])
    np.testing.assert_allclose(st.norm.logcdf(x), ss.norm.logcdf(x), rtol=1e-14)
    np.testing.assert_allclose(st.norm.logsf(x), ss.norm.logsf(x), rtol=1e-14)
    g = asd.subgrad(lambda x: st.norm.logcdf(x).sum())(x)
    # d/dx log Phi(x) = phi(x) / Phi(x) (~ -x as x -> -inf), by mpmath at 50 digits
    np.testing.assert_allclose(g[:2], [40.02496884720726, 12.082214175254284], rtol=1e-13)


@settings(max_examples=30, deadline=None)
@given(hst.floats(-5, 5), hst.floats(-3, 3), hst.floats(0.1, 5))
def test_norm_logpdf_gradient_is_the_score(x, loc, scale):
    gx, gl, gs = asd.subgrad(st.norm.logpdf, argnums=(0, 1, 2))(x, loc, scale)
    z = (x - loc) / scale
    np.testing.assert_allclose([gx, gl, gs], [-z / scale, z / scale, (z * z - 1) / scale],
                               rtol=1e-12, atol=1e-12)


def test_nonpositive_scale_is_refused():
    for scale in (0.0, -1.0):
        with pytest.raises(asd.NonFiniteError, match=r"norm\.logpdf: scale must be positive"):
            asd.subgrad(lambda x, s=scale: st.norm.logpdf(x, 0.0, s).sum())(X)


# ----- Student t -----

@pytest.mark.parametrize("df, loc, scale", [(1.0, 0.0, 1.0), (3.5, 0.5, 2.0), (30.0, -1.0, 0.3)])
def test_t(df, loc, scale):
    check(st.t.logpdf, ss.t.logpdf, [X, df, loc, scale], (0, 1, 2, 3))
    check(st.t.pdf, ss.t.pdf, [X, df, loc, scale], (0, 1, 2, 3))
    check(st.t.cdf, ss.t.cdf, [X, df, loc, scale], (0, 2, 3))
    check(st.t.sf, ss.t.sf, [X, df, loc, scale], (0, 2, 3))


def test_t_cdf_in_df_is_refused():
    with pytest.raises(asd.UnsupportedError, match="stdtr with a traced df"):
        asd.subgrad(lambda df: st.t.cdf(0.3, df))(3.0)


# ----- gamma -----

@pytest.mark.parametrize("a, loc, scale", [(0.7, 0.0, 1.0), (2.5, -1.0, 2.0), (9.0, 0.2, 0.5)])
def test_gamma(a, loc, scale):
    x = np.array([0.3, 1.9, 4.2])
    check(st.gamma.logpdf, ss.gamma.logpdf, [x, a, loc, scale], (0, 1, 2, 3))
    check(st.gamma.pdf, ss.gamma.pdf, [x, a, loc, scale], (0, 1, 2, 3))
    check(st.gamma.cdf, ss.gamma.cdf, [x, a, loc, scale], (0, 2, 3))
    check(st.gamma.sf, ss.gamma.sf, [x, a, loc, scale], (0, 2, 3))


def test_gamma_cdf_below_and_at_loc():
    # below loc the cdf is 0 with slope 0, for every a (a < 1 included); at loc with a = 1
    # the kink is decided along the ray; a < 1 at loc is refused (infinite density)
    x = np.array([-1.0, 2.0])
    for a in (0.5, 1.5):
        np.testing.assert_allclose(st.gamma.cdf(x, a), ss.gamma.cdf(x, a), rtol=1e-14)
        g = asd.subgrad(lambda x, a=a: st.gamma.cdf(x, a).sum())(x)
        np.testing.assert_allclose(g, [0.0, ss.gamma.pdf(2.0, a)], rtol=1e-13)
        g = asd.subgrad(lambda x, a=a: st.gamma.sf(x, a).sum())(x)
        np.testing.assert_allclose(g, [0.0, -ss.gamma.pdf(2.0, a)], rtol=1e-13)
    right = asd.subgrad(lambda x: st.gamma.cdf(x, 1.0), direction=1.0)(0.0)
    left = asd.subgrad(lambda x: st.gamma.cdf(x, 1.0), direction=-1.0)(0.0)
    assert (float(right), float(left)) == (1.0, 0.0)
    for v in (1.0, -1.0):
        with pytest.raises(asd.NotLipschitzError, match=r"gamma_cdf.*infinite.*\[0\.0\]"):
            asd.subgrad(lambda x: st.gamma.cdf(x, 0.5), direction=v)(0.0)


def test_gamma_refusals():
    with pytest.raises(asd.UnsupportedError, match="gamma_cdf with a traced a"):
        asd.subgrad(lambda a: st.gamma.cdf(1.0, a))(2.0)
    with pytest.raises(asd.UnsupportedError, match="gamma_sf with a traced a"):
        asd.subgrad(lambda a: st.gamma.sf(1.0, a))(2.0)
    with pytest.raises(asd.NonFiniteError, match="outside the support"):
        asd.subgrad(lambda x: st.gamma.logpdf(x, 2.0).sum())(np.array([-0.5, 1.0]))
    with pytest.raises(asd.NonFiniteError, match="a must be positive"):
        asd.subgrad(lambda a: st.gamma.logpdf(1.0, a))(-1.0)
    # at x = loc with a traced the density jumps between 0, 1 and inf as a crosses 1
    with pytest.raises(asd.NotLipschitzError, match="xlogy"):
        asd.subgrad(lambda a: st.gamma.logpdf(0.0, a))(1.0)


# ----- beta -----

@pytest.mark.parametrize("a, b, loc, scale", [(0.7, 1.5, 0.0, 1.0), (2.5, 3.0, -1.0, 3.0),
                                              (9.0, 0.4, 0.1, 2.0)])
def test_beta(a, b, loc, scale):
    x = loc + scale * np.array([0.1, 0.45, 0.8])
    check(st.beta.logpdf, ss.beta.logpdf, [x, a, b, loc, scale], (0, 1, 2, 3, 4))
    check(st.beta.pdf, ss.beta.pdf, [x, a, b, loc, scale], (0, 1, 2, 3, 4))


@pytest.mark.parametrize("a, b, loc, scale", [(0.7, 1.5, 0.0, 1.0), (2.5, 3.0, -1.0, 3.0),
                                              (9.0, 0.4, 0.1, 2.0), (1.0, 1.0, 0.5, 0.5)])
def test_beta_cdf_and_sf(a, b, loc, scale):
    x = loc + scale * np.array([-0.3, 0.1, 0.45, 0.8, 1.2])  # two points outside the support
    check(st.beta.cdf, ss.beta.cdf, [x, a, b, loc, scale], (0, 3, 4))
    check(st.beta.sf, ss.beta.sf, [x, a, b, loc, scale], (0, 3, 4))


def test_beta_cdf_in_a_or_b_is_refused():
    for argnum in (1, 2):
        with pytest.raises(asd.UnsupportedError, match="beta_cdf with a traced a or b"):
            asd.subgrad(st.beta.cdf, argnums=argnum)(0.3, 2.0, 3.0)
        with pytest.raises(asd.UnsupportedError, match="beta_sf with a traced a or b"):
            asd.subgrad(st.beta.sf, argnums=argnum)(0.3, 2.0, 3.0)


def _mp_cdf(dist: str, x, shapes, loc, scale):
    """scipy's cdf by mpmath (the support clipped), at the working precision."""
    z = (x - loc) / scale
    if dist == "gamma":
        return mp.gammainc(shapes[0], 0, max(z, 0), regularized=True)
    return mp.betainc(shapes[0], shapes[1], 0, min(max(z, 0), 1), regularized=True)


def _one_sided(dist: str, point, v, shapes) -> float:
    """The one-sided derivative of the cdf in ``(x, loc, scale)`` along ``v``: mpmath's
    difference quotient at 120 digits with a step of 1e-80."""
    with mp.workdps(120):
        h = mp.mpf("1e-80")
        p = [mp.mpf(float(t)) for t in point]
        q = [t + h * mp.mpf(float(d)) for t, d in zip(p, v, strict=True)]
        return float((_mp_cdf(dist, q[0], shapes, q[1], q[2])
                      - _mp_cdf(dist, p[0], shapes, p[1], p[2])) / h)


@settings(max_examples=60, deadline=None)
@given(hst.sampled_from(["gamma", "beta"]), hst.sampled_from([1.0, 1.5, 2.0, 3.0]),
       hst.sampled_from([1.0, 1.5, 2.0, 3.0]), hst.sampled_from(["lower", "upper", "outside"]),
       hst.sampled_from([-0.75, 0.0, 1.25]), hst.sampled_from([0.5, 1.0, 2.0]),
       hst.lists(hst.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]), min_size=3, max_size=3))
def test_cdfs_at_the_support_edges_along_rays_in_x_loc_scale(dist, a, b, where, loc, scale, v):
    """The edges x = loc, x = loc + scale (a, b >= 1 there) and a point outside: the Dini
    derivative in ``(x, loc, scale)`` and the gradient the ray selects, dotted with the
    direction, equal mpmath's one-sided difference quotient along the ray."""
    v = np.array(v)
    if not v.any():
        v[0] = 1.0
    shapes = (a,) if dist == "gamma" else (a, b)
    edge = {"lower": loc, "upper": loc + scale, "outside": loc - 0.5}[where]
    cdf = getattr(st, dist).cdf
    point = np.array([edge, loc, scale])
    f = lambda p: cdf(p[0], *shapes, p[1], p[2])  # noqa: E731
    want = _one_sided(dist, point, v, shapes)
    _, dini = asd.directional(f)(point, v)
    np.testing.assert_allclose(dini, want, rtol=1e-12, atol=1e-14)
    g = asd.subgrad(f, direction=v)(point)
    np.testing.assert_allclose(g @ v, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("a, b, x", [(0.5, 2.0, 0.0), (2.0, 0.5, 1.0), (0.5, 0.5, 1.0)])
def test_beta_cdf_at_an_edge_with_infinite_density_is_not_lipschitz(a, b, x):
    for v in (1.0, -1.0):
        with pytest.raises(asd.NotLipschitzError, match=rf"beta_cdf.*edge z = {x:g}.*infinite"):
            asd.subgrad(lambda x: st.beta.cdf(x, a, b), direction=v)(x)
    # off the edge it differentiates, outside the support with slope 0
    g = asd.subgrad(lambda x: st.beta.cdf(x, a, b).sum())(np.array([-0.5, 0.3, 1.5]))
    np.testing.assert_allclose(g, [0.0, ss.beta.pdf(0.3, a, b), 0.0], rtol=1e-13)


def test_beta_outside_the_support_is_refused():
    with pytest.raises(asd.NonFiniteError, match="outside the support"):
        asd.subgrad(lambda x: st.beta.logpdf(x, 2.0, 2.0).sum())(np.array([0.5, 1.5]))


# ----- Poisson -----

@pytest.mark.parametrize("mu, loc", [(0.3, 0), (2.5, 0), (40.0, 3)])
def test_poisson(mu, loc):
    k = np.array([3, 4, 7, 12])
    check(lambda mu: st.poisson.logpmf(k, mu, loc), lambda mu: ss.poisson.logpmf(k, mu, loc),
          [mu], (0,))
    check(lambda mu: st.poisson.pmf(k, mu, loc), lambda mu: ss.poisson.pmf(k, mu, loc),
          [mu], (0,))


def test_poisson_at_mu_zero_and_refusals():
    # k = 0: logpmf = -mu, slope -1 at mu = 0
    assert asd.subgrad(lambda mu: st.poisson.logpmf(0, mu))(0.0) == -1.0
    with pytest.raises(asd.UnsupportedError, match="counts are integers"):
        asd.subgrad(lambda k: st.poisson.logpmf(k, 2.0))(3.0)
    with pytest.raises(asd.NonFiniteError, match="outside the support"):
        st.poisson.logpmf(np.array([1.5]), 2.0)


# ----- multivariate normal -----

COV = np.array([[2.0, 0.3, -0.4], [0.3, 1.0, 0.2], [-0.4, 0.2, 0.7]])
MEAN = np.array([0.2, -0.1, 0.5])
POINTS = np.array([[0.1, 0.2, 0.3], [1.0, -1.0, 0.0], [0.5, 0.5, -2.0]])


@pytest.mark.parametrize("x", [POINTS, POINTS[1]], ids=["n points", "one point"])
@pytest.mark.parametrize("method", ["logpdf", "pdf"])
def test_multivariate_normal_in_x_and_mean(x, method):
    check(getattr(st.multivariate_normal, method), getattr(ss.multivariate_normal, method),
          [x, MEAN, COV], (0, 1))


@pytest.mark.parametrize("x", [POINTS, POINTS[2]], ids=["n points", "one point"])
def test_multivariate_normal_in_cov_along_symmetric_perturbations(x):
    g = asd.subgrad(lambda C: st.multivariate_normal.logpdf(x, MEAN, C).sum())(COV)
    rng = np.random.default_rng(0)
    h = 1e-6
    for _ in range(5):
        E = rng.standard_normal((3, 3))
        E = E + E.T
        fd = (ss.multivariate_normal.logpdf(x, MEAN, COV + h * E).sum()
              - ss.multivariate_normal.logpdf(x, MEAN, COV - h * E).sum()) / (2 * h)
        np.testing.assert_allclose(np.sum(g * E), fd, rtol=1e-6)


def test_multivariate_normal_diagonal_and_scalar_cov():
    d = np.array([2.0, 0.5, 1.5])
    check(lambda x, d: st.multivariate_normal.logpdf(x, MEAN, d),
          lambda x, d: ss.multivariate_normal.logpdf(x, MEAN, d), [POINTS, d], (0, 1))
    check(lambda x, s: st.multivariate_normal.logpdf(x, MEAN, s),
          lambda x, s: ss.multivariate_normal.logpdf(x, MEAN, s), [POINTS, 1.7], (0, 1))
    np.testing.assert_allclose(st.multivariate_normal.logpdf(POINTS),
                               ss.multivariate_normal.logpdf(POINTS, np.zeros(3)), rtol=1e-13)


def test_multivariate_normal_refuses_a_cov_that_is_not_positive_definite():
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(asd.NotLipschitzError, match="not positive definite"):
        asd.subgrad(lambda C: st.multivariate_normal.logpdf(np.zeros(2), None, C))(bad)


# ----- Dirichlet -----

ALPHA = np.array([1.5, 0.7, 3.0])


def _dirichlet_ref(x, alpha):
    """The log-density as a formula (scipy's own refuses points off the simplex, which central
    differences in x leave)."""
    a = np.asarray(alpha).reshape((-1,) + (1,) * (np.ndim(x) - 1))
    return (sc.xlogy(a - 1, x).sum(axis=0) + sc.gammaln(np.sum(alpha))
            - sc.gammaln(alpha).sum())


@pytest.mark.parametrize("x", [np.array([0.2, 0.3, 0.5]),
                               np.array([[0.2, 0.6], [0.3, 0.1], [0.5, 0.3]])],
                         ids=["one point", "points along axis 1"])
def test_dirichlet(x):
    for alpha in (ALPHA, np.array([4.0, 2.0, 9.0])):
        np.testing.assert_allclose(st.dirichlet.logpdf(x, alpha), ss.dirichlet.logpdf(x, alpha),
                                   rtol=1e-13)
        np.testing.assert_allclose(st.dirichlet.pdf(x, alpha), ss.dirichlet.pdf(x, alpha),
                                   rtol=1e-13)
        check(st.dirichlet.logpdf, _dirichlet_ref, [x, alpha], (0, 1))


def test_dirichlet_with_k_minus_one_components():
    x = np.array([0.2, 0.3])
    np.testing.assert_allclose(st.dirichlet.logpdf(x, ALPHA), ss.dirichlet.logpdf(x, ALPHA),
                               rtol=1e-13)
    g = asd.subgrad(lambda x: st.dirichlet.logpdf(x, ALPHA))(x)
    full = lambda x: _dirichlet_ref(np.append(x, 1 - x.sum()), ALPHA)  # noqa: E731
    np.testing.assert_allclose(g, _central(full, [x], 0), rtol=1e-6)


def test_dirichlet_checks_the_simplex_like_scipy():
    with pytest.raises(ValueError, match="sum to 1"):
        st.dirichlet.logpdf(np.array([0.2, 0.3, 0.6]), ALPHA)


def test_the_stats_functions_accept_plain_numbers():
    assert st.norm.logpdf(0.0) == ss.norm.logpdf(0.0)
    assert repr(st.norm) == "<asd.scipy.stats.norm>"
