"""What each installed framework's own autodiff says: derivatives at kinks, computed live.

``asd demo``, ``asd audit`` and the battery compare asd with PyTorch, JAX, TensorFlow and
autograd. Nothing here is hard-coded: every number comes from running the framework's own
gradient on a function written with the framework's own operations (``torch.relu``,
``jax.nn.relu``, ``tf.nn.relu``, autograd's ``np.maximum(x, 0)``). Frameworks are imported
only when asked for, so ``import asd.cli.frameworks`` costs nothing.

Functions can be written once for every framework against an `Ops` namespace (``ops.relu``,
``ops.maximum``, ``ops.sort``, ...), which is how the paper's programs ``f1``..``f4`` and the
audit battery are written.

>>> import asd.cli.frameworks as fw
>>> "torch" in fw.available()
True
>>> fw.derivative("torch", "f2", 0.0)    # relu(x) - relu(-x) is the identity, torch says 0
0.0
>>> fw.derivative("torch", "f3", 0.0)    # 10 x - 9 (relu(x) - relu(-x)), torch says 10
10.0
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from functools import cache
from types import SimpleNamespace
from typing import Any

import numpy as np

FRAMEWORKS = ("torch", "jax", "tensorflow", "autograd")
"""Every framework asd knows how to ask, in display order."""

LABELS = {"torch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow", "autograd": "autograd"}

_ALIASES = {"pytorch": "torch", "tf": "tensorflow"}

_MODULES = {"torch": "torch", "jax": "jax", "tensorflow": "tensorflow", "autograd": "autograd"}


def canonical(framework: str) -> str:
    """The canonical name of a framework (``'pytorch'`` -> ``'torch'``), or ValueError."""
    name = _ALIASES.get(framework.lower(), framework.lower())
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    return name


@cache
def _importable(name: str) -> bool:
    if importlib.util.find_spec(_MODULES[name]) is None:
        return False
    try:
        importlib.import_module(_MODULES[name])
    except Exception:  # a broken install counts as absent, whatever it raises
        return False
    return True


def available() -> list[str]:
    """The frameworks that import in this Python, in the order of `FRAMEWORKS`.

    >>> set(available()) <= set(FRAMEWORKS)
    True
    """
    return [name for name in FRAMEWORKS if _importable(name)]


# ----- per-framework operation namespaces -----

def _torch_ops() -> SimpleNamespace:
    import torch
    import torch.nn.functional as F

    def topk_sum(x, k):
        return torch.topk(x, k).values.sum()

    def max_pool1d(x, k):
        return F.max_pool1d(x[None, None], k)[0, 0]

    def smooth_l1(x, beta):
        return F.smooth_l1_loss(x, torch.zeros_like(x), beta=beta, reduction="sum")

    return SimpleNamespace(
        name="torch", relu=torch.relu, abs=torch.abs, maximum=torch.maximum,
        minimum=torch.minimum, clip=torch.clamp, sum=torch.sum, mean=torch.mean,
        max=torch.max, min=torch.min, sort=lambda x: torch.sort(x).values,
        topk_sum=topk_sum, median=torch.median, norm=torch.linalg.vector_norm,
        sqrt=torch.sqrt, max_pool1d=max_pool1d, leaky_relu=F.leaky_relu,
        hardtanh=F.hardtanh, relu6=F.relu6,
        where=torch.where, stack=torch.stack, asarray=lambda a: torch.as_tensor(
            np.asarray(a, dtype=np.float64)),
        std=lambda x: torch.std(x, correction=0), atan2=torch.atan2, log=torch.log,
        rsqrt=torch.rsqrt, sinc=torch.sinc, take_argmax=lambda x: x[torch.argmax(x)],
        pnorm=lambda x, p: torch.linalg.vector_norm(x, ord=p), smooth_l1=smooth_l1,
        eigvalsh=torch.linalg.eigvalsh, svd=torch.linalg.svd, diag=torch.diag,
    )


def _jax_ops() -> SimpleNamespace:
    import jax
    import jax.numpy as jnp

    def topk_sum(x, k):
        return jax.lax.top_k(x, k)[0].sum()

    def max_pool1d(x, k):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (k,), (k,), "VALID")

    return SimpleNamespace(
        name="jax", relu=jax.nn.relu, abs=jnp.abs, maximum=jnp.maximum, minimum=jnp.minimum,
        clip=jnp.clip, sum=jnp.sum, mean=jnp.mean, max=jnp.max, min=jnp.min, sort=jnp.sort,
        topk_sum=topk_sum, median=jnp.median, norm=jnp.linalg.norm, sqrt=jnp.sqrt,
        max_pool1d=max_pool1d, leaky_relu=jax.nn.leaky_relu,
        hardtanh=lambda x, lo=-1.0, hi=1.0: jnp.clip(x, lo, hi) if (lo, hi) != (-1.0, 1.0)
        else jax.nn.hard_tanh(x),
        relu6=jax.nn.relu6, where=jnp.where, stack=jnp.stack, asarray=jnp.asarray,
        std=jnp.std, atan2=jnp.arctan2, log=jnp.log, rsqrt=jax.lax.rsqrt, sinc=jnp.sinc,
        take_argmax=lambda x: x[jnp.argmax(x)], pnorm=lambda x, p: jnp.linalg.norm(x, ord=p),
        eigvalsh=jnp.linalg.eigvalsh, svd=jnp.linalg.svd, diag=jnp.diag,
    )


def _tensorflow_ops() -> SimpleNamespace:
    import tensorflow as tf

    def sort(x):
        return tf.sort(x)

    def topk_sum(x, k):
        return tf.reduce_sum(tf.math.top_k(x, k).values)

    def median(x):
        n = int(x.shape[0])
        return tf.sort(x)[(n - 1) // 2]

    def max_pool1d(x, k):
        return tf.nn.max_pool1d(x[None, :, None], k, k, "VALID")[0, :, 0]

    def svd(x):                 # numpy's order: u, s, vh
        s, u, v = tf.linalg.svd(x)
        return u, s, tf.transpose(v)

    return SimpleNamespace(
        name="tensorflow", relu=tf.nn.relu, abs=tf.abs, maximum=tf.maximum, minimum=tf.minimum,
        clip=tf.clip_by_value, sum=tf.reduce_sum, mean=tf.reduce_mean, max=tf.reduce_max,
        min=tf.reduce_min, sort=sort, topk_sum=topk_sum, median=median, norm=tf.norm,
        sqrt=tf.sqrt, max_pool1d=max_pool1d,
        leaky_relu=lambda x, a=0.01: tf.nn.leaky_relu(x, a),
        hardtanh=lambda x, lo=-1.0, hi=1.0: tf.clip_by_value(x, lo, hi), relu6=tf.nn.relu6,
        where=tf.where, stack=tf.stack,
        asarray=lambda a: tf.constant(np.asarray(a, dtype=np.float64)),
        std=tf.math.reduce_std, atan2=tf.math.atan2, log=tf.math.log, rsqrt=tf.math.rsqrt,
        sinc=lambda x: tf.experimental.numpy.sinc(x),
        take_argmax=lambda x: tf.gather(x, tf.argmax(x)),
        pnorm=lambda x, p: tf.norm(x, ord=p), eigvalsh=tf.linalg.eigvalsh, svd=svd,
        diag=tf.linalg.diag,
    )


def _autograd_ops() -> SimpleNamespace:
    import autograd.numpy as anp

    def topk_sum(x, k):
        return anp.sum(anp.sort(x)[-k:])

    def max_pool1d(x, k):
        return anp.max(anp.reshape(x[: len(x) // k * k], (-1, k)), axis=1)

    return SimpleNamespace(
        name="autograd", relu=lambda x: anp.maximum(x, 0.0), abs=anp.abs, maximum=anp.maximum,
        minimum=anp.minimum, clip=anp.clip, sum=anp.sum, mean=anp.mean, max=anp.max,
        min=anp.min, sort=anp.sort, topk_sum=topk_sum, median=anp.median,
        norm=anp.linalg.norm, sqrt=anp.sqrt, max_pool1d=max_pool1d,
        leaky_relu=lambda x, a=0.01: anp.where(x > 0, x, a * x),
        hardtanh=lambda x, lo=-1.0, hi=1.0: anp.clip(x, lo, hi),
        relu6=lambda x: anp.clip(x, 0.0, 6.0), where=anp.where, stack=anp.stack,
        asarray=anp.asarray, std=anp.std, atan2=anp.arctan2, log=anp.log,
        rsqrt=lambda x: 1.0 / anp.sqrt(x), sinc=anp.sinc,
        take_argmax=lambda x: x[anp.argmax(x)], pnorm=lambda x, p: anp.linalg.norm(x, ord=p),
        eigvalsh=lambda m: anp.linalg.eigh(m)[0], svd=anp.linalg.svd, diag=anp.diag,
    )


_OPS = {"torch": _torch_ops, "jax": _jax_ops, "tensorflow": _tensorflow_ops,
        "autograd": _autograd_ops}


@cache
def ops(framework: str) -> SimpleNamespace:
    """The framework's own operations under common names (``relu``, ``maximum``, ``sort``...).

    >>> ops("torch").relu.__name__
    'relu'
    """
    return _OPS[canonical(framework)]()


# ----- the paper's programs, written once against any Ops namespace -----

PROGRAMS: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "f1": ("x", lambda o, x: x),
    "f2": ("relu(x) - relu(-x)", lambda o, x: o.relu(x) - o.relu(-x)),
    "f3": ("10 x - 9 (relu(x) - relu(-x))", lambda o, x: 10 * x - 9 * (o.relu(x) - o.relu(-x))),
    "f4": ("relu(relu(x)) - relu(x)", lambda o, x: o.relu(o.relu(x)) - o.relu(x)),
}
"""name -> (formula, f(ops, x)); every one is x or 0 in disguise, so its derivative is 1 or 0."""


# ----- gradients -----

def _torch_grad(f, x):
    import torch

    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = f(t)
    (g,) = torch.autograd.grad(y, t, allow_unused=True)
    return np.zeros_like(x) if g is None else g.detach().numpy()


def _jax_grad(f, x):
    import jax
    import jax.numpy as jnp

    def scalar(a):                  # jax.grad takes shape () only; a one-entry array is a loss too
        return jnp.reshape(f(a), ())

    return np.asarray(jax.grad(scalar)(np.asarray(x, dtype=np.float32)), dtype=np.float64)


def _tensorflow_grad(f, x):
    import tensorflow as tf

    t = tf.Variable(np.asarray(x, dtype=np.float64))
    with tf.GradientTape() as tape:
        y = f(t)
    g = tape.gradient(y, t)
    return np.zeros_like(x) if g is None else np.asarray(g)


def _autograd_grad(f, x):
    import autograd

    return np.asarray(autograd.grad(f)(np.asarray(x, dtype=np.float64)), dtype=np.float64)


_GRADS = {"torch": _torch_grad, "jax": _jax_grad, "tensorflow": _tensorflow_grad,
          "autograd": _autograd_grad}


def gradient(framework: str, f: str | Callable, x) -> np.ndarray:
    """The framework's own gradient of scalar ``f`` at ``x``, as a float64 numpy array.

    ``f`` is a callable on the framework's arrays (written with its own operations), or the
    name of one of `PROGRAMS`, which is then built from the framework's `ops`. JAX runs in
    its default precision (float32 unless x64 is enabled).

    >>> gradient("torch", lambda t: (t.relu() * 2).sum(), [0.0, 1.0])
    array([0., 2.])
    """
    name = canonical(framework)
    if not _importable(name):       # this framework only: available() would import them all
        raise ModuleNotFoundError(f"{LABELS[name]} is not installed in this Python")
    if isinstance(f, str):
        if f not in PROGRAMS:
            raise ValueError(f"unknown program {f!r}; known: {', '.join(PROGRAMS)}")
        generic, namespace = PROGRAMS[f][1], ops(name)

        def f(t, generic=generic, namespace=namespace):
            return generic(namespace, t)

    x = np.asarray(x, dtype=np.float64)
    return np.asarray(_GRADS[name](f, x), dtype=np.float64).reshape(x.shape)


def derivative(framework: str, program: str, x: float) -> float:
    """The framework's derivative of one of the paper's programs ``f1``..``f4`` at ``x``.

    Each program is built with the framework's own relu (``torch.relu``, ``jax.nn.relu``,
    ``tf.nn.relu``, autograd's ``np.maximum(x, 0)``); the true derivative is 1 for
    ``f1``..``f3`` and 0 for ``f4`` everywhere.

    >>> derivative("torch", "f1", 0.0), derivative("torch", "f4", 0.0)
    (1.0, 0.0)
    """
    return float(gradient(framework, program, float(x)))


__all__ = ["FRAMEWORKS", "LABELS", "PROGRAMS", "available", "canonical", "derivative",
           "gradient", "ops"]
