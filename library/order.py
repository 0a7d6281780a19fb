"""Order primitives: max/min over axes, sort, top-k sums, quantiles, max pooling, cummax,
and gathers at positions (argmax, argsort) computed from traced values.

Each is the paper's sequential program folded into one vectorized rule. A max over entries is
a chain of pairwise maxima whose ties go to the side the sweep enters, so the rule picks, among
the entries equal to the max, the largest along the sweep. A sort orders entries by their
values at ``x + ε₁v + ε₂w₁ + …``: exactly the order the lexicographic ray sees, so its linear
map is a permutation (an ``Index`` map). Tangents are asked for only where values tie, and only
at the tied entries; where the tangents tie too, the exact (nested) series of the tied entries
along the ray and the further directions decide (``asd.core.ties.input_series``, the ordering
``tie_sign`` uses), and the lowest index only where entries are equal near the point (every
choice then has the same gradient).

Where each runs: max/min, max pooling, sort, argsort, top-k sums, the median and quantiles
run on torch and JAX arrays too (``array_api=True``). Their tie-free decision is made on the
device (the first maximum; a stable argsort, final where no row holds equal entries); a tied
row comes to the host and is decided there by the same functions (`lex_argmax`,
`lex_order`) as on numpy, so ties, reports and degenerate series agree across libraries. A
maximum's positions come to the host to build its `Index`; a sort's stay on the device in
`Take` maps. cummax and the gathers at traced positions (`gather_at`) run on numpy only.
"""

from __future__ import annotations

import itertools
import math
from functools import cmp_to_key

import numpy as np

from asd.errors import NotLipschitzError, UnsupportedError
from asd.extend import (
    FanIn,
    Index,
    LinearMap,
    Primitive,
    Series,
    SeriesUnavailable,
    Take,
    first_order_keys,
    from_host,
    index_array,
    index_decided,
    input_series,
    is_host,
    is_traced,
    kernel,
    namespace,
    read_value,
    record_asked,
    record_tie_decision,
    register_accumulate,
    register_kernel,
    register_method,
    register_numpy,
    register_reduce,
    set_at,
    to_host,
    within_reach,
)

from .smooth import getitem

# ----- layout: the reduced axes moved last and merged into one -----

def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out = tuple(sorted({int(a) % ndim if ndim else 0 for a in axes}))
    if any(not -ndim <= int(a) < (ndim or 1) for a in axes) or len(out) != len(axes):
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


class Ray:
    """The input ``x`` along the sweep's ray ``x + δv``, read in a `Layout` (``sign=-1``
    flips it, so a min is a max): tangents where values tie, and where tangents tie too, the
    exact power series of the entries in δ (``None`` when they cannot be computed exactly)."""

    def __init__(self, lay: Layout, x: np.ndarray, dx, sign: float = 1.0):
        self.lay, self.x, self.dx, self.sign = lay, x, dx, sign

    def tangent(self, need: np.ndarray) -> np.ndarray:
        mask = self.lay.back(need)
        t = np.zeros(self.lay.shape, dtype=float)
        t[mask] = to_host(self.dx(mask))  # the tied entries only, from any library
        return self.sign * self.lay.to(t)

    def settled(self, need: np.ndarray) -> np.ndarray | None:
        """Which entries a comparison can only order by index (`asd.extend.index_decided`),
        in the layout; None if none is known to be."""
        zero = index_decided(self.dx, self.lay.shape)
        return None if zero is None else self.lay.to(np.asarray(to_host(zero)))

    def asked(self, need: np.ndarray) -> None:
        """Report the entries ``need`` as tied, as asking their tangents would."""
        record_asked(self.dx, int(np.count_nonzero(need)))

    def keys(self, need: np.ndarray) -> np.ndarray | None:
        """First-order keys of the entries ``need`` where the exact series is out of reach
        (`asd.extend.first_order_keys`), in the layout; None: use `series`."""
        keys = first_order_keys(self.x, self.dx, self.lay.shape, self.lay.back(need))
        return None if keys is None else np.stack([self.sign * self.lay.to(k) for k in keys])

    def series(self, need: np.ndarray) -> np.ndarray | None:
        mask = self.lay.back(need)
        try:
            s = input_series(self.x, self.dx, self.lay.shape, depth=None, mask=mask)
        except SeriesUnavailable:
            return None
        out = np.full(self.lay.shape, None, dtype=object)
        out[mask] = [e * self.sign for e in s[mask]]
        return self.lay.to(out)


def _decided_by(diff) -> str:
    """How the series difference of two tied entries orders them, as `record_tie_decision`
    names it: along ``v`` (``series``), along a later direction of the lexicographic ray
    (``lexicographic``), not at all because they agree along every direction (``equal``), or
    ``flat`` where truncation or an interval leaves the sign unproven."""
    if not isinstance(diff, Series):
        return "equal" if not diff else "series"
    if diff.proven_sign() is None:
        return "flat"
    while isinstance(diff, Series):
        k = next((i for i, c in enumerate(diff.coeffs) if c), None)
        if k is None:
            return "equal"
        if k > 0 or not isinstance(diff.coeffs[0], Series):
            return "series" if diff.var == 0 else "lexicographic"
        diff = diff.coeffs[0]  # the leading term belongs to an earlier direction
    return "series"


_STRENGTH = {"equal": 0, "series": 1, "flat": 2, "lexicographic": 3}


def _record_pairs(diffs) -> None:
    """Report how each of the series differences ``diffs`` was decided."""
    counts: dict[str, int] = {}
    for d in diffs:
        how = _decided_by(d)
        counts[how] = counts.get(how, 0) + 1
    for how, n in counts.items():
        record_tie_decision(how, n)


def lex_argmax(vals: np.ndarray, ray) -> np.ndarray:
    """Per row (last axis), the first entry with the largest (value, tangent, series) triple.

    The sequential program ``max(max(x0, x1), x2)...`` with ties going to the larger tangent,
    then to the larger series along the lexicographic ray (``asd.core.ties.input_series``), then —
    only where entries are equal near the point — the first operand.
    ``ray.tangent(need)`` is called only for rows whose maximum value is tied, ``ray.series``
    only where the tangents tie too. Rows whose tied entries are all ones the ray can only
    order by index (``ray.settled``: zero along every direction, series out of reach) keep
    their first tied entry without asking, and are reported as the keys would report them.
    """
    shape = vals.shape
    rows = vals.reshape(-1, shape[-1])
    best = rows.max(-1, keepdims=True)
    tied = rows == best
    sel = np.argmax(tied, -1)
    multi = tied.sum(-1) > 1
    flat_owed = False  # settled rows are decided as `first_order_keys` decides (and reports)
    if multi.any():
        need = tied & multi[:, None]
        settled = ray.settled(need.reshape(shape))
        if settled is not None:
            done = multi & ~np.any(tied & ~settled.reshape(rows.shape), -1)
            if done.any():
                ray.asked(need.reshape(shape))
                flat_owed = True
                multi = multi & ~done
                need = tied & multi[:, None]
    if multi.any():
        key = np.where(need, ray.tangent(need.reshape(shape)).reshape(rows.shape), -np.inf)
        win = need & (key == key.max(-1, keepdims=True))
        sel = np.where(multi, np.argmax(win, -1), sel)
        many = win.sum(-1) > 1
        record_tie_decision("tangent", int(np.count_nonzero(multi & ~many)))
        if many.any():
            keys = ray.keys((win & many[:, None]).reshape(shape))
            if keys is not None:  # `first_order_keys` reported these rows as flat
                sel = np.where(many, _lex_first_max(win & many[:, None], keys, rows.shape), sel)
                return sel.reshape(shape[:-1])
            series = ray.series((win & many[:, None]).reshape(shape))
            if series is None:
                record_tie_decision("flat", int(np.count_nonzero(many)))
            else:
                series = series.reshape(rows.shape)
                for r in np.flatnonzero(many):
                    sr, cands = series[r], np.flatnonzero(win[r])
                    best, how = cands[0], "equal"
                    for c in cands[1:]:
                        diff = sr[c] - sr[best]
                        decided = _decided_by(diff)
                        if _STRENGTH[decided] > _STRENGTH[how]:
                            how = decided
                        if diff.sign() > 0:
                            best = c
                    sel[r] = best
                    record_tie_decision(how, 1)
    if flat_owed:
        record_tie_decision("flat", 1)
    return sel.reshape(shape[:-1])


def _lex_first_max(cands: np.ndarray, keys: np.ndarray, rows_shape: tuple) -> np.ndarray:
    """Per row, the first candidate with the lexicographically largest key stack."""
    for key in keys:
        key = np.where(cands, key.reshape(rows_shape), -np.inf)
        cands = cands & (key == key.max(-1, keepdims=True))
    return np.argmax(cands, -1)


def lex_order(vals: np.ndarray, ray, descending: bool = False) -> np.ndarray:
    """Per row, the permutation sorting by (value, tangent, series along the ray, index),
    ascending or descending in the first three (the index always ascending: the first of full
    ties comes first)."""
    sign = -1.0 if descending else 1.0
    order = np.argsort(sign * vals, axis=-1, kind="stable")
    s = np.take_along_axis(vals, order, -1)
    dup = s[..., 1:] == s[..., :-1]
    if not dup.any():
        return order
    tied_sorted = np.zeros(vals.shape, bool)
    tied_sorted[..., 1:] |= dup
    tied_sorted[..., :-1] |= dup
    need = np.zeros(vals.shape, bool)
    np.put_along_axis(need, order, tied_sorted, -1)
    t = np.where(need, ray.tangent(need), 0.0)
    idx = np.broadcast_to(np.arange(vals.shape[-1]), vals.shape)
    order = np.lexsort((idx, sign * t, sign * vals), axis=-1)
    sv, st = np.take_along_axis(vals, order, -1), np.take_along_axis(t, order, -1)
    record_tie_decision("tangent", int(np.count_nonzero(
        (sv[..., 1:] == sv[..., :-1]) & (st[..., 1:] != st[..., :-1]))))
    return refine_full_ties(order, vals, t, ray, sign)[0]


def refine_full_ties(order, vals, t, ray, sign: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Reorder each run of equal (value, tangent) in ``order`` by the exact series along the
    ray (stable, so exact ties keep index order). Also returns ``same``: whether each sorted
    entry ties its predecessor exactly. The slow exact path, taken at degenerate ties only."""
    sv, st = np.take_along_axis(vals, order, -1), np.take_along_axis(t, order, -1)
    same = np.zeros(vals.shape, bool)
    same[..., 1:] = (sv[..., 1:] == sv[..., :-1]) & (st[..., 1:] == st[..., :-1])
    if not same.any():
        return order, same
    in_run = same.copy()
    in_run[..., :-1] |= same[..., 1:]
    need = np.zeros(vals.shape, bool)
    np.put_along_axis(need, order, in_run, -1)
    series = ray.series(need)
    if series is None:
        record_tie_decision("flat", int(np.count_nonzero(same)))
        return order, same
    n = vals.shape[-1]
    order, same = order.reshape(-1, n).copy(), same.reshape(-1, n).copy()
    series = series.reshape(-1, n)
    for r in np.flatnonzero(same[:, 1:].any(-1)):
        sr = series[r]
        starts = np.flatnonzero(same[r] & ~np.concatenate([[False], same[r][:-1]])) - 1
        for a in starts:
            b = a + 1
            while b < n and same[r, b]:
                b += 1
            run = sorted(order[r, a:b], key=cmp_to_key(
                lambda i, j, sr=sr: int(sign * (sr[i] - sr[j]).sign())))
            order[r, a:b] = run
            _record_pairs([sr[i] - sr[j] for i, j in zip(run[1:], run[:-1])])
            same[r, a + 1:b] = [(sr[i] - sr[j]).sign() == 0 for i, j in zip(run[1:], run[:-1])]
    return order.reshape(vals.shape), same.reshape(vals.shape)


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


def _first_max_xp(vals, xp):
    """Per row (last axis) of another library's values, the first maximal entry (host
    positions), or None when some row's maximum is tied (then the host decides)."""
    rows = xp.reshape(vals, (-1, vals.shape[-1]))
    tied = rows == xp.max(rows, axis=-1, keepdims=True)
    if bool(xp.any(xp.sum(xp.astype(tied, xp.int32), axis=-1) > 1)):
        return None
    return to_host(xp.argmax(xp.astype(tied, xp.int8), axis=-1)).reshape(vals.shape[:-1])


@extreme_p.defrule
def extreme_rule(xs, dxs, axis, keepdims, kind):
    """On another library's arrays the maximum is found on the device; its positions (one per
    output entry) come to the host to build the index, and a tied row is decided there."""
    (x,) = xs
    xp = namespace(x)
    x = np.asarray(x) if xp is np else x
    ans = _extreme_impl(x, axis, keepdims, kind)
    lay = Layout(tuple(x.shape), normalize_axes(axis, x.ndim))
    sign = 1.0 if kind == "max" else -1.0
    sel = None
    if xp is not np:
        vals = lay.to_xp(x, xp)
        sel = _first_max_xp(vals if sign > 0 else -vals, xp)
        if sel is None:  # a tied row: decided on host copies, as for numpy
            host = to_host(x)
            sel = lex_argmax(sign * lay.to(host), Ray(lay, host, dxs[0], sign))
    else:
        sel = lex_argmax(sign * lay.to(x), Ray(lay, x, dxs[0], sign))
    out = tuple(np.shape(ans))
    index = tuple(np.reshape(i, out) for i in lay.index(sel))
    return ans, Index(index, tuple(x.shape), out)


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
# On another library's arrays each row is sorted on the device (`_sort_xp`); the positions
# stay there, gathered by `Take` maps. Only a row holding equal entries sends the input to
# the host, where `lex_order` decides it exactly as for numpy (same tangents asked, same
# reports, the same series at degenerate ties).

def _sort_xp(x, lay: Layout, dx, descending: bool = False):
    """Each row of another library's ``x`` in the layout, sorted along the ray: ``(sorted
    values, order)`` on the device. The stable sort is final where no row holds equal
    entries (`lex_order` asks nothing then either); otherwise the host decides the order."""
    xp = namespace(x)
    vals = lay.to_xp(x, xp)
    order = xp.argsort(vals, axis=-1, descending=descending, stable=True)
    s = xp.take_along_axis(vals, order, axis=-1)
    if bool(xp.any(s[..., 1:] == s[..., :-1])):
        host = to_host(x)
        order = from_host(lex_order(lay.to(host), Ray(lay, host, dx), descending), x)
    return s, order


def _flat_at(x, lay: Layout, sel):
    """The flat positions in ``x`` of the entries ``sel`` (positions along each row of the
    layout, ``outer + (m,)``), on ``x``'s device."""
    xp = namespace(x)
    flat = xp.reshape(xp.arange(lay.size * math.prod(lay.outer), device=x.device), lay.shape)
    return xp.take_along_axis(lay.to_xp(flat, xp), sel, axis=-1)


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
        ans, order = _sort_xp(x, lay, dxs[0])
        at = _flat_at(x, lay, order)
        if axis is not None:
            ans, at = xp.moveaxis(ans, -1, axes[0]), xp.moveaxis(at, -1, axes[0])
        return ans, Take(xp.reshape(at, (-1,)), lay.shape, tuple(ans.shape))
    x = np.asarray(x)
    ans = np.sort(x, axis=axis)
    axes = normalize_axes(axis, x.ndim)
    lay = Layout(x.shape, axes)
    order = lex_order(lay.to(x), Ray(lay, x, dxs[0]))
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
        s, order = _sort_xp(x, lay, dxs[0], descending=True)
        rank = xp.argsort(order, axis=-1)  # each entry's place in its row's order
        mask = xp.moveaxis(rank < k, -1, axis)
        return xp.sum(s[..., :k], axis=-1), MaskSum(mask, axis, lay.shape, lay.outer)
    x = np.asarray(x)
    lay = Layout(x.shape, (axis,))
    order = lex_order(lay.to(x), Ray(lay, x, dxs[0]), descending=True)
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
    s, order = _sort_xp(x, lay, dx)
    ans = _order_stats_xp(s, q, lay, keepdims, median)
    at = _flat_at(x, lay, order)
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
        order = lex_order(lay.to(x), Ray(lay, x, dxs[0]))
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
    qs = np.asarray(q, dtype=float)
    if np.any((qs < 0) | (qs > 1)) or not np.all(np.isfinite(qs)):
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


class PoolRay:
    """`Ray` for pooling windows: ``x`` along the ray, gathered as ``(..., out..., K)``.
    ``disjoint``: no entry of ``x`` lies in two windows (other than as padding, never tied)."""

    def __init__(self, x: np.ndarray, dx, positions: list, disjoint: bool = False):
        self.x, self.dx, self.positions, self.disjoint = x, dx, positions, disjoint

    def settled(self, need: np.ndarray) -> np.ndarray | None:
        zero = index_decided(self.dx, tuple(self.x.shape))
        return None if zero is None else np.asarray(to_host(zero))[(Ellipsis, *self.positions)]

    def asked(self, need: np.ndarray) -> None:
        record_asked(self.dx, int(np.count_nonzero(need)) if self.disjoint
                     else int(np.count_nonzero(self._mask(need))))

    def _mask(self, need: np.ndarray) -> np.ndarray:
        where = np.nonzero(need)
        lead = self.x.ndim - len(self.positions)
        out_at, k = where[lead:-1], where[-1]
        mask = np.zeros(self.x.shape, bool)
        mask[(*where[:lead], *(p[(*out_at, k)] for p in self.positions))] = True
        return mask

    def tangent(self, need: np.ndarray) -> np.ndarray:
        mask = self._mask(need)
        t = np.zeros(self.x.shape, dtype=float)
        t[mask] = to_host(self.dx(mask))  # the tied entries only, from any library
        return t[(Ellipsis, *self.positions)]

    def keys(self, need: np.ndarray) -> np.ndarray | None:
        keys = first_order_keys(self.x, self.dx, self.x.shape, self._mask(need))
        return None if keys is None else keys[(slice(None), Ellipsis, *self.positions)]

    def series(self, need: np.ndarray) -> np.ndarray | None:
        try:
            s = input_series(self.x, self.dx, self.x.shape, depth=None, mask=self._mask(need))
        except SeriesUnavailable:
            return None
        return s[(Ellipsis, *self.positions)]


class _RowsRay:
    """A `Ray` over some rows (flat window indices) of the windows ``(..., out..., K)``: the
    asks of `lex_argmax` on those rows, answered by the ray over all windows."""

    def __init__(self, ray, rows: np.ndarray, shape: tuple, settled: np.ndarray | None = None):
        self.ray, self.rows, self.shape, self._settled = ray, rows, shape, settled
        self.k = shape[-1]

    def settled(self, need):
        """``settled``: the rows' entries known to be ordered by index (read on the device)."""
        return self._settled

    def asked(self, need):
        self.ray.asked(self._full(need))

    def _full(self, need: np.ndarray) -> np.ndarray:
        full = np.zeros((int(np.prod(self.shape[:-1], dtype=int)), self.k), bool)
        full[self.rows] = need.reshape(-1, self.k)
        return full.reshape(self.shape)

    def tangent(self, need):
        return self.ray.tangent(self._full(need)).reshape(-1, self.k)[self.rows]

    def keys(self, need):
        keys = self.ray.keys(self._full(need))
        return None if keys is None else keys.reshape(len(keys), -1, self.k)[:, self.rows]

    def series(self, need):
        series = self.ray.series(self._full(need))
        return None if series is None else series.reshape(-1, self.k)[self.rows]


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
    if any(padding):
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
    if not all(s >= w for s, w in zip(stride, window, strict=True)) or not (
            x.is_floating_point()) or d > 2:
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
                                                      device=top.device))
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
    if not any(padding):
        return rows.contiguous()
    return torch.nn.functional.pad(rows, (0, 0, padding[1], padding[1], padding[0],
                                          padding[0]), value=fill)


register_kernel("max_pool_first", "numpy", _pool_first_max)
register_kernel("max_pool_first", "jax", _pool_first_max)
register_kernel("max_pool_first", "torch", _torch_pool_first_max)


def _max_pool_xp(x, dx, window, stride, padding):
    """The maximum of each window of another library's ``x`` and the flat position in ``x``
    of the entry selected, both on the device (kernel ``max_pool_first``). Where the tied
    entries of every tied window are ordered by index (`asd.extend.index_decided`: pools of
    dead relus) and windows are disjoint, each keeps its first maximum, reported as
    `lex_argmax` reports it, with no host copy. Otherwise the tied windows come to the host,
    decided there as on numpy (tangents and series read through the ray at the tied entries
    only)."""
    xp = namespace(x)
    d = len(window)
    spatial, lead = tuple(x.shape[-d:]), tuple(x.shape[:-d])
    n_lead, n_spatial = math.prod(lead), math.prod(spatial)
    disjoint = all(s >= w for s, w in zip(stride, window, strict=True))
    zero = index_decided(dx, tuple(x.shape))
    if zero is not None and is_host(zero):
        zero = from_host(np.ascontiguousarray(zero), x)
    ans, first, count, alive = kernel("max_pool_first", xp)(x, window, stride, padding, zero)
    first = xp.reshape(first, (-1,))
    extra = xp.clip(count - 1, min=0)  # tied entries past each window's first (no masks)
    tied = xp.count_nonzero(extra)  # windows with a tie
    total = xp.sum(extra) + tied  # the tied entries of tied windows
    flags = [tied, total] + ([] if alive is None else [xp.any(alive)])
    flags = to_host(xp.stack([xp.astype(f, total.dtype) for f in flags]))  # one device wait
    if not flags[0]:
        return ans, _flat_positions(first, n_lead, n_spatial, xp)
    if alive is not None and disjoint and not flags[2]:  # every tied window keeps its first
        record_asked(dx, int(flags[1]))
        record_tie_decision("flat", 1)
        return ans, _flat_positions(first, n_lead, n_spatial, xp)
    positions, out = _pool_positions(spatial, window, stride, padding)
    at = np.ravel_multi_index(tuple(positions), spatial).reshape(-1, positions[0].shape[-1])
    idx = xp.nonzero(xp.reshape(count > 1, (-1,)))[0]
    rows = to_host(idx)
    # the tied windows only: row r is window r % n_out of plane r // n_out
    flat = from_host((rows // len(at) * n_spatial)[:, None] + at[rows % len(at)], x)
    vals = to_host(xp.reshape(xp.take(xp.reshape(x, (-1,)), xp.reshape(flat, (-1,)), axis=0),
                              tuple(flat.shape)))
    if any(padding):
        vals = np.where(_pool_padding(spatial, window, stride, padding).reshape(at.shape)[
            rows % len(at)], -np.inf, vals)
    if zero is not None:
        zero = to_host(xp.reshape(xp.take(xp.reshape(xp.broadcast_to(zero, tuple(x.shape)),
                                                     (-1,)), xp.reshape(flat, (-1,)), axis=0),
                                  tuple(flat.shape)))
    chosen = lex_argmax(vals, _RowsRay(PoolRay(x, dx, positions, disjoint), rows,
                                       lead + out + (at.shape[-1],), zero))
    first = set_at(first, idx, from_host(at[rows % len(at), chosen], first))
    return ans, _flat_positions(first, n_lead, n_spatial, xp)


def _flat_positions(first, n_lead: int, n_spatial: int, xp):
    """Flat positions in ``x`` from positions in each of its ``n_lead`` planes."""
    base = from_host(np.arange(n_lead, dtype=np.int64) * n_spatial, first)
    return xp.reshape(xp.reshape(first, (n_lead, -1)) + base[:, None], (-1,))


@max_pool_p.defrule
def max_pool_rule(xs, dxs, window, stride, padding):
    """On another library's arrays the windows are searched on the device
    (`_max_pool_select_xp`); a `Take` map gathers tangents there."""
    (x,) = xs
    d = len(window)
    if not is_host(x):
        ans, at = _max_pool_xp(x, dxs[0], window, stride, padding)
        return ans, Take(at, tuple(x.shape), tuple(ans.shape))
    x = np.asarray(x)
    positions, out = _pool_positions(x.shape[-d:], window, stride, padding)
    vals = x[(Ellipsis, *positions)]
    if any(padding):
        vals = np.where(_pool_padding(x.shape[-d:], window, stride, padding), -np.inf, vals)
    disjoint = all(s >= w for s, w in zip(stride, window, strict=True))
    sel = lex_argmax(vals, PoolRay(x, dxs[0], positions, disjoint))[..., None]
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
    if len(t) != d or any(not isinstance(i, int | np.integer) for i in t):
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
    """``y_i = max(y_{i-1}, x_i)``, the earlier running max winning full ties: ``x_i`` takes
    over exactly when its (value, tangent) rank exceeds every earlier one."""
    (x,) = xs
    x = np.asarray(x)
    ans = _cummax_impl(x, axis)
    lay = Layout(x.shape, (axis,))
    xt, yt = lay.to(x), lay.to(ans)
    prev = np.concatenate([np.full(xt.shape[:-1] + (1,), -np.inf), yt[..., :-1]], -1)
    rows_tied = np.any(xt == prev, -1, keepdims=True)
    n = xt.shape[-1]
    if rows_tied.any():
        need = (xt == yt) & rows_tied
        ray = Ray(lay, x, dxs[0])
        t = np.where(need, ray.tangent(need), 0.0)
        order = np.lexsort((t, xt), axis=-1)
        sv, st = np.take_along_axis(xt, order, -1), np.take_along_axis(t, order, -1)
        record_tie_decision("tangent", int(np.count_nonzero(
            (sv[..., 1:] == sv[..., :-1]) & (st[..., 1:] != st[..., :-1]))))
        order, same = refine_full_ties(order, xt, t, ray)
        rank = np.empty(xt.shape, int)
        np.put_along_axis(rank, order, np.cumsum(~same, -1), -1)
        run = np.maximum.accumulate(rank, -1)
        is_new = rank[..., 1:] > run[..., :-1]
    else:
        is_new = xt[..., 1:] > prev[..., 1:]
    starts = np.where(is_new, np.arange(1, n), 0)
    sel = np.maximum.accumulate(np.concatenate([np.zeros(xt.shape[:-1] + (1,), int), starts],
                                               -1), -1)
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
    """``kind(x, axis)``: the locally constant primitive, or at a tie the jumping one."""
    free, tied = POSITION_PRIMS[kind]
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
    if out is not None or keepdims:
        raise UnsupportedError("numpy.argmax with out= or keepdims= on traced arrays")
    return _position("argmax", x, axis)


def argmin(x, axis=None, out=None, *, keepdims=False):
    """Positions of the minima; discrete, like ``argmax``."""
    if out is not None or keepdims:
        raise UnsupportedError("numpy.argmin with out= or keepdims= on traced arrays")
    return _position("argmin", x, axis)


def argsort(x, axis=-1, kind=None, order=None, *, stable=None):
    """The sorting permutation (stable); discrete, like ``argmax``, and an index the same way
    (``take_along_axis(x, argsort(x))`` is ``sort(x)``, ties decided by the direction)."""
    if order is not None:
        raise UnsupportedError("numpy.argsort with order= on traced arrays")
    return _position("argsort", x, axis)


# ----- gathers at positions computed from traced values -----
# ``x[argmax(y)]``, ``np.take_along_axis(x, np.argsort(y), -1)``, ``x[np.argsort(y)[-k:]]``:
# the position is a branch. The rule decides it along the ray the way max and sort do
# (`lex_argmax`, `lex_order`: value, tangent, series), so on the ray the gather is a fixed
# `Index` map. The composite is continuous exactly where every position tied in ``y`` gathers
# the same values of ``x`` (as ``where`` checks its sides where its condition is tied);
# otherwise it jumps and the rule raises NotLipschitzError naming the node.

POSITION_KINDS = {"argmax": 1.0, "argmin": -1.0, "argsort": 1.0}


def _source_of(index):
    """``(kind, y, axis, post)`` if the traced ``index`` is ``argmax/argmin/argsort(y)``
    followed by static indexing ``post``; ``None`` for any other traced value."""
    trace, k, post = index._trace, index._id, []
    node = trace.nodes[k]
    while node.name == "getitem" and type(node.args[0]) is int:
        post.insert(0, node.params["index"])
        k = node.args[0]
        node = trace.nodes[k]
    if node.name not in POSITION_KINDS or type(node.args[0]) is not int:
        return None
    ref = node.args[0]
    y = type(index)(trace, ref, trace.values[ref])
    return node.name, y, node.params.get("axis", -1 if node.name == "argsort" else None), post


def _positions(kind: str, y: np.ndarray, axis, ray_of) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``kind(y, axis)`` decided along the ray, and for each position the tied
    alternatives (``cands[..., r]``, padded with the position itself): the positions numpy
    could return at ``y`` under another tie-break."""
    sign = POSITION_KINDS[kind]
    axes = normalize_axes(axis, np.ndim(y))
    lay = Layout(np.shape(y), axes)
    vals = sign * lay.to(np.asarray(y, dtype=float))
    if kind == "argsort":
        order = lex_order(vals, ray_of(lay, sign))
        sv = np.take_along_axis(vals, order, -1)
        n = vals.shape[-1]
        idx = np.broadcast_to(np.arange(n), vals.shape)
        start = np.maximum.accumulate(np.where(np.concatenate(
            [np.ones(vals.shape[:-1] + (1,), bool), sv[..., 1:] != sv[..., :-1]], -1), idx, 0), -1)
        end = n - np.flip(np.maximum.accumulate(np.flip(np.where(np.concatenate(
            [sv[..., 1:] != sv[..., :-1], np.ones(vals.shape[:-1] + (1,), bool)], -1),
            n - 1 - idx, 0), -1), -1), -1)
        width = int((end - start).max(initial=1))
        cands = [np.take_along_axis(order, np.where(start + r < end, start + r, idx), -1)
                 for r in range(width)]
        return lay.back(order), np.stack([lay.back(c) for c in cands], -1)
    sel = lex_argmax(vals, ray_of(lay, sign))
    tied = vals == vals.max(-1, keepdims=True)
    first = np.argsort(~tied, axis=-1, kind="stable")
    count = tied.sum(-1)
    cands = [np.where(r < count, first[..., r], sel) for r in range(int(count.max()))]
    return sel, np.stack(cands, -1)


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
    x, y = np.asarray(xs[0]), np.asarray(xs[1])
    if getattr(dxs[1], "is_zero", False):  # y does not move: the positions are constants
        pos = POSITION_IMPLS[kind](y, axis)
        cands = pos[..., None]
    else:
        pos, cands = _positions(kind, y, axis, lambda lay, sign: Ray(lay, y, dxs[1], sign))
    index = _gather_index(x.shape, _post(pos, post), mode, take_axis)
    ans = x[index]
    for r in range(cands.shape[-1]):
        alt = x[_gather_index(x.shape, _post(cands[..., r], post), mode, take_axis)]
        jump = alt != ans
        if jump.any():
            raise NotLipschitzError(
                f"gather at {kind} positions: {kind} of its input is tied there and the tied "
                f"positions gather different values (e.g. {ans[jump].ravel()[:3].tolist()} "
                f"against {alt[jump].ravel()[:3].tolist()}), so the result jumps. Use a "
                "continuous primitive (asd.numpy.max, sort, topk_sum), make the gathered "
                "values agree at the ties, or wrap the positions in asd.stop_gradient(...) "
                "if they are constant by intent.")
    return ans, FanIn(Index(index, x.shape, ans.shape), None)


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
