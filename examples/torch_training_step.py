"""Training a PyTorch CNN whose kinks PyTorch gets wrong, with ``asd.torch.function``.

The block ``relu(z) - relu(-z)`` is the identity, written with two kinks. Its convolution
starts at zero weights, so every ``z`` is exactly 0. PyTorch differentiates relu at 0 as 0,
so the block passes no gradient, the convolution's weights get gradient 0 and stay 0
forever. ``asd.torch.function(model)`` is a drop-in replacement with asd's backward:
its forward sweeps the model along a random direction, which picks a branch at every
kink, and its backward returns the limiting gradient of that branch, an element of the
Clarke subdifferential.

The script checks that gradient against an independent oracle. For an explicit direction
``d``, the limiting gradient ``g`` along ``d`` satisfies ``<g, d> = L'(W; d)``, the one-sided
derivative of the loss. That derivative is measured from the model's own forward, by
difference quotients. PyTorch's gradient fails the same test. Then a few SGD steps show
that the asd-trained convolution leaves 0 and the loss drops, while PyTorch's stays put.

Run: python examples/torch_training_step.py
"""

from __future__ import annotations

import copy
import sys

try:
    import torch
except ImportError:
    print("skipped: needs torch (pip install torch)")
    sys.exit(0)

import asd.torch

nn, F = torch.nn, torch.nn.functional
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.head = nn.Linear(4 * 4 * 4, 1)
        nn.init.zeros_(self.conv.weight)          # every pre-activation exactly 0

    def forward(self, x):
        z = self.conv(x)
        h = torch.relu(z) - torch.relu(-z)          # the identity, with kinks at z = 0
        return self.head(F.max_pool2d(h, 2).flatten(1))


x = torch.randn(16, 1, 8, 8, dtype=torch.float64)
y = torch.randn(16, 1, dtype=torch.float64)
model = Net().double()


def loss_at(weight: torch.Tensor) -> float:
    """The loss with the convolution's weights replaced (the model's own forward)."""
    with torch.no_grad():
        saved = model.conv.weight.clone()
        model.conv.weight.copy_(weight)
        value = float(F.mse_loss(model(x), y))
        model.conv.weight.copy_(saved)
    return value


# ----- the oracle: <g, d> equals the one-sided derivative along d -----
W = model.conv.weight.detach().clone()
d = torch.randn_like(W)
slopes = [(loss_at(W + h * d) - loss_at(W)) / h for h in (1e-6, 1e-7)]
one_sided = 2 * slopes[1] - slopes[0]                 # Richardson: the O(h) error removed
g = asd.torch.subgrad(lambda x: F.mse_loss(model(x), y), x, argnums="params",
                      direction={k: (d if k == "model.conv.weight" else torch.zeros_like(p))
                                 for k, p in ((f"model.{n}", p)
                                              for n, p in model.named_parameters())})
asd_slope = float((g["model.conv.weight"] * d).sum())
model.zero_grad()
F.mse_loss(model(x), y).backward()
torch_slope = float((model.conv.weight.grad * d).sum())
print(f"one-sided derivative along d: {one_sided:+.6f}")
print(f"<asd's limiting gradient, d>: {asd_slope:+.6f}")
print(f"<PyTorch's gradient, d>:      {torch_slope:+.6f}")
assert abs(asd_slope - one_sided) <= 1e-5 * max(1.0, abs(one_sided)), "asd disagrees"
assert torch_slope == 0.0 and abs(one_sided) > 1e-3, "PyTorch was expected to err here"


# ----- training: the same SGD loop, with PyTorch's backward and with asd's -----
def train(net: nn.Module, forward, steps: int = 20) -> list[float]:
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


plain, dropped = copy.deepcopy(model), copy.deepcopy(model)
torch_losses = train(plain, plain)
asd_losses = train(dropped, asd.torch.function(dropped, seed=0))
print(f"PyTorch: loss {torch_losses[0]:.4f} -> {torch_losses[-1]:.4f}, "
      f"conv weights all zero: {bool((plain.conv.weight == 0).all())}")
print(f"asd:     loss {asd_losses[0]:.4f} -> {asd_losses[-1]:.4f}, "
      f"conv weights all zero: {bool((dropped.conv.weight == 0).all())}")
assert bool((plain.conv.weight == 0).all()), "PyTorch's convolution was expected to stay at 0"
assert not bool((dropped.conv.weight == 0).all()) and asd_losses[-1] < torch_losses[-1]
