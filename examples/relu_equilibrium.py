"""A ReLU fixed-point (equilibrium) layer: z* = relu(W z* + U x + b), differentiated implicitly.

With ‖W‖ < 1 the map z ↦ relu(Wz + Ux + b) is a contraction, so z*(b) is unique and
Lipschitz; it is piecewise linear in b, with a kink wherever a unit's pre-activation is 0 at
the equilibrium. ``asd.implicit.fixed_point`` makes b ↦ z*(b) a primitive: its derivative
solves the piecewise-linear directional equation, so at a kink it is the exact one-sided
derivative along the direction. The script puts one unit exactly on its kink, checks asd's
directional derivatives there against the equilibrium solved exactly in rational arithmetic
at b + δd (active sets enumerated), then trains b by gradient descent on a loss of z*.

Run: python examples/relu_equilibrium.py
"""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction

import numpy as np

import asd

W = np.array([[0.25, -0.25, 0.0, 0.125], [0.125, 0.25, -0.25, 0.0],
              [0.0, 0.125, 0.25, -0.25], [-0.25, 0.0, 0.125, 0.25]])
U = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0], [0.5, 0.5]])
X_IN = np.array([1.0, -1.0])


def step(z, b):
    return asd.relu(W @ z + U @ X_IN + b)


def solve(b):
    z = np.zeros(4)
    for _ in range(500):
        z = np.maximum(W @ z + U @ X_IN + b, 0.0)
    return z


def exact(b: list[Fraction]) -> list[Fraction]:
    """The equilibrium exactly: the active set whose linear system is consistent."""
    c = [sum(Fraction(U[i, j]) * Fraction(X_IN[j]) for j in range(2)) + b[i] for i in range(4)]
    Wf = [[Fraction(v) for v in row] for row in W]
    for act in itertools.product((False, True), repeat=4):
        idx = [i for i in range(4) if act[i]]
        M = [[(1 if i == j else 0) - Wf[i][j] for j in idx] for i in idx]
        sol = _solve(M, [c[i] for i in idx]) if idx else []
        if sol is None:
            continue
        z = [Fraction(0)] * 4
        for i, v in zip(idx, sol, strict=True):
            z[i] = v
        pre = [sum(Wf[i][j] * z[j] for j in range(4)) + c[i] for i in range(4)]
        if all((pre[i] >= 0) == act[i] or pre[i] == 0 for i in range(4)) and all(
                v >= 0 for v in z):
            return z
    raise AssertionError("no equilibrium")


def _solve(M, r):
    n = len(M)
    a = [list(row) + [v] for row, v in zip(M, r, strict=True)]
    for col in range(n):
        p = next((i for i in range(col, n) if a[i][col] != 0), None)
        if p is None:
            return None
        a[col], a[p] = a[p], a[col]
        for i in range(n):
            if i != col and a[i][col]:
                f = a[i][col] / a[col][col]
                a[i] = [u - f * w for u, w in zip(a[i], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def main() -> int:
    layer = asd.implicit.fixed_point(step, solve, name="relu_equilibrium")
    # b with unit 2's pre-activation exactly 0 at the equilibrium (the kink): choose z*, then b
    z_star = np.array([1.0, 0.5, 0.0, 0.25])
    b = z_star - W @ z_star - U @ X_IN   # pre-activations equal z*: unit 2 sits at 0
    assert np.array_equal(np.asarray(layer(b)), z_star)
    delta = Fraction(1, 2**20)
    base = exact([Fraction(v) for v in b])
    ok = True
    rng = np.random.default_rng(1)
    print("one-sided derivatives of z*(b) at the kink, against the exact equilibrium:")
    for _ in range(4):
        d = rng.choice([-1.0, -0.5, 0.5, 1.0], size=4)
        _, got = asd.directional(layer)(b, d)
        moved = exact([Fraction(v) + delta * Fraction(w) for v, w in zip(b, d)])
        want = np.array([float((m - s) / delta) for m, s in zip(moved, base)])
        ok &= bool(np.allclose(got, want, atol=1e-12))
        print(f"  d = {d}:  asd {np.round(got, 6)}  exact {np.round(want, 6)}")
    target = np.array([0.5, 0.25, 0.75, 0.5])
    losses = []
    for k in range(30):
        loss, g = asd.value_and_subgrad(lambda b: asd.sum((layer(b) - target) ** 2),
                                        seed=k)(b)
        losses.append(float(loss))
        b = b - 0.3 * g
    print(f"training b: loss {losses[0]:.4f} -> {losses[-1]:.2e}")
    ok &= losses[-1] < 1e-3 * losses[0]
    if not ok:
        print("the equilibrium layer's derivative or training failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
