"""Functional item assignment: ``y = x.copy(); y[i] = v`` on traced arrays.

``y[key] = value`` records ``update(y, value)``, a new node whose entries at ``key`` come
from ``value`` (broadcast as numpy does) and the others from the old ``y``; the traced
array ``y`` then points at it. The map is linear in both inputs: the old tangent masked off
at the written entries plus the new tangent scattered into them. A traced boolean key that
is a comparison (``y[x > 0] = 0.0``) is ``where(x > 0, 0.0, y)``, with where's ties.
"""

from __future__ import annotations

import math

import numpy as np

from asd.errors import ArgumentTypeError, NotLipschitzError, UnsupportedError
from asd.extend import (
    Closure,
    Diagonal,
    FanIn,
    Primitive,
    comparison_of,
    deflinear,
    device,
    from_host,
    identity,
    is_host,
    is_traced,
    kernel,
    namespace,
    read_value,
    register_method,
    register_numpy,
    set_at,
)

from .piecewise import where


def _update_impl(old, new, index):
    if is_host(old) and is_host(new):
        out = np.array(old, copy=True)
        out[index] = new
        return out
    return _update_xp(old, new, index)[0]


class _Written:
    """Where an assignment writes, on another library's device: the written flat positions
    of the result (``at``, unique) and the flat entry of the new value each one reads
    (``src``), resolved on the host as numpy resolves the index (`_owners`)."""

    def __init__(self, like, old_shape: tuple, new_shape: tuple, index):
        owner = _owners(old_shape, new_shape, index)
        self.mask = owner >= 0
        self.at = from_host(np.flatnonzero(self.mask), like)
        self.src = from_host(owner[self.mask], like)
        self.old_shape, self.new_shape = old_shape, new_shape


def _update_xp(old, new, index):
    """``(result, _Written)`` on another library's arrays, written at unique flat positions
    (repeated positions: the last write wins, as the map has it)."""
    like = new if is_host(old) else old
    old, new = (from_host(np.asarray(a), like, "like") if is_host(a) else a for a in (old, new))
    xp = namespace(old)
    w = _Written(old, tuple(old.shape), tuple(new.shape), index)
    flat = xp.reshape(xp.asarray(old, copy=True), (-1,))
    values = xp.take(xp.reshape(new, (-1,)), w.src, axis=0)
    return xp.reshape(set_at(flat, w.at, values), w.old_shape), w


def _owners(shape: tuple, new_shape: tuple, index) -> np.ndarray:
    """For each flat entry of the result, the flat entry of ``new`` written there (-1: kept).

    Computed by running the same assignment on positions, so repeated indices resolve as
    numpy resolves them (the last write wins).
    """
    owner = np.full(shape, -1, dtype=np.intp)
    owner[index] = np.arange(int(np.prod(new_shape)), dtype=np.intp).reshape(new_shape)
    return owner.reshape(-1)


update_p = Primitive("update", _update_impl, array_api=True)


def _new_entries_xp(w: _Written) -> Closure:
    """The new value's tangent scattered into the written entries, on another library's
    arrays: a gather by ``src`` into the written flat positions; the pull scatter-adds back
    (a broadcast value collects every entry it was written to)."""
    xp = namespace(w.at)
    n_old, n_new = math.prod(w.old_shape), math.prod(w.new_shape)

    def push(t):
        lead = tuple(t.shape)[:t.ndim - len(w.new_shape)]
        flat = xp.reshape(t, lead + (n_new,))
        out = xp.zeros(lead + (n_old,), dtype=t.dtype, device=device(t))
        out = set_at(out, (..., w.at), xp.take(flat, w.src, axis=len(lead)))
        return xp.reshape(out, lead + w.old_shape)

    def pull(ct):
        lead = tuple(ct.shape)[:ct.ndim - len(w.old_shape)]
        picked = xp.take(xp.reshape(ct, lead + (n_old,)), w.at, axis=len(lead))
        moved = xp.moveaxis(picked, -1, 0) if lead else picked
        g = xp.zeros((n_new,) + lead, dtype=ct.dtype, device=device(ct))
        g = kernel("scatter_add", xp)(g, w.src, moved)
        return xp.reshape(xp.moveaxis(g, 0, -1) if lead else g, lead + w.new_shape)

    return Closure(push, pull, w.new_shape, w.old_shape)


@update_p.defrule
def update_rule(xs, dxs, index):
    if not (is_host(xs[0]) and is_host(xs[1])):
        ans, w = _update_xp(xs[0], xs[1], index)
        keep = Diagonal(from_host(~w.mask.reshape(w.old_shape), ans), w.old_shape)
        return ans, FanIn(keep, _new_entries_xp(w))
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


def _complex(value) -> bool:
    """Whether an assigned value holds complex numbers (a list or tuple: any entry)."""
    if isinstance(value, list | tuple):
        return any(_complex(v) for v in value)
    if isinstance(value, complex):
        return True
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", None)
    return kind == "c" if kind is not None else bool(getattr(dtype, "is_complex", False))


def setitem(y, key, value):
    """``y[key] = value`` as a new value (see the module docstring); returns it."""
    if _complex(value) and not _complex(y):
        raise ArgumentTypeError(
            f"y[...] = {value!r:.40}: a complex value written into the real traced array "
            f"%{y._id} would lose its imaginary part (numpy drops it with a ComplexWarning "
            "or refuses). Write the real part explicitly (y[...] = np.real(v)), or keep "
            "real and imaginary parts as two real arrays.")
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


copy_p = deflinear("copy", lambda x, order="K": np.array(x, copy=True, order=order),
                   lambda i, o, order="K": identity(i))


def copy(a, order="K", subok=False):
    """``numpy.copy`` and ``.copy()``: the same values in a new array to assign into, in
    numpy's memory order (a later reduction over it rounds in that order, as numpy's does)."""
    return copy_p(a, order=order) if is_traced(a) else np.copy(a, order=order, subok=subok)


register_method("setitem", setitem)
# ndarray.copy() is C-ordered by default, np.copy keeps the layout ('K')
register_method("copy", lambda x, order="C": copy_p(x, order=order))
register_numpy(np.copy, copy)

__all__ = ["copy", "setitem"]
