"""The kink zoo: framework behaviours at kinks that users reported in public issues.

Each `Case` is a small program at the point where an issue in the PyTorch, JAX, TensorFlow
(Keras) or autograd tracker met it, written once against an operations namespace (as the
battery's patterns are: `asd.cli.frameworks.ops`), with its exact Clarke subdifferential
derived by hand: a `Hull` of gradients, a `Ball`, an `Ellipsoid` (an affine image of a ball:
the standard deviation and the largest eigenvalue at a tie), or a `Refusal` where the function
is not locally Lipschitz at the point (no Clarke set exists, and the right answer is to refuse).
``sources`` cites the issues; ``note`` says in a line what was reported.

``asd audit --zoo`` (`run`) computes every framework's gradient and asd's answer at run time,
prints a table that fits 80 columns and, with ``--write-docs docs/kink-zoo.md``, writes the page
(`markdown`). Nothing in the table is typed in: a framework that changes its rule changes the
page, and ``tests/test_kink_zoo.py`` keeps the committed page equal to a fresh run.
It exits 1 only if asd itself fails (`failures`): a number outside the exact set, a number
where a refusal is right, or an error that is not asd's own refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asd.cli.battery import Ball, Hull, _fmt

# ----- exact sets beyond the battery's -----


class Ellipsoid:
    """``{center + A u : |u| <= 1}``: the Clarke set of a norm of an affine map at a zero of
    it (the standard deviation of a constant vector, the largest eigenvalue at a tie)."""

    def __init__(self, center, A):
        self.center = np.atleast_1d(np.asarray(center, dtype=float))
        self.A = np.atleast_2d(np.asarray(A, dtype=float))

    def contains(self, g, tol: float = 1e-6) -> bool:
        g = np.atleast_1d(np.asarray(g, dtype=float)).reshape(-1)
        if not np.all(np.isfinite(g)):
            return False
        u, *_ = np.linalg.lstsq(self.A, g - self.center, rcond=None)
        residual = np.linalg.norm(self.A @ u - (g - self.center))
        return bool(residual <= tol and np.linalg.norm(u) <= 1 + tol)

    is_singleton = False

    def __str__(self) -> str:
        return f"{_fmt(self.center)} + A·ball (A = {_matrix(self.A)})"


class Refusal:
    """No Clarke set: the function is not locally Lipschitz at the point (``why``). Any number
    a framework returns there is unfounded; asd should refuse, naming the cause."""

    is_singleton = False

    def __init__(self, why: str):
        self.why = why

    def contains(self, g, tol: float = 1e-6) -> bool:
        return False

    def __str__(self) -> str:
        return f"none: {self.why}"


def _matrix(A: np.ndarray) -> str:
    return "[" + "; ".join(" ".join(f"{a:.4g}" for a in row) for row in A) + "]"


def _contains(clarke, g) -> bool:
    """Membership up to rounding relative to the gradient's size (JAX runs in float32)."""
    g = np.asarray(g, dtype=float)
    scale = max(1.0, float(np.max(np.abs(g)))) if g.size and np.all(np.isfinite(g)) else 1.0
    return clarke.contains(g, 1e-5 * scale)


# ----- the cases -----


@dataclass(frozen=True)
class Case:
    """A program ``f(ops, x)`` at the point ``x`` an issue reported, with its exact Clarke set
    (or `Refusal`), the issues (``(label, url)``) and what they reported."""

    name: str
    formula: str
    x: Any
    f: Callable[[Any, Any], Any]
    clarke: Hull | Ball | Ellipsoid | Refusal
    sources: tuple[tuple[str, str], ...]
    note: str
    asd_f: Callable[[Any], Any] | None = None
    """asd's spelling where the framework op has no asd twin (PyTorch's smooth_l1 at
    beta = 0 is documented to be the L1 loss)."""
    shown: str = ""
    """How the page writes the exact set when its vertices or matrix would be unreadable."""

    @property
    def exact(self) -> str:
        return self.shown or str(self.clarke)

    @property
    def point(self) -> np.ndarray:
        return np.asarray(self.x, dtype=float)


def _gh(repo: str, kind: str, n: int) -> tuple[str, str]:
    short = {"pytorch/pytorch": "pytorch", "jax-ml/jax": "jax",
             "tensorflow/tensorflow": "tensorflow", "HIPS/autograd": "autograd",
             "keras-team/keras": "keras"}[repo]
    return f"{short}#{n}", f"https://github.com/{repo}/{kind}/{n}"


def _torch(n, kind="issues"):
    return _gh("pytorch/pytorch", kind, n)


def _jax(n, kind="issues"):
    return _gh("jax-ml/jax", kind, n)


def _tf(n, kind="issues"):
    return _gh("tensorflow/tensorflow", kind, n)


def _ag(n, kind="issues"):
    return _gh("HIPS/autograd", kind, n)


def _e(i: int, n: int) -> np.ndarray:
    return np.eye(n)[i]


def _sym(o, x):
    return o.stack([o.stack([x[0], x[1]]), o.stack([x[1], x[2]])])


def _svd_rebuilt(o, X):
    U, S, Vh = o.svd(X)
    return o.sum(U @ o.diag(S) @ Vh)


def _box(n: int, lo: float, hi: float, tail: int = 0) -> Hull:
    """The box ``[lo, hi]^n`` (times ``tail`` zeros) as the hull of its corners."""
    corners = np.array(np.meshgrid(*[[lo, hi]] * n, indexing="ij")).reshape(n, -1).T
    return Hull(*[np.concatenate([c, np.zeros(tail)]) for c in corners])


_P3 = (np.eye(3) - np.ones((3, 3)) / 3) / np.sqrt(3)
_NOT_LIPSCHITZ = "not locally Lipschitz at x"

CASES: list[Case] = [
    # ----- norms, square roots and normalization at 0 -----
    Case("norm at 0", "|x|_2", [0.0, 0.0], lambda o, x: o.norm(x), Ball([0, 0], 1.0),
         (_torch(2421), _tf(12071), _ag(151), _jax(3058)),
         "NaN from x/|x| at 0; PyTorch now returns the subgradient 0"),
    Case("squared norm at 0", "|x|_2^2", [0.0, 0.0], lambda o, x: o.norm(x) ** 2,
         Hull([0.0, 0.0]), (_jax(21723), _jax(4177), _ag(183), _ag(617)),
         "a smooth function whose gradient 2x comes out NaN through the norm's 0/0"),
    Case("sqrt of a square", "sqrt((x - 1)^2)", 1.0, lambda o, x: o.sqrt((x - 1) ** 2),
         Hull(-1.0, 1.0), (_torch(6394),),
         "the same |x - 1| written through sqrt: NaN where abs gives 0"),
    Case("L2 normalize at 0", "sum(x / max(|x|_2, 1e-12))", [0.0, 0.0, 0.0],
         lambda o, x: o.sum(x / o.maximum(o.norm(x), o.asarray(1e-12))),
         Hull([1e12, 1e12, 1e12]), (_torch(184575), _torch(3264)),
         "reported as a wrong 1e12 gradient; below eps the function is x / 1e-12, so it is "
         "the gradient"),
    Case("L1 normalize, zero entries", "sum(x / max(|x|_1, 1e-12))",
         [0.0, 0.0, 0.0, 0.0, 0.2],
         lambda o, x: o.sum(x / o.maximum(o.sum(o.abs(x)), o.asarray(1e-12))),
         _box(4, 0.0, 10.0, tail=1), (_torch(3264),),
         "NaN from |x|^(p-2) at the zero entries", shown="[0, 10]^4 × {0}"),
    Case("rsqrt guard at 0", "sum(x * min(rsqrt(sum x^2), 1e12))", [0.0, 0.0, 0.0],
         lambda o, x: o.sum(x * o.minimum(o.rsqrt(o.sum(x * x)), o.asarray(1e12))),
         Hull([1e12, 1e12, 1e12]), (_gh("keras-team/keras", "issues", 23075),),
         "the epsilon guards the value, not the gradient: 0 * rsqrt'(0) = NaN"),
    Case("std of a constant vector", "std(x)", [1.0, 1.0, 1.0], lambda o, x: o.std(x),
         Ellipsoid([0, 0, 0], _P3), (_torch(4320), _jax(11716)),
         "NaN through sqrt(0); the Clarke set is the disc orthogonal to (1, 1, 1)",
         shown="{g ⊥ (1, 1, 1) : |g| <= 1/√3}"),
    Case("squared norm guarded by where", "where(|x| > 0.5, |x|, 1)", [0.0, 0.0],
         lambda o, x: o.where(o.norm(x) > 0.5, o.norm(x), o.asarray(1.0)), Hull([0.0, 0.0]),
         (_jax(347),), "the branch not taken still sends NaN back through the norm at 0"),
    # ----- where with a bad branch -----
    Case("where, sqrt not taken", "where(x > 0, sqrt(x), x)", -1.0,
         lambda o, x: o.where(x > 0, o.sqrt(x), x), Hull(1.0),
         (_tf(38467, "pull"), _torch(187297)),
         "sqrt of a negative in the branch not taken: NaN times 0 is NaN"),
    Case("where, 0 * (x / 0) not taken", "where(x >= 0, x, 0 * (x / 0))", 1.0,
         lambda o, x: o.where(x >= 0, x, 0 * (x / 0)), Hull(1.0),
         (_torch(36923), _torch(52248)), "an inf in the branch not taken makes the gradient NaN"),
    Case("where on x == 0", "where(x == 0, x / 2, sqrt(x) + 1)", 0.0,
         lambda o, x: o.where(x == 0, x / 2, o.sqrt(x) + 1),
         Refusal("it jumps from 0 to 1, and is not defined for x < 0"), (_torch(23395),),
         "asked for the derivative of the x / 2 branch; the function jumps at 0"),
    # ----- clamp, clip, relu6, hardtanh -----
    Case("clamp at its bound", "clamp(x, 0, 1)", 0.0, lambda o, x: o.clip(x, 0.0, 1.0),
         Hull(0.0, 1.0), (_torch(7002), _torch(7049, "pull"), _torch(184572)),
         "PyTorch chose 1 at the bounds (2018); the minimum-norm choice would be 0"),
    Case("clamp minus hardtanh", "clamp(x, -8, 7) - hardtanh(x, -8, 7)", 7.0,
         lambda o, x: o.clip(x, -8.0, 7.0) - o.hardtanh(x, -8.0, 7.0), Hull(0.0),
         (_torch(184574),), "one function, two derivatives at the bound: 1 and 0"),
    Case("relu6 at 6", "relu6(x)", 6.0, lambda o, x: o.relu6(x), Hull(0.0, 1.0),
         (_jax(14682, "pull"),), "JAX returned 0.5 at 0 and 6, unlike PyTorch and TF"),
    Case("clip outside its range", "clip(x, -1, 1)", -2.0, lambda o, x: o.clip(x, -1.0, 1.0),
         Hull(0.0), (_tf(44333),), "asked why the gradient is 0 there: it is"),
    # ----- max, min, relu, abs -----
    Case("maximum at a tie", "max(x1, x2)", [0.0, 0.0], lambda o, x: o.maximum(x[0], x[1]),
         Hull([1, 0], [0, 1]), (_torch(56734),),
         "PyTorch gave the whole gradient to one side; now it splits it"),
    Case("maximum plus minimum", "max(x1, x2) + min(x1, x2)", [0.0, 0.0],
         lambda o, x: o.maximum(x[0], x[1]) + o.minimum(x[0], x[1]), Hull([1.0, 1.0]),
         (_tf(16028),), "x1 + x2 in disguise; a rule that favours x1 twice gives (2, 0)"),
    Case("maximum(x, 0) vs where", "max(x, 0) - where(x > 0, x, 0)", 0.0,
         lambda o, x: o.maximum(x, 0.0 * x) - o.where(x > 0, x, 0.0 * x), Hull(0.0),
         (_jax(37821),), "two spellings of relu, two derivatives at 0: 0.5 and 0"),
    Case("relu(x) - relu(-x)", "relu(x) - relu(-x)", 0.0,
         lambda o, x: o.relu(x) - o.relu(-x), Hull(1.0), (_jax(12368, "pull"),),
         "relu'(0) = 0 in JAX, with Bertoin et al. (2021) on its effect in training"),
    Case("abs at 0", "|x|", 0.0, lambda o, x: o.abs(x), Hull(-1.0, 1.0),
         (_jax(37820), _jax(12142)), "JAX's 1 differs from sign(0) = 0"),
    Case("max minus x[argmax x]", "max(x) - x[argmax(x)]", [1.0, 1.0],
         lambda o, x: o.max(x) - o.take_argmax(x), Hull([0.0, 0.0]), (_jax(13600),),
         "the same function twice, differentiated two ways: max splits a tie, argmax does not"),
    Case("reduce max minus max pool", "max(x) - max_pool(x, 4)", [1.0, 2.0, 2.0, 2.0],
         lambda o, x: o.max(x) - o.max_pool1d(x, 4)[0], Hull([0.0, 0.0, 0.0, 0.0]),
         (_tf(4886),), "TensorFlow's reduce_max splits a tie, its max_pool does not"),
    Case("reduce max at a tie", "max(x)", [0.6, 0.6, 0.3], lambda o, x: o.max(x),
         Hull(_e(0, 3), _e(1, 3)), (_tf(51681), _tf(109337, "pull")),
         "0.5 each to the tied entries; other libraries give 1 each"),
    Case("max over a stacked copy", "max(stack(x, x))", 1.0,
         lambda o, x: o.max(o.stack([x, x])), Hull(1.0), (_ag(141, "pull"), _ag(212)),
         "the same variable twice in one max was counted twice"),
    Case("median at a tie", "median(x)", [0.0, 0.0, 0.0], lambda o, x: o.median(x),
         Hull(_e(0, 3), _e(1, 3), _e(2, 3)), (_torch(43519, "pull"), _ag(139)),
         "PyTorch now splits a tied median evenly; autograd has no median"),
    Case("top-1 with a tie", "topk_sum(x, 1)", [1.0, 2.0, 5.0, 4.0, 5.0],
         lambda o, x: o.topk_sum(x, 1), Hull(_e(2, 5), _e(4, 5)), (_torch(27542),),
         "which tied index topk returns depends on k and the device"),
    Case("smooth L1, beta = 0", "sum(smooth_l1(x, 0, beta=0))", [0.0, 0.0],
         lambda o, x: o.smooth_l1(x, 0.0), _box(2, -1.0, 1.0),
         (_torch(96813), _torch(97022, "pull")), "NaN from 0/beta on the GPU at a zero residual",
         asd_f=lambda x: np.sum(np.abs(x)), shown="[-1, 1]^2"),
    # ----- spectral functions -----
    Case("largest eigenvalue at a tie", "eigvalsh([[x1, x2], [x2, x3]])[-1]", [0.0, 0.0, 0.0],
         lambda o, x: o.eigvalsh(_sym(o, x))[-1],
         Ellipsoid([0.5, 0.0, 0.5], [[0.5, 0.0], [0.0, 1.0], [-0.5, 0.0]]), (_torch(23133),),
         "NaN from 1/(λi - λj) at a repeated eigenvalue",
         shown="{(a, b, 1 - a) : (2a - 1)^2 + b^2 <= 1}"),
    Case("SVD reassembled at a tie", "sum(U diag(s) V^T)", [[1.0, 0.0], [0.0, 1.0]],
         _svd_rebuilt, Hull(np.ones(4)), (_jax(2311), _jax(8732)),
         "sum(X) in disguise; NaN from 1/(σi - σj) at a repeated singular value"),
    # ----- smooth functions at a removable singularity -----
    Case("sinc at 0", "sinc(x)", 0.0, lambda o, x: o.sinc(x), Hull(0.0),
         (_jax(6940, "pull"), _jax(1722, "pull")), "sin(πx)/(πx) differentiated as a quotient "
         "gives NaN at 0, where sinc is smooth"),
    # ----- not locally Lipschitz: the right answer is a refusal -----
    Case("p-norm, p < 1, on an axis", "|x|_0.5", [1.0, 0.0], lambda o, x: o.pnorm(x, 0.5),
         Refusal("|t|^0.5 along x2"), (_torch(44452),),
         "NaN in the backward for 0 < p < 1 at a zero entry"),
    Case("cdist, p < 1, coincident points", "|x - (1, 2)|_0.5", [1.0, 2.0],
         lambda o, x: o.pnorm(x - o.asarray([1.0, 2.0]), 0.5),
         Refusal("|t|^0.5 along each axis"), (_torch(36493), _torch(45720, "pull")),
         "NaN gradients for p < 1 at (nearly) equal coordinates"),
    Case("atan2 at the origin", "atan2(x1, x2)", [0.0, 0.0], lambda o, x: o.atan2(x[0], x[1]),
         Refusal("the angle takes every value near the origin"), (_torch(98276),),
         "NaN at (0, 0)"),
    Case("entropy term at 0", "-x log x", 0.0, lambda o, x: -x * o.log(x),
         Refusal("slope -log x - 1 grows without bound"), (_jax(15737, "pull"),),
         "NaN at 0, changed to inf"),
    Case("square of a square root", "sqrt(x)^2", 0.0, lambda o, x: o.sqrt(x) ** 2,
         Refusal("not defined for x < 0"), (_tf(5562),),
         "NaN at 0 for a function that is x where defined"),
]
"""The zoo, in page order."""


# ----- running it -----


@dataclass
class ZooRow:
    case: Case
    asd: np.ndarray | None
    asd_status: str
    """``'inside'``, ``'outside'``, ``'refused'`` (an `asd.ASDError`: its class is in
    ``asd_error``) or ``'crashed'`` (any other exception)."""
    asd_error: str
    framework: dict[str, tuple[np.ndarray | None, str]] = field(default_factory=dict)

    @property
    def asd_ok(self) -> bool:
        """asd's answer is right: inside the exact set, or a refusal where one is due; a
        refusal of a Lipschitz case is not wrong (no number), but is listed."""
        if isinstance(self.case.clarke, Refusal):
            return self.asd_status == "refused"
        return self.asd_status in ("inside", "refused")


def status(clarke, g) -> str:
    """The exact verdict on a framework's (or asd's) gradient ``g``.

    >>> status(Hull(0.0, 1.0), 0.5), status(Hull(1.0), 0.0), status(Refusal("jump"), 1.0)
    ('inside', 'outside (singleton)', 'unfounded')
    """
    if isinstance(clarke, Refusal):
        finite = np.all(np.isfinite(np.asarray(g, dtype=float)))
        return "unfounded" if finite else "not finite"
    if _contains(clarke, g):
        return "inside"
    return "outside (singleton)" if clarke.is_singleton else "outside"


def evaluate(case: Case, frameworks: list[str], seed: int = 0) -> ZooRow:
    """asd's answer and every framework's gradient for one case."""
    import asd
    from asd.cli import battery
    from asd.cli import frameworks as fw

    o = battery.asd_ops()
    x = case.point

    def f(t):
        return case.asd_f(t) if case.asd_f is not None else case.f(o, t)

    try:
        with np.errstate(all="ignore"):
            g = np.asarray(asd.subgrad(f, seed=seed)(x), dtype=float)
    except asd.ASDError as e:
        row = ZooRow(case, None, "refused", type(e).__name__)
    except Exception as e:  # a crash of asd is a zoo failure, reported, exit 1
        row = ZooRow(case, None, "crashed", f"{type(e).__name__}: {e}")
    else:
        state = status(case.clarke, g)
        row = ZooRow(case, g, "inside" if state == "inside" else "outside", "")
    for name in frameworks:
        ops = fw.ops(name)
        try:
            with np.errstate(all="ignore"):
                fg = fw.gradient(name, lambda t, ops=ops: case.f(ops, t), x)
        except AttributeError as e:         # the framework has no such operation
            row.framework[name] = (None, "n/a" if "namespace" in str(e).lower() else
                                   f"error: {type(e).__name__}")
            continue
        except Exception as e:  # a framework failing on the case is what the table reports
            row.framework[name] = (None, f"error: {type(e).__name__}")
            continue
        row.framework[name] = (fg, status(case.clarke, fg))
    return row


def run(frameworks: list[str] | None = None, seed: int = 0, progress: bool = True
        ) -> list[ZooRow]:
    """Evaluate every case of `CASES` (with a progress bar when ``progress``)."""
    from asd.cli import frameworks as fw

    names = fw.available() if frameworks is None else frameworks
    if not progress:
        return [evaluate(c, names, seed) for c in CASES]
    from rich.progress import Progress

    rows = []
    with Progress(transient=True) as bar:
        task = bar.add_task("zoo", total=len(CASES))
        for c in CASES:
            bar.update(task, description=f"{c.name[:32]:<32}")
            rows.append(evaluate(c, names, seed))
            bar.advance(task)
    return rows


def failures(rows: list[ZooRow]) -> list[str]:
    """Where asd itself is wrong: ``'case: why'`` for each."""
    out = []
    for r in rows:
        if r.asd_ok:
            continue
        why = {"outside": "its subgradient is outside the exact Clarke set",
               "inside": "it returned a number where the function has no Clarke set",
               "crashed": f"it crashed ({r.asd_error})",
               "refused": f"it refused ({r.asd_error})"}[r.asd_status]
        out.append(f"{r.case.name!r}: {why}")
    return out


# ----- rendering -----

MARK = {"inside": "✓", "outside": "✗", "outside (singleton)": "✗✗", "unfounded": "†",
        "not finite": ""}


def cell(g, state: str) -> str:
    if g is None:
        return state
    return f"{_fmt(g)} {MARK.get(state, state)}".rstrip()


def asd_cell(r: ZooRow) -> str:
    if r.asd_status == "refused":
        return f"refuses ({r.asd_error})" + (" ✓" if isinstance(r.case.clarke, Refusal)
                                             else "")
    if r.asd_status == "crashed":
        return f"crashed: {r.asd_error.split(':')[0]}"
    return cell(r.asd, status(r.case.clarke, r.asd))


def sources(case: Case) -> str:
    return ", ".join(f"[{label}]({url})" for label, url in case.sources)


def summary(rows: list[ZooRow], frameworks: list[str]) -> list[str]:
    from asd.cli.frameworks import LABELS

    refusals = [r for r in rows if isinstance(r.case.clarke, Refusal)]
    lines = [f"{len(rows)} cases from {len({u for r in rows for _, u in r.case.sources})} "
             f"public issues and pull requests; {len(refusals)} are not locally Lipschitz "
             "at their point (the right answer is a refusal)"]
    good = sum(r.asd_status == "inside" for r in rows)
    refused_right = sum(r.asd_status == "refused" for r in refusals)
    refused_sets = [r.case.name for r in rows if r.asd_status == "refused"
                    and not isinstance(r.case.clarke, Refusal)]
    lines.append(f"asd: {good} inside the exact Clarke set, {refused_right}/{len(refusals)} "
                 f"refusals where one is due, {len(failures(rows))} wrong"
                 + (f"; it also refuses {len(refused_sets)} Lipschitz case(s) it cannot "
                    f"decide ({', '.join(refused_sets)})" if refused_sets else ""))
    for f in frameworks:
        states = [r.framework[f][1] for r in rows]
        outside = sum(s.startswith("outside") for s in states)
        single = sum(s == "outside (singleton)" for s in states)
        nan = sum(g is not None and not np.all(np.isfinite(g)) for g, _ in
                  (r.framework[f] for r in rows))
        unfounded = sum(s == "unfounded" for s in states)
        na = sum(s == "n/a" for s in states)
        errors = sum(s.startswith("error") for s in states)
        lines.append(f"{LABELS[f]}: {outside}/{len(rows)} outside the Clarke set ({single} "
                     f"where it is a single gradient), {nan} NaN in all, {unfounded} finite "
                     "numbers where no Clarke set exists"
                     + (f", {na} without the operation" if na else "")
                     + (f", {errors} errors" if errors else ""))
    return lines


def markdown(rows: list[ZooRow], frameworks: list[str]) -> str:
    """The zoo as Markdown (what ``asd audit --zoo --write-docs`` writes)."""
    import platform

    from asd.cli.battery import _version
    from asd.cli.frameworks import _MODULES, LABELS

    versions = [f"{LABELS[f]} {_version(_MODULES[f])}" for f in frameworks]
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    header = ["#", "case", "f", "x", "exact Clarke set", "asd",
              *[LABELS[f] for f in frameworks], "reported in"]
    lines = [
        "# The kink zoo: framework gradients at kinks reported in public issues",
        "",
        "Generated by `asd audit --zoo --write-docs docs/kink-zoo.md` on Python "
        f"{platform.python_version()} with {', '.join(versions) or 'no framework'}. Every "
        "entry is computed when the command runs; `tests/test_kink_zoo.py` keeps this page "
        "equal to a fresh run.",
        "",
        "Each row is a program at the point where a user met it, as reported in the issue "
        "or pull request cited (each is restated in our words below the table), with its "
        "exact Clarke subdifferential derived by hand (`asd/cli/zoo.py`): a hull of "
        "gradients, a ball, an ellipsoid `c + A·ball`, or none where the function is not "
        "locally Lipschitz at the point. ✓ inside the Clarke set; ✗ outside it; ✗✗ outside "
        "although the set is a single gradient (the function is differentiable there); † a "
        "number where no Clarke set exists; nan a framework returning NaN; n/a an operation "
        "the framework does not have. asd either returns an element of the set or refuses "
        "with an error naming the cause (`refuses (NotLipschitzError)`); a refusal is the "
        "right answer where there is no set. The frameworks run in their default precision "
        "(JAX in float32).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for i, r in enumerate(rows, 1):
        c = r.case
        body = [str(i), c.name, f"`{c.formula}`", _fmt(c.point), c.exact, asd_cell(r),
                *[cell(*r.framework[f]) for f in frameworks], sources(c)]
        lines.append("| " + " | ".join(esc(b) for b in body) + " |")
    lines += ["", *[f"- {s}" for s in summary(rows, frameworks)], "", "## What was reported",
              ""]
    for i, r in enumerate(rows, 1):
        lines.append(f"{i}. **{r.case.name}** ({sources(r.case)}): {r.case.note}.")
    lines.append("")
    return "\n".join(lines)


def print_table(rows: list[ZooRow], frameworks: list[str]) -> None:
    """The zoo in 80 columns: the marks, not the numbers (the page has the numbers)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from asd.cli.frameworks import LABELS

    short = {"torch": "torch", "jax": "jax", "tensorflow": "tf", "autograd": "ag"}
    table = Table(title="the kink zoo: framework gradients at reported kinks", width=80,
                  title_justify="left")
    table.add_column("#", max_width=3)
    table.add_column("case", overflow="fold")
    table.add_column("asd", overflow="fold", max_width=14)
    for f in frameworks:
        table.add_column(short.get(f, f), max_width=6, overflow="fold")
    for i, r in enumerate(rows, 1):
        marks = [_mark(*r.framework[f]) for f in frameworks]
        asd = "refuses ✓" if r.asd_status == "refused" and isinstance(
            r.case.clarke, Refusal) else "refuses" if r.asd_status == "refused" else \
            _mark(r.asd, status(r.case.clarke, r.asd)) if r.asd is not None else "crashed"
        table.add_row(str(i), escape(r.case.name), asd, *marks)
    console = Console(width=80)
    console.print(table)
    console.print(", ".join(f"{short.get(f, f)} = {LABELS[f]}" for f in frameworks),
                  highlight=False)
    for line in summary(rows, frameworks):
        console.print(line, highlight=False)


def _mark(g, state: str) -> str:
    if g is not None and not np.all(np.isfinite(np.asarray(g, dtype=float))):
        return "nan"
    return MARK.get(state, "n/a" if state == "n/a" else "err")


__all__ = ["CASES", "Case", "Ellipsoid", "Refusal", "ZooRow", "evaluate", "failures",
           "markdown", "print_table", "run", "status"]
