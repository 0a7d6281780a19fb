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
    "invert_and": lambda x: np.where(~(x > 1) & (x > 0), 2.0 * x, -x),
    "invert_or": lambda x: np.where(~(x > 1) | (x > 2), 2.0 * x, -x),
    "invert_xor": lambda x: np.where(~(x > 0) ^ (x > 1), 2.0 * x, -x),
    "int_bits": lambda x: np.where(((x > 0) * 3) & 1, x, -x),
}


def _at(f, z) -> Fraction:
    return Fraction(np.asarray(f(z), dtype=object).item())


def _exact_slope(f, x: float, d: float) -> Fraction | None:
    """The one-sided derivative of ``f`` (Python arithmetic on Fractions, piecewise linear
    near x) along ``d``, or None where ``f`` jumps at x (on either side): its difference
    quotients at two small steps then differ."""
    x = Fraction(x)
    quotients = {}
    for side in (1, -1):
        for t in (Fraction(1, 2 ** 20), Fraction(1, 2 ** 21)):
            quotients.setdefault(side, set()).add(
                (_at(f, x + t * side * Fraction(d)) - _at(f, x)) / t)
    if any(len(q) > 1 for q in quotients.values()):
        return None
    return quotients[1].pop()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("x", [0.5, -0.5, 2.0, 0.0, 1.0])
@pytest.mark.parametrize("d", [1.0, -1.0])
def test_a_python_float_argument_computes_as_python(name, x, d):
    """Off the ties and on them: the value and one-sided slope of the program on Python
    numbers, and a refusal exactly where it jumps."""
    f = PROGRAMS[name]
    want = _exact_slope(f, x, d)
    if want is None:
        with pytest.raises(asd.NotLipschitzError):
            asd.directional(f)(x, d)
        return
    value, slope = asd.directional(f)(x, d)
    assert value == f(x)
    assert slope == want


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


def test_bits_of_floats_are_refused_with_their_reason():
    """Integer bits of Python bools and ints are computed (``~(x > 0) | (x > 1)`` is an
    integer or, always true); floats have no bits, as numpy says."""
    with pytest.raises(asd.UnsupportedError, match="floats have none"):
        asd.subgrad(lambda x: np.sum(np.bitwise_and(x, 1.0)))(np.ones(2))


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
