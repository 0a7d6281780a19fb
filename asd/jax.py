"""JAX programs in, correct subgradients out: ``asd.jax.subgrad`` and ``asd.jax.function``.

``jax.grad`` picks a fixed derivative at kinks (``jax.nn.relu`` declares ``relu'(0) = 0``,
``jnp.maximum`` splits ties 0.5/0.5), which does not compose. These functions trace the JAX
function to a jaxpr and interpret it with asd's library (``asd.frontends.jax``), so the answer
is an element of the Clarke subdifferential.

- ``subgrad(fn, argnums=0, seed=None, direction=None)(*args)``: like ``jax.grad``; args may be
  pytrees (tuples, lists, dicts). With ``direction=v`` the result is the limiting gradient
  ``lim ∇f(x + δv)``, δ ↓ 0. ``value_and_subgrad`` returns the value too.
- ``function(fn, seed=None)``: ``fn`` as a ``jax.custom_vjp`` whose reverse rule is asd's
  vector-limiting-Jacobian product (computed on the host, so it also works under ``jit``):
  ``jax.grad`` of anything built on it gets correct subgradients.
- ``program(fn, *args)``: the imported ``asd.Program``.

JAX is imported only when one of these is called. Computation happens in the arrays' own
precision (float32 unless JAX's x64 mode is on).

>>> import jax, jax.numpy as jnp, asd.jax
>>> f = lambda x: (jax.nn.relu(x) - jax.nn.relu(-x)).sum()
>>> asd.jax.subgrad(f)(jnp.zeros(3))
Array([1., 1., 1.], dtype=float32)
>>> jax.grad(f)(jnp.zeros(3))                          # JAX's own answer
Array([0., 0., 0.], dtype=float32)
>>> jax.grad(lambda x: asd.jax.function(lambda x: jax.nn.relu(x) - jax.nn.relu(-x))(x).sum())(
...     jnp.zeros(3))
Array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable


def _frontend():
    from .frontends import jax as frontend

    return frontend


def subgrad(fn: Callable, argnums=0, *, seed=None, direction=None) -> Callable:
    """A Clarke subgradient of scalar ``fn``, as JAX arrays (module docstring)."""
    return _frontend().subgrad(fn, argnums, seed=seed, direction=direction)


def value_and_subgrad(fn: Callable, argnums=0, *, seed=None, direction=None) -> Callable:
    """``(fn(*args), subgradient)`` as JAX arrays."""
    return _frontend().value_and_subgrad(fn, argnums, seed=seed, direction=direction)


def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with asd's subgradient as its JAX reverse rule (module docstring)."""
    return _frontend().function(fn, seed=seed)


def program(fn: Callable, *args):
    """The asd ``Program`` of a JAX function at example arguments."""
    return _frontend().program(fn, *args)


__all__ = ["function", "program", "subgrad", "value_and_subgrad"]
