"""``asd.jax.value_and_subgrad``, ``subgrad`` and ``vjp``: eager on concrete values, staged
(`asd.frontends.jax.staged`) inside a JAX transformation."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

import asd
from asd.core.arguments import check_argnums
from asd.errors import (
    ArgumentError,
)
from asd.frontends import common
from asd.frontends.jax import staged as jax_staged
from asd.frontends.jax.importer import CACHE_SIZE, _inexact, import_program


def _checked_argnums(argnums, n: int) -> int | tuple[int, ...]:
    """``argnums`` as `asd.subgrad` takes it, negative indices counted from the last
    argument as in Python; out of range or repeated: asd's `ArgumentError`."""
    single, nums = check_argnums(argnums, n)
    nums = tuple(a % n for a in nums)
    return nums[0] if single else nums


def _argnum_tuple(argnums) -> tuple[int, ...]:
    return (int(argnums),) if isinstance(argnums, int) else tuple(int(a) for a in argnums)


NUMBERS = (jax.Array, np.ndarray, np.generic, float, int, bool)
"""Pytree leaves that are numbers; any other leaf (an activation function in an equinox
module, a string, None) is held static, as ``equinox.filter_grad`` does."""

_CONTAINER_KEYS = (jax.tree_util.SequenceKey, jax.tree_util.DictKey)


def _differentiated(path: tuple, leaf) -> bool:
    """Whether a pytree leaf is an argument to differentiate: a floating-point array
    anywhere, or a number reached through lists, tuples and dicts only (as ``jax.grad``
    takes them). A Python scalar or an integer array held as an object's attribute (an
    equinox pooling layer's ``-inf`` init, a dropout rate, an index buffer) is the module's
    configuration and stays static, as ``equinox.filter_grad`` holds it."""
    if not isinstance(leaf, NUMBERS):
        return False
    if isinstance(leaf, (jax.Array, np.ndarray)) and _inexact(leaf):
        return True
    return all(isinstance(key, _CONTAINER_KEYS) for key in path)

_STATIC: dict[tuple, tuple] = {}


def _numbers_only(fn: Callable, args: tuple) -> tuple[Callable, tuple, list]:
    """``fn`` as a function of the number leaves of ``args`` only, those arguments, and per
    argument ``(treedef, is_number flags)`` to rebuild gradients (None at static leaves).

    The wrapper is kept per function, tree and static leaves, so the imported program's cache
    sees the same function on every call."""
    with_paths = [jax.tree_util.tree_flatten_with_path(a) for a in args]
    flat = [([leaf for _, leaf in pairs], tree) for pairs, tree in with_paths]
    flags = [[_differentiated(path, leaf) for path, leaf in pairs] for pairs, _ in with_paths]
    layout = [(tree, tuple(f)) for (_, tree), f in zip(flat, flags, strict=True)]
    if all(all(f) for f in flags):
        return fn, args, layout
    statics = [[leaf for leaf, n in zip(leaves, f, strict=True) if not n]
               for (leaves, _), f in zip(flat, flags, strict=True)]
    key = (id(fn), tuple(layout), tuple(id(x) for group in statics for x in group))
    hit = _STATIC.get(key)
    if hit is None:
        def numbers_fn(*numbers):
            rebuilt = []
            for (tree, f), nums, fixed in zip(layout, numbers, statics, strict=True):
                nums, fixed = iter(nums), iter(fixed)
                rebuilt.append(jax.tree_util.tree_unflatten(
                    tree, [next(nums) if n else next(fixed) for n in f]))
            return fn(*rebuilt)

        numbers_fn.__name__ = getattr(fn, "__name__", "fn")
        if len(_STATIC) >= CACHE_SIZE:
            _STATIC.pop(next(iter(_STATIC)))
        hit = _STATIC[key] = (numbers_fn, fn, statics)   # holds fn and statics: ids stay valid
    numbers = tuple([leaf for leaf, n in zip(leaves, f, strict=True) if n]
                    for (leaves, _), f in zip(flat, flags, strict=True))
    return hit[0], numbers, layout


def value_and_subgrad(fn: Callable, argnums=0, *, seed=None, direction=None, key=None,
                      report: bool = False) -> Callable:
    """``(value, subgradient)`` of a scalar JAX function, as JAX arrays. Arguments may be
    any pytree; leaves that are not numbers (functions in equinox modules) are held static
    and get None in the gradient.

    Called inside a JAX transformation (``jax.jit``, ``jax.vmap``, ``lax.scan``) it runs
    staged, with no host callback (`asd.frontends.jax.staged`); so does a call with ``key=``
    (the direction drawn from that PRNG key) or ``report=True``, which returns
    ``(value, subgradient, undecided)``: the count of tied entries that first order along
    the directions left open (0: the result is the eager sweep's element). Staged without
    ``report``, a subgradient whose count is not 0 is NaN (a jump, a refused point, a tie
    the eager sweep decides exactly): never a silent guess."""

    def wrapped(*args):
        which = _checked_argnums(argnums, len(args))
        user_fn, args, layout = _numbers_only(fn, args)
        if user_fn is not fn:
            vg = value_and_subgrad(user_fn, which, seed=seed, direction=None if direction
                                   is None else _direction_numbers(direction, which, layout),
                                   key=key, report=report)
            value, g, *undecided = vg(*args)

            def with_statics(i, gi):
                tree, f = layout[i]
                it = iter(gi)
                return jax.tree_util.tree_unflatten(tree, [next(it) if n else None
                                                           for n in f])

            nums = _argnum_tuple(which)
            g = (with_statics(nums[0], g) if isinstance(which, int)
                 else tuple(with_statics(i, gi) for i, gi in zip(nums, g, strict=True)))
            return (value, g, *undecided)
        nums = _argnum_tuple(which)
        for i in nums:
            bad = [leaf for leaf in jax.tree_util.tree_leaves(args[i]) if not _inexact(leaf)]
            if bad:
                raise ArgumentError(
                    f"argnums includes argument {i}, which holds {bad[0].dtype} values: only "
                    "floating-point arrays are differentiated (integer labels and indices are "
                    "constants); leave it out of argnums.")
        prog = import_program(fn, args, nums)
        if jax_staged.tracing(args, direction) or key is not None or report:
            return jax_staged.value_and_subgrad(prog, args, which, seed=seed, key=key,
                                                direction=direction, report=report)
        # any registered JAX pytree (a flax or equinox module, a dataclass) is handed to asd
        # as the list of its leaves and rebuilt around the traced leaves inside
        trees = [jax.tree_util.tree_structure(a) for a in args]
        flat = [[np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(a)] for a in args]

        def flat_fn(*lists):
            return prog.numpy_fn(*(jax.tree_util.tree_unflatten(t, list(leaves))
                                   for t, leaves in zip(trees, lists, strict=True)))

        def leaves_of(d):
            return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(d)]

        d = None
        if direction is not None:
            d = (leaves_of(direction) if isinstance(which, int)
                 else tuple(leaves_of(di) for di in direction))
        value, g = asd.value_and_subgrad(flat_fn, which, seed=seed, direction=d)(*flat)

        def rebuilt(i, gi):
            return jax.tree_util.tree_unflatten(
                trees[i], [jax.numpy.asarray(leaf) for leaf in gi])

        g = (rebuilt(nums[0], g) if isinstance(which, int)
             else tuple(rebuilt(i, gi) for i, gi in zip(nums, g, strict=True)))
        return jax.numpy.asarray(value), g

    return wrapped


def _direction_numbers(direction, argnums, layout):
    """A direction given in the arguments' structure, reduced to the differentiated leaves:
    picked by the arguments' flags when it has their structure, or its number leaves when
    it leaves the static ones out (``equinox.filter(model, equinox.is_array)``)."""
    def numbers(d, i):
        tree, flags = layout[i]
        leaves, d_tree = jax.tree_util.tree_flatten(d)
        if d_tree == tree:
            return [leaf for leaf, n in zip(leaves, flags, strict=True) if n]
        leaves = [leaf for leaf in leaves if isinstance(leaf, NUMBERS)]
        if len(leaves) != sum(flags):
            raise ArgumentError(
                f"the direction for argument {i} has {len(leaves)} number leaves, but the "
                f"argument has {sum(flags)} differentiated leaves: give it in the argument's "
                "own structure (jax.tree_util.tree_map over the argument).")
        return leaves

    nums = _argnum_tuple(argnums)
    return numbers(direction, nums[0]) if isinstance(argnums, int) else tuple(
        numbers(d, i) for d, i in zip(direction, nums, strict=True))


def subgrad(fn: Callable, argnums=0, *, seed=None, direction=None, key=None) -> Callable:
    """A Clarke subgradient of scalar ``fn``, as JAX arrays (see ``asd.jax``)."""
    vg = value_and_subgrad(fn, argnums, seed=seed, direction=direction, key=key)
    return lambda *args: vg(*args)[1]


def vjp(fn: Callable, argnums=0, *, seed=None, direction=None, key=None) -> Callable:
    """``(out, pullback)`` like ``jax.vjp``: ``pullback(ct)`` is ``Jᵀ ct`` for the limiting
    Jacobian along the direction, with respect to the arguments ``argnums`` (one tree each, a
    tuple for a tuple of argnums), for any output structure and as many cotangents as wanted.
    Staged (no host callback) inside a JAX transformation or with ``key=``; otherwise the
    exact eager sweep.

    >>> import jax, jax.numpy as jnp, asd.jax
    >>> out, pull = asd.jax.vjp(jax.nn.relu, direction=jnp.array([1.0, -1.0]))(jnp.zeros(2))
    >>> pull(jnp.ones(2))
    Array([1., 0.], dtype=float32)
    """

    def wrapped(*args):
        which = _checked_argnums(argnums, len(args))
        nums = _argnum_tuple(which)
        prog = import_program(fn, args, nums)
        if jax_staged.tracing(args, direction) or key is not None:
            return jax_staged.vjp(prog, args, which, seed=seed, key=key, direction=direction)
        trees = [jax.tree_util.tree_structure(a) for a in args]
        flat = [[np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(a)] for a in args]

        def flat_fn(*lists):
            return jax.tree_util.tree_leaves(
                prog.numpy_fn(*(jax.tree_util.tree_unflatten(t, list(leaves))
                                for t, leaves in zip(trees, lists, strict=True))),
                is_leaf=common.is_traced)

        d = None
        if direction is not None:
            d = ([np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(direction)]
                 if isinstance(which, int) else tuple(
                     [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(di)]
                     for di in direction))
        outs, pullback = asd.vjp(flat_fn, which, seed=seed, direction=d)(*flat)
        out = jax.tree_util.tree_unflatten(prog.out_tree, [jax.numpy.asarray(o) for o in outs])

        def pull(ct):
            cts = [np.asarray(c) for c in jax.tree_util.tree_leaves(ct)]
            g = pullback(cts)
            per_arg = [g] if isinstance(which, int) else list(g)
            rebuilt = tuple(jax.tree_util.tree_unflatten(
                trees[i], [jax.numpy.asarray(leaf) for leaf in gi])
                for i, gi in zip(nums, per_arg, strict=True))
            return rebuilt[0] if isinstance(which, int) else rebuilt

        return out, pull

    return wrapped
