"""The exact oracle against independent truths: sympy for smooth pieces, hand-derived kinks."""

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from asd.testing import exact
from asd.testing.exact import (
    DegenerateTie,
    Jet,
    Series,
    as_fractions,
    directional_derivative,
    jet_ray,
    limiting_gradient,
    limiting_jacobian,
)

delta = sympy.Symbol("delta", positive=True)
dyadics = st.integers(-16, 16).map(lambda k: Fraction(k, 4))


def relu(x):
    return np.maximum(x, 0.0)


def gradient(f, x, v, **kwargs):
    return limiting_gradient(f, x, v, **kwargs)[1]


def assert_equal(actual, expected):
    """Exact elementwise equality of Fraction arrays (and their shapes)."""
    actual, expected = as_fractions(actual), as_fractions(expected)
    assert actual.shape == expected.shape
    assert np.all(actual == expected), f"{actual} != {expected}"


# ----- Series: truncated power series in delta -----

polynomials = st.lists(dyadics, min_size=1, max_size=5)


def sympy_coefficients(expression, order):
    """The coefficients of delta**0..order of ``expression``'s Taylor series, as Fractions."""
    poly = sympy.Poly(sympy.series(expression, delta, 0, order + 1).removeO(), delta)
    return [Fraction(str(poly.coeff_monomial(delta**k))) for k in range(order + 1)]


def sympy_polynomial(coeffs):
    return sum(sympy.Rational(str(c)) * delta**k for k, c in enumerate(coeffs))


@settings(max_examples=50, deadline=None)
@given(polynomials, polynomials, st.integers(0, 3))
def test_series_arithmetic_matches_sympy(a, b, n):
    order = 6
    sa, sb = Series(a, order), Series(b, order)
    pa, pb = sympy_polynomial(a), sympy_polynomial(b)
    cases = [(sa + sb, pa + pb), (sa - sb, pa - pb), (sa * sb, pa * pb), (sa**n, pa**n)]
    if b[0]:
        cases.append((sa / sb, pa / pb))
    for series, expression in cases:
        assert [series.coefficient(k) for k in range(order + 1)] == sympy_coefficients(
            expression, order
        )


def test_series_orders_like_small_delta():
    d = Series([0, 1])
    assert d > 0 and -d < 0 and d**2 < d < 1
    assert Series([0, 0, -1]) < 0 < Series([0, 0, 0, 5])
    assert Series([0, 0, -1]) > -Fraction(1, 10**100)  # infinitesimal beats any constant
    assert Series([1, -3]) > 1 - Fraction(1, 10**9) and Series([1, -3]) < 1
    assert Series([0, 1], order=0) == 0  # zero to the truncation order is zero
    assert d - d == 0 and not (d - d) and (d - d).sign() == 0
    assert abs(-d) == d and (-d).sign() == -1


def test_series_converts_floats_exactly():
    assert Series(0.1).coefficient(0) == Fraction(0.1) != Fraction(1, 10)
    assert (Series(1) + 0.1).coefficient(0) == 1 + Fraction(0.1)
    assert (0.5 * Series([2, 4])).coeffs == (1, 2)
    assert (np.float64(0.25) * Series([4])).coeffs == (1,)


def test_series_division_and_powers():
    d = Series([0, 1], order=5)
    assert (1 / (1 - d)).coeffs == (1,) * 6  # geometric series, truncated
    assert ((1 + d) ** 3).coeffs == (1, 3, 3, 1)
    assert (Series([2, 2]) / 2).coeffs == (1, 1)
    with pytest.raises(ZeroDivisionError, match="Laurent"):
        1 / d
    with pytest.raises(TypeError, match="integer exponents"):
        d**0.5
    with pytest.raises(TypeError, match="integer exponents"):
        d**-1


def test_numpy_ufuncs_on_object_arrays_of_series():
    xs = exact.series_ray([0.0, 1.0, -2.0], [1.0, -1.0, 0.0])
    assert [(Series() + s).coeffs for s in np.maximum(xs, 0.0)] == [(0, 1), (1, -1), ()]
    assert [s.coeffs for s in np.abs(xs)] == [(0, 1), (1, -1), (2,)]
    assert np.sum(xs).coeffs == (-1,)
    assert (xs @ np.array([1.0, 2.0, 3.0])).coeffs == (-4, -1)
    assert list(xs > 0) == [True, True, False]
    for ufunc in (np.sqrt, np.exp, np.log):
        with pytest.raises(TypeError, match="piecewise-polynomial"):
            ufunc(xs)


# ----- smooth programs: derivatives against sympy -----

monomials = st.lists(
    st.tuples(dyadics, st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)), max_size=5
)


@settings(max_examples=50, deadline=None)
@given(
    monomials, st.lists(dyadics, min_size=3, max_size=3), st.lists(dyadics, min_size=3, max_size=3)
)
def test_polynomial_derivatives_match_sympy(terms, x, v):
    def f(x):
        return sum((c * x[0] ** i * x[1] ** j * x[2] ** k for c, i, j, k in terms), Fraction(0))

    symbols = sympy.symbols("x0:3")
    expression = sympy.sympify(f(symbols))
    at = dict(zip(symbols, (sympy.Rational(str(a)) for a in x), strict=True))
    expected = [Fraction(str(sympy.diff(expression, s).subs(at))) for s in symbols]

    value, grad = limiting_gradient(f, x, v)
    assert value == Fraction(str(expression.subs(at)))
    assert_equal(grad, expected)
    assert directional_derivative(f, x, v) == sum(g * d for g, d in zip(expected, v, strict=True))


def test_quotient_matches_sympy():
    def f(x):
        return x[0] ** 2 / (1 + x[1] ** 2) - 3 / x[0]

    x0, x1 = sympy.symbols("x0 x1")
    expression = f([x0, x1])
    at = {x0: sympy.Rational(1, 2), x1: sympy.Rational(-3, 4)}
    expected = [Fraction(str(sympy.diff(expression, s).subs(at))) for s in (x0, x1)]
    assert_equal(gradient(f, [0.5, -0.75], [1.0, 1.0]), expected)
    with pytest.raises(ZeroDivisionError):
        limiting_gradient(f, [0.0, 0.0], [1.0, 1.0])


def test_matmul_of_jet_arrays_matches_sympy():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    matrix = sympy.Matrix(2, 2, sympy.symbols("x0:4"))
    expression = sum(matrix @ matrix) + sum(matrix @ sympy.Matrix([1, 2]))
    at = dict(zip(matrix, (sympy.Rational(str(a)) for a in x.flat), strict=True))
    expected = [Fraction(str(sympy.diff(expression, s).subs(at))) for s in matrix]

    def f(x):
        return np.sum(x @ x) + np.sum(np.dot(x, np.array([1.0, 2.0])))

    assert_equal(gradient(f, x, np.ones((2, 2))), np.reshape(expected, (2, 2)))


# ----- kinks: one-sided limits, decided by the direction -----


@pytest.mark.parametrize("v", [1.0, -1.0, 0.5, -3.0])
def test_relu_identity_has_derivative_one_from_both_sides(v):
    assert gradient(lambda x: relu(x) - relu(-x), 0.0, v)[()] == 1
    assert gradient(lambda x: 10 * x - 9 * (relu(x) - relu(-x)), 0.0, v)[()] == 1
    assert directional_derivative(lambda x: relu(x) - relu(-x), 0.0, v) == v


@pytest.mark.parametrize("v", [2.0, -0.5])
def test_abs_at_zero_follows_the_direction(v):
    value, grad = limiting_gradient(np.abs, 0.0, v)
    assert value == 0 and grad[()] == np.sign(v)
    assert directional_derivative(np.abs, 0.0, v) == abs(v)


def maximum_of_entries(x):
    return np.maximum(x[0], x[1])


def maximum_by_where(x):
    return np.where(x[0] > x[1], x[0], x[1])


@pytest.mark.parametrize("f", [maximum_of_entries, maximum_by_where])
@pytest.mark.parametrize(
    ("v", "expected"), [((1, 2), (0, 1)), ((2, 1), (1, 0)), ((-1, -3), (1, 0)), ((0, -1), (1, 0))]
)
def test_maximum_at_a_tie_picks_the_argmax_of_the_direction(f, v, expected):
    assert_equal(gradient(f, [0.5, 0.5], v), expected)
    assert directional_derivative(f, [0.5, 0.5], v) == max(v)


@pytest.mark.parametrize(
    ("f", "v"),
    [
        (maximum_of_entries, [1.0, 1.0]),
        (maximum_by_where, [-1.0, -1.0]),
        (lambda x: np.abs(x[0] - x[1]), [2.0, 2.0]),
        (lambda x: relu(x[1]), [1.0, 0.0]),
    ],
)
def test_ties_the_ray_stays_on_are_degenerate(f, v):
    with pytest.raises(DegenerateTie, match="vanishes along the ray"):
        limiting_gradient(f, [0.0, 0.0], v)


def test_degenerate_ties_still_have_exact_directional_derivatives():
    assert directional_derivative(maximum_of_entries, [0.0, 0.0], [1.0, 1.0]) == 1
    assert directional_derivative(lambda x: np.abs(x[0] - x[1]), [1.0, 1.0], [2.0, 2.0]) == 0


@pytest.mark.parametrize(
    ("f", "x", "v", "expected"),
    [
        (lambda x: relu(x - x), 1.0, 1.0, 0),  # identical operands
        (lambda x: np.maximum(x, x), 1.0, -1.0, 1),
        (lambda x: relu(x * 0), 1.0, 1.0, 0),
    ],
)
def test_ties_with_equal_branches_are_harmless(f, x, v, expected):
    assert gradient(f, x, v)[()] == expected


def test_tie_whose_gradient_vanishes_at_the_point_is_harmless():
    # relu(x0 * x1) has a kink all along the ray (t, 0), but the gradients there, (0, s * t) with
    # s in [0, 1], tend to (0, 0): the limit exists although the branch is undecided.
    assert_equal(gradient(lambda x: relu(x[0] * x[1]), [0.0, 0.0], [1.0, 0.0]), [0, 0])


def relu_of_difference_of_squares(x):
    return relu(x[0] ** 2 - x[1] ** 2)


@pytest.mark.parametrize("v", [(1, 1), (1, 0.5), (0, 1)])
def test_second_order_tie_with_vanishing_gradient(v):
    # h = x0**2 - x1**2: the first-order term of h(delta * v) vanishes, and so does grad h at 0,
    # so every rule agrees (along (1, 1) the ray even stays on the tie)
    for tie_order in (None, 1):
        grad = gradient(relu_of_difference_of_squares, [0.0, 0.0], v, tie_order=tie_order)
        assert_equal(grad, [0, 0])


@pytest.mark.parametrize(
    ("f", "expected"),
    [
        (lambda x: relu(x[1] + x[0] ** 2), (0, 1)),  # h = delta**2 > 0
        (lambda x: relu(x[1] - x[0] ** 2), (0, 0)),  # h = -delta**2 < 0
        (lambda x: np.maximum(x[1], x[0] ** 2), (0, 0)),
        # the smooth x1 - x0**2 written with kinks: the paper's first-order rule ("h == 0 and
        # h_dot >= 0 -> side >=") takes both relus' active sides here and would get (0, 2)
        (lambda x: relu(x[1] - x[0] ** 2) - relu(x[0] ** 2 - x[1]), (0, 1)),
    ],
)
def test_ties_decided_at_second_order(f, expected):
    v = [1.0, 0.0]  # h(delta * v) has no first-order term
    assert_equal(gradient(f, [0.0, 0.0], v), expected)
    with pytest.raises(DegenerateTie, match=r"shows only at delta\^2"):
        limiting_gradient(f, [0.0, 0.0], v, tie_order=1)


# ----- arrays: broadcasting, matmul, shapes -----


def test_broadcasting_against_a_constant_row():
    row = np.array([0.0, 1.0, -1.0])
    x = np.array([[0.0, 1.0, 2.0], [-1.0, 1.0, -1.0]])  # ties at (0, 0), (0, 1), (1, 1), (1, 2)
    v = np.array([[1.0, -1.0, 5.0], [1.0, 0.5, -2.0]])
    expected = [[1, 0, 1], [0, 1, 0]]
    assert_equal(gradient(lambda x: np.sum(np.maximum(x, row)), x, v), expected)


def test_relu_of_a_matrix_product():
    a = np.array([[1.0, -1.0, 0.0], [2.0, 1.0, -1.0]])
    x, v = np.array([1.0, 1.0, 3.0]), np.array([1.0, 2.0, 0.0])  # a @ x = (0, 0), a @ v = (-1, 4)
    assert_equal(gradient(lambda x: np.sum(relu(a @ x)), x, v), a[1])
    assert_equal(gradient(lambda x: np.sum(relu(np.dot(a, x))), x, -v), a[0])


def test_limiting_jacobian_shapes_and_values():
    v = np.array([1.0, -1.0, 0.5])
    assert_equal(limiting_jacobian(relu, np.zeros(3), v), np.diag([1, 0, 1]))
    a = np.array([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]])
    assert_equal(limiting_jacobian(lambda x: a @ x, np.ones(3), v), a)
    x = np.arange(6.0).reshape(2, 3)
    jacobian = limiting_jacobian(lambda x: x.T, x, x)
    assert jacobian.shape == (3, 2, 2, 3)
    assert_equal(jacobian, np.eye(6).reshape(2, 3, 2, 3).transpose(1, 0, 2, 3))


def test_directional_derivative_of_arrays():
    v = np.array([[1.0, -1.0], [2.0, 0.0]])
    assert_equal(directional_derivative(np.abs, np.zeros((2, 2)), v), np.abs(v))
    assert_equal(directional_derivative(lambda x: np.sum(x, axis=0), np.zeros((2, 2)), v), [3, -1])


def test_zero_dimensional_inputs_and_outputs():
    value, grad = limiting_gradient(lambda x: np.where(x > 0, x**2, 0.0), 0.5, -1.0)
    assert (value, grad.shape, grad[()]) == (Fraction(1, 4), (), 1)
    assert directional_derivative(lambda x: x**3, Fraction(1, 3), 1) == Fraction(1, 3)


@pytest.mark.parametrize(
    "constant", [7, Fraction(7), 7.0, np.array(7.0), np.array(7, dtype=object)]
)
def test_constant_outputs_have_zero_gradient(constant):
    value, grad = limiting_gradient(lambda x: constant, [1.0, 2.0], [1.0, 0.0])
    assert value == 7
    assert_equal(grad, [0, 0])


def test_outputs_of_every_kind():
    xs = jet_ray([1.0], [1.0])
    assert isinstance(xs[0], Jet)
    assert limiting_gradient(lambda x: x[0], [1.0], [1.0])[0] == 1
    assert limiting_gradient(lambda x: np.array(x[0], dtype=object), [1.0], [1.0])[0] == 1
    assert directional_derivative(lambda x: x[0] * 2, [1.0], [1.0]) == 2
    with pytest.raises(ValueError, match="limiting_jacobian"):
        limiting_gradient(lambda x: x, [1.0, 2.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="same shape"):
        limiting_gradient(np.sum, [1.0, 2.0], [1.0])
