"""asd.jacobian: forward mode (push an identity batch) and reverse mode (pull one) agree
with each other and with the exact limiting Jacobian, on random vector programs with ties."""

from functools import partial

import numpy as np
import pytest
from hypothesis import given, reject, settings

import asd
from asd.testing.exact import DegenerateTie, limiting_jacobian
from tests.programs import assert_exact, run, vector_programs


@settings(max_examples=150, deadline=None)
@given(vector_programs())
def test_forward_and_reverse_agree_with_the_oracle(case):
    program, x, v = case
    f = partial(run, program)
    forward = asd.jacobian(f, direction=v, mode="forward")(x)
    reverse = asd.jacobian(f, direction=v, mode="reverse")(x)
    chosen = asd.jacobian(f, direction=v)(x)
    assert np.array_equal(forward, reverse), f"forward {forward} != reverse {reverse}"
    assert np.array_equal(chosen, forward)
    try:
        expected = limiting_jacobian(f, x, v)
    except DegenerateTie:
        reject()
    assert_exact(forward, expected, "jacobian")


def relu_net(params, x):
    w, b = params
    return {"h": asd.relu(w @ x + b), "s": asd.abs(x).sum()}


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_structured_inputs_and_outputs(mode):
    w = np.array([[1.0, -1.0, 0.0], [2.0, 0.0, 1.0]])
    b = np.array([0.0, -2.0])
    x = np.array([1.0, 1.0, 0.0])  # w @ x + b = [0, 0]: both relus at their kink
    v = np.array([1.0, -1.0, 2.0])
    jac = asd.jacobian(relu_net, argnums=1, direction=v, mode=mode)((w, b), x)
    # d(w @ x + b) along v = w @ v = [2, 4] > 0: both relus take their active branch
    np.testing.assert_array_equal(jac["h"], w)
    np.testing.assert_array_equal(jac["s"], [1.0, 1.0, 1.0])
    other = asd.jacobian(relu_net, argnums=1, direction=-v, mode=mode)((w, b), x)
    np.testing.assert_array_equal(other["h"], np.zeros((2, 3)))
    np.testing.assert_array_equal(other["s"], [1.0, 1.0, -1.0])


def test_bad_mode():
    with pytest.raises(ValueError, match="mode"):
        asd.jacobian(asd.relu, mode="sideways")
