"""Log-densities and cdfs of common distributions on traced arrays: ``import asd.scipy.stats
as st``, then ``st.norm.logpdf(x, loc, scale)`` as in ``scipy.stats``.

Each function is a composition of traced operations (`asd.library.special` and the library's
smooth functions and linear algebra), so a likelihood differentiates in every argument that
is traced: data, locations, scales, shapes, means and covariances. The parametrizations are
scipy's (``loc``, ``scale``, ``df``, ``a``, ``b``, ``mu``, ``mean``, ``cov``, ``alpha``), and
on plain arrays every function returns scipy's value (up to rounding).

Where scipy returns NaN (a nonpositive scale, a nonpositive shape) this raises
`NonFiniteError`, as asd does for every non-finite value; where scipy returns -inf (a point
outside the support) the log-density raises `NonFiniteError` too, since nothing is
differentiable there. Refused in a traced argument, with the reason:

- ``t.cdf``/``t.sf`` in ``df``, ``gamma.cdf``/``gamma.sf`` in ``a`` and
  ``beta.cdf``/``beta.sf`` in ``a`` and ``b``: the derivative of the integral in its
  parameter has no closed form here (`UnsupportedError`); in ``x``, ``loc`` and ``scale``
  they differentiate (the derivative is the density, 0 outside the support);
- the gamma and beta cdfs at an edge of the support where the density is infinite
  (``x = loc`` with ``a < 1``, ``x = loc + scale`` with ``b < 1``): not Lipschitz
  (`NotLipschitzError`). Where the density at the edge is finite and nonzero (``a = 1``,
  ``b = 1``) the cdf has a kink there, decided along the ray like relu's;
- ``poisson.logpmf`` in ``k``: a count is an integer, not a differentiable argument.
"""

from __future__ import annotations

import numpy as np

from asd.errors import NonFiniteError, UnsupportedError
from asd.extend import is_traced
from asd.library import linalg, smooth, special

_LOG_2PI = float(np.log(2.0 * np.pi))


def _arg(v):
    """A traced value as it is; anything else as a float array."""
    return v if is_traced(v) else np.asarray(v, dtype=float)


def _value(v) -> np.ndarray:
    return np.asarray(v.value if is_traced(v) else v, dtype=float)


def _positive(where: str, name: str, v) -> None:
    bad = ~(_value(v) > 0)
    if bad.any():
        raise NonFiniteError(
            f"{where}: {name} must be positive, but {int(bad.sum())} entries are not (e.g. "
            f"{_value(v)[bad].ravel()[:3].tolist()}); scipy returns NaN there.")


def _support(where: str, bad, what: str) -> None:
    if np.any(bad):
        raise NonFiniteError(
            f"{where}: {int(np.sum(bad))} points lie outside the support ({what}), where the "
            "log-density is -inf (scipy's value) and nothing is differentiable.")


def _standardize(where: str, x, loc, scale):
    _positive(where, "scale", scale)
    return smooth.divide(smooth.subtract(_arg(x), _arg(loc)), _arg(scale))


class _Distribution:
    name = ""

    def __repr__(self) -> str:
        return f"<asd.scipy.stats.{self.name}>"


# ----- normal -----

class _Norm(_Distribution):
    """The normal distribution ``N(loc, scale**2)``."""

    name = "norm"

    def logpdf(self, x, loc=0.0, scale=1.0):
        """``-z**2/2 - log(scale) - log(2 pi)/2`` with ``z = (x - loc) / scale``.

        >>> import numpy as np, asd
        >>> import asd.scipy.stats as st
        >>> asd.subgrad(lambda p: st.norm.logpdf(1.0, p[0], p[1]))(np.array([0.0, 1.0]))
        array([1., 0.])
        """
        z = _standardize("norm.logpdf", x, loc, scale)
        return smooth.subtract(smooth.multiply(smooth.multiply(z, z), -0.5),
                               smooth.add(smooth.log(_arg(scale)), 0.5 * _LOG_2PI))

    def pdf(self, x, loc=0.0, scale=1.0):
        return smooth.exp(self.logpdf(x, loc, scale))

    def cdf(self, x, loc=0.0, scale=1.0):
        """``ndtr((x - loc) / scale)``."""
        return special.ndtr(_standardize("norm.cdf", x, loc, scale))

    def logcdf(self, x, loc=0.0, scale=1.0):
        """``log_ndtr((x - loc) / scale)``, accurate far in the left tail."""
        return special.log_ndtr(_standardize("norm.logcdf", x, loc, scale))

    def sf(self, x, loc=0.0, scale=1.0):
        """``ndtr(-(x - loc) / scale)``."""
        return special.ndtr(smooth.negative(_standardize("norm.sf", x, loc, scale)))

    def logsf(self, x, loc=0.0, scale=1.0):
        return special.log_ndtr(smooth.negative(_standardize("norm.logsf", x, loc, scale)))


# ----- Student t -----

class _T(_Distribution):
    """Student's t with ``df`` degrees of freedom, shifted by ``loc`` and scaled by ``scale``."""

    name = "t"

    def logpdf(self, x, df, loc=0.0, scale=1.0):
        """``gammaln((df+1)/2) - gammaln(df/2) - log(df pi)/2 - log(scale)
        - (df+1)/2 log1p(z**2/df)``: differentiable in ``x``, ``df``, ``loc`` and ``scale``."""
        z = _standardize("t.logpdf", x, loc, scale)
        _positive("t.logpdf", "df", df)
        df = _arg(df)
        half = smooth.multiply(smooth.add(df, 1.0), 0.5)
        norm = smooth.subtract(special.gammaln(half),
                               special.gammaln(smooth.multiply(df, 0.5)))
        norm = smooth.subtract(norm, smooth.multiply(smooth.log(smooth.multiply(df, np.pi)),
                                                     0.5))
        norm = smooth.subtract(norm, smooth.log(_arg(scale)))
        tail = smooth.log1p(smooth.divide(smooth.multiply(z, z), df))
        return smooth.subtract(norm, smooth.multiply(half, tail))

    def pdf(self, x, df, loc=0.0, scale=1.0):
        return smooth.exp(self.logpdf(x, df, loc, scale))

    def cdf(self, x, df, loc=0.0, scale=1.0):
        """``stdtr(df, z)``: differentiable in ``x``, ``loc``, ``scale``; ``df`` constant."""
        _positive("t.cdf", "df", df)
        return special.stdtr(_arg(df), _standardize("t.cdf", x, loc, scale))

    def sf(self, x, df, loc=0.0, scale=1.0):
        _positive("t.sf", "df", df)
        return special.stdtr(_arg(df), smooth.negative(_standardize("t.sf", x, loc, scale)))


# ----- gamma -----

class _Gamma(_Distribution):
    """The gamma distribution with shape ``a`` (scipy's ``gamma(a, loc, scale)``)."""

    name = "gamma"

    def logpdf(self, x, a, loc=0.0, scale=1.0):
        """``xlogy(a - 1, z) - z - gammaln(a) - log(scale)`` for ``z = (x - loc) / scale``.

        At ``z = 0`` with ``a`` traced it is refused (``xlogy`` at ``(0, 0)``: the density jumps
        between 0, 1 and infinity as ``a`` crosses 1)."""
        z = _standardize("gamma.logpdf", x, loc, scale)
        _positive("gamma.logpdf", "a", a)
        _support("gamma.logpdf", _value(z) < 0, "x >= loc")
        a = _arg(a)
        out = smooth.subtract(special.xlogy(smooth.subtract(a, 1.0), z), z)
        return smooth.subtract(out, smooth.add(special.gammaln(a), smooth.log(_arg(scale))))

    def pdf(self, x, a, loc=0.0, scale=1.0):
        return smooth.exp(self.logpdf(x, a, loc, scale))

    def cdf(self, x, a, loc=0.0, scale=1.0):
        """``gammainc(a, max(z, 0))``: differentiable in ``x``, ``loc``, ``scale``; ``a``
        constant. Below ``loc`` it is 0 (slope 0); at ``x = loc`` the kink (``a = 1``) is
        decided along the ray like relu's, and for ``a < 1`` the slope there is infinite
        (`NotLipschitzError`)."""
        _positive("gamma.cdf", "a", a)
        return special.gamma_cdf(_arg(a), _standardize("gamma.cdf", x, loc, scale))

    def sf(self, x, a, loc=0.0, scale=1.0):
        """``gammaincc(a, max(z, 0))``, as `cdf`."""
        _positive("gamma.sf", "a", a)
        return special.gamma_sf(_arg(a), _standardize("gamma.sf", x, loc, scale))


# ----- beta -----

class _Beta(_Distribution):
    """The beta distribution with shapes ``a``, ``b`` on ``[loc, loc + scale]``."""

    name = "beta"

    def logpdf(self, x, a, b, loc=0.0, scale=1.0):
        """``xlogy(a - 1, z) + xlog1py(b - 1, -z) - betaln(a, b) - log(scale)``."""
        z = _standardize("beta.logpdf", x, loc, scale)
        _positive("beta.logpdf", "a", a)
        _positive("beta.logpdf", "b", b)
        zv = _value(z)
        _support("beta.logpdf", (zv < 0) | (zv > 1), "loc <= x <= loc + scale")
        a, b = _arg(a), _arg(b)
        out = smooth.add(special.xlogy(smooth.subtract(a, 1.0), z),
                         special.xlog1py(smooth.subtract(b, 1.0), smooth.negative(z)))
        return smooth.subtract(out, smooth.add(special.betaln(a, b), smooth.log(_arg(scale))))

    def pdf(self, x, a, b, loc=0.0, scale=1.0):
        return smooth.exp(self.logpdf(x, a, b, loc, scale))

    def cdf(self, x, a, b, loc=0.0, scale=1.0):
        """``betainc(a, b, clip(z, 0, 1))``: differentiable in ``x``, ``loc``, ``scale`` (the
        slope is the density, 0 outside ``[loc, loc + scale]``); ``a``, ``b`` constant. At
        ``x = loc`` the kink (``a = 1``: slopes 0 and ``b / scale``) is decided along the ray,
        ``a > 1`` is smooth and ``a < 1`` refused (infinite slope: `NotLipschitzError`); at
        ``x = loc + scale`` the same with ``b``.

        >>> import asd
        >>> import asd.scipy.stats as st
        >>> round(float(asd.subgrad(lambda x: st.beta.cdf(x, 1.0, 3.0), direction=1.0)(0.0)), 12)
        3.0
        """
        _positive("beta.cdf", "a", a)
        _positive("beta.cdf", "b", b)
        return special.beta_cdf(_arg(a), _arg(b), _standardize("beta.cdf", x, loc, scale))

    def sf(self, x, a, b, loc=0.0, scale=1.0):
        """``betaincc(a, b, clip(z, 0, 1))``, as `cdf`."""
        _positive("beta.sf", "a", a)
        _positive("beta.sf", "b", b)
        return special.beta_sf(_arg(a), _arg(b), _standardize("beta.sf", x, loc, scale))


# ----- Poisson -----

class _Poisson(_Distribution):
    """The Poisson distribution with mean ``mu`` (counts ``k`` constant integers)."""

    name = "poisson"

    def logpmf(self, k, mu, loc=0):
        """``xlogy(k, mu) - gammaln(k + 1) - mu`` for ``k = k - loc``: differentiable in
        ``mu``; at ``mu = 0`` it is ``-mu`` for ``k = 0`` (slope -1)."""
        if is_traced(k) or is_traced(loc):
            raise UnsupportedError(
                "poisson.logpmf with a traced k or loc: counts are integers, not "
                "differentiable arguments. Pass them as constants.")
        kk = np.asarray(k, dtype=float) - float(loc)
        _support("poisson.logpmf", (kk < 0) | (kk != np.floor(kk)), "k - loc in 0, 1, 2, ...")
        bad = ~(_value(mu) >= 0)
        if bad.any():
            raise NonFiniteError(f"poisson.logpmf: mu must be nonnegative, got "
                                 f"{_value(mu)[bad].ravel()[:3].tolist()} (scipy returns NaN)")
        mu = _arg(mu)
        out = smooth.subtract(special.xlogy(kk, mu), special.gammaln(kk + 1.0))
        return smooth.subtract(out, mu)

    def pmf(self, k, mu, loc=0):
        return smooth.exp(self.logpmf(k, mu, loc))


# ----- multivariate normal -----

class _MultivariateNormal(_Distribution):
    """The multivariate normal ``N(mean, cov)``; ``x`` of shape ``(k,)`` or ``(n, k)``."""

    name = "multivariate_normal"

    def logpdf(self, x, mean=None, cov=1):
        """``-(k log(2 pi) + log det cov + (x - mean)ᵀ cov⁻¹ (x - mean)) / 2`` through the
        Cholesky factor of ``cov`` (its lower triangle, as scipy reads it): differentiable in
        ``x``, ``mean`` and ``cov``. A 1-D ``cov`` is a diagonal, a scalar a multiple of the
        identity. A ``cov`` that is not positive definite is refused.

        >>> import numpy as np, asd
        >>> import asd.scipy.stats as st
        >>> asd.subgrad(lambda m: st.multivariate_normal.logpdf(np.ones(2), m, np.eye(2)))(
        ...     np.zeros(2))
        array([1., 1.])
        """
        x = _arg(x)
        k = np.shape(x)[-1] if np.ndim(x) else 1
        if np.ndim(x) == 0:
            x = smooth.reshape(x, (1,))
        mean = np.zeros(k) if mean is None else _arg(mean)
        if np.shape(mean) != (k,):
            raise ValueError(f"multivariate_normal.logpdf: mean of shape {np.shape(mean)} for "
                             f"points of dimension {k}")
        cov = _arg(cov)
        if np.ndim(cov) < 2:
            cov = smooth.multiply(np.eye(k), cov)
        if np.shape(cov) != (k, k):
            raise ValueError(f"multivariate_normal.logpdf: cov of shape {np.shape(cov)} for "
                             f"points of dimension {k}")
        L = linalg.cholesky(cov)
        d = smooth.subtract(x, mean)  # (k,) or (n, k)
        y = linalg.solve(L, smooth.transpose(d) if np.ndim(d) == 2 else d)
        maha = smooth.sum(smooth.multiply(y, y), axis=0)
        logdet = smooth.multiply(smooth.sum(smooth.log(linalg.diagonal(L))), 2.0)
        return smooth.multiply(smooth.add(smooth.add(maha, logdet), k * _LOG_2PI), -0.5)

    def pdf(self, x, mean=None, cov=1):
        return smooth.exp(self.logpdf(x, mean, cov))


# ----- Dirichlet -----

class _Dirichlet(_Distribution):
    """The Dirichlet distribution with concentrations ``alpha``; ``x`` holds the components
    along its first axis (scipy's layout), all ``k`` of them or the first ``k - 1``."""

    name = "dirichlet"

    def logpdf(self, x, alpha):
        """``sum((alpha - 1) log x) + gammaln(sum alpha) - sum gammaln(alpha)``:
        differentiable in ``x`` and ``alpha``."""
        _positive("dirichlet.logpdf", "alpha", alpha)
        alpha = _arg(alpha)
        if np.ndim(alpha) != 1:
            raise ValueError("dirichlet.logpdf: alpha must be one-dimensional")
        k = np.shape(alpha)[0]
        x = _arg(x)
        if np.shape(x)[0] == k - 1:
            rest = smooth.subtract(1.0, smooth.sum(x, axis=0, keepdims=True))
            x = smooth.concatenate([x, rest], axis=0)
        if np.shape(x)[0] != k:
            raise ValueError(f"dirichlet.logpdf: x has {np.shape(x)[0]} components along its "
                             f"first axis, alpha {k}")
        xv = _value(x)
        if np.any(xv < 0) or np.any(xv > 1):
            raise ValueError("dirichlet.logpdf: the components must lie in [0, 1]")
        if not np.allclose(xv.sum(axis=0), 1.0, atol=1e-10):
            raise ValueError("dirichlet.logpdf: the components must sum to 1")
        am1 = smooth.reshape(smooth.subtract(alpha, 1.0), (k,) + (1,) * (np.ndim(x) - 1))
        terms = smooth.sum(special.xlogy(am1, x), axis=0)
        lnb = smooth.subtract(smooth.sum(special.gammaln(alpha)),
                              special.gammaln(smooth.sum(alpha)))
        return smooth.subtract(terms, lnb)

    def pdf(self, x, alpha):
        return smooth.exp(self.logpdf(x, alpha))


norm = _Norm()
t = _T()
gamma = _Gamma()
beta = _Beta()
poisson = _Poisson()
multivariate_normal = _MultivariateNormal()
dirichlet = _Dirichlet()

__all__ = ["beta", "dirichlet", "gamma", "multivariate_normal", "norm", "poisson", "t"]
