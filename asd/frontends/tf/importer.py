"""Importing a TensorFlow function: its ``tf.function`` graph as an asd program, and the cache.

`TfProgram` traces ``fn`` once per input signature and interprets the graph's operations with
`OPS`; `import_program` caches programs under the signature and a fingerprint of everything
the trace can capture (closure values, globals, object attributes, variables' identities).
"""

from __future__ import annotations

import functools
import hashlib
import linecache
import operator
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context as _context
from tensorflow.python.eager import execute as _execute

import asd
from asd.errors import TracerBoolError, UnsupportedError
from asd.frontends import common
from asd.frontends.tf.ops import (
    CALLS,
    LOCALLY_CONSTANT,
    OPS,
    SKIPPED,
    STATE_UPDATES,
    VARIABLE_READS,
    _axes,
    _lib,
    _random,
    _raw,
    _transpose,
)

# ----- the importer -----

def _package_dirs() -> tuple[str, ...]:
    """The folders of TensorFlow, Keras and asd: frames there are not the user's source."""
    import keras

    return tuple(os.path.dirname(m.__file__) + os.sep for m in (tf, keras, asd))


def _describe(op) -> str:
    """The node's name and the user's source line that created it."""
    stack = ""
    try:
        skip = _package_dirs()
        user = [f for f in op.traceback if not f.filename.startswith(skip)]
        if user:
            frame = user[-1]
            line = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            stack = f", source {frame.filename}:{frame.lineno}" + (f" `{line}`" if line else "")
    except Exception:  # source locations are a courtesy; never fail on them
        stack = ""
    return f"node '{op.name}'{stack}"


def _attrs(op) -> dict[str, Any]:
    out = {}
    for name in op.node_def.attr:
        if not name.startswith("_"):
            out[name] = op.get_attr(name)
    return out


def _attr_value(op, name: str):
    """An attribute as TensorFlow's eager executor takes it (types as enums, shapes as lists)."""
    v = op.get_attr(name)
    if isinstance(v, tf.DType):
        return v.as_datatype_enum
    if isinstance(v, list):
        return [e.as_datatype_enum if isinstance(e, tf.DType) else e for e in v]
    if hasattr(v, "dim") and hasattr(v, "unknown_rank"):
        return None if v.unknown_rank else [d.size for d in v.dim]
    return v


def _run_tf(op, vals: list) -> list:
    """Run one operation with TensorFlow itself, eagerly, on plain values: how ops on
    constants (shape arithmetic, ``Fill``, ``Range``) are evaluated. No derivative flows
    through them."""
    if op.type == "Const":
        return [tf.make_ndarray(op.get_attr("value"))]
    attrs: list = []
    for name in op.node_def.attr:
        if not name.startswith("_"):
            attrs += [name, _attr_value(op, name)]
    inputs = [tf.constant(np.asarray(v), dtype=t.dtype) for v, t in zip(vals, op.inputs,
                                                                         strict=True)]
    outs = _execute.execute(op.type, len(op.outputs), inputs, tuple(attrs), _context.context())
    return [o.numpy() for o in outs]


class _Variable:
    """A captured variable: its resource placeholder in the graph, its name and its object."""

    __slots__ = ("name", "trainable", "variable")

    def __init__(self, name: str, variable):
        self.name, self.variable = name, variable
        self.trainable = bool(variable.trainable)


class _Body:
    """One graph (the traced function's, or a function it calls) as an interpreter: `check`
    classifies its tensors once, `run` evaluates it on numpy or traced arrays."""

    def __init__(self, graph, library, static: dict | None = None):
        self.graph, self.library = graph, library
        self.operations = graph.get_operations()
        self.inputs = [t.name for t in graph.inputs]
        self.outputs = [t.name for t in graph.outputs]
        self.static: dict[str, Any] = dict(static or {})   # computed once, at import
        self.calls: dict[str, _Body] = {}

    def check(self, live: list[bool]) -> list[bool]:
        """Raise `UnsupportedError` for the first op without a mapping on the differentiated
        path; compute the ops on constants only; return which outputs are live."""
        live_names = {n for n, f in zip(self.inputs, live, strict=True) if f}
        varying = set(self.inputs) - set(self.static)   # inputs change from call to call
        for op in self.operations:
            ins = [t.name for t in op.inputs]
            outs = [t.name for t in op.outputs]
            if op.type in STATE_UPDATES or _random(op.type):
                raise UnsupportedError(
                    f"TensorFlow operation {op.type} ({_describe(op)}) "
                    + ("writes a variable as the function runs" if op.type in STATE_UPDATES
                       else "draws random numbers as the function runs")
                    + " (a layer in training mode: batch normalization updating its statistics, "
                    "dropout drawing its mask). asd's program is a function of its inputs: it "
                    "would differentiate another draw than the forward's. Call the model with "
                    "training=False, or pass the random values in as an input.")
            if op.type == "Placeholder" or not outs:
                continue
            if op.type in CALLS:
                body = self._callee(op)
                outs_live = body.check([i in live_names for i in ins])
                live_names.update(o for o, f in zip(outs, outs_live, strict=True) if f)
                if all(i in self.static for i in ins):
                    self.static.update(zip(outs, body.run([self.static[i] for i in ins]),
                                           strict=True))
                else:
                    varying.update(outs)
                continue
            if any(i in live_names for i in ins) and op.type not in LOCALLY_CONSTANT:
                if op.type in VARIABLE_READS or op.type in OPS:
                    live_names.update(outs)
                    continue
                raise UnsupportedError(
                    f"TensorFlow operation {op.type} has no asd mapping ({_describe(op)}). asd "
                    "never falls back to TensorFlow's own derivative at a kink. Rewrite it with "
                    "a supported operation, or register a handler on numpy/traced arrays: "
                    f"asd.frontends.tf.OPS[{op.type!r}] = fn (the op's inputs positionally, "
                    "its attributes as keywords)."
                )
            if op.type in VARIABLE_READS or any(i in varying or i in live_names for i in ins):
                varying.update(outs)
                continue
            try:   # depends on nothing that changes between calls: computed once, here
                vals = _run_tf(op, [self.static[i] for i in ins])
            except Exception as e:  # raised again, with the node, if the value is ever used
                vals = [_Failed(op, e)] * len(outs)
            self.static.update(zip(outs, vals, strict=True))
        return [o in live_names for o in self.outputs]

    def _callee(self, op) -> _Body:
        body = self.calls.get(op.name)
        if body is None:
            name = op.get_attr("f").name
            for graph in self.library:
                try:
                    function = graph._get_function(name)
                except Exception:  # not registered in this graph's library: try the next
                    function = None
                if function is not None:
                    break
            else:
                raise UnsupportedError(f"TensorFlow {op.type} ({_describe(op)}) calls "
                                       f"{name!r}, which the importer cannot find")
            body = _Body(function.graph, (function.graph, *self.library))
            self.calls[op.name] = body
        return body

    def run(self, values: list) -> list:
        """Evaluate the graph on its inputs' values (numpy or traced arrays)."""
        env: dict[str, Any] = dict(self.static)
        for name, x in zip(self.inputs, values, strict=True):
            env.setdefault(name, x)
        producer: dict[str, Any] = {}
        for op in self.operations:
            outs = [t.name for t in op.outputs]
            if op.type in SKIPPED or not outs or outs[0] in self.static:
                continue
            vals = [env[t.name] for t in op.inputs]
            for v in vals:
                if isinstance(v, _Failed):
                    v.raise_()
            if op.type in CALLS:
                result = self._callee(op).run(vals)
            else:
                result = self._run(op, vals, env, producer)
            for name, value in zip(outs, result, strict=True):
                env[name] = value
                producer[name] = op
        return [env[o] for o in self.outputs]

    def _run(self, op, vals, env, producer) -> list:
        if op.type in VARIABLE_READS:
            return [vals[0]]
        if not any(common.is_traced(v) for v in vals) or op.type in LOCALLY_CONSTANT:
            try:
                return _run_tf(op, [_raw(v) for v in vals])
            except Exception as e:
                raise UnsupportedError(f"TensorFlow could not run {op.type} on constants "
                                       f"({_describe(op)}): {e}") from e
        squares = _sum_of_squares(op, producer) if op.type == "Sqrt" else None
        if squares is not None:
            base, axes, keep = squares
            return [_norm_over(env[base], axes, keep)]
        handler = OPS[op.type]
        try:
            out = handler(*vals, **_attrs(op))
        except asd.ASDError as e:
            raise type(e)(f"{e} [while importing TensorFlow {op.type}, {_describe(op)}]") from e
        return list(out) if len(op.outputs) > 1 else [out]


NO_GRADIENT = {"StopGradient", "ZerosLike", "OnesLike"}
"""Operations through which TensorFlow's tape carries no gradient."""


def _reaching(body: _Body) -> set[str]:
    """The tensors a gradient of the outputs reaches, walking back as the tape does: through
    floating values and variable handles, never through `NO_GRADIENT` operations (a call of
    another graph conservatively passes to all its inputs)."""
    need = set(body.outputs)
    for op in reversed(body.operations):
        if op.type in NO_GRADIENT or not any(t.name in need for t in op.outputs):
            continue
        need.update(t.name for t in op.inputs
                    if t.dtype.is_floating or t.dtype.is_complex or t.dtype == tf.resource)
    return need


class TfProgram:
    """``fn``'s ``tf.function`` graph at example inputs, as a function of numpy (or traced)
    arrays: ``numpy_fn(*inputs, params=None)``; ``params`` maps the trainable variables' names
    to arrays and defaults to their current values (`params`)."""

    def __init__(self, fn: Callable, example: tuple, live: tuple | None = None):
        self.fn = fn
        specs = [tf.TensorSpec(_shape(t), _tf_dtype(t)) for t in example]
        try:   # no autograph: Python control flow stays Python, not tf.cond / tf.while_loop
            self.concrete = tf.function(_callable(fn), autograph=False).get_concrete_function(
                *specs)
        except tf.errors.OperatorNotAllowedInGraphError as e:
            raise TracerBoolError(
                f"Python control flow on a tensor while importing {fn!r} ({e}). A Python "
                "branch at a tie would ignore the direction asd decides ties by: write it with "
                "tf.where, tf.maximum, tf.nn.relu or another mapped operation."
            ) from e
        graph = self.concrete.graph
        self.graph = graph
        names = _variable_names(fn)
        by_handle = {id(v.handle): v for v in self.concrete.variables}
        self.variables: dict[str, _Variable] = {}      # placeholder tensor name -> variable
        captured: dict[str, np.ndarray] = {}           # placeholder tensor name -> constant
        used: set[str] = set()
        for external, internal in graph.captures:
            var = by_handle.get(id(external))
            if var is None:
                if external.dtype == tf.resource:
                    raise UnsupportedError(f"TensorFlow resource capture {internal.name} that "
                                           "is not a variable (a lookup table or dataset)")
                captured[internal.name] = external.numpy()
                continue
            name = names.get(id(var)) or var.name.split(":")[0]
            base, k = name, 1
            while name in used:
                name, k = f"{base}_{k}", k + 1
            used.add(name)
            self.variables[internal.name] = _Variable(name, var)
        self.param_names = [v.name for v in self.variables.values() if v.trainable]
        self.body = _Body(graph, (graph,), captured)
        self.inputs = self.body.inputs[:len(example)]
        flat_out = tf.nest.flatten(self.concrete.structured_outputs, expand_composites=True)
        self.outputs = [o.name if tf.is_tensor(o) else o for o in flat_out]
        self.body.outputs = [o for o in self.outputs if isinstance(o, str)]
        nums = range(len(example)) if live is None else [a for a in live if a != "params"]
        live_args = {i for i in nums
                     if np.dtype(_tf_dtype(example[i]).as_numpy_dtype).kind == "f"}
        with_params = live is None or "params" in live
        self.body.check([i in live_args if i < len(example) else
                         (with_params and n in self.variables and self.variables[n].trainable)
                         for i, n in enumerate(self.body.inputs)])
        reaching = _reaching(self.body)
        self.reached_inputs = [name in reaching for name in self.inputs]
        """Which inputs a gradient of the outputs reaches (`function` gives the others None,
        as the tape does)."""
        self.reached_variables = {v.name for name, v in self.variables.items()
                                  if name in reaching}
        """The variables read on a path a gradient takes (not only behind StopGradient)."""

    def params(self) -> dict[str, np.ndarray]:
        """Current values of the trainable variables ``fn`` reads, by name."""
        return {v.name: v.variable.numpy() for v in self.variables.values() if v.trainable}

    def numpy_fn(self, *inputs, params: dict | None = None):
        """Evaluate the program; ``params`` defaults to the variables' current values."""
        params = self.params() if params is None else params
        values = list(inputs)
        for name in self.body.inputs[len(inputs):]:
            v = self.variables.get(name)
            values.append(None if v is None else
                          params[v.name] if v.trainable else v.variable.numpy())
        outs = iter(self.body.run(values))
        flat = [next(outs) if isinstance(o, str) else o for o in self.outputs]
        return tf.nest.pack_sequence_as(self.concrete.structured_outputs, flat,
                                        expand_composites=True)


class _Failed:
    """A constant TensorFlow could not compute at import (kept so that an unused one costs
    nothing): any use raises the error, naming the node."""

    __slots__ = ("error", "op")

    def __init__(self, op, error: Exception):
        self.op, self.error = op, error

    def raise_(self):
        raise UnsupportedError(f"TensorFlow could not run {self.op.type} on constants "
                               f"({_describe(self.op)}): {self.error}") from self.error


def _sum_of_squares(op, producer) -> tuple[str, tuple[int, ...], bool] | None:
    """``(x, axes, keepdims)`` when ``op`` is ``Sqrt(Sum(x * x))`` or ``Sqrt(Sum(Square(x)))``
    (``tf.norm``'s spelling)."""
    total = producer.get(op.inputs[0].name)
    if total is None or total.type != "Sum":
        return None
    square = producer.get(total.inputs[0].name)
    if square is None:
        return None
    ins = [t.name for t in square.inputs]
    if not ((square.type == "Mul" and ins[0] == ins[1]) or square.type == "Square"):
        return None
    axis = tf.get_static_value(total.inputs[1])
    if axis is None:
        return None
    ndim = len(square.inputs[0].shape)
    return ins[0], _axes(axis, ndim), bool(total.get_attr("keep_dims"))


def _norm_over(x, axes: tuple[int, ...], keepdims: bool):
    """The Euclidean norm over ``axes`` (several axes are flattened into one)."""
    norm = _lib("norm")
    shape = np.shape(x)
    rest = tuple(a for a in range(len(shape)) if a not in axes)
    moved = _transpose(x, rest + axes)
    y = norm(moved.reshape(tuple(shape[a] for a in rest) + (-1,)), axis=-1)
    if keepdims:
        y = y.reshape(tuple(1 if a in axes else n for a, n in enumerate(shape)))
    return y


# ----- what fn reaches: its variables' names, and the fingerprint that keys the cache -----

def _callable(fn: Callable) -> Callable:
    """What ``tf.function`` traces: a plain function calling ``fn`` (models and layers too)."""
    return lambda *args: fn(*args)


def _is_variable(v) -> bool:
    return isinstance(v, tf.Variable) or _keras_variable(v) is not None


def _keras_variable(v):
    """The ``tf.Variable`` inside a Keras 3 variable, else None."""
    inner = getattr(v, "_value", None) if hasattr(v, "path") else None
    return inner if isinstance(inner, tf.Variable) else None


def _tf_variable(v):
    """The ``tf.Variable`` behind a TensorFlow or Keras variable."""
    inner = _keras_variable(v)
    return v if inner is None else inner


def _owned_variables(obj) -> list[tuple[str, Any]]:
    """``(name relative to obj, tf.Variable)`` for a Keras layer/model or a ``tf.Module``."""
    out = []
    prefix = f"{getattr(obj, 'name', '')}/"
    for v in getattr(obj, "variables", ()) or ():
        inner = _keras_variable(v)
        if inner is not None:
            path = str(v.path)
            out.append((path[len(prefix):] if path.startswith(prefix) else path, inner))
        elif isinstance(v, tf.Variable):
            out.append((v.name.split(":")[0], v))
    return out


def _reached(fn) -> list[tuple[str, Any]]:
    """The named objects ``fn`` reaches directly: itself if it owns variables, the object a
    method is bound to, closure cells and the globals its code names."""
    found: list[tuple[str, Any]] = []
    if hasattr(fn, "variables") and not isinstance(fn, types.FunctionType):
        found.append(("", fn))
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        found.append(("self", owner))
    func = getattr(fn, "python_function", fn)
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None) or ()
    if code is not None:
        for name, cell in zip(code.co_freevars, cells):
            try:
                found.append((name, cell.cell_contents))
            except ValueError:
                continue
        globs = getattr(func, "__globals__", {})
        for name in _code_names(code):
            if name in globs:
                found.append((name, globs[name]))
    return found


def _code_names(code) -> list[str]:
    """The global names a code object and the functions defined in it refer to."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_code_names(const))
    return names


def _variable_names(fn, names: dict[int, str] | None = None, seen: set | None = None
                    ) -> dict[int, str]:
    """id(tf.Variable) -> the name `subgrad` reports it under (see the module docstring).
    Functions ``fn`` calls (plain or ``tf.function``) are searched too: a variable is named
    after the closure or global variable that holds it, wherever the first one is found."""
    names = {} if names is None else names
    seen = set() if seen is None else seen
    seen.add(id(fn))
    for label, obj in _reached(fn):
        if isinstance(obj, types.ModuleType):
            continue
        if _is_variable(obj):
            names.setdefault(id(_tf_variable(obj)), label)
        elif hasattr(obj, "variables") and not isinstance(obj, type):
            try:
                owned = _owned_variables(obj)
            except Exception:  # an object whose .variables is not a list of variables
                continue
            for rel, var in owned:
                names.setdefault(id(var), f"{label}/{rel}" if label else rel)
        elif (isinstance(obj, types.FunctionType | types.MethodType)
              or hasattr(obj, "python_function")):
            module = (getattr(obj, "__module__", None) or "").split(".")[0]
            if module not in _LIBRARIES and id(obj) not in seen:
                _variable_names(obj, names, seen)
    return names


_LEAVES = (type(None), bool, int, float, complex, str, bytes)
_LIBRARIES = ("tensorflow", "keras", "numpy", "asd", "jax", "torch", "scipy", "tf_keras",
              "builtins", "functools", "typing", "collections", "abc")
_DEPTH = 12


def _fingerprint(obj, seen: dict, depth: int = 0, guard: list | None = None):
    """A hashable summary of what a trace of ``fn`` can capture from ``obj``: values for Python
    data, identity, shape and dtype for variables (their values are read on every call).
    With ``guard``, every container the walk reads is recorded there (`Guard`)."""
    if isinstance(obj, _LEAVES):
        return (type(obj).__name__, obj)
    if isinstance(obj, np.ndarray | np.generic):
        a = np.ascontiguousarray(obj)
        digest = hashlib.blake2b(a.tobytes()).hexdigest()
        if guard is not None and isinstance(obj, np.ndarray):
            guard.append((_ARRAY, obj, digest))
        return ("array", a.shape, a.dtype.str, digest)
    if _is_variable(obj):
        var = _tf_variable(obj)
        if guard is not None:
            guard.append((_TRAINABLE, var, bool(var.trainable)))
        return ("variable", id(var), tuple(var.shape), var.dtype.name, bool(var.trainable))
    if isinstance(obj, tf.Tensor):
        if hasattr(obj, "numpy") and obj.dtype != tf.resource:
            return _fingerprint(obj.numpy(), seen, depth)   # immutable: no guard needed
        return ("tensor", id(obj))
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, type):
        return ("type", id(obj))
    key = id(obj)
    if key in seen:
        return ("seen", seen[key])
    seen[key] = len(seen)
    if depth > _DEPTH:
        return ("deep", type(obj).__qualname__, key)
    sub = functools.partial(_fingerprint, seen=seen, depth=depth + 1, guard=guard)
    if isinstance(obj, list | tuple):
        if guard is not None and isinstance(obj, list):
            guard.append((_LIST, obj, tuple(obj)))
        return (type(obj).__name__, tuple(sub(e) for e in obj))
    if isinstance(obj, dict):
        if guard is not None:
            guard.append((_DICT, obj, tuple(obj), tuple(obj.values())))
        return ("dict", tuple((repr(k), sub(v)) for k, v in obj.items()))
    if isinstance(obj, set | frozenset):
        if guard is not None:
            guard.append((_SET, obj, frozenset(obj)))
        return ("set", tuple(sorted(repr(e) for e in obj)))
    if isinstance(obj, functools.partial):
        return ("partial", sub(obj.func), sub(obj.args), sub(obj.keywords))
    if isinstance(obj, types.MethodType):
        return ("method", sub(obj.__self__), sub(obj.__func__))
    if hasattr(obj, "python_function"):     # a tf.function
        return ("tf.function", sub(obj.python_function))
    if isinstance(obj, types.FunctionType):
        if (obj.__module__ or "").split(".")[0] in _LIBRARIES:
            return ("library function", key)
        reached = _reached(obj)
        if guard is not None:
            guard.append((_FUNCTION, obj, (obj.__code__, obj.__defaults__, obj.__kwdefaults__),
                          tuple(value for _, value in reached)))
            if obj.__kwdefaults__:
                guard.append((_DICT, obj.__kwdefaults__, tuple(obj.__kwdefaults__),
                              tuple(obj.__kwdefaults__.values())))
        return ("function", id(obj.__code__), sub(obj.__defaults__), sub(obj.__kwdefaults__),
                tuple(sub(value) for _, value in reached))
    if isinstance(obj, types.BuiltinFunctionType | types.CodeType):
        return ("builtin", key)
    state = getattr(obj, "__dict__", None)
    slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())
             if isinstance(s, str)]
    if state is None and not slots:
        return ("opaque", type(obj).__qualname__, key)
    fields = dict(state or {})
    for s in slots:
        if s not in fields and hasattr(obj, s):
            fields[s] = getattr(obj, s)
    if guard is not None:
        guard.append((_OBJECT, obj, type(obj), tuple(fields), tuple(fields.values()), slots))
    return ("object", id(type(obj)), tuple((k, sub(v)) for k, v in fields.items()
                                           if not k.startswith("__")))


_ARRAY, _TRAINABLE, _LIST, _DICT, _SET, _FUNCTION, _OBJECT = range(7)


def _fields(obj, slots) -> dict:
    fields = dict(getattr(obj, "__dict__", None) or {})
    for s in slots:
        if s not in fields and hasattr(obj, s):
            fields[s] = getattr(obj, s)
    return fields


def _same(a, b: tuple) -> bool:
    """Whether iterable ``a`` holds the very objects of ``b``, in order."""
    return all(map(operator.is_, a, b))


def _same_dict(d: dict, keys: tuple, values: tuple) -> bool:
    return len(d) == len(keys) and _same(d.values(), values) and _same(d, keys)


def _check(entry) -> bool:
    """Whether one recorded read of a `_fingerprint` walk still finds the same objects."""
    kind, obj = entry[0], entry[1]
    if kind == _OBJECT:
        if type(obj) is not entry[2]:
            return False
        if not entry[5]:
            return _same_dict(obj.__dict__, entry[3], entry[4])
        fields = _fields(obj, entry[5])
        return _same_dict(fields, entry[3], entry[4])
    if kind == _DICT:
        return _same_dict(obj, entry[2], entry[3])
    if kind == _LIST:
        return len(obj) == len(entry[2]) and _same(obj, entry[2])
    if kind == _TRAINABLE:
        return bool(obj.trainable) == entry[2]
    if kind == _SET:
        return frozenset(obj) == entry[2]
    if kind == _FUNCTION:
        return (_same((obj.__code__, obj.__defaults__, obj.__kwdefaults__), entry[2])
                and _same([value for _, value in _reached(obj)], entry[3]))
    return hashlib.blake2b(np.ascontiguousarray(obj).tobytes()).hexdigest() == entry[2]


class Guard:
    """What a `_fingerprint` walk read, by identity: while every container, attribute dict,
    closure and global it read holds the very objects it found (and arrays their content,
    variables their ``trainable`` flag), a new walk would give the same fingerprint. The
    cheap per-call test of a cached trace; a failed check only means "walk again"."""

    __slots__ = ("entries", "fingerprint", "held")

    def __init__(self, fn):
        self.entries: list = []
        self.fingerprint = _fingerprint(fn, {}, guard=self.entries)
        self.held = [e[1] for e in self.entries]      # their ids stay theirs

    def holds(self) -> bool:
        return all(map(_check, self.entries))


# ----- the public functions -----

def _tf_dtype(t) -> tf.DType:
    return t.dtype if isinstance(t, tf.Tensor | tf.Variable) else tf.as_dtype(
        np.asarray(t).dtype)


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, tf.Tensor | tf.Variable):
        return t.numpy()
    return np.asarray(t)


_CACHE: dict[tuple, TfProgram] = {}


def _identity(fn) -> tuple:
    """Who ``fn`` is: a bound method is made afresh on every attribute access, so it is its
    object and function."""
    if isinstance(fn, types.MethodType):
        return (id(fn.__self__), id(fn.__func__))
    return (id(fn),)


def _shape(t) -> tuple:
    return tuple(t.shape) if isinstance(t, tf.Tensor | tf.Variable) else np.shape(t)


def _signature(tensors) -> tuple:
    return tuple((_shape(t), _tf_dtype(t).name) for t in tensors)


def import_program(fn: Callable, *tensors, live: tuple | None = None) -> TfProgram:
    """Trace ``fn`` at example tensors, cached per signature and per what the trace can
    capture (see the module docstring): a stale program is never replayed."""
    head = (_identity(fn), _signature(tensors), live)
    cached = _CACHE.get(head + (_fingerprint(fn, {}),))
    if cached is not None and _identity(cached.fn) == head[0]:
        return cached
    if len(_CACHE) > 64:
        _CACHE.clear()
    prog = TfProgram(fn, tuple(tensors), live)
    _CACHE[head + (_fingerprint(fn, {}),)] = prog   # after the trace: a lazily built model
    return prog


def program(fn: Callable, *tensors) -> asd.Program:
    """The asd ``Program`` of a TensorFlow function or Keras model at example tensors."""
    prog = import_program(fn, *tensors)
    arrays = [_to_numpy(t) for t in tensors]
    return asd.trace(lambda *xs: prog.numpy_fn(*xs[:-1], params=xs[-1]))(*arrays, prog.params())
