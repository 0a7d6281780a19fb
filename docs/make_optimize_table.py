"""Write the benchmark table of ``docs/optimize.md``: `asd.optimize.bench` on every problem,
both methods, gradients from asd and from torch autograd, all numbers measured when this
script runs (a few minutes on 2 cores).

Usage: ``python docs/make_optimize_table.py [OUTPUT]`` (default: ``docs/optimize.md`` next to
this script); the table replaces what lies between the ``<!-- table -->`` markers. A developer
script, not part of the package: it imports torch, which asd does not depend on.
"""

from __future__ import annotations

import sys
from pathlib import Path

from asd.optimize.bench import benchmark, markdown

BEGIN, END = "<!-- table:begin -->", "<!-- table:end -->"


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parent / "optimize.md"
    text = out.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    rows = benchmark()
    out.write_text(text[:start] + "\n" + markdown(rows) + text[stop:])
    failed = [f"{r.problem} / {r.method} / {r.gradients}" for r in rows if not r.passed]
    print(f"wrote {out}: {len(rows) - len(failed)} of {len(rows)} runs meet the bar"
          + (f"; not: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
