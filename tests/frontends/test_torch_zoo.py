"""A model zoo through asd.torch: the architectures people have, written here (torchvision's
wheel does not load with the CPU build of torch CI installs).

Two oracles per model, float32 and float64:

- off the kinks (random initialisation, random input), asd's gradient in the input and in
  every parameter equals torch autograd's (the function is differentiable there);
- at ties (a dead unit: zero input through a zero-bias first layer), the limiting gradient
  along ``v`` gives the one-sided derivative: ``<g, v>`` equals the difference quotient of
  the model's own forward along ``v`` in float64 (piecewise-smooth in ``t``: a small step).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import asd.torch  # noqa: E402


class Residual(nn.Module):
    """Two conv-bn blocks with a skip connection, then global average pooling."""

    def __init__(self, c=4):
        super().__init__()
        self.stem = nn.Conv2d(1, c, 3, padding=1)
        self.a, self.bn_a = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.b, self.bn_b = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        h = F.relu(self.stem(x))
        h = F.relu(h + self.bn_b(self.b(F.relu(self.bn_a(self.a(h))))))
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))


class MobileBlock(nn.Module):
    """MobileNetV3's inverted residual: expand, hardswish, depthwise conv, squeeze-excite
    with hardsigmoid, project."""

    def __init__(self, c=4, e=8):
        super().__init__()
        self.stem = nn.Conv2d(1, c, 3, padding=1)
        self.expand = nn.Conv2d(c, e, 1)
        self.depthwise = nn.Conv2d(e, e, 3, padding=1, groups=e)
        self.se_down, self.se_up = nn.Linear(e, 2), nn.Linear(2, e)
        self.project = nn.Conv2d(e, c, 1)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        h = F.hardswish(self.stem(x))
        y = F.hardswish(self.depthwise(F.hardswish(self.expand(h))))
        s = F.hardsigmoid(self.se_up(F.relu(self.se_down(y.mean((2, 3))))))
        h = h + self.project(y * s[:, :, None, None])
        return self.head(F.adaptive_avg_pool2d(h, (1, 1)).flatten(1))


class VGG(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(6 * 2 * 2, 8), nn.ReLU(),
                                        nn.Dropout(0.5), nn.Linear(8, 3))

    def forward(self, x):
        return self.classifier(self.features(x))


class Dense(nn.Module):
    """DenseNet-style: each layer sees the concatenation of all earlier features."""

    def __init__(self, growth=3):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(4 + k * growth), nn.ReLU(),
                          nn.Conv2d(4 + k * growth, growth, 3, padding=1)) for k in range(3))
        self.head = nn.Linear(4 + 3 * growth, 3)

    def forward(self, x):
        h = self.stem(x)
        for layer in self.layers:
            h = torch.cat([h, layer(h)], dim=1)
        return self.head(F.avg_pool2d(h, h.shape[-1]).flatten(1))


class Encoder(nn.Module):
    """A transformer encoder layer (attention, layer norm, GELU feed-forward) and a head."""

    def __init__(self, d=8):
        super().__init__()
        self.embed = nn.Linear(3, d)
        self.block = nn.TransformerEncoderLayer(d, 2, dim_feedforward=16, dropout=0.0,
                                                activation="gelu", batch_first=True)
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        return self.head(self.block(F.relu(self.embed(x))).mean(1))


class LanguageModel(nn.Module):
    def __init__(self, vocab=7, d=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, 6, batch_first=True)
        self.out = nn.Linear(6, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.out(F.relu(h))


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 5, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.head(F.relu(h[:, -1]))


def image(batch=2, size=6):
    return torch.randn(batch, 1, size, size, generator=torch.Generator().manual_seed(1))


ZOO = {
    "residual": (Residual, lambda: image()),
    "mobilenet block": (MobileBlock, lambda: image()),
    "vgg (ceil-mode pooling, dropout)": (VGG, lambda: image(size=7)),
    "densenet concatenation": (Dense, lambda: image()),
    "transformer encoder": (Encoder, lambda: torch.randn(
        2, 4, 3, generator=torch.Generator().manual_seed(2))),
    "gru classifier": (GRUClassifier, lambda: torch.randn(
        2, 4, 3, generator=torch.Generator().manual_seed(3))),
}


def build(cls, dtype, seed=0):
    torch.manual_seed(seed)
    model = cls().to(dtype)
    for m in model.modules():  # non-trivial running statistics for eval-mode batch norm
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


TOL = {torch.float32: dict(rtol=2e-3, atol=2e-4), torch.float64: dict(rtol=1e-7, atol=1e-9)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_matches_autograd_off_the_kinks(name, dtype):
    cls, make_input = ZOO[name]
    model = build(cls, dtype)
    x = make_input().to(dtype)

    def loss(inp):
        return (model(inp) ** 2).sum()

    g_x, g_p = asd.torch.subgrad(loss, x, argnums=(0, "params"))
    x_ref = x.clone().requires_grad_(True)
    model.zero_grad()
    loss(x_ref).backward()
    np.testing.assert_allclose(g_x.numpy(), x_ref.grad.numpy(), **TOL[dtype])
    for pname, p in model.named_parameters():
        np.testing.assert_allclose(g_p[f"model.{pname}"].numpy(), p.grad.numpy(),
                                   **TOL[dtype], err_msg=pname)


def test_language_model_with_integer_tokens_and_cross_entropy():
    model = build(LanguageModel, torch.float64)
    tokens = torch.tensor([[1, 4, 2, 6], [0, 3, 3, 5]])
    targets = torch.tensor([[4, 2, 6, 0], [3, 3, 5, 1]])

    def loss(tok):
        return F.cross_entropy(model(tok).reshape(-1, 7), targets.reshape(-1))

    g = asd.torch.subgrad(loss, tokens, argnums="params")
    model.zero_grad()
    loss(tokens).backward()
    for pname, p in model.named_parameters():
        np.testing.assert_allclose(g[f"model.{pname}"].numpy(), p.grad.numpy(), rtol=1e-8,
                                   atol=1e-10, err_msg=pname)


TIED = ["residual", "vgg (ceil-mode pooling, dropout)", "mobilenet block"]


@pytest.mark.parametrize("name", TIED)
def test_zoo_at_dead_units_gives_the_one_sided_derivative(name):
    """Zero input, zero stem bias: every stem pre-activation is exactly 0, a tie for each
    ReLU (and hardswish's kinks at -3 and 3 are away); along ``v`` the limiting gradient's
    inner product with ``v`` is the one-sided derivative of the model's own forward."""
    cls, make_input = ZOO[name]
    model = build(cls, torch.float64)
    stem = model.stem if hasattr(model, "stem") else model.features[0]
    with torch.no_grad():
        stem.bias.zero_()
    x = torch.zeros_like(make_input(), dtype=torch.float64)

    def loss(inp):
        return (model(inp) ** 2).sum() + model(inp).sum()

    for seed in range(3):
        v = torch.randn(x.shape, generator=torch.Generator().manual_seed(10 + seed),
                        dtype=torch.float64)
        g = asd.torch.subgrad(loss, x, direction=v)
        t = 1e-7
        with torch.no_grad():
            quotient = float((loss(x + t * v) - loss(x)) / t)
        assert float((g * v).sum()) == pytest.approx(quotient, rel=1e-4, abs=1e-6)
