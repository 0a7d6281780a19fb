"""The public API contract of DESIGN.md: results, structures, dtypes, directions, modes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
import asd.numpy as anp


def f1(x):
    return x


def f2(x):
    return asd.relu(x) - asd.relu(-x)


def f3(x):
    return 10 * f1(x) - 9 * f2(x)


def f4(x):
    return asd.relu(asd.relu(x)) - asd.relu(x)


# ----- the paper's examples -----

@pytest.mark.parametrize("seed", range(20))
def test_identity_built_from_relu_has_derivative_one_for_every_seed(seed):
    assert asd.subgrad(f2, seed=seed)(0.0) == 1.0
    assert asd.subgrad(f3, seed=seed)(0.0) == 1.0
    assert asd.subgrad(f4, seed=seed)(0.0) == 0.0


@pytest.mark.parametrize("v", [-1.0, 1.0, -0.25, 3.0])
def test_given_direction_selects_the_branch(v):
    assert asd.subgrad(asd.relu, direction=v)(0.0) == (1.0 if v > 0 else 0.0)
    assert asd.subgrad(asd.abs, direction=v)(0.0) == np.sign(v)


def test_directional_derivatives_at_kinks():
    assert asd.directional(asd.relu)(0.0, -1.0) == (0.0, 0.0)
    assert asd.directional(asd.relu)(0.0, 1.0) == (0.0, 1.0)
    assert asd.directional(asd.abs)(0.0, -1.0) == (0.0, 1.0)
    assert asd.directional(asd.abs)(0.0, 0.0) == (0.0, 0.0)
    f = lambda x: asd.maximum(x[0], x[1])  # noqa: E731
    value, dot = asd.directional(f)(np.zeros(2), np.array([-1.0, -3.0]))
    assert (value, dot) == (0.0, -1.0)


def test_scaling_the_direction_does_not_change_the_subgradient():
    f = lambda x: asd.maximum(x[0], x[1]) + asd.relu(x[0] - x[2])  # noqa: E731
    x = np.zeros(3)
    v = np.array([0.3, -0.1, 0.7])
    g = asd.subgrad(f, direction=v)(x)
    for scale in (1e-6, 3.0, 1e6):
        np.testing.assert_array_equal(asd.subgrad(f, direction=scale * v)(x), g)


def test_seed_is_reproducible_and_direction_is_on_the_sphere():
    f = lambda x: anp.sum(asd.relu(x))  # noqa: E731
    x = np.zeros(5)
    a = [asd.subgrad(f, seed=7)(x) for _ in range(3)]
    assert all(np.array_equal(a[0], b) for b in a)
    assert {tuple(asd.subgrad(f, seed=s)(x)) for s in range(30)} != {tuple(a[0])}


# ----- arguments, structures, dtypes -----

def test_argnums_tuple_and_nested_structures():
    def f(params, x, scale):
        return scale * anp.sum(asd.relu(params["w"] @ x + params["b"][0]))

    params = {"w": np.array([[1.0, -1.0]]), "b": [np.zeros(1)]}
    x = np.array([1.0, 1.0])
    gp = asd.subgrad(f, direction={"w": np.ones((1, 2)), "b": [np.ones(1)]})(params, x, 2.0)
    assert set(gp) == {"w", "b"} and isinstance(gp["b"], list)
    np.testing.assert_array_equal(gp["w"], [[2.0, 2.0]])
    np.testing.assert_array_equal(gp["b"][0], [2.0])
    gp2, gx = asd.subgrad(f, argnums=(0, 1), seed=0)(params, x, 2.0)
    assert gx.shape == (2,) and gp2["w"].shape == (1, 2)


def test_python_floats_give_numpy_scalars_and_float32_stays_float32():
    g = asd.subgrad(lambda x: x * x)(3.0)
    assert isinstance(g, np.float64) and g == 6.0
    x32 = np.array([1.0, -2.0], dtype=np.float32)
    value, g32 = asd.value_and_subgrad(lambda x: anp.sum(asd.relu(x) * 3.0))(x32)
    assert g32.dtype == np.float32 and value.dtype == np.float32
    np.testing.assert_array_equal(g32, [3.0, 0.0])


def test_integer_inputs_are_differentiated_as_floats():
    assert asd.subgrad(lambda x: x * x)(3) == 6.0


def test_constant_output_has_zero_subgradient():
    value, g = asd.value_and_subgrad(lambda x: 5.0)(np.ones(2))
    assert value == 5.0
    np.testing.assert_array_equal(g, np.zeros(2))


def test_non_scalar_output_names_jacobian():
    with pytest.raises(asd.ShapeError, match="jacobian"):
        asd.subgrad(asd.relu)(np.zeros(3))


def test_zero_or_misshaped_direction_is_refused():
    with pytest.raises(ValueError, match="nonzero"):
        asd.subgrad(asd.relu, direction=0.0)(0.0)
    with pytest.raises(asd.ShapeError, match="shape"):
        asd.subgrad(lambda x: anp.sum(x), direction=np.ones(2))(np.ones(3))


# ----- directional, jacobian, trace -----

def test_directional_structured_output():
    def f(x):
        return {"r": asd.relu(x), "s": anp.sum(asd.abs(x))}

    value, dot = asd.directional(f)(np.array([0.0, 2.0]), np.array([-1.0, 1.0]))
    np.testing.assert_array_equal(dot["r"], [0.0, 1.0])
    assert dot["s"] == 2.0
    np.testing.assert_array_equal(value["r"], [0.0, 2.0])


@pytest.mark.parametrize("mode", [None, "forward", "reverse"])
def test_jacobian_modes_agree(mode):
    w = np.array([[1.0, -1.0, 0.0], [2.0, 0.5, 1.0]])

    def f(x):
        return asd.maximum(w @ x, 0.0) * x[:2]

    x = np.array([1.0, 1.0, -1.0])
    v = np.array([1.0, -2.0, 0.5])
    jac = asd.jacobian(f, direction=v, mode=mode)(x)
    assert jac.shape == (2, 3)
    expected = asd.jacobian(f, direction=v, mode="forward")(x)
    np.testing.assert_allclose(jac, expected)


def test_jacobian_of_scalar_input_and_multiple_arguments():
    jac = asd.jacobian(lambda a, b: a * b, argnums=(0, 1), seed=0)(np.ones(2), 3.0)
    np.testing.assert_array_equal(jac[0], 3.0 * np.eye(2))
    np.testing.assert_array_equal(jac[1], np.ones(2))


def test_trace_prints_a_listing_and_re_evaluates():
    prog = asd.trace(f2)(np.zeros(3))
    text = str(prog)
    assert "%1 = relu %0" in text and "%4 = subtract %1, %3" in text and "return %4" in text
    x = np.array([1.5, -2.0, 0.0])
    np.testing.assert_array_equal(prog(x), x)
    assert asd.subgrad(lambda x: anp.sum(prog(x)), seed=0)(np.zeros(3)).tolist() == [1.0] * 3
    with pytest.raises(ValueError, match="shape"):
        prog(np.zeros(4))


# ----- laziness: no tangent work without ties, no work on constants -----

def test_tangents_are_computed_only_at_ties():
    from asd.api import _Inputs, _sweep

    w = np.array([[1.0, 2.0], [3.0, -4.0]])
    f = lambda x: anp.sum(asd.relu(w @ asd.relu(x)))  # noqa: E731
    trace, _, _ = _sweep(f, _Inputs((np.array([1.0, -1.0]),), 0), None, 0)
    assert all(t is None for t in trace.tangents[2:]), "tangents computed without a tie"
    trace, _, _ = _sweep(f, _Inputs((np.array([1.0, 0.0]),), 0), None, 0)
    assert trace.tangents[1] is None and trace.tangents[2] is None  # only the input is needed


def test_constants_are_not_traced():
    counts = {"rule": 0}
    original = asd.library.smooth.multiply_p.rule

    def counting(xs, dxs):
        counts["rule"] += 1
        return original(xs, dxs)

    asd.library.smooth.multiply_p.rule = counting
    try:
        w = np.ones(3)
        prog = asd.trace(lambda x: x * (w * 2.0))(np.ones(3))
        asd.subgrad(lambda x: anp.sum(x * (w * 2.0)), seed=0)(np.ones(3))
    finally:
        asd.library.smooth.multiply_p.rule = original
    assert counts["rule"] == 1  # only x * const; w * 2.0 ran as plain numpy
    assert len([n for n in prog.nodes if n.prim is not None]) == 1


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_identity_from_relu_on_vectors_for_random_seeds(seed):
    g = asd.subgrad(lambda x: anp.sum(f2(x)), seed=seed)(np.zeros(4))
    np.testing.assert_array_equal(g, np.ones(4))


def test_a_sweep_leaves_no_reference_cycle():
    """A call frees its sweep (every value, map and tangent) by reference counting, not at
    the next cyclic collection: a self-calling closure in the pytree helpers once kept the
    traced leaves, and with them a whole trace, alive until the GC ran (memory held across
    calls, and a GC pause freeing a model's activations inside the next call)."""
    import gc

    def loss(p):
        return asd.relu(p["w"] @ np.array([1.0, -2.0, 0.5]) + p["b"]).sum() + asd.abs(p["b"][0])

    p = {"w": np.array([[1.0, 0.5, 2.0], [0.0, 1.0, 2.0]]), "b": np.array([0.0, 1.0])}
    calls = [asd.value_and_subgrad(loss, seed=0), asd.asd(loss, seed=0),
             asd.jit(asd.value_and_subgrad(loss, seed=0))]
    for f in calls:
        f(p)
    gc.collect()
    gc.disable()
    try:
        for f in calls:
            f(p)
            assert gc.collect() == 0
    finally:
        gc.enable()
