"""Discontinuous primitives (library/discontinuous.py): locally constant off their jumps, a
refusal naming the node at a jump that reaches the output, and acceptance where the
composite stays continuous across the jump, with the derivative of the side the ray enters
(checked by `check_rule` against the exact oracle of the continuous reference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.testing import check_rule
from asd.testing.strategies import directions, kink_arrays

# name, function, where it jumps (sample points), a generic point off the jumps
CASES = [
    ("sign", np.sign, [0.0], [0.3, -1.7, 2.2]),
    ("floor", np.floor, [-2.0, 0.0, 1.0, 3.0], [0.3, -1.7, 2.2]),
    ("ceil", np.ceil, [-2.0, 0.0, 1.0], [0.3, -1.7, 2.2]),
    ("trunc", np.trunc, [-2.0, 1.0, 3.0], [0.3, -1.7, 2.2]),
    ("fix", np.fix, [-1.0, 2.0], [0.3, -1.7, 2.2]),
    ("rint", np.rint, [-1.5, 0.5, 2.5], [0.3, -1.7, 2.2]),
    ("round", np.round, [-0.5, 1.5], [0.3, -1.7, 2.2]),
    ("around 1", lambda x: np.around(x, 1), [0.25, -0.75], [0.3125, -1.6875, 2.1875]),
    ("round -1", lambda x: np.round(x, -1), [15.0, -25.0], [0.3, -1.7, 2.2]),
    ("heaviside", lambda x: np.heaviside(x, 0.5), [0.0], [0.3, -1.7, 2.2]),
    ("angle", np.angle, [0.0], [0.3, -1.7, 2.2]),
    ("angle deg", lambda x: np.angle(x, deg=True), [0.0], [0.3, -1.7, 2.2]),
    ("floor_divide", lambda x: x // 0.5, [-1.0, 0.5, 1.5], [0.3, -1.7, 2.2]),
    ("floor_divide negative", lambda x: np.floor_divide(x, -0.5), [0.5, -1.0],
     [0.3, -1.7, 2.2]),
    ("mod", lambda x: np.mod(x, 0.5), [-1.0, 0.5], [0.3, -1.7, 2.2]),
    ("less", lambda x: x < 0.5, [0.5], [0.3, -1.7, 2.2]),
    ("equal", lambda x: np.equal(x, 1.0), [1.0], [0.3, -1.7, 2.2]),
    ("astype of >=", lambda x: (x >= 0.0).astype(np.float64), [0.0], [0.3, -1.7, 2.2]),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name, fn, jumps, generic", CASES, ids=IDS)
def test_locally_constant_off_the_jumps(name, fn, jumps, generic):
    x = np.array(generic)
    slope = 1.0 if name == "mod" else 0.0
    value, g = asd.value_and_subgrad(lambda z: np.sum(fn(z) + 0.0) + 2.0 * z[0])(x)
    np.testing.assert_array_equal(g, [2.0 + slope, slope, slope])
    assert value == np.sum(fn(x) + 0.0) + 2.0 * x[0]


@pytest.mark.parametrize("name, fn, jumps, generic", CASES, ids=IDS)
def test_a_jump_reaching_the_output_is_refused_naming_the_node(name, fn, jumps, generic):
    x = np.array(jumps[:1] + [generic[0]])
    with pytest.raises(asd.NotLipschitzError, match=r"%\d+ = \w+ .*differentiated output"):
        asd.subgrad(lambda z: np.sum(fn(z) * 1.0) + np.sum(z))(x)


@pytest.mark.parametrize("name, fn, jumps, generic", CASES, ids=IDS)
def test_stop_gradient_cuts_the_jump_off(name, fn, jumps, generic):
    x = np.array(jumps[:1] + [generic[0]])
    g = asd.subgrad(lambda z: np.sum(asd.stop_gradient(fn(z)) * z))(x)
    np.testing.assert_array_equal(g, np.asarray(fn(x), dtype=float))


# Continuous composites across the jumps: check_rule against the continuous reference, on
# the jumps, along directions with zero entries (the tie then persists along v).
CONTINUOUS = [
    ("x sign(x)", lambda x: x * np.sign(x), np.abs, (0.0,)),
    ("x heaviside(x)", lambda x: x * np.heaviside(x, 0.25), lambda a: np.maximum(a, 0.0),
     (0.0,)),
    ("(x > 0) x", lambda x: (x > 0) * x, lambda a: np.maximum(a, 0.0), (0.0,)),
    ("(x <= 1) (x - 1)", lambda x: (x <= 1.0) * (x - 1.0), lambda a: np.minimum(a - 1.0, 0.0),
     (1.0,)),
    ("(x - floor x)(1 - x + floor x)", lambda x: _bump(x - np.floor(x)), None, (-1.0, 0.0, 2.0)),
    ("x % 1 bump", lambda x: _bump(x % 1.0), None, (-1.0, 0.0, 2.0)),
    ("ceil bump", lambda x: _bump(np.ceil(x) - x), None, (-1.0, 0.0, 2.0)),
]


def _bump(frac):
    return frac * (1.0 - frac)


def _bump_reference(x):
    """frac(1 - frac) on the piece the ray enters, with frac's integer part fixed at x."""
    n = np.round(np.asarray(x, dtype=float))
    return lambda a: np.where(a >= n, _bump(a - n), _bump(a - n + 1.0))


@pytest.mark.parametrize("name, fn, ref, jumps", CONTINUOUS, ids=[c[0] for c in CONTINUOUS])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_continuous_composite_across_a_jump(name, fn, ref, jumps, data):
    x = data.draw(kink_arrays((3,), jumps, bound=2.0), label="x")
    if ref is None:  # the bumps: every entry on an integer
        x = np.array(data.draw(st.lists(st.sampled_from(jumps), min_size=3, max_size=3)))
        ref = _bump_reference(x)
    v = data.draw(directions((3,)), label="v")
    check_rule(fn, x, direction=v, reference=ref, exact=True, name=name)


# Continuous composites of the other jumps, at points all on jumps: (function, jump points,
# the piece right of a jump point p, the piece left of it), pieces as functions of (a, p).
def _centred(d):
    return d * d - 0.25  # 0 where the rounding error d is +-1/2: continuous across the jump


ON_JUMPS = [
    ("rint", lambda x: _centred(x - np.rint(x)), (-1.5, 0.5, 2.5),
     lambda a, p: _centred(a - p - 0.5), lambda a, p: _centred(a - p + 0.5)),
    ("round", lambda x: _centred(x - np.round(x)), (-0.5, 1.5),
     lambda a, p: _centred(a - p - 0.5), lambda a, p: _centred(a - p + 0.5)),
    ("trunc", lambda x: _bump(x - np.trunc(x)), (1.0, 2.0, 4.0),
     lambda a, p: _bump(a - p), lambda a, p: _bump(a - p + 1.0)),
    ("floor_divide", lambda x: _bump(x / 0.5 - x // 0.5), (-1.0, 0.0, 1.5),
     lambda a, p: _bump((a - p) / 0.5), lambda a, p: _bump((a - p) / 0.5 + 1.0)),
    ("floor_divide by -0.5", lambda x: _bump(x / -0.5 - x // -0.5), (-1.0, 0.5),
     lambda a, p: _bump((a - p) / -0.5 + 1.0), lambda a, p: _bump((a - p) / -0.5)),
]


@pytest.mark.parametrize("name, fn, jumps, right, left", ON_JUMPS,
                         ids=[c[0] for c in ON_JUMPS])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_continuous_composite_on_jumps(name, fn, jumps, right, left, data):
    x = np.array(data.draw(st.lists(st.sampled_from(jumps), min_size=3, max_size=3)))
    v = data.draw(directions((3,)), label="v")
    check_rule(fn, x, direction=v, reference=lambda a: np.where(a >= x, right(a, x),
                                                                left(a, x)),
               exact=True, name=name)


def test_sign_times_x_is_abs_with_the_side_of_the_direction():
    for v in (1.0, -1.0):
        assert asd.subgrad(lambda x: x * np.sign(x), direction=v)(0.0) == v
    np.testing.assert_array_equal(
        asd.subgrad(lambda x: np.sum(x * np.sign(x)), directions=[np.zeros(2),
                                                                  np.array([1.0, -1.0])])(
            np.zeros(2)), [1.0, -1.0])


def test_count_of_a_comparison_at_a_generic_point():
    x, y = np.array([0.3, 2.0, -1.0]), np.array([1.0, 1.0, 1.0])
    assert asd.subgrad(lambda x: np.sum(x < y) + 0.0)(x).tolist() == [0.0, 0.0, 0.0]


def test_refusal_says_the_values_on_both_sides():
    with pytest.raises(asd.NotLipschitzError) as info:
        asd.subgrad(lambda x: np.floor(x) * 2.0, direction=1.0)(1.0)
    msg = str(info.value)
    assert "%1 = floor %0" in msg and "2." in msg and "0." in msg and "stop_gradient" in msg


def test_two_jumps_in_one_output_enumerate_their_sides_together():
    f = lambda x: x[0] * np.sign(x[0]) + x[1] * np.sign(x[1])  # noqa: E731  (|x0| + |x1|)
    assert asd.subgrad(f, direction=np.array([1.0, -1.0]))(np.zeros(2)).tolist() == [1.0, -1.0]
    with pytest.raises(asd.NotLipschitzError):
        asd.subgrad(lambda x: np.sign(x[0]) * np.sign(x[1]) + x[0])(np.zeros(2))


def test_too_many_entries_on_jumps_are_refused_with_the_reason():
    with pytest.raises(asd.NotLipschitzError, match="at most 8"):
        asd.subgrad(lambda x: np.sum(x * np.sign(x)))(np.zeros(9))


def test_a_later_discontinuity_moved_onto_its_jump_by_a_jump_is_refused():
    """The inner sign's sides (+-0.5, shifted by -0.5) put the outer sign's input on its own
    jump at 0, where its value is not its limit from that side: refused (F51)."""
    with pytest.raises(asd.NotLipschitzError, match=r"moves %.*itself discontinuous"):
        asd.subgrad(lambda x: x * np.sign(np.sign(x) * 0.5 + x - 0.5))(0.0)


def test_a_later_discontinuity_moved_off_its_jump_by_a_jump_is_evaluated_there():
    """``x * sign(sign(x) / 2 + x)`` is ``|x|``: the inner sign's sides move the outer sign's
    input to +-1/2, off its jump, where its value is its limit, so the replay shows the
    output continuous (it was refused before F51's replay knew where a sign jumps)."""
    def f(x):
        return x * np.sign(np.sign(x) * 0.5 + x)

    for d in (1.0, -1.0):
        value, slope = asd.directional(f)(0.0, d)
        assert value == 0.0 and slope == 1.0           # |x| along either way
        assert asd.subgrad(f, direction=d)(0.0) == d


def test_a_traced_h0_is_refused_with_the_fix():
    with pytest.raises(asd.UnsupportedError, match=r"h0.*where"):
        asd.subgrad(lambda x: np.heaviside(x[0], x[1]))(np.array([1.0, 2.0]))


# ----- a traced divisor: x % c, c % x, x // c with c traced -----

X_C = (np.array([2.3, -1.7, 0.9, 5.5]), np.array([0.75, 0.75, -0.4, 2.0]))
V_C = (np.array([0.5, -1.0, 0.25, 1.0]), np.array([-0.25, 0.5, 1.0, -0.75]))


@pytest.mark.parametrize("op", ["%", "//"])
def test_a_traced_divisor_off_the_jumps(op):
    """x % c and x // c with both traced (np.remainder refused a traced divisor): slopes 1
    and -floor(x / c) (0 and 0 for //), against the exact oracle of the piece the point is
    on, with numpy's value."""
    q = np.floor_divide(*X_C)
    if op == "%":
        fn, ref = (lambda x, c: x % c), (lambda x, c: x - c * q)
    else:
        fn, ref = (lambda x, c: (x // c) * x), (lambda x, c: q * x)
    check_rule(fn, *X_C, direction=V_C, reference=ref, exact=True, name=f"x {op} c")
    check_rule(lambda c: 7.0 % c, X_C[1], direction=V_C[1], exact=True, name="7 % c",
               reference=lambda c: 7.0 - c * np.floor_divide(7.0, X_C[1]))
    assert asd.jacobian(lambda x: x % x)(X_C[0]).tolist() == np.zeros((4, 4)).tolist()


def test_a_traced_divisor_at_a_jump_is_refused_and_continuous_uses_pass():
    """Where c divides x the remainder jumps by c (refused); frac (1 - frac) of x / c is
    continuous there and gets the derivative of the side the ray enters: d(x / c) > 0 keeps
    the quotient (frac from 0), < 0 takes one less (frac from 1)."""
    at = (np.array([2.0, -3.0]), np.array([1.0, 1.5]))
    with pytest.raises(asd.NotLipschitzError, match=r"remainder_xy.*jumps"):
        asd.subgrad(lambda x, c: np.sum(x % c), argnums=(0, 1))(*at)
    with pytest.raises(asd.NotLipschitzError, match=r"remainder_xy.*jumps"):
        asd.subgrad(lambda c: np.sum(6.0 % c))(np.array([2.0, 3.0]))
    for v in ((np.array([1.0, 1.0]), np.array([0.0, 0.0])),
              (np.array([1.0, -1.0]), np.array([1.0, -1.0]))):
        up = v[0] * at[1] - at[0] * v[1] > 0  # x / c increasing along the ray
        q = np.floor_divide(*at) - ~up
        check_rule(lambda x, c: _bump(x % c / c) * c, *at, direction=v, exact=True,
                   reference=lambda x, c, q=q: _bump((x - q * c) / c) * c, name="bump")


def test_a_traced_divisor_matches_numpy_on_and_off_the_jumps():
    x = np.array([-2.5, -1.0, 4.0, 0.5, 3.0, 2.2])
    c = np.array([0.5, 0.5, -2.0, 0.25, -1.5, 0.7])
    for fn in (np.remainder, np.floor_divide, lambda a, b: b % a):
        kept = []

        def f(a, b, fn=fn, kept=kept):
            y = asd.stop_gradient(fn(a, b))
            kept.append(y.value)
            return np.sum(y * b)

        asd.subgrad(f, argnums=(0, 1))(x, c)
        np.testing.assert_array_equal(kept[0], fn(x, c))


def test_values_match_numpy_including_on_the_jumps():
    x = np.array([-2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.5])
    for name, fn, _, _ in CASES:
        kept = []

        def f(z, fn=fn, kept=kept):
            y = asd.stop_gradient(fn(z))  # the value at the point, whichever side v enters
            kept.append(y.value)
            return np.sum(y * z)

        for v in (np.ones_like(x), -np.ones_like(x)):
            kept.clear()
            g = asd.subgrad(f, direction=v)(x)
            np.testing.assert_array_equal(kept[0], fn(x), err_msg=name)
            np.testing.assert_array_equal(g, np.asarray(fn(x), dtype=float), err_msg=name)


@pytest.mark.parametrize("v", [1.0, -1.0])
def test_remainder_by_an_array_of_divisors(v):
    c = np.array([0.5, 1.0, -2.0])
    check_rule(lambda x: _bump(x % c / c) * c, np.array(2.0), direction=np.array(v),
               reference=lambda a: _bump((a - 2.0) / c + ((v < 0) != (c < 0))) * c, exact=True,
               name="x % c, c an array")
    assert asd.jacobian(lambda x: x % c)(1.3).tolist() == [1.0, 1.0, 1.0]


def test_isclose_and_allclose_are_traced_predicates():
    """np.allclose on traced arrays was refused: it is all(|a - b| <= atol + rtol |b|), a
    traced boolean (a where condition, a number that jumps where it switches), and a Python
    `if` on it raises TracerBoolError like `if x > y:` (the documented choice)."""
    x = np.array([1.0, 2.0])
    g = asd.subgrad(lambda z: np.sum(np.where(np.isclose(z, 1.0), 0.0, z)))(x)
    np.testing.assert_array_equal(g, [0.0, 1.0])
    g = asd.subgrad(lambda z: np.sum(np.where(np.allclose(z, 2.0 * z - x), z, 3.0 * z)))(x)
    np.testing.assert_array_equal(g, [1.0, 1.0])
    g = asd.subgrad(lambda z: np.sum(np.where(np.allclose(z, 2.0 * z), z, 3.0 * z)))(x)
    np.testing.assert_array_equal(g, [3.0, 3.0])
    with pytest.raises(asd.TracerBoolError, match=r"bool\(\)"):
        asd.subgrad(lambda z: np.sum(z) if np.allclose(z, 0.0) else np.sum(2 * z))(x)
    assert asd.numpy.allclose(x, x) and not asd.numpy.allclose(x, 2 * x)
