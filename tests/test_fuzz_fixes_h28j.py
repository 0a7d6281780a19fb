"""Fuzz findings F29 and F33 (tests/fuzz/FINDINGS.md), against exact oracles.

F29: a comparison used as a number whose operands stay equal all along the ray took the side
of a further lexicographic direction, so ``x * (x > flip(x))`` at 0 along (1, 1) gave 1 (the
ray sees ``x0 > x1`` false: f = 0 on it). The sweep now checks the output's tangent along the
ray with such entries at their value at the point and on every side, and refuses where they
differ (the output jumps arbitrarily near the point).

F33: a jump whose input a saturated clip holds at the jump on the only side it can reach
(``ceil(sinh(clip(x, -2, 2)) - c)`` at x = 2 with the input 3) was refused.
"""

from __future__ import annotations

import operator
from fractions import Fraction

import numpy as np
import pytest

import asd
from asd.errors import NotLipschitzError
from asd.testing.exact import directional_derivative

# ----- F29: a comparison used as a number, its operands equal along the whole ray -----

COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
           "==": operator.eq, "!=": operator.ne}


def _program(cmp: str, use: str):
    """``use`` of the comparison ``x cmp flip(x)`` as a number, summed: works on traced
    arrays and on the exact oracle's object arrays of series alike."""
    fn = COMPARE[cmp]

    def f(x):
        y = x[::-1]
        step = np.asarray([fn(a, b) for a, b in zip(list(x), list(y))]) if x.dtype == object \
            else fn(x, y)
        if use == "x":
            out = x * step
        elif use == "x**2":
            out = x * x * step
        elif use == "vanishing":  # (x - flip(x)) * step: continuous, its jump absorbed
            out = (x - y) * step
        else:  # added: the jump itself reaches the output
            out = x + step
        return np.sum(out)

    return f


def _exact(f, x, v) -> Fraction:
    return directional_derivative(f, [Fraction(e) for e in x], [Fraction(e) for e in v])


POINTS = {"tie": (0.0, 0.0), "tie at 1": (1.0, 1.0), "near the tie": (0.0, 0.25)}
DIRECTIONS = {"keeps the tie": (1.0, 1.0), "keeps it, backwards": (-2.0, -2.0),
              "breaks it": (1.0, 0.0), "breaks it the other way": (0.0, -1.0),
              "splits it": (1.0, -1.0)}


@pytest.mark.parametrize("cmp", list(COMPARE))
@pytest.mark.parametrize("use", ["x", "x**2", "vanishing", "added"])
@pytest.mark.parametrize("point", list(POINTS))
@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_f29_a_comparison_as_a_number_is_exact_or_refused(cmp, use, point, direction):
    """Never a wrong number: asd's f'(x; v) is the exact one-sided derivative (Fractions
    along the ray, where the ray sees the comparison's value at equal operands), or a
    NotLipschitzError. Where the ray leaves the tie (or there is none), or the jump is
    absorbed to first order along the ray, it is a number."""
    f = _program(cmp, use)
    x, v = np.array(POINTS[point]), np.array(DIRECTIONS[direction])
    exact = _exact(f, x, v)
    tied = point != "near the tie"
    keeps = direction.startswith("keeps")
    try:
        _, got = asd.directional(f)(x, v)
    except NotLipschitzError as e:
        assert tied, f"refused off the tie: {e}"
        assert use in ("x", "added") or (use == "x**2" and point == "tie at 1"), (
            f"refused a jump absorbed along the ray: {e}")
        return
    assert Fraction(float(got)) == exact
    if use == "added" and tied:
        pytest.fail("a jump at the point reaching the output was not refused")
    if use == "x" and tied and keeps and point == "tie":
        pytest.fail("F29: the ray stays on the jump, whose sides part at first order")


@pytest.mark.parametrize("v", [(1.0, 1.0), (-1.0, -1.0)])
def test_f29_the_reproducer_is_refused_by_name(v):
    """``x * (x > flip(x))`` at 0 along (1, 1): today's code returned 1 (exact 0)."""
    f = _program(">", "x")
    with pytest.raises(NotLipschitzError, match=r"greater jumps here.*stays on the jump all "
                       r"along the ray.*a direction along which"):
        asd.directional(f)(np.zeros(2), np.array(v))
    with pytest.raises(NotLipschitzError, match="stays on the jump all along the ray"):
        asd.subgrad(f, direction=np.array(v))(np.zeros(2))


def test_f29_the_advice_works():
    """The refusal's advice: a direction along which the compared values part is answered
    exactly; so is the comparison cut off by asd.stop_gradient (its value at the point)."""
    f = _program(">", "x")
    x, v = np.zeros(2), np.array([1.0, 0.0])
    assert Fraction(float(asd.directional(f)(x, v)[1])) == _exact(f, x, v)

    def g(x):
        return np.sum(x * asd.stop_gradient(x > x[::-1]))

    assert float(asd.directional(g)(x, np.ones(2))[1]) == 0.0


def test_f29_a_floor_on_the_ray_is_refused():
    """The same defect for a piecewise-constant op: ``x0 * floor(x0 - x1)`` at 0 along
    (1, 1) stays on floor's jump (its left side is -1 beside the ray)."""
    def f(x):
        return x[0] * np.floor(x[1] - x[0])

    with pytest.raises(NotLipschitzError, match="stays on the jump all along the ray"):
        asd.directional(f)(np.zeros(2), np.ones(2))


@pytest.mark.parametrize("v", [1.0, -1.0, 0.5])
@pytest.mark.parametrize("spelling", ["x * (x > 0)", "relu(x) * (x > 0)", "x * (x >= 0)"])
def test_f29_continuous_uses_at_a_scalar_tie_keep_their_number(spelling, v):
    """The ray leaves the tie at first order: the side is the one the ray sees, and the
    program (relu) is continuous: the exact number, no refusal."""
    fns = {"x * (x > 0)": lambda x: x * (x > 0), "x * (x >= 0)": lambda x: x * (x >= 0),
           "relu(x) * (x > 0)": lambda x: np.maximum(x, 0.0) * (x > 0)}
    f = fns[spelling]
    _, got = asd.directional(f)(0.0, v)
    assert Fraction(float(got)) == directional_derivative(f, Fraction(0), Fraction(v))
