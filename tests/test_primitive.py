"""The paper's ASD routine in literal form, from the same rule: [g(x), D[g; v](x), ∇p_z(x)]."""

import numpy as np
import pytest

import asd
from asd.extend import Diagonal, Primitive


@pytest.mark.parametrize("v,dini,grad", [(1.0, 1.0, 1.0), (-1.0, 0.0, 0.0), (0.0, 0.0, 1.0)])
def test_relu_asd_triple_at_the_kink(v, dini, grad):
    value, d, u = asd.library.piecewise.relu_p.asd(0.0, direction=v)
    assert (float(value), float(d), float(u)) == (0.0, dini, grad)


def test_maximum_asd_triple_breaks_ties_by_tangent_then_first_operand():
    maximum = asd.library.piecewise.maximum_p
    _, d, (ga, gb) = maximum.asd(1.0, 1.0, direction=(-1.0, 2.0))
    assert (float(d), float(ga), float(gb)) == (2.0, 0.0, 1.0)
    _, d, (ga, gb) = maximum.asd(1.0, 1.0, direction=(2.0, 2.0))
    assert (float(d), float(ga), float(gb)) == (2.0, 1.0, 0.0)


def test_vector_asd_returns_the_branch_jacobian():
    _, d, jac = asd.library.piecewise.relu_p.asd(np.zeros(2), direction=np.array([1.0, -1.0]))
    np.testing.assert_array_equal(d, [1.0, 0.0])
    np.testing.assert_array_equal(jac, np.diag([1.0, 0.0]))


def test_user_primitive_with_a_rule_differentiates_in_programs():
    cube = Primitive("cube", lambda x: x**3)

    @cube.defrule
    def cube_rule(xs, dxs):
        (x,) = xs
        return x**3, Diagonal(3 * x**2, np.shape(x))

    assert asd.subgrad(lambda x: cube(asd.relu(x)))(2.0) == 12.0
    assert cube(2.0) == 8.0  # untraced: plain numpy
    assert "%2 = cube %1" in str(asd.trace(lambda x: cube(asd.relu(x)))(1.0))


def test_primitive_without_a_rule_says_how_to_add_one():
    opaque = Primitive("opaque", np.tanh)
    with pytest.raises(asd.ASDError, match="defrule"):
        asd.subgrad(lambda x: opaque(x))(0.5)
