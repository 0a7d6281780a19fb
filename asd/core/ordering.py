"""Order decisions: the first maximum, the stable order and the running maximum of rows of
entries, along the ray.

An order rule (a max over axes, max pooling, a sort, top-k sums, quantiles, cummax, gathers
at positions) declares *what* it orders, a `Rows`: the values it compares, row by row, and
where each entry comes from in its input (flat positions, so tangents and series are read at
the input's entries), and reads back positions. It never asks whether a row holds a tie; the
services below decide, the same way for every order rule:

- ``ray_argmax(rows)``: per row, the first entry with the largest ``(value, tangent along v,
  series along the ray, ...)``: the sequential program ``max(max(x0, x1), x2) ...`` whose
  ties go to the side the sweep enters (`lex_argmax`);
- ``ray_argmax_at(rows, first_max)``: the same where a kernel already found each row's first
  maximum and counted its ties on the device (max pooling): only tied rows are decided;
- ``ray_argsort(rows, descending)``: per row, the permutation sorting by ``(value, tangent,
  series, index)``, the order of ``x + δv`` (`lex_order`);
- ``ray_cummax(rows)``: per entry, the position of the running maximum, the earlier one
  winning full ties.

Eagerly (`asd.core.ties`' contract): tangents are asked only at tied entries, the exact series
only where tangents tie too (`input_series`), first-order keys where the series is out of reach
(`first_order_keys`), and entries ordered by index without a tangent where their
linearization is zero (`index_decided`: pools of dead relus). Tie-free rows of torch and JAX
values are decided on their device; a tied row comes to the host and is decided there by the
same functions as on numpy, so decisions and reports agree across libraries.

Staged (`Trace.staged`, inside ``jax.jit``): no value leaves the device and no Python branch
reads one. ``"full"``: the entries are ordered by the key stack ``(value, tangent along v,
along w1, …, wk)`` lexicographically, then by index — the comparison the eager rules make with
their first-order keys, so the element is the eager one wherever the eager sweep decided by
tangent; candidates still tied on every key are either choice where the input's composite
linearization is zero at all of them (`Trace.reach`: dead relus in a pooling window, the common
case), and otherwise counted in ``undecided`` (`Trace.count_undecided`), never guessed silently.
``"values"`` (the probe): decided by the values alone, the rows that hold a tie flagged
(`Trace.flag_tie`) so the caller runs the full staged sweep — except rows tied among settled
entries only (`index_decided`, from a node that met no tie itself: a pooling window of dead
relus), which keep their first entry, the eager element, with no tangent work.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import cmp_to_key

import numpy as np

from asd.core import backend
from asd.core.backend import to_host
from asd.core.linear import FanIn
from asd.core.primitive import record_tie_decision, rule_context
from asd.core.series import Series
from asd.core.sweep import LazyTangent, missing_cone
from asd.core.ties import (
    _MOVES,
    SeriesUnavailable,
    _isolated_level,
    first_order_keys,
    index_decided,
    input_series,
    record_asked,
)


class Rows:
    """What an order rule orders: rows of entries of one input, read along the ray.

    ``vals`` (shape ``(..., n)``, in the input's array library) are the values compared along
    the last axis: ``sign`` times the input's entries at the flat positions ``at`` (``sign=-1``
    makes a min a max), and ``-inf`` where the rule reads padding (a clipped copy of an edge
    entry, which must never tie: ``pad``, a host bool array broadcastable to ``vals``, or
    None). ``at`` is a host int array of ``vals``' shape, or a zero-argument callable making
    it (built only where a tie or a staged sweep needs it). ``x`` is the input's value and
    ``dx`` its lazy tangent. ``disjoint``: no input entry lies in two rows (tied entries are
    then counted per row entry, else per input entry). ``vals`` may be None for
    `ray_argmax_at`, which gathers the rows it needs. ``at_xp(xp, device)`` (optional) makes
    ``at`` in another library, on that device, instead of copying the host array there.
    """

    __slots__ = ("key_source", "vals", "x", "dx", "_at", "sign", "pad", "disjoint", "shape",
                 "_settled", "_at_xp", "beyond")

    def __init__(self, vals, x, dx, at, *, sign: float = 1.0, pad=None, disjoint: bool = True,
                 at_xp: Callable | None = None):
        self.vals, self.x, self.dx, self._at, self._at_xp = vals, x, dx, at, at_xp
        self.sign, self.pad, self.disjoint = sign, pad, disjoint
        self.shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
        self._settled = False  # not read yet
        # per row entry, the run of full ties a further direction ordered, the ray itself
        # staying on the tie (`refine_full_ties`: a positive id per run, 0 elsewhere; None:
        # no such run)
        self.beyond: np.ndarray | None = None

    @property
    def at(self) -> np.ndarray:
        if callable(self._at):
            self._at = np.asarray(self._at())
        return self._at

    def subset(self, rows: np.ndarray, settled=None) -> Rows:
        """These rows (flat row numbers) only, their values gathered on the device and copied
        to the host; ``settled`` (where `index_decided` holds, in the input's library and
        shape, or None) is read there too, at those rows only."""
        xp = backend.namespace(self.x)
        n = self.at.shape[-1]
        at = self.at.reshape(-1, n)[rows]
        on_device = backend.from_host(at, self.x)
        vals = np.asarray(to_host(_take(self.x, on_device, xp)))
        vals = vals if self.sign == 1.0 else self.sign * vals
        pad = None
        if self.pad is not None:
            pad = np.broadcast_to(self.pad, self.at.shape).reshape(-1, n)[rows]
            vals = np.where(pad, -np.inf, vals)
        out = Rows(vals, self.x, self.dx, at, sign=self.sign, pad=pad, disjoint=self.disjoint)
        out._settled = None if settled is None else np.asarray(to_host(_take(
            xp.broadcast_to(settled, self.shape), on_device, xp)))
        return out

    # ----- eager reads, at the entries ``need`` (a host bool array of the rows' shape) -----

    def _mask(self, need: np.ndarray) -> np.ndarray:
        """The input entries the row entries ``need`` read (host bool, the input's shape)."""
        mask = np.zeros(int(np.prod(self.shape, dtype=int)), bool)
        mask[self.at[need]] = True
        return mask.reshape(self.shape)

    def _gather(self, a: np.ndarray) -> np.ndarray:
        """A host array of the input's shape (or broadcast to it) read at the rows."""
        return np.broadcast_to(a, self.shape).reshape(-1)[self.at]

    def tangent(self, need: np.ndarray) -> np.ndarray:
        """The tangents of the entries ``need`` (0 elsewhere), asked at those entries only."""
        mask = self._mask(need)
        t = np.zeros(self.shape, dtype=float)
        t[mask] = to_host(self.dx(mask))  # the tied entries only, from any library
        t = self._gather(t)
        return t if self.sign == 1.0 else self.sign * t

    def settled(self, need: np.ndarray) -> np.ndarray | None:
        """Which entries a comparison can only order by index (`index_decided`); None if none
        is known to be."""
        if self._settled is not False:  # read with the rows (`subset`)
            return self._settled
        zero = index_decided(self.dx, self.shape)
        return None if zero is None else self._gather(np.asarray(to_host(zero)))

    def asked(self, need: np.ndarray) -> None:
        """Report the entries ``need`` as tied, as asking their tangents would."""
        record_asked(self.dx, int(np.count_nonzero(need)) if self.disjoint
                     else int(np.count_nonzero(self._mask(need))))

    def keys(self, need: np.ndarray) -> np.ndarray | None:
        """Keys ordering the entries ``need`` as their series do (`first_order_keys`: ranks
        proven in floats, or first-order tangents where the exact series is out of reach),
        ``(levels,) + rows``; None: use `series`. ``key_source`` says what the levels mean
        (for the reports)."""
        keys, self.key_source = first_order_keys(self.x, self.dx, self.shape, self._mask(need),
                                                 with_source=True)
        if keys is None:
            return None
        return np.stack([self.sign * self._gather(k) if self.sign != 1.0 else self._gather(k)
                         for k in keys])

    def series(self, need: np.ndarray) -> np.ndarray | None:
        """The exact series of the entries ``need`` along the (lexicographic) ray, as an object
        array of the rows' shape (None elsewhere); None where they cannot be computed."""
        mask = self._mask(need)
        try:
            s = input_series(self.x, self.dx, self.shape, depth=None, mask=mask)
        except SeriesUnavailable:
            return None
        if self.sign != 1.0:
            s = np.array(s, dtype=object, copy=True)
            s[mask] = [e * self.sign for e in s[mask]]
        return np.asarray(s, dtype=object).reshape(-1)[self.at]

    # ----- staged reads: full arrays in the input's library -----

    def positions(self, xp):
        """``at`` in the input's library (a constant of a staged program)."""
        if xp is np:
            return self.at
        if self._at_xp is not None:
            return self._at_xp(xp, backend.device(self.x))
        return backend.from_host(self.at, self.x)

    def staged_key(self, trace, xp, level: int):
        """The first-order key of every entry along ``v`` (``level`` 0) or ``w_level``."""
        k = self.dx.k
        t = trace.tangent(k) if level == 0 else trace.lex_tangent(k, level)
        return self.sign * _take(t, self.positions(xp), xp)

    def staged_keys(self, trace, xp) -> list:
        """The first-order keys of every entry, ``[tangent along v, along w1, …]``."""
        at = self.positions(xp)
        k = self.dx.k
        levels = [trace.tangent(k)] + [trace.lex_tangent(k, level)
                                       for level in range(1, trace.lex.levels + 1)]
        return [self.sign * _take(t, at, xp) for t in levels]

    def staged_dead_input(self, trace, xp):
        """`staged_dead` in the input's shape, before the rows gather it."""
        k = self.dx.k
        lin = trace.lins[k]
        zero = None if lin is None or not hasattr(lin, "zero_rows") else lin.zero_rows()
        reach = trace.reach(k)
        dead = None if reach is None else xp.broadcast_to(reach, self.shape) == 0
        if zero is not None:
            zero = xp.broadcast_to(zero, self.shape)
            dead = zero if dead is None else dead | zero
        return dead

    def staged_dead(self, trace, xp):
        """Where the input's composite linearization is zero, at the rows' entries: where the
        map that made the input sends every tangent to 0 (`LinearMap.zero_rows`: a dead
        relu, whatever its cone holds) or no path from an input reaches it (`Trace.reach`);
        None where neither can say."""
        dead = self.staged_dead_input(trace, xp)
        return None if dead is None else _take(dead, self.positions(xp), xp)


def _take(t, at, xp):
    """``t.flat[at]`` in ``t``'s library (``t`` broadcast to nothing: the input's shape)."""
    if xp is np:
        return np.asarray(t).reshape(-1)[at]
    return xp.reshape(xp.take(xp.reshape(t, (-1,)), xp.reshape(at, (-1,)), axis=0),
                      tuple(at.shape))


def _staged(rows: Rows):
    """``(trace, mode)`` of a staged sweep reading ``rows``, else ``(None, False)``."""
    dx = rows.dx
    trace = dx.trace if isinstance(dx, LazyTangent) else None
    mode = getattr(trace, "staged", False)  # a re-run's tangents (asd.clarke) read eagerly
    return (trace, mode) if mode else (None, False)


def _first(mask, xp):
    """Per row, the first True entry (0 where there is none)."""
    return xp.argmax(xp.astype(mask, xp.int8), axis=-1)


def _count(mask, xp, axis: int = -1):
    return xp.sum(xp.astype(mask, xp.int32), axis=axis)


# ----- the first maximum -----

def ray_argmax(rows: Rows):
    """Per row, the position (along the last axis) of the first entry with the largest
    ``(value, tangent, series, …)`` along the ray: the entry the sequential program
    ``max(max(x0, x1), x2) ...`` keeps when its ties go to the side the sweep enters.

    Eagerly on numpy: `lex_argmax`. On torch and JAX arrays the first maximum is found on
    the device, and the positions come back to the host (one device wait); a row whose
    maximum is tied is decided on host copies by `lex_argmax`, as on numpy. Returns host
    positions then. Staged: positions in the values' library (the module docstring says
    how ties are decided).
    """
    trace, mode = _staged(rows)
    vals = rows.vals
    if mode:
        return _staged_argmax(rows, trace, mode)
    if backend.is_host(vals):
        return lex_argmax(np.asarray(vals), rows)
    xp = backend.namespace(vals)
    flat = xp.reshape(vals, (-1, vals.shape[-1]))
    tied = flat == xp.max(flat, axis=-1, keepdims=True)
    if bool(xp.any(_count(tied, xp) > 1)):  # a tied row: decided on host copies
        return lex_argmax(np.asarray(to_host(vals)), rows)
    return to_host(_first(tied, xp)).reshape(tuple(vals.shape)[:-1])


def _staged_argmax(rows: Rows, trace, mode: str):
    """`ray_argmax` in a staged sweep: the key stack's lexicographic first maximum."""
    vals = rows.vals
    xp = backend.namespace(vals)
    cands = vals == xp.max(vals, axis=-1, keepdims=True)
    if mode == "values":  # a row tied among settled entries keeps its first, unflagged
        tied = _count(cands, xp) > 1
        settled = _probe_settled(rows, trace)
        if settled is not None:
            tied = tied & xp.any(cands & ~_take(settled, rows.positions(xp), xp), axis=-1)
        trace.flag_tie(rule_context.node, tied)
        return _first(cands, xp)
    cands = _narrowed(cands, rows.staged_key(trace, xp, 0), xp)
    # a further direction's key (a push through the whole cone) and the dead test (a push of
    # ones through |maps|) matter only where candidates still tie: under a `backend.when_any`
    # (a `lax.cond` on JAX) they run only when some row is still open, as in `staged_sign`
    for level in range(1, trace.lex.levels + 1):
        for j in trace.leaf_index:  # the direction's constants, made outside the branch
            trace.lex_leaf(j, level)
        cands = backend.when_any(_count(cands, xp) > 1, _isolated_level(
            trace, level, lambda c, lv=level: _narrowed(c, rows.staged_key(trace, xp, lv),
                                                        xp)), cands)
    open_ = _count(cands, xp) > 1

    def alive(open_):  # all tied candidates move with no direction: either will do
        dead = rows.staged_dead(trace, xp)
        return open_ if dead is None else open_ & ~xp.all(~cands | dead, axis=-1)

    open_ = backend.when_any(open_, _isolated_reach(trace, rows.dx.k, alive), open_)
    trace.count_undecided(rule_context.node, open_)
    return _first(cands, xp)


def _narrowed(cands, key, xp):
    """The candidates whose ``key`` is the largest among their row's candidates."""
    k = xp.where(cands, key, -xp.inf)
    return cands & (k == xp.max(k, axis=-1, keepdims=True))


def _isolated_reach(trace, k: int, step: Callable) -> Callable:
    """``step`` with the memo of `Trace.reach` restored after it: inside a ``lax.cond``
    branch the pushed magnitudes are the branch's own tracers, which no other branch may
    read (`asd.core.ties`' `_isolated_level` does the same for the directions' tangents).
    The magnitude maps of node ``k``'s cone are made here, outside the branch: a map may
    keep its magnitude (a convolution's, of ``|x|`` and ``|w|``), which then holds values of
    the caller's, not of the branch."""
    memo = trace.magnitudes.get("ones", {})
    for j in missing_cone(trace.nodes, k, memo):
        lin = trace.lins[j]
        for m in lin.maps if type(lin) is FanIn else (lin,):
            if m is not None:
                m.magnitude()

    def run(carry):
        memo = trace.magnitudes.get("ones")
        saved = None if memo is None else dict(memo)
        try:
            return step(carry)
        finally:
            if saved is None:
                trace.magnitudes.pop("ones", None)
            else:
                trace.magnitudes["ones"] = saved

    return run


def ray_argmax_at(rows: Rows, first_max: Callable):
    """``(maxima, flat input positions of the entries chosen)`` per row, where a kernel
    finds each row's first maximum on the device without gathering the rows (max pooling):
    ``first_max(settled) -> (maxima, first, count, alive)``, with ``first`` the flat input
    position of each row's first maximum, ``count`` the entries tying it, and given
    ``settled`` (where `index_decided` holds, in the input's library) ``alive``: whether a
    tied row holds a tied entry that is not settled.

    Eagerly: one device wait reads whether any row is tied. None is: the first maxima stand.
    Every tied row holds settled entries only and rows are disjoint: each keeps its first
    maximum (the choice the full comparison makes, reported as it reports it), with no host
    copy. Otherwise the tied rows come to the host and `lex_argmax` decides them (tangents and
    series read at the tied entries only). Staged: the kernel's maxima; the probe keeps the
    first maxima and flags the tied rows, the full sweep decides every row as `ray_argmax`.
    ``rows.vals`` may be None: the rows are gathered where needed.
    """
    trace, mode = _staged(rows)
    x = rows.x
    xp = backend.namespace(x)
    if mode == "values":  # tied rows of settled entries keep their first maximum, unflagged
        ans, first, count, alive = first_max(_probe_settled(rows, trace))
        trace.flag_tie(rule_context.node, count > 1 if alive is None else alive)
        return ans, first
    if mode:
        ans, first, count, _ = first_max(None)
        at = rows.positions(xp)
        sel = _staged_argmax(Rows(_gathered(rows, at, xp), x, rows.dx, rows._at,
                                  sign=rows.sign, disjoint=rows.disjoint), trace, mode)
        return ans, xp.reshape(xp.take_along_axis(at, sel[..., None], axis=-1), tuple(
            first.shape))
    zero = index_decided(rows.dx, rows.shape)
    if zero is not None and backend.is_host(zero):
        zero = backend.from_host(np.ascontiguousarray(zero), x)
    ans, first, count, alive = first_max(zero)
    extra = xp.clip(count - 1, min=0)  # tied entries past each row's first (no masks)
    tied = xp.count_nonzero(extra)  # rows with a tie
    total = xp.sum(extra) + tied  # the tied entries of tied rows
    flags = [tied, total] + ([] if alive is None else [xp.any(alive)])
    flags = to_host(xp.stack([xp.astype(f, total.dtype) for f in flags]))  # one wait
    if not flags[0]:
        return ans, first
    if alive is not None and rows.disjoint and not flags[2]:  # every tied row keeps its first
        record_asked(rows.dx, int(flags[1]))
        record_tie_decision("equal", int(flags[0]))  # constant pieces: equal everywhere
        return ans, first
    idx = xp.nonzero(xp.reshape(count > 1, (-1,)))[0]
    tied_rows = rows.subset(to_host(idx), zero)  # the tied rows only, on the host
    chosen = lex_argmax(tied_rows.vals, tied_rows)
    flat = xp.reshape(first, (-1,))
    flat = backend.set_at(flat, idx, backend.from_host(
        np.take_along_axis(tied_rows.at, chosen[:, None], -1)[:, 0], flat))
    return ans, xp.reshape(flat, tuple(first.shape))


def _probe_settled(rows: Rows, trace):
    """The entries a probe (``"values"``) may order by index: `index_decided` (dead relus,
    clipped entries: constant pieces, so every choice among them gives the same element, the
    first as the eager sweep takes it), unless the node that selected those pieces met a tie
    itself. The full sweep re-decides such a node along the ray (a relu at exactly 0 may come
    alive), and only re-runs the rules the probe flagged: a pool that kept its first maximum
    on the probe's word would then read stale pieces. None where no entry is known settled.

    This is what keeps a tie-free network off the tangent work: a pooling window of dead relus
    (all 0) is a tie at every call, and needs no direction to decide."""
    settled = index_decided(rows.dx, rows.shape)
    if settled is None:
        return None
    k = rows.dx.k
    while type(trace.lins[k]) in _MOVES:  # a layout change: the node that selected, below it
        (k,) = trace.nodes[k].args
    flag = trace.tied.get(k)
    return settled if flag is None else settled & ~flag


# ----- the first maximum of strided windows, staged: offset slices, no gathers -----

def window_slices(a, window: tuple, stride: tuple, padding: tuple, fill, xp) -> list:
    """The ``K`` window offsets of ``a``'s last ``len(window)`` axes (padded by ``padding``
    entries of ``fill`` at both ends), in window order (row-major), each a strided slice of
    shape ``lead + out``: entry ``(…, i)`` of slice ``o`` is window ``i``'s entry ``o``."""
    d = len(window)
    spatial = tuple(a.shape[-d:])
    if any(padding):
        lead = tuple(a.shape[:-d])
        for axis, p in enumerate(padding):
            if p:
                shape = list(lead + spatial)
                shape[len(lead) + axis] = p
                block = xp.full(tuple(shape), fill, dtype=a.dtype)
                a = xp.concat([block, a, block], axis=len(lead) + axis)
                spatial = tuple(a.shape[-d:])
    out = tuple((n - w) // s + 1 for n, w, s in zip(spatial, window, stride, strict=True))
    return [a[(Ellipsis,) + tuple(slice(o, o + s * (m - 1) + 1, s) for o, s, m in
                                  zip(offset, stride, out, strict=True))]
            for offset in itertools.product(*map(range, window))]


def ray_argmax_windows(x, dx, window: tuple, stride: tuple, padding: tuple):
    """Max pooling's decision in a staged sweep, on another library's arrays: ``(maxima, the
    window offset chosen)`` per window, or None outside a staged sweep.

    The same decision as `_staged_argmax` over gathered rows — the first entry with the
    largest ``(value, tangent along v, along w1, …)``, candidates still tied counted unless
    all are dead; the probe keeps the first maximum and flags tied windows that hold an entry
    not settled — written over the ``K`` offset slices of the windows (`window_slices`):
    elementwise maxima and comparisons, no gather, no reduction over a short trailing axis
    (which XLA's CPU backend ran 10x slower than the primal's pooling)."""
    trace = dx.trace if isinstance(dx, LazyTangent) else None
    mode = getattr(trace, "staged", False)
    if not mode:
        return None
    xp = backend.namespace(x)
    node = rule_context.node

    def stacked(a, fill):  # (K,) + lead + out: the windows' offsets along the first axis
        return xp.stack(window_slices(xp.broadcast_to(a, tuple(x.shape)), window, stride,
                                      padding, fill, xp))

    # stacked, every comparison is one elementwise pass and one reduction over the leading
    # axis: XLA's CPU backend ran K separate comparisons each with a recomputation of their
    # operands (a convolution output's select by a relu)
    vals = stacked(x, -xp.inf)
    ans = xp.max(vals, axis=0)
    n = int(vals.shape[0])
    if mode == "values" and n <= _MAX_BITS:  # as below, in one pass per window
        bits = _bits(_value_candidates(x, ans, window, stride, padding, xp), xp)
        tied = (bits & (bits - 1)) != 0  # two candidates or more
        settled = _probe_settled_of(dx, tuple(x.shape), trace)
        if settled is not None:
            tied = tied & ((bits & _bits([~m for m in window_slices(
                xp.broadcast_to(settled, tuple(x.shape)), window, stride, padding, True, xp)],
                xp)) != 0)
        trace.flag_tie(node, tied)
        return ans, _first_of([(bits & (1 << i)) != 0 for i in range(n)], xp)
    cands = vals == ans
    if any(padding):  # padding never ties with the edge it borders, even at -inf
        cands = cands & stacked(xp.ones(tuple(x.shape), dtype=xp.bool), False)
    if mode == "values":
        tied = _count(cands, xp, 0) > 1
        settled = _probe_settled_of(dx, tuple(x.shape), trace)
        if settled is not None:
            tied = tied & xp.any(cands & ~stacked(settled, True), axis=0)
        trace.flag_tie(node, tied)
        return ans, _first_slice(cands, xp)

    def narrowed(cands, level):
        t = trace.tangent(dx.k) if level == 0 else trace.lex_tangent(dx.k, level)
        keys = xp.where(cands, stacked(t, 0.0), -xp.inf)
        return cands & (keys == xp.max(keys, axis=0))

    # settled entries (`index_decided`: a dead relu's) are constant along every direction:
    # among tied candidates that are all settled no key can choose (every key is 0) and any
    # choice gives the same element, so the further directions and the dead test run only
    # where a window's tied candidates include one that is not settled. A tied network's
    # pools of dead relus hold such windows at every call: they sent every call through a
    # further direction's push and a push of ones through the whole cone.
    settled = index_decided(dx, tuple(x.shape))
    moving = None if settled is None else ~stacked(settled, True)

    def still_open(cands):  # windows whose tied candidates include one that may move
        open_ = _count(cands, xp, 0) > 1
        return open_ if moving is None else open_ & xp.any(cands & moving, axis=0)

    def alive(carry):  # all tied candidates move with no direction: either will do
        open_, cands = carry
        dead = Rows(None, x, dx, None).staged_dead_input(trace, xp)
        if dead is None:
            return open_, cands
        return open_ & xp.any(cands & ~stacked(dead, True), axis=0), cands

    levels = range(1, trace.lex.levels + 1)
    for level in levels:  # the directions' constants, made outside the branches
        for j in trace.leaf_index:
            trace.lex_leaf(j, level)
    dead_test = _isolated_reach(trace, dx.k, alive)

    def further(cands):  # after v: the further directions, then the dead test
        for level in levels:  # only while some window is still open
            cands = backend.when_any(still_open(cands), _isolated_level(
                trace, level, lambda c, lv=level: narrowed(c, lv)), cands)
        open_ = still_open(cands)
        open_, _ = backend.when_any(open_, dead_test, (open_, cands))
        return _first_slice(cands, xp), open_

    if n > _MAX_BITS:
        sel, open_ = further(narrowed(cands, 0))
    else:
        bits = _candidate_bits(x, trace.tangent(dx.k), window, stride, padding, xp)
        live = (bits & (bits - 1)) != 0  # two candidates or more
        if settled is not None:
            live = live & ((bits & _bits([~m for m in window_slices(
                xp.broadcast_to(settled, tuple(x.shape)), window, stride, padding, True, xp)],
                xp)) != 0)
        first = _first_of([(bits & (1 << i)) != 0 for i in range(n)], xp)
        sel, open_ = backend.when_any(live, lambda c: further(xp.stack(
            [(bits & (1 << i)) != 0 for i in range(n)])), (first, live))
    trace.count_undecided(node, open_)
    return ans, sel


_MAX_BITS = 30
"""Windows of up to this many entries keep their candidates as the bits of one int32."""


def _candidate_bits(x, t, window: tuple, stride: tuple, padding: tuple, xp):
    """Per window, the offsets with the largest ``(value, tangent)`` as the bits of one
    int32 (bit ``i``: offset ``i``; none where a value or a candidate's tangent is NaN, as
    the stacked comparison has none). One pass over the ``K`` offsets per window: comparing
    a ``(K,) + window`` stack against each window's maximum made XLA's CPU backend
    recompute that maximum for each offset, ``K**2`` work, the largest cost of a tied
    pooling layer's decision."""
    shape = tuple(x.shape)
    cands = _value_candidates(x, None, window, stride, padding, xp)
    keys = [xp.where(c, k, -xp.inf) for c, k in zip(cands, window_slices(
        xp.broadcast_to(t, shape), window, stride, padding, 0.0, xp), strict=True)]
    best = _max_of(keys, xp)
    return _bits([c & (k == best) for c, k in zip(cands, keys, strict=True)], xp)


def _value_candidates(x, top, window: tuple, stride: tuple, padding: tuple, xp) -> list:
    """Per window offset, whether its value is the window's maximum ``top`` (computed here
    where None; never at padding, even at -inf)."""
    vals = window_slices(x, window, stride, padding, -xp.inf, xp)
    top = _max_of(vals, xp) if top is None else top
    cands = [v == top for v in vals]
    if any(padding):
        cands = [c & p for c, p in zip(cands, window_slices(
            xp.ones(tuple(x.shape), dtype=xp.bool), window, stride, padding, False, xp),
                                       strict=True)]
    return cands


def _bits(masks: list, xp):
    """The masks as the bits of one int32 per entry (bit ``i``: ``masks[i]``)."""
    out = None
    for i, m in enumerate(masks):
        b = xp.where(m, xp.asarray(1 << i, dtype=xp.int32), xp.asarray(0, dtype=xp.int32))
        out = b if out is None else out | b
    return out


def _max_of(parts: list, xp):
    """The elementwise maximum of ``parts`` (NaN where one is NaN, as ``max`` is)."""
    out = parts[0]
    for p in parts[1:]:
        out = xp.maximum(out, p)
    return out


def _first_of(masks: list, xp):
    """Per entry, the first ``i`` where ``masks[i]`` holds (0 where none does)."""
    sel = xp.zeros(tuple(masks[0].shape), dtype=xp.int32)
    for i in range(len(masks) - 1, -1, -1):
        sel = xp.where(masks[i], xp.asarray(i, dtype=xp.int32), sel)
    return sel


def _first_slice(cands, xp):
    """Per window, the first candidate offset of the stacked ``cands`` (0 where there is
    none: a NaN window)."""
    sel = xp.zeros(tuple(cands.shape[1:]), dtype=xp.int32)
    for i in range(cands.shape[0] - 1, -1, -1):
        sel = xp.where(cands[i], xp.asarray(i, dtype=xp.int32), sel)
    return sel


def _probe_settled_of(dx, shape: tuple, trace):
    """`_probe_settled` for an input's lazy tangent ``dx`` (shape ``shape``)."""
    return _probe_settled(Rows(None, dx.trace.values[dx.k], dx, None), trace) \
        if isinstance(dx, LazyTangent) else None


def _gathered(rows: Rows, at, xp):
    """The rows' values gathered from the input (``rows.vals`` when given)."""
    if rows.vals is not None:
        return rows.vals
    vals = _take(rows.x, at, xp)
    vals = vals if rows.sign == 1.0 else rows.sign * vals
    if rows.pad is None:
        return vals
    return xp.where(backend.from_host(np.asarray(rows.pad), vals), -xp.inf, vals) \
        if xp is not np else np.where(rows.pad, -np.inf, vals)


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
    settled_rows = 0  # rows whose tied entries all took constant pieces: equal everywhere
    if multi.any():
        need = tied & multi[:, None]
        settled = ray.settled(need.reshape(shape))
        if settled is not None:
            done = multi & ~np.any(tied & ~settled.reshape(rows.shape), -1)
            if done.any():
                ray.asked(need.reshape(shape))
                settled_rows = int(np.count_nonzero(done))
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
            if keys is not None:
                cands = win & many[:, None]
                sel = np.where(many, _lex_first_max(cands, keys, rows.shape), sel)
                source = getattr(ray, "key_source", "flat")
                if source != "flat":  # `first_order_keys` reported flat keys itself
                    _record_key_decisions(cands, keys, rows.shape, source)
                record_tie_decision("equal", settled_rows)
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
    record_tie_decision("equal", settled_rows)
    return sel.reshape(shape[:-1])


def _record_key_decisions(cands: np.ndarray, keys: np.ndarray, rows_shape: tuple,
                          source: tuple) -> None:
    """Report each row's decision as the series scan reports it: candidates in index order,
    each against the best so far, the strongest way any pair was told apart (``source[l]``:
    how entries whose keys first differ at level ``l`` differ along the ray), ``equal`` where
    none was. Rows are scanned together, one step per candidate column."""
    levels = [k.reshape(rows_shape) for k in keys]
    live = np.flatnonzero(cands.any(-1))
    if not live.size:
        return
    c = cands[live]
    lv = [k[live] for k in levels]
    strength = np.zeros(len(live), int)
    best = np.argmax(c, -1)
    idx = np.arange(len(live))
    for col in range(c.shape[-1]):
        active = c[:, col] & (col != best)
        if not active.any():
            continue
        greater = np.zeros(len(live), bool)
        settled = np.zeros(len(live), bool)
        for level, key in enumerate(lv):
            here, there = key[:, col], key[idx, best]
            differ = active & ~settled & (here != there)
            strength = np.where(differ, np.maximum(strength, _STRENGTH[source[level]]),
                                strength)
            greater |= differ & (here > there)
            settled |= differ
        best = np.where(greater, col, best)
    names = {v: k for k, v in _STRENGTH.items()}
    for value in np.unique(strength):
        record_tie_decision(names[int(value)], int(np.count_nonzero(strength == value)))


def _lex_first_max(cands: np.ndarray, keys: np.ndarray, rows_shape: tuple) -> np.ndarray:
    """Per row, the first candidate with the lexicographically largest key stack."""
    for key in keys:
        key = np.where(cands, key.reshape(rows_shape), -np.inf)
        cands = cands & (key == key.max(-1, keepdims=True))
    return np.argmax(cands, -1)


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


# ----- the stable order -----

def ray_argsort(rows: Rows, descending: bool = False):
    """Per row, the permutation sorting the entries by ``(value, tangent, series along the
    ray, index)``, ascending or descending in the first three (the index always ascending:
    the first of full ties comes first): the order of ``x + δv``.

    Eagerly on numpy: `lex_order`. On torch and JAX arrays each row is sorted on the device
    (a stable sort, final where no row holds equal entries); otherwise the rows come to the
    host and `lex_order` decides them, the order returning to the device. Staged: a stable
    lexicographic sort over the key stack, in the values' library.
    """
    trace, mode = _staged(rows)
    vals = rows.vals
    if mode:
        return _staged_argsort(rows, trace, mode, descending)
    if backend.is_host(vals):
        return lex_order(np.asarray(vals), rows, descending)
    xp = backend.namespace(vals)
    order = xp.argsort(vals, axis=-1, descending=descending, stable=True)
    s = xp.take_along_axis(vals, order, axis=-1)
    if bool(xp.any(s[..., 1:] == s[..., :-1])):
        order = backend.from_host(lex_order(np.asarray(to_host(vals)), rows,
                                            descending), vals)
    return order


def _stable_lexsort(keys: list, xp):
    """Per row, the stable ascending order by ``keys`` (most significant first): sorted by
    the least significant key first, then stably by each more significant one."""
    order = None
    for key in reversed(keys):
        k = key if order is None else xp.take_along_axis(key, order, axis=-1)
        step = xp.argsort(k, axis=-1, stable=True)
        order = step if order is None else xp.take_along_axis(order, step, axis=-1)
    return order


def _staged_argsort(rows: Rows, trace, mode: str, descending: bool):
    """`ray_argsort` in a staged sweep; full ties left open are counted per adjacent pair."""
    vals = rows.vals
    xp = backend.namespace(vals)
    flip = -1.0 if descending else 1.0
    if mode == "values":
        order = xp.argsort(flip * vals, axis=-1, stable=True)
        s = xp.take_along_axis(vals, order, axis=-1)
        trace.flag_tie(rule_context.node, s[..., 1:] == s[..., :-1])
        return order
    keys = [flip * vals] + [flip * k for k in rows.staged_keys(trace, xp)]
    order = _stable_lexsort(keys, xp)
    same = None
    for key in keys:
        s = xp.take_along_axis(key, order, axis=-1)
        eq = s[..., 1:] == s[..., :-1]
        same = eq if same is None else same & eq
    dead = rows.staged_dead(trace, xp)
    if dead is not None:
        d = xp.take_along_axis(dead, order, axis=-1)
        same = same & ~(d[..., 1:] & d[..., :-1])
    trace.count_undecided(rule_context.node, same)
    return order


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
            diffs = [sr[i] - sr[j] for i, j in zip(run[1:], run[:-1])]
            _record_pairs(diffs)
            if any(_decided_by(d) == "lexicographic" for d in diffs):
                _mark_beyond(ray, vals.shape, r, run)
            same[r, a + 1:b] = [(sr[i] - sr[j]).sign() == 0 for i, j in zip(run[1:], run[:-1])]
    return order.reshape(vals.shape), same.reshape(vals.shape)


def _mark_beyond(ray, shape: tuple, row: int, run: list) -> None:
    """Mark the entries ``run`` of flat row ``row`` as one run in ``ray.beyond`` (a
    `Rows`'): a further direction ordered them, the ray itself staying on their tie."""
    if not isinstance(ray, Rows):
        return
    if ray.beyond is None:
        ray.beyond = np.zeros(shape, np.int64)
    ray.beyond.reshape(-1, shape[-1])[row, run] = row * shape[-1] + min(run) + 1


# ----- the running maximum -----

def ray_cummax(rows: Rows) -> np.ndarray:
    """Per entry, the position (along the row) of the running maximum ``y_i = max(y_{i-1},
    x_i)``, the earlier running maximum winning full ties: ``x_i`` takes over exactly when its
    ``(value, tangent, series)`` rank exceeds every earlier one. Rows on the host (numpy).

    Eagerly, tangents are asked only in rows where an entry ties the running maximum before
    it, at the entries equal to their running maximum. Staged: ranks by the key stack; an
    entry that ties its running maximum on every key is counted undecided unless both move
    with no direction."""
    xt = np.asarray(rows.vals)
    n = xt.shape[-1]
    trace, mode = _staged(rows)
    if mode:
        is_new = _staged_takeover(rows, trace, mode)
    else:
        yt = np.maximum.accumulate(xt, -1)
        prev = np.concatenate([np.full(xt.shape[:-1] + (1,), -np.inf), yt[..., :-1]], -1)
        rows_tied = np.any(xt == prev, -1, keepdims=True)
        if rows_tied.any():
            need = (xt == yt) & rows_tied
            t = np.where(need, rows.tangent(need), 0.0)
            order = np.lexsort((t, xt), axis=-1)
            sv, st = np.take_along_axis(xt, order, -1), np.take_along_axis(t, order, -1)
            record_tie_decision("tangent", int(np.count_nonzero(
                (sv[..., 1:] == sv[..., :-1]) & (st[..., 1:] != st[..., :-1]))))
            order, same = refine_full_ties(order, xt, t, rows)
            is_new = _takes_over(order, same)
        else:
            is_new = xt[..., 1:] > prev[..., 1:]
    starts = np.where(is_new, np.arange(1, n), 0)
    return np.maximum.accumulate(np.concatenate([np.zeros(xt.shape[:-1] + (1,), int), starts],
                                                -1), -1)


def _takes_over(order: np.ndarray, same: np.ndarray) -> np.ndarray:
    """Whether each entry after the first ranks above every earlier one, given the sorted
    ``order`` and where each sorted entry ties its predecessor (``same``)."""
    rank = np.empty(order.shape, int)
    np.put_along_axis(rank, order, np.cumsum(~same, -1), -1)
    run = np.maximum.accumulate(rank, -1)
    return rank[..., 1:] > run[..., :-1]


def _staged_takeover(rows: Rows, trace, mode: str) -> np.ndarray:
    """`ray_cummax`'s take-overs in a staged sweep (numpy rows)."""
    xt = np.asarray(rows.vals)
    prev = np.concatenate([np.full(xt.shape[:-1] + (1,), -np.inf),
                           np.maximum.accumulate(xt, -1)[..., :-1]], -1)
    if mode == "values":
        trace.flag_tie(rule_context.node, xt == prev)
        return xt[..., 1:] > prev[..., 1:]
    keys = [xt] + rows.staged_keys(trace, np)
    order = _stable_lexsort(keys, np)
    same = np.zeros(xt.shape, bool)
    same[..., 1:] = True
    for key in keys:
        s = np.take_along_axis(key, order, -1)
        same[..., 1:] &= s[..., 1:] == s[..., :-1]
    rank = np.empty(order.shape, int)
    np.put_along_axis(rank, order, np.cumsum(~same, -1), -1)
    run = np.maximum.accumulate(rank, -1)
    holder = np.maximum.accumulate(np.where(
        np.concatenate([np.ones(xt.shape[:-1] + (1,), bool), rank[..., 1:] > run[..., :-1]],
                       -1), np.arange(xt.shape[-1]), 0), -1)
    tie = rank[..., 1:] == run[..., :-1]  # a full tie with the running maximum: it stays
    dead = rows.staged_dead(trace, np)
    if dead is not None:
        tie = tie & ~(dead[..., 1:] & np.take_along_axis(dead, holder[..., :-1], -1))
    trace.count_undecided(rule_context.node, tie)
    return rank[..., 1:] > run[..., :-1]


__all__ = ["Rows", "lex_argmax", "lex_order", "ray_argmax", "ray_argmax_at", "ray_argsort",
           "ray_cummax", "refine_full_ties"]
