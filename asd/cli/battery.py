"""The audit battery: nonsmooth patterns at their kinks, with their exact Clarke sets.

Each `Pattern` is written once against an operations namespace (``ops.relu``,
``ops.maximum``, ``ops.sort`` ...; see `asd.cli.frameworks.ops`), so the same program runs under
asd and under every installed framework's own autodiff. Its Clarke subdifferential at the
point is derived by hand and stored exactly (`Hull` of finitely many gradients, or a
Euclidean `Ball`): the battery's verdicts compare against that set, not against a sample.

``asd audit --battery`` (`run`) computes, at run time, asd's subgradient and each framework's
gradient for every pattern and prints the table; nothing in it is hard-coded. It fails (exit
1) only if asd itself leaves the exact set: framework answers outside it are what the table
reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy.optimize import linprog

# ----- exact sets -----


class Hull:
    """The convex hull of finitely many gradients (the Clarke set of piecewise-affine code)."""

    def __init__(self, *vertices):
        self.vertices = np.array([np.atleast_1d(np.asarray(v, dtype=float)) for v in vertices])

    def contains(self, g, tol: float = 1e-6) -> bool:
        g = np.atleast_1d(np.asarray(g, dtype=float)).reshape(-1)
        if not np.all(np.isfinite(g)):
            return False
        V = self.vertices.reshape(len(self.vertices), -1).T
        m = V.shape[1]
        res = linprog(np.zeros(m), A_ub=np.vstack([V, -V]),
                      b_ub=np.concatenate([g + tol, tol - g]), A_eq=np.ones((1, m)),
                      b_eq=[1.0], bounds=(0, None), method="highs")
        return res.status == 0

    @property
    def is_singleton(self) -> bool:
        return bool(np.all(np.abs(self.vertices - self.vertices[0]) < 1e-12))

    def __str__(self) -> str:
        pts = [_fmt(v) for v in self.vertices]
        return pts[0] if self.is_singleton else "conv{" + ", ".join(pts) + "}"


class Ball:
    """``{g : |g - center| <= radius}`` (the Clarke set of a norm at 0)."""

    def __init__(self, center, radius: float):
        self.center = np.atleast_1d(np.asarray(center, dtype=float))
        self.radius = float(radius)

    def contains(self, g, tol: float = 1e-6) -> bool:
        g = np.atleast_1d(np.asarray(g, dtype=float)).reshape(-1)
        if not np.all(np.isfinite(g)):
            return False
        return bool(np.linalg.norm(g - self.center.reshape(-1)) <= self.radius + tol)

    is_singleton = False

    def __str__(self) -> str:
        return f"ball({_fmt(self.center)}, {self.radius:g})"


def _fmt(v) -> str:
    v = np.asarray(v, dtype=float)
    if v.ndim == 0 or v.size == 1:
        return f"{float(v.reshape(-1)[0]):.4g}"
    return "(" + ", ".join(f"{float(a):.4g}" for a in v.reshape(-1)) + ")"


@dataclass(frozen=True)
class Pattern:
    """A program ``f(ops, x)`` at a kink ``x`` with its exact Clarke set."""

    name: str
    formula: str
    x: Any
    f: Callable[[Any, Any], Any]
    clarke: Hull | Ball
    asd_f: Callable[[Any], Any] | None = None
    """asd's own spelling when it has one (``asd.projections.*``); else ``f`` with asd's ops."""

    @property
    def point(self) -> np.ndarray:
        return np.asarray(self.x, dtype=float)


def _e(i: int, n: int) -> np.ndarray:
    return np.eye(n)[i]


def _sort_dot(o, x):
    return o.sum(o.sort(x) * o.asarray([1.0, 2.0]))


def _l2_ball_sum(o, x):
    return o.sum(x / o.maximum(o.asarray(1.0), o.norm(x)))


def _projection(name: str, x, *args):
    """``asd.projections.<name>`` (asd's projection primitive) when present, else the formula."""
    import asd

    proj = getattr(getattr(asd, "projections", None), name, None)
    if proj is not None:
        return proj(x, *args)
    o = asd_ops()
    return x / o.maximum(1.0, o.norm(x)) if name == "l2_ball" else np.clip(x, *args)


CATALOG: list[Pattern] = [
    # identities built from relu: the paper's examples
    Pattern("identity via relu", "relu(x) - relu(-x)", 0.0,
            lambda o, x: o.relu(x) - o.relu(-x), Hull(1.0)),
    Pattern("paper f3", "10x - 9(relu(x) - relu(-x))", 0.0,
            lambda o, x: 10 * x - 9 * (o.relu(x) - o.relu(-x)), Hull(1.0)),
    Pattern("zero via relu", "relu(relu(x)) - relu(x)", 0.0,
            lambda o, x: o.relu(o.relu(x)) - o.relu(x), Hull(0.0)),
    Pattern("relu at 0", "relu(x)", 0.0, lambda o, x: o.relu(x), Hull(0.0, 1.0)),
    Pattern("abs at 0", "|x|", 0.0, lambda o, x: o.abs(x), Hull(-1.0, 1.0)),
    Pattern("zero via abs", "|x| - relu(x) - relu(-x)", 0.0,
            lambda o, x: o.abs(x) - o.relu(x) - o.relu(-x), Hull(0.0)),
    Pattern("identity via max/min", "max(x, 0) + min(x, 0)", 0.0,
            lambda o, x: o.maximum(x, 0.0 * x) + o.minimum(x, 0.0 * x), Hull(1.0)),
    Pattern("zero via max and relu", "max(x, 0) - relu(x)", 0.0,
            lambda o, x: o.maximum(x, 0.0 * x) - o.relu(x), Hull(0.0)),
    Pattern("identity via where", "where(x >= 0, x, -x) - |x| + x", 0.0,
            lambda o, x: o.where(x >= 0, x, -x) - o.abs(x) + x, Hull(1.0)),
    Pattern("max of a value with itself", "max(x, x)", 1.0,
            lambda o, x: o.maximum(x, x), Hull(1.0)),
    Pattern("max of two slopes", "max(x, 2x)", 0.0,
            lambda o, x: o.maximum(x, 2 * x), Hull(1.0, 2.0)),
    Pattern("smooth square of relu", "relu(x)^2", 0.0,
            lambda o, x: o.relu(x) ** 2, Hull(0.0)),
    # clip, hardtanh, relu6, leaky relu
    Pattern("clip at the bound", "clip(x, -1, 1)", 1.0,
            lambda o, x: o.clip(x, -1.0, 1.0), Hull(0.0, 1.0)),
    Pattern("identity via clip", "clip(x, -1, 1) + relu(x - 1) - relu(-1 - x)", 1.0,
            lambda o, x: o.clip(x, -1.0, 1.0) + o.relu(x - 1) - o.relu(-1 - x), Hull(1.0)),
    Pattern("clip to a point", "clip(x, 0, 0)", 0.0,
            lambda o, x: o.clip(x, 0.0, 0.0), Hull(0.0)),
    Pattern("relu6 at 6", "relu6(x)", 6.0, lambda o, x: o.relu6(x), Hull(0.0, 1.0)),
    Pattern("hardtanh at -1", "hardtanh(x)", -1.0, lambda o, x: o.hardtanh(x),
            Hull(0.0, 1.0)),
    Pattern("leaky relu minus its line", "leaky_relu(x, 0.01) - 0.01 x", 0.0,
            lambda o, x: o.leaky_relu(x, 0.01) - 0.01 * x, Hull(0.0, 0.99)),
    # ties in max, sort, topk, median, pooling
    Pattern("max of a tied pair", "max(x1, x2)", [0.0, 0.0],
            lambda o, x: o.maximum(x[0], x[1]), Hull([1, 0], [0, 1])),
    Pattern("reduce max with a tie", "max(x)", [1.0, 1.0, 0.0],
            lambda o, x: o.max(x), Hull(_e(0, 3), _e(1, 3))),
    Pattern("range at a full tie", "max(x) - min(x)", [0.0, 0.0, 0.0],
            lambda o, x: o.max(x) - o.min(x),
            Hull(*[_e(i, 3) - _e(j, 3) for i in range(3) for j in range(3) if i != j])),
    Pattern("sum of sorted", "sum(sort(x))", [0.0, 0.0],
            lambda o, x: o.sum(o.sort(x)), Hull([1, 1])),
    Pattern("weighted sort", "sort(x) . (1, 2)", [0.0, 0.0], _sort_dot,
            Hull([1, 2], [2, 1])),
    Pattern("min via sort", "sort(x)[0]", [0.0, 0.0],
            lambda o, x: o.sort(x)[0], Hull([1, 0], [0, 1])),
    Pattern("top-2 sum at a triple tie", "topk_sum(x, 2)", [1.0, 1.0, 1.0],
            lambda o, x: o.topk_sum(x, 2), Hull([1, 1, 0], [1, 0, 1], [0, 1, 1])),
    Pattern("median at a tie", "median(x)", [0.0, 0.0, 0.0],
            lambda o, x: o.median(x), Hull(_e(0, 3), _e(1, 3), _e(2, 3))),
    Pattern("max pooling ties", "sum(max_pool1d(x, 2))", [0.0, 0.0, 1.0, 1.0],
            lambda o, x: o.sum(o.max_pool1d(x, 2)),
            Hull([1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1])),
    # norms at 0, projections
    Pattern("l2 norm at 0", "|x|_2", [0.0, 0.0], lambda o, x: o.norm(x), Ball([0, 0], 1.0)),
    Pattern("l1 norm at 0", "|x1| + |x2|", [0.0, 0.0],
            lambda o, x: o.sum(o.abs(x)), Hull([1, 1], [1, -1], [-1, 1], [-1, -1])),
    Pattern("linf norm at 0", "max |x_i|", [0.0, 0.0], lambda o, x: o.max(o.abs(x)),
            Hull([1, 0], [-1, 0], [0, 1], [0, -1])),
    Pattern("zero via norm", "|x - x|_2", [1.0, 2.0], lambda o, x: o.norm(x - x),
            Hull([0, 0])),
    Pattern("projection onto the l2 ball", "sum(x / max(1, |x|))", [1.0, 0.0], _l2_ball_sum,
            Hull([1, 1], [0, 1]), lambda x: _projection("l2_ball", x).sum()),
    Pattern("projection onto a box", "sum(clip(x, 0, 1))", [0.0, 1.0],
            lambda o, x: o.sum(o.clip(x, 0.0, 1.0)), Hull([0, 0], [1, 0], [0, 1], [1, 1]),
            lambda x: _projection("box", x, 0.0, 1.0).sum()),
]
"""The patterns of ``asd audit --battery``, in table order."""


# ----- asd's own operations namespace (numpy functions dispatch to asd on traced arrays) -----

def asd_ops() -> SimpleNamespace:
    import asd

    def l2_norm(x):
        return asd.norm(x)

    return SimpleNamespace(
        name="asd", relu=asd.relu, abs=np.abs, maximum=np.maximum, minimum=np.minimum,
        clip=np.clip, sum=np.sum, mean=np.mean, max=np.max, min=np.min, sort=np.sort,
        topk_sum=asd.topk_sum, median=np.median, norm=l2_norm, sqrt=np.sqrt,
        max_pool1d=asd.max_pool1d, leaky_relu=asd.leaky_relu, hardtanh=asd.hardtanh,
        relu6=asd.relu6, where=np.where, stack=np.stack, asarray=np.asarray,
        std=np.std, atan2=np.arctan2, log=np.log, rsqrt=lambda x: 1.0 / np.sqrt(x),
        sinc=np.sinc, take_argmax=lambda x: x[np.argmax(x)],
        pnorm=lambda x, p: asd.norm(x, p), eigvalsh=np.linalg.eigvalsh, svd=np.linalg.svd,
        diag=np.diag,
    )


# ----- running the battery -----

@dataclass
class Row:
    pattern: Pattern
    asd: np.ndarray
    asd_ok: bool
    sampled_ok: bool
    framework: dict[str, tuple[np.ndarray | None, str]]
    asd_error: str = ""
    asd_verdicts: dict[str, str] = field(default_factory=dict)
    """asd's own three-valued verdict on each framework's gradient (`ClarkeSample.contains`)."""
    outer_ok: bool = True
    """No vertex of the exact set is certified outside asd's enclosure, and no verdict of asd
    contradicts the exact set."""


def verdict(clarke: Hull | Ball, g) -> str:
    """``'inside'``, ``'outside'`` or ``'outside (singleton)'`` for a gradient ``g``.

    >>> verdict(Hull(0.0, 1.0), 0.5), verdict(Hull(1.0), 0.0), verdict(Ball([0, 0], 1), [1, 1])
    ('inside', 'outside (singleton)', 'outside')
    """
    if clarke.contains(g):
        return "inside"
    return "outside (singleton)" if clarke.is_singleton else "outside"


def evaluate(pattern: Pattern, frameworks: list[str], seed: int = 0) -> Row:
    """asd's subgradient, a Clarke sample and every framework's gradient for one pattern."""
    import asd
    from asd.cli import frameworks as fw

    o = asd_ops()
    x = pattern.point

    def f(t):
        return pattern.asd_f(t) if pattern.asd_f is not None else pattern.f(o, t)

    sample = None
    try:
        g = np.asarray(asd.subgrad(f, seed=seed)(x), dtype=float)
        sample = asd.clarke(f, n=32, seed=seed)(x)
    except Exception as e:  # asd failing is a battery failure: reported in the table, exit 1
        g = np.full(np.shape(x), np.nan)
        asd_error = f"error: {type(e).__name__}: {e}"
        sampled_ok = False
    else:
        asd_error = ""
        sampled_ok = all(pattern.clarke.contains(s) for s in sample.gradients)
    outer_ok = sample is not None and (not isinstance(pattern.clarke, Hull) or not any(
        sample.contains(v) == "outside" for v in pattern.clarke.vertices))
    results: dict[str, tuple[np.ndarray | None, str]] = {}
    for name in frameworks:
        ops = fw.ops(name)
        try:
            with np.errstate(all="ignore"):
                fg = fw.gradient(name, lambda t, ops=ops: pattern.f(ops, t), x)
        except Exception as e:  # a framework that cannot run the pattern is reported, not fatal
            results[name] = (None, f"error: {type(e).__name__}")
            continue
        results[name] = (fg, verdict(pattern.clarke, fg))
    verdicts = {}
    for name, (fg, status) in results.items():
        if fg is None or sample is None:
            continue
        said = sample.contains(fg).verdict
        verdicts[name] = said
        if said != "undetermined" and said != status.split(" ")[0]:
            outer_ok = False        # asd contradicts the exact set: a battery failure
    return Row(pattern, g, pattern.clarke.contains(g), sampled_ok, results, asd_error,
               verdicts, outer_ok)


def run(frameworks: list[str] | None = None, seed: int = 0, progress: bool = True
        ) -> list[Row]:
    """Evaluate every pattern of `CATALOG` (with a progress bar when ``progress``)."""
    from asd.cli import frameworks as fw

    names = fw.available() if frameworks is None else frameworks
    if not progress:
        return [evaluate(p, names, seed) for p in CATALOG]
    from rich.progress import Progress

    rows = []
    with Progress(transient=True) as bar:
        task = bar.add_task("auditing", total=len(CATALOG))
        for p in CATALOG:
            bar.update(task, description=f"{p.name:<32}")
            rows.append(evaluate(p, names, seed))
            bar.advance(task)
    return rows


MARK = {"inside": "✓", "outside": "✗", "outside (singleton)": "✗✗"}


def cell(g, status: str, said: str | None = None) -> str:
    """The gradient, the exact verdict's mark, and asd's own verdict where it could not
    decide (``?``: asd's sample and enclosure leave it undetermined)."""
    if g is None:
        return status
    return f"{_fmt(g)} {MARK.get(status, status)}" + (" ?" if said == "undetermined" else "")


def table_rows(rows: list[Row], frameworks: list[str]) -> tuple[list[str], list[list[str]]]:
    from asd.cli.frameworks import LABELS

    header = ["pattern", "f", "x", "exact Clarke set", "asd"] + [LABELS[f] for f in frameworks]
    body = []
    for r in rows:
        asd_cell = (f"error: {r.asd_error.split(':')[1].strip()}" if r.asd_error
                    else cell(r.asd, "inside" if r.asd_ok and r.sampled_ok else "outside"))
        body.append([r.pattern.name, r.pattern.formula, _fmt(r.pattern.point),
                     str(r.pattern.clarke), asd_cell]
                    + [cell(*r.framework[f], r.asd_verdicts.get(f)) for f in frameworks])
    return header, body


def summary(rows: list[Row], frameworks: list[str]) -> list[str]:
    from asd.cli.frameworks import LABELS

    lines = [f"asd: {sum(r.asd_ok and r.sampled_ok for r in rows)}/{len(rows)} inside the "
             "exact Clarke set"]
    said = [v for r in rows for v in r.asd_verdicts.values()]
    lines.append(f"asd's own verdicts on the frameworks' gradients: "
                 f"{sum(v != 'undetermined' for v in said)}/{len(said)} decided, "
                 f"{sum(not r.outer_ok for r in rows)} contradicting the exact sets")
    for f in frameworks:
        statuses = [r.framework[f][1] for r in rows]
        outside = sum(s.startswith("outside") for s in statuses)
        single = sum(s == "outside (singleton)" for s in statuses)
        errors = sum(s.startswith("error") for s in statuses)
        lines.append(f"{LABELS[f]}: {outside}/{len(rows)} outside ({single} where the set is a "
                     f"single gradient)" + (f", {errors} could not run" if errors else ""))
    return lines


def _version(module: str) -> str:
    """The installed version: the module's own (tensorflow-cpu installs ``tensorflow`` under
    another distribution name), else its distribution's."""
    import sys
    from importlib import metadata

    own = getattr(sys.modules.get(module), "__version__", None)
    if isinstance(own, str):
        return own
    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def markdown(rows: list[Row], frameworks: list[str]) -> str:
    """The battery table as Markdown (what ``--write-docs`` writes)."""
    import platform

    from asd.cli.frameworks import _MODULES, LABELS

    header, body = table_rows(rows, frameworks)
    versions = [f"{LABELS[f]} {_version(_MODULES[f])}" for f in frameworks]
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = [
        "# Framework gradients at kinks",
        "",
        "Generated by `asd audit --battery --write-docs docs/framework-gradients.md` on "
        f"Python {platform.python_version()} with {', '.join(versions) or 'no framework'}. "
        "Every entry is computed when the command runs.",
        "",
        "Each row is a nonsmooth program evaluated at a kink, its exact Clarke "
        "subdifferential (derived by hand, in `asd/cli/battery.py`), asd's subgradient (one sweep "
        "along a random direction) and each framework's own gradient. "
        "✓ inside the Clarke set; ✗ outside it; ✗✗ outside although the set is a single "
        "gradient (the function is differentiable there and the framework's answer is simply "
        "wrong); ? where asd's own verdict (`asd audit`: its sample inside, its outer "
        "enclosure outside) leaves the gradient undetermined. nan is a framework returning "
        "NaN. asd computes the projection rows with its own `asd.projections.l2_ball` and "
        "`asd.projections.box`.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    lines += ["", *[f"- {s}" for s in summary(rows, frameworks)], ""]
    return "\n".join(lines)


def print_table(rows: list[Row], frameworks: list[str]) -> None:
    """The battery in 80 columns: the pattern, the exact set and the gradients (cells wrap;
    ``--write-docs`` has the formulas and points too)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    header, body = table_rows(rows, frameworks)
    keep = [0, 3, 4, *range(5, len(header))]       # not the formula and point columns
    table = Table(title="framework gradients against the exact Clarke set", width=80,
                  title_justify="left", show_lines=True)
    for i in keep:
        table.add_column(header[i], overflow="fold")
    for row in body:
        table.add_row(*[escape(row[i]) for i in keep])
    console = Console(width=80)
    console.print(table)
    for line in summary(rows, frameworks):
        console.print(line, highlight=False)


__all__ = ["CATALOG", "Ball", "Hull", "Pattern", "Row", "asd_ops", "evaluate", "markdown",
           "print_table", "run", "verdict"]
