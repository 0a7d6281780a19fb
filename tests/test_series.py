"""Series along the ray (asd/core/series.py): exactness, nested lexicographic order, strict signs,
elementary functions at exact points; checked against sympy's exact Taylor expansions."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from asd.core.series import (
    ENDS,
    Interval,
    RaySeries,
    Series,
    TranscendentalConstant,
    UnprovenSign,
    leading_vector,
)

small = st.fractions(min_value=-4, max_value=4, max_denominator=8)


def coefficients_of(expr, n: int) -> list[Fraction]:
    t = sympy.Symbol("t")
    poly = sympy.series(expr(t), t, 0, n + 1).removeO()
    return [Fraction(str(sympy.nsimplify(poly.coeff(t, k)))) for k in range(n + 1)]


# ----- exactness: a zero is proven only where nothing was cut off -----

@given(st.lists(small, min_size=1, max_size=4), st.lists(small, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_products_stay_exact_while_their_degree_fits(a, b):
    p, q = Series(a, order=6), Series(b, order=6)
    product = p * q
    assert product.exact
    assert (product - q * p).proven_sign() == 0


def test_truncation_makes_a_zero_unproven():
    d = Series([0, 1], order=3)
    assert (d ** 4).coeffs == () and not (d ** 4).exact
    assert (d ** 4).proven_sign() is None and (d ** 4).sign() == 0  # lenient sign for the oracle
    assert (1 / (1 + d)).exact is False and Series([2], order=3).reciprocal().exact


def test_ray_series_refuse_to_compare_what_truncation_hides():
    d = RaySeries([0, 1], order=3)
    with pytest.raises(UnprovenSign):
        _ = d ** 4 > 0
    assert (d ** 3 > 0) is True and (d - d == 0) is True


# ----- nested series: the lexicographic order of x + ε1 v + ε2 w -----

def nested(inner: list, outer_rest: list, order: int = 6) -> RaySeries:
    return RaySeries._new([RaySeries(inner, order, 0), *map(Fraction, outer_rest)], order, 1,
                          True)


def test_every_term_of_the_earlier_variable_dominates_the_later_one():
    # ε1**5 > 0 beats -ε2, whatever the coefficients
    assert nested([0, 0, 0, 0, 0, 1], [-1000]).proven_sign() == 1
    # the ε1 part vanishes: the ε2 coefficient decides
    assert nested([0], [-1]).proven_sign() == -1
    assert nested([0], [0, 3]).proven_sign() == 1  # ε2**2 after a zero ε2 term


@given(st.lists(small, min_size=1, max_size=3), st.lists(small, min_size=1, max_size=3),
       st.lists(small, min_size=1, max_size=3), st.lists(small, min_size=1, max_size=3))
@settings(max_examples=60, deadline=None)
def test_nested_arithmetic_is_a_ring(a, b, c, d):
    x, y = nested(a, b), nested(c, d)
    assert ((x + y) * (x - y) - (x * x - y * y)).proven_sign() == 0
    inner = RaySeries(c, 6, 0)
    assert ((x * inner) - (inner * x)).proven_sign() == 0  # mixed levels, both orders
    assert ((inner - x) + (x - inner)).proven_sign() == 0


def test_numpy_object_loops_order_nested_series():
    a = np.array([nested([0], [1]), nested([0, 1], [-5]), nested([0], [-1])], dtype=object)
    assert list(np.argsort(a)) == [2, 0, 1]
    assert np.maximum(a, 0)[2] == 0


# ----- elementary functions where their Taylor coefficients are rational -----

@pytest.mark.parametrize("name, expr", [
    ("exp", sympy.exp), ("expm1", lambda t: sympy.exp(t) - 1), ("sin", sympy.sin),
    ("cos", sympy.cos), ("tan", sympy.tan), ("sinh", sympy.sinh), ("cosh", sympy.cosh),
    ("tanh", sympy.tanh), ("arctan", sympy.atan), ("arctanh", sympy.atanh),
    ("log1p", lambda t: sympy.log(1 + t)),
])
def test_elementary_functions_at_zero_match_sympy(name, expr):
    d = RaySeries([0, 1], order=9)
    got = getattr(d, name)()
    want = coefficients_of(expr, 9)
    assert [got.coefficient(k) for k in range(10)] == want
    assert not got.exact  # an infinite series, truncated


def test_log_at_one_and_roots_of_perfect_squares():
    d = RaySeries([0, 1], order=5)
    assert [(1 + d).log().coefficient(k) for k in range(6)] == coefficients_of(
        lambda t: sympy.log(1 + t), 5)
    root = (Fraction(9, 4) + d).sqrt()
    assert [root.coefficient(k) for k in range(6)] == coefficients_of(
        lambda t: sympy.sqrt(sympy.Rational(9, 4) + t), 5)
    with pytest.raises(TranscendentalConstant):
        (-2 + d).sqrt()  # outside the domain
    with pytest.raises(TranscendentalConstant):
        (-1 + d).log1p()


def test_elementary_functions_of_nested_series():
    # sin(ε2) with the ε1 part zero: the ε2 expansion, exactly; sin(ε1 + ε2) mixes both
    s = nested([0], [1]).sin()
    assert s.coefficient(1) == 1 and s.coefficient(3) == Fraction(-1, 6)
    both = nested([0, 1], [1]).sin()
    assert both.coefficient(0).coefficient(3) == Fraction(-1, 6)  # sin(ε1) part
    assert both.coefficient(1).coefficient(2) == Fraction(-1, 2)  # ε2 cos(ε1) part


# ----- the direction a vector of series leaves along -----

def test_leading_vector_reads_the_lexicographically_first_monomial():
    entries = [nested([0, 0, 2], [5]), nested([0, 0, -1], [0]), nested([0], [7])]
    assert leading_vector(entries) == [2, -1, 0]  # ε1**2 beats ε2
    assert leading_vector([nested([0], [0, 3]), nested([0], [1])]) == [0, 1]
    assert leading_vector([nested([0], []), RaySeries([0], 6, 0)]) is None


# ----- transcendental constants: enclosed, and signs proven only where they separate -----

@pytest.mark.parametrize("name, fn", [
    ("exp", sympy.exp), ("sin", sympy.sin), ("cos", sympy.cos), ("tanh", sympy.tanh),
    ("log", sympy.log), ("sqrt", sympy.sqrt), ("arctan", sympy.atan), ("sinh", sympy.sinh),
    ("cosh", sympy.cosh), ("arctanh", sympy.atanh), ("cbrt", sympy.cbrt), ("tan", sympy.tan),
    ("log1p", lambda t: sympy.log(1 + t)),
])
def test_series_at_irrational_points_enclose_the_taylor_coefficients(name, fn):
    c = Fraction(3, 4)
    got = getattr(RaySeries([c, 1], order=5), name)()
    t = sympy.Symbol("t")
    poly = sympy.series(fn(sympy.Rational(3, 4) + t), t, 0, 6).removeO()
    for k in range(6):
        exact, coeff = poly.coeff(t, k), got.coefficient(k)
        if not isinstance(coeff, Interval):  # a rational coefficient: equal exactly
            assert sympy.Rational(coeff.numerator, coeff.denominator) == exact, (name, k)
            continue
        lo, hi = (sympy.Rational(e.numerator, e.denominator) for e in (coeff.lo, coeff.hi))
        assert (exact - lo).evalf(100) >= 0 and (hi - exact).evalf(100) >= 0, (name, k)
        assert coeff.hi - coeff.lo < Fraction(1, 2**200)


def test_interval_signs_are_proven_only_where_they_separate():
    d = RaySeries([Fraction(1, 2), 1], order=3)
    assert (d.exp() - d.exp()).proven_sign() is None  # the same enclosure twice: unproven
    assert (d.exp() - Fraction(33, 20)).proven_sign() == -1  # e**0.5 = 1.6487... < 1.65
    with pytest.raises(UnprovenSign):
        _ = d.exp() - d.exp() > 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.fractions(min_value=Fraction(1, 8), max_value=8, max_denominator=10 ** 9),
                min_size=20, max_size=40))
def test_interval_products_enclose_the_exact_product_with_bounded_ends(factors):
    """A product of many enclosures (each of width about 2^-256, as mpmath gives them) keeps
    the exact product inside, and its ends no longer grow with every factor: they are
    rounded outward to `ENDS` bits."""
    exact, box = Fraction(1), Interval(Fraction(1), Fraction(1))
    for f in factors:
        exact *= f
        box = box * Interval(f - Fraction(1, 2 ** 256), f + Fraction(1, 2 ** 256))
    assert box.lo <= exact <= box.hi
    assert box.hi - box.lo <= exact * Fraction(1, 2 ** 200)
    for end in (box.lo, box.hi):
        assert end.numerator.bit_length() + end.denominator.bit_length() <= 4 * ENDS


# ----- integer parts: constant along the ray, jumps decided by proven signs (F77) -----

def _at(s: Series, delta: Fraction) -> Fraction:
    """An exact series' value at ``delta`` (nested levels: ``delta`` for every variable)."""
    return sum((_at(c, delta) if isinstance(c, Series) else c) * delta ** k
               for k, c in enumerate(s.coeffs)) if s.coeffs else Fraction(0)


def _rint(q: Fraction) -> int:
    return round(q)  # Python's round of a Fraction: halves to even, as numpy's rint


# constant terms on integers, halves and thirds: where the integer parts jump
planted = st.sampled_from([Fraction(k, 2) for k in range(-6, 7)] + [Fraction(1, 3)])
tail = st.lists(st.fractions(min_value=-3, max_value=3, max_denominator=4), max_size=3)


@settings(max_examples=200, deadline=None)
@given(planted, tail, st.sampled_from([Fraction(2), Fraction(-2), Fraction(1, 2), 0.75]))
def test_integer_parts_are_their_values_along_the_ray(c0, rest, divisor):
    """floor, ceil, trunc, rint, ``//`` and ``%`` of an exact series equal the functions of
    its value at every small delta (here 2**-40: coefficients are at most 3, so the leading
    term decides every sign), on both sides of each jump and on it."""
    import math

    s = RaySeries([c0, *rest], order=6)
    delta = Fraction(1, 2 ** 40)
    value = _at(s, delta)
    for got, want in [(math.floor(s), math.floor(value)), (math.ceil(s), math.ceil(value)),
                      (math.trunc(s), math.trunc(value)), (s.rint(), _rint(value)),
                      (s // divisor, value // Fraction(divisor))]:
        assert got.exact and got.coeffs[1:] == () and _at(got, delta) == want
    r = s % divisor
    assert r.exact and _at(r, delta) == value % Fraction(divisor)
    assert np.remainder(np.array([s], dtype=object), divisor)[0].coeffs == r.coeffs
    if c0 != 0 and rest:  # a constant over the series: its reciprocal is exact to order 6
        q = 3 // s
        assert q.coeffs[1:] == () and _at(q, delta) == 3 // value


def test_integer_parts_of_nested_series_read_the_later_directions():
    # 1 + 0 ε1 - ε2: the first direction stays on the integer, the second leaves it downwards
    s = nested([1], [-1])
    assert _at(RaySeries.__floor__(s), Fraction(0)) == 0 and (s % 1 > 0) is True
    s = nested([1], [0, 1])  # 1 + ε2**2: above
    assert RaySeries.__floor__(s).coeffs == (1,)


def test_an_integer_part_the_series_cannot_decide_is_unproven():
    d = RaySeries([0, 1], order=3)
    with pytest.raises(UnprovenSign) as truncated:  # 2 + d**4: zero so far, cut off
        _ = (2 + d ** 4) // 1
    assert truncated.value.truncated
    around_two = RaySeries._new([Interval(Fraction(199, 100), Fraction(201, 100))], 3)
    with pytest.raises(UnprovenSign) as interval:
        _ = around_two % 2
    assert not interval.value.truncated
    inside = RaySeries._new([Interval(Fraction(21, 10), Fraction(22, 10)), Fraction(1)], 3)
    assert (inside // 1).coeffs == (2,)


# ----- a quantity less itself is exactly zero, though its enclosures have width -----

def test_a_series_less_itself_is_an_exact_zero():
    e = RaySeries._new([Interval(Fraction(1), Fraction(2)), Fraction(1)], 6)
    assert (e - e).proven_sign() == 0 and (e - e).exact
    assert (e - RaySeries._new(list(e.coeffs), 6)).proven_sign() is None  # another quantity
    i = Interval(Fraction(1), Fraction(2))
    assert (i - i).sign() == 0 and (i - Interval(i.lo, i.hi)).sign() is None


def test_a_tie_on_a_transcendental_less_itself_is_decided_equal():
    """numpy campaign seed 3013: ``abs(s - s)`` with ``s = sinh(clip(x))`` at -1.5: the exact
    series of ``s`` holds interval constants, and their difference, [-w, w], hid the zero
    until order 64 (seconds per call), then was called flat. ``s - s`` is exactly 0."""
    import asd

    def f(x):
        s = np.sinh(np.clip(x, -2, 2))
        return np.abs(s - s).sum() + s.mean()

    r = asd.asd(f, direction=np.array([3.0, 3.0, 3.0]), seed=0)(np.array([0.0, -1.5, 0.0]))
    assert [str(d) for d in r.decisions] == ["%4 abs: 3 by equal"]
    assert r.element == "limiting gradient along the direction"
    assert np.allclose(r.subgradient, np.cosh([0.0, -1.5, 0.0]) / 3, rtol=1e-15, atol=0)


def test_identities_keep_the_quantity():
    """``s * 1``, ``s + 0`` and snapping ``s`` to its own constant are ``s`` itself, so a
    quantity carried through them and compared with itself is an exact 0."""
    s = RaySeries._new([Interval(Fraction(1), Fraction(2)), Fraction(1)], 6)
    assert s * 1 is s and 1.0 * s is s and s + 0 is s and 0.0 + s is s
    t = RaySeries([Fraction(1, 3), 1], 6)
    assert t.with_constant(Fraction(1, 3)) is t and t.with_constant(0.5) is not t
    assert (t * True - t).proven_sign() == 0


def test_a_tie_of_a_transcendental_with_itself_through_a_step_is_decided_equal():
    """numpy campaign seed 3013: ``maximum(s * (x >= c), s)`` where the step is 1, with ``s``
    transcendental and 0 at the point: its series agreed to order 64 (seconds), unproven, and
    the tie was called flat. ``s * 1`` is ``s``: decided equal, the limiting gradient."""
    import asd

    def f(x):
        s = np.sinh(x) - x
        return np.maximum(s * (x >= -1), s).sum()

    r = asd.asd(f, direction=np.array([1.0, 0.25, 1.0]), seed=0)(np.zeros(3))
    assert [str(d) for d in r.decisions] == ["%5 maximum: 3 by equal"]
    assert r.element == "limiting gradient along the direction"


# ----- sqrt at 0: a quantity vanishing to even order (a norm of a row leaving 0) -----

@settings(max_examples=100, deadline=None)
@given(st.sampled_from([Fraction(1), Fraction(4), Fraction(9, 4), Fraction(2)]),
       st.integers(1, 3), st.lists(small, max_size=3))
def test_sqrt_at_zero_of_an_even_order_quantity(c, k, rest):
    s = RaySeries([0] * (2 * k) + [c, *rest], order=12)
    r = s.sqrt()
    assert r.valuation() == k and r.order == 12 - k
    delta = Fraction(1, 2 ** 30)
    squared = _at(r * r, delta) if r.exact else None
    lead = r.coefficient(k)
    if isinstance(lead, Interval):  # sqrt(2): enclosed
        assert lead.lo ** 2 <= c <= lead.hi ** 2
    else:
        assert lead ** 2 == c
        if squared is not None:
            assert squared == _at(s, delta)
    d = RaySeries([0, 1], 12)
    assert (((d * d) * 4).sqrt() - 2 * d).proven_sign() == 0


def test_sqrt_at_zero_refuses_what_is_no_power_series():
    d = RaySeries([0, 1], 3)
    with pytest.raises(TranscendentalConstant):
        (d ** 3).sqrt()  # δ^(3/2)
    with pytest.raises(TranscendentalConstant):
        (-(d ** 2)).sqrt()  # negative along the ray
    with pytest.raises(UnprovenSign):
        (d ** 4).sqrt()  # zero so far, cut off
    assert RaySeries([], 3).sqrt().proven_sign() == 0


def test_exact_roots_of_huge_fractions():
    """A direction of 1e-301 squared twice is a Fraction of thousands of bits: its root is
    found with integers (a float conversion overflowed)."""
    v = Fraction(1.8665272370064378e-301)
    assert RaySeries([v ** 4], 3).sqrt().coeffs == (v ** 2,)
