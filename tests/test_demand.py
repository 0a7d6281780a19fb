"""Demand-driven tangents and the lazy direction (the performance work of issue 8).

A rule that meets ties in a few entries asks for those entries only; each linear map narrows
the request (``push_at``) and the trace memoizes what it computed. These tests pin the
contract: ``push_at(mask, t_at) == push(t)[mask]`` for every map, requests never reach
entries a map does not read, memoization stays consistent with the full tangent, deep
programs fall back instead of recursing, and no direction is drawn without a tie.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd import api
from asd.core.linear import Diagonal, FanIn, Index, MatMul, Reshape, Sum, Transpose, Zero
from asd.core.sweep import MAX_REQUEST_DEPTH, LazyDirection, Trace


def recorder(t):
    """A ``t_at`` that serves ``t`` and remembers which entries were asked for."""
    asked = np.zeros(np.shape(t), bool)

    def t_at(need):
        asked[need] = True
        return np.asarray(t)[need]

    return t_at, asked


def maps(rng):
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    d = rng.standard_normal((5, 4))
    d[rng.random((5, 4)) < 0.4] = 0.0
    return [
        ("diagonal", Diagonal(d, (5, 4))),
        ("diagonal bool", Diagonal(d > 0, (5, 4))),
        ("diagonal scalar", Diagonal(-2.0, (5, 4))),
        ("identity", Diagonal(None, (5, 4))),
        ("broadcast row", Diagonal(d, (4,), (5, 4))),
        ("broadcast column", Diagonal(None, (5, 1), (5, 4))),
        ("reshape", Reshape((5, 4), (2, 10))),
        ("transpose", Transpose((1, 0), (5, 4))),
        ("index basic", Index((slice(1, 4), slice(None, None, 2)), (5, 4), (3, 2))),
        ("matmul a", MatMul(b, "a", (5, 4), (4, 3), (5, 3))),
        ("matmul b", MatMul(a, "b", (5, 4), (4, 3), (5, 3))),
        ("zero", Zero((5, 4), (5, 4))),
    ]


NAMES = [n for n, _ in maps(np.random.default_rng(0))]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), density=st.sampled_from([0.0, 0.1, 0.5, 1.0]))
def test_push_at_is_the_pushed_tangent_at_the_mask(name, seed, density):
    rng = np.random.default_rng(seed)
    lin = dict(maps(rng))[name]
    t = rng.standard_normal(lin.in_shape)
    mask = rng.random(lin.out_shape) < density
    t_at, asked = recorder(t)
    got = lin.push_at(mask, t_at)
    want = np.broadcast_to(lin.push(t), lin.out_shape)[mask]
    np.testing.assert_allclose(np.zeros(mask.sum()) if got is None else got, want,
                               rtol=1e-12, atol=1e-12)
    # Only entries some requested output reads are asked for (checked through the
    # transposed map: an input entry is read iff its cotangent from the mask is nonzero).
    # A matmul reads the requested rows (columns) whole.
    reads = (_rows_or_columns(lin, mask) if name.startswith("matmul")
             else np.abs(lin.pull(mask.astype(float))) > 0)
    assert not (asked & ~reads).any(), name


def _rows_or_columns(lin, mask):
    need = np.zeros(lin.in_shape, bool)
    if lin.side == "a":
        need[mask.any(axis=1)] = True
    else:
        need[:, mask.any(axis=0)] = True
    return need


def test_matmul_skips_tangent_rows_that_meet_zero_columns():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 4))
    a[:2] = 0.0
    a[:, 1] = 0.0
    lin = MatMul(a, "b", (5, 4), (4, 3), (5, 3))
    t = rng.standard_normal((4, 3))
    mask = np.zeros((5, 3), bool)
    t_at, asked = recorder(t)
    mask[:2] = True  # rows of A that are zero: nothing to ask
    assert lin.push_at(mask, t_at) is None and not asked.any()
    mask[3, 2] = True
    np.testing.assert_allclose(lin.push_at(mask, t_at), lin.push(t)[mask], rtol=1e-12)
    assert not asked[1].any() and asked[[0, 2, 3], 2].all()


def test_fan_in_sums_its_narrowed_parts_and_skips_constants():
    rng = np.random.default_rng(1)
    d = rng.standard_normal((3, 4))
    lin = FanIn(Diagonal(d, (3, 4)), Diagonal(None, (4,), (3, 4)), None)
    ta, tb = rng.standard_normal((3, 4)), rng.standard_normal(4)
    mask = rng.random((3, 4)) < 0.5
    got = lin.push_at(mask, [recorder(ta)[0], recorder(tb)[0], None])
    np.testing.assert_allclose(got, lin.push(ta, tb, None)[mask], rtol=1e-12)
    assert lin.push_at(mask, [None, None, None]) is None


def test_maps_that_cannot_narrow_say_so():
    lin = Sum(1, False, (3, 4), (3,))
    assert lin.push_at(np.ones(3, bool), lambda need: None) is NotImplemented
    fan = FanIn(Diagonal(None, (3,)), lin)
    assert fan.push_at(np.ones(3, bool), [lambda n: np.zeros(n.sum()),
                                           lambda n: np.zeros(n.sum())]) is NotImplemented


# ----- the trace: work follows the ties -----

def tied_mlp(seed=0, batch=16, width=8, layers=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 6))
    x[: batch // 4] = 0.0
    ws = [rng.standard_normal((6 if i == 0 else width, width)) for i in range(layers)]
    bs = [np.zeros(width) for _ in range(layers)]

    def f(params):
        h = x
        for w, b in zip(params[0::2], params[1::2], strict=True):
            h = asd.relu(h @ w + b)
        return (h * h).sum()

    return f, [p for pair in zip(ws, bs, strict=True) for p in pair], batch // 4


def test_tied_rows_ask_only_for_their_rows():
    f, params, tied = tied_mlp()
    inputs = api._Inputs((params,), 0)
    trace, _, _ = api._sweep(f, inputs, None, 0)
    width = params[0].shape[1]
    relus = [k for k, n in enumerate(trace.nodes) if n.name == "relu"]
    assert [trace.ties[k] for k in relus] == [tied * width] * len(relus)
    for k, node in enumerate(trace.nodes):
        if node.prim is not None:
            assert trace.tangents[k] is None, f"full tangent computed at %{k} {node.name}"
    for k, (known, _) in trace.partial.items():
        rows = np.flatnonzero(known.reshape(known.shape[0], -1).any(axis=1)) if known.ndim else []
        assert set(rows) <= set(range(tied)), (k, trace.nodes[k].name)


@pytest.mark.parametrize("seed", range(5))
def test_demand_driven_subgradient_equals_the_full_tangent_one(seed):
    """The same sweep with every tangent forced full gives the same subgradient."""
    f, params, _ = tied_mlp(seed)
    v = [np.random.default_rng(seed + 100).standard_normal(p.shape) for p in params]
    got = asd.subgrad(f, direction=v)(params)
    original = Trace.tangent_at
    try:
        Trace.tangent_at = lambda self, k, mask, depth=0: self.tangent(k)[mask]
        want = asd.subgrad(f, direction=v)(params)
    finally:
        Trace.tangent_at = original
    for g, h in zip(got, want, strict=True):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)


def test_memo_is_consistent_between_entries_and_the_full_tangent():
    f, params, tied = tied_mlp(3)
    trace, _, _ = api._sweep(f, api._Inputs((params,), 0), None, 0)
    k = max(k for k, n in enumerate(trace.nodes) if n.name == "matmul")
    mask = np.zeros(trace.nodes[k].shape, bool)
    mask[tied:, ::2] = True  # untied rows: not computed yet
    part = trace.tangent_at(k, mask)
    again = trace.tangent_at(k, mask)
    full = trace.tangent(k)
    np.testing.assert_allclose(part, full[mask], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(part, again)
    np.testing.assert_allclose(trace.tangent_at(k, ~mask), full[~mask], rtol=1e-12)


def test_deep_programs_fall_back_instead_of_recursing():
    n = 3 * MAX_REQUEST_DEPTH

    def f(x):
        for _ in range(n):
            x = x * 1.0001 + 0.0
        return asd.relu(x - x.sum() * 0.0).sum()

    x = np.array([0.0, 1.0, -1.0, 2.0])
    g = asd.subgrad(f, direction=np.array([1.0, 0.0, 0.0, 0.0]))(x)
    assert g[0] > 0 and g[2] == 0.0


# ----- the lazy direction -----

def counting_draws(monkeypatch):
    drawn = []
    original = LazyDirection.leaf

    def leaf(self, i):
        if self.leaves[i] is None:
            drawn.append(i)
        return original(self, i)

    monkeypatch.setattr(LazyDirection, "leaf", leaf)
    return drawn


def test_no_tie_no_direction_drawn(monkeypatch):
    drawn = counting_draws(monkeypatch)
    x = np.array([1.0, -2.0, 3.0])
    _, g = asd.value_and_subgrad(lambda x: asd.relu(x).sum())(x)
    assert drawn == [] and g.tolist() == [1.0, 0.0, 1.0]
    asd.value_and_subgrad(lambda x: asd.relu(x).sum())(np.array([0.0, 1.0]))
    assert drawn == [0]


@pytest.mark.parametrize("seed", range(4))
def test_lazy_draw_is_the_seeded_direction(seed):
    x = np.zeros(5)
    f = lambda x: asd.abs(x).sum() + asd.relu(-x).sum()  # noqa: E731
    r = asd.asd(f, seed=seed)(x)
    again = asd.subgrad(f, direction=r.direction)(x)
    np.testing.assert_array_equal(r.subgradient, again)
    assert float(r.dini) == pytest.approx(float(np.dot(again, r.direction)), rel=1e-12)


def test_a_tie_draws_only_the_leaves_its_tangent_reads():
    """The tie in relu(x) reads x's direction; y's is never drawn (nor when no tie is met)."""
    def f(x, y):
        return asd.relu(x).sum() + (y * 2.0).sum()

    inputs = api._Inputs((np.array([0.0, 2.0]), np.ones(2)), (0, 1))
    trace, _, _ = api.sweep_along(f, inputs, inputs.random_direction(0))
    assert trace.ties and trace.tangents[0] is not None and trace.tangents[1] is None
    trace, _, _ = api.sweep_along(lambda x, y: (x * y).sum(), inputs,
                                  inputs.random_direction(0))
    assert all(t is None for t in trace.tangents[:2])  # no tie: nothing drawn


def test_the_exact_series_draws_the_leaves_it_reads():
    """A degenerate tie (zero tangent) falls to the exact series, which reads the inputs'
    directions through the same lazy draw."""
    def f(x):
        return asd.relu(x[1] - x[0] ** 2) - asd.relu(x[0] ** 2 - x[1])

    g = asd.subgrad(f, direction=np.array([1.0, 0.0]))(np.zeros(2))
    np.testing.assert_array_equal(g, [0.0, 1.0])
    for seed in range(5):
        np.testing.assert_allclose(asd.subgrad(f, seed=seed)(np.zeros(2)), [0.0, 1.0])



def test_memo_entries_a_request_left_zero_read_as_exact_zeros():
    """The memo's buffer is uninitialized (no full-size zero per node a tie reaches): an
    entry whose request came back None (every scale upstream zero) must be written as 0,
    and a later request that reads it with new entries gets the full tangent's entries
    bit for bit."""
    def f(x):
        return (asd.relu(x) * 2.0).sum()

    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    v = np.arange(1.0, 7.0).reshape(2, 3)
    trace, _, _ = api._sweep(f, api._Inputs((x,), 0), v, 0)
    k = next(k for k, n in enumerate(trace.nodes) if n.name == "multiply")
    off = x < 0  # the relu's off side: the request upstream comes back None
    np.testing.assert_array_equal(trace.tangent_at(k, off), np.zeros(3))
    both = off | (x > 3)
    np.testing.assert_array_equal(trace.tangent_at(k, both), trace.tangent(k)[both])
    np.testing.assert_array_equal(trace.tangent_at(k, off), np.zeros(3))


def test_lazy_direction_spawns_its_streams_on_the_first_draw_with_the_same_children():
    """An int or None seed's streams are spawned only when a leaf is drawn (a call without a
    tie spawns nothing), and they are the children an eager spawn gives: leaf ``i`` is
    drawn from ``SeedSequence(seed).spawn(n)[i]`` whichever leaf is drawn first."""
    shapes, dtypes = [(3,), (2, 2), ()], [np.float64, np.float32, np.float64]
    d = LazyDirection(7, shapes, dtypes)
    assert isinstance(d.streams, np.random.SeedSequence)  # nothing spawned yet
    children = np.random.SeedSequence(7).spawn(3)
    for i in (2, 0, 1):
        want = np.random.default_rng(children[i]).standard_normal(
            shapes[i], dtype=np.float32 if dtypes[i] == np.float32 else np.float64)
        np.testing.assert_array_equal(d.leaf(i), want)
