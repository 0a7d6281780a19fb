"""Gradient sampling (Burke, Lewis & Overton 2005; Kiwiel 2007), on ε-subdifferential samples.

At ``x`` take a sample of the Goldstein ε-subdifferential (`Source.sample`: with asd, every
piece active within reach of ``x`` plus gradients at random points of the ball; with a plain
oracle, only the random points), step along minus its min-norm element ``g`` with an Armijo
backtracking line search, and when ``|g| <= ν`` shrink both ``ε`` and ``ν`` by ``theta``: the
iterates then approach a Clarke stationary point, and the method stops when ``|g| <= tol``
at a radius below ``radius_tol``, a Goldstein certificate by construction.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls


def min_norm(G: np.ndarray) -> np.ndarray:
    """The min-norm point of the hull of the rows of ``G`` (Lawson & Hanson's NNLS trick)."""
    scale = max(1.0, float(np.max(np.abs(G))))
    E = np.vstack([G.T / scale, np.ones((1, len(G)))])
    e = np.zeros(E.shape[0])
    e[-1] = 1.0
    w, _ = nnls(E, e)
    return scale * (G.T / scale) @ (w / w.sum())


def gradient_sampling(src, x, *, tol, maxiter, report, radius=0.1, radius_tol=1e-9,
                      points=None, theta=0.1, beta=1e-6):
    """Run the method from ``x``; ``report(x, fx, nit, info)`` may return True to stop.

    Returns ``(x, fx, nit, message, converged, radius)``.
    """
    n = x.size
    points = n + 1 if points is None else points
    fx = src.value(x)
    nu = max(tol, 1e-2 * max(1.0, float(np.linalg.norm(src.value_and_grad(x)[1]))))
    t = 1.0
    nit = 0
    while nit < maxiter:
        nit += 1
        g = min_norm(src.sample(x, radius, points))
        norm = float(np.linalg.norm(g))
        if norm <= nu:
            if norm <= tol and radius <= radius_tol:
                return x, fx, nit, "stationary at the final radius", True, radius
            radius, nu = max(theta * radius, 0.5 * radius_tol), max(theta * nu, tol)
            kind = "shrink"
        else:
            d = -g / norm
            t = min(4.0 * t, 1e3)
            for _ in range(60):
                y = x + t * d
                fy = src.value(y)
                if fy <= fx - beta * t * norm:
                    break
                t *= 0.5
            else:
                fy = np.inf
            if fy < fx:
                x, fx = y, fy
                kind = "step"
            else:  # the sample missed a piece: look closer
                radius, nu = max(theta * radius, 0.5 * radius_tol), max(theta * nu, tol)
                t = 1.0
                kind = "no descent"
        if report(x, fx, nit, {"radius": radius, "|g|": norm, "step": kind}):
            return x, fx, nit, "stopped by the callback", False, radius
    return x, fx, nit, "maxiter reached", False, radius
