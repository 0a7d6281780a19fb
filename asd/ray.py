"""Ties that the first-order tangent leaves open, decided exactly along the ray.

A rule picks a branch at a tie ``h == 0`` by the sign of the tangent ``ḣ`` (Algorithm 7).
When ``ḣ == 0`` too, the first-order choice may be wrong for the given direction:
``relu(x1 - x0**2) - relu(x0**2 - x1)`` along ``v = (1, 0)`` has ``h(x + δv) = -δ²``, and
taking the ``>=`` side at both relus doubles the gradient. For a random direction this happens
with probability zero (the paper's guarantee), but for an explicit ``direction=`` it does not.

So a rule asks ``tie_sign`` instead of comparing tangents itself: ties the tangents decide
cost nothing more; at the rest, the tied quantities are evaluated as exact power series in δ
along ``x + δv`` (``asd.series``) by re-running their ancestors' numpy implementations on
object arrays, and the leading nonzero coefficient decides. That works whenever the ancestors
are piecewise-polynomial (+ - * /, integer powers, max/min/abs/where, sums, matmul, indexing)
and small enough (``BUDGET`` entries); otherwise the tie stays at sign 0 and the rule keeps
the paper's ``>=`` convention, which is then correct with probability one over the direction.
This slow exact path is taken only at degenerate ties, never in a tie-free sweep.
"""

from __future__ import annotations

import numpy as np

from .primitive import FixedTangent, record_degenerate_tie
from .series import Series, object_array
from .sweep import LazyTangent, Trace

BUDGET = 20_000
"""Most entries (summed over the ancestor cone) evaluated on series for one degenerate tie."""


class SeriesUnavailable(Exception):
    """The series along the ray cannot be computed exactly (a transcendental or large cone)."""


def as_series(a) -> np.ndarray:
    """An object array of constant series holding the values of ``a`` exactly."""
    a = np.asarray(a)
    if a.dtype == object:
        return object_array([e if isinstance(e, Series) else Series(e) for e in a.flat], a.shape)
    return object_array([Series(float(e)) for e in a.ravel()], a.shape)


def line(x, t) -> np.ndarray:
    """``x + δ t`` entrywise, exactly."""
    x, t = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(t, dtype=float))
    return object_array([Series([a, b]) for a, b in zip(x.ravel(), t.ravel(), strict=True)],
                        x.shape)


def node_series(trace: Trace, k: int) -> np.ndarray:
    """The value of node ``k`` along ``x + δv`` as an object array of exact series."""
    nodes = trace.nodes
    cone, stack = set(), [k]
    while stack:
        j = stack.pop()
        if j in cone or not nodes[j].active:
            continue
        cone.add(j)
        stack.extend(r for r in nodes[j].args if type(r) is int)
    if sum(int(np.prod(nodes[j].shape)) for j in cone) > BUDGET:
        raise SeriesUnavailable(f"the ancestors of %{k} exceed {BUDGET} entries")
    series: dict[int, np.ndarray] = {}
    for j in sorted(cone):
        node = nodes[j]
        if node.prim is None:
            series[j] = line(trace.values[j], trace.tangent(j))
            continue
        args = [series[r] if type(r) is int and r in series
                else trace.values[r] if type(r) is int else r.value for r in node.args]
        try:
            out = node.prim.impl(*args, **node.params)
        except Exception as exc:  # any failure means: not a polynomial computation
            raise SeriesUnavailable(f"{node.name} cannot run on exact series: {exc}") from exc
        series[j] = as_series(out)
    return series[k]


def input_series(x, dx, shape: tuple) -> np.ndarray:
    """The series of a rule's input ``x`` (with lazy tangent ``dx``), broadcast to ``shape``."""
    if isinstance(dx, LazyTangent):
        s = node_series(dx.trace, dx.k)
    elif isinstance(dx, FixedTangent):
        s = line(x, dx.value)
    else:
        s = as_series(x)
    return np.broadcast_to(s, shape)


def tie_sign(a, da, b, db, tie: np.ndarray, *, record: bool = False) -> np.ndarray:
    """The sign of ``(a - b)(x + δv)`` as δ ↓ 0 at the tied entries (``a == b`` there).

    ``tie`` is a bool mask in the broadcast shape of ``a`` and ``b``; ``da``/``db`` are their
    lazy tangents (``db=None`` for a constant ``b``). Returns -1, 0 or +1 per tied entry (in
    mask order): first from the tangents, then, where those tie too, from the exact series.
    0 means the ray runs along the kink as far as the engine can see; the rule then takes the
    ``>=`` side. ``record=True`` reports the degenerate ties (for user-written branches).
    """
    from .extend import tangent_at

    shape = tie.shape
    h_dot = tangent_at(da, tie, shape) - (0.0 if db is None else tangent_at(db, tie, shape))
    sign = np.sign(h_dot).astype(np.int8)
    flat = sign == 0
    if flat.any():
        if record:
            record_degenerate_tie(int(np.count_nonzero(flat)))
        deep = np.zeros(shape, bool)
        deep[tie] = flat
        try:
            h = input_series(a, da, shape)[deep] - (
                input_series(b, db, shape)[deep] if db is not None
                else as_series(np.broadcast_to(b, shape)[deep]))
        except SeriesUnavailable:
            return sign
        sign[flat] = [s.sign() for s in h]
    return sign
