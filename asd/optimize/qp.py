"""The bundle method's subproblem: a convex quadratic over the unit simplex.

``min ½ λᵀQλ + qᵀλ  s.t.  λ >= 0, Σλ = 1`` with ``Q = G Gᵀ / u`` positive semidefinite
and a few dozen variables. Why a primal active-set method rather than a general solver: it
ends after finitely many exact KKT solves (no step size or tolerance to tune), every iterate
is feasible, and the free set it ends with says which bundle elements carry the aggregate.
"""

from __future__ import annotations

import numpy as np

from asd.errors import ASDError


def simplex_qp(Q: np.ndarray, q: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """The minimizer ``λ`` of ``½ λᵀQλ + qᵀλ`` over the unit simplex (``Q`` PSD).

    A tiny ridge (``1e-13`` of Q's largest diagonal entry) makes every face's KKT system
    nonsingular; it moves ``λ`` by rounding-sized amounts only.

    >>> simplex_qp(np.eye(2), np.zeros(2)).tolist()
    [0.5, 0.5]
    """
    m = len(q)
    scale = max(1.0, float(np.max(np.abs(np.diag(Q)))), float(np.max(np.abs(q))))
    Q = Q / scale + 1e-13 * np.eye(m)
    q = q / scale
    lam = np.zeros(m)
    lam[int(np.argmin(0.5 * np.diag(Q) + q))] = 1.0
    free = lam > 0
    for _ in range(max_iter or 20 * m + 20):
        idx = np.flatnonzero(free)
        k = len(idx)
        kkt = np.zeros((k + 1, k + 1))
        kkt[:k, :k] = Q[np.ix_(idx, idx)]
        kkt[:k, k] = kkt[k, :k] = 1.0
        sol = np.linalg.solve(kkt, np.r_[-q[idx], 1.0])
        p = sol[:k]
        if np.all(p >= 0):
            lam = np.zeros(m)
            lam[idx] = p
            grad = Q @ lam + q
            level = float(lam @ grad)  # the multiplier: grad equals it on the free set
            out = np.flatnonzero(~free)
            if not out.size:
                return lam
            j = out[int(np.argmin(grad[out]))]
            if grad[j] >= level - 1e-14 * (1.0 + abs(level)):
                return lam
            free[j] = True
            continue
        # step from lam toward p until the first free weight reaches 0
        cur = lam[idx]
        down = p < cur
        ratios = np.where(down, cur / np.where(down, cur - p, 1.0), np.inf)
        t = float(np.min(ratios))
        new = cur + t * (p - cur)
        new[int(np.argmin(ratios))] = 0.0
        new = np.maximum(new, 0.0)
        lam = np.zeros(m)
        lam[idx] = new / new.sum()
        free = lam > 0
    raise ASDError(f"the bundle subproblem (a {m}-variable QP on the simplex) did not settle "
                   "in its iteration limit: the bundle's gradients may be non-finite or "
                   "astronomically large; rescale the objective")
