"""Non-finite values that do not reach the result, and overflow where the exact answer fits.

A non-finite value is an error only where it reaches the output: an infinite constant inside
a tie's cone, a branch ``where`` does not select, a partial product that overflows beside a
zero. Each case below raised (or returned NaN) before; each answer is checked against an
independent oracle: the one-sided quotient along the ray, or the gradient of the selected
piece written out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import asd
import asd.scipy.special as ss

MASK = np.array([True, False])


# ----- infinite constants inside a tie's cone (the series along the ray) -----

@pytest.mark.parametrize("w,want", [(np.array([-1.0, 0.0]), [-1.0, 0.0]),
                                    (np.array([3.0, 5.0]), [1.0, 0.0])])
def test_infinite_constant_in_a_persisting_tie_is_decided_lexicographically(w, want):
    # |max(where(m, x, -inf))| = |x0|: along v = e2 the tie at x0 = 0 persists, w decides it
    def f(x):
        return np.abs(np.max(np.where(MASK, x, -np.inf)))
    g = asd.subgrad(f, directions=[np.array([0.0, 1.0]), w])(np.array([0.0, 100.0]))
    np.testing.assert_array_equal(g, want)


def test_infinite_constant_in_a_tie_opening_at_second_order():
    # max(where(m, x*x - x, -inf)) at x0 = 1 along v = (1, 0): x0**2 - x0 = δ + δ², the
    # relu of it enters its positive side; the -inf entry never competes
    def f(x):
        return asd.relu(np.max(np.where(MASK, x * x - x, -np.inf)))
    g = asd.subgrad(f, direction=np.array([1.0, 0.0]))(np.array([1.0, 3.0]))
    np.testing.assert_array_equal(g, [1.0, 0.0])


@pytest.mark.parametrize("lse", [asd.logsumexp, ss.logsumexp])
def test_logsumexp_of_a_row_holding_minus_infinity_at_a_tie(lse):
    # logsumexp of the row [x0, -inf] is x0, so |.| at x0 = 0 is |x0|: w decides the tie
    def f(x):
        return np.abs(lse(np.where(MASK, x, -np.inf)))
    for w, sign in ((np.array([-2.0, 1.0]), -1.0), (np.array([1.0, 1.0]), 1.0)):
        g = asd.subgrad(f, directions=[np.array([0.0, 1.0]), w])(np.zeros(2))
        np.testing.assert_allclose(g, [sign, 0.0])


# ----- the where-NaN trap: a non-finite value in the branch not taken -----

def test_infinite_slope_in_the_branch_not_taken_contributes_nothing():
    def f(x):
        return np.where(x > 0, 0.0, x * np.inf)
    assert asd.value_and_subgrad(f)(1.0) == (0.0, 0.0)
    assert asd.directional(f)(1.0, -1.0) == (0.0, 0.0)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_where_nan_trap_in_jacobians_and_vjp(mode):
    def f(x):
        return np.where(x > 0, 2.0 * x, x * np.inf)
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(asd.jacobian(f, mode=mode)(x), 2.0 * np.eye(2))
    _value, pullback = asd.vjp(f)(x)
    np.testing.assert_array_equal(pullback(np.array([1.0, -3.0])), [2.0, -6.0])


def test_log_of_zero_in_the_branch_not_taken():
    # log(x) at x = -1 is NaN and its slope -1: where keeps 0 there
    def f(x):
        return np.sum(np.where(x > 0, np.log(np.abs(x) + (x <= 0)), 0.0))
    value, g = asd.value_and_subgrad(f)(np.array([-1.0, 2.0]))
    assert value == pytest.approx(np.log(2.0))
    np.testing.assert_allclose(g, [0.0, 0.5])


def test_identically_zero_composite_over_a_row_holding_minus_infinity():
    # relu(logsumexp([x0, -inf]) - x0) is relu(0) everywhere: slope 0 whichever side
    def f(x):
        return asd.relu(asd.logsumexp(np.where(MASK, x, -np.inf)) - x[0])
    g = asd.subgrad(f, directions=[np.array([0.0, 1.0]), np.array([-1.0, 0.0])])(np.zeros(2))
    np.testing.assert_array_equal(g, [0.0, 0.0])


def test_non_finite_value_that_reaches_the_output_is_still_refused():
    with pytest.raises(asd.NonFiniteError, match=r"%\d+ = multiply"):
        asd.subgrad(lambda x: np.sum(np.where(x > 0, x * np.inf, 0.0)))(np.array([1.0, 2.0]))


# ----- overflow where the exact answer is representable -----

def test_float32_product_with_zeros_beside_huge_entries():
    x = np.array([0.0, 0.0, 1e13, 1e13, 1e13], np.float32)  # 1e39 overflows float32
    value, g = asd.value_and_subgrad(np.prod)(x)
    assert value == 0.0 and g.dtype == np.float32
    np.testing.assert_array_equal(g, np.zeros(5))
    # one zero: only it has a nonzero partial derivative, the product of the others
    y = np.array([[0.0, 2.0, 1e13, 1e13, 1e-13], [1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    jac = asd.jacobian(lambda y: np.prod(y, axis=1))(y)
    np.testing.assert_allclose(jac[0, 0], [2e13, 0, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(jac[1, 1], [120.0, 60.0, 40.0, 30.0, 24.0], rtol=1e-6)


def test_float32_product_through_the_torch_drop_in():
    torch = pytest.importorskip("torch")
    x = torch.tensor([[0.0, 0.0, 1e13, 1e13, 1e13]], requires_grad=True)
    y = asd.torch.function(lambda x: torch.prod(x, dim=1).sum())(x)
    y.backward()
    assert float(y.detach()) == 0.0
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_weighted_logsumexp_ignores_the_scale_of_zero_weights():
    # scipy: log(1 * e^0 + 0 * e^100) = 0; the shift by max(a) = 100 overflowed float32
    x = np.array([0.0, 100.0], np.float32)
    b = np.array([1.0, 0.0], np.float32)
    value, g = asd.value_and_subgrad(lambda x: ss.logsumexp(x, b=b))(x)
    assert value == 0.0 and value.dtype == np.float32
    np.testing.assert_array_equal(g, [1.0, 0.0])


# ----- roots of even powers through the framework importers -----

def test_torch_and_jax_roots_of_squares_match_numpy():
    torch = pytest.importorskip("torch")
    import asd.torch  # registers the torch front end

    v = np.array([1.0, 2.0, 0.0])
    want = asd.subgrad(np.std, direction=v)(np.ones(3))
    got = asd.torch.subgrad(lambda x: torch.std(x, correction=0),
                            torch.ones(3, dtype=torch.float64),
                            direction=torch.tensor(v))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15)
    norm = asd.torch.subgrad(lambda x: torch.sqrt((x * x).sum()),
                             torch.zeros(3, dtype=torch.float64),
                             direction=torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64))
    np.testing.assert_allclose(norm.numpy(), [0.6, 0.8, 0.0])


def test_domain_errors_in_the_branch_not_taken():
    # the classic where-NaN trap: log and sqrt of negatives, NaN on a neighbourhood
    value, g = asd.value_and_subgrad(
        lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)))(np.array([-1.0, 4.0]))
    assert value == 2.0
    np.testing.assert_array_equal(g, [0.0, 0.25])


def test_a_pole_read_only_at_the_point_is_refused_not_absorbed():
    # nan_to_num(log(x)) at 0 replaces -inf by a constant that holds at the point alone:
    # log(δ) is finite beside it, so the function jumps there; 0 * inf must stay NaN
    with pytest.raises(asd.NonFiniteError, match=r"%\d+ = log"):
        asd.subgrad(lambda x: np.sum(np.nan_to_num(np.log(x))))(np.array([0.0, 1.0]))


def test_a_jacobian_whose_forward_tangents_overflow_float16_is_read_in_reverse():
    """``1 / (|prod(x)**4| + 0.5)`` at x = (2, 2, 2, 2) in float16 (numpy campaign seed
    3005): prod(x)**4 overflows to inf (numpy's value reads 1 / inf = 0), and forward
    mode's tangents overflow with it (4 p**3 * 8), so the forward Jacobian met inf * 0 and
    was refused while reverse mode, whose cotangents stay finite, and every other transform
    answered. Both modes now give reverse's Jacobian (ediff1d's rows; the rest rounds to
    0 in float16, its exact value about -3e-5)."""
    def f(x):
        return np.ediff1d(x) + np.reciprocal(np.abs(np.power(x.prod(), 4)) + 0.5)

    x = np.full(4, 2.0, np.float16)
    want = np.array([[-1, 1, 0, 0], [0, -1, 1, 0], [0, 0, -1, 1]], np.float16)
    with np.errstate(all="ignore"):
        for mode in ("forward", "reverse"):
            np.testing.assert_array_equal(asd.jacobian(f, mode=mode)(x), want)
