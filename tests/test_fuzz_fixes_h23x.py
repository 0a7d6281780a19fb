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
