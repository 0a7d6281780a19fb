"""Run every ``examples/*.py`` as a script: the examples are tests too.

Each example asserts what it demonstrates (typically that asd's subgradient equals the exact
limiting gradient from ``asd.testing``), so a non-zero exit status is a failure. New examples
are picked up automatically.

Convention for examples that need an optional package (torch, jax, matplotlib, ...): when it is
missing the example prints one line starting with ``skipped:`` that names the package (for
example ``skipped: needs torch (pip install torch)``) and exits with status 0. This test then
reports it as skipped with that message instead of passing silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))
TIMEOUT = 300  # seconds per example; they are meant to run in a few seconds


def test_examples_exist():
    assert SCRIPTS, f"no examples found in {EXAMPLES}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_example_runs(script: Path, tmp_path: Path):
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONHASHSEED="0")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,  # examples must not depend on the working directory or leave files
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    output = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert proc.returncode == 0, f"{script.name} exited with {proc.returncode}\n{output}"
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("skipped:")]
    if skipped:
        pytest.skip(f"{script.name}: {skipped[0]}")
