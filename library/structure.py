"""Structure: functions that move, copy, split and assemble entries (flip, roll, tile, tril,
split, kron, linspace, gradient, cumprod...), and arrays built from traced values.

Every function that only selects entries is the gather ``a.flat[positions]``, and numpy's own
function computes the positions: it is applied to ``arange(a.size)`` reshaped like ``a``, so
the result matches numpy's layout by construction, whatever the options (``axis``,
``shift``, ``k``...). Entries a function fills with zeros (``tril``, ``diag`` of a vector)
point at one zero appended to the flattened input. The gather's rule is the indexing rule,
exact and tie-free, and its transpose scatter-adds, so repeated entries (``tile``,
``repeat``) accumulate their cotangents. The rest are compositions of primitives whose
rules already decide every kink (``cumprod`` is a product, ``cross`` and ``kron``
products of entries, ``gradient`` and ``linspace`` linear with constant weights).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from asd.errors import ArgumentTypeError, UnsupportedError
from asd.extend import (
    ALTERNATIVES,
    Closure,
    Primitive,
    is_traced,
    numpy_dtype,
    qualified_name,
    register_numpy,
    register_ufunc_at,
    unsupported,
)

from . import smooth
from .order import sort
from .piecewise import where

# ----- selections: numpy's own function applied to entry positions -----


def _positions(a) -> np.ndarray:
    shape = smooth.shape_of(a)
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.intp).reshape(shape)


def _inexact_dtype(a) -> np.dtype:
    dtype = numpy_dtype(a)
    return dtype if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)


def take_flat(a, positions, fill=0.0):
    """``a.flat[positions]`` for constant integer ``positions``, where ``-1`` reads ``fill``
    (a zero that ``tril`` keeps, a gather's out-of-bounds value): one indexing node, linear,
    whose pull scatter-adds. The importers build gathers and spread grids with it.

    >>> import numpy as np, asd
    >>> asd.take_flat(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([3, -1, 0]))
    array([4., 0., 1.])
    """
    positions = np.asarray(positions, dtype=np.intp)
    flat = smooth.ravel(a)
    if positions.size and positions.min() < 0:
        size = int(np.prod(smooth.shape_of(a), dtype=np.int64))
        flat = smooth.concatenate([flat, np.full(1, fill, dtype=_inexact_dtype(a))])
        positions = np.where(positions < 0, size, positions)
    return smooth.getitem(flat, positions)


def _selection(numpy_fn: Callable, doc: str, *, pieces: bool = False) -> Callable:
    """The asd version of a numpy function that only rearranges or copies entries (or, with
    ``pieces``, splits them into a list of arrays: one gather per piece)."""

    def selection(a, *args, **kwargs):
        positions = numpy_fn(_positions(a), *args, **kwargs)
        return [take_flat(a, p) for p in positions] if pieces else take_flat(a, positions)

    selection.__name__ = selection.__qualname__ = numpy_fn.__name__
    selection.__doc__ = doc
    return selection


flip = _selection(np.flip, "``numpy.flip``: a gather of the reversed positions.")
flipud = _selection(np.flipud, "``numpy.flipud``: a gather.")
fliplr = _selection(np.fliplr, "``numpy.fliplr``: a gather.")
rot90 = _selection(np.rot90, "``numpy.rot90``: a gather of the rotated positions.")
roll = _selection(np.roll, "``numpy.roll``: a gather of the rolled positions (constant shift).")
rollaxis = _selection(np.rollaxis, "``numpy.rollaxis``: a gather of the moved axes' positions.")
fftshift = _selection(np.fft.fftshift, "``numpy.fft.fftshift``: a roll, so a gather.")
ifftshift = _selection(np.fft.ifftshift, "``numpy.fft.ifftshift``: a roll, so a gather.")


def _constant_ints(name: str, what: str, value):
    if is_traced(value):
        raise ArgumentTypeError(f"numpy.{name} with a traced {what}: the output's shape would "
                                "depend on the input's values. Pass plain integers.")
    return value


def repeat(a, repeats, axis=None):
    """``numpy.repeat``: a gather; the repeated entries' cotangents add up.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.repeat(x, [1, 3]).sum())(np.ones(2))
    array([1., 3.])
    """
    _constant_ints("repeat", "repeats", repeats)
    return take_flat(a, np.repeat(_positions(a), repeats, axis=axis))


def _constant_condition(name: str, condition):
    if is_traced(condition):
        raise ArgumentTypeError(
            f"numpy.{name} with a traced condition: the output's shape would depend on the "
            "input's values. Keep the shape fixed: np.where(condition, a, 0.0) zeroes the "
            "entries it would drop.")
    return condition


def compress(condition, a, axis=None, out=None):
    """``numpy.compress`` with a constant ``condition``: a gather of the kept positions.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.compress([True, False, True], x).sum())(np.ones(3))
    array([1., 0., 1.])
    """
    if out is not None:
        raise UnsupportedError("numpy.compress with out=: asd records pure operations; drop "
                               "out= and use the returned array")
    _constant_condition("compress", condition)
    return take_flat(a, np.compress(condition, _positions(a), axis=axis))


def extract(condition, arr):
    """``numpy.extract`` with a constant ``condition``: a gather of the kept positions."""
    _constant_condition("extract", condition)
    return take_flat(arr, np.extract(condition, _positions(arr)))


def tile(A, reps):
    """``numpy.tile``: a gather of the tiled positions."""
    _constant_ints("tile", "reps", reps)
    return take_flat(A, np.tile(_positions(A), reps))


def _zero_filled(numpy_fn: Callable, a, *args) -> np.ndarray:
    """Positions through ``numpy_fn``, with the entries it zeroes at ``-1`` (a zero)."""
    return numpy_fn(_positions(a) + 1, *args) - 1


def tril(m, k: int = 0):
    """``numpy.tril``: the kept entries gathered, the others an exact zero (not ``0 * m``,
    which would turn an infinite entry into NaN)."""
    return take_flat(m, _zero_filled(np.tril, m, k))


def triu(m, k: int = 0):
    """``numpy.triu``: the kept entries gathered, the others an exact zero."""
    return take_flat(m, _zero_filled(np.triu, m, k))


def diag(v, k: int = 0):
    """``numpy.diag``: a vector's diagonal matrix (zeros gathered), or a matrix's diagonal.

    >>> import numpy as np, asd
    >>> asd.jacobian(lambda x: np.diag(x, 1))(np.ones(2)).shape
    (3, 3, 2)
    """
    return take_flat(v, _zero_filled(np.diag, v, k))


def atleast_1d(*arys):
    """``numpy.atleast_1d``: a reshape."""
    out = [smooth.reshape(a, np.atleast_1d(_positions(a)).shape) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*arys):
    """``numpy.atleast_2d``: a reshape."""
    out = [smooth.reshape(a, np.atleast_2d(_positions(a)).shape) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*arys):
    """``numpy.atleast_3d``: a reshape (a vector becomes ``(1, n, 1)``, as in numpy)."""
    out = [smooth.reshape(a, np.atleast_3d(_positions(a)).shape) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


split = _selection(np.split, "``numpy.split``: one gather per piece.", pieces=True)
array_split = _selection(np.array_split, "``numpy.array_split``: one gather per piece.",
                         pieces=True)
hsplit = _selection(np.hsplit, "``numpy.hsplit``: one gather per piece.", pieces=True)
vsplit = _selection(np.vsplit, "``numpy.vsplit``: one gather per piece.", pieces=True)
dsplit = _selection(np.dsplit, "``numpy.dsplit``: one gather per piece.", pieces=True)


# ----- assembling -----

def append(arr, values, axis=None):
    """``numpy.append``: a concatenation (flattened when ``axis`` is None)."""
    if axis is None:
        return smooth.concatenate([smooth.ravel(arr), smooth.ravel(values)])
    return smooth.concatenate([arr, values], axis=axis)


def column_stack(tup):
    """``numpy.column_stack``: vectors become columns, then a concatenation along axis 1."""
    cols = [smooth.reshape(a, (-1, 1)) if len(smooth.shape_of(a)) < 2 else a for a in tup]
    return smooth.concatenate(cols, axis=1)


def dstack(tup):
    """``numpy.dstack``: `atleast_3d`, then a concatenation along axis 2."""
    return smooth.concatenate([atleast_3d(a) for a in tup], axis=2)


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy"):
    """``numpy.meshgrid``: each vector reshaped along its axis, broadcast unless ``sparse``."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    ndim = len(xi)
    shapes = [int(np.prod(smooth.shape_of(x), dtype=np.int64)) for x in xi]
    axes = list(range(ndim))
    if indexing == "xy" and ndim > 1:
        axes[0], axes[1] = 1, 0
    full = [1] * ndim
    for i, n in enumerate(shapes):
        full[axes[i]] = n
    out = []
    for i, x in enumerate(xi):
        shape = [1] * ndim
        shape[axes[i]] = shapes[i]
        g = smooth.reshape(x, tuple(shape))
        out.append(g if sparse else smooth.broadcast_to(g, tuple(full)))
    return out


def array(obj, dtype=None, copy=True, ndmin: int = 0):
    """An array from (nested) lists and tuples of traced values and numbers: what
    ``np.array([x, x ** 2])`` means, which numpy cannot do (it would drop the trace).

    >>> import asd
    >>> asd.subgrad(lambda x: asd.numpy.array([x, x ** 2]).sum())(3.0)
    7.0
    """
    if dtype is not None and not np.issubdtype(np.dtype(dtype), np.inexact):
        raise unsupported(f"asd.numpy.array with dtype={np.dtype(dtype)} (a cast to a "
                          "discrete type)")
    if isinstance(obj, list | tuple):
        parts = [array(o, dtype) for o in obj]
        out = smooth.stack(parts) if parts else np.array(obj, dtype=dtype)
    elif is_traced(obj):
        out = obj if dtype is None else smooth.astype(obj, dtype)
    else:
        out = np.array(obj, dtype=dtype)
    shape = smooth.shape_of(out)
    if len(shape) < ndmin:
        out = smooth.reshape(out, (1,) * (ndmin - len(shape)) + shape)
    return out


def asarray(a, dtype=None):
    """`array` without a copy: a traced array passes through."""
    return array(a, dtype)


class _Concatenator:
    """``asd.numpy.r_`` / ``c_``: numpy's index tricks on traced values (slices give
    constant ranges, scalars and vectors are joined as numpy joins them)."""

    def __init__(self, columns: bool):
        self.columns = columns

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if any(isinstance(i, str) for i in items):
            raise unsupported("numpy.r_ / numpy.c_ with a directive string")
        parts = []
        for item in items:
            part = np.r_[item] if isinstance(item, slice) else array(item)
            part = atleast_1d(part)
            if self.columns:
                shape = smooth.shape_of(part)
                part = smooth.reshape(part, (-1, 1)) if len(shape) == 1 else part
            parts.append(part)
        return smooth.concatenate(parts, axis=-1 if self.columns else 0)


r_ = _Concatenator(columns=False)
c_ = _Concatenator(columns=True)


# ----- products and differences -----

def kron(a, b):
    """``numpy.kron``: the outer product with each pair of axes merged."""
    sa, sb = smooth.shape_of(a), smooth.shape_of(b)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    outer = smooth.multiply(smooth.reshape(a, sa + (1,) * nd), smooth.reshape(b, (1,) * nd + sb))
    interleaved = [ax for i in range(nd) for ax in (i, nd + i)]
    return smooth.reshape(smooth.transpose(outer, interleaved),
                          tuple(p * q for p, q in zip(sa, sb, strict=True)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """``numpy.cross`` of 3-vectors: products of entries, so smooth everywhere."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = smooth.moveaxis(a, axisa, -1), smooth.moveaxis(b, axisb, -1)
    if smooth.shape_of(a)[-1] != 3 or smooth.shape_of(b)[-1] != 3:
        raise unsupported("numpy.cross of 2-vectors (deprecated by numpy; pad them with a "
                          "zero third component)")
    first, second = np.array([1, 2, 0]), np.array([2, 0, 1])
    out = smooth.subtract(
        smooth.multiply(smooth.take(a, first, axis=-1), smooth.take(b, second, axis=-1)),
        smooth.multiply(smooth.take(a, second, axis=-1), smooth.take(b, first, axis=-1)))
    return smooth.moveaxis(out, -1, axisc)


def cumprod(a, axis=None, dtype=None, out=None):
    """``numpy.cumprod``: the ``k``-th output is the product of the first ``k + 1`` entries,
    each computed by the product rule (exact with zeros among them). Costs ``n²`` per row:
    the prefix products are written out, then reduced.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.cumprod(x)[-1])(np.array([2.0, 0.0, 3.0]))
    array([0., 6., 0.])
    """
    if out is not None or dtype is not None:
        raise unsupported("numpy.cumprod with dtype= or out=")
    if axis is None:
        a, axis = smooth.ravel(a), 0
    x = smooth.moveaxis(a, axis, -1)
    n = smooth.shape_of(x)[-1]
    if smooth._dtype(x) == np.float16 and n > 1:
        # numpy accumulates float16 products one rounded step at a time, but reduces them
        # through float32 (its prod of the prefixes rounds once): the chain is numpy's value
        steps = [x[..., :1]]
        for k in range(1, n):
            steps.append(smooth.multiply(steps[-1], x[..., k:k + 1]))
        return smooth.moveaxis(smooth.concatenate(steps, axis=-1), -1, axis)
    rows = smooth.broadcast_to(smooth.expand_dims(x, -2), smooth.shape_of(x)[:-1] + (n, n))
    prefixes = where(np.tri(n, dtype=bool), rows, 1.0)
    return smooth.moveaxis(smooth.prod(prefixes, axis=-1), -1, axis)


def ediff1d(ary, to_end=None, to_begin=None):
    """``numpy.ediff1d``: differences of the flattened array, with optional ends."""
    parts = [smooth.ravel(to_begin)] if to_begin is not None else []
    parts.append(smooth.diff(smooth.ravel(ary)))
    if to_end is not None:
        parts.append(smooth.ravel(to_end))
    return smooth.concatenate(parts) if len(parts) > 1 else parts[0]


def linspace(start, stop, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype=None, axis: int = 0):
    """``numpy.linspace`` with traced ends: ``start + t (stop - start)`` for constant ``t``;
    the last sample is ``stop`` itself when ``endpoint``, as in numpy."""
    if dtype is not None and not np.issubdtype(np.dtype(dtype), np.inexact):
        raise unsupported(f"numpy.linspace with dtype={np.dtype(dtype)} (a discrete cast)")
    num = int(_constant_ints("linspace", "num", num))
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = num - 1 if endpoint else num
    start, stop = array(start), array(stop)
    shape = np.broadcast_shapes(smooth.shape_of(start), smooth.shape_of(stop))
    start, stop = smooth.broadcast_to(start, shape), smooth.broadcast_to(stop, shape)
    delta = smooth.subtract(stop, start)
    step = smooth.divide(delta, div) if div > 0 else np.nan
    t = np.arange(num, dtype=np.float64).reshape((num,) + (1,) * len(shape))
    if div > 0:
        y = smooth.add(smooth.multiply(t, step), start)
    else:
        y = smooth.add(smooth.multiply(t, delta), start)
    if endpoint and num > 1:
        y = smooth.concatenate([smooth.getitem(y, slice(0, -1)),
                                smooth.expand_dims(stop, 0)])
    if axis != 0:
        y = smooth.moveaxis(y, 0, axis)
    if dtype is not None:
        y = smooth.astype(y, dtype)
    return (y, step) if retstep else y


def _spacings(varargs: tuple, axes: tuple, shape: tuple) -> list[np.ndarray]:
    """The distances between samples along each of ``axes`` (constants only)."""
    if any(is_traced(v) for v in varargs):
        raise unsupported("numpy.gradient with traced spacings")
    if not varargs:
        varargs = (1.0,) * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        varargs = varargs * len(axes)
    if len(varargs) != len(axes):
        raise TypeError("invalid number of arguments")
    out = []
    for v, ax in zip(varargs, axes, strict=True):
        v = np.asarray(v, dtype=np.float64)
        if v.ndim == 0:
            out.append(np.full(shape[ax] - 1, float(v)))
        elif v.shape == (shape[ax],):
            out.append(np.diff(v))
        else:
            raise ValueError("when 1d, distances must match the length of the corresponding "
                             "dimension")
    return out


def _weighted(f, ax: int, terms: Sequence[tuple[slice, np.ndarray]], ndim: int):
    """``sum_i w_i * f[slice_i]`` along ``ax``, each weight broadcast along that axis."""
    total = None
    for sl, w in terms:
        index = (slice(None),) * ax + (sl,)
        weight = np.reshape(w, (-1,) + (1,) * (ndim - ax - 1))
        term = smooth.multiply(smooth.getitem(f, index), weight)
        total = term if total is None else smooth.add(total, term)
    return total


def gradient(f, *varargs, axis=None, edge_order: int = 1):
    """``numpy.gradient``: second-order central differences inside, one-sided differences
    of order ``edge_order`` at the edges; linear in ``f`` with constant weights (numpy's
    formulas for uneven spacing, which reduce to the even ones)."""
    shape = smooth.shape_of(f)
    ndim = len(shape)
    axes = smooth._axes(axis, ndim) if axis is not None else tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        axes = (axes[0],)
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    results = []
    for ax, dx in zip(axes, _spacings(varargs, axes, shape), strict=True):
        n = shape[ax]
        if n < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                             "least (edge_order + 1) elements are required.")
        d1, d2 = dx[:-1], dx[1:]
        inner = _weighted(f, ax, [(slice(0, -2), -d2 / (d1 * (d1 + d2))),
                                  (slice(1, -1), (d2 - d1) / (d1 * d2)),
                                  (slice(2, None), d1 / (d2 * (d1 + d2)))], ndim)
        if edge_order == 1:
            first = _weighted(f, ax, [(slice(0, 1), -1 / dx[:1]), (slice(1, 2), 1 / dx[:1])],
                              ndim)
            last = _weighted(f, ax, [(slice(-2, -1), -1 / dx[-1:]),
                                     (slice(-1, None), 1 / dx[-1:])], ndim)
        else:
            a1, a2 = dx[:1], dx[1:2]
            first = _weighted(f, ax, [(slice(0, 1), -(2 * a1 + a2) / (a1 * (a1 + a2))),
                                      (slice(1, 2), (a1 + a2) / (a1 * a2)),
                                      (slice(2, 3), -a1 / (a2 * (a1 + a2)))], ndim)
            b1, b2 = dx[-2:-1], dx[-1:]
            last = _weighted(f, ax, [(slice(-3, -2), b2 / (b1 * (b1 + b2))),
                                     (slice(-2, -1), -(b2 + b1) / (b1 * b2)),
                                     (slice(-1, None), (2 * b2 + b1) / (b2 * (b1 + b2)))], ndim)
        parts = [first, inner, last] if n > 2 else [first, last]
        results.append(smooth.concatenate(parts, axis=ax))
    return results[0] if len(results) == 1 else tuple(results)


# ----- scattering -----

def _scatter_add_impl(values, positions, size: int):
    flat, where = np.ravel(values), np.ravel(positions)
    keep = where >= 0
    return np.bincount(where[keep], weights=flat[keep], minlength=size).astype(
        np.result_type(flat, np.float32), copy=False)


scatter_add_p = Primitive("scatter_add", lambda v, positions, size: _scatter_add_impl(
    v, positions.array, size))


@scatter_add_p.defrule
def scatter_add_rule(xs, dxs, positions, size):
    """Linear: the push scatters the tangent the same way, the pull gathers."""
    (v,) = xs
    where = positions.array
    keep = where >= 0
    shape = np.shape(v)

    def pull(ct):  # a batch of cotangents leads
        ct = np.asarray(ct)
        batch = ct.shape[:-1]
        out = np.zeros(batch + where.shape, np.result_type(ct))
        out[..., keep] = ct[..., where[keep]]
        return out.reshape(batch + shape)

    def push(t):  # a batch of tangents leads: one bincount over offset positions
        t = np.asarray(t)
        batch = t.shape[:t.ndim - len(shape)]
        rows = t.reshape((-1, where.size))[:, keep.ravel()]
        offsets = where[keep][None, :] + size * np.arange(rows.shape[0])[:, None]
        out = np.bincount(offsets.ravel(), weights=rows.ravel(), minlength=rows.shape[0] * size)
        return out.astype(np.result_type(t, np.float32), copy=False).reshape(batch + (size,))

    return _scatter_add_impl(v, where, size), Closure(push, pull, shape, (size,))


class Positions:
    """A constant integer array as a primitive parameter (hashable by identity, printable)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = np.asarray(array, dtype=np.intp)

    def __repr__(self) -> str:
        return f"positions{list(self.array.shape)}"


def scatter_add(values, positions, size: int):
    """The vector of length ``size`` whose entry ``p`` sums the ``values`` at ``positions ==
    p`` (``positions`` is a constant integer array shaped like ``values``; ``-1`` drops the
    value): ``np.add.at(np.zeros(size), positions, values)`` as a linear primitive.

    >>> import numpy as np, asd
    >>> from asd.library.structure import scatter_add
    >>> asd.jacobian(lambda v: scatter_add(v, np.array([1, 0, 1]), 2))(np.ones(3))
    array([[0., 1., 0.],
           [1., 0., 1.]])
    """
    if is_traced(positions):
        raise ArgumentTypeError("scatter_add at traced positions: where the values land would "
                                "jump with the input. Pass constant integer positions.")
    positions = np.asarray(positions)
    if positions.shape != smooth.shape_of(values):
        raise ValueError(f"scatter_add: positions of shape {positions.shape} for values of "
                         f"shape {smooth.shape_of(values)}")
    if positions.size and (positions.max() >= size or positions.min() < -1):
        raise IndexError(f"scatter_add: positions must lie in [-1, {size}), got "
                         f"[{positions.min()}, {positions.max()}]")
    return scatter_add_p(values, positions=Positions(positions), size=int(size))


def add_at(a, indices, b):
    """``np.add.at(a, indices, b)`` written functionally: ``a`` plus ``b`` summed into the
    entries ``indices`` names, repeated entries accumulating (`scatter_add` over the flat
    positions numpy's own indexing reads). ``np.add.at`` on a traced array calls this.

    >>> import numpy as np, asd
    >>> def f(x):
    ...     out = x[:0].sum() + np.zeros(3)
    ...     np.add.at(out, [0, 2, 0], x)
    ...     return out @ np.array([1.0, 10.0, 100.0])
    >>> asd.subgrad(f)(np.ones(3))
    array([  1., 100.,   1.])
    """
    if is_traced(indices):
        raise ArgumentTypeError("numpy.add.at at traced indices: where the values land would "
                                "jump with the input. Pass constant indices.")
    shape = smooth.shape_of(a)
    where = _positions(a)[indices]
    values = smooth.broadcast_to(b, where.shape)
    size = int(np.prod(shape, dtype=np.int64))
    return smooth.add(a, smooth.reshape(scatter_add(values, where, size), shape))


register_ufunc_at(np.add, add_at)


def _along_axis_index(shape: tuple, indices: np.ndarray, axis: int) -> tuple:
    """The fancy index ``take_along_axis``/``put_along_axis`` apply: ``indices`` on
    ``axis``, the other axes enumerated (broadcast against it)."""
    nd = len(shape)
    out = []
    for d in range(nd):
        if d == axis:
            out.append(indices)
        else:
            out.append(np.arange(shape[d]).reshape((1,) * d + (-1,) + (1,) * (nd - d - 1)))
    return tuple(out)


def put_along_axis(arr, indices, values, axis):
    """``numpy.put_along_axis`` into a traced array the function made: item assignment,
    recorded functionally (``arr`` is pointed at the update, as ``arr[...] = v`` is)."""
    if is_traced(indices):
        raise ArgumentTypeError("numpy.put_along_axis at traced indices: which entries are "
                                "written would jump with the input. Pass constant indices.")
    shape = smooth.shape_of(arr)
    if axis is None:
        raise unsupported("numpy.put_along_axis with axis=None (flatten the array first)")
    axis = int(axis) % len(shape)
    indices = np.asarray(indices)
    if indices.ndim != len(shape):
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    arr[_along_axis_index(shape, indices, axis)] = values


# ----- choosing -----

def select(condlist, choicelist, default=0):
    """``numpy.select``: nested `where`s, the first true condition winning (each tie in a
    traced condition is decided along the ray, like `where`'s)."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    out = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist), strict=True):
        out = where(cond, choice, out)
    return out


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """``numpy.partition``: the sorted array, which is a valid partition for every ``kth``
    (numpy leaves the order inside each part unspecified). Sorting is Lipschitz and its
    rule decides ties; the arrangement numpy's selection algorithm picks is not even
    continuous in the input, so it could not be differentiated anyway."""
    if order is not None:
        raise UnsupportedError("numpy.partition with order=: structured (record) arrays have "
                               "no traced form; partition a real array")
    if axis is None:
        a, axis = smooth.ravel(a), -1
    return sort(a, axis=axis)


_TABLE = {
    np.flip: flip, np.flipud: flipud, np.fliplr: fliplr, np.rot90: rot90, np.roll: roll,
    np.fft.fftshift: fftshift, np.fft.ifftshift: ifftshift, np.repeat: repeat, np.tile: tile,
    np.tril: tril, np.triu: triu, np.diag: diag, np.atleast_1d: atleast_1d,
    np.atleast_2d: atleast_2d, np.atleast_3d: atleast_3d, np.split: split,
    np.array_split: array_split, np.hsplit: hsplit, np.vsplit: vsplit, np.dsplit: dsplit,
    np.append: append, np.column_stack: column_stack, np.dstack: dstack,
    np.meshgrid: meshgrid, np.kron: kron, np.cross: cross, np.cumprod: cumprod,
    np.ediff1d: ediff1d, np.linspace: linspace, np.gradient: gradient, np.select: select,
    np.partition: partition, np.put_along_axis: put_along_axis, np.rollaxis: rollaxis,
    np.compress: compress, np.extract: extract,
}
with warnings.catch_warnings():  # numpy 2 deprecates row_stack (an alias of vstack)
    warnings.simplefilter("ignore", DeprecationWarning)
    if hasattr(np, "row_stack"):
        _TABLE[np.row_stack] = smooth.vstack
for _fn, _impl in _TABLE.items():
    register_numpy(_fn, _impl)

# ----- numpy functions asd refuses on traced arrays, and why -----

REFUSED: dict[str, tuple[str, set[str]]] = {
    "discrete": ("integer or boolean result: nothing to differentiate; compute it on plain "
                 "arrays, outside the differentiated function", {
        "argwhere", "nonzero", "flatnonzero", "searchsorted", "digitize", "bincount",
        "count_nonzero", "unique", "unique_all", "unique_counts", "unique_inverse",
        "unique_values", "histogram", "histogram2d", "histogramdd", "histogram_bin_edges",
        "array_equal", "array_equiv", "isin", "intersect1d",
        "setdiff1d", "setxor1d", "union1d", "lexsort", "argpartition", "nanargmax",
        "nanargmin", "ravel_multi_index", "unravel_index", "packbits", "unpackbits",
        "isfortran", "isscalar",
        "may_share_memory", "shares_memory", "isneginf", "isposinf", "matrix_rank",
        "iterable", "gcd", "lcm", "isnan", "isinf", "isfinite", "isnat", "signbit",
        "bitwise_count", "diag_indices_from", "tril_indices_from", "triu_indices_from",
    }),
    "constant": ("builds a constant array from shapes or scalars: runs unchanged when its "
                 "arguments are not traced", {
        "zeros", "ones", "empty", "full", "arange", "eye", "identity", "tri", "logspace",
        "geomspace", "indices", "fromfunction", "frombuffer", "fromfile", "fromiter",
        "fromstring", "fromregex", "diag_indices", "mask_indices", "tril_indices",
        "triu_indices", "hamming", "hanning", "bartlett", "blackman", "kaiser",
        "fftfreq", "rfftfreq", "ix_", "from_dlpack", "asmatrix", "bmat",
    }),
    "utility": ("no array math: I/O, printing, dtypes, configuration or iteration helpers; "
                "call it on plain arrays (asd.stop_gradient(x).value to log a traced one)", {
        "load", "save", "savez", "savez_compressed", "loadtxt", "savetxt", "genfromtxt",
        "array2string", "array_repr", "array_str", "format_float_positional",
        "format_float_scientific", "set_printoptions", "get_printoptions", "printoptions",
        "base_repr", "binary_repr", "seterr", "geterr", "seterrcall", "geterrcall",
        "setbufsize", "getbufsize", "can_cast", "promote_types", "min_scalar_type",
        "common_type", "mintypecode", "typename", "issubdtype", "isdtype", "info",
        "show_config", "show_runtime", "get_include", "test", "busday_count",
        "busday_offset", "is_busday", "datetime_as_string", "datetime_data", "vectorize",
        "frompyfunc", "nested_iters", "broadcast_shapes", "einsum_path",
        "geterrobj", "seterrobj", "errstate",
    }),
    "in_place": ("writes into its argument in place; asd records pure operations: write "
                 "y = x.copy() and assign items of y instead", {
        "copyto", "place", "put", "putmask", "fill_diagonal",
    }),
    "complex": ("complex values: asd differentiates real programs; write the computation on "
                "real arrays (the real and imaginary parts apart)", {
        "sort_complex", "fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft",
        "rfft2", "irfft2", "rfftn", "irfftn", "hfft", "ihfft", "roots",
    }),
}
"""Why asd refuses the numpy functions it has no rule for by design: kind -> (reason, names).
A function among them that numpy hands traced arrays (an ``__array_function__`` dispatcher or
a ufunc) raises `UnsupportedError` with the reason instead of offering to register a rule;
``docs/numpy-coverage.md`` lists the same reasons."""


def _refusal(numpy_fn, kind: str, reason: str) -> Callable:
    """What a traced array meets in ``numpy_fn``: `UnsupportedError` naming the reason.
    Untraced arguments (``asd.numpy.<name>`` on plain arrays) run numpy's function."""
    name = qualified_name(numpy_fn)

    def refused(*args, **kwargs):
        values = [*args, *kwargs.values()]
        if any(is_traced(v) or (isinstance(v, list | tuple) and any(map(is_traced, v)))
               for v in values):
            instead = ALTERNATIVES.get(name)
            raise UnsupportedError(f"{name} cannot run on traced arrays: {reason}."
                                   + (f" Use {instead}." if instead else ""))
        return numpy_fn(*args, **kwargs)

    refused.__name__ = numpy_fn.__name__
    refused.refused = (kind, reason)
    return refused


for _kind, (_reason, _names) in REFUSED.items():
    for _module in (np, np.fft):  # numpy.linalg's refusals are library/linalg.py's
        for _name in _names:
            _fn = getattr(_module, _name, None)
            if isinstance(_fn, np.ufunc) or hasattr(_fn, "_implementation"):
                register_numpy(_fn, _refusal(_fn, _kind, _reason))

BUILDERS = {"array": array, "asarray": asarray, "r_": r_, "c_": c_}
"""What ``asd.numpy`` adds to numpy's names for building arrays from traced values (not
exported at the top of ``asd``, where ``asd.array`` would read as a new array type)."""

__all__ = [
    "append",
    "array_split",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "column_stack",
    "compress",
    "cross",
    "cumprod",
    "diag",
    "dsplit",
    "dstack",
    "ediff1d",
    "extract",
    "fftshift",
    "flip",
    "fliplr",
    "flipud",
    "gradient",
    "hsplit",
    "ifftshift",
    "kron",
    "linspace",
    "meshgrid",
    "partition",
    "repeat",
    "roll",
    "rollaxis",
    "rot90",
    "scatter_add",
    "select",
    "split",
    "take_flat",
    "tile",
    "tril",
    "triu",
    "vsplit",
]
