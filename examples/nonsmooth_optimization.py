"""Gradient sampling on a max of quadratics, stopped by the Clarke stationarity test.

f(x) = max_i |x - c_i|^2 for three points c_i on a circle of radius 5 around x* = (1, -2):
the smallest enclosing ball problem. At x* all three pieces tie (exactly: every value is 25),
f is not differentiable there, and any single gradient an AD tool returns at x* is far from
zero, so "stop when the gradient is small" never fires. The right test is Clarke
stationarity: 0 lies in the convex hull of the limiting gradients.

The method is gradient sampling (Burke, Lewis & Overton, 2005) in its simplest form: at x,
take the Clarke sample of asd (the limiting gradients at x itself, exact at kinks) plus the
gradients at a few random points within eps of x; step along minus the min-norm element of
their hull with an Armijo backtracking line search; when that min-norm element is below
``tol``, shrink eps; stop when it is below ``tol`` with eps below ``eps_tol``.

Run: ``python examples/nonsmooth_optimization.py``
"""

from __future__ import annotations

import numpy as np

import asd

CENTER = np.array([1.0, -2.0])
POINTS = CENTER + np.array([[5.0, 0.0], [-3.0, 4.0], [-3.0, -4.0]])  # |c_i - x*| = 5


def f(x):
    """max_i |x - c_i|^2, written with plain numpy: asd traces it as it runs."""
    d = x - POINTS  # (3, 2)
    sq = (d * d).sum(axis=1)
    return np.maximum(np.maximum(sq[0], sq[1]), sq[2])


def gradient_sampling(x0, *, eps=1.0, eps_tol=1e-6, tol=1e-6, samples=6, max_iter=500,
                      seed=0):
    """Minimize f from x0; returns (x, eps, min-norm element, iterations)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x0, dtype=float)
    for it in range(max_iter):
        sample = asd.clarke(f, n=8, seed=rng)(x)
        ball = rng.standard_normal((samples, x.size))
        ball *= eps * rng.random((samples, 1)) ** (1 / x.size) / np.linalg.norm(
            ball, axis=1, keepdims=True)
        nearby = [asd.subgrad(f, seed=rng)(x + b) for b in ball]
        sample = sample.with_gradients(nearby)
        g = sample.min_norm()
        if sample.is_stationary(tol):
            if eps <= eps_tol:
                return x, eps, g, it
            eps /= 10
            continue
        d = -g / np.linalg.norm(g)
        fx, t = float(f(x)), 1.0
        while float(f(x + t * d)) > fx - 1e-4 * t * np.linalg.norm(g) and t > 1e-14:
            t /= 2
        if t <= 1e-14:  # no decrease along d: the sampled set is too small, shrink eps
            eps /= 10
            continue
        x = x + t * d
    raise RuntimeError(f"no eps-stationary point after {max_iter} iterations (x = {x})")


def main() -> None:
    x, eps, g, iterations = gradient_sampling([4.0, 3.0])
    print(f"stopped after {iterations} iterations at x = {x}, eps = {eps:.0e}, "
          f"|min-norm element| = {np.linalg.norm(g):.1e}, f(x) = {float(f(x)):.10f}")
    assert np.linalg.norm(x - CENTER) < 1e-4, x

    # At a generic point a single gradient is all there is, and it is not small:
    print("one asd subgradient at x:", asd.subgrad(f, seed=0)(x))
    # At the exact minimizer all three pieces are tied; the Clarke sample finds all three
    # limiting gradients, and 0 is in their hull: x* is Clarke stationary.
    exact = asd.clarke(f, seed=0)(CENTER)
    print(f"Clarke sample at x* = {CENTER}: {len(exact)} gradients\n{exact.gradients}")
    print("min-norm element at x*:", exact.min_norm(), "weights", exact.min_norm_weights())
    assert len(exact) == 3 and exact.is_stationary() and exact.contains(np.zeros(2))
    assert not asd.clarke(f, seed=0)(CENTER + 0.1).is_stationary()
    print("x* is Clarke stationary; the iterate converged to it.")


if __name__ == "__main__":
    main()
