"""The tie contract: every tie is decided along the ray, then lexicographically, by one service.

A rule that meets a tie ``h == 0`` (``a == b``) asks `tie_sign` which side the sweep enters,
and nothing else decides: no rule keeps a convention of its own. The answer is the sign of
``h`` at the point ``x + ε₁v + ε₂w₁ + ε₃w₂ + …`` with ``ε₁ ≫ ε₂ ≫ …`` infinitesimal, read in
this order (each step only for the entries the previous one left at zero):

1. the tangent ``ḣ`` along ``v`` (free: the engine pushes ``v`` through the linearizations);
2. the power series of ``h`` along ``x + δv``: first as a `Jet` (`node_jet`: float
   coefficient arrays with rigorous error bounds, the cone re-run once on whole arrays),
   which settles every entry whose bounds prove its sign; then, for the entries it leaves
   open only, the exact series (`node_series`: rationals, and intervals for transcendental
   constants), at an order raised until the sign is proven or a cap is met. Both give the
   exact series' answer: this decides every tie that opens at some order, so with an
   explicit ``v`` the result is the limiting gradient along ``v``;
3. where ``h`` vanishes along the whole ray (or its sign cannot be proven), the next direction
   ``w₁`` of the lexicographic sequence: first order (``w₁`` pushed through the linearizations
   already selected), then the nested series along ``x + ε₁v + ε₂w₁`` (jets first, as in
   step 2); then ``w₂``, … The
   directions come from ``directions=`` and then from the seed. This is how LD-derivatives
   (Nesterov; Khan & Barton) decide, and it composes: every rule sees the same ordering, so
   ``relu(h) - relu(-h)`` comes out as ``∇h`` wherever the ties persist.

A tie still at zero after a random direction is an equality on a neighbourhood of ``x``
(almost surely): every branch then has the same gradient, and comparisons read their exact
value there (``h > 0`` is false). Where the series cannot be computed or its sign proven (a
cancellation of interval-enclosed transcendental constants, an operation with no series) and
first order is flat along every direction, the tie is reported as ``flat``: the branches'
gradients agree almost surely, and rules whose answer depends on more than the gradient
(``where``) refuse it with `UndecidedTieError`. Every decision is reported per sweep
(`asd.core.primitive.record_tie_decision`), so a result can say which element it is.

Array libraries: in a torch or JAX sweep step 1 runs in that library, on its device; only
ties it leaves open (a zero or rounding-sized tangent) copy the tied entries, and for the
series the tied quantity's ancestor cone, to the host (`asd.core.backend.to_host`).

Cost: there is no cap on a cone. The cone follows the selected pieces: an entry whose rule
took a constant piece (a dead ReLU) has a constant series, read from the sweep's maps
(`selected_constants`), so a pool of them is decided without evaluating anything
(`index_decided`, `first_order_keys`). Other cones are re-run once on jets (a few float
passes per node, memoized per sweep); the exact series runs only on the entries the jets
cannot settle, or where a node of the cone has no jet (`asd.core.jet.JetUnsupported`),
within a budget per evaluation (`asd.core.series.Budget`): past it the series is unavailable,
as for an operation without one (first order decides the order rules, ``where`` refuses).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from asd.core import backend
from asd.core.jet import ORDER, Jet, JetMask, JetUnsupported, jet_sign
from asd.core.jet import basis as jet_basis
from asd.core.linear import Dense, Diagonal, FanIn, Mask, Reshape, Transpose, Zero
from asd.core.primitive import (
    FixedTangent,
    record_degenerate_tie,
    record_tie_decision,
    rule_context,
)
from asd.core.series import (
    Budget,
    RaySeries,
    Series,
    SeriesTooLarge,
    TranscendentalConstant,
    UnprovenSign,
    is_infinite,
    leading_term,
    object_array,
    to_fraction,
)
from asd.core.sweep import LazyTangent, Trace, missing_cone, tangent_at
from asd.errors import NotLipschitzError, UndecidedTieError

ORDERS = (2, 4, 8, 16, 32, 64)
"""The truncation orders tried in turn: most ties open at order 2; each step re-runs only the
tied cone, and a cap keeps Fraction coefficients from growing without bound."""


class SeriesUnavailable(Exception):
    """The series along the ray cannot be computed exactly (a transcendental or large cone)."""


class SeriesTruncated(SeriesUnavailable):
    """A comparison inside the cone needs a higher order of the series (not an impossibility)."""


# ----- series of values along the ray -----

def as_series(a, order: int = ORDERS[-1]) -> np.ndarray:
    """``a`` as an object array of series; plain numbers become exact constant series."""
    a = backend.to_host(a)
    if a.dtype == object:
        flat = [_unwrapped(e) for e in a.flat]
        return object_array([e if isinstance(e, Series) or is_infinite(e)
                             else RaySeries([e], order) for e in flat], a.shape)
    return object_array([float(e) if is_infinite(float(e)) else RaySeries([float(e)], order)
                         for e in a.ravel()], a.shape)


def _unwrapped(e):
    """An entry of an object array as a number or series: numpy stores a 0-d array assigned
    into one entry of an object array as the array itself (``out[0] = new`` in an item
    assignment's implementation run on series, ``y[0] += x[0]``), which arithmetic on series
    cannot read."""
    while isinstance(e, np.ndarray) and e.ndim == 0:
        e = e[()]
    return e


def line(x, tangents: list, order: int = ORDERS[-1], last: int | None = None) -> np.ndarray:
    """``x + ε₁t₀ + ε₂t₁ + …`` entrywise, exactly: nested series, one level per tangent
    (``last``: the order of the last level, where only its first powers are read)."""
    x = np.asarray(backend.to_host(x), dtype=float)
    arrays = np.broadcast_arrays(x, *(np.asarray(backend.to_host(t), dtype=float)
                                      for t in tangents))
    flat = [a.ravel() for a in arrays]
    out = []
    for e in range(x.size):
        s = RaySeries([flat[0][e], flat[1][e]], order, 0)
        for level in range(2, len(flat)):
            top = last if last is not None and level == len(flat) - 1 else order
            s = RaySeries._new([s, to_fraction(flat[level][e])], top, level - 1, True)
        out.append(s)
    return object_array(out, x.shape)


def node_series(trace: Trace, k: int, depth: int = 1, order: int = ORDERS[-1]) -> np.ndarray:
    """Node ``k`` along ``x + ε₁v + … + ε_depth w_(depth-1)`` as an object array of series.

    Re-runs the numpy implementations of ``k``'s ancestors on series (their ties then decide
    themselves by the same lexicographic order); memoized per sweep, so the ties of a long
    program evaluate each node once. Each node's constant term is its floating-point value
    at the point (`_evaluate_cone`'s ``snap``): the branches inside the cone are then the
    sweep's, which the values decided (``clip(expm1(x) - c)`` saturated because expm1
    rounded above the bound, though its exact value is below it: fuzz finding F54).
    """
    memo = trace.series_memo.setdefault((depth, order), {})
    if k in memo:
        return memo[k]
    return _evaluate_cone(trace, k, memo, lambda j: line(trace.values[j], [trace.tangent(j)] + [
        trace.lex_tangent(j, level) for level in range(1, depth)], order), order, snap=True)


JET_ORDERS = {1: ORDER, 2: 2, 3: 2}
"""The truncation of a jet along a ray nested ``depth`` deep (a jet holds ``(order + 1) **
depth`` coefficients per entry); deeper rays are left to the exact series."""


def node_jet(trace: Trace, k: int, depth: int = 1, precise: bool = False) -> Jet:
    """Node ``k`` along ``x + ε₁v + … + ε_depth w_(depth-1)`` as a `Jet`: float
    coefficients with error bounds (``precise``: sums of dyadic terms proven exact, see
    `asd.core.jet.basis`).

    Re-runs the numpy implementations of ``k``'s ancestors on jets, as `node_series` does on
    exact series (the ties inside the cone decide themselves where the bounds settle them,
    and make the entries they select uncertain where not), memoized per sweep. Raises
    `JetUnsupported` where a node of the cone has no jet (a transcendental function, an
    operation the jets do not cover): the exact series then decides.
    """
    if depth not in JET_ORDERS:
        raise JetUnsupported(f"a ray nested {depth} deep")
    memo = trace.series_memo.setdefault(("jet", depth, precise), {})
    nodes, basis_ = trace.nodes, jet_basis(JET_ORDERS[depth], depth, precise)
    for j in missing_cone(nodes, k, memo) if k not in memo else ():
        node = nodes[j]
        if node.prim is None:
            memo[j] = Jet.line(backend.to_host(trace.values[j]), [
                backend.to_host(trace.tangent(j))] + [backend.to_host(trace.lex_tangent(j, lv))
                                                      for lv in range(1, depth)], basis_)
            continue
        args = [memo[r] if type(r) is int and r in memo
                else backend.to_host(trace.values[r]) if type(r) is int
                else backend.to_host(r.value) for r in node.args]
        memo[j] = None if any(a is None for a in args) else _jet_of(node, args, basis_)
    if memo[k] is None:
        raise JetUnsupported(f"%{k} = {nodes[k].name}: a node of its cone has no jet")
    return memo[k]


def _jet_of(node, args, basis_) -> Jet | JetMask | None:
    """``node``'s implementation on jets (None where it cannot run on them)."""
    try:
        out = node.prim.impl(*args, **node.params)
        return out if isinstance(out, Jet | JetMask) else Jet.constant(out, basis_)
    except Exception:  # JetUnsupported, or an impl that reads its operand as plain floats
        return None


def _evaluate_cone(trace: Trace, k: int, memo: dict, input_line, order: int,
                   snap: bool = False) -> np.ndarray:
    """Node ``k`` on series: its missing ancestors re-run on object arrays of series, the
    inputs given by ``input_line(j)`` (the engine's own numpy implementations, so every tie
    inside the cone decides itself exactly as the ray does).

    ``snap=True`` sets every node's constant term to its floating-point value at the point:
    exact arithmetic on rounded constants (``sum(x) * 0.3333333333333333``) leaves a residue
    of order 1e-17 where the program's own value is 0, which would otherwise read as the
    leading term of a quantity that vanishes at the point."""
    nodes = trace.nodes
    work = Budget()  # one evaluation's bound: a cone too large to compute is unavailable
    for j in missing_cone(nodes, k, memo):
        node = nodes[j]
        if node.prim is None:
            memo[j] = input_line(j)
            continue
        args = [memo[r] if type(r) is int and r in memo
                else backend.to_host(trace.values[r]) if type(r) is int
                else backend.to_host(r.value) for r in node.args]
        try:
            with work:
                out = node.prim.impl(*args, **node.params)
        except SeriesTooLarge as exc:
            raise SeriesUnavailable(f"{node.name}: {exc}") from exc
        except UnprovenSign as exc:
            kind = SeriesTruncated if exc.truncated else SeriesUnavailable
            raise kind(f"{node.name}: {exc}") from exc
        except TranscendentalConstant as exc:
            raise SeriesUnavailable(f"{node.name}: {exc}") from exc
        except Exception as exc:  # any other failure: not an exactly computable operation
            raise SeriesUnavailable(f"{node.name} cannot run on exact series: {exc}") from exc
        memo[j] = as_series(out, order)
        if snap:
            memo[j] = _snapped(memo[j], trace.values[j])
    return memo[k]


def _snapped(series: np.ndarray, value) -> np.ndarray:
    """``series`` with each entry's constant term set to the entry of ``value``."""
    value = np.broadcast_to(np.asarray(backend.to_host(value), dtype=float), series.shape)
    return object_array([e.with_constant(v) if isinstance(e, Series) else e
                         for e, v in zip(series.flat, value.flat)], series.shape)


def input_series(x, dx, shape: tuple, depth: int | None = 1, order: int = 24,
                 mask: np.ndarray | None = None) -> np.ndarray:
    """The series of a rule's input ``x`` (with lazy tangent ``dx``), broadcast to ``shape``.

    ``depth`` counts the directions read (``v``, then ``w1``, ...); None reads them all, so
    comparing two entries' series orders them exactly as the lexicographic ray does.
    ``mask`` (a bool array of ``shape``) names the entries the caller reads: series built from
    the tangents alone (a fixed direction, or first order where the exact cone is out of
    reach) are then built for those entries only, and the others are None.
    """
    if depth is None:
        depth = 1 + (_Side(x, dx, shape).levels() or 0)
        if isinstance(dx, LazyTangent):
            try:
                s = node_series(dx.trace, dx.k, depth, order)
            except SeriesUnavailable:
                # first order along every direction: the order ties read where the exact
                # series is out of reach (reported as flat by the rule's caller)
                trace, k = dx.trace, dx.k
                record_tie_decision("flat", 1)
                return _masked_line(x, [trace.tangent(k)] + [
                    trace.lex_tangent(k, level) for level in range(1, depth)], shape, order,
                    mask)
            return np.broadcast_to(s, shape)
    if isinstance(dx, LazyTangent):
        return np.broadcast_to(node_series(dx.trace, dx.k, depth, order), shape)
    if isinstance(dx, FixedTangent):
        return _masked_line(x, [dx.value, *dx.lex[:depth - 1]], shape, order, mask)
    if mask is None:
        return np.broadcast_to(as_series(x, order), shape)
    out = np.full(shape, None, dtype=object)
    out[mask] = as_series(entries(x, shape, mask), order)
    return out


def first_order_keys(x, dx, shape: tuple, mask: np.ndarray, *, with_source: bool = False):
    """Float keys ordering the entries ``mask`` of ``x`` (lazy tangent ``dx``, broadcast to
    ``shape``) exactly as their series along the lexicographic ray do, shape
    ``(levels,) + shape`` (0 elsewhere); None: compare `input_series` instead.

    Comparing entries by these keys lexicographically (larger key, larger entry) is what a
    comparison of their series does, without building them, so a rule with many such ties
    (pooling windows of dead ReLUs) decides them all in a few numpy passes. The keys are the
    entries' ranks as proven in floats (`_jet_keys`: their values where their rules selected
    constant pieces, else their jets), or, where the exact series is out of reach, the
    first-order tangents along ``v``, ``w1``, ... (reported as ``flat``).

    ``with_source=True`` returns ``(keys, source)`` so the caller can report how each tie was
    decided, as comparing the series would: ``"flat"`` (reported here), or the key levels'
    meaning for the proven ranks: ``("series",)`` (one level: equal keys are equal along
    every direction, different ones differ along ``v``) or ``("series", "lexicographic")``
    (the first level tells entries that differ along ``v``, the second those that differ
    only along a later direction).
    """
    if not isinstance(dx, LazyTangent):
        return (None, None) if with_source else None
    trace, k = dx.trace, dx.k
    depth = 1 + (_Side(x, dx, shape).levels() or 0)
    keys, source = _jet_keys(trace, k, depth, shape, mask)
    if keys is not None:
        return (keys, source) if with_source else keys
    try:
        node_series(trace, k, depth)
    except SeriesUnavailable:
        record_tie_decision("flat", 1)
        tangents = [trace.tangent(k)] + [trace.lex_tangent(k, level) for level in range(1, depth)]
        keys = np.zeros((depth,) + tuple(shape))
        for level, t in enumerate(tangents):
            keys[level][mask] = entries(t, shape, mask)
        return (keys, "flat") if with_source else keys
    return (None, None) if with_source else None


def _jet_keys(trace, k: int, depth: int, shape: tuple, mask: np.ndarray) -> tuple:
    """Keys ranking node ``k``'s entries at ``mask`` as their exact series along the ray
    ``depth`` levels deep do, where floats prove it; None elsewhere.

    Entries whose rules all selected constant pieces (`selected_constants`) are ranked by
    their values, without a series. Otherwise by their jets, sorted lexicographically by
    coefficient: the order is proven where every neighbouring pair is either equal (every
    coefficient exact and the same) or apart (exact and equal up to a coefficient whose
    intervals are disjoint). Along ``v`` alone, equal entries must also be still (then equal
    along every direction); along the whole ray, no entry may be cut. Returns ``(keys,
    source)`` as `first_order_keys` does, ``(None, None)`` where floats prove nothing: a rank
    along the whole ray comes with the ranks along ``v`` (which pairs differ there), or is
    not used, so the decisions are reported as the series would report them."""
    mask = np.asarray(mask, bool)
    constant = selected_constants(trace, k)
    if constant is not None and np.all(entries(constant, tuple(shape), mask)):
        # constant pieces along every direction: the values themselves order the entries
        value = entries(trace.values[k], tuple(shape), mask).astype(float)
        keys = np.zeros((1,) + tuple(shape))
        keys[0][mask] = value
        return keys, ("series",)
    along_v = None  # ranks along v alone, equal rows not required to be still
    for level, precise in _stages(depth):
        try:
            sub = node_jet(trace, k, level, precise).broadcast(shape)[mask]
        except JetUnsupported:
            continue
        if level > 1 and sub.cut.any():
            continue
        c = sub.c.reshape(sub.c.shape[0], -1).T
        e = sub.e.reshape(sub.e.shape[0], -1).T
        if level == 1 and depth > 1 and along_v is None:
            along_v = _proven_rank(c, e, None)
        rank = _proven_rank(c, e, None if level == depth else sub.still.reshape(-1))
        if rank is None:
            continue
        if level == 1 or depth == 1:
            keys = np.zeros((1,) + tuple(shape))
            keys[0][mask] = rank
            return keys, ("series",)
        if along_v is None:
            return None, None  # which pairs differ along v is unknown: the series report it
        keys = np.zeros((2,) + tuple(shape))
        keys[0][mask], keys[1][mask] = along_v, rank
        return keys, ("series", "lexicographic")
    return None, None


def selected_constants(trace, k: int) -> np.ndarray | None:
    """The entries of node ``k`` whose rule selected a constant piece (a dead relu, an entry
    clipped to a constant bound), known from the sweep without evaluating a series: their
    series along the ray, and along every further direction, is their value. None where
    none is known.

    An entry qualifies where every input reaches it only through a selection map (a
    `Diagonal` by a bool mask, a `Mask`, or `Zero`) with an empty row there: the piece the
    rule took does not read its inputs, so it is constant near the point along the ray. (A
    zero derivative of a smooth piece, ``x**2`` at 0, is a float `Diagonal`: it does not
    qualify.) A node that only moves its input's entries (a transpose, a reshape) has the
    constant entries of its input, moved. A bool array broadcastable to the node's shape, in
    the maps' array library."""
    if type(trace) is not Trace or trace.lins[k] is None:
        return None
    lin = trace.lins[k]
    if type(lin) in _MOVES:  # a layout change (JAX's pooling transposes): the input's entries
        (arg,) = trace.nodes[k].args
        inner = selected_constants(trace, arg) if type(arg) is int else None
        if inner is None:
            return None
        xp = backend.namespace(inner)
        return lin.push(xp.broadcast_to(inner, tuple(lin.in_shape)))
    parts = [m for m in lin.maps if m is not None] if type(lin) is FanIn else [lin]
    out = None
    for m in parts:
        selection = isinstance(m, Mask | Zero) or (
            type(m) is Diagonal and m.d is not None and backend.numpy_dtype(m.d).kind == "b")
        if not selection:
            return None
        zero = m.zero_rows()
        out = zero if out is None else out & zero
    return out


_MOVES = (Transpose, Reshape)
"""Maps that only move entries: a moved constant entry stays constant."""


def _stages(depth: int) -> list[tuple[int, bool]]:
    """The filters tried in turn, cheapest first: jets along ``v``, then along the ray
    ``depth`` levels deep; plain bounds, then sums proven exact."""
    return [(level, precise) for level in sorted({1, depth}) for precise in (False, True)]


def _proven_rank(c: np.ndarray, e: np.ndarray, still: np.ndarray | None) -> np.ndarray | None:
    """Ranks of the rows ``c`` (coefficients with bounds ``e``) in lexicographic order,
    equal rows sharing one, or None where the bounds do not prove that order (or, given
    ``still``, where equal rows are not both still)."""
    if not len(c):
        return np.zeros(0)
    if not e.any() and (c == c[:1]).all():  # one value (pools of dead relus)
        return None if still is not None and not still.all() else np.zeros(len(c))
    order = np.lexsort(c.T[::-1])
    cs, es = c[order], e[order]
    unproven = (cs[1:] != cs[:-1]) | (es[1:] != 0) | (es[:-1] != 0)
    first = np.argmax(unproven, axis=1)[:, None]
    apart = unproven.any(1)
    hi = np.take_along_axis(cs[:-1] + es[:-1], first, 1)[:, 0]
    lo = np.take_along_axis(cs[1:] - es[1:], first, 1)[:, 0]
    if not np.all(~apart | (hi < lo)):
        return None
    if still is not None:
        ss = still[order]
        if np.any(~apart & ~(ss[1:] & ss[:-1])):
            return None
    rank = np.empty(len(c))
    rank[order] = np.concatenate([[0.0], np.cumsum(apart)])
    return rank


def index_decided(dx, shape: tuple):
    """The entries of an input (lazy tangent ``dx``, broadcast to ``shape``) that a
    comparison among tied entries orders by index without asking their tangents: those whose
    rule selected a constant piece (`selected_constants`: a dead relu, an entry clipped to a
    constant bound), whose series along the ray and along every further direction is their
    value. Among tied entries that all qualify every series is the same constant, so the
    first is chosen, as comparing their series would choose; a pool of dead relus is decided
    without a tangent, a series or a host copy. Returned in ``dx``'s array library (a bool
    array broadcast to ``shape``); None where no entry is known to qualify."""
    if type(dx) is not LazyTangent or type(dx.trace) is not Trace:
        return None  # a re-run's tangent (`asd.analysis.clarke`) reads other maps than these
    constant = selected_constants(dx.trace, dx.k)
    if constant is None:
        return None
    if backend.is_host(constant):
        return np.broadcast_to(constant, shape)
    return backend.namespace(constant).broadcast_to(constant, tuple(shape))


def record_asked(dx, count: int) -> None:
    """Report that the running rule met ``count`` tied entries of the input ``dx`` (what
    asking ``dx`` for their tangents reports), for entries decided without asking."""
    if isinstance(dx, LazyTangent) and rule_context.trace is dx.trace and count:
        dx.trace.record_tie(rule_context.node, int(count))


def _masked_line(x, tangents: list, shape: tuple, order: int, mask) -> np.ndarray:
    """`line` broadcast to ``shape``, at the entries ``mask`` only (all when None)."""
    if mask is None:
        return np.broadcast_to(line(x, tangents, order), shape)
    out = np.full(shape, None, dtype=object)
    out[mask] = line(entries(x, shape, mask), [entries(t, shape, mask) for t in tangents], order)
    return out


# ----- deciding ties -----

class _Side:
    """One side of a tie: its value, lazy tangent, and how to read it along each direction."""

    def __init__(self, x, dx, shape: tuple):
        self.x, self.dx, self.shape = x, dx, shape
        self.moves = dx is not None and not getattr(dx, "is_zero", False)

    def levels(self) -> int | None:
        """How many directions after ``v`` this side can be read along (None: a constant,
        which reads the same along every direction)."""
        if isinstance(self.dx, LazyTangent):
            return self.dx.trace.lex.levels
        if isinstance(self.dx, FixedTangent):
            return len(self.dx.lex)
        return None

    def tangent(self, level: int, mask: np.ndarray) -> np.ndarray:
        if not self.moves:
            return np.zeros(int(np.count_nonzero(mask)))
        if level == 0:
            return np.asarray(backend.to_host(tangent_at(self.dx, mask, self.shape)),
                              dtype=float)
        if isinstance(self.dx, LazyTangent):
            t = self.dx.trace.lex_tangent(self.dx.k, level)
        else:
            t = self.dx.lex[level - 1]
        return entries(t, self.shape, mask)

    def jet(self, depth: int, mask: np.ndarray, precise: bool = False) -> Jet:
        """This side along the ray ``depth`` levels deep at the entries ``mask``, as a jet
        (`node_jet`)."""
        if isinstance(self.dx, LazyTangent) and self.moves:
            jet = node_jet(self.dx.trace, self.dx.k, depth, precise)
            return jet.broadcast(self.shape)[mask]
        if depth not in JET_ORDERS:
            raise JetUnsupported(f"a ray nested {depth} deep")
        basis_ = jet_basis(JET_ORDERS[depth], depth, precise)
        value = entries(self.x, self.shape, mask)
        if isinstance(self.dx, FixedTangent) and self.moves:
            return Jet.line(value, [entries(t, self.shape, mask) for t in
                                    [self.dx.value, *self.dx.lex[:depth - 1]]], basis_)
        return Jet.constant(value, basis_)

    def series(self, depth: int, order: int, mask: np.ndarray) -> np.ndarray:
        if not self.moves:
            return as_series(entries(self.x, self.shape, mask), order)
        return input_series(self.x, self.dx, self.shape, depth, order, mask)[mask]


def entries(t, shape: tuple, mask: np.ndarray) -> np.ndarray:
    """The entries ``mask`` (a host bool array) of ``t`` broadcast to ``shape``, on the host:
    another library's array is read on its device and only those entries are copied."""
    if backend.is_host(t):
        return np.broadcast_to(t, shape)[mask]
    xp = backend.namespace(t)
    return backend.to_host(xp.broadcast_to(t, tuple(shape))[backend.from_host(mask, t)])


# ----- the declarative service: rules state the switching quantity, the engine decides -----

def ray_compare(a, da, b, db=None, *, record: bool = False, strict: bool = False,
                beyond: bool = False):
    """The sign of ``a - b`` at ``x + δv`` (δ ↓ 0, then the lexicographic directions), for
    every entry of their broadcast shape, as int8 in their array library.

    This is how a rule states a switching quantity: it never asks whether ``a == b`` holds
    somewhere; the engine compares the values, and where they tie decides by the contract of
    this module (`tie_sign`: tangent, series, further directions; 0 only where ``a`` and
    ``b`` are equal near ``x``). ``da``/``db`` are the operands' lazy tangents (``db=None``:
    ``b`` is a constant). In a staged sweep (`Trace.staged`, inside ``jax.jit``) no value
    leaves the device: ties are decided by the first-order signs along ``v, w1, …`` as array
    operations, and the entries they leave open are counted in the sweep's ``undecided``
    flag (`staged_sign`). NaN compares as 0 (neither side).

    ``beyond=True`` returns ``(sign, beyond)``: ``beyond`` (a host bool mask, or None where
    no entry is) marks the entries whose sign no order along ``v`` itself decided (tangent
    and series agree as far as the sweep could tell: the ray stays on ``a == b``), so a
    further direction did. A tie of a Lipschitz rule may take that side (both pieces agree
    on the ray); a jump may not: along the ray its value is the one where ``a == b``
    (`asd.core.sweep.Trace.check_lipschitz` checks the output's tangent there). A staged
    sweep reports none: it counts every jump reaching an output as undecided.
    """
    sign, on_ray = _ray_compare(a, da, b, db, record, strict)
    return (sign, on_ray) if beyond else sign


def _ray_compare(a, da, b, db, record: bool, strict: bool):
    """`ray_compare`'s sign, and its ``beyond`` mask (None: no entry)."""
    xp = backend.namespace(a, b)
    a_, b_ = backend.operands(a, b) if xp is not np else (np.asarray(a), np.asarray(b))
    shape = tuple(np.broadcast_shapes(tuple(np.shape(a_)), tuple(np.shape(b_))))
    gt, lt = xp.broadcast_to(a_ > b_, shape), xp.broadcast_to(a_ < b_, shape)
    sign = xp.astype(gt, xp.int8) - xp.astype(lt, xp.int8)
    tie = xp.broadcast_to(a_ == b_, shape)
    trace = _trace_of(da, db)
    mode = getattr(trace, "staged", False)  # a re-run's tangents (asd.clarke) read eagerly
    if trace is None and getattr(rule_context.trace, "staged", False):
        return sign, None  # constant operands in a staged sweep: equal where they tie
    if mode:
        if mode == "values":  # a probe: the values' side, ties only flagged
            trace.flag_tie(rule_context.node, tie)
            return sign, None
        return xp.where(tie, staged_sign(trace, a, da, b, db, tie), sign), None
    if not bool(xp.any(tie)):
        return sign, None
    tied, on_ray = tie_sign(a, da, b, db, tie, record=record, strict=strict, beyond=True)
    if on_ray is not None:  # in the broadcast shape (the tie-mask order of `tie_sign`)
        host = backend.to_host(tie)
        full = np.zeros(host.shape, bool)
        full[host] = on_ray
        on_ray = full if full.any() else None
    return backend.set_at(xp.asarray(sign, copy=True), tie, xp.astype(tied, xp.int8)), on_ray


def ray_nonnegative(x, dx, *, mask_dtype: bool = False):
    """Where ``x >= 0`` at ``x + δv`` (δ ↓ 0, then the lexicographic directions): the side
    a kink at 0 (relu, abs, clip at 0) takes, per entry, decided by `ray_compare`.

    ``mask_dtype=True`` returns it as 0/1 in ``x``'s dtype (torch multiplies by a float mask
    far faster than by a bool one). Another library's ``x`` with no entry at 0 (or NaN) has
    no tie: one reduction tells, and the mask is ``x > 0`` written by one kernel
    (``positive``), with no tie masks built."""
    xp = backend.namespace(x)
    trace = _trace_of(dx)
    staged = getattr(trace, "staged", False)
    if xp is np and not staged:  # two passes where no entry is tied (every numpy relu)
        side = np.asarray(x > 0)
        tie = x == 0
        if tie.any():
            side[tie] = tie_sign(x, dx, 0.0, None, tie) >= 0
        return side.astype(x.dtype) if mask_dtype else side
    if xp is not np and not staged and untied(x, xp):
        return backend.kernel("positive", xp, _positive)(x) if mask_dtype else x > 0
    side = ray_compare(x, dx, 0.0) >= 0
    return xp.astype(side, x.dtype) if mask_dtype else side


def untied(x, xp) -> bool:
    """True when no entry of another library's floating ``x`` is 0 or NaN, so a kink at 0
    has no tie to decide: one reduction (``min |x| > 0``) instead of a bool mask and its
    ``any``."""
    return (xp.isdtype(x.dtype, "real floating") and backend.size(x) > 0
            and bool(xp.min(xp.abs(x)) > 0))


def _positive(x):
    """``x > 0`` as 0/1 in ``x``'s dtype."""
    xp = backend.namespace(x)
    return xp.astype(x > 0, x.dtype)


def refuse_where(mask, error: Callable[[], Exception]) -> None:
    """Raise ``error()`` where any entry of ``mask`` holds: how a rule states a check that
    refuses a point (a root at 0, a jump, a domain). The rule never branches on the mask
    itself; an eager sweep raises, and a staged sweep (no value can be read) counts the
    entries as undecided for the running node, so its caller knows the staged result does
    not stand there (the eager sweep would refuse it)."""
    trace = rule_context.trace
    mode = getattr(trace, "staged", False)
    if mode == "values":  # a probe: send the call to the full staged sweep, which counts it
        trace.flag_tie(rule_context.node, mask)
        return
    if mode:
        trace.count_undecided(rule_context.node, mask)
        return
    xp = backend.namespace(mask)
    if bool(xp.any(mask)) if xp is not np else bool(np.any(mask)):
        raise error()


def _trace_of(*dxs):
    """The sweep the lazy tangents belong to, if any."""
    return next((dx.trace for dx in dxs if isinstance(dx, LazyTangent)), None)


def staged_sign(trace: Trace, a, da, b, db, tie):
    """The sign of ``a - b`` along the lexicographic ray to first order, as array operations
    (no host copy, no Python branch on a value): the first of ``ḣ`` along ``v, w1, …, wk``
    that is clearly nonzero (above ``SMALL`` times the direction's largest entry, far beyond
    rounding). Tied entries (``tie``) where every level is (nearly) zero are left 0 and
    counted in the sweep's undecided flag for the running node: the eager sweep decides
    those exactly."""
    xp = backend.namespace(tie)
    shape = tuple(tie.shape)
    left, right = _Side(a, da, shape), _Side(b, db, shape)
    scale = trace.staged_scale()

    def level_step(level: int, carry: tuple) -> tuple:
        sign, open_, moved = carry
        h_dot = _level_tangent(left, level) - _level_tangent(right, level)
        clear = open_ & (xp.abs(h_dot) > SMALL * scale)
        sign = xp.where(clear, xp.astype(xp.sign(h_dot), xp.int8), sign)
        # moved: some level's tangent is nonzero, if below the threshold
        return sign, open_ & ~clear, moved | (h_dot != 0)

    sign, open_, moved = level_step(0, (xp.zeros_like(tie, dtype=xp.int8), tie,
                                        xp.zeros_like(tie)))
    # a further direction's tangent (a push through the whole cone) is computed only where
    # an entry is still open after the levels before it: where none is, the level changes
    # nothing (``clear`` is empty; ``moved`` is read only where open), so skipping it is
    # the same computation. Staged on JAX it is a ``lax.cond`` (`backend.when_any`).
    for level in range(1, trace.lex.levels + 1):
        for j in trace.leaf_index:  # the direction's constants, made outside the branch
            trace.lex_leaf(j, level)
        sign, open_, moved = backend.when_any(
            open_, _isolated_level(trace, level, lambda c, lv=level: level_step(lv, c)),
            (sign, open_, moved))
    # Entries no input moves to first order take either side: their tied quantity's
    # composite linearization is zero there, so the choice changes nothing first order
    # computes. Where the last direction is drawn at random, a tangent that is exactly 0
    # along it says so almost surely (a nonzero linear form vanishes on a null set);
    # otherwise the push of ones through |maps| (`Trace.reach`) proves it.
    if trace.lex.levels > len(trace.lex.given):
        open_ = open_ & moved
    else:  # open only where some side moves: the push of ones through |maps| proves the rest
        moving = None
        for side in (left, right):
            if side.moves:
                reach = trace.reach(side.dx.k) if isinstance(side.dx, LazyTangent) else None
                if reach is None:
                    moving = None
                    break
                here = xp.broadcast_to(reach, shape) != 0
                moving = here if moving is None else moving | here
        else:
            if moving is not None:
                open_ = open_ & moving
    trace.count_undecided(rule_context.node, open_)
    return sign


def _isolated_level(trace: Trace, level: int, step: Callable) -> Callable:
    """``step`` with the memo of direction ``level``'s tangents restored after it: inside a
    ``lax.cond`` branch the pushed tangents are the branch's own tracers, which another
    node's decision (another branch) must not read; it pushes them again if it needs them."""
    def run(carry):
        memo = trace.lex_tangents.get(level)
        saved = None if memo is None else dict(memo)
        try:
            return step(carry)
        finally:
            if saved is None:
                trace.lex_tangents.pop(level, None)
            else:
                trace.lex_tangents[level] = saved

    return run


def _level_tangent(side: _Side, level: int):
    """One side's full tangent along direction ``level`` (0: ``v``); 0.0 for a constant."""
    if not side.moves:
        return 0.0
    if level == 0:
        return side.dx()
    if isinstance(side.dx, LazyTangent):
        return side.dx.trace.lex_tangent(side.dx.k, level)
    return side.dx.lex[level - 1]


def tie_sign(a, da, b, db, tie, *, record: bool = False, strict: bool = False,
             beyond: bool = False):
    """The side of ``a - b`` that the sweep enters, at the tied entries (``a == b`` there).

    ``tie`` is a bool mask in the broadcast shape of ``a`` and ``b``; ``da``/``db`` are their
    lazy tangents (``db=None`` for a constant ``b``). Returns -1 or +1 per tied entry (in mask
    order, in ``tie``'s array library), decided as the module docstring says; 0 only where
    ``a`` and ``b`` are equal on a neighbourhood of ``x`` (every branch agrees; ``a > b`` is
    false there). ``record=True`` also counts the ties first order leaves open (for
    user-written branches); ``strict=True`` raises `UndecidedTieError` instead of returning 0
    for a tie that is only flat, not proven equal (for rules whose value depends on the side).
    ``beyond=True`` returns ``(sign, beyond)``, ``beyond`` a host mask in mask order (or
    None) of the entries a further direction decided (`ray_compare`).
    """
    if backend.is_host(tie):
        sign, on_ray = _tie_sign(a, da, b, db, tie, record, strict)
        return (sign, on_ray) if beyond else sign
    sign = _tangent_sign_xp(a, da, b, db, tie)
    if sign is not None:
        return (sign, None) if beyond else sign
    # a tangent at (or within rounding of) 0: the rest of the contract runs on host copies
    sign, on_ray = _tie_sign(a, da, b, db, backend.to_host(tie), record, strict)
    sign = backend.from_host(sign, tie)
    return (sign, on_ray) if beyond else sign


def _tangent_sign_xp(a, da, b, db, tie):
    """Step 1 in the array's own library: the signs of the tangents, or None if one of them
    is 0 or small enough for rounding to matter (those go to the host)."""
    xp = backend.namespace(tie)
    shape = tuple(tie.shape)
    h_dot = None
    trace = None
    for side, sgn in ((_Side(a, da, shape), 1.0), (_Side(b, db, shape), -1.0)):
        if not side.moves:
            continue
        if isinstance(side.dx, LazyTangent):
            trace = side.dx.trace
        t = tangent_at(side.dx, tie, shape)
        h_dot = sgn * t if h_dot is None else h_dot + sgn * t
    if h_dot is None or trace is None:
        return None
    scale = trace.direction_scale()
    if bool(xp.any(xp.abs(h_dot) <= SMALL * scale)):
        return None
    record_tie_decision("tangent", backend.size(h_dot))
    return xp.astype(xp.sign(h_dot), xp.int8)


def _tie_sign(a, da, b, db, tie: np.ndarray, record: bool, strict: bool) -> tuple:
    """`tie_sign` on a host mask (every library's values are read through `entries`), and
    its ``beyond`` mask (None where no entry was decided past the ray itself)."""
    shape = tie.shape
    left, right = _Side(a, da, shape), _Side(b, db, shape)
    h_dot = left.tangent(0, tie) - right.tangent(0, tie)
    sign = np.sign(h_dot).astype(np.int8)
    sign[_rounding_could_flip(left, right, tie, h_dot)] = 0
    record_tie_decision("tangent", int(np.count_nonzero(sign)))
    open_ = sign == 0
    if not open_.any():
        return sign, None
    if record:
        record_degenerate_tie(int(np.count_nonzero(open_)))
    same = _same_quantity(left, right)
    if same is not None:  # a - a: zero on every ray, whatever its series
        equal = open_ & entries(same, shape, tie)
        record_tie_decision("equal", int(np.count_nonzero(equal)))
        open_ &= ~equal
        if not open_.any():
            return sign, None
    where = np.flatnonzero(tie.ravel())
    flat = np.zeros(sign.shape, bool)  # open entries whose series could not be proven
    on_ray = None  # the entries still open once the ray itself (depth 1) is exhausted
    levels = min((n for n in (left.levels(), right.levels()) if n is not None), default=0)
    for depth in range(1, levels + 2):
        if depth > 1:  # first order along the next direction, through the selected maps
            idx = np.flatnonzero(open_)
            mask = _mask(shape, where[idx])
            s = np.sign(left.tangent(depth - 1, mask) - right.tangent(depth - 1, mask))
            decided = s != 0
            sign[idx[decided]] = s[decided]
            open_[idx[decided]] = False
            record_tie_decision("lexicographic", int(np.count_nonzero(decided)))
            if not open_.any():
                return sign, _beyond(on_ray, sign)
        _decide_by_series(left, right, shape, where, open_, sign, depth, flat)
        if depth == 1:
            on_ray = open_.copy()
        if not open_.any():
            return sign, _beyond(on_ray, sign)
    equal = open_ & ~flat
    record_tie_decision("equal", int(np.count_nonzero(equal)))
    if (open_ & flat).any():
        record_tie_decision("flat", int(np.count_nonzero(open_ & flat)))
        if strict:
            raise UndecidedTieError(
                f"{int(np.count_nonzero(open_ & flat))} tied entries (values "
                f"{entries(a, shape, tie)[open_ & flat][:3].tolist()}) are flat to first "
                "order along every direction tried, and their series along the ray could not "
                "be computed exactly (a transcendental function at a point with irrational "
                "Taylor coefficients, a very large program, or coefficients that outgrew the "
                "exact series' budget, asd.core.series.BUDGET). Which side is taken changes "
                "the result here, so asd refuses to guess: write the condition with "
                "polynomial operations near the tie, or move the point off the tie."
            )
    return sign, _beyond(on_ray, sign)


def _beyond(on_ray, sign: np.ndarray):
    """The entries open after depth 1 that a further direction decided (None: none)."""
    if on_ray is None:
        return None
    on_ray = on_ray & (sign != 0)
    return on_ray if on_ray.any() else None


def _same_quantity(left: _Side, right: _Side) -> np.ndarray | None:
    """Where both sides of a tie are one traced quantity (a bool mask of the tie's shape;
    None: nowhere): the same node, or nodes that compute the same thing from the same
    operands (``np.arctan(x) >= np.arctan(x)``), past operations with identity constants
    (``a + [0, 0, 1] > a`` in its first two entries).

    Their difference is then 0 on a whole neighbourhood of the point, an equality proven
    without a series: a transcendental cone (whose exact series is out of reach) would
    otherwise leave the tie flat, and rules whose result depends on the side (``where``)
    would refuse it though either side gives the same result."""
    a, b = left.dx, right.dx
    if not (isinstance(a, LazyTangent) and isinstance(b, LazyTangent)) or a.trace is not b.trace:
        return None
    if left.shape != right.shape:
        return None
    return same_quantity(a.trace, a.k, b.k, left.shape)


def same_quantity(trace: Trace, i: int, j: int, shape: tuple, *,
                  along_ray: bool = True) -> np.ndarray | None:
    """Where nodes ``i`` and ``j`` (broadcast to ``shape``) are one quantity along the ray
    (`_same_quantity`): a bool mask of ``shape``, None where nowhere. ``along_ray=False``:
    one quantity on a neighbourhood of the point, past identity constants only (``s + 0.0``
    and ``s``); a ray's identity piece (``|s| = s`` where the ray enters ``s >= 0``) holds
    along the ray, not beside it, so a jump between ``x`` and ``|x|`` is still a jump."""
    nodes, lins = trace.nodes, getattr(trace, "lins", None) or []
    same = None
    # past identity constants only, then also past the ray's identity pieces: the second
    # keeps only the entries where those pieces are the identity, so it must not replace
    # the first where the first already finds one quantity (|s| against itself everywhere)
    peels = [lambda k: _peeled(nodes, k)]
    if along_ray:
        peels.append(lambda k: _ray_peeled(nodes, lins, k))
    for peel in peels:
        (pi, kept_i), (pj, kept_j) = peel(i), peel(j)
        if same_node(nodes, pi, pj):
            here = np.broadcast_to(_without_leading_ones(kept_i & kept_j, shape), shape)
            same = here if same is None else same | here
    return same


def _without_leading_ones(mask: np.ndarray, shape: tuple) -> np.ndarray:
    """A peel's mask in the tie's shape: a peel past a reduction over axes of length 1 (or
    the ray pieces below it) may leave a mask with more leading 1s than the tie has."""
    while mask.ndim > len(shape) and mask.shape[0] == 1:
        mask = mask[0]
    return mask


RAY_IDENTITIES = ("abs", "relu")
"""Unary kinks whose selected piece is the identity where their branch slope is 1: there
the node equals its operand along the whole (lexicographic) ray, since the branch is the
one the ray enters (``|s| = s`` where ``s >= 0`` along the ray)."""


def _ray_peeled(nodes: list, lins: list, k: int) -> tuple[int, np.ndarray]:
    """`_peeled`, and past `RAY_IDENTITIES` at the entries whose selected piece is the
    identity (their branch slope, read from the node's diagonal map, is 1).

    ``|sinh(x)|`` against ``sinh(x)`` where ``sinh(x)`` is positive along the ray is then one
    quantity: equal along every direction the ray is refined by, proven without its series
    (the exact series of a transcendental cone climbs every order and proves nothing: the
    difference is 0 at each order, never proven 0; it took a second per call, F12)."""
    kept = np.ones((), bool)
    while True:
        k, here = _peeled(nodes, k)
        kept = kept & here
        node = nodes[k]
        lin = lins[k] if k < len(lins) else None
        if (node.prim is None or node.name not in RAY_IDENTITIES or len(node.args) != 1
                or type(node.args[0]) is not int or type(lin) is not Diagonal):
            return k, kept
        r = node.args[0]
        d = lin.d
        if (d is None or not backend.is_host(d) or nodes[r].shape != node.shape
                or np.shape(d) != tuple(node.shape)):
            return k, kept
        unit = np.asarray(d) == 1
        if not unit.any():
            return k, kept
        kept, k = kept & unit, r


def same_node(nodes: list, i: int, j: int) -> bool:
    """Whether nodes ``i`` and ``j`` compute the same value: one node, or one primitive with
    equal parameters applied to operands that are the same (compared structurally, down to
    the program's inputs, which are equal only to themselves)."""
    todo, seen = [(i, j)], set()
    while todo:
        i, j = todo.pop()
        i, j = _peeled(nodes, i, whole=True)[0], _peeled(nodes, j, whole=True)[0]
        if i == j or (i, j) in seen:
            continue
        seen.add((i, j))
        a, b = nodes[i], nodes[j]
        if (a.prim is None or a.prim is not b.prim or len(a.args) != len(b.args)
                or a.shape != b.shape or a.dtype != b.dtype
                or not _same_params(a.params, b.params)):
            return False
        for r, s in zip(a.args, b.args, strict=True):
            if type(r) is int and type(s) is int:
                todo.append((r, s))
            elif type(r) is int or type(s) is int or not _same_constant(r.value, s.value):
                return False
    return True


IDENTITIES = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "divide": 1.0}
"""Binary operations that leave an operand unchanged where the other is this constant."""


SINGLETON_REDUCTIONS = ("sum", "prod", "median", "quantile", "reduce_max")
"""Reductions that are the identity where every axis they reduce has length 1 (``np.median(a,
axis=0)`` of a ``(1, n)`` array is ``a``'s row; ``mean`` is a ``sum`` then a division by 1)."""


def _stripped(shape: tuple) -> tuple:
    """``shape`` without its leading 1s: two arrays whose shapes agree so broadcast alike."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _singleton_reduction(nodes: list, k: int) -> int | None:
    """The operand of node ``k`` if ``k`` reduces it over axes of length 1 only, with the
    remaining axes in place (equal shapes up to leading 1s, so both broadcast to any tie's
    shape entry for entry, and the same dtype): node ``k`` is then its operand's value."""
    node = nodes[k]
    if node.prim is None or node.name not in SINGLETON_REDUCTIONS or len(node.args) != 1:
        return None
    r = node.args[0]
    if type(r) is not int or nodes[r].dtype != node.dtype:
        return None
    size = int(np.prod(node.shape, dtype=np.int64))
    if int(np.prod(nodes[r].shape, dtype=np.int64)) != size or size == 0:
        return None
    return r if _stripped(nodes[r].shape) == _stripped(node.shape) else None


def _peeled(nodes: list, k: int, whole: bool = False) -> tuple[int, np.ndarray]:
    """``(j, kept)``: node ``k`` computes node ``j``'s value at the entries ``kept`` (a bool
    array broadcastable to its shape), past operations with a constant that is an identity
    there (``x + 0``, ``x * 1``) and keep the shape and dtype, and past reductions over axes
    of length 1 (`_singleton_reduction`: the shape changes by leading 1s only, so the two
    broadcast alike). ``whole``: only constants that are an identity at every entry."""
    kept = np.ones((), bool)
    while True:
        r = _singleton_reduction(nodes, k)
        if r is not None:
            k = r
            continue
        node = nodes[k]
        unit = IDENTITIES.get(node.name) if node.prim is not None else None
        if unit is None or len(node.args) != 2:
            return k, kept
        r, c = node.args
        if type(r) is not int and node.name in ("add", "multiply"):
            r, c = c, r
        if (type(r) is not int or type(c) is int or nodes[r].shape != node.shape
                or not _exactly_widened(nodes[r].dtype, node.dtype)):
            return k, kept
        try:
            here = np.asarray(np.asarray(c.value) == unit, dtype=bool)
        except Exception:  # a constant numpy cannot compare: keep the node
            return k, kept
        if not here.any() or (whole and not here.all()):
            return k, kept
        kept, k = kept & here, r


def _exactly_widened(source, result) -> bool:
    """Whether every value of dtype ``source`` is a value of ``result``: the same dtype, or a
    wider real float (``float16 + 0.0`` in float64 is the float16 value, exactly, so a tie of
    the sum against its operand is one quantity; a narrowing or an int-to-float cast is not)."""
    if source == result:
        return True
    try:
        source, result = np.dtype(source), np.dtype(result)
    except TypeError:  # another library's dtypes (torch): only the same dtype
        return False
    return (source.kind == "f" and result.kind == "f"
            and np.promote_types(source, result) == result)


def _same_params(p: dict, q: dict) -> bool:
    """Equal static parameters (arrays compared by value, bit for bit)."""
    return p.keys() == q.keys() and all(_same_constant(p[k], q[k]) for k in p)


def _same_constant(a, b) -> bool:
    """Whether two constants (numbers, arrays, tuples, strings, callables) are the same, bit
    for bit; anything that cannot be compared so counts as different."""
    if a is b:
        return True
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return (type(a) is type(b) and len(a) == len(b)
                and all(map(_same_constant, a, b)))
    try:
        x, y = np.asarray(a), np.asarray(b)
    except Exception:  # an object numpy cannot hold: only identity counts
        return False
    if x.dtype == object or y.dtype == object:
        return False
    return (x.dtype == y.dtype and x.shape == y.shape
            and x.tobytes() == y.tobytes())


SMALL = 2.0 ** -20
"""Tangents below ``SMALL`` times the direction's largest entry get a rounding bound."""


def _rounding_could_flip(left: _Side, right: _Side, tie: np.ndarray,
                         h_dot: np.ndarray) -> np.ndarray:
    """Entries whose float tangent is within rounding error of 0, so its sign is unproven.

    A push rounds each product and sum once, so ``|fl(ḣ) - ḣ| <= γ M`` with ``M`` the push of
    ``|v|`` through the maps' magnitudes and ``γ = 2 n eps`` for ``n`` nodes. The bound is
    computed only for tangents below ``SMALL`` times the direction's scale (above it rounding
    would need intermediate tangents ``2**30`` times larger than the direction). Where a map
    cannot bound itself, a small tangent counts as unproven too; the series then decides.
    """
    trace = next((s.dx.trace for s in (left, right) if isinstance(s.dx, LazyTangent)), None)
    if not isinstance(trace, Trace) or not h_dot.size:
        return np.zeros(h_dot.shape, bool)
    small = (h_dot != 0) & (np.abs(h_dot) <= SMALL * trace.direction_scale())
    if not small.any():
        return small
    bound = np.zeros(h_dot.shape)
    for side in (left, right):
        if side.moves:
            mag = trace.magnitude(side.dx.k)
            if mag is None:
                return small
            bound = bound + entries(mag, tie.shape, tie)
    gamma = 2.0 * (len(trace.nodes) + 2) * _coarsest_eps(trace)
    return small & (np.abs(h_dot) <= gamma * bound)


def _coarsest_eps(trace: Trace) -> float:
    """The unit roundoff of the least precise float the sweep computes in: tangents are
    pushed in their nodes' dtypes, so a float32 node rounds them to float32 (a mean of three
    equal float32 tangents is off the tangent by an ulp of float32, not of float64: campaign
    seed 2951 decided a tie that holds along the whole ray by that ulp)."""
    eps = float(np.finfo(np.float64).eps)
    for dtype in {str(node.dtype).rsplit(".", 1)[-1] for node in trace.nodes}:  # torch's too
        if dtype in _COARSE:
            eps = max(eps, _COARSE[dtype])
    return eps


_COARSE = {"float32": float(np.finfo(np.float32).eps), "complex64": float(np.finfo(np.float32).eps),
           "bfloat16": float(np.finfo(np.float32).eps),  # asd computes it in float32
           "float16": float(np.finfo(np.float16).eps)}


def _mask(shape: tuple, flat_idx: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape, bool)
    mask.ravel()[flat_idx] = True
    return mask


def _decide_by_series(left: _Side, right: _Side, shape: tuple, where: np.ndarray,
                      open_: np.ndarray, sign: np.ndarray, depth: int, flat: np.ndarray) -> None:
    """Decide the open entries by their series at ``depth`` levels, at rising orders.

    Decided entries leave ``open_``; ``flat`` marks those whose sign stayed unproven (a series
    that could not be computed, or zero so far at the highest order but not proven zero).
    """
    todo = open_.copy()
    before = int(np.count_nonzero(open_))
    _decide_by_jets(left, right, shape, where, todo, open_, sign, depth, flat)
    for order in ORDERS:
        idx = np.flatnonzero(todo)
        if not idx.size:
            break
        mask = _mask(shape, where[idx])
        try:
            h = left.series(depth, order, mask) - right.series(depth, order, mask)
        except SeriesTruncated:  # a tie inside the cone needs a higher order
            continue
        except SeriesUnavailable:
            break
        h = _tied_at_the_point(h)
        signs = [s.proven_sign() if isinstance(s, Series) else int(np.sign(s)) for s in h]
        for i, s, e in zip(idx, signs, h, strict=True):
            if s is None:
                if not e.hidden_by_truncation():  # an interval holds 0: no order will do
                    todo[i] = False
                    flat[i] = True
                continue
            todo[i] = False
            flat[i] = False
            if s:
                sign[i], open_[i] = s, False
    flat[todo] = True
    record_tie_decision("series" if depth == 1 else "lexicographic",
                        before - int(np.count_nonzero(open_)))


def _tied_at_the_point(h: np.ndarray) -> list:
    """The tied quantities' series with their constant term 0: the values tie in floats, so
    ``h`` is 0 at the point, and the side is the one its variation along the ray takes. The
    exact series' constant term may hold a residue of the rounding (``sinh(2) - c`` is 3 in
    floats, 3 + 2e-16 exactly), which would otherwise decide the side as if the program's own
    value at the point were not on the tie: the value entered would then differ from the
    value at the point though the input never moves (fuzz finding F33)."""
    return [e.with_constant(0) if isinstance(e, Series) else e for e in h]


def _decide_by_jets(left: _Side, right: _Side, shape: tuple, where: np.ndarray,
                    todo: np.ndarray, open_: np.ndarray, sign: np.ndarray, depth: int,
                    flat: np.ndarray) -> None:
    """The floating-point filter of `_decide_by_series`: the entries ``todo`` whose jets
    along ``v`` settle the sign leave ``todo`` (and ``open_`` where it is not 0), as the
    exact series would decide them; the others stay for the exact series.

    The jet's sign is the series' sign wherever its bound proves it. Deeper than ``v`` an
    open entry's series along ``v`` is 0: where its jet along ``v`` is still too it is 0
    along every direction (proven without a nested jet); the others read the nested jet."""
    for level, precise in _stages(depth):
        idx = np.flatnonzero(todo)
        if not idx.size:
            return
        mask = _mask(shape, where[idx])
        try:
            h = left.jet(level, mask, precise) - right.jet(level, mask, precise)
        except JetUnsupported:
            continue
        s, sure = jet_sign(h)
        if level < depth:  # 0 along v (the entry is open): still, so 0 along every direction
            sure = sure & (s == 0) & h.still
        _settle(idx, s, sure, todo, open_, sign, flat)


def _settle(idx: np.ndarray, s: np.ndarray, sure: np.ndarray, todo: np.ndarray,
            open_: np.ndarray, sign: np.ndarray, flat: np.ndarray) -> None:
    """Record the signs ``s`` the jets proved (``sure``) at the entries ``idx``."""
    todo[idx[sure]] = False
    flat[idx[sure]] = False
    decided = sure & (s != 0)
    sign[idx[decided]] = s[decided]
    open_[idx[decided]] = False


# ----- roots at zero: limits the linearizations cannot express -----

def root_limit(dx, mask, p: Fraction, odd: bool = False) -> tuple[tuple, list] | None:
    """The limiting gradient of ``h ** p`` (``0 < p < 1``) at the entries ``mask`` where
    ``h == 0``, in the inputs ``h`` is computed from, read off the exact series.

    ``h ** p`` has an infinite slope in ``h`` there, yet the composite can be Lipschitz:
    ``sqrt(sum(x**2))`` at 0, ``sqrt((x - 1)**2)``, a standard deviation at zero variance.
    Along the (lexicographic) ray ``h = c ε^E + …``; for each input entry ``x_i``,
    ``∂h/∂x_i = a ε^A + …`` on the ray is the coefficient of a probe direction ``e_i`` one
    level deeper. The limit of ``p |h|^(p-1) ∂h/∂x_i`` is then ``p |c|^(p-1) a`` where
    ``(p-1)E + A`` vanishes, 0 where it is positive (in the order of the infinitesimals) and
    infinite where it is negative: then the composite is not Lipschitz and `NotLipschitzError`
    names it. ``h`` negative along the ray is refused too (``odd``: an odd root, which takes
    ``|h|``). Entries where ``h`` vanishes along every direction have slope 0.

    Returns ``(refs, maps)``: the input nodes read and, for each, its `Dense` map into the
    root's output (rows outside ``mask`` zero), in the sweep's array library, ready for a
    `Reroute`. Costs one series evaluation of ``h``'s cone per input entry of that cone
    (rare: only where a root meets 0 with a flat tangent). None where ``dx`` is not a lazy
    tangent of a sweep (a fixed direction's tangent has no cone to re-run).
    """
    if type(dx) is not LazyTangent or type(dx.trace) is not Trace:
        return None
    trace, k = dx.trace, dx.k
    mask = backend.to_host(mask)
    nodes = trace.nodes
    where = np.flatnonzero(np.broadcast_to(mask, nodes[k].shape))
    leaves = [j for j in missing_cone(nodes, k, {}) if nodes[j].prim is None
              and j in trace.leaf_index]
    levels = trace.lex.levels
    leads: dict[int, tuple] = {}  # entry -> (depth, exponents, coefficient) of h's series
    for depth in range(1, levels + 2):
        todo = [e for e in where if e not in leads]
        # at rising orders: a leading term found below the truncation is the leading term
        # (an order-64 series of sin through nested levels outgrew the budget, F74)
        for order in ORDERS:
            if not todo:
                break
            series = _root_series(
                lambda depth=depth, order=order: _ray_series(trace, k, depth, order),
                k, last=order == ORDERS[-1])
            if series is None:  # a sign inside the cone needs a higher order
                continue
            series = np.asarray(series).reshape(-1)
            for e in todo:
                lead = leading_term(series[e], depth - 1)
                if lead is not None:
                    leads[e] = (depth, *lead)
                elif (order == ORDERS[-1] and isinstance(series[e], Series)
                      and not series[e].exact):
                    raise _unproven_root(nodes, k)
            todo = [e for e in todo if e not in leads]
    record_asked(dx, len(where))  # the map depends on the direction: a tie of this node
    rows = {e: i for i, e in enumerate(where)}
    blocks = [np.zeros((len(where), math.prod(nodes[j].shape))) for j in leaves]
    for e, (depth, exps, c) in leads.items():
        c = float(c)
        if depth == 1 and p * exps[-1] < 1:  # the root itself grows like ε^(p E) < ε
            raise NotLipschitzError(
                f"%{k} = {nodes[k].name} is 0 at the point and of order {exps[-1]} along the "
                f"ray, so its root (power {p}) grows like δ^{p * exps[-1]} there: an infinite "
                "slope, so the program is not Lipschitz at this point. Keep the root's input "
                "away from 0, or use a root that matches the order (sqrt of a sum of squares, "
                "asd.norm).")
        if c < 0 and not odd:
            raise NotLipschitzError(
                f"%{k} = {nodes[k].name} is 0 at the point but negative along the direction "
                f"(leading term {c:g}·ε^{exps[::-1]}), so its root is undefined (NaN) on one "
                "side: the program leaves its domain there. Keep the root's input "
                "nonnegative near the point.")
        for b, j in enumerate(leaves):
            for i in range(blocks[b].shape[1]):
                lead = _probe_lead(trace, k, depth, j, i, e)
                if lead is None:
                    continue
                a_exps, alpha = lead
                total = [(p - 1) * Fraction(h) + Fraction(g) for h, g in zip(exps, a_exps)]
                first = next((t for t in total if t), 0)
                if first < 0:
                    raise NotLipschitzError(
                        f"%{k} = {nodes[k].name} vanishes at the point to order "
                        f"{exps[::-1]} along the ray, and its root (power {p}) then has an "
                        "infinite slope in the inputs: the composite is not Lipschitz there. "
                        "Keep the root's input away from 0, or use a root that matches the "
                        "order (sqrt of a sum of squares, asd.norm).")
                if first == 0:
                    blocks[b][rows[e], i] = float(p) * abs(c) ** float(p - 1) * float(alpha)
    out_shape = nodes[k].shape
    maps = []
    for j, block in zip(leaves, blocks, strict=True):
        full = np.zeros((math.prod(out_shape), block.shape[1]))
        full[where] = block
        if trace.like is not None:
            full = backend.from_host(full, trace.like, trace.nodes[j].dtype)
        maps.append(Dense(full, nodes[j].shape, out_shape))
    return tuple(leaves), maps


def _probe_lead(trace: Trace, k: int, depth: int, leaf: int, i: int, e: int):
    """The leading term of ``∂h/∂x_i`` along the ray at entry ``e`` of node ``k`` (input
    entry ``i`` of ``leaf``), at rising orders; None where it vanishes to the last."""
    for order in ORDERS:
        probe = _root_series(lambda o=order: _probe_series(trace, k, depth, leaf, i, o), k,
                             last=order == ORDERS[-1])
        if probe is None:
            continue
        a = np.asarray(probe).reshape(-1)[e]
        coeff = a.coefficient(1) if isinstance(a, Series) and a.var == depth else 0
        lead = leading_term(coeff, depth - 1)
        if lead is not None:
            return lead
    return None


def _root_series(evaluate, k: int, last: bool = True):
    """``evaluate()``, with the series it could not compute refused as undecided; None where
    a sign inside the cone was hidden by truncation below the ``last`` order."""
    try:
        return evaluate()
    except SeriesUnavailable as exc:
        if isinstance(exc, SeriesTruncated) and not last:
            return None
        raise UndecidedTieError(
            f"a root of %{k} meets 0 with a flat tangent, and the exact series that would "
            f"decide its limit could not be computed ({exc}). Keep the root's input away from "
            "0, or use asd.norm / asd.abs where the input is a sum of squares.") from exc


def _ray_series(trace: Trace, k: int, depth: int, order: int = ORDERS[-1]) -> np.ndarray:
    """Node ``k`` along the (lexicographic) ray to ``depth`` levels, with every node's
    constant term its floating-point value (see `_evaluate_cone`)."""
    def input_line(j):
        return line(trace.values[j], [trace.tangent(j)] + [
            trace.lex_tangent(j, level) for level in range(1, depth)], order)

    return _evaluate_cone(trace, k, {}, input_line, order, snap=True)


def _probe_series(trace: Trace, k: int, depth: int, leaf: int, i: int,
                  order: int = ORDERS[-1]) -> np.ndarray:
    """Node ``k`` along ``x + ε₁v + … + ε_depth w + ε_(depth+1) e_i``, with ``e_i`` the
    ``i``-th entry of input ``leaf``: the coefficient of the last infinitesimal is ``∂k/∂x_i``
    along the (lexicographic) ray."""
    def input_line(j):
        tangents = [trace.tangent(j)] + [trace.lex_tangent(j, level)
                                          for level in range(1, depth)]
        probe = np.zeros(trace.nodes[j].shape)
        if j == leaf:
            probe.reshape(-1)[i] = 1.0
        return line(trace.values[j], [*tangents, probe], order, last=1)  # ∂/∂x_i: linear

    return _evaluate_cone(trace, k, {}, input_line, order, snap=True)


def _unproven_root(nodes: list, k: int) -> UndecidedTieError:
    return UndecidedTieError(
        f"%{k} = {nodes[k].name} is 0 at the point and stays 0 along the ray to the highest "
        "order asd computes, but that is not proven exact, so the limit of its root is not "
        "known. Keep the root's input away from 0.")
