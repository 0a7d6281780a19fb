"""scipy.special on traced arrays: the gamma family, the error functions, the normal
distribution's functions, logistic functions, ``x log y``, the incomplete gamma, beta and
Student t integrals in their integration variable, and the gamma and beta cdfs on the whole
line (for ``asd.scipy.stats``).

Importing this module registers the scipy.special ufuncs for numpy dispatch, so
``scipy.special.gammaln(x)`` on a traced array runs the rules below. It is imported the first
time a traced array meets a scipy.special ufunc (`asd.extend.register_lazy_ufuncs`), so
``import asd`` does not import scipy. The functions that are not ufuncs (``polygamma``,
``logsumexp``, ``softmax``, ``log_softmax``) convert their arguments with ``np.asarray`` and
cannot see a traced array: call them from ``asd.scipy.special``.

Every scipy.special function here is smooth (analytic) on its domain, so its rule meets no
tie; each rule returns its closed-form derivative (digamma, polygamma, ``2/sqrt(pi)
exp(-x**2)``, ...). The whole-line cdfs (``gamma_cdf``, ``beta_cdf`` and their ``_sf``) are
constant outside the support and meet ties at its edges, decided along the ray where the
density there is finite. At the domain's edge each refuses, naming the node and the entries:

- poles (gamma, gammaln, digamma, polygamma at 0, -1, -2, ...; beta and betaln where an
  argument is one), values outside the domain (logit at 0 and 1, erfinv at +-1, log_ndtr's
  argument is fine everywhere) and overflow: `NonFiniteError`;
- a finite value with an infinite slope (gammainc(a, x) at x = 0 for a < 1, betainc(a, b, x)
  at x = 0 for a < 1 and at x = 1 for b < 1, the cdfs at those edges) and ``xlogy(x,
  y)`` at ``x = y = 0`` with ``x`` traced (``x log y`` is not continuous there: it takes every
  value nearby): `NotLipschitzError`. ``xlogy(0, y)`` for ``y > 0`` is 0 with derivative
  ``log y`` in ``x`` and 0 in ``y``, and with ``x`` a constant 0 it is 0 for every ``y``;
- ``gammainc``/``gammaincc`` in ``a``, ``betainc``/``betaincc`` in ``a`` and ``b`` and
  ``stdtr`` in ``df`` have no closed-form derivative here: a traced parameter raises
  `UnsupportedError` (pass them as constants).

The rules run on numpy arrays (``array_api=False``), except ``erf`` and ``erfc``, which run
on torch and JAX through each library's own kernel; ``expit`` is the library's ``sigmoid``,
which also runs on torch and JAX.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np
import scipy.special as sc

from asd.errors import NonFiniteError, NotLipschitzError, UnsupportedError
from asd.extend import (
    Diagonal,
    FanIn,
    Primitive,
    Zero,
    defsmooth,
    is_traced,
    kernel,
    namespace,
    ray_compare,
    read_value,
    refuse_where,
    register_kernel,
    register_numpy,
)

from . import smooth

_SQRT_PI = float(np.sqrt(np.pi))
_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


def _value(x) -> np.ndarray:
    return np.asarray(x.value if is_traced(x) else x)


def _examples(*arrays, bad) -> str:
    picked = [np.asarray(a)[bad].ravel()[:3].tolist() for a in arrays]
    return ", ".join(str(p) for p in picked) if len(picked) > 1 else str(picked[0])


def _poles(name: str, *args) -> None:
    """Refuse entries at 0, -1, -2, ... (the poles of the gamma function) in any of ``args``."""
    for x in args:
        x = np.asarray(x)
        bad = (x <= 0) & (x == np.floor(x))
        refuse_where(bad, lambda x=x, bad=bad: NonFiniteError(
            f"{name} has a pole at the nonpositive integers and {int(bad.sum())} input "
            f"entries sit there (e.g. {_examples(x, bad=bad)}); its value and slope are "
            "infinite there. Keep the argument away from 0, -1, -2, ..."))


def _finite(name: str, ans, slopes, inputs, domain: str) -> None:
    """NonFiniteError where the value is not finite, NotLipschitzError where only a slope is."""
    ans = np.asarray(ans)

    def inputs_there():
        return [np.broadcast_to(np.asarray(x), ans.shape) for x in inputs]

    bad = ~np.isfinite(ans)
    refuse_where(bad, lambda: NonFiniteError(
        f"{name} is not finite at {int(bad.sum())} entries (inputs there: "
        f"{_examples(*inputs_there(), bad=bad)}): outside its domain, at a pole or "
        f"overflowing. {domain}"))
    for d in slopes:
        bad = ~np.isfinite(np.broadcast_to(d, ans.shape))
        refuse_where(bad, lambda bad=bad: NotLipschitzError(
            f"{name} has an infinite slope at {int(bad.sum())} entries (inputs there: "
            f"{_examples(*inputs_there(), bad=bad)}), so it is not Lipschitz there. {domain}"))


def _like(d, ans) -> np.ndarray:
    """The derivative in the answer's float type, broadcast to its shape."""
    ans = np.asarray(ans)
    dtype = ans.dtype if np.issubdtype(ans.dtype, np.floating) else np.float64
    return np.asarray(np.broadcast_to(d, ans.shape), dtype=dtype)


# ----- one-argument functions: impl, derivative(x, ans), pole check, domain sentence -----

def _defunary(name: str, impl, derivative, domain: str, poles: bool = False) -> Primitive:
    prim = Primitive(name, impl)

    def rule(xs, dxs):
        x = np.asarray(xs[0])
        if poles:
            _poles(name, x)
        ans = np.asarray(impl(x))
        with np.errstate(all="ignore"):
            d = derivative(x, ans)
        _finite(name, ans, (d,), (x,), domain)
        return ans, Diagonal(_like(d, ans), x.shape)

    rule.__name__ = f"{name}_rule"
    prim.defrule(rule)
    return prim


_GAMMA_DOMAIN = "Keep the argument away from the poles 0, -1, -2, ... (and from overflow)."

gammaln_p = _defunary("gammaln", sc.gammaln, lambda x, ans: sc.digamma(x), _GAMMA_DOMAIN,
                      poles=True)
gamma_p = _defunary("gamma", sc.gamma, lambda x, ans: ans * sc.digamma(x), _GAMMA_DOMAIN,
                    poles=True)
digamma_p = _defunary("digamma", sc.digamma, lambda x, ans: sc.polygamma(1, x), _GAMMA_DOMAIN,
                      poles=True)
def _jax_special(name: str) -> Callable:
    def fn(x):
        import jax.scipy.special as jsp

        return getattr(jsp, name)(x)

    return fn


for _name in ("erf", "erfc"):
    register_kernel(_name, "numpy", getattr(sc, _name))
    register_kernel(_name, "torch", operator.methodcaller(_name))  # tensor.erf()
    register_kernel(_name, "jax", _jax_special(_name))


def _error_function(name: str, sign: float) -> Primitive:
    """erf or erfc on every array library: the array API has no error function, so each
    library's own kernel gives the value (scipy's on numpy); the slope
    ``sign * 2/sqrt(pi) * exp(-x**2)`` is finite everywhere, so there is nothing to refuse
    (gelu's exact form runs natively on torch through this)."""
    def impl(x):
        return kernel(name, namespace(x))(x)

    def slope(x, ans):
        return (sign * 2.0 / _SQRT_PI) * namespace(x).exp(-x * x)

    impl.__name__ = name
    return defsmooth(name, impl, slope, array_api=True)


erf_p = _error_function("erf", 1.0)
erfc_p = _error_function("erfc", -1.0)
erfinv_p = _defunary("erfinv", sc.erfinv, lambda x, ans: (_SQRT_PI / 2.0) * np.exp(ans * ans),
                     "erfinv is finite on the open interval (-1, 1).")
erfcinv_p = _defunary("erfcinv", sc.erfcinv,
                      lambda x, ans: (-_SQRT_PI / 2.0) * np.exp(ans * ans),
                      "erfcinv is finite on the open interval (0, 2).")
logit_p = _defunary("logit", sc.logit, lambda x, ans: 1.0 / (x * (1.0 - x)),
                    "logit is finite on the open interval (0, 1).")
ndtr_p = _defunary("ndtr", sc.ndtr, lambda x, ans: np.exp(-0.5 * x * x) / _SQRT_2PI, "")


def _log_ndtr_slope(x, ans):
    """pdf / cdf: ``sqrt(2/pi) / erfcx(-x/sqrt(2))`` for ``x < 0`` (no 0/0 and no cancellation
    far in the left tail), ``exp(-x**2/2 - log_ndtr(x)) / sqrt(2 pi)`` otherwise."""
    left = np.sqrt(2.0 / np.pi) / sc.erfcx(-np.minimum(x, 0.0) / np.sqrt(2.0))
    return np.where(x < 0, left, np.exp(-0.5 * x * x - ans) / _SQRT_2PI)


log_ndtr_p = _defunary("log_ndtr", sc.log_ndtr, _log_ndtr_slope, "")
ndtri_p = _defunary("ndtri", sc.ndtri, lambda x, ans: _SQRT_2PI * np.exp(0.5 * ans * ans),
                    "ndtri is finite on the open interval (0, 1).")


# ----- polygamma: the order a constant nonnegative integer -----

polygamma_p = Primitive("polygamma", lambda x, n: sc.polygamma(n, x))


@polygamma_p.defrule
def polygamma_rule(xs, dxs, n):
    x = np.asarray(xs[0])
    _poles(f"polygamma({n}, x)", x)
    ans = np.asarray(sc.polygamma(n, x))
    d = sc.polygamma(n + 1, x)
    _finite(f"polygamma({n}, x)", ans, (d,), (x,), _GAMMA_DOMAIN)
    return ans, Diagonal(_like(d, ans), x.shape)


def polygamma(n, x):
    """The ``n``-th derivative of digamma (``n`` a constant nonnegative integer); its
    derivative is ``polygamma(n + 1, x)``. Poles at 0, -1, -2, ... are refused.

    >>> import numpy as np, asd
    >>> from asd.library.special import polygamma
    >>> round(float(asd.subgrad(lambda x: polygamma(1, x))(1.0)), 12)  # -2 zeta(3)
    -2.404113806319
    """
    if is_traced(n):
        raise UnsupportedError("polygamma(n, x) with a traced order n: the order is an "
                               "integer, so pass it as a constant")
    orders = np.unique(np.asarray(n))
    if orders.size != 1 or orders[0] != int(orders[0]) or orders[0] < 0:
        raise UnsupportedError(f"polygamma(n, x) with n = {n!r}: asd takes one constant "
                               "nonnegative integer order per call")
    return polygamma_p(x, n=int(orders[0]))


# ----- two-argument functions: partials(a, b, ans) -> (d/da, d/db) -----

def _zero_where_constant(d, dx, ans):
    """The partial of an input that does not move is never used: zeros (no NaN leaks)."""
    return np.zeros(np.shape(ans)) if getattr(dx, "is_zero", False) else d


def _defbinary(name: str, impl, partials, domain: str, check=None) -> Primitive:
    prim = Primitive(name, impl)

    def rule(xs, dxs):
        a, b = (np.asarray(x) for x in xs)
        if check is not None:
            check(name, a, b, dxs)
        ans = np.asarray(impl(a, b))
        with np.errstate(all="ignore"):
            da, db = partials(a, b, ans)
        da = _zero_where_constant(da, dxs[0], ans)
        db = _zero_where_constant(db, dxs[1], ans)
        _finite(name, ans, (da, db), (a, b), domain)
        out = ans.shape
        return ans, FanIn(Diagonal(_like(da, ans), a.shape, out),
                          Diagonal(_like(db, ans), b.shape, out))

    rule.__name__ = f"{name}_rule"
    prim.defrule(rule)
    return prim


def _beta_check(name, a, b, dxs):
    _poles(name, a, b)
    if name != "beta":
        return
    s = np.asarray(a + b)
    bad = (s <= 0) & (s == np.floor(s))
    refuse_where(bad, lambda: UnsupportedError(
        f"beta(a, b) where a + b is a nonpositive integer ({int(bad.sum())} entries): the "
        "value is 0 and its derivative a limit of 0 * infinity that asd does not evaluate. "
        "Keep a + b away from 0, -1, -2, ..."))


def _beta_partials(a, b, ans):
    psi_ab = sc.digamma(a + b)
    return ans * (sc.digamma(a) - psi_ab), ans * (sc.digamma(b) - psi_ab)


def _betaln_partials(a, b, ans):
    psi_ab = sc.digamma(a + b)
    return sc.digamma(a) - psi_ab, sc.digamma(b) - psi_ab


beta_p = _defbinary("beta", sc.beta, _beta_partials, _GAMMA_DOMAIN, _beta_check)
betaln_p = _defbinary("betaln", sc.betaln, _betaln_partials,
                      "Keep a and b away from 0, -1, -2, ... (and a + b too).", _beta_check)


def _xlog_check(shift: float, what: str):
    """``x * log(shift + y)``: at ``x = 0``, ``shift + y = 0`` with ``x`` traced, refused."""
    def check(name, x, y, dxs):
        if getattr(dxs[0], "is_zero", False):
            return  # x constant: x = 0 gives 0 for every y; x != 0 is checked by _finite
        out = np.broadcast_shapes(x.shape, y.shape)
        xb, yb = np.broadcast_to(x, out), np.broadcast_to(y, out)
        bad = (xb == 0) & (shift + yb == 0)
        refuse_where(bad, lambda: NotLipschitzError(
            f"{name}(x, y) at x = 0, {what} ({int(bad.sum())} entries): x * log({what[:-4]}) "
            "takes every value near that point (it is 0 there but -inf for x > 0), so it "
            f"is not continuous. Keep {what[:-4]} > 0 where x moves, or make x a constant."))
    return check


def _xlogy_partials(x, y, ans):
    return np.log(y), np.where(x == 0, 0.0, x / np.where(x == 0, 1.0, y))


def _xlog1py_partials(x, y, ans):
    return np.log1p(y), np.where(x == 0, 0.0, x / np.where(x == 0, 1.0, 1.0 + y))


xlogy_p = _defbinary("xlogy", sc.xlogy, _xlogy_partials,
                     "xlogy(x, y) = x log(y) needs y > 0 where x is traced or nonzero.",
                     _xlog_check(0.0, "y = 0"))
xlog1py_p = _defbinary("xlog1py", sc.xlog1py, _xlog1py_partials,
                       "xlog1py(x, y) = x log(1 + y) needs y > -1 where x is traced or nonzero.",
                       _xlog_check(1.0, "1 + y = 0"))


# ----- integrals in their integration variable, the parameters constant -----

def _constant_parameters(name: str, what: str, dxs) -> None:
    """Refuse a traced parameter: only the integration variable (the last input) may move
    (which inputs move is known when the program is traced, not a value)."""
    for dp in dxs[:-1]:
        if not getattr(dp, "is_zero", False):
            raise UnsupportedError(
                f"{name} with a traced {what}: asd has no closed-form derivative in {what} "
                f"(only in the integration variable). Pass {what} as a constant (a plain "
                "array, or asd.stop_gradient of it).")


def _defintegral(name: str, impl, density, what: str, domain: str) -> Primitive:
    """``impl(*params, x)``, differentiable in ``x`` with derivative ``density(*params, x)``;
    the parameters (named ``what`` in the refusal) must be constant."""
    prim = Primitive(name, impl)

    def rule(xs, dxs):
        *ps, x = (np.asarray(v) for v in xs)
        _constant_parameters(name, what, dxs)
        ans = np.asarray(impl(*ps, x))
        with np.errstate(all="ignore"):
            d = density(*ps, x)
        _finite(name, ans, (d,), (*ps, x), domain)
        out = ans.shape
        return ans, FanIn(*(Zero(p.shape, out) for p in ps),
                          Diagonal(_like(d, ans), x.shape, out))

    rule.__name__ = f"{name}_rule"
    prim.defrule(rule)
    return prim


def _gamma_density(a, x):
    return np.exp(sc.xlogy(a - 1.0, x) - x - sc.gammaln(a))


def _beta_density(a, b, x):
    """``x**(a-1) (1-x)**(b-1) / B(a, b)``: 0 at an edge where the exponent is positive, 1/B
    where it is 0, infinite where it is negative (xlogy/xlog1py give exactly that)."""
    return np.exp(sc.xlogy(a - 1.0, x) + sc.xlog1py(b - 1.0, -x) - sc.betaln(a, b))


def _t_density(df, t):
    return np.exp(sc.gammaln(0.5 * (df + 1.0)) - sc.gammaln(0.5 * df)
                  - 0.5 * np.log(df * np.pi) - 0.5 * (df + 1.0) * np.log1p(t * t / df))


gammainc_p = _defintegral("gammainc", sc.gammainc, _gamma_density, "a",
                          "gammainc(a, x) needs a > 0 and x >= 0 (x > 0 where a < 1).")
gammaincc_p = _defintegral("gammaincc", sc.gammaincc, lambda a, x: -_gamma_density(a, x), "a",
                           "gammaincc(a, x) needs a > 0 and x >= 0 (x > 0 where a < 1).")
_BETAINC_DOMAIN = ("betainc(a, b, x) needs a, b > 0 and 0 <= x <= 1 (x > 0 where a < 1, x < 1 "
                   "where b < 1).")
betainc_p = _defintegral("betainc", sc.betainc, _beta_density, "a or b", _BETAINC_DOMAIN)
betaincc_p = _defintegral("betaincc", sc.betaincc, lambda a, b, x: -_beta_density(a, b, x),
                          "a or b", _BETAINC_DOMAIN.replace("betainc(", "betaincc("))
stdtr_p = _defintegral("stdtr", sc.stdtr, _t_density, "df", "stdtr(df, t) needs df > 0.")


# ----- standard cdfs on the whole line: constant outside the support, kinks at its edges -----
# ``F(z) = integral(*params, clip(z, 0, upper))``. Inside the support the slope is the density;
# outside it is 0. At an edge the density decides: 0 (exponent > 1) is smooth, a finite nonzero
# value (exponent 1) is a kink whose side the ray picks, like relu's; an infinite one (exponent
# < 1) is not Lipschitz and is refused. Composing ``gammainc(a, relu(z))`` cannot do this: for
# a < 1 the chain rule meets ``inf * 0`` below the support.

def _edge_slope(name: str, ps, z, dz, edge: float, inward: int, density, d, out):
    """``d`` with the one-sided slopes at the entries of ``z`` sitting on ``edge``: the density
    there when the ray enters the support (``inward`` is its side of ``edge``), else 0.

    The switching quantity is ``z - edge``, stated to `ray_compare` only where the density at
    the edge is finite and nonzero (a kink): where it vanishes both sides have slope 0 and
    there is nothing to decide; where it is infinite the point is refused."""
    at = np.broadcast_to(z == edge, out)
    with np.errstate(all="ignore"):
        rate = np.broadcast_to(density(*ps, np.float64(edge)), out)
    bad = at & ~np.isfinite(rate)

    def infinite_density():
        ins = [np.broadcast_to(x, out) for x in (*ps, z)]
        return NotLipschitzError(
            f"{name} at the support's edge z = {edge:g}, where the density is infinite "
            f"({int(bad.sum())} entries; parameters and z there: {_examples(*ins, bad=bad)}): "
            "the cdf has an infinite slope there, so it is not Lipschitz. Keep the point off "
            "the edge, or use a shape parameter >= 1.")

    refuse_where(bad, infinite_density)
    kink = at & (rate != 0)
    # a z entry is compared where one of the output entries it reaches is on a kink; NaN
    # elsewhere is no tie, so ray_compare decides (and reports) the kinks alone
    lead = len(out) - np.ndim(z)
    wide = tuple(lead + i for i, n in enumerate(np.shape(z)) if n == 1 and out[lead + i] != 1)
    on_kink = np.any(kink, axis=tuple(range(lead)) + wide, keepdims=True).reshape(np.shape(z))
    side = ray_compare(np.where(on_kink, z, np.nan), dz, np.float64(edge))
    enters = side >= 0 if inward > 0 else side < 0
    return np.where(kink & np.broadcast_to(enters, out), rate, d)


def _defcdf(name: str, integral, density, upper: float | None, sign: float,
            what: str) -> Primitive:
    """``integral(*params, clip(z, 0, upper))`` (``upper=None``: no upper edge), with slope
    ``sign * density`` inside the support, 0 outside and the edges decided as above."""
    def impl(*args):
        *ps, z = args
        return integral(*ps, np.clip(z, 0.0, upper))

    prim = Primitive(name, impl)

    def rule(xs, dxs):
        *ps, z = (np.asarray(v) for v in xs)
        _constant_parameters(name, what, dxs)
        ans = np.asarray(impl(*ps, z))
        out = ans.shape
        zb = np.broadcast_to(z, out)
        inside = (zb > 0) & (zb < (np.inf if upper is None else upper))
        with np.errstate(all="ignore"):
            d = np.where(inside, density(*ps, np.clip(zb, 0.0, upper)), 0.0)
        d = _edge_slope(name, ps, z, dxs[-1], 0.0, 1, density, d, out)
        if upper is not None:
            d = _edge_slope(name, ps, z, dxs[-1], upper, -1, density, d, out)
        _finite(name, ans, (d,), (*ps, z), f"{name} needs positive shape parameters.")
        return ans, FanIn(*(Zero(p.shape, out) for p in ps),
                          Diagonal(_like(sign * d, ans), z.shape, out))

    rule.__name__ = f"{name}_rule"
    prim.defrule(rule)
    return prim


gamma_cdf_p = _defcdf("gamma_cdf", sc.gammainc, _gamma_density, None, 1.0, "a")
gamma_sf_p = _defcdf("gamma_sf", sc.gammaincc, _gamma_density, None, -1.0, "a")
beta_cdf_p = _defcdf("beta_cdf", sc.betainc, _beta_density, 1.0, 1.0, "a or b")
beta_sf_p = _defcdf("beta_sf", sc.betaincc, _beta_density, 1.0, -1.0, "a or b")


def gamma_cdf(a, z):
    """The standard gamma cdf ``gammainc(a, max(z, 0))`` on the whole line, differentiable in
    ``z`` (``a`` constant): 0 with slope 0 for ``z < 0``; at ``z = 0`` a kink decided along the
    ray for ``a = 1`` (slopes 0 and 1), smooth for ``a > 1``, refused for ``a < 1`` (infinite
    slope: `NotLipschitzError`).

    >>> import asd
    >>> from asd.library.special import gamma_cdf
    >>> [float(asd.subgrad(lambda z: gamma_cdf(1.0, z), direction=v)(0.0)) for v in (-1, 1)]
    [0.0, 1.0]
    """
    return gamma_cdf_p(a, z)


def gamma_sf(a, z):
    """``1 - gamma_cdf(a, z)`` (``gammaincc`` of the clipped ``z``), as `gamma_cdf`."""
    return gamma_sf_p(a, z)


def beta_cdf(a, b, z):
    """The standard beta cdf ``betainc(a, b, clip(z, 0, 1))`` on the whole line,
    differentiable in ``z`` (``a``, ``b`` constant): constant outside ``[0, 1]``; at ``z = 0``
    a kink decided along the ray for ``a = 1`` (slopes 0 and ``b``), smooth for ``a > 1``,
    refused for ``a < 1``; at ``z = 1`` the same with ``b``.

    >>> import asd
    >>> from asd.library.special import beta_cdf
    >>> [float(asd.subgrad(lambda z: beta_cdf(2.0, 1.0, z), direction=v)(1.0)) for v in (-1, 1)]
    [2.0, 0.0]
    """
    return beta_cdf_p(a, b, z)


def beta_sf(a, b, z):
    """``1 - beta_cdf(a, b, z)`` (``betaincc`` of the clipped ``z``), as `beta_cdf`."""
    return beta_sf_p(a, b, z)


# ----- the public functions (numpy keywords accepted as scipy's ufuncs take them) -----

def _no_options(name: str, kwargs: dict) -> None:
    extra = [k for k, v in kwargs.items() if k != "out" or v is not None]
    if extra:
        raise UnsupportedError(f"scipy.special.{name} with {', '.join(extra)} on traced arrays")


def _public(name: str, prim: Primitive, doc: str):
    def fn(*args, **kwargs):
        _no_options(name, kwargs)
        return prim(*args)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


gammaln = _public("gammaln", gammaln_p, "``log|gamma(x)|``; derivative digamma; poles refused.")
gamma = _public("gamma", gamma_p, "``gamma(x)``; derivative ``gamma(x) digamma(x)``; poles "
                "refused.")
digamma = _public("digamma", digamma_p, "``digamma(x)``; derivative ``polygamma(1, x)``; poles "
                  "refused.")
psi = digamma
erf = _public("erf", erf_p, "The error function; derivative ``2/sqrt(pi) exp(-x**2)``.")
erfc = _public("erfc", erfc_p, "``1 - erf(x)``; derivative ``-2/sqrt(pi) exp(-x**2)``.")
erfinv = _public("erfinv", erfinv_p, "The inverse of erf on (-1, 1); derivative "
                 "``sqrt(pi)/2 exp(erfinv(x)**2)``.")
erfcinv = _public("erfcinv", erfcinv_p, "The inverse of erfc on (0, 2); derivative "
                  "``-sqrt(pi)/2 exp(erfcinv(x)**2)``.")
logit = _public("logit", logit_p, "``log(x / (1 - x))`` on (0, 1); derivative "
                "``1 / (x (1 - x))``.")
ndtr = _public("ndtr", ndtr_p, "The standard normal cdf; derivative the normal density.")
log_ndtr = _public("log_ndtr", log_ndtr_p, "``log(ndtr(x))``, accurate in both tails; "
                   "derivative ``pdf(x) / ndtr(x)``, through erfcx in the left tail.")
ndtri = _public("ndtri", ndtri_p, "The inverse of ndtr on (0, 1); derivative "
                "``sqrt(2 pi) exp(ndtri(x)**2 / 2)``.")
beta = _public("beta", beta_p, "``gamma(a) gamma(b) / gamma(a + b)``; poles refused.")
betaln = _public("betaln", betaln_p, "``log|beta(a, b)|``; partials "
                 "``digamma(a) - digamma(a + b)`` and the same in b.")
xlogy = _public("xlogy", xlogy_p, "``x log(y)``, 0 where ``x = 0``; at ``x = y = 0`` with "
                "``x`` traced refused (not continuous).")
xlog1py = _public("xlog1py", xlog1py_p, "``x log(1 + y)``, 0 where ``x = 0``; at ``x = 0, "
                  "y = -1`` with ``x`` traced refused.")
gammainc = _public("gammainc", gammainc_p, "The regularized lower incomplete gamma function, "
                   "differentiable in x (derivative the gamma density); a must be constant.")
gammaincc = _public("gammaincc", gammaincc_p, "``1 - gammainc(a, x)``; a must be constant.")
betainc = _public("betainc", betainc_p, "The regularized incomplete beta function, "
                  "differentiable in x (derivative the beta density); a and b must be constant.")
betaincc = _public("betaincc", betaincc_p, "``1 - betainc(a, b, x)``; a and b must be "
                   "constant.")
stdtr = _public("stdtr", stdtr_p, "The Student t cdf ``stdtr(df, t)``, differentiable in t "
                "(derivative the t density); df must be constant.")


def expit(x, **kwargs):
    """The logistic function ``1 / (1 + exp(-x))``: the library's sigmoid."""
    _no_options("expit", kwargs)
    return smooth.sigmoid(x)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp``: ``log(sum(b * exp(a), axis))``, stably, traced in ``a``
    and ``b``.

    It is shifted by the maximum of ``a``'s values, a constant, so the function (and hence its
    derivative) is exactly that of the unshifted formula. Where the sum is negative it is NaN
    (refused) unless ``return_sign=True``, which returns ``(log|sum|, sign)`` with the sign
    a plain array; where the sum is 0 the log is -inf (refused).

    >>> import numpy as np, asd
    >>> from asd.library.special import logsumexp
    >>> asd.subgrad(lambda b: logsumexp(np.zeros(2), b=b))(np.array([1.0, 3.0]))
    array([0.25, 0.25])
    """
    if b is None and not return_sign:
        return smooth.logsumexp(a, axis=axis, keepdims=bool(keepdims))
    if b is not None:
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
        if np.shape(a) != shape:
            a = smooth.broadcast_to(a, shape)
    if isinstance(axis, list):
        axis = tuple(axis)

    def shift(v, weighted=None):
        v = np.asarray(v)
        if weighted is not None:  # terms with b == 0 are 0 whatever a is: they set no scale
            v = np.where(weighted, v, -np.inf)
        m = np.max(v, axis=axis, keepdims=True) if v.size else np.zeros((1,) * v.ndim)
        return np.where(np.isfinite(m), m, 0.0)

    # a constant of the program (a replay at another max, or other zero weights, retraces)
    weighted = None if b is None else read_value(b, lambda bv: np.broadcast_to(
        np.asarray(bv) != 0, np.shape(_value(a))))
    m = read_value(a, lambda v: shift(v, weighted))
    av = _value(a)
    if weighted is not None and not is_traced(b):
        # a constant b's zero weights drop their terms exactly, as scipy's -inf does: exp of
        # an entry far above the kept ones must not overflow into 0 * inf (a + (-m) is
        # a - m exactly where every weight is nonzero)
        terms = smooth.exp(smooth.add(a, np.where(weighted, -m, -np.inf).astype(av.dtype)))
    else:
        terms = smooth.exp(smooth.subtract(a, m))
    if b is not None:
        terms = smooth.multiply(terms, b)
    s = smooth.sum(terms, axis=axis, keepdims=True)
    sign = read_value(s, np.sign)
    if return_sign:
        s = smooth.multiply(s, np.where(sign == 0, 1.0, sign))
    out = smooth.add(smooth.log(s), m)
    if not keepdims:
        axes = tuple(range(np.ndim(av))) if axis is None else (
            (axis,) if np.ndim(axis) == 0 else tuple(axis))
        axes = tuple(ax % np.ndim(av) for ax in axes)
        keep = tuple(n for i, n in enumerate(np.shape(out)) if i not in axes)
        out = smooth.reshape(out, keep)
        sign = sign.reshape(keep)
    return (out, sign) if return_sign else out


def softmax(x, axis=None):
    """``scipy.special.softmax``: over all entries by default (scipy's ``axis=None``)."""
    return smooth.softmax(x, axis=axis)


def log_softmax(x, axis=None):
    """``scipy.special.log_softmax``: over all entries by default (scipy's ``axis=None``)."""
    return smooth.log_softmax(x, axis=axis)


# ----- numpy dispatch of the scipy.special ufuncs -----

for _ufunc, _fn in [
    (sc.gammaln, gammaln), (sc.gamma, gamma), (sc.digamma, digamma), (sc.psi, digamma),
    (sc.erf, erf), (sc.erfc, erfc), (sc.erfinv, erfinv), (sc.erfcinv, erfcinv),
    (sc.expit, expit), (sc.logit, logit), (sc.ndtr, ndtr), (sc.log_ndtr, log_ndtr),
    (sc.ndtri, ndtri), (sc.beta, beta), (sc.betaln, betaln), (sc.xlogy, xlogy),
    (sc.xlog1py, xlog1py), (sc.gammainc, gammainc), (sc.gammaincc, gammaincc),
    (sc.betainc, betainc), (sc.betaincc, betaincc), (sc.stdtr, stdtr),
]:
    register_numpy(_ufunc, _fn)

__all__ = ["beta", "betainc", "betaincc", "betaln", "digamma", "erf", "erfc", "erfcinv", "erfinv",
           "expit", "gamma", "gammainc", "gammaincc", "gammaln", "log_ndtr", "log_softmax",
           "logit", "logsumexp", "ndtr", "ndtri", "polygamma", "psi", "softmax", "stdtr",
           "xlog1py", "xlogy"]
