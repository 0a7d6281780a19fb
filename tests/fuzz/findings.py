"""What the fuzz campaigns found, one `Finding` per defect (tests/fuzz/FINDINGS.md says more).

Each finding recognises its failures (``matches``: a check's `harness.Outcome` on a `Case`),
names the ops that trigger it (``triggers``: the campaign's ``deep`` phase leaves them out, so
that a known defect cannot hide the others behind it) and pins a minimal reproducer
(``reproducer``). While a finding is open, test_fuzz_numpy.py / test_fuzz_frameworks.py run its
reproducer under an explicit ``xfail(strict=True)``: when the defect is fixed the test passes,
strict xfail turns that into a failure, and the finding is marked ``fixed=True`` here. A fixed
finding's reproducer is a plain regression test (no failure it matches, none unexplained), and
the random tests stop tolerating its failures.

The random CI tests tolerate a failure only where an open finding here matches it, and report
it under the finding's name (hypothesis ``event``); anything else fails them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tests.fuzz.harness import Case, Outcome
from tests.programs import Op, Program


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    known: bool  # listed among issue 23's known defects (being fixed elsewhere)
    fault: str  # the file most probably at fault
    matches: Callable[[Case, Outcome], bool]
    triggers: tuple[str, ...] = ()  # ops (or "structure:<name>", "check:<name>") it needs
    reproducer: Callable[[], Case] | None = None
    frameworks: tuple[str, ...] = field(default=())  # the reproducer runs through these
    fixed: bool = False  # fixed: the reproducer is a regression test, failures not tolerated


def _uses(case: Case, *names: str) -> bool:
    return any(op.name in names for op in case.program.ops)


def _text(outcome: Outcome) -> str:
    return f"{outcome.kind} {outcome.detail}"


def _case(ops: list[Op], shapes: list[tuple[int, ...]], x: list, v: list, *, reduce: bool = True,
          dtype: str = "float64", structure: str = "array", seed: int = 0,
          split: int = 0) -> Callable[[], Case]:
    def build() -> Case:
        return Case(Program(tuple(ops), tuple(shapes), reduce), np.array(x, dtype=float),
                    np.array(v, dtype=float), dtype, structure, split, seed)

    return build


FINDINGS: list[Finding] = [
    Finding(
        "F1", "`& | ~ ^` on comparisons of traced arrays raise a raw TypeError", True,
        "asd/core/tracing.py (Tracer has no __and__/__or__/__xor__/__invert__)",
        lambda c, o: bool(re.search(r"operand type\(s\) for [&|^]|unary ~", _text(o))),
        ("where_logic",),
        _case([Op("where_logic", (0, 0, 0, 0, 0, 0), {"cmps": (">", ">="), "expr": ("and", 0, 1),
                                                       "spelling": "operators"})],
              [(2,), (2,)], [0.0, 1.0], [1.0, -1.0]),
        fixed=True),
    Finding(
        "F2", "`x.var()` / `x.std()` on a traced array: raw AttributeError", True,
        "asd/core/tracing.py (Tracer methods)",
        lambda c, o: "has no attribute 'var'" in o.detail or "has no attribute 'std'" in o.detail,
        ("method_var", "method_std"),
        _case([Op("method_var", (0,), {"axis": None})], [(2,), ()], [0.0, 1.0], [1.0, 0.0]),
        fixed=True),
    Finding(
        "F3", "a dict direction whose keys are in another order than the argument's is refused",
        True, "asd/api.py / asd/tree.py (direction structure compared with key order)",
        lambda c, o: c.structure == "dict" and "direction has structure" in o.detail,
        ("structure:dict",),
        _case([Op("abs", (0,))], [(2,), (2,)], [0.0, 1.0], [1.0, -1.0], structure="dict",
              split=1),
        fixed=True),
    Finding(
        "F4", "asd.jit replays the program traced for static 0.0 when called with -0.0", True,
        "asd/core/jit.py (signature keys 0.0 and -0.0 alike)",
        lambda c, o: o.check == "jit-zero", ("check:jit-zero",),
        _case([Op("abs", (0,))], [(), ()], 0.0, 1.0),
        fixed=True),
    Finding(
        "F5", "`c[np.argmax(x)]` (a constant indexed by a traced argmax) raises TracerBoolError",
        True, "asd/core/tracing.py (__index__ of an argmax tracer)",
        lambda c, o: "from argmax" in o.detail, ("argmax_take",),
        _case([Op("argmax_take", (0,), {"table": (1.0, 2.0)}), Op("multiply", (1, 0))],
              [(2,), (), (2,)], [0.0, 1.0], [1.0, 1.0]),
        fixed=True),
    Finding(
        "F6", "writing a traced value into a constant array (`c[0] = x[0]`) raises "
              "TracerBoolError", True, "asd/core/tracing.py (ndarray.__setitem__ of a Tracer)",
        lambda c, o: _uses(c, "setitem_constant") and o.status in ("raw", "bad-refusal"),
        ("setitem_constant",),
        _case([Op("setitem_constant", (0,), {"key": 0, "fill": 0.0})], [(2,), (2,)],
              [0.5, 1.0], [1.0, 1.0])),
    Finding(
        "F7", "`a % b` and `a // b` with a traced divisor are refused (UnsupportedError)", True,
        "library/discontinuous.py (remainder/floor_divide rules)",
        lambda c, o: "with a traced divisor" in o.detail,
        ("remainder_traced", "floor_divide_traced"),
        _case([Op("abs", (0,)), Op("add_constant", (1,), {"constant": 1.0}),
               Op("remainder_traced", (0, 2))], [(2,)] * 4, [0.5, 1.25], [1.0, 1.0]),
        fixed=True),
    Finding(
        "F8", "a write through a view of a traced copy (`y = x.copy(); y[:1][...] = b`) is lost:"
              " the value and derivatives ignore it", True,
        "asd/core/tracing.py (views of traced copies)",
        lambda c, o: _uses(c, "setitem_view") and o.status == "wrong", ("setitem_view",),
        _case([Op("setitem_view", (0, 0), {"key": 0})], [(2,), (2,)], [0.5, 1.0],
              [1.0, 1.0]),
        fixed=True),
    Finding(
        "F9", "floor_divide / remainder / floor ... refuse (NotLipschitzError) on an input that "
              "is locally constant (a clipped entry, a dead relu), where the program is "
              "constant near the point", False,
        "library/discontinuous.py (the jump test reads the value, not whether the input moves)",
        lambda c, o: o.status == "bad-refusal" and "jumps here" in o.detail, (),
        _case([Op("np_clip", (0,), {"lo": None, "hi": 0.5}), Op("floor_divide", (1,), {"c": 0.5})],
              [(1,), (1,), (1,)], [1.0], [1.0])),
    Finding(
        "F10", "np.hypot of float32/float16 traced arrays returns float64 (numpy keeps the "
               "dtype)", False, "library/ (hypot rule)",
        lambda c, o: _uses(c, "hypot") and c.dtype != "float64" and o.status == "wrong", (),
        _case([Op("hypot", (0, 0))], [(), ()], 0.5, 1.0, dtype="float32")),
    Finding(
        "F11", "asd.torch.function refuses any program using a view of its input (`x.T`): "
               "ArgumentError 'uses a tensor that requires grad ... cannot see where it is "
               "kept'", False, "asd/frontends/torch.py (_Unseen / _check_reach)",
        lambda c, o: "cannot see where it is kept" in o.detail, (),
        _case([Op("method_T", (0,)), Op("multiply_constant", (1,), {"constant": 2.0})],
              [(2, 1), (1, 2), (1, 2)], [[0.0], [0.75]], [[1.0], [1.0]], reduce=False),
        frameworks=("torch",),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F12", "the exact tie decision of transcendental functions (cbrt, tanh, sinh, exp) can "
               "take minutes: `max(cbrt(|x| + 0.25))` at a tie the direction leaves open at "
               "first order takes 75 s per call", False,
        "asd/core/series.py (_elementary / _horner on Fractions: coefficients grow without "
        "bound)",
        lambda c, o: o.status == "slow", (),
        _case([Op("abs", (0,)), Op("add_constant", (1,), {"constant": 0.25}),
               Op("cbrt", (2,)), Op("method_max", (3,), {"axis": 1, "keepdims": True})],
              [(3, 2), (3, 2), (3, 2), (3, 2), (3, 1)],
              [[0.5, 0.5], [-2.0, -0.0], [0.0, -2.0]], [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])),
    Finding(
        "F13", "asd.jax.function: an asd error in the backward (a refusal such as "
               "NotLipschitzError) reaches the caller as a raw JaxRuntimeError from the host "
               "callback", False, "asd/frontends/jax.py (_custom_vjp: errors inside "
                                  "jax.pure_callback)",
        lambda c, o: "CpuCallback error" in o.detail or "JaxRuntimeError" in o.kind, (),
        _case([Op("abs", (0,)), Op("sqrt", (1,))], [(2,), (2,), (2,)], [0.0, 1.0],
              [1.0, 1.0], reduce=False),
        frameworks=("jax",),
        fixed=True),
    Finding(
        "F14", "a huge direction (entries near 1e300) with float32 arguments: raw "
               "OverflowError 'cannot convert Infinity to integer ratio' from the exact series",
        True, "asd/core/series.py:to_fraction (the direction overflows float32 first)",
        lambda c, o: "Infinity to integer ratio" in o.detail, (),
        _case([Op("add_constant", (0,), {"constant": (-2.0, -1.75, -2.0)}),
               Op("np_median", (1,), {"axis": None})], [(3,), (3,), ()], [-1.0, 0.75, -1.0],
              [-2.0**1000] * 3, dtype="float32"),
        fixed=True),
]

MEANS = ("mean", "method_mean", "average", "percentile", "quantile", "np_median", "median")

FINDINGS += [
    Finding(
        "F15", "asd.clarke ignores the direction at a comparison used as a number: for "
               "`x * (x < 0)` at 0 every direction gets the first one's gradient (the sample is"
               " {0}; the Clarke set is [0, 1])", False,
        "asd/analysis/clarke.py (the re-sweep per direction re-runs only the rules that "
        "declared a tie; piecewise-constant ops decide their side without declaring one)",
        lambda c, o: o.check == "clarke" and o.status == "wrong", (),
        _case([Op("multiply_constant", (0,), {"constant": 0.0}),
               Op("step_multiply", (0, 0, 1), {"cmp": "<"})], [(1,), (1,), (1,)], [0.0],
              [1.0])),
    Finding(
        "F16", "where-NaN trap: `np.where(x > 0, x * np.sqrt(x), 0)` with some x < 0 raises "
               "NonFiniteError for the branch not taken", True,
        "asd/core/sweep.py / library where rule (finiteness checked before the selection)",
        lambda c, o: _uses(c, "where_nan") and "NonFiniteError" in o.kind, ("where_nan",),
        _case([Op("where_nan", (0,))], [(2,), (2,)], [-1.0, 1.0], [1.0, 1.0]),
        fixed=True),
    Finding(
        "F17", "asd.clarke of a program with `%` or `//`: raw AttributeError '_Resweep' object "
               "has no attribute 'record_jump'", False,
        "asd/core/primitive.py:record_jump (called on the clarke re-sweep)",
        lambda c, o: "record_jump" in o.detail, (),
        _case([Op("remainder", (0,), {"c": -0.25}), Op("add_constant", (1,), {"constant": 0.5}),
               Op("soft_threshold", (2,), {"lam": 0.5})], [(1,)] * 4, [1.25], [1.0])),
    Finding(
        "F18", "UndecidedTieError ('which side is taken changes the result') at ties whose two "
               "sides coincide: `where(a >= a, g + (a - a) p, g)` with a transcendental `a`, or"
               " `max(x1 % 2, x1)` where `x1 % 2 - x1` is locally constant", False,
        "asd/core/ties.py (sides compared by structure, not by their linearizations)",
        lambda c, o: "UndecidedTieError" in o.kind, (),
        _case([Op("arctan", (0,)), Op("abs", (0,)), Op("add_constant", (2,), {"constant": 0.25}),
               Op("cbrt", (3,)), Op("where", (1, 1, 1, 4), {"cmp": ">="})],
              [(1, 1)] * 6, [[0.75]], [[1.0]])),
    Finding(
        "F19", "after an in-place write on a traced copy (`y = x.copy(); y[0] += x[0]`), a tie "
               "decided by the exact series fails: ArgumentTypeError \"expected an int, float or "
               "Fraction, got ndarray: array(Series(...))\"", False,
        "asd/core/tracing.py setitem / asd/core/series.py (the written entry's series is an "
        "object array inside an object array)",
        lambda c, o: "expected an int, float or Fraction, got ndarray" in o.detail, (),
        _case([Op("iadd", (0, 0), {"key": 0}), Op("add_constant", (1,), {"constant": (0.0,)}),
               Op("fmin", (2, 1))], [(1,)] * 4, [0.0], [1.0])),
    Finding(
        "F20", "`(x * c).real` / `.imag` with a complex constant c: the constant is truncated to "
               "its real part and the result stays complex, so the next op raises a raw "
               "TypeError (hypot, %) or an ArgumentTypeError (round)", True,
        "asd/core/tracing.py (complex constants; Tracer.real/.imag)",
        lambda c, o: _uses(c, "complex_part") and o.status in ("raw", "bad-refusal", "wrong"),
        ("complex_part",),
        _case([Op("complex_part", (0,), {"c": (0.0, 1.0), "part": "imag", "spelling": "method"}),
               Op("remainder", (1,), {"c": 0.5})], [(1,)] * 3, [-0.5], [1.0]),
        fixed=True),
    Finding(
        "F21", "np.mean (and x.mean(), np.average) of traced arrays is sum * (1/n), not numpy's "
               "sum / n: the value differs from numpy's in the last bit in about a third of "
               "random cases, float64 included (`np.mean([1., 2., 4.])`)", False,
        "library/ (the mean rule)",
        lambda c, o: o.status == "wrong" and o.kind in ("value", "clarke value") and _uses(
            c, *MEANS), (),
        _case([Op("mean", (0,), {"axis": None})], [(3,), ()], [1.0, 2.0, 4.0], [1.0, 0.0, 0.0])),
]

def _missed_jump(c: Case, o: Outcome) -> bool:
    """A number (or a value other than numpy's) where a piecewise-constant op jumps."""
    return o.status == "wrong" and (o.kind.startswith("value") or o.kind.startswith(
        "number where asd must refuse")) and _uses(c, *JUMPS)


TRANSPOSES = ("transpose", "method_T", "method_transpose", "method_swapaxes", "moveaxis",
              "rollaxis", "rot90")
JUMPS = ("floor_divide", "remainder", "np_floor", "np_ceil", "np_trunc", "np_rint",
         "method_round", "np_sign", "heaviside", "step_multiply", "argmax_take",
         "remainder_traced", "floor_divide_traced", "sorted_by")

FINDINGS += [
    Finding(
        "F22", "a jump is missed: `(x4 - x2) * (x4 >= x2)` with `x2 = (x + [-0.25, 0]) % 4`, "
               "`x4 = x2 / 2 + [0.375, 1]` at x = [1, 0], v = [1, -1]: asd returns the value "
               "[0, -0] (the ray's side) where numpy's is [0, 1], and no NotLipschitzError -- "
               "a harmless tie of the comparison in entry 0 seems to excuse the remainder's "
               "jump in entry 1", False,
        "asd/core/sweep.py check_lipschitz (jumps and ties matched across entries)",
        lambda c, o: _missed_jump(c, o) and not _uses(c, *TRANSPOSES), (),
        _case([Op("add_constant", (0,), {"constant": (-0.25, 0.0)}),
               Op("remainder", (1,), {"c": 4.0}), Op("divide_by_constant", (2,), {"constant": 2.0}),
               Op("add_constant", (3,), {"constant": (0.375, 1.0)}), Op("subtract", (4, 2)),
               Op("step_multiply", (5, 4, 2), {"cmp": ">="})], [(2,)] * 7, [1.0, 0.0],
              [1.0, -1.0], reduce=False)),
]

FINDINGS += [
    Finding(
        "F23", "`exp(log(|x|))` at 0: asd's one-sided derivative is 0 (|x|'s is 1) and no "
               "NonFiniteError although log produced -inf; asd.jax imports jnp.linalg.det as "
               "sign * exp(log|.|) (slogdet), so asd.jax.subgrad / function of det at a singular"
               " matrix return 0 or refuse with NonFiniteError, depending on the run (`det([[x]])`"
               " at x = 0: exact 1, jax.grad 1)", False,
        "asd/core/sweep.py (finiteness of tangents through exp(-inf)) and asd/frontends/jax.py "
        "(det imported through slogdet)",
        lambda c, o: o.check.startswith("jax.") and o.status in ("wrong", "bad-refusal")
        and _uses(c, "det"), (),
        _case([Op("reshape", (0,), {"shape": (1, 1)}), Op("det", (1,))], [(), (1, 1), ()], 0.0,
              1.0),
        frameworks=("jax",)),
]

FINDINGS += [
    Finding(
        "F24", "the jump of np.floor (and the other piecewise-constant ufuncs) on a transposed "
               "array is checked on the ray's side only: `np.floor(x.T)[0].sum()` at x = 0 "
               "along +1 returns the derivative 0 with no NotLipschitzError (f jumps from the "
               "left), where `np.floor(x)[0].sum()` refuses", False,
        "asd/core/sweep.py check_lipschitz / library/discontinuous.py (the other side's "
        "value read in the wrong memory order for a non-contiguous input)",
        lambda c, o: _missed_jump(c, o) and _uses(c, *TRANSPOSES), (),
        _case([Op("transpose", (0,)), Op("np_floor", (1,)), Op("index", (2,), {"key": 0})],
              [(2, 2), (2, 2), (2, 2), (2,)], [[0.0, 0.0], [0.0, 0.0]],
              [[1.0, 1.0], [1.0, 1.0]])),
]

BY_ID = {f.id: f for f in FINDINGS}


def open_findings() -> list[Finding]:
    """The findings not yet fixed: the only ones whose failures are tolerated."""
    return [f for f in FINDINGS if not f.fixed]


def match(case: Case, outcome: Outcome) -> Finding | None:
    """The open finding that explains a failed outcome, if any (a fixed finding's failure
    is a regression: nothing explains it)."""
    for finding in open_findings():
        if finding.matches(case, outcome):
            return finding
    return None


def triggers() -> tuple[set[str], set[str], set[str]]:
    """``(ops, structures, checks)`` the open findings need: what the deep phase leaves out."""
    names, structures, checks = set(), set(), set()
    for finding in open_findings():
        for t in finding.triggers:
            if t.startswith("structure:"):
                structures.add(t.split(":", 1)[1])
            elif t.startswith("check:"):
                checks.add(t.split(":", 1)[1])
            else:
                names.add(t)
    return names, structures, checks
