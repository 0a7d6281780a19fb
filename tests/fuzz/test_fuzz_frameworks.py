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
