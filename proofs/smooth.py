"""Certificates for ``library/smooth.py`` (and the smooth layers of ``library/nn.py``).

A smooth primitive has no branches, so CQ and continuity are empty; what can be wrong is
the derivative formula its rule uses. Each is checked against sympy: the primitive applied
to numbers must match the symbolic formula's value, and the Jacobian asd builds from the
rule's linear map must match sympy's Jacobian of the formula, at sample points inside the
domain. Linear and arithmetic primitives run unchanged on numpy object arrays of sympy
symbols, so their formula is the primitive's own numpy implementation.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from asd.library import nn, smooth

import asd

from .registry import ConstantProof, SymbolicProof

S = smooth
X = (np.array([0.3, 0.55, 0.8]),)  # inside every unary domain (log, arcsin, arctanh, ...)
M = (np.array([[0.3, -1.2, 0.7], [1.5, 0.4, -0.6]]),)
PAIR = (np.array([0.3, 1.7, 0.9]), np.array([1.1, 0.4, 2.5]))


def elementwise(fn):
    """A scalar sympy function mapped over an object array."""
    return lambda x: np.vectorize(fn, otypes=[object])(x)


def _lse(x):
    return sp.log(sum(sp.exp(e) for e in np.ravel(x)))


def _softmax(x):
    total = sum(sp.exp(e) for e in x)
    return np.array([sp.exp(e) / total for e in x], dtype=object)


def _cross_entropy(z):
    # mean over the batch of logsumexp(z_i) - z_i[target_i], targets (0, 2)
    return (_lse(z[0]) - z[0, 0] + _lse(z[1]) - z[1, 2]) / 2


UNARY = {
    S.exp_p: sp.exp, S.exp2_p: lambda e: 2 ** e, S.expm1_p: lambda e: sp.exp(e) - 1,
    S.log_p: sp.log, S.log2_p: lambda e: sp.log(e, 2), S.log10_p: lambda e: sp.log(e, 10),
    S.log1p_p: lambda e: sp.log(1 + e), S.sqrt_p: sp.sqrt, S.cbrt_p: sp.cbrt,
    S.square_p: lambda e: e ** 2, S.reciprocal_p: lambda e: 1 / e, S.sin_p: sp.sin,
    S.cos_p: sp.cos, S.tan_p: sp.tan, S.arcsin_p: sp.asin, S.arccos_p: sp.acos,
    S.arctan_p: sp.atan, S.sinh_p: sp.sinh, S.cosh_p: sp.cosh, S.tanh_p: sp.tanh,
    S.arcsinh_p: sp.asinh, S.arctanh_p: sp.atanh,
    S.sigmoid_p: lambda e: 1 / (1 + sp.exp(-e)), S.softplus_p: lambda e: sp.log(1 + sp.exp(e)),
    S.negative_p: lambda e: -e, S.positive_p: lambda e: e,
}

PROOFS = [
    *[SymbolicProof((p,), p, [X], elementwise(f)) for p, f in UNARY.items()],
    *[SymbolicProof((p,), p, [PAIR]) for p in (S.add_p, S.subtract_p, S.multiply_p,
                                               S.divide_p, S.pow_p)],
    SymbolicProof((S.integer_pow_p,), lambda x: x ** 3, [X, (np.array([-1.5, 0.0, 2.0]),)]),
    SymbolicProof((S.real_pow_p,), lambda x: x ** 2.5, [X],
                  elementwise(lambda e: e ** sp.Rational(5, 2))),
    SymbolicProof((S.cast_p,), lambda x: S.astype(x, np.float64), [X], lambda x: x,
                  what="identity"),
    SymbolicProof((S.sum_p,), lambda x: S.sum(x, axis=0), [M]),
    SymbolicProof((S.prod_p,), lambda x: S.prod(x, axis=1), [M]),
    SymbolicProof((S.cumsum_p,), lambda x: S.cumsum(x, axis=1), [M]),
    SymbolicProof((S.reshape_p,), lambda x: S.reshape(x, (3, 2)), [M]),
    SymbolicProof((S.transpose_p,), lambda x: S.transpose(x), [M]),
    SymbolicProof((S.broadcast_to_p,), lambda x: S.broadcast_to(x, (2, 3)), [X]),
    SymbolicProof((S.getitem_p,), lambda x: S.getitem(x, (slice(None), [2, 0, 2])), [M]),
    SymbolicProof((S.pad_p,), lambda x: S.pad(x, ((0, 1), (2, 0))), [M]),
    SymbolicProof((S.concatenate_p,), lambda a, b: S.concatenate([a, b, a]), [PAIR]),
    SymbolicProof((S.stack_p,), lambda a, b: S.stack([b, a], axis=1), [PAIR]),
    SymbolicProof((S.matmul_p,), lambda a, b: S.matmul(a, b),
                  [(M[0], M[0].T.copy())]),
    SymbolicProof((S.einsum_p,), lambda a, b: S.einsum("ij,kj->ik", a, b),
                  [(M[0], M[0][::-1].copy())]),
    SymbolicProof((S.logsumexp_p,), lambda x: S.logsumexp(x), [M], _lse),
    SymbolicProof((S.softmax_p,), lambda x: S.softmax(x), [X], _softmax),
    SymbolicProof((S.log_softmax_p,), lambda x: S.log_softmax(x), [X],
                  lambda x: np.array([sp.log(e) for e in _softmax(x)], dtype=object)),
    SymbolicProof((nn.cross_entropy_p,), lambda z: nn.cross_entropy(z, np.array([0, 2])), [M],
                  _cross_entropy),
    SymbolicProof((nn.conv_p,), lambda x, w: nn.conv1d(x, w),
                  [(np.array([[[0.3, -1.0, 2.0, 0.5]]]), np.array([[[1.5, -0.5]]]))],
                  lambda x, w: np.array([[[x[0, 0, i] * w[0, 0, 0] + x[0, 0, i + 1] * w[0, 0, 1]
                                           for i in range(3)]]], dtype=object)),
    SymbolicProof((nn.avg_pool_p,), lambda x: nn.avg_pool1d(x, 2), [(np.array([[0.3, -1.0, 2.0,
                                                                                  0.5]]),)],
                  lambda x: np.array([[(x[0, 0] + x[0, 1]) / 2, (x[0, 2] + x[0, 3]) / 2]],
                                     dtype=object)),
    ConstantProof((S.stop_gradient_p,), lambda x: asd.stop_gradient(x) * 2.0, 0.0),
]

__all__ = ["PROOFS"]
