"""Comparisons of Python floats are Python bools, and Python computes with them as ints:
``~True == -2`` (true), ``True + True == 2``, ``-True == -1``, where numpy's bools negate,
saturate and refuse. asd traces a Python-float argument as the Python float it is, so its
answers are those of the function on Python numbers; the oracle is that function itself,
run on exact Fractions (whose comparisons are Python bools too) along the ray. A numeric
``where`` condition selects by its truth (fuzz findings F69 and F70)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import asd

PROGRAMS = {
    "invert": lambda x: np.where(~(x > 0), 2.0 * x, x),
    "add": lambda x: ((x > 0) + (x > -1)) * x,
    "subtract": lambda x: ((x > 0) - (x > 1)) * x,
    "negative": lambda x: -(x > 0) * x,
    "positive": lambda x: +(x > 0) * x,
    "times_int": lambda x: ((x > 0) * 3) * x,
    "invert_times_float": lambda x: ~(x > 0) * 0.5 + x,
    "where_of_int": lambda x: np.where(-1 - (x > 0) * 1, 2.0 * x, x),
}


def _exact_slope(f, x: float, d: float) -> Fraction:
    """The one-sided derivative of ``f`` (Python arithmetic on Fractions, piecewise linear
    near x) along ``d``: its difference quotient at a small step."""
    t = Fraction(1, 2 ** 20)

    def at(z):
        return Fraction(np.asarray(f(z), dtype=object).item())

    return (at(Fraction(x) + t * Fraction(d)) - at(Fraction(x))) / t


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("x", [0.5, -0.5, 2.0])
@pytest.mark.parametrize("d", [1.0, -1.0])
def test_a_python_float_argument_computes_as_python(name, x, d):
    f = PROGRAMS[name]
    value, slope = asd.directional(f)(x, d)
    assert value == f(x)
    assert slope == _exact_slope(f, x, d)


@pytest.mark.parametrize("name", ["invert", "add", "where_of_int"])
def test_numpy_scalars_keep_numpys_bools_and_jit_tells_them_apart(name):
    """np.float64 comparisons are numpy bools (``~`` negates, ``+`` is or): the same function
    gives numpy's numbers there, and one `asd.jit` serves both arguments without replaying
    the other's program."""
    f = PROGRAMS[name]
    jf = asd.jit(asd.value_and_subgrad(f))
    for arg in (0.5, np.float64(0.5), 0.5, np.float64(0.5)):
        value, grad = jf(arg)
        assert value == f(arg)
        want = asd.value_and_subgrad(f)(arg)[1]
        assert grad == want


def test_a_numeric_where_condition_selects_by_its_truth():
    """F70: ``np.where(c, a, b)`` with an integer ``c`` took the derivative ``c a' + ~c b'``
    (``~c`` bitwise): at c = -2 the slope of where(c, 2x, x) was -3, not 2."""
    def f(x):
        c = (x > 0).astype(np.int64) * np.array([-2, 0, 3])
        return np.sum(np.where(c, 2.0 * x, x))

    g = asd.subgrad(f)(np.array([0.5, 0.5, 0.5]))
    assert g.tolist() == [2.0, 1.0, 2.0]


def test_a_bitwise_operation_of_python_bool_and_int_is_refused_with_its_reason():
    """``~(x > 0) | (x > 1)`` on Python floats is an integer or (-2 | False == -2): asd does
    not do integer bits on traced values, and says why, with the logical spelling."""
    with pytest.raises(asd.UnsupportedError, match=r"np\.logical_not"):
        asd.directional(lambda x: np.where(~(x > 0) | (x > 1), x, -x))(0.5, 1.0)


def test_a_numpy_bool_among_the_operands_makes_it_numpys_operation():
    """``True + np.True_`` is numpy's add (True: logical or), not Python's 2: a comparison of
    a float64 scalar among the operands keeps the sum a numpy bool, in either order, and
    `asd.jit` keeps one program per pattern of Python floats."""
    def f(x, y):
        return ((x > 0) + (y > 0)) * x

    jf = asd.jit(asd.value_and_subgrad(f, argnums=(0, 1)))
    for args in [(0.5, 0.5), (0.5, np.float64(0.5)), (np.float64(0.5), 0.5),
                 (np.float64(0.5), np.float64(0.5)), (0.5, 0.5)]:
        value, (gx, gy) = jf(*args)
        assert value == f(*args)
        assert (gx, gy) == (f(*args) / 0.5, 0.0)
