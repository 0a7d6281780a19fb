"""Unrolled vs implicit differentiation of the lasso: the derivative iterates converge.

    β*(λ) = argmin ½|Xβ - y|² + λ|β|₁

Two solvers, each an asd program compiled once with ``asd.jit``:
- forward–backward (ISTA): β ← soft(β - α Xᵀ(Xβ - y), αλ);
- ADMM: β ← (XᵀX + ρI)⁻¹(Xᵀy + ρ(z - u)), z ← soft(β + u, λ/ρ), u ← u + β - z.
``asd.jacobian`` of the stacked iterates with respect to λ differentiates through every
iteration (the soft threshold's kinks by the direction), so it returns the derivative of each
iterate at once. The implicit derivative comes from ``asd.implicit.fixed_point`` at the
solution. Piggyback differentiation (Gilbert 1992; Bolte, Pauwels, Vaiter, NeurIPS 2022):
once the iterates have identified the support, the derivative iterates converge linearly to
the implicit derivative. The script asserts that, and with ``--plot PATH`` writes the figure
shown in docs/solution-maps.md.

Run: python examples/unrolled_vs_implicit.py [--plot docs/figures/unrolled_vs_implicit.png]
"""

from __future__ import annotations

import sys

import numpy as np

import asd

rng = np.random.default_rng(0)
X = rng.standard_normal((20, 8))
Y = X @ np.array([2.0, -1.5, 0.0, 0.0, 1.0, 0.0, 0.0, 0.5]) + 0.1 * rng.standard_normal(20)
LAM = 4.0
ALPHA = 1.0 / np.linalg.eigvalsh(X.T @ X)[-1]
RHO = 2.0
K = 300


def soft(v, t):
    return asd.relu(v - t) - asd.relu(-v - t)


def ista_iterates(lam):
    beta, out = np.zeros(8), []
    for _ in range(K):
        beta = soft(beta - ALPHA * (X.T @ (X @ beta - Y)), ALPHA * lam)
        out.append(beta)
    return asd.numpy.stack(out)


M_INV = np.linalg.inv(X.T @ X + RHO * np.eye(8))


def admm_iterates(lam):
    z, u, out = np.zeros(8), np.zeros(8), []
    for _ in range(K):
        beta = M_INV @ (X.T @ Y + RHO * (z - u))
        z = soft(beta + u, lam / RHO)
        u = u + beta - z
        out.append(z)
    return asd.numpy.stack(out)


def ista_step(beta, lam):
    return soft(beta - ALPHA * (X.T @ (X @ beta - Y)), ALPHA * lam)


def solve(lam):
    beta = np.zeros(8)
    for _ in range(20000):
        nxt = np.asarray(ista_step(beta, lam))
        if np.max(np.abs(nxt - beta)) < 1e-15:
            break
        beta = nxt
    return nxt


def main(argv: list[str]) -> int:
    implicit = asd.implicit.fixed_point(ista_step, solve, name="lasso")
    d_implicit = np.asarray(asd.jacobian(implicit)(np.float64(LAM)))
    errors = {}
    for name, iterates in (("forward-backward", ista_iterates), ("ADMM", admm_iterates)):
        jac = asd.jit(asd.jacobian(iterates, seed=0))
        d_unrolled = np.asarray(jac(np.float64(LAM)))          # (K, 8): every iterate
        errors[name] = np.max(np.abs(d_unrolled - d_implicit), axis=1)
        print(f"{name:>17}: |dβ_k/dλ - dβ*/dλ| at k = 10, 100, {K}: "
              + ", ".join(f"{errors[name][k - 1]:.2e}" for k in (10, 100, K)))
    print("implicit dβ*/dλ =", np.round(d_implicit, 6))
    ok = all(e[-1] < 1e-8 and e[-1] < 1e-3 * e[9] for e in errors.values())
    if "--plot" in argv:
        import matplotlib.pyplot as plt
        path = argv[argv.index("--plot") + 1]
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for name, e in errors.items():
            ax.semilogy(np.arange(1, K + 1), np.maximum(e, 1e-17), label=name)
        ax.set_xlabel("iteration k")
        ax.set_ylabel("max |dβ_k/dλ − dβ*/dλ|")
        ax.set_title("Unrolled derivative iterates → implicit derivative (lasso)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        print("wrote", path)
    if not ok:
        print("the derivative iterates did not converge to the implicit derivative",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
