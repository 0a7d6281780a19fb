"""Max pooling at planted ties: the fast paths decide exactly as the full tie contract does.

- tied windows (dead relus: every entry 0 with a zero tangent, entries on the relu's kink,
  equal maxima) are decided by the entries' jets (`asd.core.jet`: float series with error
  bounds), with no entry evaluated on exact series: the result, the Dini derivative and every
  reported tie and decision must be those of the exact series, which is forced by switching
  the jets off;
- on torch, torch's pooling kernel finds each window's first maximum and the tied windows
  (kernel ``max_pool_first``): it must agree with the array-API default entry for entry, and
  its channels-last pass with torch's kernel on contiguous planes (NaN and -inf included);
- on torch, a relu with no entry at 0 maps by a float `Mask` (skipping the tie masks): the
  whole sweep must be the general rules' bit for bit.
"""

from __future__ import annotations

import math

import asd.library.order as order
import numpy as np
import pytest

import asd
from asd.core import backend, ties
from asd.core.jet import JetUnsupported
from asd.core.linear import Index, Take
from asd.core.sweep import missing_cone

torch = pytest.importorskip("torch")

LIBRARIES = {
    "numpy-float64": (lambda a: np.asarray(a, dtype=np.float64), np.float64),
    "numpy-float32": (lambda a: np.asarray(a, dtype=np.float32), np.float32),
    "torch-float64": (lambda a: torch.tensor(np.asarray(a), dtype=torch.float64), np.float64),
    "torch-float32": (lambda a: torch.tensor(np.asarray(a), dtype=torch.float32), np.float32),
}


def host(a) -> np.ndarray:
    return np.asarray(backend.to_host(a))


def planted(shape, seed: int, kind: str = "quarters") -> np.ndarray:
    """``quarters``: multiples of 1/4 in [-1, 1]; after ``relu(x - 0.5)`` most windows are
    dead (all 0), many hold tied positive maxima, and some entries sit exactly on the relu's
    kink. ``normal``: the only ties are dead windows (every tied window is ordered by index)."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.standard_normal(shape)
    return rng.integers(-4, 5, shape) / 4.0


POOLS = {"disjoint": dict(window=2), "overlapping": dict(window=3, stride=2, padding=1)}


def pool_program_of(pool: str):
    def pool_program(x, w):
        h = asd.relu(x * w - 0.5)
        p = asd.max_pool2d(h, **POOLS[pool])
        return asd.numpy.sum(p * p)
    return pool_program


def direction(shape, kind: str, seed: int):
    """A random direction, or one coordinate only (every other tie stays alive along it and
    the next direction of the lexicographic sequence decides)."""
    if kind == "random":
        return np.random.default_rng(seed).standard_normal(shape)
    v = np.zeros(shape)
    v.flat[seed % v.size] = 1.0
    return v


def sweep(lib, x, w, v, vw, pool: str = "disjoint"):
    conv, _ = LIBRARIES[lib]
    return asd.value_and_subgrad(pool_program_of(pool), argnums=(0, 1),
                                 direction=(conv(v), conv(vw)), full=True)(conv(x), conv(w))


def report(result):
    gx, gw = result.subgradient
    return (host(result.value), host(gx), host(gw), host(result.dini),
            [str(t) for t in result.ties], sorted(str(d) for d in result.decisions),
            [str(t) for t in result.degenerate])


@pytest.fixture
def exact_entries(monkeypatch):
    """Counts the entries the tie service evaluates on exact series (object arrays)."""
    counted = []
    real = ties._evaluate_cone

    def counting(trace, k, memo, *args, **kwargs):
        counted.append(sum(math.prod(trace.nodes[j].shape)
                           for j in missing_cone(trace.nodes, k, memo)))
        return real(trace, k, memo, *args, **kwargs)

    monkeypatch.setattr(ties, "_evaluate_cone", counting)
    return counted


def no_jets(*args, **kwargs):
    raise JetUnsupported("jets switched off by the test")


@pytest.mark.parametrize("pool", list(POOLS))
@pytest.mark.parametrize("values", ["quarters", "normal"])
@pytest.mark.parametrize("kind", ["random", "coordinate"])
@pytest.mark.parametrize("lib", list(LIBRARIES))
def test_dead_windows_need_no_exact_series(lib, kind, values, pool, exact_entries):
    """A 2x3x36x36 layer (a cone of 31 000 entries): every tied window, and every tie of the
    relu on its kink, is decided in floats, none reported flat."""
    shape = (2, 3, 36, 36)
    x, w = planted(shape, 1, values), np.array(1.0)
    v, vw = direction(shape, kind, 5), np.array(0.0)
    got = report(sweep(lib, x, w, v, vw, pool))
    assert sum(exact_entries) == 0
    assert any("max_pool" in t for t in got[4])  # tied windows were met
    assert not any("flat" in d for d in got[5])


@pytest.mark.parametrize("vw", [0.0, 0.5])
@pytest.mark.parametrize("pool", list(POOLS))
@pytest.mark.parametrize("values", ["quarters", "normal"])
@pytest.mark.parametrize("kind", ["random", "coordinate"])
@pytest.mark.parametrize("lib", list(LIBRARIES))
def test_dead_windows_decide_as_the_exact_series(lib, kind, values, pool, vw, monkeypatch):
    shape = (1, 2, 8, 8)
    x, w = planted(shape, 3, values), np.array(1.0)
    v = direction(shape, kind, 6)
    jets = report(sweep(lib, x, w, v, np.array(vw), pool))
    monkeypatch.setattr(ties, "node_jet", no_jets)
    monkeypatch.setattr(ties, "selected_constants", lambda *a: None)
    exact = report(sweep(lib, x, w, v, np.array(vw), pool))
    for a, b in zip(jets[:4], exact[:4], strict=True):
        np.testing.assert_array_equal(a, b)
    assert jets[4] == exact[4]
    assert jets[5] == exact[5]
    assert jets[6] == exact[6]


@pytest.mark.parametrize("lib", ["torch-float64", "torch-float32", "numpy-float32"])
def test_dead_windows_match_numpy_float64(lib):
    shape = (2, 3, 36, 36)
    x, w = planted(shape, 2), np.array(1.0)
    v = direction(shape, "random", 3)
    got, ref = report(sweep(lib, x, w, v, np.array(0.5))), report(
        sweep("numpy-float64", x, w, v, np.array(0.5)))
    tol = 1e-12 if lib.endswith("64") else 1e-5
    for a, b in zip(got[:4], ref[:4], strict=True):
        np.testing.assert_allclose(a.astype(float), b, rtol=tol, atol=tol)
    # the pools' tie counts and every decision (a torch relu counts the tangent it reads in
    # full as tied, numpy the tied entries only: not the pools' business)
    assert [t for t in got[4] if "max_pool" in t] == [t for t in ref[4] if "max_pool" in t]
    assert got[5:] == ref[5:]


def test_squares_at_zero_are_not_ordered_by_index():
    """``x**2`` at 0 has a zero linearization but a nonzero series: not a zero row of a
    `Diagonal` the shortcut reads, so the series (here: the larger |v|) decides."""
    def f(x):
        return asd.numpy.sum(asd.max_pool1d(asd.numpy.reshape(x * x, (1, 1, -1)), 2))

    x = np.zeros(4)
    v = np.array([0.5, -2.0, 3.0, 1.0])
    got = asd.subgrad(f, direction=v)(x)
    assert got.tolist() == [0.0, 0.0, 0.0, 0.0]
    _, dini = asd.directional(f)(x, v)
    assert dini == 0.0
    result = asd.value_and_subgrad(f, direction=v, full=True)(x)
    assert not any("flat" in str(d) for d in result.decisions)


WINDOWS = [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (3, 2), (1, 1)),
           ((2,), (2,), (0,)), ((3,), (3,), (1,)), ((2, 3), (1, 1), (0, 1))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("window", "stride", "padding"), WINDOWS)
def test_torch_pooling_kernel_equals_the_default(window, stride, padding, dtype):
    shape = (2, 3, 9, 11)[-len(window) - 2:]
    x = torch.tensor(np.maximum(planted(shape, 6), 0.0), dtype=dtype)
    x[..., 0] = -0.0  # signed zeros tie with zeros
    settled = torch.tensor(planted(shape, 8) > 0)
    for mask in (None, settled):
        got = order._torch_pool_first_max(x, window, stride, padding, mask)
        ref = order._pool_first_max(x, window, stride, padding, mask)
        for a, b in zip(got[:3], ref[:3], strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
        assert got[0].stride() == ref[0].stride()  # later sums read the maxima in one order
        assert got[3] is ref[3] is None or torch.equal(got[3], ref[3])
    multi = ref[2] > 1
    assert multi.any() and not multi.all()  # tied and untied windows were both met
    assert ref[3].any() and (multi & ~ref[3]).any()  # live and settled ties were both met


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_torch_pooling_kernel_counts_large_ties_exactly_in_narrow_dtypes(dtype):
    """289 tied entries in one window: more than bfloat16 counts exactly."""
    x = torch.zeros((2, 1, 17, 34), dtype=dtype)
    x[1, 0, 3, 20] = 1.0
    got = order._torch_pool_first_max(x, (17, 17), (17, 17), (0, 0))
    ref = order._pool_first_max(x, (17, 17), (17, 17), (0, 0))
    assert got[2].tolist() == ref[2].tolist() == [[[[289, 289]]], [[[289, 1]]]]
    assert torch.equal(got[1], ref[1])


@pytest.mark.parametrize("make", [np.asarray, torch.tensor], ids=["numpy", "torch"])
def test_take_pushes_and_pulls_like_index(make):
    in_shape, out_shape = (2, 3, 4), (2, 5)
    positions = np.array([0, 5, 5, 23, 7, 0, 1, 2, 3, 11])  # repeats accumulate
    take = Take(make(positions), in_shape, out_shape)
    index = Index(np.unravel_index(positions.reshape(out_shape), in_shape), in_shape, out_shape)
    rng = np.random.default_rng(0)
    for batch in ((), (3,)):
        t, ct = rng.standard_normal(batch + in_shape), rng.standard_normal(batch + out_shape)
        np.testing.assert_array_equal(host(take.push(make(t))), index.push(t))
        np.testing.assert_allclose(host(take.pull(make(ct))), index.pull(ct), rtol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("window", "stride", "padding"),
                         [w for w in WINDOWS if all(s >= k for s, k in zip(w[1], w[0]))])
def test_torch_pooling_kernel_equals_torchs_on_contiguous_planes(window, stride, padding,
                                                                  dtype):
    """The channels-last pass keeps torch's maxima and positions, where the default and
    torch's kernel part ways too (NaN: torch keeps the last; -inf windows; signed zeros)."""
    shape = (2, 3, 9, 11)[-len(window) - 2:]
    x = torch.tensor(np.maximum(planted(shape, 9), 0.0), dtype=dtype)
    x[..., 0] = -0.0
    flat = x.view(-1)
    flat[::7], flat[3::11], flat[5::13] = torch.nan, -torch.inf, torch.inf
    ans, first, _, _ = order._torch_pool_first_max(x, window, stride, padding)
    planes = x.reshape((1, -1) + tuple(x.shape[-len(window):]))
    pool = torch.nn.functional.max_pool2d if len(window) == 2 else (
        torch.nn.functional.max_pool1d)
    want, want_first = pool(planes, window, stride, padding, return_indices=True)
    assert torch.equal(first, want_first.reshape(first.shape))
    bits = torch.int32 if dtype == torch.float32 else torch.int64
    assert torch.equal(ans.view(bits), want.reshape(ans.shape).view(bits))


@pytest.mark.parametrize("pool", list(POOLS))
@pytest.mark.parametrize("values", ["quarters", "normal"])
@pytest.mark.parametrize("kind", ["random", "coordinate"])
@pytest.mark.parametrize("lib", ["torch-float64", "torch-float32"])
def test_torch_fast_paths_decide_as_the_general_rules(lib, kind, values, pool, monkeypatch):
    """The relu's float `Mask` where no entry is 0 and the channels-last pooling kernel,
    against the relu's tie masks and the array-API pooling default: values, subgradients,
    Dini derivatives, ties and decisions, bit for bit, at dead relus, equal maxima and
    entries on the relu's kink."""
    shape = (2, 3, 36, 36)
    x, w = planted(shape, 1, values), np.array(1.0)
    v, vw = direction(shape, kind, 5), np.array(0.5)
    untied = []
    real = ties.untied
    monkeypatch.setattr(ties, "untied", lambda x, xp: untied.append(real(x, xp))
                        or untied[-1])
    fast = report(sweep(lib, x, w, v, vw, pool))
    assert untied == [values == "normal"]  # the Mask where no entry is on the kink
    monkeypatch.setattr(ties, "untied", lambda x, xp: False)
    monkeypatch.setitem(backend.KERNELS["max_pool_first"], "torch", order._pool_first_max)
    general = report(sweep(lib, x, w, v, vw, pool))
    for a, b in zip(fast[:4], general[:4], strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8),
                                      np.atleast_1d(b).view(np.uint8))
    assert fast[4:] == general[4:]
    assert any("max_pool" in t for t in fast[4])  # tied windows were met


def layout_program(move: str, smooth):
    def program(x):
        h = asd.relu(smooth(x) - 0.5)
        h = h.transpose(0, 1, 3, 2) if move == "transpose" else h.reshape(2, 1, 8, 8)
        p = asd.max_pool2d(h, window=2)
        return asd.numpy.sum(p * p)
    return program


def layout_sweep(lib, program, x, v):
    conv, _ = LIBRARIES[lib]
    r = asd.value_and_subgrad(program, direction=conv(v), full=True)(conv(x))
    return host(r.value), host(r.subgradient), host(r.dini), [str(t) for t in r.ties]


@pytest.mark.parametrize("move", ["transpose", "reshape"])
@pytest.mark.parametrize("lib", ["numpy-float64", "torch-float32"])
def test_dead_windows_behind_a_layout_change_need_no_exact_series(lib, move, monkeypatch):
    """JAX's pooling transposes its input before the window reduction, so the pooled entries
    are a transpose of the dead relus: still constant pieces. With a transcendental (tanh) in
    the cone the exact-series fallback took minutes (equinox's CNN with a LayerNorm); now no
    entry of the cone is evaluated on series."""
    def no_series(*args, **kwargs):
        raise AssertionError("a tied window was decided on exact series")

    monkeypatch.setattr(ties, "_evaluate_cone", no_series)
    got = layout_sweep(lib, layout_program(move, asd.numpy.tanh), planted((1, 2, 8, 8), 4,
                       "normal"), direction((1, 2, 8, 8), "random", 7))
    assert any("max_pool" in t for t in got[3])            # tied windows were met


@pytest.mark.parametrize("move", ["transpose", "reshape"])
@pytest.mark.parametrize("lib", ["numpy-float64", "torch-float32"])
def test_dead_windows_behind_a_layout_change_decide_as_the_exact_series(lib, move,
                                                                       monkeypatch):
    program = layout_program(move, lambda x: x * x)
    x, v = planted((1, 2, 8, 8), 4, "normal"), direction((1, 2, 8, 8), "random", 7)
    fast = layout_sweep(lib, program, x, v)
    monkeypatch.setattr(ties, "node_jet", no_jets)
    monkeypatch.setattr(ties, "selected_constants", lambda *a: None)
    exact = layout_sweep(lib, program, x, v)
    for a, b in zip(fast[:3], exact[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    assert fast[3] == exact[3]
