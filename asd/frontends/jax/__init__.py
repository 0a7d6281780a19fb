"""JAX programs in, correct subgradients out: ``asd.jax.subgrad`` and ``asd.jax.function``.

``jax.grad`` picks a fixed derivative at kinks (``jax.nn.relu`` declares ``relu'(0) = 0``,
``jnp.maximum`` splits ties 0.5/0.5), which does not compose. These functions trace the JAX
function to a jaxpr and interpret it with asd's library (below), so the answer
is an element of the Clarke subdifferential.

- ``subgrad(fn, argnums=0, seed=None, direction=None, key=None)(*args)``: like ``jax.grad``;
  args may be pytrees (tuples, lists, dicts). With ``direction=v`` the result is the limiting
  gradient ``lim ∇f(x + δv)``, δ ↓ 0. ``value_and_subgrad`` returns the value too.
- ``function(fn, seed=None)``: ``fn`` as a ``jax.custom_vjp`` whose reverse rule is asd's
  vector-limiting-Jacobian product: ``jax.grad`` of anything built on it gets correct
  subgradients. Its forward is the imported jaxpr and its backward differentiates that same
  jaxpr; integer arguments (labels) get ``float0`` cotangents.
- Inside ``jax.jit``, ``jax.vmap``, ``jax.grad`` or ``lax.scan`` every one of them runs as a
  staged sweep (`asd.frontends.jax.staged`): all decisions are array operations, no host
  callback, any device.
- ``program(fn, *args)``: the imported ``asd.Program``.

Programs are cached under a key holding everything the trace reads (`import_program`,
`asd.frontends.reach`: closure values, globals, object attributes, captured arrays by value),
and traced through a fresh wrapper, so neither asd's cache nor JAX's answers for an old
version of the function.

Computation happens in the arrays' own precision (float32 unless JAX's x64 mode is on).
This package is ``asd.frontends.jax``, published as ``asd.jax``; ``import asd`` does not import
it, so JAX is imported only when ``asd.jax`` is first used. Its modules: `ops` (the lax table),
`importer` (the jaxpr interpreter, the program, its cache), `api` (``subgrad``, ``vjp``),
`dropin` (``function``), `staged` (the staged sweep inside JAX transformations).

How a jaxpr becomes an asd program:

``jax.make_jaxpr`` gives the program as lax primitives (``max``, ``select_n``, ``dot_general``,
``conv_general_dilated``, ``reduce_window_max``...). `JaxProgram` evaluates that jaxpr on
numpy or traced arrays, mapping every primitive that depends on the differentiated inputs to
an asd library function (`LAX`). Nested jaxprs (``jit``/``pjit``, ``custom_jvp_call``,
``custom_vjp_call``, ``closed_call``, ``remat``) are interpreted recursively; a custom JVP or
VJP rule is ignored on purpose, because it is exactly the framework's own choice at a kink
(``jax.nn.relu`` declares ``relu'(0) = 0``) that asd replaces by the direction's.

An equation whose inputs are all constants is evaluated by JAX itself (index arithmetic,
``iota``, NaN checks): it carries no derivative. One that depends on the differentiated
inputs and has no mapping raises `asd.UnsupportedError` when the program is imported, naming
the primitive, the equation and the path of nested calls; nothing falls back to JAX's
derivative.

Two rewrites keep jax.numpy's idioms correct at kinks:
- ``x != x`` and ``x == x`` (NaN checks) compare a value with itself: constant for finite
  inputs, so they are constants here rather than comparisons with a permanent tie.
- ``sqrt(reduce_sum(x * x))`` and ``sqrt(reduce_sum(x ** 2))`` (``jnp.linalg.norm``) become
  ``asd.norm``: ``sqrt`` alone is not Lipschitz at 0, the norm is.

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

from asd.frontends.jax import staged
from asd.frontends.jax.api import NUMBERS, subgrad, value_and_subgrad, vjp
from asd.frontends.jax.dropin import function
from asd.frontends.jax.importer import (
    CACHE_SIZE,
    IMPORTS,
    JaxProgram,
    check,
    evaluate,
    import_program,
    program,
)
from asd.frontends.jax.ops import (
    CALLS,
    CUMULATIVE,
    LAX,
    LOCALLY_CONSTANT,
    MULTIPLE,
    USED,
    take_gather_p,
)

__all__ = ["CACHE_SIZE", "CALLS", "CUMULATIVE", "IMPORTS", "LAX", "LOCALLY_CONSTANT", "MULTIPLE",
           "NUMBERS", "USED", "JaxProgram", "check", "evaluate", "function", "import_program",
           "program", "staged", "subgrad", "take_gather_p", "value_and_subgrad", "vjp"]
