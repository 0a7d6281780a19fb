"""The lasso objective at points with exact zeros, differentiated by asd.

``f(x) = 1/2 ||A x - b||^2 + lam * ||x||_1`` is plain numpy. Its l1 term is not differentiable
where a coordinate is exactly 0, which is where the lasso's solutions live (that is the point
of the l1 penalty). asd returns the limiting gradient along the sweep direction, and the script
checks it against the exact oracle.

It then finds the minimizer with ISTA (proximal gradient, asd.soft_threshold as the prox) and
checks optimality the nonsmooth way: at the solution, for coordinates at 0 the smooth gradient
lies in [-lam, lam], so the one-sided derivative is >= 0 along every direction, which
asd.directional computes exactly.

Run: python examples/lasso.py
"""

from __future__ import annotations

import numpy as np

import asd
from asd.testing import limiting_gradient

A = np.array([[1.0, 0.5, 0.0, -1.0],
              [0.0, 1.0, 1.0, 0.5],
              [1.0, 0.0, -0.5, 0.0],
              [0.5, -1.0, 0.0, 1.0],
              [0.0, 0.5, 1.0, 0.0]])
B = np.array([1.0, 2.0, 0.5, -1.0, 1.5])
LAM = 1.0


def lasso(x):
    r = A @ x - B
    return 0.5 * np.sum(r * r) + LAM * np.sum(np.abs(x))


def ista(steps: int = 2000) -> np.ndarray:
    step = 1.0 / np.linalg.norm(A, 2) ** 2
    x = np.zeros(A.shape[1])
    for _ in range(steps):
        x = asd.soft_threshold(x - step * A.T @ (A @ x - B), LAM * step)
    return x


def main() -> None:
    x = np.array([0.0, 1.0, 0.0, -0.5])  # two coordinates exactly at the kink
    grads = []
    for v in (np.array([1.0, 0.5, -1.0, 0.25]), np.array([-1.0, 0.5, 1.0, 0.25]),
              np.array([-0.5, -1.0, -0.25, 1.0])):
        value, g = asd.value_and_subgrad(lasso, direction=v)(x)
        exact_value, exact_g = limiting_gradient(lasso, x, v)
        exact_g = np.asarray(exact_g, dtype=float)
        print(f"direction {v.tolist()}: f = {value}, subgradient {g.tolist()}")
        assert value == float(exact_value)
        np.testing.assert_allclose(g, exact_g, rtol=1e-12, atol=1e-12)
        grads.append(g)
    assert not np.allclose(grads[0], grads[1]), "the sign of v picks the side of each zero"

    rng = np.random.default_rng(1)
    x_star = ista()
    x_star[np.abs(x_star) < 1e-9] = 0.0
    print(f"ISTA solution: {np.round(x_star, 6).tolist()} "
          f"({int(np.sum(x_star == 0))} coordinates exactly 0)")
    assert np.any(x_star == 0), "this lasso problem has a sparse solution"
    # Optimality: f'(x*; v) >= 0 for every v, up to ISTA's tolerance on the nonzero part.
    worst = min(float(asd.directional(lasso)(x_star, v)[1])
                for v in np.vstack([np.eye(4), -np.eye(4), rng.standard_normal((16, 4))]))
    print(f"smallest one-sided derivative at the solution over 24 directions: {worst:.2e}")
    assert worst > -1e-6
    print("ok: subgradients match the exact limiting gradients; the ISTA point is stationary")


if __name__ == "__main__":
    main()
