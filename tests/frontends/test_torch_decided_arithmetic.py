"""The decided program in floating-point arithmetic (issue 25: a tied step at framework speed).

`native._DecidedRelu` and the tiled `native._decided_tiles` decide with signs, sums and
products in place instead of boolean masks, ``masked_fill`` and counts (on CPUs a comparison
costs about four elementwise products, ``masked_fill`` thirty, and every fresh tensor of a
large layer its page faults), and report what first order leaves open as a margin
(`native.Deciding.margin`). The decisions must be the boolean form's, entry by entry (the
oracle below is that form, the staged sweep's first-order rule written with comparisons),
a non-finite value or tangent must leave the run open (asd's sweep then decides), and the
gradients at planted ties the full sweep's (``asd.torch.NATIVE_BACKWARD = False``).
"""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import asd.torch  # noqa: E402
import torch.autograd.forward_ad as fwAD  # noqa: E402

from asd.frontends.torch import dropin, native  # noqa: E402

from .test_torch_native_backward import _close, _square_loss  # noqa: E402

THR = 2.0 ** -20


def _relu_jvp(x, x_t, random: bool, dtype):
    """The decided relu at ``x`` along ``x_t``: (its tangent, the gradient of a unit
    cotangent, whether the run is open)."""
    x = torch.tensor(x, dtype=dtype, requires_grad=True)
    x_t = torch.tensor(x_t, dtype=dtype)
    with native.Deciding(torch.tensor(THR), random) as state, fwAD.dual_level():
        y = native.decided_relu(fwAD.make_dual(x, x_t))
        tangent = fwAD.unpack_dual(y).tangent
        (g,) = torch.autograd.grad(fwAD.unpack_dual(y).primal, x, torch.ones_like(x))
        ok = torch.tensor(1.0)
        is_open = state.open([], ok)
    return tangent, g, is_open


def _relu_reference(x: float, x_t: float, random: bool):
    """The boolean form: the piece is on where x > 0, or x == 0 with a tangent clearly
    positive; undecided where x == 0 and |x_t| <= threshold (and, along a random direction,
    x_t != 0: either side gives the same gradient there)."""
    on = x > 0 or (x == 0 and x_t > THR)
    undecided = x == 0 and abs(x_t) <= THR and (x_t != 0 or not random)
    return on, undecided


VALUES = [-1.5, -0.0, 0.0, 3.0, 1e-30]
TANGENTS = [-2.0, -THR, -THR / 2, -0.0, 0.0, THR / 4, THR, THR * (1 + 2 ** -20), 1.0, 7e20]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("random", [True, False])
def test_decided_relu_decides_as_the_boolean_form(dtype, random):
    """Entry by entry, on values at and off the tie and tangents on both sides of the
    threshold and at it exactly: the same side (tangent and gradient), and open exactly
    where the boolean form counts an undecided entry."""
    for x, x_t in itertools.product(VALUES, TANGENTS):
        if dtype == torch.float32 and x_t == THR * (1 + 2 ** -20):
            x_t = float(torch.tensor(THR).nextafter(torch.tensor(1.0)))
        x, x_t = (float(torch.tensor(v, dtype=dtype)) for v in (x, x_t))
        tangent, g, is_open = _relu_jvp([x], [x_t], random, dtype)
        on, undecided = _relu_reference(x, x_t, random)
        assert g.tolist() == [1.0 if on else 0.0], (x, x_t)
        assert tangent.tolist() == [x_t if on else 0.0], (x, x_t)
        assert is_open == undecided, (x, x_t, random)


@pytest.mark.parametrize("x,x_t", [(0.0, math.nan), (2.0, math.nan), (-1.0, math.nan),
                                   (math.nan, 1.0), (math.nan, 0.0)])
def test_a_nan_value_or_tangent_at_a_decided_relu_leaves_the_run_open(x, x_t):
    """A NaN anywhere in a decided relu's input or tangent makes its margin NaN: the run is
    open and asd's sweep decides the call (the arithmetic form would otherwise read NaN as
    a side)."""
    for random in (True, False):
        assert _relu_jvp([x, 0.0], [x_t, 1.0], random, torch.float64)[2]


def test_decided_relu_computes_outside_autograd():
    """The decision and the tangent are never differentiated: computed on detached values
    (each operation on values that require grad would be recorded), so the tangent of a
    decided relu does not require grad."""
    x = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.ones(4, 4, dtype=torch.float64, requires_grad=True)
    with native.Deciding(torch.tensor(THR), True), fwAD.dual_level():
        h = fwAD.make_dual(x, torch.randn(3, 4, dtype=torch.float64)) @ w
        assert fwAD.unpack_dual(h).tangent.requires_grad       # PyTorch's own tangents do
        y = native.decided_relu(h)
        assert not fwAD.unpack_dual(y).tangent.requires_grad


def _planted_resnet():
    """A float32 ResNet-style block (batch norm, a 3x3/2 max pooling with padding, a
    residual connection) whose stem channel 1 is exactly zero: its pre-activations are 0,
    so every ReLU of that channel ties and so do its pooling windows."""

    class Res(nn.Module):
        def __init__(self, w=6):
            super().__init__()
            self.stem, self.bn = nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w)
            self.c1, self.b1 = nn.Conv2d(w, w, 3, padding=1), nn.BatchNorm2d(w)
            self.c2, self.b2 = nn.Conv2d(w, w, 3, padding=1), nn.BatchNorm2d(w)
            self.pool, self.head = nn.MaxPool2d(3, 2, 1), nn.Linear(w, 4)

        def forward(self, x):
            h = self.pool(torch.relu(self.bn(self.stem(x))))
            h = torch.relu(h + self.b2(self.c2(torch.relu(self.b1(self.c1(h))))))
            return self.head(h.mean((2, 3)))

    torch.manual_seed(4)
    model = Res().eval()
    with torch.no_grad():
        model.stem.weight[1].zero_()
        model.stem.bias[1] = 0.0
        model.bn.bias[1] = 0.0
    return model, torch.randn(3, 3, 8, 8)


def _zero_cnn():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 2 * 2, 3))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    return model, torch.randn(4, 1, 14, 14)


def _zero_cnn_frozen_first_weight():
    """The zero CNN with its first convolution's weight frozen (no tangent: only its bias
    moves along the direction)."""
    model, x = _zero_cnn()
    model[0].weight.requires_grad_(False)
    return model, x


def _calls(model, x, native_backward: bool, n: int) -> list:
    """The gradients of the trainable parameters over ``n`` calls of one drop-in (seed 5),
    on the native path or asd's full sweep at every call."""
    old = asd.torch.NATIVE_BACKWARD
    asd.torch.NATIVE_BACKWARD = native_backward
    try:
        f = asd.torch.function(model, seed=5)
        out = []
        for _ in range(n):
            model.zero_grad(set_to_none=True)
            _square_loss(f(x)).backward()
            out.append({k: p.grad.clone() for k, p in model.named_parameters()
                        if p.requires_grad})
        return out
    finally:
        asd.torch.NATIVE_BACKWARD = old


@pytest.fixture
def spies(monkeypatch):
    """Counts the decided runs that settled a call (``decided``), the calls swept by asd
    (``swept``), the tiled pooling decisions (``tiles``) and the thresholds computed
    (``thresholds``)."""
    seen = {"decided": 0, "swept": 0, "tiles": 0, "thresholds": 0, "input convolutions": 0}

    def spy(name, module, key, counts=lambda out: True):
        real = getattr(module, name)

        def wrapped(*args, **kwargs):
            out = real(*args, **kwargs)
            seen[key] += bool(counts(out))
            return out
        monkeypatch.setattr(module, name, wrapped)

    spy("_decided_gradients", dropin, "decided", lambda out: out is not None)
    spy("_decided_forward", dropin._NativeCall, "decided", lambda out: out is not None)
    spy("_asd_gradients", dropin, "swept")
    spy("_decided_tiles", native, "tiles")
    spy("_threshold", dropin, "thresholds")
    spy("decided_conv2d", native, "input convolutions")
    return seen


@pytest.mark.parametrize("build", [_planted_resnet, _zero_cnn, _zero_cnn_frozen_first_weight])
def test_planted_ties_are_decided_with_the_full_sweeps_element(build, spies):
    """float32 models with exact zeros planted under their ReLUs and pooling windows: three
    calls of one drop-in (decided in the backward, then in the forward) give the full
    sweep's gradient along the same seeded direction, to float32 rounding, without a sweep;
    the tiled pooling decision runs where the windows tile the input, and the threshold is
    computed once for the seed's direction, and the first convolution (of the input, which
    has no tangent) is `native.decided_conv2d`, without PyTorch's convolution of a zero
    tangent."""
    model, x = build()
    got = _calls(model, x, True, 3)
    assert spies["decided"] == 3 and spies["swept"] == 0
    assert spies["tiles"] == (0 if build is _planted_resnet else 6)     # two pools per run
    assert spies["thresholds"] == 1
    assert spies["input convolutions"] == 3
    (want,) = _calls(model, x, False, 1)
    for g in got:
        _close(g, want, 2e-6)


def test_off_value_is_min_abs_with_nan_on_every_device_path():
    """A margin of a relu input is ``min |x|`` (abs then amin on CPUs, one
    ``vector_norm`` of order -inf elsewhere): 0 at a tie, NaN for a NaN."""
    x = torch.tensor([[3.0, -0.5], [2.0, 4.0]])
    assert float(native.off_value(x)) == 0.5
    assert float(native.off_value(x, 2.0)) == 0.0
    x[1, 1] = math.nan
    assert math.isnan(float(native.off_value(x)))
    assert math.isnan(float(native.off_value(x, 2.0)))
