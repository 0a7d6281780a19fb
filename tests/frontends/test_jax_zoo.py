"""Real flax and equinox models through asd.jax: the modules themselves (linen parameter
dicts, nnx modules and their split state, equinox modules holding activation functions) are
the differentiated arguments.

Two oracles per model, float32 and float64:

- off the kinks (random initialisation, random input), asd's gradient in every parameter
  equals the framework's own (``jax.grad``, ``nnx.grad``, ``equinox.filter_grad``, jitted:
  eager JAX compiles every operation separately, which costs more than the test);
- at ties (a dead layer: zero weights and bias, so every pre-activation after it is exactly
  0, a tie for each ReLU and for every max-pooling window), the limiting gradient along a
  direction ``v`` given in the model's own structure gives the one-sided derivative:
  ``<g, v>`` equals the difference quotient of the model's forward along ``v`` in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
eqx = pytest.importorskip("equinox")
linen = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")
jnp = jax.numpy

import asd.jax  # noqa: E402

TOL = {"float32": dict(rtol=2e-4, atol=2e-5), "float64": dict(rtol=1e-9, atol=1e-11)}
LABELS = jnp.array([0, 2, 1, 1])


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """JAX computes in float32 unless x64 is on: switch it on for float64 cases only."""
    with jax.enable_x64(request.param == "float64"):
        yield request.param


def cross_entropy(logits, labels):
    """The usual integer-label cross-entropy (a take_along_axis gather)."""
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)
    return -jnp.mean(picked)


def arrays(tree):
    """The array leaves of a pytree, in order (equinox's activation functions dropped)."""
    return [leaf for leaf in jax.tree_util.tree_leaves(tree) if eqx.is_array(leaf)]


def assert_same_leaves(got, want, tol):
    got, want = arrays(got), arrays(want)
    assert len(got) == len(want) > 0
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tol)


def inner(g, v) -> float:
    return sum(float(jnp.sum(a * b)) for a, b in zip(arrays(g), arrays(v), strict=True))


def one_sided(loss, params, v, *rest, t=1e-7) -> float:
    """The one-sided derivative along ``v`` in float64: the model is smooth along the ray on
    ``(0, t]`` for small ``t``, so the Richardson combination ``2 q(t/2) - q(t)`` of the
    difference quotients cancels their first-order error (a layer norm over a dead layer
    divides by ``sqrt(eps)``: the curvature is large there)."""
    forward = eqx.filter_jit(loss)     # compiled once: eager JAX compiles op by op

    def quotient(step):
        moved = eqx.apply_updates(params, jax.tree_util.tree_map(lambda d: step * d, v))
        return float((forward(moved, *rest) - forward(params, *rest)) / step)

    return 2 * quotient(t / 2) - quotient(t)


def random_like(tree, seed):
    """A direction with the tree's structure: normal entries where it has arrays."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), len(leaves)))
    return jax.tree_util.tree_unflatten(treedef, [
        jax.random.normal(next(keys), leaf.shape, leaf.dtype) if eqx.is_array(leaf) else leaf
        for leaf in leaves])


def cast(tree, dtype):
    return jax.tree_util.tree_map(
        lambda leaf: leaf.astype(dtype) if eqx.is_inexact_array(leaf) else leaf, tree)


# ----- equinox -----

class EqxCNN(eqx.Module):
    """Conv, layer norm, ReLU, max pooling, linear: an equinox image classifier."""

    conv: eqx.nn.Conv2d
    norm: eqx.nn.LayerNorm
    pool: eqx.nn.MaxPool2d
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.conv = eqx.nn.Conv2d(1, 4, 3, key=k1)
        self.norm = eqx.nn.LayerNorm((4, 6, 6))
        self.pool = eqx.nn.MaxPool2d(2, 2)
        self.head = eqx.nn.Linear(36, 3, key=k2)

    def __call__(self, x):
        h = self.pool(jax.nn.relu(self.norm(self.conv(x))))
        return self.head(h.reshape(-1))


def eqx_mlp(dtype):
    mlp = eqx.nn.MLP(3, 2, 8, 2, activation=jax.nn.relu, key=jax.random.PRNGKey(0))
    return cast(mlp, dtype)


def eqx_mlp_loss(model, x):
    return jnp.sum(jax.vmap(model)(x) ** 2) + jnp.sum(jax.vmap(model)(x))


def eqx_cnn_loss(model, x, labels):
    return cross_entropy(jax.vmap(model)(x), labels)


def test_equinox_mlp_matches_filter_grad_off_the_kinks(dtype):
    model = eqx_mlp(dtype)
    x = jax.random.normal(jax.random.PRNGKey(1), (5, 3), dtype)
    g = asd.jax.subgrad(eqx_mlp_loss)(model, x)
    assert isinstance(g, eqx.nn.MLP)
    assert g.activation is None            # a function leaf is static, as filter_grad has it
    assert_same_leaves(g, eqx.filter_jit(eqx.filter_grad(eqx_mlp_loss))(model, x), TOL[dtype])


def test_equinox_cnn_with_integer_labels_matches_filter_grad(dtype):
    model = cast(EqxCNN(jax.random.PRNGKey(2)), dtype)
    x = jax.random.normal(jax.random.PRNGKey(3), (4, 1, 8, 8), dtype)
    value, g = asd.jax.value_and_subgrad(eqx_cnn_loss)(model, x, LABELS)
    assert float(value) == pytest.approx(float(eqx_cnn_loss(model, x, LABELS)), rel=1e-6)
    assert g.pool.init is None             # the pooling layer's -inf init is configuration
    want = eqx.filter_jit(eqx.filter_grad(eqx_cnn_loss))(model, x, LABELS)
    assert_same_leaves(g, want, TOL[dtype])
    # a direction in the module's full structure (its static leaves included) is accepted
    v = jax.tree_util.tree_map(lambda leaf: jnp.ones_like(leaf) if eqx.is_array(leaf) else leaf,
                               model)
    g_v = asd.jax.subgrad(eqx_cnn_loss, direction=v)(model, x, LABELS)
    assert_same_leaves(g_v, g, TOL[dtype])


def test_equinox_mlp_at_a_dead_layer_gives_the_one_sided_derivative():
    with jax.enable_x64(True):
        model = eqx_mlp("float64")
        first = model.layers[0]
        model = eqx.tree_at(lambda m: (m.layers[0].weight, m.layers[0].bias), model,
                            (jnp.zeros_like(first.weight), jnp.zeros_like(first.bias)))
        x = jax.random.normal(jax.random.PRNGKey(1), (5, 3), jnp.float64)
        for seed in range(3):
            v = random_like(eqx.filter(model, eqx.is_array), 20 + seed)
            g = asd.jax.subgrad(eqx_mlp_loss, direction=v)(model, x)
            assert inner(g, v) == pytest.approx(one_sided(eqx_mlp_loss, model, v, x),
                                                rel=1e-5, abs=1e-6)


# ----- flax linen -----

class LinenCNN(linen.Module):
    """Conv, ReLU, max pooling, layer norm, dense, GELU, dense (NHWC, flax's layout)."""

    @linen.compact
    def __call__(self, x):
        x = linen.max_pool(linen.relu(linen.Conv(4, (3, 3), name="conv")(x)), (2, 2), (2, 2))
        x = linen.LayerNorm()(x).reshape(x.shape[0], -1)
        return linen.Dense(3)(linen.gelu(linen.Dense(16)(x)))


def linen_setup(dtype):
    model = LinenCNN()
    x = jax.random.normal(jax.random.PRNGKey(4), (4, 8, 8, 1), dtype)
    params = cast(jax.jit(model.init)(jax.random.PRNGKey(5), x), dtype)

    def loss(p, x, labels):
        return cross_entropy(model.apply(p, x), labels)

    return params, x, loss


def test_linen_cnn_parameter_dict_matches_jax_grad(dtype):
    params, x, loss = linen_setup(dtype)
    g = asd.jax.subgrad(loss)(params, x, LABELS)
    assert jax.tree_util.tree_structure(g) == jax.tree_util.tree_structure(params)
    assert_same_leaves(g, jax.jit(jax.grad(loss))(params, x, LABELS), TOL[dtype])


def test_linen_cnn_at_a_dead_convolution_decides_relu_and_pooling_ties_along_v():
    """A zero kernel and bias: every ReLU input is 0 and every pooling window is a four-way
    tie of zeros; the direction decides all of them."""
    with jax.enable_x64(True):
        params, x, loss = linen_setup("float64")
        conv = params["params"]["conv"]
        dead = {"params": {**params["params"], "conv": jax.tree_util.tree_map(
            jnp.zeros_like, conv)}}
        for seed in range(3):
            v = random_like(dead, 30 + seed)
            slopes = []
            for w in (v, jax.tree_util.tree_map(jnp.negative, v)):
                g = asd.jax.subgrad(loss, direction=w)(dead, x, LABELS)
                slopes.append(inner(g, w))
                assert slopes[-1] == pytest.approx(one_sided(loss, dead, w, x, LABELS),
                                                   rel=1e-5, abs=1e-6)
            assert slopes[0] != pytest.approx(-slopes[1], rel=1e-3)  # a kink, not a smooth point


# ----- flax nnx -----

class NnxMLP(nnx.Module):
    """Linear, batch norm (running statistics), ReLU, dropout (deterministic), linear."""

    def __init__(self, rngs):
        self.l1 = nnx.Linear(3, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, use_running_average=True, rngs=rngs)
        self.drop = nnx.Dropout(0.5, deterministic=True, rngs=rngs)
        self.l2 = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(nnx.relu(self.bn(self.l1(x)))))


def nnx_model(dtype):
    model = NnxMLP(nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, cast(state, dtype))


def test_nnx_module_as_the_argument_matches_nnx_grad(dtype):
    model = nnx_model(dtype)
    x = jax.random.normal(jax.random.PRNGKey(6), (5, 3), dtype)

    def loss(m, x):
        return jnp.sum(m(x) ** 2)

    g = asd.jax.subgrad(loss)(model, x)
    assert isinstance(g, NnxMLP)
    want = nnx.jit(nnx.grad(loss))(model, x)        # an nnx.State of the parameters
    got = nnx.state(g, nnx.Param)
    assert_same_leaves(got, want, TOL[dtype])


def test_nnx_split_parameters_match_jax_grad(dtype):
    """nnx's functional idiom: split the parameters from the rest (batch statistics, the
    dropout layer's random state) and differentiate a function of the parameters."""
    graphdef, params, rest = nnx.split(nnx_model(dtype), nnx.Param, ...)
    x = jax.random.normal(jax.random.PRNGKey(7), (5, 3), dtype)

    def loss(params, x):
        return jnp.sum(nnx.merge(graphdef, params, rest)(x) ** 2)

    g = asd.jax.subgrad(loss)(params, x)
    assert jax.tree_util.tree_structure(g) == jax.tree_util.tree_structure(params)
    assert_same_leaves(g, jax.jit(jax.grad(loss))(params, x), TOL[dtype])
