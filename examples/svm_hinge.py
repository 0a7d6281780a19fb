"""A linear SVM's hinge loss at points whose margin is exactly 1, differentiated by asd.

``loss(w, b) = mean(max(0, 1 - y * (X @ w + b))) + lam / 2 * ||w||^2`` is plain numpy. The
data are chosen so that three of the six samples sit exactly on the margin (y * score == 1): the
hinge is not differentiable there, and each support vector may or may not contribute to the
gradient. asd decides each one by the direction of the sweep and returns the limiting gradient
along it; the script checks it against the exact oracle and exits non-zero if they differ.
Along opposite directions the support vectors switch, so the two subgradients differ, and both
are elements of the Clarke subdifferential.

Run: python examples/svm_hinge.py
"""

from __future__ import annotations

import numpy as np

import asd
from asd.testing import limiting_gradient

X = np.array([[1.0, 1.0], [2.0, 0.0], [0.0, 2.0], [-1.0, -1.0], [-2.0, 0.5], [0.5, -1.5]])
Y = np.array([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
LAM = 0.25


def svm_loss(theta):
    """Regularized hinge loss of a linear classifier; theta = (w0, w1, b)."""
    w, b = theta[:2], theta[2]
    margins = Y * (X @ w + b)
    hinge = np.maximum(0.0, 1.0 - margins)
    return np.sum(hinge) / len(Y) + LAM / 2 * np.sum(w * w)


def main() -> None:
    theta = np.array([0.5, 0.5, 0.0])
    margins = Y * (X @ theta[:2] + theta[2])
    print(f"margins: {margins.tolist()}")
    print(f"samples exactly on the margin: {np.flatnonzero(margins == 1).tolist()}")

    grads = []
    for v in (np.array([1.0, 0.5, -0.25]), np.array([-1.0, -0.5, 0.25]),
              np.array([0.5, -1.0, 1.0])):
        value, g = asd.value_and_subgrad(svm_loss, direction=v)(theta)
        exact_value, exact_g = limiting_gradient(svm_loss, theta, v)
        exact_g = np.asarray(exact_g, dtype=float)
        print(f"direction {v.tolist()}: loss {value:.6f}, subgradient {g.tolist()} "
              f"(exact {exact_g.tolist()})")
        assert value == float(exact_value)
        np.testing.assert_allclose(g, exact_g, rtol=1e-12, atol=1e-12)
        # the one-sided derivative is the subgradient applied to the direction
        _, dini = asd.directional(svm_loss)(theta, v)
        assert np.isclose(dini, g @ v)
        grads.append(g)
    assert not np.allclose(grads[0], grads[1]), "opposite directions switch the support vectors"
    print("ok: asd's subgradients equal the exact limiting gradients")


if __name__ == "__main__":
    main()
