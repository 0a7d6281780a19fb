"""The extension surface: everything needed to add a primitive and its ASD rule.

A rule is ``rule(xs, dxs, **params) -> (ans, lin)`` (see ``asd.core.primitive``). The helpers
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

import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from asd.core.backend import (
    device,
    from_host,
    is_foreign,
    is_host,
    kernel,
    namespace,
    numpy_dtype,
    register_kernel,
    set_at,
    to_host,
)
from asd.core.backend import library as array_library
from asd.core.jit import read_value
from asd.core.linear import (
    Closure,
    Dense,
    Diagonal,
    FanIn,
    Index,
    LinearMap,
    Mask,
    MatMul,
    Reroute,
    Reshape,
    Sum,
    Take,
    Transpose,
    Zero,
    identity,
    index_array,
    unbroadcast,
)
from asd.core.ordering import (
    Rows,
    ray_argmax,
    ray_argmax_at,
    ray_argmax_windows,
    ray_argsort,
    ray_cummax,
    window_slices,
)
from asd.core.primitive import (
    ALTERNATIVES,
    LAZY_UFUNC_MODULES,
    METHODS,
    UFUNC_ACCUMULATE,
    UFUNC_AT,
    UFUNC_REDUCE,
    FixedTangent,
    Primitive,
    ZeroTangent,
    qualified_name,
    record_degenerate_tie,
    record_jump,
    record_tie_decision,
    register_numpy,
    unsupported,
)
from asd.core.series import Series, leading_vector
from asd.core.sweep import tangent_at
from asd.core.ties import (
    SeriesUnavailable,
    first_order_keys,
    index_decided,
    input_series,
    line,
    ray_compare,
    ray_nonnegative,
    record_asked,
    refuse_where,
    root_limit,
    tie_sign,
)
from asd.core.tracing import Tracer
from asd.errors import NotLipschitzError


def is_traced(x) -> bool:
    return isinstance(x, Tracer)


def register_alternative(numpy_fn, instead: str) -> None:
    """Name what to call instead of ``numpy_fn`` when it has no rule (the refusal says so)."""
    ALTERNATIVES[qualified_name(numpy_fn)] = instead


def register_lazy_ufuncs(module: str, target: str) -> None:
    """Import ``target`` (which registers rules for the ufuncs of ``module``, e.g.
    ``scipy.special``) the first time a traced array meets a ufunc of ``module``."""
    LAZY_UFUNC_MODULES[module] = target


def register_method(name: str, fn: Callable) -> None:
    """Make ``fn`` the implementation of the array method ``name`` on traced arrays."""
    METHODS[name] = fn


def register_reduce(ufunc: np.ufunc, fn: Callable) -> None:
    """Route ``ufunc.reduce`` (e.g. ``np.maximum.reduce``) on traced arrays to ``fn``."""
    UFUNC_REDUCE[ufunc] = fn


def register_accumulate(ufunc: np.ufunc, fn: Callable) -> None:
    """Route ``ufunc.accumulate`` (e.g. ``np.maximum.accumulate``) on traced arrays to ``fn``."""
    UFUNC_ACCUMULATE[ufunc] = fn


def register_ufunc_at(ufunc: np.ufunc, fn: Callable) -> None:
    """Route ``ufunc.at(a, indices, b)`` on traced arrays to ``fn(a, indices, b)``, which
    returns the updated array; the engine points ``a`` at it, as item assignment does."""
    UFUNC_AT[ufunc] = fn


def within_reach(a: np.ndarray, b: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """Entries with ``a != b`` but ``|a - b| <= reach``: a tie somewhere in the ball that
    a snap (`Primitive.defsnap`) moves onto (exact ties are the rule's own business)."""
    with np.errstate(invalid="ignore"):
        return (a != b) & (np.abs(a - b) <= reach)


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


def operation_of(x) -> tuple[Primitive, list] | None:
    """``(primitive, operands)`` of the node that made traced ``x`` (operands as traced values
    or constants), else None (a constant, or an argument of the function): how ``where``
    reads a condition built from comparisons with ``&``, ``|``, ``^`` and ``~``."""
    if not isinstance(x, Tracer):
        return None
    trace = x._trace
    node = trace.nodes[x._id]
    if node.prim is None:
        return None
    return node.prim, [Tracer(trace, a, trace.values[a]) if isinstance(a, int) else a.value
                       for a in node.args]


def defsmooth(name: str, impl: Callable, derivative: Callable, numpy=None,
              array_api: bool = False) -> Primitive:
    """A smooth elementwise primitive; ``derivative(x, ans)`` may reuse the answer.

    ``array_api=True`` declares ``impl`` and ``derivative`` written against the array API
    (`namespace`), so the primitive runs on torch and JAX arrays too.
    """
    prim = Primitive(name, impl, array_api=array_api)

    def smooth_rule(xs, dxs):
        (x,) = xs
        ans = impl(x)
        return ans, Diagonal(derivative(x, ans), tuple(np.shape(x)))

    smooth_rule.__name__ = f"{name}_rule"
    # what `asd.core.codegen` inlines: the same two functions, without the map object
    smooth_rule.elementwise = (impl, derivative)
    prim.defrule(smooth_rule)
    if numpy is not None:
        register_numpy(numpy, prim)
    return prim


def deflinear(name: str, impl: Callable, make_map: Callable[..., LinearMap],
              array_api: bool = False) -> Primitive:
    """A linear one-input primitive; ``make_map(in_shape, out_shape, **params)`` gives its map
    (``array_api``: as for `defsmooth`)."""
    prim = Primitive(name, impl, array_api=array_api)

    def linear_rule(xs, dxs, **params):
        (x,) = xs
        ans = impl(x, **params)
        return ans, make_map(tuple(np.shape(x)), tuple(np.shape(ans)), **params)

    linear_rule.__name__ = f"{name}_rule"
    prim.defrule(linear_rule)
    return prim


def _as_piece(piece) -> tuple[Callable, Callable, tuple | None]:
    """``(value, slope, coefficients)`` of a piece given as coefficients or a callable pair."""
    if isinstance(piece, tuple) and len(piece) == 2 and all(callable(p) for p in piece):
        return piece[0], piece[1], None
    coeffs = tuple(piece)
    if not coeffs or not all(isinstance(c, numbers.Real) for c in coeffs):
        raise ValueError(f"a piece is a list of polynomial coefficients [c0, c1, ...] or a "
                         f"(value, slope) pair of functions, got {piece!r}")
    slope_coeffs = tuple(k * c for k, c in enumerate(coeffs))[1:] or (0,)
    return _horner(coeffs), _horner(slope_coeffs), coeffs


def _horner(coeffs: tuple) -> Callable:
    coeffs = tuple(float(c) for c in coeffs)

    def poly(x):
        out = (np.zeros_like(x) if is_host(x) else namespace(x).zeros_like(x)) + coeffs[-1]
        for c in coeffs[-2::-1]:
            out = out * x + c
        return out

    return poly


def _exact_poly(coeffs: tuple, x: Fraction) -> Fraction:
    return sum((Fraction(c) * x ** k for k, c in enumerate(coeffs)), Fraction(0))


def _check_continuous(name: str, bps: tuple, pieces: list) -> None:
    """Refuse a jump: adjacent pieces must agree at their breakpoint (exactly, for polynomials)."""
    for i, b in enumerate(bps):
        (f_left, _, c_left), (f_right, _, c_right) = pieces[i], pieces[i + 1]
        if c_left is not None and c_right is not None:
            left, right = _exact_poly(c_left, Fraction(b)), _exact_poly(c_right, Fraction(b))
            agree = left == right
        else:
            at = np.array(float(b))
            left, right = float(f_left(at)), float(f_right(at))
            agree = abs(left - right) <= 1e-12 * max(1.0, abs(left), abs(right))
        if not agree:
            raise NotLipschitzError(
                f"{name}: piece {i} ends at {float(left)!r} but piece {i + 1} starts at "
                f"{float(right)!r} at the breakpoint x = {b!r}; a jump is not Lipschitz, so "
                "no subgradient exists there. Make adjacent pieces agree at each breakpoint."
            )


def _instantiate(name: str, breakpoints, pieces) -> tuple[np.ndarray, list, np.ndarray]:
    bps = tuple(float(b) for b in breakpoints)
    if len(pieces) != len(bps) + 1:
        raise ValueError(f"{name}: {len(bps)} breakpoints need {len(bps) + 1} pieces, "
                         f"got {len(pieces)}")
    if any(not np.isfinite(b) for b in bps) or bool(np.any(np.diff(bps) < 0)):
        raise ValueError(f"{name}: breakpoints must be finite and nondecreasing, got {bps}")
    parsed = [_as_piece(p) for p in pieces]
    _check_continuous(name, bps, parsed)
    # The value at each breakpoint, rounded once from the exact one where the pieces are
    # polynomials (so hard_sigmoid(-3) is 0, not 0.5 - 3 * fl(1/6)).
    at = [_exact_poly(c, Fraction(b)) if c is not None else f(np.array(b))
          for b, (f, _, c) in zip(bps, parsed[1:])]
    return np.asarray(bps, dtype=float), parsed, np.asarray(at, dtype=float)


def defpiecewise(name: str, breakpoints, pieces: Sequence | None = None) -> Primitive:
    """An elementwise piecewise-smooth primitive of one variable, from breakpoints and pieces.

    ``pieces[i]`` holds on ``[breakpoints[i-1], breakpoints[i]]``. A piece is a list of
    polynomial coefficients ``[c0, c1, ...]`` (``c0 + c1 x + ...``; its slope is derived) or
    a ``(value, slope)`` pair of elementwise functions. Adjacent pieces must agree at their
    breakpoint (continuity is what makes the function Lipschitz): checked exactly with
    Fractions for polynomial pieces, else to 1e-12, and a jump raises `NotLipschitzError`.

    For a family with static parameters pass ``breakpoints`` as a function of them returning
    ``(breakpoints, pieces)``; the primitive then takes the parameters as keywords.

    At a breakpoint the tangent picks the piece the ray ``x + δ x_dot`` enters: the right one
    when ``x_dot > 0``, the left one when ``x_dot < 0`` (paper, Algorithm 7); when ``x_dot``
    is 0, `ray_compare` decides by the exact series along the ray, and the right piece is taken
    if that is 0 too. Repeated breakpoints (an empty piece) are allowed; the ray skips it.

    The rule states its ties (``x`` on a breakpoint) to `ray_compare` and selects pieces with
    ``where``, so it has no Python branch on the data: it runs on numpy, torch and JAX arrays
    (polynomial pieces; ``(value, slope)`` functions must accept the arrays given) and inside
    ``jax.jit``.

    >>> import numpy as np, asd
    >>> from asd.extend import defpiecewise
    >>> hinge = defpiecewise("hinge", [1.0], [[1.0, -1.0], [0.0]])
    >>> [float(asd.subgrad(hinge, direction=v)(1.0)) for v in (1.0, -1.0)]
    [0.0, -1.0]
    >>> leaky = defpiecewise("leaky", lambda slope: ([0.0], [[0.0, slope], [0.0, 1.0]]))
    >>> leaky(np.array([-2.0, 3.0]), slope=0.5)
    array([-1.,  3.])
    """
    if callable(breakpoints):
        if pieces is not None:
            raise ValueError(f"{name}: pass pieces inside the spec function, not beside it")
        spec, cache = breakpoints, {}

        def table(params):
            key = tuple(sorted(params.items()))
            if key not in cache:
                cache[key] = _instantiate(name, *spec(**params))
            return cache[key]
    else:
        fixed = _instantiate(name, breakpoints, pieces)

        def table(params):
            if params:
                raise TypeError(f"{name} takes no parameters, got {', '.join(params)}")
            return fixed

    def impl(x, **params):
        bps, parsed, at = table(params)
        x = np.asarray(x) if is_host(x) else x
        return _piecewise_value(x, bps, parsed, at)

    def piecewise_rule(xs, dxs, **params):
        bps, parsed, at = table(params)
        (x,) = xs
        xp = namespace(x)
        x = np.asarray(x) if xp is np else x
        ans = _piecewise_value(x, bps, parsed, at)
        idx = _searchsorted(bps, x, "right")
        if len(bps):
            tie = _on_breakpoint(x, bps)
            # the sign of x - breakpoint along the ray: tangent first, exact series if it is 0
            left = tie & (ray_compare(x, dxs[0], xp.where(tie, x, np.nan), None) < 0)
            idx = xp.where(left, _searchsorted(bps, x, "left"), idx)
        slope = _select(x, idx, parsed, 1)
        return ans, Diagonal(_as_float(slope, x), tuple(x.shape))

    piecewise_rule.__name__ = f"{name}_rule"
    piecewise_rule.piecewise_table = table  # what compiled fast paths inline (asd.core.codegen)
    return Primitive(name, impl, piecewise_rule, array_api=True)


def _searchsorted(bps: np.ndarray, x, side: str):
    """The index of the piece holding each entry of ``x`` (numpy's ``searchsorted`` over the
    breakpoints), in ``x``'s library; numpy's also runs on object arrays of exact series."""
    if is_host(x):
        return np.searchsorted(bps, x, side=side)
    xp = namespace(x)
    return xp.searchsorted(from_host(bps, x, "like"), x, side=side)


def _on_breakpoint(x, bps: np.ndarray):
    """Where ``x`` is exactly on a breakpoint (one comparison per breakpoint)."""
    bps = _scalars(bps, x)
    tie = x == bps[0]
    for b in bps[1:]:
        tie = tie | (x == b)
    return tie


def _scalars(values: np.ndarray, x) -> list:
    """``values`` as scalars to compare ``x`` with: numpy's float64 scalars beside numpy
    values (so a float32 ``x`` is compared exactly, as ``searchsorted`` does), Python floats
    beside other libraries' arrays (their own dtype)."""
    return list(values) if is_host(x) else [float(v) for v in values]


def _select(x, idx, parsed: list, which: int):
    """Piece ``idx`` of each entry: its value (``which=0``) or its slope (1), by ``where``."""
    xp = np if is_host(x) else namespace(x)
    shape = tuple(x.shape)
    out = xp.broadcast_to(parsed[-1][which](x), shape)
    for i in range(len(parsed) - 2, -1, -1):
        out = xp.where(idx == i, parsed[i][which](x), out)
    return out


def _piecewise_value(x, bps: np.ndarray, parsed: list, at: np.ndarray):
    """The value of the piece holding ``x``; on a breakpoint, its value there rounded once
    from the exact one (`_instantiate`), the first of repeated breakpoints."""
    xp = np if is_host(x) else namespace(x)
    ans = _select(x, _searchsorted(bps, x, "right"), parsed, 0)
    for b, value in zip(_scalars(bps, x)[::-1], _scalars(at, x)[::-1], strict=True):
        ans = xp.where(x == b, value, ans)
    return _as_float(ans, x)


def _as_float(a, x):
    """``a`` in ``x``'s floating dtype (an integer ``x`` gives float64, as numpy does)."""
    if is_host(x):
        return a.astype(np.result_type(x, np.float16), copy=False)
    xp = namespace(x)
    return xp.astype(a, x.dtype if xp.isdtype(x.dtype, "real floating")
                     else xp.asarray(0.0).dtype)


__all__ = [
    "Closure",
    "Dense",
    "Diagonal",
    "FanIn",
    "FixedTangent",
    "Index",
    "LinearMap",
    "Mask",
    "MatMul",
    "Primitive",
    "Reroute",
    "Reshape",
    "Rows",
    "Series",
    "SeriesUnavailable",
    "Sum",
    "Take",
    "Transpose",
    "Zero",
    "ZeroTangent",
    "array_library",
    "comparison_of",
    "deflinear",
    "defpiecewise",
    "defsmooth",
    "device",
    "first_order_keys",
    "from_host",
    "identity",
    "index_array",
    "index_decided",
    "input_series",
    "is_foreign",
    "is_host",
    "is_traced",
    "kernel",
    "leading_vector",
    "line",
    "namespace",
    "numpy_dtype",
    "operation_of",
    "ray_argmax",
    "ray_argmax_at",
    "ray_argmax_windows",
    "ray_argsort",
    "ray_compare",
    "ray_cummax",
    "ray_nonnegative",
    "read_value",
    "record_asked",
    "record_degenerate_tie",
    "record_jump",
    "record_tie_decision",
    "refuse_where",
    "register_accumulate",
    "register_alternative",
    "register_kernel",
    "register_lazy_ufuncs",
    "register_method",
    "register_numpy",
    "register_reduce",
    "register_ufunc_at",
    "root_limit",
    "set_at",
    "tangent_at",
    "tie_sign",
    "to_host",
    "unbroadcast",
    "unsupported",
    "window_slices",
    "within_reach",
]
