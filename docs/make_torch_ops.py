"""Write ``docs/torch-ops.md``: the PyTorch operations people use, and what ``asd.torch``
does with each, measured by running it.

Usage: ``python docs/make_torch_ops.py [OUTPUT]`` (default: ``docs/torch-ops.md`` next to
this script). Each row is a small program using the operation; it is imported and
differentiated at a random point (off every kink), and its subgradient is compared with
torch autograd's there. asd either maps an operation itself (an ``asd.frontends.torch.ATEN``
handler, whose rule knows the operation's kinks) or runs torch's own decomposition of it
into mapped operations (the same function, whose ties asd's rules decide), or refuses it
with its reason; the last column says on which array library the sweep ran (``torch``
natively, or ``numpy`` and the operation that forced the fallback).
``tests/frontends/test_torch_ops.py`` checks the committed file is current.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import asd.torch
import numpy as np
import torch

from asd.frontends import torch as front

F = torch.nn.functional
nn = torch.nn


def _seeded(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


W = _seeded((4, 4), 7)
LABELS = torch.tensor([1, 0, 3])
PROBS = torch.softmax(_seeded((3, 4), 8), dim=1)


def _module(m: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return m.double().eval()


CONV_T, LSTM, GRU = (_module(nn.ConvTranspose2d(1, 2, 3, stride=2)),
                     _module(nn.LSTM(4, 3, batch_first=True)),
                     _module(nn.GRU(4, 3, batch_first=True)))
ATTN = _module(nn.MultiheadAttention(4, 2, batch_first=True))
GROUP, INSTANCE, LAYER = (_module(nn.GroupNorm(2, 4)), _module(nn.InstanceNorm2d(4)),
                          _module(nn.LayerNorm(4)))
BATCH, EMBED = _module(nn.BatchNorm2d(4)), _module(nn.Embedding(5, 4))
BATCH.running_mean.uniform_(-0.5, 0.5)


def _written(x):
    """Constants written into an activation in place."""
    h = x * 2.0
    h[:, 0] = 0.5
    h[1].zero_()
    return h


def _img(x):
    return x.reshape(1, 4, 2, 2)


def _seq(x):
    return x.reshape(1, 4, 4)


# name -> (program of a float64 tensor of shape (4, 4), category)
OPS: dict[str, tuple[Callable, str]] = {
    # activations
    "relu": (lambda x: F.relu(x).sum(), "activation"),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1).sum(), "activation"),
    "hardtanh": (lambda x: F.hardtanh(x).sum(), "activation"),
    "relu6": (lambda x: F.relu6(3 * x).sum(), "activation"),
    "elu": (lambda x: F.elu(x).sum(), "activation"),
    "selu": (lambda x: F.selu(x).sum(), "activation"),
    "celu": (lambda x: F.celu(x).sum(), "activation"),
    "gelu": (lambda x: F.gelu(x).sum(), "activation"),
    "gelu (tanh)": (lambda x: F.gelu(x, approximate="tanh").sum(), "activation"),
    "silu": (lambda x: F.silu(x).sum(), "activation"),
    "mish": (lambda x: F.mish(x).sum(), "activation"),
    "softplus": (lambda x: F.softplus(x).sum(), "activation"),
    "sigmoid": (lambda x: torch.sigmoid(x).sum(), "activation"),
    "tanh": (lambda x: torch.tanh(x).sum(), "activation"),
    "hardswish": (lambda x: F.hardswish(4 * x).sum(), "activation"),
    "hardsigmoid": (lambda x: F.hardsigmoid(4 * x).sum(), "activation"),
    "softmax": (lambda x: (F.softmax(x, 1) * W).sum(), "activation"),
    "log_softmax": (lambda x: (F.log_softmax(x, 1) * W).sum(), "activation"),
    # normalization and regularization
    "layer_norm": (lambda x: (LAYER(x) * W).sum(), "normalization"),
    "batch_norm (eval)": (lambda x: (BATCH(_img(x)) ** 2).sum(), "normalization"),
    "group_norm": (lambda x: (GROUP(_img(x)) * _img(W)).sum(), "normalization"),
    "instance_norm": (lambda x: (INSTANCE(_img(x)) * _img(W)).sum(), "normalization"),
    "dropout (eval)": (lambda x: F.dropout(x, 0.5, training=False).sum(), "normalization"),
    # layers
    "linear": (lambda x: F.linear(x, W, W[0]).sum(), "layer"),
    "conv1d": (lambda x: F.conv1d(x[None], W[:, :, None].repeat(1, 1, 2)).sum(), "layer"),
    "conv2d": (lambda x: (F.conv2d(_img(x), _img(W)[:, :, :1, :]) ** 2).sum(), "layer"),
    "conv2d padding='same'": (lambda x: (F.conv2d(x[None, None], W[None, None, :3, :3],
                                                  padding="same") ** 2).sum(), "layer"),
    "conv_transpose2d": (lambda x: (CONV_T(x[None, None]) ** 2).sum(), "layer"),
    "embedding": (lambda x: (EMBED(LABELS) * x[:3]).sum(), "layer"),
    "multi-head attention": (lambda x: (ATTN(_seq(x), _seq(x), _seq(x))[0] ** 2).sum(),
                             "layer"),
    "scaled_dot_product_attention": (lambda x: (F.scaled_dot_product_attention(
        x[None], x[None] * 0.5, x[None]) ** 2).sum(), "layer"),
    "lstm": (lambda x: (LSTM(x[None])[0] ** 2).sum(), "layer"),
    "gru": (lambda x: (GRU(x[None])[0] ** 2).sum(), "layer"),
    # pooling and resampling
    "max_pool2d": (lambda x: F.max_pool2d(x[None, None], 2).sum(), "pooling"),
    "max_pool2d ceil_mode": (lambda x: F.max_pool2d(x[None, None, :, :3], 2,
                                                    ceil_mode=True).sum(), "pooling"),
    "avg_pool2d": (lambda x: (F.avg_pool2d(x[None, None], 2) ** 2).sum(), "pooling"),
    "adaptive_avg_pool2d": (lambda x: (F.adaptive_avg_pool2d(x[None, None], 2) ** 2).sum(),
                            "pooling"),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x[None, None], 2).sum(),
                            "pooling"),
    "interpolate nearest": (lambda x: (F.interpolate(x[None, None], scale_factor=2) ** 2)
                            .sum(), "pooling"),
    "interpolate bilinear": (lambda x: (F.interpolate(
        x[None, None], scale_factor=2, mode="bilinear") ** 2).sum(), "pooling"),
    "pad constant": (lambda x: (F.pad(x, (1, 2)) * 2).sum(), "pooling"),
    "pad reflect": (lambda x: (F.pad(x[None], (1, 1), mode="reflect") ** 2).sum(), "pooling"),
    "pad replicate": (lambda x: (F.pad(x[None], (1, 1), mode="replicate") ** 2).sum(),
                      "pooling"),
    "pad circular": (lambda x: (F.pad(x[None], (1, 1), mode="circular") ** 2).sum(),
                     "pooling"),
    # losses
    "cross_entropy": (lambda x: F.cross_entropy(x[:3], LABELS), "loss"),
    "cross_entropy label smoothing": (lambda x: F.cross_entropy(x[:3], LABELS,
                                                                label_smoothing=0.1), "loss"),
    "nll_loss": (lambda x: F.nll_loss(F.log_softmax(x[:3], 1), LABELS), "loss"),
    "nll_loss (2-d)": (lambda x: F.nll_loss(F.log_softmax(_img(x), 1)[:, :, :1, :],
                                            LABELS[None, None, :2]), "loss"),
    "mse_loss": (lambda x: F.mse_loss(x, W), "loss"),
    "l1_loss": (lambda x: F.l1_loss(x, W), "loss"),
    "smooth_l1_loss": (lambda x: F.smooth_l1_loss(x, W), "loss"),
    "huber_loss": (lambda x: F.huber_loss(x, W), "loss"),
    "binary_cross_entropy": (lambda x: F.binary_cross_entropy(torch.sigmoid(x),
                                                              torch.sigmoid(W)), "loss"),
    "binary_cross_entropy_with_logits": (lambda x: F.binary_cross_entropy_with_logits(
        x, torch.sigmoid(W)), "loss"),
    "kl_div": (lambda x: F.kl_div(F.log_softmax(x[:3], 1), PROBS, reduction="batchmean"),
               "loss"),
    "margin_ranking_loss": (lambda x: F.margin_ranking_loss(x[0], x[1], torch.sign(W[0]),
                                                            margin=0.5), "loss"),
    "hinge_embedding_loss": (lambda x: F.hinge_embedding_loss(x, torch.sign(W)), "loss"),
    # tensor operations
    "matmul / bmm / baddbmm": (lambda x: (torch.baddbmm(x[None], x[None], x[None]) ** 2)
                               .sum(), "tensor"),
    "einsum": (lambda x: torch.einsum("ij,jk->ik", x, x).sum(), "tensor"),
    "cat / stack": (lambda x: (torch.cat([x, torch.stack([x[0], x[1]])]) ** 2).sum(),
                    "tensor"),
    "repeat": (lambda x: (x.repeat(2, 1) * torch.arange(8.0)[:, None]).sum(), "tensor"),
    "flip": (lambda x: (x.flip(0) * W).sum(), "tensor"),
    "split": (lambda x: (x.split(1, 0)[2] ** 2).sum(), "tensor"),
    "tril": (lambda x: (torch.tril(x) ** 2).sum(), "tensor"),
    "diff": (lambda x: (torch.diff(x, dim=1) ** 2).sum(), "tensor"),
    "masked_fill": (lambda x: (x.masked_fill(W > 0, 0.5) ** 2).sum(), "tensor"),
    "index_fill": (lambda x: (x.index_fill(1, torch.tensor([0, 2]), 0.5) ** 2).sum(),
                   "tensor"),
    "gather": (lambda x: torch.gather(x, 1, LABELS[:, None].expand(3, 2)).sum(), "tensor"),
    "where": (lambda x: torch.where(W > 0, x, x ** 2).sum(), "tensor"),
    "clamp": (lambda x: torch.clamp(x, -0.5, 0.5).sum(), "tensor"),
    "roll / index_select": (lambda x: (torch.roll(x, 1, 0) * W).sum() + torch.index_select(
        x, 1, torch.tensor([2, 0])).square().sum(), "tensor"),
    "in-place writes (h[:, 0] = c, zero_)": (lambda x: (_written(x) * W).square().sum(),
                                             "tensor"),
    "dtype casts (.float(), .double(), .to)": (lambda x: (torch.relu(x.float()).double() * W)
                                               .sum() + x.to(torch.float32).square().sum()
                                               .double(), "tensor"),
    "indexing by a 0-d tensor": (lambda x: x[torch.tensor(2)].square().sum(), "tensor"),
    # elementwise and reductions
    "exp / log / sqrt": (lambda x: (torch.exp(x) + torch.log(x * x + 1)
                                    + torch.sqrt(x * x + 1)).sum(), "elementwise"),
    "sin / cos": (lambda x: (torch.sin(x) * torch.cos(x)).sum(), "elementwise"),
    "rsqrt": (lambda x: torch.rsqrt(x * x + 1).sum(), "elementwise"),
    "erf": (lambda x: torch.erf(x).sum(), "elementwise"),
    "abs": (lambda x: x.abs().sum(), "elementwise"),
    "sign (a constant factor)": (lambda x: (x * torch.sign(x)).sum(), "elementwise"),
    "floor / ceil / trunc / frac": (lambda x: (torch.floor(x * 3) * x + torch.ceil(x * 3) * W
                                                + torch.trunc(x * 3) * x + torch.frac(x * 3))
                                   .sum(), "step function"),
    "round (and decimals)": (lambda x: (torch.round(x * 3) * x + torch.round(x, decimals=1)
                                        * W).sum(), "step function"),
    "remainder / fmod (%)": (lambda x: (torch.remainder(x, W) + torch.fmod(x, W) + x % 0.3
                                        + torch.fmod(x, -0.3) * W).sum(), "step function"),
    "div rounding_mode floor / trunc": (lambda x: (torch.div(x, W, rounding_mode="floor") * x
                                                   + torch.div(x, W, rounding_mode="trunc") * W
                                                   + torch.div(x, 0.3, rounding_mode="floor")
                                                   * x).sum(), "step function"),
    "sign / sgn": (lambda x: (torch.sign(x) * W + torch.sgn(x) * x).sum(), "step function"),
    "bitwise and / or / xor / not of comparisons": (lambda x: torch.where(
        ((x > 0) & (W < 0)) | ~(x > W) ^ (x < -0.5), x, x * W).sum(), "step function"),
    "fmax / fmin": (lambda x: (torch.fmax(x, W) * 2 + torch.fmin(x, W * 0.5)).sum(),
                    "elementwise"),
    "hypot": (lambda x: torch.hypot(x, W).sum(), "elementwise"),
    "diagonal": (lambda x: (torch.diagonal(x, 1) ** 2).sum() + torch.diagonal(
        x[None] * x[:, None], -1, 0, 2).sum(), "tensor"),
    "kthvalue": (lambda x: torch.kthvalue(x, 2, dim=1).values.square().sum()
                 + torch.kthvalue(x.reshape(-1), 5).values, "reduction"),
    "cumsum": (lambda x: (torch.cumsum(x, 1) ** 2).sum(), "reduction"),
    "prod": (lambda x: x[:, :2].prod(), "reduction"),
    "var / std": (lambda x: x.var() + x.std(1).sum(), "reduction"),
    "logsumexp": (lambda x: torch.logsumexp(x, 1).sum(), "reduction"),
    "sum / mean": (lambda x: x.sum() + x.mean(0).sum(), "reduction"),
    "max / min (dim)": (lambda x: x.max(1).values.sum() - x.min(0).values.sum(), "reduction"),
    "amax": (lambda x: x.amax(1).sum(), "reduction"),
    "sort / topk": (lambda x: (torch.sort(x, 1).values * W).sum() + torch.topk(x, 2)
                    .values.sum(), "reduction"),
    "median": (lambda x: x.median(), "reduction"),
    "median (dim)": (lambda x: torch.median(x, 1).values.square().sum(), "reduction"),
    "argmax / argmin (as indices)": (lambda x: torch.gather(x, 1, torch.argmax(
        x, 1, keepdim=True)).sum() + x.reshape(-1)[torch.argmin(x)], "reduction"),
    "quantile": (lambda x: torch.quantile(x, 0.3), "reduction"),
    "norm": (lambda x: torch.linalg.vector_norm(x), "reduction"),
    "cdist": (lambda x: torch.cdist(x[:2], x[2:]).sum(), "reduction"),
    # linear algebra
    "svd / svdvals": (lambda x: torch.linalg.svdvals(x).square().sum() + sum(
        (p * W).sum() for p in torch.linalg.svd(x)[::2]), "linear algebra"),
    "eigh / eigvalsh": (lambda x: torch.linalg.eigvalsh(x + x.T)[-1] + (torch.linalg.eigh(
        x + x.T)[1] * W).sum(), "linear algebra"),
}

X = _seeded((4, 4), 1) + 0.05   # a random point: off every kink of every row


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text.split(" (node ")[0].split(" [while importing")[0][:140].replace("|", "\\|")


def row(name: str) -> tuple[str, str, str, str]:
    fn, category = OPS[name]
    x = X.clone()
    native_backward = asd.torch.NATIVE_BACKWARD
    asd.torch.NATIVE_BACKWARD = False     # asd's sweep (not PyTorch's autograd) answers
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, g = asd.torch.value_and_subgrad(fn, x)
            prog = front.import_program(fn, x)
    except asd.ASDError as e:
        return name, category, "refused", _first_line(e)
    finally:
        asd.torch.NATIVE_BACKWARD = native_backward
    ref = x.clone().requires_grad_(True)
    fn(ref).backward()
    if not np.allclose(g.numpy(), ref.grad.numpy(), rtol=1e-7, atol=1e-9):
        return name, category, "MISMATCH", "differs from autograd at a smooth point"
    backend = prog.backend.split(" (because: ")
    where = backend[0] + (f" ({backend[1].split(';')[0].rstrip(')')})" if len(backend) > 1
                          else "")
    return name, category, "supported", where


def render() -> str:
    rows = [row(name) for name in OPS]
    supported = sum(r[2] == "supported" for r in rows)
    lines = [
        "# PyTorch operations in `asd.torch`",
        "",
        f"torch {torch.__version__.split('+')[0]}: {supported} of {len(rows)} common "
        "operations import and match autograd off their kinks.",
        "",
        "Generated by `python docs/make_torch_ops.py`: each operation runs in a small "
        "program, imported through `torch.export` and differentiated at a random point, and "
        "its subgradient is compared with autograd's there. Operations without an "
        "`asd.frontends.torch.ATEN` handler run as torch's own decomposition into handled "
        "operations (the same function; asd's rules decide its ties). *Sweep* says where the "
        "sweep ran: `torch` natively, or `numpy` and the first operation without an "
        "array-API rule.",
        "",
        "| operation | kind | status | sweep / reason |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{n}` | {c} | {s} | {w} |" for n, c, s, w in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("torch-ops.md")
    out.write_text(render(), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv)
