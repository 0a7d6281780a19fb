"""Traced arrays: numpy-like values that record every operation into the current sweep.

Values are computed eagerly (the primal runs once, inside the rules), so a ``Tracer`` is a
numpy value plus the id of the node that produced it. Operators and numpy calls reach the
library through the dispatch tables in ``asd.core.primitive``; the engine never names a primitive.

Code written against the array API standard (``xp = x.__array_namespace__()``) traces too:
`ArrayNamespace` sends its operations through the same tables, and takes creation functions,
dtypes and constants from the library of the sweep's values (numpy, torch or JAX).
"""

from __future__ import annotations

import linecache
import os
import sys

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


def _ufunc(uf):
    # When the table entry is a primitive and the other operand is a constant or from the
    # same sweep, go straight to the trace: operators are the hottest path of a program.
    def op(self, other):
        fn = UFUNCS.get(uf)
        try:
            if type(fn) is Primitive and (type(other) is not Tracer
                                          or other._trace is self._trace):
                return self._trace.apply(fn, (self, other), {})
            if fn is None:
                raise unsupported(uf)
            return fn(self, other)
        except (IndexError, ValueError, TypeError) as e:
            raise as_asd_error(e, f"numpy.{uf.__name__}", (self, other)) from e

    def rop(self, other):
        fn = UFUNCS.get(uf)
        try:
            if type(fn) is Primitive and type(other) is not Tracer:
                return self._trace.apply(fn, (other, self), {})
            if fn is None:
                raise unsupported(uf)
            return fn(other, self)
        except (IndexError, ValueError, TypeError) as e:
            raise as_asd_error(e, f"numpy.{uf.__name__}", (other, self)) from e

    return op, rop


def _method(name):
    def method(self, *args, **kwargs):
        fn = METHODS.get(name)
        if fn is None:
            raise unsupported(f"the array method .{name}()")
        try:
            return fn(self, *args, **kwargs)
        except (IndexError, ValueError, TypeError) as e:
            what = "indexing" if name == "getitem" else f".{name}()"
            raise as_asd_error(e, what, (self, *args)) from e

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


def user_source_line(frame=None) -> str:
    """`` at file.py:12: `if x > 0:` ``: the first frame outside asd (from ``frame``, by
    default the caller's), or '' if none."""
    dirs = _engine_dirs()
    frame = sys._getframe(1) if frame is None else frame
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not any(name.startswith(d + os.sep) for d in dirs):
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return (f" at {frame.f_code.co_filename}:{frame.f_lineno}"
                    + (f": `{line}`" if line else ""))
        frame = frame.f_back
    return ""


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
    new = UFUNC_AT[ufunc](a, indices, b)
    a._id, a.value = new._id, new.value

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


class Tracer(Traced):
    """A value in a sweep. Behaves like a read-only numpy array; Python branching on it raises."""

    __slots__ = ("_trace", "_id", "value")
    __array_priority__ = 1000

    def __init__(self, trace, node_id: int, value):
        self._trace, self._id, self.value = trace, node_id, value

    # ----- array attributes -----
    shape = property(lambda self: np.shape(self.value))
    dtype = property(lambda self: _dtype_of(self.value))
    ndim = property(lambda self: np.ndim(self.value))
    size = property(lambda self: backend.size(self.value))
    T = property(lambda self: METHODS["transpose"](self))
    itemsize = property(lambda self: np.dtype(self.dtype).itemsize)
    nbytes = property(lambda self: self.size * np.dtype(self.dtype).itemsize)
    base = None  # a traced array owns its value: it is nobody's view
    flat = property(FlatIter)

    @property
    def mT(self) -> Tracer:
        """The matrix transpose (the last two axes swapped), as numpy's ``.mT``."""
        if self.ndim < 2:
            raise ShapeError(f".mT of {describe_value(self)}: the matrix transpose needs at "
                             "least 2 axes (numpy raises too); use .T or reshape first")
        return METHODS["swapaxes"](self, -1, -2)

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
        raise TracerBoolError(
            f"Python `if`/`while`/`bool()` on traced value {describe_value(self)}"
            f"{user_source_line()}: a Python branch at a tie ignores the sweep direction and "
            "breaks the subgradient guarantee. Use asd.numpy.where(cond, a, b) or a library "
            "primitive (asd.relu, asd.maximum, asd.abs, ...), or write the function with "
            "@asd.branching."
        )

    def _concrete(self, kind):
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
        jumps = trace.jumps_reaching(k)
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
        fn, caller = dispatching_numpy_function(sys._getframe(1))
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
        try:
            return fn(*inputs, **kwargs)
        except (IndexError, ValueError, TypeError) as e:
            raise as_asd_error(e, f"numpy.{ufunc.__name__}{suffix}", inputs) from e

    def __array_function__(self, func, types, args, kwargs):
        meta = METADATA.get(func)
        if meta is not None:
            return meta(*(_value_of(a) for a in args),
                        **{k: _value_of(v) for k, v in kwargs.items()})
        fn = FUNCTIONS.get(func)
        if fn is None:
            raise unsupported(func)
        try:
            return fn(*args, **kwargs)
        except (IndexError, ValueError, TypeError) as e:
            raise as_asd_error(e, f"numpy.{func.__name__}", args) from e

    # ----- operators -----
    __add__, __radd__ = _ufunc(np.add)
    __sub__, __rsub__ = _ufunc(np.subtract)
    __mul__, __rmul__ = _ufunc(np.multiply)
    __truediv__, __rtruediv__ = _ufunc(np.true_divide)
    __pow__, __rpow__ = _ufunc(np.power)
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
        return UFUNCS[np.invert](self)

    def __neg__(self):
        return UFUNCS[np.negative](self)

    def __pos__(self):
        return self

    def __abs__(self):
        return UFUNCS[np.absolute](self)

    __getitem__ = _method("getitem")
    reshape = _method("reshape")
    transpose = _method("transpose")
    swapaxes = _method("swapaxes")
    sum = _method("sum")
    mean = _method("mean")
    prod = _method("prod")
    max = _method("max")
    min = _method("min")
    dot = _method("dot")
    astype = _method("astype")
    squeeze = _method("squeeze")
    ravel = _method("ravel")
    flatten = _method("ravel")
    clip = _method("clip")
    cumsum = _method("cumsum")

    argmax = _method("argmax")
    argmin = _method("argmin")
    any = _method("any")
    all = _method("all")
    round = _method("round")
    conj = conjugate = _method("conjugate")
    copy = _method("copy")
    real = property(lambda self: self.copy())
    imag = property(lambda self: np.zeros(self.shape, self.dtype))

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

        Other traced arrays holding the old node (views included) keep the old values.
        """
        if self._trace.nodes[self._id].prim is None:
            raise ArgumentTypeError(
                f"item assignment into the argument {describe_value(self)}"
                f"{user_source_line()} would change the caller's array. Copy it first: "
                "y = x.copy(); y[...] = ...")
        new = self._update(key, value)
        self._id, self.value = new._id, new.value

    _update = _method("setitem")
