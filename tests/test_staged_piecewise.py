"""The piecewise, discontinuous and elementwise rules in a staged sweep (issue 24).

clip, where (of a comparison or a logical tree of them), the comparisons, the activation family
of `defpiecewise`, the jumps (sign, floor, ...) and the refusing checks (a root at 0, arctan2
at the origin, a jump of where) state their ties to `ray_compare` and their refusals to
`refuse_where`: no rule branches on a value, so each runs with traced values.

- The random programs of ``tests/programs.py`` restricted to these ops run through a numpy
  staged sweep and the eager sweep along the same direction: wherever the eager sweep decided
  every tie by its tangent, the staged gradient is the eager one bit for bit and nothing is
  counted undecided.
- A tie first order leaves open where its side matters (flat along every direction with a
  nonzero linearization, a ``where`` whose condition has a zero linearization but whose sides
  differ), a refusal (a root at 0, a jump of ``where``) and a jump reaching a differentiated
  output are counted, never guessed; a comparison that only feeds ``where`` counts nothing.
- JAX programs with ``jnp.clip``, ``jnp.where(x > 0, ...)``, ``jax.nn`` activations,
  ``lax.clamp`` and ``jnp.sign`` / ``jnp.floor`` behind ``stop_gradient`` run under
  ``jax.jit(asd.jax.value_and_subgrad(f, report=True))`` and ``jax.vmap`` with no callback in
  the jaxpr, and give the eager sweep's element.
- The ported rules give numpy's values, gradients and decision reports on torch and JAX
  arrays (eager), and run on JAX tracers inside ``jax.jit``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import asd
from asd.core import staged
from asd.core.sweep import LexDirections
from asd.extend import defpiecewise
from tests.programs import programs, run

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy
import asd.jax  # noqa: E402  (registers the front end after the import check)

from asd.frontends.jax import import_program  # noqa: E402

PIECEWISE = ("clip", "clip_traced", "hardtanh", "leaky_relu", "relu6", "hard_sigmoid",
             "soft_threshold", "hinge", "huber", "where")


def staged_gradient(f, x, v, lex=None, mode="full"):
    """``(value, gradient, undecided)`` of ``f`` at ``x`` by a staged sweep along ``v``."""
    x = np.asarray(x, float)
    trace, out, ids = staged.sweep(f, [x], [np.asarray(v, float)],
                                   LexDirections() if lex is None else lex, mode=mode)
    (g,) = staged.pull(trace, [out], [np.ones((), out.dtype)], ids, [x])
    return out.value, g, int(staged.undecided(trace, np.zeros(())))


# ----- the random programs: staged equals eager where the tangent decides -----

def _staged_equals_eager(case):
    program, x, v = case
    x = np.asarray(x, float)

    def f(t):
        return run(program, t)

    eager = asd.asd(f, direction=v)(x)
    value, g, undecided = staged_gradient(f, x, v)
    assert value == eager.value
    if all(d.how == "tangent" for d in eager.decisions):
        assert undecided == 0, eager.decisions
        np.testing.assert_array_equal(np.asarray(g, float).reshape(np.shape(x)),
                                      np.asarray(eager.subgradient, float).reshape(np.shape(x)))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(names=PIECEWISE))
def test_staged_equals_eager_where_the_tangent_decides(case):
    _staged_equals_eager(case)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(rational=True, names=PIECEWISE))
def test_staged_equals_eager_with_rational_slopes(case):
    """hard_sigmoid (slope 1/6) is drawn only here."""
    _staged_equals_eager(case)


# ----- what first order leaves open is counted; what it settles is not -----

FLAT = LexDirections([[np.array([2.0, 2.0])]], random=0)
"""A second direction along which ``x0 - x1`` stays flat too."""

FLAT_PROGRAMS = {
    "clip": lambda x: asd.clip(x[0] - x[1], 0.0, 1.0),
    "clip of traced bounds": lambda x: asd.clip(x[0] + 1.0, x[1] + 1.0, x[1] + 2.0),
    "leaky_relu": lambda x: asd.leaky_relu(x[0] - x[1], 0.1),
    "huber at its breakpoint": lambda x: asd.huber(x[0] - x[1] + 1.0, 1.0),
    "where": lambda x: asd.numpy.where(x[0] > x[1], x[0], x[1]),
    "where of a logical tree": lambda x: asd.numpy.where((x[0] >= x[1]) & (x[0] < 1.0),
                                                         x[0], x[1]),
}


@pytest.mark.parametrize("name", FLAT_PROGRAMS)
def test_a_tie_flat_along_every_direction_is_counted(name):
    f = FLAT_PROGRAMS[name]
    _, g, undecided = staged_gradient(f, np.zeros(2), [1.0, 1.0], FLAT)
    assert undecided > 0
    assert np.all(np.isfinite(g))
    # decided by the tangent along v = (1, -1): nothing counted, the eager element
    _, g, undecided = staged_gradient(f, np.zeros(2), [1.0, -1.0], FLAT)
    assert undecided == 0
    np.testing.assert_array_equal(g, asd.subgrad(f, direction=[1.0, -1.0])(np.zeros(2)))


def test_a_where_whose_condition_has_a_zero_linearization_is_counted_where_its_sides_differ():
    """x0**2 - x1**2 > 0 at 0: the condition's linearization is 0, so first order takes either
    side; the eager sweep decides by the series (x0 wins along v = (2, 1)). The sides x0 and
    x1 move differently: counted. With both sides one value, either is right: not counted."""
    def differ(x):
        return asd.numpy.where(x[0] * x[0] - x[1] * x[1] > 0, x[0], x[1])

    def same(x):
        a = x[0]
        return asd.numpy.where(x[0] * x[0] - x[1] * x[1] > 0, a, a) + x[1]

    assert staged_gradient(differ, np.zeros(2), [2.0, 1.0])[2] > 0
    np.testing.assert_array_equal(asd.subgrad(differ, direction=[2.0, 1.0])(np.zeros(2)),
                                  [1.0, 0.0])
    _, g, undecided = staged_gradient(same, np.zeros(2), [2.0, 1.0])
    assert undecided == 0
    np.testing.assert_array_equal(g, [1.0, 1.0])


def test_a_jump_of_where_is_counted_where_the_eager_sweep_refuses_it():
    def f(x):
        return asd.numpy.where(x[0] > 0, 1.0 + x[1], x[1])

    with pytest.raises(asd.NotLipschitzError, match="jumps"):
        asd.subgrad(f, direction=[1.0, 1.0])(np.zeros(2))
    assert staged_gradient(f, np.zeros(2), [1.0, 1.0])[2] == 1
    # a zero linearization does not hide it: x0**2 > 0 at 0 jumps too
    assert staged_gradient(lambda x: asd.numpy.where(x[0] * x[0] > 0, 1.0 + x[1], x[1]),
                           np.zeros(2), [1.0, 1.0])[2] > 0
    assert staged_gradient(f, np.array([0.5, 0.0]), [1.0, 1.0])[2] == 0


JUMPS = {
    "sign": lambda x: asd.numpy.sign(x[0]) + x[1],
    "floor": lambda x: asd.numpy.floor(x[0]) * 2.0 + x[1],
    "comparison as a number": lambda x: (x[0] > 0) * 1.0 + x[1],
    "remainder": lambda x: asd.numpy.remainder(x[0], 2.0) + x[1],
    "remainder by a traced divisor": lambda x: asd.numpy.remainder(x[0], x[1] + 2.0),
    "arctan2 across its cut": lambda x: asd.numpy.arctan2(x[0], x[1] - 1.0),
}


@pytest.mark.parametrize("name", JUMPS)
def test_a_jump_reaching_the_output_is_counted(name):
    f = JUMPS[name]
    with pytest.raises(asd.NotLipschitzError):
        asd.subgrad(f, direction=[1.0, 1.0])(np.zeros(2))
    assert staged_gradient(f, np.zeros(2), [1.0, 1.0])[2] > 0
    # off the jump: the eager element, nothing counted
    x = np.array([0.25, 0.5])
    _, g, undecided = staged_gradient(f, x, [1.0, 1.0])
    assert undecided == 0
    np.testing.assert_array_equal(g, asd.subgrad(f, direction=[1.0, 1.0])(x))


def test_a_jump_the_output_does_not_read_counts_nothing():
    """The comparison of where's condition is a node with a jump of its own, but where reads
    its operands, not its value; stop_gradient cuts a jump off."""
    def f(x):
        return asd.numpy.where(x[0] > 0, x[0], 0.5 * x[0]) + asd.stop_gradient(
            asd.numpy.sign(x[1])) * x[1]

    _, g, undecided = staged_gradient(f, np.zeros(2), [1.0, -1.0])
    assert undecided == 0
    np.testing.assert_array_equal(g, asd.subgrad(f, direction=[1.0, -1.0])(np.zeros(2)))


REFUSALS = {
    "sqrt at 0": lambda x: asd.numpy.sqrt(x[0] * x[0] + x[1] * x[1]),
    "sqrt of abs at 0": lambda x: asd.numpy.sqrt(asd.abs(x[0])) + x[1],
    "cbrt at 0": lambda x: asd.numpy.cbrt(x[0]) + x[1],
    "arctan2 at the origin": lambda x: asd.numpy.arctan2(x[0], x[1]),
    "arccosh at 1": lambda x: asd.numpy.arccosh(x[0] + 1.0) + x[1],
    "a real power at 0": lambda x: asd.abs(x[0]) ** 0.5 + x[1],
}


@pytest.mark.parametrize("name", REFUSALS)
def test_a_refusing_check_is_counted(name):
    """A root at 0 (Lipschitz where the eager sweep reads the exact series, refused
    elsewhere), arctan2 at the origin, arccosh at 1: the staged sweep counts the entry."""
    f = REFUSALS[name]
    assert staged_gradient(f, np.zeros(2), [1.0, 0.5])[2] > 0
    assert staged_gradient(f, np.zeros(2), [1.0, 0.5], mode="values")[2] == 0  # a probe flags
    trace, _, _ = staged.sweep(f, [np.zeros(2)], [np.array([1.0, 0.5])], LexDirections(),
                               mode="values")
    assert bool(staged.tied(trace, np.zeros(())))


# ----- defpiecewise: the rule on every library, and its table for asd.jit -----

REPEATED = defpiecewise("repeated", [0.0, 1.0, 1.0, 2.0],
                        [[0.0], [0.0, 0.0, 0.5], [0.5], [-0.5, 1.0], [1.5]])

EAGER_PROGRAMS = {
    "activations": lambda x: asd.numpy.sum(
        asd.leaky_relu(x, 0.125) + asd.relu6(4.0 * x + 2.0) + asd.hardtanh(x)
        + asd.hard_sigmoid(6.0 * x) + asd.soft_threshold(x, 0.5) + asd.hinge(x + 1.0)
        + asd.huber(x, 0.5)),
    "repeated breakpoints": lambda x: asd.numpy.sum(REPEATED(x + 1.0) * x),
    "clip with traced bounds": lambda x: asd.numpy.sum(asd.clip(x, x[4] + 0.5, x[5] - 1.0))
    + asd.numpy.sum(asd.clip(x, 0.0, 0.5)) + _point_interval(x),
    "where of a comparison and of a tree": lambda x: asd.numpy.sum(
        asd.numpy.where(x > 0, x, 0.25 * x) + asd.numpy.where((x >= 0) & ~(x > 0.5), x,
                                                              2.0 * x * x)),
    "jumps at a continuous composite": lambda x: asd.numpy.sum(
        asd.numpy.sign(x) * x + (asd.numpy.floor(x) + 0.0) * 0.0)
    + asd.numpy.remainder(x[1], 2.0) * (x[2] > 10.0),
    "arctan2": lambda x: asd.numpy.sum(asd.numpy.arctan2(x + 2.0, x - 3.0)),
}
def _point_interval(x):
    """clip to an interval that is a point near x: every entry on the bound, a tie of lo and
    hi that is an equality (one traced value)."""
    bound = x[1] + 1.0
    return asd.numpy.sum(asd.clip(x, bound, bound))


POINT = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0])
DIRECTION = np.array([1.0, -1.0, 0.5, -0.25, 0.0, 2.0])


def _libraries():
    return {"torch-float64": lambda a: torch.tensor(a, dtype=torch.float64),
            "torch-float32": lambda a: torch.tensor(a, dtype=torch.float32),
            "jax": lambda a: jnp.asarray(a, dtype=jnp.float32)}


@pytest.mark.parametrize("lib", ["torch-float64", "torch-float32", "jax"])
@pytest.mark.parametrize("name", EAGER_PROGRAMS)
def test_the_ported_rules_give_numpy_s_element_and_decisions(name, lib):
    f, conv = EAGER_PROGRAMS[name], _libraries()[lib]
    dtype = np.float64 if lib == "torch-float64" else np.float32
    for v in (DIRECTION, -DIRECTION, np.zeros(6) + 1.0):
        ref = asd.asd(f, direction=v.astype(dtype))(POINT.astype(dtype))
        got = asd.asd(f, direction=conv(v))(conv(POINT))
        assert type(got.subgradient) is type(conv(POINT))
        np.testing.assert_array_equal(np.asarray(got.subgradient), ref.subgradient)
        assert float(got.value) == float(ref.value)
        assert got.decisions == ref.decisions


def test_the_activations_table_is_what_compiled_code_reads():
    """asd.jit's generated fast path inlines the pieces from the rule's table; a breakpoint
    leaves it for the rule, so compiled and uncompiled agree on and off the kinks."""
    from asd.library.piecewise import leaky_relu_p

    bps, parsed, at = leaky_relu_p.rule.piecewise_table({"negative_slope": 0.25})
    assert bps.tolist() == [0.0] and at.tolist() == [0.0] and parsed[0][2] == (0.0, 0.25)

    def f(t):
        return asd.leaky_relu(t, 0.25) + asd.relu6(t)

    compiled = asd.jit(asd.value_and_subgrad(f, direction=-1.0))
    for x in (-1.5, 0.0, 2.0, 6.0, 0.0):
        assert compiled(x) == asd.value_and_subgrad(f, direction=-1.0)(x)


# ----- JAX: inside jax.jit and jax.vmap, no callback -----

@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield


JAX_PROGRAMS = {
    "jnp.clip": lambda x: jnp.sum(jnp.clip(x, -1.0, 1.0) * x),
    "jnp.where(x > 0)": lambda x: jnp.sum(jnp.where(x > 0, x, 0.5 * x)),
    "jnp.where of a comparison of two values": lambda x: jnp.sum(
        jnp.where(x >= 0.5 * x + 0.25, x, 0.5 * x + 0.25)),
    "leaky_relu": lambda x: jnp.sum(jax.nn.leaky_relu(x, 0.125)),
    "relu6": lambda x: jnp.sum(jax.nn.relu6(3.0 * x + 3.0)),
    "hard_tanh": lambda x: jnp.sum(jax.nn.hard_tanh(x)),
    "lax.clamp": lambda x: jnp.sum(jax.lax.clamp(-1.0, x, 1.0)),
    "sign and floor behind stop_gradient": lambda x: jnp.sum(
        jnp.sign(jax.lax.stop_gradient(x)) * x + jnp.floor(jax.lax.stop_gradient(x)) * x
        + jnp.round(jax.lax.stop_gradient(x) * 0.5) * x),
}
JAX_POINTS = [np.array([0.0, 1.0, -1.0, 6.0, 0.5, -0.5]),
              np.array([1.0, 1.0, -1.0, -1.0, 0.0, 0.0]),
              np.array([0.25, 2.0, -3.0, 0.75, -0.25, 1.5])]
JAX_DIRECTIONS = [np.array([1.0, -1.0, 1.0, -1.0, 0.5, -0.5]),
                  np.array([-2.0, 1.0, -0.5, 1.0, -1.0, 3.0])]


def _eager(f, x, v):
    """The eager sweep of the imported program: its value, gradient and decisions."""
    prog = import_program(f, (jnp.asarray(x),), (0,))
    return asd.asd(prog.numpy_fn, direction=v)(x)


@pytest.mark.parametrize("name", JAX_PROGRAMS)
def test_jax_programs_stage_under_jit_with_the_eager_element(name):
    f = JAX_PROGRAMS[name]
    staged_f = jax.jit(asd.jax.value_and_subgrad(f, direction=jnp.asarray(JAX_DIRECTIONS[0]),
                                                 report=True))
    jaxpr = str(jax.make_jaxpr(asd.jax.value_and_subgrad(
        f, direction=jnp.asarray(JAX_DIRECTIONS[0]), report=True))(jnp.zeros(6)))
    assert "callback" not in jaxpr
    for x in JAX_POINTS:
        for v in JAX_DIRECTIONS:
            eager = _eager(f, x, v)
            assert all(d.how == "tangent" for d in eager.decisions), eager.decisions
            value, g, undecided = jax.jit(asd.jax.value_and_subgrad(
                f, direction=jnp.asarray(v), report=True))(jnp.asarray(x))
            assert int(undecided) == 0
            assert float(value) == float(eager.value)
            np.testing.assert_array_equal(np.asarray(g), eager.subgradient)
            if v is JAX_DIRECTIONS[0]:
                np.testing.assert_array_equal(np.asarray(staged_f(jnp.asarray(x))[1]),
                                              eager.subgradient)


@pytest.mark.parametrize("name", JAX_PROGRAMS)
def test_jax_programs_give_per_example_subgradients_under_vmap(name):
    f = JAX_PROGRAMS[name]
    v = jnp.asarray(JAX_DIRECTIONS[1])
    batched = jax.jit(jax.vmap(asd.jax.subgrad(f, direction=v)))(jnp.asarray(
        np.stack(JAX_POINTS)))
    for x, g in zip(JAX_POINTS, batched, strict=True):
        np.testing.assert_array_equal(np.asarray(g), _eager(f, x, np.asarray(v)).subgradient)


def test_jax_flat_ties_and_jumps_are_reported_under_jit():
    def flat_where(x):  # the condition's linearization is 0, its sides differ
        return jnp.where(x[0] * x[0] > x[1] * x[1], x[0], x[1])

    def jump(x):  # the sign of x reaches the output
        return jnp.sum(jnp.sign(x) * x)

    for f in (flat_where, jump):
        _, g, undecided = jax.jit(asd.jax.value_and_subgrad(f, seed=0, report=True))(
            jnp.zeros(2))
        assert int(undecided) > 0 and bool(jnp.all(jnp.isfinite(g)))
    _, _, undecided = jax.jit(asd.jax.value_and_subgrad(jump, seed=0, report=True))(
        jnp.array([0.5, -2.0]))
    assert int(undecided) == 0


STAGED_ASD = {
    "activations": EAGER_PROGRAMS["activations"],
    "repeated breakpoints": EAGER_PROGRAMS["repeated breakpoints"],
    "clip with traced bounds": EAGER_PROGRAMS["clip with traced bounds"],
    "where of a comparison and of a tree": EAGER_PROGRAMS["where of a comparison and of a tree"],
    "arctan2": EAGER_PROGRAMS["arctan2"],
}


@pytest.mark.parametrize("name", STAGED_ASD)
def test_the_rules_run_on_jax_tracers_inside_jit(name):
    """asd's own functions (defpiecewise's rule among them) swept staged on traced JAX
    values inside jax.jit: the eager numpy element, nothing counted."""
    f = STAGED_ASD[name]

    @jax.jit
    def sweep(x, v):
        trace, out, ids = staged.sweep(f, [x], [v], LexDirections())
        (g,) = staged.pull(trace, [out], [jnp.ones((), out.dtype)], ids, [x])
        return out.value, g, staged.undecided(trace, x)

    direction = np.where(DIRECTION == 0, 0.75, DIRECTION)  # every tie decided by its tangent
    for v in (direction, -direction):
        value, g, undecided = sweep(jnp.asarray(POINT), jnp.asarray(v))
        eager = asd.asd(f, direction=v)(POINT)
        assert all(d.how in ("tangent", "equal") for d in eager.decisions), eager.decisions
        assert int(undecided) == 0
        assert float(value) == float(eager.value)
        np.testing.assert_array_equal(np.asarray(g), eager.subgradient)
