"""The tie-free fast path of a compiled program: one generated Python function per program.

A replay (`asd.core.jit`) still calls every rule, and each rule builds its linear map: on
small programs those objects, not the arithmetic, are the cost. For a float64 numpy
program without discontinuous nodes this module writes the forward sweep, the tie tests
and the reverse sweep as straight-line Python over the program's own values, compiles it
once, and runs it instead. The common primitives are inlined with exactly the arithmetic
their rules use (the same functions, the same operands, the same accumulation order), so
the numbers are the rules' bit for bit; any other node calls its rule as the sweep does,
with tangents that refuse to be read. The generated function returns None at the first
tie (a tangent asked for, an operand equal to a kink), leaving that call to the replay,
which runs the full rules; it never decides a tie itself.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable

import numpy as np

from asd.core.linear import FanIn, unbroadcast
from asd.core.primitive import ConstantTangent, ZeroTangent
from asd.core.program import Literal


class TieMet(Exception):
    """A rule asked for a tangent: the fast path gives the call to the full replay."""


class UntiedTangent:
    """A lazy tangent for the fast path: reading it means a tie, which is not its job."""

    __slots__ = ("shape", "dtype")
    is_zero = False

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    def __call__(self, index=None):
        raise TieMet


def eligible(nodes: list, n_inputs: int, outs: list, guards: dict) -> bool:
    """Whether a program can take the fast path: numpy float64 throughout, no node that
    jumps or stops gradients, no guard, one traced scalar output."""
    if guards or len(outs) != 1 or type(outs[0]) is not int:
        return False
    if nodes[outs[0]].shape != () or not nodes[outs[0]].active:
        return False
    for node in nodes:
        if not isinstance(node.dtype, np.dtype) or node.dtype != np.float64:
            return False
        prim = node.prim
        if prim is not None and (prim.discontinuous or prim.stops_gradient
                                 or prim.rule is None):
            return False
        for a in node.args:
            if type(a) is Literal and not isinstance(a.value, int | float | np.ndarray
                                                     | np.generic):
                return False
    return True


class _Writer:
    """Source lines and the constants they name."""

    def __init__(self, scalar: bool = False):
        self.lines: list[str] = []
        self.env: dict = {"np": np, "unbroadcast": unbroadcast, "TieMet": TieMet}
        # every value a 0-d float64: the path runs on Python floats (IEEE doubles, the same
        # bits as numpy's float64 arithmetic, without a ufunc call per operation)
        self.scalar = scalar

    def const(self, name: str, value) -> str:
        self.env[name] = value
        return name

    def line(self, text: str) -> None:
        self.lines.append(text)

    def literal(self, name: str, value) -> str:
        """A constant operand in the source itself where its ``repr`` is the same float
        (finite Python floats on the scalar path): a constant load instead of a global
        lookup per use, and no global per constant. Anything else is named (`const`)."""
        if type(value) is float and math.isfinite(value):
            text = repr(value)
            return f"({text})" if text.startswith("-") else text
        return self.const(name, value)


_LOCAL = re.compile(r"\b([vdefgxL]\d+)\b")
"""The generated function's locals: values ``v``, slopes ``d e f``, operands ``x``, maps ``L``,
cotangents ``g`` (globals are named ``c impl p rule dx slope piece`` and never match)."""


def share_locals(lines: list[str]) -> list[str]:
    """The body with locals whose lifetimes do not overlap sharing one name (``r0, r1, …``).

    The body is straight-line: every name is written at or after its first line and read at
    or before its last (an ``if/elif/else`` of one node writes the same names on each
    branch), so two names whose line ranges are disjoint never hold a value at once. A
    333-step scalar chain keeps ~700 live names instead of ~3300: a frame that small stays
    in cache between calls (the chain's call time fell ~4x cold, ~2x warm). The arithmetic
    is untouched, so every bit is the same."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, text in enumerate(lines):
        for name in _LOCAL.findall(text):
            first.setdefault(name, i)
            last[name] = i
    slot: dict[str, int] = {}
    ends: list[tuple[int, int]] = []  # (last line, slot) of the names holding a slot
    free: list[int] = []
    count = 0
    for name in sorted(first, key=first.__getitem__):
        while ends and ends[0][0] < first[name]:  # freed strictly before this name's first line
            free.append(heapq.heappop(ends)[1])
        if not free:
            free.append(count)
            count += 1
        slot[name] = free.pop()
        heapq.heappush(ends, (last[name], slot[name]))
    return [_LOCAL.sub(lambda m: f"r{slot[m.group(1)]}", text) for text in lines]


def _same(in_shape: tuple, out_shape: tuple, d_ndim: int | None) -> bool:
    """`Diagonal.same`: the pull is one multiplication, no broadcast to undo."""
    return in_shape == out_shape and (d_ndim is None or d_ndim <= len(in_shape))


def _diag_pull(g: str, d: str | None, in_shape: tuple, out_shape: tuple,
               d_ndim: int | None) -> str:
    """The expression `Diagonal(d, in_shape, out_shape).pull(g)` evaluates."""
    r = g if d is None else f"{g} * {d}"
    if _same(in_shape, out_shape, d_ndim):
        return r
    return f"unbroadcast({r}, {in_shape!r}, 0)"


def generate(nodes: list, n_diff: int, n_inputs: int, out: int) -> Callable:
    """``run(inputs) -> (value, [gradient or None per differentiated input]) | None``."""
    w = _Writer(scalar=all(node.shape == () for node in nodes))
    w.line("def run(inputs):")
    w.line(f"    ({''.join(f'v{k}, ' for k in range(n_inputs))}) = inputs")
    if w.scalar:
        for k in range(n_inputs):
            w.line(f"    v{k} = float(v{k})")
    pulls: dict[int, list[tuple[int, str]]] = {}  # node -> [(input node, expression)]
    for k in range(n_inputs, len(nodes)):
        node = nodes[k]
        args = [f"v{a}" if type(a) is int else w.literal(f"c{k}_{i}", _literal(w, a.value))
                for i, a in enumerate(node.args)]
        shapes = [tuple(nodes[a].shape) if type(a) is int else tuple(np.shape(a.value))
                  for a in node.args]
        wants = [type(a) is int and nodes[a].active for a in node.args]
        if not any(wants):  # no input moves: the sweep runs the plain implementation
            impl = w.const(f"impl{k}", node.prim.impl)
            w.const(f"p{k}", dict(node.params))
            w.line(f"    v{k} = {impl}({', '.join(args)}, **p{k})")
            continue
        emit = _INLINE.get(node.prim.name)
        if emit is None and getattr(node.prim.rule, "elementwise", None) is not None:
            emit = _smooth
        if emit is None and w.scalar and hasattr(node.prim.rule, "piecewise_table"):
            emit = _piecewise
        if emit is None or not emit(w, k, node, args, shapes, wants, pulls):
            _generic(w, k, node, args, wants, pulls, nodes)
    w.line(f"    g{out} = ONE")
    w.const("ONE", 1.0 if w.scalar else np.ones((), np.float64))
    have = {out}  # the nodes holding a cotangent: only those reach the output
    for k in range(out, n_inputs - 1, -1):
        if k not in have or k not in pulls:
            continue
        for r, expr in pulls[k]:
            if r in have:
                w.line(f"    g{r} = g{r} + {expr}")
            else:
                w.line(f"    g{r} = {expr}")
                have.add(r)
    grads = ", ".join(f"g{i}" if i in have else "None" for i in range(n_diff))
    w.line(f"    return v{out}, [{grads}{',' if n_diff == 1 else ''}]")
    source = "\n".join([w.lines[0], *share_locals(w.lines[1:])])
    exec(compile(source, "<asd.jit fast path>", "exec"), w.env)
    run = w.env["run"]
    run.source = source
    return run


def _literal(w: _Writer, value):
    """A constant operand as the path reads it: a Python float on the scalar path where
    that is exact (a float64 or smaller float scalar), else as recorded."""
    if w.scalar and (type(value) in (float, int) or (
            isinstance(value, np.ndarray | np.generic) and np.ndim(value) == 0
            and np.asarray(value).dtype.kind == "f"
            and np.asarray(value).dtype.itemsize <= 8)):
        return float(value)
    return value


def _generic(w: _Writer, k: int, node, args, wants, pulls, nodes) -> None:
    """Any rule, called as the sweep calls it, its map pulled as `Trace.pull` pulls it."""
    dxs = [UntiedTangent(nodes[a].shape, nodes[a].dtype) if want
           else ZeroTangent(nodes[a].shape, nodes[a].dtype) if type(a) is int
           else ConstantTangent(a.value) for a, want in zip(node.args, wants, strict=True)]
    rule = w.const(f"rule{k}", node.prim.rule)
    w.const(f"dx{k}", dxs)
    w.const(f"p{k}", dict(node.params))
    w.line(f"    v{k}, L{k} = {rule}([{', '.join(args)}], dx{k}, **p{k})")
    if not node.active:
        return
    w.const("pull_one", _pull_one)
    if len(node.args) == 1:
        pulls[k] = [(node.args[0], f"pull_one(L{k}, g{k})")]
        return
    # a FanIn: one map per input, pulled where the input moves (a map left None there,
    # which rules do not return for moving inputs, makes the call fall back to the replay)
    pulls[k] = [(a, f"L{k}.maps[{i}].pull(g{k})") for i, a in enumerate(node.args)
                if wants[i]]


def _pull_one(lin, g):
    """`Trace.pull` on a one-input node: a map, or a FanIn of one."""
    return lin.maps[0].pull(g) if type(lin) is FanIn else lin.pull(g)


# ----- inlined rules (each mirrors its rule in library/ exactly) -----

def _scalars(node, shapes) -> bool:
    """A 0-d node of 0-d operands: Python's operators on numpy scalars give the ufunc's
    IEEE result without the ufunc's call overhead."""
    return node.shape == () and all(s == () for s in shapes)


def _binary_value(w, k, node, args, shapes, op: str) -> None:
    if _scalars(node, shapes):
        w.line(f"    v{k} = {args[0]} {op} {args[1]}")
    else:
        impl = w.const(f"impl{k}", node.prim.impl)
        w.line(f"    v{k} = {impl}({args[0]}, {args[1]})")


def _add_like(sign_b: str | None):
    def emit(w, k, node, args, shapes, wants, pulls):
        out = tuple(node.shape)
        _binary_value(w, k, node, args, shapes, "+" if sign_b is None else "-")
        pulls[k] = []
        if wants[0]:
            pulls[k].append((node.args[0], _diag_pull(f"g{k}", None, shapes[0], out, None)))
        if wants[1]:
            pulls[k].append((node.args[1], _diag_pull(f"g{k}", sign_b, shapes[1], out,
                                                      None if sign_b is None else 0)))
        return True

    return emit


def _multiply(w, k, node, args, shapes, wants, pulls):
    out = tuple(node.shape)
    a, b = args
    _binary_value(w, k, node, args, shapes, "*")
    pulls[k] = []
    if wants[0]:
        pulls[k].append((node.args[0], _diag_pull(f"g{k}", b, shapes[0], out, len(shapes[1]))))
    if wants[1]:
        pulls[k].append((node.args[1], _diag_pull(f"g{k}", a, shapes[1], out, len(shapes[0]))))
    return True


def _divide(w, k, node, args, shapes, wants, pulls):
    out = tuple(node.shape)
    b = args[1]
    _binary_value(w, k, node, args, shapes, "/")
    pulls[k] = []
    if wants[0]:
        inverse = f"(1.0 / {b})" if _scalars(node, shapes) else f"(1.0 / np.asarray({b}))"
        pulls[k].append((node.args[0], _diag_pull(f"g{k}", inverse,
                                                  shapes[0], out, len(shapes[1]))))
    if wants[1]:
        pulls[k].append((node.args[1], _diag_pull(f"g{k}", f"(-v{k} / {b})", shapes[1], out,
                                                  len(out))))
    return True


def _negative(w, k, node, args, shapes, wants, pulls):
    if _scalars(node, shapes):
        w.line(f"    v{k} = -{args[0]}")
    else:
        impl = w.const(f"impl{k}", node.prim.impl)
        w.line(f"    v{k} = {impl}({args[0]})")
    if wants[0]:
        pulls[k] = [(node.args[0], _diag_pull(f"g{k}", "-1.0", shapes[0], tuple(node.shape),
                                              0))]
    return True


def _kink_at_zero(w, k, x: str) -> None:
    """``x{k}``: the operand as the rule reads it (an array), and the exit at a tie at 0."""
    w.line(f"    x{k} = np.asarray({x})")
    w.line(f"    if (x{k} == 0).any(): raise TieMet")


def _abs(w, k, node, args, shapes, wants, pulls):
    (x,) = args
    if shapes[0] == ():
        w.line(f"    if {x} == 0: raise TieMet")
        w.line(f"    v{k} = abs({x})")
        w.line(f"    d{k} = 1.0 if {x} >= 0 else -1.0")
    else:
        _kink_at_zero(w, k, x)
        w.line(f"    v{k} = np.abs(x{k})")
        w.line(f"    d{k} = np.where(x{k} >= 0, 1.0, -1.0).astype(x{k}.dtype)")
    if wants[0]:
        pulls[k] = [(node.args[0], f"g{k} * d{k}")]
    return True


def _relu(w, k, node, args, shapes, wants, pulls):
    if w.scalar:  # 0 (a tie) and NaN leave to the full sweep
        x = args[0]
        w.line(f"    if {x} > 0.0: v{k} = {x}; d{k} = 1.0")
        w.line(f"    elif {x} < 0.0: v{k} = 0.0; d{k} = 0.0")
        w.line("    else: raise TieMet")
        if wants[0]:
            pulls[k] = [(node.args[0], f"g{k} * d{k}")]
        return True
    _kink_at_zero(w, k, args[0])
    w.line(f"    v{k} = np.maximum(x{k}, 0)")
    if wants[0]:
        pulls[k] = [(node.args[0], f"g{k} * np.asarray(x{k} > 0)")]
    return True


def _select(first_wins: str):
    def emit(w, k, node, args, shapes, wants, pulls):
        out = tuple(node.shape)
        a, b = args
        if w.scalar:  # equal operands (a tie) and NaN leave to the full sweep
            loses = "<" if first_wins == ">" else ">"
            w.line(f"    if {a} {first_wins} {b}: v{k} = {a}; d{k} = 1.0; e{k} = 0.0")
            w.line(f"    elif {a} {loses} {b}: v{k} = {b}; d{k} = 0.0; e{k} = 1.0")
            w.line("    else: raise TieMet")
            pulls[k] = [(r, f"g{k} * {m}{k}") for r, m, want in
                        ((node.args[0], "d", wants[0]), (node.args[1], "e", wants[1])) if want]
            return True
        impl = w.const(f"impl{k}", node.prim.impl)
        w.line(f"    v{k} = {impl}({a}, {b})")
        w.line(f"    if np.any({a} == {b}): raise TieMet")
        w.line(f"    d{k} = np.asarray(np.broadcast_to({a} {first_wins} {b}, {out!r}))")
        pulls[k] = []
        if wants[0]:
            pulls[k].append((node.args[0], _diag_pull(f"g{k}", f"d{k}", shapes[0], out,
                                                      len(out))))
        if wants[1]:
            pulls[k].append((node.args[1], _diag_pull(f"g{k}", f"~d{k}", shapes[1], out,
                                                      len(out))))
        return True

    return emit


def _sum(w, k, node, args, shapes, wants, pulls):
    from asd.core.linear import Sum

    impl = w.const(f"impl{k}", node.prim.impl)
    params = dict(node.params)
    w.const(f"p{k}", params)
    w.line(f"    v{k} = {impl}({args[0]}, **p{k})")
    if wants[0]:
        m = Sum(params.get("axis"), params.get("keepdims", False), shapes[0],
                tuple(node.shape))
        g = f"g{k}"
        if not m.keepdims:
            kept = tuple(1 if i in m.axis else n for i, n in enumerate(m.in_shape))
            g = f"np.reshape({g}, {kept!r})"
        pulls[k] = [(node.args[0], f"np.broadcast_to({g}, {m.in_shape!r})")]
    return True


def _smooth(w, k, node, args, shapes, wants, pulls):
    impl, derivative = node.prim.rule.elementwise
    f = w.const(f"impl{k}", impl)
    df = w.const(f"slope{k}", derivative)
    w.line(f"    v{k} = float({f}({args[0]}))" if w.scalar else f"    v{k} = {f}({args[0]})")
    if wants[0]:
        w.line(f"    d{k} = {df}({args[0]}, v{k})")
        # `Diagonal(d, shape(x))`: one multiplication when d does not widen x
        pulls[k] = [(node.args[0], f"g{k} * d{k}" if shapes[0] == tuple(node.shape)
                     else f"unbroadcast(g{k} * d{k}, {shapes[0]!r}, 0)")]
    return True


def _horner_source(coeffs: tuple, x: str) -> str:
    """The expression `asd.extend`'s Horner evaluation computes, on Python floats: the same
    multiplications and additions in the same order, so the same bits."""
    expr = repr(float(coeffs[-1]))
    for c in coeffs[-2::-1]:
        expr = f"({expr}) * {x} + {float(c)!r}"
    return expr


def _piecewise(w, k, node, args, shapes, wants, pulls):
    """A `defpiecewise` primitive on a scalar: the piece whose open interval holds ``x``; a
    breakpoint (a tie) or NaN leaves to the full sweep."""
    bps, parsed, _ = node.prim.rule.piecewise_table(dict(node.params))
    (x,) = args
    bounds = [-np.inf, *map(float, bps), np.inf]
    first = True
    for i, (value, slope, coeffs) in enumerate(parsed):
        lo, hi = bounds[i], bounds[i + 1]
        if lo >= hi:
            continue  # an empty piece between repeated breakpoints: the ray skips it
        test = " and ".join(t for t in (f"{x} > {lo!r}" if lo > -np.inf else "",
                                         f"{x} < {hi!r}" if hi < np.inf else "") if t)
        if coeffs is not None:
            v = _horner_source(coeffs, x)
            d = _horner_source(tuple(j * c for j, c in enumerate(coeffs))[1:] or (0,), x)
        else:
            v = f"float({w.const(f'piece{k}_{i}', value)}({x}))"
            d = f"float({w.const(f'slope{k}_{i}', slope)}({x}))"
        w.line(f"    {'if' if first else 'elif'} {test or 'True'}: v{k} = {v}; d{k} = {d}")
        first = False
    w.line("    else: raise TieMet")
    if wants[0]:
        pulls[k] = [(node.args[0], f"g{k} * d{k}")]
    return True


def _clip(w, k, node, args, shapes, wants, pulls):
    """``clip(x, lo, hi)`` on scalars with ``lo < hi``: ``x`` strictly inside or outside;
    ``x`` on a bound, ``lo >= hi`` and NaN leave to the full sweep."""
    if not w.scalar:
        return False
    x, lo, hi = args
    w.line(f"    if {lo} < {x} < {hi}: v{k} = {x}; d{k} = 1.0; e{k} = 0.0; f{k} = 0.0")
    w.line(f"    elif {x} < {lo} < {hi}: v{k} = {lo}; d{k} = 0.0; e{k} = 1.0; f{k} = 0.0")
    w.line(f"    elif {lo} < {hi} < {x}: v{k} = {hi}; d{k} = 0.0; e{k} = 0.0; f{k} = 1.0")
    w.line("    else: raise TieMet")
    pulls[k] = [(r, f"g{k} * {m}{k}") for r, m, want in zip(node.args, "def", wants) if want]
    return True


_INLINE = {
    "add": _add_like(None),
    "subtract": _add_like("-1.0"),
    "multiply": _multiply,
    "divide": _divide,
    "negative": _negative,
    "abs": _abs,
    "relu": _relu,
    "maximum": _select(">"),
    "minimum": _select("<"),
    "sum": _sum,
    "clip": _clip,
}
