"""Piecewise primitives (library/piecewise.py) on their breakpoints, bounds and ties.

Table-driven: each elementwise primitive is paired with a plain-numpy reference written with
maximum/minimum/where, which the exact Fraction oracle evaluates along ``x + δv``. Points are
drawn ON the kinks (exact zeros, breakpoints, x == lo / hi for clip); directions have zero and
repeated entries. `check_rule` checks value, maps, Dini derivative and limiting Jacobian; where
the tangent is 0 at a kink (the oracle cannot decide) the convention is pinned separately:
elementwise rules take the right piece (the ``>=`` side, paper Algorithm 7), clip the inside.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.testing import Jet, Series, check_rule, limiting_gradient
from asd.testing.exact import DegenerateTie
from asd.testing.strategies import directions, kink_arrays


def ref_clip(lo, hi):
    return lambda a: np.minimum(np.maximum(a, lo), hi)


def ref_huber(delta):
    return lambda a: np.where(np.abs(a) <= delta, 0.5 * a * a,
                              delta * np.abs(a) - delta * delta / 2)


USER_POLY = asd.piecewise_polynomial([-1.0, 0.0, 2.0],
                                     [[-1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, -0.25], [1.0]])


def ref_user_poly(a):
    inner = np.where(a <= 0, a, a - 0.25 * a * a)
    return np.where(a <= -1, -1.0, np.where(a <= 2, inner, 1.0))


# name, asd function, reference, breakpoints
CASES = [
    ("relu", asd.relu, lambda a: np.maximum(a, 0.0), (0.0,)),
    ("abs", np.abs, np.abs, (0.0,)),
    ("leaky_relu", asd.leaky_relu, lambda a: np.maximum(a, 0.01 * a), (0.0,)),
    ("leaky_relu 0.25", lambda x: asd.leaky_relu(x, 0.25), lambda a: np.maximum(a, 0.25 * a),
     (0.0,)),
    ("relu6", asd.relu6, ref_clip(0.0, 6.0), (0.0, 6.0)),
    ("hardtanh", asd.hardtanh, ref_clip(-1.0, 1.0), (-1.0, 1.0)),
    ("hardtanh(-0.5, 2)", lambda x: asd.hardtanh(x, -0.5, 2.0), ref_clip(-0.5, 2.0), (-0.5, 2.0)),
    ("hardtanh lo == hi", lambda x: asd.hardtanh(x, 0.5, 0.5), ref_clip(0.5, 0.5), (0.5,)),
    ("hard_sigmoid", asd.hard_sigmoid, lambda a: np.minimum(np.maximum(a / 6 + 0.5, 0), 1),
     (-3.0, 3.0)),
    ("soft_threshold", lambda x: asd.soft_threshold(x, 1.0), lambda a: a - ref_clip(-1, 1)(a),
     (-1.0, 1.0)),
    ("soft_threshold lam 0", lambda x: asd.soft_threshold(x, 0.0), lambda a: a - 0 * a, (0.0,)),
    ("hinge", asd.hinge, lambda a: np.maximum(0.0, 1.0 - a), (1.0,)),
    ("huber", asd.huber, ref_huber(1.0), (-1.0, 1.0)),
    ("huber 0.5", lambda x: asd.huber(x, 0.5), ref_huber(0.5), (-0.5, 0.5)),
    ("piecewise_polynomial", USER_POLY, ref_user_poly, (-1.0, 0.0, 2.0)),
    ("np.clip", lambda x: np.clip(x, -1.0, 2.0), ref_clip(-1.0, 2.0), (-1.0, 2.0)),
    ("clip method", lambda x: x.clip(0.0, 1.0), ref_clip(0.0, 1.0), (0.0, 1.0)),
    ("clip lo == hi", lambda x: asd.clip(x, 0.5, 0.5), ref_clip(0.5, 0.5), (0.5,)),
    ("clip lo only", lambda x: np.clip(x, 0.5, None), lambda a: np.maximum(a, 0.5), (0.5,)),
    ("clip hi only", lambda x: asd.clip(x, None, 0.5), lambda a: np.minimum(a, 0.5), (0.5,)),
    ("where relu", lambda x: np.where(x > 0, x, 0.0), lambda a: np.where(a > 0, a, 0.0), (0.0,)),
    ("where <= abs", lambda x: np.where(x <= 0, -x, x), lambda a: np.where(a <= 0, -a, a),
     (0.0,)),
]
IDS = [c[0] for c in CASES]
# Where the tangent is 0 at a kink the ray stays on it and the oracle cannot decide; asd's
# choice there, as the side a second-order move w would enter: the right piece (the ">=" side,
# paper Algorithm 7) for elementwise rules; for clip the inside (its ties go to x, the first
# operand of maximum/minimum); for where the first branch.

@pytest.mark.parametrize("name, fn, ref, kinks", CASES, ids=IDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_piecewise_rule_on_kinks(name, fn, ref, kinks, data):
    x = data.draw(kink_arrays((4,), kinks), label="x")
    v = data.draw(directions((4,)), label="v")
    check_rule(fn, x, direction=v, reference=ref, exact=True, name=name)
    # Entries whose tangent is 0 sit on the kink along the whole ray: the second direction w
    # of the lexicographic sequence decides them, the limit along x + δv + δ²w.
    w = np.array(data.draw(st.lists(st.sampled_from([-1.0, -0.5, 0.5, 1.0]), min_size=4,
                                    max_size=4), label="w"))
    got = np.diag(asd.jacobian(fn, directions=[v, w])(x))
    for i in range(4):
        if v[i]:
            want = limiting_gradient(ref, x[i], v[i])[1][()]
        else:
            want = _second_order(ref, x[i], w[i])
        assert got[i] == pytest.approx(float(want), rel=1e-12, abs=1e-12), (name, x[i], v[i])


def _second_order(ref, x, w):
    """``lim ref'(x + δ²w)``: the slope of the piece a zero-tangent ray drifts into."""
    jet = np.empty((), dtype=object)
    jet[()] = Jet(Series((x, 0, w)), [Series((1,))])
    out = np.asarray(ref(jet), dtype=object)[()]
    return out.grad[0].coefficient(0) if isinstance(out, Jet) else Fraction(0)


@pytest.mark.parametrize("name, fn, ref, kinks", CASES, ids=IDS)
def test_piecewise_rule_off_kinks(name, fn, ref, kinks):
    x = np.array([-7.25, -2.5, -0.75, 0.375, 1.5, 3.25, 8.5])
    check_rule(fn, x, reference=ref, exact=True, name=name, n_directions=2)


@pytest.mark.parametrize("name, fn, ref, kinks", CASES[:16:3], ids=IDS[:16:3])
def test_float32_preserved(name, fn, ref, kinks):
    x = np.array(list(kinks) + [0.25], np.float32)
    assert np.asarray(fn(x)).dtype == np.float32
    assert asd.subgrad(lambda z: fn(z).sum())(x).dtype == np.float32


# ----- clip with array and traced bounds -----

@st.composite
def clip_problems(draw):
    lo = np.array(draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5]), min_size=3, max_size=3)))
    hi = lo + np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 2.0]), min_size=3, max_size=3)))
    pick = draw(st.lists(st.sampled_from(["lo", "hi", "in", "out"]), min_size=6, max_size=6))
    table = {"lo": lo, "hi": hi, "in": (lo + hi) / 2, "out": hi + 1}
    x = np.array([table[p][i % 3] for i, p in enumerate(pick)]).reshape(2, 3)
    return x, lo, hi


@settings(max_examples=60, deadline=None)
@given(problem=clip_problems(), data=st.data())
def test_clip_array_bounds(problem, data):
    x, lo, hi = problem
    v = data.draw(directions(x.shape), label="v")
    check_rule(lambda z: np.clip(z, lo, hi), x, direction=v, reference=ref_clip(lo, hi),
               exact=True, name="clip array bounds")


@settings(max_examples=60, deadline=None)
@given(problem=clip_problems(), data=st.data())
def test_clip_traced_bounds(problem, data):
    x, lo, hi = problem
    vs = tuple(data.draw(directions(a.shape), label=f"v{i}") for i, a in enumerate((x, lo, hi)))

    def ref(z, a, b):
        return np.minimum(np.maximum(z, a), b)

    check_rule(asd.clip, x, lo, hi, direction=vs, reference=ref, exact=True,
               name="clip traced bounds")


def test_clip_at_bounds_follows_the_direction():
    f = lambda x: np.clip(x, 0.0, 1.0).sum()  # noqa: E731
    x = np.array([0.0, 0.0, 1.0, 1.0])
    g = asd.subgrad(f, direction=np.array([1.0, -1.0, 1.0, -1.0]))(x)
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.0, 1.0])


def test_clip_with_equal_bounds_is_constant_along_any_direction():
    for v in (1.0, -1.0, 0.0):
        g = asd.subgrad(lambda x: x + np.clip(x, 0.5, 0.5), direction=v if v else None)(0.5)
        assert g == 1.0
    # traced equal bounds moving together: the output follows the bound, whatever x does
    g = asd.subgrad(lambda p: asd.clip(p[0], p[1], p[2]),
                    direction=np.array([1.0, 0.5, 0.5]))(np.array([0.5, 0.5, 0.5]))
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])


def test_clip_lo_above_hi_gives_hi_as_numpy():
    x = np.array([-1.0, 0.5, 3.0])
    np.testing.assert_array_equal(asd.clip(x, 2.0, 1.0), np.clip(x, 2.0, 1.0))
    np.testing.assert_array_equal(asd.subgrad(lambda z: asd.clip(z, 2.0, 1.0).sum())(x),
                                  np.zeros(3))


# ----- compositions: subgrad against the exact limiting gradient -----

COMPOSITIONS = [
    ("clip(x,0,inf) - clip(-x,0,inf) is x", lambda x: np.sum(np.clip(x, 0, None) -
                                                              np.clip(-x, 0, None))),
    ("soft_threshold + clip is x",
     lambda x: np.sum(asd.soft_threshold(x, 1.0) + np.clip(x, -1, 1))),
    ("10x - 9 * (a hinge form of 0)",
     lambda x: np.sum(10 * x - 9 * (1 - x - asd.hinge(x) + asd.hinge(2 - x)))),
    ("max of affine via maximum", lambda x: np.maximum(np.maximum(x[0] - x[1], x[1] - x[0]),
                                                       0.5 * (x[0] + x[1]) - 1.0)),
    ("relu6 of leaky", lambda x: np.sum(asd.relu6(asd.leaky_relu(x, 0.5) + 1.0))),
    ("huber of hinge", lambda x: np.sum(asd.huber(asd.hinge(x), 0.5))),
]
COMPOSITION_REFS = {
    "clip(x,0,inf) - clip(-x,0,inf) is x": lambda a: np.sum(np.maximum(a, 0) - np.maximum(-a, 0)),
    "soft_threshold + clip is x": lambda a: np.sum(a - ref_clip(-1, 1)(a) + ref_clip(-1, 1)(a)),
    "10x - 9 * (a hinge form of 0)": lambda a: np.sum(10 * a - 9 * (
        1 - a - np.maximum(0, 1 - a) + np.maximum(0, a - 1))),
    "max of affine via maximum": lambda a: np.maximum(np.maximum(a[0] - a[1], a[1] - a[0]),
                                                      0.5 * (a[0] + a[1]) - 1.0),
    "relu6 of leaky": lambda a: np.sum(ref_clip(0, 6)(np.maximum(a, 0.5 * a) + 1.0)),
    "huber of hinge": lambda a: np.sum(ref_huber(0.5)(np.maximum(0, 1 - a))),
}


@pytest.mark.parametrize("name, f", COMPOSITIONS, ids=[c[0] for c in COMPOSITIONS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_subgrad_of_compositions(name, f, data):
    x = data.draw(kink_arrays((2,), (0.0, 1.0, -1.0, -2.0, 2.0)), label="x")
    v = data.draw(directions((2,), allow_zero_entries=False), label="v")
    try:
        _, want = limiting_gradient(COMPOSITION_REFS[name], x, v, tie_order=1)
    except DegenerateTie:
        return
    g = asd.subgrad(f, direction=v)(x)
    np.testing.assert_allclose(g, np.asarray(want, dtype=float), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("v", [1.0, -1.0, 0.5, -3.0])
def test_identities_get_slope_one_at_every_kink(v):
    for f in (lambda x: np.clip(x, 0, None) - np.clip(-x, 0, None),
              lambda x: asd.soft_threshold(x, 1.0) + asd.hardtanh(x),
              lambda x: x - asd.soft_threshold(x, 0.5) + asd.soft_threshold(x, 0.5)):
        for x in (-1.0, -0.5, 0.0, 0.5, 1.0):
            assert asd.subgrad(f, direction=v)(x) == 1.0


# ----- where: ties with equal sides, jumps, degenerate ties -----

@settings(max_examples=40, deadline=None)
@given(x=kink_arrays((3,), (0.0, 1.0)), v=directions((3,)))
def test_where_ties_with_equal_sides_are_allowed(x, v):
    def f(z):
        return np.where(z > 1.0, 2 * z - 1.0, z * z)  # C^1 join at z = 1, and a kink-free 0

    check_rule(f, x, direction=v, exact=True, name="where C1")


@settings(max_examples=40, deadline=None)
@given(x=kink_arrays((3,), (0.0,)), y=kink_arrays((3,), (0.0,)), data=st.data())
def test_where_on_a_comparison_of_two_traced_values(x, y, data):
    vs = (data.draw(directions((3,)), label="vx"), data.draw(directions((3,)), label="vy"))

    def f(a, b):
        return np.where(a >= b, a, b)  # a max written with where

    check_rule(f, x, y, direction=vs, exact=True, name="where max")


@pytest.mark.parametrize("f", [
    lambda x: np.where(x > 0, 1.0 + x, x),
    lambda x: np.where(x < 1.0, x, 2.0 * x),
    lambda x: np.where(x == 0, 1.0, x),
])
def test_where_jump_raises(f):
    with pytest.raises(asd.NotLipschitzError, match="jumps"):
        asd.subgrad(lambda z: np.sum(f(z)))(np.array([0.0, 1.0]))


def test_where_degenerate_tie_is_recorded():
    f = lambda x: np.sum(np.where(x[0] - x[1] > 0, x[0] - x[1], 0.0))  # noqa: E731
    r = asd.asd(f, direction=np.array([1.0, 1.0]))(np.array([2.0, 2.0]))
    assert [t.primitive for t in r.degenerate] == ["where"]
    r = asd.asd(f, direction=np.array([1.0, -1.0]))(np.array([2.0, 2.0]))
    assert r.degenerate == [] and float(r.subgradient @ np.array([1.0, -1.0])) == 2.0


def test_where_with_a_constant_condition_selects():
    mask = np.array([True, False])
    g = asd.subgrad(lambda x: np.sum(np.where(mask, x, 2 * x)))(np.zeros(2))
    np.testing.assert_array_equal(g, [1.0, 2.0])


# ----- where of logical combinations of comparisons: &, |, ^, ~, np.logical_* -----
# (x > 0) & (x < 2) was a raw TypeError; each comparison of the combination decides its tie
# along the ray, and the where jumps only where the combined condition changes with the tied
# sides and a != b.

LOGIC = [
    ("and", lambda z: np.where((z > 0) & (z < 2), z * (2.0 - z), 0.0), (0.0, 2.0)),
    ("or", lambda z: np.where((z < 0) | (z >= 2.0), 0.0, z * (2.0 - z)), (0.0, 2.0)),
    ("not", lambda z: np.where(~(z > 1.0), 1.0, z), (1.0,)),
    ("xor", lambda z: np.where((z > 0) ^ (z > 1.0), z * (1.0 - z), 0.0), (0.0, 1.0)),
    ("logical_and/not", lambda z: np.where(np.logical_and(z >= 0, np.logical_not(z > 1.0)),
                                           z - z * z, 0.0), (0.0, 1.0)),
    ("logical_or/xor", lambda z: np.where(np.logical_or(z < 0, np.logical_xor(z > 2, True)),
                                          z * (z - 2.0), 0.0), (0.0, 2.0)),
]


@pytest.mark.parametrize("name, f, kinks", LOGIC, ids=[c[0] for c in LOGIC])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_where_of_a_logical_combination_on_its_kinks(name, f, kinks, data):
    """Each case is continuous (both branches agree where the condition switches), so on
    the kinks asd returns the exact one-sided derivative of the side the ray enters."""
    x = data.draw(kink_arrays((3,), kinks, bound=3.0), label="x")
    v = data.draw(directions((3,)), label="v")
    check_rule(f, x, direction=v, exact=True, name=name)


def test_where_of_a_logical_combination_refuses_its_jumps_only():
    f = lambda z: np.sum(np.where((z > 0) & (z < 2), z, 0.0))  # noqa: E731
    with pytest.raises(asd.NotLipschitzError, match=r"where_logic.*jumps.*a = \[2\.0\]"):
        asd.subgrad(f)(np.array([2.0, 1.0]))
    # at 0 both branches are 0: continuous, and many ties at once are fine (the engine's
    # replay of jumps stops at 8 cells; the rule checks each entry)
    for v, want in ((1.0, 1.0), (-1.0, 0.0)):
        g = asd.subgrad(f, direction=np.full(20, v))(np.zeros(20))
        np.testing.assert_array_equal(g, np.full(20, want))
    # the tied condition does not switch: x < 3 is true on both sides of x = 0
    g = asd.subgrad(lambda z: np.sum(np.where((z > 0) | (z < 3), z, 0.0)),
                    direction=np.array([-1.0]))(np.zeros(1))
    assert g.tolist() == [1.0]


def test_logical_values_used_as_numbers_and_refusals():
    x = np.array([0.5, 2.5, -1.0])
    g = asd.subgrad(lambda z: np.sum(((z > 0) & (z < 2)) * z))(x)
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.0])
    for v, want in ((1.0, 1.0), (-1.0, 0.0)):  # ((z > 0) & (z < 2)) z is continuous at 0
        assert asd.subgrad(lambda z: ((z > 0) & (z < 2)) * z, direction=v)(0.0) == want
    with pytest.raises(asd.NotLipschitzError):  # a step at 0: refused
        asd.subgrad(lambda z: ((z > 0) & (z < 2)) + z)(0.0)
    # non-boolean operands: logical_* read them as x != 0, & refuses with the fix
    g = asd.subgrad(lambda z: np.sum(np.where(np.logical_and(z, z - 2.0), z, 0.0)))(x)
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0])
    with pytest.raises(asd.UnsupportedError, match=r"Compare first: \(x > 0\) & \(y > 0\)"):
        asd.subgrad(lambda z: np.sum(z & z))(x)


# ----- defpiecewise and piecewise_polynomial: declarations and refusals -----

def test_piecewise_polynomial_refuses_a_jump_exactly():
    with pytest.raises(asd.NotLipschitzError, match=r"breakpoint x = 1\.0"):
        asd.piecewise_polynomial([1.0], [[0.0, 1.0], [1.0 + 2.0 ** -52]])
    # agreement exactly in rationals: 0.1 + 0.2 is not 0.3 in binary, so this one is refused
    with pytest.raises(asd.NotLipschitzError):
        asd.piecewise_polynomial([1.0], [[0.1, 0.2], [0.3]])
    asd.piecewise_polynomial([1.0], [[Fraction(1, 10), Fraction(2, 10)], [Fraction(3, 10)]])


@pytest.mark.parametrize("breakpoints, pieces", [
    ([0.0, 0.0], [[0.0], [0.0], [0.0]]),
    ([1.0, 0.0], [[0.0], [0.0], [0.0]]),
    ([0.0], [[0.0]]),
    ([0.0], [[0.0], "x"]),
])
def test_piecewise_polynomial_refuses_bad_tables(breakpoints, pieces):
    with pytest.raises(ValueError):
        asd.piecewise_polynomial(breakpoints, pieces)


def test_defpiecewise_with_callable_pieces_and_parameters():
    from asd.extend import defpiecewise

    cubic_relu = defpiecewise("cubic_relu", [0.0], [(lambda x: 0 * x, lambda x: 0 * x),
                                                    (lambda x: x ** 3, lambda x: 3 * x ** 2)])
    assert asd.subgrad(lambda x: cubic_relu(x).sum())(np.array([0.0, 2.0])).tolist() == [0, 12]
    ramp = defpiecewise("ramp", lambda t: ([0.0, t], [[0.0], [0.0, 1.0], [t]]))
    np.testing.assert_array_equal(ramp(np.array([-1.0, 0.5, 3.0]), t=2.0), [0.0, 0.5, 2.0])
    with pytest.raises(asd.NotLipschitzError):
        defpiecewise("bad", [0.0], [(np.sin, np.cos), (np.cos, np.sin)])


def test_parameters_must_be_constants():
    with pytest.raises(asd.UnsupportedError, match="constant"):
        asd.subgrad(lambda x: asd.leaky_relu(x, negative_slope=x))(1.0)
    # traced thresholds go through clip instead, with the same ties
    g = asd.subgrad(lambda p: asd.soft_threshold(p[0], p[1]),
                    direction=np.array([1.0, 0.0]))(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(g, [1.0, -1.0])


# ----- kinks the tangent leaves open are decided by the exact series along the ray -----

def bent(x):
    """0 at x = 0 with zero tangent along (v0, 0): -δ² v0² (below every kink at 0)."""
    return x[1] - x[0] * x[0]


SERIES_CASES = [
    ("leaky_relu", lambda x: asd.leaky_relu(bent(x), 0.25),
     lambda x: np.maximum(bent(x), 0.25 * bent(x))),
    ("hinge", lambda x: asd.hinge(1.0 + bent(x)), lambda x: np.maximum(0.0, -bent(x))),
    ("hardtanh", lambda x: asd.hardtanh(1.0 - bent(x)), lambda x: ref_clip(-1, 1)(1.0 - bent(x))),
    ("piecewise_polynomial", lambda x: USER_POLY(bent(x)), lambda x: ref_user_poly(bent(x))),
    ("clip at lo", lambda x: np.clip(bent(x), 0.0, 1.0), lambda x: ref_clip(0, 1)(bent(x))),
    ("clip at hi", lambda x: np.clip(-bent(x), -1.0, 0.0), lambda x: ref_clip(-1, 0)(-bent(x))),
    ("clip traced bounds", lambda x: asd.clip(x[1], x[0] * x[0], 1.0 + x[0]),
     lambda x: np.minimum(np.maximum(x[1], x[0] * x[0]), 1.0 + x[0])),
]


@pytest.mark.parametrize("name, f, ref", SERIES_CASES, ids=[c[0] for c in SERIES_CASES])
@pytest.mark.parametrize("v", [np.array([1.0, 0.0]), np.array([-0.5, 0.0])])
def test_degenerate_kinks_follow_the_exact_series(name, f, ref, v):
    x = np.zeros(2)
    g = asd.subgrad(f, direction=v)(x)
    _, want = limiting_gradient(ref, x, v)
    np.testing.assert_array_equal(g, np.asarray(want, dtype=float), err_msg=name)
