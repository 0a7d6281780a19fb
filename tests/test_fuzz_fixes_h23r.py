"""Regression tests of fuzz findings F10, F12, F21 (tests/fuzz/findings.py) and of complex
constants reaching ``np.maximum``: numpy's own value and dtype, bit for bit, and derivatives
against an oracle along the ray (mpmath, or exact Fractions)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import asd

mpmath.mp.prec = 200

# ----- F10: np.hypot keeps numpy's dtype and value -----

DTYPES = (np.float16, np.float32, np.float64)
RTOL = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-14}


def _hypot_grad_mp(a, b):
    """d/da, d/db of sqrt(a**2 + b**2) at the float inputs, in mpmath."""
    a, b = mpmath.mpf(float(a)), mpmath.mpf(float(b))
    r = mpmath.sqrt(a * a + b * b)
    return float(a / r), float(b / r)


OTHERS = {"traced": lambda x: x[::-1], "python float": lambda x: 2.0,
          "constant": lambda x: np.array([2.0, -4.0, 0.3, 5.0, 1e-2], dtype=x.dtype)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("second", OTHERS)
def test_f10_hypot_value_and_dtype_are_numpys(dtype, second):
    """Value (bits and dtype), tangent and gradient of ``np.hypot`` in float16/32/64, with a
    traced second operand, a Python float and a numpy constant of the same dtype."""
    x = np.array([0.5, 3.0, -1.25, 1e-3, 7.0], dtype=dtype)
    other = OTHERS[second]
    want = np.hypot(x, other(x))
    value, grad = asd.value_and_subgrad(lambda x: np.hypot(x, other(x)).sum())(x)
    assert np.asarray(value).dtype == want.dtype == dtype
    assert np.asarray(value) == want.sum()
    assert grad.dtype == dtype
    jac = asd.jacobian(lambda x: np.hypot(x, other(x)))(x)
    assert jac.dtype == dtype
    y, t = asd.directional(lambda x: np.hypot(x, other(x)))(x, np.ones_like(x))
    assert np.asarray(y).dtype == dtype and np.array_equal(y, want)
    for i in range(x.size):
        b = other(x)
        b = b[i] if np.ndim(b) else b
        da, db = _hypot_grad_mp(x[i], b)
        want_row = np.zeros(x.size)
        want_row[i] += da
        if second == "traced":
            want_row[x.size - 1 - i] += db
        np.testing.assert_allclose(jac[i], want_row, rtol=RTOL[dtype], atol=RTOL[dtype])
        np.testing.assert_allclose(t[i], want_row.sum(), rtol=RTOL[dtype],
                                   atol=RTOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_f10_hypot_at_the_origin_follows_the_ray(dtype):
    """At (0, 0) the limiting gradient along v is v / |v| (the norm is |v| δ along the ray:
    its one-sided difference quotient, exactly), in the argument's dtype."""
    x = np.zeros(2, dtype=dtype)
    v = np.array([3.0, -4.0], dtype=dtype)
    value, grad = asd.value_and_subgrad(lambda x: np.hypot(x[0], x[1]), direction=v)(x)
    assert np.asarray(value).dtype == grad.dtype == dtype
    delta = mpmath.mpf(2) ** -40
    quotient = [mpmath.sqrt((delta * float(v[0])) ** 2 + (delta * float(v[1])) ** 2) / delta]
    norm = float(quotient[0])
    np.testing.assert_allclose(grad, [3.0 / norm, -4.0 / norm], rtol=RTOL[dtype])
