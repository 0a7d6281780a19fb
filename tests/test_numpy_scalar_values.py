"""asd's values are numpy's bit for bit, also where numpy computes the same expression two
ways (fuzz campaign, seed 2921):

- ``s ** p`` on a numpy floating scalar (what a ufunc on a 0-d array returns) is numpy's
  scalar math (libm's pow), while ``np.power`` and ``a ** p`` on arrays run the ufunc's
  loop; the two differ in the last bit for some bases, in float32 and float64 alike.
- ``x ** -n`` is numpy's power loop, not ``1 / x ** n``.
- ``np.cumprod`` of float16 rounds every step, while a float16 product reduction goes
  through float32 and rounds once.

The oracle is numpy itself, on the same values.
"""

from __future__ import annotations

import numpy as np
import pytest

import asd

BASES = np.random.default_rng(2921).uniform(0.1, 10.0, 64)
SPELLINGS = {
    "scalar ** p": lambda p: (lambda x: np.abs(x) ** p),  # np.abs of a 0-d array: a scalar
    "np.power(scalar, p)": lambda p: (lambda x: np.power(np.abs(x), p)),
    "0-d array ** p": lambda p: (lambda x: x ** p),
    "array ** p": lambda p: (lambda x: np.stack([x, 2 * x]) ** p),
    "p ** scalar": lambda p: (lambda x: 1.5 ** (np.abs(x) * 0.25 * p)),
    "median(...) ** p": lambda p: (lambda x: np.median(np.stack([x, 2 * x, x])) ** p),
    "sum(...) ** p": lambda p: (lambda x: np.sum(np.stack([x, x])) ** p),
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("p", [1.5, 0.25, -0.5, 3, 3.0, -2, -1, 2])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_powers_are_numpys_bit_for_bit(dtype, p, spelling):
    f = SPELLINGS[spelling](p)
    for b in BASES.astype(dtype):
        x = np.array(b, dtype)
        want = f(x)
        value, _ = asd.directional(f)(x, np.array(1.0, dtype))
        assert np.asarray(value).dtype == np.asarray(want).dtype
        assert np.array_equal(value, want), (b, value, want)


@pytest.mark.parametrize("shape, axis", [((9,), None), ((3, 6), 1), ((5, 3), 0),
                                         ((2, 3, 4), -1), ((1,), 0)])
def test_a_float16_cumprod_is_numpys_bit_for_bit(shape, axis):
    x = np.random.default_rng(7).uniform(0.3, 2.0, shape).astype(np.float16)
    value, slope = asd.directional(lambda t: np.cumprod(t, axis=axis))(x, np.ones_like(x))
    assert value.dtype == np.float16 and np.array_equal(value, np.cumprod(x, axis=axis))
    exact = asd.directional(lambda t: np.cumprod(t, axis=axis))(x.astype(np.float64),
                                                               np.ones(shape))[1]
    np.testing.assert_allclose(slope, exact, rtol=2e-2)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("spelling", ["c % x", "c // x", "np.remainder(c, x)",
                                      "np.floor_divide(c, x)", "divmod"])
def test_a_python_number_over_a_traced_divisor_keeps_its_dtype(dtype, spelling):
    """``2.5 % x`` of a float32 ``x`` is float32 in numpy (a Python number is weakly typed);
    asd's traced-divisor rule widened it to float64."""
    f = {"c % x": lambda x: 2.5 % x, "c // x": lambda x: 2.5 // x,
         "np.remainder(c, x)": lambda x: np.remainder(2, x),
         "np.floor_divide(c, x)": lambda x: np.floor_divide(2.5, x),
         "divmod": lambda x: np.divmod(2.5, x)[1]}[spelling]
    x = np.array([0.7, 1.3, 0.3], dtype)
    value, _ = asd.directional(f)(x, np.ones(3, dtype))
    assert value.dtype == f(x).dtype and np.array_equal(value, f(x))


@pytest.mark.parametrize("name", ["fmax", "fmin"])
@pytest.mark.parametrize("nan", [np.array([np.nan, 1.0], np.float32), np.nan,
                                 np.array([np.nan, 0.5])])
def test_fmax_and_fmin_ignore_a_constants_nan_as_numpy_does(name, nan):
    """numpy's fmax/fmin take the other operand where one is NaN; asd refused a NaN in a
    constant operand (NonFiniteError), though the result is finite and traced."""
    fn = getattr(np, name)
    x = np.array([0.7, 1.3], np.float32)
    value, slope = asd.directional(lambda t: fn(t, nan))(x, np.ones(2, np.float32))
    assert value.dtype == fn(x, nan).dtype and np.array_equal(value, fn(x, nan))
    assert slope[0] == 1.0


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((3,), (2, 3)),
                                    ((2, 2), (2, 2)), ((2, 3), (4, 3)), ((2, 2, 3), (3,)),
                                    ((2, 2, 3), (4, 3)), ((3,), (2, 2, 3)),
                                    ((2, 1, 3), (2, 4, 3)), ((2, 3), (2, 2, 2, 3))])
def test_inner_is_numpys_bit_for_bit(shapes):
    """numpy's inner is dot with b's last axis next to last; asd's tensordot (an einsum)
    rounded about 2 in 3 random 2x2 products differently (campaign seed 2931), and N-d
    operands about a third of random products."""
    _bit_for_bit_product(np.inner, shapes, seed=3)


def _bit_for_bit_product(product, shapes, seed: int) -> None:
    """``product(x, b)`` through asd at random points: numpy's value bit for bit, and the
    slope along ones (linear in x) to rounding."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        a, b = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
        value, slope = asd.directional(lambda x, b=b: product(x, b))(a, np.ones(shapes[0]))
        assert np.array_equal(value, product(a, b))
        np.testing.assert_allclose(slope, product(np.ones(shapes[0]), b), rtol=1e-13)


@pytest.mark.parametrize("shapes", [((2, 2, 3), (3,)), ((2, 2, 3), (3, 4)),
                                    ((3,), (2, 3, 4)), ((2, 3), (2, 3, 4)),
                                    ((2, 1, 3), (2, 3, 2)), ((4, 3), (2, 2, 3, 2))])
def test_dot_of_nd_operands_is_numpys_bit_for_bit(shapes):
    """numpy's dot of an operand with more than two axes sums one dot product per output
    entry, in an order that neither matmul (a 3-d first operand) nor einsum (a 3-d second
    one) shares: asd's value was off in the last bit in about half the random cases."""
    _bit_for_bit_product(np.dot, shapes, seed=4)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_vdot_is_numpys_bit_for_bit(dtype):
    """numpy's vdot sums the products in one dot loop (float16: accumulated in float32 and
    rounded once); asd's multiply-then-sum rounded differently (campaign seed 2951: a
    float16 vdot 1.493 where numpy's is 1.492)."""
    rng = np.random.default_rng(5)
    for shape in [(), (4,), (2, 2), (3, 5)]:
        a, b = (rng.normal(size=shape).astype(dtype) for _ in range(2))
        value, g = asd.value_and_subgrad(lambda x, b=b: np.vdot(x, b))(a)
        want = np.vdot(a, b)
        assert value.dtype == want.dtype and np.array_equal(value, want)
        np.testing.assert_array_equal(g, b)


C32 = np.float32(0.1)
WEAK_PROGRAMS = {
    "operator": lambda x: x - C32,
    "reflected": lambda x: C32 * x + 1.0,
    "python arithmetic first": lambda x: (x * 2.0 + 1.0) / np.float32(3.0),
    "ufunc": lambda x: np.maximum(x, np.float32(0.5)),
    "float32 array": lambda x: np.array([0.25, 0.5], np.float32) * x,
    "a numpy function's result is strong": lambda x: np.abs(x) - C32,
    "int array": lambda x: np.arange(3) * x,
    "float16": lambda x: np.float16(2.0) ** x,
    "a comparison of one is a bool": lambda x: x * ((x > 0.5) ^ (np.abs(x) >= x)),
    "a comparison with a float32": lambda x: (x > np.float32(0.25)) * x,
    # -x and abs(x) of a Python float are Python floats; np.negative(x) is a float64
    "negated": lambda x: np.sqrt(np.abs(-x - np.float32(1.5)) + 2.0),
    "abs()": lambda x: abs(x) * np.float32(3.0) + C32,
    "np.negative is strong": lambda x: np.negative(x) - C32,
}


@pytest.mark.parametrize("name", list(WEAK_PROGRAMS))
@pytest.mark.parametrize("arg", [0.3, np.float64(0.3)], ids=["python float", "np.float64"])
def test_a_python_float_argument_is_weakly_typed_as_numpy_types_it(name, arg):
    """numpy (NEP 50) computes ``x - np.float32(c)`` in float32 when ``x`` is a Python
    float, in float64 when it is a numpy float64: asd computed every Python float argument
    as a float64 array (campaign seed 2951: a float64 value where numpy's is float32)."""
    fn = WEAK_PROGRAMS[name]
    want = fn(arg)
    for transform in (lambda f: f, asd.jit):
        value, _ = asd.directional(transform(fn))(arg, 1.0)
        assert np.asarray(value).dtype == np.asarray(want).dtype
        assert np.array_equal(value, want)


def test_a_tie_the_weak_rounding_makes_is_decided():
    """``relu(x - np.float32(0.1))`` at the Python float ``x = 0.1``: numpy computes in
    float32, where ``x`` rounds to the constant and the ReLU sits on its kink; in float64
    it would be off the kink (dead), and the slope along +1 would be 0, not 1."""
    def f(x):
        return np.maximum(x - C32, 0.0)

    assert f(0.1) == 0.0
    value, slope = asd.directional(f)(0.1, 1.0)
    assert value == 0.0 and slope == 1.0
    assert asd.directional(f)(0.1, -1.0)[1] == 0.0
    assert asd.directional(f)(np.float64(0.1), 1.0)[1] == 0.0     # float64: dead


def test_a_float16_argument_along_a_huge_direction_is_not_refused_for_the_direction():
    """A constant output (``c[argmax(x)]``, no tie) of a float16 argument along a direction
    of 1e301: the gradient is 0, but the direction as reported was cast to float16 (inf) and
    refused as if it were a derivative past float16's range (campaign seed 2961). The
    subgradient needs no report; the full result reports the direction as given."""
    table = np.array([-1.0, 2.0, 0.5])

    def f(x):
        return np.expm1(table[np.argmax(np.tanh(x) + np.array([0.5, 1.0, 0.0]))] ** 2)

    x, v = np.zeros(3, np.float16), np.array([1e301, -1e301, 1e301])
    g = asd.subgrad(f, direction=v)(x)
    assert g.dtype == np.float16 and not g.any()
    result = asd.asd(f, direction=v)(x)
    assert np.array_equal(result.direction, v) and not result.subgradient.any()


@pytest.mark.parametrize("case", [((5,), (5,), 1), ((7,), (7,), 1), ((2, 5), (5, 3), 1),
                                  ((3, 4), (3, 4), 2), ((2, 3, 4), (3, 4, 2), 2),
                                  ((4, 3), (3, 4), ([0, 1], [1, 0]))], ids=str)
def test_tensordot_is_numpys_bit_for_bit(case):
    """numpy's tensordot is a BLAS dot of the reshaped operands; asd's einsum summed
    ``x . x`` of 4 entries in another order (1 ulp off, numpy campaign seed 3001)."""
    a_shape, b_shape, axes = case
    _bit_for_bit_product(lambda x, b: np.tensordot(x, b, axes), (a_shape, b_shape), seed=5)
