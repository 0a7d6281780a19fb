"""Semismooth Newton on the natural residual, with the Newton matrix from asd.jacobian.

Problem: minimize f(x) = ½ xᵀQx + qᵀx + ¼ Σ x_i⁴ over a convex set C (the nonnegative orthant,
then the probability simplex). x solves it iff the natural residual

    F(x) = x - P_C(x - ∇f(x))

vanishes. F is nonsmooth exactly where P_C has kinks, and the method starts ON them (x0 = 0 is
a vertex of the orthant; the simplex start is a vertex too). Each step solves J Δ = -F(x) with
J = asd.jacobian(F)(x), a limiting Jacobian of F (an element of its B-subdifferential), and
backtracks on ||F|| only if a full step does not decrease it. At a solution with strict
complementarity every limiting Jacobian is nonsingular, so the iteration converges locally
quadratically: the script prints ||F|| per iteration and asserts r_{k+1} <= C r_k² once the
residual is small, until it reaches the rounding floor FLOOR (or terminates exactly, r = 0),
exiting non-zero otherwise.

Run: python examples/semismooth_newton.py
"""

from __future__ import annotations

import sys

import numpy as np

import asd

P = asd.projections
FLOOR = 1e-12  # residuals below this are rounding noise (eps times the problem's scale)


def make_problem(n: int, seed: int):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, n))
    Q = M @ M.T / n + 0.5 * np.eye(n)
    q = rng.standard_normal(n)
    return Q, q


def natural_residual(Q, q, project):
    def F(x):
        grad = Q @ x + q + x**3
        return x - project(x - grad)

    return F


def semismooth_newton(F, x0, tol=FLOOR, max_iter=50, seed=0):
    """Newton steps on F with limiting Jacobians from asd; returns the residual history."""
    x = np.array(x0, dtype=float)
    history = [float(np.linalg.norm(F(x)))]
    for k in range(max_iter):
        r = history[-1]
        if r <= tol:
            break
        J = asd.jacobian(F, seed=seed + k)(x)
        step = np.linalg.solve(J, -F(x))
        t = 1.0
        while float(np.linalg.norm(F(x + t * step))) > (1 - 1e-4 * t) * r and t > 1e-8:
            t /= 2
        x = x + t * step
        history.append(float(np.linalg.norm(F(x))))
    return x, history


def report(name: str, history: list[float], bound: float) -> bool:
    print(f"\n{name}")
    print(f"  {'k':>2}  {'||F(x_k)||':>12}  {'r_k / r_(k-1)^2':>16}")
    ok = history[-1] <= FLOOR
    checked = 0
    for k, r in enumerate(history):
        ratio = ""
        prev = history[k - 1] if k else None
        if prev:
            ratio = f"{r / prev**2:16.3e}" if r > FLOOR else f"{'(rounding floor)':>16}"
            # the local regime: once the previous residual is small, demand r_k <= C r_{k-1}^2
            if prev < 1e-2 and r > FLOOR:
                checked += 1
                ok &= r / prev**2 <= bound
        print(f"  {k:>2}  {r:12.3e}  {ratio}")
    ok &= checked > 0 or history[-1] == 0
    verdict = "exact termination" if history[-1] == 0 else "quadratic convergence"
    print(f"  -> {verdict if ok else 'NOT quadratic'} (bound C = {bound})")
    return ok


def main() -> int:
    n = 8
    Q, q = make_problem(n, seed=3)
    problems = [
        ("nonnegative orthant, start at the vertex x0 = 0", P.nonneg, np.zeros(n)),
        ("probability simplex, start at the vertex x0 = e_1",
         lambda z: P.simplex(z, 1.0), np.eye(n)[0]),
    ]
    ok = True
    for name, project, x0 in problems:
        F = natural_residual(Q, q, project)
        x, history = semismooth_newton(F, x0)
        ok &= report(name, history, bound=10.0)
        active = int(np.sum(np.abs(x) < 1e-12))
        print(f"  solution has {active} of {n} coordinates at zero")
        assert np.linalg.norm(F(x)) <= FLOOR, "semismooth Newton did not converge"
    if not ok:
        print("local quadratic convergence was not observed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
