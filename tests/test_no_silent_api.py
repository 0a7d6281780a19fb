"""No silent wrong number at the API boundary (issue 23): arguments, directions, cotangents,
compiled signatures, error states, aliasing writes. Each case gives the right number or a
clear asd error; the oracles are exact (Fractions along the ray) or numpy's own result."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest

import asd
from asd.testing.exact import directional_derivative, limiting_gradient


def relu(x):
    return np.maximum(x, 0.0)


# ----- a direction's scale never changes the result -----

def kink_program(x):
    """A tie decided by the first-order tangent (max) and one decided at second order
    (relu(x0**2 - x1) along v with v1 = 0), where tiny directions underflow."""
    return np.maximum(x[0], x[2]) + relu(x[0] * x[0] - x[1]) * 3.0


SCALES = [1.0, 2.0 ** -1074, 1e-320, 1e-200, 1e-160, 1e160, 1e300, 1.7e308]


@pytest.mark.parametrize("scale", SCALES)
def test_subgradient_does_not_depend_on_the_direction_scale(scale):
    x = np.zeros(3)
    unit = np.array([1.0, 0.0, 0.5])
    v = unit * scale
    _, exact = limiting_gradient(kink_program, x, [Fraction(1), 0, Fraction(1, 2)])
    expected = np.array([float(g) for g in exact])
    np.testing.assert_array_equal(asd.subgrad(kink_program, direction=v)(x), expected)
    np.testing.assert_array_equal(
        asd.subgrad(kink_program, directions=[v, -v])(x), expected)
    np.testing.assert_array_equal(asd.jacobian(kink_program, direction=v)(x), expected)


@pytest.mark.parametrize("scale", SCALES)
def test_lexicographic_levels_do_not_depend_on_their_scale(scale):
    # relu(x0 - x1) along v = (1, 1) stays tied: the second direction w decides it
    f = lambda x: relu(x[0] - x[1])  # noqa: E731
    v, w = np.array([1.0, 1.0]), np.array([1.0, 0.0])
    g = asd.subgrad(f, directions=[v, w * scale])(np.zeros(2))
    np.testing.assert_array_equal(g, [1.0, -1.0])
    g = asd.subgrad(f, directions=[v * scale, -w * scale])(np.zeros(2))
    np.testing.assert_array_equal(g, [0.0, 0.0])


@pytest.mark.parametrize("scale", SCALES)
def test_the_norm_at_zero_along_any_scale(scale):
    # the limiting gradient of |x| at 0 along v is v / |v|, and f'(0; v) = |v| (mpmath)
    v = np.array([1.0, 0.5]) * scale
    exact = [mpmath.mpf(float(d)) for d in v]
    length = mpmath.sqrt(sum(d * d for d in exact))
    unit = [float(d / length) for d in exact]
    for kw in ({"direction": v}, {"direction": list(v)}, {"directions": [v, -v]}):
        g = asd.subgrad(asd.norm, **kw)(np.zeros(2))
        np.testing.assert_allclose(g, unit, rtol=4e-16, atol=0)
    np.testing.assert_allclose(asd.jacobian(asd.norm, direction=v)(np.zeros(2)), unit,
                               rtol=4e-16, atol=0)
    if length > mpmath.mpf(np.finfo(float).max):  # f'(0; v) itself is past the float range
        with pytest.raises(asd.NonFiniteError, match="smaller direction"):
            asd.directional(asd.norm)(np.zeros(2), v)
        return
    _, dot = asd.directional(asd.norm)(np.zeros(2), v)
    assert dot == pytest.approx(float(length), rel=4e-16, abs=0)


@pytest.mark.parametrize("scale", [1e-320, 2.0 ** -1070, 1e-200, 1e200, 1e308])
def test_directional_derivative_at_any_scale_is_the_exact_one_rounded(scale):
    # piecewise polynomial: the exact f'(x; v) is a Fraction, rounded once to float
    x = np.zeros(3)
    v = np.array([0.5, -0.25, 0.375]) * scale
    exact = directional_derivative(kink_program, x, [Fraction(d) for d in v])
    _, dot = asd.directional(kink_program)(x, v)
    assert dot == float(exact)
    result = asd.asd(kink_program, direction=v)(x)
    assert result.dini == float(exact)
    np.testing.assert_array_equal(result.direction, v)  # reported as given


def test_a_directional_derivative_past_the_float_range_is_refused():
    with pytest.raises(asd.NonFiniteError, match="smaller direction"):
        asd.directional(lambda x: 3.0 * x)(1.0, 1e308)
    with pytest.raises(asd.NonFiniteError, match="smaller direction"):
        asd.directional(asd.norm)(np.zeros(2), np.array([1.5e308, 1.5e308]))
    with pytest.raises(asd.NonFiniteError, match="smaller direction"):
        asd.asd(lambda x: 3.0 * x, direction=1e308)(1.0)
    # the advice works: a smaller direction, the derivative scaling with it
    assert asd.directional(lambda x: 3.0 * x)(1.0, 5e307)[1] == 3.0 * 5e307


def test_tiny_directions_on_torch_float32_arguments():
    torch = pytest.importorskip("torch")
    x = torch.zeros(3, dtype=torch.float32)
    v = np.array([1.0, 0.0, 0.5]) * 1e-300  # far below float32's range
    g = asd.subgrad(kink_program, direction=v)(x)
    assert g.dtype == torch.float32
    _, exact = limiting_gradient(kink_program, np.zeros(3), [Fraction(1), 0, Fraction(1, 2)])
    np.testing.assert_array_equal(g.numpy(), [float(e) for e in exact])


# ----- dict directions are matched by key -----

def test_a_dict_direction_in_another_key_order():
    f = lambda d: asd.maximum(d["a"], d["b"])  # noqa: E731
    point = {"a": 0.0, "b": 0.0}
    g = asd.subgrad(f, direction={"b": 1.0, "a": -1.0})(point)
    assert list(g) == ["a", "b"] and (g["a"], g["b"]) == (0.0, 1.0)
    g = asd.subgrad(f, directions=[{"b": 1.0, "a": 1.0}, {"b": -1.0, "a": 0.0}])(point)
    assert (g["a"], g["b"]) == (1.0, 0.0)
    _, dot = asd.directional(f)(point, {"b": 2.0, "a": -1.0})
    assert dot == 2.0
    nested = lambda p: asd.relu(p["w"][0] - p["w"][1]) * p["s"]  # noqa: E731
    g = asd.subgrad(nested, direction={"s": 0.0, "w": np.array([1.0, 0.0])})(
        {"w": np.zeros(2), "s": 2.0})
    np.testing.assert_array_equal(g["w"], [2.0, -2.0])


def test_a_dict_direction_with_other_keys_is_still_refused():
    with pytest.raises(asd.ShapeError, match="keys"):
        asd.subgrad(lambda d: d["a"] * d["b"], direction={"a": 1.0, "c": 1.0})(
            {"a": 1.0, "b": 2.0})


# ----- asd's own arithmetic ignores the caller's np.errstate -----

def errstate_program(x):
    return asd.relu(x[0] * x[1]) + asd.norm(x) + np.sum(x * x)


ERRSTATE_CALLS = {
    "subgrad": lambda x: asd.subgrad(errstate_program, seed=0)(x),
    "full": lambda x: asd.value_and_subgrad(errstate_program, full=True, seed=0)(x),
    "asd": lambda x: asd.asd(errstate_program, direction=np.array([1e-200, 1e-300]))(x),
    "vjp": lambda x: asd.vjp(lambda x: x * x)(x)[1](np.array([1e-200, 1e-200])),
    "directional": lambda x: asd.directional(errstate_program)(x, np.array([1e-300, 1e-300])),
    "jacobian": lambda x: asd.jacobian(lambda x: x * 1e-200)(x),
    "trace": lambda x: asd.trace(errstate_program)(x),
    "jit": lambda x: [asd.jit(asd.value_and_subgrad(errstate_program))(x) for _ in range(3)],
    "jit plain": lambda x: [asd.jit(errstate_program)(x) for _ in range(3)],
    "clarke": lambda x: asd.clarke(errstate_program, n=4, seed=0)(x).gradients,
    "lexicographic": lambda x: asd.subgrad(lambda x: asd.relu(x[0] - 1e-200),
                                           directions=[np.array([0.0, 1.0]),
                                                       np.array([1e-300, 0.0])])(x),
}


@pytest.mark.parametrize("name", ERRSTATE_CALLS)
def test_a_raising_errstate_does_not_reach_asd_internals(name):
    x = np.array([1e-200, 1.0])
    expected = ERRSTATE_CALLS[name](x)
    with np.errstate(all="raise"):
        got = ERRSTATE_CALLS[name](x)
    if name not in ("trace", "asd"):
        for a, b in zip(np.atleast_1d(np.asarray(expected, dtype=object)).ravel(),
                        np.atleast_1d(np.asarray(got, dtype=object)).ravel(), strict=True):
            assert str(a) == str(b)


def test_errstate_raise_still_names_a_non_finite_value():
    with np.errstate(all="raise"), pytest.raises(asd.NonFiniteError):
        asd.subgrad(lambda x: np.log(x).sum())(np.array([-1.0, 1.0]))
