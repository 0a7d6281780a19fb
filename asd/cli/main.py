"""The ``asd`` command: ``asd demo | prove | audit | bench``.

Each subcommand lives in its own module with a ``main(argv) -> int``; this file only
dispatches, importing the chosen module lazily so ``asd demo`` never pays for the others.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

COMMANDS = {
    "demo": ("asd.cli.demo", "the paper's examples: asd against the installed frameworks"),
    "audit": ("asd.cli.audit", "framework gradients against the Clarke set"),
    "prove": ("asd.cli.prove", "certificates for every primitive"),
    "bench": ("asd.cli.bench", "benchmarks: asd against the primal and its peers"),
}


def load_target(spec: str) -> Callable:
    """``'path/to/file.py:name'`` -> the object ``name`` defined in that file.

    Shared by the commands that take a user's function (``asd prove``, ``asd audit``); the
    module is registered in ``sys.modules`` so tools that look functions up by module
    (``torch.export``, pickling) find it.
    """
    path, sep, name = spec.rpartition(":")
    if not sep or not path:
        raise ValueError(f"expected FILE.py:FUNCTION, got {spec!r}")
    file = Path(path)
    if not file.exists():
        raise FileNotFoundError(f"no such file: {file}")
    module_name = f"_asd_target_{file.stem}"
    loader_spec = importlib.util.spec_from_file_location(module_name, file)
    if loader_spec is None or loader_spec.loader is None:
        raise ImportError(f"cannot import {file}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    loader_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise AttributeError(f"{file} has no attribute {name!r}")
    return getattr(module, name)


def usage() -> str:
    rows = "\n".join(f"  {name:<7} {about}" for name, (_, about) in COMMANDS.items())
    return (f"usage: asd COMMAND [options]\n       asd --version\n\ncommands:\n{rows}\n\n"
            "'asd COMMAND --help' for more.")


def version() -> str:
    """``asd 0.1.0 (pip package autosubdiff, Python 3.11.7)``."""
    from asd import __version__

    return (f"asd {__version__} (pip package autosubdiff, Python "
            f"{'.'.join(map(str, sys.version_info[:3]))})")


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``asd COMMAND``; ``asd --version`` names the version and the pip package.

    >>> main(["--version"])  # doctest: +ELLIPSIS
    asd 0.1.0 (pip package autosubdiff, Python ...)
    0
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-V", "--version"):
        print(version())
        return 0
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
