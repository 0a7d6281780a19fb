"""``asd.tf.function``: a ``tf.custom_gradient`` whose gradient is asd's subgradient.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record

import asd
from asd.errors import ArgumentTypeError, UnsupportedError
from asd.frontends import common
from asd.frontends.tf import native
from asd.frontends.tf.importer import (
    Guard,
    _identity,
    _shape,
    _signature,
    _tf_variable,
    _to_numpy,
    import_program,
)

# ----- the drop-in custom gradient -----

def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with TensorFlow's gradient replaced by asd's (see ``asd.tf.function``).

    The gradient runs on the host (``tf.py_function``), so it also works inside a
    ``tf.function``-compiled training step. Keyword arguments holding tensors are inputs
    too; the others (``training=False``) are fixed, like ``tf.function``'s Python arguments.
    The gradient is a first derivative: differentiating it again (an outer tape over a
    gradient penalty) raises `asd.UnsupportedError`.
    """
    callers: dict[tuple, Callable] = {}

    def wrapped(*inputs, **kwargs):
        target = fn
        if kwargs:
            target, inputs = common.positional(fn, inputs, kwargs, callers, _is_tensor_input)
        return _drop_in(target, seed, [tf.convert_to_tensor(t) for t in inputs])

    wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapped.__doc__ = f"{wrapped.__name__} with asd's subgradient as its gradient."
    return wrapped


def _is_tensor_input(value) -> bool:
    """A keyword argument that is an input of the drop-in: a tensor, variable or array. A
    container holding them is refused (it would be captured as a constant, with no
    gradient)."""
    if isinstance(value, tf.Tensor | tf.Variable | np.ndarray):
        return True
    if any(isinstance(v, tf.Tensor | tf.Variable | np.ndarray) for v in tf.nest.flatten(value)):
        raise ArgumentTypeError(
            f"a keyword argument holding tensors in a {type(value).__name__}: asd.tf.function "
            "takes tensors as keyword arguments one by one (each is an input with a "
            "gradient); a tensor inside a container would be fixed at trace time.")
    return False


def _vjp(fn: Callable, seed, inputs, cts, var_handles):
    """The incoming gradient pulled back through asd's sweep of ``fn``'s program, on the
    host: the inputs' gradients and the variables' (None for those ``fn`` does not own)."""
    prog = import_program(fn, *inputs)
    arrays = [_to_numpy(t) for t in inputs]
    cts_np = [None if c is None else _to_numpy(c) for c in cts]
    wants = [i for i, a in enumerate(arrays) if np.issubdtype(a.dtype, np.floating)]
    by_handle = {id(v.variable.handle): v.name for v in prog.variables.values()
                 if v.trainable}
    var_names = [by_handle.get(h) for h in var_handles]
    nums = tuple(wants) + ((len(arrays),) if any(var_names) else ())

    pulled = [i for i, c in enumerate(cts_np) if c is not None]

    def outputs(*xs):
        outs = tf.nest.flatten(prog.numpy_fn(*xs[:-1], params=xs[-1]))
        return tuple(outs[i] for i in pulled)

    grads_in: list = [np.zeros_like(a) for a in arrays]
    grads_vars: list = [None] * len(var_names)
    if nums:
        # the pullback of the outputs, not the gradient of <ct, outputs>: a zero cotangent
        # taken as a constant would hide an output's jump (0 * a jump is constant)
        _, pullback = asd.vjp(outputs, nums, seed=seed)(*arrays, prog.params())
        g = pullback(tuple(cts_np[i] for i in pulled))
        for i, gi in zip(nums, g, strict=True):
            if i == len(arrays):
                grads_vars = [None if n is None else gi[n] for n in var_names]
            else:
                grads_in[i] = np.asarray(gi, dtype=arrays[i].dtype)
    return grads_in, grads_vars


@tf.autograph.experimental.do_not_convert
def _drop_in(fn: Callable, seed, inputs: list):
    """``fn(*inputs)`` as a ``tf.custom_gradient``: TensorFlow's own gradient where no tie
    matters (`asd.frontends.tf.native`), else `_vjp` on the host. Eagerly the flag is read
    once per call (in the forward); under ``tf.function`` both gradients are graph branches of
    one ``tf.cond`` on it, so a compiled step traces once and runs without Python. Never
    converted by autograph (as the importer traces ``fn``: Python control flow stays Python)."""
    eager = tf.executing_eagerly()
    concrete = _native_function(fn, inputs) if eager and _settings().NATIVE_BACKWARD else None
    graph_native = not eager and _settings().NATIVE_BACKWARD

    @tf.custom_gradient
    def inner(*xs):
        state: dict = {"native": False}
        if concrete is not None:
            with tf.GradientTape(persistent=True, watch_accessed_variables=True) as tape:
                tape.watch([x for x in xs if x.dtype.is_floating])
                out, tied = concrete(*xs)
            state.update(native=not bool(tied), tape=tape)       # the one host read
            PATHS["native" if state["native"] else "asd"] += 1
        elif graph_native:
            with tf.GradientTape(persistent=True, watch_accessed_variables=True) as tape:
                tape.watch([x for x in xs if x.dtype.is_floating])
                try:
                    out, tied = native.instrumented(fn, xs)
                    state.update(native=True, tape=tape, tied=tied)
                except native.NotNative:
                    out = fn(*xs)
        else:
            out = fn(*xs)

        def grad(*cts, variables=None):
            variables = list(variables or [])
            flat_in = list(xs)
            flat_out = [o for o in tf.nest.flatten(out, expand_composites=True)]
            cts = [tf.zeros_like(o) if c is None else c
                   for c, o in zip(cts, flat_out, strict=True)]
            if eager and state["native"]:
                return _native_gradients(state["tape"], flat_out, cts, flat_in, variables, fn)
            results = lambda: _host_gradients(fn, seed, flat_in, cts, variables)  # noqa: E731
            if "tied" in state:
                results = _either(state["tape"], state["tied"], results, flat_out, cts,
                                  flat_in, variables)
            else:
                results = results()
            results = _first_order_only(results, fn, variables)
            in_reached, var_reached = _gradient_reaches(fn, flat_in, variables)
            grads_in = [r if x.dtype.is_floating and reached else None for x, r, reached in
                        zip(flat_in, results[:len(flat_in)], in_reached, strict=True)]
            grads_vars = [r if reached else None for r, reached in
                          zip(results[len(flat_in):], var_reached, strict=True)]
            return (grads_in, grads_vars) if variables else grads_in

        return out, grad

    return inner(*inputs)


PATHS = {"native": 0, "asd": 0}
"""How many eager calls took TensorFlow's gradient and how many asd's (tests read it)."""


def _settings():
    """The package (``asd.tf.NATIVE_BACKWARD``), read at call time."""
    return sys.modules[__package__]


_NATIVE: dict[tuple, Any] = {}
_GUARDED: dict[tuple, tuple] = {}
"""Per function and signature: the `Guard` of the last walk, its result, and the function."""


def _native_function(fn: Callable, inputs: list):
    """``fn`` instrumented (`native.instrumented`) as a concrete ``tf.function`` for these
    inputs' signature, cached like imported programs (under what the trace can capture, so a
    changed closure value or attribute retraces; the walk is paid only when the `Guard` of the
    last one fails); None for a program with no native form."""
    head = (_identity(fn), _signature(inputs))
    last = _GUARDED.get(head)
    if last is not None and last[0].holds():
        return last[1]
    guard = Guard(fn)
    key = (*head, guard.fingerprint)
    if key not in _NATIVE:
        if len(_NATIVE) > 64:
            _NATIVE.clear()
        specs = [tf.TensorSpec(x.shape, x.dtype) for x in inputs]
        try:
            _NATIVE[key] = tf.function(lambda *xs: native.instrumented(fn, xs),
                                       autograph=False).get_concrete_function(*specs)
        except native.NotNative as e:
            _NATIVE[key] = str(e)
    found = _NATIVE[key] if not isinstance(_NATIVE[key], str) else None
    if len(_GUARDED) > 64:
        _GUARDED.clear()
    _GUARDED[head] = (Guard(fn), found, fn)   # after the trace: a lazily built model
    return found


def _native_gradients(tape, flat_out, cts, flat_in, variables, fn):
    """TensorFlow's gradient of the native forward (None where it does not reach, as on the
    tape), marked first order only."""
    sources = [x if x.dtype.is_floating else tf.zeros(()) for x in flat_in] + variables
    grads = tape.gradient(flat_out, sources, output_gradients=cts)
    grads = [None if not x.dtype.is_floating else g for x, g in zip(
        flat_in, grads[:len(flat_in)], strict=True)] + list(grads[len(flat_in):])
    if record.could_possibly_record():     # a tape that could differentiate them again
        present = [i for i, g in enumerate(grads) if g is not None]
        marked = _first_order_only([grads[i] for i in present], fn, variables)
        for i, g in zip(present, marked, strict=True):
            grads[i] = g
    grads_in, grads_vars = grads[:len(flat_in)], grads[len(flat_in):]
    return (grads_in, grads_vars) if variables else grads_in


def _either(tape, tied, host: Callable, flat_out, cts, flat_in, variables) -> list:
    """Under ``tf.function``: asd's gradients where ``tied``, TensorFlow's otherwise (both
    dense: zeros where a gradient does not reach; the caller masks those to None)."""
    sources = [x if x.dtype.is_floating else tf.zeros(()) for x in flat_in] + variables
    grads = tape.gradient(flat_out, sources, output_gradients=cts,
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    dtypes = [x.dtype for x in flat_in] + [v.dtype for v in variables]
    shapes = [x.shape for x in flat_in] + [v.shape for v in variables]
    theirs = [tf.zeros_like(x) if not x.dtype.is_floating else tf.convert_to_tensor(g)
              for x, g in zip(flat_in, grads[:len(flat_in)], strict=True)]
    theirs += [tf.convert_to_tensor(g) for g in grads[len(flat_in):]]
    theirs = [tf.cast(g, d) for g, d in zip(theirs, dtypes, strict=True)]
    out = tf.cond(tied, lambda: list(host()), lambda: theirs)
    out = out if isinstance(out, list | tuple) else [out]
    for o, shape in zip(out, shapes, strict=True):
        o.set_shape(shape)
    return list(out)


def _host_gradients(fn: Callable, seed, flat_in: list, cts: list, variables: list) -> list:
    """asd's gradients, computed on the host (``tf.py_function``): one per input and variable
    (zeros for those ``fn`` does not own)."""
    handles = [id(_tf_variable(v).handle) for v in variables]
    dtypes = [x.dtype for x in flat_in] + [v.dtype for v in variables]

    def host(*flat):
        n = len(flat_in)
        gi, gv = _vjp(fn, seed, list(flat[:n]), list(flat[n:]), handles)
        return [np.asarray(a, dtype=d.as_numpy_dtype) for a, d in zip(
            gi + [np.zeros(v.shape) if g is None else g
                  for g, v in zip(gv, variables, strict=True)],
            dtypes, strict=True)]

    return tf.py_function(host, flat_in + list(cts), dtypes)


def _gradient_reaches(fn: Callable, inputs: list, variables: list) -> tuple[list, list]:
    """Which inputs and variables a gradient of ``fn``'s outputs reaches (the others get
    None, as from the tape: an optimizer then leaves a variable read only behind
    ``tf.stop_gradient`` alone). The program is imported outside any graph being built, at
    inputs of the same shapes; with a shape unknown there, everything counts as reached."""
    shapes = [_shape(x) for x in inputs]
    if any(d is None for shape in shapes for d in shape):
        return [True] * len(inputs), [True] * len(variables)
    with tf.init_scope():
        prog = import_program(fn, *(tf.zeros(shape, x.dtype) for shape, x in
                                    zip(shapes, inputs, strict=True)))
    by_handle = {id(v.variable.handle): v.name for v in prog.variables.values()}
    return prog.reached_inputs, [by_handle.get(id(_tf_variable(v).handle)) in
                                 prog.reached_variables for v in variables]


def _first_order_only(results: list, fn: Callable, variables: list) -> list:
    """The gradients, unchanged, with a gradient that refuses: asd gives first derivatives
    only, and ``tf.py_function``'s own gradient would make a gradient penalty through the
    drop-in silently contribute nothing. The variables' values are inputs of the mark: the
    host reads them, so without it an outer tape would see no path from them to the
    gradients (a gradient penalty's parameter gradient would silently miss its term)."""
    label = getattr(fn, "__qualname__", type(fn).__qualname__)
    n = len(results)

    @tf.custom_gradient
    def mark(*grads_and_variables):
        grads = grads_and_variables[:n]

        def refuse(*cts, variables=None):
            raise UnsupportedError(
                f"a gradient computed through asd.tf.function({label}) is being "
                "differentiated again (an outer GradientTape over a gradient penalty, a "
                "Hessian-vector product). asd gives first derivatives only (a limiting "
                "gradient has no derivative at a kink): compute the term that differentiates "
                "a gradient with the model itself, and the rest of the loss through "
                "asd.tf.function.")

        return [tf.identity(g) for g in grads], refuse

    return list(mark(*results, *(tf.convert_to_tensor(v) for v in variables)))
