"""Spectral functions of symmetric matrices: eigenvalues, extreme eigenvalues, Ky Fan sums, norms.

Each primitive computes its value and its derivative from ONE ``eigh`` of the symmetrized
input (the primal is the rule's to change). Asymmetric input ``X`` is read as
``(X + X.T) / 2``: value, tangent and gradient all see the symmetric part, so the gradient
of every function here is a symmetric matrix. ``eigvalsh`` also takes stacks of matrices
(leading axes), as numpy does.

Repeated eigenvalues are where these functions are not differentiable. There the direction
decides (DESIGN.md, the tie contract): along the ray ``X(δ) = X + δX₁ + δ²X₂ + …`` (``X₁`` the
tangent, the higher terms from the exact series of the input, `asd.extend.input_series`) the
eigenvalues of a cluster tied at ``λ`` are analytic, ``λ + δμ + δ²ν + …``, and so are their
eigenvectors (Rellich). `limit_eigh` computes that expansion by Kato's reduction process: the
cluster's invariant subspace along the ray solves a Riccati equation order by order
(`reduce_cluster`), which leaves a small symmetric matrix series whose eigenvalues are the
cluster's; its first coefficient splits the cluster into sub-clusters, each reduced again, to
order `ORDER`. The limit eigenbasis is the product of the rotations met on the way, sorted by the
expansions lexicographically, so e.g. the gradient of ``lambda_max`` at a multiple top
eigenvalue is ``q qᵀ`` with ``q`` the top eigenvector of ``X₁`` restricted to the top
eigenspace, or, where that ties, of the second-order matrix (``W.T X₁ V_r (λ - Λ_r)^-1 V_r.T
X₁ W + W.T X₂ W``), and so on. Only where the tie persists to every order (the eigenvalues
agree along the whole ray) do the lexicographic directions ``w1, w2, …`` decide, by the
first-order term of the input along them; a tie that survives those too is an equality near the
point, where every basis gives the same gradient.

Ties are detected with the scale-aware tolerance ``tie_tolerance(n, scale) = 8 n eps scale``
(``scale = max |λ|``, and the size of the coefficients at each order of the expansion):
eigenvalues closer than that are one cluster, reported as a ``"tolerance"`` decision. ``eigh``
is backward stable, so its eigenvalues carry errors of order ``n eps ||X||``; a tighter test
would miss ties that exist in exact arithmetic. An exactly diagonal matrix needs no tolerance
(`eigh_ties`). Inputs and tangents are scaled by powers of two (`pow2_scale`) so that entries
near the float maximum do not overflow.

A rule never tests for a tie itself: it states the repeated eigenvalues (`exact_where`), and
the limit basis is computed on the host by an eager sweep; a staged sweep keeps ``eigh``'s
basis and counts them undecided (the clusters, so the blocks the tangent is restricted to,
are shapes that depend on the values).

The matrix-norm functions act on rectangular ``X`` through the symmetric embedding
``E(X) = [[0, X], [X.T, 0]]`` whose eigenvalues are ``±σ(X)`` and zeros, so one code path
(and one tie analysis) serves both.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from asd.errors import ShapeError, UnsupportedError
from asd.extend import (
    Closure,
    Primitive,
    Series,
    SeriesUnavailable,
    input_series,
    record_tie_decision,
    refuse_where,
)

T = TypeVar("T")

EPS = float(np.finfo(float).eps)

ORDER = 12
"""How many orders of the ray ``X + δX₁ + δ²X₂ + …`` the expansion of a tied cluster reads
before the lexicographic directions decide: a split that opens at order 3 along a straight
ray (or at order 2 through the input's curvature) is decided by the ray, not by a
convention."""


# ----- the host seam: ties only the host can decide -----
# Stand-ins for engine services (`asd.core.ties`), built from `refuse_where` and the sweep's
# own mode: asd.extend has no service yet for a tie whose decision is an exact analysis
# rather than a sign (a Kato reduction, the leading vector of a series).

class _OnHost(Exception):
    """`refuse_where`'s eager answer where a tie needs the host (caught by `exact_where`)."""


def exact_where(mask, exact: Callable[[], T], otherwise: Callable[[], T]) -> T:
    """``exact()`` where any entry of ``mask`` is tied, else ``otherwise()``: how a rule states
    a tie only the host can decide (the exact series of its input, the Kato reduction of a tied
    eigenvalue cluster) without branching on it itself.

    The engine reads the mask (`refuse_where`): an eager sweep runs the exact path where an
    entry is tied; a staged sweep (`asd.core.staged`, no value to read) runs ``otherwise`` and
    counts the tied entries undecided for the running node (a probe flags them), so its result
    says where it does not stand. The exact path may branch on host values: it never runs
    staged.
    """
    try:
        refuse_where(np.asarray(mask) if isinstance(mask, bool | np.bool_) else mask, _OnHost)
    except _OnHost:
        return exact()
    return otherwise()


def sweep_mode(dx) -> str | bool:
    """How the sweep a lazy tangent belongs to decides ties: ``False`` eagerly (on values,
    exactly), ``"values"`` in a staged probe, ``"full"`` in a staged sweep (first order along
    ``v, w1, …``, the rest counted undecided). A property of the sweep, never of the data, so
    a rule may branch on it (the engine's `ray_compare` does)."""
    return getattr(getattr(dx, "trace", None), "staged", False)


def lex_tangents(dx) -> list:
    """The tangents of a staged sweep's lazy tangent along ``v, w1, …, wk`` (full arrays in
    the sweep's library): the keys a staged sweep decides a tie by, level by level, as the
    engine's `ray_compare` does (`asd.core.ties.staged_sign`)."""
    trace = dx.trace
    return [dx()] + [trace.lex_tangent(dx.k, level) for level in range(1, trace.lex.levels + 1)]


def reach(dx):
    """``|u_k| … |u_1| 1`` of the node a lazy tangent reads (`asd.core.sweep.Trace.reach`):
    zero where no input moves the entry to first order, so a tie there changes nothing a
    first-order sweep computes; None where unknown."""
    trace = getattr(dx, "trace", None)
    return None if trace is None else trace.reach(dx.k)


# ----- helpers shared with library/projections.py and library/linalg.py -----

def tie_tolerance(n: int, scale):
    """Two eigenvalues (or expansion coefficients) closer than this count as tied (``scale``
    may be an array: one tolerance per matrix of a stack)."""
    if np.ndim(scale):
        return 8.0 * max(int(n), 1) * EPS * np.asarray(scale, dtype=float)
    return 8.0 * max(int(n), 1) * EPS * float(scale)


def sym(a: np.ndarray) -> np.ndarray:
    """Symmetric part over the last two axes (a leading batch axis rides along).

    Halves before adding, so entries near the float maximum do not overflow, and a symmetric
    (or diagonal) input comes back exactly."""
    return a * 0.5 + np.swapaxes(a, -1, -2) * 0.5


def pow2_scale(a: np.ndarray) -> float:
    """The power of two ``c <= max |a| < 2c`` (1 for a zero array): dividing by it is exact
    (and finite even at the float maximum) and keeps squares and products of entries near the
    float maximum finite, as ``np.hypot`` does."""
    big = float(np.max(np.abs(a), initial=0.0))
    if not np.isfinite(big) or big == 0:
        return 1.0
    return float(np.ldexp(1.0, int(np.frexp(big)[1]) - 1))


def pow2_scales(a: np.ndarray) -> np.ndarray:
    """`pow2_scale` of each matrix of a stack (the last two axes), as an array."""
    big = np.max(np.abs(a), axis=(-2, -1), initial=0.0)
    ok = np.isfinite(big) & (big > 0)
    e = np.frexp(np.where(ok, big, 1.0))[1]
    return np.where(ok, np.ldexp(1.0, e - 1), 1.0)


def vnorm(x: np.ndarray) -> float:
    """The 2-norm of all entries, scaled first so that it cannot overflow or underflow."""
    c = pow2_scale(x)
    return c * float(np.linalg.norm(np.asarray(x, dtype=float).reshape(-1) / c))


def clusters(values: np.ndarray, tol: float) -> np.ndarray:
    """Labels of runs of sorted ``values`` whose consecutive gaps are at most ``tol``."""
    if values.size == 0:
        return np.zeros(0, int)
    return np.concatenate([[0], np.cumsum(np.diff(values) > tol)])


def eigh_ties(S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | float]:
    """``eigh`` of a symmetric ``S`` (or a stack of them) and the tolerance within which its
    eigenvalues tie (one per matrix).

    An exactly diagonal matrix has its diagonal as exact eigenvalues: they are sorted, not
    computed, and tie only when equal (tolerance 0), so a gap of 1e-9 at entries 1e6 is a gap.
    Otherwise ``eigh`` is backward stable, its eigenvalues carry errors of order
    ``n eps ||S||``, and eigenvalues within ``tie_tolerance`` form one cluster (a tie that
    rounding may have created, reported as ``"tolerance"`` where a rule decides it).
    """
    n = S.shape[-1]
    c = pow2_scales(S).astype(S.dtype)  # float32 stays float32
    lam, V = np.linalg.eigh(S / c[..., None, None])
    lam = lam * c[..., None]
    tol = tie_tolerance(n, np.max(np.abs(lam), axis=-1, initial=0.0))
    diagonal = ~np.any(S - S * np.eye(n, dtype=S.dtype), axis=(-2, -1))
    d = np.diagonal(S, axis1=-2, axis2=-1)
    order = np.argsort(d, axis=-1, kind="stable")
    exact = (np.arange(n)[:, None] == order[..., None, :]).astype(S.dtype)
    lam = np.where(diagonal[..., None], np.take_along_axis(d, order, axis=-1), lam)
    V = np.where(diagonal[..., None, None], exact, V)
    tol = np.where(diagonal, 0.0, tol)
    return lam, V, (float(tol) if np.ndim(tol) == 0 else tol)


def tied_matrices(lam: np.ndarray, tol) -> list[tuple]:
    """Indices of the matrices of a stack (``lam``: ``(..., n)``) with a cluster of tied
    eigenvalues: the only ones whose rule depends on the direction."""
    gaps = np.diff(lam, axis=-1) <= np.asarray(tol)[..., None]
    return [tuple(b) for b in np.argwhere(np.any(gaps, axis=-1))]


def repeated(values: np.ndarray, tol) -> np.ndarray:
    """Which of the sorted ``values`` (a stack, one tolerance per row) share their cluster
    with another one: the eigenvalues (singular values) tied to a neighbour."""
    gaps = np.diff(values, axis=-1) <= np.asarray(tol)[..., None]
    pad = np.zeros(values.shape[:-1] + (1,), bool)
    return np.concatenate([pad, gaps], axis=-1) | np.concatenate([gaps, pad], axis=-1)


# ----- the input along the ray -----

def _constant(e) -> float:
    """The constant term of a (nested) series: its value at the point."""
    while isinstance(e, Series):
        e = e.coefficient(0)
    return float(e)


def _lex_parts(e, levels: int) -> list[float]:
    """The first-order terms of a nested series along ``w1 .. w_levels`` (the outer variables;
    ``asd.extend.input_series`` with ``depth=None``)."""
    out = [0.0] * levels
    while isinstance(e, Series) and e.var >= 1:
        if e.var <= levels:
            out[e.var - 1] = _constant(e.coefficient(1))
        e = e.coefficient(0)
    return out


class RayMatrix:
    """A spectral rule's input along the ray ``X(δ) = X + δX₁ + δ²X₂ + …``, mapped by
    ``square`` (the symmetric part, or the embedding of a rectangular matrix).

    Each part is computed on first use, once per rule call, since each costs more than the one
    before: the tangent ``X₁`` where a cluster of tied eigenvalues needs the direction, the
    exact series (``X₂ … X_ORDER``) where the first order leaves a tie open, and the
    first-order terms along the lexicographic directions ``w1, w2, …`` where a tie persists
    along the whole ray. ``at(b)`` reads matrix ``b`` of a stack (the parts are computed for
    the whole stack at once).
    """

    def __init__(self, x, dx, square=sym):
        self.x, self.dx, self.square = np.asarray(x), dx, square
        self.index: tuple = ()
        self.cache: dict = {}

    def at(self, b: tuple) -> RayMatrix:
        view = copy.copy(self)
        view.index = tuple(b)
        return view

    def tangent(self) -> np.ndarray:
        if "tangent" not in self.cache:
            t = np.asarray(self.dx(), dtype=float).reshape(self.x.shape)
            self.cache["tangent"] = self.square(t)
        return self.cache["tangent"][self.index]

    def coefficients(self) -> np.ndarray | None:
        """``[X₁, X₂, …, X_ORDER]`` stacked (the exact series converted to floats), or None
        where the series cannot be computed (reported as a ``"tolerance"`` decision: the
        straight line ``X + δX₁`` decides then, blind to the input's curvature)."""
        if "series" not in self.cache:
            try:
                s = input_series(self.x, self.dx, self.x.shape)
            except SeriesUnavailable:
                self.cache["series"] = None
            else:
                flat = s.reshape(-1)
                c = np.array([[float(e.coefficient(k)) if isinstance(e, Series) else 0.0
                               for e in flat] for k in range(1, ORDER + 1)])
                self.cache["series"] = self.square(c.reshape((ORDER,) + self.x.shape))
        c = self.cache["series"]
        record_tie_decision("series" if c is not None else "tolerance", 1)
        return None if c is None else c[(slice(None),) + self.index]

    def lex(self) -> list[np.ndarray]:
        """The first-order terms ``[W₁, W₂, …]`` along the lexicographic directions."""
        if "lex" not in self.cache:
            s = input_series(self.x, self.dx, self.x.shape, depth=None)
            flat = s.reshape(-1)
            levels = max((e.var for e in flat if isinstance(e, Series)), default=0)
            parts = np.array([_lex_parts(e, levels) for e in flat]).reshape(
                self.x.shape + (levels,))
            self.cache["lex"] = [self.square(parts[..., level]) for level in range(levels)]
        return [w[self.index] for w in self.cache["lex"]]


# ----- eigenvalues along the ray: Kato's reduction process -----

def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product of two matrix series (coefficients along the first axis), truncated to
    the shorter length."""
    K = min(a.shape[0], b.shape[0])
    out = np.zeros((K, a.shape[1], b.shape[2]))
    for i in range(K):
        for j in range(K - i):
            out[i + j] += a[i] @ b[j]
    return out


def _inverse_sqrt(Q: np.ndarray) -> np.ndarray:
    """``(I + Q)^(-1/2)`` for a matrix series ``Q`` without constant term (binomial series)."""
    K, c = Q.shape[0], Q.shape[1]
    out = np.zeros((K, c, c))
    out[0] = np.eye(c)
    term, coef = out.copy(), 1.0
    for m in range(1, K):
        term = _product(term, Q)
        coef *= (-0.5 - (m - 1)) / m
        if not np.any(term):
            break
        out += coef * term
    return out


def reduce_cluster(T: np.ndarray, idx: np.ndarray, center: float) -> np.ndarray:
    """The reduced matrix series of the eigenvalues ``idx`` of ``T(δ) = Σ δ^k T_k``.

    ``T_0`` is diagonal with ``T_0[idx]`` tied at ``center`` and the others (``r``) apart
    from it. The invariant subspace of those eigenvalues along the ray is spanned by
    ``[I; P(δ)]`` (in the coordinates ``idx, r``), where ``P`` solves the Riccati equation
    ``C P - P A = P E P - Eᵀ`` (``A, E, C`` the blocks of ``T``), order by order:
    ``(d_r - center) P_k = [P E P]_k - E_kᵀ - Σ C_(k-j) P_j + Σ P_j A_(k-j)``. The cluster's
    eigenvalues are those of the symmetric ``N^(-1/2) H N^(-1/2)`` with ``H = [I; P]ᵀ T [I; P]``
    and ``N = I + PᵀP``: returned as a series like ``T``, with constant term ``center I``.
    """
    K = T.shape[0]
    d = np.diagonal(T[0]).copy()
    rest = np.ones(d.size, bool)
    rest[idx] = False
    c = len(idx)
    A = T[:, idx][:, :, idx].copy()
    A[0] = center * np.eye(c)
    if not rest.any():
        return sym(A)
    E = T[:, idx][:, :, rest].copy()
    C = T[:, rest][:, :, rest].copy()
    E[0] = 0.0
    C[0] = np.diag(d[rest])
    gap = d[rest] - center
    P = np.zeros((K, int(rest.sum()), c))
    for k in range(1, K):
        rhs = -E[k].T
        for j in range(1, k):
            rhs = rhs + P[j] @ A[k - j] - C[k - j] @ P[j]
            for i in range(1, k - j):
                rhs = rhs + P[j] @ E[i] @ P[k - j - i]
        P[k] = rhs / gap[:, None]
    EP = _product(E, P)
    H = A + EP + np.swapaxes(EP, -1, -2) + _product(np.swapaxes(P, -1, -2), _product(C, P))
    root = _inverse_sqrt(_product(np.swapaxes(P, -1, -2), P))
    return sym(_product(_product(root, H), root))


def _split(T: np.ndarray, n: int, scale: float, depth: int):
    """Split a cluster whose reduced series, less its constant and divided by δ, is ``T``.

    Returns the rotation ``U`` of the cluster's basis into the limit basis, the expansion
    coefficients ``(len(T), c)`` of its eigenvalues (sorted lexicographically ascending;
    tied ones share their mean, coefficients within rounding of 0 are 0), and the groups of
    positions still tied after every order.
    """
    L, c = T.shape[0], T.shape[1]
    if L == 0:
        return np.eye(c), np.zeros((0, c)), ([np.arange(c)] if c > 1 else [])
    if c == 1:
        coef = T[:, 0, 0].copy()
        scale = max(scale, float(np.max(np.abs(coef))))
        coef[np.abs(coef) <= tie_tolerance(n, scale) * 4.0 ** (depth + np.arange(L))] = 0.0
        return np.eye(1), coef[:, None], []
    scale = max(scale, float(np.max(np.abs(T))))
    tol = tie_tolerance(n, scale) * 4.0 ** depth
    mu, U = np.linalg.eigh(T[0])
    T = np.swapaxes(U, -1, -2) @ T @ U
    mu[np.abs(mu) <= tol] = 0.0
    labels = clusters(mu, tol)
    coeffs = np.zeros((L, c))
    groups: list[np.ndarray] = []
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)
        center = float(np.where(np.any(mu[idx] == 0), 0.0, np.mean(mu[idx])))
        coeffs[0, idx] = center
        if L == 1:
            groups += [idx] if idx.size > 1 else []
            continue
        U2, sub, tied = _split(reduce_cluster(T, idx, center)[1:], n, scale, depth + 1)
        U[:, idx] = U[:, idx] @ U2
        coeffs[1:, idx] = sub
        groups += [idx[g] for g in tied]
    return U, coeffs, groups


def _lex_split(W: np.ndarray, groups: list[np.ndarray], lex: list[np.ndarray], n: int,
               rows: np.ndarray) -> np.ndarray:
    """Decide the ``groups`` of columns of the limit basis ``W`` tied along the whole ray by
    the first-order terms ``lex`` along ``w1, w2, …``: rotates ``W`` and fills ``rows`` (one
    per direction) with the groups' coefficients. Returns ``W``."""
    for level, Wl in enumerate(lex):
        if not groups:
            break
        nxt = []
        for g in groups:
            Q = W[:, g]
            M = sym(Q.T @ Wl @ Q)
            mu, U = np.linalg.eigh(M)
            tol = tie_tolerance(n, max(1.0, float(np.max(np.abs(M)))))
            mu[np.abs(mu) <= tol] = 0.0
            W[:, g] = Q @ U
            labels = clusters(mu, tol)
            for label in np.unique(labels):
                sub = np.flatnonzero(labels == label)
                rows[level, g[sub]] = np.where(np.any(mu[sub] == 0), 0.0, np.mean(mu[sub]))
                if sub.size > 1:
                    nxt.append(g[sub])
        record_tie_decision("lexicographic", sum(g.size for g in groups))
        groups = nxt
    record_tie_decision("equal", sum(g.size for g in groups))
    return W


def limit_eigh(lam: np.ndarray, V: np.ndarray, ray: RayMatrix, refine: np.ndarray | None = None,
               *, tol: float | None = None, signs: bool = False, full: bool = False):
    """Rotate the flagged clusters of tied eigenvalues into their limit basis along the ray.

    ``refine[c]`` says whether cluster ``c`` (labels from `clusters` at ``tol``, default
    `tie_tolerance`) matters to the caller; the default is every cluster of two or more, and
    a caller may flag single eigenvalues too (``psd`` at a simple zero eigenvalue, the nuclear
    ball's threshold). ``ray`` (`RayMatrix`) is read only as far as the ties need: the tangent
    for the first order; the exact series where a sub-cluster still ties (or, with ``signs``,
    where an eigenvalue of a cluster centred at 0 has a zero coefficient: its sign matters);
    the lexicographic directions where a tie persists through order `ORDER`. ``full`` asks
    for every order even where the first one decides (the nuclear ball compares the
    expansions with its threshold's).

    Returns ``(V, levels, tols)``: the basis, the expansion of every eigenvalue as rows
    ``levels[0] = λ`` (the cluster's centre for a refined one), ``levels[1:ORDER+1]`` the
    coefficients of ``δ, δ², …`` along the ray (reparametrized so that the tangent and the
    matrix have unit size: every row keeps its signs and order), then one row per
    lexicographic direction; zero outside refined clusters. ``tols`` holds one tolerance per
    row (coefficients are already snapped: tied ones equal, rounding-sized ones 0).
    """
    n = len(lam)
    if tol is None:
        tol = tie_tolerance(n, np.max(np.abs(lam), initial=0.0))
    labels = clusters(lam, tol)
    sizes = np.bincount(labels)
    todo = np.flatnonzero((sizes > 1) if refine is None else refine)
    levels = np.zeros((1 + ORDER, n))
    levels[0] = lam
    tols = np.full(1 + ORDER, tie_tolerance(n, 1.0))
    tols[0] = tol
    if todo.size == 0:
        return V, levels, tols
    if tol > 0:
        record_tie_decision("tolerance", int(np.sum(sizes[todo])))
    b = pow2_scale(lam)
    D = ray.tangent()
    cd = pow2_scale(D)
    T1 = V.T @ (D / cd) @ V
    groups = [np.flatnonzero(labels == label) for label in todo]
    centers = [0.0 if np.any(np.abs(lam[idx]) <= tol) and signs else float(np.mean(lam[idx]))
               for idx in groups]
    first = [_split(sym(T1[np.ix_(idx, idx)])[None], n, 1.0, 1) for idx in groups]
    more = full or any(tied for _, _, tied in first) or (signs and any(
        center == 0 and np.any(coef[0] == 0) for (_, coef, _), center in zip(first, centers)))
    V = V.copy()
    if not more:
        record_tie_decision("tangent", int(np.sum(sizes[todo])))
        for idx, (U, coef, _), center in zip(groups, first, centers):
            V[:, idx] = V[:, idx] @ U
            levels[0, idx] = center
            levels[1, idx] = coef[0]
        return V, levels, tols
    T = np.zeros((ORDER + 1, n, n))
    T[0] = np.diag(lam / b)
    T[1] = T1
    X = ray.coefficients()
    if X is not None:
        for k in range(2, ORDER + 1):  # X(a t) / b with a = b / cd: the k-th term a^k X_k / b
            T[k] = V.T @ (np.ldexp(X[k - 1], (k - 1) * int(np.frexp(b)[1] - 1)
                                   - k * int(np.frexp(cd)[1] - 1))) @ V
    lex_rows, open_groups = [], []
    for idx, center in zip(groups, centers):
        T[0][idx, idx] = center / b
        R = reduce_cluster(T, idx, center / b)
        U, coef, tied = _split(R[1:], n, 1.0, 1)
        V[:, idx] = V[:, idx] @ U
        levels[0, idx] = center
        levels[1:, idx] = coef
        open_groups += [idx[g] for g in tied]
        if signs and center == 0:
            open_groups += [idx[[i]] for i in range(idx.size) if not np.any(coef[:, i])
                            and not any(i in g for g in tied)]
    if open_groups:
        lex = ray.lex()
        lex_rows = np.zeros((len(lex), n))
        V = _lex_split(V, open_groups, lex, n, lex_rows)
        levels = np.concatenate([levels, lex_rows])
        tols = np.concatenate([tols, np.full(len(lex), tie_tolerance(n, 1.0))])
    return V, levels, tols


def embed(X: np.ndarray) -> np.ndarray:
    """``[[0, X], [X.T, 0]]``: symmetric, eigenvalues ``±σ(X)`` plus ``|m - n|`` zeros."""
    m, n = X.shape[-2:]
    top = np.concatenate([np.zeros(X.shape[:-2] + (m, m), X.dtype), X], axis=-1)
    bottom = np.concatenate([np.swapaxes(X, -1, -2), np.zeros(X.shape[:-2] + (n, n), X.dtype)],
                            axis=-1)
    return np.concatenate([top, bottom], axis=-2)


def _floats(X) -> np.ndarray:
    X = np.asarray(X)
    return X if np.issubdtype(X.dtype, np.floating) else X.astype(float)


def square(X, name: str) -> np.ndarray:
    X = _floats(X)
    if X.ndim != 2 or X.shape[0] != X.shape[1]:
        raise ShapeError(f"{name} needs a square matrix, got shape {X.shape}")
    return X


def squares(X, name: str) -> np.ndarray:
    """A square matrix or a stack of them (leading axes), as numpy's linalg takes."""
    X = _floats(X)
    if X.ndim < 2 or X.shape[-1] != X.shape[-2]:
        raise ShapeError(f"{name} needs square matrices in the last two axes, got shape "
                         f"{X.shape}")
    return X


def matrix(X, name: str) -> np.ndarray:
    X = _floats(X)
    if X.ndim != 2:
        raise ShapeError(f"{name} needs a matrix (2-D array), got shape {X.shape}")
    return X


def gradient_map(G: np.ndarray, shape: tuple) -> Closure:
    """The linear functional ``T -> <G, T>`` of a scalar spectral function."""
    nd = len(shape)

    def push(t):
        return np.sum(t * G, axis=tuple(range(np.ndim(t) - nd, np.ndim(t))))

    def pull(ct):
        ct = np.asarray(ct)
        return ct.reshape(ct.shape + (1,) * nd) * G

    return Closure(push, pull, shape, ())


def selected_gradient(lam: np.ndarray, V: np.ndarray, tol: float, select: np.ndarray,
                      ray: RayMatrix) -> np.ndarray:
    """``sum of v v.T`` over the selected sorted positions, in the limit basis along the ray.

    Only clusters cut by the selection (holding selected and unselected positions) depend
    on the direction; the others contribute their spectral projector, basis-free.
    """
    labels = clusters(lam, tol)
    count = np.bincount(labels)
    chosen = np.bincount(labels, weights=select.astype(float))
    cut = (chosen > 0) & (chosen < count)
    V = exact_where(cut[labels], lambda: limit_eigh(lam, V, ray, cut, tol=tol)[0], lambda: V)
    Vs = V[:, select]
    return Vs @ Vs.T


# ----- eigvalsh: all eigenvalues, ascending -----

eigvalsh_p = Primitive("eigvalsh", lambda X: np.linalg.eigvalsh(sym(squares(X, "eigvalsh"))))


def limit_bases(lam: np.ndarray, V: np.ndarray, tol, ray: RayMatrix) -> np.ndarray:
    """``V`` with every matrix of a stack that has a tie rotated into its limit basis along
    the ray (`limit_eigh`); an eager sweep runs it where an eigenvalue repeats, a staged one
    keeps ``eigh``'s basis and counts the repeated eigenvalues undecided (`exact_where`)."""
    return exact_where(repeated(lam, tol), lambda: _limit_bases(lam, V, tol, ray), lambda: V)


def _limit_bases(lam: np.ndarray, V: np.ndarray, tol, ray: RayMatrix) -> np.ndarray:
    V = V.copy()
    for b in tied_matrices(lam, tol):
        V[b], _, _ = limit_eigh(lam[b], V[b], ray.at(b), tol=np.asarray(tol)[b])
    return V


@eigvalsh_p.defrule
def eigvalsh_rule(xs, dxs):
    X = squares(xs[0], "eigvalsh")
    lam, V, tol = eigh_ties(sym(X))
    V = limit_bases(lam, V, tol, RayMatrix(X, dxs[0], sym))

    def push(t):
        return np.einsum("...ij,...ik,...kj->...j", V, sym(t), V)

    def pull(ct):
        return (V * np.asarray(ct)[..., None, :]) @ np.swapaxes(V, -1, -2)

    return lam, Closure(push, pull, X.shape, lam.shape)


def eigvalsh(X) -> np.ndarray:
    """Eigenvalues of the symmetric part of ``X``, ascending (like ``numpy.linalg.eigvalsh``).

    At a repeated eigenvalue the Jacobian rows are ``q q.T`` for the limit eigenvectors along
    the direction (sorted by the eigenvalues of the direction restricted to the eigenspace).

    >>> import numpy as np, asd
    >>> D = np.array([[1.0, 0.0], [0.0, -1.0]])
    >>> asd.jacobian(asd.spectral.eigvalsh, direction=D)(np.eye(2))[1]
    array([[1., 0.],
           [0., 0.]])
    """
    return eigvalsh_p(X)


# ----- extreme eigenvalues and Ky Fan sums -----

def _topk_impl(X, k):
    lam = np.linalg.eigvalsh(sym(square(X, "topk_eigsum")))
    return np.sum(lam[len(lam) - k:])


topk_eigsum_p = Primitive("topk_eigsum", _topk_impl)


@topk_eigsum_p.defrule
def topk_eigsum_rule(xs, dxs, k):
    X = square(xs[0], "topk_eigsum")
    lam, V, tol = eigh_ties(sym(X))
    select = np.arange(len(lam)) >= len(lam) - k
    G = selected_gradient(lam, V, tol, select, RayMatrix(X, dxs[0], sym))
    return np.sum(lam[select]), gradient_map(G, X.shape)


def _check_k(k, n: int, name: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise UnsupportedError(f"{name}: k must be a Python int, got {type(k).__name__}")
    if not 0 <= int(k) <= n:
        raise ShapeError(f"{name}: k = {k} is outside [0, {n}] for a {n}x{n} matrix")
    return int(k)


def topk_eigsum(X, k: int):
    """Sum of the ``k`` largest eigenvalues of the symmetric part of ``X`` (Ky Fan k-sum).

    Convex; at an eigenvalue tied across the cut the subgradient is ``V_k V_k.T`` with the
    tied part of ``V_k`` the top eigenvectors of the direction restricted to the eigenspace.

    >>> import numpy as np, asd
    >>> D = np.diag([0.0, 1.0, 0.0])
    >>> asd.subgrad(lambda X: asd.spectral.topk_eigsum(X, 2), direction=D)(np.diag([2., 1., 1.]))
    array([[1., 0., 0.],
           [0., 1., 0.],
           [0., 0., 0.]])
    """
    n = np.shape(X)[-1] if np.ndim(X) else 0
    return topk_eigsum_p(X, k=_check_k(k, n, "topk_eigsum"))


def lambda_max(X):
    """Largest eigenvalue of the symmetric part of ``X``.

    At a multiple top eigenvalue the subgradient is ``q q.T``, ``q`` the top eigenvector of
    the direction restricted to the top eigenspace.

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.spectral.lambda_max, direction=np.diag([0.0, 1.0]))(np.eye(2))
    array([[0., 0.],
           [0., 1.]])
    """
    return topk_eigsum_p(X, k=1)


lambda_min_p = Primitive("lambda_min",
                         lambda X: np.linalg.eigvalsh(sym(square(X, "lambda_min")))[0])


@lambda_min_p.defrule
def lambda_min_rule(xs, dxs):
    X = square(xs[0], "lambda_min")
    lam, V, tol = eigh_ties(sym(X))
    select = np.arange(len(lam)) == 0
    G = selected_gradient(lam, V, tol, select, RayMatrix(X, dxs[0], sym))
    return lam[0], gradient_map(G, X.shape)


def lambda_min(X):
    """Smallest eigenvalue of the symmetric part of ``X`` (concave; ties as in lambda_max).

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.spectral.lambda_min, direction=np.diag([0.0, -1.0]))(np.eye(2))
    array([[0., 0.],
           [0., 1.]])
    """
    return lambda_min_p(X)


# ----- matrix norms through the symmetric embedding -----

def _norm_impl(name, order):
    def impl(X):
        X = matrix(X, name)
        return np.linalg.norm(X, order) if min(X.shape) else X.dtype.type(0)

    return impl


spectral_norm_p = Primitive("spectral_norm", _norm_impl("spectral_norm", 2))
nuclear_norm_p = Primitive("nuclear_norm", _norm_impl("nuclear_norm", "nuc"))


def _norm_rule(name, k_of):
    def rule(xs, dxs):
        X = matrix(xs[0], name)
        m = X.shape[0]
        lam, V, tol = eigh_ties(embed(X))
        k = k_of(X.shape)
        select = np.arange(len(lam)) >= len(lam) - k
        G = selected_gradient(lam, V, tol, select, RayMatrix(X, dxs[0], embed))
        return np.sum(lam[select]), gradient_map(2.0 * G[:m, m:], X.shape)

    rule.__name__ = f"{name}_rule"
    return rule


spectral_norm_p.defrule(_norm_rule("spectral_norm", lambda shape: min(1, *shape)))
nuclear_norm_p.defrule(_norm_rule("nuclear_norm", min))


def spectral_norm(X):
    """Largest singular value of the matrix ``X``.

    At a multiple top singular value the subgradient is ``u v.T`` for the top singular pair
    of the direction restricted to the top singular subspaces.

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.spectral.spectral_norm, direction=np.diag([0.0, 1.0]))(np.eye(2))
    array([[0., 0.],
           [0., 1.]])
    """
    return spectral_norm_p(X)


def nuclear_norm(X):
    """Sum of the singular values of the matrix ``X``.

    Where singular values vanish the direction's singular vectors on the null spaces
    complete the subgradient ``U V.T`` (so ``nuclear_norm'(X; D)`` is exact).

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.spectral.nuclear_norm, direction=np.array([[0., 0.], [0., -1.]]))(
    ...     np.diag([1.0, 0.0]))
    array([[ 1.,  0.],
           [ 0., -1.]])
    """
    return nuclear_norm_p(X)


__all__ = ["eigvalsh", "lambda_max", "lambda_min", "nuclear_norm", "spectral_norm",
           "topk_eigsum"]
