"""What a Python function can reach: the values its traced program depends on.

A framework importer traces ``fn`` once and caches the program. The trace bakes in every
Python value ``fn`` reads besides its arguments: closure cells, the globals its code names,
attributes of the objects it reaches, module flags such as ``training``. A cache keyed only on
the argument shapes would hand back the old program after one of them changed, so both front
ends key their caches on `fingerprint`, which walks everything reachable (`walk`) and
summarizes it: plain values by value, arrays by content (their values are baked into the
trace), and framework state (tensors, modules) by a token the front end supplies. The PyTorch
front end also uses `walk` to find every parameter a function can reach, wherever it is kept.

Library code (torch, jax, numpy, asd...) is not walked: its globals are not program state.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import sys
import sysconfig
import traceback
import types
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import numpy as np

LIBRARIES = ("torch", "jax", "jaxlib", "numpy", "asd", "library", "scipy", "flax", "optax",
             "builtins", "functools", "operator", "math", "typing", "collections", "abc")
"""Top-level packages whose functions and globals are not walked (they are not user state)."""

MAX_DEPTH = 12

MAX_ITEMS = 10_000
"""Containers longer than this (a dataset kept as a Python list) are not walked item by item:
they count by identity and length, so that every call stays cheap."""

SCALARS = (type(None), bool, int, float, complex, str, bytes, np.generic)


# asd's own packages written as user code would be (the benchmark programs): walked like it
USER_PACKAGES = ("asd.benchmarks",)


def is_library(obj) -> bool:
    """Whether ``obj`` (a function, class or module) belongs to a library, not to user code."""
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    name = name or ""
    if any(name == p or name.startswith(p + ".") for p in USER_PACKAGES):
        return False
    return name.split(".")[0] in LIBRARIES


def user_line(exc: BaseException) -> str:
    """The innermost frame of the user's code in ``exc``'s traceback, as ``file:line:
    `source```: where an error message should send the reader (library frames skipped)."""
    roots = [os.path.dirname(m.__file__) + os.sep for m in map(sys.modules.get, LIBRARIES)
             if m is not None and getattr(m, "__file__", None)]
    roots.append(sysconfig.get_paths()["stdlib"] + os.sep)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(f.filename.startswith(r) for r in roots)
              and "site-packages" not in f.filename]
    if not frames:
        return "an unknown line"
    f = frames[-1]
    return f"{f.filename}:{f.lineno}: `{(f.line or '').strip()}`"


def _code_names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names

def _slot_names(cls: type) -> list[str]:
    """The ``__slots__`` attributes of ``cls`` and its bases (an object without a
    ``__dict__`` keeps its state there; one with neither holds nothing a walk can read)."""
    names = []
    for base in cls.__mro__:
        slots = base.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [n for n in slots
                                                         if n not in ("__dict__", "__weakref__")]
    return names


def _children(path: tuple, value, opaque: Callable[[Any], bool]) -> Iterator[tuple[tuple, Any]]:
    """The values directly reachable from ``value``, each with its path."""
    if opaque(value) or isinstance(value, SCALARS) or isinstance(value, np.ndarray):
        return
    if isinstance(value, types.MethodType):
        yield (*path, "self"), value.__self__
        yield path, value.__func__
    elif isinstance(value, functools.partial):
        yield (*path, "func"), value.func
        for i, a in enumerate(value.args):
            yield (*path, str(i)), a
        for k, a in value.keywords.items():
            yield (*path, k), a
    elif isinstance(value, types.FunctionType):
        if is_library(value):
            return
        code = value.__code__
        for name, cell in zip(code.co_freevars, value.__closure__ or (), strict=True):
            try:
                yield (*path, name), cell.cell_contents
            except ValueError:          # an empty cell: not assigned yet
                continue
        for i, d in enumerate(value.__defaults__ or ()):
            yield (*path, f"default{i}"), d
        for k, d in (value.__kwdefaults__ or {}).items():
            yield (*path, k), d
        glob = value.__globals__
        names = _code_names(code)
        for name in sorted(names):
            if name not in glob:
                continue
            g = glob[name]
            if isinstance(g, types.ModuleType):
                if is_library(g):
                    continue
                for attr in sorted(names):          # config.FLAG: the attributes the code names
                    if attr in vars(g):
                        yield (name, attr), vars(g)[attr]
            else:
                yield (name,), g
    elif isinstance(value, dict | list | tuple) and len(value) > MAX_ITEMS:
        return
    elif isinstance(value, dict):
        for k, v in value.items():
            yield (*path, str(k)), v
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield (*path, str(i)), v
    elif isinstance(value, type):
        if not is_library(value):           # class attributes and the methods that read them
            for k, v in vars(value).items():
                if not (k.startswith("__") and k.endswith("__")) or k == "__call__":
                    yield (*path, k), v
    elif isinstance(value, types.ModuleType | types.BuiltinFunctionType):
        return
    elif not is_library(type(value)):
        yield (*path, "__class__"), type(value)
        attrs = dict(vars(value)) if hasattr(value, "__dict__") else {}
        attrs.update((k, getattr(value, k)) for k in _slot_names(type(value))
                     if hasattr(value, k))  # a slotted object's state (C objects: none)
        for k, v in attrs.items():
            yield (*path, k), v


def walk(fn, opaque: Callable[[Any], bool] = lambda v: False,
         expand: Callable[[tuple, Any], Iterator[tuple[tuple, Any]]] | None = None
         ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every value reachable from ``fn``, breadth first, once each, with its path.

    ``opaque(v)`` stops the generic descent into ``v`` (framework objects); ``expand(path, v)``
    yields the children of such values the caller wants walked (a module's plain attributes).
    Paths are variable names: closure cells and defaults under the function's path, globals at
    the top level (they are module-level names), then keys, indices and attribute names.
    """
    for path, value, _ in _walk(fn, opaque, expand):
        yield path, value


def _walk(fn, opaque, expand):
    """`walk`, with whether each value's children were read (not beyond `MAX_DEPTH`)."""
    seen: set[int] = set()
    queue = deque([((), fn, 0)])
    while queue:
        path, value, depth = queue.popleft()
        if not isinstance(value, SCALARS):
            if id(value) in seen:
                continue
            seen.add(id(value))
        descend = depth < MAX_DEPTH
        yield path, value, descend
        if not descend:
            continue
        kids = _children(path, value, opaque)
        if expand is not None and opaque(value):
            kids = expand(path, value)
        for child_path, child in kids:
            queue.append((child_path, child, depth + 1))


def token(value, framework_token: Callable[[Any], Hashable | None]) -> Hashable:
    """What of ``value`` a trace can bake in: the value itself, an array's content, or the
    framework's token (identity and shape of a tensor...). Objects keep their type and id."""
    own = framework_token(value)
    if own is not None:
        return own
    if isinstance(value, SCALARS):
        return type(value).__name__, repr(value)
    if isinstance(value, np.ndarray):
        return "array", value.shape, str(value.dtype), hash(np.ascontiguousarray(value).tobytes())
    if isinstance(value, types.FunctionType):
        return "function", id(value.__code__)
    if isinstance(value, dict | list | tuple):
        return (type(value).__name__, len(value)) + (
            (id(value),) if len(value) > MAX_ITEMS else ())
    if isinstance(value, types.ModuleType):
        return "module", value.__name__
    return "object", type(value).__qualname__, id(value)


def fingerprint(fn, framework_token: Callable[[Any], Hashable | None],
                opaque: Callable[[Any], bool] = lambda v: False,
                expand=None, framework_guard=None) -> tuple[tuple, list]:
    """A hashable summary of everything ``fn``'s trace can depend on (see the module doc),
    and the reachable objects (with ``framework_guard``, also a `Guard` of that walk).

    Two calls give equal fingerprints unless a reachable value changed, so a program cached
    under it is the program ``fn`` would trace now. Objects without a better summary count by
    identity, so the cache entry must hold the returned objects: their ids are then not reused.
    """
    key, held = [], []
    guard = Guard() if framework_guard is not None else None
    for path, v, descend in _walk(fn, opaque, expand):
        key.append((path, token(v, framework_token)))
        if not isinstance(v, SCALARS):
            held.append(v)
        if guard is not None:
            guard.read(v, descend, opaque, framework_guard)
    if guard is not None:
        return tuple(key), held, guard
    return tuple(key), held


_MISSING = object()

# the kinds of check a Guard makes
_DICT, _LIST, _CELLS, _NAMES, _ATTR, _ARRAY, _CUSTOM, _ENTRIES = range(8)



class Guard:
    """What a walk read, checked by identity: the cheap test that a fingerprint still holds.

    A fingerprint costs a full walk (hundreds of microseconds for a model of a few dozen
    modules). The guard records, for every object whose children the walk read, the very
    objects it found there (a dict's keys and values, a list's items, a function's closure
    cells, defaults, code and the globals it names, an object's class and attributes, and
    what the front end reads of its own objects: a module's flags and parameters, a
    tensor's shape and dtype). `holds` compares them by identity: if every one is the same
    object, the walk would read the same values, so the fingerprint is the one recorded. A
    failed check only means "walk again": an equal value in a new object (a float assigned
    anew) gives the same fingerprint, and the program is found in the cache.
    """

    __slots__ = ("checks", "_batches")

    def __init__(self):
        self.checks: list[tuple] = []
        self._batches: _Batches | None = None

    def dict_of(self, d) -> None:
        """``d``'s keys and values, by identity (a dict, or an object's ``__dict__``)."""
        self.checks.append((_DICT, d, tuple(d), tuple(d.values())))

    def entries(self, d, names: tuple) -> None:
        """The entries ``names`` of ``d`` and its size, by identity (what a walk reads of a
        dict it does not read whole: a module's flags and plain attributes)."""
        self.checks.append((_ENTRIES, d, names, tuple(map(d.get, names)), len(d)))

    def read(self, v, descend: bool, opaque, framework_guard) -> None:
        """Record what `_children` (or the front end's ``framework_guard``) reads of ``v``."""
        if isinstance(v, np.ndarray):        # by content, as the fingerprint counts it
            self.checks.append((_ARRAY, v, hash(np.ascontiguousarray(v).tobytes())))
            return
        if isinstance(v, SCALARS) or not descend:
            return
        if opaque(v):
            framework_guard(v, self)
            return
        if isinstance(v, functools.partial):
            self.dict_of(v.keywords)
        elif isinstance(v, types.FunctionType):
            if is_library(v):
                return
            for attr in ("__code__", "__defaults__", "__kwdefaults__", "__closure__"):
                self.checks.append((_ATTR, v, attr, getattr(v, attr)))
            if v.__kwdefaults__:
                self.dict_of(v.__kwdefaults__)
            cells = v.__closure__ or ()
            self.checks.append((_CELLS, cells, tuple(_cell(c) for c in cells)))
            glob, names = v.__globals__, tuple(sorted(_code_names(v.__code__)))
            self.checks.append((_NAMES, glob, names, tuple(glob.get(n, _MISSING)
                                                            for n in names)))
            for name in names:
                g = glob.get(name)
                if isinstance(g, types.ModuleType) and not is_library(g):
                    attrs = vars(g)
                    self.checks.append((_NAMES, attrs, names, tuple(attrs.get(n, _MISSING)
                                                                     for n in names)))
        elif isinstance(v, dict):
            if len(v) <= MAX_ITEMS:
                self.dict_of(v)
        elif isinstance(v, list):
            if len(v) <= MAX_ITEMS:
                self.checks.append((_LIST, v, tuple(v)))
        elif isinstance(v, type):
            if not is_library(v):
                self.dict_of(v.__dict__)
        elif isinstance(v, tuple | types.MethodType | types.ModuleType |
                        types.BuiltinFunctionType):
            return                                  # immutable, or not walked
        elif not is_library(type(v)):
            self.checks.append((_ATTR, v, "__class__", type(v)))
            if hasattr(v, "__dict__"):
                self.dict_of(vars(v))
            for name in _slot_names(type(v)):           # a slotted object's attributes
                if hasattr(v, name):
                    self.checks.append((_ATTR, v, name, getattr(v, name)))

    def custom(self, check: Callable[[], Any], expected) -> None:
        """A front end's own check: ``check()`` must return ``expected`` (compared with ``==``)."""
        self.checks.append((_CUSTOM, check, expected))

    def holds(self) -> bool:
        """Whether every object the walk read is still the one it found. Called at every call
        of a drop-in, so the checks run as a few C-level passes over flat lists (`_Batches`,
        built once), not one Python step per check: a ResNet's ~400 checks cost about 0.7 ms
        one by one, a sizeable part of a GPU training step."""
        b = self._batches
        if b is None or b.n != len(self.checks):
            b = self._batches = _Batches(self.checks)
        is_ = operator.is_
        chain = itertools.chain.from_iterable
        return (list(map(len, b.sized)) == b.sizes
                and all(map(is_, map(getattr, b.objs, b.attrs), b.found))
                and all(map(is_, map(dict.get, b.entry_dicts, b.entry_keys), b.entries))
                and all(map(is_, chain(b.dicts), b.keys))
                and all(map(is_, chain(map(dict.values, b.dicts)), b.values))
                and all(map(is_, chain(b.lists), b.items))
                and all(map(_holds, b.rest)))


class _Batches:
    """A guard's checks regrouped by kind into flat lists that `Guard.holds` compares in
    C-level passes: the sizes of the dicts and lists it read, the attributes, the entries of
    dicts read in part, the keys and values of dicts read whole, the items of lists; the
    rarer kinds (closure cells, globals, arrays, a front end's own checks) one by one."""

    __slots__ = ("n", "sized", "sizes", "objs", "attrs", "found", "entry_dicts", "entry_keys",
                 "entries", "dicts", "keys", "values", "lists", "items", "rest")

    def __init__(self, checks: list[tuple]):
        self.n = len(checks)
        self.sized, self.sizes, self.objs, self.attrs, self.found = [], [], [], [], []
        self.entry_dicts, self.entry_keys, self.entries = [], [], []
        self.dicts, self.keys, self.values, self.lists, self.items = [], [], [], [], []
        self.rest = []
        for check in checks:
            kind = check[0]
            if kind == _ATTR:
                self.objs.append(check[1])
                self.attrs.append(check[2])
                self.found.append(check[3])
            elif kind == _ENTRIES and isinstance(check[1], dict):
                d, names, got = check[1], check[2], check[3]
                self.sized.append(d)
                self.sizes.append(check[4])
                self.entry_dicts += [d] * len(names)
                self.entry_keys += names
                self.entries += got
            elif kind == _DICT and isinstance(check[1], dict):
                self.sized.append(check[1])
                self.sizes.append(len(check[2]))
                self.dicts.append(check[1])
                self.keys += check[2]
                self.values += check[3]
            elif kind == _LIST:
                self.sized.append(check[1])
                self.sizes.append(len(check[2]))
                self.lists.append(check[1])
                self.items += check[2]
            else:
                self.rest.append(check)


def _holds(check: tuple) -> bool:
    """One check of the kinds `_Batches` leaves one by one (and dicts that are not dicts:
    a class's mapping proxy)."""
    is_ = operator.is_
    kind = check[0]
    if kind == _ENTRIES:
        d = check[1]
        return len(d) == check[4] and all(map(is_, map(d.get, check[2]), check[3]))
    if kind == _DICT:
        d, keys, values = check[1], check[2], check[3]
        return len(d) == len(keys) and all(map(is_, d.values(), values)) \
            and all(map(is_, d, keys))
    if kind == _CELLS:
        return all(map(is_, map(_cell, check[1]), check[2]))
    if kind == _NAMES:
        get = check[1].get
        return all(get(n, _MISSING) is v for n, v in zip(check[2], check[3], strict=True))
    if kind == _CUSTOM:
        return check[1]() == check[2]
    return hash(np.ascontiguousarray(check[1]).tobytes()) == check[2]


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:                  # an empty cell: not assigned yet
        return _MISSING


__all__ = ["LIBRARIES", "Guard", "fingerprint", "is_library", "token", "user_line", "walk"]
