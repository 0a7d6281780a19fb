"""Ties whose cones hold operations that had no exact series are decided by it along the
ray, like any other: integer parts and norms of rows that vanish at the point.

An integer part (``%``, ``//``, floor, ceil, trunc, rint; fuzz finding F77) is
constant along the ray (its own jump, where the ray starts on one, decided by the sign the
series proves), so the series of ``x % c`` is ``x``'s less a constant.

Each program is ``relu(h)`` with ``h = p(x0) - x2**2 + x1 x2``, where ``p(x0)`` is an integer
part of ``x0**2`` plus constants that vanishes at the point and grows as ``t**2`` along
``v = (1, 0, 0)``: ``h`` is tied at 0 with a zero tangent and positive at second order, so the
limiting gradient along ``v`` is ``grad h = (0, 0, 1)`` (a further direction would pick the
other piece, 0, about half the time). The oracle is the gradient at ``x + s v``, where no tie
is left, as ``s`` shrinks."""

from __future__ import annotations

import numpy as np
import pytest

import asd

PARTS = {
    "remainder off its jump": lambda a: (a + 0.5) % 2 - 0.5,
    "remainder on its jump": lambda a: (a + 4) % 2,
    "floor_divide on its jump": lambda a: (a + 2) // 2 - 1 + a,
    "floor on its jump": lambda a: np.floor(a + 1) - 1 + a,
    "ceil off its jump": lambda a: np.ceil(a + 0.5) - 1 + a,
    "trunc on its jump": lambda a: np.trunc(a + 3) - 3 + a,
    "rint on a half": lambda a: np.rint(a + 3.5) - 4 + a,  # 4 at the point, and above it
}

X, V = np.array([0.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0])


def program(part):
    def f(x):
        h = part(x[0] ** 2) - x[2] ** 2 + x[1] * x[2]
        return np.maximum(h, 0.0)
    return f


@pytest.mark.parametrize("name", list(PARTS))
def test_the_series_through_an_integer_part_decides_the_tie(name):
    f = program(PARTS[name])
    assert f(X) == 0.0
    # the oracle: off the tie along v the program is smooth; its gradient tends to (0, 0, 1)
    for s in (1e-2, 1e-4):
        assert np.allclose(asd.subgrad(f)(X + s * V), [2 * s, 0.0, 1.0], rtol=1e-12)
    for seed in range(8):
        g = asd.subgrad(f, direction=V, seed=seed)(X)
        assert np.array_equal(g, [0.0, 0.0, 1.0]), (seed, g)
    assert asd.directional(f)(X, V)[1] == 0.0


def test_a_norm_of_a_row_leaving_zero_at_second_order_has_its_series():
    """``norm([3 a, 4 a])`` with ``a = x0**2`` is ``5 a`` along ``v``: the row vanishes at
    the point, so its norm's series is ``sqrt`` at 0 of ``25 t**4`` (`RaySeries.sqrt`), and
    the tie of ``relu(h)`` is decided by it, as for the integer parts above (the norm had no
    series: the next direction decided)."""
    def f(x):
        a = x[0] ** 2
        h = np.linalg.norm(np.stack([3 * a, 4 * a])) - 4 * a - x[2] ** 2 + x[1] * x[2]
        return np.maximum(h, 0.0)

    assert f(X) == 0.0
    for s in (1e-2, 1e-4):
        assert np.allclose(asd.subgrad(f)(X + s * V), [2 * s, 0.0, 1.0], rtol=1e-12)
    for seed in range(8):
        r = asd.asd(f, direction=V, seed=seed)(X)
        assert np.array_equal(r.subgradient, [0.0, 0.0, 1.0]), (seed, r.subgradient)
        assert r.element == "limiting gradient along the direction"
