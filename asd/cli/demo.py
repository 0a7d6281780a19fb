"""``asd demo``: the paper's table, computed live.

Four ways to write functions of one variable, all evaluated at x = 0:

    f1(x) = x                         (the identity)
    f2(x) = relu(x) - relu(-x)        (the identity again)
    f3(x) = 10 f1(x) - 9 f2(x)        (and again)
    f4(x) = relu(relu(x)) - relu(x)   (identically zero)

For each: what asd returns for ten random seeds, the true Clarke subdifferential (for a
piecewise-smooth function of one variable it is the interval between the two one-sided
limiting derivatives, which asd computes with directions -1 and +1), and what every
installed framework's own autodiff returns, marked by whether it lies in that set.
"""

from __future__ import annotations

import argparse

import asd

PROGRAMS = {
    "f1": ("x", lambda x: x),
    "f2": ("relu(x) - relu(-x)", lambda x: asd.relu(x) - asd.relu(-x)),
    "f3": ("10·f1(x) - 9·f2(x)", lambda x: 10 * x - 9 * (asd.relu(x) - asd.relu(-x))),
    "f4": ("relu(relu(x)) - relu(x)", lambda x: asd.relu(asd.relu(x)) - asd.relu(x)),
}


def clarke_interval(f, x: float) -> tuple[float, float]:
    """The Clarke set of a piecewise-smooth f: R -> R at x, from both one-sided limits."""
    left = float(asd.subgrad(f, direction=-1.0)(x))
    right = float(asd.subgrad(f, direction=1.0)(x))
    return min(left, right), max(left, right)


def fmt_set(lo: float, hi: float) -> str:
    return f"{{{lo:g}}}" if lo == hi else f"[{lo:g}, {hi:g}]"


def rows(x: float, seeds: int, frameworks: list[str]):
    from asd.cli import frameworks as fw

    for name, (formula, f) in PROGRAMS.items():
        ours = [float(asd.subgrad(f, seed=s)(x)) for s in range(seeds)]
        lo, hi = clarke_interval(f, x)
        theirs = {}
        for framework in frameworks:
            try:
                theirs[framework] = fw.derivative(framework, name, x)
            except Exception as exc:  # report a broken framework, keep the table
                theirs[framework] = exc
        yield name, formula, ours, (lo, hi), theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asd demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", type=float, default=0.0, help="the point (default 0)")
    parser.add_argument("--seeds", type=int, default=10, help="random directions for asd")
    parser.add_argument("--no-frameworks", action="store_true",
                        help="skip PyTorch/JAX/TensorFlow/autograd even if installed")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from asd.cli import frameworks as fw

    names = [] if args.no_frameworks else fw.available()
    table = Table(title=f"Derivatives at x = {args.at:g} (asd: {args.seeds} random seeds)")
    for column in ("program", "f(x)", "Clarke set", "asd", *[fw.LABELS[n] for n in names]):
        table.add_column(column, justify="left" if column in ("program", "f(x)") else "center")
    wrong = 0
    for name, formula, ours, (lo, hi), theirs in rows(args.at, args.seeds, names):
        inside = all(lo <= g <= hi for g in ours)
        wrong += not inside
        values = sorted(set(ours))
        cell = ", ".join(f"{g:g}" for g in values) + f" (×{args.seeds})" * (len(values) == 1)
        cells = [f"[green]{cell} ✓[/]" if inside else f"[red]{cell} ✗[/]"]
        for framework in names:
            d = theirs[framework]
            if isinstance(d, Exception):
                cells.append(f"[yellow]error: {type(d).__name__}[/]")
            elif lo <= d <= hi:
                cells.append(f"[green]{d:g} ✓[/]")
            else:
                cells.append(f"[red]{d:g} ✗[/]")
        table.add_row(name, formula, fmt_set(lo, hi), *cells)
    console = Console(width=None if Console().is_terminal else 120)
    console.print(table)
    missing = [fw.LABELS[n] for n in fw.FRAMEWORKS if n not in names]
    if missing and not args.no_frameworks:
        console.print(f"not installed (skipped): {', '.join(missing)}")
    console.print("✓ inside the Clarke subdifferential, ✗ outside it. Every number above was "
                  "computed just now.")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
