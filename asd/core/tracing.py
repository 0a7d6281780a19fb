"""Traced arrays: numpy-like values that record every operation into the current sweep.

Values are computed eagerly (the primal runs once, inside the rules), so a ``Tracer`` is a
numpy value plus the id of the node that produced it. Operators and numpy calls reach the
library through the dispatch tables in ``asd.core.primitive``; the engine never names a primitive.

Code written against the array API standard (``xp = x.__array_namespace__()``) traces too:
`ArrayNamespace` sends its operations through the same tables, and takes creation functions,
dtypes and constants from the library of the sweep's values (numpy, torch or JAX).
"""

from __future__ import annotations

import ast
import dis
import functools
import linecache
import os
import sys
import weakref
from typing import NoReturn

import numpy as np

from asd.core import backend
from asd.core.primitive import (
    FUNCTIONS,
    METHODS,
    UFUNC_ACCUMULATE,
    UFUNC_AT,
    UFUNC_REDUCE,
    UFUNCS,
    Primitive,
    Traced,
    qualified_name,
    ufunc_rule,
    unsupported,
)
from asd.errors import (
    ArgumentTypeError,
    ASDError,
    DeadTraceError,
    IndexingError,
    NotLipschitzError,
    ShapeError,
    TracerBoolError,
    UnsupportedError,
)


def _is_weak(x) -> bool:
    """Whether ``x`` is (or, had its input come as a Python float, would be) a Python float
    of the program (`Trace.weak`)."""
    return type(x) is Tracer and x._id in x._trace.weak


def _weakly_promoted(operands: tuple, operator: bool) -> tuple[tuple, bool | None]:
    """``operands`` as numpy promotes a Python float among them (NEP 50: weakly, so
    ``x - np.float32(c)`` computes in float32 with ``x`` rounded to it): a traced input that
    came as a Python float (`Trace.weak`) is cast to the dtype the other operands give,
    which can move a tie (``x - np.float32(0.1)`` at ``x = 0.1`` is 0 in float32 only).
    Also what the result is: a Python operator between Python numbers alone returns a
    Python float (weak where all its traced operands are), a ufunc a numpy scalar (None)."""
    strong = [o for o in operands if not _is_weak(o) and type(o) not in (int, float, bool, complex)]
    if not strong:
        return operands, all(o._trace.weak[o._id] for o in operands if _is_weak(o)) \
            if operator else None
    dtype = np.result_type(*(o.dtype if hasattr(o, "dtype") else np.asarray(o).dtype
                             for o in strong), 1.0)
    base = np.result_type(*(o.dtype if hasattr(o, "dtype") else np.asarray(o).dtype
                            for o in strong))
    out = []
    for o in operands:
        # a Python float is cast to the float the others give where it is narrower than
        # float64; a Python int (`~` of a Python bool) to the others' numeric dtype
        kind = backend.numpy_dtype(o).kind if _is_weak(o) else None
        if kind == "f" and dtype.kind in "fc" and np.dtype(o.dtype) != dtype:
            o._trace.weak_sensitive = True  # the program depends on which inputs were weak
            o = o.astype(dtype) if o._trace.weak[o._id] else o
        elif kind == "i" and base.kind in "iufc" and np.dtype(o.dtype) != base:
            o = _as_python_int_in(o, base)
        out.append(o)
    return tuple(out), None


def _as_python_int_in(o, dtype: np.dtype):
    """A traced Python int in a numpy operation of ``dtype`` (NEP 50: cast to it, an
    OverflowError where it does not fit an integer dtype)."""
    if dtype.kind in "iu":
        info, v = np.iinfo(dtype), np.asarray(o.value)
        if (v < info.min).any() or (v > info.max).any():
            raise ArgumentTypeError(f"the Python integer {v.tolist()} is out of bounds for "
                                    f"{dtype} (numpy raises OverflowError)")
    return o.astype(dtype)


_ARITHMETIC = frozenset({np.add, np.subtract, np.multiply, np.true_divide, np.floor_divide,
                         np.remainder, np.power, np.divmod})
"""The ufuncs whose Python operator computes on a bool as on an int (``True + True == 2``,
where numpy's ``np.True_ + np.True_`` is True)."""


def _python_bools_as_ints(operands: tuple, python: bool = True) -> tuple:
    """``operands`` of a Python operator between Python numbers alone, each traced Python
    bool (a comparison of Python floats) as the int Python computes with, where ``python``
    (every traced operand a Python number: a numpy bool among them, of float64 scalars,
    makes it numpy's operation, ``True + np.True_`` is True). The program then depends on
    which inputs were Python floats."""
    out = []
    for o in operands:
        if _is_weak(o) and backend.numpy_dtype(o).kind == "b":
            o._trace.weak_sensitive = True
            if python and o._trace.weak[o._id]:
                o = _marked_weak(o.astype(np.int64), True)
        out.append(o)
    return tuple(out)


def _weak_of(x) -> bool | None:
    """The weak mark a unary operator passes on: ``-x`` and ``abs(x)`` of a Python float are
    Python floats (NEP 50: ``-x - np.float32(c)`` computes in float32), as numpy's own
    ``np.negative(x)`` is not (a float64 scalar, which the ufunc path reads)."""
    return x._trace.weak[x._id] if _is_weak(x) else None


def _marked_weak(out, weak: bool | None):
    """``out`` marked as a Python number (``weak``): a float, a bool (a comparison of
    Python floats, whose ``~`` is Python's integer inversion) or an int."""
    if weak is not None and type(out) is Tracer and backend.numpy_dtype(out).kind in "fbi":
        out._trace.weak[out._id] = weak
    return out


def _ufunc(uf, operator: str | None = None):
    # When the table entry is a primitive and the other operand is a constant or from the
    # same sweep, go straight to the trace: operators are the hottest path of a program.
    # ``operator``: a METHODS entry that spells the operator where numpy computes it apart
    # from the ufunc (a numpy scalar's ``**`` is scalar math, not np.power's loop).
    def op(self, other):
        fn = METHODS.get(operator) or UFUNCS.get(uf)
        weak = None
        if self._trace.weak and (_is_weak(self) or _is_weak(other)):
            (self, other), weak = _weakly_promoted((self, other), True)
            if weak is not None and uf in _ARITHMETIC:
                self, other = _python_bools_as_ints((self, other), weak)
        try:
            if type(fn) is Primitive and (type(other) is not Tracer
                                          or other._trace is self._trace):
                return _marked_weak(self._trace.apply(fn, (self, other), {}), weak)
            if fn is None:
                raise unsupported(uf)
            return _marked_weak(fn(self, other), weak)
        except (IndexError, ValueError, TypeError) as e:
            raise_as_asd_error(e, f"numpy.{uf.__name__}", (self, other))

    def rop(self, other):
        fn = METHODS.get(operator) or UFUNCS.get(uf)
        weak = None
        if self._trace.weak and _is_weak(self):
            (other, self), weak = _weakly_promoted((other, self), True)
            if weak is not None and uf in _ARITHMETIC:
                other, self = _python_bools_as_ints((other, self), weak)
        try:
            if type(fn) is Primitive and type(other) is not Tracer:
                return _marked_weak(self._trace.apply(fn, (other, self), {}), weak)
            if fn is None:
                raise unsupported(uf)
            return _marked_weak(fn(other, self), weak)
        except (IndexError, ValueError, TypeError) as e:
            raise_as_asd_error(e, f"numpy.{uf.__name__}", (other, self))

    return op, rop


def _in_place(symbol: str, uf):
    """``y += b`` and its kind: numpy writes the result into ``y`` (keeping its shape and
    dtype), so every name and view of ``y`` sees it; asd points ``y`` at the new node and
    follows the views (`write`). An argument's tracer is rebound instead where it is a
    number (a Python float passed in), and refused where it is an array numpy would write."""
    op = _ufunc(uf)[0]

    def in_place(self, other):
        def compute():
            new = op(self, other)
            if tuple(new.shape) != tuple(self.shape):
                raise ShapeError(f"`{symbol}` on {describe_value(self)} with an operand of "
                                 f"shape {np.shape(other)}: the result has shape "
                                 f"{tuple(new.shape)}, which numpy cannot store in place")
            if new.dtype != self.dtype and getattr(self.dtype, "kind", None) == "f":
                new = new.astype(self.dtype)  # numpy keeps the target's dtype
            return new

        if (type(self.value) is not np.ndarray and _viewed_tensor(self._trace, self._id)
                is not None and assigned_array(sys._getframe(1), augmented_only=True)):
            return compute()  # `y[k] += b` on torch: Python stores the result in y[k] next
        if self._trace.nodes[self._id].prim is None:
            if self.ndim:
                raise ArgumentTypeError(
                    f"`{symbol}` on the argument {describe_value(self)}{user_source_line()} "
                    "would change the caller's array in place (numpy writes into it). "
                    f"Copy it first (y = x.copy(); y {symbol} ...) or write x = x "
                    f"{symbol[:-1]} ...")
            return compute()
        write(self, compute, f"`{symbol}`")
        return self

    in_place.__name__ = f"__i{uf.__name__}__"
    return in_place


def _method(name):
    def method(self, *args, **kwargs):
        fn = METHODS.get(name)
        if fn is None:
            raise unsupported(f"the array method .{name}()")
        try:
            return fn(self, *args, **kwargs)
        except (IndexError, ValueError, TypeError) as e:
            what = "indexing" if name == "getitem" else f".{name}()"
            raise_as_asd_error(e, what, (self, *args))

    method.__name__ = name
    return method


def _function_method(fn, name: str | None = None):
    """``x.name(...)`` as numpy's ``fn(x, ...)`` (an ndarray method is its function with the
    array first): the method meets the same rule, or the same refusal, as the function."""
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = name or fn.__name__
    return method


def _no_bytes(name: str):
    """An ndarray method that reads or writes the raw memory of the value (bytes, files,
    fields): it would take the value out of the program, so it refuses as ``float()`` does."""
    def method(self, *args, **kwargs):
        self._concrete(f".{name}()")

    method.__name__ = name
    return method


class FlatIter:
    """``x.flat`` of a traced array: reads index the flattened array (``x.ravel()[key]``);
    a write ``x.flat[key] = v`` is a functional update of ``x``, as ``x[key] = v`` is."""

    __slots__ = ("_base",)

    def __init__(self, base: Tracer):
        self._base = base

    def __getitem__(self, key):
        return self._base.ravel()[key]

    def __setitem__(self, key, value) -> None:
        base = self._base
        flat = base.ravel()
        flat[key] = value
        base._assign(flat.reshape(base.shape), ".flat[...] = ...")

    def __iter__(self):
        return iter(self._base.ravel())

    def __len__(self) -> int:
        return self._base.size

    def __repr__(self) -> str:
        return f"<flat iterator of {self._base!r}>"


def as_asd_error(e: Exception, what: str, operands: tuple) -> Exception:
    """A raw numpy/Python error from an operation on traced values, as an asd error.

    asd's own errors (and the user's, which never pass through here) are returned unchanged;
    an ``IndexError`` stays an ``IndexError`` (`IndexingError`), a ``ValueError`` becomes a
    `ShapeError` and a ``TypeError`` an `ArgumentTypeError`, naming the operands.
    """
    if isinstance(e, ASDError):
        return e
    for o in operands:
        top = type(o).__module__.split(".", 1)[0]
        x = next((t for t in operands if isinstance(t, Tracer)), None)
        if top in FRAMEWORKS and x is not None and backend.is_host(x.value):
            return framework_error(x, top, f"{what} with a {FRAMEWORKS[top][0]} operand")
    ops = ", ".join(repr(o) if isinstance(o, Tracer) else _short(o) for o in operands)
    what = f"{what} of {ops}" if ops else what
    if isinstance(e, IndexError):
        return IndexingError(f"{what}: {e}. Index within the array's shape.")
    if isinstance(e, ValueError):
        return ShapeError(f"{what}: {e}. Make the shapes agree (reshape to a size "
                          "with the same number of entries, broadcastable operands).")
    return ArgumentTypeError(f"{what}: {e}. Operands of traced arrays must be real "
                             "numbers or arrays.")


def raise_as_asd_error(e: Exception, what: str, operands: tuple) -> NoReturn:
    """Raise `as_asd_error` of ``e`` chained to ``e``; an asd error passes through as itself
    (``raise e from e`` would make it its own cause, a cycle that code walking ``__cause__``,
    like JAX's error handling in a custom VJP's backward, never leaves)."""
    err = as_asd_error(e, what, operands)
    if err is e:
        raise e
    raise err from e


def raised_by_asd(e: BaseException) -> str | None:
    """The asd function a raw exception came from (skipping numpy's frames), else None.

    Errors the user's own code raises (also through numpy) come from a frame outside asd and
    pass through unchanged; a bare ``ValueError`` from inside asd's library is asd's to
    explain (see `as_asd_error`).
    """
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    dirs = _engine_dirs()
    numpy_dir = os.path.dirname(os.path.abspath(np.__file__))
    inside = None
    for frame in reversed(frames):
        name = os.path.abspath(frame.f_code.co_filename)
        if name.startswith(numpy_dir + os.sep):
            continue
        if not any(name.startswith(d + os.sep) for d in dirs):
            break
        inside = inside or "asd"
        if not frame.f_code.co_name.startswith("<"):  # the first named function (no lambda)
            return frame.f_code.co_name
    return inside


def _short(x, n: int = 40) -> str:
    text = repr(x)
    return text if len(text) <= n else text[: n - 3] + "..."


# ----- the end of a call: traced values that escaped it refuse further use -----

class ClosedNodes(list):
    """The node list of a trace whose call has returned: readable, but nothing is recorded.

    A traced value that escaped its call (through a closure, a global or the output) would
    otherwise keep appending to a trace nobody sweeps again and return numbers that look
    right. The engine only reads the nodes after the call, so refusing ``append`` is enough
    and costs nothing per operation.
    """

    __slots__ = ()

    def append(self, node) -> None:
        raise DeadTraceError(
            "a traced value was used after the call that traced it had returned (it escaped "
            "through a closure, a global or the function's output). Traced values live only "
            "inside one call: compute with the arguments the function receives, and keep "
            "plain numbers (result.value, the returned arrays) between calls.")


def close_trace(trace) -> None:
    """Mark ``trace`` finished: its values stay readable, new operations on them raise."""
    if type(trace.nodes) is not ClosedNodes:
        trace.nodes = ClosedNodes(trace.nodes)


# ----- naming what the user wrote, for TracerBoolError -----

COMPARISON_SYMBOLS = {"greater": ">", "greater_equal": ">=", "less": "<", "less_equal": "<=",
                      "equal": "==", "not_equal": "!="}

# the asd package folder (this file is asd/core/tracing.py), then the library's
_ENGINE_DIRS: list[str] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]


def _engine_dirs() -> list[str]:
    """asd's package folder and its library's (installed apart as asd.library)."""
    if len(_ENGINE_DIRS) == 1 and "asd.library" in sys.modules:
        lib = getattr(sys.modules["asd.library"], "__file__", None)
        if lib:
            _ENGINE_DIRS.append(os.path.dirname(os.path.abspath(lib)))
    return _ENGINE_DIRS


def user_frame(frame):
    """The first frame from ``frame`` outward that is neither asd's nor numpy's (numpy's
    Python code, np.vectorize's loop say, is never the line the user wrote), or None."""
    dirs = [*_engine_dirs(), os.path.dirname(os.path.abspath(np.__file__))]
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not any(name.startswith(d + os.sep) for d in dirs):
            return frame
        frame = frame.f_back
    return None


def user_source_line(frame=None) -> str:
    """`` at file.py:12: `if x > 0:` ``: the first frame outside asd and numpy (from
    ``frame``, by default the caller's), or '' if none."""
    frame = user_frame(sys._getframe(1) if frame is None else frame)
    if frame is None:
        return ""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f" at {frame.f_code.co_filename}:{frame.f_lineno}" + (f": `{line}`" if line else "")


def assigned_array(frame, augmented_only: bool = False, lasti: int | None = None) -> str | None:
    """``c`` when the user's line at ``frame`` assigns into an item of ``c`` (``c[0] = t``,
    ``c[1:] += t``; with ``augmented_only`` only the latter), else None: numpy converts a
    traced value stored into a plain array. Where the line cannot be read (``python -c``,
    ``exec``, a statement over several lines) the instruction running in ``frame`` tells
    (``lasti``: the traceback's, once the frame has returned)."""
    frame = user_frame(frame)
    if frame is None:
        return None
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    try:
        tree = ast.parse(line)
    except SyntaxError:  # a statement over several lines
        tree = None
    if tree is None or not line:
        if augmented_only:
            return None
        return _stored_item(frame.f_code, frame.f_lasti if lasti is None else lasti)
    for stmt in tree.body:
        targets = ([] if augmented_only else stmt.targets if isinstance(stmt, ast.Assign)
                   else [stmt.target] if isinstance(stmt, ast.AugAssign) else [])
        if augmented_only and isinstance(stmt, ast.AugAssign):
            targets = [stmt.target]
        for target in targets:
            if isinstance(target, ast.Subscript):
                return ast.unparse(target.value)
    return None


def _stored_item(code, lasti: int) -> str | None:
    """The array an item assignment stores into when the instruction at ``lasti`` of ``code``
    is one (``STORE_SUBSCR``): its name where the bytecode loads it by name, else a
    description; None for any other instruction."""
    instructions = list(dis.get_instructions(code))
    at = next((i for i, ins in enumerate(instructions) if ins.offset == lasti), None)
    if at is None or instructions[at].opname != "STORE_SUBSCR":
        return None
    target = instructions[at - 2] if at >= 2 else None  # loaded before the key
    if target is not None and target.opname in ("LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL",
                                                "LOAD_DEREF"):
        return str(target.argval)
    return "out"


def stored_by_numpy(e: BaseException) -> bool:
    """Whether ``e`` is numpy's own error for the item assignment on the user's line where
    it was raised (``c[0] = t`` into a plain array): numpy wraps asd's refusal, which the
    transforms then raise in its place. The user's own errors pass through unchanged."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and assigned_array(tb.tb_frame, lasti=tb.tb_lasti) is not None


def store_refusal(x: Tracer, target: str) -> TracerBoolError:
    """The refusal of ``target[...] = x`` into a plain numpy array, with spellings that work."""
    return TracerBoolError(
        f"traced value {describe_value(x)} is written into the plain numpy array "
        f"{target!r}{user_source_line()}: a numpy array holds plain numbers, so the value "
        "would drop out of the program. Build the array from traced values instead "
        "(asd.numpy.stack([x[0], 0.0, 0.0]) or asd.numpy.array([...])), or assign into a "
        f"traced array: start from {target} = np.zeros(n) + x[:0].sum() (traced zeros), "
        f"then {target}[i] = ... records the assignment.")


def _numpy_object_call(frame) -> tuple[str | None, object]:
    """``('numpy.vectorize', caller)`` when ``frame`` runs inside the method of a numpy
    object (np.vectorize's loop), with the frame that called it; else ``(None, frame)``."""
    name, caller = None, frame
    while caller is not None and caller.f_globals.get("__name__", "").startswith("numpy."):
        owner = caller.f_locals.get("self")
        if owner is not None and type(owner).__module__ == "numpy":
            name = f"numpy.{type(owner).__name__}"
        caller = caller.f_back
    return (name, caller) if name else (None, frame)


ARRAY_CONVERSION_ADVICE = {
    "numpy.vectorize": (
        "np.vectorize calls its Python function on plain numbers, one entry at a time. Call "
        "the function on the array itself (f(x) instead of np.vectorize(f)(x)): arithmetic "
        "and numpy functions act entrywise on traced arrays; write a branch "
        "`a if t > 0 else b` as asd.numpy.where(t > 0, a, b)."),
}
"""What to write instead where a numpy object's Python code converts a traced array."""


def dispatching_numpy_function(frame) -> tuple[str | None, object]:
    """``(name, caller)``: the public numpy function whose Python code runs at ``frame`` (its
    outermost numpy frame, named as the user calls it: ``numpy.linalg.norm``, ``numpy.mean``)
    and the frame that called it, if that function dispatches on ``__array_function__`` (so a
    traced value converted inside it came in a container, not as an argument); else
    ``(None, frame)``."""
    name, module, caller = None, None, frame
    while caller is not None and caller.f_globals.get("__name__", "").startswith("numpy."):
        parts = caller.f_globals["__name__"].split(".")
        sub = parts[1] if not parts[1].startswith("_") and parts[1] != "lib" else None
        module = getattr(np, sub) if sub and hasattr(np, sub) else np
        name = f"{module.__name__}.{caller.f_code.co_name}"
        caller = caller.f_back
    public = getattr(module, name.rsplit(".", 1)[1], None) if name else None
    if not hasattr(public, "_implementation"):  # not an __array_function__ dispatcher
        return None, frame
    return name, caller


def describe_value(x: Tracer) -> str:
    """``%3 (x > y: %1 > %2)`` for a comparison, else ``%3 float64[2]``."""
    node = x._trace.nodes[x._id]
    symbol = COMPARISON_SYMBOLS.get(node.name)
    if symbol is not None and len(node.args) == 2:
        a, b = (f"%{r}" if isinstance(r, int) else _short(getattr(r, "value", r))
                for r in node.args)
        return f"%{x._id} = {a} {symbol} {b} (a comparison of traced values)"
    return f"%{x._id} {_dtype_name(x.dtype)}{list(x.shape)} (from {node.name})"


def _value_of(x):
    return x.value if isinstance(x, Tracer) else x


def _dtype_of(v):
    dtype = getattr(v, "dtype", None)
    return np.result_type(v) if dtype is None else dtype


def _dtype_name(dtype) -> str:
    return getattr(dtype, "name", None) or str(dtype).rsplit(".", 1)[-1]


# ----- the array API namespace of traced values -----

ARRAY_API_METHODS = {"matrix_transpose": ("swapaxes", (-1, -2))}
"""Array API functions that asd implements as array methods (with fixed extra arguments)."""


class ArrayNamespace:
    """What ``tracer.__array_namespace__()`` returns: the array API over asd's primitives.

    A function with an asd rule (looked up under its numpy name: numpy 2 implements the
    standard's names, ``concat`` and ``permute_dims`` included) runs the rule when an argument
    is traced; everything else (``asarray``, ``zeros``, dtypes, ``pi``) is the library's own,
    and a library function without a rule refuses traced arguments (`UnsupportedError`).
    """

    def __init__(self, base):
        self._base = base

    def __repr__(self) -> str:
        return f"<asd array namespace over {backend.library(self._base)}>"

    def __getattr__(self, name: str):
        plain = getattr(self._base, name, None)
        target = getattr(np, name, None)
        rule = None
        if name in ARRAY_API_METHODS:
            method, extra = ARRAY_API_METHODS[name]
            rule = _bound_method(method, extra)
        elif target is not None:
            try:
                rule = UFUNCS.get(target) or FUNCTIONS.get(target)
            except TypeError:  # unhashable constants
                rule = None
        if rule is None and (plain is None or not callable(plain)):
            if plain is None:
                raise AttributeError(f"the array namespace has no {name!r}")
            return plain

        def dispatch(*args, **kwargs):
            if _any_traced(args) or _any_traced(kwargs.values()):
                if rule is None:
                    raise unsupported(f"{name} (array API)")
                return rule(*args, **kwargs)
            return plain(*args, **kwargs)

        dispatch.__name__ = name
        return dispatch


def _bound_method(method: str, extra: tuple):
    def call(x, *args, **kwargs):
        return METHODS[method](x, *extra, *args, **kwargs)

    return call


def _flat(tree):
    """The leaves of nested tuples, lists and dicts (torch's arguments)."""
    if isinstance(tree, dict):
        tree = tree.values()
    elif not isinstance(tree, list | tuple):
        yield tree
        return
    for t in tree:
        yield from _flat(t)


def _any_traced(values) -> bool:
    for v in values:
        if isinstance(v, Traced):
            return True
        if isinstance(v, list | tuple) and any(isinstance(e, Traced) for e in v):
            return True
    return False


_NAMESPACES: dict[int, ArrayNamespace] = {}


# Functions that only read shape or dtype: they answer from the value, recording nothing.
METADATA = {
    np.shape: np.shape,
    np.ndim: np.ndim,
    np.size: np.size,
    np.result_type: np.result_type,
    np.zeros_like: np.zeros_like,
    np.ones_like: np.ones_like,
    np.empty_like: np.empty_like,
    np.full_like: np.full_like,
}



def _ufunc_at(ufunc, a, indices, b=None):
    """``np.add.at(a, indices, b)`` on traced values: the functional update, with ``a``
    (a traced array the function made) pointed at the result, as ``a[indices] = ...`` is."""
    name = f"{qualified_name(ufunc)}.at"
    if not isinstance(a, Tracer):
        raise ArgumentTypeError(
            f"{name} into a plain numpy array{user_source_line()} cannot store traced values. "
            "Make the target traced (e.g. out = x[:0].sum() + np.zeros(n)), or write the sum "
            "functionally: asd.library.structure.add_at(out, indices, values) returns it.")
    if a._trace.nodes[a._id].prim is None:
        raise ArgumentTypeError(
            f"{name} into the argument {describe_value(a)}{user_source_line()} would change "
            "the caller's array. Copy it first: y = x.copy(); np.add.at(y, ...)")
    write(a, lambda: UFUNC_AT[ufunc](a, indices, b), name)


# ----- aliasing: numpy views of traced arrays, and writes through them -----
#
# numpy's basic indexing, reshape, transpose and their kind return views: a write into a
# view changes its base, and a write into the base shows through every view. A traced
# write is functional (a new node the written array then points at), so asd follows the
# views explicitly:
# - every traced value that is a numpy view of another one (its value shares memory with an
#   input of its node) joins the alias group of its buffer, which records the node it views
#   (`_register_view`, run as the Tracer is made: one type test for the other nodes);
# - a write into an array re-derives each live view of it from the written value, by
#   re-running the view's own node on it (`_follow`), so ``v = y[:2]; y[0] = 5`` changes v;
# - a write into a view that the function took from a known array (``v = y[:2]; v += 1``)
#   is a write into that array at the view's positions, then re-derived as above
#   (`_write_through`); a write into a view asd cannot trace back to its array (made by a
#   library call, or read-only in numpy) is refused with the spelling that works.
# Views of the arguments are not followed: writing into them or the arguments is refused.

class _AliasGroup:
    """The traced views of one buffer: ``links`` maps a view's node to the node it views
    (``read_only`` marks those numpy would not write through), ``tracers`` holds weak
    references to the live view tracers (a dead view needs no update), ``refs`` the weak
    references that drop the group with its buffers."""

    __slots__ = ("links", "read_only", "tracers", "refs")

    def __init__(self):
        self.links: dict[int, int] = {}
        self.read_only: set[int] = set()
        self.tracers: dict[int, weakref.ref] = {}
        self.refs: list[weakref.ref] = []


_GROUPS: dict[int, _AliasGroup] = {}
"""id(buffer) -> its alias group, dropped when the buffer (a traced value's memory) dies."""


def _owner(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _group(buffer: np.ndarray, create: bool = True) -> _AliasGroup | None:
    key = id(buffer)
    group = _GROUPS.get(key)
    if group is None and create:
        group = _GROUPS[key] = _AliasGroup()
        group.refs.append(weakref.ref(buffer, functools.partial(_drop, _GROUPS, key)))
    return group


def _drop(table: dict, key: int, _ref) -> None:
    """A weak reference's callback: its object died, so its entry goes."""
    table.pop(key, None)


def _join(group: _AliasGroup, buffer: np.ndarray) -> None:
    """Make ``buffer`` (a copy standing for a numpy view) share ``group``."""
    key = id(buffer)
    if _GROUPS.get(key) is not group:
        _GROUPS[key] = group
        group.refs.append(weakref.ref(buffer, functools.partial(_drop, _GROUPS, key)))


def _track(group: _AliasGroup, t: Tracer) -> None:
    key = id(t)
    group.tracers[key] = weakref.ref(t, functools.partial(_drop, group.tracers, key))


def _shares(a, b) -> bool:
    """Whether ``a`` and ``b`` (``a`` a numpy array) are views of one numpy buffer."""
    return type(b) is np.ndarray and _owner(a) is _owner(b)


def _viewed_input(trace, k: int) -> int | None:
    """The traced input of node ``k`` whose memory node ``k``'s value views, or None."""
    value = trace.values[k]
    if type(value) is not np.ndarray:
        return None
    owner = _owner(value)
    for a in trace.nodes[k].args:
        if type(a) is int:
            b = trace.values[a]
            if type(b) is np.ndarray and _owner(b) is owner:
                return a
    return None


def _register_view(t: Tracer) -> None:
    """``t``, whose value is a numpy view, joins its buffer's alias group where it views a
    traced value the function computed (not an argument, whose writes are refused). Runs
    for every view node, so written for speed: owners compared by identity."""
    trace, k = t._trace, t._id
    nodes, values = trace.nodes, trace.values
    node = nodes[k]
    if node.prim is None:
        return
    owner = _owner(t.value)
    for parent in node.args:
        if type(parent) is int:
            b = values[parent]
            if type(b) is np.ndarray and (b is owner or _owner(b) is owner):
                break
    else:
        return
    if nodes[parent].prim is None:
        return
    group = _GROUPS.get(id(owner))
    if group is None or parent not in group.links:
        if values[parent] is not owner and _viewed_input(trace, parent) is not None:
            return  # the parent views something not followed (an argument)
        if group is None:
            group = _group(owner)
    group.links[k] = parent
    _track(group, t)


def link_alias(child, parent: Tracer, copy_of_view: bool = False) -> None:
    """Record ``child`` (or each of a tuple of them), computed from ``parent``, as a view of
    ``parent`` where its value views ``parent``'s memory: ``_base`` names the array writes go
    through to. With ``copy_of_view`` (a numpy function returning a read-only view, which
    asd computes as a copy: ``np.diagonal``) the child joins ``parent``'s group as a
    read-only view, so writes into ``parent`` still reach it."""
    if isinstance(child, list | tuple):
        for c in child:
            link_alias(c, parent, copy_of_view)
        return
    if type(child) is not Tracer or child is parent or child._trace is not parent._trace \
            or type(parent.value) is not np.ndarray or type(child.value) is not np.ndarray:
        return
    trace, k = child._trace, child._id
    if child.value.base is not None:  # registered as it was made, if a followed view
        group = _GROUPS.get(id(_owner(child.value)))
        if group is not None and group.links.get(k) == parent._id:
            child._base = parent
            return
    if trace.nodes[parent._id].prim is None:
        if parent._id in trace.nodes[k].args and _shares(child.value, parent.value):
            child._base = parent  # a view of an argument: writes into it are refused
        return
    if not copy_of_view:
        return
    inputs = [a for a in trace.nodes[k].args if type(a) is int]
    group = _group(_owner(parent.value))
    if parent._id not in group.links and _viewed_input(trace, parent._id) is not None:
        return
    # the node's input that is parent, or a view of it the library took on the way
    via = next((a for a in inputs if _reaches(group, a, parent._id)), None)
    if via is None:
        return
    _join(group, _owner(child.value))
    group.links[k] = via
    group.read_only.add(k)
    _track(group, child)
    child._base = parent


def _reaches(group: _AliasGroup, k: int, target: int) -> bool:
    """Whether node ``k`` is ``target`` or views it through ``group``'s links."""
    while k != target:
        k = group.links.get(k)
        if k is None:
            return False
    return True


def write(t: Tracer, compute, what: str) -> None:
    """``t`` written in place: ``compute()`` is its new value (a traced array of ``t``'s
    shape); ``t`` then points at it, a view writes through to its base, and every live view
    of the written array follows (see the section comment)."""
    if t._base is not None and type(t.value) is np.ndarray:
        _write_through(t, compute(), what)
        return
    parent = (_viewed_input(t._trace, t._id) if type(t.value) is np.ndarray
              else _viewed_tensor(t._trace, t._id))
    if parent is not None:
        raise _unfollowed_view(t, parent, what, torch=type(t.value) is not np.ndarray)
    _replace(t, compute())


def _viewed_tensor(trace, k: int) -> int | None:
    """The traced input of node ``k`` whose storage node ``k``'s value (a torch tensor) is a
    view of, or None: asd follows numpy's views only, so a write into a torch view (which
    torch would send into its base) is refused."""
    base = getattr(trace.values[k], "_base", None)
    if base is None:
        return None
    for a in trace.nodes[k].args:
        if type(a) is int:
            v = trace.values[a]
            if v is base or getattr(v, "_base", None) is base:
                return a
    return None


def _replace(t: Tracer, new: Tracer) -> None:
    """Point ``t`` at ``new`` and re-derive the live views of its old value."""
    old_id, old_value = t._id, t.value
    t._id, t.value = new._id, new.value
    if type(old_value) is np.ndarray:
        _follow(t, old_id, _group(_owner(old_value), create=False))


def _follow(t: Tracer, old_id: int, group: _AliasGroup | None) -> None:
    """Re-derive every live view of node ``old_id`` (now ``t``) from ``t``, by re-running
    each view node on its re-derived base; views of views in program order."""
    if group is None:
        return
    trace = t._trace
    live = [v for r in list(group.tracers.values()) if (v := r()) is not None
            and v is not t and v._trace is trace]
    memo = {old_id: t}
    for v in sorted(live, key=lambda v: v._id):
        new = _rederive(v._id, group, memo, trace)
        if new is not None:
            v._id, v.value = new._id, new.value
            new_group = _GROUPS.get(id(_owner(new.value))) if type(new.value) is \
                np.ndarray else None
            if new_group is not None:
                _track(new_group, v)


def _rederive(k: int, group: _AliasGroup, memo: dict, trace):
    """Node ``k`` recomputed from the re-derived node it views (memoized), or None when
    ``k`` does not view the written node."""
    if k in memo:
        return memo[k]
    parent = group.links.get(k)
    base = None if parent is None else _rederive(parent, group, memo, trace)
    if base is None:
        return None
    node = trace.nodes[k]
    args = [base if a == parent else Tracer(trace, a, trace.values[a]) if type(a) is int
            else a.value for a in node.args]
    new = node.prim(*args, **node.params)
    if k in group.read_only:  # a copy standing for a numpy view: keep it in the group
        new_group = _group(_owner(base.value))
        _join(new_group, _owner(new.value))
        new_group.links[new._id] = base._id
        new_group.read_only.add(new._id)
    memo[k] = new
    return new


def _write_through(v: Tracer, new_v: Tracer, what: str) -> None:
    """A write into the view ``v``: its base array, at the positions ``v`` covers, takes
    ``new_v`` (what ``v`` holds after the write), and every view of the base follows."""
    chain = [v]
    while chain[-1]._base._base is not None:
        chain.append(chain[-1]._base)
    root = chain[-1]._base
    trace = v._trace
    if trace.nodes[root._id].prim is None:
        raise ArgumentTypeError(
            f"{what} into {describe_value(v)}, a view of the argument "
            f"{describe_value(root)}{user_source_line()}, would change the caller's array. "
            "Copy the argument first: y = x.copy(), then take the view of y.")
    group = _group(_owner(root.value), create=False) if type(root.value) is np.ndarray \
        else None
    pos = np.arange(backend.size(root.value)).reshape(np.shape(root.value))
    for link in reversed(chain):
        node = trace.nodes[link._id]
        if (group is None or group.links.get(link._id) != link._base._id
                or link._id in group.read_only or not link.value.flags.writeable):
            raise _unfollowed_view(v, link._base._id, what, read_only=True)
        pos = node.prim.impl(*(pos if a == link._base._id else trace.values[a]
                               if type(a) is int else a.value for a in node.args),
                             **node.params)
    flat = np.asarray(root.value).reshape(-1)
    if np.shape(pos) != np.shape(v.value) or not np.array_equal(flat[pos], v.value,
                                                                 equal_nan=True):
        raise _unfollowed_view(v, v._base._id, what)
    index = np.unravel_index(pos, np.shape(root.value))
    _replace(root, root._update(index, new_v))


def _unfollowed_view(v: Tracer, parent: int, what: str, read_only: bool = False,
                     torch: bool = False):
    why = ("numpy makes this view read-only" if read_only else
           "asd follows numpy's views only" if torch else
           "asd cannot trace this view back to the array it was taken from (a library call "
           "made it)")
    return ArgumentTypeError(
        f"{what} into {describe_value(v)}{user_source_line()}: it is a view of %"
        f"{parent}, which a write would change too, and {why}. Write into the base array "
        "itself (for v = y[:2]; v += 1.0 write y[:2] += 1.0), or copy the view first "
        "(v = v.copy()) if the base must stay as it is.")


def _noting_views(method_name: str, fn):
    """A Tracer method or property that returns views of ``self`` (reshape, transpose,
    basic indexing), marked so that writes into them reach ``self`` (`link_alias`)."""

    def viewing(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        link_alias(out, self)
        return out

    viewing.__name__ = method_name
    return viewing


def _fliplr(m):
    if np.ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return m[:, ::-1]


def _flipud(m):
    if np.ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return m[::-1, ...]


def _rot90(m, k=1, axes=(0, 1)):
    """numpy's ``rot90`` (its own code converts its argument), written with its views."""
    axes = tuple(axes)
    ndim = np.ndim(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == ndim:
        raise ValueError("Axes must be different.")
    if not all(-ndim <= a < ndim for a in axes):
        raise ValueError(f"Axes={axes} out of range for array of ndim={ndim}.")
    k %= 4
    if k == 0:
        return m[:]
    if k == 2:
        return np.flip(np.flip(m, axes[0]), axes[1])
    order = list(range(ndim))
    order[axes[0]], order[axes[1]] = order[axes[1]], order[axes[0]]
    if k == 1:
        return np.transpose(np.flip(m, axes[1]), order)
    return np.flip(np.transpose(m, order), axes[1])


VIEW_SPELLINGS = {
    np.flip: np.flip._implementation,     # numpy's own code: basic indexing
    np.split: np.split._implementation,   # array_split: swapaxes and slices
    np.array_split: np.array_split._implementation,
    np.hsplit: np.hsplit._implementation,
    np.vsplit: np.vsplit._implementation,
    np.dsplit: np.dsplit._implementation,
    np.fliplr: _fliplr,
    np.flipud: _flipud,
    np.rot90: _rot90,
    np.real: lambda val: val.real,
}
"""numpy functions returning views, spelled with the views asd follows (basic indexing,
swapaxes, transpose) instead of the library's copies, so writes alias as numpy's do."""

READ_ONLY_VIEWS = {np.diagonal, np.diag}
"""numpy functions returning read-only views of a matrix, which asd computes as copies:
writes into the matrix still reach them (`link_alias`)."""


# another framework's function met a traced numpy value: name the front end that handles it
FRAMEWORKS = {
    "jax": ("JAX", "asd.jax.subgrad(f)(x) (or asd.jax.value_and_subgrad, asd.jax.function), "
            "which imports the jaxpr"),
    "torch": ("PyTorch", "asd.torch.subgrad(f, x) (or asd.torch.function(model)), which "
              "imports the torch program"),
    "tensorflow": ("TensorFlow", "asd.tf.subgrad(f, x) (or asd.tf.function), which imports "
                   "the TensorFlow graph"),
}


def framework_error(x: Tracer, framework: str, what: str, frame=None,
                    kind: type[ASDError] = ArgumentTypeError) -> ASDError:
    """The refusal of traced value ``x`` reaching ``framework``'s own function ``what``
    (an `ArgumentTypeError`, a ``TypeError`` as the framework's own would be; ``kind``
    another asd error where the framework re-raises every ``TypeError`` as its own)."""
    name, fix = FRAMEWORKS[framework]
    return kind(
        f"{what} was given traced value {describe_value(x)}{user_source_line(frame)}: "
        f"asd.subgrad and its siblings trace numpy programs, and {name}'s functions cannot run "
        f"on their traced arrays. Differentiate the {name} program with {fix}, or write the "
        "function with numpy (import numpy as np, or asd.numpy).")


def _framework_of(frame) -> tuple[str | None, object]:
    """``(framework, caller)``: the framework (jax, torch, tensorflow) whose code runs at
    ``frame``, and the first frame outside it; ``(None, frame)`` if none."""
    found, caller = None, frame
    while caller is not None:
        top = caller.f_globals.get("__name__", "").split(".", 1)[0]
        if top in FRAMEWORKS or (found and top in ("jaxlib", "numpy")):
            found = found or top
            caller = caller.f_back
            continue
        break
    return found, caller


def _into(out: tuple, result, what: str):
    """``ufunc(..., out=(y,))``: ``y[...] = result``, a functional update of ``y`` when it is
    a traced array the function computed (as numpy writes into it); a plain buffer cannot
    hold traced values, so it is refused with the spelling that works."""
    outs = out if isinstance(out, tuple) else (out,)
    results = result if isinstance(result, tuple) else (result,)
    if len(outs) != len(results) or not all(isinstance(y, Tracer) for y in outs):
        raise UnsupportedError(
            f"{what} with out= writes traced values into a plain array{user_source_line()}, "
            "which would drop them from the program. Drop out= and use the returned array "
            f"(y = {what}(...)).")
    for y, r in zip(outs, results, strict=True):
        y._assign_items(r, f"{what}(..., out=y)")
    return out[0] if len(outs) == 1 else out


def _masked_caller(frame) -> bool:
    """Whether numpy's masked-array code converts a traced value (``m - x``, ``m * x`` with
    a masked constant ``m``: MaskedArray's operators read their operands as arrays)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("numpy.ma"):
            return True
        if not (name.startswith("numpy") or frame.f_code.co_filename == __file__):
            return False
        frame = frame.f_back
    return False


def _one_position(trace, k: int) -> bool:
    """Whether node ``k`` is an argmax, argmin or argsort along an axis of one entry: its
    value is that entry's position whatever jumps reach its input (a floor's jump below
    ``argmax`` of a length-1 array), as a compiled replay reads it."""
    node = trace.nodes[k]
    if node.prim is None or node.prim.name not in ("argmax", "argmin", "argsort"):
        return False
    ref = next((r for r in node.args if type(r) is int), None)
    if ref is None:
        return False
    shape, axis = tuple(trace.nodes[ref].shape), node.params.get("axis")
    return (int(np.prod(shape, dtype=int)) if axis is None else shape[axis]) == 1


class Tracer(Traced):
    """A value in a sweep. Behaves like a read-only numpy array; Python branching on it raises."""

    __slots__ = ("_trace", "_id", "value", "_base", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, trace, node_id: int, value):
        self._trace, self._id, self.value = trace, node_id, value
        self._base = None  # the traced array this one is a numpy view of (`link_alias`)
        if type(value) is np.ndarray and value.base is not None:
            _register_view(self)

    # ----- array attributes -----
    shape = property(lambda self: np.shape(self.value))
    dtype = property(lambda self: _dtype_of(self.value))
    ndim = property(lambda self: np.ndim(self.value))
    size = property(lambda self: backend.size(self.value))
    T = property(_noting_views("T", lambda self: METHODS["transpose"](self)))
    itemsize = property(lambda self: np.dtype(self.dtype).itemsize)
    nbytes = property(lambda self: self.size * np.dtype(self.dtype).itemsize)
    flat = property(FlatIter)

    @property
    def base(self):
        """The traced array this one views (numpy's ``.base``: writes into a view reach
        it), or None for an array that owns its value."""
        return self._base

    def _matrix_transpose(self) -> Tracer:
        if self.ndim < 2:
            raise ShapeError(f".mT of {describe_value(self)}: the matrix transpose needs at "
                             "least 2 axes (numpy raises too); use .T or reshape first")
        return METHODS["swapaxes"](self, -1, -2)

    # the matrix transpose (the last two axes swapped), a view as numpy's ``.mT``
    mT = property(_noting_views("mT", _matrix_transpose))

    @property
    def strides(self) -> tuple:
        """numpy's strides of the value (a C-contiguous array of the same shape)."""
        return np.empty(self.shape, self.dtype).strides if self.size else (0,) * self.ndim

    @property
    def flags(self):
        """The flags of a fresh C-contiguous array of the same shape, read-only (a traced
        array is written only through item assignment, a functional update)."""
        flags = np.empty(self.shape, self.dtype).flags
        flags.writeable = False
        return flags

    @property
    def device(self):
        """The device of the value: ``'cpu'`` for numpy, the tensor's own otherwise."""
        return getattr(self.value, "device", "cpu")

    def to_device(self, device, /, *, stream=None) -> Tracer:
        """The array API's ``to_device``: the same traced array where ``device`` is the one
        it is on; moving a traced value between devices is refused."""
        if device == self.device or str(device) == str(self.device):
            return self
        raise UnsupportedError(
            f".to_device({device!r}) of {describe_value(self)} on {self.device}: asd sweeps "
            "on the device of the inputs; move the inputs before calling the function")

    @property
    def data(self):
        self._concrete(".data")

    @property
    def ctypes(self):
        self._concrete(".ctypes")

    def __len__(self) -> int:
        if not self.ndim:
            raise ArgumentTypeError(
                f"len() of a 0-d traced array {describe_value(self)}{user_source_line()}: a "
                "scalar has no length. (A library that converts arrays by iterating them, "
                "such as torch.tensor(x), meets this too: asd.subgrad traces numpy programs; "
                "differentiate a PyTorch program with asd.torch.subgrad(f, x), a JAX one with "
                "asd.jax.subgrad(f)(x).)")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Tracer(%{self._id}, {_dtype_name(self.dtype)}{list(self.shape)})"

    def __array_namespace__(self, api_version=None):
        """The array API over asd's primitives, creating arrays in the sweep's library."""
        like = self._trace.like
        base = np if like is None else backend.namespace(like)
        ns = _NAMESPACES.get(id(base))
        if ns is None:
            ns = _NAMESPACES[id(base)] = ArrayNamespace(base)
        return ns

    # ----- Python control flow is refused: it would ignore the direction at ties -----
    def __bool__(self):
        if self._behind_stop_gradient():
            # a constant by the user's intent: branch on it, and let a compiled replay
            # re-read it (a guard), as jax.jit re-traces on a static argument
            value = bool(np.asarray(backend.to_host(self.value)))
            self._trace.guard(self._id, lambda v: bool(np.asarray(backend.to_host(v))), value)
            return value
        raise TracerBoolError(
            f"Python `if`/`while`/`bool()` on traced value {describe_value(self)}"
            f"{user_source_line()}: a Python branch at a tie ignores the sweep direction and "
            "breaks the subgradient guarantee. Use asd.numpy.where(cond, a, b) or a library "
            "primitive (asd.relu, asd.maximum, asd.abs, ...), or write the function with "
            "@asd.branching."
        )

    def _behind_stop_gradient(self) -> bool:
        """Whether every path from an input to this value passes through
        ``asd.stop_gradient``: the value is a constant by intent (``np.allclose(
        asd.stop_gradient(x), 0)``), so a Python branch on it chooses no branch of the
        differentiated function. A value computed from the inputs otherwise (a comparison of
        them, an asd.jit dynamic argument) is not."""
        trace, nodes, seen, stack = self._trace, self._trace.nodes, set(), [self._id]
        while stack:
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            node = nodes[j]
            if node.prim is None:  # an input, differentiated or dynamic (asd.jit)
                return False
            if node.prim.stops_gradient:
                continue
            stack.extend(r for r in node.args if type(r) is int)
        return trace is not None

    def _concrete(self, kind):
        target = assigned_array(sys._getframe(2))
        if target is not None:  # numpy storing the value into a plain array's item
            raise store_refusal(self, target)
        what = kind if kind.startswith(".") else f"{kind}()"
        raise TracerBoolError(
            f"{what} of traced value {describe_value(self)}{user_source_line()} would drop "
            "it from the program. Keep "
            "computing with asd.numpy, or wrap it in asd.stop_gradient(...) and take "
            ".value if the number is only for logging."
        )

    def __float__(self):
        self._concrete("float")

    def __int__(self):
        self._concrete("int")

    def __index__(self):
        value = self._locally_constant("operator.index")
        if value is None:
            self._concrete("operator.index")
        return int(value)

    def item(self, *args):
        self._concrete("item")

    def tolist(self):
        self._concrete("tolist")

    @property
    def __jax_array__(self):
        """JAX looks this protocol up on every foreign argument (``getattr(x,
        '__jax_array__', None)``): the lookup itself refuses, naming asd.jax (an
        `UnsupportedError`: JAX wraps a ``TypeError`` in its own). A JAX array's operator
        (``jax_array @ x``) reads it only to defer: there it is absent, so Python calls the
        traced value's reflected operator, which takes the JAX array as a constant."""
        caller = sys._getframe(1)
        if caller.f_globals.get("__name__") == "jax._src.numpy.array_methods":
            raise AttributeError("__jax_array__")
        raise framework_error(self, "jax", "a JAX function", _framework_of(sys._getframe(1))[1],
                              UnsupportedError)  # JAX re-raises a TypeError as its own

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch hands its functions' non-tensor arguments here: refuse, naming asd.torch."""
        x = next(a for a in _flat((args, kwargs or {})) if isinstance(a, Tracer))
        what = f"torch.{getattr(func, '__name__', func)}"
        raise framework_error(x, "torch", what, sys._getframe(1))

    def _locally_constant(self, kind: str):
        """The value of a traced integer or boolean (a position such as ``argmax(x)``, a
        comparison, anything behind ``asd.stop_gradient``) that is constant near the point:
        no derivative flows through it and no jump reaches it, so a plain numpy array indexed
        by it (``c[np.argmax(x)]``) is a constant there, as the program would compute. The
        reading is a guard of the trace (a compiled replay re-reads it). Where a jump reaches
        it (a tied maximum) the indexed constant may jump, which asd cannot see: refused with
        the spellings it can check. None for any other traced value."""
        trace, k = self._trace, self._id
        if trace.nodes[k].active or np.dtype(self.dtype).kind not in "biu":
            return None
        jumps = [] if _one_position(trace, k) else trace.jumps_reaching(k)
        if jumps:
            j = jumps[0]
            jump = trace.jumps[j]
            site = "" if jump is None else f" (tied at {int(np.count_nonzero(jump.mask))} of " \
                f"its {jump.mask.size} entries)"
            frame = sys._getframe(1)  # the user's line, past numpy's own (np.take)
            while frame is not None and (frame.f_code.co_filename == __file__
                                         or frame.f_globals.get("__name__", "").startswith(
                                             "numpy")):
                frame = frame.f_back
            raise NotLipschitzError(
                f"traced value {describe_value(self)} used as a plain index or array ({kind})"
                f"{user_source_line(frame)}: it is at a "
                f"jump of %{j} = {trace.nodes[j].name}{site}, so a plain numpy array indexed "
                "by it may take another value on another side of the tie, which asd cannot "
                "see. Index with asd instead, which checks that the tied positions read equal "
                "values: asd.gather_at(c, i) for c[i] (asd.gather_at(c, i, 'take', axis) for "
                "np.take), or wrap the position in asd.stop_gradient(...) if it is a constant "
                "by intent (numpy's tie order).")
        value = backend.to_host(self.value)
        trace.guard(k, backend.to_host, value)
        if not _one_position(trace, k):
            trace.guard_unjumped(k)
        return value

    def _truncated(self, dtype):
        """``np.int64(x)`` / ``np.asarray(x, int)`` of a traced float: truncation toward 0,
        constant near the point where no entry is a nonzero integer (there it jumps) and no
        jump reaches ``x``, so the integers are constants there (derivative 0), as they are in
        the program numpy runs; a value that does not move (behind asd.stop_gradient) casts
        as it is. The reading, with entries on a jump marked, is a guard."""
        trace, k = self._trace, self._id
        dtype = np.dtype(dtype)

        def read(v):
            v = np.asarray(backend.to_host(v))
            with np.errstate(invalid="ignore"):
                on_jump = ~np.isfinite(v) | ((v == np.trunc(v)) & (v != 0))
                return np.where(on_jump, np.iinfo(dtype).min, v).astype(dtype)

        moves = trace.nodes[k].active  # else a constant (stop_gradient): no jump to meet
        cast = read(self.value) if moves else np.asarray(
            backend.to_host(self.value)).astype(dtype)
        bad = cast == np.iinfo(dtype).min if moves else np.zeros(cast.shape, bool)
        if trace.jumps_reaching(k) or bad.any():
            where = (f"{int(np.count_nonzero(bad))} entries sit on one (e.g. "
                     f"{np.asarray(backend.to_host(self.value))[bad][:3].tolist()})"
                     if bad.any() else "a jump above it reaches the value")
            raise NotLipschitzError(
                f"a cast to {dtype} of traced value {describe_value(self)}"
                f"{user_source_line()} truncates toward 0, which jumps at the nonzero "
                f"integers, and {where}. Keep the values off the integers, or cast "
                "asd.stop_gradient(x) if the integers are constants by intent.")
        trace.guard(k, read if moves else (lambda v: np.asarray(backend.to_host(v)).astype(
            dtype)), cast)
        trace.guard_unjumped(k)
        return cast

    def __array__(self, dtype=None, copy=None):
        value = self._locally_constant("__array__")
        if value is not None:
            return np.asarray(value, dtype=dtype)
        if (dtype is not None and np.dtype(dtype).kind in "iu"
                and np.dtype(self.dtype).kind == "f"):
            return self._truncated(dtype)
        framework, caller = _framework_of(sys._getframe(1))
        if framework is not None:
            raise framework_error(self, framework, f"a {FRAMEWORKS[framework][0]} function",
                                  caller)
        if _masked_caller(sys._getframe(1)):  # `m - x` with a masked constant m
            from asd.core.arguments import masked_refusal
            raise masked_refusal(f"a constant combined with traced value {describe_value(self)}"
                                 f"{user_source_line(sys._getframe(1))}")
        fn, caller = dispatching_numpy_function(sys._getframe(1))
        if fn is None:
            obj, caller = _numpy_object_call(sys._getframe(1))
            if obj is not None:
                raise TracerBoolError(
                    f"{obj} converted traced value {describe_value(self)} to a plain numpy "
                    f"array inside its own code{user_source_line(caller)}, which drops it "
                    "from the program. " + ARRAY_CONVERSION_ADVICE.get(
                        obj, "Compute with asd.numpy functions on the traced array instead."))
        if fn is None:
            target = assigned_array(sys._getframe(1))
            if target is not None:  # `c[:] = x` into a plain array
                raise store_refusal(self, target)
        if fn is not None:
            raise TracerBoolError(
                f"{fn} converted traced value {describe_value(self)} to a plain numpy array "
                f"inside its own code{user_source_line(caller)}: numpy hands a function to asd "
                "only when an argument is a traced array itself, so a Python list (or tuple) "
                "of traced values reaches np.asarray, which would drop them from the program. "
                f"Build the array first: {fn}(asd.numpy.array([...])).")
        raise TracerBoolError(
            f"traced value {describe_value(self)}{user_source_line()} was converted to a "
            "plain numpy array (np.array, "
            "np.asarray or a C extension, or a numpy function given a Python list of traced "
            "values), which drops it from the program. Build such arrays with "
            "asd.numpy.array([...]) (np.mean([a, b]) -> np.mean(asd.numpy.array([a, b])))."
        )

    # ----- numpy protocols -----
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        suffix = "" if method == "__call__" else f".{method}"
        if out is not None:
            return _into(out, self.__array_ufunc__(ufunc, method, *inputs, **kwargs),
                         f"{qualified_name(ufunc)}{suffix}")
        if method == "at" and ufunc in UFUNC_AT:
            return _ufunc_at(ufunc, *inputs)
        if method == "__call__":
            fn = ufunc_rule(ufunc)
        elif method in ("reduce", "accumulate"):
            fn = (UFUNC_REDUCE if method == "reduce" else UFUNC_ACCUMULATE).get(ufunc)
        else:
            fn = None
        if fn is None:
            raise unsupported(f"{qualified_name(ufunc)}{suffix}" if suffix else ufunc)
        if method == "__call__" and len(inputs) > 1 and self._trace.weak \
                and any(_is_weak(i) for i in inputs):
            inputs, _ = _weakly_promoted(inputs, False)
        try:
            return fn(*inputs, **kwargs)
        except (IndexError, ValueError, TypeError) as e:
            raise_as_asd_error(e, f"numpy.{ufunc.__name__}{suffix}", inputs)

    def __array_function__(self, func, types, args, kwargs):
        meta = METADATA.get(func)
        if meta is not None:
            return meta(*(_value_of(a) for a in args),
                        **{k: _value_of(v) for k, v in kwargs.items()})
        fn = VIEW_SPELLINGS.get(func) or FUNCTIONS.get(func)
        if fn is None:
            raise unsupported(func)
        try:
            out = fn(*args, **kwargs)
        except (IndexError, ValueError, TypeError) as e:
            raise_as_asd_error(e, f"numpy.{func.__name__}", args)
        if args and type(args[0]) is Tracer:  # numpy's views of it alias it (`link_alias`)
            link_alias(out, args[0], copy_of_view=func in READ_ONLY_VIEWS
                       and np.ndim(args[0].value) >= 2)
        return out

    # ----- operators -----
    __add__, __radd__ = _ufunc(np.add)
    __sub__, __rsub__ = _ufunc(np.subtract)
    __mul__, __rmul__ = _ufunc(np.multiply)
    __truediv__, __rtruediv__ = _ufunc(np.true_divide)
    __pow__, __rpow__ = _ufunc(np.power, "__pow__")
    __matmul__, __rmatmul__ = _ufunc(np.matmul)
    __floordiv__, __rfloordiv__ = _ufunc(np.floor_divide)
    __mod__, __rmod__ = _ufunc(np.remainder)
    __divmod__, __rdivmod__ = _ufunc(np.divmod)
    __gt__, _ = _ufunc(np.greater)
    __ge__, _ = _ufunc(np.greater_equal)
    __lt__, _ = _ufunc(np.less)
    __le__, _ = _ufunc(np.less_equal)
    __eq__, _ = _ufunc(np.equal)
    __ne__, _ = _ufunc(np.not_equal)
    __and__, __rand__ = _ufunc(np.bitwise_and)
    __or__, __ror__ = _ufunc(np.bitwise_or)
    __xor__, __rxor__ = _ufunc(np.bitwise_xor)
    __hash__ = object.__hash__

    def __invert__(self):
        (me,) = _python_bools_as_ints((self,))  # ~True is -2 in Python, False in numpy
        if backend.numpy_dtype(me).kind == "i":  # two's complement, in Python and numpy alike
            return -1 - me
        return UFUNCS[np.invert](me)

    def __neg__(self):
        (me,) = _python_bools_as_ints((self,))
        return _marked_weak(UFUNCS[np.negative](me), _weak_of(me))

    def __pos__(self):
        (me,) = _python_bools_as_ints((self,))  # +True is 1
        return me

    def __abs__(self):
        (me,) = _python_bools_as_ints((self,))
        return _marked_weak(UFUNCS[np.absolute](me), _weak_of(me))

    __getitem__ = _noting_views("__getitem__", _method("getitem"))
    reshape = _noting_views("reshape", _method("reshape"))
    transpose = _noting_views("transpose", _method("transpose"))
    swapaxes = _noting_views("swapaxes", _method("swapaxes"))
    sum = _method("sum")
    mean = _method("mean")
    prod = _method("prod")
    max = _method("max")
    min = _method("min")
    dot = _method("dot")
    astype = _method("astype")
    squeeze = _noting_views("squeeze", _method("squeeze"))
    ravel = _noting_views("ravel", _method("ravel"))

    def flatten(self):
        """A copy (numpy's ``flatten`` never returns a view, unlike ``ravel``)."""
        return METHODS["copy"](METHODS["ravel"](self))

    clip = _method("clip")
    cumsum = _method("cumsum")

    argmax = _method("argmax")
    argmin = _method("argmin")
    any = _method("any")
    all = _method("all")
    round = _method("round")
    conj = conjugate = _method("conjugate")
    copy = _method("copy")
    real = property(lambda self: self._part("real"))  # a view, as numpy's of a real array
    imag = property(lambda self: self._part("imag"))  # zeros, as numpy's of a real array

    def _part(self, part: str):
        """numpy's ``.real`` (a view) or ``.imag`` (zeros) of a real traced array. A complex
        one (a complex constant times a value with no derivative: ``np.ceil(x) * 1j``) is
        refused, as complex values are wherever they appear: its parts were the complex
        array itself and zeros, a wrong number."""
        if np.dtype(self.dtype).kind == "c":
            raise ArgumentTypeError(
                f"traced value {describe_value(self)} holds complex values, and its .{part} "
                f"is read{user_source_line(sys._getframe(2))}; asd differentiates real "
                "programs. Write the complex arithmetic with real numbers (the real and "
                "imaginary parts of (a + bj)(c + dj) are a*c - b*d and a*d + b*c).")
        return self[...] if part == "real" else np.zeros(self.shape, self.dtype)

    # the other ndarray methods that are numpy functions with the array first
    var = _function_method(np.var)
    std = _function_method(np.std)
    ptp = _function_method(np.ptp)  # gone from numpy 2's ndarray; np.ptp(x) as numpy 1 had
    cumprod = _function_method(np.cumprod)
    trace = _function_method(np.trace)
    diagonal = _function_method(np.diagonal)
    repeat = _function_method(np.repeat)
    take = _function_method(np.take)
    choose = _function_method(np.choose)
    nonzero = _function_method(np.nonzero)
    searchsorted = _function_method(np.searchsorted)
    argsort = _function_method(np.argsort)
    argpartition = _function_method(np.argpartition)

    def compress(self, condition, axis=None, out=None):
        """``numpy.compress(condition, x, axis)`` (the method takes the array first)."""
        return np.compress(condition, self, axis=axis, out=out)

    # raw memory, bytes and files: the value would leave the program
    tobytes = _no_bytes("tobytes")
    tofile = _no_bytes("tofile")
    dump = _no_bytes("dump")
    dumps = _no_bytes("dumps")
    byteswap = _no_bytes("byteswap")
    getfield = _no_bytes("getfield")
    setfield = _no_bytes("setfield")
    setflags = _no_bytes("setflags")

    def view(self, dtype=None, type=None) -> Tracer:  # noqa: A002  (numpy's keyword)
        """The array itself (a view shares its entries, and so does this); reading the
        bytes as another dtype is refused."""
        if type is None and (dtype is None or np.dtype(dtype) == np.dtype(self.dtype)):
            return self
        self._concrete(f".view({dtype!r})")

    # ----- in-place methods: a functional update, as item assignment is -----
    def _assign(self, new: Tracer, what: str) -> None:
        """Point this traced array at ``new`` (what an in-place method computed), refusing
        it on an argument of the function, whose caller's array would change."""
        if self._trace.nodes[self._id].prim is None:
            raise ArgumentTypeError(
                f"{what} on the argument {describe_value(self)}{user_source_line()} would "
                "change the caller's array. Copy it first: y = x.copy(), then change y")
        self._id, self.value = new._id, new.value

    def sort(self, axis=-1, kind=None, order=None, *, stable=None) -> None:
        """Sort in place, as numpy's ``x.sort()`` does (ties decided along the ray)."""
        extra = {} if stable is None else {"stable": stable}
        self._assign(np.sort(self, axis=axis, kind=kind, order=order, **extra), ".sort()")

    def partition(self, kth, axis=-1, kind="introselect", order=None) -> None:
        """Partition in place (`numpy.partition`: asd's is the sorted array)."""
        self._assign(np.partition(self, kth, axis=axis, kind=kind, order=order),
                     ".partition()")

    def _assign_items(self, value, what: str) -> None:
        """``self[...] = value``, refused on an argument (`_assign`'s message)."""
        if self._trace.nodes[self._id].prim is None:
            self._assign(self, what)
        self[...] = value

    def fill(self, value) -> None:
        """Every entry set to ``value`` (``x[...] = value``)."""
        self[...] = value

    def put(self, indices, values, mode="raise") -> None:
        """``x.flat[indices] = values`` (numpy's ``put`` with ``mode='raise'``)."""
        if mode != "raise":
            raise UnsupportedError(f".put(..., mode={mode!r}) on traced arrays: only "
                                   "mode='raise' is supported; wrap or clip the indices first")
        self.flat[indices] = values

    def resize(self, *new_shape, refcheck=True) -> None:
        raise UnsupportedError(
            f".resize() of {describe_value(self)}{user_source_line()} changes the array's size "
            "in place: use x.reshape(shape) for the same number of entries, or build the "
            "larger array functionally (np.concatenate, np.pad)")

    def __setitem__(self, key, value):
        """``y[key] = value`` records a functional update and points ``y`` at its result.

        As in numpy, views of ``y`` see the change, and a write into a view changes the
        array it views (see `write`).
        """
        if self._trace.nodes[self._id].prim is None:
            raise ArgumentTypeError(
                f"item assignment into the argument {describe_value(self)}"
                f"{user_source_line()} would change the caller's array. Copy it first: "
                "y = x.copy(); y[...] = ...")
        write(self, lambda: self._update(key, value), "item assignment")

    _update = _method("setitem")

    # ----- in-place operators: numpy writes into the array, so views see the change -----
    __iadd__ = _in_place("+=", np.add)
    __isub__ = _in_place("-=", np.subtract)
    __imul__ = _in_place("*=", np.multiply)
    __itruediv__ = _in_place("/=", np.true_divide)
    __ifloordiv__ = _in_place("//=", np.floor_divide)
    __imod__ = _in_place("%=", np.remainder)
    __ipow__ = _in_place("**=", np.power)
    __imatmul__ = _in_place("@=", np.matmul)
