"""asd.jax inside JAX's transformations: the staged sweep, with no host callback.

Called with traced arguments (inside ``jax.jit``, ``jax.vmap``, ``jax.grad``, ``lax.scan``),
``asd.jax.value_and_subgrad``, ``subgrad``, ``vjp`` and ``function`` run the imported program
as a staged sweep (`asd.core.staged`): every decision is an array computation, so the whole
call is part of the caller's jaxpr and runs on any JAX device.

One call is two sweeps under a ``lax.cond``:
1. a probe sweep decides every branch by the values alone and flags whether any rule met a
   tie (an entry exactly on a kink);
2. without a tie the branches are those the values fix, so the probe's linearizations are
   exact and the reverse pass runs over them (the cost of ``jax.value_and_grad``, plus the
   tie tests);
3. with a tie, the staged sweep runs again, deciding the tied entries by their first-order
   signs along ``v, w1, …`` (`asd.core.ties.staged_sign`), and counts the entries first order
   leaves open (``undecided``, 0 when the result is the eager sweep's element).

The direction ``v`` comes from a PRNG key: ``key=`` (traced or not), else
``jax.random.key(seed)`` (``seed=None`` reads 0); the further directions ``w1, …`` are drawn
from the seed on the host, as an eager sweep draws them, and enter the jaxpr as constants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from asd.core import staged
from asd.core.sweep import LazyDirection, LexDirections
from asd.errors import ArgumentError, StagedUnsupported

NOT_STAGED = StagedUnsupported
"""What a staged call raises for a rule that still decides on the host: `asd.jax.function`
then runs its reverse rule on the host instead (the only host callback left)."""


def tracing(*trees) -> bool:
    """Whether any leaf of ``trees`` is a JAX tracer (the call is inside a transformation)."""
    return any(isinstance(leaf, jax.core.Tracer) for tree in trees
               for leaf in jax.tree_util.tree_leaves(tree))


def lex_directions(seed) -> LexDirections:
    """The further directions ``w1, …``: the eager sweep's stream for an integer seed."""
    if seed is not None and not isinstance(seed, int | np.integer):
        raise ArgumentError(
            f"inside a JAX transformation the seed must be an int or None (got "
            f"{type(seed).__name__}); pass key=jax.random.key(...) to draw the direction from "
            "a traced key")
    return LexDirections((), None if seed is None else np.random.SeedSequence(int(seed))
                         .spawn(1)[0])


def draw_direction(leaves: Sequence, seed, key) -> list:
    """``v``: independent standard normals per leaf (branch choices do not depend on its
    scale). With ``key`` they come from ``jax.random``; otherwise they are the eager sweep's
    draw for ``seed`` (`asd.core.sweep.LazyDirection`, numpy, at trace time: a constant of
    the jaxpr), so a staged call and an eager one with the same seed sweep along the same
    ``v``; ``seed=None`` reads 0 inside a transformation."""
    if key is not None:
        keys = jax.random.split(key, max(len(leaves), 1))
        return [jax.random.normal(k, jnp.shape(x), jnp.result_type(x))
                for k, x in zip(keys, leaves, strict=False)]
    if seed is not None and not isinstance(seed, int | np.integer):
        raise ArgumentError(
            f"inside a JAX transformation the seed must be an int or None (got "
            f"{type(seed).__name__}); or pass key=jax.random.key(...)")
    dtypes = [np.dtype(jnp.result_type(x)) for x in leaves]
    draw = LazyDirection(0 if seed is None else int(seed),
                         [tuple(jnp.shape(x)) for x in leaves], dtypes)
    return [jnp.asarray(draw.leaf(i)) for i in range(len(leaves))]


def value_and_pullback(program: Callable, leaves: Sequence, active: Sequence[bool],
                       directions: Sequence, lex: LexDirections) -> tuple[Any, Callable]:
    """``program(*leaves)``'s output leaves and ``ct -> (Jᵀ ct, undecided)`` for the limiting
    Jacobian the staged sweep selects along ``directions`` (one per active leaf, None for
    the others), with the probe's fast path under a ``lax.cond``.

    ``program`` maps traced leaves to a flat list of output leaves."""
    active_leaves = [x for x, a in zip(leaves, active, strict=True) if a]

    def run(mode: str):
        dirs = iter(directions)
        trace, outs, ids = staged.sweep(
            program, leaves, [next(dirs) if a else None for a in active], lex, active, mode)
        return trace, list(outs), [i for i, a in zip(ids, active, strict=True) if a]

    probe, outs, ids = run("values")
    values = [o.value if hasattr(o, "_trace") else jnp.asarray(o) for o in outs]
    any_tie = staged.tied(probe, values[0] if values else jnp.zeros(()))

    def pullback(cts: Sequence) -> tuple[list, Any]:
        cts = [jnp.asarray(c, jnp.result_type(v)) for c, v in zip(cts, values, strict=True)]

        def fast(cts):
            grads = staged.pull(probe, outs, cts, ids, active_leaves)
            return grads, jnp.zeros((), jnp.int32)

        def full(cts):  # the probe's nodes that met ties re-decided, staged
            trace = probe.redecided(probe.tied)
            grads = staged.pull(trace, outs, cts, ids, active_leaves)
            return grads, staged.undecided(trace, grads[0] if grads else jnp.zeros(()))

        return jax.lax.cond(any_tie, full, fast, cts)

    return values, pullback


def _flat_program(prog, args: tuple) -> tuple[list, list, list, Callable]:
    """``args``' tree structures, their leaf groups, all leaves in order, and ``prog`` as a
    function of those leaves returning its output leaves (what `value_and_pullback` sweeps)."""
    trees = [jax.tree_util.tree_structure(a) for a in args]
    flat = [jax.tree_util.tree_leaves(a) for a in args]
    leaves = [leaf for group in flat for leaf in group]

    def program(*tracers):
        it = iter(tracers)
        rebuilt = [jax.tree_util.tree_unflatten(t, [next(it) for _ in group])
                   for t, group in zip(trees, flat, strict=True)]
        return jax.tree_util.tree_leaves(prog.numpy_fn(*rebuilt),
                                         is_leaf=lambda o: hasattr(o, "_trace"))

    return trees, flat, leaves, program


def _swept(prog, args: tuple, argnums, seed, key, direction) -> tuple[list, Callable, Callable]:
    """The staged sweep of ``prog`` at ``args`` for the arguments ``argnums``, along the given
    ``direction`` (in the arguments' structure) or one drawn from ``seed``/``key``: the output
    leaves, the pullback (`value_and_pullback`), and a function rebuilding the gradient leaves
    into one tree per differentiated argument (a tuple for a tuple of argnums)."""
    nums = (int(argnums),) if isinstance(argnums, int) else tuple(int(a) for a in argnums)
    trees, flat, leaves, program = _flat_program(prog, args)
    active = [i in nums for i, group in enumerate(flat) for _ in group]
    diff = [x for x, a in zip(leaves, active, strict=True) if a]
    if direction is None:
        dirs = draw_direction(diff, seed, key)
    else:
        given = (jax.tree_util.tree_leaves(direction) if isinstance(argnums, int) else
                 [leaf for d in direction for leaf in jax.tree_util.tree_leaves(d)])
        if len(given) != len(diff):
            raise ArgumentError(f"the direction has {len(given)} leaves, but the "
                                f"differentiated arguments have {len(diff)}")
        dirs = [jnp.asarray(d, jnp.result_type(x)) for d, x in zip(given, diff, strict=True)]
    values, pullback = value_and_pullback(program, leaves, active, dirs, lex_directions(seed))

    def per_arg(grads: Sequence):
        it = iter(grads)
        trees_out = tuple(jax.tree_util.tree_unflatten(trees[i], [next(it) for _ in flat[i]])
                          for i in nums)
        return trees_out[0] if isinstance(argnums, int) else trees_out

    return values, pullback, per_arg


def value_and_subgrad(prog, args: tuple, argnums, *, seed=None, key=None, direction=None,
                      report: bool = False):
    """`asd.jax.value_and_subgrad` of the imported program ``prog`` at (traced) ``args``:
    ``(value, subgradient)``, with ``undecided`` last when ``report``."""
    values, pullback, per_arg = _swept(prog, args, argnums, seed, key, direction)
    if len(values) != 1 or jnp.shape(values[0]) != ():
        raise ArgumentError("value_and_subgrad needs a function with one scalar output; use "
                            "asd.jax.vjp for other outputs")
    grads, undecided = pullback([jnp.ones_like(values[0])])
    if report:  # the caller reads the count: the gradient as the staged sweep chose it
        return values[0], per_arg(grads), undecided
    return values[0], per_arg(_nan_where_undecided(grads, undecided))


def _nan_where_undecided(grads: list, undecided) -> list:
    """Every gradient entry NaN where first order left something open (a jump reaching the
    output, a refused point, a tie the eager sweep decides exactly or refuses), for a caller
    that does not read the count: inside a transformation nothing can raise, and a number
    there would be a guess."""
    return [jnp.where(undecided > 0, jnp.asarray(jnp.nan, g.dtype), g) for g in grads]


def vjp(prog, args: tuple, argnums, *, seed=None, key=None, direction=None):
    """`asd.jax.vjp` of ``prog`` at (traced) ``args``: ``(out, pullback)`` where
    ``pullback(ct)`` returns the cotangents of the differentiated arguments (one tree per
    argument of ``argnums``, as ``jax.vjp`` does for its primals)."""
    values, pullback, per_arg = _swept(prog, args, argnums, seed, key, direction)
    out = jax.tree_util.tree_unflatten(prog.out_tree, values)

    def pull(ct):
        grads, undecided = pullback(jax.tree_util.tree_leaves(ct))
        return per_arg(_nan_where_undecided(grads, undecided))

    return out, pull


def vjp_leaves(prog, args: tuple, active: Sequence[bool], cts: Sequence, *, seed=None,
               key=None) -> list:
    """``Jᵀ ct`` for the leaves of ``args`` marked ``active`` (flat, in leaf order): the
    reverse rule of `asd.jax.function` inside a transformation. ``cts`` are the output
    leaves' cotangents.

    A custom VJP cannot return the ``undecided`` count, and cannot raise on a traced one: where
    it is not 0 (a jump reaching the output, a refused point, a tie first order leaves open,
    which the eager sweep refuses or decides exactly) every gradient entry is NaN, never a
    silently guessed number."""
    _, _, leaves, program = _flat_program(prog, args)
    diff = [x for x, a in zip(leaves, active, strict=True) if a]
    dirs = draw_direction(diff, seed, key)
    _, pullback = value_and_pullback(program, leaves, list(active), dirs, lex_directions(seed))
    grads, undecided = pullback(list(cts))
    return _nan_where_undecided(grads, undecided)
