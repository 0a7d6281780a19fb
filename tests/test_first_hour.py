"""What a new user meets first: the import, the version, the README's links and names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import asd
from asd.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sympy", "scipy", "rich", "mpmath")


def test_import_asd_loads_no_heavy_module():
    # what `import asd` costs is mostly what it imports: sympy, scipy, rich and mpmath
    # load when certify, clarke, the CLI tables or the checker first need them
    code = f"import sys, asd; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out


def test_lazy_parts_are_reachable_after_import_asd():
    code = ("import asd; asd.testing.check_rule; asd.numpy.where; asd.certify; asd.clarke; "
            "asd.ClarkeSample; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "ok"
    assert callable(asd.testing.check_rule) and asd.numpy.sum is not None
    assert "certify" in dir(asd)


def test_unknown_attribute_is_an_attribute_error():
    try:
        asd.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("no AttributeError")


def test_version_flag(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"asd {asd.__version__} ") and "autosubdiff" in out


def test_readme_links_the_shipped_design_and_names_the_pip_package():
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    for link in re.findall(r"\]\(([^)#]+)\)", readme):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link
    assert "docs/design.md" in readme and (ROOT / "docs" / "design.md").exists()
    assert "autosubdiff" in readme
    assert "asd --version" in readme
