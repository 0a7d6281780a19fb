"""Timing, memory and correctness for the benchmark programs; the table and the JSON report.

Timing: every contender is warmed up (JAX compiles here), then the contenders run in turn,
``reps`` rounds, so a slow spell of the machine hits all of them alike; the table shows the
median of each. Memory: the peak of numpy allocations during one call, beyond what existed
before it (``tracemalloc`` sees numpy's buffers), for the numpy-based contenders only: torch
and JAX allocate outside Python's tracemalloc, so their column stays empty.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import platform
import statistics
import time
import tracemalloc

import numpy as np

from . import ops as backends
from .peers import PEERS, Contender, contenders, installed
from .programs import Benchmark, build, draw_direction

ORDER = ("primal", "hand", "asd", "asd untied", "asd jit", "asd jit clarke64", "autograd",
         "torch", "jax", "jax.jit")

# (label, program-name prefix, numerator, denominator, limit, measure)
TARGETS = (
    ("tie-free MLP: asd / hand-written fwd+bwd", "mlp float", "asd", "hand", 1.05, "time"),
    ("MLP with ties in every layer: asd / numpy forward", "mlp-ties", "asd", "primal", 3.0,
     "time"),
    ("1000-op scalar chain: asd / autograd", "scalar-chain", "asd", "autograd", 1.0, "time"),
    ("MLP peak memory: asd / autograd", "mlp float", "asd", "autograd", 1.5, "memory"),
    ("10^4-node chain, every tie by the series: asd / asd untied", "series-chain", "asd",
     "asd untied", 20.0, "time"),
    ("small CNN, dead pooling windows: asd / asd at a tie-free point", "cnn-dead-windows",
     "asd", "asd untied", 2.0, "time"),
    ("small CNN, every relu tied: asd / asd at a tie-free point", "cnn-zero-weights", "asd",
     "asd untied", 2.0, "time"),
    ("SVM objective: asd jit / torch eager", "svm", "asd jit", "torch", 0.5, "time"),
    ("1000-op scalar chain: asd jit / hand-written fwd+bwd", "scalar-chain", "asd jit", "hand",
     5.0, "time"),
    ("1332-op maximum chain at a numpy scalar: asd jit / hand-written", "max-chain", "asd jit",
     "hand", 5.0, "time"),
    ("SVM: asd jit clarke(n=64) / one asd jit call", "svm", "asd jit clarke64", "asd jit", 5.0,
     "time"),
)


def time_interleaved(cands: list[Contender], reps: int, warmup: int) -> dict[str, list[float]]:
    for c in cands:
        for _ in range(warmup):
            c.run()
    times: dict[str, list[float]] = {c.name: [] for c in cands}
    for _ in range(reps):
        for c in cands:
            start = time.perf_counter()
            c.run()
            times[c.name].append(time.perf_counter() - start)
    return times


def peak_bytes(c: Contender) -> int | None:
    """Peak numpy memory of one call beyond what was live before it (None: not visible)."""
    if not c.tracemalloc:
        return None
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = c.run()
        peak = tracemalloc.get_traced_memory()[1]
        del out
    finally:
        tracemalloc.stop()
    return max(peak - base, 0)


def rel_error(got: tuple, want: tuple) -> float:
    """Largest error over the value and every gradient, relative to the reference's scale."""
    (v, gs), (w, hs) = got, want
    err = abs(v - w) / max(abs(w), 1e-30)
    for g, h in zip(gs, hs, strict=True):
        scale = max(float(np.max(np.abs(h), initial=0.0)), 1e-30)
        err = max(err, float(np.max(np.abs(np.asarray(g, float) - h), initial=0.0)) / scale)
    return err


def check(bench: Benchmark, cands: list[Contender], asd_ops) -> dict:
    """asd's value and subgradient against every reference that computes the same element.

    Tie-free programs: the hand-written backward and each peer (all compute the gradient).
    Programs with ties: the direction-aware hand-written reference along asd's direction;
    the peers are reported but not required (they fix a value at kinks).
    """
    import asd

    tol = 1e-3 if bench.dtype == np.float32 else 1e-8
    errors, required = {}, []
    if bench.ties:
        direction = draw_direction(bench.params, np.random.default_rng(0))
        vg = asd.value_and_subgrad(lambda p: bench.loss(asd_ops, p, bench.data),
                                   direction=direction)
        ours = _as_result(vg(bench.params))
        errors["hand"] = rel_error(ours, _as_result(bench.hand(bench.params, bench.data,
                                                                direction)))
        required.append("hand")
    else:
        ours = next(c.result(c.run()) for c in cands if c.name == "asd")
    for c in cands:
        if c.result is None or c.name == "asd" or (c.name == "hand" and bench.ties):
            continue
        errors[c.name] = rel_error(ours, c.result(c.run()))
        if not bench.ties:
            required.append(c.name)
    ok = all(errors[r] <= tol for r in required)
    met = asd.asd(lambda p: bench.loss(asd_ops, p, bench.data), seed=0)(bench.params).ties
    return {"tolerance": tol, "relative_error": errors, "required": required, "ok": ok,
            "tied entries met": sum(t.count for t in met)}


def _as_result(out) -> tuple:
    value, grads = out
    return float(value), [np.asarray(g) for g in grads]


def run_one(bench: Benchmark, reps: int, warmup: int, peers: tuple[str, ...]) -> dict:
    asd_ops = backends.asd_ops()
    cands = contenders(bench, asd_ops, peers)
    times = time_interleaved(cands, reps, warmup)
    gc.collect()
    rows = {}
    for c in cands:
        ts = times[c.name]
        peak = peak_bytes(c)
        rows[c.name] = {"median_ms": 1e3 * statistics.median(ts),
                        "times_ms": [round(1e3 * t, 4) for t in ts],
                        "peak_mb": None if peak is None else peak / 2**20}
    ratios = {}
    asd_ms = rows["asd"]["median_ms"]
    for name, row in rows.items():
        if name != "asd":
            ratios[f"asd/{name}"] = asd_ms / row["median_ms"]
    if rows.get("autograd", {}).get("peak_mb"):
        ratios["memory asd/autograd"] = rows["asd"]["peak_mb"] / rows["autograd"]["peak_mb"]
    notes = dict(bench.notes)
    if bench.name.startswith("cnn"):
        notes["asd max pooling"] = asd_ops.pool_impl
    if bench.name.startswith("sort"):
        notes["asd sort"] = asd_ops.sort_impl
    if bench.name.startswith("projection-box"):
        notes["asd projection"] = asd_ops.box_impl
    return {"name": bench.name, "about": bench.about, "dtype": bench.dtype.name,
            "ties": bench.ties, "hand": bench.hand_label if bench.hand else None,
            "contenders": rows, "ratios": ratios, "check": check(bench, cands, asd_ops),
            "notes": notes}


def evaluate_targets(programs: list[dict]) -> list[dict]:
    out = []
    for label, prefix, num, den, limit, measure in TARGETS:
        for p in programs:
            rows = p["contenders"]
            if not p["name"].startswith(prefix) or num not in rows or den not in rows:
                continue
            key = "median_ms" if measure == "time" else "peak_mb"
            if rows[den][key] in (None, 0) or rows[num][key] is None:
                continue
            ratio = rows[num][key] / rows[den][key]
            out.append({"target": label, "program": p["name"], "ratio": ratio, "limit": limit,
                        "met": ratio <= limit})
    return out


def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "numpy": np.__version__, "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}
    for peer in PEERS:
        if installed(peer):
            info[peer] = getattr(__import__(peer), "__version__", "?")
    return info


def run(quick: bool = False, reps: int | None = None, peers: tuple[str, ...] = PEERS,
        only: str | None = None, progress=None, threads: int | None = None) -> dict:
    """Run every program (or those whose name contains ``only``) and return the report.

    ``threads`` caps the BLAS/OpenMP pools (numpy through threadpoolctl, and torch) for the
    run; None leaves them as they are.
    """
    reps = reps or (3 if quick else 11)
    warmup = 1 if quick else 2
    benches = [b for b in build(quick) if only is None or only in b.name]
    programs = []
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with _jax_x64(peers), _thread_limit(threads, peers):
        for b in benches:
            if progress:
                progress(b.name)
            programs.append(run_one(b, reps, warmup, peers))
        models = []
        if "torch" in peers and installed("torch"):
            from . import torch_models

            if progress:
                progress("PyTorch models")
            models = torch_models.run(quick, reps, warmup, only)
        jax_rows = []
        if "jax" in peers and installed("jax") and (only is None or "jax" in only):
            from . import jax_models

            if progress:
                progress("JAX models under jax.jit / jax.vmap")
            jax_rows = jax_models.run(quick, reps, warmup, only)
        tf_rows = []
        # Keras rows: in a full run, or asked for (--only tf); the quick smoke run skips them
        if installed("tensorflow") and ("tf" in only if only else not quick):
            from . import tf_models

            if progress:
                progress("Keras models through asd.tf.function")
            tf_rows = tf_models.run(quick, reps, warmup, only)
    info = machine()
    info["load average (1 min) at start, end"] = [load, os.getloadavg()[0] if load else None]
    targets = evaluate_targets(programs)
    if models:
        targets += torch_models.targets(models)
    if jax_rows:
        targets += jax_models.targets(jax_rows)
    if tf_rows:
        targets += tf_models.targets(tf_rows)
    return {"machine": info,
            "settings": {"quick": quick, "reps": reps, "warmup": warmup, "peers": list(peers),
                         "threads": threads or "unchanged",
                         "threadpoolctl": importlib.util.find_spec("threadpoolctl") is not None},
            "memory": "peak numpy allocation during one call beyond the live inputs, by "
                      "tracemalloc (numpy-based contenders only; torch and JAX allocate "
                      "outside it)",
            "programs": programs, "torch_models": models, "jax_models": jax_rows,
            "tf_models": tf_rows,
            "targets": targets}


class _thread_limit:
    """Cap numpy's BLAS (threadpoolctl, if installed) and torch's pool at ``n`` threads."""

    def __init__(self, n: int | None, peers):
        self.n, self.torch = n, "torch" in peers and installed("torch")

    def __enter__(self):
        self.blas = None
        if self.n is None:
            return
        if importlib.util.find_spec("threadpoolctl") is not None:
            from threadpoolctl import threadpool_limits

            self.blas = threadpool_limits(limits=self.n)
        if self.torch:
            import torch

            self.before = torch.get_num_threads()
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.n is None:
            return
        if self.blas is not None:
            self.blas.restore_original_limits()
        if self.torch:
            import torch

            torch.set_num_threads(self.before)


class _jax_x64:
    """Let JAX compute in float64 for the float64 programs; restore the setting afterwards."""

    def __init__(self, peers):
        self.active = "jax" in peers and installed("jax")

    def __enter__(self):
        if self.active:
            import jax

            self.before = jax.config.read("jax_enable_x64")
            jax.config.update("jax_enable_x64", True)

    def __exit__(self, *exc):
        if self.active:
            import jax

            jax.config.update("jax_enable_x64", self.before)


def _fmt_ms(row) -> str:
    if row is None:
        return "-"
    ms = row["median_ms"]
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def tables(report: dict):
    """The rich tables: times and ratios per program, then the targets."""
    from rich.table import Table

    present = [n for n in ORDER if any(n in p["contenders"] for p in report["programs"])]
    t = Table(title="asd bench: median ms per call (value and gradient; primal: value only)",
              title_justify="left")
    t.add_column("program")
    for n in present:
        t.add_column(n, justify="right")
    t.add_column("asd/primal", justify="right")
    t.add_column("asd/hand", justify="right")
    t.add_column("asd/autograd", justify="right")
    t.add_column("MB asd|autograd", justify="right")
    t.add_column("ties", justify="right")
    t.add_column("check", justify="center")
    for p in report["programs"]:
        rows, r = p["contenders"], p["ratios"]
        mem = "|".join("-" if rows.get(n, {}).get("peak_mb") is None
                       else f"{rows[n]['peak_mb']:.1f}" for n in ("asd", "autograd"))
        t.add_row(p["name"], *(_fmt_ms(rows.get(n)) for n in present),
                  *(f"{r[k]:.2f}" if k in r else "-" for k in
                    ("asd/primal", "asd/hand", "asd/autograd")),
                  mem, str(p["check"]["tied entries met"]),
                  "ok" if p["check"]["ok"] else "FAIL")
    g = Table(title="targets (this run)", title_justify="left")
    for col in ("target", "program", "ratio", "limit", "met"):
        g.add_column(col)
    for row in report["targets"]:
        g.add_row(row["target"], row["program"], f"{row['ratio']:.2f}", f"{row['limit']}",
                  "yes" if row["met"] else "no")
    return t, g


def markdown(report: dict) -> str:
    """The times table as GitHub markdown (for the README)."""
    present = [n for n in ORDER if any(n in p["contenders"] for p in report["programs"])]
    head = ["program", *present, "asd/primal", "asd/hand", "asd/autograd", "ties"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in report["programs"]:
        rows, r = p["contenders"], p["ratios"]
        cells = [p["name"], *(_fmt_ms(rows.get(n)) for n in present),
                 *(f"{r[k]:.2f}" if k in r else "-" for k in
                   ("asd/primal", "asd/hand", "asd/autograd")),
                 str(p["check"]["tied entries met"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

