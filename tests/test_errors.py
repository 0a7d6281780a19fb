"""Every error class of DESIGN.md, raised with a message naming the node, the values and the fix."""

import numpy as np
import pytest

import asd
import asd.numpy as anp


def raises(exc, f, x, *fragments):
    with pytest.raises(exc) as info:
        asd.subgrad(f, seed=0)(x)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert isinstance(info.value, asd.ASDError)
    return info.value


def test_python_branch_on_a_traced_value():
    raises(asd.TracerBoolError, lambda x: x if x > 0 else -x, 0.0, "where", "direction")
    raises(asd.TracerBoolError, lambda x: x if bool(x) else -x, 1.0, "bool")
    raises(asd.TracerBoolError, lambda x: float(x), 1.0, "float()", "stop_gradient")
    raises(asd.TracerBoolError, lambda x: np.array([x, x]).sum(), 1.0, "stack")


def test_while_loop_on_a_traced_value():
    def f(x):
        while x > 1:
            x = x / 2
        return x

    raises(asd.TracerBoolError, f, 4.0, "while")


def test_comparison_used_as_a_number():
    err = raises(asd.NotLipschitzError, lambda x: (x > 0) * x, 0.5, "greater", "discontinuous",
                 "stop_gradient")
    assert err.args[0].startswith("%1 = greater %0, 0")


def test_discontinuous_value_behind_stop_gradient_is_allowed():
    g = asd.subgrad(lambda x: asd.stop_gradient((x > 0) * 1.0) * x, seed=0)(0.5)
    assert g == 1.0


def test_sqrt_at_zero_is_not_lipschitz():
    err = raises(asd.NotLipschitzError, lambda x: anp.sqrt(anp.sum(x * x)), np.zeros(2),
                 "sqrt", "asd.norm")
    assert err.node.startswith("%3 = sqrt %2")


def test_fractional_power_at_zero_is_not_lipschitz():
    raises(asd.NotLipschitzError, lambda x: anp.sum(x ** 0.5), np.array([0.0, 1.0]),
           "real_pow", "not Lipschitz at x = 0")


def test_where_with_a_jump_at_the_tie():
    err = raises(asd.NotLipschitzError, lambda x: anp.where(x > 0, 1.0, 0.0) + x, 0.0,
                 "jumps", "a != b")
    assert "where" in err.node


def test_where_without_jump_is_fine_and_away_from_ties_too():
    assert asd.subgrad(lambda x: anp.where(x > 0, x, 0.0), direction=1.0)(0.0) == 1.0
    assert asd.subgrad(lambda x: anp.where(x > 0, 1.0, 0.0) * x, seed=0)(2.0) == 1.0


def test_log_of_a_negative_names_the_first_non_finite_node():
    err = raises(asd.NonFiniteError, lambda x: anp.log(x - 2.0) * 3.0, 1.0, "log", "nan",
                 "domain")
    assert err.node is None and str(err).startswith("%2 = log %1")


def test_overflow_is_reported():
    raises(asd.NonFiniteError, lambda x: (x * 1e200) * (x * 1e200), 1.0, "multiply", "inf")


def test_unsupported_numpy_function_names_it_and_how_to_register():
    raises(asd.UnsupportedError, lambda x: np.fft.fft(x).sum(), np.ones(2), "fft")
    err = raises(asd.UnsupportedError, lambda x: np.sinc(x), 1.0, "numpy.sinc", "defrule",
                 "register_numpy")
    assert isinstance(err, NotImplementedError)


def test_shape_mismatch_is_caught_at_trace_time_with_both_shapes():
    err = raises(asd.ShapeError, lambda x: anp.sum(x + np.ones(4)), np.ones(3), "(3,)", "(4,)")
    assert isinstance(err, ValueError) and "add" in str(err)


def test_nested_sweeps_are_refused():
    outer = {}

    def f(x):
        outer["t"] = x
        return x * 1.0

    asd.subgrad(f, seed=0)(1.0)
    with pytest.raises(asd.NestingError, match="two different sweeps"):
        asd.subgrad(lambda y: y * outer["t"], seed=0)(1.0)


def test_item_assignment_is_refused():
    def f(x):
        x[0] = 1.0
        return x.sum()

    with pytest.raises(TypeError, match="immutable"):
        asd.subgrad(f, seed=0)(np.ones(2))
