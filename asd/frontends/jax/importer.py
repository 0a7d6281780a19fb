"""A jaxpr interpreted with asd's library (`evaluate`, `check`), the imported program
(`JaxProgram`) and its cache (`import_program`), guarded by everything the trace reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

import asd
from asd.errors import (
    OutputError,
    TracerBoolError,
    UnsupportedError,
)
from asd.frontends import common, reach
from asd.frontends.jax.ops import (
    CALLS,
    CUSTOM_JVP,
    LAX,
    LOCALLY_CONSTANT,
    MULTIPLE,
    USED,
    _lib,
    _move_to_end,
    _raw,
    _select_n,
)

# ----- the interpreter -----

def _body(eqn):
    key = CALLS[eqn.primitive.name]
    body = eqn.params.get(key) if key else None
    if body is None:
        for k in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
            if k in eqn.params:
                body = eqn.params[k]
                break
    if body is None:
        raise UnsupportedError(f"{eqn.primitive.name}: cannot find the called jaxpr")
    if isinstance(body, jcore.ClosedJaxpr):
        return body.jaxpr, list(body.consts)
    return body, []


def _mapped_call(eqn) -> Callable | None:
    """The handler of a JAX-internal call (a ``custom_jvp_call`` or a jitted function) that
    `CUSTOM_JVP` maps as a whole (its body is not read), from the called function's name and
    source file; None for any other call."""
    key = {"custom_jvp_call": "call_jaxpr", "jit": "jaxpr", "pjit": "jaxpr"}.get(
        eqn.primitive.name)
    if key is None:
        return None
    body = eqn.params.get(key)
    info = getattr(getattr(body, "jaxpr", body), "debug_info", None)
    name, _, where = (getattr(info, "func_src_info", None) or "").partition(" at ")
    source = where.rsplit(":", 1)[0].replace("\\", "/")
    for (fn_name, file), handler in CUSTOM_JVP.items():
        if name == fn_name and source.endswith(file):
            return handler
    return None


def _unwrapped_index(v, producer: dict):
    """The variable behind JAX's wrap of a negative index, ``select_n(i < 0, i, i + n)``,
    where ``i`` is an argmax or argmin (never negative, so the wrap is the identity; perhaps
    converted to int32, which `ops._convert` passes through unchanged), else
    ``v``: the start then reaches `ops._dynamic_slice` as the position itself."""
    eqn = producer.get(v)
    if eqn is None or eqn.primitive.name != "select_n" or len(eqn.invars) != 3:
        return v
    pred, keep, wrapped = eqn.invars
    if any(isinstance(u, jcore.Literal) for u in eqn.invars):
        return v
    test, add = producer.get(pred), producer.get(wrapped)
    position = producer.get(keep)
    if position is not None and position.primitive.name == "convert_element_type":
        position = producer.get(position.invars[0])  # int64 positions as int32: the same
    if (test is None or add is None or position is None
            or position.primitive.name not in ("argmax", "argmin")
            or test.primitive.name != "lt" or test.invars[0] is not keep
            or add.primitive.name != "add" or keep not in add.invars):
        return v
    return keep


def _first_true_conditions(eqn, producer: dict) -> list | None:
    """The conditions behind ``jnp.select``'s selector, ``argmax(stack([s0, s1, ...]))`` over
    booleans (the first true one's index, 0 where none is), for a ``select_n`` with more than
    two cases; None for any other selector. ``select_n`` then is a chain of wheres on the
    conditions themselves, as numpy's ``np.select`` path nests them, so a tied condition is
    decided where it is made (an argmax over booleans would be a jump in the selector)."""
    if eqn.primitive.name != "select_n" or len(eqn.invars) <= 3:
        return None
    arg = producer.get(eqn.invars[0])
    if arg is not None and arg.primitive.name == "convert_element_type":
        arg = producer.get(arg.invars[0])
    if arg is None or arg.primitive.name != "argmax" or tuple(arg.params["axes"]) != (0,):
        return None
    stacked = producer.get(arg.invars[0])
    if (stacked is None or stacked.primitive.name != "stack" or stacked.params["axis"] != 0
            or len(stacked.invars) != len(eqn.invars) - 1
            or any(getattr(v.aval, "dtype", None) != np.bool_ for v in stacked.invars)):
        return None
    return list(stacked.invars)


def _selectors_read_only_by_select(jaxpr) -> set[int]:
    """``id``s of the selector argmaxes (and their int casts) that only `jnp.select`'s
    ``select_n`` reads, each of which `_first_true_conditions` rewrites: never evaluated (an
    argmax over booleans has no staged rule, and its value is not needed)."""
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    readers: dict = {}
    for e in jaxpr.eqns:
        for v in e.invars:
            if not isinstance(v, jcore.Literal):
                readers.setdefault(v, []).append(e)
    outs = {v for v in jaxpr.outvars if not isinstance(v, jcore.Literal)}
    skipped: set[int] = set()
    for e in jaxpr.eqns:
        if _first_true_conditions(e, producer) is None:
            continue
        v = e.invars[0]
        while v not in outs and all(_first_true_conditions(r, producer) is not None
                                    and r.invars[0] is v for r in readers.get(v, [])):
            made = producer[v]
            skipped.add(id(made))
            if made.primitive.name != "convert_element_type":
                break
            v = made.invars[0]
    return skipped


def _select_first_true(conditions: list, cases: list):
    """Case k where condition k is the first true one, case 0 where none is."""
    out = cases[0]
    for cond, case in zip(reversed(conditions), reversed(cases), strict=True):
        out = np.where(cond, case, out)
    return out


def _describe(eqn, path: tuple[str, ...]) -> str:
    where = " > ".join(path) if path else "top level"
    text = str(eqn).strip().splitlines()
    line = text[0] if len(text) == 1 else text[0] + " ..."
    src = ""
    info = getattr(eqn, "source_info", None)
    if info is not None:
        try:
            from jax._src import source_info_util

            src = source_info_util.summarize(info)
        except Exception:  # source locations are a courtesy; never fail on them
            src = ""
    return f"equation `{line}` in {where}" + (f" (from {src})" if src else "")


def _is_same_var_compare(eqn) -> bool:
    return (eqn.primitive.name in ("ne", "eq") and len(eqn.invars) == 2
            and not isinstance(eqn.invars[0], jcore.Literal) and eqn.invars[0] is eqn.invars[1])


def _needed(jaxpr) -> list[bool]:
    """Which equations contribute to the outputs (jax.numpy leaves dead ones, like the
    ``sign`` logsumexp computes and drops)."""
    used = {v for v in jaxpr.outvars if not isinstance(v, jcore.Literal)}
    keep = [False] * len(jaxpr.eqns)
    for i in range(len(jaxpr.eqns) - 1, -1, -1):
        eqn = jaxpr.eqns[i]
        if any(v in used for v in eqn.outvars) or eqn.effects:
            keep[i] = True
            used.update(v for v in eqn.invars if not isinstance(v, jcore.Literal))
    return keep


def check(jaxpr, live: list[bool], path: tuple[str, ...] = ()) -> list[bool]:
    """Raise `UnsupportedError` for the first live equation without a mapping; return which
    outputs are live (depend on the differentiated inputs)."""
    flags: dict[Any, bool] = {v: f for v, f in zip(jaxpr.invars, live, strict=True)}

    def is_live(v):
        return not isinstance(v, jcore.Literal) and flags.get(v, False)

    for eqn, needed in zip(jaxpr.eqns, _needed(jaxpr), strict=True):
        if not needed:
            continue
        ins = [is_live(v) for v in eqn.invars]
        name = eqn.primitive.name
        if not any(ins) or name in LOCALLY_CONSTANT or _is_same_var_compare(eqn):
            outs = [False] * len(eqn.outvars)
        elif _mapped_call(eqn) is not None:
            outs = [True] * len(eqn.outvars)
        elif name in CALLS:
            body, _ = _body(eqn)
            label = eqn.params.get("name") or name
            outs = check(body, ins, (*path, f"{name}[{label}]"))
        elif name in CONTROL:
            outs = _check_control(eqn, ins, path)
        elif name in LAX:
            outs = [True] * len(eqn.outvars)
        else:
            raise UnsupportedError(
                f"JAX primitive `{name}` has no asd mapping ({_describe(eqn, path)}). asd never "
                "falls back to JAX's own derivative at a kink. Rewrite it with a supported "
                f"operation, or register a handler: asd.frontends.jax.LAX[{name!r}] = fn."
            )
        for v, f in zip(eqn.outvars, outs, strict=True):
            flags[v] = f
    return [is_live(v) for v in jaxpr.outvars]


def evaluate(jaxpr, consts: list, args: list, path: tuple[str, ...] = (),
             used: tuple[bool, ...] | None = None) -> list:
    """Evaluate a jaxpr on numpy or traced arrays with asd's library. ``used`` says which
    outputs the caller reads (all by default): a `USED` handler skips results nobody reads
    (None in their place)."""
    env: dict[Any, Any] = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = np.asarray(c)
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    producer: dict[Any, Any] = {}
    read_vars = {v for e in jaxpr.eqns for v in e.invars if not isinstance(v, jcore.Literal)}
    read_vars.update(v for v, u in zip(jaxpr.outvars, used or [True] * len(jaxpr.outvars),
                                       strict=True) if u and not isinstance(v, jcore.Literal))
    unread = _selectors_read_only_by_select(jaxpr)
    for eqn, needed in zip(jaxpr.eqns, _needed(jaxpr), strict=True):
        if not needed or id(eqn) in unread:
            if needed:
                producer.update((v, eqn) for v in eqn.outvars)
            continue
        conditions = _first_true_conditions(eqn, producer)
        if conditions is not None:
            cases = [read(v) for v in eqn.invars[1:]]
            env[eqn.outvars[0]] = _select_first_true([read(v) for v in conditions], cases)
            producer[eqn.outvars[0]] = eqn
            continue
        vals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        squares = _sum_of_squares(eqn, producer) if name == "sqrt" else None
        if not any(common.is_traced(v) for v in vals) and name not in CALLS:
            outs = _constant(eqn, vals)     # a call's body is read (custom_jvp cannot bind)
        elif squares is not None:
            base, axes = squares
            outs = [_norm_over(env[base], axes)]
        elif name in LOCALLY_CONSTANT or _is_same_var_compare(eqn):
            outs = _constant(eqn, [_raw(v) for v in vals])
        elif (mapped := _mapped_call(eqn)) is not None:
            try:
                outs = [mapped(*vals)]
            except asd.ASDError as e:
                raise type(e)(f"{e} [while importing {_describe(eqn, path)}]") from e
        elif name in CALLS:
            body, body_consts = _body(eqn)
            label = eqn.params.get("name") or name
            outs = evaluate(body, body_consts, vals, (*path, f"{name}[{label}]"),
                            tuple(v in read_vars for v in eqn.outvars))
        elif name in CONTROL:
            outs = CONTROL[name](eqn, vals, path)
        else:
            if name == "dynamic_slice":
                vals = [vals[0], *(env[_unwrapped_index(v, producer)]
                                   if not isinstance(v, jcore.Literal) else read(v)
                                   for v in eqn.invars[1:])]
            handler = LAX.get(name)
            if handler is None:
                raise UnsupportedError(f"JAX primitive `{name}` has no asd mapping "
                                       f"({_describe(eqn, path)})")
            params = {k: v for k, v in eqn.params.items() if k not in ("sharding",
                                                                         "out_sharding")}
            if name in USED:
                params["used"] = tuple(v in read_vars for v in eqn.outvars)
            try:
                out = handler(*vals, **params)
            except asd.ASDError as e:
                raise type(e)(f"{e} [while importing {_describe(eqn, path)}]") from e
            outs = list(out) if name in MULTIPLE else [out]
        for v, o in zip(eqn.outvars, outs, strict=True):
            env[v] = o
            producer[v] = eqn
    return [read(v) for v in jaxpr.outvars]


# ----- control flow: unrolled, or decided along the ray -----

def _closed(closed) -> tuple[Any, list]:
    return closed.jaxpr, list(closed.consts)


def _cond(eqn, vals, path):
    """``lax.cond``/``switch``: the branch a constant index names; with an index computed
    from the differentiated input every branch runs and ``select_n`` picks, so a tied
    predicate is decided along the ray with the continuity check ``where`` makes."""
    index, *operands = vals
    branches = eqn.params["branches"]
    run = [lambda b=b, k=k: evaluate(*_closed(b), operands, (*path, f"cond[branch {k}]"))
           for k, b in enumerate(branches)]
    if not common.is_traced(index):
        k = int(np.clip(_raw(index), 0, len(branches) - 1))
        return run[k]()
    if len(branches) != 2:
        raise UnsupportedError(f"lax.switch over {len(branches)} branches with an index "
                               "computed from the differentiated input; use lax.cond "
                               "(two branches) or jnp.where")
    outs = [b() for b in run]
    return [_select_n(index, a, b) for a, b in zip(*outs, strict=True)]


def _scan(eqn, vals, path):
    """``lax.scan`` (and ``fori_loop`` with a static trip count), unrolled: the body runs
    ``length`` times on asd's arrays, ties inside decided in every step."""
    p = eqn.params
    body, body_consts = _closed(p["jaxpr"])
    n_consts, n_carry, length = int(p["num_consts"]), int(p["num_carry"]), int(p["length"])
    consts, carry, xs = vals[:n_consts], vals[n_consts:n_consts + n_carry], vals[
        n_consts + n_carry:]
    steps = range(length - 1, -1, -1) if p.get("reverse") else range(length)
    ys = []
    for t in steps:
        out = evaluate(body, body_consts, [*consts, *carry, *(x[t] for x in xs)],
                       (*path, f"scan[step {t}]"))
        carry, y = out[:n_carry], out[n_carry:]
        ys.append(y)
    if p.get("reverse"):
        ys.reverse()
    stacked = [np.stack([y[i] for y in ys]) if ys else
               np.zeros((0,) + tuple(v.aval.shape), v.aval.dtype)
               for i, v in enumerate(eqn.outvars[n_carry:])]
    return [*carry, *stacked]


def _while(eqn, vals, path):
    """``lax.while_loop`` whose predicate does not depend on the differentiated input (a
    counter, a tolerance on constants): run as written. A predicate that does would stop
    at a different step near the point, so the loop is refused."""
    p = eqn.params
    cond, cond_consts = _closed(p["cond_jaxpr"])
    body, body_consts = _closed(p["body_jaxpr"])
    nc, nb = int(p["cond_nconsts"]), int(p["body_nconsts"])
    c_consts, b_consts, carry = vals[:nc], vals[nc:nc + nb], vals[nc + nb:]
    step = 0
    while True:
        (pred,) = evaluate(cond, cond_consts, [*c_consts, *carry], (*path, "while[cond]"))
        if common.is_traced(pred):
            raise TracerBoolError(
                f"lax.while_loop's predicate depends on the differentiated input (after "
                f"{step} steps, {_describe(eqn, path)}): near the point the loop would stop "
                "at another step, so its result jumps. Loop a fixed number of times "
                "(lax.fori_loop with constant bounds, or lax.scan) and select with jnp.where.")
        if not bool(np.asarray(pred)):
            return list(carry)
        carry = evaluate(body, body_consts, [*b_consts, *carry], (*path, f"while[step {step}]"))
        step += 1


CONTROL: dict[str, Callable] = {"cond": _cond, "scan": _scan, "while": _while}
"""Control-flow primitives, interpreted by asd: their bodies are jaxprs evaluated like the
program's own equations."""


def _fixpoint(body, fixed: list[bool], carry: list[bool], rest: list[bool], path) -> list[bool]:
    """Which outputs of a loop body are live, once the carry's liveness stops growing."""
    while True:
        outs = check(body, [*fixed, *carry, *rest], path)
        grown = [a or b for a, b in zip(carry, outs[:len(carry)], strict=True)]
        if grown == carry:
            return outs
        carry = grown


def _check_control(eqn, ins: list[bool], path) -> list[bool]:
    p, name = eqn.params, eqn.primitive.name
    if name == "cond":
        outs = [check(b.jaxpr, ins[1:], (*path, f"cond[branch {k}]"))
                for k, b in enumerate(p["branches"])]
        return [ins[0] or any(o[i] for o in outs) for i in range(len(eqn.outvars))]
    if name == "scan":
        nc, ncar = int(p["num_consts"]), int(p["num_carry"])
        return _fixpoint(p["jaxpr"].jaxpr, ins[:nc], ins[nc:nc + ncar], ins[nc + ncar:],
                         (*path, "scan"))
    nc, nb = int(p["cond_nconsts"]), int(p["body_nconsts"])
    outs = _fixpoint(p["body_jaxpr"].jaxpr, ins[nc:nc + nb], ins[nc + nb:], [],
                     (*path, "while"))
    return [a or b for a, b in zip(ins[nc + nb:], outs, strict=True)]


def _sum_of_squares(eqn, producer) -> tuple[Any, tuple[int, ...]] | None:
    """``(x, axes)`` when ``eqn`` is ``sqrt(reduce_sum(x * x))`` or ``sqrt(reduce_sum(x**2))``."""
    (arg,) = eqn.invars
    total = producer.get(arg)
    if total is None or total.primitive.name != "reduce_sum":
        return None
    square = producer.get(total.invars[0])
    if square is None:
        return None
    name, ins = square.primitive.name, square.invars
    is_square = ((name == "mul" and len(ins) == 2 and ins[0] is ins[1]
                  and not isinstance(ins[0], jcore.Literal))
                 or (name == "integer_pow" and square.params.get("y") == 2))
    if not is_square or isinstance(ins[0], jcore.Literal):
        return None
    return ins[0], tuple(int(a) for a in total.params["axes"])


def _norm_over(x, axes: tuple[int, ...]):
    """The Euclidean norm over ``axes`` (several axes are flattened into one)."""
    norm = _lib("norm")
    if len(axes) == 1:
        return norm(x, axis=axes[0])
    moved, _ = _move_to_end(x, axes)
    flat = moved.reshape(np.shape(moved)[:np.ndim(x) - len(axes)] + (-1,))
    return norm(flat, axis=-1)


def _constant(eqn, vals) -> list:
    """An equation on constants: JAX computes it (no derivative flows through it). Inside
    a transformation (a staged sweep under ``jax.jit``) constants stay concrete where their
    inputs are (``ensure_compile_time_eval``); a result that depends on a traced,
    undifferentiated argument stays a JAX value."""
    with jax.ensure_compile_time_eval():
        out = eqn.primitive.bind(*vals, **eqn.params)
    outs = out if eqn.primitive.multiple_results else [out]
    return [o if isinstance(o, jax.core.Tracer) else np.asarray(o) for o in outs]


def _dtype(a) -> np.dtype:
    return np.dtype(a.dtype) if hasattr(a, "dtype") else np.result_type(a)


def _inexact(a) -> bool:
    """Floating or complex (JAX's own test: a PRNG key array's extended dtype is not)."""
    dtype = getattr(a, "dtype", None)
    return jax.dtypes.issubdtype(dtype if dtype is not None else np.result_type(a), np.inexact)


def _spec(a) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(a), _dtype(a))


def _make_jaxpr(fn: Callable, args: tuple):
    """``jax.make_jaxpr`` through a fresh wrapper, with tracing failures as asd errors.

    JAX caches traces by function identity and ignores the globals and closure values the
    function reads; asd's own cache (`import_program`) keys on those, so each import must
    really trace: a fresh wrapper is a function JAX has never seen.
    """
    label = f"`{getattr(fn, '__qualname__', type(fn).__qualname__)}`"
    try:
        closed, out_shape = jax.make_jaxpr(lambda *a: fn(*a), return_shape=True)(*args)
    except (jax.errors.ConcretizationTypeError,         # TracerBoolConversionError and kin
            jax.errors.TracerIntegerConversionError) as e:
        raise TracerBoolError(
            f"{label} uses a value computed from its inputs as a Python value (a branch, "
            f"bool(), int() or an index), at {reach.user_line(e)}: a Python `if` picks one "
            "side for every point, so at a tie it ignores the direction asd differentiates "
            "along. Write the choice as jnp.where(cond, a, b) (or jnp.maximum, jnp.clip...)."
        ) from e
    except (jax.errors.JAXTypeError, jax.errors.JAXIndexError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UnsupportedError(
            f"JAX could not trace {label}: {type(e).__name__}: {first} (at {reach.user_line(e)}). "
            "asd imports JAX programs through jax.make_jaxpr, which runs the function on "
            "abstract arrays: use jax.numpy on the inputs (not numpy, .item() or boolean masks "
            "with data-dependent shapes: jnp.where keeps the shape)."
        ) from e
    leaves = jax.tree_util.tree_leaves(out_shape)
    if not leaves or any(not hasattr(o, "shape") for o in leaves):
        raise OutputError(f"{label} returned {out_shape!r}: asd differentiates functions "
                          "returning arrays (a missing `return`?).")
    return closed, out_shape


class JaxProgram:
    """``fn``'s jaxpr at example arguments, as a function of numpy (or traced) pytrees.

    ``live`` names the arguments that are differentiated (all by default); integer and
    boolean leaves never are (labels, indices).
    """

    def __init__(self, fn: Callable, args: tuple, live: tuple[int, ...] | None = None):
        self.fn = fn
        closed, out_shape = _make_jaxpr(fn, args)
        self.closed = closed
        self.in_tree = jax.tree_util.tree_structure(args)
        self.out_tree = jax.tree_util.tree_structure(out_shape)
        live_args = range(len(args)) if live is None else live
        flags = [i in live_args and _inexact(leaf) for i, a in enumerate(args)
                 for leaf in jax.tree_util.tree_leaves(a)]
        check(closed.jaxpr, flags)
        self._vjps: dict[Any, Callable] = {}

    def numpy_fn(self, *args):
        leaves = jax.tree_util.tree_leaves(args, is_leaf=common.is_traced)
        outs = evaluate(self.closed.jaxpr, list(self.closed.consts), leaves)
        return jax.tree_util.tree_unflatten(self.out_tree, outs)

    def with_vjp(self, seed) -> Callable:
        """This program as a ``jax.custom_vjp`` (see `function`), built once per seed."""
        if seed not in self._vjps:
            from asd.frontends.jax.dropin import custom_vjp  # the drop-in builds on this module

            self._vjps[seed] = custom_vjp(self, seed)
        return self._vjps[seed]



# ----- the cache: a program per function, argument types and reachable state -----

_CACHE: dict[tuple, tuple[JaxProgram, list]] = {}
CACHE_SIZE = 64

IMPORTS = {"count": 0}
"""How many jaxprs have been traced for asd (each cache miss adds one); tests read it."""


def _token(value):
    """JAX arrays read by ``fn`` are baked into its jaxpr as constants: count them by value."""
    if isinstance(value, jax.core.Tracer):
        return "tracer", id(value)
    if isinstance(value, jax.Array):
        return ("jax.Array", value.shape, str(value.dtype),
                hash(np.ascontiguousarray(np.asarray(value)).tobytes()))
    return None


def import_program(fn: Callable, args: tuple, live: tuple[int, ...] | None = None
                   ) -> JaxProgram:
    """The program of ``fn`` at arguments of these shapes and dtypes, cached.

    The key is ``fn``'s identity, the arguments' tree, shapes and dtypes, which arguments are
    differentiated, and the fingerprint of everything ``fn`` reaches (`asd.frontends.reach`):
    closure values, globals, object attributes, Python flags, and the values of the arrays it
    closes over (JAX bakes those into the jaxpr). Any change there traces anew.
    """
    state, held = reach.fingerprint(fn, _token)
    specs = tuple((np.shape(a), str(_dtype(a)))
                  for a in jax.tree_util.tree_leaves(args))
    key = (id(fn), jax.tree_util.tree_structure(args), specs, live, state)
    hit = _CACHE.get(key)
    if hit is not None and hit[0].fn is fn:
        return hit[0]
    if len(_CACHE) >= CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    prog = JaxProgram(fn, jax.tree_util.tree_map(_spec, args), live)
    IMPORTS["count"] += 1
    _CACHE[key] = (prog, held)
    return prog


def _to_numpy(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a), tree)


def program(fn: Callable, *args) -> asd.Program:
    """The asd ``Program`` of a JAX function at example arguments."""
    prog = import_program(fn, args)
    return asd.trace(prog.numpy_fn)(*_to_numpy(args))
