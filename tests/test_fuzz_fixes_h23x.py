"""Regression tests of the fuzz findings F9, F15, F17, F22 and F24 (tests/fuzz/findings.py,
issue 23): jumps of piecewise-constant primitives (``%``, ``//``, floor, comparisons used as
numbers) met by asd.clarke, on transposed inputs, across entries, and on inputs that do not
move.

Each finding's minimal reproducer runs through every check of the fuzz harness (the exact
oracle along the ray, Fractions); besides, each defect is pinned by a direct test whose
oracle is the exact one-sided difference quotient (Fractions), never a number by hand.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

import asd
from tests.fuzz import harness
from tests.programs import Op, Program


def _case(ops: list[Op], shapes: list[tuple[int, ...]], x, v, *, reduce: bool = True
          ) -> harness.Case:
    return harness.Case(Program(tuple(ops), tuple(shapes), reduce), np.array(x, dtype=float),
                        np.array(v, dtype=float))


REPRODUCERS = {
    # asd.clarke of `%`: the clarke re-sweep re-ran the remainder's rule, whose record_jump
    # reached a _Resweep without that hook (raw AttributeError)
    "F17": _case([Op("remainder", (0,), {"c": -0.25}), Op("add_constant", (1,), {"constant": 0.5}),
                  Op("soft_threshold", (2,), {"lam": 0.5})], [(1,)] * 4, [1.25], [1.0]),
    # x * (x < 0) at 0 (x1 = 0 * x, x2 = x * (x < x1)): asd.clarke gave every direction the
    # first one's gradient
    "F15": _case([Op("multiply_constant", (0,), {"constant": 0.0}),
                  Op("step_multiply", (0, 0, 1), {"cmp": "<"})], [(1,), (1,), (1,)], [0.0],
                 [1.0]),
    # np.floor(x.T)[0].sum() at 0 along +1: the jump was replayed on a transposed copy
    # whose flat writes were lost, so the output looked continuous (a silent derivative 0)
    "F24": _case([Op("transpose", (0,)), Op("np_floor", (1,)), Op("index", (2,), {"key": 0})],
                 [(2, 2), (2, 2), (2, 2), (2,)], [[0.0, 0.0], [0.0, 0.0]],
                 [[1.0, 1.0], [1.0, 1.0]]),
    # x2 = (x + [-0.25, 0]) % 4, x4 = x2 / 2 + [0.375, 1], (x4 - x2) * (x4 >= x2) at [1, 0]
    # along [1, -1]: the comparison's recorded value at the point was taken on the
    # remainder's entered side (x2 = 4), so the replay at the point kept it and missed the
    # jump of entry 1 (a silent [0, -0] where numpy's value is [0, 1])
    "F22": _case([Op("add_constant", (0,), {"constant": (-0.25, 0.0)}),
                  Op("remainder", (1,), {"c": 4.0}),
                  Op("divide_by_constant", (2,), {"constant": 2.0}),
                  Op("add_constant", (3,), {"constant": (0.375, 1.0)}), Op("subtract", (4, 2)),
                  Op("step_multiply", (5, 4, 2), {"cmp": ">="})], [(2,)] * 7, [1.0, 0.0],
                 [1.0, -1.0], reduce=False),
    # np.clip(x, None, 0.5) // 0.5 at 1: the clipped entry (0.5) sits on floor_divide's jump
    # but never moves near x, so the program is constant there; it was refused
    "F9": _case([Op("np_clip", (0,), {"lo": None, "hi": 0.5}),
                 Op("floor_divide", (1,), {"c": 0.5})], [(1,), (1,), (1,)], [1.0], [1.0]),
}


@pytest.mark.parametrize("name", sorted(REPRODUCERS))
def test_fuzz_reproducer_passes_every_check(name):
    """The finding's reproducer: no raw exception, wrong number or unwarranted refusal in
    any check of the harness (directional, subgrad/jacobian, vjp, clarke, jit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = harness.run_checks(REPRODUCERS[name])
    failed = [f"{o.check} {o.status}: {o.detail}" for o in outcomes if o.failed]
    assert outcomes and not failed, failed


# ----- asd.clarke across a jump (F15, F17) -----

def _one_sided(f, x: Fraction, v: Fraction) -> Fraction:
    """The exact one-sided derivative of a piecewise-linear ``f`` along ``v`` at ``x``: the
    difference quotient at a step inside the piece the ray enters."""
    step = Fraction(1, 2 ** 20)
    return (f(x + step * v) - f(x)) / step


def _clarke_1d(f, x: float) -> set[Fraction]:
    """The exact Clarke set's end points of a piecewise-linear scalar ``f`` of one variable:
    the gradients along +1 and -1."""
    return {_one_sided(f, Fraction(x), Fraction(1)), -_one_sided(f, Fraction(x), Fraction(-1))}


@pytest.mark.parametrize("f, x", [
    (lambda x: x * (x < 0), 0.0),
    (lambda x: (x >= 1) * (x - 1) + 2 * x, 1.0),
    (lambda x: (x - 2) * (x // 1.0), 2.0),
    (lambda x: abs(x) * (x > 0) + 3 * x * (x <= 0), 0.0),
])
def test_clarke_takes_each_directions_side_of_a_jump(f, x):
    """A comparison (or ``//``) used as a number past a jump: each direction's gradient uses
    the side that direction enters, so both ends of the Clarke set are sampled."""
    s = asd.clarke(f, n=8, seed=0)(x)
    got = {Fraction(float(g)) for g in s.gradients}
    assert got == _clarke_1d(f, x)
    assert s.contains(float(min(got) + max(got)) / 2)
    # no enclosure is claimed across a jump: nothing is proven outside
    assert s.contains(float(max(got)) + 1.0) == "undetermined"


def test_clarke_of_a_remainder_chain():
    """F17's program in plain numpy: ``soft_threshold(x % -0.25 + 0.5, 0.5)`` at 1.25, the
    remainder on its jump."""
    def f(x):
        y = x % -0.25 + 0.5
        return np.sum(y - np.clip(y, -0.5, 0.5))

    def exact(x):
        y = x - Fraction(-1, 4) * (x / Fraction(-1, 4)).__floor__() + Fraction(1, 2)
        return y - min(max(y, Fraction(-1, 2)), Fraction(1, 2))

    s = asd.clarke(f, n=8, seed=0)(np.array([1.25]))
    assert {Fraction(float(g)) for g in s.gradients.ravel()} == _clarke_1d(exact, 1.25)


# ----- a jump on a transposed (non-contiguous) input (F24) -----

TRANSPOSED_JUMPS = [
    (np.floor, 0.0), (np.ceil, 0.0), (np.trunc, 1.0), (np.rint, 0.5), (np.round, 0.5),
    (np.sign, 0.0), (lambda a: a // 0.5, 1.0), (lambda a: a % 0.5 * 0 + (a >= 1.0), 1.0),
]


@pytest.mark.parametrize("op, x0", TRANSPOSED_JUMPS)
@pytest.mark.parametrize("view", [lambda x: x.T, lambda x: x[:, ::-1], lambda x: x.T[::-1]])
def test_a_jump_on_a_strided_input_is_refused(op, x0, view):
    """Every entry of the (2, 3) input sits on the op's jump: read through a transposed or
    reversed view, the one-sided values are replayed in the view's logical order, so the
    jump is found and refused, on each side."""
    x = np.full((2, 3), x0)
    for v in (np.ones((2, 3)), -np.ones((2, 3))):
        with pytest.raises(asd.NotLipschitzError, match="jumps here"):
            asd.directional(lambda a: np.sum(op(view(a))[0]))(x, v)


def test_a_continuous_product_with_sign_on_a_transposed_input():
    """``sum(y * sign(y))``, y = x.T, is ``sum |x|``: continuous across sign's jump at 0, so
    the replay accepts it; the derivative is the exact one-sided difference quotient."""
    x = np.array([[0.0, 0.0, 1.0], [0.0, -2.0, 0.0]])
    v = np.array([[1.0, -3.0, 2.0], [-0.5, 1.0, 0.0]])

    def exact(t: Fraction) -> Fraction:
        return sum(abs(Fraction(a) + t * Fraction(b)) for a, b in zip(x.ravel(), v.ravel()))

    step = Fraction(1, 2 ** 20)
    value, deriv = asd.directional(lambda a: np.sum(a.T * np.sign(a.T)))(x, v)
    assert Fraction(float(value)) == exact(Fraction(0))
    assert Fraction(float(deriv)) == (exact(step) - exact(Fraction(0))) / step


# ----- a jump below another jump (F22) -----

def _f22(x):
    x2 = (x + np.array([-0.25, 0.0])) % 4.0
    x4 = x2 / 2.0 + np.array([0.375, 1.0])
    return (x4 - x2) * (x4 >= x2)


def _exact_f22(x: list[Fraction]) -> list[Fraction]:
    out = []
    for xi, c, d in zip(x, (Fraction(-1, 4), 0), (Fraction(3, 8), 1)):
        x2 = (xi + c) % 4
        x4 = x2 / 2 + d
        out.append((x4 - x2) * (x4 >= x2))
    return out


@pytest.mark.parametrize("v", [[1.0, -1.0], [-1.0, -1.0], [0.5, -2.0]])
def test_a_jump_below_a_jump_is_refused(v):
    """F22 in plain numpy: along any direction entering x2's jump from below, the output
    jumps (the exact values at the point and a step along the ray differ), so asd refuses,
    naming the remainder."""
    x = np.array([1.0, 0.0])
    at = _exact_f22([Fraction(1), Fraction(0)])
    step = Fraction(1, 2 ** 20)
    near = _exact_f22([Fraction(1) + step * Fraction(v[0]), step * Fraction(v[1])])
    assert abs(near[1] - at[1]) > Fraction(1, 2)  # the oracle: a jump along the ray
    for call in (lambda: asd.directional(_f22)(x, np.array(v)),
                 lambda: asd.jacobian(_f22, direction=np.array(v))(x)):
        with pytest.raises(asd.NotLipschitzError, match=r"remainder.*jumps here"):
            call()


def test_a_jump_below_a_jump_is_refused_from_the_continuous_side_too():
    """Along [1, 1] x2's entry 1 moves up from 0, where the output is continuous along the
    ray; f still jumps at x (from below, the exact values differ), so it is not locally
    Lipschitz there and asd refuses whichever side the direction enters."""
    x, v = np.array([1.0, 0.0]), np.array([1.0, 1.0])
    step = Fraction(1, 2 ** 20)
    below = _exact_f22([Fraction(1) - step, -step])
    assert abs(below[1] - _exact_f22([Fraction(1), Fraction(0)])[1]) > Fraction(1, 2)
    with pytest.raises(asd.NotLipschitzError, match=r"remainder.*jumps here"):
        asd.jacobian(_f22, direction=v)(x)


@pytest.mark.parametrize("v", [1.0, -1.0])
def test_stop_gradient_keeps_the_value_at_the_point_below_a_jump(v):
    """``stop_gradient(floor(x % 4))`` at 0: the value at the point is numpy's floor(0 % 4),
    not floor of the remainder's entered side (4 along -1: a silent derivative -4 before),
    and a comparison below the remainder is evaluated at the point too (it was refused)."""
    c = float(np.floor(0.0 % 4.0))
    value, deriv = asd.directional(lambda x: x * asd.stop_gradient(np.floor(x % 4.0)))(0.0, v)
    assert (value, deriv) == (0.0, c * v)
    c = float(np.greater_equal(0.0 % 4.0, 3.5))
    value, deriv = asd.directional(lambda x: x + asd.stop_gradient((x % 4.0) >= 3.5))(0.0, v)
    assert (value, deriv) == (c, v)


# ----- a jump whose input does not move near the point (F9) -----

HALF = Fraction(1, 2)


def _clip_hi(x):
    return min(x, HALF)


LOCALLY_CONSTANT = [
    # (asd/numpy program, the same on Fractions, point)
    (lambda x: np.clip(x, None, 0.5) // 0.5, lambda x: _clip_hi(x) // HALF, 1.0),
    (lambda x: x + np.clip(x, None, 0.5) % 0.5, lambda x: x + _clip_hi(x) % HALF, 1.0),
    (lambda x: np.floor(np.maximum(x, 0.0)) + x, lambda x: max(x, 0).__floor__() + x, -1.0),
    (lambda x: (np.clip(x, None, 0.5) >= 0.5) * x, lambda x: (_clip_hi(x) >= HALF) * x, 1.0),
    (lambda x: np.sign(x - x) + x, lambda x: x, 0.25),
]


@pytest.mark.parametrize("f, exact, x0", LOCALLY_CONSTANT)
@pytest.mark.parametrize("v", [1.0, -1.0])
def test_a_jump_whose_input_is_constant_near_the_point(f, exact, x0, v):
    """The input sits on the jump but is constant near ``x`` (clipped, a dead relu,
    ``x - x``): the jump is never crossed, so asd gives numpy's value and the exact
    one-sided difference quotient (it refused with NotLipschitzError)."""
    x = Fraction(x0)
    step = Fraction(1, 2 ** 20)
    value, deriv = asd.directional(f)(x0, v)
    assert value == f(x0)
    assert Fraction(float(deriv)) == (exact(x + step * Fraction(v)) - exact(x)) / step


@pytest.mark.parametrize("f, exact", [
    (lambda x: np.clip(x, None, 0.5) // 0.5, lambda x: _clip_hi(x) // HALF),
    (lambda x: np.clip(x, None, 0.5) // (0.25 + 0 * x), lambda x: _clip_hi(x) // (HALF / 2)),
    (lambda x: np.clip(x, None, 0.5) % (0.25 + 0 * x), lambda x: _clip_hi(x) % (HALF / 2)),
])
@pytest.mark.parametrize("v", [1.0, -1.0])
def test_a_jump_whose_input_moves_on_one_side_only_is_refused(f, exact, v):
    """At the clip's corner 0.5 the input is constant to the right but moves to the left,
    where the program jumps (the exact values there differ): refused along both directions.
    With a traced divisor, the right-hand side returned a number before."""
    step = Fraction(1, 2 ** 20)
    assert exact(HALF - step) != exact(HALF)  # the oracle: a jump from the left
    with pytest.raises(asd.NotLipschitzError, match="jumps here"):
        asd.directional(f)(0.5, v)
