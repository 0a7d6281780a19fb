"""The drop-in's fast paths at ties give the full sweep's element (issue 25).

After a call whose tie first order decided, the next calls run the decided program in the
forward (`dropin._NativeCall._decided_forward`: the program once, not natively and then again
in the backward); the decided max pooling reads undilated windows as one unfolded view
(`native._decided_windows`). The reference is asd's full sweep at every call
(``asd.torch.NATIVE_BACKWARD = False``) along the same seeded direction, and PyTorch's own
gradient where no tie matters.
"""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import asd.torch  # noqa: E402

from asd.frontends.torch import dropin, native  # noqa: E402

from .test_torch_native_backward import _close, _square_loss, _steps  # noqa: E402


def _zero_cnn(pool=None):
    torch.manual_seed(1)
    pool = pool or nn.MaxPool2d(2)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), pool, nn.Conv2d(4, 6, 3), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.LazyLinear(3)).double()
    x = torch.randn(3, 1, 20, 20, dtype=torch.float64)
    model(x)                                    # the lazy layer's shape
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    return model, x


@pytest.fixture
def program_runs(monkeypatch):
    """Counts the runs of a native or decided program's graph (forward passes)."""
    runs = []
    real = native.NativeProgram.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        module = self.module

        def counted(*a):
            runs.append(self.decided)
            return module(*a)
        self.module = counted

    monkeypatch.setattr(native.NativeProgram, "__init__", init)
    return runs


def test_repeated_tied_calls_run_the_program_once(program_runs):
    """A step that meets the same ties at every call (a zero first convolution) runs its
    graph once per call after the first (decided, in the forward), not natively and then
    decided again in the backward; each call's gradient is the full sweep's."""
    model, x = _zero_cnn()
    got = _steps(model, x, True, 4)
    assert program_runs == [False, True] + [True] * 3
    want = _steps(model, x, False, 1)[0]
    for g in got:
        _close(g, want, 1e-12)


def test_after_the_ties_go_away_the_gradient_is_pytorchs():
    """A decided forward where no tie is left is PyTorch's gradient (the decided forms are
    the plain ones off ties), and the native path comes back after `STICKY` calls."""
    model, x = _zero_cnn()
    f = asd.torch.function(model, seed=3)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        _square_loss(f(x)).backward()
    with torch.no_grad():
        model[0].weight.normal_()
        model[0].bias.normal_()
    for _ in range(dropin.STICKY + 2):
        model.zero_grad(set_to_none=True)
        _square_loss(f(x)).backward()
        got = {k: p.grad.clone() for k, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        _square_loss(model(x)).backward()
        _close(got, {k: p.grad.clone() for k, p in model.named_parameters()}, 1e-12)
    (call,) = [c for _, c in f.asd_state.calls.values()]
    assert call.sticky == 0


def test_a_decided_forward_that_leaves_a_tie_open_goes_to_the_sweep(monkeypatch):
    """Along a given direction that is 0 on the tied layer, first order decides nothing: a
    decided forward (forced on here) falls back to the native run, and the backward to
    asd's sweep (its element along that direction), at every call."""
    model, x = _zero_cnn()
    direction = {k: (torch.zeros_like(p) if k.startswith("0.") else torch.randn_like(p))
                 for k, p in model.named_parameters()}
    sweeps, forwards = [], []
    real, forward = dropin._asd_gradients, dropin._NativeCall._decided_forward
    monkeypatch.setattr(dropin, "_asd_gradients", lambda *a: sweeps.append(1) or real(*a))

    def spy(self, leaves):
        out = forward(self, leaves)
        forwards.append(out is None)
        return out

    monkeypatch.setattr(dropin._NativeCall, "_decided_forward", spy)
    f = asd.torch.function(model, direction=direction)
    got = []
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        _square_loss(f(x)).backward()
        got.append({k: p.grad.clone() for k, p in model.named_parameters()})
        for _, call in f.asd_state.calls.values():
            call.sticky = 5
    assert len(sweeps) == 3 and forwards == [True, True]
    want = _steps(model, x, False, 1, seed=None, direction=direction)[0]
    for g in got:
        _close(g, want, 1e-12)


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", [
    (2, 2, 0, False), (3, 2, 1, False), (3, 2, 1, True), (2, 1, 0, False), (3, 3, 0, True),
    (3, 3, 0, False), (2, 2, 0, True),
])
@pytest.mark.parametrize("random", [True, False])
def test_pool_windows_decide_as_the_per_offset_loop(kernel, stride, padding, ceil_mode,
                                                    random):
    """The tiled decision (`_decided_tiles`, windows without overlap), the unfolded-window
    one (`_decided_windows`) and the per-offset one (`_decided_offsets`, kept for dilated
    pooling) pick the same winner, tangent and open
    windows, on values and tangents on a coarse grid (many tied windows, many tied
    tangents, exact and within the threshold)."""
    gen = torch.Generator().manual_seed(kernel * 11 + stride * 3 + padding + ceil_mode)
    x = torch.randint(-1, 2, (2, 3, 9, 10), generator=gen).double().clamp_min(0)
    x_t = torch.randint(-2, 3, x.shape, generator=gen).double()
    x_t += 1e-9 * torch.randint(0, 2, x.shape, generator=gen)    # within the threshold
    m = F.max_pool2d(x, kernel, stride, padding, 1, ceil_mode)
    state = native.Deciding(torch.tensor(2.0 ** -20), random)
    geometry = ((kernel,) * 2, (stride,) * 2, (padding,) * 2, (1, 1), tuple(m.shape[-2:]))
    for dead in (False, True):
        b1, i1, o1 = native._decided_windows(x, x_t, m, state, dead, geometry)
        b2, i2, o2 = native._decided_offsets(x, x_t, m, state, dead, geometry)
        assert torch.equal(b1, b2) and torch.equal(i1, i2) and torch.equal(o1, o2)
        assert bool(o1.any()) and not bool(o1.all())
        assert torch.isfinite(b1).all() and not math.isnan(float(b1.sum()))
        if native._tiling(x.shape[-2:], geometry):
            b3, i3, margin = native._decided_tiles(x, x_t, m, state, dead, geometry)
            assert torch.equal(b3, b2) and torch.equal(i3, i2)
            assert not float(margin) > 0                # some window is open
            _tile_margins_are_the_open_windows(x, x_t, m, state, dead, geometry, o2)


def _tile_margins_are_the_open_windows(x, x_t, m, state, dead, geometry, open_):
    """`_decided_tiles`'s margin (one number for all windows) window by window: positive
    exactly where the per-offset loop leaves the window decided."""
    (k, _), _, _, _, (ho, wo) = geometry
    one = ((k, k), (k, k), (0, 0), (1, 1), (1, 1))
    for n, c, i, j in itertools.product(*(range(d) for d in (*m.shape[:2], ho, wo))):
        at = (slice(n, n + 1), slice(c, c + 1), slice(i * k, i * k + k), slice(j * k,
                                                                           j * k + k))
        _, _, margin = native._decided_tiles(x[at], x_t[at], m[at[:2] + (slice(i, i + 1),
                                                                     slice(j, j + 1))],
                                             state, dead, one)
        assert (float(margin) > 0) == (not bool(open_[n, c, i, j])), (n, c, i, j)


def test_zero_init_under_a_padded_ceil_mode_pool_is_the_full_sweeps_element():
    """A zero first convolution under a padded, ceil-mode 3x3 pooling (windows past the
    edge): repeated calls give the full sweep's gradient."""
    model, x = _zero_cnn(nn.MaxPool2d(3, 2, 1, ceil_mode=True))
    got = _steps(model, x, True, 3)
    want = _steps(model, x, False, 1)[0]
    for g in got:
        _close(g, want, 1e-12)


@pytest.mark.parametrize("shape", [(9, 10), (8, 8), (7, 11)])
@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", [
    (2, 2, 0, False), (2, 2, 0, True), (3, 3, 0, False), (3, 2, 1, True), (2, 1, 0, False),
])
def test_decided_pool_forward_is_max_pool2d(shape, kernel, stride, padding, ceil_mode):
    """The decided pooling's forward (`tiled_max` where the windows tile the input) is
    ``max_pool2d``'s values, NaN and infinities included, and `_pooled_shape` its size."""
    x = torch.randn(2, 3, *shape, dtype=torch.float64)
    x[0, 0, 0, 0], x[1, 2, 1, 1], x[0, 1, 2, 3] = math.nan, math.inf, -math.inf
    args = ((kernel,) * 2, (stride,) * 2, (padding,) * 2, (1, 1), ceil_mode)
    want = F.max_pool2d(x, *args[:4], ceil_mode=ceil_mode)
    assert native._pooled_shape(shape, *args) == tuple(want.shape[-2:])
    got = native.decided_max_pool2d(x, kernel, stride, padding, 1, ceil_mode)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))


def test_decided_relu_sends_exactly_zero_where_its_piece_is_off():
    """The decided relu's backward is PyTorch's relu's: 0 where the piece is off even for an
    infinite cotangent (a product with the mask made NaN there), the cotangent where it is
    on; at the tie the tangent's side (here +1: on)."""
    import torch.autograd.forward_ad as fwAD

    from asd.frontends.torch import native

    x = torch.tensor([-1.0, 0.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    with native.Deciding(torch.tensor(1e-12, dtype=torch.float64), random=False):
        with fwAD.dual_level():
            y = fwAD.unpack_dual(native.decided_relu(fwAD.make_dual(x, t))).primal
        ct = torch.tensor([math.inf, 3.0, 5.0, math.inf], dtype=torch.float64)
        (g,) = torch.autograd.grad(y, x, ct)
    assert g.tolist() == [0.0, 3.0, 5.0, 0.0]
