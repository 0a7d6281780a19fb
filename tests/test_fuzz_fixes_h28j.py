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


# ----- F33: a jump whose input can reach one side only -----

C33 = 0.6268604078470186  # sinh(2) - C33 == 3.0 in floats (3 + 2e-16 exactly)


def _float_quotients(f, x: float, v: float) -> set:
    """numpy's own program's one-sided difference quotients along ``v`` (exact where the
    program is constant near ``x``: the oracle of a float program held on a tie)."""
    fx = f(np.array([x]))
    return {float((f(np.array([x + t * v])) - fx)[0] / t) for t in (1e-3, 1e-6, 1e-9, 1e-12)}


@pytest.mark.parametrize("x, v", [(2.0, 1.0), (2.0, -1.0), (2.5, 1.0), (2.5, -1.0)])
def test_f33_a_jump_a_saturated_clip_keeps_on_one_side_is_no_jump(x, v):
    """``ceil(sinh(clip(x, -2, 2)) - c)`` at the bound (its input 3, never above it near x):
    numpy's value and the zero derivative; today's code refused (NotLipschitzError)."""
    def f(x):
        return np.ceil(np.sinh(np.clip(x, -2.0, 2.0)) - C33)

    value, d = asd.directional(f)(np.array([x]), np.array([v]))
    assert value[0] == f(np.array([x]))[0] == 3.0
    assert _float_quotients(f, x, v) == {0.0} and d[0] == 0.0


def _capped(x):
    """clip(x, -2, 2), spelled for the exact oracle's series (minimum/maximum)."""
    return np.minimum(np.maximum(x, -2.0), 2.0)


ONE_SIDED = {  # the input can reach one side of the jump only, and that side is the value
    "ceil(clip(x) + 1) at the upper bound": (lambda x: np.ceil(np.clip(x, -2.0, 2.0) + 1.0),
                                             lambda x: _ceil(_capped(x) + 1), 2.0),
    "floor(clip(x) - 0.5) at the lower bound": (
        lambda x: np.floor(np.clip(x, -1.5, 2.0) - 0.5),
        lambda x: _floor(np.minimum(np.maximum(x, -1.5), 2.0) - Fraction(1, 2)), -1.5),
    "ceil(-relu(x)) at 0": (lambda x: np.ceil(-np.maximum(x, 0.0)),
                            lambda x: _ceil(-np.maximum(x, 0)), 0.0),
    "x * (clip(x) > 2) at 2": (lambda x: x * (np.clip(x, -2.0, 2.0) > 2.0),
                               lambda x: x * _gt(_capped(x), 2), 2.0),
    "x * (3 * min(x, 2) <= 6) at 2": (lambda x: x * (3.0 * np.minimum(x, 2.0) <= 6.0),
                                      lambda x: x * _le(3 * np.minimum(x, 2), 6), 2.0),
    "floor_divide(leaky_relu(min(1 / (|x| + 1), 0.5) - 0.5), 2) held by the bound": (
        lambda x: np.floor_divide(asd.leaky_relu(np.ravel(np.clip(
            1.0 / (np.abs(x) + 1.0), None, 0.5)) - 0.5, 0.25), 2.0),
        lambda x: _floor(_leaky(np.minimum(1 / (abs(x) + 1), Fraction(1, 2)) - Fraction(1, 2))
                         / 2), 0.75),
}
BOTH_SIDES = {  # the input reaches the other side too: the jump stays, so does the refusal
    "floor_divide(leaky_relu(min(1 / (|x| + 1), 0.5) - 0.5), 2) at the bound": lambda x: (
        np.floor_divide(asd.leaky_relu(np.clip(1.0 / (np.abs(x) + 1.0), None, 0.5) - 0.5,
                                       0.25), 2.0)),
    "ceil(x + 1) at 2": lambda x: np.ceil(x + 1.0),
    "ceil(leaky_relu(x, -0.5)) at 0": lambda x: np.ceil(asd.leaky_relu(x, -0.5)),
    "floor(clip(x) + 1) at the upper bound": lambda x: np.floor(np.clip(x, -2.0, 2.0) + 1.0),
    "ceil(relu(x)) at 0": lambda x: np.ceil(np.maximum(x, 0.0)),
    "x * (clip(x) >= 2) at 2": lambda x: x * (np.clip(x, -2.0, 2.0) >= 2.0),
    "ceil(x * clip(x) - 3) at 2": lambda x: np.ceil(x * np.clip(x, -2.0, 2.0) - 3.0),
}
BOTH_POINTS = {"ceil(leaky_relu(x, -0.5)) at 0": 0.0,
               "floor_divide(leaky_relu(min(1 / (|x| + 1), 0.5) - 0.5), 2) at the bound": 1.0,
               "ceil(x + 1) at 2": 2.0, "floor(clip(x) + 1) at the upper bound": 2.0,
               "ceil(relu(x)) at 0": 0.0, "x * (clip(x) >= 2) at 2": 2.0,
               "ceil(x * clip(x) - 3) at 2": 2.0}


def _elementwise(fn):
    return lambda x: np.asarray([fn(e) for e in np.ravel(x)], dtype=object).reshape(np.shape(x))


def _lazy_floor(s):
    """floor of a series along the ray: the value's floor, one less where the series sits on
    an integer and decreases (its leading nonconstant term negative)."""
    from asd.core.series import Series
    if not isinstance(s, Series):
        return Fraction(s).__floor__()
    c0 = Fraction(s.coefficient(0))
    n = c0.__floor__()
    rest = s - c0
    return Fraction(n - 1 if c0 == n and rest.sign() < 0 else n)


_floor = _elementwise(_lazy_floor)
_ceil = _elementwise(lambda s: -_lazy_floor(-s))
_leaky = np.vectorize(lambda y: max(y, y / 4), otypes=[object])
_gt = np.vectorize(lambda a, b: Fraction(int(a > b)), otypes=[object])
_le = np.vectorize(lambda a, b: Fraction(int(a <= b)), otypes=[object])


@pytest.mark.parametrize("name", list(ONE_SIDED))
@pytest.mark.parametrize("v", [1.0, -1.0, 0.5])
def test_f33_one_reachable_side_is_answered_exactly(name, v):
    """Where the pieces prove that the jump's input reaches only the side equal to its value
    at the point, the jump is none: the exact one-sided derivative (Fractions along the ray),
    no refusal."""
    f, exact, x = ONE_SIDED[name]
    _, got = asd.directional(f)(np.array([x]), np.array([v]))
    want = directional_derivative(exact, [Fraction(x)], [Fraction(v)])
    assert Fraction(float(got[0])) == want[0]


@pytest.mark.parametrize("name", list(BOTH_SIDES))
@pytest.mark.parametrize("v", [1.0, -1.0])
def test_f33_a_jump_both_sides_reach_is_still_refused(name, v):
    """The input can cross the jump near x (a bound that does not hold it, a clip capping
    the wrong side, a product of moving values the analysis does not order): refused."""
    with pytest.raises(NotLipschitzError, match="jumps here"):
        asd.directional(BOTH_SIDES[name])(np.array([BOTH_POINTS[name]]), np.array([v]))
