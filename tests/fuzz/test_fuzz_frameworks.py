"""The fuzz campaign through ``asd.torch.function`` / ``asd.jax.function`` (and their
``subgrad``), on the programs' torch and jax.numpy spellings: short and deterministic for CI.

Each program is checked against the framework's own value and the exact (or mpmath) oracle
along the direction asd draws from the seed (tests/fuzz/frameworks.py). Failures explained by a
open finding of tests/fuzz/findings.py are tolerated by name; each open finding's framework
reproducer runs below under ``xfail(strict=True)``, a fixed one's as a regression test.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, event, given, settings

from tests.fuzz import frameworks
from tests.fuzz.findings import FINDINGS
from tests.fuzz.test_fuzz_numpy import assert_explained, own_failures, reproducer_param

CI = settings(max_examples=12, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))


def _run(case, framework):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, outcomes = frameworks.run_framework_checks(case, framework)
    event(f"oracle: {expected.oracle_kind if expected else 'none'}")
    assert_explained(case, outcomes)


@CI
@given(frameworks.framework_cases("torch"))
def test_torch_function_agrees_with_the_oracle(case):
    pytest.importorskip("torch")
    _run(case, "torch")


@CI
@given(frameworks.framework_cases("jax"))
def test_jax_function_agrees_with_the_oracle(case):
    pytest.importorskip("jax")
    _run(case, "jax")


@pytest.mark.parametrize("finding, framework", [
    reproducer_param(f, fw, name=f"{f.id}-{fw}")
    for f in FINDINGS if f.reproducer is not None for fw in f.frameworks])
def test_framework_finding_is_fixed(finding, framework):
    pytest.importorskip(framework)
    case = finding.reproducer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = frameworks.run_framework_checks(case, framework)
    failed = own_failures(finding, outcomes, case)
    assert failed == [], [f"{o.check} {o.status}: {o.detail}" for o in failed]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_complex_constant_cast_by_the_spelling_is_another_program(framework):
    """The framework spellings cast a complex constant to the argument's real dtype, so
    their program is real where numpy's result is complex (which asd must refuse): the
    checks skip it as a spelling that differs instead of calling the number wrong (torch
    campaign seed 2984, JAX seed 2983)."""
    pytest.importorskip(framework)
    from tests.fuzz.findings import _case
    from tests.programs import Op

    case = _case([Op("dtype_constant", (0,), {"kind": "py_complex", "op": "+",
                                              "values": ((1 + 0j), (1 + 0j), 2j)})],
                 [(3, 1), (3, 1)], [[-1.0], [-1.0], [-1.0]], [[1.0], [1.0], [0.25]],
                 reduce=False, seed=43)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = frameworks.run_framework_checks(case, framework)
    assert [(o.check, o.status, o.kind) for o in outcomes] == [
        (f"{framework}.value", "skipped", "spelling differs")]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_lexicographic_gradient_with_rounded_entries_is_checked_within_rounding(framework):
    """JAX campaign seed 3002: where ``v`` leaves a tie open the check reads ``<g, v>``
    against f'(x; v); through ``np.average`` with weights (4, 0.5, 4) the gradient holds
    4 / 8.5 rounded, and along a direction of 1e301 the inner product is exact only to
    rounding (it was compared exactly, as the numpy checks do not)."""
    pytest.importorskip(framework)
    from tests.fuzz.findings import _case
    from tests.programs import Op

    case = _case([Op("add_constant", (0,), {"constant": (1.0, 1.0, 1.0)}),
                  Op("sort", (1,), {"axis": 0}),
                  Op("average", (2,), {"weights": (4.0, 0.5, 4.0)}),
                  Op("sum", (1,), {"axis": None}), Op("add", (3, 4))],
                 [(3,), (3,), (3,), (), (), ()], [-1.5, -1.5, -1.5],
                 [1.0715086071862673e+301] * 3, seed=272)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = frameworks.run_framework_checks(case, framework)
    subgrad = [o for o in outcomes if o.check == f"{framework}.subgrad"]
    assert [o.status for o in subgrad] == ["ok"], [o.detail for o in subgrad]


def test_a_step_torch_rounds_otherwise_is_another_program():
    """F78 (torch campaign seed 3007): ``torch.sinh(2)`` is 1 ulp above ``np.sinh(2)``, so
    ``sinh(clip(x)) + c`` is on the hinge's kink in numpy and just past it in torch. The
    oracle decides ties at numpy's floats; torch's gradient is its own program's (the one
    numpy computes once ``c`` is moved by that ulp), and the check skips it, naming the step."""
    torch = pytest.importorskip("torch")
    import numpy as np

    import asd
    from tests.fuzz import harness, oracle
    from tests.fuzz.findings import FINDINGS

    (finding,) = [f for f in FINDINGS if f.id == "F78"]
    case = finding.reproducer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, outcomes = frameworks.run_framework_checks(case, "torch")
    (function,) = [o for o in outcomes if o.check == "torch.function"]
    assert (function.status, function.kind) == ("skipped", "rounding"), function.detail
    assert "step 2 (sinh)" in function.detail

    (d,) = oracle.drawn_direction(case.seed, [np.shape(case.x)])
    ct = harness.cotangent(case, (3, 3))
    x = torch.tensor(case.x, requires_grad=True)
    g = asd.torch.function(frameworks.framework_function(case.program, "torch"),
                           seed=case.seed)
    (g(x) * torch.tensor(ct)).sum().backward()
    ops = list(case.program.ops)
    shift = np.array(ops[2].params["constant"])
    shift[1, 1] = np.nextafter(shift[1, 1], 1.0)  # numpy's sum now torch's, off the kink
    assert np.sinh(2.0) + shift[1, 1] == torch.sinh(torch.tensor(2.0, dtype=torch.float64))\
        .item() + ops[2].params["constant"][1][1]
    ops[2] = type(ops[2])(ops[2].name, ops[2].args, {"constant": tuple(map(tuple, shift))})
    moved = harness.Case(type(case.program)(tuple(ops), case.program.shapes,
                                            case.program.reduce), case.x, case.v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, pullback = asd.vjp(harness.function(moved), direction=d)(case.x)
        assert np.array_equal(x.grad.numpy(), pullback(ct))


def test_a_torch_jump_is_replayed_against_its_own_replay_of_the_entered_side():
    """F79 (torch campaign seed 3012): torch's logaddexp tests ``a == b`` under an isfinite
    mask, so at ``a == b`` the test jumps while the output does not. The jump replay runs
    numpy's implementations, which round the output 1 ulp off torch's: the sides are compared
    with the entered side replayed the same way (no refusal), and a jump that does change
    the output is still refused."""
    torch = pytest.importorskip("torch")
    import asd.torch

    from asd.errors import NotLipschitzError

    f64 = torch.float64
    c1 = torch.tensor(((3.0, -0.25, 3.0), (-2.0, 0.0, -2.0)), dtype=f64)
    c2 = torch.tensor(((-0.5, 0.0, -0.75), (-0.75, -2.0, 0.0)), dtype=f64)
    c3 = torch.tensor(((-2.0, -1.0, -1.0), (-1.0, 2.0, 2.0)), dtype=f64)
    x = torch.tensor([[0.0, 0.0, 0.75], [0.75, 0.75, 0.0]], dtype=f64)
    v = torch.ones(2, 3, dtype=f64)

    def continuous(z):  # F79's program: logaddexp(c, z + c2) is tied at three entries
        a, b = torch.pow(torch.abs(z + c2), 0) + c3, z + c2
        return (torch.logaddexp(a, b) + (z + c1).max(dim=-2).values.sum()).sum()

    g = asd.torch.subgrad(continuous, x, direction=v)
    # logaddexp's slope in b is sigmoid(b - a) (1/2 on the tie); each column's max is
    # summed six times
    a, b = torch.ones(2, 3, dtype=f64) + c3, x + c2
    maxes = torch.tensor([[6.0, 0.0, 6.0], [0.0, 6.0, 0.0]], dtype=f64)
    assert torch.allclose(g, torch.sigmoid(b - a) + maxes)

    def jumping(z):
        return (torch.logaddexp(z, c3) + (z + c2 == 0).double()).sum()

    with pytest.raises(NotLipschitzError, match="eq"):
        asd.torch.subgrad(jumping, x, direction=v)
