"""asd.torch: PyTorch models imported through torch.export, checked on their kinks.

Oracle: the same model written in plain numpy, evaluated by the exact Fraction oracle
(`asd.testing.exact.limiting_gradient`) along the same direction. The models sit where the
first layer's pre-activations are exactly 0 (zero input, zero bias) and where max-pooling
windows tie; PyTorch's own gradient is checked to differ there. Off the kinks, every mapped
ATen operation must agree with PyTorch's gradient (the function is smooth there).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import asd.torch  # noqa: E402

import asd  # noqa: E402
from asd.testing.exact import limiting_gradient  # noqa: E402

DOUBLE = torch.float64


def unit(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def torch_grad(f, x: np.ndarray) -> np.ndarray:
    t = torch.tensor(x, dtype=DOUBLE, requires_grad=True)
    f(t).backward()
    return t.grad.numpy()


def exact(f, x, v) -> np.ndarray:
    return limiting_gradient(f, x, v)[1].astype(float)


# ----- an MLP whose first layer holds pairs (a, -a): relu(a.x) - relu(-a.x) = a.x -----


def make_mlp(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 3, generator=g, dtype=DOUBLE)
    mlp = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 4), nn.ReLU(),
                        nn.Linear(4, 1)).double()
    with torch.no_grad():
        mlp[0].weight.copy_(torch.cat([a, -a]))
        mlp[0].bias.zero_()
        mlp[2].weight.copy_(torch.randn(4, 6, generator=g, dtype=DOUBLE))
        mlp[2].bias.copy_(torch.tensor([0.5, -0.5, 1.0, 0.0], dtype=DOUBLE))
        mlp[4].weight.copy_(torch.randn(1, 4, generator=g, dtype=DOUBLE))
    return mlp


def numpy_mlp(mlp):
    W = [p.detach().numpy() for p in mlp.parameters()]

    def f(x):
        h = np.maximum(W[0] @ x + W[1], 0)
        h = np.maximum(W[2] @ h + W[3], 0)
        return (W[4] @ h + W[5])[0]

    return f


MLP = make_mlp()


def mlp_scalar(x):
    return MLP(x).sum()


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**16))
def test_mlp_at_zero_preactivations_matches_exact_limiting_gradient(seed):
    x, v = np.zeros(3), unit(seed, 3)
    want = exact(numpy_mlp(MLP), x, v)
    got = asd.torch.subgrad(mlp_scalar, torch.zeros(3, dtype=DOUBLE),
                            direction=torch.tensor(v))
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_mlp_torch_gradient_differs_at_zero():
    x = np.zeros(3)
    want = exact(numpy_mlp(MLP), x, unit(1, 3))
    theirs = torch_grad(mlp_scalar, x)
    assert np.abs(want).max() > 1e-3
    assert not np.allclose(theirs, want)


def test_mlp_away_from_kinks_agrees_with_torch():
    x = np.array([0.3, -1.2, 0.7])
    got = asd.torch.subgrad(mlp_scalar, torch.tensor(x), seed=0).numpy()
    np.testing.assert_allclose(got, torch_grad(mlp_scalar, x), rtol=1e-12)


def test_mlp_program_prints_as_a_listing():
    text = str(asd.torch.program(MLP, torch.zeros(3, dtype=DOUBLE)))
    assert "relu" in text and "matmul" in text


# ----- module parameters as the differentiated arguments -----


def small_mlp():
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).double()
    with torch.no_grad():
        w = torch.tensor([[1.0, 1.0, 0.5], [2.0, 2.0, -1.0], [-1.0, -1.0, 0.0],
                          [0.5, 0.5, 2.0]], dtype=DOUBLE)
        mlp[0].weight.copy_(w)        # every row r has r[0] == r[1], so r . (1, -1, 0) = 0
        mlp[0].bias.zero_()
        mlp[2].weight.copy_(torch.tensor([[1.0, -2.0, 0.5, 3.0]], dtype=DOUBLE))
        mlp[2].bias.fill_(0.25)
    return mlp


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**16))
def test_parameters_are_differentiable_at_ties(seed):
    mlp = small_mlp()
    names = [n for n, _ in mlp.named_parameters()]
    shapes = [tuple(p.shape) for p in mlp.parameters()]
    sizes = [int(np.prod(s)) for s in shapes]
    x = np.array([1.0, -1.0, 0.0])
    theta = np.concatenate([p.detach().numpy().ravel() for p in mlp.parameters()])
    v = unit(seed, theta.size)

    def np_loss(flat):
        parts, start = [], 0
        for s, n in zip(shapes, sizes, strict=True):
            parts.append(flat[start:start + n].reshape(s))
            start += n
        w1, b1, w2, b2 = parts
        return (w2 @ np.maximum(w1 @ x + b1, 0) + b2)[0]

    want = exact(np_loss, theta, v)
    vdict, start = {}, 0
    for name, n, s in zip(names, sizes, shapes, strict=True):
        vdict[name] = torch.tensor(v[start:start + n].reshape(s))
        start += n
    got = asd.torch.subgrad(lambda t: mlp(t).sum(), torch.tensor(x), argnums="params",
                            direction={f"mlp.{k}": t for k, t in vdict.items()})
    got_flat = np.concatenate([got[f"mlp.{n}"].numpy().ravel() for n in names])
    np.testing.assert_allclose(got_flat, want, rtol=1e-12, atol=1e-12)


class Scalar(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x).sum()


def test_module_params_are_named_by_their_qualified_names():
    model = Scalar(small_mlp())
    x = torch.tensor([0.3, 0.1, 0.2], dtype=DOUBLE)
    got = asd.torch.subgrad(model, x, argnums="params", seed=0)
    assert set(got) == {n for n, _ in model.named_parameters()}
    model(x).backward()                          # no ties at x: PyTorch's answer is exact
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad)


# ----- a small CNN: conv -> relu -> max-pool (tied windows) -> linear -----


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1)).sum()


def make_cnn():
    torch.manual_seed(0)
    m = CNN().double().eval()
    with torch.no_grad():
        m.conv.bias.zero_()
    return m


def numpy_cnn(m):
    wc, bc, wf, bf = (p.detach().numpy() for p in m.parameters())

    def f(x):
        xp = np.zeros((6, 6), dtype=object)
        xp[...] = 0.0
        xp[1:5, 1:5] = x[0, 0]
        conv = np.empty((2, 4, 4), dtype=object)
        for o in range(2):
            acc = 0.0
            for i in range(3):
                for j in range(3):
                    acc = acc + wc[o, 0, i, j] * xp[i:i + 4, j:j + 4]
            conv[o] = acc + bc[o]
        y = np.maximum(conv, 0)
        windows = y.reshape(2, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4).reshape(2, 2, 2, 4)
        return (wf @ np.max(windows, axis=-1).reshape(-1) + bf)[0]

    return f


CNN_MODEL = make_cnn()
TIED_INPUTS = {
    "zeros": np.zeros((1, 1, 4, 4)),
    "blocks": np.kron(np.array([[1.0, -1.0], [0.5, 0.0]]), np.ones((2, 2)))[None, None],
}


@pytest.mark.parametrize("point", sorted(TIED_INPUTS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cnn_on_ties_matches_exact_limiting_gradient(point, seed):
    x = TIED_INPUTS[point]
    v = unit(seed, x.shape)
    want = exact(numpy_cnn(CNN_MODEL), x, v)
    got = asd.torch.subgrad(CNN_MODEL, torch.tensor(x), direction=torch.tensor(v))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_cnn_torch_gradient_differs_at_zero():
    x = TIED_INPUTS["zeros"]
    want = exact(numpy_cnn(CNN_MODEL), x, unit(0, x.shape))
    assert np.abs(want).max() > 1e-3
    assert not np.allclose(torch_grad(CNN_MODEL, x), want)


# ----- the drop-in autograd function -----


def test_function_gives_ones_for_the_identity_at_zero():
    f = asd.torch.function(lambda x: torch.relu(x) - torch.relu(-x))
    x = torch.zeros(5, requires_grad=True)
    f(x).sum().backward()
    assert torch.equal(x.grad, torch.ones(5))
    y = torch.zeros(5, requires_grad=True)
    (torch.relu(y) - torch.relu(-y)).sum().backward()
    assert torch.equal(y.grad, torch.zeros(5))          # what PyTorch alone says


def test_function_backward_is_a_vjp_with_the_incoming_gradient():
    f = asd.torch.function(lambda x: torch.relu(x) - torch.relu(-x))
    x = torch.zeros(3, dtype=DOUBLE, requires_grad=True)
    w = torch.tensor([2.0, -1.0, 0.5], dtype=DOUBLE)
    (f(x) * w).sum().backward()
    assert torch.equal(x.grad, w)


def test_function_gives_module_parameters_their_gradients():
    mlp = small_mlp()
    step = asd.torch.function(mlp, seed=0)
    x = torch.tensor([0.3, -0.4, 0.9], dtype=DOUBLE)   # no ties: must equal PyTorch
    step(x).sum().backward()
    ours = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad()
    mlp(x).sum().backward()
    for a, b in zip(ours, (p.grad for p in mlp.parameters()), strict=True):
        torch.testing.assert_close(a, b)


def test_function_on_the_tied_mlp_uses_the_limiting_gradient():
    f = asd.torch.function(mlp_scalar, seed=3)
    x = torch.zeros(3, dtype=DOUBLE, requires_grad=True)
    f(x).backward()
    assert not torch.equal(x.grad, torch.zeros(3, dtype=DOUBLE))
    for p in MLP.parameters():
        p.grad = None


# ----- every mapped operation agrees with PyTorch where it is smooth -----

X = np.array([[0.31, -1.7, 0.52, 2.3], [-0.8, 0.13, 1.9, -0.45]])
TARGET = torch.tensor([2, 0])

SMOOTH_POINT_OPS = {
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1).sum(),
    "relu6": lambda x: F.relu6(3 * x).sum(),
    "hardtanh": lambda x: F.hardtanh(x).sum(),
    "elu": lambda x: F.elu(x, 0.7).sum(),
    "abs": lambda x: x.abs().sum(),
    "clamp": lambda x: torch.clamp(x, -1.0, 1.0).sum() + x.clamp(min=0).sum(),
    "maximum/minimum": lambda x: (torch.maximum(x, -x) + torch.minimum(x, 0.5 * x)).sum(),
    "max/amax/min": lambda x: x.max() + x.amax(dim=1).sum() + x.min(dim=0).values.sum(),
    "sort": lambda x: (torch.sort(x, dim=1).values * torch.arange(4.0)).sum(),
    "topk": lambda x: torch.topk(x, 2).values.sum(),
    "norm": lambda x: x.norm() + torch.linalg.vector_norm(x, dim=1).sum(),
    "where": lambda x: torch.where(x > 0, x, 2 * x).sum(),
    "sum/mean": lambda x: x.sum(dim=0).mean() + x.mean(),
    "arithmetic": lambda x: ((x * 3 - 1) / 2 + x ** 2 - x.neg()).sum(),
    "matmul": lambda x: (x @ x.T).sum() + torch.mm(x, x.T).trace(),
    "softmax": lambda x: (F.softmax(x, dim=1) * torch.arange(4.0)).sum(),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1)[:, 1].sum(),
    "cross_entropy": lambda x: F.cross_entropy(x, TARGET),
    "mse_loss": lambda x: F.mse_loss(x, torch.ones(2, 4)),
    "flatten/view": lambda x: torch.flatten(x).reshape(4, 2)[1:].sum(),
    "exp/log/tanh": lambda x: (torch.exp(x) + torch.tanh(x) + torch.log(x * x + 1)).sum(),
}


@pytest.mark.parametrize("name", sorted(SMOOTH_POINT_OPS))
def test_mapped_ops_agree_with_torch_off_kinks(name):
    f = SMOOTH_POINT_OPS[name]
    got = asd.torch.subgrad(f, torch.tensor(X), seed=0).numpy()
    np.testing.assert_allclose(got, torch_grad(f, X), rtol=1e-9, atol=1e-12)


class Layers(nn.Module):
    """Every layer the importer maps, in eval mode."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 3, 3, padding=1, stride=1)
        self.c2 = nn.Conv2d(1, 2, 2, stride=1, dilation=1)
        self.bn = nn.BatchNorm2d(2)
        self.pool1 = nn.MaxPool1d(2)
        self.avg = nn.AvgPool2d(2, stride=1)
        self.avg1 = nn.AvgPool1d(2)
        self.drop = nn.Dropout(0.5)
        self.act = nn.ELU()
        self.fc = nn.Linear(7, 1)

    def forward(self, x):
        a = self.avg1(self.pool1(torch.relu(self.c1(x[:, :2]))))
        b = self.avg(self.act(self.bn(self.c2(x[:, None, :, :3]))))
        return self.fc(self.drop(torch.cat([a.flatten(1), b.flatten(1)], 1))).sum()


def test_layers_agree_with_torch_off_kinks():
    torch.manual_seed(1)
    m = Layers().double().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    x = np.random.default_rng(5).standard_normal((2, 4, 4))
    got = asd.torch.subgrad(m, torch.tensor(x), seed=0).numpy()
    np.testing.assert_allclose(got, torch_grad(m, x), rtol=1e-9, atol=1e-12)


# ----- piecewise ops on their kinks against the exact oracle -----

KINK_OPS = [
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.1).sum(),
     lambda x: np.sum(np.where(x >= 0, x, 0.1 * x)), np.zeros(4)),
    ("hardtanh", lambda x: F.hardtanh(x).sum(), lambda x: np.sum(np.clip(x, -1.0, 1.0)),
     np.array([1.0, -1.0, 0.0, 1.0])),
    ("relu6", lambda x: F.relu6(x).sum(), lambda x: np.sum(np.minimum(np.maximum(x, 0.0), 6.0)),
     np.array([0.0, 6.0, 6.0, 0.0])),
    ("maximum", lambda x: torch.maximum(x[:2], x[2:]).sum(),
     lambda x: np.sum(np.maximum(x[:2], x[2:])), np.array([1.0, 0.0, 1.0, 0.0])),
    ("amax", lambda x: x.amax(), lambda x: np.max(x), np.array([2.0, 2.0, 2.0, 1.0])),
    ("sort", lambda x: (torch.sort(x).values * torch.arange(1.0, 5.0)).sum(),
     lambda x: np.sort(x) @ np.arange(1.0, 5.0), np.array([1.0, 1.0, 0.0, 1.0])),
    ("topk", lambda x: torch.topk(x, 2).values.sum(),
     lambda x: np.sort(x)[2:].sum(), np.array([3.0, 3.0, 3.0, 0.0])),
    ("where", lambda x: torch.where(x > 0, x, 3 * x).sum(),
     lambda x: np.sum(np.where(x > 0, x, 3 * x)), np.zeros(4)),
    ("abs-clamp", lambda x: (x.abs() - torch.clamp(x, min=0)).sum(),
     lambda x: np.sum(np.abs(x) - np.maximum(x, 0.0)), np.zeros(4)),
]


@pytest.mark.parametrize("name, fn, ref, x", KINK_OPS, ids=[k[0] for k in KINK_OPS])
@pytest.mark.parametrize("seed", [0, 1])
def test_piecewise_ops_on_kinks_match_exact(name, fn, ref, x, seed):
    v = unit(seed + 10, x.shape)
    got = asd.torch.subgrad(fn, torch.tensor(x), direction=torch.tensor(v)).numpy()
    np.testing.assert_allclose(got, exact(ref, x, v), rtol=1e-12, atol=1e-12)


# ----- errors -----


class LogGamma(nn.Module):
    """An operation asd has no handler for and torch does not decompose."""

    def forward(self, x):
        return torch.lgamma(x)


def test_unknown_op_names_the_op_and_the_module_path():
    model = nn.Sequential(nn.Linear(2, 2), LogGamma(), nn.Linear(2, 1)).double()
    with pytest.raises(asd.UnsupportedError, match=r"aten\.lgamma.*module path.*LogGamma"):
        asd.torch.subgrad(model, torch.zeros(2, dtype=DOUBLE))


def test_step_functions_are_refused_at_their_jumps_and_constant_elsewhere():
    """floor goes through asd's jump rule (tests/test_torch_step_ops.py has the rest)."""
    with pytest.raises(asd.NotLipschitzError, match="floor"):
        asd.torch.subgrad(lambda x: torch.floor(x).sum(), torch.zeros(2))
    assert torch.equal(asd.torch.subgrad(lambda x: torch.floor(x).sum(),
                                         torch.full((2,), 0.5)), torch.zeros(2))


def test_constant_only_nodes_are_evaluated_by_torch():
    f = lambda x: (x * torch.arange(3.0).flip(0)).sum()  # noqa: E731
    got = asd.torch.subgrad(f, torch.zeros(3), seed=0)
    assert torch.equal(got, torch.tensor([2.0, 1.0, 0.0]))


def test_import_asd_does_not_import_torch():
    """``import asd`` (and the command line's framework probe) never loads a framework; the
    front end is loaded, with its framework, on first use of ``asd.torch`` or ``asd.jax``."""
    import subprocess
    import sys

    code = ("import sys, asd, asd.cli.frameworks; print('torch' in sys.modules, "
            "'jax' in sys.modules); asd.torch; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False", "True"]


def test_the_public_front_end_is_the_implementing_module():
    """``asd.torch`` and ``asd.frontends.torch`` are one module object: extending ``ATEN``
    through either name extends the table the importer reads."""
    import asd.torch

    import asd.frontends.torch

    assert asd.torch is asd.frontends.torch
    assert asd.torch.__spec__.name == "asd.frontends.torch"


def test_gathering_by_topk_indices_is_decided_by_the_ray_not_guessed():
    x = torch.tensor([1.0, 3.0, 3.0, 0.5])
    # continuous (the top-2 sum): the tied positions are decided along the ray
    got = asd.torch.subgrad(lambda x: x[torch.topk(x, 2).indices].sum(), x, seed=0)
    assert torch.equal(got, torch.tensor([0.0, 1.0, 1.0, 0.0]))
    got = asd.torch.subgrad(lambda x: x[torch.topk(x, 1).indices].sum(), x,
                            direction=torch.tensor([0.0, 1.0, 2.0, 0.0]))
    assert torch.equal(got, torch.tensor([0.0, 0.0, 1.0, 0.0]))
    # a jump (the tied positions gather different values) is refused
    with pytest.raises(asd.NotLipschitzError, match="gather_at"):
        asd.torch.subgrad(lambda x: (x * torch.arange(4.0))[torch.topk(x, 1).indices].sum(),
                          x, seed=0)


def test_unused_pooling_indices_are_fine_and_used_ones_are_refused():
    x = torch.tensor([[[1.0, 3.0, 3.0, 0.5]]])
    g = asd.torch.subgrad(lambda x: torch.nn.functional.max_pool1d(x, 2).sum(), x,
                          direction=torch.tensor([[[0.0, 1.0, -1.0, 0.0]]]))
    assert g.tolist() == [[[0.0, 1.0, 1.0, 0.0]]]
    used = lambda x: torch.nn.functional.max_pool1d(  # noqa: E731
        x, 2, return_indices=True)[1].sum() + x.sum()
    # off ties the indices are constant near the point: PyTorch's gradient is exact there
    assert asd.torch.subgrad(used, x, seed=0).tolist() == [[[1.0, 1.0, 1.0, 1.0]]]
    # at a tie they jump, and asd's sweep refuses them
    with pytest.raises(asd.UnsupportedError, match="indices of max_pool1d"):
        asd.torch.subgrad(used, torch.tensor([[[3.0, 3.0, 1.0, 0.5]]]), seed=0)


def test_argnums_index_the_tensors_as_python_does():
    """Negative argnums count from the last tensor (never the parameters' dict, which
    ``'params'`` names); out of range is asd's ArgumentError, as ``asd.subgrad`` raises."""
    w = torch.tensor([1.0, -2.0, 0.5], dtype=DOUBLE, requires_grad=True)
    f = lambda a, b: (torch.relu(a) * b * w).sum()  # noqa: E731
    a = torch.tensor([0.5, 1.0, 2.0], dtype=DOUBLE)
    b = torch.tensor([3.0, -1.0, 0.25], dtype=DOUBLE)
    ga, gb = asd.torch.subgrad(f, a, b, argnums=(0, 1), seed=0)
    torch.testing.assert_close(asd.torch.subgrad(f, a, b, argnums=-1, seed=0), gb)
    torch.testing.assert_close(asd.torch.subgrad(f, a, b, argnums=-2, seed=0), ga)
    got = asd.torch.subgrad(f, a, b, argnums=(-1, "params"), seed=0)
    torch.testing.assert_close(got[0], gb)
    assert set(got[1]) == {"w"}
    for bad in (2, -3, (0, 5)):
        with pytest.raises(asd.ArgumentError, match=r"names argument .* got 2 arguments"):
            asd.torch.subgrad(f, a, b, argnums=bad)
    with pytest.raises(asd.ArgumentError, match="twice"):
        asd.torch.subgrad(f, a, b, argnums=(1, -1))
