"""The proximal bundle method (Kiwiel 1990; Lemaréchal; Lukšan & Vlček's PBUN family).

The bundle holds linearizations ``f_j + g_j·(z - y_j)`` from past oracle calls. Each
iteration minimizes the cutting-plane model plus ``u/2 |d|²`` around the stability center
``x`` (the dual is a QP on the simplex, `simplex_qp`), tries ``y = x + d``, and moves the
center only if ``f`` drops by a fixed fraction of the model's predicted decrease (a
*serious* step; otherwise a *null* step that only enriches the bundle). For nonconvex ``f``
the linearization errors are the subgradient locality measures
``α_j = max(|f(x) - ℓ_j(x)|, γ |x - y_j|²)`` (Kiwiel), so gradients from far away count
less. The method stops when the predicted decrease ``v = |ĝ|²/u + Σλα`` (``ĝ`` the aggregate
subgradient) is below ``tol (1 + |f(x)|)``: the aggregate is then a small element of the
ε-subdifferential for the radius ``max |y_j - x|`` of the elements it weighs.
"""

from __future__ import annotations

import numpy as np

from asd.optimize.qp import simplex_qp


class Bundle:
    """Linearizations ``c_j + g_j·z`` with the distance ``s_j`` from their point to ``x``."""

    def __init__(self, g: np.ndarray, c: float, max_size: int):
        self.G = g[None].copy()
        self.c = np.array([c])
        self.s = np.zeros(1)
        self.max_size = max_size

    def errors(self, x: np.ndarray, fx: float, gamma: float) -> np.ndarray:
        return np.maximum(np.abs(fx - (self.c + self.G @ x)), gamma * self.s ** 2)

    def add(self, g: np.ndarray, c: float, s: float, lam: np.ndarray, g_agg: np.ndarray,
            c_agg: float, s_agg: float) -> None:
        """Add an element; when full, drop the unused ones and fold the rest into the
        aggregate linearization (which keeps every iterate's model at least as good)."""
        if len(self.c) >= self.max_size:
            keep = np.argsort(-lam)[: self.max_size - 2]
            keep = keep[lam[keep] > 0]
            self.G = np.vstack([self.G[keep], g_agg])
            self.c = np.r_[self.c[keep], c_agg]
            self.s = np.r_[self.s[keep], s_agg]
        self.G = np.vstack([self.G, g])
        self.c = np.r_[self.c, c]
        self.s = np.r_[self.s, s]


def proximal_bundle(src, x, *, tol, maxiter, report, u=None, max_size=None,
                    gamma=None, m_descent=0.1, certified=None):
    """Run the method from ``x``; ``report(x, fx, nit, info)`` may return True to stop.

    ``certified(x)``: asked when the predicted decrease falls below ``tol``; where it does not
    hold, the bundle restarts at ``x`` (its cuts from far away may describe another piece
    of a nonconvex ``f`` than the one at ``x``: issue 26's nonsmooth Rosenbrock stopped at
    f = 3.11 on such a model) with the weight ``u`` reset, until the certificate holds or
    ``maxiter`` is reached.

    Returns ``(x, fx, nit, message, converged, radius)``, ``radius`` the largest distance
    from ``x`` of a bundle element the final aggregate weighs (a Goldstein radius for it).
    """
    n = x.size
    fx, g = src.value_and_grad(x)
    max_size = max_size or min(max(n + 3, 10), 60)
    bundle = Bundle(g, fx - g @ x, max_size)
    if u is None:
        u = max(float(np.linalg.norm(g)), 1e-8)
    u0 = u
    if gamma is None:
        gamma = 0.5
    nit, radius, nulls, restarts = 0, 0.0, 0, 0
    while True:
        alpha = bundle.errors(x, fx, gamma)
        lam = simplex_qp(bundle.G @ bundle.G.T / u, alpha)
        g_agg = lam @ bundle.G
        a_agg = float(lam @ alpha)
        v = float(g_agg @ g_agg) / u + a_agg
        radius = float(np.max(bundle.s[lam > 1e-12], initial=0.0))
        if v <= tol * (1.0 + abs(fx)):
            if certified is None or certified(x):
                return x, fx, nit, "the predicted decrease is below tol", True, radius
            if restarts >= 25 or (bundle.G.shape[0] == 1 and v <= 1e-30):
                return (x, fx, nit, "the predicted decrease is below tol, but the "
                        "certificate does not hold at x", False, radius)
            # the model says stationary, the certificate does not: drop the cuts, keep x
            restarts += 1
            fx, g = src.value_and_grad(x)
            bundle = Bundle(g, fx - g @ x, max_size)
            u = max(u0, float(np.linalg.norm(g)), 1e-8)
            continue
        if nit >= maxiter:
            return x, fx, nit, "maxiter reached", False, radius
        nit += 1
        d = -g_agg / u
        y = x + d
        fy, gy = src.value_and_grad(y)
        c_agg = float(lam @ bundle.c)
        s_agg = float(lam @ bundle.s)
        step = np.linalg.norm(d)
        if fy <= fx - m_descent * v:  # serious step
            bundle.add(gy, fy - gy @ y, 0.0, lam, g_agg, c_agg, s_agg)
            bundle.s[:-1] += step
            if fx - fy >= 0.5 * v:  # the model was good: trust it farther
                u = max(0.5 * u, 1e-10)
            x, fx = y, fy
            nulls = 0
            kind = "serious"
        else:  # null step: the new cut sharpens the model near x
            bundle.add(gy, fy - gy @ y, step, lam, g_agg, c_agg, s_agg)
            alpha_new = max(abs(fx - (fy + gy @ (x - y))), gamma * step ** 2)
            nulls += 1
            # a cut far from the model, or a run of null steps (the trial point is beyond
            # where the model is trustworthy, typical on nonconvex f): shorter steps
            if alpha_new > max(v, 10.0 * a_agg) or nulls % 4 == 0:
                u = min(2.0 * u, 1e12)
            kind = "null"
        if report(x, fx, nit, {"v": v, "u": u, "step": kind}):
            return x, fx, nit, "stopped by the callback", False, radius
