"""Plot the sampled Clarke set of a 2-D function at its kink, with each framework's answer.

f(x) = max(|x1|, |x2|) + 10 x1 - 9 (relu(x1) - relu(-x1)) - x1 is max(|x1|, |x2|) in
disguise (the last three terms cancel). At x = 0 its Clarke subdifferential is the unit ball
of the l1 norm: the diamond with corners (±1, 0), (0, ±1). asd samples its four limiting
gradients; PyTorch, JAX and autograd (each only if installed) return whatever their fixed
kink conventions compose to, here a point far outside the set.

Run: ``python examples/clarke_plot.py [--out DIR]`` (a temporary directory by default).
Needs matplotlib (``pip install 'autosubdiff[plot]'``); without it the script says so and
exits cleanly.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import asd
import asd.cli.frameworks as fw

FORMULA = "max(|x1|, |x2|) + 10 x1 - 9 (relu(x1) - relu(-x1)) - x1"
PEERS = ("torch", "jax", "autograd")


def program(o, x):
    """The function, written once against any namespace of operations ``o``."""
    return (o.maximum(o.abs(x[0]), o.abs(x[1])) + 10 * x[0]
            - 9 * (o.relu(x[0]) - o.relu(-x[0])) - x[0])


ASD_OPS = SimpleNamespace(relu=asd.relu, abs=asd.abs, maximum=asd.maximum)


def answers(x: np.ndarray) -> dict[str, np.ndarray]:
    """Each installed framework's gradient at ``x``, from its own autodiff."""
    found = {}
    for name in PEERS:
        if name in fw.available():
            ops = fw.ops(name)
            found[fw.LABELS[name]] = fw.gradient(name, lambda t, ops=ops: program(ops, t), x)
    return found


def hull_outline(points: np.ndarray) -> np.ndarray:
    """The closed outline of the 2-D convex hull of ``points`` (a segment or a point too)."""
    if len(points) >= 3:
        from scipy.spatial import ConvexHull, QhullError

        try:
            vertices = points[ConvexHull(points).vertices]
            return np.vstack([vertices, vertices[:1]])
        except QhullError:  # collinear: fall through to the segment
            pass
    order = np.lexsort(points.T[::-1])
    return points[order[[0, -1]]] if len(points) > 1 else points


def main(argv: list[str] | None = None) -> Path | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for clarke_set.png (default: a new temporary one)")
    args = parser.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("skipped: matplotlib is not installed (pip install 'autosubdiff[plot]')")
        return None

    x = np.zeros(2)
    sample = asd.clarke(lambda y: program(ASD_OPS, y), n=64, seed=0)(x)
    peers = answers(x)
    print(f"f(x) = {FORMULA} at x = {x.tolist()}")
    print(f"asd: {len(sample)} limiting gradients {sample.gradients.tolist()}, "
          f"min-norm element {sample.min_norm().tolist()}")
    for label, g in peers.items():
        verdict = "inside" if sample.contains(g) else "OUTSIDE"
        print(f"{label:>8}: {g.tolist()} is {verdict} the Clarke set")

    fig, ax = plt.subplots(figsize=(6, 5))
    outline = hull_outline(sample.gradients)
    ax.fill(outline[:, 0], outline[:, 1], color="tab:blue", alpha=0.2,
            label="sampled Clarke set (hull)")
    ax.plot(outline[:, 0], outline[:, 1], color="tab:blue")
    ax.scatter(*sample.gradients.T, color="tab:blue", zorder=3,
               label="limiting gradients (asd.clarke)")
    ax.scatter(*sample.min_norm(), marker="*", s=120, color="tab:green", zorder=4,
               label="min-norm element")
    styles = zip("sD^", ("tab:red", "tab:orange", "tab:purple"), strict=True)
    for (label, g), (marker, color) in zip(peers.items(), styles, strict=False):
        ax.scatter(*g, marker=marker, s=80, color=color, facecolors="none", linewidths=2,
                   zorder=5, label=f"{label} {np.round(g, 3).tolist()}")
    ax.axhline(0, color="0.8", lw=0.5)
    ax.axvline(0, color="0.8", lw=0.5)
    ax.set_xlabel("∂f/∂x1")
    ax.set_ylabel("∂f/∂x2")
    ax.set_title(f"Clarke set of {FORMULA}\nat x = 0", fontsize=9)
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=8, loc="best")
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="asd-clarke-"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "clarke_set.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
