"""asd.tf: TensorFlow functions and Keras models imported from tf.function graphs, checked on
their kinks.

The same checks as the PyTorch and JAX front ends: a Keras MLP and a small Keras CNN where the
first layer's pre-activations are exactly 0 and where max-pooling windows tie, against the exact
limiting gradient of the plain-numpy model along the same direction (`limiting_gradient`, in
Fractions); TensorFlow's own gradient differing there; off the kinks, agreement with
``tf.GradientTape`` in float32 and float64 for the models and for every mapped operation; the
``tf.custom_gradient`` drop-in; clear errors; and a cache that never replays a stale program.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import asd.tf  # noqa: E402

import asd  # noqa: E402
from asd.testing.exact import limiting_gradient  # noqa: E402

F32 = dict(rtol=2e-5, atol=2e-6)
F64 = dict(rtol=1e-10, atol=1e-12)


def unit(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def exact(f, x, v) -> np.ndarray:
    return limiting_gradient(f, x, v)[1].astype(float)


def f32(a) -> np.ndarray:
    """Weights rounded to float32 once, so TensorFlow and the exact oracle use the same
    numbers."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def tape_grad(f, *xs, sources=None):
    """TensorFlow's own gradient of scalar ``f(*xs)``."""
    xs = [tf.convert_to_tensor(x) for x in xs]
    with tf.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = f(*xs)
    return tape.gradient(y, xs if sources is None else sources)


# ----- the paper's demo and max ties -----


def test_relu_identity_at_zero_is_one_where_tensorflow_says_zero():
    f = lambda x: tf.reduce_sum(tf.nn.relu(x) - tf.nn.relu(-x))  # noqa: E731
    got = asd.tf.subgrad(f, tf.zeros(3))
    assert isinstance(got, tf.Tensor) and got.dtype == tf.float32
    np.testing.assert_array_equal(got.numpy(), np.ones(3))
    np.testing.assert_array_equal(tape_grad(f, tf.zeros(3))[0].numpy(), np.zeros(3))
    g3 = asd.tf.subgrad(lambda x: tf.reduce_sum(10 * x - 9 * (tf.nn.relu(x) - tf.nn.relu(-x))),
                        tf.zeros(2, tf.float64))
    assert g3.dtype == tf.float64
    np.testing.assert_array_equal(g3.numpy(), np.ones(2))


MAX_TIES = [
    ("reduce_max", lambda x: tf.reduce_max(x), lambda x: np.max(x), [2.0, 2.0, 1.0, 2.0]),
    ("maximum", lambda x: tf.reduce_sum(tf.maximum(x[:2], x[2:])),
     lambda x: np.maximum(x[:2], x[2:]).sum(), [1.0, 0.0, 1.0, 0.0]),
    ("minimum", lambda x: tf.reduce_sum(tf.minimum(x[:2], x[2:]) * [1.0, 2.0]),
     lambda x: (np.minimum(x[:2], x[2:]) * np.array([1.0, 2.0])).sum(), [1.0, 0.0, 1.0, 0.0]),
    ("reduce_min rows", lambda x: tf.reduce_sum(tf.reduce_min(tf.reshape(x, (2, 2)), axis=1)),
     lambda x: np.min(x.reshape(2, 2), axis=1).sum(), [3.0, 3.0, -1.0, -1.0]),
]


@pytest.mark.parametrize("name, fn, ref, x", MAX_TIES, ids=[t[0] for t in MAX_TIES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_ties_match_the_exact_limiting_gradient(name, fn, ref, x, seed):
    x = np.asarray(x)
    v = unit(seed, x.shape)
    got = asd.tf.subgrad(fn, tf.constant(x), direction=v)
    np.testing.assert_allclose(got.numpy(), exact(ref, x, v), **F64)


def test_tensorflow_splits_a_reduce_max_tie_asd_follows_the_direction():
    x = tf.constant([2.0, 2.0, 1.0])
    theirs = tape_grad(tf.reduce_max, x)[0].numpy()
    np.testing.assert_allclose(theirs, [0.5, 0.5, 0.0])
    got = asd.tf.subgrad(tf.reduce_max, x, direction=np.array([0.0, 1.0, 0.0]))
    np.testing.assert_array_equal(got.numpy(), [0.0, 1.0, 0.0])


# ----- a Keras MLP whose first layer holds pairs (a, -a) -----

RNG = np.random.default_rng(0)
A = f32(RNG.standard_normal((3, 3)))
K1, B1 = np.concatenate([A.T, -A.T], axis=1), np.zeros(6)
K2, B2 = f32(RNG.standard_normal((6, 4))), np.array([0.5, -0.5, 1.0, 0.0])
K3, B3 = f32(RNG.standard_normal((4, 1))), np.zeros(1)


def np_mlp(x):
    h = np.maximum(x @ K1 + B1, 0)
    h = np.maximum(h @ K2 + B2, 0)
    return (h @ K3 + B3)[0, 0]


def make_mlp(dtype="float32"):
    model = keras.Sequential([keras.Input((3,), dtype=dtype),
                              keras.layers.Dense(6, activation="relu", dtype=dtype),
                              keras.layers.Dense(4, activation="relu", dtype=dtype),
                              keras.layers.Dense(1, dtype=dtype)])
    for layer, (k, b) in zip(model.layers, [(K1, B1), (K2, B2), (K3, B3)], strict=True):
        layer.set_weights([k.astype(dtype), b.astype(dtype)])
    return model


MLP32, MLP64 = make_mlp("float32"), make_mlp("float64")


def mlp_loss(x):
    return tf.reduce_sum(MLP32(x))


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16))
def test_mlp_at_zero_preactivations_matches_exact(seed):
    x, v = np.zeros((1, 3)), unit(seed, (1, 3))
    got = asd.tf.subgrad(mlp_loss, tf.zeros((1, 3)), direction=v)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), exact(np_mlp, x, v), **F32)
    got64 = asd.tf.subgrad(lambda x: tf.reduce_sum(MLP64(x)), tf.zeros((1, 3), tf.float64),
                           direction=v)
    np.testing.assert_allclose(got64.numpy(), exact(np_mlp, x, v), **F64)
    np.testing.assert_allclose(got64.numpy(), asd.subgrad(np_mlp, direction=v)(x), **F64)


def test_value_and_subgrad_returns_tensorflow_values():
    x = tf.constant(unit(8, (2, 3)), tf.float64)
    value, g = asd.tf.value_and_subgrad(lambda x: tf.reduce_sum(MLP64(x)), x, seed=0)
    assert value.dtype == tf.float64 and value.shape == ()
    np.testing.assert_allclose(value.numpy(), tf.reduce_sum(MLP64(x)).numpy(), **F64)
    assert g.shape == x.shape


def test_mlp_tensorflow_gradient_differs_at_zero():
    want = exact(np_mlp, np.zeros((1, 3)), unit(1, (1, 3)))
    theirs = tape_grad(mlp_loss, tf.zeros((1, 3)))[0].numpy()
    assert np.abs(want).max() > 1e-3
    assert not np.allclose(theirs, want, **F32)


@pytest.mark.parametrize("dtype, tol", [("float32", F32), ("float64", F64)])
def test_mlp_off_kinks_equals_gradient_tape_for_inputs_and_weights(dtype, tol):
    model = MLP32 if dtype == "float32" else MLP64
    x = tf.constant(unit(3, (5, 3)), dtype=dtype)
    loss = lambda x: tf.reduce_sum(model(x) ** 2)  # noqa: E731
    got = asd.tf.subgrad(loss, x, argnums=(0, "params"), seed=0)
    want = tape_grad(loss, x, sources=[x] + model.trainable_variables)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), **tol)
    assert sorted(got[1]) == sorted(
        f"model/{v.path.split('/', 1)[1]}" for v in model.trainable_variables)
    for v, w in zip(model.trainable_variables, want[1:], strict=True):
        g = got[1][f"model/{v.path.split('/', 1)[1]}"]
        assert g.dtype == v.dtype
        np.testing.assert_allclose(g.numpy(), w.numpy(), **tol)


def test_a_model_passed_directly_names_its_variables_below_itself():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="hidden"),
                              keras.layers.Lambda(lambda t: tf.reduce_sum(t), name="total")])
    g = asd.tf.subgrad(model, tf.ones((1, 3)), argnums="params")
    assert sorted(g) == ["hidden/bias", "hidden/kernel"]
    np.testing.assert_array_equal(g["hidden/kernel"].numpy(), np.ones((3, 2)))


def test_params_direction_is_a_dict_and_decides_the_tie():
    w = tf.Variable([1.0, -1.0])

    def f(x):
        return tf.reduce_sum(tf.nn.relu(w * x))

    x = tf.constant([0.0, 0.0])
    g = asd.tf.subgrad(f, x, argnums="params", direction={"w": np.array([1.0, -1.0])})
    np.testing.assert_array_equal(g["w"].numpy(), [0.0, 0.0])
    x1 = tf.constant([0.0, 2.0])                    # w * x = (0, -2): only w[0] is tied
    g1 = asd.tf.subgrad(f, x1, argnums=(0, "params"),
                        direction=(np.array([1.0, 0.0]), {"w": np.zeros(2)}))
    np.testing.assert_array_equal(g1[0].numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(g1[1]["w"].numpy(), [0.0, 0.0])


# ----- a Keras CNN: conv (NHWC, 'same') -> relu -> max pool -> flatten -> dense -----

WC = f32(np.random.default_rng(1).standard_normal((3, 3, 1, 2)))   # HWIO
WF = f32(np.random.default_rng(2).standard_normal((8, 1)))


def np_cnn(x):
    xp = np.zeros((6, 6), dtype=object)
    xp[...] = 0.0
    xp[1:5, 1:5] = x[0, :, :, 0]
    conv = np.empty((2, 4, 4), dtype=object)
    for o in range(2):
        acc = 0.0
        for i in range(3):
            for j in range(3):
                acc = acc + WC[i, j, 0, o] * xp[i:i + 4, j:j + 4]
        conv[o] = acc
    y = np.maximum(conv, 0)
    windows = y.reshape(2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4).reshape(2, 2, 2, 4)
    pooled = np.max(windows, axis=-1)                     # (C, H, W)
    return (pooled.transpose(1, 2, 0).reshape(-1) @ WF)[0]


def make_cnn(dtype="float32"):
    model = keras.Sequential([
        keras.Input((4, 4, 1), dtype=dtype),
        keras.layers.Conv2D(2, 3, padding="same", activation="relu", dtype=dtype),
        keras.layers.MaxPooling2D(2, dtype=dtype), keras.layers.Flatten(dtype=dtype),
        keras.layers.Dense(1, use_bias=False, dtype=dtype)])
    model.layers[0].set_weights([WC.astype(dtype), np.zeros(2, dtype)])
    model.layers[3].set_weights([WF.astype(dtype)])
    return model


CNN32, CNN64 = make_cnn("float32"), make_cnn("float64")

TIED = {
    "zeros": np.zeros((1, 4, 4, 1)),
    "blocks": np.kron(np.array([[1.0, -1.0], [0.5, 0.0]]), np.ones((2, 2)))[None, :, :, None],
}


@pytest.mark.parametrize("point", sorted(TIED))
@pytest.mark.parametrize("seed", [0, 1])
def test_cnn_on_ties_matches_exact(point, seed):
    x = TIED[point]
    v = unit(seed, x.shape)
    got = asd.tf.subgrad(lambda x: tf.reduce_sum(CNN32(x)), tf.constant(x, tf.float32),
                         direction=v)
    np.testing.assert_allclose(got.numpy(), exact(np_cnn, x, v), **F32)
    got64 = asd.tf.subgrad(lambda x: tf.reduce_sum(CNN64(x)), tf.constant(x), direction=v)
    np.testing.assert_allclose(got64.numpy(), exact(np_cnn, x, v), **F64)


def test_cnn_tensorflow_gradient_differs_at_zero():
    x = TIED["zeros"]
    want = exact(np_cnn, x, unit(0, x.shape))
    theirs = tape_grad(lambda x: tf.reduce_sum(CNN32(x)), tf.constant(x, tf.float32))[0]
    assert np.abs(want).max() > 1e-3
    assert not np.allclose(theirs.numpy(), want, **F32)


@pytest.mark.parametrize("dtype, tol", [("float32", F32), ("float64", F64)])
def test_cnn_off_kinks_equals_gradient_tape(dtype, tol):
    model = CNN32 if dtype == "float32" else CNN64
    x = tf.constant(unit(4, (2, 4, 4, 1)), dtype=dtype)
    labels = tf.constant([0, 0])

    def loss(x):
        logits = tf.concat([model(x), -model(x)], axis=1)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

    got = asd.tf.subgrad(loss, x, argnums=(0, "params"), seed=0)
    want = tape_grad(loss, x, sources=[x] + model.trainable_variables)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), **tol)
    for v, w in zip(model.trainable_variables, want[1:], strict=True):
        np.testing.assert_allclose(got[1][f"model/{v.path.split('/', 1)[1]}"].numpy(),
                                   w.numpy(), **tol)


def test_program_prints_the_library_calls():
    text = str(asd.tf.program(lambda x: tf.reduce_sum(CNN32(x)), tf.zeros((1, 4, 4, 1))))
    assert "conv" in text and "max_pool" in text and "relu" in text


# ----- the tf.custom_gradient drop-in -----


def test_function_inside_gradient_tape_gives_ones_for_the_identity_at_zero():
    f = asd.tf.function(lambda x: tf.nn.relu(x) - tf.nn.relu(-x))
    x = tf.Variable(tf.zeros(3))
    w = tf.constant([2.0, -1.0, 0.5])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(f(x) * w)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), w.numpy())
    np.testing.assert_array_equal(f(x).numpy(), np.zeros(3))


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_functions_gradient_refuses_a_jump_whatever_the_incoming_gradient(weight):
    """F57 (as in asd.jax.function): the incoming gradient taken as a constant, a zero one
    made the pulled-back function constant and hid the step's jump from the refusal."""
    f = asd.tf.function(lambda x: tf.cast(x > 0, tf.float64) + tf.abs(x))
    x = tf.Variable(tf.constant([0.0, 0.5], tf.float64))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(f(x) * weight)
    with pytest.raises((asd.NotLipschitzError, tf.errors.InvalidArgumentError),
                       match="greater jumps here"):
        tape.gradient(y, x)


def test_function_gives_keras_weights_their_gradients_and_trains():
    model = make_mlp("float32")
    f = asd.tf.function(model)
    x = tf.constant(unit(5, (4, 3)), tf.float32)
    loss = lambda x: tf.reduce_sum(f(x) ** 2)  # noqa: E731
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loss(x)
    got = tape.gradient(y, [x] + model.trainable_variables)
    want = tape_grad(lambda x: tf.reduce_sum(model(x) ** 2), x,
                     sources=[x] + model.trainable_variables)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), **F32)
    opt = keras.optimizers.SGD(0.01)
    before = float(loss(x))
    for _ in range(3):
        with tf.GradientTape() as tape:
            y = loss(x)
        opt.apply_gradients(zip(tape.gradient(y, model.trainable_variables),
                                model.trainable_variables, strict=True))
    assert float(loss(x)) < before


def test_function_in_a_compiled_step_and_with_integer_inputs():
    f = asd.tf.function(lambda x, t: tf.reduce_sum(
        tf.nn.relu(x) - tf.nn.relu(-x)) * tf.cast(tf.reduce_sum(t), tf.float32))

    @tf.function
    def step(x, t):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x, t)
        return tape.gradient(y, x)

    g = step(tf.zeros(2), tf.constant([1, 2]))
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])

    model = make_mlp("float32")
    h = asd.tf.function(model)
    x = tf.constant(unit(6, (5, 3)), tf.float32)

    @tf.function
    def weights_step(x):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(h(x) ** 2)
        return tape.gradient(y, model.trainable_variables)

    want = tape_grad(lambda x: tf.reduce_sum(model(x) ** 2), x,
                     sources=model.trainable_variables)
    for got, w in zip(weights_step(x), want, strict=True):
        np.testing.assert_allclose(got.numpy(), w.numpy(), **F32)


# ----- every mapped operation agrees with tf.GradientTape off the kinks -----

X = np.array([[0.31, -1.7, 0.52, 2.3], [-0.8, 0.13, 1.9, -0.45]])

SMOOTH_POINT_OPS = {
    "relu/abs/maximum/minimum": lambda x: tf.reduce_sum(
        tf.nn.relu(x) + tf.abs(x) + tf.maximum(x, 0.2) + tf.minimum(x, -x)),
    "leaky_relu/elu/selu/relu6": lambda x: tf.reduce_sum(
        tf.nn.leaky_relu(x, 0.1) + tf.nn.elu(x) + tf.nn.selu(x) + tf.nn.relu6(3 * x)),
    "clip_by_value": lambda x: tf.reduce_sum(tf.clip_by_value(x, -1.0, 1.0) * x),
    "where/select": lambda x: tf.reduce_sum(tf.where(x > 0, x, 3 * x) + tf.where(
        x <= 0.5, x * x, x)),
    "reduce max/min/prod/mean": lambda x: tf.reduce_max(x) + tf.reduce_sum(
        tf.reduce_min(x, axis=1)) + tf.reduce_prod(x[0]) + tf.reduce_mean(x, keepdims=True)[0, 0],
    "top_k/sort": lambda x: tf.reduce_sum(tf.math.top_k(x, 2).values)
    + tf.reduce_sum(tf.sort(x, axis=1) * tf.range(4.0, dtype=x.dtype)),
    "norm": lambda x: tf.norm(x) + tf.reduce_sum(tf.norm(x, axis=1)),
    "matmul/einsum": lambda x: tf.reduce_sum(tf.matmul(x, x, transpose_b=True))
    + tf.einsum("ij,ij->", x, x) + tf.reduce_sum(x[None] @ tf.transpose(x)[None]),
    "pow/div/square/sqrt": lambda x: tf.reduce_sum(x ** 3 / (1 + tf.square(x))
                                                   + tf.sqrt(1 + x * x) + tf.pow(x, 2.0)),
    "exp/log/tanh/sigmoid/softplus": lambda x: tf.reduce_sum(
        tf.exp(x) + tf.math.log(1 + x * x) + tf.tanh(x) + tf.sigmoid(x) + tf.nn.softplus(x)
        + tf.math.log1p(x * x) + tf.math.expm1(x) + tf.nn.softsign(x)),
    "softmax/log_softmax/logsumexp": lambda x: tf.reduce_sum(
        tf.nn.softmax(x) * tf.range(4.0, dtype=x.dtype)) + tf.reduce_sum(
        tf.nn.log_softmax(x)[1]) + tf.reduce_logsumexp(x),
    "cross entropies": lambda x: tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits([1, 3], x)) + tf.reduce_sum(
        tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(tf.ones_like(x)), x)),
    "keras losses": lambda x: keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        tf.constant([0, 2]), x) + keras.losses.MeanSquaredError()(tf.zeros_like(x), x),
    "structure": lambda x: tf.reduce_sum(
        tf.transpose(tf.reshape(tf.concat([x, x[::-1]], 1), (4, 4)))[1:, ::2]
        * tf.reshape(tf.range(6.0, dtype=x.dtype), (3, 2))) + x[1, 2]
    + tf.reduce_sum(tf.gather(x, [3, 0, 2], axis=1) * 2) + tf.reduce_sum(
        tf.stack([x, 2 * x])[1]) + tf.reduce_sum(tf.unstack(x)[0] * 3),
    "pad/tile/expand_dims/squeeze/broadcast": lambda x: tf.reduce_sum(
        tf.pad(x, [[1, 1], [0, 2]]) * 2) + tf.reduce_sum(tf.tile(x, [2, 3]) * 0.5)
    + tf.reduce_sum(tf.squeeze(tf.expand_dims(x, 0)) * x) + tf.reduce_sum(
        tf.broadcast_to(x[0], (3, 4)) * 1.5) + tf.reduce_sum(x[:, None, 1:3] * x[:, None, :2]),
    "sin/cos/reciprocal/rsqrt/checks": lambda x: tf.reduce_sum(
        tf.sin(x) * tf.cos(x) + tf.math.reciprocal(2 + x * x) + tf.math.rsqrt(1 + x * x)
        + tf.debugging.check_numerics(tf.ensure_shape(x, (2, 4)), "x")),
    "cumsum": lambda x: tf.reduce_sum(tf.math.cumsum(x, axis=1) * x) + tf.reduce_sum(
        tf.math.cumsum(x, exclusive=True, reverse=True) * x),
    "gelu (tanh approximation)": lambda x: tf.reduce_sum(tf.nn.gelu(x, approximate=True)),
    "gelu (exact, through Erf) and erfc": lambda x: tf.reduce_sum(
        tf.nn.gelu(x) + tf.math.erfc(x) * 0.5),
    "bias_add/add_n/squared_difference": lambda x: tf.reduce_sum(
        tf.nn.bias_add(x, x[0]) * x + tf.add_n([x, x, 2 * x]) * x
        + tf.math.squared_difference(x, 1.0)),
}


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize("name", sorted(SMOOTH_POINT_OPS))
def test_mapped_operations_agree_with_gradient_tape_off_kinks(name, dtype):
    f = SMOOTH_POINT_OPS[name]
    x = tf.constant(X, dtype)
    got = asd.tf.subgrad(f, x, seed=0)
    assert got.dtype == dtype
    # Keras losses compute in Keras' floatx (float32) whatever the input's dtype
    tol = F32 if dtype == tf.float32 or name == "keras losses" else dict(rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got.numpy(), tape_grad(f, x)[0].numpy(), **tol)


LAYER_NORM = {d: keras.layers.LayerNormalization(dtype=d) for d in ("float32", "float64")}

NN_OPS = {
    "conv2d valid stride 2": lambda x: tf.reduce_sum(tf.nn.conv2d(
        x, tf.reshape(tf.range(18.0, dtype=x.dtype) / 10, (3, 3, 2, 1)), 2, "VALID") ** 2),
    "conv2d dilated same": lambda x: tf.reduce_sum(tf.nn.conv2d(
        x, tf.reshape(tf.range(36.0, dtype=x.dtype) / 20, (3, 3, 2, 2)), 1, "SAME",
        dilations=2) ** 2),
    "depthwise conv": lambda x: tf.reduce_sum(tf.nn.depthwise_conv2d(
        x, tf.reshape(tf.range(36.0, dtype=x.dtype) / 30, (3, 3, 2, 2)), [1, 1, 1, 1],
        "SAME") ** 2),
    "max/avg pool": lambda x: tf.reduce_sum(tf.nn.max_pool2d(x, 2, 2, "VALID") ** 2)
    + tf.reduce_sum(tf.nn.avg_pool2d(x, 3, 1, "VALID") ** 2)
    + tf.reduce_sum(tf.nn.max_pool2d(x, 3, 1, "SAME")),
    "conv3d": lambda x: tf.reduce_sum(tf.nn.conv3d(
        tf.reshape(x, (1, 5, 5, 2, 1)), tf.reshape(tf.range(8.0, dtype=x.dtype), (2, 2, 2, 1, 1)),
        [1, 1, 1, 1, 1], "VALID") ** 2),
    "keras layer norm": lambda x: tf.reduce_sum(
        LAYER_NORM[x.dtype.name](tf.reshape(x, (5, 10))) * tf.range(10.0, dtype=x.dtype)),
    "fused batch norm": lambda x: tf.reduce_sum(tf.compat.v1.nn.fused_batch_norm(
        x, tf.constant([1.5, 0.5], x.dtype), tf.constant([0.1, -0.2], x.dtype),
        mean=tf.constant([0.3, -0.1], x.dtype), variance=tf.constant([2.0, 0.5], x.dtype),
        is_training=False)[0] ** 2),
    "keras conv1d/pool1d": lambda x: tf.reduce_sum(keras.layers.MaxPooling1D(2)(
        tf.nn.conv1d(tf.reshape(x, (1, 25, 2)), tf.ones((3, 2, 1), x.dtype), 1, "VALID")) ** 2),
}


@pytest.mark.parametrize("name, dtype", [
    (name, dtype) for name in sorted(NN_OPS) for dtype in (tf.float32, tf.float64)
    if not (name in ("conv2d dilated same", "fused batch norm")
            and dtype == tf.float64)])                     # TensorFlow has no such CPU kernel
def test_nn_operations_agree_with_gradient_tape_off_kinks(name, dtype):
    f = NN_OPS[name]
    x = tf.constant(unit(7, (1, 5, 5, 2)), dtype)
    got = asd.tf.subgrad(f, x, seed=0)
    want = tape_grad(f, x)[0].numpy()
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == tf.float32 else dict(rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got.numpy(), want, **tol)


# ----- piecewise operations on their kinks against the exact oracle -----

KINKS = [
    ("relu6", lambda x: tf.reduce_sum(tf.nn.relu6(x)), lambda x: np.clip(x, 0.0, 6.0).sum(),
     [0.0, 6.0, 0.0, 6.0]),
    ("leaky_relu", lambda x: tf.reduce_sum(tf.nn.leaky_relu(x, 0.5)),
     lambda x: np.where(x >= 0, x, 0.5 * x).sum(), np.zeros(4)),
    ("clip", lambda x: tf.reduce_sum(tf.clip_by_value(x, -1.0, 1.0)),
     lambda x: np.clip(x, -1.0, 1.0).sum(), [1.0, -1.0, 1.0, -1.0]),
    ("abs", lambda x: tf.reduce_sum(tf.abs(x) - tf.nn.relu(x)),
     lambda x: (np.abs(x) - np.maximum(x, 0.0)).sum(), np.zeros(4)),
    ("where", lambda x: tf.reduce_sum(tf.where(x >= 0, x, -2 * x)),
     lambda x: sum(xi if xi >= 0 else -2 * xi for xi in x), np.zeros(4)),
    ("sort", lambda x: tf.reduce_sum(tf.sort(x) * tf.range(1.0, 5.0, dtype=x.dtype)),
     lambda x: np.sort(x) @ np.arange(1.0, 5.0), [1.0, 1.0, 1.0, 0.0]),
    ("top_k", lambda x: tf.reduce_sum(tf.math.top_k(x, 2).values),
     lambda x: np.sort(x)[2:].sum(), [3.0, 3.0, 3.0, 0.0]),
    ("max pool", lambda x: tf.reduce_sum(tf.nn.max_pool1d(x[None, :, None], 2, 2, "VALID")),
     lambda x: np.maximum(x[0::2], x[1::2]).sum(), [1.0, 1.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("name, fn, ref, x", KINKS, ids=[k[0] for k in KINKS])
@pytest.mark.parametrize("seed", [0, 1])
def test_piecewise_operations_on_kinks_match_exact(name, fn, ref, x, seed):
    x = np.asarray(x, dtype=float)
    v = unit(seed + 10, x.shape)
    got = asd.tf.subgrad(fn, tf.constant(x), direction=v)
    np.testing.assert_allclose(got.numpy(), exact(ref, x, v), **F64)


def test_norm_at_zero_is_imported_as_a_norm():
    v = np.array([3.0, -4.0])
    got = asd.tf.subgrad(lambda x: tf.norm(x), tf.zeros(2), direction=v)
    np.testing.assert_allclose(got.numpy(), v / 5.0, **F32)
    assert np.isnan(tape_grad(tf.norm, tf.zeros(2))[0].numpy()).all()


def test_nested_tf_functions_are_interpreted_not_trusted():
    """A ``tf.function`` called inside the traced one is a (Stateful)PartitionedCall: its body
    is imported too, variables it reads included."""
    w = tf.Variable([1.0, -1.0])
    inner = tf.function(lambda x: tf.nn.relu(x) - tf.nn.relu(-x) + tf.nn.relu(w * x))
    f = lambda x: tf.reduce_sum(inner(x))  # noqa: E731
    x = tf.zeros(2)
    g = asd.tf.subgrad(f, x, argnums=(0, "params"), direction=(np.array([1.0, 1.0]),
                                                               {"w": np.zeros(2)}))
    np.testing.assert_array_equal(g[0].numpy(), [2.0, 1.0])   # w * x enters (+, -)
    np.testing.assert_array_equal(g[1]["w"].numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(tape_grad(f, x)[0].numpy(), [0.0, 0.0])


# ----- errors -----


def test_python_branches_on_tensors_raise_tracer_bool_error():
    with pytest.raises(asd.TracerBoolError, match=r"tf\.where"):
        asd.tf.subgrad(lambda x: x if x > 0 else -x, tf.constant(0.0))


def test_control_flow_on_the_differentiated_path_is_refused():
    f = lambda x: tf.reduce_sum(tf.cond(tf.reduce_sum(x) > 0, lambda: x, lambda: -x))  # noqa: E731
    with pytest.raises(asd.UnsupportedError, match=r"operation StatelessIf .*node 'cond'"):
        asd.tf.subgrad(f, tf.ones(2))


def test_unmapped_operation_names_the_op_the_node_and_the_fix():
    def f(x):
        return tf.reduce_sum(tf.math.floor(x) * x)

    with pytest.raises(asd.UnsupportedError) as info:
        asd.tf.subgrad(f, tf.ones(3))
    text = str(info.value)
    assert "TensorFlow operation Floor has no asd mapping" in text
    assert "node 'Floor'" in text and "test_tf.py" in text
    assert "asd.frontends.tf.OPS['Floor'] = fn" in text


def test_the_op_table_is_extensible():
    f = lambda x: tf.reduce_sum(tf.math.cumprod(x) * [1.0, 2.0, 3.0])  # noqa: E731
    with pytest.raises(asd.UnsupportedError, match="Cumprod"):
        asd.tf.subgrad(f, tf.ones(3))

    def cumprod(x, axis, **_):
        return np.stack([np.prod(x[:k + 1]) for k in range(np.shape(x)[0])])

    asd.tf.OPS["Cumprod"] = cumprod
    try:
        np.testing.assert_array_equal(asd.tf.subgrad(f, tf.ones(3)).numpy(), [6.0, 5.0, 3.0])
    finally:
        del asd.tf.OPS["Cumprod"]


def test_step_functions_and_jumps_are_refused_not_guessed():
    with pytest.raises(asd.UnsupportedError, match="Cast to int32"):
        asd.tf.subgrad(lambda x: tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float32)),
                       tf.ones(2))
    with pytest.raises(asd.NotLipschitzError, match="DivNoNan"):
        asd.tf.subgrad(lambda x: tf.reduce_sum(tf.math.divide_no_nan(1.0, x)), tf.ones(2))
    with pytest.raises(asd.UnsupportedError, match=r"AvgPool with padding \(\(1, 1\)"):
        asd.tf.subgrad(lambda x: tf.reduce_sum(tf.nn.avg_pool2d(x, 3, 1, "SAME")),
                       tf.ones((1, 4, 4, 1)))
    with pytest.raises(asd.NotLipschitzError, match="GatherV2"):
        asd.tf.subgrad(lambda x: tf.gather(x, tf.argmax(x)), tf.constant([1.0, 3.0, 3.0]))


@pytest.mark.parametrize("spread", ["broadcast_to", "tile"])
def test_a_broadcast_condition_stays_boolean(spread):
    """F59 (as in asd.jax): BroadcastTo and Tile added float zeros to broadcast, so a
    boolean mask became a float array that SelectV2 refused. Off the tie, TensorFlow's own
    gradient; at the tie, the branch the direction enters."""
    a = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], tf.float64)

    def f(x):
        m = (tf.broadcast_to(x > 0, (3, 2)) if spread == "broadcast_to"
             else tf.tile((x > 0)[None], (3, 1)))
        return tf.reduce_sum(tf.where(m, a * x, -x))

    def tf_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return tape.gradient(y, x).numpy()

    x = tf.constant([0.0, -2.0], tf.float64)
    for sign in (1.0, -1.0):
        v = tf.constant([sign, 0.0], tf.float64)
        got = asd.tf.subgrad(f, x, direction=v)  # linear on each side: TF's gradient there
        np.testing.assert_array_equal(got.numpy(), tf_grad(x + 1e-3 * v))


def test_constants_and_unused_inputs_carry_no_derivative():
    f = lambda x, t: tf.reduce_sum(x * tf.cast(t, x.dtype)) + tf.reduce_sum(  # noqa: E731
        tf.ones_like(x) * tf.cast(tf.size(x), x.dtype))
    g = asd.tf.subgrad(f, tf.ones(3), tf.constant([1, 2, 3]))
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0, 3.0])


# ----- the cache never replays a stale program -----


def test_a_mutated_closure_value_is_retraced():
    scale = 2.0
    f = lambda x: tf.reduce_sum(tf.nn.relu(x) * scale)  # noqa: E731
    x = tf.ones(2)
    np.testing.assert_array_equal(asd.tf.subgrad(f, x).numpy(), [2.0, 2.0])
    assert asd.tf.import_program(f, x) is asd.tf.import_program(f, x)
    scale = 3.0
    np.testing.assert_array_equal(asd.tf.subgrad(f, x).numpy(), [3.0, 3.0])
    weights = [1.0, 1.0]
    g = lambda x: tf.reduce_sum(x * weights)  # noqa: E731
    np.testing.assert_array_equal(asd.tf.subgrad(g, x).numpy(), [1.0, 1.0])
    weights[1] = 5.0                                       # mutated in place
    np.testing.assert_array_equal(asd.tf.subgrad(g, x).numpy(), [1.0, 5.0])


class Scaled:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return tf.reduce_sum(x * self.k)


def test_mutated_attributes_and_replaced_variables_are_retraced_assigned_values_are_read():
    obj = Scaled(2.0)
    x = tf.ones(2)
    np.testing.assert_array_equal(asd.tf.subgrad(obj.__call__, x).numpy(), [2.0, 2.0])
    obj.k = 4.0
    np.testing.assert_array_equal(asd.tf.subgrad(obj.__call__, x).numpy(), [4.0, 4.0])
    obj.k = tf.Variable([1.0, 2.0])
    np.testing.assert_array_equal(asd.tf.subgrad(obj.__call__, x).numpy(), [1.0, 2.0])
    prog = asd.tf.import_program(obj.__call__, x)
    obj.k.assign([5.0, 6.0])                   # same variable: the program stays, values read
    assert asd.tf.import_program(obj.__call__, x) is prog
    np.testing.assert_array_equal(asd.tf.subgrad(obj.__call__, x).numpy(), [5.0, 6.0])
    obj.k = tf.Variable([7.0, 8.0])            # a new variable: a new program
    assert asd.tf.import_program(obj.__call__, x) is not prog
    np.testing.assert_array_equal(asd.tf.subgrad(obj.__call__, x).numpy(), [7.0, 8.0])


def test_a_keras_model_program_is_reused_and_new_shapes_retrace():
    loss = lambda x: tf.reduce_sum(MLP32(x))  # noqa: E731
    a = asd.tf.import_program(loss, tf.zeros((1, 3)))
    assert asd.tf.import_program(loss, tf.ones((1, 3))) is a
    assert asd.tf.import_program(loss, tf.zeros((2, 3))) is not a
    assert asd.tf.import_program(loss, tf.zeros((1, 3), tf.float64)) is not a


# ----- packaging -----


def test_import_asd_does_not_import_tensorflow():
    """``import asd`` (and the command line's framework probe) never loads TensorFlow; it is
    loaded on first use of ``asd.tf``."""
    import subprocess
    import sys

    code = ("import sys, asd, asd.cli.frameworks; print('tensorflow' in sys.modules); "
            "asd.tf; print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_public_front_end_is_the_implementing_module():
    import asd.frontends.tf

    assert asd.tf is asd.frontends.tf
    assert asd.tf.__spec__.name == "asd.frontends.tf"


# ----- argnums, keyword arguments, second derivatives, variables no gradient reaches -----


def test_argnums_index_the_tensors_as_python_does():
    """``-1`` is the last tensor, never the variables' dict ('params' names that); out of
    range is asd's ArgumentError (``argnums=2`` of two tensors used to return the
    variables' gradient)."""
    w = tf.Variable([1.0, -2.0, 0.5])
    f = lambda a, b: tf.reduce_sum(tf.nn.relu(a) * b * w)  # noqa: E731
    a, b = tf.constant([0.5, 1.0, 2.0]), tf.constant([3.0, -1.0, 0.25])
    ga, gb = asd.tf.subgrad(f, a, b, argnums=(0, 1), seed=0)
    np.testing.assert_array_equal(asd.tf.subgrad(f, a, b, argnums=-1, seed=0).numpy(),
                                  gb.numpy())
    np.testing.assert_array_equal(asd.tf.subgrad(f, a, b, argnums=-2, seed=0).numpy(),
                                  ga.numpy())
    got = asd.tf.subgrad(f, a, b, argnums=(-1, "params"), seed=0)
    np.testing.assert_array_equal(got[0].numpy(), gb.numpy())
    assert set(got[1]) == {"w"}
    for bad in (2, -3, (0, 2)):
        with pytest.raises(asd.ArgumentError, match=r"names argument .* got 2 arguments"):
            asd.tf.subgrad(f, a, b, argnums=bad)


def test_function_takes_keyword_arguments():
    model = make_mlp("float32")

    def f(x, *, shift, training=False, scale=1.0):
        return tf.reduce_sum(model(x + shift, training=training) ** 2) * scale

    fn = asd.tf.function(f)
    x = tf.constant(unit(7, (4, 3)), tf.float32)
    shift = tf.constant(unit(8, (3,)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch([x, shift])
        y = fn(x, shift=shift, training=False, scale=3.0)
    got = tape.gradient(y, [x, shift] + model.trainable_variables)
    with tf.GradientTape() as tape:
        tape.watch([x, shift])
        y_ref = f(x, shift=shift, scale=3.0)
    want = tape.gradient(y_ref, [x, shift] + model.trainable_variables)
    np.testing.assert_allclose(float(y), float(y_ref), **F32)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), **F32)
    with pytest.raises(asd.ArgumentTypeError, match="one by one"):
        fn(x, shift={"s": shift})


def critic_variables():
    rng = np.random.default_rng(4)
    return [tf.Variable(rng.standard_normal(shape), dtype=tf.float64)
            for shape in ((2, 8), (8,), (8, 1))]


def critic_of(v):
    return lambda x: tf.reduce_sum(tf.nn.softplus(tf.tanh(x @ v[0] + v[1]) @ v[2]))


def wgan_gp_grads(v, score, penalty_score):
    rng = np.random.default_rng(5)
    real, fake = (tf.constant(rng.standard_normal((6, 2))) for _ in range(2))
    mixed = 0.3 * real + 0.7 * fake
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(mixed)
            s = penalty_score(mixed)
        g = inner.gradient(s, mixed)
        penalty = tf.reduce_mean((tf.norm(g, axis=1) - 1.0) ** 2)
        loss = score(fake) - score(real) + 10.0 * penalty
    return outer.gradient(loss, v)


def test_a_gradient_penalty_through_function_is_refused_not_dropped():
    v = critic_variables()
    fn = asd.tf.function(critic_of(v))
    with pytest.raises(asd.UnsupportedError, match=r"first derivatives only.*model itself"):
        wgan_gp_grads(v, fn, fn)
    # the advice: the penalty through the model itself, the rest through asd
    got = wgan_gp_grads(v, fn, critic_of(v))
    want = wgan_gp_grads(v, critic_of(v), critic_of(v))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **F64)


def test_a_variable_read_only_behind_stop_gradient_keeps_no_gradient():
    """As on the tape: None for a variable read only behind ``tf.stop_gradient`` and for an
    unused input, so that AdamW's weight decay leaves the variable alone."""
    used, frozen = tf.Variable([1.0, -2.0]), tf.Variable([3.0, 4.0])
    f = lambda x, unused: tf.reduce_sum(  # noqa: E731
        tf.nn.relu(x * used) * tf.stop_gradient(frozen))
    x, unused = tf.Variable([0.5, 0.25]), tf.Variable([1.0, 1.0])
    twin_used, twin_frozen = tf.Variable(used), tf.Variable(frozen)
    twin = lambda x, unused: tf.reduce_sum(  # noqa: E731
        tf.nn.relu(x * twin_used) * tf.stop_gradient(twin_frozen))
    fn = asd.tf.function(f)
    opt, opt_twin = (keras.optimizers.AdamW(0.05, weight_decay=0.5) for _ in range(2))
    for _ in range(5):
        with tf.GradientTape() as tape:
            y = fn(x, unused)
        g = tape.gradient(y, [used, frozen, unused])
        assert g[1] is None and g[2] is None
        opt.apply_gradients([(g[0], used)])
        with tf.GradientTape() as tape:
            y = twin(x, unused)
        opt_twin.apply_gradients([(tape.gradient(y, twin_used), twin_used)])
    np.testing.assert_allclose(used.numpy(), twin_used.numpy(), **F32)
    np.testing.assert_array_equal(frozen.numpy(), [3.0, 4.0])
