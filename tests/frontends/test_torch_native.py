"""asd.torch natively: the imported program sweeps the model's own tensors (torch arrays on
their device, in their dtype) when every operation has an array-API rule, and falls back to
numpy, once per program and saying why, when one does not.

Reference: the numpy path (``asd.torch.NATIVE = False``), which `test_torch.py` checks against
the exact Fraction oracle on kinks; the native path must give the same subgradient along the
same direction (same seed). Off the kinks both must equal PyTorch's own gradient.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import asd.torch  # noqa: E402

import asd  # noqa: E402
from asd.frontends import torch as frontend  # noqa: E402

DTYPES = [torch.float32, torch.float64]


def tol(dtype) -> dict:
    return {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {
        "rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(autouse=True)
def sweep_every_call(monkeypatch):
    """This file compares asd's sweep on torch tensors with the sweep on numpy: PyTorch's
    own backward where no tie matters (test_torch_native_backward.py) is turned off."""
    monkeypatch.setattr(frontend, "NATIVE_BACKWARD", False)


@pytest.fixture
def numpy_path(monkeypatch):
    """Run the body's calls on the numpy path (the documented switch)."""

    def run(call):
        monkeypatch.setattr(frontend, "NATIVE", False)
        try:
            return call()
        finally:
            monkeypatch.setattr(frontend, "NATIVE", True)

    return run


# ----- models: the first layer holds pairs (a, -a) with zero bias, so at x = 0 every unit
# of it sits on its kink, and relu(a.x) - relu(-a.x) = a.x is where PyTorch's gradient errs


class Residual(nn.Module):
    def __init__(self, width=6, blocks=2):
        super().__init__()
        self.inp = nn.Linear(3, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            h = h + torch.relu(block(h))       # skip connections
        return self.out(h)


class MaxOverFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 6)
        self.out = nn.Linear(2, 1)

    def forward(self, x):
        h = self.inp(x).reshape(x.shape[0], 2, 3)
        return self.out(h.max(dim=2).values) + torch.amax(h, dim=(1, 2)).unsqueeze(1)


def _sequential(act):
    return lambda: nn.Sequential(nn.Linear(3, 6), act(), nn.Linear(6, 4), act(),
                                 nn.Linear(4, 1))


MODELS = {
    "relu": _sequential(nn.ReLU),
    "leaky_relu": _sequential(lambda: nn.LeakyReLU(0.1)),
    "hardtanh": _sequential(nn.Hardtanh),
    "residual": Residual,
    "layer_norm": lambda: nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 4),
                                        nn.LayerNorm(4), nn.ReLU(), nn.Linear(4, 1)),
    "max_over_features": MaxOverFeatures,
}


def make(name: str, dtype, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = MODELS[name]().to(dtype)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    with torch.no_grad():
        a = torch.randn(3, 3, dtype=dtype)
        first.weight.copy_(torch.cat([a, -a]))     # ties: pairs (a, -a)
        first.bias.zero_()
    return model


def named(model) -> dict:
    """The parameters by the names `loss_of`'s closure gives them (``model.0.weight``)."""
    return {f"model.{k}": p for k, p in model.named_parameters()}


def loss_of(model):
    return lambda x: model(x).square().sum() + model(x).sum()


def kink_input(dtype):
    x = torch.zeros(4, 3, dtype=dtype)      # every first-layer unit exactly at its kink
    x[2:] = torch.randn(2, 3, dtype=dtype, generator=torch.Generator().manual_seed(3))
    return x


def same_kind(result: torch.Tensor, like: torch.Tensor) -> None:
    assert isinstance(result, torch.Tensor)
    assert result.dtype == like.dtype and result.device == like.device
    assert result.shape == like.shape


def assert_close(a, b, dtype) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_close(a[k], b[k], dtype)
        return
    if isinstance(a, tuple):
        for u, v in zip(a, b, strict=True):
            assert_close(u, v, dtype)
        return
    np.testing.assert_allclose(a.detach().double().cpu().numpy(),
                               b.detach().double().cpu().numpy(), **tol(dtype))


# ----- the sweep: native equals the numpy path on kinks, and autograd off them -----


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("argnums", [0, "params", (0, "params")], ids=str)
def test_native_equals_numpy_path_at_kinks(name, dtype, argnums, numpy_path):
    model = make(name, dtype)
    f = loss_of(model)
    x = kink_input(dtype)
    value, g = asd.torch.value_and_subgrad(f, x, argnums=argnums, seed=7)
    prog = asd.torch.import_program(f, x)
    assert prog.backend == "torch", prog.backend
    value_np, g_np = numpy_path(
        lambda: asd.torch.value_and_subgrad(f, x, argnums=argnums, seed=7))
    assert prog.backend.startswith("numpy (because: asd.torch.NATIVE is False")
    assert_close(value, value_np, dtype)
    assert_close(g, g_np, dtype)
    params = named(model)
    parts = g if isinstance(argnums, tuple) else (g,)
    for part, which in zip(parts, argnums if isinstance(argnums, tuple) else (argnums,),
                           strict=True):
        if which == 0:
            same_kind(part, x)
        else:
            assert part.keys() == params.keys()
            for k, v in part.items():
                same_kind(v, params[k])


def test_the_kinks_are_kinks():
    """At the planted kinks PyTorch's gradient is not the limiting one, so the comparison
    above is made where the answer depends on how ties are decided."""
    model = make("relu", torch.float64)
    f = loss_of(model)
    x = kink_input(torch.float64)
    xt = x.clone().requires_grad_(True)
    f(xt).backward()
    g = asd.torch.subgrad(f, x, seed=7)
    assert asd.torch.import_program(f, x).backend == "torch"
    assert not torch.allclose(g[:2], xt.grad[:2])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(MODELS))
def test_native_equals_autograd_off_kinks(name, dtype):
    model = make(name, dtype, seed=1)
    f = loss_of(model)
    x = torch.randn(4, 3, dtype=dtype, generator=torch.Generator().manual_seed(11))
    g_x, g_p = asd.torch.subgrad(f, x, argnums=(0, "params"), seed=2)
    assert asd.torch.import_program(f, x).backend == "torch"
    xt = x.clone().requires_grad_(True)
    model.zero_grad()
    f(xt).backward()
    assert_close(g_x, xt.grad, dtype)
    assert_close(g_p, {k: p.grad for k, p in named(model).items()}, dtype)


def test_direction_is_honoured_natively():
    model = make("relu", torch.float64)
    f = loss_of(model)
    x = torch.zeros(2, 3, dtype=torch.float64)
    for v in (torch.ones(2, 3, dtype=torch.float64), -torch.ones(2, 3, dtype=torch.float64)):
        g = asd.torch.subgrad(f, x, direction=v)
        g_np = asd.torch.subgrad(f, x + 1e-7 * v, seed=0)      # off the kink along v
        np.testing.assert_allclose(g.numpy(), g_np.numpy(), atol=1e-5)
    assert asd.torch.import_program(f, x).backend == "torch"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_computes_in_float32_and_returns_the_input_dtype(dtype, numpy_path):
    model = make("relu", dtype)
    f = loss_of(model)
    x = kink_input(dtype)
    g_x, g_p = asd.torch.subgrad(f, x, argnums=(0, "params"), seed=3)
    assert asd.torch.import_program(f, x).backend == "torch"
    same_kind(g_x, x)
    for k, p in named(model).items():
        same_kind(g_p[k], p)
    g_np = numpy_path(lambda: asd.torch.subgrad(f, x, argnums=(0, "params"), seed=3))
    assert_close((g_x, g_p), g_np, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_runs_natively(dtype, reduction, numpy_path):
    torch.manual_seed(0)
    model = make("relu", dtype)
    model[-1] = nn.Linear(4, 5).to(dtype)
    labels = torch.tensor([0, 4, 2, 2])

    def f(x):
        return torch.nn.functional.cross_entropy(model(x), labels, reduction=reduction).sum()

    for x in (kink_input(dtype), torch.randn(4, 3, dtype=dtype)):
        g = asd.torch.subgrad(f, x, argnums=(0, "params"), seed=1)
        assert asd.torch.import_program(f, x).backend == "torch"
        g_np = numpy_path(lambda x=x: asd.torch.subgrad(f, x, argnums=(0, "params"), seed=1))
        assert_close(g, g_np, dtype)
    xt = x.clone().requires_grad_(True)         # off the kinks: PyTorch's gradient
    f(xt).backward()
    assert_close(g[0], xt.grad, dtype)


# ----- falling back: an operation without an array-API rule sends the program to numpy -----


def test_unported_primitive_falls_back_once_and_says_why(monkeypatch, numpy_path):
    numpy_tanh = asd.extend.defsmooth("numpy_only_tanh", np.tanh, lambda x, y: 1 - y * y)
    monkeypatch.setitem(frontend.ATEN, "tanh", lambda x: numpy_tanh(x))
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.ReLU(), nn.Linear(4, 1)).double()
    f = loss_of(model)
    x = kink_input(torch.float64)
    seen = []
    numpy_fn = frontend.TorchProgram.numpy_fn

    def spy(self, *inputs, params=None):
        seen.append(frontend.ops._on_torch(*inputs))
        return numpy_fn(self, *inputs, params=params)

    monkeypatch.setattr(frontend.TorchProgram, "numpy_fn", spy)
    g = asd.torch.subgrad(f, x, argnums=(0, "params"), seed=5)
    prog = asd.torch.import_program(f, x)
    assert prog.backend.startswith("numpy (because: numpy_only_tanh has no array-API rule")
    assert "aten.tanh" in prog.backend
    assert seen == [True, False]                 # tried natively, then numpy
    seen.clear()
    g2 = asd.torch.subgrad(f, x, argnums=(0, "params"), seed=5)
    assert seen == [False]                       # the refusal is remembered
    assert prog.backend == f"numpy (because: {prog.refused})"
    assert_close(g, g2, torch.float64)
    same_kind(g[0], x)
    g_np = numpy_path(lambda: asd.torch.subgrad(f, x, argnums=(0, "params"), seed=5))
    assert_close(g, g_np, torch.float64)


@pytest.mark.parametrize("f", [
    lambda x: torch.sort(x, dim=1).values[:, :2].sum(),
    lambda x: (torch.sort(x, dim=0, descending=True).values * torch.arange(3.0)[:, None]).sum(),
    lambda x: torch.topk(x, 2).values.sum() + x.median() + torch.quantile(x, 0.3),
], ids=["sort", "sort descending", "topk, median, quantile"])
def test_sort_runs_natively_with_numpy_s_answer_at_ties(f, numpy_path):
    """torch.sort (its indices unused), topk, median and quantile sweep on torch; the tied
    rows are decided as the numpy path decides them."""
    x = torch.tensor([[1.0, 1.0, 0.0], [2.0, -1.0, -1.0], [0.5, 0.5, 0.5]],
                     dtype=torch.float64)
    g = asd.torch.subgrad(f, x, seed=1)
    assert asd.torch.import_program(f, x).backend == "torch"
    g_np = numpy_path(lambda: asd.torch.subgrad(f, x, seed=1))
    assert_close(g, g_np, torch.float64)
    same_kind(g, x)


def test_a_user_error_is_not_a_fallback():
    f = lambda x: torch.relu(x).sum()  # noqa: E731
    x = torch.zeros(3)
    with pytest.raises(asd.ArgumentError):
        asd.torch.subgrad(f, x, argnums=3)
    assert asd.torch.import_program(f, x).refused is None


# ----- the drop-in autograd function: training steps -----


def _train(model, x, steps: int, compiled: bool = False, seed: int = 4):
    fn = asd.torch.function(model, seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x):
        opt.zero_grad()
        loss = fn(x).square().mean() + fn(x).mean()
        loss.backward()
        opt.step()
        return loss

    run = torch.compile(step) if compiled else step
    losses = [run(x).detach() for _ in range(steps)]
    return losses, {k: p.detach().clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["relu", "residual", "max_over_features"])
def test_function_training_step_matches_numpy_path(name, dtype, numpy_path):
    model = make(name, dtype)
    twin = copy.deepcopy(model)
    x = kink_input(dtype)
    losses, params = _train(model, x, steps=3)
    assert asd.torch.import_program(model, x).backend == "torch"
    losses_np, params_np = numpy_path(lambda: _train(twin, x, steps=3))
    assert_close(tuple(losses), tuple(losses_np), dtype)
    assert_close(params, params_np, dtype)
    for p in model.parameters():
        assert p.grad is not None and p.grad.dtype == dtype and p.grad.device == p.device


def test_function_input_gradient_is_a_tensor_of_the_input_kind():
    model = make("relu", torch.float32)
    fn = asd.torch.function(model, seed=0)
    x = kink_input(torch.float32).requires_grad_(True)
    fn(x).sum().backward()
    assert asd.torch.import_program(model, x).backend == "torch"
    same_kind(x.grad, x)
    g = asd.torch.subgrad(lambda x: model(x).sum(), x.detach(), argnums=(0, "params"),
                          seed=0)           # the backward's sweep: inputs and parameters
    assert_close(x.grad, g[0], torch.float32)


class Counted(nn.Module):
    """The "relu" model, counting how often its Python forward runs."""

    def __init__(self, dtype):
        super().__init__()
        self.net, self.calls = make("relu", dtype), 0

    def forward(self, x):
        self.calls += 1
        return self.net(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_function_forward_is_the_sweep_and_backward_only_pulls(dtype):
    """The drop-in forward is asd's sweep (the value torch computes, in the model's dtype);
    the backward pulls the incoming gradient through the branches that sweep chose, so the
    model's Python forward runs only to import and watch it once, and the backward equals
    a fresh sweep of ``<ct, f>`` with the same seed."""
    model = Counted(dtype)
    fn = asd.torch.function(model, seed=5)
    x = kink_input(dtype)
    ct = torch.randn(4, 1, dtype=dtype, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        out = fn(x)
        assert out.dtype == dtype and out.requires_grad
        with torch.no_grad():
            want = model.net(x)
        if dtype == torch.bfloat16:     # asd runs in float32 and rounds once; torch per op
            torch.testing.assert_close(out, want, rtol=2 ** -6, atol=2 ** -8)
        else:
            assert_close(out, want, dtype)
        for p in model.parameters():
            p.grad = None
        out.backward(ct, retain_graph=True)
        grads = {f"model.net.{k}": p.grad.clone() for k, p in model.net.named_parameters()}
        out.backward(ct)                       # a retained graph pulls the same again
        for k, p in model.net.named_parameters():
            assert_close(p.grad, 2 * grads[f"model.net.{k}"], torch.float32)
    assert model.calls - 1 <= 2, "the model's forward ran again after its import"
    g = asd.torch.subgrad(lambda x: (model.net(x) * ct).sum(), x, argnums="params", seed=5)
    assert_close(grads, {k.replace("<lambda>.", ""): v for k, v in g.items()}, torch.float32
                 if dtype == torch.bfloat16 else dtype)


def test_function_refuses_a_parameter_changed_between_forward_and_backward():
    """The forward's linearizations read the parameters' storage: an in-place change before
    the backward raises torch's own error instead of bending the gradient."""
    model = make("relu", torch.float64)
    out = asd.torch.function(model, seed=0)(kink_input(torch.float64)).sum()
    with torch.no_grad():
        model[0].weight.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_function_takes_python_numbers_among_its_arguments():
    model = make("relu", torch.float64)
    fn = asd.torch.function(lambda x, scale: model(x).sum() * scale, seed=0)
    x = kink_input(torch.float64).requires_grad_(True)
    fn(x, 3.0).backward()
    gx = x.grad.clone()
    x.grad = None
    asd.torch.function(lambda x: model(x).sum(), seed=0)(x).backward()
    torch.testing.assert_close(gx, 3.0 * x.grad)


def test_function_without_gradients_runs_torchs_forward():
    model = Counted(torch.float64)
    fn = asd.torch.function(model, seed=0)
    x = kink_input(torch.float64)
    fn(x)
    calls = model.calls
    with torch.no_grad():
        out = fn(x)
    assert model.calls == calls + 1 and not out.requires_grad
    assert torch.equal(out, model.net(x))


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
def test_function_in_a_compiled_training_step():
    """torch.compile around a step calling the drop-in function: a graph break at the call
    and in asd's backward (both run eagerly), the same parameters as the eager step."""
    model = make("relu", torch.float32)
    twin = copy.deepcopy(model)
    x = kink_input(torch.float32)
    losses, params = _train(model, x, steps=2, compiled=True)
    losses_eager, params_eager = _train(twin, x, steps=2)
    assert_close(tuple(losses), tuple(losses_eager), torch.float32)
    assert_close(params, params_eager, torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_runs_on_the_device(numpy_path):
    model = make("residual", torch.float32).cuda()
    f = loss_of(model)
    x = kink_input(torch.float32).cuda()
    g_x, g_p = asd.torch.subgrad(f, x, argnums=(0, "params"), seed=7)
    assert asd.torch.import_program(f, x).backend == "torch"
    same_kind(g_x, x)
    for k, p in named(model).items():
        same_kind(g_p[k], p)
    g_np = numpy_path(lambda: asd.torch.subgrad(f, x, argnums=(0, "params"), seed=7))
    assert_close((g_x, g_p), g_np, torch.float32)
    fn = asd.torch.function(model, seed=0)
    fn(x).sum().backward()
    assert all(p.grad.is_cuda for p in model.parameters())
