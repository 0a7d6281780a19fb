"""Piecewise primitives: relu, abs, maximum, minimum, comparisons and where.

Every rule here follows the paper's Algorithm 7: away from a tie the branch is fixed; at a
tie (``x == 0``, ``a == b``, ``lhs == rhs``) the rule asks for the tangent of the tied
entries only and takes the branch the ray ``x + δv`` enters, the ``>=`` side when the
tangent is tied too.
"""

from __future__ import annotations

import numpy as np

from asd.errors import NotLipschitzError, UnsupportedError
from asd.extend import (
    Diagonal,
    FanIn,
    Primitive,
    comparison_of,
    is_traced,
    record_degenerate_tie,
    register_numpy,
    tangent_at,
)

# ----- relu and abs (written out: they are on every hot path) -----

relu_p = Primitive("relu", lambda x: np.maximum(x, 0))


@relu_p.defrule
def relu_rule(xs, dxs):
    (x,) = xs
    x = np.asarray(x)
    slope = np.asarray(x > 0)
    tie = x == 0
    if tie.any():
        slope[tie] = dxs[0](tie) >= 0
    return np.maximum(x, 0), Diagonal(slope, x.shape)


abs_p = Primitive("abs", np.abs)


@abs_p.defrule
def abs_rule(xs, dxs):
    (x,) = xs
    x = np.asarray(x)
    positive = np.asarray(x >= 0)
    tie = x == 0
    if tie.any():
        positive[tie] = dxs[0](tie) >= 0
    return np.abs(x), Diagonal(np.where(positive, 1.0, -1.0).astype(x.dtype), x.shape)


# ----- maximum and minimum: ties broken by (value, tangent), then the first operand -----

def _select_rule(np_op, first_wins_strictly):
    def rule(xs, dxs):
        a, b = xs
        ans = np_op(a, b)
        out = np.shape(ans)
        pick_a = np.asarray(np.broadcast_to(first_wins_strictly(a, b), out))
        tie = np.asarray(np.broadcast_to(np.equal(a, b), out))
        if tie.any():
            pick_a = pick_a.copy()
            a_dot = tangent_at(dxs[0], tie, out)
            b_dot = tangent_at(dxs[1], tie, out)
            pick_a[tie] = first_wins_strictly(a_dot, b_dot) | (a_dot == b_dot)
        return ans, FanIn(Diagonal(pick_a, np.shape(a), out), Diagonal(~pick_a, np.shape(b), out))

    return rule


maximum_p = Primitive("maximum", np.maximum, _select_rule(np.maximum, np.greater))
minimum_p = Primitive("minimum", np.minimum, _select_rule(np.minimum, np.less))


def relu(x):
    """max(x, 0), with the branch at x = 0 chosen by the direction (not a fixed 0)."""
    return relu_p(x)


def absolute(x):
    """|x|; at 0 the slope is the sign of the tangent (+1 when it is 0 too)."""
    return abs_p(x)


def maximum(a, b, **kwargs):
    if kwargs:
        raise UnsupportedError(f"numpy.maximum with {', '.join(kwargs)}")
    if not is_traced(a) and np.ndim(a) == 0 and a == 0 and is_traced(b):
        return relu_p(b)
    if not is_traced(b) and np.ndim(b) == 0 and b == 0 and is_traced(a):
        return relu_p(a)
    return maximum_p(a, b)


def minimum(a, b, **kwargs):
    if kwargs:
        raise UnsupportedError(f"numpy.minimum with {', '.join(kwargs)}")
    return minimum_p(a, b)


# ----- comparisons: discontinuous values that `where` reads as branch conditions -----

COMPARISONS = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal,
               "==": np.equal, "!=": np.not_equal}
comparison_prims = {op: Primitive(fn.__name__, fn, comparison=op) for op, fn in
                    COMPARISONS.items()}


# ----- where -----

def _where_cmp_impl(lhs, rhs, a, b, op):
    return np.where(COMPARISONS[op](lhs, rhs), a, b)


where_cmp_p = Primitive("where", _where_cmp_impl)


@where_cmp_p.defrule
def where_cmp_rule(xs, dxs, op):
    lhs, rhs, a, b = xs
    cond = COMPARISONS[op](lhs, rhs)
    ans = np.where(cond, a, b)
    out = np.shape(ans)
    cond = np.array(np.broadcast_to(cond, out))
    cond_moves = not (dxs[0].is_zero and dxs[1].is_zero)
    tie = np.asarray(np.broadcast_to(np.equal(lhs, rhs), out))
    if cond_moves and tie.any():
        a_tie = np.broadcast_to(a, out)[tie]
        b_tie = np.broadcast_to(b, out)[tie]
        if np.any(a_tie != b_tie):
            bad = np.flatnonzero(a_tie != b_tie)[:3]
            raise NotLipschitzError(
                f"where(lhs {op} rhs, a, b) jumps: the condition is tied (lhs == rhs) at "
                f"{int(np.count_nonzero(a_tie != b_tie))} entries where a != b (e.g. a = "
                f"{a_tie[bad].tolist()}, b = {b_tie[bad].tolist()}), so the function is "
                "discontinuous there. Make both branches agree on the boundary, or use a "
                "continuous primitive."
            )
        h_dot = tangent_at(dxs[0], tie, out) - tangent_at(dxs[1], tie, out)
        if op in (">", ">="):
            cond[tie] = h_dot >= 0
        elif op in ("<", "<="):
            cond[tie] = h_dot <= 0
        elif op == "==":
            cond[tie] = h_dot == 0
        else:
            cond[tie] = h_dot != 0
        record_degenerate_tie(int(np.count_nonzero(h_dot == 0)))
    return ans, FanIn(None, None, Diagonal(cond, np.shape(a), out),
                      Diagonal(~cond, np.shape(b), out))


select_p = Primitive("select", np.where)


@select_p.defrule
def select_rule(xs, dxs):
    cond, a, b = xs
    ans = np.where(cond, a, b)
    out = np.shape(ans)
    cond = np.broadcast_to(cond, out)
    return ans, FanIn(None, Diagonal(cond, np.shape(a), out), Diagonal(~cond, np.shape(b), out))


def where(cond, a=None, b=None):
    """``where(cond, a, b)``; with ``cond`` a comparison of traced values, ties follow the
    direction, and a jump (``a != b`` where the condition is tied) raises."""
    if a is None or b is None:
        raise UnsupportedError("numpy.where with one argument (nonzero) on traced arrays")
    cmp = comparison_of(cond)
    if cmp is not None:
        op, lhs, rhs = cmp
        return where_cmp_p(lhs, rhs, a, b, op=op)
    if is_traced(cond):
        raise UnsupportedError(
            "where() with a traced condition that is not a single comparison (for example "
            "(x > 0) & (y > 0)): its ties cannot be resolved by direction. Nest the wheres, "
            "one comparison each: where(x > 0, where(y > 0, a, b), b)."
        )
    return select_p(np.asarray(cond, dtype=bool), a, b)


# ----- numpy dispatch -----

register_numpy(np.maximum, maximum)
register_numpy(np.minimum, minimum)
register_numpy(np.absolute, absolute)
register_numpy(np.where, where)
for _op, _fn in COMPARISONS.items():
    register_numpy(_fn, comparison_prims[_op])

abs = absolute  # noqa: A001

__all__ = ["abs", "absolute", "maximum", "minimum", "relu", "where"]
