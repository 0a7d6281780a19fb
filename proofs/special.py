"""Certificates for ``library/special.py``: every scipy.special rule against sympy's
derivative of the function's symbolic formula (values to 1e-10, Jacobians to 1e-9, sympy
evaluating at 30 digits), at generic points on both sides of the poles where the function is
defined there. ``xlogy``/``xlog1py`` include ``x = 0`` (derivative ``log y`` in ``x``, 0 in
``y``); ``gammainc``/``gammaincc`` are checked in ``x`` at constant ``a``, and ``stdtr`` in
``t`` at ``df = 1, 2, 3`` through its closed forms, ``betainc``/``betaincc`` in ``x`` at
integer ``a, b`` (a polynomial). These functions are smooth on their
domains, so the rules meet no ties; what they refuse (poles, infinite slopes, ``xlogy`` at
``x = y = 0``) is tested in ``tests/library/test_special.py``.

The whole-line cdfs (``gamma_cdf``, ``gamma_sf``, ``beta_cdf``, ``beta_sf``) have kinks at the
support's edges: `check_rule` checks them there, along rays entering and leaving the support,
against closed forms with the clip written out (the exact oracle for the beta polynomials,
mpmath for the gamma exponentials)."""

from __future__ import annotations

import numpy as np
import sympy as sp
from asd.library import special as S

from .registry import OracleProof, SymbolicProof

POS = (np.array([0.3, 2.5, 7.25]),)
NEG = (np.array([-0.5, -1.7, -2.25]),)
REAL = (np.array([-1.3, 0.2, 2.1]),)
UNIT = (np.array([0.05, 0.5, 0.8]),)
PAIRS = [(np.array([0.7, 2.5, 1.3]), np.array([1.5, 0.4, 3.0]))]
XLOG = [(np.array([0.0, 1.5, -0.7]), np.array([0.4, 2.0, 3.0]))]


def elementwise(fn):
    """A scalar sympy function of one or two arguments mapped over object arrays."""
    return lambda *xs: np.vectorize(fn, otypes=[object])(*xs)


def _ndtr(x):
    return (1 + sp.erf(x / sp.sqrt(2))) / 2


def _stdtr(df: int):
    """The Student t cdf for small integer ``df`` in closed form."""
    if df == 1:
        return lambda t: sp.Rational(1, 2) + sp.atan(t) / sp.pi
    if df == 2:
        return lambda t: sp.Rational(1, 2) + t / (2 * sp.sqrt(2 + t ** 2))
    r3 = sp.sqrt(3)
    return lambda t: sp.Rational(1, 2) + (t / (r3 * (1 + t ** 2 / 3)) + sp.atan(t / r3)) / sp.pi


def _gammainc(a):
    return lambda x: sp.lowergamma(a, x) / sp.gamma(a)


def _betainc_2_3(x):
    """``I_x(2, 3) = 6x² - 8x³ + 3x⁴`` (the integral of ``12 t (1 - t)²``)."""
    return 6 * x ** 2 - 8 * x ** 3 + 3 * x ** 4


# the support's edges, inside, outside; rays entering and leaving it (and a tie kept tied)
EDGES = np.array([0.0, 1.0, -0.5, 0.25, 1.5, 0.0])
INTO = np.array([1.0, -1.0, 1.0, -0.5, 0.5, 0.0])


def _relu(z):
    return np.maximum(z, 0 * z)  # 0 * z: a zero of the oracle's own number type


def _clip01(z):
    return np.minimum(_relu(z), 0 * z + 1)


def _edge_points():
    return [((EDGES,), INTO), ((EDGES,), -INTO)]


CDF_PROOFS = [
    OracleProof((S.gamma_cdf_p,), lambda z: S.gamma_cdf(1.0, z), _edge_points(),
                reference=lambda z: 1 - np.exp(-_relu(z)), note="a = 1: a kink at 0",
                title="gamma_cdf (a = 1)"),
    OracleProof((S.gamma_cdf_p,), lambda z: S.gamma_cdf(2.0, z), _edge_points(),
                reference=lambda z: 1 - (1 + _relu(z)) * np.exp(-_relu(z)),
                note="a = 2: smooth at 0", title="gamma_cdf (a = 2)"),
    OracleProof((S.gamma_sf_p,), lambda z: S.gamma_sf(1.0, z), _edge_points(),
                reference=lambda z: np.exp(-_relu(z)), note="a = 1: a kink at 0",
                title="gamma_sf (a = 1)"),
    OracleProof((S.beta_cdf_p,), lambda z: S.beta_cdf(1.0, 2.0, z), _edge_points(),
                reference=lambda z: 1 - (1 - _clip01(z)) ** 2, note="a = 1: a kink at 0",
                title="beta_cdf (a = 1, b = 2)"),
    OracleProof((S.beta_cdf_p,), lambda z: S.beta_cdf(2.0, 1.0, z), _edge_points(),
                reference=lambda z: _clip01(z) ** 2, note="b = 1: a kink at 1",
                title="beta_cdf (a = 2, b = 1)"),
    OracleProof((S.beta_cdf_p,), lambda z: S.beta_cdf(2.0, 3.0, z), _edge_points(),
                reference=lambda z: _betainc_2_3(_clip01(z)), note="a, b > 1: smooth edges",
                title="beta_cdf (a = 2, b = 3)"),
    OracleProof((S.beta_sf_p,), lambda z: S.beta_sf(1.0, 1.0, z), _edge_points(),
                reference=lambda z: 1 - _clip01(z), note="a = b = 1: kinks at 0 and 1",
                title="beta_sf (a = b = 1)"),
]

PROOFS = [
    SymbolicProof((S.gammaln_p,), S.gammaln, [POS], elementwise(sp.loggamma)),
    SymbolicProof((S.gamma_p,), S.gamma, [POS, NEG], elementwise(sp.gamma)),
    SymbolicProof((S.digamma_p,), S.digamma, [POS, NEG], elementwise(sp.digamma)),
    SymbolicProof((S.polygamma_p,), lambda x: S.polygamma(1, x), [POS, NEG],
                  elementwise(lambda x: sp.polygamma(1, x)), title="polygamma (n = 1)"),
    SymbolicProof((S.polygamma_p,), lambda x: S.polygamma(3, x), [POS],
                  elementwise(lambda x: sp.polygamma(3, x)), title="polygamma (n = 3)"),
    SymbolicProof((S.erf_p,), S.erf, [REAL], elementwise(sp.erf)),
    SymbolicProof((S.erfc_p,), S.erfc, [REAL], elementwise(sp.erfc)),
    SymbolicProof((S.erfinv_p,), S.erfinv, [(np.array([-0.9, 0.1, 0.6]),)],
                  elementwise(sp.erfinv)),
    SymbolicProof((S.erfcinv_p,), S.erfcinv, [(np.array([0.2, 1.1, 1.9]),)],
                  elementwise(lambda x: sp.erfinv(1 - x)), title="erfcinv"),
    SymbolicProof((S.logit_p,), S.logit, [UNIT], elementwise(lambda x: sp.log(x / (1 - x)))),
    SymbolicProof((S.ndtr_p,), S.ndtr, [REAL], elementwise(_ndtr)),
    SymbolicProof((S.log_ndtr_p,), S.log_ndtr, [REAL, (np.array([-12.0, -5.0, 6.0]),)],
                  elementwise(lambda x: sp.log(sp.erfc(-x / sp.sqrt(2)) / 2))),
    SymbolicProof((S.ndtri_p,), S.ndtri, [UNIT],
                  elementwise(lambda p: sp.sqrt(2) * sp.erfinv(2 * p - 1))),
    SymbolicProof((S.beta_p,), S.beta, PAIRS,
                  elementwise(lambda a, b: sp.gamma(a) * sp.gamma(b) / sp.gamma(a + b))),
    SymbolicProof((S.betaln_p,), S.betaln, PAIRS,
                  elementwise(lambda a, b: sp.log(sp.gamma(a) * sp.gamma(b) / sp.gamma(a + b)))),
    SymbolicProof((S.xlogy_p,), S.xlogy, XLOG, elementwise(lambda x, y: x * sp.log(y))),
    SymbolicProof((S.xlog1py_p,), S.xlog1py, XLOG, elementwise(lambda x, y: x * sp.log(1 + y))),
    SymbolicProof((S.gammainc_p,), lambda x: S.gammainc(2.5, x), [POS],
                  elementwise(_gammainc(sp.Rational(5, 2))), title="gammainc (a = 2.5, in x)"),
    SymbolicProof((S.gammainc_p,), lambda x: S.gammainc(0.5, x), [POS],
                  elementwise(_gammainc(sp.Rational(1, 2))), title="gammainc (a = 0.5, in x)"),
    SymbolicProof((S.gammaincc_p,), lambda x: S.gammaincc(1.5, x), [POS],
                  elementwise(lambda x: sp.uppergamma(sp.Rational(3, 2), x)
                              / sp.gamma(sp.Rational(3, 2))), title="gammaincc (a = 1.5, in x)"),
    *[SymbolicProof((S.stdtr_p,), lambda t, df=df: S.stdtr(float(df), t), [REAL],
                    elementwise(_stdtr(df)), title=f"stdtr (df = {df}, in t)")
      for df in (1, 2, 3)],
    SymbolicProof((S.betainc_p,), lambda x: S.betainc(2.0, 3.0, x), [UNIT],
                  elementwise(_betainc_2_3), title="betainc (a = 2, b = 3, in x)"),
    SymbolicProof((S.betaincc_p,), lambda x: S.betaincc(2.0, 3.0, x), [UNIT],
                  elementwise(lambda x: 1 - _betainc_2_3(x)),
                  title="betaincc (a = 2, b = 3, in x)"),
    *CDF_PROOFS,
]

__all__ = ["PROOFS"]
