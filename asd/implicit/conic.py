"""``conic(A, b, c, cones)``: a conic program's solution as the root of its residual map.

    minimize cᵀx   subject to   Ax + s = b,  s ∈ K                          (diffcp's form)

with ``K`` a product of cones in SCS's order and conventions, given as a dict: ``"z"`` (zero
cone, size), ``"l"`` (nonnegative orthant, size), ``"q"`` (second-order cones, list of sizes),
``"s"`` (PSD cones, list of matrix orders; vectorized lower triangle column by column with
off-diagonals times √2), ``"ep"`` / ``"ed"`` (number of exponential / dual exponential cones,
3 entries each, MOI's order), ``"p"`` (power cones, list of α; ``-α`` for the dual cone).

The primal-dual solution ``(x, y, s)`` is ``(u, Π_K*(v), Π_K(-v))`` for the root ``(u, v)`` of

    F(u, v; A, b, c) = [Aᵀ Π_K*(v) + c;  b - Au - Π_K(-v)]

(the homogeneous embedding's residual with ``τ = 1``; Busseti, Moursi, Boyd 2019, as diffcp
differentiates). ``F`` is an asd program over asd's cone projections, so `asd.implicit.root`
differentiates the map in all of ``A, b, c``, with the directional Newton at degenerate points
(a cone projection on a boundary piece, a weakly active constraint) and the regularity check.
The default solver is a small SCS-type ADMM on the embedding followed by semismooth Newton on
``F`` (asd's limiting Jacobians) to rounding; ``solve(A, b, c)`` may be any solver returning
``(x, y, s)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from asd.api import jacobian
from asd.errors import ASDError, ShapeError
from asd.extend import is_traced
from asd.implicit.root import root
from asd.library import projections as PR

SQRT2 = float(np.sqrt(2.0))


def _tri(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SCS's PSD vectorization: for an order-``k`` matrix, the vector index of each entry
    ``(i, j)`` and the scale that undoes the √2, plus the rows/cols of the triangle."""
    rows, cols = [], []
    for j in range(k):
        for i in range(j, k):
            rows.append(i)
            cols.append(j)
    rows, cols = np.array(rows), np.array(cols)
    index = np.zeros((k, k), int)
    index[rows, cols] = index[cols, rows] = np.arange(rows.size)
    scale = np.where(np.eye(k, dtype=bool), 1.0, 1.0 / SQRT2)
    return index, scale, (rows, cols)


def _blocks(cones: dict) -> list[tuple[str, int, object]]:
    """``(kind, size, parameter)`` per cone, in SCS's order."""
    out = []
    for key in cones:
        if key not in ("z", "f", "l", "q", "s", "ep", "ed", "p"):
            raise ASDError(f"conic: unknown cone {key!r}; use z, l, q, s, ep, ed, p")
    if cones.get("z", 0) or cones.get("f", 0):
        out.append(("z", int(cones.get("z", 0) or cones.get("f", 0)), None))
    if cones.get("l", 0):
        out.append(("l", int(cones["l"]), None))
    out += [("q", int(k), None) for k in cones.get("q", [])]
    out += [("s", int(k) * (int(k) + 1) // 2, int(k)) for k in cones.get("s", [])]
    out += [("ep", 3, None)] * int(cones.get("ep", 0))
    out += [("ed", 3, None)] * int(cones.get("ed", 0))
    out += [("p", 3, float(a)) for a in cones.get("p", [])]
    return out


def _concat(parts):
    import asd.numpy as anp
    return anp.concatenate(parts) if any(is_traced(p) for p in parts) else np.concatenate(
        [np.asarray(p, dtype=float) for p in parts])


def _psd_block(v, k: int):
    index, scale, (rows, cols) = _tri(k)
    X = v[index] * scale
    Y = PR.psd(X)
    return Y[rows, cols] * np.where(rows == cols, 1.0, SQRT2)


def project(v, cones: dict, dual: bool = False):
    """``Π_K(v)`` (``dual=True``: ``Π_K*(v)``) block by block, with asd's projections."""
    parts, at = [], 0
    for kind, size, param in _blocks(cones):
        block = v[at:at + size]
        at += size
        if kind == "z":
            parts.append(block if dual else block * 0.0)
        elif kind == "l":
            parts.append(PR.nonneg(block))
        elif kind == "q":
            parts.append(PR.soc(block))
        elif kind == "s":
            parts.append(_psd_block(block, param))
        elif kind in ("ep", "ed"):
            parts.append(PR.exp_cone_dual(block) if (kind == "ep") == dual
                         else PR.exp_cone(block))
        else:
            a, primal = abs(param), param > 0
            parts.append(PR.power_cone_dual(block, a) if primal == dual
                         else PR.power_cone(block, a))
    if at != np.shape(v)[0]:
        raise ShapeError(f"conic: the cones hold {at} entries but b has {np.shape(v)[0]}")
    return _concat(parts) if parts else v * 0.0


def residual(cones: dict) -> Callable:
    """``F(z, A, b, c)`` with ``z = (u, v)``: the embedding's residual at ``τ = 1``."""
    def conic_residual(z, A, b, c):
        n = np.shape(c)[0]
        u, v = z[:n], z[n:]
        y = project(v, cones, dual=True)
        s = project(-v, cones)
        return _concat([A.T @ y + c, b - A @ u - s])

    return conic_residual


def default_solve(cones: dict, iters: int = 20000, tol: float = 1e-10) -> Callable:
    """SCS-type ADMM on the homogeneous embedding, then semismooth Newton on the residual."""
    F = residual(cones)

    def solve(A, b, c):
        m, n = A.shape
        Q = np.block([[np.zeros((n, n)), A.T, c[:, None]], [-A, np.zeros((m, m)), b[:, None]],
                      [-c[None, :], -b[None, :], np.zeros((1, 1))]])
        inv = np.linalg.inv(np.eye(n + m + 1) + Q)
        u = np.zeros(n + m + 1)
        u[-1] = 1.0
        v = np.zeros(n + m + 1)
        v[-1] = 1.0
        for _ in range(iters):
            ut = inv @ (u + v)
            w = ut - v
            u = np.concatenate([w[:n], project(w[n:n + m], cones, dual=True),
                                [max(w[-1], 0.0)]])
            v = v - ut + u
            if np.max(np.abs(Q @ u - v)) <= 1e-7 * max(1.0, u[-1]) and u[-1] > 0:
                break
        if not u[-1] > 1e-9:
            raise ASDError("conic: the problem looks infeasible or unbounded (τ -> 0 in the "
                           "embedding); asd differentiates solvable problems only")
        x, y, s = u[:n] / u[-1], u[n:n + m] / u[-1], v[n:n + m] / u[-1]
        z = np.concatenate([x, y - s])
        for _ in range(30):  # refinement: semismooth Newton on F with asd's Jacobians
            r = np.asarray(F(z, A, b, c))
            if np.max(np.abs(r)) <= tol * max(1.0, np.max(np.abs(z))):
                break
            J = np.asarray(jacobian(F, seed=0)(z, A, b, c))
            z = z - np.linalg.lstsq(J, r, rcond=None)[0]
        return z

    return solve


def conic(A, b, c, cones: dict, *, solve: Callable | None = None, tol: float = 1e-8):
    """The solution ``(x, y, s)`` of ``min cᵀx s.t. Ax + s = b, s ∈ K`` (module docstring).

    >>> import numpy as np, asd
    >>> A, b = -np.eye(2), np.zeros(2)                     # x >= 0
    >>> x = lambda c: asd.implicit.conic(A, b, c, {"l": 2})[0]
    >>> np.round(asd.jacobian(lambda c: asd.sum(x(c) * 0.0) + x(c)[0], seed=0)(
    ...     np.array([1.0, 2.0])), 12)                      # x* = 0: locally constant
    array([0., 0.])
    """
    key = repr(sorted((k, v if np.ndim(v) == 0 else list(v)) for k, v in cones.items()))
    smap = _MAPS.get((key, id(solve)))
    if smap is None:
        user = solve
        F = residual(cones)
        if user is None:
            inner = default_solve(cones)
        else:
            def inner(A, b, c):
                x, y, s = (np.asarray(a, dtype=float) for a in user(A, b, c))
                return np.concatenate([x, y - s])
        smap = root(F, inner, name=f"conic{key}", tol=tol)
        _MAPS[(key, id(solve))] = smap
    z = smap(A, b, c)
    n = np.shape(c)[0]
    v = z[n:]
    return z[:n], project(v, cones, dual=True), project(-v, cones)


_MAPS: dict = {}
