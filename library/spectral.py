"""Spectral functions of symmetric matrices: eigenvalues, extreme eigenvalues, Ky Fan sums, norms.

Each primitive computes its value and its derivative from ONE ``eigh`` of the symmetrized
input (the primal is the rule's to change). Asymmetric input ``X`` is read as
``(X + X.T) / 2``: value, tangent and gradient all see the symmetric part, so the gradient
of every function here is a symmetric matrix.

Repeated eigenvalues are where these functions are not differentiable. There the direction
decides (DESIGN.md, Algorithm 7 in spirit): along the ray ``X + δD`` the eigenvalues of a
cluster tied at ``λ`` split as ``λ + δμ + δ²ν``, where ``μ`` are the eigenvalues of
``D`` restricted to the cluster's eigenspace and ``ν`` come from the second-order matrix
``W.T D V_r (λ - Λ_r)^-1 V_r.T D W`` (``V_r``: the other eigenvectors): its diagonal for a
simple ``μ``, its eigenvalues over a tie of ``μ``.
The rule rotates the cluster's eigenbasis into that limit basis, so e.g. the gradient of
``lambda_max`` at a multiple top eigenvalue is ``q q.T`` with ``q`` the top eigenvector of
``D`` restricted to the top eigenspace. A tie that survives the second order (the ray stays
on the kink to that order) keeps ``eigh``'s basis; any such choice is a limiting gradient.

Ties are detected with the scale-aware tolerance ``tie_tolerance(n, scale) = 8 n eps scale``
(``scale = max |λ|``; for first-order coefficients ``scale = max |μ|``): eigenvalues closer
than that are one cluster, reported as a ``"tolerance"`` decision. ``eigh`` is backward stable,
so its eigenvalues carry errors of order ``n eps ||X||``; a tighter test would miss ties that
exist in exact arithmetic. An exactly diagonal matrix needs no tolerance (`eigh_ties`). Where
the first order ties inside a cluster, the second order includes the input's curvature ``X₂``
(the δ² coefficient of its exact series along the ray, `curvature_of`). Inputs and tangents are
scaled by powers of two (`pow2_scale`) so that entries near the float maximum do not overflow.

The matrix-norm functions act on rectangular ``X`` through the symmetric embedding
``E(X) = [[0, X], [X.T, 0]]`` whose eigenvalues are ``±σ(X)`` and zeros, so one code path
(and one tie analysis) serves both.
"""

from __future__ import annotations

import numpy as np

from asd.errors import ShapeError, UnsupportedError
from asd.extend import Closure, Primitive, SeriesUnavailable, input_series, record_tie_decision

EPS = float(np.finfo(float).eps)


# ----- helpers shared with library/projections.py -----

def tie_tolerance(n: int, scale: float) -> float:
    """Two eigenvalues (or first-order coefficients) closer than this count as tied."""
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


def vnorm(x: np.ndarray) -> float:
    """The 2-norm of all entries, scaled first so that it cannot overflow or underflow."""
    c = pow2_scale(x)
    return c * float(np.linalg.norm(np.asarray(x, dtype=float).reshape(-1) / c))


def clusters(values: np.ndarray, tol: float) -> np.ndarray:
    """Labels of runs of sorted ``values`` whose consecutive gaps are at most ``tol``."""
    if values.size == 0:
        return np.zeros(0, int)
    return np.concatenate([[0], np.cumsum(np.diff(values) > tol)])


def eigh_ties(S: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``eigh`` of a symmetric ``S`` and the tolerance within which its eigenvalues tie.

    An exactly diagonal ``S`` has its diagonal as exact eigenvalues: they are sorted, not
    computed, and tie only when equal (tolerance 0), so a gap of 1e-9 at entries 1e6 is a gap.
    Otherwise ``eigh`` is backward stable, its eigenvalues carry errors of order
    ``n eps ||S||``, and eigenvalues within ``tie_tolerance`` form one cluster (a tie that
    rounding may have created, reported as ``"tolerance"`` where a rule decides it).
    """
    n = S.shape[-1]
    off = S - np.diag(np.diag(S))
    if not np.any(off):
        d = np.diag(S)
        order = np.argsort(d, kind="stable")
        return d[order], np.eye(n, dtype=S.dtype)[:, order], 0.0
    c = pow2_scale(S)
    lam, V = np.linalg.eigh(S / c)
    lam = lam * c
    return lam, V, tie_tolerance(n, np.max(np.abs(lam), initial=0.0))


def curvature_of(x: np.ndarray, dx, square=None):
    """A callable giving the second-order coefficient ``X₂`` of the input along the ray
    (``x(x₀ + δv) = x + δẋ + δ²X₂ + ...``, from ``asd.extend.input_series``), mapped by ``square``
    (``sym``, ``embed``). It returns None where the series cannot be computed: the second order
    then misses the input's curvature, and the rule reports its decision as ``"tolerance"``."""

    def curvature():
        try:
            series = input_series(np.asarray(x), dx, np.shape(x))
        except SeriesUnavailable:
            record_tie_decision("tolerance", 1)
            return None
        record_tie_decision("series", 1)
        c2 = np.array([float(e.coefficient(2)) for e in series.flat]).reshape(np.shape(x))
        return c2 if square is None else square(c2)

    return curvature


def ray_scaled(D: np.ndarray) -> tuple[np.ndarray, float]:
    """``(D / c, c)`` for a power of two ``c``: the ray ``X + δD + δ²X₂`` reparametrized by
    ``δ = t / c`` is ``X + t D/c + t² X₂/c²``, with the same limit bases and the same signs of
    every coefficient, and products of tangents near the float maximum stay finite."""
    c = pow2_scale(D)
    return D / c, c


def refine_cluster(lam: np.ndarray, V: np.ndarray, idx: np.ndarray, D: np.ndarray,
                   center: float, curvature=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Limit eigenbasis of the cluster ``idx`` (eigenvalues tied at ``center``) along ``D``.

    Returns the rotated columns ``W`` and the first- and second-order coefficients ``mu``,
    ``nu`` of the cluster's eigenvalues along ``X + δD + δ²X₂``, sorted ascending
    lexicographically. ``X₂`` (the curvature of the input along the ray) matters only where
    ``mu`` ties, and ``curvature()`` (see `curvature_of`; ``X₂ / c²`` when ``D`` was scaled
    by ``c``) is called only then.
    """
    Vc = V[:, idx]
    mu, U = np.linalg.eigh(Vc.T @ D @ Vc)
    W = Vc @ U
    mu_tol = tie_tolerance(len(lam), np.linalg.norm(D))
    rest = np.ones(len(lam), bool)
    rest[idx] = False
    # second order: M = Wᵀ X₂ W + Bᵀ diag(1/gap) B; its diagonal for a simple mu ...
    M = np.zeros((len(idx), len(idx)))
    if rest.any():
        gap = center - lam[rest]
        B = V[:, rest].T @ D @ W
        M = B.T @ (B / gap[:, None])
    sub = clusters(mu, mu_tol)
    ties = np.flatnonzero(np.bincount(sub) > 1)
    if ties.size and curvature is not None:
        X2 = curvature()
        if X2 is not None:
            M = M + W.T @ X2 @ W
    nu = np.diag(M).copy()
    for label in ties:
        # ... and for a tie of mu, the eigen-decomposition of that block
        cols = np.flatnonzero(sub == label)
        nu[cols], U2 = np.linalg.eigh(M[np.ix_(cols, cols)])
        W[:, cols] = W[:, cols] @ U2
        mu[cols] = np.mean(mu[cols])
    return W, mu, nu


def limit_eigh(lam: np.ndarray, V: np.ndarray, tangent, refine: np.ndarray | None = None,
               *, tol: float | None = None, curvature=None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Rotate every tied cluster whose label is flagged in ``refine`` into its limit basis.

    ``refine[c]`` says whether cluster ``c`` (labels from ``clusters`` at ``tol``, default
    ``tie_tolerance``) matters to the caller (None: every cluster). ``tangent()`` (the
    symmetric tangent ``D``) is called only if one does; ``curvature()`` (`curvature_of`) only
    where the first order leaves a tie in such a cluster. Clusters formed by a positive
    tolerance (not by exact equality) are reported as ``"tolerance"`` decisions.
    Returns the basis, ``mu``, ``nu`` (zero outside refined clusters; per level in the units of
    the scaled tangent, `ray_scaled`) and ``D`` (or None).
    """
    n = len(lam)
    mu, nu = np.zeros(n), np.zeros(n)
    if tol is None:
        tol = tie_tolerance(n, np.max(np.abs(lam), initial=0.0))
    labels = clusters(lam, tol)
    sizes = np.bincount(labels)
    todo = np.flatnonzero((sizes > 1) if refine is None else refine & (sizes > 1))
    if todo.size == 0:
        return V, mu, nu, None
    if tol > 0:
        record_tie_decision("tolerance", int(np.sum(sizes[todo])))
    D, c = ray_scaled(tangent())
    scaled = None if curvature is None else scaled_curvature(curvature, c)
    V = V.copy()
    for label in todo:
        idx = np.flatnonzero(labels == label)
        W, mu[idx], nu[idx] = refine_cluster(lam, V, idx, D, float(np.mean(lam[idx])), scaled)
        V[:, idx] = W
    return V, mu, nu, D


def scaled_curvature(curvature, c: float):
    """``curvature`` for the tangent scaled by ``c`` (`ray_scaled`): ``X₂ / c²``."""

    def scaled():
        X2 = curvature()
        return None if X2 is None else X2 / c / c

    return scaled


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
                      tangent_of, curvature=None) -> np.ndarray:
    """``sum of v v.T`` over the selected sorted positions, in the limit basis along the ray.

    Only clusters cut by the selection (holding selected and unselected positions) depend
    on the direction; the others contribute their spectral projector, basis-free.
    """
    labels = clusters(lam, tol)
    count = np.bincount(labels)
    chosen = np.bincount(labels, weights=select.astype(float))
    cut = (chosen > 0) & (chosen < count)
    V, _, _, _ = limit_eigh(lam, V, tangent_of, cut, tol=tol, curvature=curvature)
    Vs = V[:, select]
    return Vs @ Vs.T


# ----- eigvalsh: all eigenvalues, ascending -----

eigvalsh_p = Primitive("eigvalsh", lambda X: np.linalg.eigvalsh(sym(square(X, "eigvalsh"))))


@eigvalsh_p.defrule
def eigvalsh_rule(xs, dxs):
    X = square(xs[0], "eigvalsh")
    lam, V, tol = eigh_ties(sym(X))
    V, _, _, _ = limit_eigh(lam, V, lambda: sym(dxs[0]()), tol=tol,
                            curvature=curvature_of(X, dxs[0], sym))

    def push(t):
        return np.einsum("ij,...ik,kj->...j", V, sym(t), V)

    def pull(ct):
        return (V * np.asarray(ct)[..., None, :]) @ V.T

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
    G = selected_gradient(lam, V, tol, select, lambda: sym(dxs[0]()),
                          curvature_of(X, dxs[0], sym))
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
    G = selected_gradient(lam, V, tol, select, lambda: sym(dxs[0]()),
                          curvature_of(X, dxs[0], sym))
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
        G = selected_gradient(lam, V, tol, select, lambda: embed(dxs[0]()),
                              curvature_of(X, dxs[0], embed))
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
