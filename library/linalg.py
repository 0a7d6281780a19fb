"""Linear algebra (``numpy.linalg``) on traced arrays: smooth where defined, refused where not.

``solve``, ``inv``, ``det``, ``slogdet``, ``cholesky``, ``qr`` and ``pinv`` are smooth on
their domains, with the classical matrix-calculus derivatives as structured maps (matrix
products, no ``n² x n²`` Jacobians), batched over leading axes as numpy is. ``det`` is a
polynomial: its gradient, the cofactor matrix, is computed from an SVD so it is right at
singular matrices too. Where a function is undefined or jumps (a singular ``solve``/``inv``,
a matrix that is not positive definite for ``cholesky``, a rank change for ``pinv``) the rule
refuses with `NotLipschitzError`, naming the values and what to use instead.

Eigenvalues and singular values of symmetric (and of rectangular) matrices are Lipschitz
everywhere but kink where they repeat (and, for singular values, at 0): they reuse the
spectral machinery of `library/spectral.py`, whose rules rotate each tied cluster into the
limit basis along the ray; stacks of matrices (leading axes) are taken as numpy takes them.
An eigenvector or singular vector is smooth where its own value is simple (and nonzero),
whatever the other values do; the vectors of a repeated (or zero) value are not even
continuous, so a selector primitive reports that jump (`asd.extend.record_jump`) and the
engine refuses exactly the outputs that read them. ``eig`` of a general real matrix is smooth
where its spectrum is real and simple, and refused elsewhere.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from asd.errors import NonFiniteError, NotLipschitzError, ShapeError, UnsupportedError
from asd.extend import (
    Closure,
    FanIn,
    Primitive,
    is_traced,
    numpy_dtype,
    read_value,
    record_jump,
    refuse_where,
    register_alternative,
    register_numpy,
    unbroadcast,
    unsupported,
)

from . import smooth, spectral
from .spectral import (
    RayMatrix,
    eigh_ties,
    embed,
    exact_where,
    limit_bases,
    repeated,
    squares,
    sym,
    tie_tolerance,
)

SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
SVDResult = namedtuple("SVDResult", "U S Vh")
QRResult = namedtuple("QRResult", "Q R")
LstsqResult = namedtuple("LstsqResult", "x residuals rank s")


def _mT(a):
    return np.swapaxes(a, -1, -2)


def _floats(a) -> np.ndarray:
    a = np.asarray(a)
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(float)


def _stack_of_squares(a, name: str) -> np.ndarray:
    a = _floats(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name} needs square matrices in the last two axes, got shape "
                         f"{a.shape}")
    return a


def _square_shape(a, name: str) -> tuple:
    """The shape of a stack of square matrices, checked without reading a value (a traced
    argument's value may be another library's staged array)."""
    shape = np.shape(a)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f"{name} needs square matrices in the last two axes, got shape "
                         f"{shape}")
    return shape


def _float_dtype(a, floor) -> np.dtype:
    """``a``'s floating dtype (at least ``floor``), read without reading its value (a torch
    dtype reads as numpy's, `asd.extend.numpy_dtype`)."""
    return np.result_type(numpy_dtype(a), floor)


def _value(x) -> np.ndarray:
    return np.asarray(x.value if is_traced(x) else x)


def _nb(t, shape) -> int:
    return np.ndim(t) - len(shape)


def _align(t, in_shape: tuple, out_ndim: int):
    """Unit axes after a tangent's batch axis, so a batched tangent of an input with fewer
    stack axes broadcasts against the output's stack axes, not against the batch."""
    nb, pad = _nb(t, in_shape), out_ndim - len(in_shape)
    if nb and pad > 0:
        return np.reshape(t, np.shape(t)[:nb] + (1,) * pad + tuple(in_shape))
    return t


def _singular(name: str, A: np.ndarray, fix: str) -> NotLipschitzError:
    s = np.linalg.svd(A, compute_uv=False)
    return NotLipschitzError(
        f"{name}: the matrix of shape {A.shape} is singular (smallest singular value "
        f"{float(np.min(s)):.3g}, largest {float(np.max(s)):.3g}); the result blows up near it, "
        f"so there is no derivative. {fix}"
    )


# ----- solve and inv -----

def _solve_impl(A, B):
    return np.linalg.solve(A, B)


solve_p = Primitive("solve", _solve_impl)


@solve_p.defrule
def solve_rule(xs, dxs):
    """``X = A⁻¹ B``: ``dX = A⁻¹ (dB - dA X)``; pulls ``B̄ = A⁻ᵀ X̄``, ``Ā = -B̄ Xᵀ``."""
    A, B = _floats(xs[0]), _floats(xs[1])
    out_nd = max(A.ndim, B.ndim)
    try:
        X = np.linalg.solve(A, B)
    except np.linalg.LinAlgError:
        raise _singular("solve", A, "Regularize (A + eps I), or use np.linalg.lstsq / pinv "
                        "where a rank-deficient system is intended.") from None
    AT = _mT(A)

    def push_a(t):
        return -np.linalg.solve(A, _align(t, A.shape, out_nd) @ X)

    def pull_a(ct):
        return unbroadcast(-np.linalg.solve(AT, ct) @ _mT(X), A.shape, _nb(ct, X.shape))

    def push_b(t):
        nb = _nb(t, B.shape)
        return np.linalg.solve(A, np.broadcast_to(_align(t, B.shape, out_nd),
                                                  np.shape(t)[:nb] + X.shape))

    def pull_b(ct):
        return unbroadcast(np.linalg.solve(AT, ct), B.shape, _nb(ct, X.shape))

    return X, FanIn(Closure(push_a, pull_a, A.shape, X.shape),
                    Closure(push_b, pull_b, B.shape, X.shape))


def solve(a, b):
    """``numpy.linalg.solve``: smooth where ``a`` is invertible; refused where it is singular.

    >>> import numpy as np, asd
    >>> A = np.array([[2.0, 1.0], [0.0, 4.0]])
    >>> asd.subgrad(lambda b: np.linalg.solve(A, b).sum())(np.array([1.0, 1.0]))
    array([0.5  , 0.125])
    """
    _square_shape(a, "solve")
    if np.ndim(b) == 1:
        x = solve_p(a, smooth.reshape(b, (-1, 1)))
        return smooth.reshape(x, np.shape(x)[:-1])
    return solve_p(a, b)


def _inv_impl(A):
    return np.linalg.inv(A)


inv_p = Primitive("inv", _inv_impl)


@inv_p.defrule
def inv_rule(xs, dxs):
    """``Y = A⁻¹``: ``dY = -Y dA Y``, pulled by ``-Yᵀ Ȳ Yᵀ``."""
    A = _stack_of_squares(xs[0], "inv")
    try:
        Y = np.linalg.inv(A)
    except np.linalg.LinAlgError:
        raise _singular("inv", A, "Regularize (A + eps I), or use np.linalg.pinv where a "
                        "rank-deficient matrix is intended.") from None
    YT = _mT(Y)
    return Y, Closure(lambda t: -Y @ t @ Y, lambda ct: -YT @ ct @ YT, A.shape, Y.shape)


def inv(a):
    """``numpy.linalg.inv``: ``d(A⁻¹) = -A⁻¹ dA A⁻¹``; refused at a singular matrix.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.inv(a)[0, 0])(np.array([[2.0, 0.0], [0.0, 4.0]]))
    array([[-0.25,  0.  ],
           [ 0.  ,  0.  ]])
    """
    return inv_p(a)


def matrix_power(a, n: int):
    """``numpy.linalg.matrix_power`` by repeated squaring through ``matmul`` (and ``inv`` for
    negative powers); ``n = 0`` is the identity, a constant.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.matrix_power(a, 3)[0, 1])(np.eye(2))
    array([[0., 3.],
           [0., 0.]])
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise TypeError(f"matrix_power: the exponent must be an integer, got {n!r}")
    shape = _square_shape(a, "matrix_power")
    if n == 0:
        return np.broadcast_to(np.eye(shape[-1]), shape).copy()
    base = inv(a) if n < 0 else a
    out, n = None, abs(int(n))
    while n:
        if n & 1:
            out = base if out is None else smooth.matmul(out, base)
        n >>= 1
        if n:
            base = smooth.matmul(base, base)
    return out


# ----- determinants -----

def _others_product(s: np.ndarray) -> np.ndarray:
    """``prod_{j != i} s_j`` along the last axis by prefix and suffix products (zeros exact)."""
    ones = np.ones(s.shape[:-1] + (1,), s.dtype)
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = np.cumprod(np.concatenate([ones, s[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    return before * after


def cofactor(A: np.ndarray) -> np.ndarray:
    """The cofactor matrix ``adj(A)ᵀ`` (the gradient of ``det``). Up to 3x3 from its minors
    (products of entries: exact where they are, so a cofactor that is 0 comes out 0, not an
    SVD's rounding that a huge direction scales up); larger from ``A = U S Vh``:
    ``det(U) det(Vh) U diag(prod_{j != i} s_j) Vh``, right at singular matrices too, where
    ``det(A) A⁻ᵀ`` is not defined."""
    n = A.shape[-1]
    if n <= 3:
        return _small_cofactor(A)
    U, s, Vh = np.linalg.svd(A)
    sign = np.linalg.det(U) * np.linalg.det(Vh)
    return sign[..., None, None] * (U * _others_product(s)[..., None, :]) @ Vh


def _small_cofactor(A: np.ndarray) -> np.ndarray:
    """The cofactors of 1x1, 2x2 and 3x3 matrices (any leading batch axes), entry by entry
    from the 2x2 minors: ``C[i, j] = (-1)^(i+j) M[i, j]``."""
    n = A.shape[-1]
    if n == 1:
        return np.ones_like(A)
    if n == 2:
        a, b, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1]
        return np.stack([np.stack([d, -c], -1), np.stack([-b, a], -1)], -2)
    rows = []
    for i in range(3):
        r0, r1 = [k for k in range(3) if k != i]
        row = []
        for j in range(3):
            c0, c1 = [k for k in range(3) if k != j]
            minor = A[..., r0, c0] * A[..., r1, c1] - A[..., r0, c1] * A[..., r1, c0]
            row.append(minor if (i + j) % 2 == 0 else -minor)
        rows.append(np.stack(row, -1))
    return np.stack(rows, -2)


def _sum_last2(t):
    return np.sum(t, axis=(-2, -1))


def _det_impl(A):
    if np.asarray(A).dtype == object:  # exact series at a tie: np.linalg.det is floats only
        return _det_exact(np.asarray(A))
    return np.linalg.det(A)


def _det_exact(A: np.ndarray):
    """``det`` of an object array (exact series, Fractions), by expansion along the first row
    (n! products: the small matrices a tie's cone meets; past 6x6 the series is unavailable
    and the tie goes to the next direction, as for any operation without one)."""
    n = A.shape[-1]
    if n > 6:
        raise TypeError(f"det of a {n}x{n} matrix on exact series (at most 6x6)")
    if n == 0:
        return np.ones(A.shape[:-2], dtype=object)
    if n == 1:
        return A[..., 0, 0]
    rest = A[..., 1:, :]
    total = None
    for j in range(n):
        term = A[..., 0, j] * _det_exact(np.delete(rest, j, axis=-1))
        total = term if total is None else (total + term if j % 2 == 0 else total - term)
    return total


det_p = Primitive("det", _det_impl)


@det_p.defrule
def det_rule(xs, dxs):
    """A polynomial: ``d det = <cof(A), dA>``, smooth everywhere."""
    A = _stack_of_squares(xs[0], "det")
    ans = np.linalg.det(A)
    G = cofactor(A) if A.shape[-1] else np.zeros(A.shape)
    return ans, Closure(lambda t: _sum_last2(G * t), lambda ct: np.asarray(ct)[..., None, None] * G,
                        A.shape, np.shape(ans))


def det(a):
    """``numpy.linalg.det``: a polynomial, with the cofactor matrix as gradient (also where
    ``a`` is singular).

    >>> import numpy as np, asd
    >>> asd.subgrad(np.linalg.det)(np.array([[1.0, 2.0], [2.0, 4.0]]))
    array([[ 4., -2.],
           [-2.,  1.]])
    """
    return det_p(a)


def _logabsdet_impl(A):
    return np.linalg.slogdet(A)[1]


logabsdet_p = Primitive("logabsdet", _logabsdet_impl)


@logabsdet_p.defrule
def logabsdet_rule(xs, dxs):
    """``d log|det A| = <A⁻ᵀ, dA>``; at a singular matrix the value is -inf: refused."""
    A = _stack_of_squares(xs[0], "slogdet")
    sign, ans = np.linalg.slogdet(A)
    refuse_where(sign == 0, lambda: NonFiniteError(
        f"slogdet: the matrix of shape {A.shape} is singular, so log|det| = -inf and has "
        "no derivative there. Regularize (A + eps I) or use np.linalg.det, which is "
        "differentiable everywhere."))
    G = _mT(np.linalg.inv(A))
    return ans, Closure(lambda t: _sum_last2(G * t), lambda ct: np.asarray(ct)[..., None, None] * G,
                        A.shape, np.shape(ans))


def slogdet(a):
    """``numpy.linalg.slogdet``: the sign is locally constant (a constant here); ``logabsdet``
    is smooth where ``det a != 0`` and refused where it is 0.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.slogdet(a)[1])(np.array([[2.0, 0.0], [0.0, -4.0]])) + 0
    array([[ 0.5 ,  0.  ],
           [ 0.  , -0.25]])
    """
    _square_shape(a, "slogdet")
    sign = read_value(a, lambda v: np.linalg.slogdet(np.asarray(v))[0])
    return SlogdetResult(sign, logabsdet_p(a))


# ----- Cholesky and QR -----

def _triangle(a, uplo: str):
    """The symmetric matrix numpy reads from one triangle of ``a`` (``UPLO``), traced."""
    n = np.shape(a)[-1]
    ones = np.ones((n, n), _float_dtype(a, np.float16))  # float32 stays float32
    keep = np.tril(ones) if uplo.upper() == "L" else np.triu(ones)
    strict = keep - np.eye(n, dtype=ones.dtype)
    return smooth.add(smooth.multiply(a, keep),
                      smooth.swapaxes(smooth.multiply(a, strict), -1, -2))


def _cholesky_impl(S):
    return np.linalg.cholesky(S)


cholesky_p = Primitive("cholesky", _cholesky_impl)


def _phi(X):
    """The lower triangle with the diagonal halved (self-adjoint, so push and pull share it)."""
    n = X.shape[-1]
    return np.tril(X) - 0.5 * X * np.eye(n)


@cholesky_p.defrule
def cholesky_rule(xs, dxs):
    """``S = L Lᵀ``: ``dL = L Φ(L⁻¹ dS L⁻ᵀ)``; pulled by ``sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)``."""
    S = _stack_of_squares(xs[0], "cholesky")
    try:
        L = np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        low = float(np.min(np.linalg.eigvalsh(S)))
        raise NotLipschitzError(
            f"cholesky: the matrix of shape {S.shape} is not positive definite (smallest "
            f"eigenvalue {low:.3g}); the factor does not exist there, and its derivative "
            "blows up as the smallest eigenvalue reaches 0. Shift it (S + eps I) or "
            "differentiate eigenvalues (np.linalg.eigvalsh) instead."
        ) from None
    Li = np.linalg.inv(L)
    LiT = _mT(Li)

    def push(t):
        return L @ _phi(Li @ sym(t) @ LiT)

    def pull(ct):
        return sym(LiT @ _phi(_mT(L) @ ct) @ Li)

    return L, Closure(push, pull, S.shape, L.shape)


def cholesky(a, /, *, upper=False):
    """``numpy.linalg.cholesky`` (reads the lower triangle, as numpy); refused where ``a`` is
    not positive definite.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.cholesky(a)[1, 1])(np.array([[4.0, 2.0], [2.0, 2.0]])) + 0
    array([[ 0.125,  0.   ],
           [-0.5  ,  0.5  ]])
    """
    L = cholesky_p(_triangle(a, "L"))
    return smooth.swapaxes(L, -1, -2) if upper else L


def _refuse_householder_jump(A: np.ndarray) -> None:
    """numpy's QR (LAPACK's Householder reflections) sets ``R_jj = -sign(α_j) ||x_j||`` for
    the pivot ``α_j`` of the column ``x_j`` left to reduce, but ``R_jj = α_j`` when ``x_j``'s
    tail is already 0 (``τ_j = 0``): at such a column, and at a zero pivot (``τ_j = 1``), any
    perturbation flips the sign of column j of Q and row j of R. A jump: no derivative."""
    m, n = A.shape[-2:]
    tau = np.linalg.qr(A, mode="raw")[1]
    has_tail = np.arange(tau.shape[-1]) < m - 1
    jump = (has_tail & (tau == 0)) | (tau == 1)

    def householder_jump():
        cols = np.flatnonzero(np.any(jump.reshape(-1, tau.shape[-1]), axis=0)).tolist()
        return NotLipschitzError(
            f"qr: numpy's Householder QR jumps at this {m}x{n} matrix: column(s) {cols} are "
            "already reduced below the diagonal (or have a zero pivot), and any perturbation "
            "there flips the sign of that column of Q and row of R, so there is no "
            "derivative. The QR with a positive diagonal is smooth at full rank: "
            "R = np.linalg.cholesky(A.T @ A).T, Q = A @ np.linalg.inv(R).")

    refuse_where(jump, householder_jump)


def _qr_impl(A):
    Q, R = np.linalg.qr(A)
    return np.concatenate([Q, R], axis=-2)


qr_p = Primitive("qr", _qr_impl)


@qr_p.defrule
def qr_rule(xs, dxs):
    """``A = Q R`` (m >= n, full column rank), output ``[Q; R]``. With ``C = Qᵀ dA R⁻¹`` and
    ``Ω = tril(C, -1) - tril(C, -1)ᵀ``: ``dQ = Q Ω + dA R⁻¹ - Q C``, ``dR = (C - Ω) R``."""
    A = _floats(xs[0])
    Q, R = np.linalg.qr(A)
    m, n = A.shape[-2:]
    diag = np.abs(np.diagonal(R, axis1=-2, axis2=-1))
    tol = tie_tolerance(max(m, n), np.max(diag, initial=0.0))
    refuse_where(diag <= tol, lambda: NotLipschitzError(
        f"qr: the matrix of shape {A.shape} is rank deficient (|diag R| = "
        f"{diag.round(12).tolist()}); Q is not determined there and jumps nearby. "
        "Regularize, or differentiate the singular values (np.linalg.svd with "
        "compute_uv=False) instead."))
    _refuse_householder_jump(A)
    Ri = np.linalg.inv(R)
    QT, RiT = _mT(Q), _mT(Ri)

    def push(t):
        C = QT @ t @ Ri
        low = np.tril(C, -1)
        omega = low - _mT(low)
        return np.concatenate([Q @ omega + t @ Ri - Q @ C, (C - omega) @ R], axis=-2)

    def pull(ct):
        cq, cr = ct[..., :m, :], ct[..., m:, :]
        M = QT @ cq - cr @ _mT(R)
        K = np.tril(M - _mT(M), -1) - M
        return (cq + Q @ K) @ RiT

    return np.concatenate([Q, R], axis=-2), Closure(push, pull, A.shape, (*A.shape[:-2], m + n, n))


def qr(a, mode="reduced"):
    """``numpy.linalg.qr`` of a matrix with at least as many rows as columns and full column
    rank (modes 'reduced' and 'r'); numpy's signs of ``diag(R)`` are continued smoothly.
    Refused at a rank-deficient matrix and where numpy's own QR jumps (a column already
    reduced below the diagonal, e.g. a triangular matrix, or a zero Householder pivot).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.qr(a)[1][0, 0])(np.array([[3.0, 1.0], [4.0, 2.0]]))
    array([[-0.6,  0. ],
           [-0.8,  0. ]])
    """
    m, n = np.shape(a)[-2:]
    if mode not in ("reduced", "r"):
        raise unsupported(f"numpy.linalg.qr with mode={mode!r} (the completed basis of "
                          "'complete' is not unique; use 'reduced')")
    if m < n:
        raise unsupported(f"numpy.linalg.qr of a wide matrix (shape {np.shape(a)}); asd "
                          "differentiates m >= n (qr of the transpose is an LQ factorization)")
    packed = qr_p(a)
    R = smooth.getitem(packed, (Ellipsis, slice(m, None), slice(None)))
    if mode == "r":
        return R
    return QRResult(smooth.getitem(packed, (Ellipsis, slice(None, m), slice(None))), R)


# ----- pseudo-inverse and least squares -----

def _cutoff(s: np.ndarray, rcond) -> np.ndarray:
    return rcond * np.max(s, axis=-1, keepdims=True, initial=0.0)


def _pinv_impl(A, rcond):
    return np.linalg.pinv(A, rcond=rcond)


pinv_p = Primitive("pinv", _pinv_impl)


@pinv_p.defrule
def pinv_rule(xs, dxs, rcond):
    """Full rank ``A`` (the rank is locally constant): ``dP = -P dA P + P Pᵀ dAᵀ (I - A P) +
    (I - P A) dAᵀ Pᵀ P``."""
    A = _floats(xs[0])
    s = np.linalg.svd(A, compute_uv=False)
    cut = _cutoff(s, rcond)
    refuse_where(s <= cut, lambda: NotLipschitzError(
        f"pinv: the matrix of shape {A.shape} has singular values {s.round(12).tolist()} "
        f"at or below the cutoff rcond * max = {cut.ravel().tolist()}: its rank is not "
        "full, and pinv jumps where the rank changes (the small singular value's inverse "
        "appears). Regularize (ridge: solve(AᵀA + eps I, Aᵀ)) or raise rcond above the "
        "small singular values so that the rank is fixed nearby."))
    P = np.linalg.pinv(A, rcond=rcond)
    m, n = A.shape[-2:]
    PT = _mT(P)
    Im, In = np.eye(m), np.eye(n)
    left, right = Im - A @ P, In - P @ A
    PPT, PTP = P @ PT, PT @ P

    def push(t):
        tT = _mT(t)
        return -P @ t @ P + PPT @ tT @ left + right @ tT @ PTP

    def pull(ct):
        cT = _mT(ct)
        return -PT @ ct @ PT + left @ cT @ PPT + PTP @ cT @ right

    return P, Closure(push, pull, A.shape, P.shape)


def pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """``numpy.linalg.pinv`` of a full-rank matrix (smooth there); at rank-deficient input
    (a singular value at or below the cutoff) it jumps, and is refused.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.pinv(a).sum())(np.array([[2.0], [0.0]]))
    array([[-0.25],
           [ 0.25]])
    """
    if rcond is None:
        rcond = 1e-15 if rtol is None else rtol
    # hermitian=True: numpy reads the lower triangle (through eigh), and so does this
    return pinv_p(_triangle(a, "L") if hermitian else a, rcond=float(rcond))


def lstsq(a, b, rcond=None):
    """``numpy.linalg.lstsq`` of a full-rank ``a``: ``x = pinv(a) b``; residuals (for
    ``m > n``) and singular values are traced too. Refused where ``a`` is rank deficient.

    >>> import numpy as np, asd
    >>> A = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    >>> asd.subgrad(lambda b: np.linalg.lstsq(A, b)[0][1])(np.array([1.0, 2.0, 4.0])).round(9) + 0
    array([-0.5,  0. ,  0.5])
    """
    m, n = np.shape(a)[-2:]
    if rcond is None:
        rcond = np.finfo(_float_dtype(a, np.float64)).eps * max(m, n)
    vector = np.ndim(b) == 1
    B = smooth.reshape(b, (-1, 1)) if vector else b
    x = smooth.matmul(pinv_p(a, rcond=float(rcond)), B)
    s = svdvals_p(a)
    if m > n:
        r = smooth.subtract(B, smooth.matmul(a, x))
        residuals = smooth.sum(smooth.multiply(r, r), axis=0)
    else:
        residuals = np.zeros(0)
    if vector:
        x = smooth.reshape(x, (n,))
    return LstsqResult(x, residuals, min(m, n), s)


# ----- eigenvalues and eigenvectors of symmetric matrices -----

def eigvalsh(a, UPLO="L"):
    """``numpy.linalg.eigvalsh``: eigenvalues of the symmetric matrix numpy reads from the
    ``UPLO`` triangle (of each matrix of a stack), by the spectral rule (limit basis at
    repeated eigenvalues).

    >>> import numpy as np, asd
    >>> asd.jacobian(np.linalg.eigvalsh, direction=np.diag([1.0, -1.0]))(np.eye(2))[0]
    array([[0., 0.],
           [0., 1.]])
    """
    return spectral.eigvalsh(_triangle(a, _uplo(UPLO)))


def _uplo(UPLO) -> str:
    if not isinstance(UPLO, str) or UPLO.upper() not in ("L", "U"):
        raise ValueError(f"UPLO argument must be 'L' or 'U', got {UPLO!r}")
    return UPLO.upper()


def _labels(values: np.ndarray, tol) -> np.ndarray:
    """`clusters` of each row of sorted ``values`` (a stack), at one tolerance per row."""
    gaps = np.diff(values, axis=-1) > np.asarray(tol)[..., None]
    start = np.zeros(values.shape[:-1] + (1,), int)
    return np.concatenate([start, np.cumsum(gaps, axis=-1)], axis=-1)


def _tolerance(S: np.ndarray, lam: np.ndarray):
    """`eigh_ties`' tolerance for the eigenvalues ``lam`` of ``S`` (0 for a diagonal one)."""
    n = S.shape[-1]
    diagonal = ~np.any(S - S * np.eye(n, dtype=S.dtype), axis=(-2, -1))
    return np.where(diagonal, 0.0, tie_tolerance(n, np.max(np.abs(lam), axis=-1, initial=0.0)))


def _probed(V: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """``V`` with the columns where ``pick`` is nonzero made NaN: the other side of a basis
    selector (`eigh_basis_p`, `svd_basis_p`), which stands for the other bases those vectors
    take at nearby matrices. No value at the point can stand for them all (a basis keeps an
    entry of ``diag(1, 1, 4)``'s first vector at 0 that its neighbours move, and ``U diag(s)
    Vh`` at a zero singular value reads its vectors only times 0, though their rotation along
    the ray matters to its Jacobian), so the probe makes every use of them show: an output
    that reads any of them, even times 0, changes and is refused; one that reads none does
    not."""
    pick = np.asarray(pick) != 0
    return np.where(pick[..., None, :], np.nan, V).astype(V.dtype, copy=False)


def _eigh_basis_impl(w, S):
    return np.zeros(np.shape(w))


eigh_basis_p = Primitive("eigh_basis_of_repeated_eigenvalues", _eigh_basis_impl,
                         discontinuous=True)


@eigh_basis_p.defrule
def eigh_basis_rule(xs, dxs):
    """The choice of eigenvectors for a repeated eigenvalue: any orthonormal basis of its
    eigenspace, and the ones at nearby matrices approach different bases along different
    rays. A selector, 0 at the point, that jumps at the repeated eigenvalues: the engine
    refuses an output it reaches unless the output is the same on the selector's other side
    (`_probed`), i.e. reads only the vectors of simple eigenvalues (or none)."""
    w, S = np.asarray(xs[0]), squares(xs[1], "eigh")
    tied = repeated(w, _tolerance(S, w))
    ans = np.zeros(w.shape)
    exact_where(tied, lambda: record_jump(ans, tied, (np.ones(w.shape),), fix=(
        f"The eigenvalue(s) {np.unique(np.round(w[tied], 12)).tolist()[:3]} repeat, and "
        "their eigenvectors are any orthonormal basis of the eigenspace, jumping under "
        "small perturbations: differentiate functions of the eigenvalues (eigvalsh, "
        "asd.spectral), of the simple eigenvalues' vectors, or of the projector onto "
        "the whole eigenspace.")), lambda: None)
    return ans, None


def _eigh_vectors_impl(S, basis, UPLO="L"):
    S = np.asarray(S)
    return _probed(np.linalg.eigh(S, UPLO=UPLO)[1], basis)


eigh_vectors_p = Primitive("eigh_vectors", _eigh_vectors_impl)


@eigh_vectors_p.defrule
def eigh_vectors_rule(xs, dxs, UPLO="L"):
    """``dV = V (F ∘ Vᵀ dS V)`` with ``F_ij = 1 / (λ_j - λ_i)`` between different eigenvalues
    and 0 inside a cluster of repeated ones: exact for the vectors of simple eigenvalues (the
    sum over a cluster is its spectral projector, whatever its basis); the vectors of a
    repeated one have no derivative, and `eigh_basis_rule` keeps them from any output."""
    S = squares(xs[0], "eigh")
    lam = np.linalg.eigvalsh(S, UPLO=UPLO)
    V = _eigh_vectors_impl(S, xs[1], UPLO)
    labels = _labels(lam, _tolerance(S, lam))
    gap = lam[..., None, :] - lam[..., :, None]
    apart = labels[..., None, :] != labels[..., :, None]
    F = np.divide(1.0, gap, out=np.zeros_like(gap), where=apart)
    VT = _mT(V)

    def push(t):
        return V @ (F * (VT @ sym(t) @ V))

    def pull(ct):
        return sym(V @ (F * (VT @ ct)) @ VT)

    return V, FanIn(Closure(push, pull, S.shape, V.shape), None)


def eigh(a, UPLO="L"):
    """``numpy.linalg.eigh`` (of each matrix of a stack): eigenvalues everywhere (the spectral
    rule); the eigenvector of a simple eigenvalue everywhere too, also where other
    eigenvalues repeat. The vectors of a repeated eigenvalue jump (any basis of its space is
    theirs), so an output that reads them is refused (`NotLipschitzError`, naming the
    repeated eigenvalues). numpy fixes no sign for an eigenvector: the derivative is that of
    the vectors continued smoothly from the signs numpy returns at the point.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.eigh(a)[1][0, 1])(np.diag([1.0, 2.0]))
    array([[0., 0.],
           [1., 0.]])
    >>> asd.subgrad(lambda a: np.linalg.eigh(a)[1][0, 2])(np.diag([1.0, 1.0, 4.0])).round(4) + 0
    array([[0.    , 0.    , 0.    ],
           [0.    , 0.    , 0.    ],
           [0.3333, 0.    , 0.    ]])
    """
    uplo = _uplo(UPLO)
    S = _triangle(a, uplo)
    w = spectral.eigvalsh(S)
    return EighResult(w, eigh_vectors_p(S, eigh_basis_p(w, S), UPLO=uplo))


# ----- eigenvalues and eigenvectors of general matrices with a real, simple spectrum -----

EigResult = namedtuple("EigResult", "eigenvalues eigenvectors")


def _real_simple_spectrum(A: np.ndarray, name: str):
    """``numpy.linalg.eig`` of ``A`` where its spectrum is real and simple (the only place
    where real eigenvalues and eigenvectors are differentiable); refused elsewhere."""
    w, V = np.linalg.eig(A)
    complex_ = np.imag(w) != 0
    refuse_where(complex_, lambda: UnsupportedError(
        f"{name}: the matrix of shape {A.shape} has complex eigenvalue(s) "
        f"{w[complex_].ravel()[:4].tolist()}; asd differentiates real arrays only. Use "
        "np.linalg.eigh / eigvalsh for a symmetric matrix (its spectrum is real), or "
        "differentiate a real function of the matrix (np.linalg.det, np.trace)."))
    w, V = np.real(w), np.real(V)
    n = A.shape[-1]
    cond = np.linalg.cond(V) if n else np.zeros(A.shape[:-2])
    tol = tie_tolerance(n, np.max(np.abs(w), axis=-1, initial=0.0)) * cond
    ws = np.sort(w, axis=-1)
    split = ~np.isfinite(cond) | np.any(np.diff(ws, axis=-1) <= np.asarray(tol)[..., None],
                                        axis=-1)

    def repeated_eigenvalues():
        tied = ws[repeated(ws, np.where(np.isfinite(cond), tol, np.inf))]
        return NotLipschitzError(
            f"{name}: the matrix of shape {A.shape} has the repeated eigenvalue(s) "
            f"{np.unique(tied).tolist()[:4]} (within the rounding of eig, "
            f"{float(np.max(tol)):.2g}); the eigenvalues of a general matrix split like "
            "square roots (or into complex pairs) there, so they are not Lipschitz and have "
            "no derivative. Use np.linalg.eigh / eigvalsh for a symmetric matrix, whose "
            "repeated eigenvalues asd differentiates along the direction.")

    refuse_where(split, repeated_eigenvalues)
    return w, V


def _eigvals_impl(A):
    return np.linalg.eigvals(A)


eigvals_p = Primitive("eigvals", _eigvals_impl)


@eigvals_p.defrule
def eigvals_rule(xs, dxs):
    """Simple real eigenvalues: ``dλ_i = (V⁻¹ dA V)_ii``."""
    A = squares(xs[0], "eig")
    w, V = _real_simple_spectrum(A, "eig")
    Vi = np.linalg.inv(V)

    def push(t):
        return np.einsum("...ij,...jk,...ki->...i", Vi, t, V)

    def pull(ct):
        return _mT(Vi) @ (np.asarray(ct)[..., :, None] * _mT(V))

    return w, Closure(push, pull, A.shape, w.shape)


def _eig_vectors_impl(A):
    return np.linalg.eig(A)[1]


eig_vectors_p = Primitive("eig_vectors", _eig_vectors_impl)


@eig_vectors_p.defrule
def eig_vectors_rule(xs, dxs):
    """Simple real eigenvalues: ``dV = N(V (F ∘ V⁻¹ dA V))``, ``F_ij = 1 / (λ_j - λ_i)``, where
    ``N(X) = X - V diag(diag(Vᵀ X))`` keeps numpy's unit columns unit."""
    A = squares(xs[0], "eig")
    w, V = _real_simple_spectrum(A, "eig")
    Vi, VT = np.linalg.inv(V), _mT(V)
    n = w.shape[-1]
    gap = w[..., None, :] - w[..., :, None]
    F = np.divide(1.0, gap, out=np.zeros_like(gap), where=~np.eye(n, dtype=bool))

    def unit(x):  # self-adjoint
        return x - V * np.sum(V * x, axis=-2, keepdims=True)

    def push(t):
        return unit(V @ (F * (Vi @ t @ V)))

    def pull(ct):
        return _mT(Vi) @ (F * (VT @ unit(ct))) @ VT

    return V, Closure(push, pull, A.shape, V.shape)


def eig(a):
    """``numpy.linalg.eig`` of a real matrix (or stack) whose eigenvalues are real and
    simple: there eigenvalues and eigenvectors (numpy's unit columns, continued smoothly from
    numpy's signs) are smooth. A complex eigenvalue is refused (`UnsupportedError`), and so
    is a repeated one (`NotLipschitzError`: eigenvalues of a general matrix are not Lipschitz
    there).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.linalg.eig(a)[0][1])(np.array([[1.0, 2.0], [0.0, 3.0]]))
    array([[0., 0.],
           [1., 1.]])
    """
    return EigResult(eigvals_p(a), eig_vectors_p(a))


def eigvals(a):
    """``numpy.linalg.eigvals`` where the spectrum is real and simple (see `eig`)."""
    return eigvals_p(a)


# ----- singular values and vectors -----

def _matrices(X, name: str) -> np.ndarray:
    X = _floats(X)
    if X.ndim < 2:
        raise ShapeError(f"{name} needs a matrix (or a stack in the leading axes), got shape "
                         f"{X.shape}")
    return X


def _svdvals_impl(X):
    return np.linalg.svd(X, compute_uv=False)


svdvals_p = Primitive("svdvals", _svdvals_impl)


@svdvals_p.defrule
def svdvals_rule(xs, dxs):
    """Singular values, descending, as the top ``min(m, n)`` eigenvalues of the embedding
    ``[[0, X], [Xᵀ, 0]]``: one tie analysis (spectral.py) serves repeated and zero ones.
    An eigenvector ``[a; b]`` of the embedding gives ``dσ = 2 aᵀ dX b``."""
    X = _matrices(xs[0], "svd")
    m, n = X.shape[-2:]
    k = min(m, n)
    lam, V, tol = eigh_ties(embed(X))
    V = limit_bases(lam, V, tol, RayMatrix(X, dxs[0], embed))
    top = V[..., ::-1][..., :k]
    a, b = 2.0 * top[..., :m, :], top[..., m:, :]

    def push(t):
        return np.einsum("...mi,...mn,...ni->...i", a, t, b)

    def pull(ct):
        return np.einsum("...mi,...i,...ni->...mn", a, ct, b)

    return np.linalg.svd(X, compute_uv=False), Closure(push, pull, X.shape, X.shape[:-2] + (k,))


def _svd_tolerance(X: np.ndarray, s: np.ndarray):
    m, n = X.shape[-2:]
    return tie_tolerance(m + n, np.max(s, axis=-1, initial=0.0))


def _svd_basis_impl(s, X):
    return np.zeros(np.shape(s))


svd_basis_p = Primitive("svd_basis_of_repeated_or_zero_singular_values", _svd_basis_impl,
                        discontinuous=True)


@svd_basis_p.defrule
def svd_basis_rule(xs, dxs):
    """The choice of singular vectors for a repeated singular value (a joint rotation of its
    left and right vectors) or a zero one (their signs flip independently): a selector that
    jumps there, as `eigh_basis_rule` does."""
    s, X = np.asarray(xs[0]), _matrices(xs[1], "svd")
    tol = _svd_tolerance(X, s)
    asc = s[..., ::-1]
    tied = repeated(asc, tol)[..., ::-1] | (s <= np.asarray(tol)[..., None])
    ans = np.zeros(s.shape)
    exact_where(tied, lambda: record_jump(ans, tied, (np.ones(s.shape),), fix=(
        f"The singular value(s) {np.unique(np.round(s[tied], 12)).tolist()[:3]} repeat or "
        "vanish, and their singular vectors jump under small perturbations: "
        "differentiate functions of the singular values (svdvals, norms) or of the "
        "simple values' vectors.")), lambda: None)
    return ans, None


def _svd_vectors_impl(X, basis):
    U, _, Vh = np.linalg.svd(X, full_matrices=False)
    return _probed(np.concatenate([U, _mT(Vh)], axis=-2), basis)


svd_vectors_p = Primitive("svd_vectors", _svd_vectors_impl)


@svd_vectors_p.defrule
def svd_vectors_rule(xs, dxs):
    """Simple nonzero singular values (Townsend's formulas), output ``[U; V]``: with
    ``P = Uᵀ dX V`` and ``F_ij = 1 / (s_j² - s_i²)``, ``dU = U (F ∘ (P S + S Pᵀ)) +
    (I - U Uᵀ) dX V S⁻¹`` and ``dV = V (F ∘ (S P + Pᵀ S)) + (I - V Vᵀ) dXᵀ U S⁻¹``. ``F`` is 0
    inside a cluster of repeated singular values and ``S⁻¹`` at zero ones: exact for the
    vectors of simple nonzero values; the others have no derivative, and `svd_basis_rule`
    keeps them from any output that reads them (even times a zero singular value)."""
    X = _matrices(xs[0], "svd")
    m, n = X.shape[-2:]
    packed = _svd_vectors_impl(X, xs[1])
    U, V = packed[..., :m, :], packed[..., m:, :]
    s = np.linalg.svd(X, compute_uv=False)
    tol = _svd_tolerance(X, s)
    labels = _labels(s[..., ::-1], tol)[..., ::-1]
    gap = s[..., None, :] ** 2 - s[..., :, None] ** 2
    apart = labels[..., None, :] != labels[..., :, None]
    F = np.divide(1.0, gap, out=np.zeros_like(gap), where=apart)
    UT, VT = _mT(U), _mT(V)
    PU, PV = np.eye(m) - U @ UT, np.eye(n) - V @ VT
    nonzero = s > np.asarray(tol)[..., None]
    si = np.divide(1.0, s, out=np.zeros_like(s), where=nonzero)
    sc = s[..., :, None]

    def push(t):
        P = UT @ t @ V
        du = U @ (F * (P * s[..., None, :] + sc * _mT(P))) + PU @ t @ V * si[..., None, :]
        dv = V @ (F * (sc * P + _mT(P) * s[..., None, :])) + PV @ _mT(t) @ U * si[..., None, :]
        return np.concatenate([du, dv], axis=-2)

    def pull(ct):
        cu, cv = ct[..., :m, :], ct[..., m:, :]
        ju, jv = F * (UT @ cu), F * (VT @ cv)
        core = (ju + _mT(ju)) * s[..., None, :] + sc * (jv + _mT(jv))
        return (U @ core @ VT + PU @ cu * si[..., None, :] @ VT
                + U @ (si[..., :, None] * _mT(cv)) @ PV)

    return packed, FanIn(Closure(push, pull, X.shape, packed.shape), None)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """``numpy.linalg.svd`` of a matrix (or a stack in the leading axes): singular values
    everywhere (repeated and zero ones by the spectral rule), and the singular vectors of a
    simple nonzero singular value everywhere too, continued smoothly from the signs numpy
    returns at the point. The vectors of a repeated or zero singular value jump (any basis
    of its spaces is theirs), so an output that reads them is refused (`NotLipschitzError`).
    ``full_matrices`` only for square matrices, where it changes nothing.

    >>> import numpy as np, asd
    >>> asd.jacobian(lambda a: np.linalg.svd(a, compute_uv=False),
    ...              direction=np.array([[0.0, 2.0], [1.0, 0.0]]))(np.zeros((2, 2)))[0]
    array([[0., 1.],
           [0., 0.]])
    """
    m, n = np.shape(a)[-2:] if np.ndim(a) >= 2 else (0, 0)
    if not compute_uv:
        # hermitian=True: numpy reads the lower triangle (through eigh), and so does this
        return svdvals_p(_triangle(a, "L") if hermitian else a)
    if hermitian:
        raise unsupported("numpy.linalg.svd with hermitian=True and compute_uv=True (use "
                          "np.linalg.eigh for the vectors of a symmetric matrix)")
    if full_matrices and m != n:
        raise unsupported(f"numpy.linalg.svd with full_matrices=True of a {m}x{n} matrix (the "
                          "completed basis is not unique, so it has no derivative); pass "
                          "full_matrices=False")
    s = svdvals_p(a)
    packed = svd_vectors_p(a, svd_basis_p(s, a))
    U = smooth.getitem(packed, (Ellipsis, slice(None, m), slice(None)))
    Vh = smooth.swapaxes(smooth.getitem(packed, (Ellipsis, slice(m, None), slice(None))), -1, -2)
    return SVDResult(U, s, Vh)


# ----- diagonals, traces and the numpy 2 linalg namespace -----

def diagonal(a, offset=0, axis1=0, axis2=1):
    """``numpy.diagonal``: a linear read (the diagonal comes last, as in numpy).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.trace(a))(np.ones((2, 3)))
    array([[1., 0., 0.],
           [0., 1., 0.]])
    """
    moved = smooth.moveaxis(a, (axis1, axis2), (-2, -1))
    n, m = np.shape(moved)[-2:]
    rows = np.arange(max(0, -offset), min(n, m - offset))
    return smooth.getitem(moved, (Ellipsis, rows, rows + offset))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """``numpy.trace``: the sum of a diagonal."""
    if out is not None:
        raise unsupported("numpy.trace with out")
    return smooth.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def _linalg_trace(x, /, *, offset=0, dtype=None):
    return trace(x, offset, -2, -1, dtype)


def _linalg_diagonal(x, /, *, offset=0):
    return diagonal(x, offset, -2, -1)


def svdvals(x, /):
    """``numpy.linalg.svdvals``: singular values, descending, exact at repeated and zero ones."""
    return svdvals_p(x)


def multi_dot(arrays, *, out=None):
    """``numpy.linalg.multi_dot`` as a chain of ``matmul`` (1-D ends read as numpy does)."""
    if out is not None:
        raise unsupported("numpy.linalg.multi_dot with out")
    arrays = list(arrays)
    result = arrays[0]
    for b in arrays[1:]:
        result = smooth.matmul(result, b)
    return result


for _fn, _impl in [
    (np.diagonal, diagonal), (np.trace, trace), (np.linalg.trace, _linalg_trace),
    (np.linalg.diagonal, _linalg_diagonal), (np.linalg.svdvals, svdvals),
    (np.linalg.multi_dot, multi_dot), (np.linalg.solve, solve), (np.linalg.inv, inv),
    (np.linalg.det, det),
    (np.linalg.slogdet, slogdet), (np.linalg.cholesky, cholesky), (np.linalg.qr, qr),
    (np.linalg.pinv, pinv), (np.linalg.lstsq, lstsq), (np.linalg.matrix_power, matrix_power),
    (np.linalg.eigvalsh, eigvalsh), (np.linalg.eigh, eigh), (np.linalg.svd, svd),
    (np.linalg.eig, eig), (np.linalg.eigvals, eigvals),
]:
    register_numpy(_fn, _impl)
for _fn, _instead in [
    (np.linalg.matmul, "numpy.matmul (the @ operator)"), (np.linalg.cross, "numpy.cross"),
    (np.linalg.outer, "numpy.outer"), (np.linalg.tensordot, "numpy.tensordot"),
    (np.linalg.matrix_transpose, "numpy.swapaxes(x, -1, -2)"),
    (np.linalg.vecdot, "numpy.sum(x1 * x2, axis=-1)"),
]:
    register_alternative(_fn, _instead)

__all__ = ["cholesky", "det", "diagonal", "eig", "eigh", "eigvals", "inv", "lstsq",
           "matrix_power", "multi_dot", "pinv", "qr", "slogdet", "solve", "svd", "svdvals"]
