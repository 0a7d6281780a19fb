"""A tie that holds all along the ray but not beside it (``x + c`` against ``y + c`` along
(1, 1)) is ordered by a further direction. That is sound only where the result agrees on
both sides all along the ray, as in every continuous program. Where a ``where``'s branches
or the values gathered at sorted positions are equal at the point but part along the ray,
the program jumps arbitrarily near the point (and the ray itself takes numpy's tie-break,
not the further direction's side): asd refuses (fuzz findings F71 and F72). The oracles are
the programs themselves on exact Fractions, along the ray and beside it."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import asd
from asd.errors import NotLipschitzError

C = Fraction(3, 4)

PARTING = {
    "where": lambda z: np.where(z[0] + C > z[1] + C, z[0], 0 * z[1]),
    "where_logic": lambda z: np.where((z[0] + C > z[1] + C) & (z[0] > -1), z[0], 0 * z[1]),
    "sorted_by": lambda z: np.take_along_axis(z * np.array([1, 0]), np.argsort(z + C,
                                                                                 stable=True),
                                              axis=0)[0],
    "take": lambda z: np.take(z * np.array([1, 0]), np.argsort(z + C, stable=True))[0],
}

AGREEING = {  # the same ties, continuous programs: answered
    "max_by_where": lambda z: np.where(z[0] + C > z[1] + C, z[0], z[1]),
    "sort": lambda z: np.take_along_axis(z, np.argsort(z + C, stable=True), axis=0)[0],
    "values_tied_too": lambda z: np.take_along_axis(2 * z, np.argsort(z + C, stable=True),
                                                    axis=0)[1],
}


def _at(f, z) -> Fraction:
    return Fraction(np.asarray(f(np.array(z, dtype=object)), dtype=object).item())


def _jumps_beside_the_ray(f, t: Fraction) -> bool:
    """Whether f differs by about t across the tie x = y at (t, t): its values a little to
    either side (s = t / 1000) differ by more than the distance between the points allows
    for a Lipschitz constant of 10."""
    s = t / 1000
    return abs(_at(f, [t + s, t]) - _at(f, [t, t + s])) > 10 * 2 * s


@pytest.mark.parametrize("name", sorted(PARTING))
def test_branches_parting_along_a_tie_the_ray_stays_on_are_refused(name):
    f = PARTING[name]
    assert _jumps_beside_the_ray(f, Fraction(1, 2 ** 20))
    g = lambda z: f(z.astype(float) if z.dtype == object else z)  # noqa: E731
    with pytest.raises(NotLipschitzError, match="all along the ray"):
        asd.directional(g)(np.zeros(2), np.ones(2))


@pytest.mark.parametrize("name", sorted(AGREEING))
@pytest.mark.parametrize("d", [(1, 1), (2, 2), (1, 0), (0, -1)])
def test_continuous_programs_at_the_same_ties_are_answered_exactly(name, d):
    f = AGREEING[name]
    t = Fraction(1, 2 ** 20)
    assert not _jumps_beside_the_ray(f, t)
    want = (_at(f, [t * d[0], t * d[1]]) - _at(f, [0, 0])) / t
    value, slope = asd.directional(f)(np.zeros(2), np.array(d, dtype=float))
    assert value == 0 and slope == want


def test_a_tie_decided_along_the_ray_keeps_its_answer():
    """Keys (x, 2 x) tie at 0 but part along (1, 1): the ray orders them itself, and the
    gathered values' one-sided derivative along it is the exact one."""
    def f(z):
        return np.take_along_axis(z * np.array([1, 0]), np.argsort(z * np.array([1, 2]),
                                                                  stable=True), axis=0)

    t = Fraction(1, 2 ** 20)
    want = [(Fraction(e) / t) for e in np.asarray(f(np.array([t, t], dtype=object)))]
    assert asd.directional(f)(np.zeros(2), np.ones(2))[1].tolist() == want


def test_the_torch_front_end_refuses_the_same_programs():
    """The same rules under ``asd.torch`` (an eager sweep on tensors: the masks of ties the
    ray stays on travel to the tensors' library)."""
    torch = pytest.importorskip("torch")
    import asd.torch as asd_torch

    programs = [
        lambda z: torch.where(z[0] + 0.75 > z[1] + 0.75, z[0], 0 * z[1]),
        lambda z: torch.where((z[0] + 0.75 > z[1] + 0.75) & (z[0] > -1), z[0], 0 * z[1]),
        lambda z: torch.take_along_dim(z * torch.tensor([1.0, 0.0], dtype=z.dtype),
                                       torch.argsort(z + 0.75, stable=True))[0],
    ]
    zero, ones = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    for f in programs:
        with pytest.raises(NotLipschitzError, match="all along the ray"):
            asd_torch.subgrad(f, zero, direction=ones)
    g = asd_torch.subgrad(lambda z: torch.where(z[0] + 0.75 > z[1] + 0.75, z[0], z[1]), zero,
                          direction=ones)
    assert float(g.sum()) == 1.0  # max(x, y): continuous, answered
