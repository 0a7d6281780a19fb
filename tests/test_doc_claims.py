"""What README.md and docs/*.md say works, and what they say is refused, as behaviour.

Each row of `CLAIMS` is a claim the docs make, a tiny program, and the outcome the claim
promises: the value (checked against an exact oracle: the one-sided limit along a direction
worked out in closed form, or the framework's own gradient at a point off every kink, where
it is the gradient) or the error class asd raises. The rows test behaviour, not prose: when
asd learns to import something the docs call refused, or stops importing something they call
supported, a row fails here and the doc (and the row) must change with it.

Sources: README.md ("What the library covers", "Errors are part of the API", "Positions as
indices"), docs/frameworks.md ("What is mapped", "Limitations", "TensorFlow limitations",
the JAX control-flow paragraph), docs/projections.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import asd
from asd.errors import (
    ArgumentError,
    ArgumentTypeError,
    DeadTraceError,
    IndexingError,
    NonFiniteError,
    NotLipschitzError,
    OutputError,
    TracerBoolError,
    UnsupportedError,
)


@dataclass(frozen=True)
class Claim:
    """A doc's claim: ``run()`` either returns what ``check`` accepts, or raises ``error``."""

    text: str
    run: Callable[[], object]
    error: type[BaseException] | None = None
    check: Callable[[object], bool] | None = None
    needs: str | None = None
    message: str = ""                 # a phrase the error must contain


def works(expected, tol: float = 1e-6) -> Callable[[object], bool]:
    """The value equals ``expected`` (numbers, tensors, tuples of them)."""
    def check(value) -> bool:
        got = _numpy(value)
        want = np.asarray(expected, dtype=float)
        return got.shape == want.shape and bool(np.allclose(got, want, rtol=tol, atol=tol))
    return check


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if isinstance(value, tuple | list):
        return np.stack([_numpy(v) for v in value])
    return np.asarray(value, dtype=float)


def same_as(reference: Callable[[], object], tol: float = 1e-5) -> Callable[[object], bool]:
    """The value equals the framework's own gradient, computed lazily (off every kink)."""
    def check(value) -> bool:
        return works(_numpy(reference()), tol)(value)
    return check


# ----- numpy programs (README) -----

RNG = np.random.default_rng(7)
D3 = np.array([0.6, -0.8, 0.3])


def sub(f, *args, **kw):
    return lambda: asd.subgrad(f, **kw)(*args)


def _std_limit(d):
    """std at a constant vector, along d: the limiting gradient (d - mean d) / (n std(d))."""
    c = d - d.mean()
    return c / (len(d) * np.sqrt((c ** 2).mean()))


def _dead_trace():
    kept = []

    def f(x):
        kept.append(x)
        return x * 2.0

    asd.subgrad(f)(1.0)
    return kept[0] + 1.0


def _python_if(x):
    if x > 0:
        return x
    return -x


NUMPY = [
    Claim("relu(x) - relu(-x) is the identity: asd returns 1",
          sub(lambda x: asd.relu(x) - asd.relu(-x), 0.0), check=works(1.0)),
    Claim("10 x - 9 (relu(x) - relu(-x)): asd returns 1",
          sub(lambda x: 10 * x - 9 * (asd.relu(x) - asd.relu(-x)), 0.0), check=works(1.0)),
    Claim("np.std is exact at zero variance",
          sub(np.std, np.ones(3), direction=D3), check=works(_std_limit(D3))),
    Claim("np.corrcoef is refused where a variance is 0",
          sub(lambda x: np.corrcoef(x[:3], x[3:])[0, 1], np.array([1.0, 1, 1, 0, 1, 2])),
          NotLipschitzError),
    Claim("np.arctan2 is refused at the origin",
          sub(lambda x: np.arctan2(x[0], x[1]), np.zeros(2)), NotLipschitzError),
    Claim("np.hypot at (0, 0) is the norm's gradient along the direction",
          sub(lambda x: np.hypot(x[0], x[1]), np.zeros(2), direction=np.array([3.0, -4.0])),
          check=works([0.6, -0.8])),
    Claim("asd.piecewise_polynomial: a discontinuous table is refused",
          sub(lambda x: asd.piecewise_polynomial([0.0], [[0.0], [1.0]])(x), 0.5),
          NotLipschitzError),
    Claim("np.sign at its jump reaching the output is refused",
          sub(np.sign, 0.0), NotLipschitzError),
    Claim("comparisons used as numbers ((x > 0) + 0.0) are refused at the jump",
          sub(lambda x: (x > 0) + 0.0, 0.0), NotLipschitzError),
    Claim("x * np.sign(x) stays continuous at 0: it is |x|",
          sub(lambda x: x * np.sign(x), 0.0, direction=-1.0), check=works(-1.0)),
    Claim("floor is locally constant away from its jumps",
          sub(lambda x: np.floor(x) * x, 1.5), check=works(1.0)),
    Claim("plain np.array on traced values drops the trace, and says so",
          sub(lambda x: np.array([x, x ** 2]).sum(), 1.0), TracerBoolError,
          message="asd.numpy.array"),
    Claim("np.mean([x, y]) names the spelling that works",
          sub(lambda x: np.mean([x[0], x[1]]), np.ones(2)), TracerBoolError,
          message="asd.numpy.array"),
    Claim("np.mean(asd.numpy.array([x, y])) works",
          sub(lambda x: np.mean(asd.numpy.array([x[0], x[1]])), np.ones(2)),
          check=works([0.5, 0.5])),
    Claim("a singular matrix raises NotLipschitzError (inv)",
          sub(lambda x: np.linalg.inv(x.reshape(2, 2)).sum(), np.ones(4)), NotLipschitzError),
    Claim("eigenvectors of a repeated eigenvalue raise NotLipschitzError",
          sub(lambda x: np.linalg.eigh(x.reshape(2, 2))[1][0, 0], np.eye(2).ravel()),
          NotLipschitzError),
    Claim("eigvalsh is exact at a repeated eigenvalue (the top one along D: its eigvector)",
          sub(lambda x: np.linalg.eigvalsh(x.reshape(2, 2))[1], np.eye(2).ravel(),
              direction=np.array([1.0, 0.0, 0.0, -1.0])),
          check=works([1.0, 0.0, 0.0, 0.0])),
    Claim("x[argmax(x)] at a tie is allowed: every tied position gathers the same value",
          sub(lambda x: x[np.argmax(x)], np.array([1.0, 1.0, 0.0]),
              direction=np.array([0.0, 1.0, 0.0])),
          check=works([0.0, 1.0, 0.0])),
    Claim("y[argmax(x)] with y differing at the tie raises NotLipschitzError",
          sub(lambda x: (x * np.array([1.0, 2.0, 3.0]))[np.argmax(x)],
              np.array([1.0, 1.0, 0.0])), NotLipschitzError),
    Claim("argmax used as a number is constant away from a tie (slope 0)",
          sub(lambda x: np.argmax(x) * 1.0 + x.sum(), np.array([1.0, 2.0])),
          check=lambda g: np.array_equal(g, [1.0, 1.0])),
    Claim("argmax used as a number raises at a tie (it jumps there)",
          sub(lambda x: np.argmax(x) * 1.0 + x.sum(), np.array([2.0, 2.0])),
          NotLipschitzError),
    Claim("TracerBoolError for a Python if on a traced value", sub(_python_if, 1.0),
          TracerBoolError),
    Claim("sqrt at 0 raises NotLipschitzError", sub(np.sqrt, 0.0), NotLipschitzError),
    Claim("NonFiniteError for an infinite value", sub(np.log, 0.0), NonFiniteError),
    Claim("ArgumentError for duplicated argnums",
          lambda: asd.subgrad(lambda x, y: x * y, argnums=(0, 0))(1.0, 2.0), ArgumentError),
    Claim("ArgumentError for a zero direction",
          lambda: asd.subgrad(asd.abs, direction=0.0)(0.0), ArgumentError),
    Claim("ArgumentTypeError for a complex argument", sub(lambda x: x, 1j), ArgumentTypeError),
    Claim("OutputError for a function returning a string", sub(lambda x: "a", 1.0),
          OutputError),
    Claim("IndexingError for an index out of range", sub(lambda x: x[5], np.ones(2)),
          IndexingError),
    Claim("DeadTraceError for a traced value used after its call returned", _dead_trace,
          DeadTraceError),
    Claim("UnsupportedError for a numpy function without a rule, with how to register one",
          sub(lambda x: np.unwrap(x).sum(), np.ones(3)), UnsupportedError,
          message="defrule"),
    Claim("scipy.special gammaln refuses its poles by name",
          sub(lambda x: __import__("scipy.special").special.gammaln(x), 0.0), NonFiniteError,
          message="gammaln"),
    Claim("projections: a traced set parameter raises UnsupportedError",
          sub(lambda x: asd.projections.l2_ball(x[:2], x[2]).sum(), np.ones(3)),
          UnsupportedError),
]


# ----- PyTorch (docs/frameworks.md) -----


def _torch_grad(fn, x):
    import torch

    t = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(t), t)
    return g


def _torch(kind: str):
    """``(fn, x)``: one small program and its point, built when its row runs."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x4 = torch.randn(1, 2, 5, 5, dtype=torch.float64, generator=g)
    z = torch.randn(4, 3, dtype=torch.float64, generator=g)
    t = torch.tensor([0, 1, 2, 1])
    if kind == "conv_transpose":
        with torch.random.fork_rng():           # the same layer for asd and the reference
            torch.manual_seed(0)
            layer = torch.nn.ConvTranspose2d(2, 3, 3, stride=2).double()
        return (lambda x: (layer(x) ** 2).sum()), x4
    if kind == "ceil_max":
        return (lambda x: F.max_pool2d(x, 2, ceil_mode=True).sum()), x4
    tied4, tiedz = x4.clone(), z.clone()   # a relu on its kink: asd's sweep must run
    tied4[0, 0, 0, 0], tiedz[0, 0] = 0.0, 0.0
    if kind == "ceil_avg_free":
        return (lambda x: F.avg_pool2d(x, 2, ceil_mode=True).sum()), x4
    if kind == "weights_free":
        w = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
        return (lambda z: F.cross_entropy(z, t, weight=w)), z
    if kind == "ceil_avg":
        return (lambda x: F.avg_pool2d(torch.relu(x), 2, ceil_mode=True).sum()), tied4
    if kind == "smoothing":
        return (lambda z: F.cross_entropy(z, t, label_smoothing=0.1)), z
    if kind == "weights":
        w = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
        return (lambda z: F.cross_entropy(torch.relu(z), t, weight=w)), tiedz
    if kind == "ignore":
        return (lambda z: F.cross_entropy(torch.relu(z), torch.tensor([0, -100, 2, 1]))), tiedz
    if kind == "train_bn":
        bn = torch.nn.BatchNorm2d(2).double().train()
        return (lambda x: bn(x).sum()), x4
    if kind == "train_dropout":
        drop = torch.nn.Dropout(0.5).train()
        return (lambda x: drop(x).sum()), x4
    if kind == "lgamma":
        return (lambda x: torch.lgamma(x).sum()), x4.abs() + 1
    if kind == "identity":
        return (lambda x: (torch.relu(x) - torch.relu(-x)).sum()), torch.zeros(3)
    if kind == "if":
        def branchy(x):
            if x.sum() > 0:
                return x.sum()
            return -x.sum()
        return branchy, z
    if kind == "none":
        def nothing(x):
            x.sum()
        return nothing, z
    if kind == "int_argnums":
        return (lambda z, t: (z[:, 0] * t).sum()), z
    raise KeyError(kind)


def torch_sub(kind: str):
    def run():
        import asd.torch
        import torch

        fn, x = _torch(kind)
        if kind == "int_argnums":       # the labels, an integer tensor, as the argument
            return asd.torch.subgrad(fn, x, torch.tensor([0, 1, 2, 1]), argnums=1)
        return asd.torch.subgrad(fn, x, seed=0)
    return run


def torch_ref(kind: str):
    def ref():
        fn, x = _torch(kind)
        return _torch_grad(fn, x)
    return ref


def _torch_claim(text, kind, error=None, message=""):
    check = None if error else (works([1.0, 1.0, 1.0]) if kind == "identity"
                                else same_as(torch_ref(kind), 1e-9))
    return Claim(text, torch_sub(kind), error, check, "torch", message)


TORCH = [
    _torch_claim("PyTorch: relu(x) - relu(-x) imports and gives 1", "identity"),
    _torch_claim("PyTorch: transposed convolutions import", "conv_transpose"),
    _torch_claim("PyTorch: ceil-mode max pooling imports", "ceil_max"),
    _torch_claim("PyTorch: label-smoothed cross-entropy imports", "smoothing"),
    _torch_claim("PyTorch: ceil-mode average pooling is refused where a tie matters",
                 "ceil_avg", UnsupportedError),
    _torch_claim("PyTorch: class-weighted cross-entropy is refused where a tie matters",
                 "weights", UnsupportedError),
    _torch_claim("PyTorch: ignore_index targets are refused where a tie matters", "ignore",
                 UnsupportedError),
    _torch_claim("PyTorch: ceil-mode average pooling runs natively where no tie matters",
                 "ceil_avg_free"),
    _torch_claim("PyTorch: class-weighted cross-entropy runs natively where no tie matters",
                 "weights_free"),
    _torch_claim("PyTorch: training-mode batch norm is refused (model.eval())", "train_bn",
                 UnsupportedError, "eval()"),
    _torch_claim("PyTorch: training-mode dropout is refused", "train_dropout",
                 UnsupportedError),
    _torch_claim("PyTorch: an operation without a mapping is refused at import", "lgamma",
                 UnsupportedError, "aten.lgamma"),
    _torch_claim("PyTorch: Python control flow on a value is a TracerBoolError", "if",
                 TracerBoolError),
    _torch_claim("PyTorch: a function returning None is an OutputError", "none", OutputError),
    _torch_claim("PyTorch: an integer argument in argnums is an ArgumentError", "int_argnums",
                 ArgumentError),
]


# ----- JAX (docs/frameworks.md) -----

V = np.array([0.3, -0.2, 0.05, 1.0])


def _jax(kind: str):
    import jax
    import jax.numpy as jnp
    from jax import lax

    x4 = jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, 5, 5)), jnp.float32)
    programs = {
        "identity": (lambda v: (jax.nn.relu(v) - jax.nn.relu(-v)).sum(), jnp.zeros(3)),
        "scan": (lambda v: lax.scan(lambda c, a: (c * a + jnp.sin(a), c), 1.0, v)[0], V),
        "fori": (lambda v: lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c) * 1.5, v).sum(), V),
        "cond_const": (lambda v: lax.cond(True, lambda a: (a ** 2).sum(),
                                          lambda a: -a.sum(), v), V),
        "cond_data": (lambda v: lax.cond(v[0] > 0, lambda a: (a ** 2).sum(),
                                         lambda a: -a.sum(), v), V),
        "cond_jump": (lambda v: lax.cond(v[0] > 0, lambda a: a.sum() + 1.0,
                                         lambda a: -a.sum(), v),
                      np.array([0.0, -0.2, 0.05, 1.0])),
        "while_counter": (lambda v: lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1]) * 2), (0, v))[1].sum(), V),
        "while_unrolled": (lambda v: (jnp.sin(jnp.sin(jnp.sin(v) * 2) * 2) * 2).sum(), V),
        "while_data": (lambda v: lax.while_loop(lambda c: c.sum() < 10,
                                                lambda c: c * 2 + 1, v).sum(), V),
        "gather": (lambda v: (jnp.take_along_axis(v[None], jnp.array([[2, 0, 2]]), 1)
                              * jnp.array([1.0, 2.0, 3.0])).sum(), V),
        "scatter": (lambda v: (v.at[jnp.array([1, 1, 3])].add(v[:3] ** 2)
                               * jnp.arange(1.0, 5.0)).sum(), V),
        "gather_computed": (lambda v: v[jnp.argsort(v)[:2] + 1].sum(), V),
        "gather_argsort": (lambda v: (jnp.take_along_axis(v, jnp.argsort(v), -1)
                                      * jnp.arange(1.0, v.shape[-1] + 1.0)).sum(), V),
        "transposed": (lambda x: lax.conv_transpose(
            x, jnp.ones((3, 3, 2, 3)), (2, 2), "SAME",
            dimension_numbers=("NCHW", "HWIO", "NCHW")).sum(), x4),
        "dilated_pool": (lambda x: lax.reduce_window(
            x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID",
            window_dilation=(1, 1, 2, 2)).sum(), x4),
        "interior_pad": (lambda x: lax.pad(x, 0.0, ((0, 0, 0), (0, 0, 0), (1, 1, 1),
                                                    (0, 0, 1))).sum(), x4),
        "norm0": (lambda v: jnp.linalg.norm(v), jnp.zeros(3)),
        "igamma": (lambda v: jax.scipy.special.gammainc(2.0, v).sum(), jnp.ones(2)),
    }
    return programs[kind]


def jax_sub(kind: str, **kw):
    def run():
        import asd.jax

        fn, x = _jax(kind)
        return asd.jax.subgrad(fn, seed=0, **kw)(x)
    return run


def jax_ref(kind: str):
    def ref():
        import jax

        fn, x = _jax(kind)
        return jax.grad(fn)(x)
    return ref


def _jax_claim(text, kind, error=None, check=None):
    check = None if error else (check or same_as(jax_ref(kind), 1e-5))
    return Claim(text, jax_sub(kind), error, check, "jax")


def _jax_int_argnums():
    import asd.jax

    return asd.jax.subgrad(lambda x, t: (x * t).sum(), argnums=1)(
        np.ones(2, np.float32), np.array([1, 2], np.int32))


def _unit(value) -> bool:
    g = _numpy(value)
    return bool(np.all(np.isfinite(g)) and abs(np.linalg.norm(g) - 1.0) < 1e-5)


JAX = [
    _jax_claim("JAX: relu(x) - relu(-x) gives 1 (custom JVPs are ignored)", "identity",
               check=works([1.0, 1.0, 1.0])),
    _jax_claim("JAX: lax.scan imports (unrolled)", "scan"),
    _jax_claim("JAX: lax.fori_loop imports (unrolled)", "fori"),
    _jax_claim("JAX: lax.cond with a constant predicate imports", "cond_const"),
    _jax_claim("JAX: lax.cond with a predicate from the input imports", "cond_data"),
    _jax_claim("JAX: lax.cond whose branches jump at a tie is refused", "cond_jump",
               NotLipschitzError),
    _jax_claim("JAX: lax.while_loop with a counter predicate imports", "while_counter",
               check=same_as(jax_ref("while_unrolled"))),   # jax.grad cannot run a while
    _jax_claim("JAX: lax.while_loop whose predicate depends on the input is refused",
               "while_data", TracerBoolError),
    _jax_claim("JAX: gathers with constant positions (take_along_axis) import", "gather"),
    _jax_claim("JAX: scatter-add (.at[...].add) imports", "scatter"),
    _jax_claim("JAX: a gather at positions computed from the input is refused",
               "gather_computed", NotLipschitzError),
    _jax_claim("JAX: take_along_axis at argsort positions imports (read as numpy's)",
               "gather_argsort"),
    _jax_claim("JAX: lhs_dilation (transposed convolution) is refused", "transposed",
               UnsupportedError),
    _jax_claim("JAX: dilated pooling windows are refused", "dilated_pool", UnsupportedError),
    _jax_claim("JAX: interior padding is refused", "interior_pad", UnsupportedError),
    _jax_claim("JAX: jnp.linalg.norm at 0 is asd.norm (JAX itself gives NaN)", "norm0",
               check=_unit),
    _jax_claim("JAX: a primitive without a mapping (igamma) is refused at import", "igamma",
               UnsupportedError),
    Claim("JAX: an integer argument in argnums is an ArgumentError", lambda: _jax_int_argnums(),
          ArgumentError, needs="jax"),
]


# ----- TensorFlow (docs/frameworks.md) -----


def _tf(kind: str):
    import keras
    import tensorflow as tf

    x4 = tf.constant(np.random.default_rng(0).standard_normal((1, 5, 5, 2)), tf.float32)
    v = tf.constant(V, tf.float64)
    if kind in ("train_bn", "train_dropout", "keras_mlp"):
        keras.utils.set_random_seed(0)
    if kind == "train_bn":
        bn = keras.layers.BatchNormalization()
        return (lambda x: tf.reduce_sum(bn(x, training=True) ** 2)), x4
    if kind == "train_dropout":
        drop = keras.layers.Dropout(0.5)
        return (lambda x: tf.reduce_sum(drop(x, training=True))), x4
    if kind == "keras_mlp":
        mlp = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                                keras.layers.Dense(1)])
        return (lambda x: tf.reduce_sum(mlp(x))), tf.constant(
            np.random.default_rng(1).standard_normal((2, 3)), tf.float32)

    @tf.function
    def inner(x):
        return tf.sin(x) * 2.0

    programs = {
        "identity": (lambda x: tf.reduce_sum(tf.nn.relu(x) - tf.nn.relu(-x)), tf.zeros(3)),
        "nested": (lambda x: tf.reduce_sum(inner(x) ** 2), v),
        "cond": (lambda x: tf.cond(x[0] > 0, lambda: tf.reduce_sum(x),
                                   lambda: -tf.reduce_sum(x)), v),
        "while": (lambda x: tf.while_loop(lambda i, c: i < 3,
                                          lambda i, c: (i + 1, tf.sin(c)), (0, x))[1][0], v),
        "avg_same": (lambda x: tf.reduce_sum(tf.nn.avg_pool2d(x, 2, 2, "SAME")), x4),
        "avg_same_sym": (lambda x: tf.reduce_sum(tf.nn.avg_pool2d(x, 3, 1, "SAME")), x4),
        "max_asym": (lambda x: tf.reduce_sum(tf.nn.max_pool2d(x, 2, 2, "SAME")), x4),
        "transposed": (lambda x: tf.reduce_sum(tf.nn.conv2d_transpose(
            x, tf.ones((3, 3, 3, 2)), (1, 10, 10, 3), 2)), x4),
        "gather_computed": (lambda x: tf.gather(x, tf.argmax(x)), v),
        "nn_dropout": (lambda x: tf.reduce_sum(tf.nn.dropout(x, 0.5)), v),
        "floor": (lambda x: tf.reduce_sum(tf.math.floor(x) * x), v),
        "cast_int": (lambda x: tf.reduce_sum(tf.cast(tf.cast(x * 10, tf.int32), tf.float64)),
                     v),
        "div_no_nan": (lambda x: tf.reduce_sum(tf.math.divide_no_nan(tf.ones_like(x), x)), v),
        "norm0": (lambda x: tf.norm(x), tf.zeros(3, tf.float64)),
    }
    return programs[kind]


def tf_sub(kind: str):
    def run():
        import asd.tf

        fn, x = _tf(kind)
        return asd.tf.subgrad(fn, x, seed=0)
    return run


def tf_ref(kind: str):
    def ref():
        import tensorflow as tf

        fn, x = _tf(kind)
        var = tf.Variable(x)
        with tf.GradientTape() as tape:
            y = fn(var)
        return tape.gradient(y, var)
    return ref


def _tf_function_dropout():
    import asd.tf
    import keras
    import tensorflow as tf

    drop = keras.layers.Dropout(0.5)
    g = asd.tf.function(lambda x: drop(x, training=True))
    x = tf.Variable(tf.ones(8))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(g(x))
    return tape.gradient(y, x)


def _tf_error(name: str):
    import tensorflow as tf

    return getattr(tf.errors, name)


def _tf_claim(text, kind, error=None, check=None, message=""):
    check = None if error else (check or same_as(tf_ref(kind), 1e-5))
    return Claim(text, tf_sub(kind), error, check, "tensorflow", message)


TENSORFLOW = [
    _tf_claim("TensorFlow has an importer: relu(x) - relu(-x) gives 1", "identity",
              check=works([1.0, 1.0, 1.0])),
    _tf_claim("TensorFlow: a tf.function called inside is imported recursively", "nested"),
    _tf_claim("TensorFlow: a Keras model imports", "keras_mlp"),
    _tf_claim("TensorFlow: tf.cond on the differentiated path is refused", "cond",
              UnsupportedError, message="StatelessIf"),
    _tf_claim("TensorFlow: tf.while_loop on the differentiated path is refused", "while",
              UnsupportedError, message="While"),
    _tf_claim("TensorFlow: AvgPool 'SAME' that pads is refused", "avg_same", UnsupportedError),
    _tf_claim("TensorFlow: AvgPool 'SAME' that pads both sides alike is refused too",
              "avg_same_sym", UnsupportedError),
    _tf_claim("TensorFlow: MaxPool with asymmetric padding is refused", "max_asym",
              UnsupportedError),
    _tf_claim("TensorFlow: transposed convolutions are refused", "transposed",
              UnsupportedError),
    _tf_claim("TensorFlow: gathers at computed indices are refused", "gather_computed",
              NotLipschitzError),
    _tf_claim("TensorFlow: training-mode batch normalization is refused", "train_bn",
              UnsupportedError, message="training=False"),
    _tf_claim("TensorFlow: training-mode (Keras) dropout is refused", "train_dropout",
              UnsupportedError, message="training=False"),
    _tf_claim("TensorFlow: tf.nn.dropout (a stateful random draw) is refused", "nn_dropout",
              UnsupportedError, message="random"),
    _tf_claim("TensorFlow: an unmapped operation (Floor) is refused at import", "floor",
              UnsupportedError, message="Floor"),
    _tf_claim("TensorFlow: a cast of a differentiated value to integers is refused",
              "cast_int", UnsupportedError),
    _tf_claim("TensorFlow: DivNoNan by a differentiated divisor is refused", "div_no_nan",
              NotLipschitzError),
    _tf_claim("TensorFlow: tf.norm at 0 is asd.norm (TensorFlow itself gives NaN)", "norm0",
              check=_unit),
]


ALL = NUMPY + TORCH + JAX + TENSORFLOW


@pytest.mark.parametrize("claim", ALL, ids=[c.text for c in ALL])
def test_claim(claim: Claim):
    if claim.needs:
        pytest.importorskip(claim.needs)
    if claim.error is not None:
        with pytest.raises(claim.error) as info:
            claim.run()
        assert claim.message in str(info.value), (claim.text, str(info.value))
        if issubclass(claim.error, asd.ASDError):
            assert isinstance(info.value, asd.ASDError)
        return
    value = claim.run()
    assert claim.check(value), f"{claim.text}: got {value!r}"


def test_tensorflow_drop_in_function_refuses_training_dropout():
    """The drop-in asd.tf.function differentiates in the backward: there the refusal comes
    through TensorFlow's py_function (as its error, with asd's message), not a gradient of
    another mask than the forward drew."""
    pytest.importorskip("tensorflow")
    with pytest.raises(_tf_error("OpError"), match="writes a variable"):
        _tf_function_dropout()


def test_every_claim_states_an_outcome():
    for c in ALL:
        assert (c.error is None) != (c.check is None), c.text
