"""Branching programs (asd.branching / asd.branch): the rule Algorithm 7 derives.

Oracles: the exact limiting gradient and Dini derivative along the same direction
(asd.testing.exact, Fractions) for the qualified programs; hand-computed values for the
unqualified Figure-1 program, whose derived rule is wrong on purpose.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.analysis.branching import BranchingPrimitive, evaluate
from asd.testing import exact
from asd.testing.strategies import directions, dyadics, kink_arrays


@asd.branching
def relu(x):
    return x if asd.branch(x) else 0.0


@asd.branching
def relu_cubed(x):  # Figure 1, right: same function, unqualified constraint x**3
    return x if asd.branch(x ** 3) else 0.0


@asd.branching
def clip(x, lo, hi):
    m = x if asd.branch(x - lo) else lo
    return m if asd.branch(hi - m) else hi


@asd.branching
def huber(x):
    if asd.branch(x - 1):
        return x - 0.5
    return x * x / 2 if asd.branch(x + 1) else -x - 0.5


def np_huber(x):
    a = np.abs(x)
    return np.where(a <= 1, x * x / 2, a - 0.5)


# ----- the decision rule of Algorithm 7 -----

@pytest.mark.parametrize(("x", "v", "slope"), [
    (0.0, 1.0, 1.0), (0.0, -1.0, 0.0), (0.0, 0.0, 1.0), (2.0, -5.0, 1.0), (-2.0, 5.0, 0.0),
])
def test_relu_branch_follows_the_direction(x, v, slope):
    value, dini, grad = relu.asd(np.array(x), direction=np.array(v))
    assert value == max(x, 0.0)
    assert grad == slope
    assert dini == slope * v


def test_identity_from_relus_is_one_at_zero():
    f = lambda x: relu(x) - relu(-x)  # noqa: E731
    for seed in range(5):
        assert asd.subgrad(f, seed=seed)(0.0) == 1.0


def test_plain_call_and_scalar_result():
    out = relu(np.array([-1.0, 0.0, 2.5]))
    np.testing.assert_array_equal(out, [0.0, 0.0, 2.5])
    assert float(relu(-3.0)) == 0.0
    assert isinstance(relu, asd.Primitive) and isinstance(relu, BranchingPrimitive)


def test_branch_outside_a_program():
    assert asd.branch(0.0) is True
    assert asd.branch(-1) is False
    with pytest.raises(asd.ASDError, match=r"outside a @asd\.branching"):
        asd.branch(np.zeros(3))


# ----- elementwise on arrays: grouped by path, no per-element loop -----

def test_runs_grow_with_paths_not_elements():
    x = np.random.default_rng(0).normal(size=100_000)
    ev = evaluate(clip, [x, -0.5, 0.5], mode="value")
    assert sum(ev.paths.values()) == x.size
    assert len(ev.paths) == 3
    assert ev.runs <= 2 * len(ev.paths) + 1
    np.testing.assert_array_equal(ev.value, np.clip(x, -0.5, 0.5))


def test_tangents_asked_only_when_a_branch_ties():
    asked = []

    def lazy(index=None):
        asked.append(index)
        t = np.array([1.0, -1.0, 1.0])
        return t if index is None else t[index]

    relu._rule([np.array([1.0, -2.0, 3.0])], [lazy])
    assert asked == []
    _, lin = relu._rule([np.array([1.0, 0.0, 3.0])], [lazy])
    assert len(asked) == 1 and asked[0].tolist() == [False, True, False]  # the tied entry only
    np.testing.assert_array_equal(lin.d, [1.0, 0.0, 1.0])


def test_engine_counts_the_tied_entries_only():
    r = asd.asd(lambda x: relu(x).sum(), direction=np.ones(4))(np.array([0.0, 1.0, 0.0, -1.0]))
    assert [(t.primitive, t.count) for t in r.ties] == [("relu", 2)]


def test_broadcasting_like_a_ufunc():
    a = np.array([[0.0], [1.0]])
    b = np.array([0.0, 1.0, 2.0])

    @asd.branching
    def max2(p, q):
        return p if asd.branch(p - q) else q

    np.testing.assert_array_equal(max2(a, b), np.maximum(a, b))
    va, vb = np.array([[1.0], [-1.0]]), np.array([2.0, 0.5, 0.0])
    ans, lin = max2._rule([a, b], [lambda i=None: va, lambda i=None: vb])
    np.testing.assert_array_equal(ans, np.maximum(a, b))
    pick_a = (a > b) | ((a == b) & (va >= vb))
    np.testing.assert_array_equal(lin.maps[0].pull(np.ones((2, 3))), pick_a.sum(1, keepdims=True))
    np.testing.assert_array_equal(lin.maps[1].pull(np.ones((2, 3))), (~pick_a).sum(0))


def test_float32_stays_float32():
    x = np.array([0.0, 1.5], dtype=np.float32)
    assert relu(x).dtype == np.float32
    assert asd.subgrad(lambda x: relu(x).sum())(x).dtype == np.float32


# ----- exact oracle on the kinks -----

@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_huber_matches_the_exact_oracle(data):
    x = data.draw(kink_arrays((4,), kinks=(-1.0, 1.0)))
    v = data.draw(directions((4,), allow_zero_entries=False))
    value, grad = exact.limiting_gradient(lambda z: np.sum(np_huber(z)), x, v)
    got_value, got_grad = asd.value_and_subgrad(lambda z: huber(z).sum(), direction=v)(x)
    assert got_value == float(value)
    np.testing.assert_array_equal(got_grad, np.array(grad, dtype=float))
    w = data.draw(directions((4,)))  # zero entries: degenerate ties, Dini still unique
    _, dini = asd.directional(lambda z: huber(z).sum())(x, w)
    assert dini == float(exact.directional_derivative(lambda z: np.sum(np_huber(z)), x, w))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_clip_matches_the_exact_oracle(data):
    lo = data.draw(dyadics(2.0))
    hi = lo + data.draw(dyadics(2.0).filter(lambda d: d >= 0))
    x = data.draw(kink_arrays((3,), kinks=(lo, hi)))
    v = data.draw(directions((3,), allow_zero_entries=False))
    ref = lambda z: np.sum(np.minimum(np.maximum(z, lo), hi))  # noqa: E731
    value, grad = exact.limiting_gradient(ref, x, v)
    got_value, got_grad = asd.value_and_subgrad(lambda z: clip(z, lo, hi).sum(), direction=v)(x)
    assert got_value == float(value)
    np.testing.assert_array_equal(got_grad, np.array(grad, dtype=float))


# ----- the unqualified program and degenerate ties -----

def test_unqualified_relu_gives_a_wrong_subgradient_and_is_flagged():
    f = lambda x: relu_cubed(x) - relu_cubed(-x)  # noqa: E731
    value, g, report = asd.value_and_subgrad(f, direction=1.0, diagnostics=True)(0.0)
    degenerate = report.degenerate
    assert value == 0.0 and g == 2.0  # the identity has derivative 1
    assert [(t.primitive, t.count) for t in degenerate] == [("relu_cubed", 1)] * 2
    _, g_ok, none = asd.value_and_subgrad(lambda x: relu(x) - relu(-x), direction=1.0,
                                          diagnostics=True)(0.0)
    assert g_ok == 1.0 and none.degenerate == []


def test_degenerate_ties_are_counted_per_element():
    ev = evaluate(relu_cubed, [np.array([0.0, 0.0, 1.0])], [np.array([1.0, -1.0, 0.0])])
    assert ev.degenerate == 2
    ev = evaluate(relu, [np.array([0.0, 0.0, 1.0])], [np.array([1.0, 0.0, 0.0])])
    assert ev.degenerate == 1


# ----- the computational model -----

def test_declared_smooth_functions():
    @asd.branching(smooth={"expm1"})
    def elu(x):
        return x if asd.branch(x) else np.expm1(x)

    x = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(elu(x), np.where(x > 0, x, np.expm1(x)))
    g = asd.subgrad(lambda z: elu(z).sum(), direction=np.array([1.0, -1.0, 1.0]))(x)
    np.testing.assert_allclose(g, [np.exp(-1.0), 1.0, 1.0])

    @asd.branching
    def undeclared(x):
        return x if asd.branch(x) else np.expm1(x)

    with pytest.raises(asd.UnsupportedError, match="smooth"):
        undeclared(x)


@pytest.mark.parametrize(("program", "match"), [
    (lambda x: x if x > 0 else 0.0, "asd.branch"),
    (lambda x: 1.0 / x, "division"),
    (lambda x: x ** 0.5, "integer powers"),
    (lambda x: np.abs(x), "absolute"),
    (lambda x: x + np.ones(2), "scalars"),
])
def test_outside_the_model_is_refused(program, match):
    with pytest.raises((asd.ASDError, TypeError), match=match):
        asd.branching(program)(np.array([1.0, -1.0]))


def test_programs_compose_inline():
    @asd.branching
    def abs_via_relu(x):
        return relu(x) + relu(-x)

    x = np.array([0.0, -2.0, 3.0])
    np.testing.assert_array_equal(abs_via_relu(x), np.abs(x))
    g = asd.subgrad(lambda z: abs_via_relu(z).sum(), direction=np.array([-1.0, 1.0, 1.0]))(x)
    np.testing.assert_array_equal(g, [-1.0, -1.0, 1.0])


def test_traced_program_prints_its_name():
    text = str(asd.trace(lambda x: huber(x).sum())(np.zeros(2)))
    assert "huber" in text
