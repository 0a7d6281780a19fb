"""The rule checker passes correct rules and catches each kind of wrong one.

A checker that cannot fail proves nothing, so most tests here define a deliberately broken
primitive and assert that `check_rule` raises an AssertionError naming the broken check.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import asd
from asd.extend import Closure, Diagonal, FanIn, Primitive
from asd.testing import RuleReport, check_rule
from asd.testing.strategies import (
    boundary_points,
    directions,
    kink_arrays,
    pool_windows,
    tied_arrays,
)


def relu_ref(x):
    return np.maximum(x, 0.0)


# ----- deliberately wrong rules -----

def _broken(name, impl, rule):
    prim = Primitive(name, impl)
    prim.defrule(rule)
    return prim


def _zero_slope_at_kink_rule(xs, dxs):
    (x,) = xs
    x = np.asarray(x)
    return np.maximum(x, 0), Diagonal((x > 0).astype(float), x.shape)


relu_fixed_zero = _broken("relu_fixed_zero", lambda x: np.maximum(x, 0), _zero_slope_at_kink_rule)


def _not_transposed_rule(xs, dxs):
    (x,) = xs
    shape = np.shape(x)
    return 2.0 * np.asarray(x), Closure(lambda t: 2.0 * t, lambda ct: 3.0 * ct, shape, shape)


double_bad_pull = _broken("double_bad_pull", lambda x: 2.0 * np.asarray(x), _not_transposed_rule)


def _off_by_one_rule(xs, dxs):
    (x,) = xs
    return np.asarray(x) + 1.0, Diagonal(1.0, np.shape(x))


identity_wrong_value = _broken("identity_wrong_value", lambda x: np.asarray(x),
                               _off_by_one_rule)


def _unbatched_rule(xs, dxs):
    (x,) = xs
    shape = np.shape(x)

    def pull(ct):
        ct = np.asarray(ct)
        return np.broadcast_to(ct.reshape(ct.shape + (1,) * len(shape)), ct.shape + shape)

    # push sums a leading batch axis away together with the entries: wrong when batched
    return np.sum(x), Closure(lambda t: np.sum(t), pull, shape, ())


sum_bad_batch = _broken("sum_bad_batch", lambda x: np.sum(x), _unbatched_rule)


def _float64_rule(xs, dxs):
    (x,) = xs
    x = np.asarray(x, dtype=np.float64)
    return 3.0 * x, Diagonal(3.0, x.shape)


triple_upcast = _broken("triple_upcast", lambda x: 3.0 * np.asarray(x, dtype=np.float64),
                        _float64_rule)


def _exp_wrong_slope_rule(xs, dxs):
    (x,) = xs
    ans = np.exp(x)
    return ans, Diagonal(ans * (1.0 + 1e-6), np.shape(x))


exp_slightly_wrong = _broken("exp_slightly_wrong", np.exp, _exp_wrong_slope_rule)


def _maximum_picks_second_rule(xs, dxs):
    a, b = xs
    ans = np.maximum(a, b)
    pick_a = np.asarray(a > b)
    return ans, FanIn(Diagonal(pick_a, np.shape(a)), Diagonal(~pick_a, np.shape(b)))


maximum_ignores_direction = _broken("maximum_ignores_direction", np.maximum,
                                    _maximum_picks_second_rule)


class _WrongDemand(Diagonal):
    """Push and pull are right; the on-demand entries are off by a factor of 2."""

    __slots__ = ()

    def push_at(self, mask, t_at):
        return 2.0 * t_at(mask)


def _wrong_demand_rule(xs, dxs):
    (x,) = xs
    return np.asarray(x) * 1.0, _WrongDemand(None, np.shape(x))


copy_bad_demand = _broken("copy_bad_demand", lambda x: np.asarray(x) * 1.0, _wrong_demand_rule)


# ----- correct rules pass -----

def test_relu_passes_on_the_kink_in_both_directions():
    for v in (1.0, -1.0, 0.0):
        x, d = np.array([0.0, 0.0]), np.array([v, 1.0])
        report = check_rule(asd.relu, x, direction=d, reference=relu_ref, exact=True)
        assert isinstance(report, RuleReport)
        assert report.oracle == "exact" and report.directions == 1
        assert {"value", "rule value", "dot-product", "forward == reverse", "dini"
                } <= set(report.checks)
        # v = 0 on the kink keeps it tied along the ray: a second direction w decides, and the
        # Jacobian is checked against the oracle along v + ηw (the lexicographic element)
        assert "jacobian" in report.checks and not report.skipped


def test_composition_of_kinks_passes():
    def f(x):
        return asd.relu(x) - asd.relu(-x) + asd.maximum(x, 0.5 * x)

    def ref(x):
        return np.maximum(x, 0.0) - np.maximum(-x, 0.0) + np.maximum(x, 0.5 * x)

    report = check_rule(f, np.array([0.0, 1.0, -2.0]), reference=ref, n_directions=4)
    assert report.directions == 4 and report.checks["jacobian"] == 4


def test_several_arguments_and_argnums():
    a, b = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, -1.0])
    report = check_rule(lambda a, b: asd.relu(a @ b), a, b, exact=True,
                        reference=lambda a, b: np.maximum(a @ b, 0.0))
    assert report.checks["dot-product"] >= 4
    report = check_rule(lambda a, b: asd.relu(a @ b), a, b, argnums=1,
                        direction=np.array([1.0, 0.0]),
                        reference=lambda a, b: np.maximum(a @ b, 0.0))
    assert report.directions == 1


def test_transcendental_uses_mpmath():
    report = check_rule(lambda x: np.log(x) * x, np.array([0.5, 1.0, 3.0]))
    assert report.oracle == "mpmath" and report.checks["jacobian"] == 2


def test_float32_passes_and_keeps_dtype():
    report = check_rule(lambda x: asd.relu(x) * 2.0, np.array([0.0, 1.5], dtype=np.float32),
                        reference=lambda x: np.maximum(x, 0) * 2.0)
    assert report.checks["value"] >= 2


def test_a_tie_persisting_along_v_is_checked_lexicographically():
    # max(x0, x1) at x0 == x1 along v = (1, 1): the tie persists along the ray, so a second
    # direction w decides it, and the Jacobian is checked against the oracle along v + ηw.
    report = check_rule(lambda x: asd.maximum(x[0], x[1]), np.array([0.0, 0.0]),
                        direction=np.array([1.0, 1.0]),
                        reference=lambda x: np.maximum(x[0], x[1]))
    assert not report.skipped
    assert report.checks["dini"] == 1 and report.checks["jacobian"] == 1


# ----- wrong rules fail, naming the check -----

def test_fixed_zero_slope_at_the_kink_fails():
    with pytest.raises(AssertionError, match="'dini' check") as info:
        check_rule(relu_fixed_zero, np.array([0.0]), direction=np.array([1.0]),
                   reference=relu_ref)
    message = str(info.value)
    assert "one-sided derivative" in message and "along v" in message
    assert "expected" in message and "got" in message


def test_fixed_zero_slope_passes_where_the_direction_agrees():
    # going left from 0 the slope 0 is right: the checker must not cry wolf
    check_rule(relu_fixed_zero, np.array([0.0]), direction=np.array([-1.0]),
               reference=relu_ref)


def test_pull_that_is_not_the_transpose_fails():
    with pytest.raises(AssertionError, match="'dot-product' check") as info:
        check_rule(double_bad_pull, np.array([1.0, 2.0]), reference=lambda x: 2.0 * x)
    assert "transpose" in str(info.value) and "double_bad_pull" in str(info.value)


def test_push_at_that_disagrees_with_push_fails():
    with pytest.raises(AssertionError, match="'push_at' check"):
        check_rule(copy_bad_demand, np.array([1.0, 2.0, 3.0, 4.0]), reference=lambda x: x)


def test_wrong_value_fails():
    with pytest.raises(AssertionError, match="'rule value' check"):
        check_rule(identity_wrong_value, np.array([1.0, 2.0]), reference=lambda x: x)


def test_value_that_differs_from_the_reference_fails():
    with pytest.raises(AssertionError, match="'value' check"):
        check_rule(asd.relu, np.array([1.0, -2.0]), reference=lambda x: np.abs(x))


def test_dtype_change_fails():
    with pytest.raises(AssertionError, match="float32 stays float32"):
        check_rule(triple_upcast, np.array([1.0], dtype=np.float32),
                   reference=lambda x: 3 * x)


def test_map_that_drops_the_batch_axis_fails():
    with pytest.raises(AssertionError, match="'batched map' check"):
        check_rule(sum_bad_batch, np.array([1.0, 2.0]), reference=np.sum)


def test_slightly_wrong_transcendental_slope_fails():
    with pytest.raises(AssertionError, match="'dini' check"):
        check_rule(exp_slightly_wrong, np.array([0.5, 2.0]), reference=np.exp)


def test_maximum_that_ignores_the_direction_fails():
    with pytest.raises(AssertionError, match=r"'dini' check|'jacobian' check"):
        check_rule(maximum_ignores_direction, np.array([1.0]), np.array([1.0]),
                   direction=(np.array([1.0]), np.array([0.0])),
                   reference=np.maximum)


def test_exact_true_refuses_a_transcendental_reference():
    with pytest.raises(TypeError, match="exact=True"):
        check_rule(np.log, np.array([1.0]), exact=True)


# ----- the strategies put points on the kinks -----

@settings(max_examples=30, deadline=None)
@given(st.data())
def test_relu_on_generated_kinks(data):
    shape = data.draw(st.sampled_from([(3,), (2, 2)]))
    x = data.draw(kink_arrays(shape))
    v = data.draw(directions(shape))
    assert np.any(x == 0) and np.any(v)
    check_rule(asd.relu, x, direction=v, reference=relu_ref, exact=True)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_strategies_plant_what_they_promise(data):
    x = data.draw(tied_arrays((3, 4)))
    assert len(np.unique(x)) < x.size
    b = data.draw(boundary_points((5,), -1.0, 2.0, dtype=np.float32))
    assert b.dtype == np.float32 and np.any((b == -1.0) | (b == 2.0))
    k = data.draw(kink_arrays((4,), kinks=(-1.0, 1.0)))
    assert np.any(np.isin(k, (-1.0, 1.0)))
    w = data.draw(pool_windows((2, 4, 6), window=(2, 3)))
    assert w.shape == (2, 4, 6)
    assert np.all(w * 16 == np.round(w * 16))  # dyadic


def test_strategies_reach_all_equal_windows_and_tied_maxima():
    x = find(pool_windows((2, 4), window=(2, 2)), lambda x: np.all(x[:, :2] == x[0, 0]))
    assert np.all(x[:, :2] == x[0, 0])
    t = find(tied_arrays((2, 3)), lambda t: np.count_nonzero(t == t.max()) >= 2 and t.max() > 0)
    assert np.count_nonzero(t == t.max()) >= 2
