"""asd.jax: jax.numpy programs interpreted from their jaxprs, checked on their kinks.

The same checks as the PyTorch frontend: an MLP and a small CNN at zero pre-activations and
tied pooling windows against the exact limiting gradient of the plain-numpy model along the
same direction (JAX computes in float32, hence the tolerances), JAX's own gradient differing
there, the custom_vjp drop-in, off-kink agreement with jax.grad for each mapped primitive, and
clear errors for primitives without a mapping.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
jnp = jax.numpy

import asd.jax  # noqa: E402

import asd  # noqa: E402
from asd.testing.exact import limiting_gradient  # noqa: E402

F32 = dict(rtol=2e-5, atol=2e-6)


def unit(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def exact(f, x, v) -> np.ndarray:
    return limiting_gradient(f, x, v)[1].astype(float)


def f32(a) -> np.ndarray:
    """Weights rounded to float32 once, so JAX and the exact oracle use the same numbers."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


# ----- the MLP with (a, -a) pairs in its first layer -----

RNG = np.random.default_rng(0)
A = f32(RNG.standard_normal((3, 3)))
W1, B1 = np.concatenate([A, -A]), np.zeros(6)
W2, B2 = f32(RNG.standard_normal((4, 6))), np.array([0.5, -0.5, 1.0, 0.0])
W3, B3 = f32(RNG.standard_normal((1, 4))), np.zeros(1)


def np_mlp(x):
    h = np.maximum(W1 @ x + B1, 0)
    h = np.maximum(W2 @ h + B2, 0)
    return (W3 @ h + B3)[0]


def jax_mlp(x):
    h = jax.nn.relu(jnp.asarray(W1, jnp.float32) @ x + jnp.asarray(B1, jnp.float32))
    h = jax.nn.relu(jnp.asarray(W2, jnp.float32) @ h + jnp.asarray(B2, jnp.float32))
    return (jnp.asarray(W3, jnp.float32) @ h + jnp.asarray(B3, jnp.float32))[0]


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16))
def test_mlp_at_zero_preactivations_matches_exact(seed):
    x, v = np.zeros(3), unit(seed, 3)
    got = asd.jax.subgrad(jax_mlp, direction=v)(jnp.zeros(3))
    assert isinstance(got, jax.Array)
    np.testing.assert_allclose(np.asarray(got), exact(np_mlp, x, v), **F32)


def test_mlp_jax_gradient_differs_at_zero():
    want = exact(np_mlp, np.zeros(3), unit(1, 3))
    theirs = np.asarray(jax.grad(jax_mlp)(jnp.zeros(3)))
    assert np.abs(want).max() > 1e-3
    assert not np.allclose(theirs, want, **F32)


def test_pytree_arguments_and_argnums():
    def loss(params, x):
        w, b = params["w"], params["b"]
        return jnp.sum(jax.nn.relu(w @ x + b))

    params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
    x = jnp.array([1.0, -1.0])                     # w @ x + b == 0: both units tied
    v = {"w": jnp.array([[1.0, 0.0], [0.0, 0.0]]), "b": jnp.array([0.0, -1.0])}
    g = asd.jax.subgrad(loss, direction=v)(params, x)
    np.testing.assert_allclose(np.asarray(g["w"]), [[1.0, -1.0], [0.0, 0.0]])
    np.testing.assert_allclose(np.asarray(g["b"]), [1.0, 0.0])
    gx = asd.jax.subgrad(loss, argnums=1, direction=jnp.array([1.0, 0.0]))(params, x)
    np.testing.assert_allclose(np.asarray(gx), [2.0, 2.0])


# ----- the CNN: conv (NCHW) -> relu -> reduce_window max -> dense -----

WC = f32(np.random.default_rng(1).standard_normal((2, 1, 3, 3)))
WF = f32(np.random.default_rng(2).standard_normal((1, 8)))


def np_cnn(x):
    xp = np.zeros((6, 6), dtype=object)
    xp[...] = 0.0
    xp[1:5, 1:5] = x[0, 0]
    conv = np.empty((2, 4, 4), dtype=object)
    for o in range(2):
        acc = 0.0
        for i in range(3):
            for j in range(3):
                acc = acc + WC[o, 0, i, j] * xp[i:i + 4, j:j + 4]
        conv[o] = acc
    y = np.maximum(conv, 0)
    windows = y.reshape(2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4).reshape(2, 2, 2, 4)
    return (WF @ np.max(windows, axis=-1).reshape(-1))[0]


def jax_cnn(x):
    y = jax.lax.conv_general_dilated(x, jnp.asarray(WC, jnp.float32), (1, 1), ((1, 1), (1, 1)))
    y = jax.nn.relu(y)
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return (jnp.asarray(WF, jnp.float32) @ y.reshape(-1))[0]


def jax_cnn_nhwc(x):
    """The same CNN in flax's layout (NHWC, HWIO), pooling over axes 1 and 2."""
    w = jnp.transpose(jnp.asarray(WC, jnp.float32), (2, 3, 1, 0))
    y = jax.lax.conv_general_dilated(jnp.transpose(x, (0, 2, 3, 1)), w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y)
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return (jnp.asarray(WF, jnp.float32) @ jnp.transpose(y, (0, 3, 1, 2)).reshape(-1))[0]


TIED = {
    "zeros": np.zeros((1, 1, 4, 4)),
    "blocks": np.kron(np.array([[1.0, -1.0], [0.5, 0.0]]), np.ones((2, 2)))[None, None],
}


@pytest.mark.parametrize("model", [jax_cnn, jax_cnn_nhwc], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("point", sorted(TIED))
@pytest.mark.parametrize("seed", [0, 1])
def test_cnn_on_ties_matches_exact(model, point, seed):
    x = TIED[point]
    v = unit(seed, x.shape)
    got = asd.jax.subgrad(model, direction=v)(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), exact(np_cnn, x, v), **F32)


def test_cnn_jax_gradient_differs_at_zero():
    x = TIED["zeros"]
    want = exact(np_cnn, x, unit(0, x.shape))
    assert np.abs(want).max() > 1e-3
    assert not np.allclose(np.asarray(jax.grad(jax_cnn)(jnp.asarray(x, jnp.float32))), want,
                           **F32)


# ----- the custom_vjp drop-in -----


def test_function_gives_ones_for_the_identity_at_zero():
    f = asd.jax.function(lambda x: jax.nn.relu(x) - jax.nn.relu(-x))
    g = jax.grad(lambda x: f(x).sum())(jnp.zeros(4))
    np.testing.assert_array_equal(np.asarray(g), np.ones(4))
    plain = jax.grad(lambda x: (jax.nn.relu(x) - jax.nn.relu(-x)).sum())(jnp.zeros(4))
    np.testing.assert_array_equal(np.asarray(plain), np.zeros(4))


def test_function_works_under_jit_and_weights_the_cotangent():
    f = asd.jax.function(lambda x: jax.nn.relu(x) - jax.nn.relu(-x))
    w = jnp.array([2.0, -1.0, 0.5])
    g = jax.jit(jax.grad(lambda x: (f(x) * w).sum()))(jnp.zeros(3))
    np.testing.assert_allclose(np.asarray(g), np.asarray(w))


def test_function_of_several_arguments():
    f = asd.jax.function(lambda x, y: jnp.maximum(x, y) + jnp.minimum(x, y))
    gx, gy = jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(jnp.zeros(2), jnp.zeros(2))
    np.testing.assert_allclose(np.asarray(gx), np.ones(2))
    np.testing.assert_allclose(np.asarray(gy), np.ones(2))


def test_function_with_pytree_arguments_and_tuple_outputs():
    f = asd.jax.function(lambda p, x: (jax.nn.relu(p["w"] * x) - jax.nn.relu(-p["w"] * x),
                                       p["b"] * x))

    def loss(p, x):
        a, b = f(p, x)
        return a.sum() + 2 * b.sum()

    p, x = {"w": jnp.zeros(2), "b": jnp.ones(2)}, jnp.array([1.0, 2.0])
    g = jax.grad(loss)(p, x)
    np.testing.assert_allclose(np.asarray(g["w"]), [1.0, 2.0])   # d(w x)/dw = x at w = 0
    np.testing.assert_allclose(np.asarray(g["b"]), [2.0, 4.0])
    gx = jax.jit(jax.grad(loss, argnums=1))(p, x)
    np.testing.assert_allclose(np.asarray(gx), [2.0, 2.0])


# ----- every mapped primitive agrees with jax.grad off the kinks -----

X = jnp.array([[0.31, -1.7, 0.52, 2.3], [-0.8, 0.13, 1.9, -0.45]])

SMOOTH_POINT_OPS = {
    "relu/abs/max/min": lambda x: (jax.nn.relu(x) + jnp.abs(x) + jnp.maximum(x, 0.2)
                                   + jnp.minimum(x, -x)).sum(),
    "leaky_relu/elu": lambda x: (jax.nn.leaky_relu(x, 0.1) + jax.nn.elu(x)).sum(),
    "clip/relu6/hard_tanh": lambda x: (jnp.clip(x, -1, 1) + jax.nn.relu6(3 * x)
                                       + jax.nn.hard_tanh(x)).sum(),
    "where/select_n": lambda x: jnp.where(x > 0, x, 3 * x).sum(),
    "reduce_max/min": lambda x: jnp.max(x) + jnp.min(x, axis=1).sum() + x.max(axis=0).sum(),
    "sort/top_k": lambda x: (jnp.sort(x, axis=1) * jnp.arange(4.0)).sum()
    + jax.lax.top_k(x, 2)[0].sum(),
    "median": lambda x: jnp.median(x[0]) + jnp.median(x[1, :3]),
    "norm": lambda x: jnp.linalg.norm(x) + jnp.linalg.norm(x, axis=1).sum(),
    "dot_general": lambda x: (x @ x.T).sum() + jnp.einsum("ij,ij->", x, x)
    + jnp.dot(x[0], x[1]),
    "integer_pow/div": lambda x: (x ** 3 / (1 + x ** 2)).sum(),
    "exp/log/tanh/logistic": lambda x: (jnp.exp(x) + jnp.log(1 + x * x) + jnp.tanh(x)
                                        + jax.nn.sigmoid(x)).sum(),
    "softmax/log_softmax": lambda x: (jax.nn.softmax(x) * jnp.arange(4.0)).sum()
    + jax.nn.log_softmax(x, axis=0)[1].sum(),
    "logsumexp": lambda x: jax.scipy.special.logsumexp(x),
    "structure": lambda x: (jnp.concatenate([x, x[::-1]], 1).reshape(4, 4).T[1:, ::2]
                            * jnp.arange(6.0).reshape(3, 2)).sum() + x[1, 2]
    + x[jnp.array([0, 1, 1]), jnp.array([3, 0, 2])].sum(),
    "pad/expand_dims": lambda x: (jnp.pad(x, 1) * 2).sum() + jnp.expand_dims(x, 0).sum(),
    "mean/var": lambda x: jnp.mean(x) + jnp.var(x),
    "avg pool": lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2), (1, 2),
                                                "VALID").sum() * 0.5,
}


@pytest.mark.parametrize("name", sorted(SMOOTH_POINT_OPS))
def test_mapped_primitives_agree_with_jax_off_kinks(name):
    f = SMOOTH_POINT_OPS[name]
    got = asd.jax.subgrad(f, seed=0)(X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.grad(f)(X)), rtol=1e-5,
                               atol=1e-6)


# ----- piecewise primitives on their kinks against the exact oracle -----

KINKS = [
    ("relu", lambda x: jax.nn.relu(x).sum(), lambda x: np.maximum(x, 0.0).sum(), np.zeros(4)),
    ("leaky_relu", lambda x: jax.nn.leaky_relu(x, 0.5).sum(),
     lambda x: np.where(x >= 0, x, 0.5 * x).sum(), np.zeros(4)),
    ("clip", lambda x: jnp.clip(x, -1.0, 1.0).sum(), lambda x: np.clip(x, -1.0, 1.0).sum(),
     np.array([1.0, -1.0, 1.0, -1.0])),
    ("max pair", lambda x: jnp.maximum(x[:2], x[2:]).sum(),
     lambda x: np.maximum(x[:2], x[2:]).sum(), np.array([1.0, 0.0, 1.0, 0.0])),
    ("reduce_max", lambda x: jnp.max(x), lambda x: np.max(x), np.array([2.0, 2.0, 1.0, 2.0])),
    ("sort", lambda x: jnp.sort(x) @ jnp.arange(1.0, 5.0),
     lambda x: np.sort(x) @ np.arange(1.0, 5.0), np.array([1.0, 1.0, 1.0, 0.0])),
    ("top_k", lambda x: jax.lax.top_k(x, 2)[0].sum(), lambda x: np.sort(x)[2:].sum(),
     np.array([3.0, 3.0, 3.0, 0.0])),
    ("abs", lambda x: (jnp.abs(x) - jax.nn.relu(x)).sum(),
     lambda x: (np.abs(x) - np.maximum(x, 0.0)).sum(), np.zeros(4)),
]


@pytest.mark.parametrize("name, fn, ref, x", KINKS, ids=[k[0] for k in KINKS])
@pytest.mark.parametrize("seed", [0, 1])
def test_piecewise_primitives_on_kinks_match_exact(name, fn, ref, x, seed):
    v = unit(seed + 10, x.shape)
    got = asd.jax.subgrad(fn, direction=v)(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), exact(ref, x, v), **F32)


def test_norm_at_zero_is_imported_as_a_norm():
    v = np.array([3.0, -4.0])
    got = asd.jax.subgrad(lambda x: jnp.linalg.norm(x), direction=v)(jnp.zeros(2))
    np.testing.assert_allclose(np.asarray(got), v / 5.0, **F32)


# ----- errors -----


def test_unknown_primitive_names_the_primitive_and_the_equation():
    def f(x):
        return jnp.sum(jax.lax.igamma(2.0, x))

    with pytest.raises(asd.UnsupportedError, match=r"igamma.*equation"):
        asd.jax.subgrad(f)(jnp.ones(3))


def test_nested_primitive_error_names_the_call_path():
    @jax.jit
    def inner(x):
        return jax.lax.igamma(2.0, x)

    with pytest.raises(asd.UnsupportedError, match=r"igamma.*jit\[inner\]"):
        asd.jax.subgrad(lambda x: inner(x).sum())(jnp.ones(2))


def test_program_prints():
    text = str(asd.jax.program(jax_cnn, jnp.zeros((1, 1, 4, 4))))
    assert "conv" in text and "max_pool" in text and "relu" in text


@pytest.mark.parametrize("f", [lambda x: x[jnp.argsort(x)[-1]]], ids=["x[argsort[-1]]"])
def test_indexing_by_computed_positions_is_refused_not_guessed(f):
    with pytest.raises(asd.NotLipschitzError, match="dynamic_slice"):
        asd.jax.subgrad(f, seed=0)(np.array([1.0, 3.0, 3.0, 0.5]))


def test_indexing_by_argmax_is_decided_along_the_ray_as_numpy_does():
    """``x[jnp.argmax(x)]`` at a tie whose positions read the same value (it is ``max``):
    the position is decided along the ray, as numpy's ``x[np.argmax(x)]`` is (F38)."""
    x = np.array([1.0, 3.0, 3.0, 0.5])
    got = asd.jax.subgrad(lambda x: x[jnp.argmax(x)], seed=0)(x)
    np.testing.assert_array_equal(np.asarray(got),
                                  asd.subgrad(lambda x: x[np.argmax(x)], seed=0)(x))
    np.testing.assert_array_equal(np.asarray(got), asd.subgrad(np.max, seed=0)(x))


POSITION_GATHERS = {
    "take_along_axis(x, argsort(x), 1)":
        lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
    "x[argsort(x)] per row": lambda x: jnp.stack([r[jnp.argsort(r)] for r in x]),
    "take(row, argsort(row))": lambda x: jnp.stack([jnp.take(r, jnp.argsort(r)) for r in x]),
    "x[argsort(x)[-2:]] per row": lambda x: jnp.stack([r[jnp.argsort(r)[-2:]] for r in x]),
    "x[top_k(x, 2) indices] per row, ascending":
        lambda x: jnp.stack([r[jax.lax.top_k(r, 2)[1][::-1]] for r in x]),
    "take_along_axis(x, argmax(x, 1, keepdims=True), 1)":
        lambda x: jnp.take_along_axis(x, jnp.argmax(x, axis=1, keepdims=True), axis=1),
}


@pytest.mark.parametrize("name", list(POSITION_GATHERS))
def test_gathers_at_argsort_and_argmax_positions_are_decided_along_the_ray(name):
    """F58: a gather reading each row at its own argsort/argmax positions (a sort or a max)
    was refused as positions computed from the input. The positions are decided along the
    ray: at ties the gradient is the weights put back through the order of x + t v for
    small t > 0 (an independent oracle: numpy's argsort of a point past the ties)."""
    fn = POSITION_GATHERS[name]
    x = np.array([[1.0, 2.0, 1.0, 2.0], [0.0, 0.0, 0.0, -3.0]])
    v = np.array([[0.5, -1.0, 2.0, 0.25], [1.0, -2.0, 0.5, 0.0]])
    n_out = np.shape(fn(jnp.asarray(x)))[1]
    w = np.arange(1.0, n_out + 1.0)
    order = np.argsort(x + 1e-6 * v, axis=1, kind="stable")[:, -n_out:]  # past the ties
    want = np.zeros_like(x)
    np.put_along_axis(want, order, np.broadcast_to(w, order.shape), axis=1)
    loss = lambda x: (fn(x) * w).sum()  # noqa: E731
    got = asd.jax.subgrad(loss, direction=jnp.asarray(v))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(got), want)
    # the drop-in under jit decides the same ties as the eager sweep along the seed's ray
    np.testing.assert_array_equal(
        np.asarray(jax.jit(jax.grad(asd.jax.function(loss, seed=3)))(jnp.asarray(x))),
        np.asarray(asd.jax.subgrad(loss, seed=3)(jnp.asarray(x))))


@pytest.mark.parametrize("shape, axis", [((1, 1), 1), ((1, 3), 1), ((3, 1), 0),
                                         ((2, 1, 3), 2), ((1, 2, 1), 1), ((3,), 0)])
def test_take_along_axis_with_unit_axes(shape, axis):
    """jnp.take_along_axis takes an operand's axes of one entry as slices, not batches, and
    leaves them out of the indices (JAX campaign seed 2981): the same gather, read the same
    way. Oracle: the weights put back through the order of x + t v past the ties."""
    rng = np.random.default_rng(sum(shape) + axis)
    x = np.round(rng.standard_normal(shape))      # integers: ties where the axis allows
    v, w = rng.standard_normal(shape), rng.standard_normal(shape).astype(np.float32)
    loss = lambda x: (jnp.take_along_axis(x, jnp.argsort(x, axis=axis), axis=axis)  # noqa: E731
                      * w).sum()
    want = np.zeros(shape, np.float32)
    np.put_along_axis(want, np.argsort(x + 1e-6 * v, axis=axis, kind="stable"), w, axis=axis)
    got = asd.jax.subgrad(loss, direction=jnp.asarray(v))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=0)


def test_a_gather_whose_tied_positions_read_different_values_is_refused():
    """take_along_axis(x + c, argsort(x)) at a tie of x where c differs: the result jumps."""
    f = lambda x: jnp.take_along_axis(x + jnp.array([0.0, 1.0]), jnp.argsort(x),  # noqa: E731
                                      axis=0).sum() ** 2
    with pytest.raises(asd.NotLipschitzError, match="gather at argsort positions"):
        asd.jax.subgrad(f, direction=jnp.array([1.0, -1.0]))(jnp.zeros(2))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_condition_broadcast_by_where_stays_boolean(sign):
    """F59: ``jnp.where`` broadcasts a (1, n) condition to the branches' shape inside its
    jit; the broadcast added float zeros, the condition became float32 and numpy's where
    refused it. At a tie the branch is the one the direction enters: JAX's own gradient a
    little way along it (the program is linear on each side)."""
    a = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    f = lambda x: jnp.where(x[None, :] > 0, a * x, -x).sum()  # noqa: E731
    x, v = jnp.array([0.0, -2.0]), jnp.array([sign, 0.0])
    want = np.asarray(jax.grad(f)(x + 1e-3 * v))
    np.testing.assert_array_equal(np.asarray(asd.jax.subgrad(f, direction=v)(x)), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(asd.jax.function(f)))(x - v)),
                                  np.asarray(jax.grad(f)(x - v)))


# ----- argnums, linear algebra, stack, the drop-in's arguments and second derivatives -----


def test_argnums_index_the_arguments_as_python_does():
    f = lambda a, b: (jax.nn.relu(a) * b).sum()  # noqa: E731
    a, b = jnp.array([0.5, -1.0, 2.0]), jnp.array([3.0, -1.0, 0.25])
    ga, gb = asd.jax.subgrad(f, argnums=(0, 1), seed=0)(a, b)
    np.testing.assert_allclose(np.asarray(asd.jax.subgrad(f, argnums=-1, seed=0)(a, b)),
                               np.asarray(gb))
    np.testing.assert_allclose(np.asarray(asd.jax.subgrad(f, argnums=-2, seed=0)(a, b)),
                               np.asarray(ga))
    for bad in (2, 3, -3, (0, 2)):
        with pytest.raises(asd.ArgumentError, match=r"names argument .* got 2 arguments"):
            asd.jax.subgrad(f, argnums=bad)(a, b)
    with pytest.raises(asd.ArgumentError, match="twice"):
        asd.jax.subgrad(f, argnums=(1, -1))(a, b)


M = np.array([[2.0, 1.0, 0.0], [0.5, 3.0, 1.0], [0.0, 1.0, 4.0], [1.0, -1.0, 0.5]])
WEIGHT = np.random.default_rng(3).standard_normal((4, 4))


def one_sided(f, x, v, t=1e-4):
    """The one-sided quotient of ``f`` in float64 (x64 on), for the kink checks."""
    with jax.enable_x64(True):
        x, v = jnp.asarray(x, jnp.float64), jnp.asarray(v, jnp.float64)
        return float((f(x + t * v) - f(x)) / t)


@pytest.mark.parametrize("name, f, x", [
    ("svd values", lambda m: (jnp.linalg.svd(m, compute_uv=False) ** 3).sum(), M),
    ("svd vectors", lambda m: sum((p * (jnp.asarray(WEIGHT)[:p.shape[0], :p.shape[1]]
                                        if p.ndim == 2 else 1.0)).sum()
                                  for p in jnp.linalg.svd(m, full_matrices=False)), M),
    ("eigvalsh", lambda m: (jnp.linalg.eigvalsh(m[:3] + m[:3].T) ** 3).sum(), M),
    ("eigh vectors", lambda m: (jnp.linalg.eigh(m[:3] + m[:3].T)[1]
                                * jnp.asarray(WEIGHT[:3, :3])).sum(), M),
    ("stack", lambda m: (jnp.stack([m[0], m[1] * 2.0], axis=1) ** 2).sum(), M),
])
def test_linear_algebra_and_stack_match_jax_at_a_generic_point(name, f, x):
    with jax.enable_x64(True):
        x = jnp.asarray(x, jnp.float64)
        got = asd.jax.subgrad(f, seed=0)(x)
        np.testing.assert_allclose(np.asarray(got), np.asarray(jax.grad(f)(x)), rtol=1e-9,
                                   atol=1e-11)


def test_singular_and_eigen_vectors_have_jaxs_signs():
    with jax.enable_x64(True):
        for f in (lambda m: jnp.linalg.svd(m, full_matrices=False),
                  lambda m: jnp.linalg.eigh(m[:3] + m[:3].T)):
            x = jnp.asarray(M, jnp.float64)
            got = asd.jax.function(f)(x)
            for a, b in zip(got, f(x), strict=True):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10,
                                           atol=1e-12)


@pytest.mark.parametrize("name, f", [
    ("top singular value", lambda m: jnp.linalg.svd(m, compute_uv=False)[0]),
    ("top eigenvalue", lambda m: jnp.linalg.eigvalsh(m[:3] + m[:3].T)[-1]),
    ("stacked max", lambda m: jnp.stack([m[0], m[1]]).max(axis=0).sum()),
])
def test_linear_algebra_and_stack_at_ties_give_one_sided_derivatives(name, f):
    x = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    with jax.enable_x64(True):
        for seed in range(4):
            v = unit(seed + 20, x.shape)
            g = asd.jax.subgrad(f, direction=v)(jnp.asarray(x, jnp.float64))
            assert float((np.asarray(g) * v).sum()) == pytest.approx(one_sided(f, x, v),
                                                                      rel=1e-3, abs=1e-3)


def test_the_drop_in_takes_keyword_arguments():
    def f(x, *, w, scale=1.0, square=False):
        y = jax.nn.relu(x * w) * scale
        return (y ** 2 if square else y).sum()

    x, w = jnp.array([0.5, -1.0, 2.0]), jnp.array([1.0, 2.0, -0.5])
    fn = asd.jax.function(f)
    for square in (False, True):
        got = jax.grad(lambda x, w, sq=square: fn(x, w=w, scale=3.0, square=sq),
                       argnums=(0, 1))(x, w)
        want = jax.grad(lambda x, w, sq=square: f(x, w=w, scale=3.0, square=sq),
                        argnums=(0, 1))(x, w)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_differentiating_the_drop_ins_gradient_again_is_refused():
    w = jnp.array([1.0, 2.0])
    fn = asd.jax.function(lambda x, w: jnp.tanh(x * w).sum())

    def penalty(w, x):
        return (jax.grad(fn)(x, w) ** 2).sum()

    with pytest.raises(asd.UnsupportedError, match="first derivatives only"):
        jax.grad(penalty)(w, jnp.array([1.0, 2.0]))


@pytest.mark.parametrize("ct", [0.0, 1.0])
def test_the_drop_ins_pullback_refuses_a_jump_whatever_the_cotangent(ct):
    """F57: a zero cotangent taken as a constant made <ct, f> constant, so the pullback of a
    program that jumps at the point returned 0 to the caller's chain rule (whose own zero,
    a relu at its kink, may sit on a composite that still jumps). Eagerly it raises; under
    jit the gradient is NaN, as for any cotangent."""
    fn = asd.jax.function(lambda x: jnp.floor(x) + jnp.abs(x))
    x = jnp.array([0.0, 0.5])
    _, pullback = jax.vjp(fn, x)
    with pytest.raises(asd.NotLipschitzError, match="floor jumps here"):
        pullback(jnp.full(2, ct))

    def jitted(x, c):
        return jax.vjp(fn, x)[1](c)[0]

    assert np.isnan(np.asarray(jax.jit(jitted)(x, jnp.full(2, ct)))).any()
    # off the jump a zero cotangent pulls back to zero, as any linear map does
    np.testing.assert_array_equal(np.asarray(jax.vjp(fn, x + 0.25)[1](jnp.zeros(2))[0]),
                                  [0.0, 0.0])


# ----- gathers at traced but constant indices (integer labels under jit) -----


def gather_loss(x, idx):
    """Reads relu(x) at integer positions (repeats included) and, in fill mode, out of
    bounds: the gradient scatter-adds onto the entries read."""
    r = jax.nn.relu(x)
    picked = r[idx] * jnp.arange(1.0, idx.shape[0] + 1.0)
    filled = jnp.take(r, idx + 3, mode="fill", fill_value=0.0)
    return picked.sum() + (filled ** 2).sum()


def gather_exact(z, idx):
    """`gather_loss` on exact jets (the fill reads 0)."""
    r = np.array([max(e, 0) for e in z], dtype=object)
    shifted = idx + 3
    filled = np.array([r[i] if i < len(r) else 0 for i in shifted], dtype=object)
    return (r[idx] * np.arange(1, len(idx) + 1)).sum() + (filled * filled).sum()


def test_gather_at_traced_integer_indices_matches_the_eager_sweep_under_jit_and_vmap():
    x = jnp.array([0.0, 1.5, -2.0, 0.0, 0.5])     # relu tied at entries 0 and 3
    idx = jnp.array([0, 3, 3, 1, 4])               # idx + 3 reads out of bounds from 2 on
    v = jnp.array([1.0, -1.0, 0.5, 2.0, -0.5])
    eager = asd.jax.subgrad(gather_loss, direction=v)(x, idx)
    value, g, undecided = jax.jit(asd.jax.value_and_subgrad(
        gather_loss, direction=v, report=True))(x, idx)
    np.testing.assert_array_equal(g, eager)
    assert int(undecided) == 0 and float(value) == float(gather_loss(x, idx))
    np.testing.assert_array_equal(eager, exact(lambda z: gather_exact(z, np.asarray(idx)),
                                               np.asarray(x, float), np.asarray(v, float)))
    batch = jnp.stack([idx, idx[::-1]])
    got = jax.jit(jax.vmap(asd.jax.subgrad(gather_loss, direction=v), (None, 0)))(x, batch)
    np.testing.assert_array_equal(got[0], eager)
    np.testing.assert_array_equal(got[1], asd.jax.subgrad(gather_loss, direction=v)(
        x, idx[::-1]))
