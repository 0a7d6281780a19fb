"""Compiled programs: trace a function once per input signature, then replay its nodes.

A `CompiledFunction` wraps a function of traced values. The first call with a new
*signature* (the structure of the arguments, each differentiated leaf's shape, dtype,
library and device, and the value of every other argument: arrays by a digest of their
bytes, unless ``dynamic_argnums`` makes them inputs) traces it as any sweep does and keeps the
straight-line program. Later calls with that signature replay the program: each node runs
the very `Trace.run_rule` the recording ran, on the new values, with no user Python, no
tracer and no new nodes, so a replay returns exactly what tracing again would have, ties,
decisions and errors included. Tie-free value-and-subgradient calls on numpy take a
generated straight-line fast path instead (`asd.core.codegen`), which gives way to this
replay at the first tie.

What a trace captures follows ``jax.jit``: values the function reads that are not
arguments (closures, globals, Python flags) are fixed when the signature is first traced;
array constants are copied then, so changing them in place later cannot mix two programs.
A library function that builds its nodes from a value (a sign, a validity check) records
a *guard* (`read_value`); a replay whose guarded value reads differently traces again.
"""

from __future__ import annotations

import decimal
import hashlib
import math
import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from asd.core import backend, codegen
from asd.core.arguments import masked_refusal
from asd.core.primitive import Traced
from asd.core.program import Literal, Program
from asd.core.sweep import LexDirections, Trace
from asd.core.tracing import ClosedNodes, Tracer, close_trace, stored_by_numpy
from asd.errors import ArgumentError, ASDError, TracerBoolError
from asd.tree import TreeDef, flatten, unflatten

MAX_VARIANTS = 8
"""Programs kept per signature whose guards differ (a guarded value that keeps changing
retraces every call past this: the oldest variant is dropped)."""


def read_value(x, read: Callable = lambda v: v):
    """``read(value of x)``, recorded as a guard of ``x``'s trace when ``x`` is traced.

    For library code that chooses its nodes from a value (the sign kept by ``slogdet``, a
    check that refuses a point): a compiled replay re-reads it and traces again if the
    result differs, so the program it replays is always the one tracing would build.
    """
    if not isinstance(x, Tracer):
        return read(x)
    result = read(x.value)
    x._trace.guard(x._id, read, result)
    return result


def same_reading(a, b) -> bool:
    """Whether two guard results agree (arrays entry by entry, with their shapes)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a is b


class Retrace(Exception):
    """A replay met a value its program was not built for (a guard, a shape): trace again."""


# ----- signatures -----

def leaf_signature(x) -> tuple:
    """What a program depends on in an array leaf: library, shape, dtype and device."""
    if backend.is_host(x):
        a = np.asarray(x)
        return ("numpy", a.shape, a.dtype.str)
    return (backend.library(backend.namespace(x)), tuple(x.shape), str(x.dtype),
            str(backend.device(x)))


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray | np.generic) or backend.is_foreign(x)


def content_key(a) -> tuple:
    """A constant array in a signature: its type, library, shape, dtype and a digest of its
    bytes (equal bytes build the same program; a cryptographic digest keeps the key small).
    The type tells ``np.float64(1)`` from ``np.array(1.0)``, which Python can branch on."""
    host = np.ascontiguousarray(backend.to_host(a))
    digest = hashlib.blake2b(host.view(np.uint8).reshape(-1), digest_size=16).digest()
    return (type(a), *leaf_signature(a), digest)


def static_key(x) -> tuple:
    """A hashable value as part of a signature, equal only for values Python cannot tell
    apart: its type, and floats by their bits.

    ``==`` is not enough: ``0.0 == -0.0`` (``math.copysign`` tells them apart), NaNs differ
    from themselves and hide their payloads, ``Decimal('1.0') == Decimal('1.00')``; and
    ``1 == 1.0 == True``, whose types differ. Containers that `asd.tree.flatten` does not
    open (frozensets) are keyed entry by entry; any other object by its type and ``==``.

    >>> static_key(0.0) == static_key(-0.0), static_key(1) == static_key(True)
    (False, False)
    """
    t = type(x)
    if isinstance(x, float):
        return (t, struct.pack("<d", x))
    if isinstance(x, complex):
        return (t, struct.pack("<dd", x.real, x.imag))
    if isinstance(x, frozenset):
        return (t, frozenset(static_key(e) for e in x))
    if isinstance(x, tuple):
        return (t, tuple(static_key(e) for e in x))
    if isinstance(x, decimal.Decimal):
        return (t, x.as_tuple())
    return (t, x)


def tree_key(tree: TreeDef) -> tuple:
    """A tree's structure with its dict keys keyed as `static_key` keys values (a dict
    keyed ``-0.0`` or ``True`` is not the one keyed ``0.0`` or ``1``)."""
    if tree.kind == "leaf":
        return ()
    return (tree.kind, tree.cls, tuple(static_key(k) for k in tree.keys),
            tuple(tree_key(c) for c in tree.children))


def _static_key(x, where: str):
    """A non-array leaf as part of the signature: by value (`static_key`), so it must be
    hashable."""
    try:
        hash(x)
    except TypeError as e:
        raise ArgumentError(
            f"{where} ({type(x).__name__}) is neither an array nor hashable, so asd.jit "
            "cannot tell whether a later call passes the same value. Pass arrays, numbers, "
            "strings or tuples of them, or close over the object instead.") from e
    return static_key(x)


class Plan:
    """How one call's arguments enter the program: the differentiated leaves (given by the
    transform); the array leaves of ``dynamic`` arguments as inactive inputs; every other
    leaf as a constant, part of the signature by value (arrays by their bytes)."""

    __slots__ = ("key", "trees", "arrays", "positions")

    def __init__(self, args: tuple, diff: tuple[int, ...], dynamic: tuple[int, ...],
                 diff_key: tuple):
        key: list = [len(args), diff_key]
        self.trees: dict[int, TreeDef] = {}
        self.arrays: list = []  # the dynamic arguments' array leaves, in order
        self.positions: list[tuple[int, int]] = []  # (argument, leaf) of each of them
        for i, a in enumerate(args):
            if i in diff:
                continue
            leaves, tree = flatten(a)
            parts: list = [tree, tree_key(tree)]
            for j, leaf in enumerate(leaves):
                if isinstance(leaf, Traced):
                    raise Retrace  # called inside another sweep: trace through instead
                if isinstance(leaf, np.ma.MaskedArray):  # its mask would be dropped
                    raise masked_refusal(f"argument {i}" if len(leaves) == 1
                                         else f"argument {i} (leaf {j})")
                if not _is_array(leaf):
                    parts.append(_static_key(leaf, f"argument {i} (leaf {j})"))
                elif i in dynamic:
                    parts.append(leaf_signature(leaf))
                    self.arrays.append(leaf)
                    self.positions.append((i, j))
                else:
                    parts.append(content_key(leaf))
            if i in dynamic:
                self.trees[i] = tree
            key.append(tuple(parts))
        self.key = tuple(key)

    def substitute(self, args: tuple, tracers: list) -> tuple:
        """``args`` with the non-differentiated array leaves replaced by ``tracers``."""
        if not tracers:
            return args
        out = list(args)
        by_arg: dict[int, list] = {}
        for (i, j), t in zip(self.positions, tracers, strict=True):
            by_arg.setdefault(i, []).append((j, t))
        for i, subs in by_arg.items():
            leaves, _ = flatten(args[i])
            for j, t in subs:
                leaves[j] = t
            out[i] = unflatten(self.trees[i], leaves)
        return tuple(out)


# ----- one recorded program -----

class Variant:
    """One traced program: its nodes, inputs, output and guards (what a replay needs)."""

    __slots__ = ("nodes", "n_diff", "n_inputs", "out_tree", "outs", "guards", "unjumped",
                 "fast", "fast_tried", "weak")

    def __init__(self, trace: Trace, n_diff: int, n_inputs: int, out, weak: tuple = ()):
        leaves, self.out_tree = flatten(out)
        self.outs = []
        for o in leaves:
            if isinstance(o, Tracer):
                if o._trace is not trace:
                    raise Retrace  # a value from another sweep: leave it to the transform
                self.outs.append(o._id)
            else:
                self.outs.append(Literal(o))
        nodes = trace.nodes if type(trace.nodes) is ClosedNodes else ClosedNodes(trace.nodes)
        self.nodes = nodes
        self.n_diff, self.n_inputs = n_diff, n_inputs
        self.guards = dict(trace.guards)
        self.unjumped = tuple(sorted(trace.unjumped))  # `Trace.guard_unjumped`
        # which inputs were Python floats, where the program depends on it (else None)
        self.weak = weak if trace.weak_sensitive else None
        self.fast = None  # the generated tie-free path, built on the second call
        self.fast_tried = False
        _snapshot_constants(nodes)

    def output(self, trace: Trace):
        """The program's output at the replay's values, as the function returned it."""
        values = trace.values
        return unflatten(self.out_tree, [Tracer(trace, o, values[o]) if type(o) is int
                                         else o.value for o in self.outs])

    def replay(self, leaves: list, dirs, lex: LexDirections | None, arrays: list) -> Trace:
        """A sweep of the program at new inputs: ``leaves`` along ``dirs``, ``arrays`` the
        inactive inputs. Raises `Retrace` where a guard or a shape no longer holds."""
        trace = Trace(lex)
        nodes = self.nodes
        trace.nodes = nodes
        for node, x, d in zip(nodes, leaves, dirs, strict=False):
            trace.replay_input(node, x, d)
        for k, x in enumerate(arrays, start=self.n_diff):
            trace.replay_input(nodes[k], x)
        guards = self.guards
        values = trace.values
        with np.errstate(all="ignore"):
            for k in guards:
                if k < self.n_inputs:
                    _check_guards(guards[k], values[k])
            for k in range(self.n_inputs, len(nodes)):
                node = nodes[k]
                ans = trace.replay_node(k, node)
                if tuple(np.shape(ans)) != tuple(node.shape):
                    raise Retrace
                if k in guards:
                    _check_guards(guards[k], ans)
        if trace.jumps and any(trace.jumps_reaching(k) for k in self.unjumped):
            raise Retrace  # tracing refuses the read there (no jumps: nothing to walk)
        return trace


def _check_guards(guards: list, value) -> None:
    for read, result in guards:
        if not same_reading(read(value), result):
            raise Retrace


def _snapshot_constants(nodes: list) -> None:
    """Copy the array constants the program holds: a closure changed in place later must
    not reach a program traced from its old value (the rest of which it may have shaped)."""
    for node in nodes:
        for a in node.args:
            if type(a) is Literal:
                v = a.value
                if type(v) is np.ndarray:
                    a.value = v.copy()
                elif hasattr(v, "clone"):  # a torch tensor (JAX arrays are immutable)
                    a.value = v.detach().clone()


# ----- the compiled function -----

class CompiledFunction:
    """``fn`` traced once per signature and replayed; see the module docstring.

    Called with plain arrays it returns ``fn``'s value, replayed with every argument an
    input; inside a sweep (its arguments traced) it simply calls ``fn``; an asd transform
    given it (`asd.jit` builds those) replays its sweeps, the arguments it does not
    differentiate being constants unless named in ``dynamic_argnums``.
    """

    def __init__(self, fn: Callable, dynamic_argnums: tuple[int, ...] = ()):
        if isinstance(fn, CompiledFunction):
            fn, dynamic_argnums = fn.fn, tuple(sorted(set(fn.dynamic_argnums) |
                                                      set(dynamic_argnums)))
        self.fn = fn
        self.dynamic_argnums = tuple(dynamic_argnums)
        self.cache: dict[tuple, list[Variant]] = {}
        self.fast_cache: dict[tuple, FastPath] = {}  # quick signature -> generated path
        self.last = threading.local()  # the variant this thread's last sweep ran
        self.traces = 0  # how many times fn has been traced (the cache's misses)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"asd.jit({self.__name__})"

    def clear_cache(self) -> None:
        """Forget every traced program: the next call traces ``fn`` again (after changing a
        closure or a global it reads, for example)."""
        self.cache.clear()
        self.fast_cache.clear()

    def _dynamic(self, n_args: int) -> tuple[int, ...]:
        out = []
        for i in self.dynamic_argnums:
            if not -n_args <= i < n_args:
                raise ArgumentError(f"dynamic_argnums names argument {i}, but the function "
                                    f"was called with {n_args} arguments")
            out.append(i % n_args)
        return tuple(out)

    def plan(self, args: tuple, diff: tuple[int, ...], diff_key: tuple,
             dynamic: tuple[int, ...] | None = None) -> Plan:
        """The signature of a call whose arguments ``diff`` are differentiated."""
        if dynamic is None:
            dynamic = self._dynamic(len(args))
        clash = set(dynamic) & set(diff)
        if clash:
            raise ArgumentError(f"argument {min(clash)} is differentiated (argnums): it is an "
                                "input already; leave it out of dynamic_argnums")
        return Plan(args, diff, dynamic, diff_key)

    # ----- sweeps (what the transforms call) -----

    def sweep(self, inputs, dirs, lex: LexDirections | None):
        """``(trace, out, input ids)`` of one sweep along ``dirs``: replayed when this
        signature has a program, else traced (and kept). ``inputs`` is the transform's
        prepared call (`asd.api._Inputs`)."""
        self.last.variant = None
        try:
            plan = self.plan(inputs.args, inputs.argnums, inputs_key(inputs))
        except Retrace:  # called inside another sweep: no program to replay
            return self.record(inputs, dirs, lex, None)
        ids = list(range(len(inputs.leaves)))
        for variant in self.cache.get(plan.key, ()):
            if variant.weak is not None and variant.weak != inputs.weak:
                continue  # traced with other Python floats among its inputs (`Trace.weak`)
            try:
                trace = variant.replay(inputs.leaves, dirs, lex, plan.arrays)
            except Retrace:
                continue
            self.last.variant = variant
            return trace, variant.output(trace), ids
        return self.record(inputs, dirs, lex, plan)

    def record(self, inputs, dirs, lex, plan: Plan | None):
        """Trace ``fn`` (the sweep a transform runs uncompiled) and keep its program."""
        trace = Trace(lex)
        tracers = [trace.new_input(x, d, weak=w)
                   for x, d, w in zip(inputs.leaves, dirs, inputs.weak, strict=True)]
        extra = [] if plan is None else [trace.new_input(backend_leaf(a), active=False)
                                         for a in plan.arrays]
        fn = self.fn

        def call(*args):
            return fn(*(args if plan is None else plan.substitute(args, extra)))

        try:
            out = inputs.call(call, tracers)
        except TracerBoolError as e:
            if plan is None or not plan.arrays:
                raise
            raise TracerBoolError(f"{e} The arguments in asd.jit's dynamic_argnums are "
                                  "traced: leave out of it the ones Python branches on "
                                  "(they are then constants, compared by value).") from None
        self.traces += 1
        variant = None
        if plan is not None:
            try:
                variant = Variant(trace, len(tracers), len(tracers) + len(extra), out,
                                  inputs.weak)
            except Retrace:
                variant = None
            if variant is not None:
                kept = self.cache.setdefault(plan.key, [])
                kept.insert(0, variant)
                del kept[MAX_VARIANTS:]
        self.last.variant = variant
        return trace, out, [t._id for t in tracers]

    # ----- the generated tie-free path (value and subgradient on numpy float64) -----

    def fast_value_and_grad(self, args: tuple, single: bool, diff: tuple[int, ...]):
        """``(value, gradient(s))`` from the generated path, or None: no path for this
        call's signature yet, or the path met a tie (the caller then runs the full sweep)."""
        diff = tuple(i % len(args) for i in diff)
        key = quick_key(args, diff, self._dynamic(len(args)))
        path = None if key is None else self.fast_cache.get(key)
        if path is None:
            return None
        out = path(args)
        if out is None or not single:
            return out if out is None else (out[0], tuple(out[1]))
        return out[0], out[1][0]

    def learn_fast(self, args: tuple, diff: tuple[int, ...]) -> None:
        """After a full sweep: give this call's quick signature the generated path of the
        program the sweep ran, where the program allows one (`asd.core.codegen.eligible`)."""
        variant = getattr(self.last, "variant", None)
        diff = tuple(i % len(args) for i in diff)
        dynamic = self._dynamic(len(args))
        key = quick_key(args, diff, dynamic)
        if variant is None or key is None or key in self.fast_cache:
            return
        if not variant.fast_tried:
            variant.fast_tried = True
            if codegen.eligible(variant.nodes, variant.n_inputs, variant.outs, variant.guards):
                variant.fast = codegen.generate(variant.nodes, variant.n_diff,
                                                variant.n_inputs, variant.outs[0])
        if variant.fast is not None:
            self.fast_cache[key] = FastPath(variant.fast, args, diff, dynamic)

    # ----- plain evaluation -----

    def __call__(self, *args) -> Any:
        leaves, _ = flatten(args)
        if any(isinstance(x, Traced) for x in leaves):
            return self.fn(*args)  # inside another sweep: its trace records fn's nodes
        with np.errstate(all="ignore"):  # asd's own error state, whatever the caller's
            return self._evaluate(args)

    def _evaluate(self, args: tuple) -> Any:
        """A plain call: the replayed program's value (traced first for a new signature)."""
        plan = self.plan(args, (), (), tuple(range(len(args))))  # every argument an input
        for variant in self.cache.get(plan.key, ()):
            try:
                trace = variant.replay([], [], None, plan.arrays)
            except Retrace:
                continue
            return _concrete(variant.output(trace))
        trace = Trace()
        extra = [trace.new_input(backend_leaf(a), active=False) for a in plan.arrays]
        try:
            out = self.fn(*plan.substitute(args, extra))
        except (ValueError, TypeError) as e:
            if isinstance(e.__cause__, ASDError) and stored_by_numpy(e):
                raise e.__cause__ from None  # numpy's wrapping of asd's refusal
            raise
        finally:
            close_trace(trace)
        self.traces += 1
        try:
            variant = Variant(trace, 0, len(extra), out)
        except Retrace:
            return _concrete(out)
        kept = self.cache.setdefault(plan.key, [])
        kept.insert(0, variant)
        del kept[MAX_VARIANTS:]
        return _concrete(variant.output(trace))

    def program(self, *args) -> Program:
        """The straight-line program a call with these arguments replays (traced if new)."""
        self(*args)
        plan = self.plan(args, (), (), tuple(range(len(args))))
        variant = self.cache[plan.key][0]
        return Program(variant.nodes, list(range(variant.n_inputs)),
                       flatten(tuple(plan.arrays))[1], variant.outs, variant.out_tree)


_SCALARS = (float, np.float64)
"""Scalar argument types the fast path takes as they are (a numpy float64 scalar is a float
subclass with the same bits)."""


def _diff_layout(a) -> tuple | None:
    """A differentiated argument's layout for the fast path: a float64 array, a Python float
    or numpy float64 scalar, or a flat list/tuple of those; None for anything else (the full
    sweep handles it)."""
    t = type(a)
    if t is np.ndarray:
        return a.shape if a.dtype == np.float64 else None
    if t in _SCALARS:
        return t
    if t in (list, tuple) and a and all(type(x) in (np.ndarray, *_SCALARS) for x in a):
        inner = tuple(_diff_layout(x) for x in a)
        if None not in inner:
            return (t, inner)
    return None


def quick_key(args: tuple, diff: tuple[int, ...], dynamic: tuple[int, ...]) -> tuple | None:
    """A signature read in a few steps, for calls whose differentiated arguments are float64
    arrays, Python floats or flat lists of them, and whose other arguments are numpy arrays
    (inputs if dynamic, else by content) or Python scalars (by value); None otherwise."""
    key: list = [diff]
    for i, a in enumerate(args):
        t = type(a)
        if i in diff:
            layout = _diff_layout(a)
            if layout is None:
                return None
            key.append(layout)
        elif t is np.ndarray:
            if i not in dynamic:
                key.append(content_key(a))
            elif a.dtype != np.float64:
                return None
            else:
                key.append(a.shape)
        elif t is float:
            key.append((t, struct.pack("<d", a)))  # -0.0 is not 0.0 (`static_key`)
        elif t in (int, bool, str) or a is None:
            key.append((t, a))
        else:
            return None
    return tuple(key)


class FastPath:
    """A generated path bound to a call layout: which arguments it reads, in which order,
    and how its gradients come back (as the arguments came: arrays, numpy scalars for
    Python floats, lists or tuples of those)."""

    __slots__ = ("run", "diff", "data", "layouts")

    def __init__(self, run: Callable, args: tuple, diff: tuple[int, ...],
                 dynamic: tuple[int, ...]):
        self.run = run
        self.diff = diff
        self.data = [i for i in sorted(dynamic) if type(args[i]) is np.ndarray]
        self.layouts = [type(args[i]) if type(args[i]) in (list, tuple) else None
                        for i in diff]

    def __call__(self, args: tuple):
        leaves: list = []
        for i, kind in zip(self.diff, self.layouts, strict=True):
            if kind is None:
                leaves.append(args[i])
            else:
                leaves.extend(args[i])
        n = len(leaves)
        for x in leaves:
            if type(x) in _SCALARS:
                if not math.isfinite(x):
                    return None
            elif not np.isfinite(x).all():
                return None  # the full sweep names the argument
        ins = [np.asarray(x) if type(x) in _SCALARS else x for x in leaves]
        ins += [args[i] for i in self.data]
        try:
            with np.errstate(all="ignore"):
                value, grads = self.run(ins)
        except Exception:  # a tie, or an error the full sweep reports with its node
            return None
        out = []
        for g, x, leaf in zip(grads, ins[:n], leaves, strict=True):
            if g is None:
                g = np.zeros_like(x)
            else:
                g = np.asarray(g, dtype=np.float64)
                if g.shape != x.shape:
                    g = g.reshape(x.shape)
            out.append(g[()] if type(leaf) in _SCALARS else g)
        value = np.asarray(value)[()]
        if not math.isfinite(value) or not all(np.isfinite(g).all() for g in out):
            return None  # the full sweep names the node that overflowed
        grads, start = [], 0
        for i, kind in zip(self.diff, self.layouts, strict=True):
            if kind is None:
                grads.append(out[start])
                start += 1
            else:
                m = len(args[i])
                grads.append(kind(out[start:start + m]))
                start += m
        return value, grads


def inputs_key(inputs) -> tuple:
    """The differentiated leaves' part of a signature."""
    return (inputs.tree, tree_key(inputs.tree),
            tuple(leaf_signature(x) for x in inputs.leaves))


def backend_leaf(a):
    """A non-differentiated array leaf as a sweep input (numpy scalars as 0-d arrays)."""
    return np.asarray(a) if isinstance(a, np.generic) else a


def _concrete(out):
    """Traced outputs of a plain evaluation as their values."""
    leaves, tree = flatten(out)
    return unflatten(tree, [o.value if isinstance(o, Tracer) else o for o in leaves])
