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

``fn`` is a scalar function. A function of several arguments takes one ``--at`` per
argument, in order (``--at '[0, 0]' --at '[1, 2]'``), and ``--argnums`` (``0``, or ``0,1``)
picks the arguments differentiated (the first by default); the others stay fixed at their
points, and the differentiated ones are audited together, as one vector. Before anything is
imported, `check_target` says so by name when the target does not fit: more required
arguments than points, a call that fails on the points themselves (a point of the wrong shape),
a value that is not a scalar. Those are the causes, and the messages name the fix, instead of
whatever error the importer would meet further on.

Numbers print in the dtype the function runs in (a float32 model's gradient as float32:
``0.3``, not ``0.30000001192092896``), and every line fits 80 columns.

The sample is an inner approximation of the Clarke set and the enclosure an outer one
(`asd.analysis.enclosure`; the set itself on regular programs), so a gradient between them is
undetermined: ``--samples`` raises the number of directions, which can only move it inside.

``asd audit --battery`` runs the built-in catalog (``asd.cli.battery``) through every installed
framework against exact Clarke sets, prints the table and, with ``--write-docs PATH``, writes
it as Markdown. It exits 0 after printing unless asd itself leaves an exact set.
``asd audit --zoo`` does the same for the kink zoo (``asd.cli.zoo``: framework behaviours at
kinks reported in public issues, each cited) and writes docs/kink-zoo.md with ``--write-docs``.

``asd audit --train script.py [-- ARGS...]`` runs a PyTorch training script as ``python
script.py ARGS`` would, with every model it trains watched by `asd.torch.audit` (the census of
ties per layer and primitive, asd's element and the certified verdict at each audited step):
a live table, then the summary; ``--log PATH`` writes the JSON log and ``--plot PATH`` the
plots of ties and verdicts over training. It exits 1 if a step was certified outside, 3 if one
stayed undetermined, 0 otherwise.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import textwrap
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


def framework_dtype(framework: str, fn):
    """The dtype ``fn`` runs in, as its framework names it (None for JAX and numpy)."""
    if framework == "torch":
        return torch_dtype(fn)
    if framework == "tensorflow":
        return tf_dtype(fn)
    return None


def dtype_name(framework: str, dtype) -> str:
    """``'float32'``, ``'bfloat16'``...: the precision results are printed in."""
    if framework == "jax":
        import jax

        return "float64" if jax.config.jax_enable_x64 else "float32"
    if dtype is None:
        return "float64"
    return str(getattr(dtype, "name", dtype)).replace("torch.", "")


def native_point(framework: str, fn, x: np.ndarray, dtype=None):
    """The point as the framework's own array, in the dtype the function runs in."""
    if framework == "torch":
        import torch

        return torch.tensor(x, dtype=dtype or torch_dtype(fn))
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(x)
    if framework == "tensorflow":
        import tensorflow as tf

        return tf.constant(x, dtype=dtype or tf_dtype(fn))
    return np.array(x, dtype=float)


def signature_problem(fn, n: int = 1) -> str | None:
    """Why ``fn`` cannot be called with ``n`` positional arrays, in words (None where it can,
    or where Python cannot say: a builtin or a C extension)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional if p.default is p.empty]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    takes = len(positional) >= n or varargs
    if len(required) <= n and not keyword and takes:
        return None
    if not positional and not varargs and not keyword:
        return "takes no arguments"
    names = ", ".join(required + [f"*, {k}" for k in keyword])
    if not takes:
        return f"takes {len(positional)} arguments ({names}) but {n} points were given"
    return f"takes {len(required) + len(keyword)} required arguments ({names})"


def check_target(fn, framework: str, x, name: str = "fn", dtype=None) -> None:
    """Raise, naming the cause and the fix, where ``fn`` is not a scalar function of the
    points ``x`` (one array, or a list of arrays: one per argument): asd audit calls
    ``fn(*x)`` and differentiates that, and the errors the importers would meet further on
    (torch.export, jaxprs, asd's tracer) do not say that the point or the function's
    signature is what is wrong."""
    from asd.errors import ArgumentError, OutputError, ShapeError

    points = list(x) if isinstance(x, list) else [x]
    problem = signature_problem(fn, len(points))
    if problem == "takes no arguments":
        raise ArgumentError(
            f"`{name}` takes no arguments, but asd audit calls it on the --at point: give it "
            f"one array argument (def {name}(x): ...) and compute the loss from it.")
    if problem is not None:
        raise ArgumentError(
            f"`{name}` {problem}, but asd audit was given {len(points)} point(s) (--at). Give "
            f"one --at per argument, in order (--at X --at Y), and --argnums for the ones "
            f"to differentiate (the first by default); or add a one-argument function to "
            f"your file that fixes the other arguments, e.g.\n    def {name}_x(x):\n        "
            f"return {name}(x, ...)   # the other arguments fixed\nand run `asd audit "
            f"FILE.py:{name}_x --at POINT`.")
    shapes = " and ".join(str(np.shape(p)) for p in points)
    try:
        out = fn(*[native_point(framework, fn, p, dtype) for p in points])
    except Exception as e:  # the user's function, on the user's point: any error it raises
        raise ArgumentError(
            f"`{name}` raised {type(e).__name__} when called on the --at point, an array of "
            f"shape {shapes}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}\n"
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
            f"`{name}` returns an array of shape {shape} at the --at point (shape {shapes}), "
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


def bind(fn, framework: str, points: list[np.ndarray], argnums: tuple[int, ...], dtype=None):
    """``(g, z, parts)``: ``g(z)`` is ``fn`` with the arguments ``argnums`` read from the flat
    vector ``z`` (their points concatenated) and the others fixed at their points, in the
    framework's arrays; ``parts`` is ``[(argnum, shape, slice of z)]``. One point
    differentiated as argument 0 gives ``fn`` itself."""
    if len(points) == 1 and argnums == (0,):
        return fn, points[0], [(0, points[0].shape, slice(0, points[0].size))]
    parts, start = [], 0
    for i in argnums:
        parts.append((i, points[i].shape, slice(start, start + points[i].size)))
        start += points[i].size
    z = np.concatenate([np.ravel(points[i]) for i in argnums])
    fixed = {i: native_point(framework, fn, p, dtype) for i, p in enumerate(points)
             if i not in argnums}
    reshape = _reshaper(framework)

    def g(z):
        args = dict(fixed)
        for i, shape, where in parts:
            args[i] = reshape(z[where], shape)
        return fn(*[args[i] for i in range(len(points))])

    g.__module__ = getattr(fn, "__module__", None)   # the importers walk it as user code
    g.__name__ = getattr(fn, "__name__", "fn")
    return g, z, parts


def _reshaper(framework: str) -> Callable:
    if framework == "tensorflow":
        import tensorflow as tf

        return lambda a, shape: tf.reshape(a, shape)
    return lambda a, shape: a.reshape(shape)


def asd_program(fn, framework: str, x: np.ndarray, dtype=None) -> Callable:
    """``fn`` as a function of numpy arrays that asd can sweep (imported if need be)."""
    if framework == "torch":
        from asd.frontends import torch as frontend

        prog = frontend.import_program(fn, native_point(framework, fn, x, dtype))
        return lambda a: prog.numpy_fn(a)
    if framework == "jax":
        import jax.numpy as jnp

        from asd.frontends import jax as frontend

        jprog = frontend.JaxProgram(fn, (jnp.asarray(x),))
        return jprog.numpy_fn
    if framework == "tensorflow":
        from asd.frontends import tf as frontend

        tprog = frontend.import_program(fn, native_point(framework, fn, x, dtype))
        return lambda a: tprog.numpy_fn(a)
    return fn


def _rounding(framework: str, dtype) -> tuple[type, float | None]:
    """The numpy dtype asd sweeps the point in, and the rounding allowance's epsilon (None
    for float64: asd's default tolerance)."""
    if framework == "jax":
        return np.float32, 1e-5
    if framework == "torch" and dtype is not None:
        import torch

        sweep = np.float32 if dtype == torch.bfloat16 else np.dtype(str(dtype)[6:]).type
        return sweep, None if dtype == torch.float64 else 64 * torch.finfo(dtype).eps
    if framework == "tensorflow" and dtype is not None:
        if dtype.name == "float64":
            return np.float64, None
        sweep = np.float32 if dtype.name == "bfloat16" else np.dtype(dtype.name).type
        eps = float(np.finfo(np.float32 if dtype.name == "bfloat16" else sweep).eps)
        return sweep, 64 * eps
    return np.float64, None


def audit(fn, x, framework: str | None = None, samples: int = 256, seed: int = 0,
          name: str | None = None, argnums: int | tuple[int, ...] | None = None) -> dict:
    """Everything ``asd audit`` prints, as a dict (see `main`); ``name`` is how messages call
    ``fn`` (its ``__name__`` by default). ``x`` is the point: one array, or a list of arrays
    (one per argument of ``fn``) with ``argnums`` the differentiated ones (default 0)."""
    import asd
    from asd.cli import frameworks as fw
    from asd.errors import ArgumentError

    framework = framework or detect(fn)
    several = isinstance(x, list | tuple) and len(x) > 0 and all(
        isinstance(p, np.ndarray) for p in x)
    points = [np.asarray(p, dtype=float) for p in x] if several else [
        np.asarray(x, dtype=float)]
    nums = (0,) if argnums is None else (argnums,) if isinstance(argnums, int) else tuple(
        argnums)
    if not nums or any(not 0 <= i < len(points) for i in nums) or len(set(nums)) < len(nums):
        raise ArgumentError(f"--argnums {','.join(map(str, nums))} does not pick distinct "
                            f"arguments among the {len(points)} given (0 to "
                            f"{len(points) - 1})")
    label = name or getattr(fn, "__name__", type(fn).__name__)
    dtype = framework_dtype(framework, fn)
    check_target(fn, framework, points if several else points[0], label, dtype)
    target, z, parts = bind(fn, framework, points, nums, dtype)
    program = asd_program(target, framework, z, dtype)
    sweep_dtype, eps = _rounding(framework, dtype)
    za = np.asarray(z, dtype=sweep_dtype)
    g = np.asarray(asd.subgrad(program, seed=seed)(za), dtype=float)
    sample = asd.clarke(program, n=samples, seed=seed)(za)
    framework_grad = None
    if framework == "torch":
        framework_grad = _torch_gradient(target, z, dtype)
    elif framework == "tensorflow":
        framework_grad = _tf_gradient(target, z, dtype)
    elif framework != "numpy":
        framework_grad = fw.gradient(framework, target, z)
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
    report = {"framework": framework, "x": np.asarray(z, dtype=float), "asd": g,
              "framework_gradient": framework_grad, "clarke": sample.gradients,
              "counts": sample.counts, "asd_inside": bool(sample.contains(g, tol)),
              "verdict": status, "enclosure": sample.enclosure,
              "dtype": dtype_name(framework, dtype), "parts": parts, "points": points}
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

    t = torch.tensor(x, dtype=dtype or torch_dtype(fn), requires_grad=True)
    (g,) = torch.autograd.grad(fn(t), t, allow_unused=True)
    return np.zeros(np.shape(x)) if g is None else g.detach().to(torch.float64).numpy()


def _tf_gradient(fn, x: np.ndarray, dtype) -> np.ndarray:
    """TensorFlow's own gradient, computed in the function's dtype, as float64."""
    import tensorflow as tf

    t = tf.Variable(tf.constant(x, dtype=dtype or tf_dtype(fn)))
    with tf.GradientTape() as tape:
        y = fn(t)
    g = tape.gradient(y, t)
    return np.zeros(np.shape(x)) if g is None else np.asarray(tf.cast(g, tf.float64))


# ----- printing: numbers in the function's dtype, lines within 80 columns -----

WIDTH = 80
LABEL = 25
"""Where values start after a label (``'  asd subgradient        '``)."""


def number(v: float, dtype: str = "float64") -> str:
    """``v`` as the shortest decimal that reads back as the same ``dtype`` number: float32
    prints as float32 (``0.3``, not ``0.30000001192092896``).

    >>> number(np.float32(0.3), "float32"), number(0.1 + 0.2), number(1e-9, "float32")
    ('0.3', '0.30000000000000004', '1e-09')
    """
    value = _typed(v, dtype)
    if not np.isfinite(value):
        return str(float(value))
    if value != 0 and not 1e-4 <= abs(float(value)) < 1e16:
        return np.format_float_scientific(value, unique=True, trim="-")
    return np.format_float_positional(value, unique=True, trim="0")


def _typed(v: float, dtype: str):
    if dtype in ("bfloat16", "float8_e4m3fn"):
        try:
            import ml_dtypes
        except ImportError:                  # without ml_dtypes: the exact float32 value
            return np.float32(v)
        return np.float32(getattr(ml_dtypes, dtype)(v))
    return np.dtype(dtype).type(v) if dtype in ("float16", "float32", "float64") else \
        np.float64(v)


def vector_lines(label: str, values, dtype: str = "float64", note: str = "") -> list[str]:
    """``label`` and the list ``values``, wrapped at `WIDTH` with continuation lines indented
    under the values (a vector of any length stays within 80 columns)."""
    flat = np.ravel(np.asarray(values, dtype=float))
    items = [number(v, dtype) for v in flat]
    text = "[" + ", ".join(items) + "]" + (f"  {note}" if note else "")
    if len(label) > LABEL - 3:              # a long label: the values start below it
        return [f"  {label}", *textwrap.wrap(text, WIDTH, initial_indent=" " * LABEL,
                                             subsequent_indent=" " * LABEL,
                                             break_on_hyphens=False)]
    head = f"  {label:<{LABEL - 2}}"
    lines = textwrap.wrap(text, WIDTH, initial_indent=head, subsequent_indent=" " * LABEL,
                          break_on_hyphens=False)
    return lines or [head.rstrip()]


def _wrapped(label: str, text: str) -> list[str]:
    head = f"  {label:<{LABEL - 2}}"
    return textwrap.wrap(text, WIDTH, initial_indent=head, subsequent_indent=" " * LABEL,
                         break_on_hyphens=False, break_long_words=True)


def report_lines(report: dict, target: str) -> list[str]:
    """What ``asd audit`` prints, one line each, none past 80 columns (rich markup in the
    verdict only)."""
    from asd.cli.frameworks import LABELS

    dtype = report.get("dtype", "float64")
    fw_label = LABELS.get(report["framework"], report["framework"])
    parts = report.get("parts") or [(0, np.shape(report["x"]), slice(None))]
    lines = textwrap.wrap(f"asd audit {target} ({fw_label}, {dtype})", WIDTH)
    vectors = [("at x", report["x"])] if len(parts) == 1 else [
        (f"at argument {i}", np.asarray(report["x"])[where]) for i, _, where in parts]
    for label, v in vectors:
        lines += vector_lines(label, v, dtype)
    for label, key in (("asd subgradient", "asd"),
                       (f"{fw_label} gradient", "framework_gradient")):
        if report.get(key) is None:
            continue
        for i, _, where in parts:
            suffix = f" (arg {i})" if len(parts) > 1 else ""
            lines += vector_lines(label + suffix, np.asarray(report[key])[where], dtype)
    grads = report["clarke"]
    lines += _wrapped("sampled Clarke set", f"{len(grads)} distinct limiting gradient(s):")
    for g, c in list(zip(grads, report["counts"], strict=True))[:16]:
        lines += vector_lines("", g, dtype, f"({c} directions)")
    if len(grads) > 16:
        lines.append(" " * LABEL + f"... {len(grads) - 16} more")
    enc = report.get("enclosure")
    if enc is not None:
        what = ("exact: the program is regular there" if enc.exact else
                "unbounded: " + "; ".join(enc.unbounded) if enc.unbounded else
                f"{len(enc.kinds)} factors, {enc.size} points")
        lines += _wrapped("outer enclosure", what)
    style = "green" if report["verdict"] == "inside" else (
        "red" if report["verdict"].startswith("outside") else "yellow")
    verdict = _wrapped("verdict", report["verdict"])
    verdict[0] = verdict[0].replace(report["verdict"].split(" ")[0],
                                    f"[{style}]{report['verdict'].split(' ')[0]}[/{style}]", 1)
    lines += verdict
    if report["verdict"].startswith("outside") and report.get("direction") is not None:
        lines += vector_lines("separating direction", report["direction"], "float64",
                              f"(margin {report['margin']:.3g}: certified)")
    if report["verdict"] == "undetermined":
        lower, inner = report["gap"]
        lines += _wrapped("gap", f"distance to the sampled hull {inner:.3g}, proven distance "
                                 f"to the Clarke set >= {lower:.3g}")
        lines += _wrapped("what would settle it", report["settle"])
    return lines


def _print_audit(report: dict, target: str) -> None:
    from rich.console import Console

    console = Console(width=WIDTH, highlight=False)
    for line in report_lines(report, target):
        console.print(line, soft_wrap=True)


def parse_argnums(text: str) -> tuple[int, ...]:
    """``'0'`` or ``'0,2'`` -> ``(0,)``, ``(0, 2)``.

    >>> parse_argnums("0, 2")
    (0, 2)
    """
    try:
        return tuple(int(a) for a in text.split(","))
    except ValueError as e:
        raise ValueError(f"--argnums takes argument positions like 0 or 0,1, got "
                         f"{text!r}") from e


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="asd audit",
        description="Check a framework's gradient against the Clarke subdifferential.")
    parser.add_argument("target", nargs="?", help="FILE.py:FUNCTION (a scalar function)")
    parser.add_argument("--at", action="append",
                        help="the point: JSON ('[0, 0]') or a .npy file; once per argument")
    parser.add_argument("--argnums", default="0",
                        help="the arguments differentiated: 0 (default), or 0,1")
    parser.add_argument("--framework", choices=[*FRAMEWORK_PREFIXES, "numpy"],
                        help="override the detected framework")
    parser.add_argument("--samples", type=int, default=None,
                        help="directions for the Clarke sample (default 256; 16 with --train)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--battery", action="store_true",
                        help="run the built-in catalog of nonsmooth patterns")
    parser.add_argument("--zoo", action="store_true",
                        help="run the kink zoo: framework behaviours from public issues")
    parser.add_argument("--write-docs", metavar="PATH",
                        help="with --battery or --zoo: write the table as Markdown to PATH")
    parser.add_argument("--train", metavar="SCRIPT",
                        help="run a PyTorch training script with its models audited")
    parser.add_argument("--every", type=int, default=1,
                        help="with --train: audit one backward pass in N (default 1)")
    parser.add_argument("--checks", default="ties,equal,clarke",
                        help="with --train: what to check (default ties,equal,clarke)")
    parser.add_argument("--sweep", choices=["ties", "always"], default="ties",
                        help="with --train: run asd at steps with live ties, or always")
    parser.add_argument("--log", metavar="PATH", help="with --train: write the JSON log")
    parser.add_argument("--plot", metavar="PATH", help="with --train: write the plots")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar or live table")
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.script_args = argv[split + 1:]       # with --train: the script's own arguments

    if args.battery:
        return _battery(args)
    if args.zoo:
        return _zoo(args)
    if args.train:
        args.samples = 16 if args.samples is None else args.samples
        return _train(args)
    if not args.target or not args.at:
        parser.error("give FILE.py:FUNCTION and --at POINT, --battery, --zoo or --train")
    from asd.errors import ASDError

    try:
        fn = load_target(args.target)
        points = [parse_point(a) for a in args.at]
        report = audit(fn, points if len(points) > 1 else points[0], args.framework,
                       256 if args.samples is None else args.samples, args.seed,
                       name=args.target.rpartition(":")[2],
                       argnums=parse_argnums(args.argnums))
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


def _zoo(args) -> int:
    from asd.cli import frameworks as fw
    from asd.cli import zoo

    names = fw.available()
    rows = zoo.run(names, seed=args.seed, progress=not args.no_progress)
    zoo.print_table(rows, names)
    if args.write_docs:
        Path(args.write_docs).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write_docs).write_text(zoo.markdown(rows, names), encoding="utf-8")
        print(f"wrote {args.write_docs}")
    bad = zoo.failures(rows)
    for line in bad:
        print(f"asd failed on {line}", file=sys.stderr)
    return 1 if bad else 0


# ----- asd audit --train script.py -----


class _Attacher:
    """Attaches `asd.torch.audit` to every root module the script trains: a module called
    with gradients on, outside any other module's forward, with parameters that require grad
    (each model of the script once, from its first forward on)."""

    def __init__(self, **options):
        self.options, self.audits, self.depth, self.handles = options, {}, 0, []

    def __enter__(self):
        from torch.nn.modules import module

        self.handles = [module.register_module_forward_pre_hook(self._pre),
                        module.register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()
        for monitor in self.audits.values():
            monitor.__exit__(*exc)

    def _pre(self, module, args) -> None:
        import torch

        self.depth += 1
        if self.depth != 1 or id(module) in self.audits or not torch.is_grad_enabled():
            return
        if any(monitor._busy for monitor in self.audits.values()):
            return
        if not any(p.requires_grad for p in module.parameters()):
            return
        import asd.torch

        monitor = asd.torch.audit(module, **self.options)
        monitor.__enter__()
        monitor.log.meta["name"] = f"{type(module).__name__} #{len(self.audits) + 1}"
        self.audits[id(module)] = monitor
        monitor._pre(module, args, {})      # this call too (its keywords come to _post)

    def _post(self, module, args, out) -> None:
        self.depth -= 1


def train(script: str, script_args: list[str], **options) -> dict:
    """Run ``script`` (as ``python script.py ARGS`` would) with every model it trains
    monitored by `asd.torch.audit` (``options``: ``every``, ``checks``, ``samples``,
    ``seed``, ``sweep``, ``live``); returns ``{name: TrainingLog}``."""
    import runpy

    path = Path(script)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    argv = sys.argv
    sys.argv = [str(path), *script_args]
    try:
        with _Attacher(**options) as attacher:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv
    return {m.log.meta["name"]: m.log for m in attacher.audits.values()}


def train_exit_code(logs: dict) -> int:
    """1 if a step was certified outside, else 3 if one stayed undetermined, else 0."""
    verdicts = {r.verdict for log in logs.values() for r in log}
    return 1 if "outside" in verdicts else 3 if "undetermined" in verdicts else 0


def _train(args) -> int:
    from rich.console import Console

    from asd.errors import ASDError

    console = Console(width=80)
    checks = tuple(c.strip() for c in args.checks.split(","))
    live = console.is_terminal and not args.no_progress
    try:
        logs = train(args.train, args.script_args, every=args.every, checks=checks,
                     samples=args.samples, seed=args.seed, sweep=args.sweep, live=live)
    except (ASDError, OSError, ImportError) as e:
        print(f"asd audit: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if not logs:
        print(f"asd audit: {args.train} trained no PyTorch model (no nn.Module with "
              "parameters was called with gradients on)", file=sys.stderr)
        return 2
    for name, log in logs.items():
        if not live:
            console.print(log.table(title=f"asd audit --train · {name}"))
        for line in log.lines():
            console.print(line, highlight=False)
    for suffix, (_, log) in _suffixed(logs):
        if args.log:
            log.to_json(_with_suffix(args.log, suffix))
            console.print(f"wrote {_with_suffix(args.log, suffix)}", highlight=False)
        if args.plot:
            log.plot(_with_suffix(args.plot, suffix))
            console.print(f"wrote {_with_suffix(args.plot, suffix)}", highlight=False)
    return train_exit_code(logs)


def _suffixed(logs: dict):
    """``('', (name, log))`` for one model, ``('-1', ...)``, ``('-2', ...)`` for several."""
    items = list(logs.items())
    return [("" if len(items) == 1 else f"-{i + 1}", item) for i, item in enumerate(items)]


def _with_suffix(path: str, suffix: str) -> str:
    p = Path(path)
    return str(p.with_name(p.stem + suffix + p.suffix))


if __name__ == "__main__":
    sys.exit(main())
