"""`asd demo` prints the paper's table computed live, and asd is inside the Clarke set."""

import numpy as np

import asd
from asd.cli import demo


def test_clarke_interval_of_the_paper_programs():
    assert [demo.clarke_interval(f, 0.0) for _, f in demo.PROGRAMS.values()] == [
        (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (0.0, 0.0)]
    assert demo.clarke_interval(asd.abs, 0.0) == (-1.0, 1.0)


def test_demo_runs_and_reports_asd_inside(capsys):
    assert demo.main(["--no-frameworks", "--seeds", "4"]) == 0
    out = capsys.readouterr().out
    for name in ("f1", "f2", "f3", "f4"):
        assert name in out
    assert out.count("✗") == 1  # only in the legend line


def test_demo_rows_compare_installed_frameworks():
    from asd.cli import frameworks

    names = frameworks.available()
    for _, _, ours, (lo, hi), theirs in demo.rows(0.0, 3, names):
        assert all(lo <= g <= hi for g in ours)
        assert set(theirs) == set(names)
        assert all(isinstance(d, float) and np.isfinite(d) for d in theirs.values())
