"""The ``asd`` command: ``asd demo | prove | audit | bench``.

Each subcommand lives in its own module with a ``main(argv) -> int``; this file only
dispatches, importing the chosen module lazily so ``asd demo`` never pays for the others.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("asd.demo", "the paper's examples: asd against the installed frameworks"),
    "audit": ("asd.audit", "framework gradients against the Clarke set"),
    "prove": ("asd.prove", "certificates for every primitive"),
    "bench": ("asd.bench", "benchmarks: asd against the primal and its peers"),
}


def usage() -> str:
    rows = "\n".join(f"  {name:<7} {about}" for name, (_, about) in COMMANDS.items())
    return f"usage: asd COMMAND [options]\n\ncommands:\n{rows}\n\n'asd COMMAND --help' for more."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"asd: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
