"""The adapters against the real packages: scipy, nsopy's methods, ncOPT's SQPGS.

Oracles: known optima (a max of |x - c| terms, the max-constrained nonsmooth Rosenbrock
problem of Curtis & Overton, whose solution is (1/√2, 1/2)), and asd's own subgradients /
limiting Jacobians compared with what the wrapped objects hand the packages.
"""

import numpy as np
import pytest
import scipy.optimize as so

import asd
from asd.optimize import nsopy_oracle, scipy_fg, torch_module


def maxl_shifted(x):
    return np.max(np.abs(x - np.array([1.0, -2.0, 0.5])))


def test_scipy_jac_true_pair_is_value_and_subgradient():
    fg = scipy_fg(maxl_shifted, seed=0)
    x = np.array([1.0, -2.0, 0.5])  # every piece tied: limiting gradients ±e_i
    value, g = fg(x)
    assert value == 0.0 and np.count_nonzero(g) == 1 and np.abs(g).sum() == 1.0
    assert asd.clarke(maxl_shifted, seed=0)(x).contains(g)
    res = so.minimize(scipy_fg(lambda z: np.sum(np.abs(z - 1.0)) + 0.5 * z @ z, seed=1),
                      np.zeros(3), jac=True, method="L-BFGS-B")
    np.testing.assert_allclose(res.x, 1.0, atol=1e-6)


def test_nsopy_subgradient_method_minimizes_with_asd_oracle():
    """nsopy's own SubgradientMethod (1/k steps) on max |x - c|: error ~ 1/k. (Several
    other nsopy methods still use ``np.infty`` and fail on numpy 2 before calling us.)"""
    pytest.importorskip("pandas")
    methods = pytest.importorskip("nsopy.methods.subgradient")
    oracle = nsopy_oracle(maxl_shifted, seed=0)
    x0, value, g = oracle(np.array([1.0, -2.0, 0.5]))
    assert x0 == 0 and value == 0.0 and np.abs(g).sum() == 1.0
    method = methods.SubgradientMethod(oracle, lambda x: x, dimension=3, stepsize_0=1.0,
                                       stepsize_rule="1/k")
    best = np.inf
    for _ in range(400):
        method.dual_step()
        best = min(best, maxl_shifted(np.asarray(method.lambda_k, dtype=float)))
    assert best <= 2e-3


def test_torch_module_backward_and_jacrev_are_asd():
    torch = pytest.importorskip("torch")
    mod = torch_module(maxl_shifted, 3, seed=0)
    X = torch.tensor([[1.0, -2.0, 0.5], [4.0, 0.0, 0.0]], dtype=torch.float64,
                     requires_grad=True)
    out = mod(X)
    assert out.shape == (2, 1)
    out.sum().backward()
    g0, g1 = X.grad.numpy()
    assert asd.clarke(maxl_shifted, seed=0)(X[0].detach().numpy()).contains(g0)
    np.testing.assert_array_equal(g1, [1.0, 0.0, 0.0])
    # the transforms ncOPT uses: vmap over jacrev of a batch-of-one forward
    from torch.func import jacrev, vmap

    jac = vmap(jacrev(lambda x: mod(x[None])))(X.detach())
    assert jac.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(jac[1].reshape(3).numpy(), [1.0, 0.0, 0.0])


def test_torch_module_vector_output_is_the_limiting_jacobian():
    torch = pytest.importorskip("torch")

    def f(x):
        return np.stack([np.abs(x[0]), np.maximum(x[0], x[1])])

    mod = torch_module(f, 2, 2, seed=0)
    X = torch.tensor([[0.0, 0.0], [2.0, -1.0]], dtype=torch.float64, requires_grad=True)
    out = mod(X)
    np.testing.assert_array_equal(out.detach().numpy(), [[0.0, 0.0], [2.0, 2.0]])
    from torch.func import jacrev, vmap

    jac = vmap(jacrev(lambda x: mod(x[None])))(X.detach()).reshape(2, 2, 2).numpy()
    np.testing.assert_array_equal(jac[1], [[1.0, 0.0], [1.0, 0.0]])
    # at the kink: one limiting Jacobian, both rows decided by the same direction
    v_sign = jac[0][0, 0]
    assert v_sign in (1.0, -1.0) and jac[0][0, 1] == 0.0
    assert sorted(jac[0][1].tolist()) == [0.0, 1.0]


def test_ncopt_sqpgs_solves_the_max_constrained_rosenbrock_with_asd_derivatives():
    pytest.importorskip("torch")
    pytest.importorskip("osqp")
    sqpgs = pytest.importorskip("ncopt.sqpgs")
    functions = pytest.importorskip("ncopt.functions")
    import torch

    torch.manual_seed(0)
    np.random.seed(0)

    def objective(x):
        return 8 * np.abs(x[0] ** 2 - x[1]) + (1 - x[0]) ** 2

    def constraint(x):
        return np.reshape(np.maximum(np.sqrt(2.0) * x[0], 2 * x[1]) - 1.0, 1)

    f = functions.ObjectiveOrConstraint(torch_module(objective, 2, seed=0), dim=2,
                                        dtype=torch.float64)
    g = functions.ObjectiveOrConstraint(torch_module(constraint, 2, 1, seed=1), dim_out=1,
                                        dtype=torch.float64)
    problem = sqpgs.SQPGS(f, [g], [], x0=None, tol=1e-6, max_iter=100,
                          verbose=False)
    x = problem.solve()
    np.testing.assert_allclose(x, [1 / np.sqrt(2.0), 0.5], atol=1e-4)
    assert problem.status == "optimal"
