"""Order primitives: max/min over axes, sort, top-k sums, quantiles, max pooling, cummax,
and gathers at positions (argmax, argsort) computed from traced values.

Each is the paper's sequential program folded into one vectorized rule. A max over entries is
a chain of pairwise maxima whose ties go to the side the sweep enters, so the rule picks, among
the entries equal to the max, the largest along the sweep. A sort orders entries by their
values at ``x + ε₁v + ε₂w₁ + …``: exactly the order the lexicographic ray sees, so its linear
map is a permutation (an ``Index`` map).

The rules only declare what they order: the values, row by row, and where each entry comes
from in the input (`asd.extend.Rows`: the input's lazy tangent and flat positions, for a
layout of reduced axes or for pooling windows); the engine decides ties and hands back
positions (`asd.extend.ray_argmax`, `ray_argmax_at`, `ray_argsort`, `ray_cummax`, see
`asd.core.ordering`): tangents only where values tie, at the tied entries, then the exact
series along the ray and the further directions, and the lowest index only where entries are
equal near the point (every choice then has the same gradient). No rule branches on a value,
so they run inside ``jax.jit`` too (a staged sweep: decided by first-order keys as array
operations, undecided full ties counted).

Where each runs: max/min, max pooling, sort, argsort, top-k sums, the median and quantiles
run on torch and JAX arrays too (``array_api=True``). Their tie-free decision is made on the
device; a tied row comes to the host and is decided there exactly as on numpy, so ties,
reports and degenerate series agree across libraries. A maximum's positions come to the host
to build its `Index` (staged: a `Take` map on the device); a sort's stay on the device in
`Take` maps. cummax and the gathers at traced positions (`gather_at`) run on numpy only.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from asd.errors import NotLipschitzError, UnsupportedError
from asd.extend import (
    FanIn,
    Index,
    LinearMap,
    Primitive,
    Rows,
    Take,
    array_library,
    device,
    from_host,
    index_array,
    is_host,
    is_traced,
    kernel,
    namespace,
    ray_argmax,
    ray_argmax_at,
    ray_argmax_windows,
    ray_argsort,
    ray_cummax,
    read_value,
    refuse_where,
    register_accumulate,
    register_kernel,
    register_method,
    register_numpy,
    register_reduce,
    to_host,
    window_slices,
    within_reach,
)

from .smooth import getitem

# ----- layout: the reduced axes moved last and merged into one -----

def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out = tuple(sorted({int(a) % ndim if ndim else 0 for a in axes}))
    outside = [a for a in axes if not -ndim <= int(a) < (ndim or 1)]
    if outside or len(out) != len(axes):
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds or repeated for an array of "
                                      f"dimension {ndim}")
    return out


class Layout:
    """``x`` seen as ``(outer..., R)``: kept axes first, then the ``axes`` merged into one."""

    def __init__(self, shape: tuple, axes: tuple[int, ...]):
        self.shape, self.axes = tuple(shape), axes
        self.keep = tuple(a for a in range(len(shape)) if a not in axes)
        self.perm = self.keep + axes
        self.outer = tuple(shape[a] for a in self.keep)
        self.inner = tuple(shape[a] for a in axes)
        self.size = int(np.prod(self.inner, dtype=int))

    def to(self, a: np.ndarray) -> np.ndarray:
        return np.transpose(a, self.perm).reshape(self.outer + (self.size,))

    def to_xp(self, a, xp):
        """`to` in another array library."""
        return xp.reshape(xp.permute_dims(a, self.perm), self.outer + (self.size,))

    def back(self, a: np.ndarray) -> np.ndarray:
        """Inverse of `to` for an array of the same shape."""
        moved = a.reshape(self.outer + self.inner)
        return np.transpose(moved, np.argsort(self.perm))

    def at(self) -> np.ndarray:
        """The flat position in ``x`` of each entry of the layout (`Rows`)."""
        return self.to(np.arange(int(np.prod(self.shape, dtype=int))).reshape(self.shape))

    def index(self, sel: np.ndarray, trailing: int = 0) -> tuple:
        """An index tuple into ``x`` for positions ``sel`` along R; ``sel`` has the shape
        ``S + outer + T`` with ``trailing = len(T)``."""
        grids = np.indices(self.outer, sparse=True) if self.outer else ()
        coords = np.unravel_index(sel, self.inner) if self.inner else ()
        out = [None] * len(self.shape)
        for a, g in zip(self.keep, grids, strict=True):
            out[a] = np.broadcast_to(g.reshape(g.shape + (1,) * trailing), sel.shape)
        for a, c in zip(self.axes, coords, strict=True):
            out[a] = c
        return tuple(out)

    def at_xp(self, xp, device):
        """`at` made in another library, on ``device``."""
        n = int(np.prod(self.shape, dtype=int))
        return self.to_xp(xp.reshape(xp.arange(n, device=device), self.shape), xp)

    def rows(self, vals, x, dx, sign: float = 1.0) -> Rows:
        """The rows ``vals`` (``x`` in this layout, times ``sign``) declared to the engine."""
        return Rows(vals, x, dx, self.at, sign=sign, at_xp=self.at_xp)


def Ray(lay: Layout, x, dx, sign: float = 1.0) -> Rows:
    """``x`` along the ray, read in the layout ``lay`` (`Rows.tangent`, `Rows.series` at
    chosen entries): for rules that read the ray without ordering it (the norms' zero rows)."""
    return Rows(None, x, dx, lay.at, sign=sign)


class MaskSum(LinearMap):
    """``t -> sum(t * mask, axis)``: a sum of selected entries (top-k). ``mask`` is a bool
    array of the input's shape in the tangents' library."""

    __slots__ = ("mask", "axis")

    def __init__(self, mask, axis: int, in_shape, out_shape):
        super().__init__(in_shape, out_shape)
        self.mask, self.axis = mask, axis

    def push(self, t):
        nb = np.ndim(t) - len(self.in_shape)
        if is_host(t):
            return np.sum(np.where(self.mask, t, 0), axis=self.axis + nb)
        xp = namespace(t)
        return xp.sum(xp.where(self.mask, t, 0.0), axis=self.axis + nb)

    def pull(self, ct):
        nb = np.ndim(ct) - len(self.out_shape)
        if is_host(ct):
            return np.where(self.mask, np.expand_dims(ct, self.axis + nb), 0).astype(
                np.result_type(ct), copy=False)
        xp = namespace(ct)
        return xp.where(self.mask, xp.expand_dims(ct, axis=self.axis + nb), 0.0)


class Lerp(LinearMap):
    """``t -> (1 - g) t[lo] + g t[hi]``: linear interpolation between two gathers (`Index`
    maps on numpy, `Take` maps on another library, whose ``g`` is then on its device)."""

    __slots__ = ("lo", "hi", "g")

    def __init__(self, lo: Index, hi: Index, g: np.ndarray):
        super().__init__(lo.in_shape, lo.out_shape)
        self.lo, self.hi, self.g = lo, hi, g

    def push(self, t):
        return (1 - self.g) * self.lo.push(t) + self.g * self.hi.push(t)

    def pull(self, ct):
        return self.lo.pull((1 - self.g) * ct) + self.hi.pull(self.g * ct)


# ----- max and min over axes -----

def _extreme_impl(x, axis, keepdims, kind):
    xp = namespace(x)
    return (xp.max if kind == "max" else xp.min)(x, axis=axis, keepdims=keepdims)


extreme_p = Primitive("reduce_max", _extreme_impl, array_api=True)


@extreme_p.defsnap
def _snap_extreme(xs, rs, axis, keepdims, kind):
    """For asd.clarke(radius=...): entries within reach of their row's extreme take its value
    (the extreme's own reach is at most the largest in its row)."""
    (x,), (r,) = xs, rs
    if x.size == 0:
        return xs, 0
    pick = np.max if kind == "max" else np.min
    ext = pick(x, axis=axis, keepdims=True)
    r_ext = np.max(r, axis=axis, keepdims=True)
    near = within_reach(x, np.broadcast_to(ext, x.shape), r + r_ext)
    return [np.where(near, ext, x).astype(x.dtype)], int(np.count_nonzero(near))


@extreme_p.defrule
def extreme_rule(xs, dxs, axis, keepdims, kind):
    """The rows of the layout are declared to `ray_argmax` (a min as the max of ``-x``). On
    another library's arrays the maximum is found on the device and its positions come to
    the host to build the index (staged: they stay there, gathered by a `Take` map)."""
    (x,) = xs
    xp = namespace(x)
    x = np.asarray(x) if xp is np else x
    ans = _extreme_impl(x, axis, keepdims, kind)
    lay = Layout(tuple(x.shape), normalize_axes(axis, x.ndim))
    sign = 1.0 if kind == "max" else -1.0
    vals = lay.to(x) if xp is np else lay.to_xp(x, xp)
    rows = lay.rows(vals if sign > 0 else -vals, x, dxs[0], sign)
    sel = ray_argmax(rows)
    out = tuple(np.shape(ans)) if xp is np else tuple(ans.shape)
    if is_host(sel):
        index = tuple(np.reshape(i, out) for i in lay.index(np.asarray(sel)))
        return ans, Index(index, tuple(x.shape), out)
    at = xp.take_along_axis(rows.positions(xp), sel[..., None], axis=-1)
    return ans, Take(xp.reshape(at, (-1,)), tuple(x.shape), out)


def _reduce_args(name, out, initial, where, kwargs):
    extra = [k for k, bad in (("out", out is not None), ("initial", initial is not np._NoValue),
                              ("where", where is not True)) if bad] + list(kwargs)
    if extra:
        raise UnsupportedError(f"numpy.{name} with {', '.join(extra)} on traced arrays")


def amax(x, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True, **kwargs):
    """The maximum over ``axis`` (int, tuple or None); ties go to the entry with the largest
    tangent, then the first, as the sequential program ``max(max(x0, x1), x2) ...`` does.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.max(x), direction=np.array([0.0, 1.0, 1.0]))(np.ones(3))
    array([0., 1., 0.])
    """
    _reduce_args("max", out, initial, where, kwargs)
    if isinstance(axis, list):
        axis = tuple(axis)
    return extreme_p(x, axis=axis, keepdims=bool(keepdims), kind="max")


def amin(x, axis=None, out=None, keepdims=False, initial=np._NoValue, where=True, **kwargs):
    """The minimum over ``axis``; ties go to the smallest tangent, then the first entry.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: x.min(), direction=np.array([1.0, -1.0]))(np.zeros(2))
    array([0., 1.])
    """
    _reduce_args("min", out, initial, where, kwargs)
    if isinstance(axis, list):
        axis = tuple(axis)
    return extreme_p(x, axis=axis, keepdims=bool(keepdims), kind="min")


def _maximum_reduce(x, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue,
                    where=True):
    _reduce_args("maximum.reduce", out, initial, where, {} if dtype is None else {"dtype": 1})
    return amax(x, axis=axis, keepdims=keepdims)


def _minimum_reduce(x, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue,
                    where=True):
    _reduce_args("minimum.reduce", out, initial, where, {} if dtype is None else {"dtype": 1})
    return amin(x, axis=axis, keepdims=keepdims)


max, min = amax, amin  # numpy.max and numpy.min; this module never calls the builtins


# ----- sort -----
# On another library's arrays each row is sorted on the device (`ray_argsort`); the positions
# stay there, gathered by `Take` maps. Only a row holding equal entries sends the input to
# the host, where it is decided exactly as for numpy (same tangents asked, same reports, the
# same series at degenerate ties).

def _sort_xp(x, lay: Layout, dx, descending: bool = False):
    """Each row of another library's ``x`` in the layout, sorted along the ray: ``(sorted
    values, order, rows)`` on the device."""
    xp = namespace(x)
    vals = lay.to_xp(x, xp)
    rows = lay.rows(vals, x, dx)
    order = ray_argsort(rows, descending)
    return xp.take_along_axis(vals, order, axis=-1), order, rows


def _flat_at(rows: Rows, sel):
    """The flat positions in the input of the entries ``sel`` (positions along each row,
    ``outer + (m,)``), on the input's device."""
    xp = namespace(rows.x)
    return xp.take_along_axis(rows.positions(xp), sel, axis=-1)


def _sort_impl(x, axis):
    if is_host(x):
        return np.sort(x, axis=axis)
    xp = namespace(x)
    return xp.sort(xp.reshape(x, (-1,))) if axis is None else xp.sort(x, axis=axis)


sort_p = Primitive("sort", _sort_impl, array_api=True)


@sort_p.defrule
def sort_rule(xs, dxs, axis):
    (x,) = xs
    if not is_host(x):
        xp = namespace(x)
        axes = normalize_axes(axis, x.ndim)
        lay = Layout(tuple(x.shape), axes)
        ans, order, rows = _sort_xp(x, lay, dxs[0])
        at = _flat_at(rows, order)
        if axis is not None:
            ans, at = xp.moveaxis(ans, -1, axes[0]), xp.moveaxis(at, -1, axes[0])
        return ans, Take(xp.reshape(at, (-1,)), lay.shape, tuple(ans.shape))
    x = np.asarray(x)
    ans = np.sort(x, axis=axis)
    axes = normalize_axes(axis, x.ndim)
    lay = Layout(x.shape, axes)
    order = ray_argsort(lay.rows(lay.to(x), x, dxs[0]))
    index = lay.index(order, trailing=1)
    if axis is not None:
        index = tuple(np.moveaxis(i, -1, axes[0]) for i in index)
    return ans, Index(index, x.shape, ans.shape)


def sort(x, axis=-1, kind=None, order=None, **kwargs):
    """Sorted values along ``axis`` (None: flattened). Tied values are ordered by tangent, then
    by index: the order of ``x + δv``. The linear map is that permutation.

    >>> import numpy as np, asd
    >>> asd.jacobian(asd.sort, direction=np.array([1.0, -1.0]))(np.zeros(2))
    array([[0., 1.],
           [1., 0.]])
    """
    if order is not None or kwargs:
        raise UnsupportedError("numpy.sort with order= or stable= on traced arrays")
    if np.ndim(x) == 0:
        raise ValueError("sort needs an array with at least one axis, got a 0-d value")
    return sort_p(x, axis=None if axis is None else int(axis) % np.ndim(x))


# ----- top-k sum -----

def _topk_impl(x, k, axis):
    if is_host(x):
        return np.sum(-np.sort(-np.asarray(x), axis=axis)[_head(np.ndim(x), axis, k)],
                      axis=axis)
    xp = namespace(x)
    return xp.sum(xp.sort(x, axis=axis, descending=True)[_head(x.ndim, axis, k)], axis=axis)


def _head(ndim, axis, k):
    index = [slice(None)] * ndim
    index[axis] = slice(0, k)
    return tuple(index)


topk_sum_p = Primitive("topk_sum", _topk_impl, array_api=True)


@topk_sum_p.defrule
def topk_sum_rule(xs, dxs, k, axis):
    (x,) = xs
    if not is_host(x):
        xp = namespace(x)
        lay = Layout(tuple(x.shape), (axis,))
        s, order, _ = _sort_xp(x, lay, dxs[0], descending=True)
        rank = xp.argsort(order, axis=-1)  # each entry's place in its row's order
        mask = xp.moveaxis(rank < k, -1, axis)
        return xp.sum(s[..., :k], axis=-1), MaskSum(mask, axis, lay.shape, lay.outer)
    x = np.asarray(x)
    lay = Layout(x.shape, (axis,))
    order = ray_argsort(lay.rows(lay.to(x), x, dxs[0]), descending=True)
    chosen = np.zeros(order.shape, bool)
    np.put_along_axis(chosen, order[..., :k], True, -1)
    mask = np.moveaxis(chosen, -1, axis)
    ans = _topk_impl(x, k, axis)
    return ans, MaskSum(mask, axis, x.shape, ans.shape)


def topk_sum(x, k: int, axis: int = -1):
    """The sum of the ``k`` largest entries along ``axis`` (convex, piecewise linear).

    At ties at the k-th place the entries with the larger tangent are taken, then the first.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: asd.topk_sum(x, 2), direction=np.array([0.0, 1.0, 2.0]))(
    ...     np.array([3.0, 1.0, 1.0]))
    array([1., 0., 1.])
    """
    n = np.shape(x)[axis] if np.ndim(x) else 0
    if not isinstance(k, int | np.integer) or not 1 <= k <= n:
        raise ValueError(f"topk_sum needs an integer 1 <= k <= {n} (the axis length), got {k!r}")
    return topk_sum_p(x, k=int(k), axis=int(axis) % np.ndim(x))


# ----- quantiles and the median (numpy's default 'linear' interpolation) -----

def _weights(q, n: int):
    """numpy's 'linear' method: per quantile, the order statistics ``lo``, ``hi`` it
    interpolates and the weight ``g`` of ``hi`` (host arrays of ``q``'s shape)."""
    qs = np.asarray(q, dtype=float)
    virtual = qs * (n - 1)
    lo = np.floor(virtual).astype(int)
    return lo, np.minimum(lo + 1, n - 1), virtual - lo


def _out_shape(lay: Layout, q, keepdims: bool) -> tuple:
    kept = (tuple(1 if a in lay.axes else n for a, n in enumerate(lay.shape)) if keepdims
            else lay.outer)
    return np.shape(q) + kept


def _order_stats_xp(s, q, lay: Layout, keepdims: bool, median: bool):
    """The quantiles ``q`` of another library's sorted rows ``s`` (``outer + (n,)``): numpy's
    linear interpolation, or for the median numpy's mean of the two middle entries."""
    xp = namespace(s)
    lo, hi, g = _weights(q, lay.size)
    pos = from_host(np.stack([lo.ravel(), hi.ravel()]), s)
    ab = xp.moveaxis(xp.take(s, xp.reshape(pos, (-1,)), axis=-1), -1, 0)
    a, b = ab[:lo.size], ab[lo.size:]
    shape = _out_shape(lay, q, keepdims)
    if median:
        mid = a if lay.size % 2 else (a + b) / 2
        return xp.reshape(mid, shape)
    g = from_host(g.reshape((-1,) + (1,) * len(lay.outer)), s, "like")
    diff = b - a
    return xp.reshape(xp.where(g >= 0.5, b - diff * (1 - g), a + diff * g), shape)


def _quantile_impl(x, q, axis, keepdims):
    if is_host(x):
        return np.quantile(x, q, axis=axis, keepdims=keepdims)
    lay = Layout(tuple(x.shape), normalize_axes(axis, x.ndim))
    s = namespace(x).sort(lay.to_xp(x, namespace(x)), axis=-1)
    return _order_stats_xp(s, q, lay, keepdims, median=False)


def _median_impl(x, q, axis, keepdims):
    if is_host(x):
        return np.median(x, axis=axis, keepdims=keepdims)
    lay = Layout(tuple(x.shape), normalize_axes(axis, x.ndim))
    s = namespace(x).sort(lay.to_xp(x, namespace(x)), axis=-1)
    return _order_stats_xp(s, q, lay, keepdims, median=True)


def _quantile_xp(x, dx, q, axis, keepdims, median: bool):
    """The rule on another library's arrays: rows sorted on the device (`_sort_xp`), the
    interpolated order statistics gathered there by two `Take` maps."""
    xp = namespace(x)
    lay = Layout(tuple(x.shape), normalize_axes(axis, x.ndim))
    s, order, rows = _sort_xp(x, lay, dx)
    ans = _order_stats_xp(s, q, lay, keepdims, median)
    at = _flat_at(rows, order)
    lo, hi, g = _weights(q, lay.size)
    maps = [Take(xp.reshape(xp.moveaxis(xp.take(at, from_host(pos.ravel(), at), axis=-1),
                                        -1, 0), (-1,)), lay.shape, tuple(ans.shape))
            for pos in (lo, hi)]
    g = np.broadcast_to(g.reshape(g.shape + (1,) * len(lay.outer)), g.shape + lay.outer)
    return ans, Lerp(maps[0], maps[1], from_host(g.reshape(tuple(ans.shape)), x, "like"))


def _quantile_rule(impl):
    def quantile_rule(xs, dxs, q, axis, keepdims):
        (x,) = xs
        if not is_host(x):
            return _quantile_xp(x, dxs[0], q, axis, keepdims, impl is _median_impl)
        x = np.asarray(x)
        ans = np.asarray(impl(x, q, axis, keepdims))
        lay = Layout(x.shape, normalize_axes(axis, x.ndim))
        order = ray_argsort(lay.rows(lay.to(x), x, dxs[0]))
        qs = np.asarray(q, dtype=float)
        lo, hi, g = _weights(q, lay.size)
        g = g.reshape(qs.shape + (1,) * len(lay.outer))
        maps = []
        for pos in (lo, hi):
            pos = np.broadcast_to(pos.reshape(qs.shape + (1,) * len(lay.outer)),
                                  qs.shape + lay.outer)
            rows = np.take_along_axis(np.broadcast_to(order, qs.shape + order.shape),
                                      pos[..., None], -1)[..., 0]
            index = tuple(np.reshape(i, ans.shape) for i in lay.index(rows))
            maps.append(Index(index, x.shape, ans.shape))
        g = np.broadcast_to(g, qs.shape + lay.outer).reshape(ans.shape).astype(ans.dtype)
        return ans, Lerp(maps[0], maps[1], g)

    return quantile_rule


quantile_p = Primitive("quantile", _quantile_impl, _quantile_rule(_quantile_impl),
                       array_api=True)
median_p = Primitive("median", _median_impl, _quantile_rule(_median_impl), array_api=True)


def _check_quantile(q):
    qs = np.asarray(q, dtype=float)  # a static parameter: checked while tracing
    outside = qs[~((qs >= 0) & (qs <= 1))]  # NaN and infinities included
    if outside.size:
        raise ValueError(f"quantiles must be in [0, 1], got {q!r}")
    return float(qs) if qs.ndim == 0 else qs


def quantile(x, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, **kwargs):
    """``numpy.quantile`` with the default linear interpolation, via the sorted order.

    The derivative weights the two order statistics it interpolates; ties among them are
    broken by tangent, then index, like `sort`.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: asd.quantile(x, 0.25))(np.array([4.0, 1.0, 3.0, 2.0]))
    array([0.  , 0.25, 0.  , 0.75])
    """
    if out is not None or method != "linear" or kwargs:
        raise UnsupportedError(f"numpy.quantile with out=, method={method!r} or "
                               f"{', '.join(kwargs)} on traced arrays (only method='linear')")
    if isinstance(axis, list):
        axis = tuple(axis)
    return quantile_p(x, q=_check_quantile(q), axis=axis, keepdims=bool(keepdims))


def percentile(x, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, **kwargs):
    """``numpy.percentile``: `quantile` at ``q / 100``.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.percentile(x, 50))(np.array([3.0, 1.0, 2.0]))
    array([0., 0., 1.])
    """
    return quantile(x, np.true_divide(q, 100), axis, out, overwrite_input, method, keepdims,
                    **kwargs)


def median(x, axis=None, out=None, overwrite_input=False, keepdims=False):
    """``numpy.median``: the mean of the middle order statistics (ties by tangent, then index).

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.median, direction=np.array([1.0, 0.0, -1.0]))(np.zeros(3))
    array([0., 1., 0.])
    """
    if out is not None:
        raise UnsupportedError("numpy.median with out= on traced arrays")
    if isinstance(axis, list):
        axis = tuple(axis)
    return median_p(x, q=0.5, axis=axis, keepdims=bool(keepdims))


# ----- max pooling over the trailing axes -----

def _pool_positions(spatial: tuple, window: tuple, stride: tuple, padding: tuple):
    """Per spatial axis, the input position read by each output and window offset.

    Arrays of shape ``out_spatial + (prod(window),)``. A padding position is clipped to the
    input's edge: that entry lies in the same window (every window holds an input entry), so
    the window's maximum is the one over its input entries, as with -inf padding.
    """
    d = len(spatial)
    out = tuple((n + 2 * p - w) // s + 1 for n, w, s, p in
                zip(spatial, window, stride, padding, strict=True))
    positions = []
    for i in range(d):
        o = (np.arange(out[i]) * stride[i] - padding[i]).reshape(
            (1,) * i + (-1,) + (1,) * (2 * d - i - 1))
        a = np.arange(window[i]).reshape((1,) * (d + i) + (-1,) + (1,) * (d - i - 1))
        pos = np.clip(o + a, 0, spatial[i] - 1)
        positions.append(np.broadcast_to(pos, out + window).reshape(out + (-1,)))
    return positions, out


def _pool_padding(spatial: tuple, window: tuple, stride: tuple, padding: tuple) -> np.ndarray:
    """Which window offsets are padding (clipped copies of an edge entry), ``out + (K,)``: they
    must not count as ties with the entry they copy."""
    d = len(spatial)
    out = tuple((n + 2 * p - w) // s + 1 for n, w, s, p in
                zip(spatial, window, stride, padding, strict=True))
    pad = np.zeros(out + window, bool)
    for i in range(d):
        o = (np.arange(out[i]) * stride[i] - padding[i]).reshape(
            (1,) * i + (-1,) + (1,) * (2 * d - i - 1))
        a = np.arange(window[i]).reshape((1,) * (d + i) + (-1,) + (1,) * (d - i - 1))
        pad = pad | (o + a < 0) | (o + a > spatial[i] - 1)
    return pad.reshape(out + (-1,))


def _max_pool_impl(x, window, stride, padding):
    if not is_host(x):  # gathered on the device; a clipped padding copy never changes a max
        positions, _ = _pool_positions(tuple(x.shape[-len(window):]), window, stride, padding)
        return namespace(x).max(index_array(x, (Ellipsis, *positions)), axis=-1)
    x = np.asarray(x)
    positions, _ = _pool_positions(x.shape[-len(window):], window, stride, padding)
    return x[(Ellipsis, *positions)].max(-1)


max_pool_p = Primitive("max_pool", _max_pool_impl, array_api=True)


def _disjoint(window: tuple, stride: tuple) -> bool:
    """Whether no entry lies in two windows (a stride at least the window, per axis)."""
    return all(s >= w for s, w in zip(stride, window, strict=True))


def _padded(padding: tuple) -> bool:
    """Whether a window reads padding on some axis (a static parameter)."""
    return padding != (0,) * len(padding)


def _pool_rows(x, dx, window, stride, padding, vals=None) -> Rows:
    """The windows of ``x`` declared to the engine: rows ``lead + out + (K,)`` of flat
    positions in ``x`` (a padding offset reads its clipped edge entry, marked as padding)."""
    d = len(window)
    spatial, lead = tuple(x.shape[-d:]), tuple(x.shape[:-d])

    def at():
        positions, out = _pool_positions(spatial, window, stride, padding)
        flat = np.ravel_multi_index(tuple(positions), spatial)
        base = (np.arange(math.prod(lead), dtype=np.int64) * math.prod(spatial)).reshape(
            lead + (1,) * (len(out) + 1))
        return base + flat

    pad = _pool_padding(spatial, window, stride, padding) if _padded(padding) else None
    return Rows(vals, x, dx, at, pad=pad, disjoint=_disjoint(window, stride))


def _pool_first_max(x, window, stride, padding, settled=None):
    """Per window of ``x`` (any array library, the pooled axes last): the maximum, the flat
    spatial position of its first entry (in window order: the one the sequential program
    keeps when nothing else decides), how many entries equal it (padding never does) and,
    given ``settled`` (a bool array like ``x``), whether a tied window holds a tied entry
    that is not settled (None without ``settled``). The array-API default of the kernel
    ``max_pool_first``."""
    xp = namespace(x)
    d = len(window)
    spatial = tuple(x.shape[-d:])
    lead = tuple(x.shape[:-d])
    positions, out = _pool_positions(spatial, window, stride, padding)
    at = from_host(np.ravel_multi_index(tuple(positions), spatial).reshape(
        -1, positions[0].shape[-1]).astype(np.int64), x)
    vals = _windows_xp(x, at, d, xp)
    if _padded(padding):
        vals = xp.where(from_host(_pool_padding(spatial, window, stride, padding).reshape(
            tuple(at.shape)), vals), -xp.inf, vals)
    ans = xp.max(vals, axis=-1)
    tied = vals == ans[..., None]
    first = xp.take_along_axis(xp.broadcast_to(at, tuple(vals.shape)),
                               xp.argmax(xp.astype(tied, xp.int8), axis=-1)[..., None], axis=-1)
    count = xp.sum(xp.astype(tied, xp.int32), axis=-1, dtype=xp.int32)
    alive = None
    if settled is not None:
        alive = (count > 1) & xp.any(tied & ~_windows_xp(settled, at, d, xp), axis=-1)
        alive = xp.reshape(alive, lead + out)
    return (*(xp.reshape(a, lead + out) for a in (ans, first[..., 0], count)), alive)


def _windows_xp(x, at, d: int, xp):
    """``x``'s windows ``(prod(lead), n_windows, K)`` at the flat spatial positions ``at``
    ``(n_windows, K)`` of its last ``d`` axes."""
    planes = xp.reshape(x, (-1, math.prod(tuple(x.shape[-d:]))))
    return xp.reshape(xp.take(planes, xp.reshape(at, (-1,)), axis=1),
                      (planes.shape[0],) + tuple(at.shape))


def _torch_pool_first_max(x, window, stride, padding, settled=None):
    """`_pool_first_max` with torch's own pooling kernel, which keeps the first maximum of
    each window in window order (``val > max``), as the default does. Where windows are
    disjoint, the tied entries are counted over strided views of the window offsets (padding
    read as ``-inf``); elsewhere the default runs.

    The planes are laid out channels last (a 1-d pooling as 2-d with one row): torch's CPU
    kernel then vectorizes across planes (about 6x faster than on contiguous planes, the
    same comparisons in the same order, so the same maxima and positions), and the offset
    views read whole rows of planes."""
    import torch

    d = len(window)
    if not _disjoint(window, stride) or not x.is_floating_point() or d > 2:
        return _pool_first_max(x, window, stride, padding, settled)
    lift = (1,) * (2 - d)  # 1-d windows as 2-d ones of one row
    window, stride, padding = lift + tuple(window), lift + tuple(stride), (0,) * (2 - d) + (
        tuple(padding))
    spatial = lift + tuple(x.shape[-d:])
    last = x.reshape((1, -1) + spatial).contiguous(memory_format=torch.channels_last)
    ans, first = torch.nn.functional.max_pool2d(last, window, stride, padding,
                                                return_indices=True)
    out = tuple(ans.shape[2:])
    rows = _channels_last(last, padding, -torch.inf)  # (1, H, W, planes)
    if settled is not None:
        settled = _channels_last(torch.broadcast_to(settled, tuple(x.shape)).reshape(
            (1, -1) + spatial), padding, True)
    top = ans.permute(0, 2, 3, 1)
    count = alive = None
    for offset in itertools.product(*map(range, window)):
        at = (slice(None), *(slice(a, a + s * (o - 1) + 1, s)
                             for a, s, o in zip(offset, stride, out, strict=True)))
        # a comparison written as 0/1 floats, then cast, is several times faster than a
        # bool one on torch's CPU kernels; float32 counts are exact (windows < 2**24 entries)
        hit = torch.eq(rows[at], top, out=torch.empty(top.shape, dtype=torch.float32,
                                                      device=device(top)))
        count = hit if count is None else count + hit
        if settled is not None:  # hit > settled: a tied entry that is not settled
            hit = hit.bool() > settled[at]
            alive = hit if alive is None else alive | hit
    count = count.int()
    shape = tuple(x.shape[:-d]) + out[2 - d:]

    def planes(a):  # channels last -> x's leading axes and the pooled ones (a view)
        return a.permute(0, 3, 1, 2).reshape(shape)

    if alive is not None:
        alive = planes(alive & (count > 1))
    # the maxima contiguous as the default's: what is computed from them sums in its order
    return planes(top).contiguous(), planes(first.permute(0, 2, 3, 1)), planes(count), alive


def _channels_last(planes, padding, fill):
    """``(1, P, H, W)`` planes as a contiguous ``(1, H, W, P)``, padded with ``fill``."""
    import torch

    rows = planes.permute(0, 2, 3, 1)
    if not _padded(padding):
        return rows.contiguous()
    return torch.nn.functional.pad(rows, (0, 0, padding[1], padding[1], padding[0],
                                          padding[0]), value=fill)


register_kernel("max_pool_first", "numpy", _pool_first_max)
register_kernel("max_pool_first", "jax", _pool_first_max)
register_kernel("max_pool_first", "torch", _torch_pool_first_max)


def _max_pool_xp(x, dx, window, stride, padding):
    """The maximum of each window of another library's ``x`` and the flat position in ``x``
    of the entry selected, both on the device: the kernel ``max_pool_first`` finds each
    window's first maximum and counts its ties without gathering the windows, and
    `ray_argmax_at` decides the tied windows."""
    xp = namespace(x)
    d = len(window)
    n_lead, n_spatial = math.prod(tuple(x.shape[:-d])), math.prod(tuple(x.shape[-d:]))

    def first_max(settled):
        ans, first, count, alive = kernel("max_pool_first", xp)(x, window, stride, padding,
                                                                 settled)
        return ans, _flat_positions(first, n_lead, n_spatial, xp), count, alive

    ans, at = ray_argmax_at(_pool_rows(x, dx, window, stride, padding), first_max)
    return ans, xp.reshape(at, (-1,))


def _flat_positions(first, n_lead: int, n_spatial: int, xp):
    """Flat positions in ``x`` from positions in each of its ``n_lead`` planes (same shape)."""
    base = from_host(np.arange(n_lead, dtype=np.int64) * n_spatial, first)
    return xp.reshape(xp.reshape(first, (n_lead, -1)) + base[:, None], tuple(first.shape))


class WindowSelect(LinearMap):
    """``t -> t`` at one entry per window: the offset ``sel`` (``lead + out``, in window
    order) of each window of ``t``'s last ``len(window)`` axes. Pushed as a select among
    the windows' offset slices, pulled by padding each offset's cotangent back into place
    (``lax.pad`` with interior padding on JAX): no gather, no scatter. A max pool's map in a
    staged sweep (`asd.extend.ray_argmax_windows` decides ``sel``)."""

    __slots__ = ("sel", "window", "stride", "padding")

    def __init__(self, sel, window, stride, padding, in_shape, out_shape):
        super().__init__(in_shape, out_shape)
        self.sel, self.window, self.stride, self.padding = sel, window, stride, padding

    def magnitude(self):
        return self

    def push(self, t):
        xp = namespace(t)
        parts = window_slices(t, self.window, self.stride, self.padding, 0.0, xp)
        out = xp.zeros_like(parts[0])
        for i, part in enumerate(parts):
            out = xp.where(self.sel == i, part, out)
        return out

    def pull(self, ct):
        xp = namespace(ct)
        d = len(self.window)
        spatial = tuple(n + 2 * p for n, p in zip(self.in_shape[-d:], self.padding,
                                                  strict=True))
        lead = tuple(ct.shape[:ct.ndim - d])
        out_sp = tuple(ct.shape[ct.ndim - d:])
        total = None
        for i, offset in enumerate(itertools.product(*map(range, self.window))):
            part = xp.where(self.sel == i, ct, xp.zeros((), dtype=ct.dtype))
            placed = _placed(part, offset, self.stride, out_sp, spatial, lead, xp)
            total = placed if total is None else total + placed
        crop = (Ellipsis,) + tuple(slice(p, p + n) for p, n in
                                   zip(self.padding, self.in_shape[-d:], strict=True))
        return total[crop]  # the padding's cotangent dropped


def _placed(part, offset, stride, out_sp, spatial, lead, xp):
    """``part`` (``lead + out``) at entries ``offset + stride * i`` of zeros ``lead +
    spatial``: one ``lax.pad`` on JAX, an in-place strided add elsewhere."""
    if array_library(xp) == "jax":
        from jax import lax

        config = [(0, 0, 0)] * len(lead) + [
            (o, n - o - s * (m - 1) - 1, s - 1)
            for o, s, m, n in zip(offset, stride, out_sp, spatial, strict=True)]
        return lax.pad(part, xp.zeros((), dtype=part.dtype), config)
    out = xp.zeros(lead + spatial, dtype=part.dtype)
    out[(Ellipsis,) + tuple(slice(o, o + s * (m - 1) + 1, s) for o, s, m in
                            zip(offset, stride, out_sp, strict=True))] = part
    return out


@max_pool_p.defrule
def max_pool_rule(xs, dxs, window, stride, padding):
    """The windows are declared to the engine (`_pool_rows`); on another library's arrays
    they are searched on the device (`_max_pool_xp`) and a `Take` map gathers tangents
    there. In a staged sweep the windows are read as offset slices
    (`ray_argmax_windows`) and a `WindowSelect` map routes tangents: no gathers."""
    (x,) = xs
    d = len(window)
    if not is_host(x):
        decided = ray_argmax_windows(x, dxs[0], window, stride, padding)
        if decided is not None:
            ans, sel = decided
            return ans, WindowSelect(sel, window, stride, padding, tuple(x.shape),
                                     tuple(ans.shape))
        ans, at = _max_pool_xp(x, dxs[0], window, stride, padding)
        return ans, Take(at, tuple(x.shape), tuple(ans.shape))
    x = np.asarray(x)
    positions, out = _pool_positions(x.shape[-d:], window, stride, padding)
    vals = x[(Ellipsis, *positions)]
    if _padded(padding):
        vals = np.where(_pool_padding(x.shape[-d:], window, stride, padding), -np.inf, vals)
    sel = ray_argmax(_pool_rows(x, dxs[0], window, stride, padding, vals))[..., None]
    ans = np.take_along_axis(vals, sel, -1)[..., 0]
    return ans, Index(_pool_index(x.shape[:-d] + out, d, positions, sel), x.shape, ans.shape)


def _pool_index(shape: tuple, d: int, positions: list, sel: np.ndarray) -> tuple:
    """The index into ``x`` of the selected entry of each window (``sel``: ``shape + (1,)``)."""
    lead = shape[:len(shape) - d]
    grids = np.indices(lead, sparse=True) if lead else ()
    index = tuple(np.broadcast_to(g.reshape(g.shape + (1,) * d), shape) for g in grids)
    return index + tuple(np.take_along_axis(np.broadcast_to(p, shape + p.shape[-1:]), sel,
                                            -1)[..., 0] for p in positions)


def _tuple(v, d: int, what: str) -> tuple[int, ...]:
    t = (v,) * d if isinstance(v, int | np.integer) else tuple(v)
    wrong = [i for i in t if not isinstance(i, int | np.integer)]
    if len(t) != d or wrong:
        raise ValueError(f"{what} must be an int or {d} ints, got {v!r}")
    return tuple(int(i) for i in t)


def _max_pool(x, window, stride, padding, d: int):
    window = _tuple(window, d, "window")
    stride = window if stride is None else _tuple(stride, d, "stride")
    padding = _tuple(padding, d, "padding")
    spatial = np.shape(x)[-d:] if np.ndim(x) >= d else ()
    if len(spatial) != d:
        raise ValueError(f"max_pool{d}d needs an array with at least {d} axes, got shape "
                         f"{np.shape(x)}")
    for n, w, s, p in zip(spatial, window, stride, padding, strict=True):
        if w < 1 or s < 1 or p < 0 or 2 * p > w or n + 2 * p < w:
            raise ValueError(
                f"max_pool{d}d: window {window}, stride {stride}, padding {padding} do not fit "
                f"the spatial shape {spatial} (need window >= 1, stride >= 1, "
                "0 <= padding <= window / 2 so every window holds an input entry, and the "
                "padded input at least as long as the window)"
            )
    return max_pool_p(x, window=window, stride=stride, padding=padding)


def max_pool1d(x, window, stride=None, padding=0):
    """Max pooling over the last axis of ``(..., L)``: windows of ``window`` entries every
    ``stride`` (default ``window``), with ``padding`` entries of -inf at both ends.

    In a window of tied values the entry with the largest tangent wins, then the first.

    >>> import numpy as np, asd
    >>> asd.max_pool1d(np.array([1.0, 3.0, 2.0, 2.0]), 2)
    array([3., 2.])
    """
    return _max_pool(x, window, stride, padding, 1)


def max_pool2d(x, window, stride=None, padding=0):
    """Max pooling over the last two axes of ``(..., H, W)``; ``window``, ``stride`` and
    ``padding`` are ints or pairs. Ties: largest tangent, then the first in row-major order.

    >>> import numpy as np, asd
    >>> asd.max_pool2d(np.arange(16.0).reshape(4, 4), 2)
    array([[ 5.,  7.],
           [13., 15.]])
    """
    return _max_pool(x, window, stride, padding, 2)


# ----- cumulative maximum -----

def _cummax_impl(x, axis):
    return np.maximum.accumulate(x, axis=axis)


cummax_p = Primitive("cummax", _cummax_impl)


@cummax_p.defrule
def cummax_rule(xs, dxs, axis):
    """``y_i = max(y_{i-1}, x_i)``, the earlier running max winning full ties: each entry's
    running maximum is read from `ray_cummax`."""
    (x,) = xs
    x = np.asarray(x)
    ans = _cummax_impl(x, axis)
    lay = Layout(x.shape, (axis,))
    sel = ray_cummax(lay.rows(lay.to(x), x, dxs[0]))
    index = tuple(np.moveaxis(i, -1, axis) for i in lay.index(sel, trailing=1))
    return ans, Index(index, x.shape, ans.shape)


def cummax(x, axis: int = -1):
    """The running maximum along ``axis`` (``numpy.maximum.accumulate``); at ties the earlier
    maximum stays unless the new entry's tangent is larger.

    >>> import numpy as np, asd
    >>> asd.cummax(np.array([1.0, 0.0, 2.0, 2.0]))
    array([1., 1., 2., 2.])
    """
    if np.ndim(x) == 0:
        raise ValueError("cummax needs an array with at least one axis")
    return cummax_p(x, axis=int(axis) % np.ndim(x))


# ----- positions: piecewise constant, with a jump where the values they order are tied -----
# Away from ties a position is locally constant: its derivative is 0, and a constant array
# indexed by it is a constant near the point. Where the values are tied it jumps; there the
# primitive without a rule is used, which the engine treats as discontinuous everywhere (a
# number it reaches in the output is refused, a constant indexed by it too). Which one a call
# uses is read from the values (a guard: a compiled replay whose input ties differently
# traces again). As indices of a traced array positions are decided along the ray by
# `gather_at`, at ties too.

def _has_ties(kind: str, v, axis) -> bool:
    """Whether the entries that ``kind`` orders along ``axis`` hold a tie that changes its
    answer (a repeated maximum or minimum; for argsort, any repeated value)."""
    xp = namespace(v)
    rows = xp.reshape(v, (-1,)) if axis is None else xp.moveaxis(v, axis, -1)
    if rows.shape[-1] < 2:
        return False
    if kind == "argsort":
        s = xp.sort(rows, axis=-1)
        return bool(xp.any(s[..., 1:] == s[..., :-1]))
    best = (xp.max if kind == "argmax" else xp.min)(rows, axis=-1, keepdims=True)
    return bool(xp.any(xp.sum(xp.astype(rows == best, xp.int32), axis=-1) > 1))


def _locally_constant_rule(impl):
    def position_rule(xs, dxs, **params):
        return impl(*xs, **params), None  # no tie at the point (`_position`): constant nearby

    position_rule.__name__ = f"{impl.__name__}_rule"
    return position_rule


def _argmax_impl(x, axis=None):
    return np.argmax(x, axis=axis)


def _argmin_impl(x, axis=None):
    return np.argmin(x, axis=axis)


def _argsort_impl(x, axis=-1):
    if is_host(x):
        return np.argsort(x, axis=axis, kind="stable")
    xp = namespace(x)
    return xp.argsort(xp.reshape(x, (-1,)) if axis is None else x,
                      axis=-1 if axis is None else axis, stable=True)


argmax_p = Primitive("argmax", _argmax_impl, _locally_constant_rule(_argmax_impl),
                     discontinuous=True)
argmin_p = Primitive("argmin", _argmin_impl, _locally_constant_rule(_argmin_impl),
                     discontinuous=True)
argsort_p = Primitive("argsort", _argsort_impl, _locally_constant_rule(_argsort_impl),
                      discontinuous=True, array_api=True)
# at a tie: no rule, so the engine records a jump wherever the value is used
argmax_tied_p = Primitive("argmax", _argmax_impl, discontinuous=True)
argmin_tied_p = Primitive("argmin", _argmin_impl, discontinuous=True)
argsort_tied_p = Primitive("argsort", _argsort_impl, discontinuous=True, array_api=True)
POSITION_PRIMS = {"argmax": (argmax_p, argmax_tied_p), "argmin": (argmin_p, argmin_tied_p),
                  "argsort": (argsort_p, argsort_tied_p)}


def _position(kind: str, x, axis):
    """``kind(x, axis)``: the locally constant primitive, or at a tie the jumping one. A
    staged sweep (inside ``jax.jit``) cannot read whether ``x`` is tied while tracing: it
    records the jumping one, as an eager sweep does at a tie (what reaches the output is
    then the engine's business; discarded positions, as ``top_k``'s, cost nothing)."""
    free, tied = POSITION_PRIMS[kind]
    if is_traced(x) and x._trace.staged:
        return tied(x, axis=axis)
    if is_traced(x) and read_value(x, lambda v: _has_ties(kind, v, axis)):
        return tied(x, axis=axis)
    return free(x, axis=axis)


def argmax(x, axis=None, out=None, *, keepdims=False):
    """Positions of the maxima: locally constant away from a tied maximum, where they jump
    (used as numbers, the jump is refused unless the output stays continuous). As an index
    of a traced array (``x[argmax(x)]``) the tied position is decided along the ray and the
    gather is allowed where the tied positions gather equal values (`gather_at`); a plain
    numpy array indexed by it (``c[argmax(x)]``) is a constant away from the ties.
    """
    if out is not None:
        raise UnsupportedError("numpy.argmax with out= on traced arrays")
    return _kept(_position("argmax", x, axis), np.ndim(x), axis, keepdims)


def argmin(x, axis=None, out=None, *, keepdims=False):
    """Positions of the minima; discrete, like ``argmax``."""
    if out is not None:
        raise UnsupportedError("numpy.argmin with out= on traced arrays")
    return _kept(_position("argmin", x, axis), np.ndim(x), axis, keepdims)


def _kept(pos, ndim: int, axis, keepdims: bool):
    """``keepdims=True``: the reduced axes back as unit axes (a reshape, which a gather at
    these positions reads as static indexing: ``take_along_axis(x, argmax(x, 0, keepdims=
    True), 0)``)."""
    if not keepdims:
        return pos
    if axis is None:
        return np.reshape(pos, (1,) * ndim)
    return np.expand_dims(pos, int(axis) % ndim)


def argsort(x, axis=-1, kind=None, order=None, *, stable=None):
    """The sorting permutation (stable); discrete, like ``argmax``, and an index the same way
    (``take_along_axis(x, argsort(x))`` is ``sort(x)``, ties decided by the direction)."""
    if order is not None:
        raise UnsupportedError("numpy.argsort with order= on traced arrays")
    return _position("argsort", x, axis)


# ----- gathers at positions computed from traced values -----
# ``x[argmax(y)]``, ``np.take_along_axis(x, np.argsort(y), -1)``, ``x[np.argsort(y)[-k:]]``:
# the position is a branch. The rule decides it along the ray the way max and sort do
# (`ray_argmax`, `ray_argsort`: value, tangent, series), so on the ray the gather is a fixed
# `Index` map. The composite is continuous exactly where every position tied in ``y`` gathers
# the same values of ``x`` (as ``where`` checks its sides where its condition is tied);
# otherwise it jumps and the rule raises NotLipschitzError naming the node.

POSITION_KINDS = {"argmax": 1.0, "argmin": -1.0, "argsort": 1.0}


def _unit_axes_index(before: tuple, after: tuple) -> tuple | None:
    """The static index (``None`` where an axis is inserted) that reads as a reshape from
    ``before`` to ``after`` which only inserts unit axes (``expand_dims``, ``keepdims``);
    None for any other reshape."""
    index, j = [], 0
    for n in after:
        if j < len(before) and n == before[j]:
            index.append(slice(None))
            j += 1
        elif n == 1:
            index.append(None)
        else:
            return None
    return tuple(index) if j == len(before) else None


def _source_of(index):
    """``(kind, y, axis, post)`` if the traced ``index`` is ``argmax/argmin/argsort(y)``
    followed by static indexing ``post``; ``None`` for any other traced value."""
    trace, k, post = index._trace, index._id, []
    node = trace.nodes[k]
    while node.name in ("getitem", "reshape") and type(node.args[0]) is int:
        step = (node.params["index"] if node.name == "getitem" else
                _unit_axes_index(np.shape(trace.values[node.args[0]]), node.params["shape"]))
        if step is None:
            return None
        post.insert(0, step)
        k = node.args[0]
        node = trace.nodes[k]
    if node.name not in POSITION_KINDS or type(node.args[0]) is not int:
        return None
    ref = node.args[0]
    y = type(index)(trace, ref, trace.values[ref])
    return node.name, y, node.params.get("axis", -1 if node.name == "argsort" else None), post


def _positions(kind: str, y: np.ndarray, dy, axis) -> tuple[np.ndarray, list, list | None]:
    """The positions ``kind(y, axis)`` decided along the ray (``dy``: ``y``'s lazy tangent),
    the tied alternatives of each position (one array per rank in its run of equal values,
    padded with the position itself; as many as a row has entries, a static bound): the
    positions numpy could return at ``y`` under another tie-break, and (argsort; else None)
    the run ids of the positions and of each alternative where a further direction ordered
    a run of ties the ray stays on (`Rows.beyond`: 0 elsewhere)."""
    sign = POSITION_KINDS[kind]
    axes = normalize_axes(axis, np.ndim(y))
    lay = Layout(np.shape(y), axes)
    vals = sign * lay.to(np.asarray(y, dtype=float))
    rows = Rows(vals, y, dy, lay.at, sign=sign)
    n = vals.shape[-1]
    if kind == "argsort":
        order = ray_argsort(rows)
        sv = np.take_along_axis(vals, order, -1)
        idx = np.broadcast_to(np.arange(n), vals.shape)
        start = np.maximum.accumulate(np.where(np.concatenate(
            [np.ones(vals.shape[:-1] + (1,), bool), sv[..., 1:] != sv[..., :-1]], -1), idx, 0), -1)
        end = n - np.flip(np.maximum.accumulate(np.flip(np.where(np.concatenate(
            [sv[..., 1:] != sv[..., :-1], np.ones(vals.shape[:-1] + (1,), bool)], -1),
            n - 1 - idx, 0), -1), -1), -1)
        alts = [np.take_along_axis(order, np.where(start + r < end, start + r, idx), -1)
                for r in range(n)]
        runs = None
        if rows.beyond is not None:  # each position's run of ties the ray stays on, and its
            # alternatives' (the same run: equal all along the ray, unlike the others)
            runs = [lay.back(np.take_along_axis(rows.beyond, e, -1)) for e in [order, *alts]]
        return lay.back(order), [lay.back(a) for a in alts], runs
    sel = ray_argmax(rows)
    tied = vals == vals.max(-1, keepdims=True)
    first = np.argsort(~tied, axis=-1, kind="stable")
    count = tied.sum(-1)
    return sel, [np.where(r < count, first[..., r], sel) for r in range(n)], None


def _per_output(mask: np.ndarray, out: tuple, ndim: int, mode: str, axis) -> np.ndarray:
    """A mask over the positions as a mask over the gathered result (of shape ``out``, from
    an input of ``ndim`` axes): ``x[pos]`` and ``np.take`` add the input's other axes."""
    if mode == "index":
        mask = mask.reshape(mask.shape + (1,) * (ndim - 1))
    elif mode == "take" and axis is not None:
        mask = mask.reshape((1,) * axis + mask.shape + (1,) * (ndim - axis - 1))
    return np.broadcast_to(mask, out)


def _gather_index(x_shape: tuple, pos: np.ndarray, mode: str, axis) -> tuple:
    """The index into ``x`` that ``x[pos]`` (mode 'index'), ``np.take(x, pos, axis)`` or
    ``np.take_along_axis(x, pos, axis)`` reads."""
    if mode == "index":
        return (pos,)
    if mode == "take":
        if axis is None:
            return np.unravel_index(pos, x_shape)
        return (slice(None),) * axis + (pos,)
    nd = len(x_shape)
    grids = [np.arange(n).reshape([-1 if d == a else 1 for d in range(nd)])
             for a, n in enumerate(x_shape)]
    grids[axis] = pos
    return tuple(grids)


def _post(pos: np.ndarray, post: tuple) -> np.ndarray:
    for index in post:
        pos = pos[index]
    return pos


def _gather_impl(x, y, kind, axis, post, mode, take_axis):
    pos = POSITION_IMPLS[kind](np.asarray(y), axis)
    return np.asarray(x)[_gather_index(np.shape(x), _post(pos, post), mode, take_axis)]


gather_p = Primitive("gather_at", _gather_impl)
POSITION_IMPLS = {
    "argmax": lambda y, axis: np.argmax(y, axis=axis),
    "argmin": lambda y, axis: np.argmin(y, axis=axis),
    "argsort": lambda y, axis: np.argsort(y, axis=axis, kind="stable"),
}


@gather_p.defrule
def gather_rule(xs, dxs, kind, axis, post, mode, take_axis):
    """The positions are decided along the ray; where ``y`` is tied and the tied positions
    gather different values the result jumps, and the point is refused (`refuse_where`)."""
    x, y = np.asarray(xs[0]), np.asarray(xs[1])
    runs = None
    if getattr(dxs[1], "is_zero", False):  # y does not move: the positions are constants
        pos = POSITION_IMPLS[kind](y, axis)
        alternatives = []
    else:
        pos, alternatives, runs = _positions(kind, y, dxs[1], axis)
    # numpy's positions are C-ordered; gathered through a transposed view, the result's
    # layout (and so the rounding of a later sum over it) would differ from numpy's
    pos = np.asarray(pos, order="C")  # (not ascontiguousarray: a 0-d position stays 0-d)
    index = _gather_index(x.shape, _post(pos, post), mode, take_axis)
    ans = x[index]
    held = _held_keys(dxs[1], y.shape) if alternatives else None
    for alt_pos in alternatives:
        alt = x[_gather_index(x.shape, _post(alt_pos, post), mode, take_axis)]
        jump = alt != ans
        if held is not None:  # keys constant near x keep numpy's order there: no jump
            both = _key_at(held, pos, kind, axis) & _key_at(held, alt_pos, kind, axis)
            jump = jump & ~_per_output(_post(both, post), ans.shape, x.ndim, mode, take_axis)
        refuse_where(jump, lambda jump=jump, alt=alt: NotLipschitzError(
            f"gather at {kind} positions: {kind} of its input is tied there and the tied "
            f"positions gather different values (e.g. {ans[jump].ravel()[:3].tolist()} "
            f"against {alt[jump].ravel()[:3].tolist()}), so the result jumps. Use a "
            "continuous primitive (asd.numpy.max, sort, topk_sum), make the gathered "
            "values agree at the ties, or wrap the positions in asd.stop_gradient(...) "
            "if they are constant by intent."))
    if runs is not None and not getattr(dxs[0], "is_zero", False):
        _refuse_parting_on_the_ray(x, dxs[0], ans, index, alternatives, runs, kind,
                                   (post, mode, take_axis))
    return ans, FanIn(Index(index, x.shape, ans.shape), None)


def _held_keys(dy, shape: tuple) -> np.ndarray | None:
    """The entries of the keys that provably neither rise nor fall on a neighbourhood of
    ``x`` (`asd.core.sweep.Trace.moves`: a clip saturated at both bounds, a constant); None
    where the sweep cannot tell."""
    trace, k = getattr(dy, "trace", None), getattr(dy, "k", None)
    if trace is None or k is None or not hasattr(trace, "moves"):
        return None
    up, down = trace.moves(k, {})
    return ~np.broadcast_to(np.asarray(up), shape) & ~np.broadcast_to(np.asarray(down), shape)


def _key_at(held: np.ndarray, pos: np.ndarray, kind: str, axis) -> np.ndarray:
    """``held`` at the keys the positions ``pos`` read (shaped as ``pos``)."""
    if axis is None:
        return held.reshape(-1)[pos]
    if kind == "argsort":
        return np.take_along_axis(held, pos, axis)
    return np.squeeze(np.take_along_axis(held, np.expand_dims(pos, axis), axis), axis)


def _refuse_parting_on_the_ray(x, dx, ans, index, alternatives, runs, kind, how) -> None:
    """Refuse where ``y`` stays tied all along the ray (``runs``: a further direction
    ordered the tie, which changes beside the ray) and the tied positions gather values that
    are equal at the point but part along the ray: the result along the ray is numpy's
    tie-break there, and it jumps arbitrarily near the point (the values sorted by ``x + c``
    with ``x`` tied along ``v``, F71)."""
    post, mode, take_axis = how
    run, *alt_runs = (_post(np.asarray(r), post) for r in runs)
    tx = np.asarray(to_host(dx()))
    t_ans = tx[index]
    for alt_pos, alt_run in zip(alternatives, alt_runs, strict=True):
        alt_index = _gather_index(x.shape, _post(alt_pos, post), mode, take_axis)
        same_run = _per_output((run != 0) & (alt_run == run), ans.shape, x.ndim, mode,
                               take_axis)
        parting = (x[alt_index] == ans) & (tx[alt_index] != t_ans) & same_run
        refuse_where(parting, lambda parting=parting: NotLipschitzError(
            f"gather at {kind} positions: {kind} of its input is tied all along the ray at "
            f"{int(np.count_nonzero(parting))} entries (a further direction ordered them, but "
            "the order changes beside the ray), and the tied positions gather values that "
            "are equal at the point but part along it, so the result jumps arbitrarily near "
            "the point. Sort the gathered values themselves (np.sort), make them agree where "
            "their keys tie, or wrap the positions in asd.stop_gradient(...) if they are "
            "constant by intent."))


def gather_at(x, index, mode: str = "index", axis=None):
    """``x[index]`` (``mode='index'``), ``np.take(x, index, axis)`` or
    ``np.take_along_axis(x, index, axis)`` where ``index`` is a traced position array.

    Positions from ``argmax``/``argmin``/``argsort`` (then static indexing, as
    ``argsort(y)[-k:]``) are decided along the ray; positions behind ``asd.stop_gradient``
    are constants (numpy's tie order, as asked). Anything else traced raises.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: x[np.argmax(x)], direction=np.array([1.0, 2.0]))(np.ones(2))
    array([0., 1.])
    """
    if not is_traced(index):  # constant positions: plain indexing
        take_axis = None if axis is None else int(axis) % (np.ndim(x) or 1)
        return getitem(x, _gather_index(np.shape(x), np.asarray(index), mode, take_axis))
    trace, k = index._trace, index._id
    if trace.nodes[k].name == "stop_gradient":
        pos = read_value(index, np.asarray)  # constant positions: a replay re-reads them
        take_axis = None if axis is None else int(axis) % (np.ndim(x) or 1)
        return getitem(x, _gather_index(np.shape(x), pos, mode, take_axis))
    source = _source_of(index)
    if source is None:
        raise NotLipschitzError(
            f"indexing with the traced value %{k} ({trace.nodes[k].name}): only positions "
            "computed by argmax, argmin or argsort (then static indexing) are decided along "
            "the ray. Use a reduction (asd.numpy.max, sort) or asd.stop_gradient(index) if "
            "the index is constant by intent.")
    kind, y, pos_axis, post = source
    take_axis = None if axis is None else int(axis) % (np.ndim(x) or 1)
    return gather_p(x, y, kind=kind, axis=pos_axis, post=tuple(post), mode=mode,
                    take_axis=take_axis)


def take_along_axis(arr, indices, axis=-1):
    """``numpy.take_along_axis``; traced ``indices`` must be positions (see `gather_at`).

    >>> import numpy as np, asd
    >>> x = np.array([1.0, 1.0, 0.0])
    >>> asd.jacobian(lambda x: np.take_along_axis(x, np.argsort(x), -1),
    ...              direction=np.array([0.0, -1.0, 0.0]))(x)
    array([[0., 0., 1.],
           [0., 1., 0.],
           [1., 0., 0.]])
    """
    if axis is None:
        raise UnsupportedError("numpy.take_along_axis with axis=None on traced arrays")
    if is_traced(indices):
        return gather_at(arr, indices, "take_along", axis)
    axis = int(axis) % np.ndim(arr)
    return getitem(arr, _gather_index(np.shape(arr), np.asarray(indices), "take_along", axis))


# ----- numpy dispatch -----

register_numpy(np.argmax, argmax)
register_numpy(np.argmin, argmin)
register_numpy(np.argsort, argsort)
register_numpy(np.take_along_axis, take_along_axis)
register_numpy(np.max, amax)
register_numpy(np.amax, amax)
register_numpy(np.min, amin)
register_numpy(np.amin, amin)
register_numpy(np.sort, sort)
register_numpy(np.quantile, quantile)
register_numpy(np.percentile, percentile)
register_numpy(np.median, median)
register_accumulate(np.maximum, lambda x, axis=0, dtype=None, out=None: cummax(x, axis=axis))
register_reduce(np.maximum, _maximum_reduce)
register_reduce(np.minimum, _minimum_reduce)
register_method("max", amax)
register_method("min", amin)

__all__ = [
    "amax", "amin", "argmax", "argmin", "argsort", "cummax", "gather_at", "max", "max_pool1d",
    "max_pool2d", "median", "min", "percentile", "quantile", "sort", "topk_sum",
]
