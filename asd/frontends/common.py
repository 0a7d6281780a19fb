"""What every front end needs when it maps a framework's operations onto asd's library.

The handlers of the PyTorch, JAX and TensorFlow importers meet the same three kinds of
values (traced arrays, the framework's constants, numpy arrays) and call the library by its
documented names; these helpers keep that in one place.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import asd
from asd.core import backend
from asd.core.arguments import check_argnums
from asd.core.primitive import Traced
from asd.errors import ArgumentError, ArgumentTypeError, UnsupportedError


def library_function(name: str, needed_by: str) -> Callable:
    """``asd.<name>`` (``asd.softmax``...), or an error naming what needed it."""
    fn = getattr(asd, name, None)
    if fn is None:
        raise UnsupportedError(f"asd.{name} is not available in this build of asd's library, "
                               f"so the {needed_by} that needs it cannot be imported")
    return fn


def is_traced(x) -> bool:
    return isinstance(x, Traced)


def numpy_value(x) -> np.ndarray:
    """The numbers of a possibly traced value, on the host (for discrete things: indices,
    shapes, tested conditions)."""
    return backend.to_host(getattr(x, "value", x))


def zeros(shape, like) -> np.ndarray:
    """Zeros of ``shape`` in ``like``'s floating dtype (read from its dtype, not copied)."""
    return np.zeros(tuple(int(s) for s in shape),
                    np.result_type(backend.numpy_dtype(like), np.float32))


def broadcast(x, shape):
    """``x`` broadcast to ``shape`` in its own dtype: a float by adding `zeros` (one
    primitive the sweep already knows), a condition or an index as it is (adding float
    zeros would make a boolean mask a float array, which ``where`` cannot read)."""
    shape = tuple(int(s) for s in shape)
    if np.issubdtype(backend.numpy_dtype(x), np.inexact):
        return x + zeros(shape, x)
    return np.broadcast_to(x, shape)


def argnums_with_params(argnums, n: int) -> int | tuple:
    """``argnums`` over ``n`` tensors as the positions of asd's sweep, whose argument ``n``
    is the parameters' dict (the PyTorch and TensorFlow front ends): an index counts as in
    Python (``-1`` is the last tensor, never the parameters), ``'params'`` is ``n``. Out of
    range or repeated: asd's `ArgumentError`, as `asd.subgrad` raises it."""
    if isinstance(argnums, str):
        if argnums != "params":
            raise ArgumentTypeError(f"argnums={argnums!r}: the only name argnums takes is "
                                    "'params' (the parameters the function reaches)")
        return n
    items = tuple(argnums) if isinstance(argnums, tuple | list) else None
    indices = argnums if items is None else tuple(a for a in items if not isinstance(a, str))
    checked: tuple = ()
    if items is None or indices:
        _, checked = check_argnums(indices, n)
        checked = tuple(a % n for a in checked)
        if items is None:
            return checked[0]
    out, it = [], iter(checked)
    for a in items:
        out.append(argnums_with_params(a, n) if isinstance(a, str) else next(it))
    if out.count(n) > 1:
        raise ArgumentError(f"argnums={argnums!r} names 'params' twice; list it once.")
    return tuple(out)


def positional(fn: Callable, args: tuple, kwargs: dict, callers: dict,
               is_input: Callable) -> tuple[Callable, tuple]:
    """``fn`` called with keyword arguments, as a function of positional ones (for drop-ins
    whose framework wrapper takes positional inputs only): keywords ``is_input`` accepts
    (arrays, tensors) follow ``args`` as inputs, in name order; the others
    (``training=False``, a rate) are fixed in the caller, as ``jit``'s static arguments are.
    One caller per layout and static values, kept in ``callers`` so that the program cache
    sees the same function again."""
    names = tuple(sorted(k for k, v in kwargs.items() if is_input(v)))
    static = {k: v for k, v in kwargs.items() if k not in names}
    key = (len(args), names, repr(sorted(static.items())))
    caller = callers.get(key)
    if caller is None:
        n = len(args)

        def caller(*inputs):
            return fn(*inputs[:n], **dict(zip(names, inputs[n:], strict=True)), **static)

        caller.__name__ = getattr(fn, "__name__", type(fn).__name__)
        if len(callers) >= 64:
            callers.pop(next(iter(callers)))
        callers[key] = caller
    return caller, (*args, *(kwargs[k] for k in names))
