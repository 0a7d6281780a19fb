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

from tests.fuzz import ops as fuzz_ops
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


def _refused_floor_divide(op: str) -> Callable[[Case, Outcome], bool]:
    """The matcher of a false refusal of floor_divide on its jump in a program using ``op``
    (the input held near the point by what ``op`` does to it)."""
    return lambda c, o: (o.status == "bad-refusal" and "floor_divide jumps here" in o.detail
                         and _uses(c, op))


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
              "TracerBoolError: asd's documented refusal (docs/numpy-coverage.md: conversions "
              "to plain arrays), naming the array and two spellings that work (tested in "
              "tests/test_fuzz_fixes_h23y.py, also without a source line, where numpy's "
              "ValueError escaped raw); numpy stores the item without dispatching, so the "
              "write cannot be recorded; harness.DOCUMENTED_REFUSALS lists it",
        True, "tests/fuzz/harness.py (DOCUMENTED_REFUSALS: setitem_constant -> "
              "TracerBoolError)",
        lambda c, o: _uses(c, "setitem_constant") and o.status in ("raw", "bad-refusal"),
        ("setitem_constant",),
        _case([Op("setitem_constant", (0,), {"key": 0, "fill": 0.0})], [(2,), (2,)],
              [0.5, 1.0], [1.0, 1.0]),
        fixed=True),
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
        "F10", "np.hypot of float32/float16 traced arrays returns float64 (numpy keeps the "
               "dtype)", False, "library/ (hypot rule)",
        lambda c, o: _uses(c, "hypot") and c.dtype != "float64" and o.status == "wrong", (),
        _case([Op("hypot", (0, 0))], [(), ()], 0.5, 1.0, dtype="float32"),
        fixed=True),
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

SINH_1 = 1.1752011936438014  # np.sinh(1.0)

FINDINGS += [
    Finding(
        "F12", "a call whose ties only the exact series of a transcendental function decides "
               "takes about a second: each evaluation of a tie's cone is bounded (the first "
               "reproducer, `max(cbrt(|x| + 0.25))`, took 75 s and now 0.2 s: "
               "tests/test_fuzz_fixes_h23y.py), but ties of `sinh(x) - sinh(1.0)` climb the "
               "orders 2, 4, ..., 64 on every call, so the jit check's ten calls run past 3 s",
        False, "asd/core/ties.py (_decide_by_series re-runs the cone at each order)",
        lambda c, o: o.status == "slow", (),
        _case([Op("clip", (0,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (1,)), Op("abs", (2,)),
               Op("maximum", (3, 2)),
               Op("add_constant", (4,), {"constant": ((-2.0, 0.0, -2.0), (0.0, -2.0, SINH_1))}),
               Op("cummax", (5,), {"axis": 1}),
               Op("multiply_constant", (6,), {"constant": ((-0.5, 1.0, -2.0),
                                                            (-0.5, 2.0, -0.25))}),
               Op("add_constant", (2,), {"constant": ((-2.0, -SINH_1, -SINH_1),
                                                      (-2.0, SINH_1, SINH_1))}),
               Op("sort", (8,), {"axis": 1}),
               Op("multiply_constant", (9,), {"constant": ((-0.25, 2.0, 3.0), (-1.0, -2.0, -0.5))}),
               Op("sum", (7,), {"axis": None}), Op("add", (10, 11))],
              [(2, 3)] * 11 + [(), (2, 3)], [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]],
              [[1.0, 3.0, 1.0], [3.0, 3.0, 3.0]], reduce=False, structure="int_array",
              seed=11005),
        fixed=True),
]

FINDINGS += [
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

MEANS = ("mean", "method_mean", "average", "percentile", "quantile", "np_median", "median",
         "method_var", "method_std")  # var and std: numpy's mean inside (float16 too)

FINDINGS += [
    Finding(
        "F16", "where-NaN trap: `np.where(x > 0, x * np.sqrt(x), 0)` with some x < 0 raises "
               "NonFiniteError for the branch not taken", True,
        "asd/core/sweep.py / library where rule (finiteness checked before the selection)",
        lambda c, o: _uses(c, "where_nan") and "NonFiniteError" in o.kind, ("where_nan",),
        _case([Op("where_nan", (0,))], [(2,), (2,)], [-1.0, 1.0], [1.0, 1.0]),
        fixed=True),
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
        lambda c, o: o.status == "wrong" and _uses(c, *MEANS) and (
            o.kind in ("value", "clarke value")  # or a jump its last bit moved (var - 2/9)
            or (_uses(c, "mean", "method_mean", "average", "method_var", "method_std")
                and _uses(c, *JUMPS))), (),
        _case([Op("mean", (0,), {"axis": None})], [(3,), ()], [1.0, 2.0, 4.0], [1.0, 0.0, 0.0]),
        fixed=True),
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
        "F23", "asd.jax imports jnp.linalg.det as sign * exp(log|.|) (slogdet), so "
               "asd.jax.subgrad / function of det at a singular matrix refuse with "
               "NonFiniteError (log at 0; `det([[x]])` at x = 0: exact 1, jax.grad 1). The "
               "numpy part, `exp(log(|x|))` at 0 returning the slope 0 (|x|'s is 1) with no "
               "refusal, is fixed: a smooth function of a pole's infinity is refused "
               "(tests/test_fuzz_fixes_h23y.py)", False,
        "asd/frontends/jax.py (det imported through slogdet)",
        lambda c, o: o.check.startswith("jax.") and o.status in ("wrong", "bad-refusal")
        and _uses(c, "det"), (),
        _case([Op("reshape", (0,), {"shape": (1, 1)}), Op("det", (1,))], [(), (1, 1), ()], 0.0,
              1.0),
        frameworks=("jax",), fixed=True),  # JAX's `_det` custom_jvp is asd's det primitive
    # (asd/frontends/jax/ops.py CUSTOM_JVP): the cofactor matrix at singular matrices
]

FINDINGS += [
    Finding(
        "F25", "a tie whose exact series is out of reach read first-order tangents holding the "
               "NaN slope of a where's branch not taken (`t * False` is NaN): "
               "`sort(where(x > 0, x * sqrt(x), 0) - 2)` with entries tied at -2 raised "
               "ShapeError 'cannot convert NaN to integer ratio'; a selection now pushes 0 for "
               "the branch not taken", False,
        "asd/core/linear.py (Diagonal.push of a bool selection)",
        lambda c, o: "NaN to integer ratio" in o.detail, (),
        _case([Op("add_constant", (0,), {"constant": (3.0, 0.0, 0.0, 3.0)}),
               Op("where_nan", (1,)),
               Op("add_constant", (2,), {"constant": (-2.0, -2.0, -2.0, -2.0)}),
               Op("partition_kth", (3,), {"axis": -1, "kth": 2})],
              [(4,), (4,), (4,), (4,), ()], [-1.0, -1.0, -1.0, 0.0], [-1.0, 1.0, -1.0, -1.0]),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F26", "UndecidedTieError at a `where` (or `where` of `& | ^ ~`) whose condition ties "
               "flat to first order with an unprovable series, though its branches agree "
               "there (value and first order along every direction): "
               "`where(m >= a, m, a)` with `m = median(a[None], 0)`, `a = arctan(|x|) + .75` "
               "at 0. The side cannot change the result; only a tie whose branches differ "
               "is refused now", False,
        "library/piecewise.py (where_cmp_rule / where_logic_rule: strict ray_compare)",
        lambda c, o: o.status == "bad-refusal" and "UndecidedTieError" in o.kind
        and _uses(c, "where", "where_logic"), (),
        _case([Op("abs", (0,)), Op("np_positive", (1,)), Op("arctan", (2,)),
               Op("add_constant", (3,), {"constant": ((0.75, 1.0),)}),
               Op("np_median", (4,), {"axis": 0}),
               Op("multiply_constant", (5,), {"constant": (1.0, 3.0)}),
               Op("where", (6, 4), {"cmp": ">="}),
               Op("add_constant", (7,), {"constant": ((0.0, -2.25),)}),
               Op("np_median", (8,), {"axis": None})],
              [(1, 2)] * 5 + [(2,), (2,), (1, 2), (1, 2), ()], [[0.0, 0.0]], [[1.0, 1.0]]),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F27", "asd.clarke returned a float32 argument's gradients in float64 where a float64 "
               "constant promoted the program: the reverse sweep summed float32-rounded "
               "pieces in float64 (1.0000000298 where the exact gradient, and asd.subgrad's "
               "float32 result, is 1.0); they are now rounded to each argument's dtype", False,
        "asd/analysis/clarke.py (gradients not cast to the leaves' dtypes)",
        lambda c, o: o.check == "clarke" and c.dtype != "float64" and o.status == "wrong"
        and "0000000" in o.detail, (),
        _case([Op("tile", (0,)), Op("method_var", (1,), {"axis": None}),
               Op("add_constant", (0,), {"constant": ((0.0, 0.0), (0.0, 2.0), (0.0, 0.0))}),
               Op("np_fabs", (3,)), Op("sum", (2,), {"axis": None}), Op("add", (4, 5))],
              [(3, 2), (3, 4), (), (3, 2), (3, 2), (), (3, 2)],
              [[0.0, 0.0], [-1.0, 0.0], [-1.0, -1.0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 3.0]],
              dtype="float32", seed=8),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F28", "asd.clarke: raw KeyError from its per-direction view of the trace, which "
               "knew the direction at the inputs only, where a tie whose exact series is out "
               "of reach falls back to first order at an inner node (median, where, `%`, "
               "percentile); the view now pushes the direction through its group's "
               "linearizations", False,
        "asd/analysis/clarke.py (_DirectionView.tangent)",
        lambda c, o: o.check == "clarke" and o.status == "raw" and "KeyError" in o.detail, (),
        _case([Op("median", (0,), {"axis": -1}),
               Op("multiply_constant", (1,), {"constant": (3.0, 1.0, -1.0)}),
               Op("where", (2, 1), {"cmp": ">"}),
               Op("add_constant", (3,), {"constant": (0.0, -1.0, 0.0)}),
               Op("remainder", (4,), {"c": 4.0}),
               Op("add_constant", (5,), {"constant": (-2.0, 0.0, 0.0)}),
               Op("percentile", (6,), {"axis": None, "q": 0.0}),
               Op("np_norm", (6,), {"order": 1}), Op("sum", (7,), {"axis": None}),
               Op("add", (8, 9))],
              [(3, 2), (3,), (3,), (3,), (3,), (3,), (3,), (), (), (), ()],
              [[2.0, 0.0], [2.0, 2.0], [2.0, 0.0]], [[0.25, 0.25], [0.25, 0.25], [1.0, 1.0]],
              seed=172),
        fixed=True),
]

COMPARISONS_AS_NUMBERS = ("step_multiply", "heaviside")

FINDINGS += [
    Finding(
        "F29", "a comparison used as a number whose operands stay equal along the whole ray "
               "(not near the point) takes the side of a later lexicographic direction, so "
               "the one-sided derivative is wrong where the program is not locally Lipschitz "
               "there: `x * (x > flip(x))` at (0, 0) along (1, 1) gives f'(x; v) = 1, but "
               "`x0 > x1` is false all along the ray, so f = 0 on it and f'(x; v) = 0 (the "
               "jump is absorbed at the point only: at x + dv its factor is d, so f is "
               "discontinuous arbitrarily near x). A silent wrong number; now refused "
               "(NotLipschitzError): where the ray stays on a jump, the sweep re-runs the "
               "output's tangent along v with the jump at its value at the point and on "
               "every side, and refuses where they differ", False,
        "library/discontinuous.py (_comparison_rule) / asd/core/sweep.py (jump replay checks "
        "continuity at the point only)",
        lambda c, o: o.status == "wrong" and o.check == "directional"
        and o.kind == "directional derivative" and _uses(c, *COMPARISONS_AS_NUMBERS), (),
        _case([Op("flip", (0,), {"axis": 0}), Op("step_multiply", (0, 0, 1), {"cmp": ">"})],
              [(2,), (2,), (2,)], [0.0, 0.0], [1.0, 1.0]),
        fixed=True),
    Finding(
        "F30", "a piecewise-constant op (`%`, `//`, floor, ...) on a jump whose input is 0 "
               "near the point below a dead relu was refused when a node above the relu met a "
               "tie: `relu(relu(x) - 2) % 2` at 0. `Trace.settled` (F9's fix) walked the whole "
               "cone and gave up at any tie; it now stops at a relu off at every entry by its "
               "values (a jump above it that would switch it on is checked on its own)", False,
        "asd/core/sweep.py (Trace.settled)",
        lambda c, o: o.status == "bad-refusal" and o.kind.startswith("NotLipschitzError")
        and "jumps here" in o.detail and _uses(c, "relu") and _uses(c, *JUMPS), (),
        _case([Op("relu", (0,)), Op("add_constant", (1,), {"constant": -2.0}),
               Op("relu", (2,)), Op("remainder", (3,), {"c": 2.0})], [(), (), (), (), ()],
              0.0, -1.0),
        fixed=True),
    Finding(
        "F33", "a piecewise-constant op on a jump whose input is held at the jump by a clip "
               "saturated at its bound (`ceil(sinh(clip(x, -2, 2)) - c)` at x = 2 with "
               "sinh(2) - c = 3): the input stays at 3 along the ray and never exceeds it near "
               "the point, so ceil is 3 there, but asd counted both sides of the jump as "
               "reachable and refused: along +1 the tie's exact series read the rounding "
               "residue sinh(2) - c - 3 = 2e-16 as the side (now a tie's constant term is "
               "0: the values tie), and the clip's tie kept `Trace.settled` false (now "
               "`Trace.unreachable` proves from the pieces which way the input can move "
               "near x, and drops a jump whose reachable sides equal its value)", False,
        "asd/core/sweep.py (Trace.settled / record_jump's still entries)",
        lambda c, o: o.status == "bad-refusal" and o.kind.startswith("NotLipschitzError")
        and "jumps here" in o.detail and _uses(c, *JUMPS), (),
        _case([Op("clip", (0,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (1,)),
               Op("add_constant", (2,), {"constant": (-0.6268604078470186,)}),
               Op("np_ceil", (3,))], [(1,)] * 5, [2.0], [1.0]),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F31", "`c[np.argmax(y)]` with `y` of one entry below a jump (`trunc`) was refused as "
               "'a plain index at a jump', though a position along an axis of one entry cannot "
               "change; asd.jit's replay returned the number, so compiled and uncompiled "
               "disagreed (the jit check)", False,
        "asd/core/tracing.py (Tracer._locally_constant)",
        lambda c, o: o.check.startswith("jit") and o.status == "wrong"
        and "from argmax" in o.detail, (),
        _case([Op("add_constant", (0,), {"constant": (-1.75,)}), Op("np_trunc", (1,)),
               Op("add_constant", (2,), {"constant": (-0.5,)}),
               Op("argmax_take", (3,), {"table": (-0.25,)}), Op("multiply", (4, 0))],
              [(1,), (1,), (1,), (1,), (), (1,)], [0.75], [1.0]),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F32", "a masked constant on the left of an operator with a traced array (`m - x`, "
               "`m * x`): MaskedArray's operator converts the traced value, refused as a "
               "TracerBoolError whose advice (asd.numpy.array) does not apply; now the "
               "masked-array refusal (ArgumentTypeError) that names the mask and a spelling "
               "that works", False,
        "asd/core/tracing.py (Tracer.__array__)",
        lambda c, o: _uses(c, "dtype_constant") and "TracerBoolError" in o.kind, (),
        _case([Op("dtype_constant", (0,), {"kind": "masked", "values": (-2.0, 0.5, 0.5),
                                           "op": "r-"})], [(3,), (3,)], [0.0, 0.0, 0.0],
              [1.0, 1.0, 1.0]),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F34", "`.real` / `.imag` of a complex traced value with no derivative "
               "(`(np.ceil(x) * 1j).imag`: a complex constant times a piecewise-constant "
               "value is not refused at the product) returned the complex array itself and "
               "zeros: a wrong value, and a raw TypeError at a later `%`; now refused with "
               "the complex-values ArgumentTypeError", False,
        "asd/core/tracing.py (Tracer.real / Tracer.imag)",
        lambda c, o: _uses(c, "complex_part") and o.status in ("raw", "wrong"), (),
        _case([Op("np_ceil", (0,)), Op("negative", (1,)),
               Op("complex_part", (2,), {"c": (0.0, 1.0), "part": "imag",
                                         "spelling": "method"}),
               Op("remainder", (3,), {"c": -0.25})], [(2,)] * 5, [0.0, -0.5], [1.0, 1.0]),
        fixed=True),
]

FINDINGS += [
    Finding(
        "F35", "asd.jax.function: the eager pullback (jax.vjp, then the pullback) of "
               "`sqrt(|x|)` at x = 0 does not return: no refusal (NotLipschitzError) within "
               "30 s, the process blocks inside JAX's runtime (the reverse rule's host path); "
               "hidden until F12 was fixed, because F12's matcher took every 'slow' outcome",
        False, "asd/frontends/jax (_custom_vjp bwd: the host pullback at a refused point)",
        lambda c, o: o.check.startswith("jax.") and o.status == "slow", (),
        _case([Op("abs", (0,)), Op("sqrt", (1,))], [(2,), (2,), (2,)], [0.0, 1.0],
              [1.0, 1.0], reduce=False),
        frameworks=("jax",), fixed=True),  # the refusal was its own __cause__ (a cycle
        # JAX's error handling never left): asd.core.tracing.raise_as_asd_error
    Finding(
        "F36", "a `where` whose condition ties two different transcendental quantities, "
               "flat to first order (F26's reproducer: `where(m >= a, m, a)`, `m` a median "
               "of `a = arctan(|x|) + c` over a singleton axis, at 0) climbs the exact "
               "series to its last order on every call before finding the branches agree: "
               "about 1.3 s a call, so the jit check's calls run past 3 s (slow, not wrong)",
        False, "asd/core/ties.py (_tie_sign: the series climb before the where rule's "
               "branch agreement is used)",
        lambda c, o: o.status == "slow" and _uses(c, "where", "where_logic"), (),
        _case([Op("abs", (0,)), Op("np_positive", (1,)), Op("arctan", (2,)),
               Op("add_constant", (3,), {"constant": ((0.75, 1.0),)}),
               Op("np_median", (4,), {"axis": 0}),
               Op("multiply_constant", (5,), {"constant": (1.0, 3.0)}),
               Op("where", (6, 4), {"cmp": ">="}),
               Op("add_constant", (7,), {"constant": ((0.0, -2.25),)}),
               Op("np_median", (8,), {"axis": None})],
              [(1, 2)] * 5 + [(2,), (2,), (1, 2), (1, 2), ()], [[0.0, 0.0]], [[1.0, 1.0]]),
        fixed=True),  # the median over the singleton axis is its operand (asd/core/ties.py
    # _singleton_reduction): the tie is one quantity, proven equal without a series
    Finding(
        "F37", "`asd.vjp`'s pullback of a float16 program returns inf where the exact "
               "cotangent product (1965117.5) is finite but beyond float16's range: an "
               "overflow in the argument's dtype is returned instead of refused by name "
               "(NonFiniteError naming the leaf and the dtype; the fix is a wider dtype)",
        False, "asd/api.py (vjp's pullback: the cast back to the leaf's dtype)",
        lambda c, o: o.status == "wrong" and c.dtype == "float16" and "inf" in o.detail, (),
        _case([Op("dtype_constant", (0,), {"kind": "float16", "values": (65504.0,),
                                           "op": "r-"}),
               Op("np_multiply", (1, 0)),
               Op("min", (1,), {"axis": None, "keepdims": False}),
               Op("setitem", (1, 0), {"key": slice(0, 1, None)}),
               Op("setitem", (4, 2), {"key": -1}),
               Op("add_constant", (5,), {"constant": (2.0,)}),
               Op("abs", (6,)), Op("float_power", (7,), {"p": 3.0}), Op("tile", (8,)),
               Op("sum", (3,), {"axis": None}), Op("add", (9, 10))],
              [(1,)] * 9 + [(2,), (), (2,)], [0.0], [9.332636185032189e-302], reduce=False,
              dtype="float16", seed=90),
        fixed=True),  # refused by name: asd.api._narrowed
]

FINDINGS += [
    Finding(
        "F38", "asd.jax: `table[jnp.argmax(x)]` refused with NotLipschitzError (\"dynamic_slice "
               "at a position computed from the differentiated input\") where argmax is not "
               "tied and numpy's path (`gather_at`) gives the number: JAX wraps the index "
               "(`select_n(i < 0, i, i + n)`) and slices at it, and the importer refused any "
               "traced start (JAX campaign, seed 2802)",
        False, "asd/frontends/jax/ops.py (_dynamic_slice)",
        lambda c, o: o.check.startswith("jax.") and o.status == "bad-refusal"
        and "dynamic_slice at a position" in o.detail, (),
        _case([Op("add_constant", (0,), {"constant": ((1.0, 1.0, -1.0), (0.0, -1.0, 1.0),
                                                      (1.0, 0.0, 0.0))}),
               Op("argmax_take", (1,), {"table": (0.75, -2.0, 3.0, 1.0, -2.0, -0.5, -2.0, 1.0,
                                                  -0.5)}),
               Op("multiply", (2, 1))],
              [(3, 3), (3, 3), (), (3, 3)],
              [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]],
              [[1.0, -1.0, -0.5], [1.0, -1.0, -0.5], [-0.5, -0.5, 1.0]], seed=65536),
        frameworks=("jax",), fixed=True),  # the wrap is unwrapped (importer._unwrapped_index)
    # and an argmax/argmin start is read by gather_at (ops._slice_at_position)
]

FINDINGS += [  # the JAX campaign after F23/F36/F38 (seed 2802, 400 programs): bad refusals
    Finding(
        "F39", "asd.jax.function (the vjp path) of `np.hypot(x, x)` (jnp.hypot's lowering "
               "selects with `where(x == 0, ...)`) at a point with x = 0 refuses \"where(lhs "
               "== rhs, a, b) jumps\" where asd.jax.subgrad and numpy's path give the number",
        False, "asd/frontends/jax (jnp.hypot's where(x == 0) in the vjp path)",
        lambda c, o: o.check == "jax.function" and o.status == "bad-refusal"
        and "where(lhs == rhs, a, b) jumps" in o.detail and _uses(c, "hypot"), (),
        _case([Op("hypot", (0, 0)), Op("rollaxis", (1,)), Op("add", (1, 0)),
               Op("method_cumsum", (3,), {"axis": 1}), Op("abs", (1,)),
               Op("add_constant", (5,), {"constant": 0.5}), Op("sqrt", (6,)),
               Op("sum", (2,), {"axis": None}), Op("add", (7, 8)),
               Op("sum", (4,), {"axis": None}), Op("add", (9, 10))],
              [(3, 2), (3, 2), (2, 3), (3, 2), (3, 2), (3, 2), (3, 2), (3, 2), (), (3, 2), (),
               (3, 2)],
              [[2.0, 2.0], [2.0, 2.0], [2.0, 0.0]], [[2.0, 2.0], [1.0, 2.0], [2.0, 1.0]],
              reduce=False, seed=11056),
        frameworks=("jax",), fixed=True),  # ops.CUSTOM_JVP maps jnp.hypot whole
    Finding(
        "F40", "asd.jax.function of `x % y` with a differentiated divisor (jnp.remainder, "
               "mapped since `and` is) refuses \"rem with a differentiated divisor\" where "
               "numpy's path (`remainder_traced`) gives the number: the lax `rem` handler "
               "refuses any traced divisor",
        False, "asd/frontends/jax/ops.py (_rem)",
        lambda c, o: o.check.startswith("jax.") and o.status == "bad-refusal"
        and "rem with a differentiated divisor" in o.detail, (),
        _case([Op("add_constant", (0,), {"constant": (0.0, 0.0, 0.0, 0.5)}), Op("abs", (0,)),
               Op("add_constant", (2,), {"constant": 1.0}), Op("remainder_traced", (1, 3)),
               Op("inner", (4, 0)), Op("clip", (3,), {"lo": -2.0, "hi": 2.0}), Op("exp", (6,)),
               Op("sum", (5,), {"axis": None}), Op("add", (7, 8))],
              [(4,), (4,), (4,), (4,), (4,), (), (4,), (4,), (), (4,)],
              [-1.0, -1.0, -1.0, -1.0], [-0.5, 1.0, -0.5, -0.5], reduce=False, seed=151),
        frameworks=("jax",), fixed=True),  # ops._rem: x - y trunc(x / y) for a traced y too
    Finding(
        "F41", "asd.jax of `jnp.select` over a logical combination of comparisons (lax "
               "`select_n` with more than two cases and a traced selector) refuses "
               "UnsupportedError where numpy's `np.select` path gives the number",
        False, "asd/frontends/jax/ops.py (_select_n)",
        lambda c, o: o.check.startswith("jax.") and o.status == "bad-refusal"
        and "select_n with more than two cases" in o.detail, (),
        _case([Op("where_logic", (0, 0, 0, 0, 0, 0), {"cmps": ("<=", "<"),
                                                       "expr": ("or", ("not", 0), 1),
                                                       "spelling": "select"}),
               Op("cummax", (1,), {"axis": 0}),
               Op("multiply_constant", (2,), {"constant": ((1.0, -2.0), (0.75, 0.75),
                                                           (-1.0, 0.75))}),
               Op("clip_traced", (3, 0, 0)), Op("prod", (4,), {"axis": 1}),
               Op("add_constant", (3,), {"constant": ((0.0, 0.0), (0.0, 3.0), (0.0, 3.0))}),
               Op("np_trunc", (6,)), Op("sum", (5,), {"axis": None}), Op("add", (7, 8))],
              [(3, 2)] * 5 + [(3,), (3, 2), (3, 2), (), (3, 2)],
              [[0.0, 0.0], [0.0, 2.0], [0.0, 2.0]], [[0.25, 2.0], [1.0, 2.0], [2.0, 0.25]],
              seed=0),
        frameworks=("jax",), fixed=True),  # importer: the selector's conditions, first true
]

FINDINGS += [  # after F33's fix (campaign seed 2801)
    Finding(
        "F42", "what F33's matcher also held once F33 was fixed (campaign seed 2801, 8 of "
               "2000 programs): a jump whose input cannot reach its other side near the "
               "point is refused where the pieces above it are not ones `Trace.moves` "
               "orders: `(arcsinh(v) + c) // (|v| + 1)` with `v` a variance at 0 (v >= 0, "
               "so the quotient never falls below 0); a `rint` behind a `where` of "
               "comparisons; a `//` whose other side moves a heaviside below it", False,
        "asd/core/sweep.py (Trace.moves: var, abs, where, products of moving values)",
        lambda c, o: o.status == "bad-refusal" and o.kind.startswith("NotLipschitzError")
        and "jumps here" in o.detail and _uses(c, *JUMPS), (),
        _case([Op("cumprod", (0,), {"axis": -2}), Op("method_var", (1,), {"axis": 1}),
               Op("arcsinh", (2,)), Op("add_constant", (3,), {"constant": (0.75, 0.0)}),
               Op("abs", (2,)), Op("add_constant", (5,), {"constant": 1.0}),
               Op("floor_divide_traced", (4, 6))],
              [(2, 2), (2, 2), (2,), (2,), (2,), (2,), (2,), (2,)],
              [[0.0, 0.5], [0.5, 0.0]], [[-0.5, 1.0], [1.0, -0.5]], reduce=False),
        fixed=True),  # Trace.moves orders signs; the mpmath oracle keeps flat jumps
]

FINDINGS += [  # the JAX campaign on the final code (seed 2812, 400 programs)
    Finding(
        "F43", "asd.jax of `x // c` (and `%`) refused \"where(condition, a, b) jumps\" at an "
               "integer quotient whose floor a saturated clip then holds (`hardtanh(x // -0.25)`), "
               "where numpy's path gives the number: jnp.floor_divide corrects a truncated "
               "quotient by `where((sign(x) != sign(y)) & (rem != 0), q - 1, q)`, whose tied "
               "condition is refused as a where before the floor's jump can be seen as "
               "unreachable (F33's proof)", False,
        "asd/frontends/jax/ops.py (jnp.floor_divide / remainder read through their jaxpr)",
        lambda c, o: o.check.startswith("jax.") and o.status == "bad-refusal"
        and "in jit[floor_divide]" in o.detail, (),
        _case([Op("add_constant", (0,), {"constant": ((0.75, -0.75, -0.75),
                                                      (-1.0, 2.0, 0.0))}),
               Op("median", (1,), {"axis": -2}),
               Op("multiply_constant", (2,), {"constant": (-2.0, 0.5, 3.0)}),
               Op("add_constant", (3,), {"constant": (0.0, 0.0, 0.5)}),
               Op("step_multiply", (1, 4, 3), {"cmp": "<"}),
               Op("add_constant", (1,), {"constant": ((0.75, 0.75, 0.75),
                                                      (0.75, -0.25, 0.75))}),
               Op("floor_divide", (6,), {"c": -0.25}),
               Op("hardtanh", (7,), {"lo": -1.0, "hi": 1.0}),
               Op("add_constant", (3,), {"constant": (0.75, -2.0, 0.75)}),
               Op("minimum", (9, 2)), Op("step_multiply", (0, 10, 9), {"cmp": ">"}),
               Op("abs", (0,)), Op("add_constant", (12,), {"constant": 0.25}),
               Op("sqrt", (13,)), Op("sum", (5,), {"axis": None}), Op("add", (14, 15)),
               Op("sum", (8,), {"axis": None}), Op("add", (16, 17)),
               Op("sum", (11,), {"axis": None}), Op("add", (18, 19))],
              [(2, 3), (2, 3), (3,), (3,), (3,), (2, 3), (2, 3), (2, 3), (2, 3), (3,), (3,),
               (2, 3), (2, 3), (2, 3), (2, 3), (), (2, 3), (), (2, 3), (), (2, 3)],
              [[0.75, 0.75, 0.75], [0.0, 0.75, 0.0]],
              [[2.6787715179656683e+300, 2.6787715179656683e+300, 1.0715086071862673e+301],
               [2.6787715179656683e+300, 2.6787715179656683e+300, 1.0715086071862673e+301]],
              seed=109),
        frameworks=("jax",), fixed=True),  # ops.CUSTOM_JVP: floor_divide, remainder whole
]

FINDINGS += [  # the long numpy campaign on the final code (seed 2813)
    Finding(
        "F44", "the value of `sum(sin(take_along_axis(x2, argsort(x1, axis=0))))` differed "
               "from numpy's in the last bit: gather_at's rule gathered at column-major "
               "positions, so the gathered array was column-major and numpy's sum over it "
               "rounded in another order", False,
        "library/order.py (gather_rule: positions' memory order)",
        lambda c, o: o.status == "wrong" and o.kind == "value" and _uses(c, "sorted_by"), (),
        _case([Op("negative", (0,)),
               Op("add_constant", (1,), {"constant": ((0.0, 0.0), (-0.25, -2.0), (0.0, 0.0))}),
               Op("sorted_by", (2, 1), {"axis": 0}), Op("sin", (3,))],
              [(3, 2)] * 5, [[-0.5, -0.5], [2.0, 0.0], [-0.5, -0.5]],
              [[1.0, 1.0], [1.0, 1.0], [1.0, 3.0]], dtype="float16", structure="namedtuple",
              split=4, seed=27609),
        fixed=True),  # gather_rule: positions C-ordered, as numpy's argsort returns them
]



def _matrix_norm(case: Case) -> bool:
    """Whether the program takes ``np.linalg.norm(a, order)`` of a 2-D value (a matrix norm;
    its torch spelling ``torch.linalg.norm(a, order)`` exports as ``aten.linalg_norm``)."""
    return any(op.name == "np_norm" and len(case.program.shapes[op.args[0]]) == 2
               for op in case.program.ops)


FINDINGS += [  # the torch campaign on the final code (seed 2911, 300 programs)
    Finding(
        "F46", "asd.torch.function / asd.torch.subgrad of `torch.linalg.norm(A, ord)` with a "
               "2-D `A` (a matrix norm: max column sum for ord=1, max row sum for inf, "
               "spectral for 2, Frobenius for 'fro') return the vector norm of the flattened "
               "`A`: a wrong value and gradient (torch 3.0, asd 8.0 for ord=1), or a "
               "ShapeError for 'fro'. `torch.export` keeps the call whole as "
               "`aten.linalg_norm(A, ord)` (dim None), which the importer reads as a vector "
               "norm", False,
        "asd/frontends/torch/ops.py (_linalg_norm: ord given, dim None, 2-D input; or dim of "
        "two axes: a matrix norm, asd.numpy's linalg.norm(x, ord, axis=dim))",
        lambda c, o: o.check.startswith("torch.") and o.status == "wrong"
        and _matrix_norm(c), (),
        _case([Op("np_norm", (0,), {"order": 1})], [(2, 3), ()],
              [[-1.5, -1.5, -0.5], [-1.5, -1.5, -1.5]], [[1.0, 1.0, 0.25], [0.25, 0.25, 0.25]],
              seed=162),
        frameworks=("torch",), fixed=True),  # _linalg_norm reads torch's matrix norms
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

FINDINGS += [  # the long numpy campaign on this stop's code (seed 2921, 23,500 programs)
    Finding(
        "F45", "a silent wrong number: a jump whose input goes through a comparison used as a "
               "number was proven unreachable, `floor(x/2 * (x/2 >= x))` at 0 answered (the "
               "output is -1 left of 0): `Trace.moves` read the comparison, inactive, as a "
               "constant, though it jumps", False,
        "asd/core/sweep.py (Trace._moves_here: an inactive node at or below a jump moves)",
        lambda c, o: _missed_jump(c, o), (),
        _case([Op("method_transpose", (0,)), Op("dot", (1,), {"constant": ((0.5,),)}),
               Op("step_multiply", (2, 2, 0), {"cmp": ">="}),
               Op("add_constant", (3,), {"constant": (0.0,)}), Op("np_floor", (4,)),
               Op("add_constant", (5,), {"constant": (0.0,)}), Op("np_ceil", (6,))],
              [(1,)] * 8, [0.0], [1.0], seed=2441), fixed=True),
    Finding(
        "F47", "a value off numpy's in the last bit: `s ** p` of a numpy floating scalar (a "
               "ufunc's result on a 0-d array) is scalar math in numpy (libm's pow) and was "
               "np.power's loop in asd; they differ for some bases in float32 and float64", False,
        "library/smooth.py (power_operator: the ** operator computes with ** itself)",
        lambda c, o: o.status == "wrong" and o.kind.startswith("value")
        and _uses(c, "float_power", "pow_operator"), (),
        _case([Op("negative", (0,)), Op("add_constant", (0,), {"constant": -0.25}),
               Op("abs", (2,)), Op("add_constant", (3,), {"constant": 0.5}),
               Op("clip_traced", (4, 2, 2)), Op("abs", (5,)), Op("float_power", (6,), {"p": 1.5}),
               Op("sum", (1,), {"axis": None}), Op("add", (7, 8))],
              [()] * 10, -1.5, 2.0, dtype="float32", structure="tuple", seed=212), fixed=True),
    Finding(
        "F48", "a float16 value off numpy's: np.cumprod accumulates float16 products one "
               "rounded step at a time, but asd reduced its prefixes with np.prod, which "
               "rounds float16 through float32 once", False,
        "library/structure.py (cumprod of float16: a chain of products)",
        lambda c, o: o.status == "wrong" and o.kind.startswith("value")
        and _uses(c, "cumprod"), (),
        _case([Op("logaddexp", (0, 0)), Op("cumprod", (1,), {"axis": -1}),
               Op("multiply_constant", (2,), {"constant": (1.0, 3.0, -2.0, 0.5)}),
               Op("arcsinh", (3,)), Op("sum", (4,), {"axis": None})],
              [(4,)] * 5 + [()], [1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 3.0, 1.0],
              dtype="float16", structure="namedtuple", seed=973), fixed=True),
    Finding(
        "F49", "a Jacobian along v from another branch: a tie tied at second order whose cone "
               "holds np.linalg.det took the next direction's side, since det could not run "
               "on exact series (`relu(det(median(sort(x)**2)) - 1)` at (-1, -1))", False,
        "library/linalg.py (det of exact matrices: expansion by the first row)",
        lambda c, o: o.status == "wrong" and o.check in ("jacobian", "vjp", "subgrad")
        and _uses(c, "det"), (),
        _case([Op("add_constant", (0,), {"constant": ((0.0,), (0.0,))}),
               Op("sort", (1,), {"axis": -2}), Op("square", (2,)),
               Op("np_median", (3,), {"axis": None}), Op("reshape", (4,), {"shape": (1, 1)}),
               Op("det", (5,)), Op("add_constant", (6,), {"constant": -1.0}), Op("relu", (7,)),
               Op("concatenate", (5, 5), {"axis": 1}), Op("sum", (8,), {"axis": None}),
               Op("add", (9, 10))],
              [(2, 1)] * 4 + [(), (1, 1), (), (), (), (1, 2), (), (1, 2)],
              [[-1.0], [-1.0]], [[-1.0], [1.0]], structure="dict", seed=703), fixed=True),
]

FINDINGS += [  # the long numpy campaign on this stop's code (seed 2931)
    Finding(
        "F50", "a Jacobian along [v, w] from another branch: the max of "
               "`tensordot(soft_threshold(x + c), x, 0)` (einsum 'a,b->ab') with every entry "
               "tied at 0 is decided 'equal' although w separates them (the soft threshold's "
               "live piece makes one product grow along w): asd's gradient of the max is 0, "
               "the exact one 0.5; the same program with np.outer is right", False,
        "asd/core/jet.py (_einsum: a factor 0 along v made every term still)",
        lambda c, o: o.status == "wrong" and o.check in ("jacobian", "vjp", "subgrad")
        and _uses(c, "tensordot") and _uses(c, "amax", "max"), (),
        _case([Op("add_constant", (0,), {"constant": (1.0, -1.5)}),
               Op("soft_threshold", (1,), {"lam": 1.0}), Op("tensordot", (2, 0), {"axes": 0}),
               Op("amax", (3,), {"axis": None}), Op("sum", (4,), {"axis": None}),
               Op("add", (0, 5))],
              [(2,), (2,), (2,), (2, 2), (), (), (2,)], [0.0, 0.5], [0.0, 1.0],
              reduce=False, structure="list", split=1, seed=65536), fixed=True),
]

FINDINGS += [  # the long numpy campaign on this stop's code (seed 2951)
    Finding(
        "F51", "a number where the program jumps: `relu(x % 2 + c) ... % 2` with the first "
               "remainder on its jump at the point; the replay across that jump evaluated "
               "the second remainder at the jump's left limit 2, where 2 % 2 = 0 is the "
               "value at the point, though its limit from below is 2 (the output jumps by "
               "2 from the left; asd answered along the right)", False,
        "asd/core/sweep.py (Trace.replay: a remainder, continuous but jumping, was evaluated "
        "at a side's limit)",
        lambda c, o: o.status == "wrong" and "must refuse" in o.detail
        and _uses(c, "remainder"), (),
        _case([Op("remainder", (0,), {"c": 2.0}),
               Op("add_constant", (1,), {"constant": (0.0, -2.0, -0.5)}), Op("relu", (2,)),
               Op("add_constant", (3,), {"constant": (0.0, 0.0, -0.5)}),
               Op("remainder", (4,), {"c": 2.0}), Op("sum", (5,), {"axis": None})],
              [(3,)] * 6 + [()], [0.0, 0.0, -1.5], [0.25, 1.0, 0.25], reduce=False),
        fixed=True),
    Finding(
        "F52", "a tie decided by a float32 ulp: `mean(cos x) < cos x` at equal entries along "
               "(1, 1, 1) holds all along the ray, but the float32 mean of three equal "
               "tangents is off each by an ulp, which the tangent's rounding bound (written "
               "with float64's eps) missed: the branch followed the ulp, not the next "
               "direction (a valid branch's gradient, not the one the tie contract names); "
               "the mpmath oracle's own 1e-50 noise picked the other branch", False,
        "asd/core/ties.py (_rounding_could_flip: float64 eps for float32 tangents)",
        lambda c, o: o.status == "wrong" and o.check in ("subgrad", "vjp", "jacobian")
        and c.dtype in ("float32", "float16") and _uses(c, "mean"), (),
        _case([Op("cos", (0,)), Op("mean", (1,), {"axis": None}),
               Op("add_constant", (1,), {"constant": ((0.75,), (0.0,), (0.0,))}),
               Op("add_constant", (3,), {"constant": ((1.0,), (-1.5403023058681398,),
                                                      (-1.0,))}),
               Op("where_logic", (2, 3, 4, 0, 3, 4), {"cmps": ("<", "<="),
                                                     "expr": ("and", 0, ("not", 1)),
                                                     "spelling": "functions"}),
               Op("argmax_take", (2,), {"table": (0.75,)}), Op("multiply", (6, 1)),
               Op("sum", (5,), {"axis": None}), Op("add", (7, 8))],
              [(3, 1), (3, 1), (), (3, 1), (3, 1), (3, 1), (), (3, 1), (), (3, 1)],
              [[-1.0], [-1.0], [-1.0]], [[1.0], [1.0], [1.0]], dtype="float32", seed=473),
        fixed=True),
]

FINDINGS += [  # the long numpy campaign on this stop's final code (seed 2961)
    Finding(
        "F53", "a comparison of one quantity with itself past an identity constant, "
               "`s * (s + 0.0 >= s)`, refused as a jump where a tie above `s` (a remainder "
               "at its jump under a saturated box projection) kept the sweep from calling "
               "the equality settled", False,
        "asd/core/sweep.py (Trace.unreachable: only a - a of one node was no jump)",
        lambda c, o: o.status == "bad-refusal" and "greater_equal jumps here" in o.detail,
        (),
        _case([Op("rollaxis", (0,)),
               Op("proj_box", (1,), {"lo": ((0.0,), (-0.5,), (-0.5,)),
                                     "hi": ((1.0,), (0.5,), (-0.5,))}),
               Op("add_constant", (2,), {"constant": ((0.0,), (-0.25,), (-0.25,))}),
               Op("remainder", (3,), {"c": 2.0}), Op("method_ravel", (4,)),
               Op("add_constant", (4,), {"constant": 1.0}), Op("method_ravel", (6,)),
               Op("concatenate", (5, 7), {"axis": 0}), Op("method_std", (8,), {"axis": -1}),
               Op("add_constant", (9,), {"constant": 0.0}),
               Op("step_multiply", (9, 10, 9), {"cmp": ">="})],
              [(1, 3), (3, 1), (3, 1), (3, 1), (3, 1), (3,), (3, 1), (3,), (6,), (), (), ()],
              [[-1.5, -1.5, -1.5]], [[1.0, 1.0, 1.0]], seed=45257),
        fixed=True),
    Finding(
        "F54", "a false refusal at a step function whose input is a rounded transcendental "
               "value on its jump, held constant by a saturated projection (floor(linf_ball("
               "expm1(x) - c, 0.5) - 0.5) at x = 0.5 in float32: expm1 rounds above the "
               "ball, so the output is constant near x); the exact series of the cone starts "
               "from expm1's exact value, on the other side of the bound, and decides that "
               "the input enters the jump (round, floor_divide after sinh/float_power alike)",
        False,
        "asd/core/ties.py (node_series runs the cone without snapping each node's constant "
        "term to its float value, as _ray_series does: the clip inside the cone follows "
        "expm1's exact value, not the rounded one the sweep saturated on)",
        lambda c, o: o.status == "bad-refusal" and "NotLipschitzError" in o.detail
        and bool(re.search(r"(floor|ceil|round|rint|trunc|remainder) jumps here", o.detail))
        and any(fuzz_ops.TABLE[op.name].kind == "smooth" for op in c.program.ops), (),
        _case([Op("clip", (0,), {"lo": -2.0, "hi": 2.0}), Op("expm1", (1,)),
               Op("add_constant", (2,), {"constant": (-0.1487212707001282,)}),
               Op("proj_linf_ball", (3,), {"radius": 0.5}),
               Op("add_constant", (4,), {"constant": (-0.5,)}), Op("np_floor", (5,))],
              [(1,)] * 7, [0.5], [1.0], reduce=False, dtype="float32",
              structure="namedtuple", seed=351),
        fixed=True),
    Finding(
        "F55", "a false refusal at floor_divide(partition(sinh(clip(triu(fmin(3 min(x + C), "
               "x))))) @ itself, 2) on its jump at 0, the input held by saturated and "
               "selected entries (long campaign on the final code, seed 2961)", False,
        "asd/core/sweep.py (Trace.moves: partition/matmul/fmin are not read, so the input "
        "may move both ways)",
        _refused_floor_divide("partition_kth"), (),
        _case([Op("add_constant", (0,), {"constant": ((1.0, 1.0), (0.0, 1.0), (1.0, 1.0))}),
               Op("amin", (1,), {"axis": 0}),
               Op("multiply_constant", (2,), {"constant": (3.0, -1.0)}),
               Op("fmin", (3, 0)), Op("triu", (4,), {"k": 1}),
               Op("clip", (5,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (6,)),
               Op("add_constant", (7,), {"constant": ((0.0, -2.0), (0.0, -2.0), (0.0, -2.0))}),
               Op("partition_kth", (8,), {"axis": -1, "kth": 1}), Op("matmul", (9, 9)),
               Op("add_constant", (10,), {"constant": 0.0}),
               Op("floor_divide", (11,), {"c": 2.0})],
              [(3, 2), (3, 2), (2,), (2,), (3, 2), (3, 2), (3, 2), (3, 2), (3, 2), (3,), (), (),
               ()], [[0.75, 0.75], [0.75, 0.75], [0.75, 0.75]],
              [[1.0, 2.0], [2.0, 2.0], [2.0, 2.0]], reduce=False, structure="namedtuple",
              split=2, seed=65536), fixed=True),
    Finding(
        "F57", "asd.jax.function (and asd.tf.function) gave a number where the program jumps "
               "when the cotangent was zero: the pullback took the gradient of <ct, f> with "
               "ct as a constant, and 0 * a jump is constant (JAX campaign seed 2974: "
               "huber(clip(abs(floor(x)), -1, 1) - 2, 0.5) + abs(x) at 0)", False,
        "asd/frontends/jax/dropin.py (custom_vjp's host pullback scalarized the outputs), "
        "asd/frontends/tf/dropin.py (_vjp alike)",
        lambda c, o: o.check == "jax.function" and o.status == "wrong"
        and "number where asd must refuse" in o.detail, (),
        _case([Op("np_floor", (0,)), Op("abs", (0,)), Op("add", (1, 2))],
              [(2,), (2,), (2,), (2,)], [0.0, 0.5], [-1.0, 1.0], seed=3),
        frameworks=("jax",), fixed=True),  # seed 3 draws the zero cotangent
    Finding(
        "F58", "asd.jax refused jnp.take_along_axis(x, jnp.argsort(y), axis) (and x[argsort(x)], "
               "top_k's indices, argmax with keepdims) as a gather at positions computed from "
               "the differentiated input, where numpy's path reads the positions along the "
               "ray (JAX campaign seed 2974: 17 checks)", False,
        "asd/frontends/jax/ops.py (_gather refused every traced index)",
        lambda c, o: o.status == "bad-refusal"
        and "gather at positions computed from the differentiated input" in o.detail, (),
        _case([Op("sorted_by", (0, 0), {"axis": 0})], [(2,), (2,)], [0.0, 0.0], [1.0, -1.0],
              seed=1),
        frameworks=("jax",), fixed=True),
    Finding(
        "F59", "asd.jax refused a jnp.where whose boolean condition JAX broadcasts inside "
               "the where's jit: the importer's broadcast_in_dim added float32 zeros, so the "
               "condition became a float array (\"ufunc 'invert' not supported\"; JAX "
               "campaign seed 2974: 7 checks)", False,
        "asd/frontends/jax/ops.py (_broadcast_in_dim of a bool or integer array)",
        lambda c, o: o.status == "bad-refusal" and "ufunc 'invert' not supported" in o.detail,
        (),
        _case([Op("method_squeeze", (0,)), Op("moveaxis", (0,)),
               Op("where_logic", (1, 1, 0, 1, 2, 1), {"cmps": ("<=", ">"),
                                                     "expr": ("or", 0, 1),
                                                     "spelling": "functions"})],
              [(1, 2), (2,), (2, 1), (2, 2)], [[0.5, -1.0]], [[1.0, 1.0]], seed=1),
        frameworks=("jax",), fixed=True),
    Finding(
        "F60", "asd.torch.function of a program whose output sees its input only through a "
               "step function (no gradient path in torch's graph): at the step's jump the "
               "backward crashed on an empty stack (or gave no gradient) instead of refusing, "
               "and asd.torch.subgrad off the jump raised torch's raw 'does not require grad' "
               "(torch campaign seed 2982)", False,
        "asd/frontends/torch/dropin.py (no reached leaf: nothing swept), "
        "asd/frontends/torch/api.py (_by_autograd of an output without a graph)",
        lambda c, o: o.check == "torch.function" and (
            "asd None !=" in o.detail or "non-empty TensorList" in o.detail
            or "does not require grad" in o.detail), (),
        _case([Op("heaviside", (0,), {"h0": 0.5}),
               Op("average", (1,), {"weights": (1.0, 2.0)}), Op("negative", (2,)),
               Op("method_cumsum", (3,), {"axis": None}),
               Op("add_constant", (4,), {"constant": (0.5,)}), Op("sort", (5,), {"axis": -1}),
               Op("multiply_constant", (6,), {"constant": (-0.25,)}),
               Op("setitem", (7, 5), {"key": slice(0, 1, None)}),
               Op("add_constant", (4,), {"constant": (0.8333333333333334,)}),
               Op("abs", (9,)), Op("sum", (8,), {"axis": None}), Op("add", (10, 11))],
              [(2,), (2,), (), (), (1,), (1,), (1,), (1,), (1,), (1,), (1,), (), (1,)],
              [0.0, 0.75], [1.0, 3.0], reduce=False, seed=5376),
        frameworks=("torch",), fixed=True),
    Finding(
        "F61", "F58's mapping missed JAX's spelling of take_along_axis over an operand with "
               "axes of one entry (taken as slices, left out of the indices): still refused "
               "as a gather at computed positions (JAX campaign seed 2981)", False,
        "asd/frontends/jax/ops.py (_take_along_axis read only batched axes)",
        lambda c, o: o.status == "bad-refusal"
        and "gather at positions computed from the differentiated input" in o.detail, (),
        _case([Op("sorted_by", (0, 0), {"axis": 1})], [(1, 2), (1, 2)], [[0.0, 0.0]],
              [[1.0, -1.0]], seed=1),
        frameworks=("jax",), fixed=True),
    Finding(
        "F62", "a false refusal at floor_divide(-min(clip(...))/2) on its jump, the min capped "
               "at 0 by an entry a saturated clip holds while the other entry at it only "
               "rises (numpy campaign seed 2991)", False,
        "asd/core/sweep.py (Trace.moves read a min as rising where any entry at it rises)",
        _refused_floor_divide("min"), (),
        _case([Op("matmul", (0,), {"constant": ((0.5, -1.0),)}),
               Op("median", (1,), {"axis": -1}),
               Op("multiply_constant", (2,), {"constant": (-0.5, -1.0, 1.0)}),
               Op("np_clip", (3,), {"lo": 0.0, "hi": 0.5}),
               Op("add_constant", (4,), {"constant": (0.0, 0.0, 3.0)}),
               Op("min", (5,), {"axis": None, "keepdims": True}),
               Op("multiply_constant", (6,), {"constant": (-0.5,)}),
               Op("add_constant", (7,), {"constant": (0.0,)}),
               Op("floor_divide", (8,), {"c": 2.0})],
              [(3, 1), (3, 2), (3,), (3,), (3,), (3,), (1,), (1,), (1,), (1,)],
              [[-1.0], [0.0], [0.0]], [[1.0], [1.0], [1.0]], reduce=False), fixed=True),
    Finding(
        "F63", "numbers where the program jumps, from a comparison whose operands are equal "
               "along the ray but not beside it: (x < |x|) + x and np.where(x < max(x, 0), "
               "1, 0) + x at 0 along +1 answered (the step is 1 left of 0); asd.clarke of "
               "x * (x < |x|) missed the piece of slope 1 (numpy campaign seed 2991, clarke "
               "check)", False,
        "asd/core/sweep.py (Trace.unreachable asked ties.same_quantity past the ray's "
        "identity pieces), library/piecewise.py (where read side 0 as an equality near x)",
        lambda c, o: o.check == "clarke" and "is missing from" in o.detail, (),
        _case([Op("abs", (0,)), Op("subtract", (0, 1)),
               Op("step_multiply", (2, 0, 1), {"cmp": "<"}),
               Op("reshape", (3,), {"shape": (1, 1)}),
               Op("method_mean", (4,), {"axis": -1, "keepdims": False}),
               Op("multiply_constant", (5,), {"constant": (-0.5,)}),
               Op("method_mean", (6,), {"axis": None, "keepdims": False}), Op("relu", (2,)),
               Op("sum", (7,), {"axis": None}), Op("add", (8, 9))],
              [(), (), (), (), (1, 1), (1,), (1,), (), (), (), ()], 0.0, 1.0, seed=6),
        fixed=True),
    Finding(
        "F64", "det's directional derivative along a huge direction was an SVD's rounding "
               "scaled up: 5.8e284 along -5e300 in the lower-left entry of [[-1, 0], "
               "[-1, -1.5]], where the cofactor and the derivative are exactly 0 (numpy "
               "campaign seed 2993)", False,
        "library/linalg.py (cofactor from the SVD for every size)",
        lambda c, o: o.status == "wrong" and _uses(c, "det"), (),
        _case([Op("reshape", (0,), {"shape": (2, 2)}), Op("det", (1,))],
              [(4,), (2, 2), ()], [-1.0, 0.0, -1.0, -1.5],
              [0.0, 0.0, -5.357543035931337e300, 0.0], structure="tuple", split=2,
              seed=65536), fixed=True),
    Finding(
        "F65", "-x of a Python-float argument lost its weak type (NEP 50): -x - np.float32(c) "
               "computed in float64 where numpy computes in float32 (a value off in the "
               "float32 bits; numpy campaign seed 2993)", False,
        "asd/core/tracing.py (Tracer.__neg__ / __abs__ did not pass the weak mark on)",
        lambda c, o: o.status == "wrong" and "value: asd" in o.detail
        and c.structure == "python_float", (),
        _case([Op("negative", (0,)), Op("prod", (1,), {"axis": None}),
               Op("dtype_constant", (1,), {"kind": "0d_float32", "values": (1.5, 1.5),
                                           "op": "-"}),
               Op("abs", (3,)), Op("add_constant", (4,), {"constant": 2.0}), Op("sqrt", (5,)),
               Op("negative", (3,)), Op("einsum", (7, 2), {"spec": ",->"}),
               Op("sum", (6,), {"axis": None}), Op("add", (8, 9))],
              [(), (), (), (), (), (), (), (), (), (), ()], 0.0, 0.25,
              structure="python_float", seed=6), fixed=True),
    Finding(
        "F66", "a false refusal at floor_divide of a running max held by an entry at it "
               "(cummax of a saturated clip and an entry that only rises below it; numpy "
               "campaign seed 2998 on the final code)", False,
        "asd/core/sweep.py (Trace.moves did not read cummax)",
        _refused_floor_divide("cummax"), (),
        _case([Op("add_constant", (0,), {"constant": (0.75, 0.0)}),
               Op("hardtanh", (1,), {"lo": 0.0, "hi": 2.0}),
               Op("add_constant", (2,), {"constant": (3.0, 0.0)}),
               Op("cummax", (3,), {"axis": -1}),
               Op("multiply_constant", (4,), {"constant": (1.0, -2.0)}),
               Op("add_constant", (5,), {"constant": (1.0, 0.0)}),
               Op("floor_divide", (6,), {"c": 1.0})],
              [(2,), (2,), (2,), (2,), (2,), (2,), (2,), (2,)], [-1.5, 0.0], [0.25, 0.25],
              reduce=False), fixed=True),
    Finding(
        "F67", "a float16 or float32 quantity plus a float64 zero was not the quantity (the sum "
               "is float64 under NEP 50): a tie of the two was flat where its exact series is "
               "out of reach (a false refusal) and climbed every series order elsewhere "
               "(seconds per call; numpy campaign seed 3001, slow jit-zero)", False,
        "asd/core/ties.py (_peeled kept an identity constant only where the dtype stayed)",
        lambda c, o: (o.status == "bad-refusal" and "flat to first order" in o.detail
                      and c.dtype in ("float16", "float32")), (),
        _case([Op("clip", (0,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (1,)),
               Op("diff", (2,), {"axis": -1}),
               Op("add_constant", (3,), {"constant": (2.0, 0.0)}),
               Op("where_logic", (4, 3, 4, 3, 4, 4), {"cmps": ("<", "<"), "expr": ("not", 0),
                                                      "spelling": "functions"})],
              [(3,), (3,), (3,), (2,), (2,), (2,)], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0],
              reduce=False, dtype="float16", seed=544), fixed=True),
    Finding(
        "F68", "a false refusal at a step function of an order statistic held by enough "
               "entries (the second smallest of (0, -1, relu(t)) is held at 0 by the dead "
               "relu; numpy campaign seed 3001 on the final code)", False,
        "asd/core/sweep.py (Trace.moves read an order statistic as rising wherever an entry "
        "at it rises)",
        lambda c, o: (o.status == "bad-refusal" and "jumps here" in o.detail
                      and _uses(c, "partition_kth", "median", "sorted_by", "quantile")), (),
        _case([Op("add_constant", (0,), {"constant": ((-2.0, -2.0), (-2.0, -2.0),
                                                      (-2.0, -0.75))}),
               Op("relu", (1,)),
               Op("add_constant", (2,), {"constant": ((3.0, 0.0), (0.0, -1.0), (3.0, 0.0))}),
               Op("partition_kth", (3,), {"axis": 0, "kth": 1}),
               Op("heaviside", (4,), {"h0": 0.5})],
              [(3, 2), (3, 2), (3, 2), (3, 2), (2,), (2,)],
              [[0.75, -1.0], [-1.0, -1.0], [-1.0, 0.75]],
              [[3.0, 1.0], [-0.5, 1.0], [3.0, 3.0]], seed=10446), fixed=True),
    Finding(
        "F69", "comparisons of Python floats are Python bools, whose ~ is integer inversion "
               "(~True == -2, true) and whose sums are ints: asd computed numpy's bools "
               "(negation, or), a silent wrong value and derivative (numpy campaign seed 3001 "
               "on the final code, python_float where_logic)", False,
        "asd/core/tracing.py (a traced Python bool was a numpy bool); library/piecewise.py "
        "(select_rule read an integer condition as a mask: F70)",
        lambda c, o: (o.status == "wrong" and c.structure == "python_float"
                      and _uses(c, "where_logic")), (),
        _case([Op("negative", (0,)), Op("abs", (1,)),
               Op("add_constant", (1,), {"constant": -1.0}),
               Op("where_logic", (3, 0, 3, 1, 3, 0, 2, 1),
                  {"cmps": ("<=", ">=", ">="), "expr": ("not", ("or", 0, ("xor", 1, 2))),
                   "spelling": "operators"}),
               Op("reshape", (4,), {"shape": (1, 1)}), Op("det", (5,))],
              [(), (), (), (), (), (1, 1), ()], 0.75, -0.5, structure="python_float",
              seed=3603), fixed=True),
    Finding(
        "F71", "values sorted by keys tied all along the ray (x + c along (1, 1)) that are "
               "equal at the point but part along it: the further direction's order was "
               "answered, though along the ray numpy's tie-break holds and beside it the "
               "result jumps (a silent wrong directional derivative; numpy campaign seed "
               "3001 on the final code)", False,
        "library/order.py (gather_rule compared the tied positions' values at the point only)",
        lambda c, o: (o.status == "wrong" and _uses(c, "sorted_by")
                      and "directional derivative" in o.detail), (),
        _case([Op("relu6", (0,)), Op("add_constant", (1,), {"constant": ((0.0, -2.0),
                                                                       (0.0, 0.0))}),
               Op("relu", (2,)), Op("add_constant", (1,), {"constant": ((0.75, 0.75),
                                                                       (-1.0, 0.0))}),
               Op("sorted_by", (3, 4), {"axis": 1})],
              [(2, 2)] * 6, [[0.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [-1.0, 1.0]],
              reduce=False, seed=166), fixed=True),
    Finding(
        "F74", "a false refusal (UndecidedTieError) at sqrt of sin(x)**2 at 0: the root's "
               "limit read the exact series at order 64 through nested levels, and sin's "
               "coefficients outgrew the budget (numpy campaign seed 3004 on the final code)",
        False, "asd/core/ties.py (root_limit read every series at the last order)",
        lambda c, o: (o.status == "bad-refusal" and "a root of" in o.detail
                      and "budget" in o.detail), (),
        _case([Op("method_transpose", (0,)), Op("sin", (0,)), Op("np_multiply", (2, 2)),
               Op("where_nan", (3,)), Op("add_constant", (4,), {"constant": ((0.0,), (0.0,))}),
               Op("np_power", (5,), {"n": 3}), Op("sum", (1,), {"axis": None}),
               Op("add", (6, 7))],
              [(2, 1), (1, 2), (2, 1), (2, 1), (2, 1), (2, 1), (2, 1), (), (2, 1)],
              [[0.0], [0.0]], [[1.0], [1.0]], dtype="float32", seed=628), fixed=True),
    Finding(
        "F76", "a false refusal at heaviside of an entry an assignment wrote from a saturated "
               "clip (y = x.copy(); y[::2] = f(clip(x))): Trace.moves did not read the "
               "assignment (numpy campaign seed 3005 on the final code)", False,
        "asd/core/sweep.py (Trace.moves did not read update)",
        lambda c, o: (o.status == "bad-refusal" and "heaviside jumps here" in o.detail
                      and _uses(c, "setitem_view", "setitem", "iadd")), (),
        _case([Op("add_constant", (0,), {"constant": (-1.0, 0.0)}),
               Op("clip", (1,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (2,)),
               Op("setitem_view", (0, 3), {"key": slice(None, None, 2)}),
               Op("add_constant", (4,), {"constant": (7.253720815694037, 0.75)}),
               Op("relu", (5,)), Op("heaviside", (6,), {"h0": 0.0})],
              [(2,)] * 8, [-1.5, 0.0], [-0.5, 2.0], reduce=False, seed=5027), fixed=True),
    Finding(
        "F77", "a tie whose exact series along v runs through a remainder was decided by the "
               "next direction (the remainder had no series), and the result labelled the "
               "limiting gradient along v, though v enters the other piece at second order: "
               "relu(h) with h = min(x**2 % 2 ...) - x1**2, tied with zero tangent (numpy "
               "campaign seed 3005 on the final code)", False,
        "asd/core/series.py (RaySeries had no integer parts: % // floor ceil trunc rint)",
        lambda c, o: (o.status == "wrong" and o.check in ("jacobian", "vjp", "subgrad")
                      and _uses(c, "remainder")), (),
        _case([Op("multiply", (0, 0)),
               Op("add_constant", (1,), {"constant": (0.5, -0.0625, 0.5, 0.5)}),
               Op("remainder", (2,), {"c": 2.0}),
               Op("add_constant", (3,), {"constant": (3.0, 0.75, 0.75, 0.0)}),
               Op("percentile", (4,), {"axis": -1, "q": 0.0}), Op("minimum", (5, 0)),
               Op("add_constant", (6,), {"constant": (4.0, 0.0, 0.5, 0.5)}),
               Op("subtract", (7, 2)), Op("step_multiply", (8, 7, 2), {"cmp": ">"})],
              [(4,), (4,), (4,), (4,), (4,), (), (4,), (4,), (4,), (4,)],
              [2.0, 0.75, 2.0, 0.0], [1.0, 0.0, 1.0, 2.0], reduce=False, seed=1694),
        fixed=True),
    Finding(
        "F78", "a harness gap, not asd's: asd.torch.function's gradient at hinge(sinh(clip(x)) "
               "+ c) differed from the oracle's (52.2 against 13.6), because torch.sinh(2) is "
               "1 ulp above np.sinh(2): torch's program is off the hinge's kink where "
               "numpy's, which the oracle decides, is on it (torch campaign seed 3007 on the "
               "final code)", False,
        "tests/fuzz/frameworks.py (the oracle decided ties at numpy's floats)",
        lambda c, o: (o.status == "wrong" and o.check == "torch.function"
                      and _uses(c, "hinge")), (),
        _case([Op("clip", (0,), {"lo": -2.0, "hi": 2.0}), Op("sinh", (1,)),
               Op("add_constant", (2,), {"constant": ((1.0, -0.25, 1.0),
                                                      (-0.25, -2.6268604078470186, -0.25),
                                                      (-0.25, -0.25, -0.25))}),
               Op("hinge", (3,)), Op("square", (2,)), Op("transpose", (2,)),
               Op("method_transpose", (6,)), Op("expand_squeeze", (5,), {"axis": -1}),
               Op("sum", (4,), {"axis": None}), Op("add", (8, 9)),
               Op("sum", (7,), {"axis": None}), Op("add", (10, 11))],
              [(3, 3)] * 9 + [(), (3, 3), (), (3, 3)],
              [[0.0, 2.0, 0.0], [0.0, 2.0, 2.0], [2.0, 2.0, 0.0]],
              [[3.0, 1.0, 1.0], [3.0, 1.0, 3.0], [3.0, 1.0, 2.0]], reduce=False, seed=142),
        frameworks=("torch",), fixed=True),
    Finding(
        "F79", "a false refusal through asd.torch: logaddexp's decomposition tests a == b "
               "(masked by an isfinite test, so the output does not depend on it); at a == b "
               "the jump replay, run with numpy's implementations, met torch's own rounding "
               "of the output (1 ulp) and called the output discontinuous (torch campaign "
               "seed 3012 on the final code)", False,
        "asd/core/sweep.py (replay_jumps compared a numpy replay with torch's value)",
        lambda c, o: (o.status == "bad-refusal" and o.check.startswith("torch.")
                      and "equal jumps here" in o.detail and _uses(c, "logaddexp")), (),
        _case([Op("atleast_2d", (0,)),
               Op("add_constant", (0,), {"constant": ((3.0, -0.25, 3.0), (-2.0, 0.0, -2.0))}),
               Op("max", (2,), {"axis": -2, "keepdims": False}),
               Op("add_constant", (1,), {"constant": ((-0.5, 0.0, -0.75),
                                                      (-0.75, -2.0, 0.0))}),
               Op("np_absolute", (4,)), Op("np_power", (5,), {"n": 0}),
               Op("add_constant", (6,), {"constant": ((-2.0, -1.0, -1.0), (-1.0, 2.0, 2.0))}),
               Op("logaddexp", (7, 4)), Op("sum", (3,), {"axis": None}), Op("add", (8, 9))],
              [(2, 3)] * 3 + [(3,)] + [(2, 3)] * 5 + [(), (2, 3)],
              [[0.0, 0.0, 0.75], [0.75, 0.75, 0.0]], [[1.0] * 3, [1.0] * 3], seed=2901),
        frameworks=("torch",), fixed=True),
    Finding(
        "F80", "asd.clarke of a float16 argument whose exact gradient exceeds float16's range "
               "(computed in float64, where a float64 constant promoted the program) returned "
               "inf in the argument's dtype, where asd.subgrad refuses (numpy campaign seed "
               "3013 on the final code)", False,
        "asd/analysis/clarke.py (_in_leaf_dtypes cast without the overflow check)",
        lambda c, o: (o.status == "wrong" and o.check == "clarke" and "inf" in o.detail), (),
        _case([Op("negative", (0,)), Op("add_constant", (1,), {"constant": (2.0, 0.0, 2.0)}),
               Op("method_min", (2,), {"axis": None, "keepdims": True}),
               Op("multiply_constant", (3,), {"constant": (0.75,)}),
               Op("dtype_constant", (4,), {"kind": "uint64", "values": (9223372036854775808,),
                                           "op": "*"})],
              [(3,), (3,), (3,), (1,), (1,), (1,)], [0.0, 0.0, -1.5], [1.0, 1.0, 1.0],
              dtype="float16", seed=65536),
        fixed=True),
    Finding(
        "F81", "a false refusal: where(h > 0, h * sqrt(h), 0) with h = (norm(x⊗x) - x⊗x)**2, "
               "0 along every direction, was refused as undecided: the norm had no exact "
               "series, and a sign the root's series needed at a low order stopped the rising "
               "orders (numpy campaign seed 3016 on the final code)", False,
        "asd/core/ties.py, library/norms.py (root_limit stopped at a truncated order; pnorm "
        "had no series)",
        lambda c, o: (o.status == "bad-refusal" and "a root of" in o.detail
                      and _uses(c, "norm2")), (),
        _case([Op("kron", (0, 0)), Op("add_constant", (1,), {"constant": (0.0,)}),
               Op("norm2", (2,)), Op("subtract", (3, 1)), Op("multiply", (4, 4)),
               Op("where_nan", (5,)), Op("abs", (1,)), Op("add_constant", (7,), {"constant": 2.0}),
               Op("log2", (8,)), Op("median", (9,), {"axis": 0}), Op("sum", (6,), {"axis": None}),
               Op("add", (10, 11))],
              [(1,)] * 3 + [()] + [(1,)] * 6 + [(), (), ()], [0.0], [1.8665272370064378e-301],
              structure="int_array", seed=425),
        fixed=True),
    Finding(
        "F82", "a false refusal: values gathered by argsort of keys tied at the point where "
               "the keys are held on a neighbourhood (a clip whose bounds are equal) were "
               "refused as jumping, though numpy's stable order holds near the point (numpy "
               "campaign seed 3018 on the final code)", False,
        "library/order.py (the gather refused ties of held keys)",
        lambda c, o: (o.status == "bad-refusal" and "gather different values" in o.detail
                      and _uses(c, "clip")), (),
        _case([Op("clip", (0,), {"lo": ((0.0,), (-0.5,), (-0.5,)),
                                 "hi": ((0.0,), (-0.5,), (-0.5,))}),
               Op("add_constant", (1,), {"constant": ((-0.5,), (0.0,), (3.0,))}),
               Op("add_constant", (2,), {"constant": ((0.0,), (0.0,), (-3.0,))}),
               Op("sorted_by", (2, 3), {"axis": 0})],
              [(3, 1)] * 5, [[-1.0], [0.0], [0.0]], [[2.0], [-0.5], [2.0]], reduce=False,
              structure="dict", split=2, seed=246),
        fixed=True),
]
