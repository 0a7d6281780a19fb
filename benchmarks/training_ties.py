"""How often does training meet a kink, and does PyTorch's gradient stay a Clarke subgradient?

The study behind docs/training-ties.md, reproducible: MLPs and CNNs trained with plain SGD on
scikit-learn's digits (8x8 images with integer pixels 0..16, installed with the package, no
download) and on a synthetic dataset (quantized Gaussian blobs with exact zeros), in float64,
float32, bfloat16 and float16. Each configuration is trained three times from the same
initialization on the same batches:

- ``relu'(0) = 0``: PyTorch's own ReLU, watched by `asd.torch.audit` at every step (the census
  of ties per layer and primitive, asd's element and the certified verdict), and by a hook
  recording whether the step is *bifurcating*: a tied ReLU entry receives a nonzero incoming
  gradient, so that relu'(0) = 1 would have changed the backpropagated gradient (Bertoin,
  Bolte, Gerchinovitz and Pauwels, NeurIPS 2021, measure that);
- ``relu'(0) = 1``: the same network with a ReLU whose backward takes slope 1 at 0;
- ``asd``: the same network through `asd.torch.function` (asd's subgradient).

``python -m asd.benchmarks.training_ties`` runs the full settings (about 10 minutes on one
busy CPU core) and rewrites the generated part of docs/training-ties.md and its figures;
``--small`` runs the settings CI runs (about a minute); ``--overhead`` measures the monitor's
cost per step on the test models in the four dtypes (the `MODELS` zoo).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
VARIANTS = ("relu'(0)=0", "relu'(0)=1", "asd")

# ----- data -----


def digits(n: int | None = None, seed: int = 0):
    """scikit-learn's digits as ``(X_train, y_train, X_test, y_test)``: 1797 8x8 images with
    pixels 0..16 (kept as integers: exact zeros and a coarse grid, as raw images are)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    X, y = torch.tensor(data.data), torch.tensor(data.target)
    return _split(X, y, n, seed)


def synthetic(n: int | None = 1800, seed: int = 0):
    """Ten Gaussian blobs in 64 dimensions, shifted down and clipped at 0 (so half the
    features are exact zeros) and quantized to multiples of 1/4."""
    rng = np.random.default_rng(seed)
    n = 1800 if n is None else n
    centers = rng.standard_normal((10, 64))
    y = rng.integers(0, 10, n)
    X = centers[y] + 0.8 * rng.standard_normal((n, 64)) - 0.5
    X = np.round(4 * np.maximum(X, 0.0)) / 4
    return _split(torch.tensor(X), torch.tensor(y), None, seed)


def _split(X, y, n, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(X), generator=g)
    if n is not None:
        perm = perm[:n]
    cut = int(0.8 * len(perm))
    return X[perm[:cut]], y[perm[:cut]], X[perm[cut:]], y[perm[cut:]]


DATASETS = {"digits": digits, "synthetic": synthetic}

# ----- models: the zoo the monitor is tested and benchmarked on -----


def mlp(width: int = 128) -> nn.Module:
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def cnn(channels: int = 8) -> nn.Module:
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, channels, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(channels, 2 * channels, 3,
                                                                padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * channels, 10))


class Maxout(nn.Module):
    """Maxout units (the max of 4 affine maps) then a clamped head: max and clamp ties."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.lin = nn.Linear(64, 4 * width)
        self.out = nn.Linear(width, 10)
        self.width = width

    def forward(self, x):
        h = self.lin(x).reshape(len(x), self.width, 4).amax(dim=-1)
        return self.out(torch.clamp(h, -1.0, 1.0))


class SortPool(nn.Module):
    """A hidden layer pooled by sorting (top half of each row), with hardtanh: sort ties."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.lin = nn.Linear(64, width)
        self.out = nn.Linear(width // 2, 10)

    def forward(self, x):
        h = F.hardtanh(self.lin(x))
        top = torch.sort(h, dim=-1, descending=True).values[:, : h.shape[1] // 2]
        return self.out(top)


MODELS = {"mlp": mlp, "cnn": cnn, "maxout": Maxout, "sortpool": SortPool,
          "wide": lambda: mlp(2048)}
"""The test models: ReLU layers, convolution and max pooling, maxout and clamp, sort; and
``wide``, two ReLU layers of 2048 units (Bertoin et al. tie the effect of relu'(0) to the
size of the problem)."""

BATCH = {"wide": 128}
"""Batch sizes other than 32 (the wide network trains on batches of 128)."""


# ----- relu'(0) = 1, and the bifurcation of relu'(0) -----


class _ReLUOne(torch.autograd.Function):
    """relu with slope 1 at 0 in its backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x >= 0).to(grad.dtype)


class ReLUOne(nn.Module):
    def forward(self, x):
        return _ReLUOne.apply(x)


def with_relu_one(model: nn.Module) -> nn.Module:
    """``model`` with every ``nn.ReLU`` replaced by `ReLUOne` (in place)."""
    for name, sub in model.named_children():
        if isinstance(sub, nn.ReLU):
            setattr(model, name, ReLUOne())
        else:
            with_relu_one(sub)
    return model


class Bifurcation:
    """Hooks on every ``nn.ReLU``: the step is *bifurcating* when a ReLU input entry is exactly
    0 and the gradient arriving at that entry is not 0 (relu'(0) = 1 would change the
    backpropagated gradient). Nothing is recorded while torch traces the model (asd's import)."""

    def __init__(self, model: nn.Module):
        self.handles = [m.register_forward_hook(self._forward) for m in model.modules()
                        if isinstance(m, nn.ReLU)]
        self.hit = False

    def _forward(self, module, args, out):
        if torch.compiler.is_compiling() or not out.requires_grad:
            return
        x = args[0]

        def backward(grad):
            if bool((grad[x == 0] != 0).any()):
                self.hit = True

        out.register_hook(backward)

    def take(self) -> bool:
        hit, self.hit = self.hit, False
        return hit

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


# ----- training -----


@dataclass
class Run:
    """One training run: the loss per step, the test accuracy per epoch, and (the monitored
    run) the audit log and which steps bifurcated."""

    losses: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    bifurcating: list[bool] = field(default_factory=list)
    log: object = None
    seconds: float = 0.0


def train(model_name: str, dataset: str, dtype: str, variant: str, epochs: int,
          batch: int = 32, lr: float = 0.05, n: int | None = None, seed: int = 0,
          device: str = "cpu", audit: bool = False, samples: int = 8) -> Run:
    """Train one configuration; ``variant`` is one of `VARIANTS`."""
    import asd.torch

    Xtr, ytr, Xte, yte = DATASETS[dataset](n, seed)
    torch.manual_seed(seed)
    model = MODELS[model_name]().to(device=device, dtype=DTYPES[dtype])
    if variant == "relu'(0)=1":
        with_relu_one(model)
    forward = asd.torch.function(model, seed=seed) if variant == "asd" else model
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    run = Run()
    hooks = Bifurcation(model) if audit else None
    monitor = asd.torch.audit(model, samples=samples, seed=seed) if audit else None
    log = monitor.__enter__() if monitor is not None else None
    g = torch.Generator().manual_seed(seed + 1)
    start = time.perf_counter()
    try:
        for _ in range(epochs):
            perm = torch.randperm(len(Xtr), generator=g)
            for i in range(0, len(perm) - batch + 1, batch):
                idx = perm[i:i + batch]
                x = Xtr[idx].to(device=device, dtype=DTYPES[dtype])
                opt.zero_grad()
                loss = F.cross_entropy(forward(x).float(), ytr[idx].to(device))
                loss.backward()
                opt.step()
                run.losses.append(float(loss.detach()))
                if hooks is not None:
                    run.bifurcating.append(hooks.take())
            run.accuracy.append(_accuracy(model, Xte, yte, dtype, device))
    finally:
        if monitor is not None:
            monitor.__exit__(None, None, None)
        if hooks is not None:
            hooks.remove()
    run.seconds = time.perf_counter() - start
    run.log = log
    return run


def _accuracy(model, X, y, dtype, device) -> float:
    with torch.no_grad():
        pred = model(X.to(device=device, dtype=DTYPES[dtype])).argmax(1).cpu()
    return float((pred == y).float().mean())


# ----- the study -----

SMALL = {"datasets": ["digits", "synthetic"], "models": ["mlp", "cnn"],
         "dtypes": list(DTYPES), "epochs": 1, "n": 400, "variants": list(VARIANTS)}
"""CI's settings: every dataset, model, dtype and variant, on 400 samples for one epoch."""

FULL = {"datasets": ["digits", "synthetic"], "models": ["mlp", "cnn", "wide"],
        "dtypes": list(DTYPES), "epochs": 8, "n": None, "variants": list(VARIANTS),
        "skip": [(None, "wide", "float16")]}
"""The settings of docs/training-ties.md: the whole datasets for 8 epochs (about 360 steps,
88 for the wide network, which is not trained in float16: a CPU has no float16 matrix
product, PyTorch emulates it at about 5 s per step of the wide network, 20 minutes a run)."""


def study(settings: dict, device: str = "cpu", progress=print) -> dict:
    """Every configuration of ``settings``: ``{(dataset, model, dtype): {variant: Run}}``."""
    results = {}
    for dataset in settings["datasets"]:
        for model in settings["models"]:
            for dtype in settings["dtypes"]:
                if any(all(a is None or a == b for a, b in zip(skip, (dataset, model, dtype),
                                                                strict=True))
                       for skip in settings.get("skip", ())):
                    continue
                runs = {}
                for variant in settings["variants"]:
                    runs[variant] = train(model, dataset, dtype, variant, settings["epochs"],
                                          batch=BATCH.get(model, 32), n=settings["n"],
                                          device=device, audit=variant == VARIANTS[0])
                results[(dataset, model, dtype)] = runs
                if progress is not None:
                    progress(f"{dataset:>9} {model:>4} {dtype:>8}: "
                             f"{_row(runs)['tied']:.0%} tied, "
                             f"{_row(runs)['bifurcating']:.0%} bifurcating")
    return results


def _row(runs: dict) -> dict:
    """The numbers of one configuration (see `table`)."""
    base = runs[VARIANTS[0]]
    log = base.log
    s = log.summary()
    relu = {k: v for k, v in s["by_layer"].items() if k.endswith(":relu")}
    pool = {k: v for k, v in s["by_layer"].items() if k.endswith(":max_pool")}
    decided = [any(k.split("/")[1] in ("tangent", "series", "lexicographic")
                   for k in r.decisions) for r in log]
    noise = [r.difference / r.scale for r in log if r.difference is not None and r.scale]
    return {
        "steps": len(base.losses), "tied": s["tied"], "live": s["live"],
        "decided": float(np.mean(decided)) if decided else 0.0,
        "noise": float(np.median(noise)) if noise else None,
        "relu": max((v["live"] for v in relu.values()), default=0.0),
        "pool": max((v["tied"] for v in pool.values()), default=0.0),
        "pool_live": max((v["live"] for v in pool.values()), default=0.0),
        "bifurcating": float(np.mean(base.bifurcating)) if base.bifurcating else 0.0,
        "outside": s["verdicts"]["outside"], "undetermined": s["verdicts"]["undetermined"],
        "asd_checked": s["checked"]["asd"] + s["checked"]["clarke"],
        "accuracy": {v: r.accuracy[-1] for v, r in runs.items()},
        "loss": {v: float(np.mean(r.losses[-10:])) for v, r in runs.items()},
        "by_layer": s["by_layer"],
        "seconds": {v: r.seconds for v, r in runs.items()},
    }


def table(results: dict) -> list[str]:
    """The study's main table, as Markdown lines."""
    lines = ["| data | model | dtype | steps | tied | live | ReLU tie | pool tie | pieces "
             r"differ | bifurcating | outside | undetermined | median \|Δ\|/\|g\| | test "
             "accuracy 0 / 1 / asd |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (dataset, model, dtype), runs in results.items():
        r = _row(runs)
        acc = " / ".join(f"{r['accuracy'][v]:.3f}" for v in VARIANTS if v in r["accuracy"])
        noise = "-" if r["noise"] is None else f"{r['noise']:.1e}"
        lines.append(f"| {dataset} | {model} | {dtype} | {r['steps']} | {r['tied']:.1%} | "
                     f"{r['live']:.1%} | {r['relu']:.1%} | {r['pool']:.1%} | "
                     f"{r['decided']:.1%} | {r['bifurcating']:.1%} | {r['outside']:.1%} | "
                     f"{r['undetermined']:.1%} | {noise} | {acc} |")
    return lines


def layers(results: dict) -> list[str]:
    """Per layer and primitive: the share of steps with a tie (live in brackets)."""
    lines = ["| data | model | dtype | layer:primitive | steps tied (live) | tied entries |",
             "|---|---|---|---|---|---|"]
    for (dataset, model, dtype), runs in results.items():
        for key, row in _row(runs)["by_layer"].items():
            lines.append(f"| {dataset} | {model} | {dtype} | `{key}` | {row['tied']:.1%} "
                         f"({row['live']:.1%}) | {row['entries']} |")
    return lines


def plots(results: dict, out: Path) -> list[str]:
    """The figures: training curves per dtype (three variants), and the monitor's plot of
    one run; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    names = []
    for dataset in sorted({k[0] for k in results}):
        for model in sorted({k[1] for k in results}):
            keys = [k for k in results if k[0] == dataset and k[1] == model]
            fig, axes = plt.subplots(1, len(keys), figsize=(3 * len(keys), 2.6), sharey=True,
                                     squeeze=False)
            for ax, key in zip(axes[0], keys, strict=True):
                for variant, run in results[key].items():
                    ax.plot(_smooth(run.losses), label=variant, lw=1)
                ax.set_title(key[2], fontsize=9)
                ax.set_xlabel("step", fontsize=8)
            axes[0][0].set_ylabel("training loss", fontsize=8)
            axes[0][-1].legend(fontsize=7)
            fig.suptitle(f"{model} on {dataset}", fontsize=10)
            fig.tight_layout()
            name = f"training-ties-{dataset}-{model}.png"
            fig.savefig(out / name, dpi=100)
            plt.close(fig)
            names.append(name)
    busiest = max(results, key=lambda k: _row(results[k])["tied"])
    log = results[busiest][VARIANTS[0]].log
    log.meta["title"] = f"{busiest[1]} on {busiest[0]}, {busiest[2]}: ties and verdicts"
    name = "training-ties-monitor.png"
    log.plot(out / name)
    names.append(name)
    return names


def _smooth(values: list[float], k: int = 10) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if len(v) < k:
        return v
    return np.convolve(v, np.ones(k) / k, mode="valid")


def render(results: dict, settings: dict, figures: list[str], seconds: float) -> str:
    """The generated section of docs/training-ties.md."""
    import platform

    head = (f"Generated by `python -m asd.benchmarks.training_ties` ({_describe(settings)}) "
            f"on Python {platform.python_version()} with PyTorch {torch.__version__}, "
            f"in {seconds / 60:.1f} minutes.")
    parts = [head, "", *table(results), "", "Per layer and primitive (the monitored run):", "",
             *layers(results), ""]
    parts += [f"![{name}]({name})" for name in figures] + [""]
    return "\n".join(parts)


def _describe(settings: dict) -> str:
    n = "the whole datasets" if settings["n"] is None else f"{settings['n']} samples"
    return (f"{n}, {settings['epochs']} epoch(s), batch 32 (128 for `wide`), SGD with "
            "learning rate 0.05")


BEGIN, END = "<!-- training-ties:begin -->", "<!-- training-ties:end -->"


def markers(part: str = "") -> tuple[str, str]:
    """The markers around a generated part of the page: the study's (``part`` empty) or the
    overhead's on one device (``part`` ``'overhead-cpu'``, ``'overhead-cuda'``)."""
    if not part:
        return BEGIN, END
    return f"<!-- training-ties:{part}:begin -->", f"<!-- training-ties:{part}:end -->"


def splice(doc: Path, section: str, part: str = "") -> None:
    """Replace a generated part of ``doc`` (between its `markers`) with ``section``."""
    begin, end = markers(part)
    text = doc.read_text(encoding="utf-8")
    start, stop = text.index(begin) + len(begin), text.index(end)
    doc.write_text(text[:start] + "\n" + section + text[stop:], encoding="utf-8")


# ----- the monitor's overhead -----

TEST_MODELS = ("mlp", "cnn", "maxout", "sortpool", "wide")
"""The models the monitor's overhead is measured on (`MODELS`)."""


def overhead(models=TEST_MODELS, dtypes=tuple(DTYPES), steps: int = 20, batch: int = 64,
             device: str = "cpu", every: int = 1) -> list[dict]:
    """Seconds per training step on digits for each test model and dtype: plain, with the
    census alone (``checks=('ties',)``), and with the whole monitor (``every`` 1: every step
    audited; asd runs at the steps with a live tie). The ratios are the monitor's cost. The
    wide network is left out in float16 on a CPU (emulated, seconds a step)."""
    import asd.torch

    Xtr, ytr, _, _ = digits()
    rows = []
    for name in models:
        for dtype in dtypes:
            if name == "wide" and dtype == "float16" and device == "cpu":
                continue
            torch.manual_seed(0)
            model = MODELS[name]().to(device=device, dtype=DTYPES[dtype])
            step = _stepper(model, Xtr[:batch].to(device=device, dtype=DTYPES[dtype]),
                            ytr[:batch].to(device))
            plain = _time(step, steps, device)
            with asd.torch.audit(model, every=every, checks=("ties",)):
                census = _time(step, steps, device)
            with asd.torch.audit(model, every=every) as log:
                watched = _time(step, steps, device)
            rows.append({"model": name, "dtype": dtype, "plain_ms": 1e3 * plain,
                         "census_ms": 1e3 * census, "audited_ms": 1e3 * watched,
                         "census_ratio": census / plain, "ratio": watched / plain,
                         "asd_share": sum(r.checked != "census" for r in log) / max(len(log), 1)})
    return rows


def _stepper(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    """One SGD step of ``model`` on the batch ``(x, y)``, as a function."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x).float(), y).backward()
        opt.step()

    return step


def _time(step, steps: int, device: str) -> float:
    """The best of three mean times of ``steps`` steps (after three warm-up steps)."""
    for _ in range(3):
        step()
    if device != "cpu":
        torch.cuda.synchronize()
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def overhead_table(rows: list[dict], device: str) -> list[str]:
    """The overhead rows as Markdown lines."""
    lines = [f"| model | dtype | step ({device}) | census every step | ratio | whole monitor "
             "every step | ratio | steps asd checked |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['dtype']} | {r['plain_ms']:.2f} ms | "
                     f"{r['census_ms']:.2f} ms | {r['census_ratio']:.2f}x | "
                     f"{r['audited_ms']:.2f} ms | {r['ratio']:.2f}x | {r['asd_share']:.0%} |")
    return lines


def render_overhead(rows: list[dict], device: str, threads: int, batch: int = 64) -> str:
    """The generated overhead section of docs/training-ties.md for one device."""
    import platform

    where = (f"one CPU thread ({platform.processor() or platform.machine()})"
             if device == "cpu" else torch.cuda.get_device_name(device))
    head = (f"Generated by `python -m asd.benchmarks.training_ties --overhead --device "
            f"{device}` (a step of SGD on a batch of {batch} digits; best of 3 means of 20 "
            f"steps) on {where}"
            f"{f' ({threads} threads)' if device == 'cpu' and threads != 1 else ''}, "
            f"PyTorch {torch.__version__}.")
    census = [r["census_ratio"] for r in rows]
    within = sum(c <= 2 for c in census)
    tail = (f"The census alone is within 2x of the step in {within} of {len(rows)} "
            f"configurations (median {float(np.median(census)):.2f}x); the whole monitor, "
            f"asd included at every step with a live tie, in "
            f"{sum(r['ratio'] <= 2 for r in rows)} of {len(rows)}.")
    return "\n".join([head, "", *overhead_table(rows, device), "", tail, ""])


# ----- command line -----
# ----- command line -----


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asd.benchmarks.training_ties",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI's settings (about a minute)")
    parser.add_argument("--out", default="docs", help="where the figures go (default docs)")
    parser.add_argument("--doc", default=None,
                        help="rewrite the generated part of this page (default: the full "
                             "settings rewrite docs/training-ties.md)")
    parser.add_argument("--overhead", action="store_true",
                        help="measure the monitor's cost per step instead (with --doc: "
                             "rewrite that page's overhead part for the device)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: steady timings on a shared box)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.overhead:
        rows = overhead(device=args.device)
        section = render_overhead(rows, args.device, args.threads)
        if args.doc is not None:
            part = "overhead-" + torch.device(args.device).type
            splice(Path(args.doc), section, part)
            print(f"wrote the {part} part of {args.doc}")
        print(section)
        return 0
    settings = SMALL if args.small else FULL
    start = time.perf_counter()
    results = study(settings, device=args.device)
    out = Path(args.out)
    figures = plots(results, out)
    section = render(results, settings, figures, time.perf_counter() - start)
    doc = args.doc or (None if args.small else "docs/training-ties.md")
    if doc is not None:
        splice(Path(doc), section)
        print(f"wrote {doc} and {', '.join(figures)} in {out}")
    else:
        print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
