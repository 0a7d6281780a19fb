"""``asd.jax.function``: a JAX function as a ``jax.custom_vjp`` whose reverse rule is asd's
vector-limiting-Jacobian product."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax.extend import core as jcore

import asd
from asd.errors import (
    UnsupportedError,
)
from asd.frontends import common
from asd.frontends.jax import staged as jax_staged
from asd.frontends.jax.importer import JaxProgram, _inexact, _spec, import_program


def custom_vjp(prog: JaxProgram, seed) -> Callable:
    """The primal evaluates the program's jaxpr (what ``fn`` computes, traced once), and the
    reverse rule differentiates that same program: forward and backward cannot disagree."""
    flat_fn = jcore.jaxpr_as_fun(prog.closed)

    @jax.custom_vjp
    def wrapped(*args):
        return jax.tree_util.tree_unflatten(prog.out_tree,
                                            flat_fn(*jax.tree_util.tree_leaves(args)))

    def fwd(*args):
        return wrapped(*args), args

    def bwd(args, ct):
        arg_tree = jax.tree_util.tree_structure(args)
        flat_args = jax.tree_util.tree_leaves(args)
        flat_ct = jax.tree_util.tree_leaves(ct)
        floats = [i for i, a in enumerate(flat_args) if _inexact(a)]

        def host(*flat):
            leaves = [np.asarray(a) for a in flat[:len(flat_args)]]
            cts = [np.asarray(c) for c in flat[len(flat_args):]]
            pulled = [i for i, c in enumerate(cts) if c.dtype != jax.dtypes.float0]

            def outputs(*xs):
                outs = jax.tree_util.tree_leaves(
                    prog.numpy_fn(*jax.tree_util.tree_unflatten(arg_tree, list(xs))),
                    is_leaf=common.is_traced)
                return tuple(outs[i] for i in pulled)

            # the pullback of the outputs, not the gradient of <ct, outputs>: with the
            # cotangent as constants a zero one would hide an output's jump (0 * a jump is
            # constant), and the caller's chain rule would get 0 from a program that is not
            # Lipschitz. asd.vjp refuses any output's jump, as numpy's and torch's do.
            _, pullback = asd.vjp(outputs, tuple(floats), seed=seed)(*leaves)
            g = pullback(tuple(cts[i] for i in pulled))
            return tuple(jax.numpy.asarray(np.asarray(gi, dtype=leaves[i].dtype).reshape(
                leaves[i].shape)) for gi, i in zip(g, floats, strict=True))

        def staged_pull(*flat):
            rebuilt = jax.tree_util.tree_unflatten(arg_tree, list(flat[:len(flat_args)]))
            active = [i in floats for i in range(len(flat_args))]
            return tuple(jax_staged.vjp_leaves(prog, rebuilt, active, flat[len(flat_args):],
                                               seed=seed))

        grads = [np.zeros(np.shape(a), jax.dtypes.float0) for a in flat_args]
        if floats:
            # under jit or vmap: staged, on the device; on concrete values (an eager
            # jax.grad): the exact sweep, run directly. Neither is a host callback; only a
            # program with a rule that cannot stage yet (sort, pooling, projections) runs
            # the exact sweep on the host through jax.pure_callback, as before.
            pull = staged_pull if jax_staged.tracing(args, ct) else host
            try:
                out = _first_order_only(pull, prog.fn)(*flat_args, *flat_ct)
            except jax_staged.NOT_STAGED:
                shapes = tuple(_spec(flat_args[i]) for i in floats)
                out = _first_order_only(lambda *flat: jax.pure_callback(host, shapes, *flat),
                                        prog.fn)(*flat_args, *flat_ct)
            for i, gi in zip(floats, out, strict=True):
                grads[i] = gi
        return jax.tree_util.tree_unflatten(arg_tree, grads)

    wrapped.defvjp(fwd, bwd)
    return wrapped


def _holds_arrays(value) -> bool:
    """A keyword argument that is an input of the drop-in (arrays or tracers in it)."""
    return any(isinstance(leaf, jax.Array | np.ndarray)
               for leaf in jax.tree_util.tree_leaves(value))


def _first_order_only(pull: Callable, fn: Callable) -> Callable:
    """The reverse rule's computation, refusing to be differentiated: a limiting gradient
    has no derivative at a kink, and JAX would otherwise differentiate the linearizations
    the sweep selected. asd gives first derivatives only."""
    label = getattr(fn, "__qualname__", type(fn).__qualname__)

    @jax.custom_jvp
    def call(*flat):
        return pull(*flat)

    @call.defjvp
    def call_jvp(primals, tangents):
        raise UnsupportedError(
            f"a gradient computed through asd.jax.function({label}) is being differentiated "
            "again (jax.grad of a gradient, as a gradient penalty takes). asd gives first "
            "derivatives only (a limiting gradient has no derivative at a kink): compute the "
            "term that differentiates a gradient with the function itself, and the rest "
            "through asd.jax.function.")

    return call


# ----- the drop-in custom_vjp -----

def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with asd's vector-Jacobian product as its JAX reverse rule.

    Each call imports (or finds in the cache) the program of ``fn`` as it is now and runs it as
    a ``jax.custom_vjp`` whose forward is that program and whose backward differentiates the
    same program: on concrete values by the exact eager sweep, inside ``jit``/``vmap`` by the
    staged sweep (`asd.frontends.jax.staged`), with no host callback either way. Integer
    arguments (labels) get zero cotangents (``float0``), as JAX expects. Keyword arguments
    holding arrays are inputs too; the others are fixed, like ``jit``'s static arguments. The
    reverse rule is a first derivative: ``jax.grad`` of it raises `asd.UnsupportedError`.
    """

    callers: dict[tuple, Callable] = {}

    def wrapped(*args, **kwargs):
        if not kwargs:
            return import_program(fn, args).with_vjp(seed)(*args)
        caller, inputs = common.positional(fn, args, kwargs, callers, _holds_arrays)
        return import_program(caller, inputs).with_vjp(seed)(*inputs)

    wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapped.__doc__ = f"{wrapped.__name__} with asd's subgradient as its reverse rule."
    return wrapped
