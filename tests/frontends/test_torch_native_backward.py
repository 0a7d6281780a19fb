"""``asd.torch.function`` at framework speed: PyTorch's own backward where no tie matters.

The drop-in runs the imported graph under PyTorch's autograd with a margin per nonsmooth
operation (`asd.frontends.torch.native`); without a tie that matters the gradient is
PyTorch's, otherwise asd's sweep of the same program. The reference is the full sweep at
every call (``asd.torch.NATIVE_BACKWARD = False``): off ties the two agree to rounding
(float64: 1e-12 relative to the largest entry), at ties they are the same numbers; and the
one-sided derivative along the sweep's direction is the oracle for the element itself.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import asd.torch  # noqa: E402

import asd  # noqa: E402
from asd.frontends.torch import dropin, native  # noqa: E402

from .test_torch_zoo import ZOO, build  # noqa: E402


def _grads(model, x, loss, native_backward: bool, seed=0, direction=None):
    old = asd.torch.NATIVE_BACKWARD
    asd.torch.NATIVE_BACKWARD = native_backward
    try:
        f = asd.torch.function(model, seed=seed, direction=direction)
        model.zero_grad(set_to_none=True)
        xr = x.clone().requires_grad_(x.is_floating_point())
        loss(f(xr)).backward()
        out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        if xr.grad is not None:
            out["input"] = xr.grad.clone()
        return out, f
    finally:
        asd.torch.NATIVE_BACKWARD = old


@pytest.fixture
def asd_runs(monkeypatch):
    """Counts the calls whose backward is asd's sweep (a tie mattered)."""
    calls = []
    real = dropin._asd_gradients

    def spy(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(dropin, "_asd_gradients", spy)
    return calls


def _close(a: dict, b: dict, rel: float):
    assert a.keys() == b.keys()
    for k in a:
        scale = max(float(b[k].abs().max()), 1e-300)
        err = float((a[k] - b[k]).abs().max()) / scale
        assert err <= rel, (k, err)


def _square_loss(out):
    return (out ** 2).sum() + out.sum()


def _steps(model, x, native_backward: bool, n: int, seed=3, direction=None) -> list:
    """The parameter gradients of ``n`` calls of one drop-in of ``model``."""
    old = asd.torch.NATIVE_BACKWARD
    asd.torch.NATIVE_BACKWARD = native_backward
    try:
        f = asd.torch.function(model, seed=seed, direction=direction)
        out = []
        for _ in range(n):
            model.zero_grad(set_to_none=True)
            _square_loss(f(x)).backward()
            out.append({k: p.grad.clone() for k, p in model.named_parameters()})
        return out
    finally:
        asd.torch.NATIVE_BACKWARD = old


def _quotient(model, x, v: dict, t: float = 1e-7) -> float:
    """The one-sided difference quotient of ``_square_loss(model(x))`` along the parameter
    direction ``v`` (a dict by parameter name), parameters restored after."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        base = _square_loss(model(x))
        for n, p in params.items():
            p.add_(t * v[n])
        moved = _square_loss(model(x))
        for n, p in params.items():
            p.sub_(t * v[n])
    return float((moved - base) / t)


@pytest.fixture
def decided_runs(monkeypatch):
    """Counts the calls whose backward is PyTorch's on the branches first order decided
    (a tie mattered and the decided program settled it: no asd sweep), in the backward or,
    right after such a call, in the forward."""
    calls = []
    real = dropin._decided_gradients

    def spy(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(dropin, "_decided_gradients", spy)
    forward = dropin._NativeCall._decided_forward

    def spy_forward(self, leaves):      # a tied call right after one: decided in the forward
        out = forward(self, leaves)
        if out is not None:
            calls.append(True)
        return out

    monkeypatch.setattr(dropin._NativeCall, "_decided_forward", spy_forward)
    return calls


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_off_ties_is_pytorchs_backward_and_asds_element(name, asd_runs):
    """At a random point no tie matters: the native path runs (no asd sweep), and its
    gradient is the full sweep's to rounding."""
    cls, make_input = ZOO[name]
    model = build(cls, torch.float64)
    x = make_input().to(torch.float64)
    got, f = _grads(model, x, _square_loss, True)
    assert not asd_runs, "a tie was flagged at a random point"
    assert f.asd_state.calls, "the program had no native form"
    want, _ = _grads(model, x, _square_loss, False)
    _close(got, want, 1e-12)


TIED = ["residual", "vgg (ceil-mode pooling, dropout)", "mobilenet block"]


@pytest.mark.parametrize("name", TIED)
def test_zoo_at_dead_units_gives_the_full_sweeps_element(name, asd_runs, decided_runs):
    """Zero input and zero stem bias: every stem pre-activation is 0, a tie for each ReLU.
    The flag sends the backward to the decided program (each tied ReLU and pooling window
    on the side its tangent along the direction picks, PyTorch's kernels on those
    branches), which returns the full sweep's numbers to rounding, and the element is the
    limiting gradient along the direction (its one-sided derivative)."""
    cls, make_input = ZOO[name]
    model = build(cls, torch.float64)
    stem = model.stem if hasattr(model, "stem") else model.features[0]
    with torch.no_grad():
        stem.bias.zero_()
    x = torch.zeros_like(make_input(), dtype=torch.float64)
    v = {n: torch.randn(p.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
         for i, (n, p) in enumerate(model.named_parameters())}
    got, _ = _grads(model, x, _square_loss, True, direction=v)
    # hardswish's kinks are at -3 and 3: the mobilenet block meets no tie at a zero stem
    # vgg's second block meets windows whose candidates tie to first order along v (equal
    # tangents: the given direction cannot tell whether their linearizations agree), so
    # the decided program declines and asd's sweep decides them exactly
    assert decided_runs == {"mobilenet block": [], "residual": [True]}.get(name, [False])
    assert bool(asd_runs) == (name not in ("mobilenet block", "residual"))
    want, _ = _grads(model, x, _square_loss, False, direction=v)
    if asd_runs:
        for k in want:
            assert torch.equal(got[k], want[k]), k
    else:
        _close(got, want, 1e-12)
    # the oracle: <g, v> is the one-sided derivative of the model's own forward along v
    assert sum(float((got[n] * v[n]).sum()) for n in v) == pytest.approx(
        _quotient(model, x, v), rel=1e-4, abs=1e-6)


def test_a_cnn_with_dead_pooling_windows_stays_native():
    """ReLU then max pooling at a random initialisation: about half the units are dead, and
    windows of all-zero candidates tie everywhere, yet each candidate has a zero gradient
    row, so the tie does not matter: no asd sweep, and PyTorch's gradient is asd's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 3 * 3, 3)).double()
    with torch.no_grad():
        model[0].bias.fill_(-0.5)          # mostly dead: many windows of zeros
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    dead = F.max_pool2d(torch.relu(model[0](x)), 2)
    assert int((dead == 0).sum()) > 10
    calls = []
    real = dropin._asd_gradients
    dropin._asd_gradients = lambda *a: (calls.append(1), real(*a))[1]
    try:
        got, _ = _grads(model, x, _square_loss, True)
    finally:
        dropin._asd_gradients = real
    assert not calls
    want, _ = _grads(model, x, _square_loss, False)
    _close(got, want, 1e-12)


def _live_tied_windows():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(2 * 3 * 3, 2)).double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(0.5)
    return model, torch.randn(2, 1, 8, 8, dtype=torch.float64)


def test_a_tied_window_of_live_units_is_decided_by_its_tangents(asd_runs, decided_runs):
    """Equal positive candidates in every pooling window (equal biases, zero weights): the
    tie matters (the candidates' gradients differ), and the tangents along the random
    direction order each window's candidates: the decided program routes each window's
    gradient to the lexicographic winner, the full sweep's element to rounding."""
    model, x = _live_tied_windows()
    got, _ = _grads(model, x, _square_loss, True)
    assert decided_runs == [True] and not asd_runs
    want, _ = _grads(model, x, _square_loss, False)
    _close(got, want, 1e-12)


def test_windows_tied_to_first_order_go_to_asd(asd_runs, decided_runs):
    """The same windows along a direction that moves only the biases: every candidate of a
    window has the same tangent (a given direction cannot say whether their gradients
    agree: they do not), so the decided program declines and asd's sweep decides them by
    its further directions, exactly the full sweep's numbers."""
    model, x = _live_tied_windows()
    v = {"0.weight": torch.zeros(2, 1, 3, 3, dtype=torch.float64),
         "0.bias": torch.tensor([1.0, -2.0], dtype=torch.float64)}
    got, _ = _grads(model, x, _square_loss, True, direction=v)
    assert decided_runs == [False] and asd_runs
    want, _ = _grads(model, x, _square_loss, False, direction=v)
    for k in want:
        assert torch.equal(got[k], want[k]), k


# ----- the margins against brute force, on integer-valued tensors (ties everywhere) -----

def _windows_tied(x, kernel, stride, padding, dilation, ceil_mode, dead):
    """Brute force: unfold every window and count its maxima."""
    xp = F.pad(x, [padding, padding, padding, padding], value=-float("inf"))
    m = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)
    ho, wo = m.shape[-2:]
    tied = False
    for i in range(ho):
        for j in range(wo):
            rows = [i * stride + a * dilation for a in range(kernel)]
            cols = [j * stride + b * dilation for b in range(kernel)]
            vals = [xp[:, :, r, q] for r in rows for q in cols
                    if r < xp.shape[2] and q < xp.shape[3]]
            best = m[:, :, i, j]
            count = sum((v == best).to(torch.int64) for v in vals)
            hit = count > 1
            if dead:
                hit = hit & (best != 0)
            tied = tied or bool(hit.any())
    return tied, m


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", [
    (2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 1, 1, 1, False), (2, 2, 0, 1, True),
    (3, 2, 0, 2, False), (3, 3, 1, 1, True)])
@pytest.mark.parametrize("dead", [False, True])
def test_pool_margin_flags_exactly_the_tied_windows(kernel, stride, padding, dilation,
                                                     ceil_mode, dead):
    gen = torch.Generator().manual_seed(kernel * 7 + stride + padding + dilation)
    for trial in range(12):
        x = torch.randint(-2 if not dead else 0, 6 + trial, (2, 2, 7, 7), generator=gen)
        x = x.double()
        if trial % 3 == 0:     # distinct values: no tie anywhere
            x = torch.randperm(2 * 2 * 7 * 7, generator=gen).double().reshape(2, 2, 7, 7)
        want, m = _windows_tied(x, kernel, stride, padding, dilation, ceil_mode, dead)
        margin = native.pool_margin(x, m, 2, kernel, stride, padding, dilation, ceil_mode,
                                    dead)
        assert (not bool(margin > 0)) == want, (trial, float(margin))


@pytest.mark.parametrize("dims", [None, 1, (0, 2)])
def test_reduce_margin_flags_exactly_the_tied_maxima(dims):
    gen = torch.Generator().manual_seed(3)
    for trial in range(20):
        x = torch.randint(0, 4 + trial, (3, 4, 5), generator=gen).double()
        d = tuple(range(3)) if dims is None else (dims,) if isinstance(dims, int) else dims
        m = x.amax(d, keepdim=True)
        want = bool(((x == m).sum(d) > 1).any())
        assert (not bool(native.reduce_margin(x, dims, False) > 0)) == want
        want_dead = bool((((x == m).sum(d, keepdim=True) > 1) & (m != 0)).any())
        assert (not bool(native.reduce_margin(x, dims, True) > 0)) == want_dead


def test_clamp_bounds_and_maximum_ties_are_flagged(asd_runs):
    """A clamp at its bound and a maximum of equal sides are ties: asd decides them."""
    w = nn.Parameter(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    f = asd.torch.function(lambda x: (torch.clamp(x * w, -1.0, 2.0)
                                      + torch.maximum(x, w)).sum(), seed=0)
    x = torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64)     # x*w = 2, 2, 1.5; x vs w
    f(x).backward()
    assert asd_runs
    asd_runs.clear()
    w.grad = None
    f(x + 0.25).backward()                                        # no tie
    assert not asd_runs
    ref = w.detach().clone().requires_grad_(True)
    (torch.clamp((x + 0.25) * ref, -1.0, 2.0) + torch.maximum(x + 0.25, ref)).sum().backward()
    torch.testing.assert_close(w.grad, ref.grad, rtol=0, atol=0)


# ----- a good autograd citizen -----

def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 3))


def test_direction_option_gives_the_limiting_gradient_along_it():
    """``function(fn, direction=...)``: at a tie (a zero first layer) the gradient is the
    limiting gradient along the given direction; flipping it flips the branches."""
    model = _cnn().double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dirs = {n: torch.randn(p.shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(5 + i))
            for i, (n, p) in enumerate(model.named_parameters())}
    for sign in (1.0, -1.0):
        v = {n: sign * d for n, d in dirs.items()}
        got, _ = _grads(model, x, _square_loss, True, direction=v)
        slope = sum(float((got[n] * v[n]).sum()) for n in v)
        assert slope == pytest.approx(_quotient(model, x, v), rel=1e-4, abs=1e-6)


def test_direction_with_an_unknown_name_is_refused():
    model = _cnn()
    f = asd.torch.function(model, direction={"nope": torch.zeros(3)})
    with pytest.raises(asd.ArgumentError, match="nope"):
        f(torch.randn(2, 1, 8, 8))


def test_torch_compile_traces_the_drop_in_without_a_graph_break():
    model = _cnn()
    f = asd.torch.function(model, seed=0)
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])

    def step(x, y):
        return F.cross_entropy(f(x), y)

    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(x, y)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


@pytest.mark.parametrize("tied", [False, True])
def test_a_fullgraph_compiled_step_gives_the_eager_gradient(tied):
    model = _cnn().double()
    if tied:
        with torch.no_grad():
            model[0].weight.zero_()
            model[0].bias.zero_()
    f = asd.torch.function(model, seed=0)
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1, 2, 0])

    def step(x, y):
        return F.cross_entropy(f(x), y)

    torch._dynamo.reset()
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    model.zero_grad()
    compiled(x, y).backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    step(x, y).backward()
    for n, p in model.named_parameters():
        assert torch.equal(got[n], p.grad), n
    if tied:
        assert float(got["0.weight"].abs().sum()) > 0     # torch's own would be 0


def test_compiled_drop_in_recompiles_when_the_function_changes():
    """What ``fn`` reads is guarded by dynamo itself: a changed closure value recompiles,
    so the compiled step never runs the old program."""
    lin = nn.Linear(3, 2).double()
    scale = {"s": 2.0}

    def fn(x):
        return torch.relu(lin(x)).sum() * scale["s"]

    f = asd.torch.function(fn, seed=0)
    compiled = torch.compile(lambda x: f(x), backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 3, dtype=torch.float64)
    torch._dynamo.reset()
    assert float(compiled(x)) == pytest.approx(float(fn(x)))
    scale["s"] = 5.0
    assert float(compiled(x)) == pytest.approx(float(fn(x)))


def test_several_drop_ins_compile_through_the_same_step_code():
    """A second drop-in traced through the same code recompiles it: its token must stay a
    constant of the graph (an int token turned dynamic there, and `_resolve` failed)."""

    def make(f):
        def step(x):
            return f(x).pow(2).sum()
        return step

    torch._dynamo.reset()
    for k in range(3):
        torch.manual_seed(k)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).double()
        f = asd.torch.function(model, seed=0)
        x = torch.randn(5, 3, dtype=torch.float64)
        model.zero_grad()
        torch.compile(make(f), backend="aot_eager", fullgraph=True)(x).backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        make(f)(x).backward()
        for g, p in zip(got, model.parameters(), strict=True):
            assert torch.equal(g, p.grad), k


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_compiled_step_with_a_new_batch_size_gives_the_eager_gradient(dynamic):
    """A second batch size makes dynamo recompile with dynamic sizes (or ``dynamic=True``
    from the start): the drop-in specialises them (the program is imported per shape), and
    its import runs outside the step's tracing context (inside it, the export's graph called
    the step's own guards and failed)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    f = asd.torch.function(model, seed=0)

    def loss(x):
        return f(x).pow(2).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    for n in (4, 7, 9):
        x = torch.randn(n, 6, dtype=torch.float64)
        model.zero_grad()
        compiled(x).backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        loss(x).backward()
        for g, p in zip(got, model.parameters(), strict=True):
            assert torch.equal(g, p.grad), n


def test_a_drop_in_no_longer_referenced_leaves_the_registry():
    """The registry of drop-ins (what `_resolve` reads while dynamo traces) holds them weakly,
    so a training loop creating drop-ins does not keep every model alive."""
    import gc

    f = asd.torch.function(nn.Linear(2, 2))
    token = f.asd_state.token
    assert dropin._DROPINS[token] is f.asd_state
    del f
    gc.collect()
    assert token not in dropin._DROPINS


def test_gradient_checkpointing_recomputes_the_same_gradient():
    from torch.utils.checkpoint import checkpoint

    model = _cnn().double()
    f = asd.torch.function(model, seed=0)
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    model.zero_grad()
    checkpoint(f, x, use_reentrant=False).pow(2).sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    f(x).pow(2).sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, rtol=0, atol=0)


def test_autocast_steps_follow_pytorchs_autocast_gradient(asd_runs):
    """Under ``torch.autocast`` the graph runs in the autocast dtypes, as the model would:
    without a tie, the gradient is PyTorch's autocast gradient, bit for bit."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    twin = copy.deepcopy(model)
    f = asd.torch.function(twin, seed=0)
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(x).float().pow(2).sum().backward()
        f(x).float().pow(2).sum().backward()
    assert not asd_runs
    for (n, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=n)


def test_autocast_at_a_tie_sweeps_the_program_in_its_own_dtype(asd_runs, decided_runs):
    """At a tie under autocast, the decided program (or asd's sweep) runs with autocast off
    (in the program's dtypes) and gives the limiting gradient of the float32 program."""
    model = _cnn()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    f = asd.torch.function(model, seed=0)
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        f(x).float().pow(2).sum().backward()
    assert decided_runs == [True] and not asd_runs
    got = model[0].weight.grad.clone()
    model.zero_grad(set_to_none=True)
    asd.torch.NATIVE_BACKWARD = False
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            asd.torch.function(model, seed=0)(x).float().pow(2).sum().backward()
    finally:
        asd.torch.NATIVE_BACKWARD = True
    # the references' cotangents differ by bf16 rounding (the native forward's output is
    # autocast's, the full sweep's float32): 2**-7 relative
    _close({"w": got}, {"w": model[0].weight.grad}, 2.0 ** -7)
    assert torch.isfinite(model[0].weight.grad).all() and model[0].weight.grad.abs().sum() > 0


def test_torch_func_grad_through_the_drop_in():
    lin = nn.Linear(3, 1).double()
    f = asd.torch.function(lambda x: torch.relu(lin(x)).sum(), seed=0)
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    g = torch.func.grad(lambda x: f(x))(x)
    xr = x.clone().requires_grad_(True)
    torch.relu(lin(xr)).sum().backward()
    torch.testing.assert_close(g, xr.grad)
    with pytest.raises(asd.UnsupportedError, match="first derivatives only"):
        torch.func.grad(lambda x: torch.func.grad(lambda y: f(y))(x).sum())(x)


def test_integer_outputs_beside_float_ones():
    lin = nn.Linear(3, 4).double()
    f = asd.torch.function(lambda x: (lin(x), lin(x).argmax(1)), seed=0)
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    out, idx = f(x)
    assert idx.dtype == torch.int64 and not idx.requires_grad
    out.sum().backward()
    torch.testing.assert_close(lin.weight.grad, torch.ones(4, 1, dtype=torch.float64)
                               * x.sum(0, keepdim=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_forward_has_no_host_synchronisation_and_the_step_one():
    model = _cnn().cuda()
    f = asd.torch.function(model, seed=0)
    x = torch.randn(8, 1, 8, 8, device="cuda")
    f(x).sum().backward()                 # import, reach check: once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = f(x).sum()                 # no synchronisation per node, none at all
    finally:
        torch.cuda.set_sync_debug_mode("default")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert sum("synchroniz" in str(w.message) for w in caught) <= 1
    np.testing.assert_array_equal(np.isfinite(model[0].weight.grad.cpu().numpy()), True)


# ----- ties decided at first order, and half precision -----

def _bf16_cnn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 5 * 5, 10))
    return model.to(torch.bfloat16), torch.randn(8, 1, 28, 28, dtype=torch.bfloat16)


def _rounded_ties(model, x) -> int:
    """The pooling windows of the first block whose live maximum is shared, computed in
    bfloat16 as PyTorch computes the model (8-bit mantissas: rounding makes them)."""
    with torch.no_grad():
        h = model[1](model[0](x))
    w = h.unfold(2, 2, 2).unfold(3, 2, 2).reshape(*h.shape[:2], -1, 4)
    top = w.amax(-1, keepdim=True)
    return int((((w == top).sum(-1) > 1) & (top[..., 0] > 0)).sum())


def test_bfloat16_runs_natively_in_float32_where_its_rounded_values_tie(asd_runs,
                                                                          decided_runs):
    """A bfloat16 CNN at a random point: computed in bfloat16 its values tie (equal maxima in
    pooling windows), but asd's element is the float32 program's (asd computes half
    precision in float32), where they are no ties. The native program therefore runs in
    float32 too: no margin flags, neither the decided program nor asd's sweep runs, and the
    gradient is the full sweep's (both float32, rounded once to bfloat16 at the end; a
    different branch would move an entry by O(1)). Before, the native program ran in
    bfloat16, flagged these ties at every step and re-ran in float32 with tangents (3.5x
    PyTorch's step on an H100)."""
    model, x = _bf16_cnn()
    assert _rounded_ties(model, x) > 0, "no bfloat16 tie at this point: the test checks nothing"
    flagged = []
    real = native.flag_on_host

    def spy(margins, finite):
        flagged.append(real(margins, finite))
        return flagged[-1]

    native.flag_on_host = spy
    try:
        got, f = _grads(model, x, _square_loss, True)
        value = f(x).detach()           # with gradients on: the native program's value
    finally:
        native.flag_on_host = real
    assert flagged == [False] and not decided_runs and not asd_runs
    assert all(g.dtype == torch.bfloat16 for g in got.values())
    with torch.no_grad():
        want_value = model.float()(x.float()).to(torch.bfloat16)
        model.to(torch.bfloat16)
    assert value.dtype == torch.bfloat16
    want, _ = _grads(model, x, _square_loss, False)
    _close({k: v.float() for k, v in got.items()}, {k: v.float() for k, v in want.items()},
           2.0 ** -7)
    torch.testing.assert_close(value, want_value, rtol=2 ** -7, atol=0)


def test_a_half_precision_graph_that_cannot_run_in_float32_runs_in_its_own_dtype(
        monkeypatch, decided_runs, asd_runs):
    """Export picks kernels by dtype (CUDA bfloat16 attention is flash attention, with no
    float32 form; its output strides are what the graph's views expect): where the graph
    fails in float32, the call runs it in its own dtype, where the margins flag the rounded
    values' ties, and asd's sweep (in float32, on its own operations) decides them: the
    decided program, the same graph with tangents, cannot run in float32 either."""
    model, x = _bf16_cnn()
    real = native.NativeProgram.__init__

    def half_only(self, *args, **kwargs):
        real(self, *args, **kwargs)
        module = self.module

        class HalfOnly(torch.nn.Module):
            def forward(self, *flat):
                if any(isinstance(t, torch.Tensor) and t.dtype == torch.float32
                       for t in flat):
                    raise RuntimeError("view size is not compatible with input tensor's size")
                return module(*flat)

        self.module = HalfOnly()

    monkeypatch.setattr(native.NativeProgram, "__init__", half_only)
    got, _ = _grads(model, x, _square_loss, True)
    assert decided_runs == [False] and asd_runs == [1]
    want, _ = _grads(model, x, _square_loss, False)
    _close({k: v.float() for k, v in got.items()}, {k: v.float() for k, v in want.items()},
           2.0 ** -6)
    assert asd.torch.subgrad(lambda x: _square_loss(model(x)), x).dtype == torch.bfloat16


def test_zero_initialised_convolution_is_decided_with_the_full_sweeps_element(asd_runs,
                                                                               decided_runs):
    """A zero first convolution ties every ReLU of its layer and every pooling window above
    it (all candidates 0), and the second layer's windows whose inputs are all dead tie
    along the whole ray (equal values and tangents: equal gradients). Along a seeded
    random direction the decided program settles all of them: the full sweep's gradient
    to rounding, and its one-sided derivative along the direction."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 5 * 5, 3)
                          ).double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    x = torch.randn(4, 1, 28, 28, dtype=torch.float64)
    got, _ = _grads(model, x, _square_loss, True, seed=3)
    assert decided_runs == [True] and not asd_runs
    want, _ = _grads(model, x, _square_loss, False, seed=3)
    _close(got, want, 1e-12)


def test_a_seeded_direction_is_drawn_once_for_every_tied_call(monkeypatch, asd_runs,
                                                              decided_runs):
    """An integer seed fixes the direction: the decided program draws it (on the host, as
    asd's sweep does) and moves it to the device once, not on every tied call (on a GPU the
    draw of a ResNet's worth of normals cost twenty times the step); the gradients of
    repeated calls stay the full sweep's."""
    draws = []
    real = dropin.LazyDirection

    def counting(*args, **kwargs):
        draws.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dropin, "LazyDirection", counting)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 3 * 3, 3)).double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)

    def calls(native_backward: bool, n: int) -> list:
        return _steps(model, x, native_backward, n)

    grads = calls(True, 3)
    assert decided_runs == [True] * 3 and not asd_runs
    assert len(draws) == 1
    (want,) = calls(False, 1)
    for g in grads:
        _close(g, want, 1e-12)
