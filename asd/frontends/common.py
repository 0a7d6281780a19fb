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
from asd.core.primitive import Traced
from asd.errors import UnsupportedError


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
