"""Certificates for ``library/order.py``: max/min over axes, sort, top-k, quantiles, pooling.

On three entries every order primitive is a branching program on the differences of its
inputs: ``max3``, ``min3`` and the middle order statistic ``mid3`` (written once, composed
for the rest). ``asd.certify`` proves them (the constraints ``a - b`` have constant nonzero
gradients; the pieces agree where entries tie), and the hand-written rules, applied along
axis 0 of a 3-row matrix whose rows tie, must agree with the derived rules.
"""

from __future__ import annotations

import numpy as np
from asd.library import order

from asd import branch, branching

from .piecewise import tied_points
from .registry import DiscontinuousProof, OracleProof, ProgramProof


@branching
def max2(a, b):
    return a if branch(a - b) else b


@branching
def max3(a, b, c):
    if branch(a - b):
        return a if branch(a - c) else c
    return b if branch(b - c) else c


@branching
def min3(a, b, c):
    if branch(b - a):
        return a if branch(c - a) else c
    return b if branch(c - b) else c


@branching
def mid3(a, b, c):
    return a + b + c - max3(a, b, c) - min3(a, b, c)


@branching
def top2_sum(a, b, c):
    return a + b + c - min3(a, b, c)


@branching
def lower_quartile(a, b, c):
    return (min3(a, b, c) + mid3(a, b, c)) / 2


@branching
def first(a, b, c):
    return a


@branching
def running_max2(a, b, c):
    return max2(a, b)


@branching
def pool_01(a, b, c):
    return max2(a, b)


@branching
def pool_12(a, b, c):
    return max2(b, c)


def _row(fn, k):
    return lambda X: fn(X)[k]


def _pool(X):
    return np.transpose(order.max_pool1d(np.transpose(X), 2, stride=1))


W = np.array([1.0, 2.0, 3.0, 4.0])


def _gather_sorted(x):
    """The sorted values gathered at argsort positions, plus the max gathered at argmax."""
    return np.take_along_axis(x, np.argsort(x), -1) * W + x[np.argmax(x)]


def _sorted_reference(x):
    return np.sort(x) * W + np.max(x)


PROOFS = [
    ProgramProof((order.extreme_p,), (max3, min3),
                 (lambda X: order.amax(X, axis=0), lambda X: order.amin(X, axis=0)),
                 tied_points(3, 21), stacked=True),
    ProgramProof((order.sort_p,), (min3, mid3, max3),
                 tuple(_row(lambda X: order.sort(X, axis=0), k) for k in range(3)),
                 tied_points(3, 22), stacked=True),
    ProgramProof((order.topk_sum_p,), top2_sum, lambda X: order.topk_sum(X, 2, axis=0),
                 tied_points(3, 23), stacked=True),
    ProgramProof((order.median_p,), mid3, lambda X: order.median(X, axis=0),
                 tied_points(3, 24), stacked=True),
    ProgramProof((order.quantile_p,), lower_quartile, lambda X: order.quantile(X, 0.25, axis=0),
                 tied_points(3, 25), stacked=True),
    ProgramProof((order.cummax_p,), (first, running_max2, max3),
                 tuple(_row(lambda X: order.cummax(X, axis=0), k) for k in range(3)),
                 tied_points(3, 26), stacked=True),
    ProgramProof((order.max_pool_p,), (pool_01, pool_12),
                 (_row(_pool, 0), _row(_pool, 1)), tied_points(3, 27), stacked=True),
    # a gather at positions is decided along the ray: on ties it is the sorted / max gather
    OracleProof((order.gather_p,), title="gather_at (argsort, argmax positions)",
                library=_gather_sorted, reference=_sorted_reference,
                points=[((np.array([1.0, 1.0, 0.0, 1.0]),), None),
                        ((np.array([2.0, -1.0, 2.0, -1.0]),), None)],
                note="position decided along the ray; tied positions gather equal values"),
    # positions jump at ties: using them as numbers must raise
    *[DiscontinuousProof(order.POSITION_PRIMS[kind], lambda x, fn=fn: (fn(x) * 1.0 + x).sum(),
                         at=(1.0, 1.0), away=(0.25, 1.5), title=f"{kind} (constant off ties)")
      for kind, fn in (("argmax", order.argmax), ("argmin", order.argmin),
                       ("argsort", order.argsort))],
]

__all__ = ["PROOFS"]
