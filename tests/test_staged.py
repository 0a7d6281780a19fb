"""The staged sweep: every decision an array computation, the eager sweep's element where first
order decides, and asd.jax inside jax.jit / jax.vmap / jax.grad / lax.scan with no callback.

The battery runs the random programs of ``tests/programs.py`` (points on kinks, directions that
keep ties alive) through an eager sweep and a staged one along the same direction: wherever the
eager sweep decided every tie by its tangent, the staged sweep must return the same gradient
bit for bit and count no undecided entry; a tie first order leaves open along every direction
must be counted, never guessed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import asd
from asd.core import staged
from asd.core.sweep import LexDirections
from tests.programs import programs, run

jax = pytest.importorskip("jax")
jnp = jax.numpy
import asd.jax  # noqa: E402  (registers the front end after the import check)


def staged_gradient(f, x, v, mode="full"):
    """``(value, gradient, undecided)`` of ``f`` at ``x`` by a staged sweep along ``v``."""
    trace, out, ids = staged.sweep(f, [x], [np.asarray(v, float)], LexDirections(), mode=mode)
    (g,) = staged.pull(trace, [out], [np.ones((), out.dtype)], ids, [x])
    return out.value, g, int(staged.undecided(trace, np.zeros(())))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(names=("relu", "abs", "maximum", "minimum")))
def test_staged_equals_eager_where_the_tangent_decides(case):
    program, x, v = case
    x = np.asarray(x, float)

    def f(t):
        return run(program, t)

    eager = asd.asd(f, direction=v)(x)
    value, g, undecided = staged_gradient(f, x, v)
    assert value == eager.value
    if all(d.how == "tangent" for d in eager.decisions):
        assert undecided == 0
        np.testing.assert_array_equal(np.asarray(g, float).reshape(np.shape(x)),
                                      np.asarray(eager.subgradient, float).reshape(np.shape(x)))


def test_ties_flat_to_first_order_along_every_direction_are_counted():
    # x0 - x1 is flat along v = (1, 1) and along w = (2, 2), yet its linearization is not 0:
    # the side matters, and first order cannot tell it: counted, not guessed
    def f(x):
        return asd.relu(x[0] - x[1]) + asd.relu(x[0] * x[0] + x[1] * x[1])

    lex = LexDirections([[np.array([2.0, 2.0])]], random=0)
    trace, _out, _ids = staged.sweep(f, [np.zeros(2)], [np.array([1.0, 1.0])], lex)
    assert int(staged.undecided(trace, np.zeros(()))) == 1
    (node,) = [k for k, count in trace.undecided.items() if int(count)]
    # the first relu's: the map of x**2 + y**2 is 0 at 0, so its relu needs no decision
    assert trace.nodes[trace.nodes[node].args[0]].name == "subtract"


def test_a_tie_whose_linearization_is_zero_needs_no_decision():
    # relu(x0**2 + x1**2) at 0: both sides give gradient 0, so first order is enough
    _, g, undecided = staged_gradient(lambda x: asd.relu(x[0] * x[0] + x[1] * x[1]),
                                      np.zeros(2), np.array([1.0, -1.0]))
    assert undecided == 0
    np.testing.assert_array_equal(g, [0.0, 0.0])


def test_probe_mode_flags_a_tie_and_decides_by_the_values():
    trace, _, _ = staged.sweep(lambda x: asd.relu(x).sum(), [np.array([0.0, 1.0])],
                                 [np.array([1.0, 1.0])], LexDirections(), mode="values")
    assert bool(staged.tied(trace, np.zeros(())))
    trace, _out, _ = staged.sweep(lambda x: asd.relu(x).sum(), [np.array([-1.0, 1.0])],
                                 [np.array([1.0, 1.0])], LexDirections(), mode="values")
    assert not bool(staged.tied(trace, np.zeros(())))


# ----- asd.jax inside JAX transformations -----

W1 = np.array([[1.0, -1.0, 0.0], [0.5, 2.0, -1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
B1 = np.array([0.0, 0.0, 0.0, -1.0])
W2 = np.array([1.0, -2.0, 0.5, 1.0])


def mlp(x):
    """Dead and tied units at x = 0: the third row is all zero (its ReLU stays at the kink
    along every direction: a tie that persists), the first two sit on their kink."""
    h = jax.nn.relu(W1 @ x + B1)
    return jnp.dot(W2, h) + jnp.abs(x[0] - x[1]) + jnp.maximum(x[1], x[2])


POINTS = [np.zeros(3), np.array([1.0, 1.0, 0.5]), np.array([0.25, -0.5, 0.25])]
DIRECTIONS = [np.array([1.0, -1.0, 0.5]), np.array([0.0, 2.0, -1.0]), np.array([-1.0, 0.0, 0.0])]


@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("x", POINTS)
@pytest.mark.parametrize("v", DIRECTIONS)
def test_jit_equals_the_eager_sweep(x, v):
    eager = asd.jax.value_and_subgrad(mlp, direction=jnp.asarray(v))(jnp.asarray(x))
    value, g, undecided = jax.jit(asd.jax.value_and_subgrad(
        mlp, direction=jnp.asarray(v), report=True))(jnp.asarray(x))
    assert int(undecided) == 0
    assert float(value) == float(eager[0])
    np.testing.assert_array_equal(np.asarray(g), np.asarray(eager[1]))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_jit_with_a_seed_sweeps_the_eager_direction(seed):
    x = jnp.zeros(3)
    np.testing.assert_array_equal(np.asarray(jax.jit(asd.jax.subgrad(mlp, seed=seed))(x)),
                                  np.asarray(asd.jax.subgrad(mlp, seed=seed)(x)))


def test_vmap_gives_per_example_subgradients():
    xs = jnp.asarray(np.stack(POINTS))
    v = jnp.asarray(DIRECTIONS[0])
    batched = jax.vmap(asd.jax.subgrad(mlp, direction=v))(xs)
    for x, g in zip(POINTS, batched, strict=True):
        np.testing.assert_array_equal(
            np.asarray(g), np.asarray(asd.jax.subgrad(mlp, direction=v)(jnp.asarray(x))))


def test_key_draws_the_direction_inside_the_trace():
    x = jnp.zeros(3)
    keys = jax.random.split(jax.random.key(3), 4)
    gs = jax.vmap(lambda k: asd.jax.subgrad(mlp, key=k)(x))(keys)
    for k, g in zip(keys, gs, strict=True):
        v = jax.random.normal(jax.random.split(k, 1)[0], (3,), jnp.float64)
        np.testing.assert_array_equal(
            np.asarray(g), np.asarray(asd.jax.subgrad(mlp, direction=v)(x)))


def test_grad_of_function_stages_under_jit_and_holds_no_callback():
    def loss(x):
        return asd.jax.function(mlp, seed=0)(x)

    x = jnp.zeros(3)
    jaxpr = str(jax.make_jaxpr(jax.grad(loss))(x))
    assert "callback" not in jaxpr
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(loss))(x)),
                                  np.asarray(asd.jax.subgrad(mlp, seed=0)(x)))
    per_example = jax.vmap(jax.grad(loss))(jnp.asarray(np.stack(POINTS)))
    assert per_example.shape == (3, 3) and bool(jnp.all(jnp.isfinite(per_example)))


def test_scan_over_subgradients():
    def step(carry, x):
        return carry, asd.jax.subgrad(mlp, seed=1)(x)

    _, gs = jax.lax.scan(step, 0.0, jnp.asarray(np.stack(POINTS)))
    for x, g in zip(POINTS, gs, strict=True):
        np.testing.assert_array_equal(np.asarray(g),
                                      np.asarray(asd.jax.subgrad(mlp, seed=1)(jnp.asarray(x))))


def _conds(jaxpr) -> list:
    return [e for e in jaxpr.eqns if e.primitive.name == "cond"]


def test_further_directions_are_pushed_only_where_v_leaves_a_tie_open():
    # a tie's tangent along w1, ... is a push through its whole cone: the staged sweep makes
    # it under a lax.cond on "some tied entry is still open after v" (one per tied node and
    # level), so a tie that v decides (almost every tie) costs no further push
    closed = jax.make_jaxpr(asd.jax.value_and_subgrad(mlp, seed=0))(jnp.zeros(3))
    (probe,) = _conds(closed.jaxpr)
    _fast, full = probe.params["branches"]
    assert len(_conds(full.jaxpr)) >= 3     # relu, abs, maximum: each tied node's levels
    for x in POINTS:                        # taken or skipped, the eager element
        np.testing.assert_array_equal(
            np.asarray(jax.jit(asd.jax.subgrad(mlp, seed=0))(jnp.asarray(x))),
            np.asarray(asd.jax.subgrad(mlp, seed=0)(jnp.asarray(x))))


def test_undecided_ties_are_reported_under_jit():
    # a tangent far below the direction's scale along v and w1 is not trusted to first order
    # (the eager sweep bounds its rounding and decides it); the staged sweep counts it
    def faint(x):
        return jax.nn.relu(1e-9 * (x[0] - x[1]))

    _, g, undecided = jax.jit(asd.jax.value_and_subgrad(faint, seed=0, report=True))(
        jnp.zeros(2))
    assert int(undecided) == 1 and bool(jnp.all(jnp.isfinite(g)))


def test_a_rule_that_decides_on_the_host_is_refused_by_name_under_jit(monkeypatch):
    from asd.library.order import extreme_p

    real = extreme_p.rule

    def host_rule(xs, dxs, **params):
        bool(xs[0].any())  # reads a value: what no rule may do
        return real(xs, dxs, **params)

    monkeypatch.setattr(extreme_p, "rule", host_rule)
    with pytest.raises(asd.UnsupportedError, match=r"reduce_max.*inside jax\.jit"):
        jax.jit(asd.jax.subgrad(lambda x: jnp.max(x)))(jnp.zeros(3))


def _stepped(x):
    """A weak-typed constant branch (its convert_element_type is staged too), and a jump at
    0: left of 0, ``x < |x|`` holds."""
    return (jnp.where(x < jnp.abs(x), 1.0, 0.0) + x).sum()


def test_a_converted_constant_branch_stages():
    """``jnp.where(c, 1.0, 0.0)`` converts its weak constants: the importer read their dtype
    from the host copy of the value, a raw TracerArrayConversionError under jit."""
    def f(x):
        return (jnp.where(x < 0.25, 1.0, 0.0) * x + x).sum()

    x = jnp.array([0.5, -2.0])
    want = np.asarray(asd.jax.subgrad(f)(x))
    np.testing.assert_array_equal(np.asarray(jax.jit(asd.jax.subgrad(f))(x)), want)


@pytest.mark.parametrize("d", [1.0, -1.0])
def test_under_jit_a_jump_is_nan_unless_the_count_is_read(d):
    """At the jump (refused eagerly) a staged gradient, Jacobian-vector product or subgradient
    that does not report its ``undecided`` count is NaN, as the drop-in's is; with
    ``report=True`` the count says so."""
    x, v = jnp.zeros(1), jnp.array([d])
    with pytest.raises(asd.NotLipschitzError):
        asd.jax.subgrad(_stepped, direction=v)(x)
    g = jax.jit(asd.jax.subgrad(_stepped, direction=v))(x)
    assert bool(jnp.all(jnp.isnan(g)))
    pulled = jax.jit(lambda x: asd.jax.vjp(_stepped, direction=v)(x)[1](jnp.ones(())))(x)
    assert bool(jnp.all(jnp.isnan(pulled)))
    _, _, undecided = jax.jit(asd.jax.value_and_subgrad(_stepped, direction=v,
                                                        report=True))(x)
    assert int(undecided) >= 1
