"""Functional item assignment: ``y = x.copy(); y[i] = v`` on traced arrays.

``y[key] = value`` records ``update(y, value)``, a new node whose entries at ``key`` come
from ``value`` (broadcast as numpy does) and the others from the old ``y``; the traced
array ``y`` then points at it. The map is linear in both inputs: the old tangent masked off
at the written entries plus the new tangent scattered into them. A traced boolean key that
is a comparison (``y[x > 0] = 0.0``) is ``where(x > 0, 0.0, y)``, with where's ties.
"""

from __future__ import annotations

import numpy as np

from asd.errors import NotLipschitzError, UnsupportedError
from asd.extend import (
    Closure,
    Diagonal,
    FanIn,
    Primitive,
    comparison_of,
    deflinear,
    identity,
    is_traced,
    read_value,
    register_method,
    register_numpy,
)

from .piecewise import where


def _update_impl(old, new, index):
    out = np.array(old, copy=True)
    out[index] = new
    return out


def _owners(shape: tuple, new_shape: tuple, index) -> np.ndarray:
    """For each flat entry of the result, the flat entry of ``new`` written there (-1: kept).

    Computed by running the same assignment on positions, so repeated indices resolve as
    numpy resolves them (the last write wins).
    """
    owner = np.full(shape, -1, dtype=np.intp)
    owner[index] = np.arange(int(np.prod(new_shape)), dtype=np.intp).reshape(new_shape)
    return owner.reshape(-1)


update_p = Primitive("update", _update_impl)


@update_p.defrule
def update_rule(xs, dxs, index):
    old, new = np.asarray(xs[0]), np.asarray(xs[1])
    ans = _update_impl(old, new, index)
    owner = _owners(old.shape, new.shape, index)
    written = owner >= 0
    src = owner[written]
    n_new = new.size

    def update_push(t):
        lead = t.shape[: t.ndim - new.ndim]
        flat = t.reshape(lead + (n_new,))
        out = np.zeros(lead + (old.size,), flat.dtype)
        out[..., written] = flat[..., src]
        return out.reshape(lead + old.shape)

    def update_pull(ct):
        lead = ct.shape[: ct.ndim - old.ndim]
        flat = ct.reshape((-1, old.size))
        g = np.zeros((flat.shape[0], n_new), flat.dtype)
        np.add.at(g, (slice(None), src), flat[:, written])
        return g.reshape(lead + new.shape)

    keep = Diagonal(~written.reshape(old.shape), old.shape)
    return ans, FanIn(keep, Closure(update_push, update_pull, new.shape, old.shape))


def setitem(y, key, value):
    """``y[key] = value`` as a new value (see the module docstring); returns it."""
    if isinstance(key, tuple) and len(key) == 1:
        key = key[0]
    if is_traced(key):
        cmp = comparison_of(key)
        if key._trace.nodes[key._id].name == "stop_gradient":
            key = read_value(key, np.asarray)  # constant positions, re-read by a replay
        elif cmp is not None and np.ndim(value) == 0 and np.shape(key) == np.shape(y):
            return where(key, value, y)
        elif cmp is not None:
            raise UnsupportedError(
                "y[mask] = value with a traced mask needs a scalar value and a mask shaped "
                "like y (then it is where(mask, value, y)); write asd.numpy.where(mask, "
                "values, y) with values shaped like y")
        else:
            raise NotLipschitzError(
                f"item assignment with the traced key %{key._id} "
                f"({key._trace.nodes[key._id].name}): the positions written are a discrete "
                "function of the input, so the result jumps where they change. Use "
                "asd.numpy.where(cond, value, y), or asd.stop_gradient(key) if the key is "
                "constant by intent.")
    if isinstance(key, list):
        key = np.asarray(key)
    elif isinstance(key, tuple):
        key = tuple(np.asarray(k) if isinstance(k, list) else k for k in key)
    return update_p(y, value, index=key)


copy_p = deflinear("copy", lambda x: np.array(x, copy=True), lambda i, o: identity(i))


def copy(a, order="K", subok=False):
    """``numpy.copy`` and ``.copy()``: the same values in a new array to assign into."""
    return copy_p(a) if is_traced(a) else np.copy(a, order=order, subok=subok)


register_method("setitem", setitem)
register_method("copy", lambda x, order="K": copy_p(x))
register_numpy(np.copy, copy)

__all__ = ["copy", "setitem"]
