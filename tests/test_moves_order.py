"""Fuzz finding F42 (tests/fuzz/FINDINGS.md): a jump whose input cannot reach its other side
near the point is no jump, proven by `Trace.moves` from the pieces above it. F33 taught it
clips, relu, max/min, monotone functions, sums and constant scalings; F42 adds what keeps a
sign: a variance (a sum of squares), ``|x|``, ``x ** n``, products and quotients of moving
values, reductions by sum, and ``where`` (its branches, or the one its condition holds).

The oracle is exact and independent of asd: the program evaluated on Fractions at
``x + t d`` for small rational ``t``. Where asd answers, no sampled direction may see the
step move (a neighbourhood claim, checked along many directions), and the derivative along
``v`` is the exact difference quotient. Where asd refuses, some direction must witness the
jump, so every refusal here is a true one.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import asd
from asd.errors import NotLipschitzError


class Float:
    """The numpy spellings asd traces."""
    floor, ceil, rint, var, sum = np.floor, np.ceil, np.rint, np.var, np.sum
    max, min, median, sort = np.max, np.min, np.median, np.sort

    @staticmethod
    def quantile(x, q):
        return np.quantile(x, q)

    @staticmethod
    def topk(x, k):
        return asd.topk_sum(x, k)

    hardtanh, relu6, hinge, hypot = asd.hardtanh, asd.relu6, asd.hinge, np.hypot
    box, nonneg = asd.projections.box, asd.projections.nonneg
    linf = asd.projections.linf_ball
    nonpos = asd.projections.nonpos

    @staticmethod
    def where(c, a, b):
        return np.where(c, a, b)


class Exact:
    """The same program on Fraction object arrays (the oracle)."""
    floor = np.vectorize(math.floor, otypes=[object])
    ceil = np.vectorize(math.ceil, otypes=[object])

    @staticmethod
    def var(x):
        d = x - sum(x.tolist(), Fraction(0)) / x.size
        return sum((d * d).tolist(), Fraction(0)) / x.size

    @staticmethod
    def sum(x):
        return sum(np.ravel(x).tolist(), Fraction(0))

    rint = np.vectorize(round, otypes=[object])  # Python rounds half to even, as numpy

    @staticmethod
    def max(x):
        return max(x.tolist())

    @staticmethod
    def min(x):
        return min(x.tolist())

    @staticmethod
    def sort(x):
        return np.array(sorted(x.tolist()), dtype=object)

    @staticmethod
    def quantile(x, q):
        """numpy's default (linear) quantile."""
        s, at = sorted(x.tolist()), Fraction(q) * (x.size - 1)
        i = math.floor(at)
        return s[i] + (at - i) * (s[min(i + 1, x.size - 1)] - s[i])

    @staticmethod
    def median(x):
        return Exact.quantile(x, Fraction(1, 2))

    @staticmethod
    def topk(x, k):
        return sum(sorted(x.tolist())[-k:], Fraction(0))

    @staticmethod
    def hardtanh(x, lo, hi):
        return np.minimum(np.maximum(x, Fraction(lo)), Fraction(hi))

    @staticmethod
    def relu6(x):
        return np.minimum(np.maximum(x, 0), 6)

    @staticmethod
    def hinge(x):
        return np.maximum(1 - x, 0)

    @staticmethod
    def box(x, lo, hi):
        return min(max(x, Fraction(lo)), Fraction(hi))

    @staticmethod
    def nonneg(x):
        return max(x, 0)

    @staticmethod
    def linf(x, r):
        return np.array([min(max(e, -Fraction(r)), Fraction(r)) for e in x], dtype=object)

    @staticmethod
    def nonpos(x):
        return min(x, 0)

    @staticmethod
    def hypot(a, b):
        """Rounded, not exact (a square root), but 0 exactly at 0 and positive elsewhere,
        which is all a step at an integer reads here."""
        return Fraction(math.hypot(float(a), float(b)))

    @staticmethod
    def where(c, a, b):
        return a if c else b


def _step(name):
    def f(x, m=Float):
        x0, x1 = x[0], x[1]
        g = PROGRAMS[name][0](x, x0, x1, m)
        return m.sum(x) + m.sum(getattr(m, PROGRAMS[name][1])(g))
    return f


PROGRAMS = {  # name: (the step's input g, the step, the point, whether a jump is reachable)
    "floor(var x) at a constant x": (lambda x, x0, x1, m: m.var(x), "floor", (1, 1, 1), False),
    "ceil(var x) at a constant x": (lambda x, x0, x1, m: m.var(x), "ceil", (1, 1, 1), True),
    "ceil(-var x) at a constant x": (lambda x, x0, x1, m: -m.var(x), "ceil", (2, 2, 2), False),
    "floor(|x0| |x1|) at 0": (lambda x, x0, x1, m: abs(x0) * abs(x1), "floor", (0, 0), False),
    "floor(x0 x1) at 0": (lambda x, x0, x1, m: x0 * x1, "floor", (0, 0), True),
    "floor(x0 x1) at (0, 1)": (lambda x, x0, x1, m: x0 * x1, "floor", (0, 1), True),
    "floor(x0 x0 + x1 ** 2) at 0": (lambda x, x0, x1, m: x0 * x0 + x1 ** 2, "floor", (0, 0),
                                    False),
    "floor(x0 ** 3) at 0": (lambda x, x0, x1, m: x0 ** 3, "floor", (0, 0), True),
    "ceil(-(x0 ** 4)) at 0": (lambda x, x0, x1, m: -(x0 ** 4), "ceil", (0, 0), False),
    "floor(|x0| / (|x1| + 1)) at 0": (lambda x, x0, x1, m: abs(x0) / (abs(x1) + 1), "floor",
                                      (0, 0), False),
    "ceil(|x0| / (|x1| + 1)) at 0": (lambda x, x0, x1, m: abs(x0) / (abs(x1) + 1), "ceil",
                                     (0, 0), True),
    "floor(|x0| / (x1 - 2)) at 0": (lambda x, x0, x1, m: abs(x0) / (x1 - 2), "floor", (0, 0),
                                    True),
    "floor(|x0| / (x1 x1 - 1)) at 0": (lambda x, x0, x1, m: abs(x0) / (x1 * x1 - 1), "floor",
                                       (0, 0), True),
    "ceil(|x0| / (x1 x1 - 1)) at 0": (lambda x, x0, x1, m: abs(x0) / (x1 * x1 - 1), "ceil",
                                      (0, 0), False),
    "floor(sum |x|) at 0": (lambda x, x0, x1, m: m.sum(abs(x)), "floor", (0, 0, 0), False),
    "floor(sum x) at 0": (lambda x, x0, x1, m: m.sum(x), "floor", (0, 0, 0), True),
    "floor(where(x0 > 1, x0 - 1, x1 x1)) at 0, the condition held": (
        lambda x, x0, x1, m: m.where(x0 > 1, x0 - 1, x1 * x1), "floor", (0, 0), False),
    "floor(where(x0 > 1, x1 x1, x1)) at 0, the condition held": (
        lambda x, x0, x1, m: m.where(x0 > 1, x1 * x1, x1), "floor", (0, 0), True),
    "floor(where(x0 > x1, |x0 - x1|, (x0 - x1) ** 2)) on the tie, equal branches": (
        lambda x, x0, x1, m: m.where(x0 > x1, abs(x0 - x1), (x0 - x1) ** 2), "floor", (1, 1),
        False),
    "floor(where(x0 > x1, x0 - x1, (x0 - x1) ** 2)) on the tie, a branch falls": (
        lambda x, x0, x1, m: m.where(x0 > x1, x1 - x0, (x0 - x1) ** 2), "floor", (1, 1), True),
    "floor(where((x0 > 1) & (x1 < 2), x0 x1, |x0|)) at 0, the condition held": (
        lambda x, x0, x1, m: m.where((x0 > 1) & (x1 < 2), x0 * x1, abs(x0)), "floor", (0, 0),
        False),
    "floor(max |x|) at 0": (lambda x, x0, x1, m: m.max(abs(x)), "floor", (0, 0, 0), False),
    "ceil(min -|x|) at 0": (lambda x, x0, x1, m: m.min(-abs(x)), "ceil", (0, 0, 0), False),
    "floor(max x) at 0": (lambda x, x0, x1, m: m.max(x), "floor", (0, 0, 0), True),
    "floor(median |x|) at 0": (lambda x, x0, x1, m: m.median(abs(x)), "floor", (0, 0, 0),
                               False),
    "floor(median x) at 0": (lambda x, x0, x1, m: m.median(x), "floor", (0, 0, 0), True),
    "ceil(-sort(x * x)) at 0": (lambda x, x0, x1, m: -m.sort(x * x), "ceil", (0, 0, 0), False),
    "floor(sort(min(x, 2) - 2)[1:] + 1) at (-1, 2, 5), two held at a bound": (
        lambda x, x0, x1, m: -m.sort(-(np.minimum(x, 2) - 2))[:2] + 1, "ceil", (-1, 2, 5),
        False),
    "ceil(sort(min(x, 2) - 2)) at (-1, 2, 5), the lowest free": (
        lambda x, x0, x1, m: m.sort(np.minimum(x, 2) - 2) + 1, "ceil", (-1, 2, 5), True),
    "floor(quantile(|x|, 0.3)) at 0": (lambda x, x0, x1, m: m.quantile(abs(x), 0.3), "floor",
                                       (0, 0, 0), False),
    "floor(topk_sum(|x|, 2)) at 0": (lambda x, x0, x1, m: m.topk(abs(x), 2), "floor",
                                     (0, 0, 0), False),
    "rint(median(min(x, 2) - 2) + 1/2) at (-1, 2, 5), the median held at a bound": (
        lambda x, x0, x1, m: m.median(np.minimum(x, 2) - 2) + 0.5, "rint", (-1, 2, 5), False),
    "rint(median(x - 2) + 1/2) at (-1, 2, 5)": (
        lambda x, x0, x1, m: m.median(x - 2) + 0.5, "rint", (-1, 2, 5), True),
    "trunc(hardtanh(x, 1, 1)) at 1, a constant (the campaign's case)": (
        lambda x, x0, x1, m: m.hardtanh(x, 1.0, 1.0), "floor", (1, 1), False),
    "floor(relu6(x) - 6) at 7, saturated": (lambda x, x0, x1, m: m.relu6(x) - 6, "floor",
                                            (7, 7), False),
    "floor(relu6(x) - 6) at 6, on the bound": (lambda x, x0, x1, m: m.relu6(x) - 6, "floor",
                                               (6, 7), True),
    "ceil(relu6(x)) at 0, on the bound": (lambda x, x0, x1, m: m.relu6(x), "ceil", (0, 0),
                                          True),
    "floor(hinge(x)) at 1": (lambda x, x0, x1, m: m.hinge(x), "floor", (1, 1), False),
    "ceil(hinge(x)) at 1": (lambda x, x0, x1, m: m.hinge(x), "ceil", (1, 1), True),
    "floor(hypot(x0, x1)) at 0": (lambda x, x0, x1, m: m.hypot(x0, x1), "floor", (0, 0), False),
    "ceil(hypot(x0, x1)) at 0": (lambda x, x0, x1, m: m.hypot(x0, x1), "ceil", (0, 0), True),
    "floor(|x0| % 3) at 0": (lambda x, x0, x1, m: abs(x0) % 3, "floor", (0, 0), False),
    "floor(x0 % 3) at 0": (lambda x, x0, x1, m: x0 % 3, "floor", (0, 0), True),
    "floor((|x0| % (|x1| + 1)) % 2) at 0, nested remainders (the campaign's case)": (
        lambda x, x0, x1, m: (abs(x0) % (abs(x1) + 1)) % 2, "floor", (0, 0), False),
    "floor((x0 % (|x1| + 1)) % 2) at 0, nested remainders": (
        lambda x, x0, x1, m: (x0 % (abs(x1) + 1)) % 2, "floor", (0, 0), True),
    "floor(x0 / 2 * (x0 / 2 >= x0)) at 0, a comparison that jumps (was a wrong number)": (
        lambda x, x0, x1, m: x0 / 2 * (x0 / 2 >= x0), "floor", (0, 0), True),
    "floor(x0 * (x0 > x0)) at 1/2, a comparison of a value with itself": (
        lambda x, x0, x1, m: x0 * (x0 > x0), "floor", (0.5, 0), False),
    "floor(box(x0 + 3, -1, 0)) at 0, saturated (the campaign's case)": (
        lambda x, x0, x1, m: m.box(x0 + 3, -1.0, 0.0), "floor", (0, 0), False),
    "floor(box(x0, -1, 0)) at 0, on the upper bound": (
        lambda x, x0, x1, m: m.box(x0, -1.0, 0.0), "floor", (0, 0), True),
    "ceil(box(x0, 0, 0) - 2) at 1, a degenerate box": (
        lambda x, x0, x1, m: m.box(x0, 0.0, 0.0) - 2, "ceil", (1, 0), False),
    "floor(nonneg(x0)) at 0": (lambda x, x0, x1, m: m.nonneg(x0), "floor", (0, 0), False),
    "ceil(max(linf_ball(x + (4, 0), 2)) - 2) at 0, held by the ball (the campaign's case)": (
        lambda x, x0, x1, m: m.max(m.linf(x + np.array([4.0, 0.0]), 2.0)) - 2, "ceil",
        (0, 0), False),
    "floor(max(linf_ball(x + (2, 0), 2)) - 2) at 0, on the ball": (
        lambda x, x0, x1, m: m.max(m.linf(x + np.array([2.0, 0.0]), 2.0)) - 2, "floor",
        (0, 0), True),
    "ceil(nonpos(x0)) at 0": (lambda x, x0, x1, m: m.nonpos(x0), "ceil", (0, 0), False),
    "floor(nonpos(x0)) at 0": (lambda x, x0, x1, m: m.nonpos(x0), "floor", (0, 0), True),
    "floor(arcsinh(var x) / (|x0| + 1)) at a constant x (the campaign's case)": (
        lambda x, x0, x1, m: (np.arcsinh(m.var(x)) if m is Float else m.var(x))
        / (abs(x0) + 1), "floor", (0.5, 0.5), False),
}
"""The exact program uses ``var`` for ``arcsinh(var)``: the same sign near 0 (increasing,
arcsinh(0) = 0), which is all a step at 0 reads."""

DIRECTIONS = [np.array(d, dtype=float) for d in
              [(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (1, 1, 1), (1, -1, 0), (-1, 1, 0),
               (-1, -1, -1), (1, 2, -3), (-2, 1, 3), (3, -2, 1), (0.5, 0.25, -1)]]
STEPS = [Fraction(1, 2 ** 20), Fraction(1, 2 ** 40)]


def _exact_at(name, x, d, t):
    point = np.array([Fraction(e) + t * Fraction(float(di)) for e, di in zip(x, d)],
                     dtype=object)
    return _step(name)(point, Exact)


def _witness(name, x) -> bool:
    """Whether some sampled direction moves the step at a small ``t`` (exactly)."""
    x = list(map(Fraction, x))
    f0 = _step(name)(np.array(x, dtype=object), Exact)
    for d in DIRECTIONS:
        d = d[:len(x)]
        for t in STEPS:
            linear = sum(Fraction(float(di)) for di in d) * t  # the sum(x) part
            if _exact_at(name, x, d, t) - f0 != linear:
                return True
    return False


@pytest.mark.parametrize("name", [n for n, p in PROGRAMS.items() if not p[3]])
@pytest.mark.parametrize("v", [0, 1, 8])
def test_a_step_whose_other_side_is_unreachable_is_answered_exactly(name, v):
    """No sampled direction moves the step near x (the oracle proves the claim along them),
    and asd answers with the exact one-sided derivative along v (today's code refused
    these: NotLipschitzError, "jumps here")."""
    x = np.array(PROGRAMS[name][2], dtype=float)
    assert not _witness(name, x)
    d = DIRECTIONS[v][:x.size]
    value, got = asd.directional(_step(name))(x, d)
    assert value == _step(name)(x)
    want = {(_exact_at(name, x, d, t) - _exact_at(name, x, d, Fraction(0))) / t for t in STEPS}
    assert want == {Fraction(float(got))}


@pytest.mark.parametrize("name", [n for n, p in PROGRAMS.items() if p[3]])
@pytest.mark.parametrize("v", [0, 3])
def test_a_step_some_direction_crosses_is_still_refused(name, v):
    """Some direction moves the step (an exact witness), so asd must refuse."""
    x = np.array(PROGRAMS[name][2], dtype=float)
    assert _witness(name, x)
    with pytest.raises(NotLipschitzError):
        asd.directional(_step(name))(x, DIRECTIONS[v][:x.size])
