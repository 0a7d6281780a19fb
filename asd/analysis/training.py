"""Auditing a training run: per-step records of ties and certified verdicts, whatever the framework.

A training step differentiates ``F(p) = <ct, model(x; p)>``: the loss through the model, with
``ct`` the gradient of the loss with respect to the model's output (a smooth loss head such as
cross-entropy makes this exact: the Clarke set of ``loss(model(x; p))`` is that of
``<∇loss, model(x; p)>``, Clarke 1983, Thm 2.3.9 and 2.6.6). A framework monitor (PyTorch's is
``asd.torch.audit``) watches the step and hands this module what it saw; this module decides
and records, and knows no framework:

1. the **census**: how many entries were tied at each nonsmooth primitive of each layer in the
   framework's own forward, in its own dtype (``ties``), and how many of those ties may matter
   (``live``: the tied candidates are not provably the same function of the parameters; a
   pooling window of four dead ReLUs is tied but harmless);
2. where the census finds no live tie (and recognised every operation), every branch is fixed
   near ``p``, ``F`` is smooth there, its Clarke set is the single gradient and the framework's
   backward computes it: the verdict is ``inside`` without running asd (``checked='census'``);
3. otherwise asd's element along a direction ``v`` (one sweep) is compared with the framework's
   gradient: equal within the dtype's rounding (`tolerance`) means ``inside``, because asd's
   element is a Clarke subgradient (``checked='asd'``);
4. where they differ, the certified verdict of `asd.clarke` (inner sample and outer
   enclosure, docs/clarke.md): ``inside``, ``outside`` with the proven distance, or
   ``undetermined`` with both bounds (``checked='clarke'``).

A `TrainingLog` is the sequence of `StepRecord` s with a summary, a JSON form, a table that fits
80 columns (``rich``) and plots of tie counts and verdicts over training (matplotlib).

>>> import numpy as np
>>> r = judge(np.array([1.0, 0.0]), np.array([1.0, 0.0]), None, eps=2.0 ** -52)
>>> r["verdict"], r["equal"], r["checked"]
('inside', True, 'asd')
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ULPS = 64
"""Rounding allowance: a framework gradient within ``ULPS * eps * |g|_inf`` (max norm) of asd's
element counts as equal. Backward passes sum in different orders (and a half-precision model's
backward rounds every product, where asd sweeps it in float32); 64 units of the dtype's epsilon
relative to the largest entry is what ``asd audit`` allows too."""

VERDICTS = ("inside", "undetermined", "outside")


@dataclass
class StepRecord:
    """What one audited training step showed (see the module docstring).

    ``ties`` and ``live`` map ``'layer:primitive'`` to the number of tied entries in the
    framework's forward (``live``: those that may matter); ``unknown`` names operations the
    census could not classify (asd then checks the step). ``checked`` says how the verdict was
    reached: ``'census'``, ``'asd'``, ``'clarke'``, or ``'error'`` (``note`` says why).
    ``difference`` is ``|g_framework - g_asd|_inf``, ``scale`` ``|g_framework|_inf``, ``tol`` the
    rounding allowance; ``distance`` the certified lower bound on the distance (max norm) from
    the framework's gradient to the Clarke set and ``inner`` the distance to asd's sampled hull
    (both only when asd's element differs); ``differs`` maps each parameter whose gradients
    differ beyond ``tol`` to that difference; ``decisions`` counts how asd decided its ties
    (``'relu/tangent'``...); ``seconds`` is the time the audit of this step took.
    """

    step: int
    dtype: str
    ties: dict[str, int] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    checked: str = "census"
    equal: bool | None = None
    verdict: str | None = None
    difference: float | None = None
    scale: float | None = None
    tol: float | None = None
    distance: float | None = None
    inner: float | None = None
    differs: dict[str, float] = field(default_factory=dict)
    decisions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""

    @property
    def tied(self) -> bool:
        return any(self.ties.values())

    @property
    def live_tied(self) -> bool:
        return any(self.live.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN and infinities as strings)."""
        return {k: _jsonable(v) for k, v in asdict(self).items()}


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def tolerance(eps: float, *grads: np.ndarray) -> float:
    """``ULPS * eps * max |g|`` over the finite entries of the gradients given (0 when they are
    all zero).

    >>> tolerance(2.0 ** -23, np.array([0.5, -2.0]))
    1.52587890625e-05
    """
    finite = [np.abs(g[np.isfinite(g)]) for g in map(np.asarray, grads)]
    scale = max((float(np.max(g)) for g in finite if g.size), default=0.0)
    return ULPS * eps * scale


def judge(framework: np.ndarray, element: np.ndarray | None,
          sample: Callable[[], Any] | None, eps: float,
          names: list[tuple[str, slice]] | None = None) -> dict[str, Any]:
    """The verdict on one step's framework gradient (flat), given asd's element along ``v``
    (flat, or None when the census proved the step smooth) and ``sample``, a zero-argument
    callable returning the step's `asd.ClarkeSample` (None: do not certify a difference).

    Returns the fields of `StepRecord` it decides: ``equal``, ``verdict``, ``checked``,
    ``difference``, ``scale``, ``tol``, ``distance``, ``inner``, ``differs`` (per name of
    ``names``, pairs ``(name, slice of the flat vector)``), ``note``.
    """
    framework = np.asarray(framework, dtype=float).reshape(-1)
    scale = float(np.max(np.abs(framework))) if framework.size else 0.0
    scale = scale if math.isfinite(scale) else math.inf
    out: dict[str, Any] = {"scale": scale, "differs": {}, "note": ""}
    if element is None:
        out.update(equal=True, verdict="inside", checked="census")
        return out
    element = np.asarray(element, dtype=float).reshape(-1)
    tol = tolerance(eps, framework, element)
    gap = np.abs(framework - element)
    difference = float(np.max(gap)) if gap.size else 0.0
    if not np.all(np.isfinite(framework)):
        difference = math.inf
    out.update(tol=tol, difference=difference, checked="asd")
    for name, where in names or ():
        part = float(np.max(gap[where])) if gap[where].size else 0.0
        if not part <= tol:
            out["differs"][name] = part if math.isfinite(part) else math.inf
    if difference <= tol:
        out.update(equal=True, verdict="inside")
        return out
    out["equal"] = False
    if not np.all(np.isfinite(framework)):   # a NaN or inf is in no Clarke set
        out.update(verdict="outside", distance=math.inf,
                   note="the framework's gradient is not finite")
        return out
    if sample is None:
        return out
    out["checked"] = "clarke"
    try:
        clarke = sample()
        membership = clarke.contains(framework, tol)
        void = (_contradiction(clarke, membership, element, tol)
                if membership.verdict == "outside" else "")
    except Exception as e:  # a failure of the sampler is recorded, never fatal to training
        out.update(verdict="undetermined", note=f"asd.clarke failed: {type(e).__name__}: {e}")
        return out
    out.update(verdict=membership.verdict, distance=float(membership.outer),
               inner=float(membership.inner))
    if void:
        out.update(verdict="undetermined", distance=0.0, note=void)
    elif membership.verdict == "undetermined":
        out["note"] = membership.settle
    return out


def _contradiction(clarke, membership, element: np.ndarray, tol: float) -> str:
    """Why an ``outside`` certificate cannot stand, or ``''``.

    The certificate is a lower bound on the distance to the Clarke set, from an enclosure
    evaluated in the model's dtype. Two checks that hold in exact arithmetic: the bound is at
    most the distance to the sampled hull (which lies in the set), and asd's element (a Clarke
    subgradient) is not outside it. Where rounding in a low precision breaks either (a float32
    enclosure of a 2048-wide layer, or a forward that sits exactly on a kink in one evaluation
    and not in another), nothing is certified: ``undetermined``, with the reason.
    """
    if membership.outer > membership.inner + tol:
        return (f"no certificate: the enclosure's lower bound {membership.outer:.3g} exceeds "
                f"the distance {membership.inner:.3g} to asd's own sample (rounding in the "
                "model's dtype); audit in float64 to decide")
    if clarke.contains(element, tol).verdict == "outside":
        return ("no certificate: asd's own element is outside the enclosure too (the "
                "evaluations round the point differently); audit in float64 to decide")
    return ""


# ----- the log -----


class TrainingLog(list):
    """The records of one monitored run, in step order (a list of `StepRecord`), with the
    model's description in ``meta`` and the steps monitored in ``steps``."""

    def __init__(self, records: Iterable[StepRecord] = (), meta: dict | None = None):
        super().__init__(records)
        self.meta: dict[str, Any] = dict(meta or {})
        self.steps = 0

    # ----- numbers -----

    def summary(self) -> dict[str, Any]:
        """Fractions over the audited steps: with a tie, with a live tie, each verdict, asd's
        element equal to the framework's; and per layer-primitive the fraction of steps with
        ties and live ties, per parameter the fraction of steps where it differed."""
        n = len(self)
        frac = (lambda k: k / n) if n else (lambda k: 0.0)
        keys = sorted({k for r in self for k in r.ties})
        params = sorted({k for r in self for k in r.differs})
        verdicts = {v: frac(sum(r.verdict == v for r in self)) for v in VERDICTS}
        compared = [r for r in self if r.equal is not None]
        return {
            "steps": self.steps, "audited": n, "tied": frac(sum(r.tied for r in self)),
            "live": frac(sum(r.live_tied for r in self)), "verdicts": verdicts,
            "equal": (sum(bool(r.equal) for r in compared) / len(compared)) if compared else None,
            "checked": {c: sum(r.checked == c for r in self)
                        for c in ("census", "asd", "clarke", "error")},
            "by_layer": {k: {"tied": frac(sum(bool(r.ties.get(k)) for r in self)),
                             "live": frac(sum(bool(r.live.get(k)) for r in self)),
                             "entries": sum(r.ties.get(k, 0) for r in self)} for k in keys},
            "differs": {p: frac(sum(p in r.differs for r in self)) for p in params},
            "seconds": sum(r.seconds for r in self),
        }

    def to_json(self, path: str | Path | None = None) -> str:
        """The log as JSON (meta, summary, records); written to ``path`` when given."""
        text = json.dumps({"meta": self.meta, "summary": _jsonable(self.summary()),
                           "records": [r.to_dict() for r in self]}, indent=1)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text: str) -> TrainingLog:
        """A log read back from `to_json`'s text."""
        data = json.loads(text)
        fields = StepRecord.__dataclass_fields__
        records = [StepRecord(**{k: _number(v) for k, v in r.items() if k in fields})
                   for r in data["records"]]
        log = cls(records, data.get("meta"))
        log.steps = data.get("summary", {}).get("steps", len(records))
        return log

    # ----- rendering -----

    def table(self, last: int = 12, title: str | None = None):
        """A ``rich`` table of the last ``last`` audited steps, 80 columns wide at most."""
        from rich.table import Table

        table = Table(title=title, title_justify="left", width=80, pad_edge=False)
        for name, width in (("step", 6), ("ties", 6), ("live", 5), ("where", 22),
                            ("by", 7), ("verdict", 12), ("|Δ|/|g|", 9)):
            table.add_column(name, max_width=width, no_wrap=True, overflow="ellipsis")
        for r in self[-last:]:
            table.add_row(str(r.step), str(sum(r.ties.values())), str(sum(r.live.values())),
                          _where(r), r.checked, _styled(r.verdict), _relative(r))
        return table

    def lines(self) -> list[str]:
        """The summary in words, one line each (each under 80 columns)."""
        s = self.summary()
        v = s["verdicts"]
        out = [f"{s['audited']} of {s['steps']} steps audited ({self.meta.get('dtype', '?')}):"
               f" {s['tied']:.0%} with a tie, {s['live']:.0%} with a live tie",
               f"verdicts: {v['inside']:.0%} inside, {v['undetermined']:.0%} undetermined, "
               f"{v['outside']:.0%} outside", f"checked by {_checked(s['checked'])}"]
        for key, row in s["by_layer"].items():
            out.append(f"  {key[:40]:<40} tied {row['tied']:>4.0%}  live {row['live']:>4.0%}")
        for name, share in s["differs"].items():
            out.append(f"  {name[:40]:<40} differs from asd in {share:.0%} of steps")
        return out

    def plot(self, path: str | Path | None = None):
        """Tie counts per layer-primitive (top) and the verdict of each audited step
        (bottom) over training, as a matplotlib figure; saved to ``path`` when given."""
        import matplotlib

        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 1]})
        steps = [r.step for r in self]
        for key in sorted({k for r in self for k in r.ties}):
            top.plot(steps, [r.ties.get(key, 0) for r in self], label=key, lw=1)
        if any(r.live_tied for r in self):
            top.plot(steps, [sum(r.live.values()) for r in self], "k--", lw=1, label="live")
        top.set_ylabel("tied entries")
        top.set_yscale("symlog")
        if top.lines:
            top.legend(fontsize=7, loc="upper right")
        colors = {"inside": "tab:green", "undetermined": "tab:orange", "outside": "tab:red"}
        for verdict, y in zip(VERDICTS, (0, 1, 2), strict=True):
            xs = [r.step for r in self if r.verdict == verdict]
            bottom.scatter(xs, [y] * len(xs), s=6, color=colors[verdict])
        bottom.set_yticks([0, 1, 2], list(VERDICTS))
        bottom.set_ylim(-0.5, 2.5)
        bottom.set_xlabel("training step")
        top.set_title(self.meta.get("title", "ties and verdicts over training"), fontsize=10)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=110)
            plt.close(fig)
        return fig


def _number(v):
    """JSON's strings for NaN and infinities back to floats."""
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    if isinstance(v, dict):
        return {k: _number(x) for k, x in v.items()}
    return v


def _where(r: StepRecord) -> str:
    """The layer-primitive with the most live ties (else the most ties), for the table."""
    pool = r.live if r.live_tied else r.ties
    if not any(pool.values()):
        return ", ".join(r.unknown) or "-"
    return max(pool, key=pool.get)


def _styled(verdict: str | None) -> str:
    color = {"inside": "green", "outside": "red", "undetermined": "yellow"}.get(verdict or "")
    return f"[{color}]{verdict}[/{color}]" if color else (verdict or "-")


def _relative(r: StepRecord) -> str:
    if r.difference is None or not r.scale:
        return "-"
    return f"{r.difference / r.scale:.1e}"


def _checked(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing"


__all__ = ["ULPS", "VERDICTS", "StepRecord", "TrainingLog", "judge", "tolerance"]
