"""The package's layers (docs/design.md, Layout): imports point down only.

Each module's imports of asd modules are read from its source (module level and inside
functions alike), so a lazy import cannot hide a dependency that points up.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# layer -> the asd modules (prefixes) it may import besides itself
ALLOWED = {
    "asd.core": ("asd.core", "asd.errors", "asd.tree"),
    "asd.library": ("asd.library", "asd.extend", "asd.errors"),
    # the scipy namespaces sit on the library like asd.numpy, and need nothing above it
    "asd.scipy": ("asd.scipy", "asd.library", "asd.extend", "asd.errors"),
}
# layer -> the layers it must never import
FORBIDDEN = {
    "asd.analysis": ("asd.cli", "asd.frontends", "asd.optimize"),
    "asd.optimize": ("asd.cli", "asd.frontends"),
    "asd.frontends": ("asd.cli",),
    "asd.api": ("asd.cli", "asd.frontends", "asd.analysis"),
    "asd.extend": ("asd.cli", "asd.frontends", "asd.analysis", "asd.api"),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "library":
        parts = ["asd", "library", *parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def asd_imports(path: Path) -> set[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found |= {f"{module}.{a.name}" for a in node.names} | {module}
    return {m for m in found if m == "asd" or m.startswith("asd.")}


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


MODULES = sorted((ROOT / "asd").rglob("*.py")) + sorted((ROOT / "library").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    name = module_name(path)
    imports = asd_imports(path)
    for layer, allowed in ALLOWED.items():
        if within(name, (layer,)):
            # importing the package ``asd`` itself would import every layer above
            bad = sorted(m for m in imports if not within(m, allowed))
            assert not bad, f"{name} ({layer}) may import only {allowed}, not {bad}"
    for layer, forbidden in FORBIDDEN.items():
        if within(name, (layer,)):
            bad = sorted(m for m in imports if within(m, forbidden))
            assert not bad, f"{name} ({layer}) must not import {bad}"
    if not within(name, ("asd.cli", "asd.__main__")):
        bad = sorted(m for m in imports if within(m, ("asd.cli",)))
        assert not bad, f"{name} imports the command line ({bad}); nothing below it may"


def test_the_checker_reads_lazy_and_relative_imports():
    """The checker sees an import inside a function, and resolves a relative one."""
    assert "asd.core.program.Literal" in asd_imports(ROOT / "asd" / "api.py")  # in a function
    assert "asd.library.smooth" in asd_imports(ROOT / "library" / "norms.py")  # from . import
    assert within("asd.core.ties", ("asd.core",)) and not within("asd.corex", ("asd.core",))
