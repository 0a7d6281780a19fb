"""Minimizing a max of affine functions, ending with a stationarity certificate.

f(x) = max_i a_i·x + b_i with 20 pieces in 5 dimensions, built so that 6 pieces are active at
the minimizer and 0 lies inside the hull of their gradients (the minimum is an LP optimum).

1. Near the optimum (1e-9 away, as any iterative method leaves you) the Clarke set at x is one
   gradient of norm ~1: "is 0 in the hull?" says no. The Goldstein ε-subdifferential
   (``asd.clarke(f, radius=eps)``) holds every piece active within reach, found by the rules:
   its min-norm element is 0, x is certified stationary.
2. ``asd.optimize.minimize`` (proximal bundle, then gradient sampling) reaches the optimum that
   HiGHS computes for the LP ``min t s.t. a_i·x + b_i <= t``, and says so with a certificate.

Run: ``python examples/optimize_max_affine.py``
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

import asd

rng = np.random.default_rng(7)
d = 5
active = rng.standard_normal((d + 1, d))
w = rng.uniform(0.5, 1.5, d + 1)
active[-1] = -(w[:-1] @ active[:-1]) / w[-1]  # 0 = a strictly positive combination
a = np.vstack([active, rng.standard_normal((14, d))])
x_star = rng.uniform(-1, 1, d)
b = 2.0 - a @ x_star
b[d + 1:] -= rng.uniform(0.5, 1.0, 14)


def f(x):
    return np.max(a @ x + b)


# 1. the stationarity test near the optimum
x_near = x_star + 1e-9 * rng.standard_normal(d) / np.sqrt(d)
at_x = asd.clarke(f, seed=0)(x_near)
in_ball = asd.clarke(f, n=512, seed=0, radius=1e-7)(x_near)
print(f"Clarke sample at x:   {len(at_x)} gradient(s), min-norm {at_x.stationarity:.3f}")
print(f"ε-sample (ε = 1e-7):  {len(in_ball)} gradients, min-norm {in_ball.stationarity:.1e}, "
      f"near-ties found by {[t.primitive for t in in_ball.near_ties]}")
assert at_x.is_singleton and not at_x.is_stationary(1e-3)
assert len(in_ball) == d + 1 and in_ball.is_stationary(1e-9)

# 2. minimize, against HiGHS on the LP
lp = linprog(np.r_[np.zeros(d), 1.0], A_ub=np.c_[a, -np.ones(len(b))], b_ub=-b,
             bounds=[(None, None)] * (d + 1), method="highs")
for method in asd.optimize.METHODS:
    res = asd.optimize.minimize(f, np.zeros(d), method=method)
    cert = res.stationarity
    print(f"{method:9s} f = {res.fun:.10f} (LP {lp.fun:.10f}), {res.nit} iterations, "
          f"certificate |z| = {cert.measure:.1e} at ε = {cert.radius:.0e}")
    assert abs(res.fun - lp.fun) <= 1e-6 * max(1.0, abs(lp.fun))
    assert cert.measure <= 1e-4
