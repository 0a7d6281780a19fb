"""``asd prove``: the table lists every library primitive, the exit status is the verdict,
and ``asd prove FILE.py:FUNCTION`` certifies a user's branching program."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from asd import proofs
from asd.cli.main import main


def test_prove_lists_every_primitive_and_passes(capsys):
    status = main(["prove"])
    captured = capsys.readouterr()
    out = captured.out
    # progress goes to stderr, a line per family with its count and time
    for family in proofs.FAMILIES:
        assert f"asd prove: {family}" in captured.err, captured.err
    assert " s)" in captured.err
    names = {p.name for _, p in proofs.library_primitives().values()}
    missing = sorted(n for n in names if n not in out)
    assert missing == []
    assert status == 0, out[-3000:]
    assert "VERIFIED" in out


@pytest.fixture
def user_programs(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent("""
        import numpy as np
        import asd

        def relu(x):
            return x if asd.branch(x) else 0

        def relu_cubed(x):
            return x if asd.branch(x ** 3) else 0

        @asd.branching(smooth={"exp"})
        def elu(x):
            return x if asd.branch(x) else np.exp(x) - 1

        def heaviside(x):
            return 1 if asd.branch(x) else 0
    """))
    return path


def test_prove_certifies_a_user_program(user_programs, capsys):
    assert main(["prove", f"{user_programs}:relu"]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    assert main(["prove", f"{user_programs}:elu"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(("name", "kind", "where"), [
    ("relu_cubed", "[cq]", "(x = 0)"), ("heaviside", "[continuity]", "(x = 0)")])
def test_prove_rejects_with_a_witness(user_programs, capsys, name, kind, where):
    assert main(["prove", f"{user_programs}:{name}"]) == 1
    out = capsys.readouterr().out
    assert "REJECTED" in out and kind in out and where in out


def test_prove_usage_errors(user_programs, capsys):
    assert main(["prove", f"{user_programs}:nothing"]) == 2
    assert main(["prove", "no_such_file.py:f"]) == 2
    assert main(["prove", "--help"]) == 0
    capsys.readouterr()


def test_the_console_script_runs_one_family():
    done = subprocess.run([sys.executable, "-m", "asd", "prove", "--family", "smooth"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "softplus" in done.stdout and "VERIFIED" in done.stdout


def test_markdown_table(capsys):
    assert main(["prove", "--family", "order", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| family | primitive |")
    assert "| order | sort | a - b, a - c, b - c | proved | proved |" in out
