"""``asd audit``: a framework's gradient against the Clarke subdifferential.

``asd audit file.py:fn --at '[0, 0]'`` (or ``--at point.npy``) loads ``fn``, detects the
framework it is written in (PyTorch, JAX, TensorFlow, autograd, or plain numpy/asd), runs
the framework's own autodiff and asd on the *same* program (imported through
``asd.frontends`` for PyTorch and JAX), samples the Clarke set with ``asd.clarke`` and
prints a verdict: the framework's gradient is inside the sampled set, outside it, or outside
a set that is a single gradient (the function is differentiable there and the framework is
simply wrong). Exit code 1 when the framework's gradient is outside, 2 when the target cannot
be audited (no such file or function, an operation asd cannot import, a bad point).

The sample is an inner approximation of the Clarke set (exact in one dimension and for
piecewise-affine programs once every piece is hit), so "outside" means outside the hull of
the limiting gradients found; ``--samples`` raises the number of directions.

``asd audit --battery`` runs the built-in catalog (``asd.cli.battery``) through every installed
framework against exact Clarke sets, prints the table and, with ``--write-docs PATH``, writes
it as Markdown. It exits 0 after printing unless asd itself leaves an exact set.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

from asd.cli.main import load_target

FRAMEWORK_PREFIXES = {"torch": "torch", "jax": "jax", "tensorflow": "tensorflow",
                      "autograd": "autograd"}


def detect(fn) -> str:
    """The framework ``fn`` is written in: 'torch', 'jax', 'tensorflow', 'autograd' or 'numpy'.

    Judged from the modules its file (its globals) and its closure refer to.

    >>> detect(lambda x: np.maximum(x, 0))
    'numpy'
    """
    names: list[str] = []
    owner = type(fn).__module__ if not isinstance(fn, types.FunctionType) else ""
    names.append(owner)
    glob = getattr(fn, "__globals__", {}) or getattr(sys.modules.get(fn.__module__ or ""),
                                                        "__dict__", {})
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
             if _has_contents(c)]
    for value in [*glob.values(), *cells]:
        if isinstance(value, types.ModuleType):
            names.append(value.__name__)
        else:
            names.append(getattr(type(value), "__module__", "") or "")
    for framework, prefix in FRAMEWORK_PREFIXES.items():
        if any(n == prefix or n.startswith(prefix + ".") for n in names):
            return framework
    return "numpy"


def _has_contents(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


def parse_point(text: str) -> np.ndarray:
    """``'[0, 0]'`` (JSON) or a path to an ``.npy`` file.

    >>> parse_point("[0, 1.5]")
    array([0. , 1.5])
    """
    if text.endswith(".npy"):
        return np.load(text).astype(float)
    try:
        return np.asarray(json.loads(text), dtype=float)
    except json.JSONDecodeError as e:
        raise ValueError(f"--at must be JSON like '[0, 0]' or a .npy file, got {text!r}") from e


def torch_dtype(fn):
    """The dtype a PyTorch function runs in: its parameters' (float32, bfloat16...), or
    float64 for a function without parameters (the point's own precision)."""
    import torch

    from asd.frontends import torch as frontend

    return frontend.dtype_of(fn) or torch.float64


def asd_program(fn, framework: str, x: np.ndarray) -> Callable:
    """``fn`` as a function of numpy arrays that asd can sweep (imported if need be)."""
    if framework == "torch":
        import torch

        from asd.frontends import torch as frontend

        prog = frontend.import_program(fn, torch.tensor(x, dtype=torch_dtype(fn)))
        return lambda a: prog.numpy_fn(a)
    if framework == "jax":
        import jax.numpy as jnp

        from asd.frontends import jax as frontend

        jprog = frontend.JaxProgram(fn, (jnp.asarray(x),))
        return jprog.numpy_fn
    if framework == "tensorflow":
        from asd.errors import UnsupportedError

        raise UnsupportedError("asd has no TensorFlow importer; audit a PyTorch, JAX, autograd "
                               "or numpy version of the function")
    return fn


def audit(fn, x: np.ndarray, framework: str | None = None, samples: int = 256,
          seed: int = 0) -> dict:
    """Everything ``asd audit`` prints, as a dict (see `main`)."""
    import asd
    from asd.cli import frameworks as fw

    framework = framework or detect(fn)
    program = asd_program(fn, framework, x)
    dtype, eps = np.float64, None
    if framework == "jax":
        dtype, eps = np.float32, 1e-5
    elif framework == "torch":
        import torch

        t_dtype = torch_dtype(fn)
        dtype = np.float32 if t_dtype == torch.bfloat16 else np.dtype(str(t_dtype)[6:])
        if t_dtype != torch.float64:            # a gradient rounded to the model's precision
            eps = 64 * torch.finfo(t_dtype).eps
    xa = np.asarray(x, dtype=dtype)
    g = np.asarray(asd.subgrad(program, seed=seed)(xa), dtype=float)
    sample = asd.clarke(program, n=samples, seed=seed)(xa)
    framework_grad = None
    if framework == "torch":
        framework_grad = _torch_gradient(fn, x, t_dtype)
    elif framework != "numpy":
        framework_grad = fw.gradient(framework, fn, x)
    tol = None if eps is None else eps * max(1.0, float(np.max(np.abs(sample.gradients))))
    if framework_grad is None:
        status = "no framework gradient (plain numpy function)"
    elif not np.all(np.isfinite(framework_grad)):
        status = "outside (not finite)"
    elif sample.contains(framework_grad, tol):
        status = "inside"
    elif sample.is_singleton or (tol is not None and np.all(  # equal up to rounding
            np.abs(np.asarray(sample.gradients) - sample.gradients[0]) <= tol)):
        status = "outside (the Clarke set is a single gradient)"
    else:
        status = "outside"
    return {"framework": framework, "x": np.asarray(x, dtype=float), "asd": g,
            "framework_gradient": framework_grad, "clarke": sample.gradients,
            "counts": sample.counts, "asd_inside": sample.contains(g, tol), "verdict": status}


def _torch_gradient(fn, x: np.ndarray, dtype) -> np.ndarray:
    """PyTorch's own gradient, computed in the model's dtype, as float64."""
    import torch

    t = torch.tensor(x, dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(fn(t), t, allow_unused=True)
    return np.zeros(np.shape(x)) if g is None else g.detach().to(torch.float64).numpy()


def _print_audit(report: dict, target: str) -> None:
    from rich.console import Console

    from asd.cli.frameworks import LABELS

    console = Console()
    fw_label = LABELS.get(report["framework"], report["framework"])
    console.print(f"[bold]asd audit[/bold] {target} at x = {report['x'].tolist()} "
                  f"({fw_label})")
    console.print(f"  asd subgradient        {np.round(report['asd'], 6).tolist()}")
    if report["framework_gradient"] is not None:
        console.print(f"  {fw_label + ' gradient':<22} "
                      f"{np.round(report['framework_gradient'], 6).tolist()}")
    grads = report["clarke"]
    console.print(f"  sampled Clarke set     {len(grads)} distinct limiting gradient(s):")
    for g, c in list(zip(grads, report["counts"], strict=True))[:16]:
        console.print(f"      {np.round(np.asarray(g), 6).tolist()}  ({c} directions)")
    if len(grads) > 16:
        console.print(f"      ... {len(grads) - 16} more")
    style = "green" if report["verdict"] == "inside" else (
        "red" if report["verdict"].startswith("outside") else "yellow")
    console.print(f"  verdict                [{style}]{report['verdict']}[/{style}]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="asd audit",
        description="Check a framework's gradient against the Clarke subdifferential.")
    parser.add_argument("target", nargs="?", help="FILE.py:FUNCTION (a scalar function)")
    parser.add_argument("--at", help="the point: JSON ('[0, 0]') or a .npy file")
    parser.add_argument("--framework", choices=[*FRAMEWORK_PREFIXES, "numpy"],
                        help="override the detected framework")
    parser.add_argument("--samples", type=int, default=256,
                        help="directions for the Clarke sample (default 256)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--battery", action="store_true",
                        help="run the built-in catalog of nonsmooth patterns")
    parser.add_argument("--write-docs", metavar="PATH",
                        help="with --battery: write the table as Markdown to PATH")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    if args.battery:
        return _battery(args)
    if not args.target or args.at is None:
        parser.error("give FILE.py:FUNCTION and --at POINT, or --battery")
    from asd.errors import ASDError

    try:
        fn = load_target(args.target)
        x = parse_point(args.at)
        report = audit(fn, x, args.framework, args.samples, args.seed)
    except (ASDError, ValueError, OSError, AttributeError, ModuleNotFoundError) as e:
        print(f"asd audit: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    _print_audit(report, args.target)
    return 1 if report["verdict"].startswith("outside") else 0


def _battery(args) -> int:
    from asd.cli import battery
    from asd.cli import frameworks as fw

    names = fw.available()
    rows = battery.run(names, seed=args.seed, progress=not args.no_progress)
    battery.print_table(rows, names)
    if args.write_docs:
        Path(args.write_docs).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write_docs).write_text(battery.markdown(rows, names), encoding="utf-8")
        print(f"wrote {args.write_docs}")
    bad = [r for r in rows if not (r.asd_ok and r.sampled_ok)]
    for r in bad:
        why = r.asd_error or "its subgradient is outside the exact Clarke set"
        print(f"asd failed on {r.pattern.name!r}: {why}", file=sys.stderr)
    if bad:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
