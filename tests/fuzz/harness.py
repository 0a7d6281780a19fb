"""Cases (a program, a point on its kinks, a direction, an argument structure) and the checks
that run one through every transform and compare with the oracle.

A check's `Outcome` is ``ok``, ``refused`` (an `asd.ASDError` where the oracle says the program
is not locally Lipschitz at the point, or uses a feature asd documents as refused), ``skipped``
(the oracle cannot decide; counted, never silent) or one of the failures: ``wrong`` (a number
that disagrees with the oracle), ``raw`` (a raw Python exception from inside asd) and
``bad-refusal`` (an asd error where the oracle says the answer exists).
"""

from __future__ import annotations

import functools
import math
import re
import signal
import traceback
from collections import Counter, namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import asd
from asd.core import series
from asd.core.primitive import rule_context
from asd.testing.exact import as_fractions
from tests import programs as base
from tests.fuzz import ops, oracle
from tests.programs import Op, Program

Pair = namedtuple("Pair", "head tail")

GENERATOR_ERRORS: Counter = Counter()
"""Builders that failed on a draft (a bug of the fuzzer, not asd's): the draw is rejected and
counted here; the campaign reports them."""

STRUCTURES = ("array", "array", "array", "tuple", "namedtuple", "list", "dict", "empty_leaf",
              "python_float", "numpy_scalar", "zero_d", "int_array")
DTYPES = ("float64", "float64", "float64", "float32", "float16")


# ----- cases -----


@dataclass(frozen=True)
class Case:
    """One fuzz case. ``x`` and ``v`` are float64 (dyadic); ``dtype`` is the input's dtype."""

    program: Program
    x: np.ndarray
    v: np.ndarray
    dtype: str = "float64"
    structure: str = "array"
    split: int = 0  # where tuple-like structures cut the flattened input
    seed: int = 0  # cotangents, the jit's second point, the framework's random direction
    v_scale: int = 0  # the direction is v * 2**v_scale (huge and tiny directions)

    def source(self) -> str:
        """A runnable reproducer: the program in its numpy spelling, the point, the direction."""
        lines = [f"x0 = np.array({self.x.tolist()!r}, dtype=np.{self.dtype})  # structure: "
                 f"{self.structure}",
                 f"v = np.array({self.v.tolist()!r})"]
        lines += [ops.source_line(k, op) for k, op in enumerate(self.program.ops, start=1)]
        last = f"x{len(self.program.ops)}"
        summed = self.program.reduce and self.program.shapes[-1]
        lines.append(f"f = np.sum({last})" if summed else f"f = {last}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __repr__(self) -> str:
        return (f"Case({self.dtype}, {self.structure}, split={self.split}, seed={self.seed}, "
                f"v_scale={self.v_scale})\n"
                f"{self.program!r}\n{self.source()}")


def _few(draw: Any, shape: tuple[int, ...], pool: tuple[float, ...]) -> np.ndarray:
    return base._few_values(draw, shape, pool)


@st.composite
def cases(draw: Any, *, vector: bool | None = None, names: tuple[str, ...] | None = None,
          structures: tuple[str, ...] = STRUCTURES, dtypes: tuple[str, ...] = DTYPES,
          max_steps: int = base.MAX_STEPS) -> Case:
    """A random `Case`: ops from ``names`` (default: all but tests.programs' RATIONAL ones),
    scalar (``vector`` False) or array results."""
    vector = draw(st.booleans()) if vector is None else vector
    shapes = base.array_shapes if vector else base.shapes
    shape = draw(shapes)
    x = _few(draw, shape, base.X_ENTRIES)
    v = _few(draw, shape, base.V_ENTRIES)
    assume(np.any(v))
    d = ops.Draft(draw, x)
    pool = names or tuple(n for n in ops.TABLE if n not in ops.UNPLANTED)
    weighted = [n for n in ops.KINKS if n in pool] + list(pool)
    for _ in range(draw(st.integers(1, max_steps))):
        allowed = [n for n in weighted if n not in base._NEED_AN_ARRAY or d.values[0].ndim]
        name = draw(st.sampled_from(allowed))
        try:
            ops.TABLE[name].builder(d)
        except (ValueError, TypeError, IndexError, AttributeError) as e:
            GENERATOR_ERRORS[f"{name}: {type(e).__name__}: {str(e)[:80]}"] += 1
            assume(False)
    d.gather_dead_ends()
    program = Program(tuple(d.ops), tuple(value.shape for value in d.values), not vector)
    assume(not vector or program.shapes[-1] != ())
    structure = draw(st.sampled_from([s for s in structures if _fits(s, shape, x)]))
    dtype = draw(st.sampled_from(dtypes)) if structure != "int_array" else "float64"
    n = int(np.prod(shape, dtype=int))
    split = draw(st.integers(0, n)) if structure in ("tuple", "namedtuple", "list", "dict") else 0
    v_scale = draw(st.sampled_from((0,) * 12 + (1000, -1000)))
    v = v * 2.0**v_scale
    case = Case(program, x, v, dtype, structure, split, draw(st.integers(0, 2**16)), v_scale)
    try:  # programs numpy itself rejects (det of float16, a method of a Python float) are
        numpy_value(case, x)  # not asd's to run
    except (TypeError, ValueError, AttributeError):
        assume(False)
    return case


def _fits(structure: str, shape: tuple[int, ...], x: np.ndarray) -> bool:
    if structure in ("python_float", "numpy_scalar", "zero_d"):
        return shape == ()
    if structure == "int_array":
        return bool(np.all(x == np.round(x)))
    return True


# ----- argument structures -----


def _leaf(a: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(a, dtype=dtype)


def arguments(case: Case, x: np.ndarray) -> tuple[Any, ...]:
    """The arguments the case's function is called with at the point ``x`` (float64)."""
    s, dtype = case.structure, case.dtype
    if s == "array":
        return (_leaf(x, dtype),)
    if s == "python_float":
        return (float(x),)
    if s == "numpy_scalar":
        return (np.dtype(dtype).type(x),)
    if s == "zero_d":
        return (np.array(x, dtype=dtype),)
    if s == "int_array":
        return (np.asarray(x).astype(np.int64),)
    if s == "empty_leaf":
        return (_leaf(x, dtype), np.zeros(0, dtype=dtype))
    flat = np.ravel(x)
    head, tail = _leaf(flat[: case.split], dtype), _leaf(flat[case.split:], dtype)
    if s == "tuple":
        return ((head, tail),)
    if s == "list":
        return ([head, tail],)
    if s == "namedtuple":
        return (Pair(head, tail),)
    return ({"tail": tail, "head": head},)  # keys out of order on purpose


def argnums(case: Case) -> Any:
    return (0, 1) if case.structure == "empty_leaf" else 0


def direction(case: Case, v: np.ndarray) -> Any:
    """``v`` in the structure of the differentiated arguments (dict keys in another order)."""
    s = case.structure
    if s in ("array", "int_array", "zero_d"):
        return np.asarray(v, dtype=float)
    if s in ("python_float", "numpy_scalar"):
        return float(v)
    if s == "empty_leaf":
        return (np.asarray(v, dtype=float), np.zeros(0))
    flat = np.ravel(v).astype(float)
    head, tail = flat[: case.split], flat[case.split:]
    if s == "tuple":
        return (head, tail)
    if s == "list":
        return [head, tail]
    if s == "namedtuple":
        return Pair(head, tail)
    return {"head": head, "tail": tail}


def _assemble(case: Case, args: tuple[Any, ...]) -> Any:
    """The program's input inside the function: the leaves put back together."""
    s = case.structure
    shape = case.program.shapes[0]
    if s in ("array", "python_float", "numpy_scalar", "zero_d", "int_array"):
        return args[0]
    if s == "empty_leaf":
        a, empty = args
        return np.concatenate([np.ravel(a), empty]).reshape(shape)
    parts = args[0]
    head, tail = (parts["head"], parts["tail"]) if s == "dict" else (parts[0], parts[1])
    return np.concatenate([head, tail]).reshape(shape)


def function(case: Case) -> Callable[..., Any]:
    """The case's program as a function of its structured arguments."""

    def f(*args: Any) -> Any:
        return oracle.run(case.program, _assemble(case, args))

    f.__name__ = "fuzzed"
    return f


def numpy_value(case: Case, x: np.ndarray) -> Any:
    """numpy's own value: the function on the arguments as asd receives them (integer and
    bool leaves become float64, as asd documents)."""
    args = arguments(case, x)
    if case.structure == "int_array":
        args = (np.asarray(args[0], dtype=np.float64),)
    with np.errstate(all="ignore"):
        return function(case)(*args)


def flatten_gradient(case: Case, g: Any) -> np.ndarray:
    """A gradient (or a Jacobian's trailing axes) in the arguments' structure, flattened back
    to the program's input shape; raises AssertionError where the structure is not mirrored."""
    s = case.structure
    shape = case.program.shapes[0]
    if s in ("array", "zero_d", "int_array"):
        assert isinstance(g, np.ndarray), f"gradient is a {type(g).__name__}, not an array"
        return g
    if s in ("python_float", "numpy_scalar"):
        assert np.ndim(g) == 0 and not isinstance(g, (tuple, list, dict)), (
            f"gradient of a scalar is {g!r}")
        return np.asarray(g)
    if s == "empty_leaf":
        assert isinstance(g, tuple) and len(g) == 2, f"gradient is {type(g).__name__}"
        assert np.shape(g[1])[-1:] == (0,), f"empty leaf's gradient has shape {np.shape(g[1])}"
        return np.asarray(g[0])
    if s == "dict":
        assert isinstance(g, dict) and set(g) == {"head", "tail"}, f"gradient is {g!r}"
        head, tail = g["head"], g["tail"]
    else:
        expected = {"tuple": tuple, "list": list, "namedtuple": Pair}[s]
        assert type(g) is expected, f"gradient is a {type(g).__name__}, not a {expected.__name__}"
        head, tail = g
    lead = np.shape(head)[: np.ndim(head) - 1]
    joined = np.concatenate([np.asarray(head), np.asarray(tail)], axis=-1)
    return joined.reshape(lead + shape)


# ----- outcomes -----


@dataclass
class Outcome:
    check: str
    status: str  # ok refused skipped, or a failure: wrong raw bad-refusal slow
    detail: str = ""
    kind: str = ""  # the signature's refinement: the mismatch or the error class
    where: str = ""  # the innermost asd/library frame of a raw exception

    @property
    def failed(self) -> bool:
        return self.status in FAILURES


FAILURES = ("wrong", "raw", "bad-refusal", "slow")


def _innermost_asd_frame(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if re.search(r"/(asd|library)/", f.filename)
            and "/tests/" not in f.filename]
    if not ours:
        return ""
    f = ours[-1]
    return f"{f.filename.split('/h23f/')[-1]}:{f.lineno} ({f.name})"


def _error_key(e: BaseException) -> str:
    message = str(e).split("\n")[0]
    message = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", message)
    message = re.sub(r"%#", "%n", message)
    return f"{type(e).__name__}: {message[:90]}"


DOCUMENTED_REFUSALS: dict[tuple[str, tuple], tuple[tuple[str, ...], str]] = {
    ("complex_part", ()): (("OutputError", "UnsupportedError", "ArgumentTypeError"),
                           "complex values (docs/numpy-coverage.md: angle refused, complex)"),
    ("rollaxis", ()): (("UnsupportedError",), "docs/numpy-coverage.md: rollaxis not yet"),
    ("where_nan", ()): (("NotLipschitzError",), "sqrt at 0 (DESIGN.md's error policy: "
                                                 "sqrt and x**0.5 at 0 are refused)"),
    ("setitem_constant", ()): (("TracerBoolError",), "docs/numpy-coverage.md: a traced value "
                               "stored into a plain array is refused (numpy stores the item "
                               "without dispatching, so the write cannot be recorded)"),
    **{("dtype_constant", (("kind", kind),)): (
        ("ArgumentTypeError", "OutputError"),
        "a complex constant makes complex values, which asd refuses wherever they appear "
        "(README.md: ArgumentTypeError for a complex constant, named at its node), even where a "
        "later abs makes the result real") for kind in ("complex128", "complex64", "py_complex")},
    ("where_logic", (("spelling", "functions"),)): (
        ("UnsupportedError",), "docs/numpy-coverage.md: logical_and/or/xor/not refused "
                               "(discrete)"),
}
"""Refusals asd documents, by the op (and parameters) that calls for them."""


@dataclass
class Expect:
    """What the oracle says about a case: the exact or the hybrid answers, and which
    refusals are acceptable."""

    exact: oracle.Exact | None
    hybrid: oracle.Hybrid | None
    value: Any  # numpy's own value
    refusals: dict[str, str] = field(default_factory=dict)  # error class -> why acceptable
    must_refuse: str = ""  # a reason any number would be wrong
    unjudged: dict[str, str] = field(default_factory=dict)  # error class -> why not judged
    elsewhere: Any = None  # () -> whether another ray meets a jump (mpmath: asked lazily)
    jacobian_float_path: bool = True  # the exact Jacobian's steps are floats (`_bit_for_bit`)

    @property
    def oracle_kind(self) -> str:
        return "exact" if self.exact is not None else "mpmath"


def expect(case: Case) -> Expect:
    """Run the oracle for ``case`` (once; every check reads it)."""
    program, x, v = case.program, case.x, case.v
    # integers and Python floats are computed in float64 whatever the case's dtype (`arguments`)
    dtype = np.float64 if case.structure in ("int_array", "python_float") \
        else np.dtype(case.dtype)
    value = numpy_value(case, x)
    e = Expect(None, None, value)
    plain = np.ma.getdata(value) if isinstance(value, np.ma.MaskedArray) else value
    kinds = {np.asarray(plain).dtype.kind}
    if "c" in kinds:  # (a python float to a fractional power of a negative base): any
        # refusal of asd's is right, the class being where asd first meets it (the power's
        # domain, a non-finite value, the complex output); every number is wrong
        e.refusals["ASDError"] = "numpy's result is complex: asd differentiates real programs"
        e.must_refuse = "numpy's result is complex"
    for (name, params), (errors, why) in DOCUMENTED_REFUSALS.items():
        if _uses(program, name, **dict(params)):
            e.refusals.update(dict.fromkeys(errors, why))
    program = oracle_program(case)
    if isinstance(value, np.ma.MaskedArray) or _uses(program, "dtype_constant", kind="masked"):
        e.refusals["UnsupportedError"] = "a masked constant (refusal undocumented: noted)"
        e.refusals["ArgumentTypeError"] = e.refusals["UnsupportedError"]
    if not np.all(np.isfinite(np.asarray(plain, dtype=complex))):
        e.refusals["NonFiniteError"] = "numpy's own value is not finite"
    if oracle.exact_is_float(program, x, dtype):
        e.exact = oracle.exact_oracle(program, x, v)
        if e.exact.jumps:
            e.refusals["NotLipschitzError"] = (
                f"{e.exact.jumps} piecewise-constant entr(y/ies) on a jump at the point")
        elif _uses(program, "sorted_by") and oracle.jumps_beside(program, x, v):
            e.refusals["NotLipschitzError"] = (
                "a gather at tied keys whose values part on the keys' tie surface (exact "
                "gradients): not Lipschitz near the point")
        if e.exact.discontinuous:
            e.must_refuse = "the program jumps at the point (a ray finds the jump)"
    else:
        e.hybrid = oracle.hybrid_oracle(program, x, v, dtype)
        if e.hybrid.jumps:
            e.refusals["NotLipschitzError"] = "a piecewise-constant entry on a jump at the point"
        if e.hybrid.singular:
            e.refusals["NotLipschitzError"] = f"not Lipschitz: {e.hybrid.singular}"
            e.refusals["NonFiniteError"] = e.refusals["NotLipschitzError"]
        if not e.hybrid.jumps:
            e.elsewhere = functools.cache(
                lambda: oracle.hybrid_jumps_elsewhere(program, x, dtype))
        if e.hybrid.flat_jump:
            # the ray stays at a jump, flat to first order: whether the input reaches the
            # other side is a higher order's, which the mpmath oracle does not carry
            e.unjudged["NotLipschitzError"] = f"mpmath: {oracle.FLAT_JUMP}"
    return e


def oracle_program(case: Case) -> Program:
    """The case's program as the oracles run it: with a Python-float argument, each
    ``where_logic`` whose comparisons are of Python floats in numpy's own run (so Python
    bools, whose ``~`` is integer inversion) is marked, since the oracles compute on numpy
    object arrays (whose bools negate)."""
    program = case.program
    if case.structure != "python_float":
        return program
    with np.errstate(all="ignore"):
        values = oracle.evaluate(program, arguments(case, case.x)[0])
    marked = []
    for op in program.ops:
        if op.name == "where_logic":
            pairs = op.args[:2 * len(op.params["cmps"])]
            if all(type(values[i]) is float for i in pairs):
                op = Op(op.name, op.args, {**op.params, "python_bools": True})
        marked.append(op)
    return Program(tuple(marked), program.shapes, program.reduce)


def timed_expect(case: Case) -> tuple[Expect | None, list[Outcome]]:
    """`expect`, or a skip where the oracle cannot decide or runs past `TIME_LIMIT`."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 4 * TIME_LIMIT, 1.0)
    try:
        return expect(case), []
    except (oracle.Undecided, oracle.Singular) as e:
        return None, [Outcome("oracle", "skipped", str(e), type(e).__name__)]
    except CheckTimeout:
        _reset_running_state()
        return None, [Outcome("oracle", "skipped", "the oracle ran past its time", "slow")]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _uses(program: Program, name: str, **params: Any) -> bool:
    return any(op.name == name and all(op.params.get(k) == p for k, p in params.items())
               for op in program.ops)


def _classify(check: str, e: BaseException, expected: Expect) -> Outcome:
    name = type(e).__name__
    if isinstance(e, asd.ASDError):
        for cls in type(e).__mro__:
            if cls.__name__ in expected.refusals:
                return Outcome(check, "refused", expected.refusals[cls.__name__], name)
        for cls in type(e).__mro__:
            if cls.__name__ in expected.unjudged:
                return Outcome(check, "skipped", expected.unjudged[cls.__name__], name)
        if isinstance(e, asd.NotLipschitzError) and expected.elsewhere is not None \
                and expected.elsewhere():
            return Outcome(check, "refused", "a piecewise-constant entry on a jump another "
                           "ray meets (mpmath)", name)
        return Outcome(check, "bad-refusal", f"{name}: {str(e)[:600]}", _error_key(e))
    return Outcome(check, "raw", f"{name}: {str(e)[:600]}", _error_key(e),
                   _innermost_asd_frame(e))


class CheckTimeout(BaseException):
    """A check ran past `TIME_LIMIT` (a BaseException, so that no ``except Exception`` inside
    asd swallows it)."""


TIME_LIMIT = 30.0
"""Seconds one check may take; past it the case is recorded as ``slow``. In tests this only
guards against hangs (time is no verdict on a loaded machine); a campaign sets
`CAMPAIGN_TIME_LIMIT`, where a slow check is a finding."""
CAMPAIGN_TIME_LIMIT = 3.0


def _on_alarm(signum: int, frame: Any) -> None:
    raise CheckTimeout


def _guard(check: str, expected: Expect, body: Callable[[], list[Outcome]]) -> list[Outcome]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT, 1.0)  # repeats: a gc callback may eat one
    try:
        return body()
    except CheckTimeout:
        _reset_running_state()
        return [Outcome(check, "slow", f"more than {TIME_LIMIT:g} s", "slow")]
    except AssertionError as e:
        return [Outcome(check, "wrong", str(e)[:600], str(e).split(":")[0][:60])]
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:
        return [_classify(check, e, expected)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _reset_running_state() -> None:
    """asd's per-thread state of a computation a timeout cut short. The alarm repeats, so a
    second one can land inside a ``with`` block's exit as the first unwinds, and the series
    budget (`asd.core.series.Budget`) or the running rule is then never restored: every later
    program of the batch ran out of an exhausted budget (campaign seed 2951: 7 raw
    SeriesTooLarge on programs of a few nodes). Outside such an interruption both are unset
    between calls."""
    series._running.budget = None
    rule_context.trace = rule_context.node = None


def _no_number(check: str, expected: Expect) -> None:
    assert not expected.must_refuse, (
        f"number where asd must refuse: {expected.must_refuse}")


# ----- comparing values -----


def check_value(got: Any, expected: Expect, what: str = "value") -> None:
    """asd's value against numpy's own, dtype, mask and bits (-0.0 == 0.0) included."""
    want = expected.value
    if isinstance(want, np.ma.MaskedArray):
        assert isinstance(got, np.ma.MaskedArray), (
            f"{what} mask: numpy's result is masked ({np.ma.getmaskarray(want).tolist()}), "
            f"asd's is a plain {type(got).__name__}: {np.asarray(got).tolist()}")
        assert np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want)), f"{what} mask"
        got, want = got.filled(0), want.filled(0)
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, f"{what} dtype: asd {g.dtype}, numpy {w.dtype}"
    assert g.shape == w.shape, f"{what} shape: asd {g.shape}, numpy {w.shape}"
    assert np.array_equal(g, w, equal_nan=True), (
        f"{what}: asd {g.tolist()} != numpy {w.tolist()}")


WEAK_NARROWING = {"float32": np.float32, "0d_float32": np.float32, "float16": np.float16,
                  "array_float16": np.float16}
"""Constant kinds a Python-float argument computes in (NEP 50: weakly typed, so
``x - np.float32(c)`` is float32): `_precision` reads them."""


def _precision(case: Case) -> np.dtype:
    """The dtype whose rounding a derivative is compared within: the case's, or for a
    Python-float argument the narrowest float constant it meets (F65: ``-x - np.float32(c)``
    computes in float32, and its slopes round there)."""
    dtype = np.dtype(case.dtype)
    if case.structure != "python_float":
        return dtype
    for op in case.program.ops:
        narrow = WEAK_NARROWING.get(op.params.get("kind", "")) if op.name == "dtype_constant" \
            else None
        if narrow is not None and np.finfo(narrow).eps > np.finfo(dtype).eps:
            dtype = np.dtype(narrow)
    return dtype


def _compare(what: str, got: Any, case: Case, expected: Expect, exact: Any, mp: Any,
             float_path: bool = True) -> None:
    """``got`` (floats) against the exact answer (Fractions, compared exactly in float64 where
    `_bit_for_bit`; ``float_path``: the oracle's steps were floats) or the mpmath one (within
    the rounding tolerance)."""
    got = np.asarray(got)
    if expected.exact is not None:
        if _bit_for_bit(case, exact, float_path):
            assert oracle.exactly(got, exact), (
                f"{what}: asd {got.tolist()} != exact {_show(exact)}")
        else:
            assert oracle.close(got, exact, _scale(exact), _precision(case)), (
                f"{what} ({case.dtype}): asd {got.tolist()} != exact {_show(exact)}")
        return
    assert got.shape == np.shape(mp), f"{what} shape: asd {got.shape} != {np.shape(mp)}"
    assert oracle.close(got, mp, expected.hybrid.scale, _precision(case)), (
        f"{what}: asd {got.tolist()} != mpmath {_show(mp)}")


def _agrees(got: Any, case: Case, exact: Any, float_path: bool = True) -> bool:
    """``got`` equals the exact answer as `_compare` asks: bit for bit where the program's
    floats are exact (float64, bitwise ops, dyadic answer and steps), within rounding
    otherwise (a float32 argument, var's 1/n)."""
    got = np.asarray(got)
    if _bit_for_bit(case, exact, float_path):
        return oracle.exactly(got, exact)
    return got.shape == np.shape(exact) and oracle.close(got, exact, _scale(exact), case.dtype)


def _bit_for_bit(case: Case, exact: Any, float_path: bool = True) -> bool:
    """Whether asd's floats must equal the exact answer exactly (`_compare`'s rule): a
    float64 argument, ops whose floats are exact on exact operands, an answer that is a
    float, and (``float_path``) every step of the oracle's a float too: a slope through a
    mean of 3 entries is rounded on the way (-3.5 / 3), even where the answer is a float
    again (``1 + 0.75 * (-3.5 / 3) = 1/8``), as `_inner_agrees` treats rounded entries."""
    bitwise = all(ops.exact_floats(op, case.program.shapes, i + 1)
                  for i, op in enumerate(case.program.ops))
    return (case.dtype == "float64" or case.structure == "int_array") and _floats(exact) \
        and bitwise and float_path


def _inner_agrees(g: np.ndarray, d: np.ndarray, case: Case) -> bool:
    """``<g, d>`` is the exact one-sided derivative along ``d`` (as `_agrees` compares: the
    Fractions exactly where the floats are exact, within rounding otherwise)."""
    slope = oracle.inner(as_fractions(g), d)
    e = oracle.exact_oracle(oracle_program(case), case.x, d)
    exact = e.derivative
    # exactly only where g's own entries are exact numbers: a gradient holding 1/6 rounded
    # pairs with d to the exact slope only within rounding
    if _bit_for_bit(case, exact, e.float_path) and _floats(as_fractions(g)):
        return slope == exact[()]
    return _agrees(np.float64(slope), case, exact, e.float_path)


def _floats(exact: Any) -> bool:
    """Whether every exact entry is a float64 number with room to spare (a dyadic rational of
    bounded size), so that asd's floats can be compared with it exactly; 4/19 (np.average's
    weights) is not, and is compared within rounding instead."""
    return all(e.denominator & (e.denominator - 1) == 0 and e.denominator <= 2**40
               and abs(e) <= 2**40 for e in np.ravel(np.asarray(exact, dtype=object)))


def _scale(exact: Any) -> Any:
    flat = [abs(e) for e in np.ravel(np.asarray(exact, dtype=object))]
    return max(flat, default=Fraction(0))


def _show(a: Any) -> str:
    a = np.asarray(a, dtype=object)
    return str(np.vectorize(lambda e: float(e), otypes=[float])(a).tolist()) if a.size else "[]"


# ----- the checks -----


def check_directional(case: Case, expected: Expect) -> list[Outcome]:
    def body() -> list[Outcome]:
        f = function(case)
        try:
            value, derivative = asd.directional(f, argnums(case))(*arguments(case, case.x),
                                                                   direction(case, case.v))
        except asd.NonFiniteError:
            if not _past_float_range(case, expected):
                raise
            return [Outcome("directional", "refused", "the exact one-sided derivative is past "
                            "the float range (a huge direction)", "NonFiniteError")]
        _no_number("directional", expected)
        check_value(value, expected)
        if expected.exact is not None:
            e = expected.exact
            if not np.all(e.ray_limit == e.value):
                raise AssertionError("number where asd must refuse: the program jumps along v")
            _compare("directional derivative", derivative, case, expected, e.derivative, None,
                     e.float_path)
        else:
            h = expected.hybrid
            if h.derivative is None:
                return [Outcome("directional", "skipped", "mpmath: no tangent", "no tangent")]
            _compare("directional derivative", derivative, case, expected, None, h.derivative)
        return [Outcome("directional", "ok")]

    return _guard("directional", expected, body)


def _past_float_range(case: Case, expected: Expect) -> bool:
    """Whether the oracle's one-sided derivative along the (huge) direction exceeds the
    largest float of the argument's dtype: no number can be returned, so a NonFiniteError
    is right (asd's advice: a smaller direction)."""
    d = expected.exact.derivative if expected.exact is not None else (
        expected.hybrid.derivative if expected.hybrid is not None else None)
    if d is None:
        return False
    top = float(np.finfo(np.dtype(case.dtype) if case.structure != "int_array"
                         else np.float64).max)
    return any(abs(oracle.mp_value(e)) > top for e in np.ravel(np.asarray(d, dtype=object)))


def _past_dtype_range(case: Case, exact: Any) -> bool:
    """Whether an entry of an exact result exceeds the largest float of the argument's dtype
    (a float16 argument's derivative can): no number can be returned in that dtype, so a
    NonFiniteError naming the overflow is right (asd's advice: a wider dtype)."""
    top = float(np.finfo(np.dtype(case.dtype) if case.structure != "int_array"
                         else np.float64).max)
    return any(abs(oracle.mp_value(e)) > top for e in np.ravel(np.asarray(exact, dtype=object)))


def _names_dtype_range(e: BaseException) -> bool:
    """Whether a NonFiniteError is asd's refusal of a derivative past the argument dtype's
    range (which only the oracle's derivative can judge)."""
    return "beyond float" in str(e) and "range" in str(e)


def _unjudged_overflow(check: str, why: str) -> Outcome:
    """A refusal of a derivative past the argument dtype's range where the oracle has no
    derivative to judge it by (an mpmath tie left open): skipped, as the numbers would be."""
    return Outcome(check, "skipped", f"{why} (asd: past the dtype's range)",
                   why.split(":")[0] or "unjudged")


def _past_range(check: str) -> Outcome:
    """A NonFiniteError where an exact derivative exceeds the argument dtype's range: no
    number can be returned in that dtype (`_past_dtype_range`)."""
    return Outcome(check, "refused", "an exact derivative is past the argument dtype's range",
                   "NonFiniteError")


def _jacobian_oracle(case: Case, expected: Expect) -> tuple[Any, Any, str]:
    """``(J, w, why-not)``: the limiting Jacobian along v (or [v, w]), exact or mpmath."""
    if expected.exact is not None:
        jac, w, expected.jacobian_float_path = oracle.exact_jacobian_path(
            oracle_program(case), case.x, case.v)
        return jac, w, "" if jac is not None else "exact: v and w leave a tie open"
    h = expected.hybrid
    if h.jacobian is None:
        return None, None, f"mpmath: {h.undecided or h.singular}"
    return h.jacobian, None, ""


def _directions_kw(case: Case, w: Any) -> dict[str, Any]:
    if w is None:
        return {"direction": direction(case, case.v)}
    return {"directions": [direction(case, case.v), direction(case, w)]}


def check_subgrad(case: Case, expected: Expect, jac: Any, w: Any, why: str) -> list[Outcome]:
    def body() -> list[Outcome]:
        f = function(case)
        try:
            value, g = asd.value_and_subgrad(f, argnums(case), **_directions_kw(case, w))(
                *arguments(case, case.x))
        except asd.NonFiniteError as e:
            if jac is None and _names_dtype_range(e):
                return [_unjudged_overflow("subgrad", why)]
            if jac is None or not _past_dtype_range(case, jac):
                raise
            return [_past_range("subgrad")]
        _no_number("subgrad", expected)
        check_value(value, expected)
        if jac is None:
            return [Outcome("subgrad", "skipped", why, why.split(":")[0])]
        flat = flatten_gradient(case, g)
        _compare("subgradient", flat, case, expected, jac, jac, expected.jacobian_float_path)
        return [Outcome("subgrad", "ok")]

    return _guard("subgrad", expected, body)


def _flatten_jacobian(case: Case, jac: Any, out_shape: tuple[int, ...]) -> np.ndarray:
    if case.structure in ("array", "zero_d", "int_array", "python_float", "numpy_scalar"):
        return np.asarray(jac)
    return flatten_gradient(case, jac)


def check_jacobian(case: Case, expected: Expect, jac: Any, w: Any, why: str) -> list[Outcome]:
    def body() -> list[Outcome]:
        f = function(case)
        mode = ("forward", "reverse", None)[case.seed % 3]
        try:
            got = asd.jacobian(f, argnums(case), mode=mode, **_directions_kw(case, w))(
                *arguments(case, case.x))
        except asd.NonFiniteError as e:
            if jac is None and _names_dtype_range(e):
                return [_unjudged_overflow("jacobian", why)]
            if jac is None or not _past_dtype_range(case, jac):
                raise
            return [_past_range("jacobian")]
        _no_number("jacobian", expected)
        if jac is None:
            return [Outcome("jacobian", "skipped", why, why.split(":")[0])]
        out_shape = np.shape(expected.value)
        flat = _flatten_jacobian(case, got, out_shape)
        _compare(f"jacobian (mode={mode})", flat, case, expected, jac, jac,
                 expected.jacobian_float_path)
        return [Outcome("jacobian", "ok")]

    return _guard("jacobian", expected, body)


def cotangent(case: Case, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(case.seed)
    return rng.choice([1.0, -1.0, 0.5, 2.0, 0.0, -0.25], size=shape)


def check_vjp(case: Case, expected: Expect, jac: Any, w: Any, why: str) -> list[Outcome]:
    def body() -> list[Outcome]:
        f = function(case)
        value, pullback = asd.vjp(f, argnums(case), **_directions_kw(case, w))(
            *arguments(case, case.x))
        _no_number("vjp", expected)
        check_value(value, expected)
        ct = cotangent(case, np.shape(expected.value))
        want = None if jac is None else oracle.contract(
            jac, as_fractions(ct) if expected.exact is not None else
            np.vectorize(oracle.mp_value, otypes=[object])(ct.astype(object)),
            len(case.program.shapes[0]))
        try:
            g = pullback(ct if np.ndim(ct) else float(ct))
        except asd.NonFiniteError as e:
            if want is None and _names_dtype_range(e):
                return [_unjudged_overflow("vjp", why)]
            if want is None or not _past_dtype_range(case, want):
                raise
            return [_past_range("vjp")]
        if jac is None:
            return [Outcome("vjp", "skipped", why, why.split(":")[0])]
        flat = flatten_gradient(case, g)
        _compare("vjp", flat, case, expected, want, want, expected.jacobian_float_path)
        return [Outcome("vjp", "ok")]

    return _guard("vjp", expected, body)


def clarke_directions(case: Case) -> np.ndarray:
    """v, -v, a coordinate direction and a fixed dyadic one: (4, *x.shape)."""
    shape = np.shape(case.x)
    n = int(np.prod(shape, dtype=int))
    e0 = np.zeros(n)
    e0[case.seed % max(n, 1)] = 1.0
    mixed = ((np.arange(n) % 3) - 1.0 + 0.5 * (np.arange(n) % 2)).reshape(shape)
    if not np.any(mixed):
        mixed = np.ones(shape)
    return np.stack([case.v, -case.v, e0.reshape(shape), mixed])


def check_clarke(case: Case, expected: Expect) -> list[Outcome]:
    """Each sampled gradient is the limiting gradient of one of the given directions."""
    if case.structure != "array" or expected.exact is None or not case.program.reduce:
        return []

    def body() -> list[Outcome]:
        f = function(case)
        dirs = clarke_directions(case)
        try:
            sample = asd.clarke(f, len(dirs), directions=dirs)(*arguments(case, case.x))
        except asd.NonFiniteError as e:
            # a sampled direction's gradient past the dtype's range (float16's, or float64's
            # through a huge constant) can be no number
            jacs = [oracle.exact_jacobian_path(oracle_program(case), case.x, d)[0]
                    for d in dirs]
            if any(j is not None and _past_dtype_range(case, j) for j in jacs):
                return [_past_range("clarke")]
            if _names_dtype_range(e) and all(j is None for j in jacs):
                return [_unjudged_overflow("clarke", "exact: every direction leaves a tie")]
            raise
        _no_number("clarke", expected)
        check_value(sample.value, expected, "clarke value")
        known, open_dirs = [], []
        for d in dirs:
            jac, w, float_path = oracle.exact_jacobian_path(oracle_program(case), case.x, d)
            if jac is None or w is not None:
                open_dirs.append(d)
            else:
                known.append((jac, float_path))
        got = [np.asarray(g) for g in sample.gradients]
        assert int(np.sum(sample.counts)) == len(dirs), f"clarke counts {sample.counts}"
        assert all(g.dtype == np.dtype(case.dtype) for g in got), (  # as asd.subgrad's
            f"clarke dtype: {[str(g.dtype) for g in got]} for a {case.dtype} argument")
        for jac, float_path in known:
            assert any(_agrees(g, case, jac, float_path) for g in got), (
                f"clarke: the limiting gradient {_show(jac)} of a sampled direction is missing"
                f" from {[g.tolist() for g in got]}")
        for g in got:
            if any(_agrees(g, case, jac, float_path) for jac, float_path in known):
                continue
            ok = any(_inner_agrees(g, d, case) for d in open_dirs)
            assert ok, (f"clarke: sampled gradient {g.tolist()} is no limiting gradient of "
                        f"the directions {dirs.tolist()}")
        return [Outcome("clarke", "ok")]

    return _guard("clarke", expected, body)


def _same(a: Any, b: Any) -> bool:
    """Bit-for-bit equality of two results (trees of arrays and scalars)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    a, b = np.asarray(a), np.asarray(b)
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=True)
            and np.array_equal(np.signbit(a), np.signbit(b)))


def _outcome_of(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "value", call()
    except Exception as e:
        return "error", e


def _jit_calls(case: Case, expected: Expect, check: str,
               calls: list[tuple[np.ndarray, float]]) -> list[Outcome]:
    """``asd.jit`` of the transform against the uncompiled one, bit for bit, call by call;
    the function takes a static argument ``c`` (used through its sign, so that a signature
    that conflated 0.0 and -0.0 would show)."""

    def body() -> list[Outcome]:
        f = function(case)

        def g(*args: Any) -> Any:
            *xs, c = args
            return f(*xs) * math.copysign(1.0, c) + c

        kw = _directions_kw(case, None)
        transform = (asd.value_and_subgrad(g, argnums(case), **kw) if case.program.reduce
                     else asd.jacobian(g, argnums(case), **kw))
        compiled = asd.jit(transform)
        for x, c in calls:
            args = (*arguments(case, x), c)
            kind_u, plain = _outcome_of(lambda: transform(*args))  # noqa: B023
            kind_c, jitted = _outcome_of(lambda: compiled(*args))  # noqa: B023
            where = f"at x={np.ravel(x).tolist()}, static {c!r}"
            if kind_c == "error" and not isinstance(jitted, asd.ASDError):
                raise jitted
            assert kind_u == kind_c, (
                f"{check}: uncompiled gives {_brief(plain)}, compiled {_brief(jitted)} {where}")
            if kind_u == "error":
                assert type(plain) is type(jitted), (
                    f"{check}: uncompiled raises {type(plain).__name__}, compiled "
                    f"{type(jitted).__name__} {where}")
            else:
                assert _same(plain, jitted), (
                    f"{check}: compiled {_brief(jitted)} != uncompiled {_brief(plain)} {where}")
        return [Outcome(check, "ok")]

    return _guard(check, expected, body)


def check_jit(case: Case, expected: Expect) -> list[Outcome]:
    """Replays at the point, at a second point and with changed static arguments; then the
    static argument 0.0 followed by -0.0 (``jit-zero``), a check of its own so that this one
    known defect does not hide the others."""
    x2 = np.roll(np.ravel(case.x), 1).reshape(np.shape(case.x)) * -1.0
    calls = [(case.x, 1.0), (x2, 1.0), (case.x, -2.0), (x2, -2.0), (case.x, 1.0)]
    zero = [(case.x, 0.0), (case.x, -0.0)] if case.seed % 2 else [(case.x, -0.0), (case.x, 0.0)]
    return (_jit_calls(case, expected, "jit", calls)
            + _jit_calls(case, expected, "jit-zero", zero))


def _brief(r: Any) -> str:
    if isinstance(r, BaseException):
        return f"{type(r).__name__}({str(r)[:80]!r})"
    return repr(r)[:200]


CHECKS = ("directional", "subgrad", "jacobian", "vjp", "clarke", "jit")
"""The checks (`check_jit` reports ``jit`` and ``jit-zero``)."""


def run_checks(case: Case, checks: tuple[str, ...] = CHECKS) -> tuple[Expect | None,
                                                                     list[Outcome]]:
    """Every check of ``checks`` that applies to ``case``; the oracle runs once."""
    expected, skipped = timed_expect(case)
    if expected is None:
        return None, skipped
    outcomes: list[Outcome] = []
    if "directional" in checks:
        outcomes += check_directional(case, expected)
        if any(o.status == "slow" for o in outcomes):  # the others would be as slow: one
            return expected, outcomes                   # slow outcome per case is enough
    need_jac = {"subgrad", "jacobian", "vjp"} & set(checks)
    if need_jac and not expected.must_refuse:
        jac, w, why = _jacobian_oracle(case, expected)
    else:
        jac, w, why = None, None, "asd must refuse"
    if case.program.reduce and "subgrad" in checks:
        outcomes += check_subgrad(case, expected, jac, w, why)
    if not case.program.reduce and "jacobian" in checks:
        outcomes += check_jacobian(case, expected, jac, w, why)
    if "vjp" in checks:
        outcomes += check_vjp(case, expected, jac, w, why)
    if "clarke" in checks:
        outcomes += check_clarke(case, expected)
    if "jit" in checks:
        outcomes += check_jit(case, expected)
    return expected, outcomes
