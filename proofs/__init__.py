"""Certificates for every primitive of ``asd.library`` (installed as ``asd.proofs``).

One module per library family declares ``PROOFS``, a table of certificates (see
``registry.py`` for the kinds). ``run_all`` runs them for ``asd prove``; ``uncovered`` lists
the library primitives no certificate covers (the test suite requires it to be empty).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from asd.core.primitive import Primitive

from .registry import Proof, Row

FAMILIES = ("piecewise", "order", "smooth", "norms", "nn", "projections", "spectral",
            "statistics", "linalg", "discontinuous", "elementwise", "update", "structure",
            "special")


def proofs() -> list[tuple[str, Proof]]:
    """``(family, proof)`` for every certificate of every family module that imports."""
    return [(family, p) for family, module in _modules()
            if not isinstance(module, Exception) for p in module.PROOFS]


def _modules() -> list[tuple[str, Any]]:
    """``(family, module)``; a module whose import fails (a renamed primitive) gives
    ``(family, exception)`` so ``run_all`` reports it instead of crashing."""
    out: list[tuple[str, Any]] = []
    for family in FAMILIES:
        try:
            out.append((family, importlib.import_module(f"{__name__}.{family}")))
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                out.append((family, e))
        except Exception as e:  # reported as a failed row by run_all
            out.append((family, e))
    return out


def library_primitives() -> dict[int, tuple[str, Primitive]]:
    """Every Primitive object defined in an ``asd.library`` module: id -> (module, primitive)."""
    import asd.library as lib

    found: dict[int, tuple[str, Primitive]] = {}
    for info in pkgutil.iter_modules(lib.__path__):
        module = importlib.import_module(f"asd.library.{info.name}")
        for value in vars(module).values():
            items = list(value.values()) if isinstance(value, dict) else [value]
            for obj in items:
                if isinstance(obj, Primitive) and id(obj) not in found:
                    found[id(obj)] = (info.name, obj)
    return found


def uncovered() -> list[tuple[str, str]]:
    """``(module, primitive name)`` of library primitives that no certificate covers."""
    covered = {id(p) for _, proof in proofs() for p in proof.prims}
    return sorted((m, p.name) for k, (m, p) in library_primitives().items() if k not in covered)


def run_all(family: str | None = None) -> list[Row]:
    """Run every certificate (of one family if given); one row each, failures included."""
    rows = []
    for fam, module in _modules():
        if isinstance(module, Exception) and family in (None, fam):
            rows.append(Row(f"<{fam} certificates>", family=fam, ok=False, gradient="ERROR",
                            detail=f"proofs/{fam}.py does not import: "
                                   f"{type(module).__name__}: {module}"))
    for fam, proof in proofs():
        if family not in (None, fam):
            continue
        try:
            row = proof.run()
        except Exception as e:  # a crashing certificate is a failed one, reported as such
            row = Row(proof.label, ok=False, gradient="ERROR", detail=f"{type(e).__name__}: {e}")
        row.family = fam
        rows.append(row)
    return rows


__all__ = ["FAMILIES", "Proof", "Row", "library_primitives", "proofs", "run_all", "uncovered"]
