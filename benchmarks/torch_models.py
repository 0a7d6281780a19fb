"""asd on PyTorch models against PyTorch itself, on the model's own device and dtype.

What a PyTorch user pays for correct subgradients: ``asd.torch.value_and_subgrad`` with
respect to the input and the weights against torch's forward+backward, and a training step
whose backward is asd's (``asd.torch.function``) against a plain torch step. The models are
the ones the backends issue names: a small CNN (two conv-relu-maxpool blocks and a dense
layer), an MLP, and a residual network. Each row is checked against torch's gradient: at the
random initialisation no pre-activation is exactly 0, and the only ties are pooling windows of
dead ReLUs (all 0), where every branch passes no gradient, so the two must agree.

Timing is interleaved like the numpy programs' (``runner.time_interleaved``); on CUDA every
call ends with ``torch.cuda.synchronize`` so the time is the work, not its launch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .peers import Contender

# (program, numerator, denominator, limit): ratios the backends issue sets
TARGETS = (("cnn", "asd", "torch", 1.5), ("train-step cnn", "asd step", "torch step", 1.5))


@dataclass
class TorchProgram:
    name: str
    about: str
    make: Callable  # (torch, device, dtype, quick) -> (model, x, y)


def _models(torch):
    nn = torch.nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2))
            self.head = nn.Linear(16 * 5 * 5, 10)

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

    def mlp():
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))

    return CNN, Residual, mlp


def programs(torch) -> list[TorchProgram]:
    CNN, Residual, mlp = _models(torch)

    def images(model_cls, side):
        def make(device, dtype, quick):
            torch.manual_seed(0)
            batch = 4 if quick else 32
            model = model_cls().to(device=device, dtype=dtype)
            x = torch.randn(batch, 1, side, side, device=device, dtype=dtype)
            return model, x, torch.randint(0, 10, (batch,), device=device)
        return make

    def vectors(device, dtype, quick):
        torch.manual_seed(0)
        batch = 8 if quick else 128
        model = mlp().to(device=device, dtype=dtype)
        x = torch.randn(batch, 64, device=device, dtype=dtype)
        return model, x, torch.randint(0, 10, (batch,), device=device)

    return [
        TorchProgram("cnn", "conv(1->8)-relu-maxpool-conv(8->16)-relu-maxpool-dense, 28x28",
                     images(CNN, 28)),
        TorchProgram("mlp", "64-256-256-10 ReLU MLP", vectors),
        TorchProgram("residual", "conv stem and 3 residual conv-relu-conv blocks, 16x16",
                     images(Residual, 16)),
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


def step_contenders(torch, model, x, labels) -> list[Contender]:
    """One SGD step with torch's backward against one with asd's (a drop-in module)."""
    import copy

    import asd.torch

    plain = model
    dropped = copy.deepcopy(model)
    asd_forward = asd.torch.function(dropped, seed=0)
    opt_plain = torch.optim.SGD(plain.parameters(), lr=1e-3)
    opt_asd = torch.optim.SGD(dropped.parameters(), lr=1e-3)

    def step(forward, module, opt):
        def run():
            opt.zero_grad(set_to_none=True)
            value = torch.nn.functional.cross_entropy(forward(x), labels)
            value.backward()
            grads = tuple(p.grad.clone() for p in module.parameters())
            opt.step()
            _sync(torch, x.device)
            return value, grads
        return run

    return [Contender("torch step", step(plain, plain, opt_plain), None, False),
            Contender("asd step", step(asd_forward, dropped, opt_asd), None, False)]


def _check(torch, cands: list[Contender], reference: str, dtype) -> dict:
    """Relative error of each contender's gradients against ``reference``'s, on fresh calls."""
    results = {c.name: c.run() for c in cands}
    want = [g.detach().double().cpu().numpy() for g in results[reference][1]]
    errors = {}
    for name, (_, grads) in results.items():
        if name == reference:
            continue
        got = [g.detach().double().cpu().numpy() for g in grads]
        scale = max(1.0, max(float(np.abs(w).max()) for w in want))
        errors[name] = max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True))
        errors[name] /= scale
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    return {"reference": reference, "relative_error": errors, "tolerance": tol,
            "ok": all(e <= tol for e in errors.values())}


def devices(torch) -> list:
    out = [torch.device("cpu")]
    if torch.cuda.is_available():
        out.append(torch.device("cuda"))
    return out


def run(quick: bool, reps: int, warmup: int, only: str | None = None) -> list[dict]:
    """One row per (program, device): medians, the asd/torch ratio and the gradient check."""
    import torch

    from .runner import time_interleaved

    rows = []
    for device in devices(torch):
        for prog in programs(torch):
            for kind in ("value+grad", "train-step"):
                name = prog.name if kind == "value+grad" else f"train-step {prog.name}"
                if only is not None and only not in name:
                    continue
                model, x, labels = prog.make(device, torch.float32, quick)
                make = value_and_grad_contenders if kind == "value+grad" else step_contenders
                cands = make(torch, model, x, labels)
                check = _check(torch, cands, cands[0].name, torch.float32)
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
