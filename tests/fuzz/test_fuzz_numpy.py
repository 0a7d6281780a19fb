"""Differential fuzzing of asd's numpy surface: a short, deterministic campaign for CI.

Random programs over the numpy API and ndarray methods asd claims (tests/fuzz/ops.py), with
ties planted at the point, constants of every dtype and structured arguments, go through
``directional``, ``subgrad``/``jacobian``, ``vjp``, ``clarke`` and ``jit`` and are compared
with the exact oracle (Fractions along the ray) or, for smooth programs, with mpmath
(tests/fuzz/oracle.py). Any raw exception, wrong number or unwarranted refusal fails, except
where an open finding of tests/fuzz/findings.py explains it: those are tolerated by name (see
the hypothesis statistics) and each has a pinned reproducer below under ``xfail(strict=True)``;
a fixed finding's reproducer is a plain regression test.
The long campaign: ``python tests/fuzz/campaign.py --programs 100000``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

import asd
from tests.fuzz import findings, harness, oracle
from tests.fuzz.findings import FINDINGS
from tests.programs import Op, Program

CI = settings(max_examples=60, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))


def assert_explained(case: harness.Case, outcomes: list[harness.Outcome],
                     note: Callable[[str], None] = event) -> None:
    """Every failed check is explained by a finding (tolerated by name), or the test fails."""
    unexplained = []
    for o in outcomes:
        if not o.failed:
            note(f"{o.check}: {o.status}")
            continue
        finding = findings.match(case, o)
        if finding is None:
            unexplained.append(o)
        else:
            note(f"tolerated {finding.id}")
    assert not unexplained, "\n".join(
        f"{o.check} {o.status}: {o.detail}\n  {o.where}" for o in unexplained) + f"\n{case!r}"


@CI
@given(harness.cases(vector=False))
def test_scalar_programs_agree_with_the_oracle(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, outcomes = harness.run_checks(case)
    event(f"oracle: {expected.oracle_kind if expected else 'none'}")
    assert_explained(case, outcomes)


@CI
@given(harness.cases(vector=True))
def test_vector_programs_agree_with_the_oracle(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, outcomes = harness.run_checks(case)
    event(f"oracle: {expected.oracle_kind if expected else 'none'}")
    assert_explained(case, outcomes)


def reproducer_param(finding, *values, name: str):
    """A reproducer's test case: strict xfail while the finding is open, plain once fixed."""
    marks = () if finding.fixed else pytest.mark.xfail(
        strict=True, reason=f"tests/fuzz/FINDINGS.md {finding.id}: {finding.title}")
    return pytest.param(finding, *values, id=name, marks=marks)


def _reproducers(frameworks: bool) -> list:
    return [reproducer_param(f, name=f.id)
            for f in FINDINGS if f.reproducer is not None and bool(f.frameworks) == frameworks]


def own_failures(finding, outcomes, case=None):
    """The outcomes of a reproducer that ``finding`` explains (another open finding's
    failures in the same program do not keep this one's test red). For a fixed finding:
    every failure it would match, and every failure no open finding explains."""
    case = finding.reproducer() if case is None else case
    if finding.fixed:
        return [o for o in outcomes if o.failed and (finding.matches(case, o)
                                                     or findings.match(case, o) is None)]
    return [o for o in outcomes if o.failed and findings.match(case, o) is finding]


@pytest.mark.parametrize("finding", _reproducers(frameworks=False))
def test_finding_is_fixed(finding):
    """Each finding's minimal reproducer: xfail while the defect is open (then strict xfail
    fails, and the finding is marked ``fixed=True`` in tests/fuzz/findings.py); a regression
    test once fixed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = harness.run_checks(finding.reproducer())
    failed = own_failures(finding, outcomes)
    assert failed == [], [f"{o.check} {o.status}: {o.detail}" for o in failed]


@pytest.mark.parametrize("finding", [f for f in FINDINGS if f.reproducer is not None
                                     and not f.frameworks and not f.fixed], ids=lambda f: f.id)
def test_finding_reproducer_is_recognised(finding):
    """Each open finding's reproducer fails as its finding says (the CI tests tolerate
    exactly that), and every other failure in it is explained by some finding too."""
    case = finding.reproducer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = harness.run_checks(case)
    if not own_failures(finding, outcomes):
        pytest.skip(f"{finding.id} no longer reproduces (test_finding_is_fixed says so)")
    assert_explained(case, outcomes, note=lambda _: None)


# ----- the harness catches what it is there to catch -----


def _relu_identity() -> harness.Case:
    ops = (Op("relu", (0,)), Op("negative", (0,)), Op("relu", (2,)), Op("subtract", (1, 3)))
    program = Program(ops, ((2,), (2,), (2,), (2,), (2,)), True)
    return harness.Case(program, np.zeros(2), np.array([1.0, -1.0]))


def test_a_timeout_cut_inside_a_budget_leaves_no_budget_behind():
    """The alarm that stops a slow check repeats: the second can land in a ``with Budget``
    exit while the first unwinds, leaving an exhausted budget running, and every later
    program of the batch failed with a raw SeriesTooLarge (campaign seed 2951)."""
    from asd.core import series

    def cut():
        series._running.budget = series.Budget(0.0)  # as if its exit never ran
        raise harness.CheckTimeout

    expected = harness.expect(_relu_identity())
    assert harness._guard("directional", expected, cut)[0].status == "slow"
    assert series._running.budget is None
    _, outcomes = harness.run_checks(_relu_identity(), ("directional",))
    assert outcomes and not [o for o in outcomes if o.failed]


def test_the_mpmath_oracle_leaves_a_tangent_at_its_own_noise_undecided():
    """At 50 digits a mean of three equal tangents is off each by ~1e-50: that noise decided
    a tie which holds along the whole ray (campaign seed 2951), against asd's answer from
    the next direction. Below 1e-40 a tangent is a tie, undecided where it matters."""
    tie = oracle.MpDual(0.0, oracle.mp.mpf(10) ** -50, [oracle.mp.mpf(1)])
    with pytest.raises(oracle.Undecided):
        tie._sign()
    assert oracle.MpDual(0.0, oracle.mp.mpf(10) ** -20, [oracle.mp.mpf(1)])._sign() == 1


def test_the_exact_oracle_sees_a_jump_behind_a_reduction_of_constants():
    """``sign(max(relu(diag(x) + C) + D) - 1)``: every candidate of the max is a constant at
    the point, so the sign met a plain number and recorded no jump, yet along ``v`` the max
    grows and the sign jumps from 0 to 1 (campaign seed 2951 judged asd's refusal bad). The
    limit along the ray differs from the value: a jump, whatever the ops recorded."""
    c = np.full((4, 4), -0.5)
    c[1, 0] = c[1, 2] = c[2, 1] = c[3, 1] = c[3, 2] = 0.0
    d = np.zeros((4, 4))
    d[1, 3] = d[2, 3] = d[3, 2] = d[3, 3] = 1.0
    ops = (Op("diag", (0,)), Op("add_constant", (1,), {"constant": tuple(map(tuple, c))}),
           Op("relu", (2,)), Op("add_constant", (3,), {"constant": tuple(map(tuple, d))}),
           Op("method_max", (4,), {"axis": None, "keepdims": False}),
           Op("add_constant", (5,), {"constant": -1.0}), Op("np_sign", (6,)))
    program = Program(ops, ((4,), (4, 4), (4, 4), (4, 4), (4, 4), (), (), ()), False)
    case = harness.Case(program, np.array([0.0, 0.5, 0.5, 0.5]), np.full(4, 2.0))
    e = oracle.exact_oracle(case.program, case.x, case.v)
    assert e.discontinuous and e.jumps
    _, outcomes = harness.run_checks(case, ("directional", "vjp"))
    assert outcomes and not [o for o in outcomes if o.failed]


def test_the_exact_oracle_on_the_relu_identity():
    case = _relu_identity()
    e = oracle.exact_oracle(case.program, case.x, case.v)
    assert e.value[()] == 0 and e.derivative[()] == 0  # f(x) = x0 + x1, v = (1, -1)
    jac, w = oracle.exact_jacobian(case.program, case.x, case.v)
    assert w is None and list(jac) == [Fraction(1), Fraction(1)]
    _, outcomes = harness.run_checks(case, ("directional", "subgrad", "vjp", "clarke"))
    assert outcomes and not [o for o in outcomes if o.failed]


def test_a_wrong_derivative_is_reported(monkeypatch):
    """The checks fail on a wrong number: asd.directional and asd.value_and_subgrad bent."""
    case = _relu_identity()
    directional, value_and_subgrad = asd.directional, asd.value_and_subgrad

    def bent_directional(f, argnums=0):
        g = directional(f, argnums)
        return lambda *a: (lambda r: (r[0], r[1] + 1.0))(g(*a))

    def bent_subgrad(f, argnums=0, **kw):
        g = value_and_subgrad(f, argnums, **kw)
        return lambda *a: (lambda r: (r[0], r[1] * 0.0))(g(*a))

    monkeypatch.setattr(asd, "directional", bent_directional)
    monkeypatch.setattr(asd, "value_and_subgrad", bent_subgrad)
    expected = harness.expect(case)
    assert harness.check_directional(case, expected)[0].status == "wrong"
    jac, w, why = harness._jacobian_oracle(case, expected)
    assert harness.check_subgrad(case, expected, jac, w, why)[0].status == "wrong"


def test_a_raw_exception_and_a_refusal_are_told_apart():
    case = _relu_identity()
    expected = harness.expect(case)
    raw = harness._classify("x", IndexError("boom"), expected)
    refused = harness._classify("x", asd.NotLipschitzError("jump"), expected)
    assert raw.status == "raw" and refused.status == "bad-refusal"


def test_a_jump_along_the_ray_must_be_refused():
    """``x // 1`` at 0 along -1: the oracle finds the jump, so any number is wrong."""
    program = Program((Op("floor_divide", (0,), {"c": 1.0}),), ((), ()), True)
    case = harness.Case(program, np.array(0.0), np.array(-1.0))
    expected = harness.expect(case)
    assert expected.must_refuse and "NotLipschitzError" in expected.refusals
    outcomes = harness.check_directional(case, expected)
    assert [o.status for o in outcomes] == ["refused"], outcomes


def test_the_drawn_direction_is_asds():
    """`oracle.drawn_direction` follows asd's own draw (what the framework checks rely on)."""
    x = np.zeros((2, 3))
    result = asd.asd(lambda a: asd.relu(a).sum(), seed=11)(x)
    (d,) = oracle.drawn_direction(11, [x.shape])
    assert np.allclose(result.direction, d / np.linalg.norm(d), rtol=1e-15, atol=0)


def test_a_complex_numpy_result_accepts_any_refusal_and_no_number():
    """``(x - 2) ** 1.5`` on a Python float at 0.5: Python's value is complex, which no real
    program has, so any refusal of asd's is right (whatever the class: the power's domain, a
    non-finite value, the complex output) and any number is wrong."""
    program = Program((Op("add_constant", (0,), {"constant": -2.0}),
                       Op("float_power", (1,), {"p": 1.5})), ((), (), ()), True)
    case = harness.Case(program, np.array(0.5), np.array(1.0), "float64", "python_float")
    expected = harness.expect(case)
    assert np.iscomplexobj(expected.value) and expected.must_refuse
    for error in (asd.ArgumentTypeError, asd.OutputError, asd.UnsupportedError,
                  asd.NonFiniteError, asd.NotLipschitzError):
        assert harness._classify("subgrad", error("no"), expected).status == "refused", error
    assert harness._classify("subgrad", TypeError("no"), expected).status == "raw"
    assert all(o.status in ("refused", "ok") for o in harness.run_checks(case)[1])


@pytest.mark.parametrize("c", [-0.75, 0.75, -4.0])
@pytest.mark.parametrize("v", [1.0, -1.0])
def test_the_oracles_remainder_is_numpys_floor_mod(c, v):
    """``%`` in the oracle is numpy's remainder (the sign of the divisor), not C's fmod: the
    value at the point and its limit along the ray, on and off the jumps (1.5 and -3.0 are
    multiples of 0.75)."""
    x = np.array([-1.3, 1.3, 0.4, 1.5, -3.0])
    program = Program((Op("remainder", (0,), {"c": c}),), (x.shape, x.shape), False)
    e = oracle.exact_oracle(program, x, np.full(x.shape, v))
    np.testing.assert_array_equal(oracle.fractions_to_float(e.value), np.remainder(x, c))
    step = Fraction(v) / 2**40
    beside = [(Fraction(a) + step) % Fraction(c) for a in x]  # Python: floor mod
    assert list(e.ray_limit) == [b - step for b in beside]



def test_a_clarke_sample_with_rounded_entries_is_checked_within_rounding():
    """A sampled gradient along a direction a later direction refines (a zero entry at an
    abs) is checked by ``<g, d>`` against the exact slope; its entries hold 1/6 rounded, so
    the pairing is exact only within rounding (the long campaign, seed 2813, reported this
    valid sample as wrong: <g, d> = 11.5 up to the last bit)."""
    ops = (Op("transpose", (0,)), Op("mean", (1,), {"axis": None}), Op("abs", (0,)),
           Op("add_constant", (1,), {"constant": ((-1.0, 0.0, -1.0), (0.0, 0.0, -1.0))}),
           Op("percentile", (4,), {"axis": -1, "q": 100.0}), Op("mean", (5,), {"axis": -1}),
           Op("sum", (2,), {"axis": None}), Op("add", (6, 7)),
           Op("sum", (3,), {"axis": None}), Op("add", (8, 9)))
    shapes = ((3, 2), (2, 3), (), (3, 2), (2, 3), (2,), (), (), (), (), ())
    case = harness.Case(Program(ops, shapes, True), np.zeros((3, 2)),
                        np.array([[2.0, 1.0], [1.0, 1.0], [1.0, 2.0]]))
    outcomes = harness.check_clarke(case, harness.expect(case))
    assert [o.status for o in outcomes] == ["ok"], [o.detail for o in outcomes]


def test_a_refusal_at_a_jump_the_mpmath_oracle_cannot_decide_is_not_judged():
    """``rint(x ** 2 + 0.5) + exp(x)`` at (0, -1.5) in float32 (the mpmath oracle's case):
    the jump's input is flat to first order, so the oracle cannot tell whether it reaches
    the other side (here it does: x ** 2 grows), and neither a number nor asd's refusal can
    be judged: the check is skipped, not counted a bad refusal (campaign seed 2811)."""
    ops = (Op("np_power", (0,), {"n": 2}), Op("add_constant", (1,), {"constant": 0.5}),
           Op("np_rint", (2,)), Op("exp", (0,)), Op("add", (3, 4)))  # exp: no exact floats
    case = harness.Case(Program(ops, ((2,),) * 6, True), np.array([0.0, -1.5]),
                        np.array([1.0, -1.0]), "float32")
    expected = harness.expect(case)
    assert expected.hybrid is not None and expected.hybrid.undecided
    assert "NotLipschitzError" in expected.unjudged
    assert [o.status for o in harness.check_directional(case, expected)] == ["skipped"]


def test_a_jump_met_before_an_undecided_tie_still_allows_the_refusal():
    """``c[np.argmax(x)]`` at a tie of ``x`` whose table entries differ: asd refuses the plain
    index (README "Positions as indices"). The mpmath oracle met that jump, then a tie it
    could not decide further on (``y * (y + 0 < y * y)``, flat at its jump) and dropped the
    jumps it had counted, so the documented refusal read as a bad one (long campaign, seed
    2813, where the jump was behind ``ptp`` of a scalar)."""
    ops = (Op("argmax_take", (0,), {"table": (2.0, 0.5)}), Op("multiply", (1, 1)),
           Op("add_constant", (2,), {"constant": 0.0}), Op("subtract", (3, 2)),
           Op("step_multiply", (4, 3, 2), {"cmp": "<"}), Op("sin", (0,)),
           Op("sum", (6,), {"axis": None}), Op("add", (5, 7)))
    shapes = ((2,), (), (), (), (), (), (2,), (), ())
    case = harness.Case(Program(ops, shapes, True), np.zeros(2), np.array([1.0, 2.0]))
    expected, outcomes = harness.run_checks(case, ("directional", "subgrad", "vjp"))
    assert expected.hybrid.undecided and expected.hybrid.jumps
    assert [o.status for o in outcomes] == ["refused"] * 3, [o.detail for o in outcomes]


def test_a_slope_rounded_on_the_way_is_compared_within_rounding():
    """``1 + 0.75 * mean(c * (x - 2))`` over 3 entries along ones: the exact slope is 1/8,
    a float, but the float path divides by 3 (-3.5 / 3), so asd's 0.1250000000000001 is
    right within rounding (long campaign, seed 2813, reported it wrong). The comparison
    stays bit for bit where every step is a float (the mean of 4 entries)."""
    for n, exact_steps in ((3, False), (4, True)):
        scale = (-2.0, -1.0, -0.5, 1.0)[:n]
        ops = (Op("add_constant", (0,), {"constant": ((-2.0,),) * n}),
               Op("max", (1,), {"axis": 1, "keepdims": True}),
               Op("multiply_constant", (2,), {"constant": tuple((c,) for c in scale)}),
               Op("method_mean", (3,), {"axis": -2, "keepdims": False}),
               Op("multiply_constant", (4,), {"constant": (0.75,)}),
               Op("sum", (5,), {"axis": None}), Op("add", (0, 6)))
        shapes = ((n, 1),) * 4 + ((1,), (1,), (), (n, 1))
        case = harness.Case(Program(ops, shapes, False), np.array([[0.0]] * (n - 1) + [[2.0]]),
                            np.ones((n, 1)), "float64", "namedtuple")
        e = oracle.exact_oracle(case.program, case.x, case.v)
        assert e.float_path is exact_steps
        assert harness._bit_for_bit(case, e.derivative, e.float_path) is exact_steps
        slope = e.derivative[0, 0]
        nearby = np.nextafter(float(slope), np.inf)
        assert harness._agrees(np.full((n, 1), nearby), case, e.derivative,
                               e.float_path) is not exact_steps
        outcomes = harness.check_directional(case, harness.expect(case))
        assert [o.status for o in outcomes] == ["ok"], [o.detail for o in outcomes]


def test_a_clarke_sample_holding_sevenths_is_checked_within_rounding():
    """The second clarke "wrong" of the long campaign (seed 2813): a sample of
    ``average(x, w) + var(|relu(x)|) + 2 sum(relu(x)) + max(x)`` at 0 holds w / 3.5 (8/7,
    4/7, 2/7 rounded), the limiting gradient of a direction into x < 0 with x0 the largest;
    paired with a direction it is exact only within rounding (fails on the harness before
    befdf2c, as the first one did)."""
    ops = (Op("average", (0,), {"weights": (0.5, 2.0, 1.0)}), Op("relu", (0,)),
           Op("relu", (0,)), Op("relu", (0,)),
           Op("method_max", (0,), {"axis": None, "keepdims": False}), Op("abs", (3,)),
           Op("method_var", (6,), {"axis": 0}), Op("sum", (1,), {"axis": None}),
           Op("add", (7, 8)), Op("sum", (2,), {"axis": None}), Op("add", (9, 10)),
           Op("sum", (4,), {"axis": None}), Op("add", (11, 12)),
           Op("sum", (5,), {"axis": None}), Op("add", (13, 14)))
    shapes = ((3,), (), (3,), (3,), (3,), (), (3,)) + ((),) * 9
    case = harness.Case(Program(ops, shapes, True), np.zeros(3), np.ones(3), seed=3)
    outcomes = harness.check_clarke(case, harness.expect(case))
    assert [o.status for o in outcomes] == ["ok"], [o.detail for o in outcomes]


def test_a_derivative_past_the_dtypes_range_may_be_refused_by_every_gradient_check():
    """``((x ** 5 - 0.5) ** 3 + (x - 2) ** 2`` at 2 in float16: the exact gradient, about
    2.4e5, is past float16's largest number, so asd's NonFiniteError is right for subgrad
    and jacobian as it already was for vjp (campaign seed 2921 counted it a bad refusal)."""
    ops = (Op("take", (0,), {"indices": (0, 0, 0, 0)}), Op("prod", (1,), {"axis": None}),
           Op("einsum", (2, 0), {"spec": ",->"}), Op("add_constant", (3,), {"constant": -0.5}),
           Op("pow_operator", (4,), {"n": 3}), Op("nan_to_num", (0,)),
           Op("add_constant", (6,), {"constant": -2.0}), Op("pow_operator", (7,), {"n": 2}),
           Op("sum", (5,), {"axis": None}), Op("add", (8, 9)))
    shapes = ((), (4,), (), (), (), (), (), (), (), (), ())
    case = harness.Case(Program(ops, shapes, True), np.array(2.0), np.array(1.0), "float16",
                        "zero_d", 0, 25938)
    _, outcomes = harness.run_checks(case, ("subgrad", "vjp"))
    assert [o.status for o in outcomes] == ["refused", "refused"], [o.detail for o in outcomes]


def test_an_overflow_refusal_the_oracle_cannot_judge_is_skipped():
    """Campaign seed 3001: a float16 ``where_logic`` of products near 200 whose tie the mpmath
    oracle leaves open: asd refuses the gradient as past float16's range (about 1.2e5), and
    with no oracle Jacobian that refusal is as unjudged as a number would be (it counted as
    a bad refusal)."""
    m = lambda *rows: tuple(tuple(r) for r in rows)  # noqa: E731
    ops = (Op("transpose", (0,)),
           Op("clip", (1,), {"lo": m((0.0, 0.0, 2.0), (-1.0, 0.0, 2.0), (-0.5, 0.5, 0.0)),
                             "hi": m(*[(2.0, 2.0, 2.0)] * 3)}),
           Op("add_constant", (2,), {"constant": m((4.0, 6.0, -2.0), (0.75, -2.0, 4.0),
                                                   (0.75, -0.5, 4.0))}),
           Op("relu6", (3,)), Op("np_positive", (4,)),
           Op("dtype_constant", (5,), {"kind": "uint8", "values": (200,), "op": "-"}),
           Op("add_constant", (6,), {"constant": m((196.0, -0.5, 202.0), (-0.5, -0.5, -0.5),
                                                   (196.75, -0.5, -0.5))}),
           Op("add_constant", (7,), {"constant": m((0.0, 0.5, 0.0), (199.75, -0.5, 194.5),
                                                   (0.75, 202.5, -2.0))}),
           Op("where_logic", (7, 0, 8, 0, 5, 0), {"cmps": ("<", "<"), "expr": ("or", 0, 1),
                                                   "spelling": "operators"}),
           Op("method_mean", (1,), {"axis": 0, "keepdims": True}),
           Op("sum", (9,), {"axis": None}), Op("add", (10, 11)))
    shapes = ((3, 3),) * 10 + ((1, 3), (), (1, 3))
    x = np.array([[2.0, -0.5, 2.0], [-0.5, 2.0, 0.0], [-0.5, 2.0, 2.0]])
    case = harness.Case(Program(ops, shapes, True), x, np.ones((3, 3)), "float16",
                        "namedtuple", 5, 0)
    _, outcomes = harness.run_checks(case, ("subgrad",))
    assert [(o.status, o.kind) for o in outcomes] == [("skipped", "mpmath")], outcomes


def test_a_gradient_through_a_mean_of_three_is_compared_within_rounding():
    """Campaign seed 3001: ``mean(x @ (0.5, 2, 0.5))`` has slope 1 at every step (a float),
    yet reverse mode pulls 1/3 through each entry and sums 0.5/3 + 2/3 + 0.5/3 =
    0.9999999999999999: a mean of n entries is bit-exact only where n is a power of 2."""
    ops = (Op("matmul", (0,), {"constant": ((0.5, 2.0, 0.5),)}),
           Op("method_mean", (1,), {"axis": -1, "keepdims": False}),
           Op("multiply_constant", (2,), {"constant": (1.0, 0.5)}),
           Op("add_constant", (3,), {"constant": (0.0, -0.75)}),
           Op("minimum", (4, 2)), Op("inner", (3, 3)), Op("sum", (5,), {"axis": None}),
           Op("add", (6, 7)))
    shapes = ((2, 1), (2, 3), (2,), (2,), (2,), (2,), (), (), ())
    case = harness.Case(Program(ops, shapes, True), np.array([[0.0], [-1.5]]),
                        np.array([[1.0], [2.0]]), "float64", "list", 0, 18120)
    _, outcomes = harness.run_checks(case, ("subgrad",))
    assert [o.status for o in outcomes] == ["ok"], [o.detail for o in outcomes]
    two = (Op("method_mean", (0,), {"axis": -1, "keepdims": False}),)
    assert harness._bit_for_bit(harness.Case(Program(two, ((4,), ()), True), np.zeros(4),
                                             np.ones(4)), np.array([Fraction(1, 4)]))


def test_a_gather_whose_values_part_on_the_keys_tie_surface_may_be_refused():
    """Campaign seed 3005: values ``x.T + c`` sorted by ``x`` along axis 0 at a point where
    the keys of each column tie and the gathered values are equal, but the values' gradient
    is not a multiple of the keys' (they part on the keys' tie surface): the program jumps
    arbitrarily near the point. Along the case's ``v`` the keys part and the series see no
    jump; the exact gradients do, so asd's refusal along another (Clarke) direction is
    allowed."""
    ops = (Op("rollaxis", (0,)),
           Op("add_constant", (1,), {"constant": ((1.0, 2.0), (0.0, 1.0))}),
           Op("sorted_by", (2, 0), {"axis": -2}))
    x = np.array([[0.0, 1.0], [0.0, 1.0]])
    v = np.array([[-9.332636185032189e-302, 9.332636185032189e-302],
                  [9.332636185032189e-302, -4.6663180925160944e-302]])
    case = harness.Case(Program(ops, ((2, 2),) * 4, True), x, v, "float32", "array", 0, 182)
    expected = harness.expect(case)
    assert "NotLipschitzError" in expected.refusals
    assert oracle.jumps_beside(case.program, x, v)
    sort = harness.Case(Program((Op("sorted_by", (0, 0), {"axis": -2}),), ((2, 2),) * 2,
                                True), x, v, "float32", "array", 0, 182)
    assert not oracle.jumps_beside(sort.program, x, v)  # a sort gathers its own keys


def test_a_weighted_averages_slopes_are_compared_within_rounding():
    """``np.average`` with weights (4, 2) scales slopes by 2/6, rounded in floats even where
    every exact step is a float (the fmin tie's slope -1.40625 came back as
    -1.4062499999999998 in reverse mode, campaign seed 2921): not bit for bit."""
    ops = (Op("add_constant", (0,), {"constant": ((2.0, 0.0),)}), Op("maximum", (1, 0)),
           Op("add_constant", (2,), {"constant": ((-3.0, -0.25),)}),
           Op("np_power", (3,), {"n": 3}), Op("average", (4,), {"weights": ((4.0, 2.0),)}),
           Op("add_constant", (1,), {"constant": ((-2.859375, -0.859375),)}),
           Op("fmin", (5, 6)), Op("dot", (7,), {"constant": ((-0.5,), (-2.0,))}))
    shapes = ((1, 2),) * 5 + ((), (1, 2), (1, 2), (1, 1))
    case = harness.Case(Program(ops, shapes, False), np.array([[1.0, 1.0]]),
                        np.array([[1.0, 1.0]]), "float64", "namedtuple", 0, 54283)
    _, outcomes = harness.run_checks(case, ("jacobian", "vjp"))
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.detail for o in outcomes]


def test_a_flat_jump_left_undecided_by_the_first_attempt_is_remembered():
    """``x // (|x| + 1)`` with an entry the direction leaves flat at its jump, then a tied
    argmax: the mpmath oracle's first attempt stops at the flat jump, its second at the tie,
    whose message replaced the first; asd's refusal of the jumps then read as a bad one
    (campaign seed 2921). It is unjudged: the oracle cannot tell the flat entry's side."""
    ops = (Op("add_constant", (0,), {"constant": ((0.0, 2.0), (1.0, 0.0), (1.0, -2.0))}),
           Op("abs", (0,)), Op("add_constant", (2,), {"constant": 1.0}),
           Op("floor_divide_traced", (1, 3)),
           Op("argmax_take", (1,), {"table": (-1.0, 1.0, 3.0, 0.5, 0.75, 3.0)}),
           Op("multiply", (5, 2)), Op("clip", (6,), {"lo": -2.0, "hi": 2.0}), Op("cosh", (7,)),
           Op("sum", (4,), {"axis": None}), Op("add", (8, 9)))
    shapes = ((3, 2),) * 5 + ((), (3, 2), (3, 2), (3, 2), (), (3, 2))
    case = harness.Case(Program(ops, shapes, False), np.zeros((3, 2)),
                        np.array([[3.0, 1.0], [1.0, 1.0], [1.0, 0.0]]), "float64", "list", 5, 180)
    expected, outcomes = harness.run_checks(case, ("directional", "vjp"))
    assert expected.hybrid.flat_jump
    assert [o.status for o in outcomes] == ["skipped", "skipped"], [o.detail for o in outcomes]


def test_a_jump_the_mpmath_oracle_meets_only_along_another_ray_allows_the_refusal():
    """``sign(sinh(clip(|hinge(x + 1)|)))`` at 0 in float32, along +1: the hinge takes its
    constant piece along v, whose literal 0 hides the sign's jump from the mpmath oracle, but
    the jump is there (x < 0 makes the hinge positive: the output jumps), and asd's refusal is
    right (campaign seed 2921 counted it a bad refusal). Another ray meets it, as the exact
    oracle's `_jumps_elsewhere` already asks."""
    ops = (Op("add_constant", (0,), {"constant": 1.0}), Op("hinge", (1,)), Op("abs", (2,)),
           Op("add_constant", (3,), {"constant": 0.25}), Op("log2", (4,)),
           Op("clip", (3,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (6,)), Op("broadcast_to", (7,)),
           Op("np_sign", (8,)), Op("maximum", (9, 8)), Op("sum", (5,), {"axis": None}),
           Op("add", (10, 11)))
    shapes = ((),) * 9 + ((2,), (2,), (2,), (), (2,))
    case = harness.Case(Program(ops, shapes, True), np.array(0.0), np.array(1.0), "float32",
                        "array", 0, 3670)
    expected, outcomes = harness.run_checks(case, ("directional", "vjp"))
    assert expected.hybrid is not None and not expected.hybrid.jumps
    assert [o.status for o in outcomes] == ["refused", "refused"], [o.detail for o in outcomes]


def test_a_python_float_argument_is_evaluated_in_float64_by_the_oracle():
    """A case labelled float32 with a Python float argument computes in float64 (Python
    floats are float64, `harness.arguments`), so the mpmath oracle must too: in float32 a
    tie that float64 holds (``fmax(exp(x) - c, log1p(|x| + 1) + 0.5)`` at 0.5) was not one,
    and the oracle took the other branch (campaign seed 2931 counted asd's right answer
    wrong)."""
    ops = (Op("reshape", (0,), {"shape": (1,)}), Op("abs", (1,)),
           Op("add_constant", (2,), {"constant": 1.0}), Op("log1p", (3,)), Op("abs", (4,)),
           Op("add_constant", (5,), {"constant": 0.5}), Op("log1p", (6,)), Op("maximum", (1, 0)),
           Op("clip", (8,), {"lo": -2.0, "hi": 2.0}), Op("exp", (9,)),
           Op("add_constant", (10,), {"constant": (-0.2324305388259731,)}),
           Op("fmax", (11, 6)), Op("hypot", (12, 8)), Op("sum", (7,), {"axis": None}),
           Op("add", (13, 14)))
    shapes = ((),) + ((1,),) * 13 + ((), (1,))
    case = harness.Case(Program(ops, shapes, True), np.array(0.5), np.array(1.0), "float32",
                        "python_float", 0, 64)
    _, outcomes = harness.run_checks(case, ("directional", "subgrad", "vjp"))
    assert [o.status for o in outcomes] == ["ok"] * 3, [o.detail for o in outcomes]


def test_a_clarke_refusal_of_a_gradient_past_float64_is_accepted():
    """numpy campaign seed 3016: ``-column_stack(relu(-1e308 x), ...)`` at 0: a sampled
    direction's exact gradient is 2e308, past float64's range, and asd.clarke refuses it as
    asd.subgrad does; the Clarke check reads that as the right refusal (it raised)."""
    from tests.fuzz.findings import _case

    case = _case([Op("dtype_constant", (0,), {"kind": "py_huge", "values": (-1e308, -1e308),
                                              "op": "*"}),
                  Op("relu", (1,)), Op("column_stack", (2, 2)), Op("negative", (3,))],
                 [(3, 1), (3, 1), (3, 1), (3, 2), (3, 2)], [[0.0], [0.0], [0.0]],
                 [[1.0], [0.0], [0.0]], seed=41647)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = harness.run_checks(case, ("clarke",))
    assert [(o.check, o.status) for o in outcomes] == [("clarke", "refused")]
