"""``asd.tf.subgrad`` and ``value_and_subgrad``: asd's sweep of an imported TensorFlow program.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

import asd
from asd.errors import ArgumentError
from asd.frontends import common
from asd.frontends.tf.importer import _to_numpy, import_program


def _prepare(fn, tensors, argnums):
    """The program, the tensors as arrays, and ``argnums`` as positions of asd's sweep
    (``len(tensors)`` for the variables; ``-1`` is the last tensor, as in Python)."""
    n = len(tensors)
    nums = common.argnums_with_params(argnums, n)
    picked = (nums,) if isinstance(nums, int) else nums
    prog = import_program(fn, *tensors, live=tuple("params" if a == n else a for a in picked))
    if n in picked and not prog.param_names:
        raise ArgumentError("argnums='params' but the function reads no trainable variables")
    return prog, [_to_numpy(t) for t in tensors], nums


def _direction(direction):
    if direction is None:
        return None
    if isinstance(direction, dict):
        return {k: _to_numpy(v) for k, v in direction.items()}
    if isinstance(direction, list | tuple):
        return type(direction)(_direction(d) for d in direction)
    return _to_numpy(direction)


def _as_tf(g, dtype=None):
    if isinstance(g, dict):
        return {k: _as_tf(v, dtype) for k, v in g.items()}
    if isinstance(g, list | tuple):
        return type(g)(_as_tf(v, dtype) for v in g)
    a = np.asarray(g)
    return tf.constant(a if dtype is None else a.astype(dtype))


def value_and_subgrad(fn: Callable, *tensors, argnums=0, seed=None, direction=None):
    """``(value, subgradient)`` of a scalar TensorFlow function, both as TF tensors."""
    prog, arrays, nums = _prepare(fn, tensors, argnums)

    def f(*xs):
        return prog.numpy_fn(*xs[:-1], params=xs[-1])

    value, g = asd.value_and_subgrad(f, nums, seed=seed, direction=_direction(direction))(
        *arrays, prog.params())
    return _as_tf(value), _as_tf(g)


def subgrad(fn: Callable, *tensors, argnums=0, seed=None, direction=None):
    """A Clarke subgradient of scalar ``fn(*tensors)``, as TF tensors (see ``asd.tf``)."""
    return value_and_subgrad(fn, *tensors, argnums=argnums, seed=seed, direction=direction)[1]
