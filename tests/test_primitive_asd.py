"""The paper's ASD routine ``f.asd(*xs, direction=v)`` on every public function.

Table-driven over every name in ``asd.library.__all__``, ``asd.projections`` and
``asd.spectral``, at kinks where the function has them (ties, zeros, boundaries) with
directions that keep or break the tie. Each triple ``(value, dini, branch gradient)`` is
checked against the plain numpy value, ``asd.directional`` (an independent sweep), the chain
rule ``dini == branch_gradient . v``, the exact oracle (``asd.testing.exact``) for the
piecewise-polynomial functions, and ``Primitive.asd`` where the function is a primitive.
"""

from __future__ import annotations

import asd.library as L
import numpy as np
import pytest

import asd
from asd.core.primitive import Primitive
from asd.routine import NOT_DIFFERENTIABLE, asd_routine, is_constant_argument
from asd.testing import exact
from asd.tree import flatten

Z2, Z3 = np.zeros(2), np.zeros(3)
E0, E1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
V2, V3 = np.array([1.0, -1.0]), np.array([1.0, -2.0, 0.5])
T3 = np.array([1.0, 1.0, -1.0])  # a tie between the first two entries
M = np.array([[2.0, 0.0], [0.0, 2.0]])  # a repeated eigenvalue
DM = np.array([[1.0, 0.5], [0.5, -1.0]])
P = np.array([0.3, 0.7, 1.2])
X22 = np.array([[1.0, -1.0], [0.5, 2.0]])
REAL22 = np.array([[2.0, 1.0], [0.5, -1.0]])  # a real, simple spectrum (eig)
X4 = np.arange(4.0).reshape(1, 1, 4)
IMG = np.arange(16.0).reshape(1, 1, 4, 4) % 3  # pooling windows with tied maxima

# name -> (positional inputs, static keyword parameters, direction)
CASES: dict[str, tuple[tuple, dict, object]] = {
    # smooth: away from singular points, where they are smooth
    "add": ((P, P[::-1].copy()), {}, (V3, P)),
    "arccos": ((P / 2,), {}, V3), "arcsin": ((P / 2,), {}, V3), "arcsinh": ((P,), {}, V3),
    "arctan": ((P,), {}, V3), "arctanh": ((P / 2,), {}, V3),
    "astype": ((P,), {"dtype": np.float64}, V3),
    "broadcast_to": ((P,), {"shape": (2, 3)}, V3),
    "cbrt": ((P,), {}, V3),
    "concatenate": (([P, E0],), {}, [V3, E1]),
    "cos": ((P,), {}, V3), "cosh": ((P,), {}, V3),
    "cumsum": ((P,), {}, V3), "diff": ((P,), {}, V3),
    "divide": ((P, P + 1), {}, (V3, V3)), "true_divide": ((P, P + 1), {}, (V3, P)),
    "dot": ((P, P), {}, (V3, P)), "inner": ((P, V3), {}, (P, P)), "vdot": ((P, V3), {}, (V3, P)),
    "einsum": (("ij,j->i", X22, E0), {}, (DM, E1)),
    "exp": ((P,), {}, V3), "exp2": ((P,), {}, V3), "expm1": ((P,), {}, V3),
    "expand_dims": ((P,), {"axis": 0}, V3),
    "getitem": ((P,), {"index": slice(1, None)}, V3),
    "hstack": (([P, E0],), {}, [V3, E1]), "vstack": (([E0, E1],), {}, [E1, E0]),
    "stack": (([E0, E1],), {}, [V2, E0]),
    "log": ((P,), {}, V3), "log1p": ((P,), {}, V3), "log2": ((P,), {}, V3),
    "log10": ((P,), {}, V3),
    "log_softmax": ((P,), {}, V3), "softmax": ((P,), {}, V3), "logsumexp": ((P,), {}, V3),
    "matmul": ((X22, DM), {}, (DM, X22)), "tensordot": ((X22, DM), {}, (DM, X22)),
    "outer": ((E0, P), {}, (V2, V3)),
    "mean": ((X22,), {"axis": 0}, DM), "sum": ((X22,), {"axis": 1}, DM),
    "prod": ((P,), {}, V3),
    "moveaxis": ((X22,), {"source": 0, "destination": 1}, DM),
    "swapaxes": ((X22,), {"axis1": 0, "axis2": 1}, DM),
    "transpose": ((X22,), {}, DM),
    "multiply": ((P, V3), {}, (V3, P)), "subtract": ((P, V3), {}, (V3, P)),
    "negative": ((P,), {}, V3), "positive": ((P,), {}, V3),
    "pad": ((P,), {"pad_width": 1}, V3),
    "power": ((P,), {"y": 3}, V3),
    "ravel": ((X22,), {}, DM), "reshape": ((X22,), {"shape": (4,)}, DM),
    "squeeze": ((X4,), {}, X4 + 1),
    "reciprocal": ((P,), {}, V3), "sigmoid": ((P,), {}, V3), "softplus": ((Z3,), {}, V3),
    "sin": ((P,), {}, V3), "sinh": ((P,), {}, V3), "tan": ((P,), {}, V3),
    "tanh": ((P,), {}, V3), "sqrt": ((P,), {}, V3), "square": ((Z3,), {}, V3),
    "stop_gradient": ((P,), {}, V3),
    "take": ((P,), {"indices": np.array([2, 0, 2])}, V3),
    # piecewise: on the kinks
    "abs": ((Z3,), {}, V3), "absolute": ((Z3,), {}, V3),
    "clip": ((np.array([-1.0, 0.0, 1.0]), -1.0, 1.0), {}, (V3, 1.0, -1.0)),
    "hard_sigmoid": ((np.array([-3.0, 0.0, 3.0]),), {}, V3),
    "hardtanh": ((np.array([-1.0, 0.0, 1.0]),), {}, V3),
    "hinge": ((np.ones(3),), {}, V3),
    "huber": ((np.array([-1.0, 0.0, 1.0]),), {}, V3),
    "leaky_relu": ((Z3,), {}, V3),
    "maximum": ((Z2, Z2), {}, (V2, E0)), "minimum": ((Z2, Z2), {}, (V2, E0)),
    "relu": ((Z3,), {}, V3), "relu6": ((np.array([0.0, 6.0, 3.0]),), {}, V3),
    "soft_threshold": ((np.array([-0.5, 0.0, 0.5]),), {"lam": 0.5}, V3),
    "where": ((np.array([True, False]), Z2, E0), {}, (V2, E1)),
    # nn
    "avg_pool": ((IMG,), {"kernel_size": 2}, IMG[::-1] - 1),
    "avg_pool1d": ((X4,), {"kernel_size": 2}, X4 - 2),
    "avg_pool2d": ((IMG,), {"kernel_size": 2}, IMG - 1),
    "batch_norm": ((np.ones((2, 3)),), {"running_mean": P, "running_var": P}, np.ones((2, 3))),
    "conv": ((X4, np.ones((1, 1, 2))), {}, (X4 - 1, np.ones((1, 1, 2)))),
    "conv1d": ((X4, np.ones((1, 1, 2))), {}, (X4 - 1, np.ones((1, 1, 2)))),
    "conv2d": ((IMG, np.ones((1, 1, 2, 2))), {}, (IMG - 1, np.ones((1, 1, 2, 2)))),
    "cross_entropy": ((np.zeros((1, 3)),), {"target": np.array([1])}, V3[None]),
    "elu": ((Z3,), {"alpha": 2.0}, V3),
    "mse_loss": ((P, P), {}, (V3, T3)),
    # order: on ties
    "amax": ((T3,), {}, T3 * 0 + np.array([1.0, 2.0, 0.0])),
    "amin": ((-T3,), {}, np.array([1.0, 2.0, 0.0])),
    "max": ((T3,), {}, np.array([2.0, 1.0, 0.0])), "min": ((-T3,), {}, np.array([2.0, 1.0, 0.0])),
    "cummax": ((np.array([1.0, 1.0, 0.0, 1.0]),), {}, np.array([0.0, 1.0, 5.0, -1.0])),
    "max_pool1d": ((np.array([[[1.0, 1.0, 0.0, 0.0]]]),), {"window": 2},
                   np.array([[[-1.0, 1.0, 2.0, 1.0]]])),
    "max_pool2d": ((IMG,), {"window": 2}, np.arange(16.0).reshape(IMG.shape) % 5 - 2),
    "median": ((np.array([1.0, 1.0, 1.0, 0.0]),), {}, np.array([1.0, -1.0, 2.0, 0.0])),
    "percentile": ((T3,), {"q": 50.0}, V3), "quantile": ((T3,), {"q": 0.75}, V3),
    "sort": ((T3,), {}, V3), "topk_sum": ((T3,), {"k": 1}, V3),
    "gather_at": ((P,), {"index": np.array([2, 0])}, V3),
    # norms: at zero and on ties of |x_i|
    "frobenius_norm": ((np.zeros((2, 2)),), {}, DM),
    "l1_norm": ((Z3,), {}, V3), "l2_norm": ((Z3,), {}, V3),
    "linf_norm": ((np.array([1.0, -1.0, 0.0]),), {}, V3),
    "norm": ((Z3,), {}, V3), "pnorm": ((Z3,), {"p": 3.0}, V3),
    # projections: on the boundaries
    "box": ((np.array([-1.0, 0.0, 1.0]), -np.ones(3), np.ones(3)), {}, (V3, Z3, Z3)),
    "distance": ((np.array([0.0, 1.0]), "nonneg"), {}, V2),
    "halfspace": ((E0,), {"a": E0, "b": 1.0}, V2),
    "hyperplane": ((E0,), {"a": E0, "b": 1.0}, V2),
    "l1_ball": ((E0,), {}, V2), "l2_ball": ((E0,), {}, V2), "linf_ball": ((E0,), {}, V2),
    "nonneg": ((Z3,), {}, V3), "nonpos": ((Z3,), {}, V3), "reals": ((Z3,), {}, V3),
    "zeros": ((Z3,), {}, V3),
    "nuclear_ball": ((np.diag([1.0, 0.0]),), {}, DM), "psd": ((np.diag([1.0, 0.0]),), {}, DM),
    "rsoc": ((np.array([1.0, 1.0, np.sqrt(2.0)]),), {}, V3),
    "soc": ((np.array([1.0, 1.0, 0.0]),), {}, V3),
    "exp_cone": ((np.array([0.0, 1.0, 1.0]),), {}, V3),
    "exp_cone_dual": ((np.array([-1.0, 0.0, 2.0]),), {}, V3),
    "power_cone": ((np.array([1.0, 4.0, 2.0]),), {"alpha": 0.5}, V3),
    "power_cone_dual": ((np.array([1.0, -1.0, 0.0]),), {"alpha": 0.5}, V3),
    "simplex": ((np.array([0.5, 0.5, 0.0]),), {}, V3),
    "standard_simplex": ((np.array([0.5, 0.5, 0.0]),), {}, V3),
    # spectral: on repeated eigenvalues
    "eigvalsh": ((M,), {}, DM), "lambda_max": ((M,), {}, DM), "lambda_min": ((M,), {}, DM),
    "nuclear_norm": ((np.diag([1.0, 0.0]),), {}, DM), "spectral_norm": ((M,), {}, DM),
    "topk_eigsum": ((M,), {"k": 1}, DM),
    "cond": ((X22,), {}, DM), "matrix_norm": ((M,), {"ord": 2}, DM),
    "vector_norm": ((Z3,), {}, V3),
    # statistics: zero variance, ties of max and min
    "var": ((np.ones(3),), {}, V3), "std": ((np.ones(3),), {}, V3), "ptp": ((T3,), {}, V3),
    "average": ((P,), {"weights": T3 + 2.0}, V3),
    "cov": ((np.ones((2, 3)),), {}, np.arange(6.0).reshape(2, 3)),
    "corrcoef": ((np.array([[1.0, 2.0, 4.0], [0.0, 3.0, 1.0]]),), {},
                 np.arange(6.0).reshape(2, 3)),
    # linalg: singular values repeated and zero; the smooth ones away from singular matrices
    "solve": ((X22, V2), {}, (DM, E1)), "inv": ((X22,), {}, DM),
    "det": ((np.ones((2, 2)),), {}, DM), "slogdet": ((X22,), {}, DM),
    "cholesky": ((M,), {}, DM), "qr": ((X22,), {}, DM), "pinv": ((X22,), {}, DM),
    "lstsq": ((np.array([[1.0, 2.0], [-0.5, 1.0], [0.75, -1.25]]), V3), {},
              (np.arange(6.0).reshape(3, 2), P)), "matrix_power": ((X22,), {"n": 3}, DM),
    "multi_dot": (([X22, M, X22],), {}, [DM, DM, DM]),
    "eigh": ((X22 + X22.T,), {}, DM), "svd": ((X22,), {}, DM),
    "eig": ((REAL22,), {}, DM), "eigvals": ((REAL22,), {}, DM),
    "svdvals": ((np.zeros((2, 2)),), {}, DM), "diagonal": ((X22,), {}, DM),
}

MODULES = (L.smooth, L.piecewise, L.nn, L.order, L.norms, L.projections, L.spectral,
           L.statistics, L.linalg)
PUBLIC = {name: getattr(m, name) for m in MODULES for name in m.__all__
          if name not in NOT_DIFFERENTIABLE}


def _inputs(xs):
    return [i for i, x in enumerate(xs) if not is_constant_argument(x)]


def test_every_public_function_has_the_routine_and_a_case():
    assert set(PUBLIC) == set(CASES), (
        f"no case: {sorted(set(PUBLIC) - set(CASES))}; stale: {sorted(set(CASES) - set(PUBLIC))}")
    assert all(callable(getattr(fn, "asd", None)) for fn in PUBLIC.values())
    assert not any(hasattr(getattr(L, n), "asd") for n in ("argmax", "argmin", "argsort"))
    assert asd.projections.simplex.asd is L.projections.simplex.asd


@pytest.mark.parametrize("name", sorted(CASES))
def test_routine_agrees_with_the_value_directional_and_chain_rule(name):
    fn = PUBLIC[name]
    xs, params, v = CASES[name]
    value, dini, grad = fn.asd(*xs, direction=v, **params)
    values = flatten(value)[0]  # several outputs (eigh, svd, qr, ...) one by one
    for got, want in zip(values, flatten(fn(*xs, **params))[0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    diff = _inputs(xs)
    argnums = diff[0] if len(diff) == 1 else tuple(diff)
    _, expected = asd.directional(lambda *a: fn(*a, **params), argnums)(*xs, v)
    dinis = flatten(dini)[0]
    for got, want in zip(dinis, flatten(expected)[0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the Dini derivative is the branch linearization applied to the direction
    grads = grad if len(values) > 1 else (grad,)
    for out, g_out, d_out in zip(values, grads, dinis, strict=True):
        pushed = sum(np.asarray(g).reshape(np.shape(out) + (-1,))
                     @ np.ravel(np.asarray(d, dtype=float))
                     for g, d in zip(flatten(g_out)[0], flatten(v)[0], strict=True))
        np.testing.assert_allclose(pushed, d_out, rtol=1e-12, atol=1e-12)


# numpy programs the exact oracle evaluates on object arrays of Jets (piecewise polynomials)
EXACT = {
    "abs": np.abs, "absolute": np.abs, "relu": lambda x: np.maximum(x, 0),
    "leaky_relu": lambda x: np.maximum(x, 0) + 0.01 * np.minimum(x, 0),
    "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "hardtanh": lambda x: np.minimum(np.maximum(x, -1), 1),
    "hard_sigmoid": lambda x: np.minimum(np.maximum(x / 6 + 0.5, 0), 1),
    "hinge": lambda x: np.maximum(1 - x, 0),
    "soft_threshold": lambda x: np.maximum(x - 0.5, 0) + np.minimum(x + 0.5, 0),
    "sort": np.sort, "max": np.max, "amax": np.max, "min": np.min, "amin": np.min,
    "cummax": np.maximum.accumulate, "median": np.median,
    "topk_sum": lambda x: np.sort(x)[-1:].sum(),
    "l1_norm": lambda x: np.abs(x).sum(), "linf_norm": lambda x: np.max(np.abs(x)),
    "nonneg": lambda x: np.maximum(x, 0), "nonpos": lambda x: np.minimum(x, 0),
    "linf_ball": lambda x: np.minimum(np.maximum(x, -1), 1),
    "square": np.square, "reals": lambda x: x, "zeros": lambda x: 0 * x,
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_routine_matches_the_exact_oracle_on_kinks(name):
    fn = PUBLIC[name]
    (x,), params, v = CASES[name]
    _, dini, grad = fn.asd(x, direction=v, **params)
    jac = exact.limiting_jacobian(lambda z: EXACT[name](z), x, v)
    d = exact.directional_derivative(lambda z: EXACT[name](z), x, v)
    # the float results are the oracle's Fractions rounded once, so they compare exactly
    np.testing.assert_array_equal(np.reshape(grad, jac.shape), jac.astype(float))
    np.testing.assert_array_equal(dini, np.asarray(d, dtype=object).astype(float))


def test_the_paper_examples():
    assert asd.relu.asd(0.0, direction=-1.0) == (0.0, 0.0, 0.0)
    value, dini, (ga, gb) = asd.maximum.asd(0.0, 0.0, direction=(1.0, -1.0))
    assert (value, dini, ga, gb) == (0.0, 1.0, 1.0, 0.0)
    value, dini, grad = asd.norm.asd(np.zeros(2), direction=np.array([3.0, 4.0]))
    assert (value, dini) == (0.0, 5.0)
    np.testing.assert_array_equal(grad, [0.6, 0.8])


PRIMITIVES = {name: fn for name, fn in PUBLIC.items() if isinstance(fn, Primitive)}
WRAPPED = {"relu": L.piecewise.relu_p, "maximum": L.piecewise.maximum_p}


@pytest.mark.parametrize("name", sorted(PRIMITIVES) + sorted(WRAPPED))
def test_routine_agrees_with_primitive_asd(name):
    xs, params, v = CASES[name]
    prim = WRAPPED.get(name, PUBLIC[name])
    sweep = asd_routine(prim)(*xs, direction=v, **params)
    literal = prim.asd(*xs, direction=v, **params)
    for a, b in zip(sweep[:2], literal[:2], strict=True):
        np.testing.assert_allclose(a, np.broadcast_to(b, np.shape(a)), rtol=1e-12, atol=1e-12)
    grads = zip(sweep[2], literal[2], strict=True) if len(xs) > 1 else [(sweep[2], literal[2])]
    for a, b in grads:
        np.testing.assert_allclose(a, np.broadcast_to(b, np.shape(a)), rtol=1e-12, atol=1e-12)


def test_routine_refuses_a_zero_direction_and_no_inputs():
    with pytest.raises(ValueError, match="nonzero"):
        asd.relu.asd(0.0, direction=0.0)
    with pytest.raises(TypeError, match="numeric input"):
        asd.where.asd(np.array(True), direction=())
