"""A comparison whose operands are equal along the ray is not equal near the point.

``x < |x|`` at 0 along +1: both sides are ``x`` on the ray (``|x|`` takes its ``+x`` piece
there), so the tie service decides the comparison "equal" (side 0). Beside the ray, left of
0, ``x < |x|`` holds: the comparison jumps. asd read side 0 as an equality near the point in
two places, and returned numbers where the program jumps (found by the numpy campaign seed
2991 through `asd.clarke`, whose sample missed a piece):

- `Trace.unreachable` dropped the jump of a comparison whose operands are one quantity
  along the ray (``|x| = x`` past the ray's identity piece), not only past identity
  constants (``s + 0.0`` against ``s``, F53);
- ``where`` (one comparison, or a logical tree of them) kept the side at such a tie without
  checking that the equality holds near the point.

The oracle is exact: each program on Fractions at ``x ± t`` for small rational ``t`` says
whether it jumps at 0 and, where it does not, its one-sided derivatives; asd must refuse the
first along every direction and give the second.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import asd
from asd.errors import NotLipschitzError


def _clip(e, lo, hi):
    return min(max(e, lo), hi)


PROGRAMS = {  # name: (numpy spelling, exact spelling on a Fraction)
    "(x < |x|) + x": (lambda x: (x < np.abs(x)) * 1.0 + x,
                      lambda x: int(x < abs(x)) + x),
    "where(x < |x|, 1, 0) + x": (lambda x: np.where(x < np.abs(x), 1.0, 0.0) + x,
                                 lambda x: (1 if x < abs(x) else 0) + x),
    "where(x < max(x, 0), 1, 0) + x": (
        lambda x: np.where(x < np.maximum(x, 0.0), 1.0, 0.0) + x,
        lambda x: (1 if x < max(x, 0) else 0) + x),
    "where(x > clip(x, -1, 0), 1, 0) + x": (
        lambda x: np.where(x > np.clip(x, -1.0, 0.0), 1.0, 0.0) + x,
        lambda x: (1 if x > _clip(x, -1, 0) else 0) + x),
    "where(x < |x| or x > 5, 1, 0) + x": (
        lambda x: np.where((x < np.abs(x)) | (x > 5.0), 1.0, 0.0) + x,
        lambda x: (1 if x < abs(x) or x > 5 else 0) + x),
    # continuous: the tree never changes near 0, the jump is multiplied by 0, or the
    # branches agree at the tie
    "where(x < |x| and x > 5, 1, 0) + x": (
        lambda x: np.where((x < np.abs(x)) & (x > 5.0), 1.0, 0.0) + x,
        lambda x: (1 if x < abs(x) and x > 5 else 0) + x),
    "x * (x < |x|)": (lambda x: x * (x < np.abs(x)), lambda x: x * int(x < abs(x))),
    "where(x < |x|, x, 0)": (lambda x: np.where(x < np.abs(x), x, 0.0),
                             lambda x: x if x < abs(x) else 0),
}

STEPS = (Fraction(1, 10 ** 6), Fraction(1, 10 ** 9))


def _jumps(exact) -> bool:
    at = exact(Fraction(0))
    return any(abs(exact(s * t) - at) > Fraction(1, 8) for s in (1, -1) for t in STEPS)


def _slope(exact, d: int) -> Fraction:
    """The one-sided derivative along ``d`` (the programs are affine on each side)."""
    t = STEPS[0]
    return (exact(d * t) - exact(Fraction(0))) / t


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("d", [1.0, -1.0])
def test_an_equality_along_the_ray_is_checked_near_the_point(name, d):
    spelled, exact = PROGRAMS[name]
    x, v = np.array(0.0), np.array(d)
    if _jumps(exact):
        with pytest.raises(NotLipschitzError):
            asd.directional(spelled)(x, v)
        with pytest.raises(NotLipschitzError):
            asd.subgrad(spelled, direction=v)(x)
        return
    value, slope = asd.directional(spelled)(x, v)
    assert value == exact(Fraction(0)) and slope == _slope(exact, int(d))


def test_the_clarke_sample_of_a_comparison_equal_along_one_ray_has_both_pieces():
    """``x * (x < |x|)`` is ``min(x, 0)``: its Clarke set at 0 is [0, 1]. The sample swept
    the comparison along its first direction only (no jump recorded there) and reported
    {0} for every direction."""
    sample = asd.clarke(lambda x: x * (x < np.abs(x)), seed=6)(np.array(0.0))
    assert sorted(sample.gradients.ravel().tolist()) == [0.0, 1.0]
