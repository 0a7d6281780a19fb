"""asd.jit: a compiled program returns what the uncompiled transform returns, bit for bit.

The oracle is the uncompiled transform itself (proven against exact limits in
tests/test_random_programs.py): each random program is compiled, traced at one point and
then *replayed* at others, on its kinks (where every tie runs its full rule) and off them
(where value_and_subgrad takes the generated fast path); every result must have the same
bits, dtype and shape as tracing again. Then the semantics: what a trace captures, what
makes it trace again, and that a compiled call never returns another program's gradient.
"""

import itertools
import re
from functools import partial

import numpy as np
import pytest
from asd.library import piecewise
from hypothesis import given, settings

import asd
from asd.errors import ArgumentError, NonFiniteError, TracerBoolError
from tests.programs import programs, run, vector_programs

EQUAL = settings(max_examples=250, deadline=None)


def same_bits(a, b) -> bool:
    """Equal structure, shapes, dtypes and bytes (so -0.0, NaN payloads and types too)."""
    if isinstance(a, tuple | list):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same_bits(x, y) for x, y in zip(a, b, strict=True)))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    if hasattr(a, "detach"):  # torch
        a, b = a.detach().cpu().numpy(), b.detach().cpu().numpy()
    x, y = np.asarray(a), np.asarray(b)
    return (type(a) is type(b) and x.shape == y.shape and x.dtype == y.dtype
            and x.tobytes() == y.tobytes())


def points(x, v):
    """The trace point (off the kinks), then replays: on the kinks, off them, on again."""
    off = x + 0.3125 * v + 0.0078125
    return [off, x, off * 0.5 - 0.25, x]


def assert_same_calls(compiled, plain, calls):
    for args in calls:
        try:
            want = plain(*args)
        except Exception as e:
            with pytest.raises(type(e)) as got:
                compiled(*args)
            assert str(got.value) == str(e)
            continue
        got = compiled(*args)
        assert same_bits(got, want), f"at {args}: compiled {got} != uncompiled {want}"


def assert_compiled_subgrad_agrees(program, at, v):
    """value_and_subgrad along ``v``, compiled at the first point of ``at`` and replayed at
    the others, equals the uncompiled transform at each, from one trace."""
    plain = asd.value_and_subgrad(partial(run, program), direction=v)
    compiled = asd.jit(plain)
    assert_same_calls(compiled, plain, [(p,) for p in at])
    assert compiled.traces == 1


@EQUAL
@given(programs(rational=True))
def test_value_and_subgrad_replays_bit_for_bit(case):
    program, x, v = case
    assert_compiled_subgrad_agrees(program, points(x, v), v)


INLINED = ("add", "subtract", "multiply", "negative", "divide_by_constant", "add_constant",
           "multiply_constant", "relu", "abs", "maximum", "minimum", "sum", "square", "index")
"""Ops the fast path writes out itself (tests/programs.py names): drawn alone, so every
generated line meets the replays off the kinks."""


@EQUAL
@given(programs(names=INLINED))
def test_fast_path_programs_replay_bit_for_bit(case):
    program, x, v = case
    off = [x + 0.3125 * v + 0.0078125, x * 0.75 - 0.3125 * v + 0.00390625]
    assert_compiled_subgrad_agrees(program, [off[0], off[1], off[0] * 0.5, x], v)


@EQUAL
@given(programs(rational=True))
def test_random_direction_and_reports_replay_bit_for_bit(case):
    program, x, v = case
    f = partial(run, program)
    plain = asd.asd(f, seed=7)
    compiled = asd.jit(plain)
    for p in points(x, v):
        want, got = plain(p), compiled(p)
        assert same_bits(got.value, want.value) and same_bits(got.subgradient, want.subgradient)
        assert same_bits(got.dini, want.dini) and got.ties == want.ties
        assert got.degenerate == want.degenerate and got.decisions == want.decisions


@EQUAL
@given(vector_programs(rational=True))
def test_directional_and_jacobian_replay_bit_for_bit(case):
    program, x, v = case
    f = partial(run, program)
    assert_same_calls(asd.jit(asd.directional(f)), asd.directional(f),
                      [(p, v) for p in points(x, v)])
    assert_same_calls(asd.jit(asd.jacobian(f, direction=v)), asd.jacobian(f, direction=v),
                      [(p,) for p in points(x, v)])


@settings(max_examples=80, deadline=None)
@given(programs(rational=True))
def test_clarke_sample_replays_bit_for_bit(case):
    program, x, v = case
    f = partial(run, program)
    plain = asd.clarke(f, n=12, seed=5)
    compiled = asd.jit(plain)
    for p in points(x, v):
        try:
            want = plain(p)
        except Exception as e:  # the replay must raise the same
            with pytest.raises(type(e)):
                compiled(p)
            continue
        got = compiled(p)
        assert same_bits(got.value, want.value) and same_bits(got.gradients, want.gradients)
        assert same_bits(got.counts, want.counts) and got.ties == want.ties
        assert got.degenerate == want.degenerate
    assert compiled.traces == 1


def svm(w, X, y):
    return asd.maximum(0.0, 1 - y * (X @ w)).mean() + 0.1 * asd.abs(w).sum()


def svm_data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((6, 3)), np.sign(rng.standard_normal(6))


def test_fast_path_is_taken_off_ties_and_left_at_them():
    X, y = svm_data()
    plain = asd.value_and_subgrad(svm, seed=3)
    compiled = asd.jit(plain)
    w = np.array([0.3, -0.2, 0.1])
    assert same_bits(compiled(w, X, y), plain(w, X, y))  # traced; the fast path generated
    (path,) = compiled.compiled.fast_cache.values()
    assert same_bits(compiled(w, X, y), plain(w, X, y))
    assert "TieMet" in path.run.source and "rule" in path.run.source  # matmul: its own rule
    assert path((w, X, y)) is not None
    tied = np.array([0.0, 0.5, -1.0])  # |w| ties at w0 = 0: the fast path declines
    assert path((tied, X, y)) is None
    assert same_bits(compiled(tied, X, y), plain(tied, X, y))
    assert compiled.traces == 1


def test_scalar_chain_uses_python_scalars_and_matches():
    def chain(y):
        for _ in range(40):
            y = asd.abs(y * 0.9 + 0.1) - 0.05
        return y

    plain, compiled = asd.value_and_subgrad(chain), asd.jit(asd.value_and_subgrad(chain))
    for y0 in (0.3, 0.3, -2.0, -1.0 / 9.0, 1e300):
        assert same_bits(compiled(y0), plain(y0))
    assert compiled.traces == 1


SCALAR_STEPS = {  # one step of a scalar chain per elementwise piecewise primitive
    "maximum": lambda y: np.maximum(0.9 * y + 0.1, 0.3 * y),
    "minimum": lambda y: np.minimum(0.9 * y + 0.1, 1.3 * y),
    "relu": lambda y: asd.relu(y - 0.1) + 0.3 * y,
    "clip": lambda y: np.clip(1.1 * y - 0.05, -0.5, 0.8),
    "leaky_relu": lambda y: piecewise.leaky_relu_p(0.9 * y + 0.1, negative_slope=0.3) - 0.05,
    "huber": lambda y: piecewise.huber_p(0.9 * y + 0.1, delta=0.5) - 0.05,
    "hard_sigmoid": lambda y: piecewise.hard_sigmoid_p(3.0 * y - 1.0),
    "hardtanh": lambda y: piecewise.hardtanh_p(1.1 * y - 0.05, lo=-1.0, hi=1.0),
}


@pytest.mark.parametrize("step", list(SCALAR_STEPS))
def test_scalar_chains_of_every_piecewise_primitive_run_generated_and_match(step):
    """Every value a float64 scalar: the generated path runs on Python floats (the same IEEE
    operations as the rules), for Python floats, numpy scalars and 0-d arrays alike, and
    leaves a tie (a breakpoint, equal operands) to the full sweep."""
    def chain(y):
        for _ in range(30):
            y = SCALAR_STEPS[step](y)
        return y

    plain = asd.value_and_subgrad(chain, seed=0)  # at a tie the direction decides: fix it
    compiled = asd.jit(asd.value_and_subgrad(chain, seed=0))
    for y0 in (0.7, np.float64(0.7), np.asarray(0.7), -0.4, 0.1, np.float64(-1.0 / 3.0)):
        assert same_bits(compiled(y0), plain(y0))
    assert compiled.traces == 1
    # one generated function, bound to the three argument layouts
    (run,) = {p.run for p in compiled.compiled.fast_cache.values()}
    assert "rule" not in run.source  # every step written out
    assert "np." not in run.source.split("\n", 2)[2]  # Python floats, no ufunc calls


def test_tuple_argnums_and_python_floats():
    def f(a, b, c):
        return asd.relu(a * b - c) + asd.abs(b)

    plain = asd.value_and_subgrad(f, argnums=(0, 2), seed=1)
    compiled = asd.jit(plain)
    for args in [(1.5, np.array(2.0), 0.5), (1.5, np.array(2.0), 0.5),
                 (0.25, np.array(4.0), 1.0), (-1.0, np.array(2.0), 0.5)]:
        assert same_bits(compiled(*args), plain(*args))


def test_parameter_lists_take_the_fast_path():
    def loss(p, x):
        return asd.relu(x @ p[0] + p[1]).sum() + asd.abs(p[2])

    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    plain = asd.value_and_subgrad(loss, seed=4)
    compiled = asd.jit(plain)
    for p in ([np.eye(2), np.array([0.25, -0.5]), 0.5],
              [np.eye(2) * 2, np.array([1.0, -3.0]), -0.5],
              (np.eye(2), np.array([0.25, -0.5]), 0.0),  # a tuple, tied at p[2] = 0
              [np.eye(2), np.array([0.25, -0.5]), 1.5]):
        assert same_bits(compiled(p, x), plain(p, x))
    assert len(compiled.compiled.fast_cache) == 2  # one per layout (list, tuple)


def test_new_shapes_and_dtypes_trace_again():
    compiled = asd.jit(asd.subgrad(lambda x: asd.relu(x).sum()))
    compiled(np.ones(3))
    compiled(np.ones(3) * 2)
    assert compiled.traces == 1
    compiled(np.ones(4))
    compiled(np.ones(4, np.float32))
    assert compiled.traces == 3


def test_mutated_closure_keeps_the_traced_program_until_cleared():
    c = np.array([1.0, -2.0])

    def f(x):
        return asd.abs(x - c).sum() + (c * x).sum()

    compiled = asd.jit(asd.value_and_subgrad(f, seed=0))
    x = np.array([0.5, 0.5])
    old = asd.value_and_subgrad(f, seed=0)(x)
    assert same_bits(compiled(x), old)
    c[:] = [3.0, 4.0]  # in place: the program holds its own copy
    assert same_bits(compiled(x), old)
    assert same_bits(compiled(x), old)  # the fast path too
    compiled.clear_cache()
    assert same_bits(compiled(x), asd.value_and_subgrad(f, seed=0)(x))
    assert not same_bits(compiled(x), old)


def test_python_flags_are_part_of_the_signature():
    def f(x, flag):
        return asd.relu(x).sum() if flag else asd.abs(x).sum()

    x = np.array([-1.0, 2.0])
    compiled = asd.jit(asd.value_and_subgrad(f))
    for flag in (True, False, True, False):
        assert same_bits(compiled(x, flag), asd.value_and_subgrad(f)(x, flag))
    assert compiled.traces == 2

    def g(x, mode):
        return asd.relu(x).sum() * (2.0 if mode == "double" else 1.0)

    compiled = asd.jit(asd.subgrad(g))
    assert same_bits(compiled(x, "double"), np.array([0.0, 2.0]))
    assert same_bits(compiled(x, "single"), np.array([0.0, 1.0]))


def test_data_arguments_are_constants_by_content_or_dynamic_inputs():
    X, y = svm_data()
    plain = asd.value_and_subgrad(svm, seed=0)
    constants = asd.jit(plain)
    dynamic = asd.jit(plain, dynamic_argnums=(1, 2))
    w = np.array([0.3, -0.2, 0.1])
    for scale in (1.0, 2.0, 1.0, -1.0, -1.0):
        for compiled in (constants, dynamic):
            assert same_bits(compiled(w, X * scale, y), plain(w, X * scale, y))
    assert constants.traces == 3  # one per distinct X
    assert dynamic.traces == 1
    assert len(dynamic.compiled.fast_cache) == 1
    X[0, 0] += 1.0  # in place: new bytes, a new signature
    assert same_bits(constants(w, X, y), plain(w, X, y))
    assert constants.traces == 4


def test_python_may_branch_on_constant_data_not_on_dynamic():
    def f(x, data):
        return asd.relu(x).sum() if data.sum() > 0 else asd.abs(x).sum()

    compiled = asd.jit(asd.subgrad(f))
    assert same_bits(compiled(-np.ones(2), np.ones(2)), np.zeros(2))
    assert same_bits(compiled(-np.ones(2), -np.ones(2)), -np.ones(2))
    assert compiled.traces == 2
    with pytest.raises(TracerBoolError, match="dynamic_argnums"):
        asd.jit(asd.subgrad(f), dynamic_argnums=1)(np.ones(2), np.ones(2))
    with pytest.raises(ArgumentError, match="dynamic_argnums"):
        asd.jit(asd.subgrad(f), dynamic_argnums=0)(np.ones(2), np.ones(2))
    with pytest.raises(ArgumentError, match="neither an array nor hashable"):
        asd.jit(asd.subgrad(lambda x, d: asd.relu(x).sum()))(np.ones(2), {"a": [{1, 2}]})


def test_guarded_values_trace_again_where_they_change():
    def f(a):
        return np.linalg.slogdet(a)[1] * np.linalg.slogdet(a)[0]

    compiled = asd.jit(asd.value_and_subgrad(f))
    plain = asd.value_and_subgrad(f)
    pos, neg = np.diag([2.0, 3.0]), np.diag([2.0, -3.0])
    for a in (pos, pos * 2, neg, pos, neg * 3):
        assert same_bits(compiled(a), plain(a))
    assert compiled.traces == 2  # one program per sign, both kept


def test_errors_are_the_uncompiled_errors():
    compiled = asd.jit(asd.value_and_subgrad(lambda x: asd.numpy.log(x).sum()))
    compiled(np.ones(2))
    compiled(np.ones(2))
    with pytest.raises(NonFiniteError) as e:
        compiled(np.array([1.0, 0.0]))
    with pytest.raises(NonFiniteError) as want:
        asd.value_and_subgrad(lambda x: asd.numpy.log(x).sum())(np.array([1.0, 0.0]))
    assert str(e.value) == str(want.value)
    with pytest.raises(NonFiniteError, match="argument 0 has 1 non-finite"):
        compiled(np.array([1.0, np.inf]))  # the fast path leaves it to the argument checks


def test_a_plain_function_compiles_and_composes():
    calls = []

    def f(x, c):
        calls.append(1)
        return asd.relu(x - c).sum()

    compiled = asd.jit(f)
    assert compiled(np.array([1.0, -1.0]), 0.5) == 0.5
    assert compiled(np.array([3.0, -1.0]), 0.5) == 2.5
    assert len(calls) == 1
    g = asd.subgrad(compiled, direction=np.array([1.0, 1.0]))
    assert same_bits(g(np.array([0.5, 2.0]), 0.5), np.array([1.0, 1.0]))
    assert same_bits(g(np.array([0.5, 0.0]), 0.5), np.array([1.0, 0.0]))
    assert len(calls) == 2  # traced once for the sweep's signature, then replayed
    inner = asd.subgrad(lambda x: compiled(x, 0.0) * 2.0)  # inside another sweep: traced through
    assert same_bits(inner(np.array([1.0, -1.0])), np.array([2.0, 0.0]))
    print(compiled.program(np.array([1.0, -1.0]), 0.5))


def test_program_is_printable():
    compiled = asd.jit(lambda x: asd.relu(x).sum())
    text = str(compiled.program(np.ones(3)))
    assert "relu %0" in text and "sum %1" in text


def test_torch_replays_in_torch():
    torch = pytest.importorskip("torch")

    def f(w):
        return asd.relu(w).sum() + asd.abs(w - 1.0).sum()

    plain = asd.value_and_subgrad(f, seed=2)
    compiled = asd.jit(plain)
    for w in (torch.tensor([0.5, -1.0]), torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0])):
        assert same_bits(compiled(w), plain(w))
    assert compiled.traces == 1
    assert not compiled.compiled.fast_cache  # numpy only


def test_a_generator_seed_draws_one_direction_per_call_as_uncompiled():
    def f(x):
        return asd.abs(x).sum()  # tied at 0 in every entry

    plain = asd.value_and_subgrad(f, seed=np.random.default_rng(3))
    compiled = asd.jit(asd.value_and_subgrad(f, seed=np.random.default_rng(3)))
    for x in (np.ones(4), np.zeros(4), np.ones(4), np.zeros(4), np.zeros(4)):
        assert same_bits(compiled(x), plain(x))


def test_scalar_path_shares_locals_and_inlines_constants_bit_for_bit():
    """The generated scalar path reuses local names whose lifetimes do not overlap and writes
    finite float constants into its source (a small frame and constant loads: the 333-step
    maximum chain of issue 24 ran ~4x slower cold without); negative, -0.0 and infinite
    constants keep their bits, and the result is the uncompiled sweep's bit for bit."""
    def chain(y):
        for _ in range(60):
            y = np.maximum(-0.5 * y + 0.1, 0.3 * y) + np.minimum(y * -0.0, np.inf)
        return y

    plain = asd.value_and_subgrad(chain, seed=0)
    compiled = asd.jit(asd.value_and_subgrad(chain, seed=0))
    for y0 in (0.7, np.float64(0.7), np.asarray(-0.3), 2.5):
        assert same_bits(compiled(y0), plain(y0))
    (run,) = {p.run for p in compiled.compiled.fast_cache.values()}
    n_nodes = run.source.count("\n    if ")  # one if per max/min node
    assert n_nodes == 120
    assert run.__code__.co_nlocals < 3 * n_nodes  # ~7 names a step without sharing
    assert "(-0.5)" in run.source and "(-0.0)" in run.source and "0.3" in run.source


def test_share_locals_never_gives_one_name_to_overlapping_lifetimes():
    """`share_locals`: two names get one slot only where the first's last line is strictly
    before the second's first line (so no value is overwritten while still to be read)."""
    from asd.core.codegen import _LOCAL, share_locals

    rng = np.random.default_rng(0)
    for _ in range(50):
        names = [f"{rng.choice(list('vdefgxL'))}{i}" for i in range(12)]
        lines = []
        for _ in range(30):
            used = rng.choice(names, size=rng.integers(1, 4), replace=False)
            lines.append("    " + " + ".join(used))
        shared = share_locals(lines)
        span: dict = {}
        for i, text in enumerate(lines):
            slots = re.findall(r"\br\d+\b", shared[i])
            for a, b in zip(_LOCAL.findall(text), slots, strict=True):
                lo, hi, _ = span.get(a, (i, i, b))
                span[a] = (min(lo, i), max(hi, i), b)
        by_slot: dict = {}
        for lo, hi, slot in span.values():
            by_slot.setdefault(slot, []).append((lo, hi))
        for ranges in by_slot.values():
            ranges.sort()
            assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))



@pytest.mark.parametrize("spelling", ["index", "cast"])
def test_a_plain_read_replayed_under_a_jump_refuses_as_uncompiled(spelling):
    """A traced position used as a plain index (``c[np.argmax(y)]``), or a traced float cast
    to integers, is read once, at tracing. Where a later call puts a jump above it (a floor
    at an integer) that leaves the reading as it was, the value guard passes; the
    uncompiled call refuses (README "Positions as indices"), and so must the replay, which
    returned a number (fuzz campaign seed 2813)."""
    table = np.array([-0.5, -0.5])

    def f(x):
        y = np.floor(x[:2])
        if spelling == "index":
            return table[np.argmax(y + np.array([0.0, 5.0]))] * x
        return np.asarray(y * 0.25 + 0.5, dtype=np.int64)[0] * x - x

    plain = asd.jacobian(f)
    compiled = asd.jit(asd.jacobian(f))
    off, jump = np.array([0.5, 0.5, 3.0]), np.array([1.0, 0.5, 3.0])
    assert same_bits(compiled(off), plain(off))
    with pytest.raises(asd.NotLipschitzError) as want:
        plain(jump)
    with pytest.raises(asd.NotLipschitzError) as got:
        compiled(jump)
    assert str(got.value) == str(want.value)
    assert same_bits(compiled(off), plain(off))
    assert compiled.traces == 1
