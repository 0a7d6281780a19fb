"""asd on PyTorch models against PyTorch itself, on the model's own device and dtype.

What a PyTorch user pays for correct subgradients: ``asd.torch.value_and_subgrad`` with
respect to the input and the weights against torch's forward+backward, and a training step
whose backward is asd's (``asd.torch.function``) against a plain torch step, eagerly and
under ``torch.compile`` (both steps compiled). The models are the ones issue 25 names: a small
CNN (two conv-relu-maxpool blocks and a dense layer), a 1 ms CNN step, an MLP, a residual
network, a transformer encoder block, and two with ties in every layer: a zero-initialised
first convolution (every pre-activation of its ReLUs exactly 0; the steps run with a zero
learning rate so that every step meets them) and a CNN whose negative biases leave most
pooling windows dead (all candidates 0).

Each row is checked: off ties against torch's gradient (at a random initialisation no
pre-activation is exactly 0, and the only ties are pooling windows of dead ReLUs, where every
branch passes no gradient, so the two must agree); with ties against asd's full sweep at every
call (``asd.torch.NATIVE_BACKWARD = False``), whose element the drop-in must return.

Timing is interleaved like the numpy programs' (``runner.time_interleaved``); on CUDA every
call ends with ``torch.cuda.synchronize`` so the time is the work, not its launch.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .peers import Contender

# (program, numerator, denominator, limit): ratios issue 25 sets
TARGETS = (
    ("cnn", "asd", "torch", 1.2),
    ("train-step mlp", "asd step", "torch step", 1.1),
    ("train-step cnn", "asd step", "torch step", 1.1),
    ("train-step residual", "asd step", "torch step", 1.1),
    ("train-step transformer", "asd step", "torch step", 1.1),
    ("train-step cnn-1ms", "asd step", "torch step", 1.3),
    ("train-step zero-init conv", "asd step", "torch step", 1.5),
    ("train-step dead windows", "asd step", "torch step", 1.5),
    ("compiled-step cnn", "asd step", "torch step", 1.2),
    ("compiled-step mlp", "asd step", "torch step", 1.2),
)


@dataclass
class TorchProgram:
    name: str
    about: str
    make: Callable  # (device, dtype, quick) -> (model, x, y)
    ties: bool = False
    """Whether the row meets ties that matter (its reference is asd's full sweep, and its
    training step runs with a zero learning rate so that every step meets them)."""


def _models(torch):
    nn = torch.nn

    class CNN(nn.Module):
        def __init__(self, c1=8, c2=16, side=28):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(1, c1, 3), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(c1, c2, 3), nn.ReLU(), nn.MaxPool2d(2))
            out = ((side - 2) // 2 - 2) // 2
            self.head = nn.Linear(c2 * out * out, 10)

        def forward(self, x):
            return self.head(self.body(x).flatten(1))

    class Residual(nn.Module):
        def __init__(self, width=16, blocks=3):
            super().__init__()
            self.stem = nn.Conv2d(1, width, 3, padding=1)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(width, width, 3, padding=1)) for _ in range(blocks))
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            h = torch.relu(self.stem(x))
            for block in self.blocks:
                h = torch.relu(h + block(h))
            return self.head(h.mean(dim=(2, 3)))

    class Encoder(nn.Module):
        def __init__(self, width=64, heads=4):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                                    activation="gelu", batch_first=True)
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            return self.head(self.layer(x).mean(dim=1))

    def mlp():
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))

    return CNN, Residual, mlp, Encoder


def programs(torch) -> list[TorchProgram]:
    CNN, Residual, mlp, Encoder = _models(torch)

    def images(build, side, batch=32, quick_batch=4, prepare=None):
        def make(device, dtype, quick):
            torch.manual_seed(0)
            model = build().to(device=device, dtype=dtype)
            if prepare is not None:
                with torch.no_grad():
                    prepare(model)
            n = quick_batch if quick else batch
            x = torch.randn(n, 1, side, side, device=device, dtype=dtype)
            return model, x, torch.randint(0, 10, (n,), device=device)
        return make

    def vectors(device, dtype, quick):
        torch.manual_seed(0)
        batch = 8 if quick else 128
        model = mlp().to(device=device, dtype=dtype)
        x = torch.randn(batch, 64, device=device, dtype=dtype)
        return model, x, torch.randint(0, 10, (batch,), device=device)

    def sequences(device, dtype, quick):
        torch.manual_seed(0)
        batch, tokens = (2, 8) if quick else (16, 32)
        model = Encoder().to(device=device, dtype=dtype).eval()
        x = torch.randn(batch, tokens, 64, device=device, dtype=dtype)
        return model, x, torch.randint(0, 10, (batch,), device=device)

    def zero_first(model):
        model.body[0].weight.zero_()
        model.body[0].bias.zero_()

    def dead(model):
        model.body[0].bias.fill_(-0.5)
        model.body[3].bias.fill_(-0.5)

    return [
        TorchProgram("cnn", "conv(1->8)-relu-maxpool-conv(8->16)-relu-maxpool-dense, 28x28",
                     images(CNN, 28)),
        TorchProgram("cnn-1ms", "the CNN at 4->8 channels, 16x16, batch 16 (a ~1 ms step)",
                     images(lambda: CNN(4, 8, 16), 16, batch=16)),
        TorchProgram("mlp", "64-256-256-10 ReLU MLP", vectors),
        TorchProgram("residual", "conv stem and 3 residual conv-relu-conv blocks, 16x16",
                     images(Residual, 16)),
        TorchProgram("transformer", "encoder block (attention, layer norm, GELU), 32 tokens x "
                     "64, batch 16", sequences),
        TorchProgram("zero-init conv", "the CNN with a zero first convolution: every ReLU of "
                     "its layer tied", images(CNN, 28, prepare=zero_first), ties=True),
        TorchProgram("dead windows", "the CNN with biases -0.5: most pooling windows all 0",
                     images(CNN, 28, prepare=dead)),
    ]


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def value_and_grad_contenders(torch, model, x, labels) -> list[Contender]:
    """torch's forward+backward and asd's value and subgradient, both w.r.t. input and
    weights, of the cross-entropy of the model."""
    import asd.torch

    def loss(inp):
        return torch.nn.functional.cross_entropy(model(inp), labels)

    params = dict(model.named_parameters())

    def run_torch():
        inp = x.detach().requires_grad_(True)
        value = loss(inp)
        grads = torch.autograd.grad(value, [inp, *params.values()])
        _sync(torch, x.device)
        return value, grads

    def run_asd():
        value, (gx, gp) = asd.torch.value_and_subgrad(loss, x, argnums=(0, "params"), seed=0)
        _sync(torch, x.device)
        return value, (gx, *(gp[f"model.{n}"] for n in params))

    return [Contender("torch", run_torch, None, False), Contender("asd", run_asd, None, False)]


def step_contenders(torch, model, x, labels, lr=1e-3, compiled=False) -> list[Contender]:
    """One SGD step with torch's backward against one with asd's (a drop-in module); with
    ``compiled``, each step's forward and loss under ``torch.compile``."""
    import asd.torch

    plain = model
    dropped = copy.deepcopy(model)
    asd_forward = asd.torch.function(dropped, seed=0)
    opt_plain = torch.optim.SGD(plain.parameters(), lr=lr)
    opt_asd = torch.optim.SGD(dropped.parameters(), lr=lr)

    def loss_of(forward):
        def loss(inp, y):
            return torch.nn.functional.cross_entropy(forward(inp), y)
        # dynamic=False: both steps specialised to the batch (the rows share this code)
        return torch.compile(loss, fullgraph=True, dynamic=False) if compiled else loss

    def step(forward, module, opt):
        loss = loss_of(forward)

        def run():
            opt.zero_grad(set_to_none=True)
            value = loss(x, labels)
            value.backward()
            grads = tuple(p.grad.clone() for p in module.parameters())
            opt.step()
            _sync(torch, x.device)
            return value, grads
        return run

    return [Contender("torch step", step(plain, plain, opt_plain), None, False),
            Contender("asd step", step(asd_forward, dropped, opt_asd), None, False)]


def _errors(results: dict, reference: tuple) -> dict:
    want = [g.detach().double().cpu().numpy() for g in reference[1]]
    scale = max(1.0, max(float(np.abs(w).max()) for w in want))
    return {name: max(float(np.abs(g.detach().double().cpu().numpy() - w).max())
                      for g, w in zip(grads, want, strict=True)) / scale
            for name, (_, grads) in results.items()}


def _check(torch, cands: list[Contender], dtype, full_sweep: Callable | None = None) -> dict:
    """Relative error of asd's gradients on a fresh call: against torch's off ties, against
    asd's full sweep at every call (the asd contender of ``full_sweep()``, run with
    ``asd.torch.NATIVE_BACKWARD = False``) where ties matter."""
    import asd.torch

    mine, theirs = cands[1], cands[0]
    got = {mine.name: mine.run()}
    if full_sweep is None:
        reference, ref = theirs.name, theirs.run()
    else:
        old = asd.torch.NATIVE_BACKWARD
        asd.torch.NATIVE_BACKWARD = False
        try:
            reference, ref = "asd full sweep", full_sweep()[1].run()
        finally:
            asd.torch.NATIVE_BACKWARD = old
    errors = _errors(got, ref)
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    return {"reference": reference, "relative_error": errors, "tolerance": tol,
            "ok": all(e <= tol for e in errors.values())}


def devices(torch) -> list:
    out = [torch.device("cpu")]
    if torch.cuda.is_available():
        out.append(torch.device("cuda"))
    return out


KINDS = ("value+grad", "train-step", "compiled-step")
COMPILED = ("cnn", "mlp")
"""The programs whose training step is also timed under torch.compile (compiling costs a
minute or more each on a small CPU)."""


def _wanted(only: str | None, name: str) -> bool:
    """Whether ``--only`` selects the row: its text is in the row's name or in "torch
    <name>" (so ``asd bench --only torch`` runs every PyTorch row, as ``--only jax`` runs
    every JAX one)."""
    return only is None or only in name or only in f"torch {name}"


def run(quick: bool, reps: int, warmup: int, only: str | None = None) -> list[dict]:
    """One row per (program, kind, device): medians, the asd/torch ratio and the check."""
    import torch

    from .runner import time_interleaved

    rows = []
    for device in devices(torch):
        for prog in programs(torch):
            for kind in KINDS:
                if kind == "value+grad" and prog.ties:
                    continue
                if kind == "compiled-step" and (prog.name not in COMPILED or quick):
                    continue
                name = prog.name if kind == "value+grad" else f"{kind} {prog.name}"
                if not _wanted(only, name):
                    continue
                lr = 0.0 if prog.ties else 1e-3

                def make(prog=prog, kind=kind, lr=lr, device=device):
                    model, x, labels = prog.make(device, torch.float32, quick)
                    if kind == "value+grad":
                        return value_and_grad_contenders(torch, model, x, labels)
                    return step_contenders(torch, model, x, labels, lr,
                                           compiled=kind == "compiled-step")

                cands = make()
                check = _check(torch, cands, torch.float32, make if prog.ties else None)
                times = time_interleaved(cands, reps, warmup)
                medians = {c.name: 1e3 * statistics.median(times[c.name]) for c in cands}
                num, den = cands[1].name, cands[0].name
                rows.append({"name": name, "about": prog.about, "device": str(device),
                             "dtype": "float32", "median_ms": medians,
                             "ratio": medians[num] / medians[den],
                             "ratio_of": f"{num} / {den}", "check": check})
    return rows


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for program, num, den, limit in TARGETS:
        for r in rows:
            if r["name"] == program and r["ratio_of"] == f"{num} / {den}":
                out.append({"target": f"{program} on {r['device']}: {num} / {den}",
                            "program": r["name"], "ratio": r["ratio"], "limit": limit,
                            "met": r["ratio"] <= limit})
    return out


def table(rows: list[dict]):
    from rich.table import Table

    t = Table(title="asd on PyTorch models: median ms per call, float32", title_justify="left")
    for col in ("program", "device", "torch", "asd", "ratio", "check"):
        t.add_column(col, justify="left" if col in ("program", "device") else "right")
    for r in rows:
        torch_ms, asd_ms = (r["median_ms"][k] for k in r["ratio_of"].split(" / ")[::-1])
        t.add_row(r["name"], r["device"], f"{torch_ms:.3g}", f"{asd_ms:.3g}",
                  f"{r['ratio']:.2f}", "ok" if r["check"]["ok"] else "FAIL")
    return t
