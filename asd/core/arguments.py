"""Checks at the API boundary: arguments, ``argnums``, directions, seeds and outputs.

Every public transform (``subgrad``, ``directional``, ``jacobian``, ``trace``, ``clarke``,
``Program`` calls) takes the same kinds of values, so they are checked here, once, and each
mistake gets the same asd error naming what was wrong and the fix. Without these checks numpy
would guess: a complex number silently loses its imaginary part, the string ``"1.5"`` becomes
1.5, a function returning ``"abc"`` gets a zero gradient, and a NaN input sorts to the end and
yields a confident subgradient at a point where the function has none.

>>> import asd
>>> asd.subgrad(lambda x: x * x)(1 + 1j)  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
asd.errors.ArgumentTypeError: argument 0 is complex (complex128); ... two real arguments.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asd.core import backend
from asd.core.primitive import Traced
from asd.core.tracing import close_trace
from asd.errors import (
    ArgumentError,
    ArgumentTypeError,
    NestingError,
    NonFiniteError,
    OutputError,
    ShapeError,
)
from asd.tree import TreeDef, flatten, flatten_as, unflatten

INT64_RANGE = (-(2 ** 63), 2 ** 63)
"""Python integers outside this range do not fit numpy's int64 and are refused."""


def _is_int(a) -> bool:
    return isinstance(a, int | np.integer) and not isinstance(a, bool | np.bool_)


# ----- argnums -----

def check_argnums(argnums, n_args: int) -> tuple[bool, tuple[int, ...]]:
    """``(single, argnums as a tuple)``; refuses non-integers, out-of-range and duplicates.

    A duplicate would differentiate one argument twice and hand one of the two blocks zeros.

    >>> check_argnums((0, 2), 3)
    (False, (0, 2))
    >>> check_argnums((0, -2), 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    asd.errors.ArgumentError: argnums=(0, -2) names argument 0 twice ...; list each argument once.
    """
    if n_args == 0:
        raise ArgumentError("the function was called with no arguments, so there is nothing to "
                            "differentiate; call it at the point, e.g. asd.subgrad(f)(x)")
    if _is_int(argnums):
        single, nums = True, (int(argnums),)
    elif (isinstance(argnums, tuple | list) and len(argnums) > 0
          and all(_is_int(a) for a in argnums)):
        single, nums = False, tuple(int(a) for a in argnums)
    else:
        raise ArgumentTypeError(
            f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}; e.g. "
            "argnums=0 for the first argument or argnums=(0, 1) for the first two")
    seen: dict[int, int] = {}
    for a in nums:
        if not -n_args <= a < n_args:
            raise ArgumentError(f"argnums={argnums!r} names argument {a}, but the function got "
                                f"{n_args} argument{'s' if n_args != 1 else ''}; use an index "
                                f"in range({-n_args}, {n_args})")
        i = a % n_args
        if i in seen:
            raise ArgumentError(f"argnums={argnums!r} names argument {i} twice ({a} is argument "
                                f"{i} of {n_args}); list each argument once.")
        seen[i] = a
    return single, nums


# ----- argument leaves -----

def as_real_array(x, where: str) -> np.ndarray:
    """``x`` as a real numeric array (bool, int or float), or a clear error naming ``where``.

    >>> as_real_array(3, "argument 0")
    array(3)
    >>> as_real_array("1.5", "argument 0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    asd.errors.ArgumentTypeError: argument 0 is a str ('1.5'), not a real number ... string).
    """
    if isinstance(x, Traced):
        raise NestingError(f"{where} is already a traced value: nested differentiation (asd "
                           "inside asd) is not supported. Differentiate the outer function "
                           "with respect to all the variables at once (argnums=(0, 1)).")
    if _is_int(x) and not INT64_RANGE[0] <= int(x) < INT64_RANGE[1]:
        raise ArgumentError(f"{where} is the integer {int(x)}, outside the 64-bit range numpy "
                            "computes in; pass it as a float (float(n)) or rescale it")
    if isinstance(x, str | bytes):
        raise ArgumentTypeError(f"{where} is a {type(x).__name__} ({_short(x)}), not a real "
                                "number or array; convert it first (float(s) for a string).")
    if isinstance(x, np.ma.MaskedArray):
        raise masked_refusal(where)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise ArgumentTypeError(f"{where} ({type(x).__name__}) cannot be read as a real array: "
                                f"{e}. Pass floats, numpy arrays, or tuples/lists/dicts of "
                                "them.") from e
    kind = a.dtype.kind
    if kind == "c":
        raise ArgumentTypeError(
            f"{where} is complex ({a.dtype}); asd differentiates real functions of real "
            "inputs. Pass the real and imaginary parts as two real arguments.")
    if kind not in "biuf":
        raise ArgumentTypeError(
            f"{where} is a {type(x).__name__} ({_short(x)}), not a real number or array; "
            "pass floats, numpy arrays, or tuples/lists/dicts of them (sets and other "
            "objects are not read as arrays).")
    if kind == "u" and a.dtype.itemsize == 8 and a.size and a.max() >= INT64_RANGE[1]:
        raise ArgumentError(f"{where} holds integers of 2**63 or more, outside the 64-bit range "
                            "numpy computes in; pass floats")
    return a


def masked_refusal(where: str) -> ArgumentTypeError:
    """A masked array met where asd reads values: asd computes on plain arrays, so the mask
    would be dropped (numpy's masked sum of ``[1, --]`` is 1; of the data, 3)."""
    return ArgumentTypeError(
        f"{where} is a numpy masked array; asd computes on its data and would drop the mask "
        "(the masked entries would count). Pass the data and apply the mask inside the "
        "function: mask = np.ma.getmaskarray(m), then differentiate "
        "lambda x: np.sum(np.where(mask, 0.0, x)) at m.data, or drop the masked entries "
        "first with m.compressed().")


def refuse_masked(args: tuple, skip: tuple[int, ...] = ()) -> None:
    """Refuse a masked array among the leaves of the arguments not in ``skip`` (the
    differentiated ones are checked as they are read)."""
    for i, a in enumerate(args):
        if i in skip:
            continue
        leaves, _ = flatten(a)
        for j, leaf in enumerate(leaves):
            if isinstance(leaf, np.ma.MaskedArray):
                raise masked_refusal(f"argument {i}" if len(leaves) == 1
                                     else f"argument {i} (leaf {j})")


def exactly_float(a: np.ndarray, where: str) -> np.ndarray:
    """An integer or bool array as float64, refused where that rounds an entry.

    float64 holds every integer up to 2**53 in magnitude; past it ``2**60 + 1`` becomes
    ``2**60``, so ``t[0] - t[1]`` would be 0 where numpy's integer arithmetic says 1.
    """
    f = a.astype(np.float64)
    if a.dtype.kind not in "iu" or a.dtype.itemsize <= 4 or not a.size:
        return f
    with np.errstate(all="ignore"):  # 2**63 and beyond wrap when cast back: caught below
        inexact = (f >= 2.0 ** (63 if a.dtype.kind == "i" else 64)) | (f.astype(a.dtype) != a)
    if inexact.any():
        at = tuple(int(i) for i in np.argwhere(inexact)[0])
        raise inexact_integer(where, int(a[at]), int(f[at]) if np.isfinite(f[at]) else None,
                              at if a.ndim else None)
    return f


def inexact_integer(where: str, n: int, rounded: int | None, at) -> ArgumentError:
    """The refusal of an integer that the float conversion would round."""
    becomes = f" (it would become {rounded})" if rounded is not None else ""
    index = f" at index {at}" if at is not None else ""
    return ArgumentError(
        f"{where} holds the integer {n}{index}, which the floating-point type asd "
        f"differentiates in cannot hold exactly{becomes}: integers are exact only up to "
        "2**53 in float64 (2**24 in float32). Subtract a common offset or rescale so the "
        "values fit, or convert it yourself (np.asarray(x, dtype=float)) to accept the "
        "rounding.")


def foreign_real_array(x, where: str):
    """A torch or JAX array checked as `as_real_array` checks numpy's, kept in its library."""
    xp = backend.namespace(x)
    if xp.isdtype(x.dtype, "complex floating"):
        raise ArgumentTypeError(
            f"{where} is complex ({x.dtype}); asd differentiates real functions of real "
            "inputs. Pass the real and imaginary parts as two real arguments.")
    if not xp.isdtype(x.dtype, ("bool", "integral", "real floating")):
        raise ArgumentTypeError(f"{where} has dtype {x.dtype}, not a real number type")
    return x


def as_leaf(x, where: str):
    """A non-differentiated leaf: a real numpy array, or another library's real array as is."""
    return foreign_real_array(x, where) if backend.is_foreign(x) else as_real_array(x, where)


def as_float(x, where: str = "argument", check: bool = True) -> np.ndarray:
    """A differentiated leaf as a finite float array (integers and bools become float64).

    A torch or JAX array stays in its library, dtype and device (integers and bools become
    its default float); with ``check=False`` its finiteness is left to the caller, who tests
    all such leaves at once (`check_leaves_finite`).
    """
    if backend.is_foreign(x):
        a = backend.floating(foreign_real_array(x, where))
        if a is not x:
            _check_exact_conversion(x, a, where)
        if check:
            check_leaves_finite([a], [where])
        return a
    a = as_real_array(x, where)
    if a.dtype.kind != "f":
        a = exactly_float(a, where)
    # the sum of squares (one BLAS pass, no temporary: a quarter of an entrywise test) is
    # finite when every entry is; the entrywise test runs only to tell a NaN or infinity
    # from a sum that overflowed
    flat = a.ravel()
    with np.errstate(all="ignore"):  # tiny entries underflow: harmless, whatever the caller's
        square_sum = np.dot(flat, flat)
    if not np.isfinite(square_sum) and not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))
        at = f" at index {tuple(int(i) for i in bad[0])}" if a.ndim else ""
        raise NonFiniteError(
            f"{where} has {len(bad)} non-finite entr{'y' if len(bad) == 1 else 'ies'} "
            f"({a[tuple(bad[0])] if a.ndim else a}{at}); a generalized derivative exists only "
            "at finite points. Replace NaN/inf before differentiating (np.nan_to_num).")
    return a


def _check_exact_conversion(x, a, where: str) -> None:
    """Refuse another library's integer array whose float conversion ``a`` rounded it."""
    xp = backend.namespace(x)
    changed = xp.astype(a, x.dtype) != x
    if bool(backend.to_host(xp.any(changed))):
        host = backend.to_host(x)
        at = tuple(int(i) for i in np.argwhere(backend.to_host(changed))[0])
        raise inexact_integer(where, int(host[at]), None, at if host.ndim else None)


def check_leaves_finite(leaves: list, names: list[str]) -> None:
    """Refuse the first differentiated leaf with a NaN or infinity (one device wait)."""
    k = backend.first_nonfinite_of(leaves)
    if k is not None:
        raise NonFiniteError(
            f"{names[k]} has non-finite entries; a generalized derivative exists only at "
            "finite points. Replace NaN/inf before differentiating.")


def check_not_empty(leaves: list[np.ndarray], argnums: tuple[int, ...]) -> None:
    """Refuse differentiated arguments that hold no number: there is nothing to sweep along."""
    if not any(backend.size(x) for x in leaves):
        raise ArgumentError(
            f"the differentiated argument{'s' if len(argnums) > 1 else ''} (argnums="
            f"{argnums[0] if len(argnums) == 1 else argnums}) hold no numbers (empty arrays or "
            "containers), so there is nothing to differentiate; pass the point as floats or "
            "a non-empty array, or pick another argument with argnums")


def describe_leaf(argnum: int, i: int, n_leaves: int) -> str:
    return f"argument {argnum}" if n_leaves == 1 else f"argument {argnum} (leaf {i})"


def _short(x, n: int = 40) -> str:
    text = repr(x)
    return text if len(text) <= n else text[: n - 3] + "..."


# ----- directions and seeds -----

def check_direction(direction, tree: TreeDef, leaves: list[np.ndarray], *,
                    allow_zero: bool = False) -> Any:
    """The direction rebuilt in the arguments' structure, or a clear error.

    Refuses a structure or shape that does not match the differentiated arguments, complex
    or non-numeric entries, NaN/inf, and (unless ``allow_zero``) the zero vector, which
    selects no branch. ``None`` (draw one at random) is passed through.
    """
    if direction is None:
        return None
    try:  # dicts matched by key, as the arguments are; an array leaf may come as a list
        dirs = flatten_as(tree, direction, array_leaves=True)
    except ValueError as e:
        raise ShapeError(f"the direction has structure {flatten(direction)[1]}, but the "
                         f"differentiated arguments have structure {tree} ({e}); give one "
                         "entry per argument leaf, in the arguments' containers") from e
    out = []
    for i, (d, x) in enumerate(zip(dirs, leaves, strict=True)):
        where = "the direction" if len(dirs) == 1 else f"the direction (leaf {i})"
        if backend.is_foreign(d):
            d = backend.to_host(foreign_real_array(d, where))  # checked and drawn on the host
        d = as_real_array(d, where)
        if d.dtype.kind in "iu":
            d = exactly_float(d, where)
        if d.shape != tuple(x.shape):
            raise ShapeError(f"{where} has shape {d.shape}, but the argument it moves has shape "
                             f"{x.shape}; give the direction the argument's shape")
        if not np.all(np.isfinite(d)):
            raise ArgumentError(f"{where} is not finite ({_short(d)}); give a finite vector")
        out.append(d)
    if not allow_zero and not any(np.any(d) for d in out):
        raise ArgumentError("the direction is zero; it must be nonzero because it selects the "
                            "branch at every tie (any nonzero vector works; scale is ignored)")
    return unflatten(tree, out)


def unit_exponent(leaves: list[np.ndarray]) -> int:
    """The ``e`` with the largest entry of a direction (float64 leaves) in ``[2**(e-1), 2**e)``:
    dividing by ``2**e`` is exact (subnormals included) and leaves no entry above 1.

    >>> unit_exponent([np.array([1e308, -3.0])]), unit_exponent([np.array([5e-324])])
    (1024, -1073)
    """
    top = max((float(np.max(np.abs(d))) for d in leaves if d.size), default=0.0)
    return math.frexp(top)[1] if top else 0


def times_power_of_two(a, e: int):
    """``a * 2**e`` exactly (rounded only where the result over- or underflows), in ``a``'s
    library and dtype: undoes `unit_exponent`'s scaling on a derivative."""
    if e == 0:
        return a
    if backend.is_host(a):
        with np.errstate(all="ignore"):  # an overflow is the caller's to report
            return np.ldexp(a, e) if np.result_type(a).kind == "f" else np.ldexp(
                np.asarray(a, dtype=np.float64), e)
    while e:  # steps of at most 2**64, which every float format holds
        step = max(-64, min(64, e))
        a = a * 2.0 ** step
        e -= step
    return a


def direction_overflow(what: str, e: int) -> NonFiniteError:
    """The refusal of a derivative finite at unit scale whose value along the given,
    huge direction (``2**e`` times the unit one) is past the float range."""
    return NonFiniteError(
        f"{what} along the given direction is not finite: it is finite along the direction "
        f"scaled to unit size, and the direction's largest entry is about 2**{e}, which "
        "takes it past the float range. Pass a smaller direction: the result does not "
        "depend on the direction's scale, and f'(x; c*v) = c * f'(x; v) for c > 0.")


def check_seed(seed) -> None:
    """Refuse a seed numpy's ``SeedSequence`` would reject, at decoration time.

    >>> check_seed(-1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    asd.errors.ArgumentError: seed=-1 is not usable: seeds are None, a non-negative int, ...
    """
    if seed is None or isinstance(seed, np.random.Generator | np.random.SeedSequence):
        return
    try:
        ok = not isinstance(seed, bool | float | str | bytes)
        if ok:
            np.random.SeedSequence(seed)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ArgumentError(f"seed={_short(seed)} is not usable: seeds are None, a non-negative "
                            "int, a sequence of them, a numpy Generator or SeedSequence")


# ----- constants met inside the function -----

def check_real_program(trace) -> None:
    """Refuse a masked-array constant, and the first differentiated node holding complex
    values, in the program ``f`` recorded.

    Arguments are checked at the boundary, but constants enter inside ``f``: ``x + 1j`` makes
    complex values whose imaginary parts the real linear maps, and the final cast to the
    argument's dtype, would drop (numpy only warns), and a masked array's mask is dropped by
    every rule, which computes on plain arrays. One pass over the nodes after the call (the
    dtypes as a set: a few, however long the program).
    """
    from asd.core.program import Literal, format_node

    nodes = trace.nodes
    masked = np.ma.MaskedArray
    for k, node in enumerate(nodes):
        for a in node.args:
            if type(a) is Literal and isinstance(a.value, masked):
                raise masked_refusal(f"the constant {_short(a.value)} of "
                                     f"{format_node(k, node)}")
    if not any(map(_is_complex, {node.dtype for node in nodes})):
        return
    for k, node in enumerate(nodes):
        if node.prim is not None and node.active and _is_complex(node.dtype):
            consts = [a.value for a in node.args if type(a) is Literal
                      and _is_complex(_constant_dtype(a.value))]
            source = (f"the complex constant {_short(consts[0])}" if consts
                      else f"{node.name} (it returns complex values)")
            raise ArgumentTypeError(
                f"{format_node(k, node)} holds complex values, made by {source}; asd "
                "differentiates real programs, and the real derivative maps would drop "
                "the imaginary parts. Write the complex arithmetic with real numbers: "
                "|x + 1j| is np.hypot(x, 1.0), the real and imaginary parts of "
                "(a + bj)(c + dj) are a*c - b*d and a*d + b*c.")


def _constant_dtype(v):
    dtype = getattr(v, "dtype", None)
    if dtype is not None:
        return dtype
    try:
        return np.result_type(v)
    except (TypeError, ValueError):  # a slice, a string: not a number
        return None


def _is_complex(dtype) -> bool:
    """Whether a numpy, JAX or torch dtype is complex."""
    kind = getattr(dtype, "kind", None)
    return kind == "c" if kind is not None else bool(getattr(dtype, "is_complex", False))


# ----- outputs -----

def output_leaf(o, trace, where: str):
    """Check one output leaf: a traced value of this sweep, or a real numeric constant."""
    if isinstance(o, Traced):
        if o._trace is not trace:
            raise NestingError(f"{where} is a traced value from another call (kept from an "
                               "earlier call, or closed over); compute it from the arguments")
        v = o.value
        if (np.result_type(v).kind == "c" if backend.is_host(v)
                else backend.namespace(v).isdtype(v.dtype, "complex floating")):
            raise OutputError(f"{where} is complex; asd differentiates real-valued functions. "
                              "Return the real part, the imaginary part or the modulus.")
        return o
    if isinstance(o, str | bytes):
        raise OutputError(f"{where} is a {type(o).__name__} ({_short(o)}); the function must "
                          "return real numbers or arrays")
    if backend.is_foreign(o):
        foreign_real_array(o, where)  # another library's constant array
        return o
    try:
        a = np.asarray(o)
    except (TypeError, ValueError, OverflowError) as e:
        raise OutputError(f"{where} ({type(o).__name__}) is not a real number or array: "
                          f"{e}") from e
    if a.dtype.kind == "c":
        raise OutputError(f"{where} is complex ({_short(o)}); asd differentiates real-valued "
                          "functions. Return the real part, the imaginary part or the modulus.")
    if a.dtype.kind not in "biuf":
        raise OutputError(f"{where} is a {type(o).__name__} ({_short(o)}), not a real number "
                          "or array")
    return o


def _as_scalar(out, trace):
    """A 1-element traced output as the scalar it holds: a reshape the engine records after
    the call has closed the trace (reopened for this one node)."""
    trace.nodes = list(trace.nodes)
    try:
        return out.reshape(())
    finally:
        close_trace(trace)


def scalar_output(out, trace, who: str = "subgrad"):
    """The traced scalar output, or None for a real constant; anything else is refused."""
    if isinstance(out, tuple | list | dict):
        raise ShapeError(
            f"{who} needs a scalar output, but the function returned a {type(out).__name__} of "
            f"{len(out)} values; return one number (e.g. the loss), or use asd.jacobian or "
            "asd.directional for structured outputs")
    output_leaf(out, trace, "the output")
    if isinstance(out, Traced):
        if out.shape != () and out.size == 1:
            out = _as_scalar(out, trace)
        if out.shape != ():
            raise ShapeError(
                f"{who} needs a scalar output, but the function returned shape {out.shape}; "
                "reduce it (e.g. .sum()) or use asd.jacobian for vector outputs")
        return out
    if np.shape(out) != ():
        raise ShapeError(f"{who} needs a scalar output, got {type(out).__name__} of shape "
                         f"{np.shape(out)}; use asd.jacobian for vector outputs")
    if not np.isfinite(np.asarray(out, dtype=float)):
        raise NonFiniteError(f"the output is the constant {out!r}, which is not finite")
    return None


def output_leaves(out, trace) -> tuple[list, TreeDef]:
    """Flatten a structured output, checking every leaf (see `output_leaf`)."""
    outs, tree = flatten(out)
    for i, o in enumerate(outs):
        output_leaf(o, trace, "the output" if len(outs) == 1 else f"output leaf {i}")
    return outs, tree


# ----- non-finite values and derivatives -----

def check_finite(trace, out_id: int, arrays: list, what: str = "the subgradient", *,
                 finite: bool | None = None) -> None:
    """NaN/inf in the output value (named at its first node) or in the derivative;
    ``finite``: whether the caller already tested ``arrays`` (each test is a pass over every
    gradient, a few percent of a dense network's step)."""
    if not backend.all_finite(trace.values[out_id]):
        k = trace.first_nonfinite(out_id)
        trace.raise_nonfinite(k, "the output value")
    if finite is None:
        finite = backend.first_nonfinite_of(arrays) is None
    if not finite:
        k = trace.first_nonfinite(out_id)
        if k is not None:
            trace.raise_nonfinite(k, f"a value {what} passes through")
        node = trace.first_overflowing_map(out_id)
        raise NonFiniteError(derivative_overflow(what, node))


def check_finite_outputs(trace, outs: list) -> None:
    """Every output leaf's value finite; a traced one is named at the node that first broke."""
    for i, o in enumerate(outs):
        if isinstance(o, Traced):
            if not backend.all_finite(o.value):
                k = trace.first_nonfinite(o._id)
                trace.raise_nonfinite(k, "the output value")
        elif not backend.all_finite(o):
            raise NonFiniteError(f"output leaf {i} is the constant {_short(o)}, which is not "
                                 "finite")


def derivative_overflow(what: str, node: str | None = None) -> str:
    at = f" at {node}" if node else ""
    return (f"{what} is not finite although every value is: a derivative{at} overflowed the "
            "float range (a slope such as that of x**0.01 near 0 is larger than 1e308). Keep "
            "the point away from where the slope blows up, or rescale the inputs.")


def check_finite_tangents(trace, outs: list, dots: list) -> None:
    """For directional derivatives: name the first node whose tangent is not finite."""
    if all(backend.all_finite(d) for d in dots):
        return
    for o in outs:  # a non-finite value it passes through (log at 0) is named as such
        k = trace.first_nonfinite(o._id) if isinstance(o, Traced) else None
        if k is not None:
            trace.raise_nonfinite(k, "a value the directional derivative passes through")
    from asd.core.program import format_node

    for k, t in enumerate(trace.tangents):
        if t is not None and not backend.all_finite(t):
            raise NonFiniteError(derivative_overflow("the directional derivative",
                                                     format_node(k, trace.nodes[k])))
    raise NonFiniteError(derivative_overflow("the directional derivative"))
