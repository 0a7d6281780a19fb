"""Certificates for ``library/linalg.py``.

The smooth functions (solve, inv, det, logabsdet, cholesky, qr, pinv) are checked against
sympy: their rules' Jacobians equal sympy's Jacobians of the closed forms on small matrices
(inverse by cofactors, Cholesky of a 2 x 2, Gram-Schmidt for QR with numpy's signs). Singular
values kink where they repeat or vanish, and eigen- and singular vectors have no closed form
sympy handles at these sizes: they get `asd.testing.check_rule` against references built on
mpmath's eigensolver and SVD at 80 digits, at repeated and zero singular values (values) and
at simple ones (vectors, whose signs follow numpy's at the point). The references are shared
with ``tests/library/test_linalg.py``.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp
from asd.library import linalg

from asd.testing.precise import to_mpf

from .registry import DiscontinuousProof, OracleProof, SymbolicProof

A2 = np.array([[2.0, -1.0], [0.5, 1.5]])
SPD2 = np.array([[4.0, 1.0], [1.0, 3.0]])
TALL = np.array([[1.0, 2.0], [-0.5, 1.0], [0.75, -1.25]])
B2 = np.array([[1.0], [-2.0]])
REAL2 = np.array([[2.0, 1.0], [0.5, -1.0]])  # a real, simple spectrum
REPEATED_BELOW = np.array([[1.0, 0.0, 0.0], [5.0, 1.0, 0.0], [-3.0, 7.0, 4.0]])  # U: diag(1, 1, 4)


# ----- references on mpmath (object arrays) and numpy (floats) -----

def mp_matrix(X) -> mpmath.matrix:
    return mpmath.matrix([[to_mpf(v) for v in row] for row in np.atleast_2d(X)])


def as_array(M) -> np.ndarray:
    return np.array(M.tolist(), dtype=object)


def lower_symmetric(A):
    """The symmetric matrix numpy reads from the lower triangle of ``A``."""
    return np.tril(A) + np.tril(A, -1).T


def triangle_symmetric(A, uplo="L"):
    """The symmetric matrix numpy reads from the ``uplo`` triangle of ``A``."""
    return lower_symmetric(A) if uplo.upper() == "L" else np.triu(A) + np.triu(A, 1).T


def mp_eigsy(A, uplo="L"):
    """Eigenvalues (ascending) and eigenvectors of the ``uplo``-triangle reading of ``A``."""
    E, Q = mpmath.eigsy(mp_matrix(triangle_symmetric(A, uplo)))
    order = sorted(range(len(E)), key=lambda i: E[i])
    return [E[i] for i in order], as_array(Q)[:, order]


def ref_svals(X):
    if X.dtype != object:
        return np.linalg.svd(X, compute_uv=False)
    s = mpmath.svd_r(mp_matrix(X), compute_uv=False)
    return np.array(sorted((s[i] for i in range(len(s))), reverse=True), dtype=object)


def ref_eigh_vectors(A0, uplo="L"):
    """Eigenvectors of the ``uplo`` reading with the signs numpy gives at ``A0`` (numpy's
    convention, continued); columns of repeated eigenvalues have no such sign (and no
    derivative): read the others."""
    V0 = np.linalg.eigh(A0, uplo)[1]

    def ref(A):
        if A.dtype != object:
            return np.linalg.eigh(A, uplo)[1]
        _, Q = mp_eigsy(A, uplo)
        return Q * np.sign(np.sum(Q * V0, axis=0).astype(float))
    return ref


def ref_eig(A0, part):
    """``numpy.linalg.eig`` of a matrix with a real simple spectrum, on mpmath's ``eig``:
    eigenvalues (part 0) ascending as numpy's at ``A0`` are ordered, or unit eigenvectors
    (part 1) with numpy's signs at ``A0``."""
    w0, V0 = np.linalg.eig(A0)
    rank = np.argsort(np.argsort(w0))

    def ref(A):
        if A.dtype != object:
            return np.linalg.eig(A)[part]
        E, ER = mpmath.eig(mp_matrix(A))
        order = sorted(range(len(E)), key=lambda i: mpmath.re(E[i]))
        w = [mpmath.re(E[i]) for i in order]
        Q = as_array(ER)[:, order]
        Q = np.vectorize(mpmath.re, otypes=[object])(Q)
        Q = Q / np.array([mpmath.sqrt(mpmath.fsum(v * v for v in Q[:, j]))
                          for j in range(Q.shape[1])], dtype=object)
        w, Q = np.array(w, dtype=object)[rank], Q[:, rank]
        if part == 0:
            return w
        return Q * np.sign(np.sum(Q * V0, axis=0).astype(float))
    return ref


def ref_svd_vectors(X0, part):
    """``U`` (part 0) or ``Vh`` (part 2) with the signs numpy gives at ``X0``."""
    U0 = np.linalg.svd(X0, full_matrices=False)[0]

    def ref(X):
        if X.dtype != object:
            return np.linalg.svd(X, full_matrices=False)[part]
        U, S, V = mpmath.svd_r(mp_matrix(X))
        U, S, Vh = as_array(U), [S[i] for i in range(len(S))], as_array(V)
        order = sorted(range(len(S)), key=lambda i: -S[i])
        U, Vh = U[:, order], Vh[order]
        signs = np.sign(np.sum(U * U0, axis=0).astype(float))
        return U * signs if part == 0 else Vh * signs[:, None]
    return ref


# ----- closed forms for sympy -----

def _sym_matrix(A):
    return sp.Matrix(A.tolist())


def _as_objects(M) -> np.ndarray:
    return np.array(M.tolist(), dtype=object)


def _cholesky2(S):
    a, b, c = S[0, 0], S[1, 0], S[1, 1]
    return np.array([[sp.sqrt(a), 0], [b / sp.sqrt(a), sp.sqrt(c - b * b / a)]], dtype=object)


def _qr_formula(A0, part):
    """Gram-Schmidt (positive diagonal) with numpy's signs of ``diag R`` at ``A0``."""
    signs = np.sign(np.diag(np.linalg.qr(A0)[1]))

    def formula(A):
        m, n = A.shape
        Q = np.empty((m, n), dtype=object)
        R = np.zeros((n, n), dtype=object)
        for j in range(n):
            v = A[:, j]
            for i in range(j):
                R[i, j] = np.sum(Q[:, i] * A[:, j])
                v = v - R[i, j] * Q[:, i]
            R[j, j] = sp.sqrt(np.sum(v * v))
            Q[:, j] = v / R[j, j]
        Q, R = Q * signs, R * signs[:, None]
        return np.concatenate([Q, R], axis=0) if part is None else (Q, R)[part]
    return formula


def _pinv_formula(A):
    M = _sym_matrix(A)
    return _as_objects((M.T * M).inv() * M.T)


PROOFS = [
    SymbolicProof((linalg.solve_p,), linalg.solve_p, [(A2, B2)],
                  lambda A, B: _as_objects(_sym_matrix(A).inv() * _sym_matrix(B))),
    SymbolicProof((linalg.inv_p,), linalg.inv_p, [(A2,)],
                  lambda A: _as_objects(_sym_matrix(A).inv())),
    SymbolicProof((linalg.det_p,), linalg.det_p, [(A2,), (np.ones((2, 2)),)],
                  lambda A: _sym_matrix(A).det()),
    SymbolicProof((linalg.logabsdet_p,), linalg.logabsdet_p, [(A2,), (-SPD2,)],
                  lambda A: sp.log(sp.Abs(_sym_matrix(A).det()))),
    SymbolicProof((linalg.cholesky_p,), linalg.cholesky, [(SPD2 + np.triu(A2, 1),)],
                  _cholesky2, what="sympy diff (lower triangle)"),
    SymbolicProof((linalg.qr_p,), linalg.qr_p, [(TALL,)], _qr_formula(TALL, None)),
    SymbolicProof((linalg.pinv_p,), np.linalg.pinv, [(TALL,)], _pinv_formula),
    OracleProof((linalg.svdvals_p,), lambda X: np.linalg.svd(X, compute_uv=False),
                [((np.diag([2.0, 2.0, 1.0]),), None), ((np.zeros((2, 3)),), None),
                 ((np.eye(3, 2),), None), ((TALL,), None)],
                reference=ref_svals, note="n/a (singular value ties)"),
    OracleProof((linalg.eigh_vectors_p,), lambda A: np.linalg.eigh(A)[1],
                [((SPD2,), None)], reference=ref_eigh_vectors(SPD2),
                note="n/a (simple eigenvalues)"),
    OracleProof((linalg.eigh_vectors_p, linalg.eigh_basis_p),
                lambda A: np.linalg.eigh(A, "U")[1][:, 2], [((REPEATED_BELOW,), None)],
                reference=lambda A: ref_eigh_vectors(REPEATED_BELOW, "U")(A)[:, 2],
                note="n/a (a simple eigenvalue beside a repeated one)"),
    DiscontinuousProof((linalg.eigh_basis_p,),
                       lambda x: np.linalg.eigh(np.diag(x))[1][0, 0] + x.sum(),
                       at=(1.0, 1.0, 4.0), away=(1.0, 2.0, 4.0)),
    DiscontinuousProof((linalg.svd_basis_p,),
                       lambda x: np.linalg.svd(np.diag(x))[0][0, 2] + x.sum(),
                       at=(2.0, 1.0, 0.0), away=(3.0, 2.0, 1.0)),
    OracleProof((linalg.eigvals_p,), lambda A: np.linalg.eig(A)[0], [((REAL2,), None)],
                reference=ref_eig(REAL2, 0), note="n/a (real simple spectrum)"),
    OracleProof((linalg.eig_vectors_p,), lambda A: np.linalg.eig(A)[1], [((REAL2,), None)],
                reference=ref_eig(REAL2, 1), note="n/a (real simple spectrum)"),
    OracleProof((linalg.svd_vectors_p,),
                lambda X: np.linalg.svd(X, full_matrices=False)[0], [((TALL,), None)],
                reference=ref_svd_vectors(TALL, 0), note="n/a (simple singular values)"),
    OracleProof((linalg.svd_vectors_p,),
                lambda X: np.linalg.svd(X, full_matrices=False)[2], [((TALL.T.copy(),), None)],
                reference=ref_svd_vectors(TALL.T.copy(), 2), note="n/a (simple singular values)"),
]

__all__ = ["PROOFS", "as_array", "lower_symmetric", "mp_eigsy", "mp_matrix", "ref_eig",
           "ref_eigh_vectors", "ref_svals", "ref_svd_vectors", "triangle_symmetric"]
