"""Projections and norms in a staged sweep: the eager element where first order decides, the
rest counted, and JAX programs using them under ``jax.jit`` / ``jax.vmap`` with no callback.

A staged sweep (`asd.core.staged`) decides every tie as array operations: box and orthant
bounds by `ray_compare`'s first-order signs, the l2 ball's sphere by the exactly certified
value of ``|x|² - r²`` and then the sign of its slope ``2<x, ẋ>``, a norm at a zero row by the
row's tangent, each along ``v`` and then ``w1, …``. Along a direction where ``v`` decides, the
staged gradient is the eager one bit for bit and nothing is undecided; where the tie is flat
to first order along every direction (a tangent to the sphere, a bound tie that persists, a
zero row that does not move) the eager sweep reads exact series, and the staged one counts
the tie instead of guessing. Ties only the host can decide (repeated eigenvalues, the
simplex's threshold) are always counted.
"""

from __future__ import annotations

import numpy as np
import pytest

import asd
from asd.core import staged
from asd.core.sweep import LexDirections

jax = pytest.importorskip("jax")
jnp = jax.numpy
import asd.jax  # noqa: E402  (registers the front end after the import check)

P = asd.projections
W = np.array([1.0, 2.0, -1.0])


def staged_gradient(f, xs, vs, lex=None):
    """``(gradients, undecided)`` of ``f(*xs)`` by a numpy staged sweep along ``vs``."""
    trace, out, ids = staged.sweep(f, list(xs), [np.asarray(v, float) for v in vs],
                                   LexDirections() if lex is None else lex)
    grads = staged.pull(trace, [out], [np.ones((), out.dtype)], ids, list(xs))
    return grads, int(staged.undecided(trace, np.zeros(())))


def assert_staged_is_eager(f, xs, vs, ws=None):
    """The staged sweep along ``vs`` (then ``ws``, one array per input) returns the eager
    sweep's gradient bit for bit, with nothing undecided, where every eager decision was
    made by a tangent (or by values)."""
    xs = [np.asarray(x, float) for x in xs]
    direction = tuple(np.asarray(v, float) for v in vs)
    argnums = tuple(range(len(xs)))
    if ws is None:
        eager = asd.asd(f, argnums=argnums, direction=direction)(*xs)
        lex = None
    else:
        eager = asd.asd(f, argnums=argnums, directions=[direction, tuple(ws)])(*xs)
        lex = LexDirections([list(ws)], random=0)
    assert all(d.how == "tangent" for d in eager.decisions), eager.decisions
    grads, undecided = staged_gradient(f, xs, vs, lex)
    assert undecided == 0
    for g, e in zip(grads, eager.subgradient, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


# ----- numpy staged sweep against the eager sweep, at kinks the tangent decides -----

ORTHANT = [  # (x, v): entries at 0 whose tangent is not 0
    (np.array([0.0, 1.0, 0.0]), np.array([1.0, -1.0, -1.0])),
    (np.array([0.0, -2.0, 0.0]), np.array([-0.5, 3.0, 2.0])),
    (np.zeros(3), np.array([1e-3, -1e3, 7.0])),
]


@pytest.mark.parametrize("x, v", ORTHANT)
@pytest.mark.parametrize("proj", [P.nonneg, P.nonpos])
def test_orthants_stage_as_eager(proj, x, v):
    assert_staged_is_eager(lambda t: proj(t) @ W, [x], [v])


BOXES = [  # (x, lo, hi, v): entries on a bound, in a degenerate box, inside
    (np.array([1.0, -1.0, 0.5]), -1.0, 1.0, np.array([1.0, -1.0, -1.0])),
    (np.array([1.0, -1.0, 0.5]), -1.0, 1.0, np.array([-1.0, 1.0, -1.0])),
    (np.array([0.0, 2.0, -3.0]), np.array([0.0, 0.0, -3.0]), np.array([0.0, 2.0, 5.0]),
     np.array([2.0, 1.0, -0.25])),
]


@pytest.mark.parametrize("x, lo, hi, v", BOXES)
def test_box_stages_as_eager(x, lo, hi, v):
    assert_staged_is_eager(lambda t: P.box(t, lo, hi) @ W, [x], [v])
    assert_staged_is_eager(lambda t: P.linf_ball(t, 1.0) @ W, [x], [v])


def test_box_with_traced_bounds_stages_as_eager():
    x, lo = np.array([1.0, -1.0, 0.5]), np.array([1.0, -2.0, 0.5])
    assert_staged_is_eager(lambda t, b: P.box(t, b, 2.0) @ W, [x, lo],
                           [np.array([1.0, 1.0, -1.0]), np.array([0.5, 0.0, 2.0])])


SPHERE = [  # (x, r, v): x exactly on the sphere, v not tangent to it (2<x, v> != 0)
    (np.array([3.0, 4.0, 0.0]), 5.0, np.array([1.0, 1.0, 0.0])),
    (np.array([3.0, 4.0, 0.0]), 5.0, np.array([-1.0, -1.0, 7.0])),
    (np.array([0.0, -0.5, 0.0]), 0.5, np.array([2.0, -1e-6, 1.0])),
    (np.array([0.75, 1.0, 0.0]), 1.25, np.array([0.0, 1.0, -3.0])),
]


@pytest.mark.parametrize("x, r, v", SPHERE)
def test_l2_ball_on_the_sphere_stages_as_eager(x, r, v):
    assert_staged_is_eager(lambda t: P.l2_ball(t, r) @ W, [x], [v])


def test_l2_ball_off_the_sphere_stages_as_eager():
    for x in (np.array([3.0, 4.0, 1.0]), np.array([0.1, 0.2, 0.3]), np.zeros(3)):
        assert_staged_is_eager(lambda t: P.l2_ball(t, 5.0) @ W, [x], [np.array([1.0, -1, 2])])


ZERO_ROWS = [  # (x, axis, v): rows of x at 0 whose tangent is not 0
    (np.zeros(3), None, np.array([1.0, 0.0, 3.0])),
    (np.zeros((2, 3)), 1, np.array([[1.0, -2.0, 0.0], [0.0, 0.0, 5.0]])),
    (np.array([[0.0, 0.0], [3.0, 4.0]]), 1, np.array([[1.0, 1.0], [0.0, -1.0]])),
]


@pytest.mark.parametrize("x, axis, v", ZERO_ROWS)
@pytest.mark.parametrize("p", [2.0, 3.0])
def test_norm_at_zero_rows_stages_as_eager(x, axis, v, p):
    assert_staged_is_eager(lambda t: asd.pnorm(t, p, axis=axis).sum(), [x], [v])


def test_norm_of_a_dead_row_needs_no_decision():
    # norm(relu(x)) with every relu dead: the row is 0 along every direction and no input
    # moves it to first order (reach 0), so its gradient changes nothing
    assert_staged_is_eager(lambda t: asd.norm(asd.relu(t)) + t[0], [-np.ones(3)],
                           [np.array([1.0, 2.0, 3.0])])


# ----- ties flat to first order: counted, never guessed -----

def test_a_bound_tie_flat_along_every_direction_is_counted():
    # x0 - x1 sits on the bound 0 and does not move along v = (1, 1) nor along w = (2, 2)
    lex = LexDirections([[np.array([2.0, 2.0])]], random=0)
    _, undecided = staged_gradient(lambda t: P.nonneg(t[:1] - t[1:]).sum(), [np.zeros(2)],
                                   [np.array([1.0, 1.0])], lex)
    assert undecided == 1
    _, undecided = staged_gradient(lambda t: P.box(t[:1] - t[1:], 0.0, 1.0).sum(),
                                   [np.zeros(2)], [np.array([1.0, 1.0])], lex)
    assert undecided == 1


def test_a_tangent_to_the_sphere_is_counted():
    # along a tangent the ray leaves the ball at second order: the eager sweep reads the
    # series; first order cannot tell, along v nor along w (tangent too)
    f = lambda t: P.l2_ball(t, 5.0) @ W  # noqa: E731
    x, v, w = np.array([3.0, 4.0, 0.0]), np.array([4.0, -3.0, 1.0]), np.array([0.0, 0.0, 1.0])
    assert asd.asd(f, direction=v)(x).decisions[0].how == "series"
    _, undecided = staged_gradient(f, [x], [v], LexDirections([[w]], random=0))
    assert undecided == 1


def test_a_tangent_to_the_sphere_is_decided_by_the_next_direction():
    # staged, first order along w decides what v leaves open (the lexicographic element, as
    # ray_compare decides staged): leaving along w, as the eager series says along v
    f = lambda t: P.l2_ball(t, 5.0) @ W  # noqa: E731
    x, v, w = np.array([3.0, 4.0, 0.0]), np.array([4.0, -3.0, 1.0]), np.array([1.0, 1.0, 0.0])
    (g,), undecided = staged_gradient(f, [x], [v], LexDirections([[w]], random=0))
    assert undecided == 0
    np.testing.assert_array_equal(g, asd.asd(f, direction=v)(x).subgradient)


def test_a_point_on_the_sphere_only_in_rounding_is_counted():
    # 0.6² + 0.8² is 1 only up to rounding: the float value cannot say which side x is on,
    # the eager sweep's rationals can, so the staged sweep counts it
    _, undecided = staged_gradient(lambda t: P.l2_ball(t, 1.0) @ W,
                                   [np.array([0.6, 0.8, 0.0])], [np.array([1.0, 1.0, 0.0])])
    assert undecided == 1


def test_a_zero_row_with_a_zero_tangent_is_counted():
    f = lambda t: asd.norm(t[:2]) + t[2]  # noqa: E731
    lex = LexDirections([[np.array([0.0, 0.0, 1.0])]], random=0)
    _, undecided = staged_gradient(f, [np.zeros(3)], [np.array([0.0, 0.0, 3.0])], lex)
    assert undecided == 1


def test_a_zero_row_still_along_v_is_decided_by_the_next_direction():
    # the row is an input that v does not move: along the ray it stays 0, so the eager sweep
    # reads w's first-order term, as the staged sweep does
    assert_staged_is_eager(lambda t: asd.norm(t[:2]) + t[2], [np.zeros(3)],
                           [np.array([0.0, 0.0, 3.0])], [np.array([2.0, -1.0, 0.0])])


@pytest.mark.parametrize("f, x", [
    (asd.spectral.lambda_max, np.eye(3)),
    (lambda X: asd.spectral.eigvalsh(X) @ W, np.diag([1.0, 1.0, 2.0])),
    (asd.spectral.nuclear_norm, np.diag([1.0, 0.0])),
    (lambda X: P.psd(X).sum(), np.diag([0.0, 1.0])),
    (lambda t: P.simplex(t, 1.0) @ W, np.array([0.5, 0.5, 0.0])),
])
def test_host_only_ties_are_counted(f, x):
    # repeated eigenvalues, a PSD kink, a simplex threshold tie: decided eagerly by Kato's
    # reduction or the exact series; staged, counted
    v = np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.25
    _, undecided = staged_gradient(f, [x], [v])
    assert undecided > 0


def test_host_only_rules_without_a_tie_stage_as_eager():
    assert_staged_is_eager(asd.spectral.lambda_max, [np.diag([1.0, 2.0, 3.0])],
                           [np.arange(9.0).reshape(3, 3)])
    assert_staged_is_eager(lambda t: P.simplex(t, 1.0) @ W, [np.array([0.9, 0.3, -1.0])],
                           [np.array([1.0, 2.0, 3.0])])


# ----- JAX programs: projections written in jax.numpy, inside jit and vmap -----

@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield


LO, HI = -1.0, 1.0


def jnp_box(x):
    return jnp.dot(jnp.minimum(jnp.maximum(x, LO), HI), jnp.asarray(W))


def jnp_clip_box(x):
    return jnp.dot(jnp.clip(x, LO, HI), jnp.asarray(W))


def jnp_nonneg(x):
    return jnp.dot(jnp.maximum(x, 0.0), jnp.asarray(W))


def jnp_norm(x):
    return jnp.linalg.norm(x) + x[0]


def jnp_l2_ball(x):
    """The projection onto the ball of radius 5 as JAX users write it: the norm at 0 and
    the maximum at the sphere are the kinks."""
    return jnp.dot(x / jnp.maximum(1.0, jnp.linalg.norm(x) / 5.0), jnp.asarray(W))


JAX_CASES = [  # (f, x, v): every tie decided by its tangent along v
    (jnp_box, [1.0, -1.0, 0.5], [1.0, -1.0, -1.0]),
    (jnp_box, [1.0, -1.0, 0.5], [-1.0, 1.0, 2.0]),
    (jnp_nonneg, [0.0, 1.0, 0.0], [1.0, -1.0, -1.0]),
    (jnp_norm, [0.0, 0.0, 0.0], [1.0, -2.0, 0.5]),
    (jnp_l2_ball, [0.0, 0.0, 0.0], [1.0, -2.0, 0.5]),
    (jnp_l2_ball, [3.0, 4.0, 0.0], [1.0, 1.0, 0.0]),
    (jnp_l2_ball, [3.0, 4.0, 0.0], [-1.0, -1.0, 2.0]),
]


def check_jit(f, x, v):
    """``jax.jit`` of the staged call is the eager element: nothing undecided, the same value,
    and the same gradient to 4 ulps (XLA compiles the smooth arithmetic around the ties, e.g.
    the quotient rule of ``x / m``, into fused operations that round differently from one
    op at a time; another piece would differ by far more)."""
    x, v = jnp.asarray(x), jnp.asarray(v)
    eager = asd.jax.value_and_subgrad(f, direction=v)(x)
    staged_fn = jax.jit(asd.jax.value_and_subgrad(f, direction=v, report=True))
    value, g, undecided = staged_fn(x)
    assert int(undecided) == 0
    np.testing.assert_array_max_ulp(np.asarray(value), np.asarray(eager[0]), maxulp=4)
    np.testing.assert_array_max_ulp(np.asarray(g), np.asarray(eager[1]), maxulp=4)
    jaxpr = str(jax.make_jaxpr(asd.jax.value_and_subgrad(f, direction=v))(x))
    assert "callback" not in jaxpr


@pytest.mark.parametrize("f, x, v", JAX_CASES)
def test_jax_projection_under_jit_is_the_eager_element(f, x, v):
    check_jit(f, x, v)


def test_jax_clip_box_under_jit_is_the_eager_element():
    check_jit(jnp_clip_box, [1.0, -1.0, 0.5], [1.0, -1.0, -1.0])


@pytest.mark.parametrize("f", [jnp_box, jnp_nonneg, jnp_norm, jnp_l2_ball])
def test_jax_projection_under_vmap_gives_per_example_subgradients(f):
    xs = jnp.asarray([[0.0, 0.0, 0.0], [1.0, -1.0, 0.5], [3.0, 4.0, 0.0], [0.0, 1.0, 0.0]])
    v = jnp.asarray([1.0, -2.0, 0.5])
    batched = jax.jit(jax.vmap(asd.jax.subgrad(f, direction=v)))(xs)
    for x, g in zip(xs, batched, strict=True):
        np.testing.assert_array_equal(np.asarray(g),
                                      np.asarray(asd.jax.subgrad(f, direction=v)(x)))


def test_jax_spectral_rules_are_refused_by_name_inside_jit():
    # a repeated eigenvalue needs Kato's reduction on the host: inside jax.jit the rule is
    # refused by name (it used to fail reading the traced array's value for its dtype)
    def top(X):
        return jnp.linalg.eigvalsh(X)[-1]

    with pytest.raises(asd.UnsupportedError, match="eigvalsh"):
        jax.jit(asd.jax.subgrad(top))(jnp.eye(2))
