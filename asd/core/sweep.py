"""The sweeps of Algorithm 6: a recording forward sweep with lazy tangents, then reverse mode.

``Trace`` is both the recorder and the forward sweep: when an operation on traced values
runs, its node is appended and its rule is called at once with the primal inputs and lazy
tangents, so the primal runs exactly once. A tangent is computed only when a rule that meets
a tie asks for it, and then only for the ancestors that do not have one yet (memoized).
The reverse sweep pulls a cotangent back through the stored branch linearizations.

A sweep whose inputs are torch or JAX arrays (``Trace.like`` holds one) keeps its values,
tangents and cotangents in that library and on its device (`asd.core.backend`); only
primitives declared ``array_api`` may run in it (`Trace.apply` refuses the others).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from asd.core import backend
from asd.core.linear import (
    Diagonal,
    FanIn,
    Index,
    Mask,
    Reroute,
    Reshape,
    Take,
    Transpose,
    Zero,
)
from asd.core.primitive import (
    ConstantTangent,
    Primitive,
    ZeroTangent,
    numpy_only,
    rule_context,
)
from asd.core.program import Literal, Node, Program, format_node
from asd.core.tracing import Tracer
from asd.errors import (
    ASDError,
    NonFiniteError,
    NotLipschitzError,
    ShapeError,
    StagedUnsupported,
)


def tangent_at(dx, index, shape: tuple) -> np.ndarray:
    """The entries ``index`` (a mask in the output's shape) of an input's tangent, broadcast."""
    if getattr(dx, "is_zero", False):
        if index is not None and not backend.is_host(index):
            return backend.zeros((int(backend.namespace(index).sum(index)),), index,
                                 backend.floating(backend.zeros((), index)).dtype)
        return np.zeros(int(np.count_nonzero(index)) if index is not None else shape)
    in_shape = tuple(getattr(dx, "shape", shape))
    if index is not None and not backend.is_host(index):
        if in_shape == tuple(shape):
            return dx(index)  # the tied entries only: the engine counts them, as on numpy
        # another library's mask on a broadcast operand: the full (memoized) tangent,
        # broadcast and read on the device
        t = dx()
        if tuple(t.shape) != tuple(shape):
            t = backend.namespace(t).broadcast_to(t, tuple(shape))
        return t[index]
    if index is not None and in_shape == tuple(shape):
        return dx(index)  # ask for the tied entries only: the engine counts them as ties
    if index is not None:
        # A broadcast operand: ask for the input entries some tied output entry reads.
        lead = len(shape) - len(in_shape)
        wide = tuple(lead + i for i, n in enumerate(in_shape) if n == 1 and shape[lead + i] != 1)
        need = np.any(index, axis=tuple(range(lead)) + wide, keepdims=True)
        need = need.reshape(need.shape[lead:])
        part = backend.to_host(dx(need))  # a host mask is answered on the host
        t = np.zeros(in_shape, part.dtype)
        t[need] = part
        return np.broadcast_to(t, shape)[index]
    t = dx()
    return t if np.shape(t) == shape else np.broadcast_to(t, shape)



class LazyTangent:
    """The directional derivative of node ``k``, computed on first call and memoized.

    ``dx(mask)`` with a bool mask of the node's shape asks for those entries only: the
    request travels upstream through maps that can narrow it (see ``Trace.tangent_at``).
    """

    __slots__ = ("trace", "k")
    is_zero = False

    def __init__(self, trace: Trace, k: int):
        self.trace, self.k = trace, k

    @property
    def shape(self) -> tuple:
        return self.trace.nodes[self.k].shape

    def __call__(self, index=None) -> np.ndarray:
        trace = self.trace
        if index is None:
            t = trace.tangent(self.k)
        elif (type(index) is np.ndarray and index.dtype == bool and trace.like is None
              and index.shape == trace.nodes[self.k].shape):
            t = trace.tangent_at(self.k, index)
        else:
            t = trace.tangent(self.k)
            if type(index) is np.ndarray and not backend.is_host(t):
                index = backend.from_host(index, t)  # a host mask, read on the device
            t = t[index]
        if rule_context.trace is trace:
            trace.record_tie(rule_context.node, backend.size(t))
        return t


class LazyDirection:
    """A random sweep direction whose leaves are drawn on first use, each from its own stream.

    A program that meets no tie never draws it, and a tie draws only the leaves its tangent
    reads (for a large model the draw costs more than a forward pass). Each leaf holds
    standard normals; branch choices do not change under positive scaling, so the sweep uses
    them as they are and ``normalized()`` gives the direction on the unit sphere (uniformly
    distributed, as the leaves are independent normals) when a result reports it.
    """

    __slots__ = ("streams", "dtypes", "shapes", "leaves", "likes")

    def __init__(self, seed, shapes: list[tuple], dtypes: list, likes: list | None = None):
        if isinstance(seed, np.random.Generator | np.random.SeedSequence):
            self.streams = seed.spawn(len(shapes))  # a generator or seed sequence as given
        else:  # spawned on the first draw (`stream`): a call that meets no tie never does
            self.streams = np.random.SeedSequence(seed)
        self.shapes, self.dtypes = shapes, dtypes
        # the arguments, where they are another library's arrays: each leaf is drawn on the
        # host with numpy's generator (the same direction for every library) and moved there
        self.likes = likes
        self.leaves: list = [None] * len(shapes)

    def leaf(self, i: int) -> np.ndarray:
        if self.leaves[i] is None and self.likes is not None and not backend.is_host(
                self.likes[i]):
            like = self.likes[i]
            host_dtype = np.float32 if str(like.dtype).endswith("float32") else np.float64
            rng = np.random.default_rng(self.stream(i))
            self.leaves[i] = backend.from_host(
                rng.standard_normal(self.shapes[i], dtype=host_dtype), like, "like")
        if self.leaves[i] is None:
            rng = np.random.default_rng(self.stream(i))
            # float32 leaves draw float32 normals: half the cost of the draw
            dtype = np.float32 if self.dtypes[i] == np.float32 else np.float64
            self.leaves[i] = np.asarray(rng.standard_normal(self.shapes[i], dtype=dtype)
                                        ).astype(self.dtypes[i], copy=False)
        return self.leaves[i]

    def stream(self, i: int) -> np.random.SeedSequence:
        """Leaf ``i``'s seed sequence: the ``i``-th child of the call's seed sequence, the
        children spawned together on the first draw (the same children as spawned at once:
        a SeedSequence's ``k``-th child depends only on its entropy and ``k``)."""
        if isinstance(self.streams, np.random.SeedSequence):
            self.streams = self.streams.spawn(len(self.shapes))
        return self.streams[i]

    def __iter__(self):
        return (functools.partial(self.leaf, i) for i in range(len(self.leaves)))

    def normalized(self) -> list[np.ndarray]:
        leaves = [self.leaf(i) for i in range(len(self.leaves))]
        norm = np.sqrt(sum(_square_norm(d) for d in leaves))
        if norm == 0.0:
            raise ValueError("the differentiated arguments are empty")
        return [d / d.dtype.type(norm) if backend.is_host(d) else d / float(norm)
                for d in leaves]

    def scale(self) -> float:
        """The factor from the drawn leaves to the unit direction."""
        return 1.0 / np.sqrt(sum(_square_norm(d) for d in map(self.leaf,
                                                             range(len(self.leaves)))))


def _square_norm(d) -> float:
    if backend.is_host(d):
        return float(np.vdot(d, d))
    return float(backend.namespace(d).sum(d * d))


class LexDirections:
    """The directions ``w1, w2, ...`` after ``v`` that decide ties persisting along the ray.

    ``given[l]`` holds level ``l + 1`` as one array per differentiated leaf (from
    ``directions=``); after them ``random`` more levels are drawn lazily, float64 normals from
    their own stream of ``seed`` (0 when None, so repeated calls agree), apart from the draw
    of ``v``. A random level decides almost surely every tie that is not an equality near ``x``.
    """

    __slots__ = ("given", "seed", "drawn", "levels")

    def __init__(self, given: list[list[np.ndarray]] = (), seed=None, random: int = 1):
        self.given = [list(level) for level in given]
        self.seed = seed
        self.drawn: dict[tuple[int, int], np.ndarray] = {}
        self.levels = len(self.given) + random

    def leaf(self, level: int, i: int, shape: tuple) -> np.ndarray:
        """Level ``level`` (1-based) of leaf ``i``."""
        if level <= len(self.given):
            return self.given[level - 1][i]
        key = (level, i)
        if key not in self.drawn:
            if not isinstance(self.seed, np.random.SeedSequence):
                self.seed = np.random.SeedSequence(0 if self.seed is None else self.seed)
            stream = np.random.SeedSequence(self.seed.entropy,
                                            spawn_key=(*self.seed.spawn_key, level, i))
            self.drawn[key] = np.random.default_rng(stream).standard_normal(shape)
        return self.drawn[key]


def missing_cone(nodes: list, k: int, known) -> list[int]:
    """Node ``k`` and its active ancestors not in ``known``, in program order: what a
    memoized sweep from the inputs to ``k`` still has to compute."""
    todo, stack = set(), [k]
    while stack:
        j = stack.pop()
        if j in todo or j in known:
            continue
        todo.add(j)
        stack.extend(r for r in nodes[j].args if type(r) is int and nodes[r].active)
    return sorted(todo)


def push_direction(nodes: list, lin_of, seed_of, k: int, memo: dict,
                   like=None, dargs: dict | None = None) -> np.ndarray:
    """Node ``k``'s derivative along a direction given at the inputs (``seed_of(j)``), pushed
    through the linearizations ``lin_of(j)`` of its ancestors; ``memo`` keeps every node's
    (``like``: an array of the sweep's library, when it is not numpy; ``dargs``: the nodes
    whose linearization reads other nodes than their arguments, `Trace.dargs`)."""
    if k in memo:
        return memo[k]
    for j in missing_cone(nodes, k, memo):
        node = nodes[j]
        if node.prim is None:
            memo[j] = seed_of(j)
            continue
        args = node.args if not dargs or j not in dargs else dargs[j]
        ins = [memo[r] if type(r) is int and nodes[r].active else None for r in args]
        lin = lin_of(j)
        t = None
        if type(lin) is FanIn:
            t = lin.push(*ins)
        elif lin is not None and ins[0] is not None:
            t = lin.push(ins[0])
        if t is None:
            t = np.zeros(node.shape) if like is None else backend.zeros(node.shape, like)
        memo[j] = t
    return memo[k]


_CONCRETIZATION = frozenset({"TracerBoolConversionError", "ConcretizationTypeError",
                             "TracerArrayConversionError", "TracerIntegerConversionError"})
"""JAX's errors for a Python value read off a traced array: in a staged sweep they mean a rule
that decides on the host, refused by name (`Trace.run_rule`)."""

# A narrowed request recurses once per node; deeper than this, the iterative full sweep
# is used instead (it never nears Python's recursion limit).
MAX_REQUEST_DEPTH = 150

MAX_JUMP_CELLS = 8
MAX_RAY_VARIANTS = 64
"""Most re-sweeps the tangent check of jumps the ray stays on tries (`Trace.replay_tangents`);
past it such a jump reaching the output is refused."""
"""Most entries on jumps whose sides a continuity check tries (2**8 re-evaluations); past
it a jump reaching the output is refused."""


def _off_its_jumps(node: Node, args: list) -> bool:
    """Whether node ``node`` of one traced input, evaluated at ``args``, sits on none of its
    jumps (its value there is then its limit from every side); False where unknown."""
    jump_at = node.prim.jump_at
    if jump_at is None or len(args) != 1:
        return False
    try:
        with np.errstate(all="ignore"):
            return not bool(np.any(jump_at(np.asarray(args[0]), **node.params)))
    except Exception:  # a parameter the test cannot take: unknown
        return False


class Trace:
    """One sweep: nodes, primal values, branch linearizations and memoized tangents."""

    __slots__ = ("nodes", "values", "lins", "tangents", "seeds", "partial", "wants", "taint",
                 "degenerate", "ties", "decisions", "lex", "leaf_index", "lex_tangents", "jumps",
                 "series_memo", "magnitudes", "like", "guards", "dargs", "staged", "undecided",
                 "tied", "running_args", "lex_leaves", "unjumped", "weak",
                 "weak_sensitive")

    def __init__(self, lex: LexDirections | None = None):
        self.nodes: list[Node] = []
        # node -> whether it is a Python float (numpy types those weakly, NEP 50, so that
        # `x - np.float32(c)` computes in float32): the inputs that came as Python floats
        # (True) or as float64 scalars (False: one would be weak had it come as a Python
        # float), and what Python arithmetic made of them alone; `weak_sensitive`: an
        # operation met a narrower dtype there, so the program depends on which were weak
        self.weak: dict[int, bool] = {}
        self.weak_sensitive = False
        self.values: list = []
        self.lins: list = []
        self.tangents: list = []  # full tangents, None until computed
        self.seeds: dict = {}  # input node -> callable drawing its tangent (LazyDirection)
        self.partial: dict = {}  # node -> (known mask, values): entries computed on demand
        self.wants: list = []
        self.taint: list = []
        self.degenerate: dict[int, int] = {}
        self.ties: dict[int, int] = {}  # node -> entries its rule asked the tangent of
        self.decisions: dict[tuple[int, str], int] = {}  # (node, how) -> tied entries decided
        self.lex = LexDirections() if lex is None else lex
        self.leaf_index: dict[int, int] = {}  # active input node -> its leaf number
        self.lex_tangents: dict[int, dict[int, np.ndarray]] = {}  # level -> node -> tangent
        self.lex_leaves: dict[tuple[int, int], Any] = {}  # (input, level) -> its part of w
        self.series_memo: dict = {}  # (depth, order) -> node -> series along the ray
        self.magnitudes: dict = {}  # node -> |maps| pushed on |v| (None: a map has no bound)
        self.jumps: dict = {}  # node -> Jump its rule met (None: a discontinuity without rule)
        self.like = None  # a torch/JAX input value, when the sweep runs in that library
        self.guards: dict = {}  # node -> [(read, result)]: values the trace itself depends on
        self.unjumped: set = set()  # nodes read as constants because no jump reaches them
        # node -> the nodes its linearization reads, where a rule rerouted it (`Reroute`)
        self.dargs: dict[int, tuple] = {}
        # a staged sweep decides ties as array operations only (`asd.core.ties.ray_compare`):
        # "full" by first-order signs along v, w1, ..., counting here, per node, the tied
        # entries they leave open (device scalars); "values" by the values alone, flagging
        # in ``tied`` the nodes that meet a tie (a probe: is any tangent work needed at all?)
        self.staged: str | bool = False
        self.undecided: dict[int, Any] = {}
        self.tied: dict[int, Any] = {}
        self.running_args: tuple = ()  # the inputs of the node whose rule is running

    def redecided(self, nodes: Sequence[int]) -> Trace:
        """A copy of this (probe) sweep in which the rules of ``nodes`` run again, staged
        ("full"), on the values already computed: the other nodes keep their linearizations,
        which their values fixed. Each re-run reads the tangents of its inputs, pushed
        through the maps already re-decided before it (program order), so the choices
        compose as a full staged sweep's do, without recomputing the primal."""
        t = Trace(self.lex)
        t.nodes, t.values, t.lins = self.nodes, list(self.values), list(self.lins)
        t.wants, t.taint = list(self.wants), list(self.taint)
        t.leaf_index, t.like, t.dargs = dict(self.leaf_index), self.like, dict(self.dargs)
        t.tangents = [self.tangents[j] if j in self.leaf_index else None
                      for j in range(len(self.nodes))]
        t.seeds = {j: s for j, s in self.seeds.items()}
        t.staged = "full"
        nodes_ = self.nodes
        for k in sorted(nodes):
            node = nodes_[k]
            xs = [t.values[r] if type(r) is int else r.value for r in node.args]
            wants = [type(r) is int and nodes_[r].active for r in node.args]
            taint = next((t.taint[r] for r in node.args if type(r) is int), None)
            # the rule runs where an input moves (a discontinuous node's own output does not
            # move, yet its rule states its jump)
            _, lin, _, t.taint[k] = t.run_rule(k, node.prim, node.args, node.params, xs,
                                               wants, any(wants), taint)
            t.lins[k] = lin if node.active else None
        return t

    # ----- recording (the forward sweep) -----

    def new_input(self, value, tangent=None, *, active: bool = True,
                  weak: bool = False) -> Tracer:
        """A traced input; ``tangent`` is an array, None, or a callable drawing it lazily;
        ``weak``: it came as a Python float (`weak`)."""
        k = len(self.nodes)
        if weak or (type(value) is np.ndarray and value.shape == () and value.dtype == np.float64
                    and active):
            self.weak[k] = weak
        if active:
            self.leaf_index[k] = len(self.leaf_index)
        if callable(tangent):
            self.seeds[k], tangent = tangent, None
        if backend.is_foreign(value):
            if self.like is None:
                self.like = value
            self.nodes.append(Node(None, (), {}, tuple(value.shape), value.dtype, active))
        else:
            self.nodes.append(Node(None, (), {}, np.shape(value), np.result_type(value),
                                   active))
        self.values.append(value)
        self.lins.append(None)
        self.tangents.append(tangent)
        self.wants.append(())
        self.taint.append(None)
        return Tracer(self, k, value)

    def apply(self, prim: Primitive, args: tuple, params: dict) -> Tracer:
        nodes, taints = self.nodes, self.taint
        xs, refs, wants = [], [], []
        active = False
        taint = None
        for a in args:
            if type(a) is Tracer:
                j = a._id
                xs.append(a.value)
                refs.append(j)
                if nodes[j].active:
                    active = True
                    wants.append(True)
                else:
                    wants.append(False)
                if taint is None:
                    taint = taints[j]
            else:
                if self.like is None:
                    if backend.is_foreign(a):
                        self.like = a
                elif type(a) is np.ndarray and a.dtype.kind in "biuf":
                    # a numpy constant in another library's sweep moves to its device once
                    a = backend.from_host(a, self.like)
                xs.append(a)
                refs.append(Literal(a))
                wants.append(False)
        k = len(nodes)
        refs = tuple(refs)
        ans, lin, active, taint = self.run_rule(k, prim, refs, params, xs, wants, active, taint)
        try:
            shape, dtype = ans.shape, ans.dtype
        except AttributeError:
            shape, dtype = np.shape(ans), np.result_type(ans)
        if self.like is not None:
            shape = tuple(shape)
        nodes.append(Node(prim, refs, params, shape, dtype, active))
        self.values.append(ans)
        self.lins.append(lin)
        self.tangents.append(None)
        self.wants.append(wants)
        taints.append(taint)
        return Tracer(self, k, ans)

    def run_rule(self, k: int, prim: Primitive, refs: tuple, params: dict, xs: list,
                 wants: list, active: bool, taint):
        """Node ``k``'s value and linearization from its inputs' values ``xs``: the rule when
        an input moves with the direction, else the plain implementation. Returns
        ``(value, lin, active, taint)``; shared by recording (`apply`) and compiled replay
        (`replay_node`), so both run exactly the same code."""
        if self.like is not None and not prim.array_api:
            error = numpy_only(prim, backend.library(backend.namespace(self.like)))
            if self.staged:  # inside a transformation: the caller may run it on the host
                error = StagedUnsupported(str(error))
            raise error.at(self.describe(prim, refs, params, k))
        lin = None
        nodes = self.nodes
        if prim.stops_gradient and taint is not None:  # a constant: the value at the point
            xs = [self.point_value(r) if type(r) is int else x for r, x in zip(refs, xs)]
        rule_context.trace, rule_context.node = self, k
        self.running_args = refs  # node k is recorded after its rule (`settled` reads them)
        try:
            if active and not prim.stops_gradient and (prim.rule is not None
                                                       or not prim.discontinuous):
                if prim.rule is None:
                    raise ASDError(f"primitive {prim.name} has no ASD rule; attach one with "
                                   f"@{prim.name}_primitive.defrule")
                dxs = [
                    LazyTangent(self, r) if w
                    else ZeroTangent(nodes[r].shape, nodes[r].dtype) if type(r) is int
                    else ConstantTangent(x)
                    for r, x, w in zip(refs, xs, wants)
                ]
                ans, lin = prim.rule(xs, dxs, **params)
                if type(lin) is Reroute:
                    lin = self.reroute(k, refs, wants, lin)
                elif len(refs) > 1 and type(lin) is not FanIn and not prim.discontinuous:
                    raise ASDError(f"the rule of {prim.name} takes {len(refs)} inputs and "
                                   "must return a FanIn of one map per input")
            else:
                ans = prim.impl(*xs, **params)
        except ASDError as e:
            raise e.at(self.describe(prim, refs, params, k)) from None
        except Exception as e:
            if self.staged and type(e).__name__ in _CONCRETIZATION:
                raise StagedUnsupported(
                    f"{self.describe(prim, refs, params, k)}: the rule of {prim.name} needs a "
                    "concrete value to decide (a tie on the host, a check that may refuse), "
                    "so it cannot run inside jax.jit / jax.vmap yet. Call asd.jax outside the "
                    "transformation for this program (the eager sweep is exact), or write the "
                    "step with primitives that stage (relu, abs, maximum, minimum, where, "
                    "max, clip).") from None
            if not isinstance(e, ValueError):
                raise
            shapes = ", ".join(str(np.shape(x)) for x in xs)
            raise ShapeError(
                f"{self.describe(prim, refs, params, k)}: {e} (input shapes {shapes}). Make the "
                "operand shapes agree, e.g. with reshape or expand_dims."
            ) from e
        finally:
            rule_context.trace = None
        if prim.stops_gradient:
            taint, active = None, False
        else:
            if prim.discontinuous and active and prim.rule is None:
                self.jumps[k] = None  # no rule to say where it jumps: a jump everywhere
            if k in self.jumps and taint is None:
                taint = k
            if prim.discontinuous:
                active, lin = False, None
                self.forget_ties(k)
        return ans, lin, active, taint

    def reroute(self, k: int, refs: tuple, wants: list, rerouted: Reroute) -> FanIn:
        """Record that node ``k``'s linearization reads the nodes ``rerouted.refs`` besides
        its arguments (each an active node before ``k``); ``wants`` grows to match. Returns
        the map, a `FanIn` over the arguments and then those nodes."""
        extra = tuple(rerouted.refs)
        if any(type(r) is not int or r >= k or not self.nodes[r].active for r in extra):
            raise ASDError(f"a rule rerouted node %{k}'s linearization to {extra}: each must "
                           "be an earlier node that moves with the direction")
        if len(rerouted.lin.maps) != len(refs) + len(extra):
            raise ASDError(f"a rerouted linearization of node %{k} needs one map per argument "
                           f"and per node it reads ({len(refs) + len(extra)}), got "
                           f"{len(rerouted.lin.maps)}")
        self.dargs[k] = tuple(refs) + extra
        wants.extend([True] * len(extra))
        return rerouted.lin

    # ----- compiled replay (`asd.core.jit`): the recorded nodes, new input values -----

    def replay_input(self, node: Node, value, tangent=None) -> None:
        """Input ``node`` (the next one) at a new value; see `new_input`."""
        k = len(self.values)
        if node.active:
            self.leaf_index[k] = len(self.leaf_index)
        if callable(tangent):
            self.seeds[k], tangent = tangent, None
        if self.like is None and not backend.is_host(value):
            self.like = value
        self.values.append(value)
        self.lins.append(None)
        self.tangents.append(tangent)
        self.wants.append(())
        self.taint.append(None)

    def replay_node(self, k: int, node: Node):
        """Node ``k`` of the recorded program at the replay's values: the same `run_rule`
        the recording ran, without a tracer or a new node. Returns the value."""
        nodes, values, taints = self.nodes, self.values, self.taint
        xs, wants, active, taint = [], [], False, None
        for r in node.args:
            if type(r) is int:
                xs.append(values[r])
                w = nodes[r].active
                wants.append(w)
                active = active or w
                if taint is None:
                    taint = taints[r]
            else:
                xs.append(r.value)
                wants.append(False)
        ans, lin, _, taint = self.run_rule(k, node.prim, node.args, node.params, xs, wants,
                                           active, taint)
        values.append(ans)
        self.lins.append(lin if node.active else None)
        self.tangents.append(None)
        self.wants.append(wants)
        taints.append(taint)
        return ans

    def guard(self, k: int, read, result) -> None:
        """Record that the program was built from ``read(value of node k) == result``: a
        library function chose its nodes from a value (a sign, a check), so a compiled
        replay whose value reads differently must trace again."""
        self.guards.setdefault(k, []).append((read, result))

    def guard_unjumped(self, k: int) -> None:
        """Record that the program was built from node ``k`` read as a constant because no
        jump reaches it (a plain numpy array indexed by ``argmax``, an integer cast): a jump
        reaching it in a compiled replay may leave the reading (and its value guard) as it
        was, so the replay traces again, where the read is refused as it is uncompiled."""
        self.unjumped.add(k)

    def describe(self, prim, refs, params, k) -> str:
        return format_node(k, Node(prim, refs, params, None, None, None))

    def record_degenerate(self, k: int, count: int) -> None:
        self.degenerate[k] = self.degenerate.get(k, 0) + count

    def forget_ties(self, k: int) -> None:
        """Drop node ``k``'s tie reports: a discontinuous node decides its side only for the
        value it passes on (``where`` decides and reports the same tie when it reads a
        comparison), and its output has no linearization to re-decide."""
        self.ties.pop(k, None)
        self.degenerate.pop(k, None)
        for key in [key for key in self.decisions if key[0] == k]:
            del self.decisions[key]

    def record_jump(self, k: int, jump) -> None:
        self.jumps[k] = jump

    def settled(self, k: int, flat_ok: bool = False) -> bool:
        """Whether every node above node ``k`` (its inputs' cone) chose its piece by the
        values alone: none met a tie, decided one, or sits on a jump. Then the pieces hold
        on a neighbourhood of ``x``, so an input of ``k`` that the tie contract finds equal
        to a jump's location along the ray (through every further direction) is equal to
        it near ``x``: it never crosses the jump (`asd.core.primitive.record_jump`).
        Node ``k``'s own tie must not be flat (only first order agreed: not proven equal)
        unless ``flat_ok``.
        """
        if not flat_ok and (k, "flat") in self.decisions:
            return False
        decided = {j for j, _ in self.decisions}
        nodes, seen = self.nodes, set()
        args = nodes[k].args if k < len(nodes) else self.running_args
        stack = [r for r in args if type(r) is int]
        while stack:
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            if j in self.ties or j in self.jumps or j in decided or j in self.degenerate:
                return False
            if nodes[j].prim is not None and not self._dead(j):
                stack.extend(r for r in nodes[j].args if type(r) is int)
        return True

    def unreachable(self, k: int, crossing: tuple, at, sides, mask,
                    entered=None) -> np.ndarray:
        """The entries of ``mask`` that are no jump near ``x``: every side of the jump that
        the switching quantity ``a - b`` can reach on a neighbourhood of ``x`` (``sides``:
        its value as ``a - b`` decreases to 0, then as it increases) equals the value at the
        point ``at``. ``crossing`` gives the positions of ``a`` (and ``b``, or None) among
        node ``k``'s inputs. Which way ``a - b`` can move near ``x`` comes from `moves`:
        ``ceil(sinh(clip(x, -2, 2)) - c)`` at the bound, its input 3, never exceeds 3 (the
        clip caps it, sinh and ``- c`` keep the order), and ceil is 3 up to 3: no jump
        (fuzz finding F33); where the input can exceed 3 the jump stays. ``entered`` (the
        side the rule took along the ray, or None) must be reachable too (or 0)."""
        args = self.nodes[k].args if k < len(self.nodes) else self.running_args
        shape = np.shape(mask)
        if (len(crossing) > 1 and crossing[1] is not None
                and args[crossing[0]] == args[crossing[1]] and type(args[crossing[0]]) is int):
            return mask  # a - a: 0 near x, on the jump's own value (x > x is always False)
        gone_same = np.zeros(shape, bool)
        if len(crossing) > 1 and crossing[1] is not None and type(args[crossing[0]]) is int \
                and type(args[crossing[1]]) is int:
            from asd.core.ties import same_quantity  # ties builds on this module
            same = same_quantity(self, args[crossing[0]], args[crossing[1]], shape,
                                 along_ray=False)
            if same is not None:  # one quantity (x + 0.0 >= x): a - b is 0 near x
                gone_same = mask & same
                if gone_same.all():
                    return gone_same
        up, down = self._moves_of(args[crossing[0]], shape, {})
        if len(crossing) > 1 and crossing[1] is not None:
            b_up, b_down = self._moves_of(args[crossing[1]], shape, {})
            up, down = up | b_down, down | b_up
        at = np.broadcast_to(at, shape)
        left, right = (np.broadcast_to(side, shape) for side in sides)
        gone = mask & (~down | (left == at)) & (~up | (right == at))
        if entered is not None:
            entered = np.broadcast_to(entered, shape)
            gone &= (entered == 0) | ((entered < 0) & down) | ((entered > 0) & up)
        return gone | gone_same

    def _moves_of(self, ref, shape: tuple, memo: dict) -> tuple:
        """`moves` of an input reference (a literal or a constant node moves nowhere)."""
        if type(ref) is not int:
            none = np.zeros(shape, bool)
            return none, none
        up, down = self.moves(ref, memo)
        return np.broadcast_to(up, shape), np.broadcast_to(down, shape)

    def moves(self, j: int, memo: dict) -> tuple:
        """``(up, down)``: host masks of node ``j``'s shape, False where its value provably
        does not exceed (``up``), or fall below (``down``), its value at the point on a
        neighbourhood of ``x`` (along every direction). Proven from the pieces, for the
        order-keeping primitives only (rounding keeps the order too): a bound held by a
        saturated clip, relu, maximum or minimum, monotone functions, sums and constant
        scalings (F33); signs held by ``|x|``, even powers, products and quotients of moving
        values, reductions nondecreasing in every entry (a sum: a variance never falls below
        0; max, min, sort, median, quantiles, their order statistics counted: a min rises
        only where every entry at it does, a max falls likewise), and the branch a
        ``where`` selects (F42); a discontinuous node that met no jump is constant. Every
        other node may move both ways."""
        if j in memo:
            return memo[j]
        cone, stack = set(), [j]  # the order-keeping cone above j, evaluated in program order
        while stack:
            i = stack.pop()
            if i in cone or i in memo:
                continue
            cone.add(i)
            node = self.nodes[i]
            if node.prim is not None and node.active and not node.prim.discontinuous:
                stack.extend(r for r in node.args if type(r) is int)
        for i in sorted(cone):
            memo[i] = self._moves_here(i, memo)
        return memo[j]

    def _moves_here(self, j: int, memo: dict) -> tuple:
        """`moves` of node ``j``, its inputs' already in ``memo``."""
        node = self.nodes[j]
        shape = tuple(node.shape)
        both = np.ones(shape, bool)
        if node.prim is None:  # an input moves; a constant one does not
            out = (both, both) if node.active else (~both, ~both)
        elif not node.active or node.prim.discontinuous:
            # constant near x unless a jump is at it or above it (a comparison that jumps
            # is inactive, yet it moves: x * (x >= 2 x) at 0 is -1 left of 0)
            jumped = j in self.jumps or self.taint[j] is not None
            out = (both, both) if jumped else (~both, ~both)
        else:
            out = self._moves_by_rule(j, node, shape, memo)
        return out

    def _moves_by_rule(self, j: int, node: Node, shape: tuple, memo: dict) -> tuple:
        """`moves` of a node from its inputs' (see there)."""
        name, args = node.prim.name, node.args
        both = np.ones(shape, bool)
        if not _reads_order(node.prim):
            # any function of inputs that do not move does not move (a norm of a held
            # vector: F56); otherwise no claim
            held = all(not (up.any() or down.any()) for up, down in (
                self._moves_of(r, np.shape(self.values[r]), memo) for r in args
                if type(r) is int))
            return (~both, ~both) if held else (both, both)
        if name in _SELECTIONS:  # entries moved, not changed: the primitive moves the masks
            ins = [self._moves_of(r, np.shape(self.values[r] if type(r) is int else r.value),
                                  memo) for r in args]
            try:
                return tuple(np.reshape(np.asarray(node.prim.impl(*(m[i] for m in ins),
                                                                  **node.params)), shape)
                             for i in (0, 1))
            except Exception:  # an index or layout the masks cannot take: no proof
                return both, both
        if name in _MONOTONE_REDUCTIONS:
            try:
                return self._moves_of_reduction(node, shape, memo)
            except ValueError:  # a layout this reading does not know (an array of q)
                return both, both
        if name == "cummax":
            return self._moves_of_cummax(node, shape, memo)
        if name == "hypot":  # of a pair (last axis): sqrt(a**2 + b**2) grows as |a|, |b| do
            ref = args[0]
            if type(ref) is not int or self.taint[ref] is not None:
                return both, both
            pair = np.asarray(backend.to_host(self.values[ref]))
            up, down = self._moves_of(ref, pair.shape, memo)
            (a_up, a_down), (b_up, b_down) = (
                _moves_of_square((up[..., i], down[..., i]), pair[..., i]) for i in (0, 1))
            return np.reshape(a_up | b_up, shape), np.reshape(a_down | b_down, shape)
        if not _reads_order(node.prim) or not all(
                type(r) is not int or _broadcasts(np.shape(self.values[r]), shape)
                for r in args):
            return both, both
        ins = [self._moves_of(r, shape, memo) for r in args]
        vals = [np.broadcast_to(backend.to_host(self.values[r] if type(r) is int else r.value),
                                shape) if r is not None else None for r in args]
        value = np.broadcast_to(backend.to_host(self.values[j]), shape)
        if name in _INCREASING or (name == "leaky_relu"
                                   and node.params.get("negative_slope", 0.0) >= 0):
            return ins[0]
        if name in ("negative", "reciprocal"):  # decreasing (reciprocal: on each side of 0)
            return ins[0][1], ins[0][0]
        if name == "real_pow":
            # x ** p at x > 0 (continuous there, so near it too): increasing for p > 0,
            # decreasing for p < 0; elsewhere (0, or a negative base an integral p allows)
            # no claim
            p = node.params.get("p", 1.0)
            positive = np.broadcast_to(vals[0] > 0, shape) & (
                type(args[0]) is not int or self.taint[args[0]] is None)
            up, down = ins[0] if p > 0 else (ins[0][1], ins[0][0])
            if p == 0:
                up = down = np.zeros(shape, bool)
            return np.where(positive, up, True), np.where(positive, down, True)
        if name == "add":
            return ins[0][0] | ins[1][0], ins[0][1] | ins[1][1]
        if name == "subtract":
            return ins[0][0] | ins[1][1], ins[0][1] | ins[1][0]
        if name in ("multiply", "divide"):
            moving = [i for i, r in enumerate(args) if type(r) is int
                      and (self.nodes[r].active or self.taint[r] is not None)]
            if len(moving) == 2:
                return self._moves_of_product(name, args, ins, vals, both)
            if len(moving) != 1:
                return both, both
            c = vals[1 - moving[0]]
            up, down = ins[moving[0]]
            if name == "divide" and moving[0] == 1:  # c / x: decreasing in x for c > 0
                c = -c
            return (up & (c > 0)) | (down & (c < 0)), (down & (c > 0)) | (up & (c < 0))
        # an input strictly past a bound stays past it near x, where no jump moves it
        continuous = type(args[0]) is not int or self.taint[args[0]] is None
        if name in ("abs", "integer_pow"):
            return self._moves_of_power(name, node, ins[0], vals[0], continuous, both)
        if name in ("remainder", "remainder_xy"):  # x - q y, q constant off its jumps
            if j in self.jumps:
                return both, both
            (x_up, x_down) = ins[0]
            if name == "remainder":
                return x_up, x_down
            (y_up, y_down) = ins[1]
            with np.errstate(all="ignore"):
                q = np.floor_divide(vals[0], vals[1])
            unknown = ~np.isfinite(q)
            return (x_up | (y_down & (q > 0)) | (y_up & (q < 0)) | unknown,
                    x_down | (y_up & (q > 0)) | (y_down & (q < 0)) | unknown)
        table = getattr(node.prim.rule, "piecewise_table", None)
        if table is not None and name != "leaky_relu":
            return _moves_of_piecewise(table(node.params), ins[0], vals[0], continuous, both)
        if name in ("where", "where_logic", "select"):
            return self._moves_of_where(node, ins, vals, value, both)
        if name in ("relu", "proj_nonneg"):
            off = (vals[0] < 0) & continuous
            return ins[0][0] & ~off, ins[0][1] & (value != 0)
        if name == "proj_nonpos":  # min(x, 0): the mirror image
            off = (vals[0] > 0) & continuous
            return ins[0][0] & (value != 0), ins[0][1] & ~off
        if name in ("maximum", "minimum"):
            # max: up only through an operand not strictly below it (a continuous one stays
            # below), down only where both can be below it; min the mirror image
            (a_up, a_down), (b_up, b_down) = ins
            a, b = vals
            held = [type(r) is not int or self.taint[r] is None for r in args]
            if name == "maximum":
                return ((a_up & ~((a < value) & held[0])) | (b_up & ~((b < value) & held[1])),
                        (a_down | (a < value)) & (b_down | (b < value)))
            return ((a_up | (a > value)) & (b_up | (b > value)),
                    (a_down & ~((a > value) & held[0])) | (b_down & ~((b > value) & held[1])))
        if name == "proj_linf_ball" and len(ins) == 2:  # clip(x, -r, r), r constant
            none = np.zeros(shape, bool)
            r = np.broadcast_to(np.abs(vals[1]), shape)
            ins, vals = [ins[0], (none, none), (none, none)], [vals[0], -r, r]
        elif name not in ("clip", "proj_box") or len(ins) != 3:  # leaky_relu, negative slope
            return both, both
        # clip (and the box projection, lo <= hi): minimum(maximum(x, lo), hi), increasing in
        # every input; it never exceeds hi and never falls below min(lo, hi)
        (x_up, x_down), (lo_up, lo_down), (hi_up, hi_down) = ins
        lo, hi = vals[1], vals[2]
        up = np.where(value == hi, hi_up, x_up | lo_up | hi_up)
        down = np.where(value == lo, lo_down | hi_down, x_down | lo_down | hi_down)
        x = vals[0]
        above, below = (x > hi) & continuous, (x < lo) & continuous  # held at the bound
        up = np.where(above, hi_up, np.where(below, lo_up | hi_up, up))
        down = np.where(above, hi_down | lo_down, np.where(below, lo_down | hi_down, down))
        return up, down

    def _moves_of_reduction(self, node: Node, shape: tuple, memo: dict) -> tuple:
        """`moves` of a reduction nondecreasing in every entry it reads. A sum exceeds (falls
        below) its value only where an entry does. An order statistic is counted
        (`_moves_of_order_statistics`), and the median, a quantile, a top-k sum or a sorted
        position moves where one of the order statistics it reads does (a nonnegative
        combination of them)."""
        name, ref = node.prim.name, node.args[0]
        x = np.asarray(backend.to_host(self.values[ref]))
        up, down = self._moves_of(ref, x.shape, memo)
        axis = node.params.get("axis")
        axes = tuple(range(x.ndim)) if axis is None else tuple(
            a % x.ndim for a in np.atleast_1d(axis))
        last = tuple(range(x.ndim - len(axes), x.ndim))
        x, up, down = (np.moveaxis(a, axes, last).reshape(
            np.moveaxis(a, axes, last).shape[:x.ndim - len(axes)] + (-1,)) for a in (x, up, down))
        n = x.shape[-1]
        if name == "sum" or n == 0 or n > 256:  # no order read (an n x n count past 256)
            up, down = np.any(up, axis=-1), np.any(down, axis=-1)
            if name == "sort":
                up, down = (np.broadcast_to(a[..., None], x.shape) for a in (up, down))
        else:
            if name == "sort":
                at = np.arange(n)
            else:
                lo, hi = self._order_positions(node, n)
                at = np.arange(lo, hi + 1)
            up, down = _moves_of_order_statistics(x, up, down, at, self.taint[ref] is None)
            if name != "sort":  # the reduction moves where a statistic it reads does
                up, down = np.any(up, axis=-1), np.any(down, axis=-1)
        if name == "sort" and axis is not None:  # positions back on the sorted axis
            up, down = np.moveaxis(up, -1, axes[0]), np.moveaxis(down, -1, axes[0])
        return up.reshape(shape), down.reshape(shape)

    def _moves_of_cummax(self, node: Node, shape: tuple, memo: dict) -> tuple:
        """`moves` of a running maximum: entry ``i`` is the max of the prefix ``x[:i+1]``,
        so it rises where an entry at it rises (any prefix entry, where a jump above may
        lift one past it) and falls only where every entry at it falls (F62's rule for
        max). Prefixes of more than 256 entries are not read (no proof)."""
        ref, axis = node.args[0], int(node.params.get("axis", -1))
        x = np.asarray(backend.to_host(self.values[ref]))
        both = np.ones(shape, bool)
        if type(ref) is not int or x.ndim == 0 or x.shape[axis] > 256:
            return both, both
        up, down = self._moves_of(ref, x.shape, memo)
        x, up, down = (np.moveaxis(a, axis, -1) for a in (x, up, down))
        n = x.shape[-1]
        y = np.maximum.accumulate(x, axis=-1)
        prefix = np.tri(n, dtype=bool)                          # [i, j]: j <= i
        tied = prefix & (x[..., None, :] == y[..., :, None])    # entry j at prefix i's max
        reach = prefix if self.taint[ref] is not None else tied
        rises = np.any(up[..., None, :] & reach, axis=-1)
        falls = np.all(down[..., None, :] | ~tied, axis=-1)
        return (np.moveaxis(rises, -1, axis).reshape(shape),
                np.moveaxis(falls, -1, axis).reshape(shape))

    @staticmethod
    def _order_positions(node: Node, n: int) -> tuple:
        """The positions in the sorted entries of the lowest and highest order statistic a
        reduction of ``n`` entries reads."""
        name, params = node.prim.name, node.params
        if name == "reduce_max":
            return (n - 1, n - 1) if params.get("kind") == "max" else (0, 0)
        if name == "topk_sum":
            return n - min(int(params["k"]), n), n - 1
        if name == "median":  # numpy's median reads the middle one or two exactly
            return (n - 1) // 2, n // 2
        q = float(params["q"]) if np.ndim(params.get("q", 0.5)) == 0 else None
        if q is None:
            raise ValueError("an array of quantiles")
        at = q * (n - 1)  # widened by its rounding: a neighbour more is still sound
        return max(int(np.floor(at - 1e-9 * n)), 0), min(int(np.ceil(at + 1e-9 * n)), n - 1)

    def _moves_of_product(self, name: str, args: tuple, ins: list, vals: list,
                          both: np.ndarray) -> tuple:
        """`moves` of ``a * b`` (``a / b`` as ``a * (1 / b)``) with both factors moving,
        from the factors' signs, which hold near ``x`` where they are nonzero and no jump
        moves them: the product exceeds its value only where a factor moves towards the
        other's sign (or both leave 0 the same way); ``x * x`` never falls below 0."""
        if any(self.taint[r] is not None for r in args):
            return both, both
        (a_up, a_down), (b_up, b_down) = ins
        a, b = vals
        if name == "divide":  # 1 / b: decreasing on each side of 0 (a pole at 0: unknown)
            b = 1.0 / np.where(b == 0, 1.0, b)
            b_up, b_down = b_down, b_up
        if name == "multiply" and args[0] == args[1]:  # a square: never below 0 at 0
            up, down = _moves_of_square(ins[0], a)
        else:
            zero = (a == 0) & (b == 0)
            up = ((a_up & (b > 0)) | (a_down & (b < 0)) | (b_up & (a > 0)) | (b_down & (a < 0))
                  | (zero & ((a_up & b_up) | (a_down & b_down))))
            down = ((a_down & (b > 0)) | (a_up & (b < 0)) | (b_down & (a > 0))
                    | (b_up & (a < 0)) | (zero & ((a_up & b_down) | (a_down & b_up))))
        unknown = ~np.isfinite(vals[0]) | ~np.isfinite(vals[1])
        if name == "divide":
            unknown = unknown | (vals[1] == 0)
        return up | unknown, down | unknown

    @staticmethod
    def _moves_of_power(name: str, node: Node, ins: tuple, x, continuous: bool,
                        both: np.ndarray) -> tuple:
        """`moves` of ``|x|`` and ``x ** n`` (n > 0): increasing where ``x > 0``, decreasing
        where ``x < 0`` for ``|x|`` and even ``n`` (increasing for odd ``n``), and never below
        0 at 0; the sign of ``x`` holds near ``x`` where no jump moves it."""
        n = node.params.get("n", 1) if name == "integer_pow" else 2
        if not continuous or n <= 0:
            return both, both
        return ins if n % 2 else _moves_of_square(ins, x)

    def _moves_of_where(self, node: Node, ins: list, vals: list, value,
                        both: np.ndarray) -> tuple:
        """`moves` of a where: near ``x`` its entry is always one of its branches' (``a`` or
        ``b`` at the same point). Where the condition holds near ``x`` (a comparison of
        unequal operands, or a boolean, that no jump moves) it moves as the branch it
        selects; elsewhere, where the branches are equal at ``x``, only as one of them
        does; else both ways. The selected branch is read by running the where itself on
        branches 0 and 1."""
        name, args = node.prim.name, node.args
        (a_up, a_down), (b_up, b_down) = ins[-2:]
        a, b = vals[-2:]
        held = all(type(r) is not int or self.taint[r] is None for r in args[:-2])
        if not held:
            still = np.zeros(np.shape(value), bool)
        elif name == "select":
            c_up, c_down = ins[0]
            still = ~(c_up | c_down)
        elif name == "where":
            still = (vals[0] != vals[1]) & ~_nan(vals[0]) & ~_nan(vals[1])
        else:  # where_logic: comparisons (operand pairs) and constant masks, in its leaves
            still, pos = np.ones(np.shape(value), bool), 0
            for leaf in node.params["leaves"]:
                if leaf[0] == "cmp":
                    lhs, rhs = vals[pos], vals[pos + 1]
                    still = still & (lhs != rhs) & ~_nan(lhs) & ~_nan(rhs)
                pos += 2 if leaf[0] == "cmp" else 1
        on_a = np.asarray(node.prim.impl(*vals[:-2], np.zeros(np.shape(value)),
                                         np.ones(np.shape(value)), **node.params)) == 0
        same = a == b
        up = np.where(still, np.where(on_a, a_up, b_up), np.where(same, a_up | b_up, True))
        down = np.where(still, np.where(on_a, a_down, b_down),
                        np.where(same, a_down | b_down, True))
        return up, down

    def _dead(self, j: int) -> bool:
        """Whether node ``j`` is a relu off at every entry by its values (no tie: the caller
        checked): its output is 0 on a neighbourhood of ``x`` however the nodes above it
        move there, so their ties cannot move a jump's input below it (``relu(relu(x) - 2)
        % 2`` at 0). A jump above it that would switch it on is recorded, and checked, on
        its own."""
        lin = self.lins[j]
        if self.nodes[j].prim.name != "relu" or type(lin) is not Diagonal:
            return False
        zero = lin.zero_rows()
        return zero is not None and backend.is_host(zero) and bool(np.all(zero))

    def record_decision(self, k: int, how: str, count: int) -> None:
        self.decisions[k, how] = self.decisions.get((k, how), 0) + count

    def record_tie(self, k: int, count: int) -> None:
        """Node ``k``'s rule met a tie: its linearization depends on the direction.

        A rule asks for each operand's tangent at the same tied entries, so the count is
        the largest request, not the sum.
        """
        self.ties[k] = max(self.ties.get(k, 0), int(count))

    # ----- tangents (lazy, memoized) -----

    def draw_seed(self, j: int) -> None:
        """Draw the lazy direction of input ``j`` (only the inputs a tangent reads are drawn)."""
        self.tangents[j] = self.seeds.pop(j)()

    def tangent(self, k: int) -> np.ndarray:
        """The one-sided directional derivative of node ``k`` along the sweep direction."""
        if k in self.seeds:
            self.draw_seed(k)
        t = self.tangents[k]
        if t is not None:
            return t
        nodes, tangents = self.nodes, self.tangents
        todo, stack = set(), [k]
        while stack:
            j = stack.pop()
            if j in todo:
                continue
            todo.add(j)
            for r in nodes[j].args:
                if type(r) is int and nodes[r].active and tangents[r] is None:
                    stack.append(r)
        for j in sorted(todo):
            if j in self.seeds:
                self.draw_seed(j)
                continue
            node = nodes[j]
            args = node.args if j not in self.dargs else self.dargs[j]
            ins = [tangents[r] if type(r) is int and nodes[r].active else None for r in args]
            lin = self.lins[j]
            if lin is None:
                t = None
            elif type(lin) is FanIn:
                t = lin.push(*ins)
            else:
                t = None if ins[0] is None else lin.push(ins[0])
            if t is None:
                t = self.zeros(node)
            tangents[j] = t
        return tangents[k]

    def zeros(self, node: Node):
        """A zero tangent for ``node`` in the sweep's library."""
        if self.like is None:
            return np.zeros(node.shape, node.dtype)
        return backend.zeros(node.shape, self.like, node.dtype)

    def lex_tangent(self, k: int, level: int) -> np.ndarray:
        """Node ``k``'s derivative along the lexicographic direction ``level`` (``w_level``).

        Pushed, in float64, through the linearizations the sweep has selected: the first-order
        term of a tie that persists along ``v`` (`asd.core.ties`). Memoized per level.
        """
        return push_direction(self.nodes, self.lins.__getitem__,
                              lambda j: self.lex_leaf(j, level),
                              k, self.lex_tangents.setdefault(level, {}), self.like, self.dargs)

    def lex_leaf(self, j: int, level: int) -> np.ndarray:
        """Input node ``j``'s part of ``w_level`` (zero for inputs not differentiated).
        Memoized: a staged sweep makes them before its ``lax.cond`` branches read them
        (`asd.core.ties.staged_sign`; JAX cannot place a constant on a device inside a
        branch under ``vmap``)."""
        hit = self.lex_leaves.get((j, level))
        if hit is None:
            hit = self.lex_leaves[j, level] = self._lex_leaf(j, level)
        return hit

    def _lex_leaf(self, j: int, level: int) -> np.ndarray:
        i, shape = self.leaf_index.get(j), self.nodes[j].shape
        w = np.zeros(shape) if i is None else np.asarray(
            backend.to_host(self.lex.leaf(level, i, shape)), dtype=float)
        return w if self.like is None else backend.from_host(w, self.like, self.nodes[j].dtype)

    def direction_scale(self) -> float:
        """The largest entry of the direction drawn so far (a tangent reads no other);
        memoized per leaf, since a drawn leaf never changes."""
        scales = self.magnitudes.setdefault("scale", {})
        for j in self.leaf_index:
            if j not in scales and self.tangents[j] is not None:
                t = self.tangents[j]
                if backend.is_host(t):
                    scales[j] = float(np.max(np.abs(t), initial=0.0))
                else:
                    xp = backend.namespace(t)
                    scales[j] = float(xp.max(xp.abs(t))) if backend.size(t) else 0.0
        return max(scales.values(), default=0.0)

    def staged_scale(self):
        """The direction's largest entry as an array (no host copy): the scale a staged
        sweep compares first-order tangents with. Memoized."""
        scale = self.magnitudes.get("staged scale")
        if scale is None:
            xp = np if self.like is None else backend.namespace(self.like)
            parts = [xp.max(xp.abs(self.tangent(j))) for j in self.leaf_index
                     if backend.size(self.tangent(j))]
            scale = parts[0] if len(parts) == 1 else xp.max(xp.stack(parts)) if parts else 0.0
            self.magnitudes["staged scale"] = scale
        return scale

    def flag_tie(self, k: int, mask) -> None:
        """Record (as a device bool) whether node ``k``'s rule met a tie in ``mask``."""
        xp = backend.namespace(mask)
        any_ = xp.any(mask)
        self.tied[k] = any_ if k not in self.tied else self.tied[k] | any_

    def count_undecided(self, k: int, mask) -> None:
        """Add the entries of ``mask`` (tied entries first order left open) to node ``k``'s
        count of undecided ties, as an array on the sweep's device."""
        xp = backend.namespace(mask)
        count = xp.sum(xp.astype(mask, xp.int32))
        self.undecided[k] = count if k not in self.undecided else self.undecided[k] + count

    def reach(self, k: int):
        """``|u_k| ... |u_1| 1``: zero exactly at the entries of node ``k`` whose selected
        linearization sends every input tangent to 0 (no path from an input survives), so
        they move with no direction to first order, and the side a tie there takes changes
        nothing a first-order sweep computes. None where a map in the cone cannot give its
        magnitude. Memoized (`magnitude` with ones for the inputs' tangents)."""
        return self.magnitude(k, ones=True)

    def magnitude(self, k: int, ones: bool = False) -> np.ndarray | None:
        """``|u_k| ... |u_1| |v|``: bounds every partial sum of node ``k``'s tangent.

        None where some map in the cone cannot give its magnitude. Memoized.
        """
        memo, nodes = self.magnitudes.setdefault("ones", {}) if ones else self.magnitudes, \
            self.nodes
        if k in memo:
            return memo[k]
        for j in missing_cone(nodes, k, memo):
            node = nodes[j]
            like = self.like
            if node.prim is None:
                if j not in self.leaf_index:
                    memo[j] = (np.zeros(node.shape) if like is None
                               else backend.zeros(node.shape, like))
                elif ones:
                    memo[j] = (np.ones(node.shape) if like is None
                               else backend.namespace(like).ones_like(self.values[j]))
                elif like is None:
                    memo[j] = np.abs(np.asarray(self.tangent(j), dtype=float))
                else:
                    memo[j] = backend.namespace(like).abs(self.tangent(j))
                continue
            lin = self.lins[j]
            maps = lin.maps if type(lin) is FanIn else (lin,)
            total = np.zeros(node.shape) if like is None else backend.zeros(
                node.shape, like, backend.floating(backend.zeros((), like)).dtype)
            for m, r in zip(maps, self.dargs.get(j, node.args), strict=False):
                if m is None or type(r) is not int or not nodes[r].active:
                    continue
                mag = None if memo[r] is None else m.magnitude()
                if mag is None:
                    total = None
                    break
                total = total + mag.push(memo[r])
            memo[j] = total
        return memo[k]

    def tangent_at(self, k: int, mask: np.ndarray, depth: int = 0) -> np.ndarray:
        """The entries ``mask`` (bool, node ``k``'s shape) of the tangent, in C order.

        Demand-driven: each map on the way up asks its inputs only for the entries the
        requested ones read (rows of a matmul's left operand, the same entries of an
        elementwise operation, nothing where a scale is zero), so the work follows the
        number of tied entries, not the size of the program. Entries are memoized per node;
        a map that cannot narrow a request falls back to the full (memoized) tangent.
        """
        if k in self.seeds:
            self.draw_seed(k)
        if self.like is not None:  # another library: read the full tangent on its device
            t = self.tangent(k)
            return t[backend.from_host(mask, t)] if backend.is_host(mask) else t[mask]
        t = self.tangents[k]
        if t is not None:
            return np.reshape(t, -1) if mask.all() else np.broadcast_to(t, mask.shape)[mask]
        part = self.partial.get(k)
        if part is None:
            missing = mask
            if not mask.any():  # nothing asked (every requested entry had a zero scale)
                node = self.nodes[k]
                return np.zeros(0, node.dtype if np.issubdtype(node.dtype, np.inexact)
                                else np.float64)
        else:
            known, vals = part
            missing = mask & ~known
            if not missing.any():
                return vals[mask]
        lin = self.lins[k]
        if lin is None or depth > MAX_REQUEST_DEPTH or missing.all() or k in self.dargs:
            return np.reshape(self.tangent(k), -1) if mask.all() else self.tangent(k)[mask]
        nodes = self.nodes
        asks = [self._asker(r, depth + 1) if type(r) is int and nodes[r].active else None
                for r in nodes[k].args]
        if type(lin) is FanIn:
            res = lin.push_at(missing, asks)
        else:
            res = None if asks[0] is None else lin.push_at(missing, asks[0])
        if res is NotImplemented:
            return self.tangent(k)[mask]
        if part is None:
            node = nodes[k]
            dtype = res.dtype if res is not None else (
                node.dtype if np.issubdtype(node.dtype, np.inexact) else np.float64)
            # uninitialized: only entries in ``known`` are ever read, and each is written
            # below (a zero where the request came back None); np.zeros would map and
            # clear a full-size buffer per node a tie reaches
            known, vals = missing.copy(), np.empty(node.shape, dtype)
            self.partial[k] = (known, vals)
        else:
            known |= missing
        vals[missing] = 0 if res is None else res
        if part is None and res is not None and np.shape(res) == (np.count_nonzero(mask),):
            return res  # the request was all missing: ``vals[mask]`` would be a copy of it
        return vals[mask]

    def _asker(self, r: int, depth: int):
        def ask(need):
            return self.tangent_at(r, need, depth)

        return ask

    # ----- batched sweeps over the stored linearizations -----

    def push_batch(self, seeds: dict[int, np.ndarray], absorbing: bool = False) -> list:
        """Forward mode: push batched input tangents through every active node.

        ``absorbing=True`` pushes with ``0 * inf = 0`` (`LinearMap.push_absorbing`): for
        redoing a push whose result came out non-finite because an infinite tangent met a
        zero coefficient, i.e. a branch the output does not read."""
        ts: list = [None] * len(self.nodes)
        for k, s in seeds.items():
            ts[k] = s
        for k, node in enumerate(self.nodes):
            lin = self.lins[k]
            if lin is None or not node.active:
                continue
            args = node.args if k not in self.dargs else self.dargs[k]
            ins = [ts[r] if type(r) is int else None for r in args]
            if type(lin) is FanIn:
                ts[k] = lin.push_absorbing(*ins) if absorbing else lin.push(*ins)
            elif ins[0] is not None:
                ts[k] = lin.push_absorbing(ins[0]) if absorbing else lin.push(ins[0])
        return ts

    def tangent_absorbing(self, k: int):
        """Node ``k``'s tangent along the sweep direction pushed with ``0 * inf = 0`` (see
        `push_batch`); the memoized tangents are left as they are."""
        seeds = {j: self.tangent(j) for j in self.leaf_index}
        with np.errstate(all="ignore"):
            return self.push_batch(seeds, absorbing=True)[k]

    def pull(self, out: int, seed: np.ndarray, absorbing: bool = False) -> list:
        """Reverse mode from node ``out``; only the inputs' cotangents survive the sweep."""
        return self.pull_seeds({out: seed}, absorbing)

    def pull_seeds(self, seeds: dict[int, Any], absorbing: bool = False) -> list:
        """Reverse mode from several nodes at once (a vector-Jacobian product of several
        outputs), one pass over the stored linearizations.

        ``absorbing=True`` pulls with ``0 * inf = 0`` (`LinearMap.pull_absorbing`): a
        cotangent that is zero because the output does not read a branch (``where``'s other
        side) then kills that branch's infinite slopes instead of turning them into NaN; the
        callers redo a pull that way only when its result is not finite."""
        if absorbing:  # a redo after a non-finite result: its warnings were given once
            with np.errstate(all="ignore"):
                return self._pull_seeds(seeds, True)
        return self._pull_seeds(seeds, False)

    def _pull_seeds(self, seeds: dict[int, Any], absorbing: bool) -> list:
        nodes, lins, wants, dargs = self.nodes, self.lins, self.wants, self.dargs
        out = max(seeds)
        ct: list = [None] * (out + 1)
        for k, seed in seeds.items():
            ct[k] = seed
        for k in range(out, -1, -1):
            c = ct[k]
            if c is None:
                continue
            lin = lins[k]
            if lin is None:
                continue
            ct[k] = None  # a value's cotangent is dead once pulled: free it early
            if type(lin) is FanIn:
                pulled = lin.pull_absorbing(c, wants[k]) if absorbing else lin.pull(c, wants[k])
                for r, p in zip(nodes[k].args if k not in dargs else dargs[k], pulled):
                    if p is not None:
                        prev = ct[r]
                        ct[r] = p if prev is None else prev + p
            elif wants[k][0]:
                r = nodes[k].args[0]
                p = lin.pull_absorbing(c) if absorbing else lin.pull(c)
                prev = ct[r]
                ct[r] = p if prev is None else prev + p
        return ct

    # ----- checks on the result -----

    def check_lipschitz(self, k: int) -> None:
        """Refuse output ``k`` if a jump reaches it, unless the output is continuous there."""
        if self.taint[k] is None:
            return
        jumps = self.jumps_reaching(k)
        blind = [j for j in jumps if self.jumps[j] is None]
        verdict = "the output is not locally Lipschitz there"
        if blind:
            origin, what = blind[0], "is discontinuous (piecewise constant) and its result flows"
        else:
            why = self.replay_jumps(jumps, k)
            if why is None:
                why = self.replay_tangents(jumps, k)
            if why is None:
                return
            origin = jumps[0]
            what = f"jumps here ({self.jump_site(origin)}): {why}; its result flows"
            if not why.startswith("the output is"):
                verdict = "asd cannot show that the output is locally Lipschitz there"
        node = self.nodes[origin]
        jump = self.jumps[origin]
        fix = jump.fix if jump is not None and jump.fix else (
            "Use a continuous primitive (asd.abs, asd.relu, asd.maximum, asd.numpy.where, "
            "asd.clip) or wrap the discontinuous value in asd.stop_gradient(...) if it is a "
            "constant by intent.")
        raise NotLipschitzError(
            f"{format_node(origin, node)}: {node.name} {what} into the differentiated "
            f"output %{k}, so {verdict}. {fix}"
        )

    def jump_site(self, j: int) -> str:
        """``2 entries on the jump, input e.g. [0.0, 1.0]``: where node ``j`` jumps."""
        mask = self.jumps[j].mask
        ref = next((r for r in self.nodes[j].args if type(r) is int), None)
        n = int(np.count_nonzero(mask))
        where = f"{n} {'entry' if n == 1 else 'entries'} on the jump"
        if ref is None:
            return where
        ins = np.broadcast_to(self.values[ref], mask.shape)[mask][:3]
        return f"{where}, input e.g. {ins.tolist()}"

    def jumps_reaching(self, k: int, among: dict | None = None) -> list[int]:
        """The nodes at a jump whose values reach node ``k`` (not through stop_gradient):
        of `jumps`, or of the nodes ``among``."""
        nodes, seen, stack = self.nodes, set(), [k]
        while stack:
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            if nodes[j].prim is not None and not nodes[j].prim.stops_gradient:
                stack.extend(r for r in nodes[j].args if type(r) is int)
        jumps = self.jumps if among is None else among
        return sorted(j for j in seen if j in jumps)

    def replay_jumps(self, jumps: list[int], k: int) -> str | None:
        """Re-evaluate node ``k`` with each jump at its value at the point and at every
        combination of its one-sided limits: None if all give node ``k``'s value, else why
        the output is refused."""
        cells = [(j, e) for j in jumps for e in np.flatnonzero(self.jumps[j].mask)]
        if len(cells) > MAX_JUMP_CELLS:
            return (f"{len(cells)} entries sit on jumps, and asd checks that an output is "
                    f"continuous across at most {MAX_JUMP_CELLS} (trying every side)")
        at = {j: self.jumps[j].at for j in jumps}
        variants = [at]
        for pick in itertools.product(*(range(len(self.jumps[j].sides)) for j, _ in cells)):
            variant = {j: np.array(v, copy=True, order="C") for j, v in at.items()}
            for (j, e), s in zip(cells, pick, strict=True):
                variant[j].reshape(-1)[e] = self.jumps[j].sides[s].reshape(-1)[e]
            variants.append(variant)
        want = backend.to_host(self.values[k])
        if not (self.like is None or self.staged):
            # a framework's sweep replays with numpy's implementations, which may round
            # otherwise than the library did (torch's logaddexp): the entered side, replayed
            # the same way, is what the other sides must equal
            want = backend.to_host(self.replay(
                {j: backend.to_host(self.values[j]) for j in jumps}, k)[0])
        for i, variant in enumerate(variants):
            try:
                got, moved = self.replay(variant, k, point=i == 0)
            except SideUndefined as u:
                return (f"%{u.node} ({self.nodes[u.node].name}) cannot be evaluated on another "
                        f"side of the jump ({type(u.cause).__name__}: {u.cause})")
            if moved is not None:
                return (f"another side of the jump moves %{moved} ({self.nodes[moved].name}), "
                        "itself discontinuous, so continuity cannot be checked")
            if not np.array_equal(backend.to_host(got), want):
                return (f"the output is {summarize(want)} on the side the sweep enters but "
                        f"{summarize(got)} at the point or on another side")
        return None

    def replay_tangents(self, jumps: list[int], k: int) -> str | None:
        """Where the ray stays on a jump (`Jump.on_ray`: its input equals the jump's location
        all along ``x + δv``, a further direction chose the side), continuity at the point
        is not enough: the value along the ray is the one at the point, the other sides
        hold arbitrarily near ``x``. Re-sweep node ``k`` with those entries at their value at
        the point and on every side: None if its tangent along ``v`` is the sweep's in each
        (the number stands whatever the ray sees), else why the output is refused (its
        sides part at first order along the ray: ``x * (x > flip(x))`` at 0 along (1, 1))."""
        cells = [(j, e) for j in jumps if self.jumps[j].on_ray is not None
                 for e in np.flatnonzero(self.jumps[j].on_ray)]
        if not cells:
            return None
        choices = [(self.jumps[j].at,) + self.jumps[j].sides for j, _ in cells]
        if int(np.prod([len(c) for c in choices])) > MAX_RAY_VARIANTS:
            return (f"{len(cells)} entries stay on jumps all along the ray, and asd checks the "
                    f"output's tangent across at most {MAX_RAY_VARIANTS} combinations of sides")
        want = backend.to_host(self.tangent(k))
        entered = {j: backend.to_host(self.values[j]) for j, _ in cells}
        for pick in itertools.product(*(range(len(c)) for c in choices)):
            variant = {j: np.array(v, copy=True, order="C") for j, v in entered.items()}
            for (j, e), c, s in zip(cells, choices, pick, strict=True):
                variant[j].reshape(-1)[e] = np.broadcast_to(c[s], variant[j].shape).reshape(-1)[e]
            got, why = self.tangent_with(variant, k)
            if why is not None:
                return why
            if not np.array_equal(backend.to_host(got), want, equal_nan=True):
                return (f"its input stays on the jump all along the ray at {len(cells)} "
                        f"{'entry' if len(cells) == 1 else 'entries'} (the compared values "
                        "are equal all along it; a further direction chose the side), and "
                        "the output's derivative along the ray differs between the side the "
                        "sweep enters and the value at the point or another side, so the "
                        "output jumps arbitrarily near the point (a direction along which "
                        "the jump's input leaves it is answered)")
        return None

    def tangent_with(self, fixed: dict, k: int):
        """Node ``k``'s tangent along ``v`` with the jump nodes ``fixed`` at other values:
        the nodes below them run their rules again (eagerly, on a copy of this sweep), the
        others keep their linearizations. ``(tangent, None)``, or ``(None, why)`` where a
        discontinuous node below would move or a rule refuses the new values."""
        self.tangent(k)  # the lazy directions this cone reads are drawn in this sweep
        first, nodes = min(fixed), self.nodes
        t = Trace(self.lex)
        t.nodes, t.values, t.lins = nodes, list(self.values), list(self.lins)
        t.wants, t.taint = list(self.wants), list(self.taint)
        t.leaf_index, t.like, t.dargs = dict(self.leaf_index), self.like, dict(self.dargs)
        t.seeds = dict(self.seeds)
        t.tangents = [d if j < first or nodes[j].prim is None else None
                      for j, d in enumerate(self.tangents)]
        like = (lambda v, j: v) if self.like is None else (
            lambda v, j: backend.from_host(v, self.values[j], dtype="like"))
        changed: set[int] = set()
        for j in range(first, k + 1):
            node = nodes[j]
            if j in fixed:
                t.values[j] = like(fixed[j], j)
                changed.add(j)
                continue
            moved = [r for r in node.args if type(r) is int and r in changed]
            if node.prim is None or node.prim.stops_gradient or not moved:
                continue
            if node.prim.jumps or j in self.jumps:
                if all(_same_value(backend.to_host(t.values[r]), backend.to_host(self.values[r]))
                       for r in moved):
                    continue
                return None, (f"another side of the jump moves %{j} ({node.name}), itself "
                              "discontinuous, so the tangent along the ray cannot be checked")
            xs = [t.values[r] if type(r) is int else r.value for r in node.args]
            wants = [type(r) is int and nodes[r].active for r in node.args]
            try:
                ans, lin, _, _ = t.run_rule(j, node.prim, node.args, node.params, xs, wants,
                                            any(wants), None)
            except ASDError as e:
                return None, (f"%{j} ({node.name}) cannot be differentiated on another side "
                              f"of the jump ({type(e).__name__}: {e})")
            t.values[j], t.lins[j] = ans, lin if node.active else None
            changed.add(j)
        return t.tangent(k), None

    def point_value(self, k: int):
        """Node ``k``'s value at the point itself: the jumps above it at their values there,
        not on the side the sweep entered (what ``stop_gradient`` passes on)."""
        jumps = [j for j in self.jumps_reaching(k) if self.jumps[j] is not None]
        if not jumps:
            return self.values[k]
        try:
            value, moved = self.replay({j: self.jumps[j].at for j in jumps}, k, point=True)
        except SideUndefined as u:
            raise NotLipschitzError(
                f"{format_node(u.node, self.nodes[u.node])}: undefined at the point itself "
                f"({type(u.cause).__name__}: {u.cause}), so the value stop_gradient keeps at "
                f"%{k} is not determined.") from None
        if moved is not None:
            raise NotLipschitzError(
                f"{format_node(moved, self.nodes[moved])}: a jump above it moves it onto "
                f"its own discontinuity, so the value stop_gradient keeps at %{k} is not "
                "determined. Apply stop_gradient to the first discontinuous value instead.")
        return value

    def replay(self, fixed: dict, k: int, point: bool = False):
        """Node ``k``'s value with the nodes ``fixed`` set to the given values (numpy only);
        ``(value, None)``, or ``(None, j)`` if discontinuous node ``j`` would move.

        A jump records its value and sides for the inputs the sweep gave it, which past an
        earlier jump are that jump's entered side: a fixed node whose inputs the replay
        changes is re-evaluated. ``point=True`` (every jump at its value at the point) is
        the program at the point itself, so every node below a change, discontinuous or
        not, is its ``impl`` there; on another side a discontinuous node whose inputs move
        could land on its own jump, whose sides the replay does not know: ``(None, j)``."""
        vals = dict(fixed)
        # jumps record their sides on the host: a torch/JAX sweep replays there (rare: only
        # outputs that jumps reach), and the value returns to the sweep's library; a staged
        # sweep's jumps keep their traced values, and it replays on them
        here = self.like is None or self.staged
        host = (lambda v: v) if here else backend.to_host
        for j in range(min(fixed) + 1, k + 1):
            node = self.nodes[j]
            moved = [r for r in node.args if type(r) is int and r in vals]
            if node.prim is None or not moved:
                continue
            args = [vals.get(r, host(self.values[r])) if type(r) is int else host(r.value)
                    for r in node.args]
            if not point and (j in fixed or node.prim.jumps or j in self.jumps):
                if all(_same_value(vals[r], host(self.values[r])) for r in moved):
                    continue  # its inputs as the sweep had them: its recorded sides hold
                if j in fixed or not _off_its_jumps(node, args):
                    # the replayed input is a one-sided limit: on a jump of this node, its
                    # value there is not its limit from that side (relu(x % 2) % 2 at 0)
                    return None, j
            try:
                with np.errstate(all="ignore"):
                    vals[j] = node.prim.impl(*args, **node.params)
            except Exception as exc:  # undefined on that side (a factorization of NaN)
                raise SideUndefined(j, exc) from exc
        if k not in vals:
            return self.values[k], None
        if not here:
            return backend.from_host(vals[k], self.values[k], dtype="like"), None
        return vals[k], None

    def first_nonfinite(self, upto: int) -> int | None:
        """The first node whose value is not finite although all its inputs are."""
        for k in range(upto + 1):
            v = self.values[k]
            if backend.is_host(v):
                if np.issubdtype(np.result_type(v), np.inexact) and not np.all(np.isfinite(v)):
                    return k
            elif backend.is_floating(v) and not bool(backend.namespace(v).all(
                    backend.namespace(v).isfinite(v))):
                return k
        return None

    def first_overflowing_map(self, out: int) -> str | None:
        """The node whose linearization turns a finite cotangent of output ``out`` (pulled
        from 1) into a non-finite one: where a derivative overflowed (``x ** 0.01`` at 5e-324,
        whose slope is beyond 1e308), named for the refusal; None if none is found."""
        from asd.core.program import format_node

        nodes, lins, wants = self.nodes, self.lins, self.wants
        ct: list = [None] * (out + 1)
        v = self.values[out]
        ct[out] = (np.ones(np.shape(v)) if backend.is_host(v)
                   else backend.namespace(v).ones_like(v))
        with np.errstate(all="ignore"):
            for k in range(out, -1, -1):
                c, lin = ct[k], lins[k]
                if c is None or lin is None:
                    continue
                args = nodes[k].args if k not in self.dargs else self.dargs[k]
                parts = (lin.pull(c, wants[k]) if type(lin) is FanIn
                         else [lin.pull(c) if wants[k][0] else None])
                for r, p in zip(args, parts):
                    if p is None:
                        continue
                    if not backend.all_finite(p):
                        return format_node(k, nodes[k])
                    ct[r] = p if ct[r] is None else ct[r] + p
        return None

    def absorbable(self, upto: int) -> bool:
        """Whether a derivative redone with ``0 * inf = 0`` (`pull_seeds(absorbing=True)`)
        is right for the nodes up to ``upto``. A zero cotangent comes from a branch the
        output does not read near the point (``where``'s other side, a dead relu), so an
        infinite slope behind it contributes nothing, except where the zero is itself chosen
        by the finiteness of a value at the point (``nan_to_num``) and that infinity is made
        there by a node from finite inputs (a pole: ``nan_to_num(log(x))`` at 0, where
        ``log`` is finite beside the point and the function jumps): then the NaN stays and
        is reported."""
        values, nodes = self.values, self.nodes
        made: set[int] = set()  # nodes holding an infinity some node made from finite inputs
        for k in range(upto + 1):
            node = nodes[k]
            if node.prim is None or not _has_infinity(values[k]):
                continue
            refs = [r for r in node.args if type(r) is int]
            if any(r in made for r in refs) or not any(
                    _has_infinity(values[r] if type(r) is int else r.value) for r in node.args):
                made.add(k)
        return not any(nodes[k].name in FINITENESS_SELECTORS and any(
            type(r) is int and r in made for r in nodes[k].args) for k in range(upto + 1)
        ) and not any(k not in made and self._limit_at_pole(k, made) for k in range(upto + 1))

    def _limit_at_pole(self, k: int, made: set) -> bool:
        """Whether node ``k`` makes a finite value of a pole's infinity (``made``) through a
        map that is not a selection: ``exp(log|x|)`` at 0, where exp's slope 0 at -inf meets
        log's infinite one, ``0 * inf``, a limit (``exp(log|x|) = |x|`` has slope 1) that
        absorbing would read as 0, a wrong number. A selection's 0 (a dead relu, the other
        side of ``where`` or ``maximum``) takes nothing from the pole and absorbs it."""
        lin = self.lins[k]
        if lin is None:
            return False
        args = self.nodes[k].args if k not in self.dargs else self.dargs[k]
        maps = lin.maps if type(lin) is FanIn else (lin,)
        return any(type(r) is int and r in made and not _selects(m)
                   and self._finite_from_infinite(k, r) for r, m in zip(args, maps))

    def _finite_from_infinite(self, k: int, r: int) -> bool:
        """Whether node ``k`` has a finite value where its input ``r`` is infinite (a limit
        taken at a pole: ``exp(-inf) = 0``); ``0 * inf`` is NaN, no limit, and stays for the
        selection below it to absorb or for the output to report. Where the shapes do not
        line up entry for entry (a reduction), any finite value counts."""
        out, inp = backend.to_host(self.values[k]), backend.to_host(self.values[r])
        finite = np.isfinite(np.asarray(out))
        try:
            infinite = np.isinf(np.broadcast_to(np.asarray(inp), finite.shape))
        except ValueError:
            return bool(finite.any())
        return bool(np.any(finite & infinite))

    def raise_nonfinite(self, k: int, what: str) -> None:
        node = self.nodes[k]
        ins = ", ".join(
            summarize(self.values[r]) if type(r) is int else repr(r) for r in node.args
        )
        fix = NONFINITE_FIX.get(node.name, NONFINITE_FIX["log"] if node.name.startswith("log")
                                else "Keep the inputs in the primitive's domain or rescale "
                                "to avoid overflow.")
        raise NonFiniteError(
            f"{format_node(k, node)} produced {summarize(self.values[k])} from inputs "
            f"({ins}); {what} is not finite. {fix}"
        )

    def program(self, inputs, in_tree, outputs, out_tree) -> Program:
        return Program(self.nodes, inputs, in_tree, outputs, out_tree)


_DIVISOR = ("The divisor is 0 here: a pole, where no derivative exists, and the output reads "
            "it. Keep the point away from it (a pole on a branch where does not select near "
            "the point is fine).")
FINITENESS_SELECTORS = frozenset({"nan_to_num"})
"""Primitives that pick their branch by whether a value is finite at the point (`absorbable`)."""
NONFINITE_FIX = {
    "log": "Keep the input of log in its domain, positive (for example "
           "asd.numpy.where(x > 0, x, 1) before log, with the result selected by where); "
           "exp(p * log(x)) at x = 0 is x ** p: write the power itself (np.abs(x) ** p).",
    "divide": _DIVISOR, "reciprocal": _DIVISOR, "integer_pow": _DIVISOR,
    "sqrt": "Keep the input of sqrt in its domain, nonnegative.",
    "real_pow": "Keep the base nonnegative (and nonzero for a negative exponent).",
    "power": "Keep the base in the power's domain (positive for a non-integer exponent).",
    "exp": "The exponential overflowed: rescale the input, or use a stable form "
           "(asd.logsumexp, asd.numpy.logaddexp, softplus).",
}
"""What to do about a non-finite value, by the primitive that made it (`Trace.raise_nonfinite`)."""


_INCREASING = frozenset({"sinh", "exp", "exp2", "expm1", "tanh", "arctan", "arcsinh",
                         "arctanh", "arcsin", "log", "log1p", "log2", "log10", "sqrt", "cbrt",
                         "tan", "positive", "copy", "cast"})
"""Elementwise primitives increasing on their domain: they keep which way an input moves."""
_SELECTIONS = frozenset({"reshape", "getitem", "transpose", "broadcast_to", "concatenate",
                         "stack", "pad", "update"})
"""Primitives that only move, copy or pad their inputs' entries (``update``: an assignment,
``a[index] = b``, through a view or not)."""
_MONOTONE_REDUCTIONS = frozenset({"sum", "reduce_max", "median", "quantile", "sort",
                                  "topk_sum"})
"""Primitives nondecreasing in every entry they reduce along ``axis`` (the order statistics
and a sum); sort along its axis per position."""
_ORDER_KEEPING = _INCREASING | _SELECTIONS | _MONOTONE_REDUCTIONS | {
    "negative", "reciprocal", "add", "subtract", "multiply", "divide", "relu", "leaky_relu",
    "maximum", "minimum", "clip", "abs", "integer_pow", "where", "where_logic", "select",
    "hypot", "remainder", "remainder_xy", "proj_box", "proj_nonneg", "proj_nonpos",
    "proj_linf_ball", "real_pow", "cummax"}
"""The primitives `Trace.moves` reads (their order proven); others move both ways."""


def _reads_order(prim) -> bool:
    """Whether `Trace.moves` reads ``prim`` (else its node may move both ways)."""
    return prim.name in _ORDER_KEEPING or hasattr(prim.rule, "piecewise_table")


def _broadcasts(shape: tuple, out: tuple) -> bool:
    """Whether an input of ``shape`` broadcasts to ``out`` (an elementwise operand)."""
    try:
        return shape == out or np.broadcast_shapes(shape, out) == out
    except ValueError:
        return False


def _moves_of_order_statistics(x: np.ndarray, up: np.ndarray, down: np.ndarray,
                               at: np.ndarray, continuous: bool) -> tuple:
    """`moves` of the order statistics ``at`` (positions in the sorted last axis of ``x``)
    from the entries' own, by counting: the k-th smallest exceeds its value ``c`` only if at
    most k entries stay at or below ``c`` (those at ``c`` that cannot rise, and those below
    it, which a continuous input keeps below), and falls below ``c`` only if k + 1 entries
    may go below it. A min rises only where every entry at it rises, a max falls likewise,
    and the second smallest of (-1, 0, relu(t)) is held at 0 by the constant 0. Rows with a
    NaN are not read (no order)."""
    c = np.sort(x, axis=-1)[..., at][..., :, None]
    x, up, down = x[..., None, :], up[..., None, :], down[..., None, :]
    below, tied = x < c, x == c
    stay = np.count_nonzero((below & (continuous | ~up)) | (tied & ~up), axis=-1)
    may_fall = np.count_nonzero(below | (tied & down) | ((x > c) & down & (not continuous)),
                                axis=-1)
    unordered = np.isnan(x).any(axis=-1)
    return (stay <= at) | unordered, (may_fall >= at + 1) | unordered


def _moves_of_square(ins: tuple, x: np.ndarray) -> tuple:
    """`moves` of ``x ** 2`` (and of ``|x|``) from ``x``'s, its sign held near ``x``: it
    moves as ``x`` where ``x > 0``, the other way where ``x < 0``, and never below 0 at 0."""
    up, down = ins
    unknown = np.isnan(x)
    return ((up & (x > 0)) | (down & (x < 0)) | ((x == 0) & (up | down)) | unknown,
            (down & (x > 0)) | (up & (x < 0)) | unknown)


def _moves_of_piecewise(table: tuple, ins: tuple, x: np.ndarray, continuous: bool,
                        both: np.ndarray) -> tuple:
    """`moves` of a `defpiecewise` primitive: an input moving up enters the piece right of
    ``x`` (the one holding it, off the breakpoints), moving down the one left of it, and
    each piece moves the output as the sign of its slope there says: not at all where it
    is constant (a saturated ``hardtanh``, ``relu6``; ``hardtanh`` with ``lo == hi`` is
    constant everywhere), both ways where its slope is 0 but it is not constant (or a
    piece is not a polynomial)."""
    if not continuous:
        return both, both
    bps, parsed, _ = table
    up_in, down_in = ins
    ways = []
    for idx, sign in ((np.searchsorted(bps, x, "right"), 1.0),
                      (np.searchsorted(bps, x, "left"), -1.0)):
        rises, falls = np.zeros(x.shape, bool), np.zeros(x.shape, bool)
        for i, (_, slope, coeffs) in enumerate(parsed):
            here = idx == i
            if coeffs is not None and not any(coeffs[1:]):  # a constant piece
                continue
            if coeffs is None:
                rises, falls = rises | here, falls | here
                continue
            with np.errstate(all="ignore"):
                s = np.asarray(slope(x), dtype=float) * sign
            rises, falls = rises | (here & (s >= 0)), falls | (here & (s <= 0))
        ways.append((rises, falls))
    (r_up, r_down), (l_up, l_down) = ways
    unknown = np.isnan(x)
    return ((up_in & r_up) | (down_in & l_up) | unknown,
            (up_in & r_down) | (down_in & l_down) | unknown)


def _selects(m) -> bool:
    """Whether the map ``m`` only selects or moves its input's entries (a bool mask, a 0/1
    `Mask`, an index, a reshape): its zeros are choices, not slopes."""
    if m is None or isinstance(m, Zero | Mask | Index | Take | Reshape | Transpose):
        return True
    if isinstance(m, Diagonal):
        d = m.d
        return d is None or (np.asarray(d).dtype == bool if backend.is_host(d)
                             else backend.namespace(d).isdtype(d.dtype, "bool"))
    return False


def _nan(v: np.ndarray) -> np.ndarray:
    """Where a host value is NaN (never, for integers and booleans)."""
    return np.isnan(v) if np.issubdtype(v.dtype, np.inexact) else np.zeros(v.shape, bool)


def _has_infinity(v) -> bool:
    """Whether a floating value holds +-inf (NaN does not count)."""
    if backend.is_host(v):
        a = np.asarray(v)
        return a.dtype.kind in "fc" and bool(np.any(np.isinf(a)))
    if not backend.is_floating(v):
        return False
    xp = backend.namespace(v)
    return bool(xp.any(xp.isinf(v)))


def _same_value(a, b) -> bool:
    """Whether a replayed value is the sweep's, bit for bit (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if np.issubdtype(a.dtype, np.inexact) or np.issubdtype(b.dtype, np.inexact):
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


class SideUndefined(Exception):
    """Re-evaluating node ``node`` on another side of a jump failed (``cause``)."""

    def __init__(self, node: int, cause: Exception):
        super().__init__(node, cause)
        self.node, self.cause = node, cause


def summarize(v) -> str:
    a = backend.to_host(v)
    if a.size <= 6:
        return np.array2string(a, precision=6, separator=", ")
    bad = ~np.isfinite(a) if np.issubdtype(a.dtype, np.inexact) else np.zeros(a.shape, bool)
    return f"{a.dtype.name}{list(a.shape)} with {int(bad.sum())} non-finite entries"
