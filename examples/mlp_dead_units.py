"""A ReLU MLP in plain numpy, differentiated by asd where units are dead or exactly at 0.

The network below is ordinary numpy code. Its data and weights put several hidden
pre-activations exactly at 0 (the relu kink) and leave one unit dead on every sample. There
PyTorch, JAX and TensorFlow use relu'(0) = 0, a fixed choice that does not compose; asd picks the
branch along a direction and returns the limiting gradient lim grad f(theta + δv), δ ↓ 0, an
element of the Clarke subdifferential. The script checks it against the exact oracle
(asd.testing, power series in δ with Fraction coefficients) and exits non-zero if they differ.

Run: python examples/mlp_dead_units.py
"""

from __future__ import annotations

import numpy as np

import asd
from asd.testing import limiting_gradient

# 4 samples, 3 features; targets for a 3-4-1 network. Dyadic numbers keep float64 exact.
X = np.array([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, -1.0, 1.0], [1.0, 1.0, 1.0]])
Y = np.array([1.0, 0.0, -0.5, 2.0])
SHAPES = {"W1": (3, 4), "b1": (4,), "W2": (4, 1), "b2": (1,)}


def unpack(theta):
    """Slice the flat parameter vector into the layers (works on any array type)."""
    params, start = {}, 0
    for name, shape in SHAPES.items():
        size = int(np.prod(shape))
        params[name] = theta[start:start + size].reshape(shape)
        start += size
    return params


def loss(theta):
    """Mean squared error of a one-hidden-layer ReLU network: plain numpy."""
    p = unpack(theta)
    hidden = np.maximum(X @ p["W1"] + p["b1"], 0.0)
    out = (hidden @ p["W2"] + p["b2"])[:, 0]
    err = out - Y
    return np.sum(err * err) / len(Y)


def initial_parameters() -> np.ndarray:
    w1 = np.array([[1.0, -1.0, 0.5, -1.0],
                   [1.0, 0.5, -0.5, -1.0],
                   [1.0, 1.0, 0.5, -1.0]])
    b1 = np.array([0.0, 0.5, -0.5, -4.0])  # unit 3 is dead on every sample
    w2 = np.array([[0.5], [-1.0], [1.0], [2.0]])
    b2 = np.array([0.25])
    return np.concatenate([w1.ravel(), b1, w2.ravel(), b2])


def main() -> None:
    theta = initial_parameters()
    p = unpack(theta)
    pre = X @ p["W1"] + p["b1"]
    print(f"hidden pre-activations exactly 0: {int(np.sum(pre == 0))} of {pre.size}")
    print(f"dead units (negative on every sample): {np.flatnonzero(np.all(pre < 0, 0)).tolist()}")

    rng = np.random.default_rng(0)
    for trial in range(3):
        v = rng.integers(-256, 257, size=theta.shape) / 256  # dyadic: exact in float64
        value, g = asd.value_and_subgrad(loss, direction=v)(theta)
        exact_value, exact_g = limiting_gradient(loss, theta, v)
        exact_g = np.asarray(exact_g, dtype=float)
        err = float(np.max(np.abs(g - exact_g)))
        print(f"direction {trial}: loss {value:.6f}, |subgradient| {np.linalg.norm(g):.6f}, "
              f"max |asd - exact limiting gradient| = {err:.1e}")
        assert value == float(exact_value)
        np.testing.assert_allclose(g, exact_g, rtol=1e-12, atol=1e-12)

        # At a kink the ray enters the active side when the pre-activation's tangent is >= 0;
        # there asd uses relu' = 1 where PyTorch/JAX/TensorFlow would use 0.
        tangent = X @ unpack(v)["W1"] + unpack(v)["b1"]
        print(f"  kinks where this direction enters the active side (relu' = 1): "
              f"{int(np.sum((pre == 0) & (tangent >= 0)))} of {int(np.sum(pre == 0))}")
    print("ok: asd's subgradient equals the exact limiting gradient along every direction")


if __name__ == "__main__":
    main()
