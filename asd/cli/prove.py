"""``asd prove``: run every certificate of the library and print the table, or certify a
user's branching program (``asd prove file.py:function``).

The exit status is the verdict: 0 when every certificate holds (and every library primitive
has one), 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from asd.cli.main import load_target

if TYPE_CHECKING:
    from rich.console import Console

STATUS_STYLE = {"proved": "green", "sampled": "yellow", "failed": "bold red"}


def _style(text: str) -> str:
    for word, style in STATUS_STYLE.items():
        if text.startswith(word):
            return f"[{style}]{text}[/{style}]"
    if text.isupper() or text.startswith(("MISMATCH", "ERROR", "MISSING")):
        return f"[bold red]{text}[/bold red]"
    return text


def _short(text: str, n: int = 34) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def markdown(rows, missing) -> str:
    """The table as GitHub markdown (for release notes and issue comments)."""
    lines = ["| family | primitive | constraints | CQ | continuity | gradient check | ok |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r.family, r.primitive, _short(r.constraints), r.cq, r.continuity, r.gradient,
                 "yes" if r.ok else "NO"]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += [f"| {m} | {n} | - | - | - | NO CERTIFICATE | NO |" for m, n in missing]
    return "\n".join(lines)


def prove_library(console: Console, family: str | None = None, as_markdown: bool = False
                  ) -> int:
    """Run every certificate (of one family if given); print the table and the verdict."""
    from asd import proofs

    start = time.perf_counter()
    rows = []
    families = [family] if family else list(proofs.FAMILIES)
    print(f"asd prove: certifying {len(families)} famil{'y' if len(families) == 1 else 'ies'} "
          f"({', '.join(families)}); sympy proofs take a while", file=sys.stderr, flush=True)
    for fam in families:
        # one family at a time, with its time, so a long run shows where it is
        t0 = time.perf_counter()
        done = proofs.run_all(fam)
        rows += done
        failed = sum(not r.ok for r in done)
        print(f"asd prove: {fam:<12} {len(done):3d} certificates"
              f"{f', {failed} failing' if failed else ''} ({time.perf_counter() - t0:.1f} s)",
              file=sys.stderr, flush=True)
    missing = [] if family else proofs.uncovered()
    if as_markdown:
        print(markdown(rows, missing))
        ok = all(r.ok for r in rows) and not missing
        print(f"\n{'VERIFIED' if ok else 'REJECTED'}: {len(rows)} certificates "
              f"({time.perf_counter() - start:.1f} s)")
        return 0 if ok else 1
    from rich.table import Table

    table = Table(title="asd prove: certificates of the library primitives", show_lines=False)
    for col in ("family", "primitive", "constraints", "CQ", "continuity", "gradient check",
                "ok"):
        # a primitive's name is what users grep for: never split it across lines
        table.add_column(col, overflow="fold", no_wrap=col == "primitive")
    for r in rows:
        table.add_row(r.family, r.primitive, _short(r.constraints), _style(r.cq),
                      _style(r.continuity), _style(r.gradient),
                      "[green]yes[/green]" if r.ok else "[bold red]NO[/bold red]")
    for module, name in missing:
        table.add_row(module, name, "-", "-", "-", "[bold red]NO CERTIFICATE[/bold red]",
                      "[bold red]NO[/bold red]")
    console.print(table)
    for r in rows:
        if not r.ok:
            console.print(f"[bold red]{r.primitive}[/bold red]: {r.detail}", soft_wrap=True)
    failed = [r for r in rows if not r.ok]
    covered = "" if family else f", all {len(proofs.library_primitives())} library primitives " \
        "covered"
    elapsed = time.perf_counter() - start
    if failed or missing:
        console.print(f"[bold red]REJECTED[/bold red]: {len(failed)} failing certificates, "
                      f"{len(missing)} primitives without one ({elapsed:.1f} s)")
        return 1
    console.print(f"[bold green]VERIFIED[/bold green]: {len(rows)} certificates passed"
                  f"{covered} ({elapsed:.1f} s)")
    return 0


def prove_program(console: Console, spec: str, smooth: list[str]) -> int:
    """Certify one user branching program; print its pieces, checks and failures."""
    from asd.analysis.certificate import certify

    fn = load_target(spec)
    cert = certify(fn, smooth=smooth or None)
    console.print(str(cert), highlight=False, markup=False)
    console.print("[bold green]VERIFIED[/bold green]" if cert.ok else
                  "[bold red]REJECTED[/bold red]")
    return 0 if cert.ok else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``asd prove``.

    >>> main(["--help"])  # doctest: +ELLIPSIS
    usage: asd prove ...
    0
    """
    parser = argparse.ArgumentParser(
        prog="asd prove", description="Certificates (CQ, continuity, gradient checks) for every "
        "library primitive, or for FILE.py:FUNCTION, a branching program of yours.")
    parser.add_argument("program", nargs="?", help="FILE.py:FUNCTION to certify")
    parser.add_argument("--family", help="only this library family (piecewise, order, ...)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--smooth", action="append", default=[],
                        help="a smooth function the program may use (exp, log, ...); repeat")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 150)
    if args.program:
        try:
            return prove_program(console, args.program, args.smooth)
        except (ValueError, FileNotFoundError, AttributeError) as e:
            console.print(f"asd prove: {e}", markup=False)
            return 2
    return prove_library(console, args.family, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
