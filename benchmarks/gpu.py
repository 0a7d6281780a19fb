"""asd's drop-in training step against PyTorch's on a GPU: one command, a few minutes.

    python -m benchmarks.gpu              # on a CUDA machine: measure, write docs/frameworks.md
    python -m benchmarks.gpu --smoke      # anywhere (CI): tiny sizes, CPU allowed, no docs

Two models at batch 64, each in float32 and bfloat16: a ResNet-18-style network (CIFAR
layout: 3x3 stem, four stages of two basic blocks, 32x32 inputs) and a transformer encoder
block (self-attention, layer norm, GELU feed-forward; 128 tokens of width 256). For each, one
SGD step whose backward is PyTorch's against one whose backward is asd's
(``asd.torch.function``), interleaved after a warm-up, medians over the rounds, every call
ended by ``torch.cuda.synchronize``. The gradients of the two steps are compared (at a
random initialisation no pre-activation is exactly 0, so they must agree to rounding), and
one extra asd step runs under ``torch.cuda.set_sync_debug_mode("warn")`` to count the host
synchronisations it makes. The gradient check runs with TF32 off (cuDNN rounds convolutions
to 10 bits by default); the timed steps run with PyTorch's defaults. The table goes between
the ``gpu-table`` markers of docs/frameworks.md with the device's name.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
import warnings
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "frameworks.md"  # in a checkout
BEGIN, END = "<!-- gpu-table -->", "<!-- /gpu-table -->"


def models(torch, smoke: bool):
    """``{name: (make_model, make_batch)}`` at the sizes of the run."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

        def forward(self, x):
            h = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(h)) + self.skip(x))

    class ResNet18(nn.Module):
        def __init__(self, width):
            super().__init__()
            w = width
            self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w),
                                      nn.ReLU())
            layers, cin = [], w
            for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
                layers += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.head = nn.Linear(cin, 10)

        def forward(self, x):
            return self.head(self.layers(self.stem(x)).mean(dim=(2, 3)))

    class Encoder(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                                    activation="gelu", batch_first=True)
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            return self.head(self.layer(x).mean(dim=1))

    batch = 4 if smoke else 64
    side, width = (8, 8) if smoke else (32, 64)
    tokens, d_model = (8, 32) if smoke else (128, 256)

    def images(device, dtype):
        return (torch.randn(batch, 3, side, side, device=device, dtype=dtype),
                torch.randint(0, 10, (batch,), device=device))

    def sequences(device, dtype):
        return (torch.randn(batch, tokens, d_model, device=device, dtype=dtype),
                torch.randint(0, 10, (batch,), device=device))

    return {
        "resnet18": (lambda: ResNet18(width), images,
                     f"ResNet-18 style (width {width}, {side}x{side}), batch {batch}"),
        "transformer": (lambda: Encoder(d_model, 4), sequences,
                        f"encoder block ({tokens} tokens x {d_model}, 4 heads), batch {batch}"),
    }


def steps(torch, make, device, dtype):
    """A torch step and an asd step on two copies of one model (eval-mode batch norm: the
    running statistics stay fixed, so repeated steps see the same function)."""
    import asd.torch

    torch.manual_seed(0)
    plain = make().to(device=device, dtype=dtype).eval()
    dropped = copy.deepcopy(plain)
    forward = asd.torch.function(dropped, seed=0)

    def step(fn, module):
        opt = torch.optim.SGD(module.parameters(), lr=1e-4)

        def run(x, y):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(fn(x).float(), y)
            loss.backward()
            grads = [p.grad for p in module.parameters()]
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return loss.detach(), grads

        return run

    return step(plain, plain), step(forward, dropped)


def measure(torch, name, spec, device, dtype, rounds, warmup) -> dict:
    make, batch, about = spec
    torch.manual_seed(1)                # the same batch every run: whether it ties is fixed
    x, y = batch(device, dtype)
    torch_step, asd_step = steps(torch, make, device, dtype)
    # the check in full float32: cuDNN's default TF32 convolutions round to 10 bits
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref_loss, ref = torch_step(x, y)
        got_loss, got = asd_step(x, y)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    scale = max(float(g.abs().max()) for g in ref if g is not None) or 1.0
    error = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, ref, strict=True)
                if a is not None and b is not None) / scale
    for _ in range(warmup):
        torch_step(x, y)
        asd_step(x, y)
    times = {"torch": [], "asd": []}
    with _counting_ties() as tied:
        for _ in range(rounds):
            for label, fn in (("torch", torch_step), ("asd", asd_step)):
                start = time.perf_counter()
                fn(x, y)
                times[label].append(time.perf_counter() - start)
    syncs = None
    if device.type == "cuda":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                asd_step(x, y)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # count the synchronising calls only: the mode's own first use also warns that it
        # is a prototype (a message that mentions synchronization too)
        syncs = sum("called a synchronizing" in str(w.message) for w in caught)
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return {"model": name, "about": about, "dtype": str(dtype).replace("torch.", ""),
            "torch_ms": med["torch"], "asd_ms": med["asd"], "ratio": med["asd"] / med["torch"],
            "syncs": syncs, "relative_error": error, "loss": [float(ref_loss), float(got_loss)],
            "tied_steps": f"{len(tied)}/{rounds}"}


class _counting_ties:
    """The timed asd steps whose backward found a tie that matters (a pre-activation exactly
    0, equal maxima): those run the decided program (one more forward, with tangents) and
    cost several native steps, so a row's median depends on how many there were."""

    def __enter__(self):
        from asd.frontends.torch import dropin

        self.cls, self.real, self.hits = dropin._NativeCall, dropin._NativeCall.tied, []
        real, hits = self.real, self.hits

        def tied(call, test):
            out = real(call, test)
            if out:
                hits.append(1)
            return out

        self.cls.tied = tied
        return hits

    def __exit__(self, *exc):
        self.cls.tied = self.real


def table(device_name: str, rows: list[dict]) -> str:
    lines = [f"Measured by `python -m benchmarks.gpu` on **{device_name}** "
             f"({time.strftime('%Y-%m-%d')}): one SGD step, medians in ms.", "",
             "| model | dtype | torch step | asd step | asd / torch | host syncs per asd step "
             "| asd steps at a tie | gradient error |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        syncs = "-" if r["syncs"] is None else str(r["syncs"])
        lines.append(f"| {r['about']} | {r['dtype']} | {r['torch_ms']:.2f} | {r['asd_ms']:.2f} "
                     f"| {r['ratio']:.2f} | {syncs} | {r['tied_steps']} "
                     f"| {r['relative_error']:.1e} |")
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text(encoding="utf-8")
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    DOC.write_text(doc[:start] + "\n" + text + "\n" + doc[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, CPU allowed, one round, docs left alone")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/frameworks.md")
    args = parser.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA device: run with --smoke for the CPU check")
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    device_name = torch.cuda.get_device_name(device) if cuda else "CPU"
    rounds = args.rounds or (1 if args.smoke else 10)
    warmup = 1 if args.smoke else 3
    rows = []
    for name, spec in models(torch, args.smoke).items():
        for dtype in (torch.float32, torch.bfloat16):
            row = measure(torch, name, spec, device, dtype, rounds, warmup)
            rows.append(row)
            print(json.dumps(row), flush=True)
    text = table(device_name, rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device_name, "rows": rows}, indent=1))
    if cuda and not args.smoke and not args.no_doc:
        write_doc(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
