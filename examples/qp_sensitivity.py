"""Sensitivity of a small QP's solution, differentiated through its projection.

    x*(c, hi) = argmin ½ xᵀQx + cᵀx   subject to   lo <= x <= hi        (then over a simplex)

The solution is the fixed point of projected gradient, x* = P(z) with z = x* - α(Qx* + c).
Differentiating that identity (implicit function theorem) with J_z, J_hi the limiting
Jacobians of the projection at z from asd (J_hi: the box is differentiable in its bounds too):

    dx = J_z (dx - αQ dx - α dc) + J_hi dhi
    =>  (I - J_z + α J_z Q) dx = -α J_z dc + J_hi dhi

so dx*/dc and dx*/dhi come from one small linear solve, with no unrolling of the solver. At a
solution with strict complementarity x*(·) is locally affine, so a one-sided finite difference
of the re-solved QP (forward step h) must match to solver accuracy: the script asserts it.
Some coordinates sit on the lower bound, some on the upper bound, some inside; over the
simplex some are zero and the sum constraint couples the rest (the diagonal-plus-rank-one
Jacobian of the simplex projection).

Run: python examples/qp_sensitivity.py
"""

from __future__ import annotations

import sys

import numpy as np

import asd

P = asd.projections
N = 6


def make_problem(seed: int = 4):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((N, N))
    Q = M @ M.T / N + np.eye(N)
    c = 3 * rng.standard_normal(N)
    return Q, c


def solve(Q, c, project, iters: int = 20000) -> np.ndarray:
    """Projected gradient in plain numpy (the solver never sees asd)."""
    alpha = 1.0 / np.linalg.eigvalsh(Q)[-1]
    x = np.zeros(N)
    for _ in range(iters):
        nxt = project(x - alpha * (Q @ x + c))
        if np.max(np.abs(nxt - x)) < 1e-15:
            return nxt
        x = nxt
    return x


def sensitivities(Q, c, x, project, extra=None):
    """dx*/dc (and dx*/d(extra) if the projection takes a differentiable parameter)."""
    alpha = 1.0 / np.linalg.eigvalsh(Q)[-1]
    z = x - alpha * (Q @ x + c)
    if extra is None:
        Jz = asd.jacobian(project, seed=0)(z)
        Je = None
    else:
        Jz, Je = asd.jacobian(project, argnums=(0, 1), seed=0)(z, extra)
    A = np.eye(N) - Jz + alpha * Jz @ Q
    dx_dc = np.linalg.solve(A, -alpha * Jz)
    dx_de = None if Je is None else np.linalg.solve(A, Je)
    return dx_dc, dx_de


def forward_difference(fn, p, h=1e-6):
    base = fn(p)
    return np.stack([(fn(p + h * e) - base) / h for e in np.eye(p.size)], axis=1)


def check(name, got, want, tol=1e-6) -> bool:
    err = float(np.max(np.abs(got - want)))
    ok = err <= tol
    print(f"  {name:<26} max |asd - finite difference| = {err:.2e}  {'ok' if ok else 'FAIL'}")
    return ok


def main() -> int:
    Q, c = make_problem()
    lo, hi = -np.ones(N), 0.5 * np.ones(N)
    ok = True

    def box_np(v, hi=hi):
        return np.clip(v, lo, hi)

    x = solve(Q, c, box_np)
    print("box-constrained QP: x* =", np.round(x, 4))
    print(f"  at lower bound: {int(np.sum(x == lo))}, at upper bound: {int(np.sum(x == hi))}, "
          f"inside: {int(np.sum((x > lo) & (x < hi)))}")
    dx_dc, dx_dhi = sensitivities(Q, c, x, lambda z, hi: P.box(z, lo, hi), extra=hi)
    ok &= check("dx*/dc", dx_dc, forward_difference(lambda cc: solve(Q, cc, box_np), c))
    ok &= check("dx*/dhi", dx_dhi,
                forward_difference(lambda hh: solve(Q, c, lambda v: box_np(v, hh)), hi))

    def simplex_np(v):
        u = np.sort(v)[::-1]
        tau_k = (np.cumsum(u) - 1.0) / np.arange(1, v.size + 1)
        return np.maximum(v - tau_k[np.flatnonzero(u > tau_k)[-1]], 0)

    x = solve(Q, c, simplex_np)
    print("simplex-constrained QP: x* =", np.round(x, 4))
    print(f"  zero coordinates: {int(np.sum(x == 0))}, sum = {x.sum():.12f}")
    dx_dc, _ = sensitivities(Q, c, x, P.simplex)
    ok &= check("dx*/dc", dx_dc, forward_difference(lambda cc: solve(Q, cc, simplex_np), c))
    if not ok:
        print("the implicit sensitivities disagree with finite differences", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
