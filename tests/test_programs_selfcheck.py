"""The program generator: well-formed programs, exact float evaluation, planted ties, and the
oracle agreeing with gradients evaluated at a point a tiny step along the ray."""

from fractions import Fraction
from functools import partial

import numpy as np
from hypothesis import Phase, assume, find, given, settings

from asd.testing.exact import (
    DegenerateTie,
    as_fractions,
    directional_derivative,
    limiting_gradient,
    limiting_jacobian,
)
from tests.programs import (
    IMPLEMENTATIONS,
    evaluate,
    programs,
    run,
    run_exact,
    tied_entries,
    vector_programs,
)

STEP = Fraction(1, 2**40)  # delta for the nearby point x + delta * v
SLACK = 2**24  # bounds the coefficients of higher powers of delta (values stay below 2**12)

EXAMPLES = settings(max_examples=100, deadline=None)


def is_dyadic(a):
    return all(f.denominator & (f.denominator - 1) == 0 for f in as_fractions(a).flat)


@EXAMPLES
@given(programs())
def test_programs_are_well_formed(case):
    program, x, v = case
    assert x.shape == v.shape == program.shapes[0]
    assert is_dyadic(x) and is_dyadic(v) and np.any(v)
    for k, op in enumerate(program.ops, start=1):
        assert op.name in IMPLEMENTATIONS
        assert all(0 <= i < k for i in op.args)
        assert is_dyadic(op.params.get("constant", 0))
    assert [np.shape(value) for value in evaluate(program, x)] == list(program.shapes)
    assert np.shape(run(program, x)) == ()


@EXAMPLES
@given(programs())
def test_float64_evaluation_is_exact(case):
    program, x, _ = case
    assert as_fractions(run(program, x))[()] == run_exact(program, x)


def test_the_strategy_reaches_kinks():
    program, x, _ = find(programs(), lambda case: tied_entries(*case[:2]) >= 3)
    assert tied_entries(program, x) >= 3


def oracle_or_skip(compute, *args):
    try:
        return compute(*args)
    except DegenerateTie:
        assume(False)


@EXAMPLES
@given(programs())
def test_oracle_agrees_with_gradients_a_tiny_step_along_the_ray(case):
    """Along the ray the program is a polynomial in delta once delta is small, so the exact
    gradient at x + 2**-40 v (where values alone decide the branches) is the limiting gradient
    up to O(2**-40), and f(x + 2**-40 v) = f(x) + 2**-40 f'(x; v) + O(2**-80)."""
    program, x, v = case
    f = partial(run, program)
    value, grad = oracle_or_skip(limiting_gradient, f, x, v)
    slope = directional_derivative(f, x, v)
    point = as_fractions(x) + STEP * as_fractions(v)
    nearby_value, nearby_grad = oracle_or_skip(partial(limiting_gradient, order=1), f, point, v)
    assert abs(nearby_value - value - STEP * slope) <= STEP**2 * SLACK
    assert np.all(np.abs(nearby_grad - grad) <= STEP * SLACK)


@EXAMPLES
@given(programs())
def test_directional_derivative_is_the_limiting_gradient_along_v(case):
    program, x, v = case
    f = partial(run, program)
    _, grad = oracle_or_skip(limiting_gradient, f, x, v)
    assert directional_derivative(f, x, v) == np.sum(grad * as_fractions(v))


@EXAMPLES
@given(vector_programs())
def test_jacobian_rows_are_limiting_gradients(case):
    program, x, v = case
    f = partial(run, program)
    jacobian = oracle_or_skip(limiting_jacobian, f, x, v)
    assert jacobian.shape == program.shapes[-1] + x.shape
    _, grad = oracle_or_skip(limiting_gradient, lambda x: np.sum(f(x)), x, v)
    assert np.all(np.sum(jacobian.reshape(-1, *x.shape), axis=0) == grad)


def _fixed_branch_hinge(a):
    """A wrong hinge: at ``a == 1`` always the flat piece, whatever the direction."""
    return (1.0 - a) * np.asarray(a.value < 1.0, dtype=float)


def test_a_wrong_tie_rule_in_a_library_op_is_caught(monkeypatch):
    """Negative control: with hinge's rule replaced by a fixed branch, the generator finds a
    program on which the subgradient is not the exact limiting gradient."""
    import asd
    from tests import programs as generator

    reference = generator.IMPLEMENTATIONS["hinge"]
    monkeypatch.setitem(generator.IMPLEMENTATIONS, "hinge",
                        generator._library(_fixed_branch_hinge, lambda a: reference(a)))

    def wrong(case):
        program, x, v = case
        if "hinge" not in {op.name for op in program.ops}:
            return False
        f = partial(run, program)
        try:
            _, expected = limiting_gradient(f, x, v)
        except DegenerateTie:
            return False
        return not np.all(as_fractions(asd.subgrad(f, direction=v)(x)) == expected)

    program, _, _ = find(programs(), wrong, settings=settings(
        max_examples=5000, database=None, phases=[Phase.generate]))
    assert any(op.name == "hinge" for op in program.ops)
