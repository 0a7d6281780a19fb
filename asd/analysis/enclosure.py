"""Outer enclosures of Clarke sets: the chain-rule inclusion, propagated through the program.

Sampling directions (`asd.clarke`) finds limiting gradients: an *inner* approximation of the
Clarke subdifferential. Deciding whether a ReLU network has two distinct Clarke subgradients
at a point is NP-hard (Bolte, Boustany, Pauwels and Pesquet-Popescu, ICLR 2023), so no
amount of sampling certifies that a gradient is *not* in the set. This module builds the
other side: a convex set provably *containing* the Clarke set, from Clarke's chain rule for
generalized Jacobians (Clarke 1983, Thm 2.6.6, applied to the program lifted node by node):

    ∂f(x) ⊆ co{ pull of 1 through A_K, ..., A_1 : A_k ∈ ∂φ_k at node k's inputs }.

A node whose rule met no tie has one Jacobian, its linearization (strictly differentiable
there); a node at a tie gives its generalized Jacobian as a *set* through `TIE_JACOBIANS`
(slopes between the one-sided ones for an elementwise kink, the hull of the tied candidates
for maximum, max and its pooling, the unit ball of the dual norm for a norm at 0). The
reverse sweep carries a set of cotangents

    c0 + Σ_j F_j,   each factor F_j the hull of a few points or an ellipsoid (a unit ball's
                    image), shared by every node it reaches (so correlations are kept),

and a tie turns the cotangent it receives into new factors. Where that cotangent is a point
the product is exact; where it is itself a set, the tie's vertices are multiplied out with
the factors it depends on (exact for the hull, ``FACTOR_BUDGET`` points at most) or, past the
budget, bounded by an interval (sound, no longer exact: `Enclosure.relaxed` says where).

**Exactness.** The inclusion is an equality where the program is Clarke *regular* in the
sense of Clarke's Thm 2.3.9: every node is strictly differentiable, or regular (a convex
kink: relu, abs, maximum, max, norms, a convex piecewise rule) with regular inputs, and every
input that is not strictly differentiable enters with nonnegative partials. That covers
convex outer functions of smooth maps and nonnegative sums of them: L1 and hinge losses,
max-affine functions, norms of residuals, plus smooth terms. There the reverse set is at
once inside the (independent-choice) chain-rule set, which regularity makes the Clarke set,
and outside it (soundness): `Enclosure.exact` is True and the enclosure *is* ∂f(x).

Cost: the reverse sweep pulls ``1 + P`` cotangents through each linearization, ``P`` the
points of all factors (about two per tied entry, more where products are multiplied out),
so time and memory are ``(1 + P)`` times one reverse sweep's; ``POINT_BUDGET`` bounds ``P``
(past it the enclosure gives up and says so: unbounded, never wrong).

The ε-subdifferential (``radius > 0``): `asd.analysis.ranges` encloses every node's values on
the ball; a node whose inputs' ranges reach a kink is treated as tied, with the Jacobians of
every piece its ranges reach (`ranged_jacobian`), and a smooth nonlinear node gets its
derivative's range. Nodes it cannot range make the enclosure unbounded, with the reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from asd.analysis.sets import Nearest, nearest
from asd.core.linear import Diagonal, FanIn
from asd.core.primitive import FixedTangent

FACTOR_BUDGET = 256
"""Most points one factor may hold when a tie multiplies out the factors its cotangent
depends on (exact for the hull); past it the product is bounded by an interval."""

POINT_BUDGET = 20_000
"""Most points all factors may hold together; past it the enclosure is unbounded."""


LINEAR = frozenset({
    "add", "subtract", "negative", "positive", "sum", "reshape", "transpose", "getitem",
    "broadcast_to", "concatenate", "stack", "pad", "copy", "cumsum", "conjugate", "cast",
    "update", "scatter_add", "gather_at",
})
"""Primitives linear in all their traced inputs."""

BILINEAR = frozenset({"multiply", "matmul", "einsum", "divide", "conv", "correlation",
                      "avg_pool", "cross"})
"""Linear in each operand: linear when one operand is traced (``divide``: the numerator)."""

PIECEWISE_AFFINE = frozenset({
    "relu", "abs", "leaky_relu", "relu6", "hardtanh", "hard_sigmoid", "soft_threshold",
    "hinge", "maximum", "minimum", "reduce_max", "clip", "max_pool", "sort", "topk_sum",
})
"""Primitives with affine pieces: affine near any point where their rule met no tie."""


# ----- the generalized Jacobian of a rule at its ties -----

@dataclass
class TieJacobian:
    """A primitive's generalized Jacobian at its tied output entries, as sums of polytopes.

    ``entries`` are the tied output entries (flat indices). Each tied entry's row of the
    Jacobian (a vector over the inputs' entries) ranges over a Minkowski sum of *components*:
    a polytope component lists its vertices, a ball component the input coordinates of a
    Euclidean unit ball. Sparse vertices: component ``comp[i]``, vertex ``vert[i]``, input
    ``arg[i]``, flat index ``index[i]``, coefficient ``coef[i]``. ``entry_of`` maps each
    component to its output entry (flat index), ``nverts`` counts its vertices. Output
    entries not in ``entries`` keep the rule's own linearization. ``regular``: the primitive
    is Clarke regular at the point (a convex kink), so the inclusion is an equality through
    it (module docstring).
    """

    entries: np.ndarray
    entry_of: np.ndarray
    nverts: np.ndarray
    comp: np.ndarray
    vert: np.ndarray
    arg: np.ndarray
    index: np.ndarray
    coef: np.ndarray
    regular: bool
    balls: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    sided: bool = False
    """Two-vertex components whose vertex 0 is the slope where the input's tangent is < 0
    and vertex 1 where it is > 0 (`couple` joins entries whose tangents are tied)."""
    src: np.ndarray | None = None
    """Per nonzero, the output entry whose cotangent multiplies it (default: its component's
    entry); a coupled component spans several entries."""

    def sources(self) -> np.ndarray:
        return self.entry_of[self.comp] if self.src is None else self.src

    @property
    def nonnegative(self) -> bool:
        return bool(np.all(self.coef >= 0)) and not self.balls

    def args_nonnegative(self, arg: int) -> bool:
        return bool(np.all(self.coef[self.arg == arg] >= 0)) and not any(
            a == arg for _, a, _ in self.balls)


def _segments(entries: np.ndarray, lo: np.ndarray, hi: np.ndarray, arg: int,
              index: np.ndarray, regular: bool) -> TieJacobian:
    """One two-vertex component per tied entry: the slope runs from ``lo`` to ``hi``."""
    n = len(entries)
    comps = np.arange(n)
    return TieJacobian(entries, entries, np.full(n, 2), np.repeat(comps, 2),
                       np.tile([0, 1], n), np.full(2 * n, arg), np.repeat(index, 2),
                       np.stack([lo, hi], axis=1).ravel(), regular)


def _probe_slopes(node, xs) -> tuple[np.ndarray, np.ndarray] | None:
    """The one-sided slopes of a unary elementwise rule: its linearization along ``+1`` and
    along ``-1`` at every entry (None where the rule's map is not elementwise)."""
    x = np.asarray(xs[0])
    slopes = []
    rng = np.random.default_rng(0)
    for sign in (1.0, -1.0):
        dx = FixedTangent(np.full(x.shape, sign), [rng.standard_normal(x.shape)])
        _, lin = node.prim.rule([x], [dx], **node.params)
        if type(lin) is FanIn:
            lin = lin.maps[0]
        if not isinstance(lin, Diagonal) or lin.in_shape != lin.out_shape:
            return None
        d = np.ones(x.shape) if lin.d is None else np.asarray(lin.d, dtype=float)
        slopes.append(np.broadcast_to(d, x.shape).ravel())
    return slopes[0], slopes[1]


def elementwise_jacobian(node, xs, ans) -> TieJacobian | None:
    """A unary elementwise piecewise rule (relu, abs, leaky_relu, hardtanh, clip's
    activations, every `asd.extend.defpiecewise` primitive): at a kink the Clarke slope is
    any value between the left and the right slope, which the rule itself gives along ``-1``
    and ``+1``. Regular (convex there) where the left slope is the smaller."""
    probed = _probe_slopes(node, xs)
    if probed is None:
        return None
    right, left = probed
    tied = np.flatnonzero(right != left)
    jac = _segments(tied, left[tied], right[tied], 0, tied,
                    bool(np.all(left[tied] <= right[tied])))
    jac.sided = True
    return jac


def _broadcast_index(shape: tuple, out: tuple) -> np.ndarray:
    """For each output entry (flat), the flat index of the broadcast operand it reads."""
    size = int(np.prod(shape, dtype=int))
    return np.broadcast_to(np.arange(size).reshape(shape), out).ravel()


def pair_jacobian(node, xs, ans) -> TieJacobian:
    """maximum, minimum at ``a == b``: the row is ``t e_a + (1 - t) e_b``, ``t in [0, 1]``.
    Regular for maximum (convex), not for minimum."""
    a, b = (np.asarray(x) for x in xs)
    out = tuple(np.shape(ans))
    tied = np.flatnonzero((np.broadcast_to(a, out) == np.broadcast_to(b, out)).ravel())
    n = len(tied)
    comps = np.arange(n)
    ia, ib = _broadcast_index(a.shape, out)[tied], _broadcast_index(b.shape, out)[tied]
    return TieJacobian(tied, tied, np.full(n, 2), np.repeat(comps, 2), np.tile([0, 1], n),
                       np.tile([0, 1], n), np.stack([ia, ib], axis=1).ravel(),
                       np.ones(2 * n), node.name == "maximum")


def extreme_jacobian(node, xs, ans) -> TieJacobian:
    """max, min over axes: a row tied between several entries has for Jacobian row the
    hull of their unit vectors. Regular for max (convex), not for min."""
    x = np.asarray(xs[0])
    p = node.params
    axis = p["axis"]
    keep = np.max(x, axis=axis, keepdims=True) if p["kind"] == "max" else np.min(
        x, axis=axis, keepdims=True)
    hit = (x == keep).ravel()
    owner = np.broadcast_to(np.arange(keep.size).reshape(keep.shape), x.shape).ravel()
    counts = np.bincount(owner[hit], minlength=keep.size)
    tied_rows = np.flatnonzero(counts > 1)
    sel = np.flatnonzero(hit & np.isin(owner, tied_rows))
    comp_of_row = np.full(keep.size, -1)
    comp_of_row[tied_rows] = np.arange(len(tied_rows))
    comp = comp_of_row[owner[sel]]
    order = np.argsort(comp, kind="stable")
    sel, comp = sel[order], comp[order]
    vert = np.arange(len(sel)) - np.searchsorted(comp, comp)
    return TieJacobian(tied_rows, tied_rows, counts[tied_rows], comp, vert,
                       np.zeros(len(sel), int), sel, np.ones(len(sel)), p["kind"] == "max")


def pnorm_jacobian(node, xs, ans) -> TieJacobian | None:
    """A norm at 0: the unit ball of the dual norm (Euclidean ball for p = 2, the cross
    polytope co{±e_i} for p = inf, the box [-1, 1]^n for p = 1; other p: the box, which
    contains their dual ball). Norms are convex: regular."""
    x = np.asarray(xs[0])
    p, axis = node.params["p"], node.params["axis"]
    keep = np.sqrt(np.sum(np.abs(x) ** 2, axis=axis, keepdims=True)) if axis is not None \
        else np.sqrt(np.sum(np.abs(x) ** 2)).reshape((1,) * x.ndim)
    owner = np.broadcast_to(np.arange(keep.size).reshape(keep.shape), x.shape).ravel()
    zero_rows = np.flatnonzero(keep.ravel() == 0)
    if not len(zero_rows):
        return TieJacobian(*(np.zeros(0, int),) * 7, np.zeros(0), True)
    members = [np.flatnonzero(owner == r) for r in zero_rows]
    if p == 2:
        return TieJacobian(zero_rows, np.zeros(0, int), np.zeros(0, int),
                           *(np.zeros(0, int),) * 4, np.zeros(0), True,
                           [(int(r), 0, m) for r, m in zip(zero_rows, members, strict=True)])
    comp, vert, index, coef, entry_of, nverts = [], [], [], [], [], []
    c = 0
    for r, m in zip(zero_rows, members, strict=True):
        if p == np.inf:
            comp.append(np.full(2 * len(m), c))
            vert.append(np.arange(2 * len(m)))
            index.append(np.repeat(m, 2))
            coef.append(np.tile([1.0, -1.0], len(m)))
            entry_of.append([r])
            nverts.append([2 * len(m)])
            c += 1
        else:
            comp.append(np.repeat(np.arange(c, c + len(m)), 2))
            vert.append(np.tile([0, 1], len(m)))
            index.append(np.repeat(m, 2))
            coef.append(np.tile([1.0, -1.0], len(m)))
            entry_of.append(np.full(len(m), r))
            nverts.append(np.full(len(m), 2))
            c += len(m)
    cat = np.concatenate
    comp_ = cat(comp)
    return TieJacobian(zero_rows, cat(entry_of).astype(int), cat(nverts).astype(int), comp_,
                       cat(vert), np.zeros(len(comp_), int), cat(index), cat(coef), True)


def _hulls(entries: np.ndarray, members: np.ndarray, lo: np.ndarray, counts: np.ndarray,
           regular: bool) -> TieJacobian:
    """One component per tied entry ``entries[i]``: the hull of the unit vectors of the input
    entries ``members[lo[i] : lo[i] + counts[i]]``."""
    order = np.argsort(entries, kind="stable")
    entries, lo, counts = entries[order], lo[order], counts[order]
    comp = np.repeat(np.arange(len(entries)), counts)
    vert = np.arange(len(comp)) - np.repeat(np.cumsum(counts) - counts, counts)
    return TieJacobian(entries, entries, counts, comp, vert, np.zeros(len(comp), int),
                       members[np.repeat(lo, counts) + vert], np.ones(len(comp)), regular)


def _rows_along(x: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``x`` as rows along ``axis`` (None: one row, flattened) and the flat index in ``x`` of
    each row entry; row-major over the other axes, the order of a reduction's output."""
    idx = np.arange(x.size).reshape(x.shape)
    if axis is None:
        return x.reshape(1, -1), idx.reshape(1, -1)
    n = x.shape[axis]
    return np.moveaxis(x, axis, -1).reshape(-1, n), np.moveaxis(idx, axis, -1).reshape(-1, n)


def sort_jacobian(node, xs, ans) -> TieJacobian:
    """sort at equal entries: a block of ``m`` tied values can leave in any order, so the
    block's Jacobian is the hull of its permutation matrices (the Birkhoff polytope). Each
    output row of the block is given the hull of the block's unit vectors independently:
    that holds every doubly stochastic matrix (an outer set, not exact). Not regular."""
    rows, at = _rows_along(np.asarray(xs[0]), node.params["axis"])
    order = np.argsort(rows, axis=-1, kind="stable")
    s = np.take_along_axis(rows, order, axis=-1)
    src = np.take_along_axis(at, order, axis=-1).ravel()
    new = np.ones(rows.shape, bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    group = np.cumsum(new.ravel()) - 1
    sizes, start = np.bincount(group), np.flatnonzero(new.ravel())
    tied = np.flatnonzero(sizes[group] > 1)       # sorted position p: output entry at[p]
    return _hulls(at.ravel()[tied], src, start[group[tied]], sizes[group[tied]], False)


def max_pool_jacobian(node, xs, ans) -> TieJacobian:
    """max_pool at a window whose maximum is shared: the hull of the tied entries' unit
    vectors (padding copies of an edge entry are not candidates). Each window is a max of
    linear functions: regular."""
    from asd.library.order import _pool_padding, _pool_positions

    x = np.asarray(xs[0])
    window, stride, padding = (node.params[k] for k in ("window", "stride", "padding"))
    spatial = x.shape[-len(window):]
    positions, _ = _pool_positions(spatial, window, stride, padding)
    valid = ~_pool_padding(spatial, window, stride, padding)
    at = np.arange(x.size).reshape(x.shape)[(Ellipsis, *positions)]
    vals = x[(Ellipsis, *positions)]
    valid = np.broadcast_to(valid, vals.shape)
    top = np.max(np.where(valid, vals, -np.inf), axis=-1, keepdims=True)
    hit = (valid & (vals == top)).reshape(-1, vals.shape[-1])
    counts = hit.sum(axis=1)
    tied = np.flatnonzero(counts > 1)
    members = at.reshape(hit.shape)[tied][hit[tied]]
    return _hulls(tied, members, np.cumsum(counts[tied]) - counts[tied], counts[tied], True)


def topk_sum_jacobian(node, xs, ans) -> TieJacobian:
    """topk_sum where the k-th and (k+1)-th largest tie at ``t``: the row is 1 on the ``a``
    entries above ``t`` and ``w`` on the ``m`` tied ones, ``w ∈ [0, 1]^m`` with ``Σw = k - a``
    (a hypersimplex). Given as a fixed vertex plus ``r`` copies of the hull of ``±e_i``
    (``r = k - a`` or ``m - (k - a)``, whichever is smaller): exact where ``r = 1``, an outer
    set otherwise. The sum of the k largest is convex: regular where exact."""
    k = node.params["k"]
    rows, at = _rows_along(np.asarray(xs[0]), node.params["axis"])
    n = rows.shape[1]
    if k >= n:
        return _hulls(*(np.zeros(0, int),) * 4, True)
    s = -np.sort(-rows, axis=-1)
    tied_rows = np.flatnonzero(s[:, k] == s[:, k - 1])
    parts: list[tuple[int, np.ndarray, float]] = []  # (row, vertex entries, coefficient)
    exact = True
    for r in tied_rows:                                # per tied row, not per entry
        t = s[r, k - 1]
        above, group = at[r][rows[r] > t], at[r][rows[r] == t]
        need, m = k - len(above), len(group)
        take = need <= m - need                          # r copies of co{e_i}, else of co{-e_i}
        fixed = above if take else np.concatenate([above, group])
        copies = need if take else m - need
        exact &= copies == 1
        if len(fixed):
            parts.append((r, fixed[None, :], 1.0))
        parts.extend((r, group[:, None], 1.0 if take else -1.0) for _ in range(copies))
    comp, vert, index, coef, entry_of, nverts = [], [], [], [], [], []
    for c, (r, verts, sign) in enumerate(parts):
        nv, width = verts.shape
        comp.append(np.full(verts.size, c))
        vert.append(np.repeat(np.arange(nv), width))
        index.append(verts.ravel())
        coef.append(np.full(verts.size, sign))
        entry_of.append(r)
        nverts.append(nv)
    if not parts:
        return _hulls(*(np.zeros(0, int),) * 4, True)
    cat = np.concatenate
    index_ = cat(index)
    return TieJacobian(tied_rows, np.asarray(entry_of), np.asarray(nverts), cat(comp),
                       cat(vert), np.zeros(len(index_), int), index_, cat(coef), bool(exact))


def _spectral_parts(U: np.ndarray, r: int) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """``{U Z Uᵀ : 0 ⪯ Z ⪯ I, tr Z = r}`` (``U`` an eigenspace basis with ``m`` columns)
    inside a fixed matrix plus a Minkowski sum of polytopes, rows flattened: ``diag Z`` in
    the hypersimplex, held by ``r`` copies of the hull of ``u_i u_iᵀ`` (or the projector
    minus ``m - r`` copies of it, whichever is fewer), and per pair ``i < j`` the segment
    ``±(u_i u_jᵀ + u_j u_iᵀ)/2`` (``|Z_ij| <= 1/2`` since ``Z`` and ``I - Z`` are PSD)."""
    m = U.shape[1]
    diag = [np.outer(u, u).ravel() for u in U.T]
    pairs = [(np.outer(U[:, i], U[:, j]) + np.outer(U[:, j], U[:, i])).ravel() / 2
             for i, j in itertools.combinations(range(m), 2)]
    if r <= m - r:
        fixed, shapes = np.zeros(U.shape[0] ** 2), [diag] * r
    else:
        fixed, shapes = np.sum(diag, axis=0), [[-d for d in diag]] * (m - r)
    return fixed, shapes + [[p, -p] for p in pairs]


class _Rows:
    """Collects components (lists of flattened vertex rows over an input block) per output
    entry into a `TieJacobian`."""

    def __init__(self):
        self.entries, self.entry_of, self.nverts = [], [], []
        self.comp, self.vert, self.index, self.coef = [], [], [], []

    def add(self, entry: int, verts: list[np.ndarray], offset: int) -> None:
        c = len(self.nverts)
        for v_i, row in enumerate(verts):
            self.comp.append(np.full(row.size, c))
            self.vert.append(np.full(row.size, v_i))
            self.index.append(offset + np.arange(row.size))
            self.coef.append(row)
        self.entry_of.append(entry)
        self.nverts.append(len(verts))

    def jacobian(self) -> TieJacobian:
        if not self.nverts:
            return _hulls(*(np.zeros(0, int),) * 4, False)
        cat = np.concatenate
        index = cat(self.index)
        return TieJacobian(np.unique(self.entry_of), np.asarray(self.entry_of),
                           np.asarray(self.nverts), cat(self.comp), cat(self.vert),
                           np.zeros(len(index), int), index, cat(self.coef), False)


def eigvalsh_jacobian(node, xs, ans) -> TieJacobian:
    """eigvalsh at a repeated eigenvalue: with ``U`` an orthonormal basis of its eigenspace,
    every eigenvalue of the cluster has the Clarke set ``{U Z Uᵀ : Z ⪰ 0, tr Z = 1}`` (the
    limits of ``u uᵀ`` over unit ``u`` in the space; the rule reads ``sym(X)``, so a
    symmetric ``M`` is also the row over ``X``'s entries), enclosed by `_spectral_parts`: an
    outer set. Clusters are eigenvalues within eigh's rounding tolerance of each other."""
    from asd.library.spectral import clusters, eigh_ties, sym

    X = np.asarray(xs[0], dtype=float)
    n = X.shape[-1]
    lam, V, tol = eigh_ties(sym(X))
    lam, V = lam.reshape(-1, n), V.reshape(-1, n, n)
    tol = np.broadcast_to(np.asarray(tol, dtype=float), lam.shape[:1])
    rows = _Rows()
    for b in range(len(lam)):                        # per matrix and cluster, not per entry
        labels = clusters(lam[b], float(tol[b]))
        for label in np.flatnonzero(np.bincount(labels) > 1):
            members = np.flatnonzero(labels == label)
            _, shapes = _spectral_parts(V[b][:, members], 1)
            for k in members:                        # every eigenvalue of the cluster
                for verts in shapes:
                    rows.add(b * n + k, verts, b * n * n)
    return rows.jacobian()


def eigsum_jacobian(node, xs, ans) -> TieJacobian:
    """topk_eigsum (lambda_max for k = 1) and lambda_min where a cluster of eigenvalues is
    cut by the selection (``r`` of its ``m`` positions selected): the clusters above the cut
    give their projectors, the cut one ``{U Z Uᵀ : 0 ⪯ Z ⪯ I, tr Z = r}`` (Overton and
    Womersley), enclosed by `_spectral_parts`: an outer set, never called exact."""
    from asd.library.spectral import clusters, eigh_ties, sym

    X = np.asarray(xs[0], dtype=float)
    n = X.shape[-1]
    lam, V, tol = eigh_ties(sym(X))
    k = node.params["k"] if node.name == "topk_eigsum" else 1
    select = np.arange(n) >= n - k if node.name == "topk_eigsum" else np.arange(n) < 1
    labels = clusters(lam, float(tol))
    count = np.bincount(labels)
    chosen = np.bincount(labels, weights=select.astype(float)).astype(int)
    cut = np.flatnonzero((chosen > 0) & (chosen < count))
    rows = _Rows()
    if not len(cut):
        return rows.jacobian()
    whole = select & ~np.isin(labels, cut)
    fixed = (V[:, whole] @ V[:, whole].T).ravel()
    for label in cut:                                # at most one cut cluster
        extra, shapes = _spectral_parts(V[:, labels == label], int(chosen[label]))
        fixed = fixed + extra
        for verts in shapes:
            rows.add(0, verts, 0)
    rows.add(0, [fixed], 0)
    return rows.jacobian()

TIE_JACOBIANS: dict[str, Callable] = {
    "relu": elementwise_jacobian, "abs": elementwise_jacobian,
    "leaky_relu": elementwise_jacobian, "relu6": elementwise_jacobian,
    "hardtanh": elementwise_jacobian, "hard_sigmoid": elementwise_jacobian,
    "soft_threshold": elementwise_jacobian, "hinge": elementwise_jacobian,
    "huber": elementwise_jacobian, "elu": elementwise_jacobian,
    "maximum": pair_jacobian, "minimum": pair_jacobian,
    "reduce_max": extreme_jacobian, "max_pool": max_pool_jacobian,
    "sort": sort_jacobian, "topk_sum": topk_sum_jacobian, "eigvalsh": eigvalsh_jacobian,
    "topk_eigsum": eigsum_jacobian, "lambda_min": eigsum_jacobian,
    "pnorm": pnorm_jacobian,
}
"""Primitive name -> ``fn(node, xs, ans) -> TieJacobian | None``: the generalized Jacobian
at the rule's ties (the small protocol by which primitives state their set-valued Jacobian;
kept here, in the analysis layer, rather than beside each rule). A rule that met a tie and
has no entry (or returns None) makes the enclosure unbounded, with its name in the reason.
A `defpiecewise` primitive is covered by `elementwise_jacobian` whatever its name."""


def tie_jacobian(node, xs, ans) -> TieJacobian | None:
    fn = TIE_JACOBIANS.get(node.name)
    if fn is None and hasattr(node.prim.rule, "piecewise_table"):
        fn = elementwise_jacobian
    return None if fn is None else fn(node, xs, ans)


def couple(jac: TieJacobian, entries: np.ndarray, rows: np.ndarray) -> TieJacobian:
    """Join the two-vertex components of tied entries whose switching quantities are affine
    with parallel gradients ``rows``: near x they are ``λ_m t`` for one affine ``t`` (exactly,
    not to first order), so every point near x puts all of them on the sides ``sign(λ_m t)``
    at once, and the pairs of slopes they can take jointly are two, not ``2^m``. The chain
    rule's product of independent slopes would let ``relu(x) - relu(-x)`` have the Clarke
    set [-1, 1] instead of {1}. Zero rows (a quantity constant near x) stay independent."""
    norms = np.linalg.norm(rows, axis=1)
    keys: dict[bytes, list[tuple[int, float]]] = {}
    for e, row, n in zip(entries, rows, norms, strict=True):
        if n == 0:
            continue
        unit = row / n
        lead = unit[np.flatnonzero(unit)[0]]
        sign = 1.0 if lead > 0 else -1.0
        keys.setdefault((sign * unit).tobytes(), []).append((int(e), sign))
    groups = [g for g in keys.values() if len(g) > 1]
    if not groups:
        return jac
    comp_of_entry = dict(zip(jac.entry_of.tolist(), range(len(jac.entry_of)), strict=True))
    joined = {comp_of_entry[e] for g in groups for e, _ in g}
    keep = np.flatnonzero(~np.isin(jac.comp, list(joined)))
    comps_left = [c for c in range(len(jac.entry_of)) if c not in joined]
    renumber = np.full(len(jac.entry_of), -1)
    renumber[comps_left] = np.arange(len(comps_left))
    comp, vert, arg, index, coef = (jac.comp[keep], jac.vert[keep], jac.arg[keep],
                                    jac.index[keep], jac.coef[keep])
    src = jac.sources()[keep]
    comp = renumber[comp]
    entry_of = list(jac.entry_of[comps_left])
    nverts = list(jac.nverts[comps_left])
    extra = [[], [], [], [], [], []]
    for g in groups:
        c = len(entry_of)
        entry_of.append(g[0][0])
        nverts.append(2)
        for e, sign in g:
            nz = np.flatnonzero(jac.comp == comp_of_entry[e])
            for i in nz:
                # joint vertex 0: the common quantity increases; member e's own quantity
                # then moves with sign, so it takes its right slope (vertex 1) if sign > 0
                own = jac.vert[i]
                joint = 0 if (own == 1) == (sign > 0) else 1
                for lst, val in zip(extra, (c, joint, jac.arg[i], jac.index[i], jac.coef[i],
                                            e), strict=True):
                    lst.append(val)
    cat = np.concatenate
    return TieJacobian(jac.entries, np.asarray(entry_of, int), np.asarray(nverts, int),
                       cat([comp, np.asarray(extra[0], int)]),
                       cat([vert, np.asarray(extra[1], int)]),
                       cat([arg, np.asarray(extra[2], int)]),
                       cat([index, np.asarray(extra[3], int)]),
                       cat([coef, np.asarray(extra[4], float)]), jac.regular, jac.balls,
                       False, cat([src, np.asarray(extra[5], int)]))


# ----- the enclosure: a point plus factors -----

class Enclosure:
    """A convex set ``center + Σ_j F_j`` containing the Clarke set of ``f`` at ``x``.

    Factor ``j`` is the hull of the rows ``points[starts[j]:starts[j+1]]`` (``kind`` "hull")
    or the ellipsoid ``{Mᵀu : |u| <= 1}`` with ``M`` those rows (``kind`` "ball"). ``exact``:
    proven equal to the Clarke set (a regular program, no relaxed product). ``relaxed`` and
    ``unbounded`` say, by node, where it is looser than the chain rule or has no bound (then
    its support function is infinite: nothing can be proven outside it).
    """

    def __init__(self, center: np.ndarray, points: np.ndarray, starts: np.ndarray,
                 kinds: list[str], exact: bool, relaxed: list[str], unbounded: list[str],
                 radius: float = 0.0):
        self.center, self.points, self.starts, self.kinds = center, points, starts, kinds
        self.exact = exact and not unbounded and not relaxed
        self.relaxed, self.unbounded, self.radius = relaxed, unbounded, radius
        bounds = np.r_[starts, len(points)]
        self._hull = [(int(a), int(b)) for a, b, k in zip(bounds[:-1], bounds[1:], kinds,
                                                            strict=True) if k == "hull"]
        self._balls = [points[a:b] for a, b, k in zip(bounds[:-1], bounds[1:], kinds,
                                                     strict=True) if k == "ball"]
        hull_rows = [np.arange(a, b) for a, b in self._hull]
        self._hull_rows = np.concatenate(hull_rows) if hull_rows else np.zeros(0, int)
        self._hull_starts = np.cumsum([0] + [b - a for a, b in self._hull])[:-1]
        scale = float(np.sum(np.abs(points))) + float(np.sum(np.abs(center)))
        # what rounding in the sweep that built the set may have moved its support function
        self.slack = 1e-12 * (1.0 + scale)

    @property
    def bounded(self) -> bool:
        return not self.unbounded

    @property
    def size(self) -> int:
        """Points and ball rows held: the cost of one support-function call."""
        return len(self.points)

    def __repr__(self) -> str:
        what = "exact" if self.exact else ("unbounded" if self.unbounded else "outer")
        return (f"Enclosure({what}, {len(self.kinds)} factors, {len(self.points)} points, "
                f"radius={self.radius:g})")

    def support(self, d: np.ndarray) -> tuple[float, np.ndarray]:
        """``h(d) = max over the set of d·c`` and a point attaining it (the oracle of
        `asd.analysis.sets`); infinite for an unbounded enclosure."""
        d = np.asarray(d, dtype=float).ravel()
        if self.unbounded:
            return np.inf, self.center
        h = float(self.center @ d)
        c = self.center.copy()
        if len(self._hull_rows):
            scores = self.points[self._hull_rows] @ d
            best = np.maximum.reduceat(scores, self._hull_starts)
            h += float(np.sum(best))
            # the first row attaining each factor's maximum
            hit = scores == np.repeat(best, np.diff(np.r_[self._hull_starts, len(scores)]))
            first = np.flatnonzero(hit)
            owner = np.searchsorted(self._hull_starts, first, side="right") - 1
            _, pick = np.unique(owner, return_index=True)
            c += self.points[self._hull_rows[first[pick]]].sum(axis=0)
        for M in self._balls:
            u = M @ d
            n = float(np.linalg.norm(u))
            h += n
            if n > 0:
                c += M.T @ (u / n)
        return h, c

    def nearest(self, g: np.ndarray) -> Nearest:
        """The point of the enclosure nearest to ``g``, with certified bounds on the
        distance (`asd.analysis.sets.nearest`)."""
        return nearest(self.support, np.asarray(g, dtype=float).ravel(), slack=self.slack)


# ----- the reverse sweep over sets -----

class _Adjoint:
    """The cotangent set of every live node: ``c0[r] + Σ_j G[r][rows of j] λ_j``.

    Rows of all factors live in one numbered space (``starts``, ``kinds``); a node's ``G``
    holds the rows it has (missing rows are zero). Dead factors (multiplied out into a new
    one) keep their rows at zero.
    """

    def __init__(self):
        self.c0: dict[int, np.ndarray] = {}
        self.G: dict[int, np.ndarray] = {}
        self.starts: list[int] = []
        self.kinds: list[str] = []
        self.dead: list[bool] = []
        self.P = 0

    def rows(self, r: int, size: int) -> np.ndarray:
        G = self.G.get(r)
        if G is None:
            return np.zeros((self.P, size))
        if len(G) < self.P:
            G = np.vstack([G, np.zeros((self.P - len(G), size))])
            self.G[r] = G
        return G

    def add(self, r: int, c0: np.ndarray | None, G: np.ndarray | None) -> None:
        if c0 is not None:
            self.c0[r] = c0 if r not in self.c0 else self.c0[r] + c0
        if G is not None and len(G):
            old = self.G.get(r)
            if old is None:
                self.G[r] = G
            else:
                n = max(len(old), len(G))
                total = np.zeros((n, old.shape[1]))
                total[:len(old)] += old
                total[:len(G)] += G
                self.G[r] = total

    def new_factors(self, sizes: np.ndarray, kind: str) -> int:
        """Open factors of ``sizes`` rows each; returns the first new row."""
        first = self.P
        starts = first + np.r_[0, np.cumsum(sizes)[:-1]]
        self.starts.extend(int(s) for s in starts)
        self.kinds.extend([kind] * len(sizes))
        self.dead.extend([False] * len(sizes))
        self.P += int(np.sum(sizes))
        return first

    def factor_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.starts), rows, side="right") - 1

    def extent(self, j: int) -> tuple[int, int]:
        end = self.starts[j + 1] if j + 1 < len(self.starts) else self.P
        return self.starts[j], end


@dataclass
class _Flags:
    """Per node: strictly differentiable in x (``smooth``), regular with the chain rule an
    equality (``regular``); the tie Jacobians found on the way."""

    smooth: list[bool]
    regular: list[bool]
    ties: dict[int, TieJacobian | None]
    affine: list[bool] = field(default_factory=list)
    """Affine in x near the point (linear maps and untied affine pieces from the inputs):
    then the linearization is exact on a neighbourhood, so entries whose tangent rows are
    parallel switch together (`couple`)."""


def _nonnegative_map(lin, arg_pos: int) -> bool:
    """Whether every entry of the map's block for input ``arg_pos`` is >= 0: its pull of ones
    equals its magnitude's (sums of equal nonnegative terms are bitwise equal; one negative
    entry makes them differ)."""
    m = lin.maps[arg_pos] if type(lin) is FanIn else lin
    if m is None:
        return True
    mag = m.magnitude()
    if mag is None:
        return False
    ones = np.ones(m.out_shape)
    return bool(np.array_equal(np.asarray(m.pull(ones)), np.asarray(mag.pull(ones))))


def _active_args(trace, k: int) -> list[tuple[int, int]]:
    """``(position, node)`` of the inputs of node ``k`` that carry a derivative."""
    node = trace.nodes[k]
    args = trace.dargs.get(k, node.args)
    wants = trace.wants[k]
    return [(i, r) for i, r in enumerate(args)
            if type(r) is int and trace.nodes[r].active and wants[i]]


def _flags(trace, out: int, tied: set[int], given: dict | None = None) -> _Flags:
    nodes = trace.nodes
    smooth = [True] * (out + 1)
    regular = [True] * (out + 1)
    affine = [True] * (out + 1)
    ties: dict[int, TieJacobian | None] = {}
    for k in range(out + 1):
        node = nodes[k]
        lin = trace.lins[k]
        if node.prim is None or lin is None:
            continue
        args = _active_args(trace, k)
        affine[k] = all(affine[r] for _, r in args) and k not in tied and (
            node.name in LINEAR or node.name in PIECEWISE_AFFINE
            or (node.name in BILINEAR and len(args) == 1 and (
                node.name != "divide" or args[0][0] == 0)))
        rough = [(i, r) for i, r in args if not smooth[r]]
        ok = all(regular[r] for _, r in args)
        jac = None
        if given is not None:
            jac = given.get(k)
        elif k in tied and k not in trace.dargs:
            xs = [np.asarray(trace.values[r]) if type(r) is int else np.asarray(r.value)
                  for r in node.args]
            jac = tie_jacobian(node, xs, np.asarray(trace.values[k]))
        if k in tied and (jac is None or len(jac.entries) or jac.balls):
            ties[k] = jac
            smooth[k] = False
            regular[k] = (jac is not None and jac.regular and ok
                          and all(_nonnegative_map(lin, i) and jac.args_nonnegative(i)
                                  for i, _ in rough))
        else:  # no tie, or a tie between pieces with one Jacobian (max(x, x))
            smooth[k] = not rough
            regular[k] = ok and all(_nonnegative_map(lin, i) for i, _ in rough)
    return _Flags(smooth, regular, ties, affine)


def _pull(lin, batch: np.ndarray, node, trace, k: int) -> list[tuple[int, np.ndarray]]:
    """``(arg node, flat cotangent batch)`` for each input of node ``k``."""
    shaped = batch.reshape((len(batch), *node.shape))
    out = []
    pos = dict(_active_args(trace, k))
    if type(lin) is FanIn:
        parts = lin.pull(shaped, [i in pos for i in range(len(lin.maps))])
        for i, p in enumerate(parts):
            if p is not None and i in pos:
                out.append((pos[i], np.asarray(p, dtype=float).reshape(len(batch), -1)))
    elif 0 in pos:
        out.append((pos[0], np.asarray(lin.pull(shaped), dtype=float).reshape(len(batch), -1)))
    return out


class _Reverse:
    """The reverse sweep over cotangent sets (module docstring)."""

    def __init__(self, trace, out: int, flags: _Flags, ids: list[int], radius: float = 0.0):
        self.trace, self.out, self.flags = trace, out, flags
        self.ids, self.radius = ids, radius
        self.adj = _Adjoint()
        self.relaxed: list[str] = []
        self.unbounded: list[str] = []

    def describe(self, k: int) -> str:
        from asd.core.program import format_node

        return format_node(k, self.trace.nodes[k])

    def run(self) -> None:
        trace, adj = self.trace, self.adj
        nodes = trace.nodes
        adj.c0[self.out] = np.ones(1)
        for k in range(self.out, -1, -1):
            node = nodes[k]
            if node.prim is None or trace.lins[k] is None or (k not in adj.c0 and k not in adj.G):
                continue
            size = int(np.prod(node.shape, dtype=int))
            c0 = adj.c0.pop(k, np.zeros(size))
            G = adj.rows(k, size)
            adj.G.pop(k, None)
            if adj.P > POINT_BUDGET:
                self.unbounded.append(f"{adj.P} points exceed POINT_BUDGET ({POINT_BUDGET})")
                return
            if k in self.flags.ties:
                jac = self.flags.ties[k]
                if jac is None:
                    self.unbounded.append(
                        f"{self.describe(k)}: {node.name} met a tie and has no set-valued "
                        "Jacobian (asd.analysis.enclosure.TIE_JACOBIANS)")
                    return
                self._tie(k, node, c0, G, jac)
            else:
                self._linear(k, node, trace.lins[k], c0, G)

    def _linear(self, k, node, lin, c0, G) -> None:
        batch = np.vstack([c0[None], G])
        for r, part in _pull(lin, batch, node, self.trace, k):
            self.adj.add(r, part[0], part[1:] if len(part) > 1 else None)

    def _tie(self, k, node, c0, G, jac: TieJacobian) -> None:
        tied = jac.entries
        free_c0, free_G = c0.copy(), G.copy()
        free_c0[tied] = 0.0
        free_G[:, tied] = 0.0
        self._linear(k, node, self.trace.lins[k], free_c0, free_G)
        args = dict(_active_args(self.trace, k))
        if not args:
            return
        sizes = {i: int(np.prod(self.trace.nodes[r].shape, dtype=int)) for i, r in args.items()}
        depends = G[:, tied] != 0 if len(G) else np.zeros((0, len(tied)), bool)
        point = ~np.any(depends, axis=0) if len(G) else np.ones(len(tied), bool)
        scale_of = np.zeros(int(np.prod(node.shape, dtype=int)))
        scale_of[tied] = c0[tied]
        # entries whose cotangent is a point: every component becomes its own factor
        at_point = np.zeros(len(scale_of), bool)
        at_point[tied[point]] = True
        r0 = args.get(0)
        if (jac.sided and not self.radius and r0 is not None and self.flags.affine[r0]
                and point.sum() > 1):
            jac = couple(jac, tied[point], self._rows(r0, tied[point]))
        self._point_components(jac, args, sizes, scale_of, at_point)
        self._point_balls(jac, args, sizes, scale_of, at_point)
        self._Gk, self._c0k = G, c0
        for e in tied[~point]:
            self._set_entry(k, int(e), jac, args, sizes)

    def _rows(self, r: int, entries: np.ndarray) -> np.ndarray:
        """The gradients (rows) of entries ``entries`` of node ``r`` with respect to the
        inputs: unit cotangents pulled through the trace's maps (exact: ``r`` is affine)."""
        trace = self.trace
        size = int(np.prod(trace.nodes[r].shape, dtype=int))
        ct = {r: np.eye(size)[entries]}
        for k in range(r, -1, -1):
            batch = ct.pop(k, None) if k not in self.ids else ct.get(k)
            node = trace.nodes[k]
            if batch is None or node.prim is None or trace.lins[k] is None:
                continue
            for a, part in _pull(trace.lins[k], batch, node, trace, k):
                ct[a] = part if a not in ct else ct[a] + part
        return np.concatenate([ct.get(i, np.zeros((len(entries), int(np.prod(
            trace.nodes[i].shape, dtype=int))))) for i in self.ids], axis=1)

    def _point_components(self, jac, args, sizes, scale, at_point) -> None:
        adj = self.adj
        if not len(jac.entry_of):
            return
        src_ok = np.ones(len(jac.entry_of), bool)
        np.logical_and.at(src_ok, jac.comp, at_point[jac.sources()])
        comps = np.flatnonzero(src_ok)
        if not len(comps):
            return
        first = adj.new_factors(jac.nverts[comps], "hull")
        row_of_comp = np.full(len(jac.entry_of), -1)
        row_of_comp[comps] = first + np.r_[0, np.cumsum(jac.nverts[comps])[:-1]]
        sel = row_of_comp[jac.comp] >= 0
        rows = row_of_comp[jac.comp[sel]] + jac.vert[sel]
        vals = jac.coef[sel] * scale[jac.sources()[sel]]
        for i, r in args.items():
            m = jac.arg[sel] == i
            if not m.any():
                continue
            G = np.zeros((adj.P, sizes[i]))
            np.add.at(G, (rows[m], jac.index[sel][m]), vals[m])
            adj.add(r, None, G)

    def _point_balls(self, jac, args, sizes, scale, at_point) -> None:
        adj = self.adj
        for e, i, idx in jac.balls:
            if not at_point[e] or scale[e] == 0 or i not in args:
                continue
            first = adj.new_factors(np.array([len(idx)]), "ball")
            G = np.zeros((adj.P, sizes[i]))
            G[first + np.arange(len(idx)), idx] = abs(scale[e])
            adj.add(args[i], None, G)

    def _set_entry(self, k, e: int, jac, args, sizes) -> None:
        """A tied entry whose cotangent is itself a set: multiply its vertices out with the
        factors it depends on (exact for the hull) within ``FACTOR_BUDGET``, else bound the
        cotangent by an interval (sound, inexact)."""
        adj = self.adj
        comps = np.flatnonzero(jac.entry_of == e)
        balls = [b for b in jac.balls if b[0] == e]
        nonzero = np.flatnonzero(self._Gk[:, e])
        factors = np.unique(adj.factor_of(nonzero))
        combos = 1
        for j in factors:
            a, b = adj.extent(int(j))
            combos *= (b - a) if adj.kinds[j] == "hull" else FACTOR_BUDGET + 1
        for c in comps:
            combos *= int(jac.nverts[c])
        if balls or combos > FACTOR_BUDGET:
            self._relax(k, e, jac, comps, balls, factors, args, sizes)
            return
        self._multiply_out(k, e, jac, comps, factors, args, sizes)

    def _relax(self, k, e, jac, comps, balls, factors, args, sizes) -> None:
        adj = self.adj
        lo = hi = float(self._c0k[e])
        for j in factors:
            a, b = adj.extent(int(j))
            col = self._Gk[a:b, e]
            if adj.kinds[j] == "hull":
                lo, hi = lo + float(col.min()), hi + float(col.max())
            else:
                n = float(np.linalg.norm(col))
                lo, hi = lo - n, hi + n
        self.relaxed.append(f"{self.describe(k)}: a tie whose cotangent is a set "
                            f"(bounded by [{lo:.3g}, {hi:.3g}])")
        for c in comps:
            m = jac.comp == c
            nv = int(jac.nverts[c])
            first = adj.new_factors(np.array([2 * nv]), "hull")
            for i, r in args.items():
                mm = m & (jac.arg == i)
                if not mm.any():
                    continue
                G = np.zeros((adj.P, sizes[i]))
                np.add.at(G, (first + jac.vert[mm], jac.index[mm]), lo * jac.coef[mm])
                np.add.at(G, (first + nv + jac.vert[mm], jac.index[mm]), hi * jac.coef[mm])
                adj.add(r, None, G)
        for _, i, idx in balls:
            if i not in args:
                continue
            first = adj.new_factors(np.array([len(idx)]), "ball")
            G = np.zeros((adj.P, sizes[i]))
            G[first + np.arange(len(idx)), idx] = max(abs(lo), abs(hi))
            adj.add(args[i], None, G)

    def _multiply_out(self, k, e, jac, comps, factors, args, sizes) -> None:
        """Replace the factors ``factors`` by one whose points are every combination of
        their points with the entry's vertices: each live node's rows are summed over the
        combination, and the inputs of node ``k`` get the entry's cotangent at that
        combination times the chosen Jacobian row."""
        adj = self.adj
        extents = [adj.extent(int(j)) for j in factors]
        grids = [np.arange(a, b) for a, b in extents]
        verts = [np.arange(int(jac.nverts[c])) for c in comps]
        mesh = np.meshgrid(*grids, *verts, indexing="ij") if grids or verts else []
        combo = [m.ravel() for m in mesh]
        n = len(combo[0]) if combo else 1
        first = adj.new_factors(np.array([n]), "hull")
        live = [r for r in adj.G if r != k]
        for r in live:
            G = adj.rows(r, adj.G[r].shape[1])
            new = np.zeros((n, G.shape[1]))
            for rows in combo[:len(grids)]:
                new += G[rows]
            G[first:first + n] = new
            for a, b in extents:
                G[a:b] = 0.0
        # node k's own rows: its other tied entries may read this factor next
        Gk = self._Gk
        if len(Gk) < adj.P:
            Gk = np.vstack([Gk, np.zeros((adj.P - len(Gk), Gk.shape[1]))])
        newk = np.zeros((n, Gk.shape[1]))
        for rows in combo[:len(grids)]:
            newk += Gk[rows]
        s = self._c0k[e] + newk[:, e]           # the entry's cotangent at each combination
        Gk[first:first + n] = newk
        for a, b in extents:
            Gk[a:b] = 0.0
        self._Gk = Gk
        for j in factors:
            adj.dead[int(j)] = True
        for i, r in args.items():
            G = np.zeros((adj.P, sizes[i]))
            for c, vsel in zip(comps, combo[len(grids):], strict=True):
                m = (jac.comp == c) & (jac.arg == i)
                for v, idx, coef in zip(jac.vert[m], jac.index[m], jac.coef[m], strict=True):
                    hit = vsel == v
                    G[first + np.flatnonzero(hit), idx] += coef * s[hit]
            adj.add(r, None, G)


# ----- the entry point -----

def enclosure(trace, out: int, ids: list[int], radius: float = 0.0) -> Enclosure:
    """The outer enclosure of the Clarke set of node ``out`` (a scalar) of a finished sweep,
    over the input nodes ``ids`` (flattened and concatenated, as `asd.clarke` orders them).

    ``radius > 0``: of the Goldstein ε-subdifferential on the ball of that radius, from the
    nodes' ranges (`asd.analysis.ranges`)."""
    if radius:
        from asd.analysis.ranges import ball_ties

        given, unranged = ball_ties(trace, out, ids, radius)
        flags = _flags(trace, out, set(given), given)
    else:
        unranged = []
        flags = _flags(trace, out, {k for k in trace.ties if k <= out})
    rev = _Reverse(trace, out, flags, ids, radius)
    if unranged:
        rev.unbounded.extend(unranged)
    else:
        rev.run()
    adj = rev.adj
    sizes = [int(np.prod(trace.nodes[i].shape, dtype=int)) for i in ids]
    center = np.concatenate([adj.c0.get(i, np.zeros(n)) for i, n in zip(ids, sizes,
                                                                         strict=True)])
    points = np.concatenate([adj.rows(i, n) for i, n in zip(ids, sizes, strict=True)],
                            axis=1) if adj.P else np.zeros((0, len(center)))
    live = [j for j in range(len(adj.starts)) if not adj.dead[j]]
    rows, starts, kinds = [], [], []
    for j in live:
        a, b = adj.extent(j)
        starts.append(sum(len(r) for r in rows))
        rows.append(np.arange(a, b))
        kinds.append(adj.kinds[j])
    points = points[np.concatenate(rows)] if rows else np.zeros((0, len(center)))
    exact = not radius and flags.regular[out]
    return Enclosure(center, points, np.asarray(starts, int), kinds, exact, rev.relaxed,
                     rev.unbounded, radius)
