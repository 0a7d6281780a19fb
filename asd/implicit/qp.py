"""``qp(P, q, A, b, G, h)``: the solution of a convex QP as a primitive in all its data.

    x*(θ) = argmin ½xᵀPx + qᵀx   subject to   Ax = b,  Gx <= h          (P ⪰ 0; an LP if P = 0)

The rule polishes the solver's answer on its active set, then differentiates by the piece the
ray ``θ + δθ̇`` enters, exactly, also where the problem is degenerate (Shapiro's directional
derivative of a parametric QP):

1. The active constraints ``𝒜`` and the support ``S`` of the multiplier set ``Λ`` (the
   constraints some multiplier holds with ``λ_i > 0``; one multiplier by least squares where
   the active constraints are independent, else one LP per active constraint). If every
   active constraint is in ``S`` and they are independent, the piece is fixed and the
   direction is never read.
2. Otherwise the direction decides. ``S`` becomes the support of the multipliers that are
   optimal for the directional problem's first stage (``max -(νᵀ(ḃ - Ȧx) + λᵀ(ḣ - Ġx))`` over
   ``Λ``), ``W = 𝒜∖S``, and ``ẋ`` solves the directional QP over the critical set: minimize
   ``½dᵀPd + (Ṗx + q̇ + Ȧᵀν + Ġᵀλ)ᵀd`` subject to ``Ad = ḃ - Ȧx``, ``G_S d = ḣ_S - Ġ_S x``,
   ``G_W d <= ḣ_W - Ġ_W x``. Its active subset ``T ⊆ W`` is found by enumerating subsets
   (smallest first), each an equality-constrained KKT system on independent rows (at a
   degenerate vertex ``S`` can hold more constraints than variables), keeping the first that
   is primal and dual feasible.
3. The linearization is the derivative of the equality-constrained QP on ``E ∪ S ∪ T``:
   ``K [ẋ; μ̇] = -[Ṗx + q̇ + Ṁᵀμ; Ṁx - ṁ]`` with ``K = [[P, Mᵀ], [M, 0]]``, pushed and pulled
   through one factorization. At a degenerate LP vertex (more active constraints than
   variables) this is the Jacobian of the vertex the ray moves to: an element of the Clarke
   Jacobian of ``x*``, exactly (cvxpylayers and diffcp return a least-squares blend there).

Refused (`NotLipschitzError`): a directional problem without a unique solution (the solution
map jumps or is set-valued there: an LP whose cost ties two vertices), a singular ``K`` on the
selected piece, and moving constraint matrices at a point where the multipliers are not unique
(the directional derivative is then a min-max this rule does not solve).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import linprog, minimize

from asd.errors import ASDError, NotLipschitzError, ShapeError
from asd.extend import Closure, FanIn, Primitive

ACTIVE = 1e-9
"""Relative slack below which an inequality counts as active when polishing a solution."""
SUPPORT = 1e-6
"""A multiplier entry above this (the LP's tolerances are 1e-10) counts as positive."""
MAX_WEAK = 12
"""Most weakly active constraints whose subsets the directional problem enumerates."""


def _data(P, q, A, b, G, h):
    """The QP's data as float arrays, with absent constraints as empty blocks."""
    q = np.asarray(q, dtype=float)
    n = q.size
    if q.ndim != 1:
        raise ShapeError(f"qp: q must be a vector, got shape {q.shape}")
    P = np.asarray(P, dtype=float)
    A = np.zeros((0, n)) if A is None else np.asarray(A, dtype=float).reshape(-1, n)
    b = np.zeros(0) if b is None else np.asarray(b, dtype=float).reshape(-1)
    G = np.zeros((0, n)) if G is None else np.asarray(G, dtype=float).reshape(-1, n)
    h = np.zeros(0) if h is None else np.asarray(h, dtype=float).reshape(-1)
    if P.shape != (n, n) or A.shape[0] != b.size or G.shape[0] != h.size:
        raise ShapeError(f"qp: shapes P {P.shape}, q {q.shape}, A {A.shape}, b {b.shape}, "
                         f"G {G.shape}, h {h.shape} do not fit n = {n} variables")
    return (P + P.T) / 2, q, A, b, G, h


def default_solve(P, q, A, b, G, h) -> np.ndarray:
    """HiGHS for an LP, SLSQP for a QP (both polished on the active set afterwards)."""
    n = q.size
    if not np.any(P):
        res = linprog(q, A_ub=G if G.size else None, b_ub=h if h.size else None,
                      A_eq=A if A.size else None, b_eq=b if b.size else None,
                      bounds=[(None, None)] * n, method="highs")
        if res.status != 0:
            raise ASDError(f"qp: the LP solver (HiGHS) reports: {res.message}")
        return res.x
    cons = []
    if A.size:
        cons.append({"type": "eq", "fun": lambda x: A @ x - b, "jac": lambda x: A})
    if G.size:
        cons.append({"type": "ineq", "fun": lambda x: h - G @ x, "jac": lambda x: -G})
    res = minimize(lambda x: 0.5 * x @ P @ x + q @ x, np.zeros(n), jac=lambda x: P @ x + q,
                   constraints=cons, method="SLSQP", options={"ftol": 1e-15, "maxiter": 500})
    return res.x


def _kkt(P, M, rhs_x, rhs_m):
    """Solve ``[[P, Mᵀ], [M, 0]] [x; μ] = [rhs_x; rhs_m]``; None if singular."""
    n, k = P.shape[0], M.shape[0]
    K = np.block([[P, M.T], [M, np.zeros((k, k))]])
    sv = np.linalg.svd(K, compute_uv=False)
    if sv.size and sv[-1] <= 1e-12 * max(sv[0], 1.0):
        return None, K
    sol = np.linalg.solve(K, np.concatenate([rhs_x, rhs_m]))
    return (sol[:n], sol[n:]), K


def _polish(P, q, A, b, G, h, x):
    """The exact solution on the solver's active set (a few active-set corrections if the
    multipliers or the slacks say the set was wrong), with the active set and multipliers."""
    scale = 1.0 + np.abs(h) + np.abs(G) @ np.abs(x) if G.size else np.zeros(0)
    active = (G @ x - h >= -ACTIVE * scale) if G.size else np.zeros(0, bool)
    for _ in range(20):
        M = np.vstack([A, G[active]])
        out, _ = _kkt(P, M, -q, np.concatenate([b, h[active]]))
        if out is None:  # dependent active constraints: keep the solver's x, multipliers by LS
            return x, active, None
        xs, mu = out
        lam = mu[A.shape[0]:]
        slack = G @ xs - h if G.size else np.zeros(0)
        viol = slack > ACTIVE * (1.0 + np.abs(h) + np.abs(G) @ np.abs(xs))
        neg = lam < -ACTIVE * (1.0 + np.max(np.abs(mu), initial=0.0))
        if not viol.any() and not neg.any():
            return xs, active, None
        idx = np.flatnonzero(active)
        active = active.copy()
        active[idx[neg]] = False
        active |= viol
    return x, active, None


def _linprog(c, **kw):
    res = linprog(c, method="highs", options={"primal_feasibility_tolerance": 1e-10,
                                              "dual_feasibility_tolerance": 1e-10}, **kw)
    if res.status != 0:
        raise ASDError("qp: no KKT multipliers at the solver's answer (it is not optimal, or "
                       f"the problem is not convex): {res.message}")
    return res


def _multipliers(g, A, G_act, rb=None, rh=None):
    """A multiplier ``(ν, λ)`` and the support ``S`` of the multiplier set (constraints some
    multiplier holds with ``λ_i > 0``: one LP per active constraint, maximizing ``λ_i``),
    among all KKT multipliers (``Aᵀν + G_actᵀλ = -g``, ``λ >= 0``) or, given the direction's
    right-hand sides ``rb, rh``, among those maximizing ``-(νᵀrb + λᵀrh)``: the dual of the
    directional problem's first stage, whose optimal multipliers say which constraints the
    ray keeps active."""
    m, k = A.shape[0], G_act.shape[0]
    if k == 0:
        nu = np.linalg.lstsq(A.T, -g, rcond=None)[0] if m else np.zeros(0)
        return nu, np.zeros(0), np.zeros(0, bool)
    A_eq = np.hstack([A.T, G_act.T])
    if np.linalg.matrix_rank(A_eq) == m + k:  # independent constraints: one multiplier
        mult = np.linalg.lstsq(A_eq, -g, rcond=None)[0]
        return mult[:m], mult[m:], mult[m:] > SUPPORT * (1.0 + float(np.max(np.abs(g))))
    bounds = [(None, None)] * m + [(0, None)] * k
    A_ub = b_ub = None
    if rb is not None:  # first the best value of the stage-one dual, then kept within it
        c1 = np.concatenate([rb, rh])
        best = _linprog(c1, A_eq=A_eq, b_eq=-g, bounds=bounds).fun
        A_ub, b_ub = c1[None, :], np.array([best + 1e-10 * (1.0 + abs(best))])
    support = np.zeros(k, bool)
    res = None
    for i in range(k):
        c = np.zeros(m + k)
        c[m + i] = -1.0
        res = _linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=-g, bounds=bounds)
        support[i] = -res.fun > SUPPORT * (1.0 + float(np.max(np.abs(g))))
    return res.x[:m], res.x[m:], support


def _independent(M: np.ndarray, fixed: int) -> np.ndarray:
    """Rows of ``M`` kept greedily while they raise the rank (the first ``fixed`` always)."""
    keep = np.zeros(M.shape[0], bool)
    keep[:fixed] = True
    rank = np.linalg.matrix_rank(M[:fixed]) if fixed else 0
    for i in range(fixed, M.shape[0]):
        trial = keep.copy()
        trial[i] = True
        r = np.linalg.matrix_rank(M[trial])
        if r > rank:
            keep, rank = trial, r
    return keep


class QPLayer:
    """The primitive behind `qp` (one per call signature of absent blocks)."""

    def __init__(self, solve, name: str = "qp"):
        self.solve = solve or default_solve
        self.name = name
        self.last: dict = {}
        self.prim = Primitive(name, self._impl)
        self.prim.defrule(self._rule)

    def _solution(self, P, q, A, b, G, h):
        x0 = np.asarray(self.solve(P, q, A, b, G, h), dtype=float).reshape(q.shape)
        x, active, _ = _polish(P, q, A, b, G, h, x0)
        return x, active

    def _impl(self, P, q, A, b, G, h):
        return self._solution(*_data(P, q, A, b, G, h))[0]

    def _piece(self, A, G, rows):
        """The active set ``rows`` thinned to independent constraints (equalities first): at a
        degenerate vertex the ray's critical set can hold more constraints than variables."""
        order = np.flatnonzero(rows)
        keep = _independent(np.vstack([A, G[order]]), A.shape[0])
        on = np.zeros(rows.size, bool)
        on[order[keep[A.shape[0]:]]] = True
        return on

    def _directional(self, P, A, G, S, W, lin, rb, rh):
        """The directional QP's solution and the constraints the ray keeps active."""
        Ws = np.flatnonzero(W)
        if Ws.size > MAX_WEAK:
            raise ASDError(f"qp: {Ws.size} weakly active constraints; the directional problem "
                           f"enumerates at most {MAX_WEAK} (perturb the problem)")
        best = []
        for size in range(Ws.size + 1):
            for T in itertools.combinations(Ws, size):
                rows = S.copy()
                rows[list(T)] = True
                on = self._piece(A, G, rows)
                M = np.vstack([A, G[on]])
                out, _ = _kkt(P, M, -lin, np.concatenate([rb, rh[on]]))
                if out is None:
                    continue
                d, mu = out
                mu_T = mu[A.shape[0]:][np.isin(np.flatnonzero(on), T)]
                tol = 1e-10 * (1.0 + np.max(np.abs(d), initial=0.0) + np.max(np.abs(rh)))
                dropped = rows & ~on
                rest = W & ~rows
                if (np.all(np.abs(G[dropped] @ d - rh[dropped]) <= tol)
                        and np.all(G[rest] @ d - rh[rest] <= tol) and np.all(mu_T >= -tol)):
                    best.append((d, on))
            if best:
                break
        if not best:
            raise NotLipschitzError(
                f"{self.name}: the directional problem of the QP along this direction has no "
                "solution with a nonsingular KKT matrix: the solution map is not single-valued "
                "or not Lipschitz here (an LP whose cost ties several vertices, or an "
                "unbounded direction). Perturb the cost, or add a small strongly convex term.")
        ds = [d for d, _ in best]
        if any(np.max(np.abs(d - ds[0])) > 1e-8 * (1.0 + np.max(np.abs(ds[0]))) for d in ds):
            raise NotLipschitzError(
                f"{self.name}: the directional problem of the QP has several solutions along "
                "this direction, so the solution map is not single-valued nearby (a face of "
                "optimal points). Perturb the cost, or add a small strongly convex term.")
        return best[0]

    def _rule(self, xs, dxs):
        P, q, A, b, G, h = _data(*xs)
        x, active = self._solution(P, q, A, b, G, h)
        idx = np.flatnonzero(active)
        g = P @ x + q
        nu, lam_act, S_act = _multipliers(g, A, G[active])
        S = np.zeros(h.size, bool)
        S[idx[S_act]] = True
        on = self._piece(A, G, S)
        weak = active & ~S
        if weak.any() or (S & ~on).any():  # the piece depends on the direction: read it
            Pd, qd, Ad, bd, Gd, hd = (
                np.zeros_like(v) if getattr(dx, "is_zero", False) else
                np.asarray(dx(), dtype=float).reshape(np.shape(v))
                for v, dx in zip((P, q, A, b, G, h), dxs, strict=True))
            Pd = (Pd + Pd.T) / 2
            rb, rh = bd - Ad @ x, hd - Gd @ x
            if (Ad.any() or Gd.any()) and np.linalg.matrix_rank(
                    np.vstack([A, G[active]])) < A.shape[0] + idx.size:
                raise NotLipschitzError(
                    f"{self.name}: the constraint matrices move at a point where the active "
                    "constraints are linearly dependent (the multipliers are not unique), so "
                    "the directional derivative is a min-max over the multipliers that asd "
                    "does not solve. Hold A and G fixed here (asd.stop_gradient) or perturb "
                    "the problem off the degenerate point.")
            nu, lam_act, S_act = _multipliers(g, A, G[active], rb, rh[active])
            S = np.zeros(h.size, bool)
            S[idx[S_act]] = True
            lam = np.zeros(h.size)
            lam[idx] = lam_act
            lin = Pd @ x + qd + Ad.T @ nu + Gd.T @ lam
            _, on = self._directional(P, A, G, S, active & ~S, lin, rb, rh)
        M = np.vstack([A, G[on]])
        out, K = _kkt(P, M, -q, np.concatenate([b, h[on]]))
        if out is None:
            raise NotLipschitzError(
                f"{self.name}: the KKT matrix of the active set {np.flatnonzero(on).tolist()} "
                "is singular (dependent equality constraints, or P singular on the null space "
                "of the active constraints: the solution is not unique), so the solution map "
                "is not Lipschitz there. Add a small strongly convex term or remove redundant "
                "constraints.")
        _, mu = out
        self.last = {"element": "Jacobian of the equality-constrained QP on the constraints "
                                "the ray keeps active (kept)", "active": idx,
                     "strongly_active": np.flatnonzero(S), "kept": np.flatnonzero(on)}
        return x, _qp_maps(K, x, mu, on, A.shape[0], [np.shape(v) for v in xs])


def _qp_maps(K, x, mu, on, m, shapes) -> FanIn:
    """The derivative of the equality-constrained QP on the kept constraints, per datum."""
    n = x.size
    Kinv = np.linalg.inv(K)
    rows = np.flatnonzero(on)
    nu, lam = mu[:m], np.zeros(on.size)
    lam[rows] = mu[m:]

    def residual(Pd, qd, Ad, bd, Gd, hd):
        """``[Ṗx + q̇ + Ṁᵀμ; Ṁx - ṁ]`` for batched tangents (zeros where None)."""
        top = (0.5 * (Pd + np.swapaxes(Pd, -1, -2)) @ x + qd + np.swapaxes(Ad, -1, -2) @ nu
               + np.swapaxes(Gd, -1, -2) @ lam)
        bottom = np.concatenate([Ad @ x - bd, (Gd @ x - hd)[..., rows]], axis=-1)
        return np.concatenate([top, bottom], axis=-1)

    def adjoint(ct):
        """``(w, ω)`` with ``K [w; ω] = [ct; 0]`` (K symmetric), batched."""
        z = np.concatenate([ct, np.zeros(ct.shape[:-1] + (K.shape[0] - n,))], axis=-1)
        sol = z @ Kinv.T
        return sol[..., :n], sol[..., n:]

    def grads(ct):
        w, om = adjoint(np.asarray(ct, dtype=float))
        o_b, o_h = om[..., :m], om[..., m:]
        gP = -0.5 * (w[..., :, None] * x + x[:, None] * w[..., None, :])
        gq = -w
        gA = -(nu[:, None] * w[..., None, :] + o_b[..., :, None] * x)
        full_h = np.zeros(ct.shape[:-1] + (on.size,))
        full_h[..., rows] = o_h
        lam_w = lam[:, None] * w[..., None, :]
        gG = -(lam_w + full_h[..., :, None] * x)
        return gP, gq, gA, o_b, gG, full_h

    zeros = [np.zeros(s) for s in shapes]

    def one(i):
        def qp_push(t):
            t = np.asarray(t, dtype=float)
            args = [np.broadcast_to(z, t.shape[:t.ndim - len(shapes[i])] + z.shape)
                    for z in zeros]
            args[i] = t
            return -(residual(*args) @ Kinv.T)[..., :n]

        def qp_pull(ct):
            return grads(ct)[i].reshape(np.shape(ct)[:-1] + shapes[i])

        return Closure(qp_push, qp_pull, shapes[i], (n,))

    return FanIn(*[one(i) for i in range(6)])


def qp(P, q, A=None, b=None, G=None, h=None, *, solve=None):
    """The solution ``x*`` of ``min ½xᵀPx + qᵀx  s.t.  Ax = b, Gx <= h`` (``P ⪰ 0``).

    Differentiable in all six data arrays by every asd transform, with the exact directional
    derivative at degenerate points (module docstring). ``solve(P, q, A, b, G, h)`` may be any
    solver; by default HiGHS (LP) or SLSQP (QP), polished on the active set. Absent blocks
    are ``None``. ``qp.last`` (on the returned layer: `qp_layer`) reports the active sets.

    >>> import numpy as np, asd
    >>> G = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # x1 <= h1, x2 <= h2, x1 + x2 <= h3
    >>> f = lambda h: asd.implicit.qp(np.zeros((2, 2)), np.array([-1.0, -2.0]), None, None, G, h)
    >>> h = np.array([1.0, 1.0, 2.0])                       # the vertex (1, 1): three active
    >>> asd.jacobian(f, direction=np.array([0.0, 0.0, -1.0]))(h)   # x1 = h3 - h2, x2 = h2
    array([[ 0., -1.,  1.],
           [ 0.,  1.,  0.]])
    >>> asd.jacobian(f, direction=np.array([0.0, 0.0, 1.0]))(h)    # x = (h1, h2)
    array([[1., 0., 0.],
           [0., 1., 0.]])
    """
    n = np.shape(q)[0]
    empty_rows, empty = np.zeros((0, n)), np.zeros(0)
    return _layer(solve).prim(P, q, empty_rows if A is None else A, empty if b is None else b,
                              empty_rows if G is None else G, empty if h is None else h)


_LAYERS: dict = {}


def _layer(solve) -> QPLayer:
    """One primitive per solver (so a program's node keeps its solver)."""
    key = id(solve)
    if key not in _LAYERS:
        _LAYERS[key] = QPLayer(solve)
    return _LAYERS[key]


def qp_layer(solve=None) -> QPLayer:
    """The `QPLayer` `qp` uses for ``solve`` (its ``last`` reports the active sets)."""
    return _layer(solve)
