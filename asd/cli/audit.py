"""``asd audit``: a framework's gradient against the Clarke subdifferential.

``asd audit file.py:fn --at '[0, 0]'`` (or ``--at point.npy``) loads ``fn``, detects the
framework it is written in (PyTorch, JAX, TensorFlow, autograd, or plain numpy/asd), runs
the framework's own autodiff and asd on the *same* program (imported through
``asd.frontends`` for PyTorch, JAX and TensorFlow), samples the Clarke set with
``asd.clarke`` and prints a verdict, each only as far as it is proven: ``inside`` (the
framework's gradient is in the hull of limiting gradients asd found, so it is a Clarke
subgradient), ``outside`` (it is outside asd's outer enclosure of the Clarke set, printed with
the separating direction and the margin; "the Clarke set is a single gradient" when the
enclosure is one point: the function is strictly differentiable there and the framework is
simply wrong) or ``undetermined`` (the gap between the two, and what would settle it). Exit
code 0 inside, 1 outside, 3 undetermined, 2 when the target cannot be audited (no such file
or function, an operation asd cannot import, a bad point).

``fn`` must be a scalar function of one array. Before anything is imported, `check_target`
says so by name when it is not: a function of several arguments, one that fails when called
on the ``--at`` point itself (a point of the wrong shape), one whose value there is not a
scalar. Those are the causes, and the messages name the fix, instead of whatever error the
importer would meet further on.

The sample is an inner approximation of the Clarke set and the enclosure an outer one
(`asd.analysis.enclosure`; the set itself on regular programs), so a gradient between them is
undetermined: ``--samples`` raises the number of directions, which can only move it inside.

``asd audit --battery`` runs the built-in catalog (``asd.cli.battery``) through every installed
framework against exact Clarke sets, prints the table and, with ``--write-docs PATH``, writes
it as Markdown. It exits 0 after printing unless asd itself leaves an exact set.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

from asd.cli.main import load_target

FRAMEWORK_PREFIXES = {"torch": "torch", "jax": "jax", "tensorflow": "tensorflow",
                      "autograd": "autograd"}

_TF_PACKAGES = ("tensorflow", "keras", "tf_keras")


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
    if any(n.split(".")[0] == "keras" for n in names) and _keras_on_tensorflow():
        return "tensorflow"                 # a Keras-only file: Keras on its TensorFlow backend
    return "numpy"


def _keras_on_tensorflow() -> bool:
    keras = sys.modules.get("keras")
    try:
        return keras is not None and keras.backend.backend() == "tensorflow"
    except AttributeError:                  # Keras 2 (tf.keras) has no backend() name: TF
        return True


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
    except (json.JSONDecodeError, ValueError, TypeError) as e:  # not JSON, or not numbers
        raise ValueError(f"--at must be a JSON array of numbers like '[0, 0]' (rows of equal "
                         f"length for a matrix) or a .npy file, got {text!r}") from e


def torch_dtype(fn):
    """The dtype a PyTorch function runs in: its parameters' (float32, bfloat16...), or
    float64 for a function without parameters (the point's own precision)."""
    import torch

    from asd.frontends import torch as frontend

    return frontend.dtype_of(fn) or torch.float64


def tf_dtype(fn):
    """The dtype a TensorFlow function runs in: that of the first floating variable it reaches
    (a Keras model's float32...), or float64 without any (the point's own precision)."""
    import tensorflow as tf

    from asd.frontends.reach import walk

    def framework_object(v) -> bool:
        return type(v).__module__.split(".")[0] in _TF_PACKAGES

    for _, v in walk(fn, opaque=framework_object):
        if not framework_object(v):
            continue
        owned = [v] if hasattr(v, "assign") else list(getattr(v, "variables", ()) or ())
        for var in owned:
            try:
                dtype = tf.as_dtype(var.dtype)
            except (TypeError, AttributeError):     # not a variable after all
                continue
            if dtype.is_floating:
                return dtype
    return tf.float64


def native_point(framework: str, fn, x: np.ndarray):
    """The point as the framework's own array, in the dtype the function runs in."""
    if framework == "torch":
        import torch

        return torch.tensor(x, dtype=torch_dtype(fn))
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(x)
    if framework == "tensorflow":
        import tensorflow as tf

        return tf.constant(x, dtype=tf_dtype(fn))
    return np.array(x, dtype=float)


def signature_problem(fn) -> str | None:
    """Why ``fn`` cannot be called with one positional array, in words (None where it can, or
    where Python cannot say: a builtin or a C extension)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional if p.default is p.empty]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    takes_one = positional or any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(required) <= 1 and not keyword and takes_one:
        return None
    if not takes_one and not keyword:
        return "takes no arguments"
    names = ", ".join(required + [f"*, {k}" for k in keyword])
    return f"takes {len(required) + len(keyword)} required arguments ({names})"


def check_target(fn, framework: str, x: np.ndarray, name: str = "fn") -> None:
    """Raise, naming the cause and the fix, where ``fn`` is not a scalar function of the one
    array ``x``: asd audit calls ``fn(x)`` and differentiates that, and the errors the importers
    would meet further on (torch.export, jaxprs, asd's tracer) do not say that the point or the
    function's signature is what is wrong."""
    from asd.errors import ArgumentError, OutputError, ShapeError

    problem = signature_problem(fn)
    if problem == "takes no arguments":
        raise ArgumentError(
            f"`{name}` takes no arguments, but asd audit calls it on the --at point: give it "
            f"one array argument (def {name}(x): ...) and compute the loss from it.")
    if problem is not None:
        raise ArgumentError(
            f"`{name}` {problem}, but asd audit differentiates a function of one array, the "
            f"--at point. Add a one-argument function to your file that fixes the other "
            f"arguments and audit that one, e.g.\n    def {name}_x(x):\n        return "
            f"{name}(x, ...)   # the other arguments fixed\nthen run `asd audit "
            f"FILE.py:{name}_x --at POINT`.")
    try:
        out = fn(native_point(framework, fn, x))
    except Exception as e:  # the user's function, on the user's point: any error it raises
        raise ArgumentError(
            f"`{name}` raised {type(e).__name__} when called on the --at point, an array of "
            f"shape {x.shape}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}\n"
            f"asd audit calls `{name}` on exactly that array. If the shape is wrong, give "
            f"--at a point of the shape `{name}` takes (JSON such as '[0, 0, 0]', nested "
            f"lists for a matrix, or a .npy file); otherwise the error is in `{name}` itself."
        ) from e
    shape = _shape(out)
    if shape is None:
        raise OutputError(
            f"`{name}` returns a {type(out).__name__} at the --at point"
            f"{' (a missing return?)' if out is None else ''}, but asd audit checks the "
            f"gradient of a scalar function (a loss): make `{name}` return the loss alone, as "
            f"a number or a one-entry array.")
    if int(np.prod(shape)) != 1:
        raise ShapeError(
            f"`{name}` returns an array of shape {shape} at the --at point (shape {x.shape}), "
            f"but asd audit checks the gradient of a scalar function (a loss). If the point "
            f"has the wrong shape, give --at one of the shape `{name}` takes; if `{name}` is "
            f"vector-valued, audit a scalar function of it, e.g.\n    def {name}_sum(x):\n"
            f"        return {name}(x).sum()")


def _shape(out) -> tuple[int, ...] | None:
    """The shape of a framework array or number (None for tuples, dicts, strings...)."""
    if isinstance(out, int | float | np.generic):
        return ()
    shape = getattr(out, "shape", None)
    if shape is None or isinstance(out, str):
        return None
    try:
        return tuple(int(n) for n in shape)
    except TypeError:                       # an unknown dimension
        return None


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
        import tensorflow as tf

        from asd.frontends import tf as frontend

        tprog = frontend.import_program(fn, tf.constant(x, dtype=tf_dtype(fn)))
        return lambda a: tprog.numpy_fn(a)
    return fn


def audit(fn, x: np.ndarray, framework: str | None = None, samples: int = 256,
          seed: int = 0, name: str | None = None) -> dict:
    """Everything ``asd audit`` prints, as a dict (see `main`); ``name`` is how messages call
    ``fn`` (its ``__name__`` by default)."""
    import asd
    from asd.cli import frameworks as fw

    framework = framework or detect(fn)
    x = np.asarray(x, dtype=float)
    check_target(fn, framework, x, name or getattr(fn, "__name__", type(fn).__name__))
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
    elif framework == "tensorflow":
        tf_type = tf_dtype(fn)
        dtype = np.float32 if tf_type.name == "bfloat16" else np.dtype(tf_type.name)
        if tf_type.name != "float64":
            eps = 64 * float(np.finfo(np.float32 if tf_type.name == "bfloat16"
                                      else dtype).eps)
    xa = np.asarray(x, dtype=dtype)
    g = np.asarray(asd.subgrad(program, seed=seed)(xa), dtype=float)
    sample = asd.clarke(program, n=samples, seed=seed)(xa)
    framework_grad = None
    if framework == "torch":
        framework_grad = _torch_gradient(fn, x, t_dtype)
    elif framework == "tensorflow":
        framework_grad = _tf_gradient(fn, x, tf_type)
    elif framework != "numpy":
        framework_grad = fw.gradient(framework, fn, x)
    tol = None if eps is None else eps * max(1.0, float(np.max(np.abs(sample.gradients))))
    membership = None
    if framework_grad is None:
        status = "no framework gradient (plain numpy function)"
    elif not np.all(np.isfinite(framework_grad)):
        status = "outside (not finite)"
    else:
        membership = sample.contains(framework_grad, tol)
        status = membership.verdict
        enc = sample.enclosure
        if status == "outside" and enc is not None and enc.bounded and not enc.kinds:
            status = "outside (the Clarke set is a single gradient)"
    report = {"framework": framework, "x": np.asarray(x, dtype=float), "asd": g,
              "framework_gradient": framework_grad, "clarke": sample.gradients,
              "counts": sample.counts, "asd_inside": bool(sample.contains(g, tol)),
              "verdict": status, "enclosure": sample.enclosure}
    if membership is not None:
        report.update(margin=membership.margin, direction=membership.direction,
                      gap=(membership.outer, membership.inner), settle=membership.settle)
    return report


EXIT_CODES = {"inside": 0, "outside": 1, "undetermined": 3}
"""``asd audit``'s exit status by verdict (2: the target could not be audited)."""


def exit_code(verdict: str) -> int:
    """0 inside (or nothing to judge), 1 outside (certified), 3 undetermined.

    >>> exit_code("outside (the Clarke set is a single gradient)"), exit_code("undetermined")
    (1, 3)
    """
    return EXIT_CODES.get(verdict.split(" ")[0], 0)


def _torch_gradient(fn, x: np.ndarray, dtype) -> np.ndarray:
    """PyTorch's own gradient, computed in the model's dtype, as float64."""
    import torch

    t = torch.tensor(x, dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(fn(t), t, allow_unused=True)
    return np.zeros(np.shape(x)) if g is None else g.detach().to(torch.float64).numpy()


def _tf_gradient(fn, x: np.ndarray, dtype) -> np.ndarray:
    """TensorFlow's own gradient, computed in the function's dtype, as float64."""
    import tensorflow as tf

    t = tf.Variable(tf.constant(x, dtype=dtype))
    with tf.GradientTape() as tape:
        y = fn(t)
    g = tape.gradient(y, t)
    return np.zeros(np.shape(x)) if g is None else np.asarray(tf.cast(g, tf.float64))


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
        console.print(f"      {np.round(np.asarray(g, dtype=float), 6).tolist()}  "
                      f"({c} directions)")
    if len(grads) > 16:
        console.print(f"      ... {len(grads) - 16} more")
    enc = report.get("enclosure")
    if enc is not None:
        what = ("exact: the program is regular there" if enc.exact else
                "unbounded: " + "; ".join(enc.unbounded) if enc.unbounded else
                f"{len(enc.kinds)} factors, {enc.size} points")
        console.print(f"  outer enclosure        {what}")
    style = "green" if report["verdict"] == "inside" else (
        "red" if report["verdict"].startswith("outside") else "yellow")
    console.print(f"  verdict                [{style}]{report['verdict']}[/{style}]")
    if report["verdict"].startswith("outside") and report.get("direction") is not None:
        console.print(f"  separating direction   {np.round(report['direction'], 6).tolist()} "
                      f"(margin {report['margin']:.3g}: certified)")
    if report["verdict"] == "undetermined":
        lower, inner = report["gap"]
        console.print(f"  gap                    distance to the sampled hull {inner:.3g}, "
                      f"proven distance to the Clarke set >= {lower:.3g}")
        console.print(f"  what would settle it   {report['settle']}")


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
        report = audit(fn, x, args.framework, args.samples, args.seed,
                       name=args.target.rpartition(":")[2])
    except (ASDError, ValueError, OSError, AttributeError, ImportError) as e:
        print(f"asd audit: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    _print_audit(report, args.target)
    return exit_code(report["verdict"])


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
    bad = [r for r in rows if not (r.asd_ok and r.sampled_ok and r.outer_ok)]
    for r in bad:
        why = r.asd_error or ("its subgradient is outside the exact Clarke set" if not (
            r.asd_ok and r.sampled_ok) else "its verdict or enclosure contradicts the exact set")
        print(f"asd failed on {r.pattern.name!r}: {why}", file=sys.stderr)
    if bad:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
