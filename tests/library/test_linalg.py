"""numpy.linalg on traced arrays, in plain numpy spelling, at generic points and at the kinks.

Oracle: `asd.testing.check_rule`. Polynomial functions (det, matrix_power) get the exact
Fraction oracle through references written with + - * and indexing; the others references
built on mpmath's own solvers (lu_solve, inverse, eigsy, svd_r) at 80 digits, with the signs
of eigen- and singular vectors aligned to numpy's at the base point (numpy's convention,
continued smoothly); the spectral references are shared with the certificates
(``proofs/linalg.py``). Kinks: repeated and zero eigenvalues and singular values (along random
directions and along directions that keep the ties alive), singular matrices for det.
Refusals are checked for their message: the node, the values and the fix.
"""

from __future__ import annotations

import doctest

import mpmath
import numpy as np
import pytest
from asd.library import linalg
from asd.proofs.linalg import (
    as_array,
    lower_symmetric,
    mp_eigsy,
    mp_matrix,
    ref_eig,
    ref_eigh_vectors,
    ref_svals,
    ref_svd_vectors,
)

import asd
from asd.errors import NonFiniteError, NotLipschitzError, ShapeError, UnsupportedError
from asd.testing import check_rule

RNG = np.random.default_rng(3)
A3 = np.array([[2.0, -1.0, 0.5], [0.3, 1.5, -0.7], [1.0, 0.2, 3.0]])
B32 = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.75]])
SPD = np.array([[4.0, 1.0, -0.5], [1.0, 3.0, 0.25], [-0.5, 0.25, 2.0]])
TALL = np.array([[1.0, 2.0], [-0.5, 1.0], [0.75, -1.25]])


def _directions(shape, k=3):
    return [RNG.standard_normal(shape) for _ in range(k)]


# ----- solve, inv, matrix_power -----

def ref_solve(A, b):
    if A.dtype != object and b.dtype != object:
        return np.linalg.solve(A, b)
    cols = b.reshape(len(b), -1)
    x = [as_array(mpmath.lu_solve(mp_matrix(A), mp_matrix(cols[:, j:j + 1])))
         for j in range(cols.shape[1])]
    return np.concatenate(x, axis=1).reshape(b.shape)


@pytest.mark.parametrize("b", [np.array([1.0, -2.0, 0.5]), B32], ids=["vector", "matrix"])
def test_solve(b):
    report = check_rule(lambda A, b: np.linalg.solve(A, b), A3, b, n_directions=3,
                        reference=ref_solve, exact=False)
    assert report.checks["jacobian"] == 3


def test_solve_batched_and_broadcast():
    As = np.stack([A3, SPD])
    b = np.array([1.0, -2.0, 0.5])
    want = np.linalg.solve(As, b)
    np.testing.assert_allclose(linalg.solve(As, b), want)

    def ref(As):
        if As.dtype != object:
            return np.linalg.solve(As, b)
        return np.stack([ref_solve(A, b.astype(object)) for A in As])

    check_rule(lambda As: np.linalg.solve(As, b), As, n_directions=2, reference=ref,
               exact=False)


def ref_inv(A):
    return np.linalg.inv(A) if A.dtype != object else as_array(mpmath.inverse(mp_matrix(A)))


def test_inv():
    check_rule(np.linalg.inv, A3, n_directions=3, reference=ref_inv, exact=False)


@pytest.mark.parametrize("call", [lambda A: np.linalg.solve(A, np.ones(3)), np.linalg.inv],
                         ids=["solve", "inv"])
def test_singular_matrix_is_refused_naming_node_values_and_fix(call):
    S = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])
    with pytest.raises(NotLipschitzError) as e:
        asd.subgrad(lambda A: np.sum(call(A)))(S)
    msg = str(e.value)
    assert msg.startswith("%") and "singular" in msg and "smallest singular value" in msg
    assert "Regularize" in msg


@pytest.mark.parametrize("n", [3, 1, -2])
def test_matrix_power(n):
    def ref(A):
        if A.dtype != object:
            return np.linalg.matrix_power(A, n)
        M = mp_matrix(A) ** n
        return as_array(M)

    check_rule(lambda A: np.linalg.matrix_power(A, n), A3, n_directions=2, reference=ref,
               exact=False)


def test_matrix_power_exact_at_a_nilpotent_matrix():
    N = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    check_rule(lambda A: np.linalg.matrix_power(A, 3), N, n_directions=3, exact=True,
               reference=lambda A: A @ A @ A)
    assert np.all(np.linalg.matrix_power(N, 0) == np.eye(3))


# ----- det and slogdet -----

def det3(A):
    """The Leibniz formula: a polynomial the exact oracle evaluates on power series."""
    return (A[0, 0] * (A[1, 1] * A[2, 2] - A[1, 2] * A[2, 1])
            - A[0, 1] * (A[1, 0] * A[2, 2] - A[1, 2] * A[2, 0])
            + A[0, 2] * (A[1, 0] * A[2, 1] - A[1, 1] * A[2, 0]))


@pytest.mark.parametrize("A", [A3, np.outer([1.0, 2.0, -1.0], [0.5, 1.0, 1.0]),
                               np.diag([2.0, 0.0, 0.0]), np.zeros((3, 3))],
                         ids=["generic", "rank 1", "rank 1 diagonal", "zero"])
def test_det_exact_everywhere_including_singular_matrices(A):
    dirs = _directions((3, 3)) + [np.eye(3)[[1, 0, 2]]]
    report = check_rule(np.linalg.det, A, directions=dirs, exact=True, reference=det3)
    assert report.oracle == "exact"


def test_det_gradient_is_the_cofactor_matrix():
    A = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])  # singular
    g = asd.subgrad(np.linalg.det)(A)
    minors = [[np.linalg.det(np.delete(np.delete(A, i, 0), j, 1)) for j in range(3)]
              for i in range(3)]
    cof = np.array(minors) * np.array([[1, -1, 1], [-1, 1, -1], [1, -1, 1]])
    np.testing.assert_allclose(g, cof, atol=1e-13)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_small_det_gradients_are_exact_on_integer_matrices(n):
    """Up to 3x3 the cofactors are products of entries: exact on integer matrices, so a
    cofactor that is 0 is 0 and a huge direction cannot scale an SVD's rounding into a
    number (numpy campaign seed 2993: the derivative of det([[-1, 0], [-1, -1.5]]) along
    -5e300 in the lower-left entry was 5.8e284, exactly 0). Oracle: the Fractions' cofactors
    (minors by the Leibniz formula)."""
    rng = np.random.default_rng(n)
    for _ in range(20):
        A = rng.integers(-3, 4, (n, n)).astype(float) / 2.0
        exact = np.array([[(-1) ** (i + j) * (det3_minor(A, i, j) if n == 3 else
                                              (A[1 - i, 1 - j] if n == 2 else 1.0))
                           for j in range(n)] for i in range(n)], dtype=object)
        g = asd.subgrad(np.linalg.det)(A)
        assert np.array_equal(g, exact.astype(float))
        for (i, j) in zip(*np.nonzero(exact == 0), strict=True):
            v = np.zeros((n, n))
            v[i, j] = -5.357543035931337e300
            assert asd.directional(np.linalg.det)(A, v)[1] == 0.0


def det3_minor(A, i, j):
    m = np.delete(np.delete(A, i, 0), j, 1)
    return m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]


def test_det_batched():
    As = np.stack([A3, SPD, np.zeros((3, 3))])
    check_rule(lambda As: np.linalg.det(As), As, n_directions=2, exact=True,
               reference=lambda As: np.stack([det3(A) for A in As]))


def test_slogdet():
    A = A3 * np.array([1.0, 1.0, -1.0])  # negative determinant

    def ref(A):
        if A.dtype != object:
            return np.linalg.slogdet(A)[1]
        return np.array(mpmath.log(abs(mpmath.det(mp_matrix(A)))), dtype=object)

    check_rule(lambda A: np.linalg.slogdet(A)[1], A, n_directions=3, reference=ref,
               exact=False)
    sign, _ = np.linalg.slogdet(A)
    assert linalg.slogdet(A).sign == sign == -1


def test_slogdet_refuses_a_singular_matrix():
    with pytest.raises(NonFiniteError, match=r"logabsdet.*singular.*np.linalg.det"):
        asd.subgrad(lambda A: np.linalg.slogdet(A)[1])(np.ones((2, 2)))


# ----- cholesky, qr, pinv, lstsq -----

def ref_cholesky(A):
    if A.dtype != object:
        return np.linalg.cholesky(A)
    return as_array(mpmath.cholesky(mp_matrix(lower_symmetric(A))))


def test_cholesky_reads_the_lower_triangle():
    A = SPD + np.triu(RNG.standard_normal((3, 3)), 1)  # junk above the diagonal is ignored
    report = check_rule(np.linalg.cholesky, A, n_directions=3, reference=ref_cholesky,
                        exact=False)
    assert report.checks["jacobian"] == 3


def test_cholesky_refuses_an_indefinite_matrix():
    with pytest.raises(NotLipschitzError, match=r"cholesky.*not positive definite.*eps I"):
        asd.subgrad(lambda A: np.linalg.cholesky(A).sum())(np.diag([1.0, -1.0]))


def _gram_schmidt(A):
    """Q, R with a positive diagonal, in plain numpy operations (runs on Precise numbers)."""
    m, n = A.shape
    Q = np.empty((m, n), dtype=A.dtype)
    R = np.zeros((n, n), dtype=A.dtype)
    for j in range(n):
        v = A[:, j]
        for i in range(j):
            R[i, j] = np.sum(Q[:, i] * A[:, j])
            v = v - R[i, j] * Q[:, i]
        R[j, j] = np.sqrt(np.sum(v * v))
        Q[:, j] = v / R[j, j]
    return Q, R


def ref_qr(signs, part):
    def ref(A):
        Q, R = _gram_schmidt(A)
        return Q * signs if part == 0 else R * signs[:, None]
    return ref


@pytest.mark.parametrize("A", [TALL, A3], ids=["tall", "square"])
@pytest.mark.parametrize("part", [0, 1], ids=["Q", "R"])
def test_qr(A, part):
    signs = np.sign(np.diag(np.linalg.qr(A)[1]))
    check_rule(lambda A: np.linalg.qr(A)[part], A, n_directions=2,
               reference=ref_qr(signs, part), exact=False)


@pytest.mark.parametrize("A, at, cols", [
    (np.eye(3, 2), (1, 0), "[0, 1]"),
    (np.array([[2.0, 1.0], [0.0, 3.0], [0.0, 0.5]]), (2, 0), "[0]"),
    (np.array([[0.0, 1.0], [1.0, 0.0]]), (0, 0), "[0]")],
    ids=["identity", "reduced first column", "zero pivot"])
def test_qr_refuses_where_numpys_householder_qr_jumps(A, at, cols):
    E = np.zeros_like(A)
    E[at] = -1e-9  # numpy's own R[0, 0] flips sign under this perturbation ...
    assert np.linalg.qr(A)[1][0, 0] * np.linalg.qr(A + E)[1][0, 0] < 0
    with pytest.raises(NotLipschitzError) as err:  # ... so asd refuses to differentiate it
        asd.subgrad(lambda A: np.linalg.qr(A)[1].sum())(A)
    assert f"column(s) {cols}" in str(err.value) and "cholesky" in str(err.value)


def test_qr_refuses_rank_deficiency_and_unsupported_modes():
    with pytest.raises(NotLipschitzError, match=r"qr.*rank deficient"):
        asd.subgrad(lambda A: np.linalg.qr(A)[0].sum())(np.ones((3, 2)))
    with pytest.raises(UnsupportedError, match="complete"):
        asd.subgrad(lambda A: np.linalg.qr(A, mode="complete")[0].sum())(TALL)


def ref_pinv(A):
    if A.dtype != object:
        return np.linalg.pinv(A)
    M = mp_matrix(A)
    return as_array(mpmath.inverse(M.T * M) * M.T)


@pytest.mark.parametrize("A", [TALL, TALL.T.copy()], ids=["tall", "wide"])
def test_pinv(A):
    def ref(A):
        return ref_pinv(A) if A.shape[0] >= A.shape[1] else ref_pinv(A.T).T

    check_rule(np.linalg.pinv, A, n_directions=3, reference=ref, exact=False)


def test_hermitian_flags_read_the_lower_triangle_as_numpy():
    A = SPD + np.triu(RNG.standard_normal((3, 3)), 1)
    np.testing.assert_allclose(linalg.pinv(A, hermitian=True), np.linalg.pinv(A, hermitian=True))
    np.testing.assert_allclose(linalg.svd(A, compute_uv=False, hermitian=True),
                               np.linalg.svd(A, compute_uv=False, hermitian=True))
    check_rule(lambda A: np.linalg.pinv(A, hermitian=True), A, n_directions=2, exact=False,
               reference=lambda A: ref_pinv(lower_symmetric(A)))


def test_pinv_refuses_a_rank_change():
    with pytest.raises(NotLipschitzError) as e:
        asd.subgrad(lambda A: np.linalg.pinv(A).sum())(np.outer([1.0, 2.0], [1.0, -1.0]))
    assert "pinv" in str(e.value) and "rank" in str(e.value) and "cutoff" in str(e.value)


def test_lstsq():
    b = np.array([1.0, -1.0, 2.5])

    def ref(A, b):
        return ref_pinv(A) @ b

    check_rule(lambda A, b: np.linalg.lstsq(A, b)[0], TALL, b, n_directions=2, reference=ref,
               exact=False)
    x, res, rank, s = linalg.lstsq(TALL, b)
    want = np.linalg.lstsq(TALL, b)
    np.testing.assert_allclose(x, want[0])
    np.testing.assert_allclose(res, want[1])
    np.testing.assert_allclose(s, want[3])
    assert rank == want[2]


# ----- eigenvalues and eigenvectors -----

H4 = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0],
               [1.0, -1.0, -1.0, 1.0]]) / 2
PAIRS = H4 @ np.diag([1.0, 1.0, 2.0, 2.0]) @ H4.T


def ref_eigvalsh(A):
    if A.dtype != object:
        return np.linalg.eigvalsh(A)
    return np.array(mp_eigsy(A)[0], dtype=object)


@pytest.mark.parametrize("A", [PAIRS, np.zeros((3, 3)), np.diag([1.0, 1.0, 0.0]), SPD],
                         ids=["two pairs", "zero", "double", "generic"])
def test_eigvalsh_at_repeated_eigenvalues(A):
    """Nonsymmetric directions: numpy reads the lower triangle, and so does the rule."""
    dirs = _directions(A.shape, 4)
    report = check_rule(np.linalg.eigvalsh, A, directions=dirs, reference=ref_eigvalsh,
                        exact=False, rtol=1e-8)
    assert report.checks["jacobian"] == 4


def _lower_gradient(q):
    """The gradient of ``qᵀ S q`` with respect to the lower triangle numpy reads of ``S``."""
    G = 2.0 * np.tril(np.outer(q, q), -1)
    return G + np.diag(q * q)


def test_eigvalsh_along_a_direction_that_keeps_the_tie_to_first_order():
    """D vanishes on the double eigenspace of diag(1, 1, 0): the tie splits at second order
    (through the coupling to the third eigenvector), below the mpmath oracle's step, so the
    limit is checked against the eigenvectors of numpy's eigh at X + 1e-4 D."""
    X = np.diag([1.0, 1.0, 0.0])
    D = np.array([[0.0, 0.0, 0.6], [0.0, 0.0, -1.3], [0.6, -1.3, 0.5]])
    J = asd.jacobian(np.linalg.eigvalsh, direction=D)(X)
    _, V = np.linalg.eigh(X + 1e-4 * D)
    for i in range(3):
        np.testing.assert_allclose(J[i], _lower_gradient(V[:, i]), atol=1e-3)
    assert not np.allclose(J[1], J[2], atol=0.1)  # the pair was split, not averaged


@pytest.mark.parametrize("A", [SPD, np.diag([3.0, -1.0, 0.5])], ids=["generic", "diagonal"])
def test_eigh_vectors_where_simple(A):
    check_rule(lambda A: np.linalg.eigh(A)[1], A, n_directions=3,
               reference=ref_eigh_vectors(A), exact=False, rtol=1e-8)


@pytest.mark.parametrize("uplo", ["U", "L", "u"])
def test_eigh_reads_the_triangle_numpy_reads(uplo):
    """A nonsymmetric matrix: numpy's eigh reads one triangle, and its eigenvectors' signs
    depend on which (LAPACK reduces the two differently). Value and derivatives must be those
    of numpy's eigh(A, UPLO) (the upper reading used to get the lower one's signs, an error
    of about 10 against central differences)."""
    np.testing.assert_array_equal(asd.trace(lambda A: np.linalg.eigh(A, uplo)[1])(A3)(A3),
                                  np.linalg.eigh(A3, uplo)[1])
    check_rule(lambda A: np.linalg.eigh(A, uplo)[1], A3, n_directions=3,
               reference=ref_eigh_vectors(A3, uplo), exact=False, rtol=1e-8)
    check_rule(lambda A: np.linalg.eigvalsh(A, uplo), A3, n_directions=2,
               reference=lambda A: np.array(mp_eigsy(A, uplo)[0], dtype=object)
               if A.dtype == object else np.linalg.eigvalsh(A, uplo), exact=False, rtol=1e-8)


# diag(1, 1, 2, 3) hidden by an exact orthogonal matrix: a repeated eigenvalue beside two
# simple ones
SIMPLE_BESIDE = H4 @ np.diag([1.0, 1.0, 2.0, 3.0]) @ H4.T


@pytest.mark.parametrize("A, cols", [(np.diag([1.0, 1.0, 4.0]), [2]), (SIMPLE_BESIDE, [2, 3])],
                         ids=["diag(1, 1, 4)", "hidden"])
def test_eigh_vector_of_a_simple_eigenvalue_beside_a_repeated_one(A, cols):
    """The vector of a simple eigenvalue is smooth whatever the others do (its derivative
    sums over the repeated eigenvalue's projector, whatever its basis)."""
    ref = ref_eigh_vectors(A)
    check_rule(lambda A: np.linalg.eigh(A)[1][:, cols], A, n_directions=3,
               reference=lambda B: ref(B)[:, cols], exact=False, rtol=1e-8)


@pytest.mark.parametrize("X", [np.diag([2.0, 0.0, 0.0]), np.diag([2.0, 1.0, 1.0])],
                         ids=["repeated zero", "repeated"])
def test_eigh_reconstruction_through_a_repeated_eigenvalue_is_refused(X):
    """``V diag(relu(w)) Vᵀ`` reads the repeated eigenvalue's vectors, at a zero one only times
    relu(w) = 0; yet their rotation along the ray is of order 1/δ there and enters the
    Jacobian (the PSD projection's ``μ_i / (μ_i - μ_j)`` inside the null space), which the
    chain rule at the point cannot see: refused, not a wrong Jacobian."""
    def proj(A):
        w, V = np.linalg.eigh(A)
        return (V * asd.relu(w)) @ V.T

    with pytest.raises(NotLipschitzError, match="eigh_basis_of_repeated_eigenvalues"):
        asd.jacobian(proj, direction=np.ones((3, 3)))(X)


@pytest.mark.parametrize("read", [lambda V: V[0, 0], lambda V: V[2, 0], lambda V: V[:, 1].sum(),
                                  lambda V: np.sum(V * np.array([0.0, 1.0, 0.0]))],
                         ids=["entry", "entry that is 0 in every basis", "column", "weighted"])
def test_eigh_vectors_of_a_repeated_eigenvalue_are_refused(read):
    """Any output that reads a vector of the repeated eigenvalue 1 of diag(1, 1, 4) (even an
    entry that every basis keeps at 0, whose neighbours move it) is refused, naming it."""
    with pytest.raises(NotLipschitzError) as e:
        asd.subgrad(lambda A: read(np.linalg.eigh(A)[1]))(np.diag([1.0, 1.0, 4.0]))
    msg = str(e.value)
    assert "eigh_basis_of_repeated_eigenvalues" in msg and "[1.0, 1.0]" in msg
    with pytest.raises(NotLipschitzError):
        asd.jacobian(lambda A: read(np.linalg.eigh(A)[1]))(np.diag([1.0, 1.0, 4.0]))
    with pytest.raises(NotLipschitzError):
        asd.directional(lambda A: read(np.linalg.eigh(A)[1]))(np.diag([1.0, 1.0, 4.0]),
                                                             np.ones((3, 3)))


# ----- singular values and vectors; matrix 2-norms -----

@pytest.mark.parametrize("X", [np.zeros((2, 3)), np.diag([2.0, 2.0, 1.0]),
                               np.outer([1.0, 2.0, 0.0], [1.0, -1.0]), np.eye(3, 2), TALL],
                         ids=["zero 2x3", "repeated top", "rank 1 3x2", "identity 3x2",
                              "generic"])
def test_singular_values_everywhere(X):
    dirs = _directions(X.shape, 4)
    report = check_rule(lambda X: np.linalg.svd(X, compute_uv=False), X, directions=dirs,
                        reference=ref_svals, exact=False, rtol=1e-8)
    assert report.checks["jacobian"] == 4


# Directions that leave a repeated singular value tied to first order (zero on the tied
# singular subspaces) and split it at second order, through the coupling to the others.
@pytest.mark.parametrize("X, D", [
    (np.diag([2.0, 2.0, 1.0]), np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -2.0], [0.5, 1.0, 0.0]])),
    (np.eye(3, 2), np.array([[0.0, 0.0], [0.0, 0.0], [1.0, -2.0]]))],
    ids=["repeated top", "identity 3x2"])
def test_singular_values_split_at_second_order(X, D):
    """The split (order δ²) is below the mpmath oracle's step: the limit is checked against
    the singular vectors of numpy's svd at X + 1e-4 D."""
    J = asd.jacobian(lambda X: np.linalg.svd(X, compute_uv=False), direction=D)(X)
    U, _, Vh = np.linalg.svd(X + 1e-4 * D, full_matrices=False)
    for i in range(len(J)):
        np.testing.assert_allclose(J[i], np.outer(U[:, i], Vh[i]), atol=1e-3)


def test_zero_singular_values_follow_the_direction():
    D = np.array([[0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    J = asd.jacobian(lambda X: np.linalg.svd(X, compute_uv=False), direction=D)(
        np.diag([1.0, 0.0, 0.0])[:2])
    want = np.zeros((2, 2, 3))
    want[0, 0, 0], want[1, 1, 1] = 1.0, 1.0
    np.testing.assert_allclose(J, want, atol=1e-12)


@pytest.mark.parametrize("X", [TALL, TALL.T.copy(), A3], ids=["tall", "wide", "square"])
@pytest.mark.parametrize("part", [0, 2], ids=["U", "Vh"])
def test_svd_vectors_where_simple(X, part):
    check_rule(lambda X: np.linalg.svd(X, full_matrices=False)[part], X, n_directions=2,
               reference=ref_svd_vectors(X, part), exact=False, rtol=1e-8)


@pytest.mark.parametrize("X, col, values", [(np.diag([2.0, 2.0, 1.0]), 0, "[2.0, 2.0]"),
                                             (np.diag([2.0, 1.0, 0.0]), 2, "[0.0]")],
                         ids=["repeated", "zero"])
@pytest.mark.parametrize("part", [0, 2], ids=["U", "Vh"])
def test_svd_vectors_refused_at_repeated_or_zero_singular_values(X, col, values, part):
    def read(X):
        M = np.linalg.svd(X)[part]
        return M[0, col] if part == 0 else M[col, 0]

    with pytest.raises(NotLipschitzError) as e:
        asd.subgrad(read)(X)
    msg = str(e.value)
    assert "svd_basis_of_repeated_or_zero_singular_values" in msg and values in msg


@pytest.mark.parametrize("X, cols", [(np.diag([2.0, 2.0, 1.0]), [2]),
                                     (np.diag([2.0, 1.0, 0.0]), [0, 1]),
                                     (np.array([[3.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), [0])],
                         ids=["beside repeated", "beside zero", "tall beside zero"])
@pytest.mark.parametrize("part", [0, 2], ids=["U", "Vh"])
def test_svd_vectors_of_simple_values_beside_repeated_or_zero_ones(X, cols, part):
    ref = ref_svd_vectors(X, part)

    def pick(M):
        return M[:, cols] if part == 0 else M[cols]

    check_rule(lambda X: pick(np.linalg.svd(X, full_matrices=False)[part]), X, n_directions=3,
               reference=lambda Y: pick(ref(Y)), exact=False, rtol=1e-8)


@pytest.mark.parametrize("X", [np.diag([2.0, 1.0, 0.0]), np.diag([2.0, 0.0, 0.0])],
                         ids=["zero", "repeated zero"])
def test_svd_product_through_a_zero_singular_value_is_refused(X):
    """``U diag(s) Vh`` reads the vectors of a zero singular value times 0: numpy's pair at the
    point disagrees with the sign the singular value's one-sided derivative takes (it gave
    -W[2, 2]), and inside a zero cluster their rotation enters the Jacobian: refused."""
    W = np.arange(9.0).reshape(3, 3)

    def f(X):
        U, s, Vh = np.linalg.svd(X)
        return np.sum((U * s) @ Vh * W)

    with pytest.raises(NotLipschitzError, match="svd_basis_of_repeated_or_zero"):
        asd.subgrad(f, direction=-np.eye(3))(X)


def test_svd_full_matrices_of_a_rectangle_is_unsupported():
    with pytest.raises(UnsupportedError, match="full_matrices=False"):
        asd.subgrad(lambda X: np.linalg.svd(X)[0].sum())(TALL)


@pytest.mark.parametrize("order, pick", [(2, max), (-2, min), ("nuc", sum)],
                         ids=["2", "-2", "nuc"])
@pytest.mark.parametrize("X", [np.diag([2.0, -2.0, 1.0]), np.zeros((2, 3)), TALL],
                         ids=["repeated", "zero", "generic"])
def test_matrix_norms_through_singular_values(order, pick, X):
    def ref(X):
        s = list(ref_svals(X))
        return np.array(pick(s), dtype=object if X.dtype == object else float)

    check_rule(lambda X: np.linalg.norm(X, order), X, directions=_directions(X.shape, 3),
               reference=ref, exact=False, rtol=1e-8)


def test_matrix_norm_axes_and_keepdims():
    X = np.arange(6.0).reshape(2, 3)
    for order in (2, -2, "nuc"):
        got = asd.norm(X, order, axis=(1, 0), keepdims=True)
        np.testing.assert_allclose(got, np.linalg.norm(X, order, axis=(1, 0), keepdims=True))


@pytest.mark.parametrize("fn", [
    lambda A: np.linalg.eigh(A)[1], np.linalg.eigvalsh, np.linalg.cholesky, np.linalg.det,
    lambda A: np.linalg.svd(A)[2], np.linalg.inv, lambda A: np.linalg.qr(A)[1]],
    ids=["eigh", "eigvalsh", "cholesky", "det", "svd", "inv", "qr"])
def test_float32_stays_float32(fn):
    def f(A):
        return np.sum(fn(A) * np.arange(1.0, 10.0, dtype=A.dtype)[: np.size(fn(SPD))].reshape(
            np.shape(fn(SPD))))

    value, g = asd.value_and_subgrad(f)(SPD.astype(np.float32))
    assert np.result_type(value) == np.float32 and g.dtype == np.float32
    np.testing.assert_allclose(g, asd.subgrad(f)(SPD), rtol=1e-3, atol=1e-4)


# ----- diagonals, traces and the numpy 2 linalg namespace -----

@pytest.mark.parametrize("offset", [0, 1, -1])
def test_trace_and_diagonal(offset):
    X = np.arange(12.0).reshape(3, 4)
    check_rule(lambda a: np.diagonal(a, offset), X, n_directions=1, exact=True)
    check_rule(lambda a: np.trace(a, offset), X, n_directions=1, exact=True,
               reference=lambda a: np.sum(np.diagonal(a, offset)))
    S = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(linalg.diagonal(S, offset, 0, 2), np.diagonal(S, offset, 0, 2))
    np.testing.assert_array_equal(linalg.trace(S, offset, 2, 1), np.trace(S, offset, 2, 1))
    check_rule(lambda a: np.linalg.trace(a, offset=offset), S, n_directions=1, exact=True,
               reference=lambda a: np.sum(np.diagonal(a, offset, -2, -1), axis=-1))
    check_rule(lambda a: np.linalg.diagonal(a, offset=offset), S, n_directions=1, exact=True)


def test_multi_dot_and_svdvals():
    v = np.array([1.0, -2.0, 0.5])
    check_rule(lambda a: np.linalg.multi_dot([v, a, A3, v]), SPD, n_directions=1, exact=True,
               reference=lambda a: v @ a @ A3 @ v)
    check_rule(np.linalg.svdvals, np.diag([2.0, 2.0, 1.0]), directions=_directions((3, 3), 2),
               reference=ref_svals, exact=False, rtol=1e-8)


@pytest.mark.parametrize("p", [None, 2, -2, 1, "fro", np.inf])
def test_cond(p):
    def ref(A):
        if p in (None, 2, -2):
            s = list(ref_svals(A))
            value = min(s) / max(s) if p == -2 else max(s) / min(s)
            return np.array(value, dtype=object if A.dtype == object else float)
        if A.dtype != object:
            return np.linalg.cond(A, p)
        Ai = as_array(mpmath.inverse(mp_matrix(A)))
        if p == "fro":
            return np.sqrt(np.sum(A * A)) * np.sqrt(np.sum(Ai * Ai))
        if p == 1:
            return np.max(np.sum(np.abs(A), axis=0)) * np.max(np.sum(np.abs(Ai), axis=0))
        return np.max(np.sum(np.abs(A), axis=1)) * np.max(np.sum(np.abs(Ai), axis=1))

    check_rule(lambda A: np.linalg.cond(A, p), A3, n_directions=2, reference=ref, exact=False)


def test_vector_and_matrix_norm():
    X = np.arange(24.0).reshape(2, 3, 4) - 11.5
    for kwargs in ({}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}, {"ord": 1},
                   {"ord": np.inf, "axis": -1}):
        np.testing.assert_allclose(asd.vector_norm(X, **kwargs),
                                   np.linalg.vector_norm(X, **kwargs))
    for kwargs in ({}, {"ord": 1}, {"ord": -np.inf, "keepdims": True}):
        np.testing.assert_allclose(asd.matrix_norm(X, **kwargs),
                                   np.linalg.matrix_norm(X, **kwargs))
    check_rule(lambda x: np.linalg.vector_norm(x, axis=(0, 2)), X, n_directions=1,
               exact=False, reference=lambda x: np.sqrt(np.sum(x * x, axis=(0, 2))))
    check_rule(lambda x: np.linalg.matrix_norm(x, ord=1), X, n_directions=1, exact=True,
               reference=lambda x: np.max(np.sum(np.abs(x), axis=1), axis=-1))


def test_shape_errors():
    with pytest.raises(ShapeError, match="square"):
        asd.subgrad(lambda A: np.linalg.det(A))(np.ones((2, 3)))
    with pytest.raises(ShapeError, match="square"):
        linalg.solve(np.ones((2, 3)), np.ones(2))


# ----- eig of a general matrix with a real, simple spectrum -----

REAL3 = np.array([[2.0, 1.0, 0.0], [0.5, -1.0, 0.25], [0.0, 1.5, 0.5]])


@pytest.mark.parametrize("A", [REAL3, np.array([[1.0, 2.0], [0.0, 3.0]])],
                         ids=["dense", "triangular"])
@pytest.mark.parametrize("part", [0, 1], ids=["eigenvalues", "eigenvectors"])
def test_eig_where_the_spectrum_is_real_and_simple(A, part):
    assert not np.iscomplexobj(np.linalg.eig(A)[0])
    check_rule(lambda A: np.linalg.eig(A)[part], A, n_directions=3, reference=ref_eig(A, part),
               exact=False, rtol=1e-8)
    if part == 0:
        check_rule(np.linalg.eigvals, A, n_directions=2, reference=ref_eig(A, 0),
                   exact=False, rtol=1e-8)


@pytest.mark.parametrize("A, error, words", [
    (np.array([[0.0, -1.0], [1.0, 0.0]]), UnsupportedError, "complex eigenvalue(s) [1j"),
    (np.array([[1.0, 1.0], [0.0, 1.0]]), NotLipschitzError, "repeated eigenvalue(s) [1.0]"),
    (np.eye(3), NotLipschitzError, "repeated eigenvalue(s) [1.0]")],
    ids=["complex", "jordan", "identity"])
@pytest.mark.parametrize("fn", [lambda A: np.linalg.eig(A)[0][0],
                                lambda A: np.linalg.eig(A)[1][0, 0],
                                lambda A: np.linalg.eigvals(A)[0]], ids=["w", "V", "eigvals"])
def test_eig_refuses_complex_and_repeated_eigenvalues(A, error, words, fn):
    with pytest.raises(error) as e:
        asd.subgrad(fn)(A)
    assert words in str(e.value) and "eigh" in str(e.value)


# ----- stacks of matrices (leading axes), as numpy takes them -----

STACK = np.stack([SPD, np.diag([1.0, 1.0, 4.0]), np.zeros((3, 3))])


def _per_matrix(ref):
    """A reference on a stack: ``ref`` on each matrix, stacked."""
    def stacked(A):
        out = [np.asarray(ref(a)) for a in A]
        return np.stack(out) if A.dtype != object else np.array(
            [list(o.ravel()) for o in out], dtype=object).reshape((len(A),) + out[0].shape)
    return stacked


def test_eigvalsh_of_a_stack():
    """A stack holding a generic, a repeated and a zero matrix: each decided as alone."""
    report = check_rule(np.linalg.eigvalsh, STACK, directions=_directions(STACK.shape, 3),
                        reference=_per_matrix(ref_eigvalsh), exact=False, rtol=1e-8)
    assert report.checks["jacobian"] == 3
    check_rule(lambda A: np.linalg.eigvalsh(A, "U"), STACK, n_directions=2,
               reference=_per_matrix(lambda a: np.linalg.eigvalsh(a, "U") if a.dtype != object
                                     else np.array(mp_eigsy(a, "U")[0], dtype=object)),
               exact=False, rtol=1e-8)


def test_eigh_and_svd_of_a_stack():
    A = np.stack([SPD, A3 + A3.T])
    refs = [ref_eigh_vectors(a) for a in A]
    check_rule(lambda A: np.linalg.eigh(A)[1], A, n_directions=2, exact=False, rtol=1e-8,
               reference=lambda B: np.stack([r(b) for r, b in zip(refs, B)]))
    X = np.stack([TALL, 2.0 * TALL[::-1]])
    for part in (0, 2):
        refs = [ref_svd_vectors(x, part) for x in X]
        check_rule(lambda X, part=part: np.linalg.svd(X, full_matrices=False)[part], X,
                   n_directions=2, exact=False, rtol=1e-8,
                   reference=lambda Y, refs=refs: np.stack([r(y) for r, y in zip(refs, Y)]))
    Z = np.stack([np.diag([2.0, 2.0, 1.0]), np.zeros((3, 3)), A3])
    report = check_rule(lambda X: np.linalg.svd(X, compute_uv=False), Z,
                        directions=_directions(Z.shape, 3), reference=_per_matrix(ref_svals),
                        exact=False, rtol=1e-8)
    assert report.checks["jacobian"] == 3


@pytest.mark.parametrize("order, pick", [(2, max), (-2, min), ("nuc", sum)],
                         ids=["2", "-2", "nuc"])
@pytest.mark.parametrize("axis, keepdims", [((1, 2), False), ((2, 0), True), ((-1, -3), False)])
def test_matrix_norms_over_two_axes_of_a_stack(order, pick, axis, keepdims):
    X = np.stack([np.diag([2.0, -2.0, 1.0]), np.zeros((3, 3)), A3])[..., :2]  # (3, 3, 2)
    nd = X.ndim
    rest = tuple(a for a in range(nd) if a not in tuple(ax % nd for ax in axis))

    def ref(X):
        M = np.transpose(X, rest + tuple(ax % nd for ax in axis))
        out = np.array([pick(list(ref_svals(m))) for m in M], dtype=X.dtype)
        if keepdims:
            out = out.reshape(tuple(1 if a not in rest else n for a, n in enumerate(X.shape)))
        return out

    np.testing.assert_allclose(asd.norm(X, order, axis=axis, keepdims=keepdims),
                               np.linalg.norm(X, order, axis=axis, keepdims=keepdims))
    check_rule(lambda X: np.linalg.norm(X, order, axis=axis, keepdims=keepdims), X,
               directions=_directions(X.shape, 2), reference=ref, exact=False, rtol=1e-8)


def test_doctests():
    assert doctest.testmod(linalg).failed == 0


def test_refused_vectors_fed_into_another_factorization_are_refused_by_name():
    # the continuity check re-evaluates the output with the repeated value's vectors on their
    # other side (NaN): eigvalsh of that fails inside numpy, which must not escape raw
    def f(x):
        return np.sum(np.linalg.eigvalsh(np.linalg.eigh(np.diag(x))[1] * 2.0 + np.eye(3)))
    with pytest.raises(asd.NotLipschitzError, match=r"eigvalsh\) cannot be evaluated"):
        asd.subgrad(f)(np.array([1.0, 1.0, 4.0]))
