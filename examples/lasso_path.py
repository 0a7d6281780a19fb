"""Hyperparameter gradients of the lasso and elastic-net solution paths, across their kinks.

    β*(λ₁, λ₂) = argmin ½|Xβ - y|² + λ₁|β|₁ + ½λ₂|β|²,     L(λ) = ½|X_val β*(λ) - y_val|²

β* is the fixed point of the proximal-gradient step (soft threshold, then shrink by
1/(1 + αλ₂)), so ``asd.implicit.fixed_point`` makes λ ↦ β*(λ) a primitive and
``asd.subgrad`` gives the validation loss's hypergradient. The path is piecewise smooth in λ₁:
at each breakpoint a coefficient enters or leaves the support, and the left and right
derivatives differ. With orthogonal ±1 columns the breakpoints are the integers |X_jᵀy|, so
the script sits exactly on each kink and checks both one-sided derivatives of L there against
one-sided difference quotients from an independent exact solver (sign patterns enumerated in
rational arithmetic), then runs a few steps of hypergradient descent on (λ₁, λ₂) for the
elastic net.

Run: python examples/lasso_path.py
"""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction

import numpy as np

import asd

H8 = np.array([[1.0]])
for _ in range(3):
    H8 = np.block([[H8, H8], [H8, -H8]])
X = H8[:, 1:5]                      # orthogonal ±1 columns: the kinks λ₁ = |X_jᵀy| are exact
Y = np.array([3.0, 1.0, 2.0, 4.0, 0.0, 1.0, -2.0, 1.0])
X_VAL = np.array([[1, 1, 1, 0], [0, 1, 2, 1], [2, -1, 0, 1]], dtype=float)
Y_VAL = np.array([2.0, 3.0, 1.0])
ALPHA = 1.0 / np.linalg.eigvalsh(X.T @ X)[-1]
P = X.shape[1]


def soft(v, t):
    return asd.relu(v - t) - asd.relu(-v - t)


def prox_grad(beta, lam):
    """One proximal-gradient step of the elastic net (λ = (λ₁, λ₂))."""
    v = beta - ALPHA * (X.T @ (X @ beta - Y))
    return soft(v, ALPHA * lam[0]) / (1 + ALPHA * lam[1])


def exact_solution(lam1: Fraction, lam2: Fraction) -> list[Fraction]:
    """The elastic net exactly: the sign pattern whose active system solves the KKT."""
    XtX = [[Fraction(float(v)) + (lam2 if i == j else 0) for j, v in enumerate(row)]
           for i, row in enumerate(X.T @ X)]
    xty = [Fraction(float(v)) for v in X.T @ Y]
    for signs in itertools.product((-1, 0, 1), repeat=P):
        act = [i for i in range(P) if signs[i]]
        sol = _solve([[XtX[i][j] for j in act] for i in act],
                     [xty[i] - lam1 * signs[i] for i in act])
        if sol is None:
            continue
        beta = [Fraction(0)] * P
        for i, v in zip(act, sol, strict=True):
            beta[i] = v
        if all(beta[i] * signs[i] > 0 for i in act) and all(
                abs(xty[i] - sum(XtX[i][j] * beta[j] for j in range(P))) <= lam1
                for i in range(P) if not signs[i]):
            return beta
    raise AssertionError("no solution")


def _solve(M, r):
    n = len(M)
    a = [list(row) + [v] for row, v in zip(M, r, strict=True)]
    for c in range(n):
        p = next((i for i in range(c, n) if a[i][c] != 0), None)
        if p is None:
            return None
        a[c], a[p] = a[p], a[c]
        for i in range(n):
            if i != c and a[i][c]:
                f = a[i][c] / a[c][c]
                a[i] = [u - f * w for u, w in zip(a[i], a[c], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def solve(lam):
    return np.array([float(b) for b in exact_solution(Fraction(float(lam[0])),
                                                      Fraction(float(lam[1])))])


BETA = asd.implicit.fixed_point(prox_grad, solve, name="elastic_net")


def val_loss(lam):
    r = X_VAL @ BETA(lam) - Y_VAL
    return 0.5 * asd.sum(r * r)


def exact_loss(lam1, lam2):
    beta = exact_solution(lam1, lam2)
    r = [sum(Fraction(float(X_VAL[i, j])) * beta[j] for j in range(P)) - Fraction(Y_VAL[i])
         for i in range(len(Y_VAL))]
    return sum(v * v for v in r) / 2


def breakpoints() -> list[Fraction]:
    """The lasso path's kinks: with orthogonal columns coefficient j is nonzero exactly for
    λ₁ < |X_jᵀy| (the exact solver finds the path; this only lists where it bends)."""
    return sorted({Fraction(float(v)) for v in np.abs(X.T @ Y) if v > 0}, reverse=True)


def main() -> int:
    ok = True
    delta = Fraction(1, 2**24)
    print("lasso path (λ₂ = 0): one-sided derivatives of the validation loss at each kink")
    print(f"  {'λ₁':>10}  {'dL/dλ₁ ←':>12} {'exact':>12}  {'dL/dλ₁ →':>12} {'exact':>12}")
    for lam1 in breakpoints():
        lam = np.array([float(lam1), 0.0])
        left = float(asd.subgrad(val_loss, direction=np.array([-1.0, 0.0]))(lam)[0])
        right = float(asd.subgrad(val_loss, direction=np.array([1.0, 0.0]))(lam)[0])
        base = exact_loss(lam1, Fraction(0))
        want_l = float((base - exact_loss(lam1 - delta, Fraction(0))) / delta)
        want_r = float((exact_loss(lam1 + delta, Fraction(0)) - base) / delta)
        # the quotients are exact up to L's curvature: O(δ) = 6e-8
        good = abs(left - want_l) < 1e-6 and abs(right - want_r) < 1e-6
        ok &= good
        print(f"  {float(lam1):10.6f}  {left:12.6f} {want_l:12.6f}  {right:12.6f} "
              f"{want_r:12.6f}  {'ok' if good else 'FAIL'}")
    lam = np.array([1.0, 0.5])
    print("elastic net: hypergradient descent on (λ₁, λ₂)")
    losses = []
    for step in range(8):
        value, g = asd.value_and_subgrad(val_loss, seed=step)(lam)
        losses.append(float(value))
        lam = np.maximum(lam - 0.5 * g, 0.0)
        print(f"  step {step}: L = {float(value):.6f}, λ = {np.round(lam, 4)}")
    ok &= losses[-1] < losses[0]
    if not ok:
        print("a hypergradient disagrees with the exact one-sided quotient", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
