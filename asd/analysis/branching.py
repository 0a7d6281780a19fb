"""Primitives written as branching programs (paper, Algorithm 3), overloaded automatically.

A branching program uses only the paper's computational model: ``+ - *``, division by a
constant, non-negative integer powers (monomials), declared smooth functions such as
``np.exp``, and ``asd.branch(h)``, which returns the Python bool "h >= 0". Decorated with
``@asd.branching`` it becomes a ``Primitive`` whose ASD rule is Algorithm 7: the program
runs on (value, tangent) pairs, each branch is decided by ``h > 0`` or (``h == 0`` and
``h_dot >= 0``) -- the side the ray ``x + δv`` enters -- the executed straight-line path is
recorded on a tape, and reverse mode over that tape gives the branch gradient ``∇p_z``.

On arrays the program is elementwise (inputs broadcast like a numpy ufunc). It runs on whole
subsets of elements at once: when a branch splits the current subset, the two halves are run
again separately, so the number of runs grows with the number of distinct branch paths that
actually occur, never with the number of elements.

>>> import asd, numpy as np
>>> @asd.branching
... def clip01(x):
...     if asd.branch(x):
...         return 1.0 if asd.branch(x - 1) else x
...     return 0.0
>>> clip01(np.array([-1.0, 0.5, 2.0]))
array([0. , 0.5, 1. ])
>>> float(asd.subgrad(lambda x: clip01(x) - clip01(-x))(0.0))
1.0
"""

from __future__ import annotations

import functools
import numbers
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from asd.core.linear import Diagonal, FanIn
from asd.core.primitive import Primitive, record_degenerate_tie
from asd.errors import ArgumentError, ArgumentTypeError, ASDError, TracerBoolError, UnsupportedError

# ----- the smooth functions a program may declare (name -> numpy, derivative, sympy name) -----


@dataclass(frozen=True)
class Smooth:
    """A smooth elementwise function usable inside a branching program once declared."""

    name: str
    numpy: Callable
    derivative: Callable  # (x, ans) -> slope
    sympy: Callable  # (sympy module, expr) -> the same function in sympy (used by the certifier)


SMOOTH: dict[str, Smooth] = {
    s.name: s
    for s in (
        Smooth("exp", np.exp, lambda x, a: a, lambda sp, e: sp.exp(e)),
        Smooth("expm1", np.expm1, lambda x, a: a + 1, lambda sp, e: sp.exp(e) - 1),
        Smooth("log", np.log, lambda x, a: 1 / x, lambda sp, e: sp.log(e)),
        Smooth("log1p", np.log1p, lambda x, a: 1 / (1 + x), lambda sp, e: sp.log(1 + e)),
        Smooth("sin", np.sin, lambda x, a: np.cos(x), lambda sp, e: sp.sin(e)),
        Smooth("cos", np.cos, lambda x, a: -np.sin(x), lambda sp, e: sp.cos(e)),
        Smooth("tanh", np.tanh, lambda x, a: 1 - a * a, lambda sp, e: sp.tanh(e)),
        Smooth("arctan", np.arctan, lambda x, a: 1 / (1 + x * x), lambda sp, e: sp.atan(e)),
    )
}
_SMOOTH_BY_UFUNC = {s.numpy: s for s in SMOOTH.values()}


# ----- the active evaluation: `branch` asks it to decide -----

class _Active(threading.local):
    """The evaluations in progress on this thread (a program may call another program).

    Per thread, so programs evaluated on several threads at once never see each other's run.
    """

    def __init__(self):
        self.runs: list = []

    # the list operations the evaluators use (asd.analysis.certificate runs programs too)
    def append(self, run) -> None:
        self.runs.append(run)

    def pop(self):
        return self.runs.pop()

    def __bool__(self) -> bool:
        return bool(self.runs)

    def __getitem__(self, i):
        return self.runs[i]


_ACTIVE = _Active()


def branch(h) -> bool:
    """The branch instruction of the computational model: True when ``h >= 0``.

    Inside a ``@asd.branching`` program it decides ties by the direction (Algorithm 7) and
    records the constraint; outside one it is the plain comparison on a number.

    >>> import asd
    >>> asd.branch(0.0), asd.branch(-2)
    (True, False)
    """
    runs = _ACTIVE.runs
    if runs:
        return runs[-1].decide(h)
    if isinstance(h, numbers.Real) or (isinstance(h, np.ndarray | np.generic) and np.ndim(h) == 0):
        return bool(h >= 0)
    raise ASDError(
        f"asd.branch got {type(h).__name__} of shape {np.shape(h)} outside a @asd.branching "
        "function; branch on a scalar, or decorate the function with @asd.branching so it runs "
        "elementwise on arrays."
    )


class _Split(Exception):
    def __init__(self, mask):
        self.mask = mask


class _NeedTangent(Exception):
    def __init__(self, mask):
        self.mask = mask


def _not_in_model(what: str) -> UnsupportedError:
    return UnsupportedError(
        f"{what} is outside the branching-program model (+, -, *, division by a constant, "
        "non-negative integer powers, declared smooth functions, asd.branch). Write a kink "
        "with asd.branch(h), e.g. `x if asd.branch(x) else 0` for relu."
    )


class Dual:
    """A value inside a branching program: value, tangent, and its node on the run's tape."""

    __slots__ = ("val", "dot", "node", "run")

    def __init__(self, run: _Run, val, dot, parents=(), partials=()):
        self.run, self.val, self.dot = run, val, dot
        self.node = run.record(parents, partials)

    # -- arithmetic: new node with its local partial derivatives --
    def _lift(self, other):
        if isinstance(other, Dual):
            return other
        if isinstance(other, numbers.Real) or (
            isinstance(other, np.ndarray | np.generic) and np.ndim(other) == 0
        ):
            return None
        raise _not_in_model(f"combining a branching value with {type(other).__name__} of shape "
                            f"{np.shape(other)} (constants must be scalars)")

    def _binary(self, other, val_fn, da, db):
        o = self._lift(other)
        if o is None:
            dot = None if self.dot is None else da(self.val, other) * self.dot
            return Dual(self.run, val_fn(self.val, other), dot, (self.node,),
                        (da(self.val, other),))
        dot = None if self.dot is None else (da(self.val, o.val) * self.dot
                                             + db(self.val, o.val) * o.dot)
        return Dual(self.run, val_fn(self.val, o.val), dot, (self.node, o.node),
                    (da(self.val, o.val), db(self.val, o.val)))

    def __add__(self, other):
        return self._binary(other, np.add, lambda a, b: 1.0, lambda a, b: 1.0)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, np.subtract, lambda a, b: 1.0, lambda a, b: -1.0)

    def __rsub__(self, other):
        return -(self - other)

    def __mul__(self, other):
        return self._binary(other, np.multiply, lambda a, b: b, lambda a, b: a)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, Dual):
            raise _not_in_model("division by a branching value")
        return self * (1.0 / other)

    def __rtruediv__(self, other):
        raise _not_in_model("division by a branching value")

    def __neg__(self):
        return self * -1.0

    def __pos__(self):
        return self

    def __pow__(self, n):
        if not isinstance(n, numbers.Integral) or n < 0:
            raise _not_in_model(f"x ** {n!r} (only non-negative integer powers are monomials)")
        n = int(n)
        slope = n * self.val ** (n - 1) if n else np.zeros_like(self.val)
        dot = None if self.dot is None else slope * self.dot
        return Dual(self.run, self.val ** n, dot, (self.node,), (slope,))

    def apply_smooth(self, s: Smooth):
        self.run.check_declared(s.name)
        ans = s.numpy(self.val)
        slope = s.derivative(self.val, ans)
        dot = None if self.dot is None else slope * self.dot
        return Dual(self.run, ans, dot, (self.node,), (slope,))

    # -- what the model forbids: Python control flow on values --
    def __bool__(self):
        raise TracerBoolError(
            "a branching program used a value in Python control flow (if/while/bool or a "
            "comparison). Branch with `if asd.branch(h):`, which means h >= 0 and follows the "
            "direction at ties."
        )

    def _compare(self, other):
        raise TracerBoolError(
            "comparisons of values inside a branching program are not branches; write "
            "`asd.branch(a - b)` for a >= b."
        )

    __lt__ = __le__ = __gt__ = __ge__ = _compare

    def __eq__(self, other):
        self._compare(other)

    __hash__ = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ufunc_in_model(ufunc, method, inputs, kwargs, Dual.apply_smooth)


_ARITHMETIC = {np.add: lambda a, b: a + b, np.subtract: lambda a, b: a - b,
               np.multiply: lambda a, b: a * b, np.true_divide: lambda a, b: a / b,
               np.negative: lambda a: -a, np.positive: lambda a: a,
               np.power: lambda a, b: a ** b}


def ufunc_in_model(ufunc, method, inputs, kwargs, apply_smooth):
    """numpy calls on program values: arithmetic and declared smooth functions only."""
    if method != "__call__" or kwargs:
        raise _not_in_model(f"numpy.{ufunc.__name__}.{method}")
    if ufunc in _ARITHMETIC:
        return _ARITHMETIC[ufunc](*inputs)
    s = _SMOOTH_BY_UFUNC.get(ufunc)
    if s is None:
        raise _not_in_model(f"numpy.{ufunc.__name__}")
    return apply_smooth(inputs[0], s)


class _Run:
    """One execution of the program on a subset of elements (one straight-line path)."""

    __slots__ = ("program", "mode", "with_tangent", "parents", "partials", "path",
                 "degenerate")

    @staticmethod
    def owns(a) -> bool:
        return isinstance(a, Dual)

    def __init__(self, program: BranchingPrimitive, mode: str, with_tangent: bool):
        self.program, self.mode, self.with_tangent = program, mode, with_tangent
        self.parents: list = []
        self.partials: list = []
        self.path: list[bool] = []
        self.degenerate = 0

    def record(self, parents, partials) -> int | None:
        if self.mode == "value":
            return None
        self.parents.append(parents)
        self.partials.append(partials)
        return len(self.parents) - 1

    def check_declared(self, name: str) -> None:
        if name not in self.program.smooth:
            raise UnsupportedError(
                f"{self.program.name}: np.{name} is used but not declared smooth; write "
                f"@asd.branching(smooth={{'{name}'}}) so the certifier knows the piece is smooth."
            )

    def decide(self, h) -> bool:
        if not isinstance(h, Dual):
            if isinstance(h, numbers.Real) or np.ndim(h) == 0:
                return bool(h >= 0)
            raise _not_in_model(f"asd.branch on {type(h).__name__}")
        hv = h.val
        side = hv > 0
        tie = hv == 0
        if tie.any():
            if self.mode == "value":
                side = side | tie
            elif not self.with_tangent:
                raise _NeedTangent(tie)
            else:
                side = side | (tie & (h.dot >= 0))
                self.degenerate += int(np.count_nonzero(tie & (h.dot == 0)))
        if side.all():
            decision = True
        elif not side.any():
            decision = False
        else:
            raise _Split(side)
        self.path.append(decision)
        return decision

    def reverse(self, out: int, n_inputs: int, size: int, dtype) -> list[np.ndarray]:
        adj: list = [None] * len(self.parents)
        adj[out] = np.ones(size, dtype)
        for k in range(out, n_inputs - 1, -1):
            a = adj[k]
            if a is None:
                continue
            for p, d in zip(self.parents[k], self.partials[k], strict=True):
                c = a * d
                adj[p] = c if adj[p] is None else adj[p] + c
        return [np.zeros(size, dtype) if g is None else np.broadcast_to(g, (size,))
                for g in adj[:n_inputs]]


@dataclass
class Evaluation:
    """What Algorithm 7 returns for every element: value, Dini derivative, branch gradient.

    ``paths`` counts the elements per executed branch path (a tuple of decisions, True for
    the ">=" side); ``runs`` is how many vectorized executions that took.
    """

    value: np.ndarray
    dot: np.ndarray | None
    grads: list[np.ndarray]
    paths: dict[tuple[bool, ...], int] = field(default_factory=dict)
    degenerate: int = 0
    runs: int = 0


def evaluate(program: BranchingPrimitive, args: Sequence, tangents: Sequence | None = None,
             *, mode: str = "rule") -> Evaluation:
    """Run ``program`` elementwise on ``args`` (Algorithm 7 when ``mode='rule'``).

    ``tangents`` holds one direction per argument: arrays, or lazy tangents as the engine
    passes them (callables, asked only when some branch meets a tie). ``mode='value'``
    only evaluates (ties take the ">=" side, as the program itself says).

    >>> import asd, numpy as np
    >>> relu = asd.branching(lambda x: x if asd.branch(x) else 0.0)
    >>> ev = evaluate(relu, [np.array([0.0, 0.0, 3.0])], [np.array([1.0, -1.0, 0.0])])
    >>> ev.value, ev.grads[0], ev.dot
    (array([0., 0., 3.]), array([1., 0., 1.]), array([1., 0., 0.]))
    """
    arrays = [np.asarray(a) for a in args]
    if program.arity is not None and len(arrays) != program.arity:
        raise ArgumentTypeError(f"{program.name} takes {program.arity} arguments, got "
                                f"{len(arrays)}")
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    dtype = np.result_type(*arrays)
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.dtype(np.float64)
    flat = [np.broadcast_to(a, shape).astype(dtype).ravel() for a in arrays]
    size = int(np.prod(shape))
    tangent = _Tangents(tangents, arrays, shape, dtype) if mode == "rule" and tangents else None
    value = np.zeros(size, dtype)
    dot = np.zeros(size, dtype) if mode == "rule" else None
    grads = [np.zeros(size, dtype) for _ in arrays] if mode == "rule" else []
    ev = Evaluation(value, dot, grads)
    eager = tangent is not None and tangent.eager
    if eager:
        tangent.ensure(np.arange(size))
    work = [(np.arange(size), eager)]
    while work:
        idx, with_tangent = work.pop()
        run = _Run(program, mode, with_tangent)
        ev.runs += 1
        ins = [Dual(run, x[idx], tangent.flat[i][idx] if with_tangent else None)
               for i, x in enumerate(flat)]
        _ACTIVE.append(run)
        try:
            out = program.fn(*ins)
        except _Split as s:
            work += [(idx[~s.mask], with_tangent), (idx[s.mask], with_tangent)]
            continue
        except _NeedTangent as need:
            if tangent is None:
                raise ASDError(f"{program.name}: a branch is tied and no direction was given "
                               "to decide it") from None
            tied = idx[need.mask]  # only these elements need the direction
            tangent.ensure(tied)
            work += [(idx[~need.mask], False), (tied, True)]
            continue
        finally:
            _ACTIVE.pop()
        key = tuple(run.path)
        ev.paths[key] = ev.paths.get(key, 0) + idx.size
        ev.degenerate += run.degenerate
        if isinstance(out, Dual):
            value[idx] = out.val
            if mode == "rule":
                if out.dot is not None:
                    dot[idx] = out.dot
                for g, r in zip(grads, run.reverse(out.node, len(ins), idx.size, dtype),
                                strict=True):
                    g[idx] = r
        elif isinstance(out, numbers.Real) or np.ndim(out) == 0:
            value[idx] = out
        else:
            raise _not_in_model(f"returning {type(out).__name__} (return one value per element)")
    ev.value = value.reshape(shape)
    ev.dot = dot.reshape(shape) if eager else None
    ev.grads = [g.reshape(shape) for g in grads]
    return ev


class _Tangents:
    """The inputs' tangents on the broadcast, flattened element set, fetched on demand.

    The engine's lazy tangents are asked for the tied elements only (a bool mask in the
    input's shape), so tangent work follows the number of ties.
    """

    def __init__(self, tangents: Sequence, arrays: list, shape: tuple, dtype):
        self.tangents, self.arrays, self.shape, self.dtype = tangents, arrays, shape, dtype
        size = int(np.prod(shape))
        self.flat = [np.zeros(size, dtype) for _ in arrays]
        self.known = np.zeros(size, bool)
        self.eager = not any(callable(t) for t in tangents)

    def ensure(self, elements: np.ndarray) -> None:
        need = elements[~self.known[elements]]
        if need.size == 0:
            return
        mask = np.zeros(self.known.shape, bool)
        mask[need] = True
        where = np.flatnonzero(mask)
        for i, (t, a) in enumerate(zip(self.tangents, self.arrays, strict=True)):
            if callable(t) and getattr(t, "is_zero", False):
                continue
            if callable(t) and a.shape == self.shape:
                self.flat[i][where] = np.asarray(t(mask.reshape(self.shape)), self.dtype)
                continue
            full = t() if callable(t) else t
            full = np.broadcast_to(np.asarray(full, self.dtype), a.shape)
            self.flat[i][where] = np.broadcast_to(full, self.shape).ravel()[where]
        self.known[need] = True


# ----- the primitive -----

class BranchingPrimitive(Primitive):
    """A primitive defined by a branching program; its rule is derived (Algorithm 7)."""

    __slots__ = ("fn", "smooth", "arity", "__dict__")

    def __init__(self, fn: Callable, smooth: Iterable[str] = (), name: str | None = None):
        unknown = set(smooth) - set(SMOOTH)
        if unknown:
            raise ArgumentError(f"unknown smooth functions {sorted(unknown)}; known: "
                                f"{sorted(SMOOTH)}")
        self.fn, self.smooth = fn, frozenset(smooth)
        code = getattr(fn, "__code__", None)
        self.arity = code.co_argcount if code is not None and not code.co_flags & 0x04 else None
        super().__init__(name or getattr(fn, "__name__", "branching"), self._impl, self._rule)
        functools.update_wrapper(self, fn)

    def _impl(self, *args):
        ev = evaluate(self, args, mode="value")
        return ev.value[()] if ev.value.ndim == 0 else ev.value

    def _rule(self, xs, dxs):
        ev = evaluate(self, xs, dxs, mode="rule")
        record_degenerate_tie(ev.degenerate)
        ans = ev.value
        maps = [Diagonal(g, np.shape(x), ans.shape) for g, x in zip(ev.grads, xs, strict=True)]
        return ans, maps[0] if len(maps) == 1 else FanIn(*maps)

    def __call__(self, *args, **params):
        if _ACTIVE and any(_ACTIVE[-1].owns(a) for a in args):
            return self.fn(*args)  # a program inside a program: inline it (same model)
        return super().__call__(*args, **params)

    def __repr__(self) -> str:
        return f"<branching primitive {self.name}>"


def branching(fn: Callable | None = None, *, smooth: Iterable[str] = (),
              name: str | None = None):
    """Decorator: make a branching program a primitive with an automatically derived rule.

    ``smooth`` declares the smooth functions the program may call (``{'exp'}`` for
    ``np.exp``); the certifier (``asd.certify``) accepts them as pieces.

    >>> import asd, numpy as np
    >>> @asd.branching
    ... def max2(a, b):
    ...     return a if asd.branch(a - b) else b
    >>> asd.jacobian(lambda x: max2(x[0], x[1]), direction=np.array([0.0, 1.0]))(np.zeros(2))
    array([0., 1.])
    """
    if fn is None:
        return lambda f: BranchingPrimitive(f, smooth, name)
    return BranchingPrimitive(fn, smooth, name)


__all__ = ["SMOOTH", "BranchingPrimitive", "Dual", "Evaluation", "Smooth", "branch",
           "branching", "evaluate"]
