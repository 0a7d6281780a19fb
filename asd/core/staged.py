"""The staged sweep: one ASD sweep whose every decision is an array computation.

An eager sweep decides ties on concrete values: a Python test per kink node, the exact series
on the host where first order is flat. Inside a compiled framework program (``jax.jit``,
``jax.vmap``) there are no concrete values, so the staged sweep runs the same program, the same
rules and the same linear maps with the sweep marked ``staged``: the tie services
(`asd.core.ties.ray_compare`) then decide every tied entry by the first-order signs along the
lexicographic directions ``v, w1, …, wk`` with ``where``, never copy a value to the host, and
count the tied entries first order leaves open, per node, in ``undecided``. Where that count is
0 the result is exactly the eager sweep's element (the eager sweep decides those ties by the
same first-order signs); otherwise the caller sees the count and may re-run eagerly or refuse.

What a staged sweep cannot do is what needs a concrete value: an exact series, a refusal that
depends on a value (a root at 0, a domain), the continuity check of a jump, a finiteness
screen. A refusing check (`asd.core.ties.refuse_where`) counts its entries as undecided for
its node, and so does a jump that reaches a differentiated output (`count_jumps`); rules that
still decide on the host raise `StagedUnsupported` (an `asd.UnsupportedError`) naming the
node, so nothing silently departs from the eager contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from asd.core import backend
from asd.core.sweep import LexDirections, Trace
from asd.core.tracing import Tracer, close_trace


def sweep(f: Callable, leaves: Sequence, directions: Sequence, lex: LexDirections,
          active: Sequence[bool] | None = None, mode: str = "full"
          ) -> tuple[Trace, Any, list[int]]:
    """Run ``f(*tracers)`` staged: one traced input per leaf (``directions[i]`` its tangent
    along ``v``, an array of the leaf's library and shape, or None for a leaf that is not
    differentiated). ``mode="values"`` decides by the values alone and flags the nodes that
    meet a tie (`tied`). Returns the trace, ``f``'s output and the input node ids."""
    trace = Trace(lex)
    trace.staged = mode
    active = [True] * len(leaves) if active is None else active
    tracers = [trace.new_input(x, d, active=a)
               for x, d, a in zip(leaves, directions, active, strict=True)]
    try:
        out = f(*tracers)
    finally:
        if tracers:
            close_trace(trace)
    return trace, out, [t._id for t in tracers]


def pull(trace: Trace, outs: Sequence, cts: Sequence, ids: Sequence[int],
         leaves: Sequence) -> list:
    """``Jᵀ ct`` over the linearizations the staged sweep chose: one cotangent per traced
    output (``cts``), the inputs' cotangents (zeros where the output does not read one)."""
    seeds: dict[int, Any] = {}
    for o, c in zip(outs, cts, strict=True):
        if isinstance(o, Tracer) and c is not None:
            seeds[o._id] = c if o._id not in seeds else seeds[o._id] + c
    for k in seeds:
        count_jumps(trace, k)
    ct = trace.pull_seeds(seeds) if seeds else []
    return [ct[i] if i < len(ct) and ct[i] is not None
            else backend.namespace(x).zeros_like(x) for i, x in zip(ids, leaves, strict=True)]


def count_jumps(trace: Trace, k: int) -> None:
    """Count as undecided the entries of every jump that reaches output ``k``: the eager
    sweep refuses such an output unless replaying it across the jump shows it continuous
    (``x * sign(x)``), a host computation a staged sweep cannot make. A discontinuous
    primitive without a rule (no mask) counts once."""
    for j in trace.jumps_reaching(k):
        jump = trace.jumps[j]
        if jump is None:
            xp = backend.namespace(trace.values[j])
            trace.count_undecided(j, xp.ones((), dtype=xp.bool))
        else:
            trace.count_undecided(j, jump.mask)


def undecided(trace: Trace, like) -> Any:
    """The total count of tied entries first order left open, as an array of ``like``'s
    library (0 when every tie was decided)."""
    xp = backend.namespace(like)
    counts = list(trace.undecided.values())
    if not counts:
        return xp.zeros((), dtype=xp.int32)
    total = counts[0]
    for c in counts[1:]:
        total = total + c
    return xp.asarray(total, dtype=xp.int32)


def tied(trace: Trace, like) -> Any:
    """Whether a probe sweep (``mode="values"``) met any tie, as a bool array of ``like``'s
    library: the predicate that sends a staged call to its tangent work."""
    xp = backend.namespace(like)
    flags = list(trace.tied.values())
    if not flags:
        return xp.zeros((), dtype=xp.bool)
    out = flags[0]
    for f in flags[1:]:
        out = out | f
    return out
