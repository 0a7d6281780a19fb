"""``asd.tf.function``: a ``tf.custom_gradient`` whose gradient is asd's subgradient.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

import asd
from asd.errors import ArgumentTypeError, UnsupportedError
from asd.frontends import common
from asd.frontends.tf.importer import _shape, _tf_variable, _to_numpy, import_program

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

    def scalarized(*xs):
        out = prog.numpy_fn(*xs[:-1], params=xs[-1])
        total = 0.0
        for o, c in zip(tf.nest.flatten(out), cts_np, strict=True):
            if c is not None:
                total = total + (o * c).sum()
        return total

    grads_in: list = [np.zeros_like(a) for a in arrays]
    grads_vars: list = [None] * len(var_names)
    if nums:
        g = asd.subgrad(scalarized, nums, seed=seed)(*arrays, prog.params())
        for i, gi in zip(nums, g, strict=True):
            if i == len(arrays):
                grads_vars = [None if n is None else gi[n] for n in var_names]
            else:
                grads_in[i] = np.asarray(gi, dtype=arrays[i].dtype)
    return grads_in, grads_vars


def _drop_in(fn: Callable, seed, inputs: list):
    """``fn(*inputs)`` as a ``tf.custom_gradient`` whose gradient is `_vjp` on the host."""

    @tf.custom_gradient
    def inner(*xs):
        out = fn(*xs)

        def grad(*cts, variables=None):
            variables = list(variables or [])
            handles = [id(_tf_variable(v).handle) for v in variables]
            flat_in = list(xs)
            dtypes = [x.dtype for x in flat_in] + [v.dtype for v in variables]

            def host(*flat):
                n = len(flat_in)
                gi, gv = _vjp(fn, seed, list(flat[:n]), list(flat[n:]), handles)
                return [np.asarray(a, dtype=d.as_numpy_dtype) for a, d in zip(
                    gi + [np.zeros(v.shape) if g is None else g
                          for g, v in zip(gv, variables, strict=True)],
                    dtypes, strict=True)]

            results = _first_order_only(tf.py_function(host, flat_in + list(cts), dtypes), fn,
                                        variables)
            in_reached, var_reached = _gradient_reaches(fn, flat_in, variables)
            grads_in = [r if x.dtype.is_floating and reached else None for x, r, reached in
                        zip(flat_in, results[:len(flat_in)], in_reached, strict=True)]
            grads_vars = [r if reached else None for r, reached in
                          zip(results[len(flat_in):], var_reached, strict=True)]
            return (grads_in, grads_vars) if variables else grads_in

        return out, grad

    return inner(*inputs)


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
