"""Primitives, the rule protocol, and the tables numpy dispatch consults.

The rule protocol (DESIGN.md)::

    rule(xs, dxs, **params) -> (ans, lin)

``xs`` are the primal inputs (numpy arrays or scalars). ``dxs`` holds one *lazy* tangent per
input: call ``dxs[i]()`` for the one-sided directional derivative of input ``i`` along the
sweep direction, or ``dxs[i](index)`` for some entries only. Calling is what costs, so a rule
calls only where it meets a tie. Inputs that do not depend on the differentiated arguments
get a ``ZeroTangent`` (``.is_zero`` is True; calling it still returns zeros).
``lin`` is the branch linearization that the direction selects: a ``LinearMap`` for a
one-input primitive, a ``FanIn`` of maps otherwise.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from asd.core import backend
from asd.errors import ASDError, NestingError, UnsupportedError

Rule = Callable[..., tuple[Any, Any]]


class ZeroTangent:
    """The tangent of an input that does not depend on the differentiated arguments."""

    __slots__ = ("shape", "dtype")
    is_zero = True

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    def __call__(self, index=None) -> np.ndarray:
        z = np.zeros(self.shape, self.dtype if np.issubdtype(self.dtype, np.inexact) else float)
        return z if index is None else z[index]


class ConstantTangent(ZeroTangent):
    """The zero tangent of a constant operand; shape and dtype are read only if asked."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    @property
    def shape(self) -> tuple:
        return np.shape(self.value)

    @property
    def dtype(self):
        return np.result_type(self.value)


class Traced:
    """Base class of traced values (``asd.core.tracing.Tracer``): what ``bind`` looks for."""

    __slots__ = ()
    _asd_traced = True  # `asd.core.backend.namespace` skips traced values


class FixedTangent:
    """A tangent that is already known (used by ``Primitive.asd`` and ``asd.testing``).

    ``lex`` holds the input's share of the further directions ``w1, w2, ...`` that decide ties
    persisting along the tangent (see `asd.core.ties`); without them such a tie reads as equal.
    """

    __slots__ = ("value", "lex")
    is_zero = False

    def __init__(self, value, lex=()):
        self.value = np.asarray(value)
        self.lex = [np.asarray(w) for w in lex]

    @property
    def shape(self) -> tuple:
        return self.value.shape

    def __call__(self, index=None) -> np.ndarray:
        return self.value if index is None else self.value[index]


class Primitive:
    """A named operation with a numpy implementation and one ASD rule.

    ``discontinuous`` marks piecewise-constant operations (comparisons, sign, floor): their
    outputs carry no tangent, and using them as numbers in a differentiated output raises.
    ``comparison`` names the operator (``'>'``...) of comparison primitives so ``where`` can
    select branches by direction. ``stops_gradient`` marks ``stop_gradient``.
    ``array_api`` declares that ``impl`` and ``rule`` are written against the array API
    standard (`asd.core.backend`), so they run on torch and JAX arrays as given; the engine
    refuses every other primitive on non-numpy values (`UnsupportedError`), never converting.
    """

    __slots__ = ("name", "impl", "rule", "discontinuous", "comparison", "stops_gradient",
                 "array_api", "snap", "jumps", "jump_at")

    def __init__(
        self,
        name: str,
        impl: Callable,
        rule: Rule | None = None,
        *,
        discontinuous: bool = False,
        comparison: str | None = None,
        stops_gradient: bool = False,
        array_api: bool = False,
        jumps: bool = False,
    ):
        self.name, self.impl, self.rule = name, impl, rule
        self.array_api = array_api
        self.discontinuous = discontinuous or comparison is not None
        self.jumps = jumps or self.discontinuous
        """Whether the rule may report a jump (`record_jump`): a discontinuous primitive, or
        a continuous one with jumps (a remainder, an angle's branch cut). A replay across a
        jump above cannot evaluate it at a side's limit (its value there is not its limit
        from that side), and refuses instead (`Trace.replay`), unless ``jump_at``
        shows the value it is replayed at is off its jumps."""
        self.jump_at: Callable | None = None
        """``jump_at(x, **params)``: where the primitive jumps, for a primitive of one
        traced input (`asd.library.discontinuous.defjump`); None: unknown."""
        self.comparison = comparison
        self.stops_gradient = stops_gradient
        self.snap = None

    def __call__(self, *args, **params):
        return bind(self, args, params)

    def defrule(self, rule: Rule) -> Rule:
        """Decorator: attach the ASD rule (``rule(xs, dxs, **params) -> (ans, lin)``)."""
        self.rule = rule
        return rule

    def defsnap(self, snap: Callable) -> Callable:
        """Decorator: attach the rule's *snap*, ``snap(xs, reaches, **params) -> (xs, count)``.

        Given numpy inputs and, per input, how far each entry can move inside a ball around
        the point (`asd.clarke` with ``radius``), it returns the inputs with every entry whose
        switching quantity the ball reaches moved onto the tie, and how many it moved: the
        rule, re-run per direction on them, then decides those near-ties as exact ones.
        """
        self.snap = snap
        return snap

    def asd(self, *xs, direction, **params):
        """The paper's ASD routine in literal form: ``(g(x), D[g; v](x), grad p_z(x))``.

        ``direction`` holds one tangent per input (a single array for one input). The third
        entry is the branch gradient (Jacobian for vector outputs) per input, built from the
        same rule by pulling back an identity batch.
        """
        xs = tuple(np.asarray(x) for x in xs)
        dirs = (direction,) if len(xs) == 1 else tuple(direction)
        # a tie persisting along the direction is decided by a second, seeded one (asd.core.ties)
        rng = np.random.default_rng(0)
        dxs = [FixedTangent(np.asarray(d, dtype=np.result_type(x, float)),
                            [rng.standard_normal(np.shape(x))]) for x, d in
               zip(xs, dirs, strict=True)]
        ans, lin = self.rule(xs, dxs, **params)
        ans = np.asarray(ans)
        maps = lin.maps if hasattr(lin, "maps") else (lin,)
        dini = sum(m.push(d.value) for m, d in zip(maps, dxs, strict=True) if m is not None)
        eye = np.eye(ans.size, dtype=np.result_type(ans, float)).reshape((ans.size,) + ans.shape)
        grads = []
        for m, x in zip(maps, xs, strict=True):
            g = np.zeros(ans.shape + x.shape) if m is None else m.pull(eye).reshape(
                ans.shape + x.shape)
            grads.append(g)
        return ans, dini, grads[0] if len(xs) == 1 else tuple(grads)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


# ----- numpy dispatch tables (filled by asd.library; the engine only looks them up) -----

UFUNCS: dict[np.ufunc, Callable] = {}
UFUNC_REDUCE: dict[np.ufunc, Callable] = {}
UFUNC_ACCUMULATE: dict[np.ufunc, Callable] = {}
UFUNC_AT: dict[np.ufunc, Callable] = {}  # ufunc.at, written functionally: (a, indices, b) -> new a
FUNCTIONS: dict[Callable, Callable] = {}
METHODS: dict[str, Callable] = {}


def register_numpy(numpy_fn, fn: Callable) -> None:
    """Route ``numpy_fn`` (a ufunc or function) on traced arrays to ``fn``."""
    if isinstance(numpy_fn, np.ufunc):
        UFUNCS[numpy_fn] = fn
    else:
        FUNCTIONS[numpy_fn] = fn


# "scipy.special" -> the module that registers rules for its ufuncs, imported the first time
# a traced array meets one of them (so `import asd` does not import scipy)
LAZY_UFUNC_MODULES: dict[str, str] = {}


def ufunc_rule(ufunc) -> Callable | None:
    """The registered implementation of ``ufunc`` on traced arrays, loading the module that
    registers it (`LAZY_UFUNC_MODULES`) on first use; None if there is none."""
    fn = UFUNCS.get(ufunc)
    if fn is None and LAZY_UFUNC_MODULES:
        module = qualified_name(ufunc).rpartition(".")[0]
        target = LAZY_UFUNC_MODULES.get(module)
        if target is not None:
            import importlib

            importlib.import_module(target)  # the import lock makes other threads wait
            LAZY_UFUNC_MODULES.pop(module, None)
            fn = UFUNCS.get(ufunc)
    return fn


# "numpy.array" -> what to call instead; filled by asd.library next to the dispatch tables
ALTERNATIVES: dict[str, str] = {}


def qualified_name(fn) -> str:
    """``numpy.linalg.solve``, not ``numpy.solve``: the name a user finds in the docs.

    A ufunc has no module; it is named after the loaded module that exports it (numpy first,
    then scipy.special, whose functions are ufuncs too)."""
    name = getattr(fn, "__name__", repr(fn))
    if isinstance(fn, np.ufunc):
        for module in ("numpy", "scipy.special"):
            if getattr(sys.modules.get(module), name, None) is fn:
                return f"{module}.{name}"
        return name
    module = getattr(fn, "__module__", None) or "numpy"
    return f"{module}.{name}"


def registration_snippet(fn) -> str:
    """Python that registers a rule for ``fn``; the user writes only the derivative."""
    qual = qualified_name(fn)
    module, name = qual.rsplit(".", 1)
    ref = "np" + qual[len("numpy"):] if module.split(".")[0] == "numpy" else qual
    head = "    import numpy as np\n" + ("" if ref != qual else f"    import {module}\n")
    head += "    import asd.extend\n\n"
    if isinstance(fn, np.ufunc) and fn.nin == 1:
        return (f"{head}    def {name}_derivative(x, ans):  # ans = {ref}(x), reusable\n"
                f"        return ...  # the derivative of {name} at x, elementwise\n\n"
                f"    asd.extend.defsmooth({name!r}, {ref}, {name}_derivative, numpy={ref})\n")
    return (f"{head}    {name}_p = asd.extend.Primitive({name!r}, {ref})\n\n"
            f"    @{name}_p.defrule\n"
            f"    def {name}_rule(xs, dxs, **params):\n"
            f"        ans = {ref}(*xs, **params)\n"
            f"        jacobians = ...  # d ans / d xs[i], of shape (ans.size, xs[i].size)\n"
            f"        maps = [asd.extend.Dense(J, np.shape(x), np.shape(ans))\n"
            f"                for J, x in zip(jacobians, xs)]\n"
            f"        return ans, asd.extend.FanIn(*maps)\n\n"
            f"    asd.extend.register_numpy({ref}, {name}_p)\n")


def unsupported(op) -> UnsupportedError:
    """The refusal of an operation asd has no rule for: its real name, what to use instead
    where asd has it, and, for a function, the registration that would add the rule.

    ``op`` is the function itself, or a description (``"numpy.add.reduceat"``)."""
    what = op if isinstance(op, str) else qualified_name(op)
    message = f"{what} has no asd rule, so it cannot run on traced arrays. "
    instead = ALTERNATIVES.get(what)
    if instead:
        message += f"Use {instead}. "
    if isinstance(op, str):
        return UnsupportedError(message + "To add a rule: asd.extend.Primitive, its defrule, "
                                "then asd.extend.register_numpy (docs/design.md).")
    if isinstance(op, np.ufunc) and not any("d" in t.split("->")[1] for t in op.types):
        return UnsupportedError(message + "Its results are integers or booleans, so there is "
                                "nothing to differentiate: compute it on plain arrays, outside "
                                "the differentiated function.")
    return UnsupportedError(message + ("Or register" if instead else "Register") + " a rule:\n\n"
                            + registration_snippet(op))


def numpy_only(prim: Primitive, libs: str) -> UnsupportedError:
    """The error for a primitive whose rule is not yet written against the array API."""
    return UnsupportedError(
        f"{prim.name} met {libs} arrays, but its rule runs on numpy arrays only so far (it is "
        "not yet ported to the array API). Pass numpy arrays, or port the rule and declare "
        "it with Primitive(..., array_api=True)."
    )


# ----- binding: plain numpy when nothing is traced, the owning trace otherwise -----

def bind(prim: Primitive, args: tuple, params: dict):
    trace = None
    for a in args:
        if isinstance(a, Traced):
            t = a._trace
            if trace is not None and t is not trace:
                raise NestingError(
                    f"{prim.name}: traced values from two different sweeps met (a value kept "
                    "from an earlier call, or nested differentiation, which asd does not "
                    "support). Pass every traced value in as an argument of the function."
                )
            trace = t
    if trace is None:
        return prim.impl(*args, **params)
    return trace.apply(prim, args, params)


# ----- the rule context: lets a rule report events without knowing about programs -----

class _RuleContext(threading.local):
    """The sweep and node whose rule is running, per thread (sweeps in threads stay apart)."""

    def __init__(self):
        self.trace = None
        self.node = None


rule_context = _RuleContext()


def record_degenerate_tie(count: int = 1) -> None:
    """Called by a rule that met ``h == 0`` and ``h_dot == 0`` in a user-written branch."""
    trace = rule_context.trace
    if trace is not None and count:
        trace.record_degenerate(rule_context.node, int(count))


class Jump:
    """Where a rule's value jumps (`record_jump`): the output's entries on the jump
    (``mask``), the value at the point (``at``) and the one-sided limits (``sides``, one
    array per side), all broadcast to the output's shape. The rule itself returns the value
    on the side the sweep enters, so its linearization is the one along the ray.
    ``on_ray`` (None, or a mask within ``mask``): the entries whose input stays on the jump
    all along the ray (`ray_compare`'s ``beyond``: a further direction chose the side), where
    the value the ray sees is ``at``, not the side entered."""

    __slots__ = ("at", "mask", "sides", "fix", "on_ray")

    def __init__(self, at, mask, sides, fix: str | None = None, on_ray=None):
        self.at, self.mask, self.sides = np.asarray(at), np.asarray(mask, bool), tuple(
            np.asarray(s) for s in sides)
        self.fix = fix
        self.on_ray = None if on_ray is None else self.mask & np.broadcast_to(
            np.asarray(on_ray, bool), self.mask.shape)

    @classmethod
    def staged(cls, at, mask, sides, fix: str | None = None) -> Jump:
        """A jump met by a staged sweep: its arrays stay in their library (traced values
        cannot come to the host); the sweep counts its entries, never replays them."""
        jump = cls.__new__(cls)
        jump.at, jump.mask, jump.sides, jump.fix, jump.on_ray = at, mask, tuple(sides), fix, None
        return jump


def record_jump(at, mask, sides, fix: str | None = None, still=None,
                still_if_flat: bool = False, on_ray=None, crossing: tuple | None = None,
                entered=None) -> None:
    """Report that the running rule's value jumps at the entries ``mask`` (see `Jump`).

    The engine taints the node: a differentiated output it reaches is refused with
    `NotLipschitzError` unless re-evaluating the output with every combination of the
    jumps' sides (and with their values at the point) gives the same value, i.e. the
    composite is continuous there (``x * sign(x)`` at 0). ``fix`` replaces the refusal's
    generic advice (use a continuous primitive) where the rule knows better.

    A rule states its jump mask without testing it (no Python branch on the data): an eager
    sweep records the jump only where some entry holds (then on the host); a staged sweep
    cannot replay an output across it, so a probe flags the entries as ties (the call then
    runs the full staged sweep) and the full sweep records them, and `asd.core.staged.pull`
    counts the entries of every jump that reaches a differentiated output as undecided.

    ``still`` (optional, within ``mask``): the entries whose input stays on the jump along
    the ray (`ray_compare` returned 0: equal near ``x`` on the pieces the sweep selected).
    An eager sweep drops them where that means equal on a neighbourhood: where every node
    above chose its piece by the values alone (`Trace.settled`: no tie, no jump), so the
    input does not move near ``x`` and the jump is never crossed (a clipped or dead input).
    A tie of the rule's own that is only flat (first order agrees along every direction
    tried, the series unproven) keeps them, unless ``still_if_flat`` (the quotient of
    ``x % x``, whose series the engine cannot prove constant).

    ``on_ray`` (optional, within ``mask``; `ray_compare`'s ``beyond`` mask): the entries
    whose input stays on the jump all along the ray, their side chosen by a further
    direction. The engine then checks the output's tangent along ``v`` too: with those
    entries at their value at the point (what the ray sees) and on every side it must be
    the sweep's, else the output jumps arbitrarily near ``x`` and is refused.

    ``crossing`` (optional, with two ``sides``: below, then above the jump): the positions
    among the rule's inputs of ``a`` (and ``b``) whose difference ``a - b`` crosses the jump
    at 0. An eager sweep drops the entries where every side ``a - b`` can reach near ``x``
    equals ``at`` (`Trace.unreachable`: ``ceil`` of an input a saturated clip caps at the
    integer it sits on never jumps). ``entered`` (the sign of ``a - b`` along the ray, the
    side the rule took) must be 0 or a side ``a - b`` can reach there, else the entry stays
    (the value the rule returned is then checked as any side is).
    """
    trace = rule_context.trace
    if trace is None:
        return
    mode = getattr(trace, "staged", False)
    if mode == "values":
        trace.flag_tie(rule_context.node, mask)
        return
    if mode:
        trace.record_jump(rule_context.node, Jump.staged(at, mask, sides, fix))
        return
    xp = backend.namespace(mask)
    if not (bool(np.any(mask)) if xp is np else bool(xp.any(mask))):
        return
    host = backend.to_host
    mask = host(mask)
    if still is not None:
        still = np.broadcast_to(host(still), np.shape(mask))
        settled = getattr(trace, "settled", None)
        if still.any() and settled is not None and settled(rule_context.node,
                                                           flat_ok=still_if_flat):
            mask = mask & ~still
            if not mask.any():
                return
    unreachable = getattr(trace, "unreachable", None)
    if crossing is not None and len(sides) == 2 and unreachable is not None:
        mask = mask & ~unreachable(rule_context.node, crossing, host(at),
                                   tuple(host(s) for s in sides), mask,
                                   None if entered is None else host(entered))
        if not mask.any():
            return
    trace.record_jump(rule_context.node,
                      Jump(host(at), mask, tuple(host(s) for s in sides), fix, on_ray))


DECIDED_BY = ("tangent", "series", "lexicographic", "equal", "flat", "tolerance")
"""How a tie can be decided: the tangent along v, the exact series along the ray, a further
direction of the lexicographic sequence, exact equality on a neighbourhood (every branch
agrees), flat (first order agrees along every direction but the series could not be proven:
the branches' gradients agree almost surely), or a rounding tolerance (a near-tie the float
inputs cannot resolve)."""


def record_tie_decision(how: str, count: int = 1) -> None:
    """Report that the running rule decided ``count`` tied entries by ``how`` (`DECIDED_BY`).

    The engine's tie service reports its own decisions; a rule calls this only for ties it
    decides another way (a projection's rounding tolerance), so diagnostics see every tie.
    """
    if how not in DECIDED_BY:
        raise ValueError(f"how must be one of {DECIDED_BY}, got {how!r}")
    trace = rule_context.trace
    if trace is not None and count:
        trace.record_decision(rule_context.node, how, int(count))


__all__ = [
    "ASDError",
    "FixedTangent",
    "Jump",
    "Primitive",
    "ZeroTangent",
    "bind",
    "record_degenerate_tie",
    "record_jump",
    "record_tie_decision",
    "register_numpy",
    "unsupported",
]
