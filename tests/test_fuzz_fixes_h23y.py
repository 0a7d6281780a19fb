"""Regression tests of fuzz findings F6, F12, F18, F19, F23 and F67 (tests/fuzz/findings.py), fixed
in the engine's tie service, series and tracer: each reproducer runs through the fuzz harness
(every transform against the exact or mpmath oracle), and the defect's own spelling is
checked against an oracle along the ray."""

from __future__ import annotations

import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import asd
from tests.fuzz import harness
from tests.programs import Op, Program


def _case(ops: list[Op], shapes: list[tuple[int, ...]], x, v, *, reduce: bool = True,
          dtype: str = "float64") -> harness.Case:
    return harness.Case(Program(tuple(ops), tuple(shapes), reduce), np.array(x, dtype=float),
                        np.array(v, dtype=float), dtype, "array", 0, 0)


def _failures(case: harness.Case) -> list[str]:
    """Every check of the fuzz harness that fails on ``case`` (none may)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, outcomes = harness.run_checks(case)
    assert expected is not None, outcomes
    return [f"{o.check} {o.status}: {o.detail}" for o in outcomes if o.failed]


# ----- F18: a tie between one quantity and itself is an equality, not an open question -----


def test_f18_reproducer_passes_every_check():
    """``where(a >= a, a + (a - a) * cbrt(|x| + 1/4), a)`` with ``a = arctan(x)``: the tie of
    ``a`` with itself is an equality on a neighbourhood, though its series is out of reach."""
    case = _case([Op("arctan", (0,)), Op("abs", (0,)), Op("add_constant", (2,), {"constant": 0.25}),
                  Op("cbrt", (3,)), Op("where", (1, 1, 1, 4), {"cmp": ">="})],
                 [(1, 1)] * 6, [[0.75]], [[1.0]])
    assert _failures(case) == []


def test_f18_structurally_equal_nodes_tie_as_equal():
    """Two separate ``np.arctan(x)`` nodes compared: the condition holds near x, so the
    result is arctan's derivative (mpmath), along both directions, and the decision is
    reported as an equality."""
    def f(x):
        a = np.arctan(x)
        return np.where(a >= np.arctan(x), a + (np.arctan(x) - np.arctan(x)) * np.cbrt(x + 1),
                        np.arctan(x)).sum()

    x = np.array([0.75])
    want = float(mpmath.diff(mpmath.atan, mpmath.mpf(0.75)))
    for d in (1.0, -1.0):
        r = asd.asd(f, direction=np.array([d]))(x)
        assert np.isclose(r.subgradient[0], want, rtol=1e-15, atol=0)
        assert any("equal" in str(dec) for dec in r.decisions), r.decisions


@pytest.mark.parametrize("d", [1.0, -1.0])
def test_f18_operations_with_an_identity_constant_keep_the_quantity(d):
    """``arctan(x) * 1 + 0 > arctan(x)`` is false near x (the fuzz CI's ``hypot(x, x) +
    [0, 0, 0] > hypot(x, x)`` in ``where_logic``): ``-x`` is taken, slope -v exactly."""
    def f(x):
        a = np.arctan(x)
        return np.where((a * 1.0 + np.zeros(1) > a) & (a >= np.arctan(x)), 2.0 * x, -x).sum()

    assert asd.directional(f)(np.array([0.75]), np.array([d])) == (0.0 * 0.75 - 0.75, -d)

    def g(x):  # identity in entry 0 only: there the tie is an equality, entry 1 is untied
        a = np.arctan(x)
        return np.where(a + np.array([0.0, 1.0]) > a, 2.0 * x, -x).sum()

    _, dot = asd.directional(g)(np.array([0.75, 0.75]), np.array([d, 3.0]))
    assert dot == -d + 6.0


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("d", [1.0, -1.0])
def test_f67_a_narrow_quantity_plus_a_float64_zero_is_the_quantity(dtype, d):
    """``arctan(x) + np.zeros(1) > arctan(x)`` with ``x`` in float16 or float32: the sum is in
    float64 (NEP 50), the narrow value widened exactly, so the tie is an equality near x, as
    in float64 (F18). It was refused as a flat tie (the identity constant was peeled only
    where the dtype stayed), and a campaign's float16 ``where_logic`` of such a tie took
    seconds climbing the exact series to the last order."""
    def f(x):
        a = np.arctan(x)
        return np.where(a + np.zeros(1) > a, 2.0 * x, -x).sum()

    r = asd.asd(f, direction=np.array([d]))(np.array([0.75], dtype))
    assert r.subgradient.tolist() == [-1.0]
    assert [str(dec) for dec in r.decisions] == ["%6 where: 1 by equal"]


# ----- F23: a smooth function of a pole's infinity is a limit, not a selection -----


@pytest.mark.parametrize("g", [
    lambda x: np.exp(np.log(np.abs(x))),  # |x|: slope 1, absorbed as 0 before
    lambda x: 1.0 / np.log(np.abs(x)),  # not Lipschitz at 0: slope -inf
    lambda x: np.arctan(np.log(np.abs(x))),  # not Lipschitz at 0
], ids=["exp", "reciprocal", "arctan"])
@pytest.mark.parametrize("d", [1.0, -1.0])
def test_f23_smooth_function_of_log_at_zero_is_refused(g, d):
    """exp(-inf) = 0 meets log's infinite slope: ``0 * inf`` is a limit the sweep cannot read
    (the derivative was 0, with no refusal). Every transform refuses, naming log at 0."""
    f = lambda x: g(x).sum()  # noqa: E731
    x, v = np.zeros(1), np.array([d])
    calls = [lambda: asd.directional(f)(x, v), lambda: asd.subgrad(f, direction=v)(x),
             lambda: asd.jacobian(g, direction=v)(x)]
    for call in calls:
        with pytest.raises(asd.NonFiniteError, match=r"%2 = log %1 produced \[-inf\].*x \*\* p"):
            call()


def test_f23_the_advice_works_and_selections_still_absorb():
    """The refusal's fix, ``np.abs(x) ** 1.0``, gives |x|'s one-sided derivative |v| (exact
    oracle); a pole behind a selection (relu, clip, maximum: constant near the point) keeps
    its exact derivative 0."""
    for d in (1.0, -1.0, 0.5):
        value, dot = asd.directional(lambda x: (np.abs(x) ** 1.0).sum())(np.zeros(1),
                                                                          np.array([d]))
        assert (value, dot) == (0.0, abs(Fraction(d)))
    for g in (lambda y: asd.relu(y), lambda y: np.clip(y, -1.0, 1.0),
              lambda y: np.maximum(y, -1.0)):
        for d in (1.0, -1.0):
            _, dot = asd.directional(lambda x: g(np.log(np.abs(x))).sum())(  # noqa: B023
                np.zeros(1), np.array([d]))
            assert dot == 0.0


# ----- F19: an item assignment's series holds series, not arrays of them -----


def test_f19_reproducer_passes_every_check():
    """``y = x.copy(); y[0] += x[0]`` then ``fmin(y + 0, y)``: a tie the series decides."""
    case = _case([Op("iadd", (0, 0), {"key": 0}), Op("add_constant", (1,), {"constant": (0.0,)}),
                  Op("fmin", (2, 1))], [(1,)] * 4, [0.0], [1.0])
    assert _failures(case) == []


@pytest.mark.parametrize("d", [1.0, -1.0])
def test_f19_a_written_entry_decides_a_tie_at_second_order(d):
    """``h = y - x = x0²`` after ``y[0] += x[0] * x[0]``: first order leaves the tie open and
    the series (δ² > 0 along both directions) selects ``3x``: f = 3x near 0, so the one-sided
    derivative is 3v (exact) and the gradient 3."""
    def f(x):
        y = x.copy()
        y[0] += x[0] * x[0]
        return np.where(y >= x, 3.0 * x, -x).sum()

    value, dot = asd.directional(f)(np.zeros(1), np.array([d]))
    assert (value, dot) == (0.0, 3 * Fraction(d))
    r = asd.asd(f, direction=np.array([d]))(np.zeros(1))
    assert r.subgradient.tolist() == [3.0]
    assert any("series" in str(dec) for dec in r.decisions), r.decisions


# ----- F12: the exact series has a budget; past it the tie is undecided, never guessed -----


def test_f12_reproducer_is_not_slow():
    """``max(cbrt(|x| + 1/4))`` over rows, one row tied along v: the nested exact series of
    cbrt at an irrational constant took 75 s; past its budget it is unavailable, and the
    order rule reads first order along v, w (harness: 3 s per check, mpmath oracle)."""
    case = _case([Op("abs", (0,)), Op("add_constant", (1,), {"constant": 0.25}),
                  Op("cbrt", (2,)), Op("method_max", (3,), {"axis": 1, "keepdims": True})],
                 [(3, 2), (3, 2), (3, 2), (3, 2), (3, 1)],
                 [[0.5, 0.5], [-2.0, -0.0], [0.0, -2.0]], [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    assert _failures(case) == []


def test_f12_series_past_the_budget_raise():
    """A product of series past the running budget raises `SeriesTooLarge`; outside a budget
    nothing is counted, and an exhausted budget stays exhausted for its next block."""
    from asd.core.series import Budget, RaySeries, SeriesTooLarge

    s = RaySeries([Fraction(1, 3), 1], 64) ** 8
    assert s.coefficient(8) == 1
    budget = Budget(100)
    with pytest.raises(SeriesTooLarge, match="budget"), budget:
        _ = s * s
    with pytest.raises(SeriesTooLarge), budget:
        _ = RaySeries([1, 1], 2) * RaySeries([1, 1], 2)
    with Budget(10 ** 9):
        assert (s * s).coefficient(16) == 1


def test_f12_where_past_the_budget_is_undecided(monkeypatch):
    """A ``where`` tie that only the exact series decides: with the budget exhausted it is
    refused (`UndecidedTieError` naming the node and the budget), not guessed; with the
    budget it is decided (h = cbrt(x² + 1/8) - 1/2 = (4/3) x² + ... > 0 along both
    directions: f = 2x near 0, slope 2v exactly)."""
    import asd.core.series as series

    def f(x):
        h = np.cbrt(x * x + 0.125) - 0.5
        return np.where(h >= 0, 2.0 * x, -x).sum()

    x = np.zeros(1)
    for d in (1.0, -1.0):
        assert asd.directional(f)(x, np.array([d])) == (0.0, 2 * Fraction(d))
    v = np.array([1.0])
    monkeypatch.setattr(series, "BUDGET", 10)
    with pytest.raises(asd.UndecidedTieError, match=r"= where .*BUDGET"):
        asd.directional(f)(x, v)


# ----- F6: a traced value written into a plain numpy array: refused, with spellings that work -----
# numpy stores the item itself (``ndarray.__setitem__`` does not dispatch), so the value would
# drop out of the program: the write cannot be recorded, and asd refuses it by name.

SOURCE = """
def into_constant(x):
    out = np.full(np.shape(x), 1.5)
    out[0] = (x[0]
              * 2.0)
    return out
"""


def _into_constant_without_source():
    """The fuzz op's spelling, compiled from a string (no source line to read, as under
    ``python -c`` or ``exec``), its statement over two lines."""
    scope = {"np": np}
    exec(compile(SOURCE, "<fuzz F6>", "exec"), scope)
    return scope["into_constant"]


def test_f6_refusal_names_the_array_even_without_source():
    """Without a readable source line numpy's wrapping ValueError ('setting an array element
    with a sequence') escaped raw; the instruction storing the item tells it apart."""
    f = _into_constant_without_source()
    x = np.array([0.5, 1.0])
    for call in (lambda: asd.jacobian(f)(x), lambda: asd.subgrad(lambda x: f(x).sum())(x),
                 lambda: asd.jit(asd.jacobian(f))(x)):
        with pytest.raises(asd.TracerBoolError, match=r"written into the plain numpy array "
                                                      r"'out'.*out = np.zeros\(n\) \+ x\[:0\]"):
            call()


def test_f6_the_refusals_advice_works():
    """Both spellings the refusal names record the write: the Jacobian of
    ``[2 x0, 1.5]`` is exact, and a relu on the written entry at its kink follows the ray."""
    def traced_zeros(x):
        out = np.full(np.shape(x), 1.5) + x[:0].sum()
        out[0] = x[0] * 2.0
        return out

    def stacked(x):
        return asd.numpy.stack([x[0] * 2.0, 1.5])

    x = np.array([0.5, 1.0])
    for g in (traced_zeros, stacked):
        assert asd.jacobian(g)(x).tolist() == [[2.0, 0.0], [0.0, 0.0]]
        for d in (1.0, -1.0):
            _, dot = asd.directional(lambda x: asd.relu(g(x) - 1.0).sum())(  # noqa: B023
                x, np.array([d, 3.0]))
            assert dot == max(0, 2 * Fraction(d))
