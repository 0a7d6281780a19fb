"""Order rules in a staged sweep: the eager element where first order decides, full ties counted.

The order rules (max/min, sort, top-k sums, the median, max pooling, cummax) declare their rows
to the engine (`asd.core.ordering`); in a staged sweep the engine orders them by the key stack
``(value, tangent along v, along w1, …)`` as array operations. The battery runs the random
programs of ``tests/programs.py`` restricted to those ops through an eager sweep and a numpy
staged one along the same direction: wherever the eager sweep decided every tie by its tangent,
the gradients agree bit for bit and nothing is counted undecided. Then JAX: ``jnp.max``,
``jnp.sort``, ``jax.lax.top_k`` and a small CNN (conv, relu, max pooling by
``reduce_window``, dense) inside ``jax.jit`` and ``jax.vmap``, with no host callback.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import asd
from asd.core import staged
from asd.core.sweep import LexDirections
from tests.programs import programs, run

ORDER_OPS = ("max", "min", "sort", "topk_sum", "median", "max_pool1d", "cummax")


def staged_gradient(f, x, v, mode="full", lex=None):
    """``(value, gradient, undecided)`` of ``f`` at ``x`` by a numpy staged sweep along ``v``."""
    trace, out, ids = staged.sweep(f, [x], [np.asarray(v, float)],
                                   LexDirections() if lex is None else lex, mode=mode)
    (g,) = staged.pull(trace, [out], [np.ones((), out.dtype)], ids, [x])
    return out.value, g, int(staged.undecided(trace, np.zeros(())))


def by_tangent(result) -> bool:
    return all(d.how == "tangent" for d in result.decisions)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(names=ORDER_OPS))
def test_staged_order_equals_eager_where_the_tangent_decides(case):
    program, x, v = case
    x = np.asarray(x, float)

    def f(t):
        return run(program, t)

    eager = asd.asd(f, direction=v)(x)
    value, g, undecided = staged_gradient(f, x, v)
    assert value == eager.value
    if by_tangent(eager):
        assert undecided == 0
        np.testing.assert_array_equal(np.asarray(g, float).reshape(np.shape(x)),
                                      np.asarray(eager.subgradient, float).reshape(np.shape(x)))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(names=ORDER_OPS))
def test_the_probe_decides_by_values_and_flags_every_tie(case):
    program, x, v = case
    x = np.asarray(x, float)

    def f(t):
        return run(program, t)

    eager = asd.asd(f, direction=v)(x)
    trace, out, _ = staged.sweep(f, [x], [np.asarray(v, float)], LexDirections(),
                                 mode="values")
    assert out.value == eager.value
    if eager.ties:  # an order rule met a tie: the probe sends the call to the full sweep
        assert bool(staged.tied(trace, np.zeros(())))


ORDER_FUNCTIONS = {
    "max": lambda x: asd.numpy.max(x),
    "min": lambda x: asd.numpy.min(x),
    "sort": lambda x: asd.numpy.sum(asd.sort(x) * np.array([1.0, 2.0, 3.0, 4.0])),
    "topk_sum": lambda x: asd.topk_sum(x, 2),
    "median": lambda x: asd.median(x),
    "max_pool1d": lambda x: asd.numpy.sum(asd.max_pool1d(x, 2) * np.array([1.0, -3.0])),
    "cummax": lambda x: asd.numpy.sum(asd.cummax(x) * np.array([1.0, 2.0, 3.0, 4.0])),
}


@pytest.mark.parametrize("name", list(ORDER_FUNCTIONS))
def test_ties_flat_to_first_order_along_every_direction_are_counted(name):
    # x0 and x1 tie, and stay tied to first order along v and along w1; their gradients
    # differ, so which one is taken matters and first order cannot tell: counted, not guessed
    f = ORDER_FUNCTIONS[name]
    x = np.array([1.0, 1.0, 1.0, 1.0]) if name != "min" else np.array([1.0, 1.0, 2.0, 2.0])
    lex = LexDirections([[np.array([2.0, 2.0, 2.0, 2.0])]], random=0)
    _, _, undecided = staged_gradient(f, x, np.array([1.0, 1.0, 1.0, 1.0]), lex=lex)
    assert undecided > 0


@pytest.mark.parametrize("name", list(ORDER_FUNCTIONS))
def test_tangents_decide_a_tie_as_the_eager_sweep_does(name):
    f = ORDER_FUNCTIONS[name]
    x = np.array([1.0, 1.0, 1.0, 1.0])
    v = np.array([0.5, -1.0, 2.0, 0.25])
    eager = asd.asd(f, direction=v)(x)
    assert by_tangent(eager) and eager.decisions
    _, g, undecided = staged_gradient(f, x, v)
    assert undecided == 0
    np.testing.assert_array_equal(g, eager.subgradient)


def dead_pool(x):
    """Windows of dead relus: all tied at 0 along every direction, but with zero
    linearizations, so either choice gives the same gradient (no decision needed)."""
    h = asd.relu(x - 1.0)
    return asd.numpy.sum(asd.max_pool2d(asd.numpy.reshape(h, (1, 1, 4, 4)), 2))


def test_dead_relus_in_a_pooling_window_are_not_undecided():
    x = np.zeros(16)
    x[5] = 3.0  # one live window
    v = np.random.default_rng(0).standard_normal(16)
    eager = asd.asd(dead_pool, direction=v)(x)
    _, g, undecided = staged_gradient(dead_pool, x, v)
    assert undecided == 0
    np.testing.assert_array_equal(g, eager.subgradient)


def test_a_tie_flat_along_v_is_decided_by_the_next_direction():
    # max(x0, x1) at x0 == x1 along v = (1, 1): flat along v, w1 decides; the eager sweep's
    # series is flat too (x0 - x1 vanishes on the ray), so both take w1's side
    x = np.array([1.0, 1.0])
    v = np.array([1.0, 1.0])
    lex = LexDirections([[np.array([-1.0, 2.0])]], random=0)
    _, g, undecided = staged_gradient(lambda t: asd.numpy.max(t), x, v, lex=lex)
    assert undecided == 0
    eager = asd.subgrad(lambda t: asd.numpy.max(t), directions=[v, np.array([-1.0, 2.0])])(x)
    np.testing.assert_array_equal(g, eager)
    np.testing.assert_array_equal(g, [0.0, 1.0])


def test_a_gather_at_a_tied_argmax_is_refused_eagerly_and_counted_staged():
    def f(x):
        return x[2:][asd.numpy.argmax(x[:2])]  # x[2] or x[3]: they differ

    x = np.array([1.0, 1.0, 0.0, 5.0])
    v = np.array([1.0, 1.0, 0.0, 0.0])
    with pytest.raises(asd.NotLipschitzError, match="tied positions gather different"):
        asd.subgrad(f, direction=v)(x)
    _, _, undecided = staged_gradient(f, x, v, lex=LexDirections(
        [[np.array([1.0, 1.0, 0.0, 0.0])]], random=0))
    assert undecided > 0


def test_statistics_refusals_are_counted_not_raised_in_a_staged_sweep():
    # eagerly refused (weights summing to 0, a zero variance); staged: counted undecided
    def average(w):
        return np.average(np.array([1.0, 2.0]), weights=w)

    def correlation(x):
        return np.corrcoef(x, np.array([1.0, 2.0, 4.0]))[0, 1]

    for f, x in ((average, np.array([1.0, -1.0])), (correlation, np.zeros(3))):
        with pytest.raises((ZeroDivisionError, asd.NotLipschitzError)):
            asd.subgrad(f)(x)
        with np.errstate(all="ignore"):
            _, _, undecided = staged_gradient(f, x, np.ones_like(x))
        assert undecided > 0


# ----- JAX: the order rules inside jax.jit / jax.vmap, with no callback -----

jax = pytest.importorskip("jax")
jnp = jax.numpy
import asd.jax  # noqa: E402  (registers the front end after the import check)


@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield


def jax_max(x):
    return jnp.max(jax.nn.relu(x[:3])) + jnp.min(x[1:])


RAMP = np.arange(1.0, 5.0)


def jax_max_axes(x):
    m = x.reshape(2, 2)
    return jnp.sum(jnp.max(m, axis=1)) + jnp.sum(jnp.min(m, axis=0, keepdims=True) * RAMP[:2])


def jax_sort(x):
    return jnp.dot(jnp.sort(x), RAMP)


def jax_top_k(x):
    return jnp.sum(jax.lax.top_k(x, 2)[0])


def conv_relu_pool(x, w, b, dense):
    """A flax/equinox-style CNN on ``x (N, 1, 6, 6)``: conv 3x3 (padding 1) -> relu ->
    2x2 max pooling (``reduce_window``) -> dense."""
    y = jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))
    h = jax.nn.relu(y + b[None, :, None, None])
    p = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return jnp.sum(jnp.tanh(p.reshape(p.shape[0], -1) @ dense))


RNG = np.random.default_rng(4)
IMAGES = np.maximum(RNG.standard_normal((2, 1, 6, 6)), 0.0)  # many zero patches
PARAMS = {  # numpy here; float64 JAX arrays inside the tests (x64 is on there)
    "random": (RNG.standard_normal((3, 1, 3, 3)), RNG.standard_normal(3) * 0.1,
               RNG.standard_normal((27, 2))),
    "zero": (np.zeros((3, 1, 3, 3)), np.zeros(3), RNG.standard_normal((27, 2))),
}


def close(a, b):
    """The same element: jit fuses and reorders float operations (a convolution's pull), so
    gradients agree to a few ulps, never by a different choice (that moves them by O(1))."""
    b = np.asarray(b)
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12,
                               atol=1e-12 * float(np.max(np.abs(b), initial=1.0)))


def cnn_in_x(params):
    w, b, dense = (jnp.asarray(p) for p in params)

    def f(x):
        return conv_relu_pool(x, w, b, dense)
    return f


def cnn_in_params(w, b, dense):
    return conv_relu_pool(jnp.asarray(IMAGES), w, b, dense)


VECTOR_CASES = {
    "max": (jax_max, [[0.0, 0.0, -1.0, 0.0], [1.0, 2.0, 2.0, 0.5]]),
    "max_axes": (jax_max_axes, [[1.0, 1.0, 1.0, 0.0], [2.0, 1.0, 1.0, 2.0]]),
    "sort": (jax_sort, [[1.0, 1.0, 0.0, 1.0], [3.0, 1.0, 2.0, 0.0]]),
    "top_k": (jax_top_k, [[2.0, 2.0, 2.0, 1.0], [0.0, 3.0, 1.0, 2.0]]),
}


def assert_no_callback(fn, *args):
    jaxpr = str(jax.make_jaxpr(fn)(*args))
    assert "callback" not in jaxpr


@pytest.mark.parametrize("name", list(VECTOR_CASES))
@pytest.mark.parametrize("seed", [0, 3])
def test_jit_equals_the_eager_sweep(name, seed):
    f, points = VECTOR_CASES[name]
    points = [jnp.asarray(p) for p in points]
    staged_fn = jax.jit(asd.jax.value_and_subgrad(f, seed=seed, report=True))
    for x in points:
        value, g = asd.jax.value_and_subgrad(f, seed=seed)(x)
        got_value, got, undecided = staged_fn(x)
        assert int(undecided) == 0
        assert float(got_value) == float(value)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(g))
    assert_no_callback(asd.jax.value_and_subgrad(f, seed=seed, report=True), points[0])


@pytest.mark.parametrize("name", list(VECTOR_CASES))
def test_vmap_gives_per_example_subgradients(name):
    f, points = VECTOR_CASES[name]
    points = [jnp.asarray(p) for p in points]
    v = jnp.asarray([0.5, -1.0, 2.0, 0.25])
    batched = jax.vmap(asd.jax.subgrad(f, direction=v))(jnp.stack(points))
    for x, g in zip(points, batched, strict=True):
        np.testing.assert_array_equal(np.asarray(g),
                                      np.asarray(asd.jax.subgrad(f, direction=v)(x)))


@pytest.mark.parametrize("init", list(PARAMS))
def test_cnn_in_its_input_under_jit(init):
    f, x = cnn_in_x(PARAMS[init]), jnp.asarray(IMAGES)
    value, g = asd.jax.value_and_subgrad(f, seed=1)(x)
    got_value, got, undecided = jax.jit(asd.jax.value_and_subgrad(f, seed=1, report=True))(x)
    assert int(undecided) == 0  # dead relus tie in the pooling windows: no decision needed
    close(got_value, value)
    close(got, g)
    assert_no_callback(asd.jax.value_and_subgrad(f, seed=1, report=True), x)


@pytest.mark.parametrize("init", list(PARAMS))
def test_cnn_in_its_parameters_under_jit(init):
    params = [jnp.asarray(p) for p in PARAMS[init]]
    value, g = asd.jax.value_and_subgrad(cnn_in_params, argnums=(0, 1, 2), seed=2)(*params)
    got_value, got, undecided = jax.jit(asd.jax.value_and_subgrad(
        cnn_in_params, argnums=(0, 1, 2), seed=2, report=True))(*params)
    assert int(undecided) == 0
    close(got_value, value)
    for a, b in zip(got, g, strict=True):
        close(a, b)


def test_cnn_per_example_subgradients_under_vmap():
    f = cnn_in_x(PARAMS["random"])
    v = jnp.asarray(np.random.default_rng(5).standard_normal((1, 6, 6)))

    def one(x):
        return f(x[None])

    images = jnp.asarray(IMAGES)
    batched = jax.jit(jax.vmap(asd.jax.subgrad(one, direction=v)))(images)
    for x, g in zip(images, batched, strict=True):
        close(g, asd.jax.subgrad(one, direction=v)(x))


def test_grad_of_function_for_a_cnn_stages_with_no_callback():
    f = cnn_in_x(PARAMS["random"])

    def loss(x):
        return asd.jax.function(f, seed=0)(x)

    x = jnp.asarray(IMAGES)
    assert_no_callback(jax.grad(loss), x)
    close(jax.jit(jax.grad(loss))(x), asd.jax.subgrad(f, seed=0)(x))


@pytest.mark.parametrize("library", ["numpy", "jax"])
def test_a_probe_leaves_windows_of_dead_relus_unflagged(library):
    # a pooling window of dead relus (all 0) is a tie at every call, even at a random point;
    # its entries took constant pieces, so the first is the eager element with no direction:
    # the probe must not send the call to the tangent work for it (issue 24: the CNN's cost).
    # numpy pools through `ray_argmax`, JAX arrays through the kernel (`ray_argmax_at`)
    x = np.zeros(16)
    x[5] = 3.0
    v = np.random.default_rng(0).standard_normal(16)
    want = asd.asd(dead_pool, direction=v)(x).subgradient
    if library == "jax":
        x, v = jnp.asarray(x), jnp.asarray(v)
    trace, out, ids = staged.sweep(dead_pool, [x], [v], LexDirections(), mode="values")
    assert not bool(staged.tied(trace, out.value))
    (g,) = staged.pull(trace, [out], [np.ones(()) if library == "numpy" else
                                      jnp.ones((), out.value.dtype)], ids, [x])
    np.testing.assert_array_equal(np.asarray(g), want)


def test_a_relu_tied_at_zero_in_a_dead_window_still_sends_the_pool_to_the_full_sweep():
    # x[0] - 1 == 0: that relu is tied, and along v it comes alive; its window (with dead
    # relus) must be re-decided by tangent, not keep the probe's first entry
    x = np.zeros(16)
    x[0], x[5] = 1.0, 3.0
    for sign in (1.0, -1.0):
        v = np.random.default_rng(1).standard_normal(16)
        v[0], v[1] = sign * abs(v[0]), 2.0  # entry 1 (dead, x=0) does not move the relu
        eager = asd.asd(dead_pool, direction=v)(x)
        probe, _, _ = staged.sweep(dead_pool, [x], [v], LexDirections(), mode="values")
        assert bool(staged.tied(probe, np.zeros(())))
        _, g, undecided = staged_gradient(dead_pool, x, v)
        assert undecided == 0
        np.testing.assert_array_equal(g, eager.subgradient)


def test_a_tie_the_tangent_decides_pushes_no_further_direction(monkeypatch):
    # the keys along w1, … and the dead test (a push of ones through |maps|) matter only
    # where candidates still tie after v: they run under `backend.when_any` (a lax.cond on
    # JAX, which skips them on the device); here a when_any that skips an empty mask, as
    # the cond does, must leave the element unchanged and push nothing further
    from asd.core import backend
    from asd.core.sweep import Trace

    pushed = []
    monkeypatch.setattr(Trace, "lex_tangent", lambda self, k, level: pushed.append(level))
    monkeypatch.setattr(Trace, "reach", lambda self, k: pushed.append("reach"))
    monkeypatch.setattr(backend, "when_any",
                        lambda mask, fn, carry: fn(carry) if np.any(mask) else carry)
    x = np.zeros(16)
    x[5] = 3.0
    v = np.random.default_rng(0).standard_normal(16)
    f = ORDER_FUNCTIONS["max_pool1d"]
    for point in (x[:4] * 0 + 1.0, x[:4]):  # tied windows decided by v
        eager = asd.asd(f, direction=v[:4])(point)
        _, g, undecided = staged_gradient(f, point, v[:4], lex=LexDirections((), random=2))
        assert undecided == 0 and pushed == []
        np.testing.assert_array_equal(g, eager.subgradient)


POOLINGS = {  # (window, stride, padding) of the last two axes
    "2x2": ((2, 2), (2, 2), ((0, 0), (0, 0))),
    "3x3 stride 2 padded": ((3, 3), (2, 2), ((1, 1), (1, 1))),
    "2x2 stride 1": ((2, 2), (1, 1), ((0, 0), (0, 0))),
    "3x2 stride (1, 2)": ((3, 2), (1, 2), ((0, 0), (0, 0))),
}


def relu_pool(pooling):
    """relu(x - 1) of integer-valued x: dead windows (all 0), windows tied at a live value
    (decided by the tangent), a relu at exactly 0 (tied itself), pooled with ``pooling``."""
    window, stride, padding = pooling

    def f(x):
        h = jax.nn.relu(x - 1.0)
        p = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1) + window, (1, 1) + stride,
                                  ((0, 0), (0, 0)) + padding)
        return jnp.sum(jnp.sin(p) * jnp.arange(p.size).reshape(p.shape))
    return f


@pytest.mark.parametrize("pooling", list(POOLINGS))
@pytest.mark.parametrize("seed", [0, 1])
def test_cnn_pooling_with_dead_and_tied_windows_under_jit_is_the_eager_element(pooling, seed):
    # the staged pool reads its windows as offset slices (`ray_argmax_windows`) and routes
    # the cotangent by `WindowSelect`: the eager element bit for bit, nothing undecided
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.integers(-1, 4, size=(2, 2, 7, 6)).astype(float))
    f = relu_pool(POOLINGS[pooling])
    value, g = asd.jax.value_and_subgrad(f, seed=seed)(x)
    got_value, got, undecided = jax.jit(asd.jax.value_and_subgrad(f, seed=seed,
                                                                 report=True))(x)
    assert int(undecided) == 0
    close(got_value, value)  # jit sums in its own order; a different choice moves O(1)
    close(got, g)
    # and per example under vmap, along one direction
    v = jnp.asarray(rng.standard_normal((2, 7, 6)))
    one = lambda t: f(t[None])  # noqa: E731
    batched = jax.jit(jax.vmap(asd.jax.subgrad(one, direction=v)))(x)
    for xi, gi in zip(x, batched, strict=True):
        close(gi, asd.jax.subgrad(one, direction=v)(xi))


@pytest.mark.parametrize("pooling", list(POOLINGS))
def test_a_staged_pool_gathers_and_scatters_nothing(pooling):
    # its windows are offset slices and its map a select / pad: a gather of the windows and
    # a scatter-add of their cotangents ran several times the primal's pooling (issue 24)
    x = jnp.asarray(np.random.default_rng(0).integers(-1, 4, size=(2, 2, 7, 6)).astype(float))
    jaxpr = str(jax.make_jaxpr(asd.jax.value_and_subgrad(relu_pool(POOLINGS[pooling]),
                                                         seed=0, report=True))(x))
    assert "gather" not in jaxpr and "scatter" not in jaxpr
