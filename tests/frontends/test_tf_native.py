"""asd.tf.function's native path: TensorFlow's own gradient where no tie matters.

On Keras models written here (an MLP, a small CNN with max pooling, a residual block), at a
random initialisation (no tie), with a zero first layer (every ReLU of it tied: the call must
take asd's sweep) and with dead pooling windows (all candidates 0 over ReLUs with negative
inputs: no tie that matters, native), the drop-in's gradients for the input and every weight
equal asd's full sweep at every call (``asd.tf.NATIVE_BACKWARD = False``): bit for bit where
the sweep runs, within ``ULPS`` float32 units of the largest entry where TensorFlow's kernels
compute it (another summation order). A training step decorated with ``@tf.function`` that
calls the drop-in traces once, runs at and away from ties, and gives the same numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import asd.tf  # noqa: E402

import asd  # noqa: E402
from asd.frontends.tf import dropin, native  # noqa: E402

ULPS = 64
"""Native against swept gradients: |g - g_sweep| <= ULPS * eps32 * max |g_sweep| (TensorFlow
and asd's numpy sweep sum the same products in different orders)."""


def mlp():
    return keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(16, activation="relu"), keras.layers.Dense(5)])


def cnn():
    return keras.Sequential([
        keras.Input((10, 10, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.MaxPooling2D(2), keras.layers.Conv2D(6, 3, activation="relu"),
        keras.layers.MaxPooling2D(2, padding="same"), keras.layers.Flatten(),
        keras.layers.Dense(5)])


def residual():
    x = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    r = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(h)
    r = keras.layers.Conv2D(4, 3, padding="same")(r)
    h = keras.layers.ReLU()(keras.layers.Add()([h, r]))
    out = keras.layers.Dense(5)(keras.layers.GlobalAveragePooling2D()(h))
    return keras.Model(x, out)


MODELS = {"mlp": (mlp, (6, 12)), "cnn": (cnn, (3, 10, 10, 1)),
          "residual": (residual, (3, 8, 8, 1))}


def planted(model, point: str) -> None:
    """Plant the ties: ``zero`` zeroes the first layer (every ReLU of it at 0), ``dead``
    gives it bias -0.5 (many pooling windows all 0, over ReLUs with negative inputs). The
    other biases are 0.01, not Keras's 0: a later unit reading only dead units would sit at
    exactly 0, a tie that does matter."""
    for layer in model.layers:
        if getattr(layer, "bias", None) is not None:
            layer.bias.assign(tf.fill(layer.bias.shape, 0.01))
    first = model.layers[0] if isinstance(model, keras.Sequential) else model.layers[1]
    kernel, bias = first.kernel, first.bias
    if point == "zero":
        kernel.assign(tf.zeros_like(kernel))
        bias.assign(tf.zeros_like(bias))
    elif point == "dead":
        bias.assign(tf.fill(bias.shape, -0.5))


def setup(name: str, point: str):
    build, shape = MODELS[name]
    keras.utils.set_random_seed(7)
    model = build()
    planted(model, point)
    x = tf.constant(np.random.default_rng(3).standard_normal(shape), tf.float32)
    labels = tf.constant(np.arange(shape[0]) % 5)
    return model, x, labels


def loss_of(forward, labels):
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return lambda x: xent(labels, forward(x))


def grads(forward, model, x, labels):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loss_of(forward, labels)(x)
    return [g.numpy() for g in tape.gradient(y, [x, *model.trainable_variables])]


def swept(f, model, x, labels):
    old = asd.tf.NATIVE_BACKWARD
    asd.tf.NATIVE_BACKWARD = False
    try:
        return grads(f, model, x, labels)
    finally:
        asd.tf.NATIVE_BACKWARD = old


def close(got, want, exact: bool) -> None:
    for g, w in zip(got, want, strict=True):
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            bound = ULPS * np.finfo(np.float32).eps * max(float(np.abs(w).max()), 1e-30)
            assert float(np.abs(g - w).max()) <= bound


@pytest.mark.parametrize("point", ["random", "zero", "dead"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_native_gradients_equal_the_full_sweep(name, point):
    model, x, labels = setup(name, point)
    f = asd.tf.function(model, seed=0)
    before = dict(dropin.PATHS)
    got = grads(f, model, x, labels)
    took_native = dropin.PATHS["native"] > before["native"]
    assert took_native == (point != "zero")        # a zero layer ties; dead windows do not
    want = swept(f, model, x, labels)
    close(got, want, exact=point == "zero")
    if point == "zero":   # TensorFlow's relu'(0) = 0 kills the first layer; asd's does not
        theirs = grads(model, model, x, labels)
        assert np.abs(got[1]).max() > 0 and np.abs(theirs[1]).max() == 0


def test_dead_windows_are_really_planted():
    """The dead-window point has pooling windows whose candidates are all 0 (the exception
    the margin makes), and no pre-activation at 0."""
    model, x, _ = setup("cnn", "dead")
    conv = model.layers[0]
    pre = tf.nn.conv2d(x, conv.kernel, 1, "VALID") + conv.bias
    pooled = tf.nn.max_pool2d(tf.nn.relu(pre), 2, 2, "VALID")
    assert float(tf.reduce_min(tf.abs(pre))) > 0
    assert int(tf.reduce_sum(tf.cast(pooled == 0, tf.int32))) > 10


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_compiled_training_step_traces_once_and_gives_the_same_numbers(name):
    model, x, labels = setup(name, "random")
    f = asd.tf.function(model, seed=0)
    traces = []

    @tf.function
    def step(x, labels):
        traces.append(1)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loss_of(f, labels)(x)
        return tape.gradient(y, [x, *model.trainable_variables])

    eager = grads(f, model, x, labels)
    close([g.numpy() for g in step(x, labels)], eager, exact=False)
    x2 = x + 0.25
    close([g.numpy() for g in step(x2, labels)], grads(f, model, x2, labels), exact=False)
    planted(model, "zero")                  # ties now: the same trace takes asd's branch
    tied = [g.numpy() for g in step(x, labels)]
    close(tied, swept(f, model, x, labels), exact=True)
    assert len(traces) == 1


def test_margins_flag_exactly_the_ties_that_matter():
    """relu at 0, maximum's sides equal, a pooling window's max shared: flagged; a window of
    dead units, and values off every kink: not."""
    def tied(fn, x):
        concrete = tf.function(lambda x: native.instrumented(fn, (x,)),
                               autograph=False).get_concrete_function(
            tf.TensorSpec(x.shape, x.dtype))
        return bool(concrete(x)[1])

    x = tf.constant([[0.5, -1.0], [2.0, 0.0]])
    assert tied(tf.nn.relu, x)
    assert not tied(tf.nn.relu, x + 0.25)
    assert tied(lambda x: tf.maximum(x, 2.0), x)
    assert not tied(lambda x: tf.maximum(x, 1.5), x)
    img = tf.constant([[1.0, 1.0, 0.5, 3.0], [0.0, -2.0, 1.0, 2.0]])[None, :, :, None]
    assert tied(lambda t: tf.nn.max_pool2d(t, 2, 2, "VALID"), img)
    apart = tf.constant([[1.0, 1.5, 0.5, 3.0], [0.0, -2.0, 1.0, 2.0]])[None, :, :, None]
    assert not tied(lambda t: tf.nn.max_pool2d(t, 2, 2, "VALID"), apart)
    dead = tf.constant([[-1.0, -2.0, 0.5, 3.0], [-0.5, -2.0, 1.0, 2.0]])[None, :, :, None]
    assert not tied(lambda t: tf.nn.max_pool2d(tf.nn.relu(t), 2, 2, "VALID"), dead)
    assert tied(lambda x: tf.sqrt(x * x), x)
    assert tied(lambda x: x / 0.0, x + 1.0)        # not finite


def test_programs_without_a_native_form_are_swept_every_call():
    f = asd.tf.function(lambda x: tf.reduce_sum(tf.sort(x) * tf.range(3.0)))
    x = tf.constant([0.3, -1.0, 2.0])
    before = dict(dropin.PATHS)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [1.0, 0.0, 2.0])
    assert dropin.PATHS == before        # no native form: neither counter moves


def test_a_changed_closure_value_retraces_the_native_program():
    """The native trace is cached under the importer's fingerprint, checked by a guard: a
    Python number the trace baked in, changed, retraces (never a stale program)."""
    scale = 2.0
    f = asd.tf.function(lambda x: tf.nn.relu(x) * scale)
    x = tf.constant([1.0, -1.0])

    def grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(f(x))
        return tape.gradient(y, x).numpy()

    np.testing.assert_array_equal(grad(), [2.0, 0.0])
    scale = 3.0
    np.testing.assert_array_equal(grad(), [3.0, 0.0])


def test_random_draws_and_variable_writes_are_still_refused():
    """A layer in training mode has no native form: asd refuses it as before, instead of
    TensorFlow's gradient being used away from ties and a refusal at them. (The host sweep
    runs in ``tf.py_function``, which re-raises asd's error as an ``OpError``.)"""
    f = asd.tf.function(lambda x: tf.reduce_sum(tf.nn.dropout(x, 0.5)))
    x = tf.constant([1.0, 2.0, 3.0])
    with pytest.raises((asd.UnsupportedError, tf.errors.OpError), match="random numbers"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        tape.gradient(y, x)


def test_a_compiled_step_through_reductions_and_pooling_is_not_autograph_converted():
    """Inside a user's ``@tf.function`` (autograph on) the drop-in and its margins are traced
    as plain Python: a max reduction and a max pooling get their margins, and the step runs
    at a tie (asd's branch) and away from it (TensorFlow's)."""
    def fn(x):
        pooled = tf.nn.max_pool2d(x, 2, 2, "VALID")
        return tf.reduce_max(pooled, axis=[1, 2, 3]) + tf.reduce_sum(tf.abs(x))

    f = asd.tf.function(fn, seed=0)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(f(x))
        return tape.gradient(y, x)

    x = tf.constant(np.random.default_rng(1).standard_normal((2, 4, 4, 1)), tf.float32)
    for point in (x, tf.zeros_like(x)):
        with tf.GradientTape() as tape:
            tape.watch(point)
            y = tf.reduce_sum(f(point))
        close([step(point).numpy()], [tape.gradient(y, point).numpy()], exact=False)
