"""The extension surface: everything needed to add a primitive and its ASD rule.

A rule is ``rule(xs, dxs, **params) -> (ans, lin)`` (see ``asd.primitive``). The helpers
below declare the common shapes of rules in one line each: smooth elementwise functions from
a derivative formula that may reuse the answer, linear primitives from their map, and
elementwise piecewise functions from their breakpoints and pieces.

>>> import numpy as np, asd
>>> from asd.extend import Primitive, Diagonal
>>> cube = Primitive("cube", lambda x: x ** 3)
>>> @cube.defrule
... def cube_rule(xs, dxs):
...     (x,) = xs
...     return x ** 3, Diagonal(3 * x ** 2, np.shape(x))
>>> float(asd.subgrad(lambda x: cube(x))(2.0))
12.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .linear import (
    Closure,
    Dense,
    Diagonal,
    FanIn,
    Index,
    LinearMap,
    MatMul,
    Reshape,
    Sum,
    Transpose,
    Zero,
    identity,
    unbroadcast,
)
from .primitive import (
    METHODS,
    UFUNC_REDUCE,
    FixedTangent,
    Primitive,
    ZeroTangent,
    record_degenerate_tie,
    register_numpy,
    unsupported,
)
from .tracing import Tracer


def is_traced(x) -> bool:
    return isinstance(x, Tracer)


def register_method(name: str, fn: Callable) -> None:
    """Make ``fn`` the implementation of the array method ``name`` on traced arrays."""
    METHODS[name] = fn


def register_reduce(ufunc: np.ufunc, fn: Callable) -> None:
    """Route ``ufunc.reduce`` (e.g. ``np.maximum.reduce``) on traced arrays to ``fn``."""
    UFUNC_REDUCE[ufunc] = fn


def comparison_of(cond) -> tuple[str, object, object] | None:
    """``(op, lhs, rhs)`` if ``cond`` is a traced comparison such as ``x > y``, else None.

    Operands come back as traced values or constants, so ``where`` can pick the branch
    by the direction at ties.
    """
    if not isinstance(cond, Tracer):
        return None
    trace = cond._trace
    node = trace.nodes[cond._id]
    if node.prim is None or node.prim.comparison is None:
        return None
    lhs, rhs = (Tracer(trace, a, trace.values[a]) if isinstance(a, int) else a.value
                for a in node.args)
    return node.prim.comparison, lhs, rhs


def tangent_at(dx, index, shape: tuple) -> np.ndarray:
    """The entries ``index`` (a mask in the output's shape) of an input's tangent, broadcast."""
    if getattr(dx, "is_zero", False):
        return np.zeros(int(np.count_nonzero(index)) if index is not None else shape)
    in_shape = tuple(getattr(dx, "shape", shape))
    if index is not None and in_shape == tuple(shape):
        return dx(index)  # ask for the tied entries only: the engine counts them as ties
    if index is not None:
        # A broadcast operand: ask for the input entries some tied output entry reads.
        lead = len(shape) - len(in_shape)
        wide = tuple(lead + i for i, n in enumerate(in_shape) if n == 1 and shape[lead + i] != 1)
        need = np.any(index, axis=tuple(range(lead)) + wide, keepdims=True)
        need = need.reshape(need.shape[lead:])
        part = dx(need)
        t = np.zeros(in_shape, part.dtype)
        t[need] = part
        return np.broadcast_to(t, shape)[index]
    t = dx()
    return t if np.shape(t) == shape else np.broadcast_to(t, shape)


def defsmooth(name: str, impl: Callable, derivative: Callable, numpy=None) -> Primitive:
    """A smooth elementwise primitive; ``derivative(x, ans)`` may reuse the answer."""
    prim = Primitive(name, impl)

    def smooth_rule(xs, dxs):
        (x,) = xs
        ans = impl(x)
        return ans, Diagonal(derivative(x, ans), np.shape(x))

    smooth_rule.__name__ = f"{name}_rule"
    prim.defrule(smooth_rule)
    if numpy is not None:
        register_numpy(numpy, prim)
    return prim


def deflinear(name: str, impl: Callable, make_map: Callable[..., LinearMap]) -> Primitive:
    """A linear one-input primitive; ``make_map(in_shape, out_shape, **params)`` gives its map."""
    prim = Primitive(name, impl)

    def linear_rule(xs, dxs, **params):
        (x,) = xs
        ans = impl(x, **params)
        return ans, make_map(np.shape(x), np.shape(ans), **params)

    linear_rule.__name__ = f"{name}_rule"
    prim.defrule(linear_rule)
    return prim


def defpiecewise(
    name: str,
    breakpoints: Sequence[float],
    pieces: Sequence[tuple[Callable, Callable]],
) -> Primitive:
    """An elementwise piecewise-smooth primitive of one variable.

    ``pieces[i] = (value, slope)`` holds on ``[breakpoints[i-1], breakpoints[i]]``; the
    pieces must agree at the breakpoints (continuity is what makes the function Lipschitz,
    and asd.prove checks it). At a breakpoint the tangent picks the piece the ray enters:
    the right piece when ``x_dot >= 0``, the left one otherwise (paper, Algorithm 7).
    """
    if len(pieces) != len(breakpoints) + 1:
        raise ValueError(f"{name}: {len(breakpoints)} breakpoints need "
                         f"{len(breakpoints) + 1} pieces")
    bps = np.asarray(breakpoints, dtype=float)

    def piece_index(x):
        return np.searchsorted(bps, x, side="right")

    def impl(x):
        x = np.asarray(x)
        idx = piece_index(x)
        out = np.select([idx == i for i in range(len(pieces))], [p[0](x) for p in pieces])
        return out.astype(np.result_type(x, float), copy=False)

    def piecewise_rule(xs, dxs):
        (x,) = xs
        x = np.asarray(x)
        idx = np.asarray(piece_index(x))
        ans = np.select([idx == i for i in range(len(pieces))], [p[0](x) for p in pieces])
        tie = np.isin(x, bps)
        if tie.any():
            left = dxs[0](tie) < 0
            idx = idx.copy()
            idx[tie] -= left
        slope = np.select([idx == i for i in range(len(pieces))],
                          [np.broadcast_to(p[1](x), x.shape) for p in pieces])
        dtype = np.result_type(x, float)
        return ans.astype(dtype, copy=False), Diagonal(slope.astype(dtype, copy=False), x.shape)

    piecewise_rule.__name__ = f"{name}_rule"
    return Primitive(name, impl, piecewise_rule)


__all__ = [
    "Closure",
    "Dense",
    "Diagonal",
    "FanIn",
    "FixedTangent",
    "Index",
    "LinearMap",
    "MatMul",
    "Primitive",
    "Reshape",
    "Sum",
    "Transpose",
    "Zero",
    "ZeroTangent",
    "comparison_of",
    "deflinear",
    "defpiecewise",
    "defsmooth",
    "identity",
    "is_traced",
    "record_degenerate_tie",
    "register_method",
    "register_numpy",
    "register_reduce",
    "tangent_at",
    "unbroadcast",
    "unsupported",
]
