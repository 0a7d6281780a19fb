"""asd.jax reach: elementwise and cumulative primitives, general gathers and scatters,
``cond``, ``scan``/``fori_loop`` and ``while_loop``.

Oracles: ``jax.grad`` at random points (off the kinks), and at the kinks the one-sided
difference quotient of JAX's own function along coordinate directions (which keep the ties
of ``cummax``, ``maximum`` inside a scan, or a ``cond`` predicate alive); the programs there
are piecewise linear on dyadic inputs, so the quotient is exact in float32.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

import asd.jax  # noqa: E402

from asd.errors import NotLipschitzError, TracerBoolError, UnsupportedError  # noqa: E402

TOL = dict(rtol=2e-5, atol=2e-5)
X = np.array([0.3, -0.7, 1.2, 0.55, -0.15, 0.9], dtype=np.float32)
INDEX = jnp.array([[1], [0], [2]])

SMOOTH = {
    "sin/cos/tan": lambda x: jnp.sum(jnp.sin(x) * jnp.cos(x) + jnp.tan(x / 2)),
    "inverse trig": lambda x: jnp.sum(jnp.arctan(x) + jnp.arcsin(x / 2) + jnp.arccos(x / 3)),
    "hyperbolic": lambda x: jnp.sum(jnp.sinh(x) + jnp.cosh(x) + jnp.arcsinh(x)
                                    + jnp.arctanh(x / 2) + jnp.arccosh(2 + x * x)),
    "rsqrt layer norm": lambda x: jnp.sum((x - x.mean()) * lax.rsqrt(x.var() + 1e-5) * x),
    "cbrt/exp2/atan2": lambda x: jnp.sum(jnp.cbrt(1 + x * x) + jnp.exp2(x)
                                         + jnp.arctan2(x, 2.0 + x[0])),
    "cumsum both ways": lambda x: jnp.sum(jnp.cumsum(x) * x + lax.cumsum(x, reverse=True) ** 2),
    "cumprod/prod": lambda x: jnp.sum(jnp.cumprod(x)) + jnp.prod(x[:4]),
    "cumlogsumexp": lambda x: jnp.sum(lax.cumlogsumexp(x) * jnp.arange(6.0)),
    "cross entropy (take_along_axis)": lambda x: -jnp.mean(jnp.take_along_axis(
        jax.nn.log_softmax(x.reshape(3, 2)), INDEX % 2, axis=1)),
    "fancy gather with negatives": lambda x: jnp.sum(x[jnp.array([-1, 0, 3, 3])] ** 2),
    "gather 2-d rows and columns": lambda x: jnp.sum(
        x.reshape(2, 3)[jnp.array([1, 0, 1])][:, jnp.array([2, 2, 0])] * jnp.arange(9.0)
        .reshape(3, 3)),
    "gather fill mode": lambda x: jnp.sum(jnp.nan_to_num(
        x.at[jnp.array([0, 7, 2])].get(mode="fill", fill_value=0.5)) ** 2),
    "scatter-add with repeats": lambda x: jnp.sum(
        jnp.zeros(4).at[jnp.array([0, 2, 0, 1, 3, 2])].add(x * x) ** 2),
    "scatter-add dropping out of bounds": lambda x: jnp.sum(
        jnp.ones(3).at[jnp.array([0, 5, 1, 9, 2, 2])].add(x, mode="drop") ** 3),
    "scatter set (slice, window)": lambda x: jnp.sum(
        (jnp.arange(8.0).at[1:7].set(x * 2) * jnp.arange(8.0)) ** 2),
    "scatter set 2-d rows": lambda x: jnp.sum(
        jnp.zeros((3, 2)).at[jnp.array([2, 0])].set(x[:4].reshape(2, 2) ** 2) * jnp.arange(6.0)
        .reshape(3, 2)),
    "scatter-add into an updated operand": lambda x: jnp.sum(
        (x * 3).at[jnp.array([1, 1, 4])].add(x[:3] ** 2) ** 2),
    "split": lambda x: jnp.sum(jnp.split(x, [2, 5])[1] ** 2) + jnp.sum(jnp.split(x, 3)[2]),
    "scan (carry and outputs)": lambda x: jnp.sum(lax.scan(
        lambda c, a: (jnp.tanh(c * a + a), c * a), 0.5, x)[1]),
    "scan reverse with consts": lambda x: lax.scan(
        lambda c, a: (c * 0.5 + jnp.sin(a) * x[0], None), 1.0, x, reverse=True)[0],
    "fori_loop (static bounds)": lambda x: jnp.sum(lax.fori_loop(
        0, 4, lambda i, c: jnp.sin(c) * x + i, x)),
    "cond, predicate from the input": lambda x: lax.cond(
        x[0] > 0, lambda y: jnp.sum(y ** 2), lambda y: -jnp.sum(y), x),
    "cond, predicate from a constant": lambda x: lax.cond(
        True, lambda y: jnp.sum(jnp.exp(y)), lambda y: jnp.sum(y), x),
}


@pytest.mark.parametrize("name", list(SMOOTH))
def test_mapped_primitives_agree_with_jax_grad_off_the_kinks(name):
    f = SMOOTH[name]
    got = np.asarray(asd.jax.subgrad(f)(jnp.asarray(X)))
    np.testing.assert_allclose(got, np.asarray(jax.grad(f)(jnp.asarray(X))), **TOL)
    value, _ = asd.jax.value_and_subgrad(f)(jnp.asarray(X))
    np.testing.assert_allclose(np.asarray(value), np.asarray(f(jnp.asarray(X))), **TOL)


def one_sided(f, x: np.ndarray, v: np.ndarray, t: float = 2.0 ** -12) -> float:
    """The difference quotient of JAX's own function: exact for piecewise-linear programs
    on dyadic points when ``t`` is below the distance to the next kink."""
    x32, v32 = jnp.asarray(x, jnp.float32), jnp.asarray(v, jnp.float32)
    return float((f(x32 + t * v32) - f(x32)) / t)


TIED = np.array([0.5, 0.5, -0.25, 0.5, 0.0, 0.0], dtype=np.float32)
WEIGHTS = jnp.array([1.0, -2.0, 0.5, 3.0, -1.0, 2.0])

KINKS = {
    "cummax at ties": lambda x: jnp.sum(lax.cummax(x) * WEIGHTS),
    "cummin reversed at ties": lambda x: jnp.sum(lax.cummin(x, reverse=True) * WEIGHTS),
    "maximum inside a scan": lambda x: lax.scan(
        lambda c, a: (jnp.maximum(c, a) * 2.0 - a, c), 0.5, x)[0],
    "relu inside fori_loop": lambda x: jnp.sum(lax.fori_loop(
        0, 3, lambda i, c: jax.nn.relu(c - x) + x, x) * WEIGHTS),
    "cond whose branches meet at the tie": lambda x: lax.cond(
        x[4] > 0, lambda y: 3 * y[4] + y[0], lambda y: -y[4] + y[0], x),
    "sign times input (continuous)": lambda x: jnp.sum(jnp.sign(x) * x * WEIGHTS),
}


@pytest.mark.parametrize("name", list(KINKS))
def test_ties_along_coordinate_rays_match_the_one_sided_derivative(name):
    f = KINKS[name]
    for i in range(TIED.size):
        for sign in (1.0, -1.0):
            v = sign * np.eye(TIED.size, dtype=np.float32)[i]
            g = np.asarray(asd.jax.subgrad(f, direction=jnp.asarray(v))(jnp.asarray(TIED)))
            # the limiting gradient along v gives the one-sided derivative along v
            assert float(g @ v) == pytest.approx(one_sided(f, TIED, v), abs=1e-4), (i, sign)


def test_while_loop_with_a_counter_runs_and_matches_finite_differences():
    f = lambda x: jnp.sum(lax.while_loop(  # noqa: E731
        lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1]) * 1.5), (0, x))[1])
    g = np.asarray(asd.jax.subgrad(f)(jnp.asarray(X)))
    fd = np.array([(f(jnp.asarray(X) + h) - f(jnp.asarray(X) - h)) / (2 * 1e-3)
                   for h in np.eye(6, dtype=np.float32) * 1e-3])
    np.testing.assert_allclose(g, fd, rtol=1e-2, atol=1e-3)


def test_refusals_say_why():
    with pytest.raises(TracerBoolError, match="while_loop's predicate"):
        asd.jax.subgrad(lambda x: jnp.sum(lax.while_loop(
            lambda c: jnp.sum(c) < 10, lambda c: c * 2, x)))(jnp.asarray(np.abs(X)))
    with pytest.raises(NotLipschitzError, match="tied"):
        asd.jax.subgrad(lambda x: lax.cond(x[4] > 0, lambda y: jnp.sum(y),
                                           lambda y: -jnp.sum(y), x))(jnp.asarray(TIED))
    with pytest.raises(NotLipschitzError, match="computed from the differentiated input"):
        asd.jax.subgrad(lambda x: jnp.sum(x[jnp.argsort(x)[:2] + 1]))(jnp.asarray(X))
    # the argsort positions themselves read the two smallest entries (F58)
    np.testing.assert_array_equal(
        np.asarray(asd.jax.subgrad(lambda x: jnp.sum(x[jnp.argsort(x)[:2]]))(jnp.asarray(X))),
        np.asarray(asd.jax.subgrad(lambda x: jnp.sum(jnp.sort(x)[:2]))(jnp.asarray(X))))
    # an untied argmax is locally constant: x[argmax(x)] is differentiated (F38)
    np.testing.assert_array_equal(
        np.asarray(asd.jax.subgrad(lambda x: x[jnp.argmax(x)] * 2)(jnp.asarray(X))),
        2 * (np.arange(X.size) == np.argmax(X)))
    with pytest.raises(UnsupportedError, match="switch over 3 branches"):
        asd.jax.subgrad(lambda x: lax.switch(
            (x[0] > 0).astype(jnp.int32) + (x[1] > 0).astype(jnp.int32),
            [jnp.sum, lambda y: jnp.sum(y * 2), lambda y: jnp.sum(y * 3)], x))(jnp.asarray(X))
    with pytest.raises(NotLipschitzError, match="jump"):
        asd.jax.subgrad(lambda x: jnp.sum(jnp.round(x) + x))(jnp.asarray(TIED))


@jax.tree_util.register_pytree_node_class
class Dense:
    """A module as flax and equinox write them: a registered pytree holding its weights."""

    def __init__(self, w, b):
        self.w, self.b = w, b

    def tree_flatten(self):
        return (self.w, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __call__(self, x):
        return jax.nn.relu(x @ self.w + self.b)


def mlp_loss(layers, x):
    for layer in layers:
        x = layer(x)
    return jnp.sum(x)


def test_registered_pytrees_are_differentiated_arguments():
    rng = np.random.default_rng(0)
    layers = [Dense(jnp.asarray(rng.standard_normal((3, 4)), jnp.float32),
                    jnp.asarray(rng.standard_normal(4), jnp.float32)),
              Dense(jnp.asarray(rng.standard_normal((4, 2)), jnp.float32),
                    jnp.asarray(rng.standard_normal(2), jnp.float32))]  # no exact zeros
    x = jnp.asarray(rng.standard_normal((5, 3)), jnp.float32)
    g = asd.jax.subgrad(mlp_loss)(layers, x)
    want = jax.grad(mlp_loss)(layers, x)  # off the kinks at this random point
    assert [type(layer) for layer in g] == [Dense, Dense]
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)
    # at a kink (a dead unit: zero weights and bias), a direction given as the same pytree
    dead = [Dense(jnp.zeros((3, 4)), jnp.zeros(4)), layers[1]]
    v = jax.tree_util.tree_map(jnp.ones_like, dead)
    g_dead = asd.jax.subgrad(mlp_loss, direction=v)(dead, x)
    along = sum(float(jnp.sum(a * b)) for a, b in zip(jax.tree_util.tree_leaves(g_dead),
                                                      jax.tree_util.tree_leaves(v), strict=True))
    x32 = [jax.tree_util.tree_map(lambda p, q: p + 2.0 ** -12 * q, dead, v), x]
    quotient = float((mlp_loss(*x32) - mlp_loss(dead, x)) / 2.0 ** -12)
    assert along == pytest.approx(quotient, rel=1e-3, abs=1e-3)


@jax.tree_util.register_pytree_node_class
class Activated:
    """An equinox-style module: its activation function is a leaf of the pytree too."""

    def __init__(self, w, b, act):
        self.w, self.b, self.act = w, b, act

    def tree_flatten(self):
        return (self.w, self.b, self.act), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __call__(self, x):
        return self.act(x @ self.w + self.b)


def test_non_number_leaves_are_static_and_get_none():
    rng = np.random.default_rng(3)
    layer = Activated(jnp.asarray(rng.standard_normal((3, 4)), jnp.float32),
                      jnp.asarray(rng.standard_normal(4), jnp.float32), jax.nn.relu)
    x = jnp.asarray(rng.standard_normal((5, 3)), jnp.float32)

    def loss(m, x):
        return jnp.sum(m(x) ** 2)

    before = asd.jax.IMPORTS["count"]
    for _ in range(2):
        g = asd.jax.subgrad(loss)(layer, x)
    assert asd.jax.IMPORTS["count"] == before + 1   # one import, then the cache
    assert isinstance(g, Activated) and g.act is None

    def arrays_only(w, b):   # what equinox.filter_grad differentiates
        return loss(Activated(w, b, jax.nn.relu), x)

    gw, gb = jax.grad(arrays_only, (0, 1))(layer.w, layer.b)
    np.testing.assert_allclose(np.asarray(g.w), np.asarray(gw), **TOL)
    np.testing.assert_allclose(np.asarray(g.b), np.asarray(gb), **TOL)
    v = Activated(jnp.ones((3, 4)), jnp.ones(4), None)
    g_v = asd.jax.subgrad(loss, direction=v)(layer, x)
    np.testing.assert_allclose(np.asarray(g_v.w), np.asarray(gw), **TOL)


def test_python_scalars_are_parameters_in_containers_and_configuration_in_objects():
    """jax.grad differentiates a float in a dict; equinox.filter_grad holds a float attribute
    (a pooling init, a dropout rate) static: asd does each where it belongs."""
    w = jnp.asarray(X.reshape(3, 2))
    x = jnp.asarray(X[1:4].reshape(1, 3))

    def loss(m, d):
        return jnp.sum(m(x)) * d["a"] + d["a"] ** 2

    g_m, g_d = asd.jax.subgrad(loss, argnums=(0, 1))(Dense(w, 0.25), {"a": 1.5})
    assert g_m.b is None
    want_w, want_a = jax.grad(lambda w, a: loss(Dense(w, 0.25), {"a": a}), (0, 1))(w, 1.5)
    np.testing.assert_allclose(np.asarray(g_m.w), np.asarray(want_w), **TOL)
    assert float(g_d["a"]) == pytest.approx(float(want_a), rel=1e-6)
