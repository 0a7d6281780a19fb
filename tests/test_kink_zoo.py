"""The kink zoo (``asd audit --zoo``, docs/kink-zoo.md): sourced cases, right sets, current page.

- at least 30 cases, each citing issues or pull requests of the PyTorch, JAX, TensorFlow
  (Keras) or autograd trackers;
- the hand-derived sets are checked against what asd does not assume: every limiting gradient
  asd's Clarke sample finds lies in the set, and for hulls every vertex is such a gradient
  (so the set is neither too small nor too large); a refusal case makes asd raise its own
  error, naming the point;
- asd is never wrong on the zoo (`zoo.failures`), and ``asd audit --zoo`` exits 0 and writes
  the page;
- the committed page is a fresh run: every row's case, point, exact set and asd cell equal a
  fresh run's, and every framework's cell too where the installed version is the one the
  page was generated with.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import asd
from asd.cli import audit, battery, zoo
from asd.cli import frameworks as fw

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "kink-zoo.md"
TRACKERS = ("pytorch/pytorch", "jax-ml/jax", "tensorflow/tensorflow", "HIPS/autograd",
            "keras-team/keras")


@pytest.fixture(scope="module")
def rows():
    return zoo.run(fw.available(), progress=False)


def test_at_least_30_cases_each_cited_from_the_trackers():
    assert len(zoo.CASES) >= 30
    assert len({c.name for c in zoo.CASES}) == len(zoo.CASES)
    for case in zoo.CASES:
        assert case.sources, case.name
        for label, url in case.sources:
            m = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)/(issues|pull)/(\d+)", url)
            assert m and m.group(1) in TRACKERS, (case.name, url)
            assert label.endswith(f"#{m.group(3)}")
        assert case.note and not case.note.endswith(".")
    assert sum(isinstance(c.clarke, zoo.Refusal) for c in zoo.CASES) >= 4


def _asd_f(case):
    o = battery.asd_ops()
    return case.asd_f or (lambda t: case.f(o, t))


SETS = [c for c in zoo.CASES if not isinstance(c.clarke, zoo.Refusal)
        and c.name != "SVD reassembled at a tie"]


@pytest.mark.parametrize("case", SETS, ids=[c.name for c in SETS])
def test_every_limiting_gradient_asd_finds_is_in_the_set(case):
    try:
        with np.errstate(all="ignore"):
            sample = asd.clarke(_asd_f(case), n=64, seed=3)(case.point)
    except asd.ASDError:    # asd.clarke refuses sqrt((x - 1)^2), which one sweep decides
        grads = [asd.subgrad(_asd_f(case), seed=s)(case.point) for s in range(16)]
        assert all(zoo._contains(case.clarke, g) for g in grads), case.name
        return
    for g in sample.gradients:
        assert zoo._contains(case.clarke, g), (case.name, g)
    if isinstance(case.clarke, battery.Hull) and not case.clarke.is_singleton:
        # every vertex is a limiting gradient: a sample of 256 directions finds each one
        with np.errstate(all="ignore"):
            wide = asd.clarke(_asd_f(case), n=256, seed=3)(case.point)
        for v in case.clarke.vertices:
            assert wide.contains(v.reshape(case.point.shape)) == "inside", (case.name, v)


def test_the_svd_case_is_the_sum_of_the_entries():
    """sum(U diag(s) V^T) is sum(X): its gradient is all ones, which asd cannot see through
    the repeated singular value (it refuses), so the set is checked on the identity itself."""
    case = next(c for c in zoo.CASES if c.name == "SVD reassembled at a tie")
    X = case.point
    U, S, Vh = np.linalg.svd(X)
    assert np.allclose(U @ np.diag(S) @ Vh, X)
    assert case.clarke.contains(np.ones(4))
    g = asd.subgrad(lambda a: np.sum(a))(X)
    assert case.clarke.contains(g)


REFUSALS = [c for c in zoo.CASES if isinstance(c.clarke, zoo.Refusal)]


@pytest.mark.parametrize("case", REFUSALS, ids=[c.name for c in REFUSALS])
def test_refusal_cases_are_not_lipschitz_and_asd_refuses(case):
    f = _asd_f(case)
    with np.errstate(all="ignore"), pytest.raises(asd.ASDError):
        asd.subgrad(f, seed=0)(case.point)
    # not locally Lipschitz: near the point (within 1e-4, on random coordinate subspaces
    # through it, where p-norms with p < 1 lose their slope bound) a step of 1e-10 changes
    # the value by far more than 1e-10 times any constant, or the function is undefined
    o = battery.asd_ops()
    rng = np.random.default_rng(0)
    worst = 0.0
    with np.errstate(all="ignore"):
        for _ in range(200):
            d = rng.standard_normal(case.point.shape) * (rng.random(case.point.shape) < 0.5)
            y = case.point + 1e-4 * d
            z = y + 1e-10 * rng.standard_normal(case.point.shape)
            q = np.abs(np.asarray(case.f(o, z), dtype=float)
                       - np.asarray(case.f(o, y), dtype=float)) / np.linalg.norm(z - y)
            worst = max(worst, np.inf if not np.isfinite(q).all() else float(np.max(q)))
    assert worst > 1e3, case.name


def test_asd_is_never_wrong_on_the_zoo(rows):
    assert zoo.failures(rows) == []
    assert all(r.asd_ok for r in rows)


def test_zoo_exits_zero_and_writes_the_page(tmp_path, capsys, rows, monkeypatch):
    monkeypatch.setattr(zoo, "run", lambda frameworks, seed=0, progress=True: rows)
    page = tmp_path / "kink-zoo.md"
    assert audit.main(["--zoo", "--no-progress", "--write-docs", str(page)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert page.read_text(encoding="utf-8").startswith("# The kink zoo")


def _table(text: str) -> dict[str, list[str]]:
    """The page's rows by case number, as cells (the escaped pipes restored)."""
    out = {}
    for line in text.splitlines():
        if re.match(r"^\| \d+ \|", line):
            cells = [c.strip().replace("\\|", "|")
                     for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            out[cells[0]] = cells
    return out


def _versions(text: str) -> dict[str, str]:
    head = next(line for line in text.splitlines() if line.startswith("Generated by"))
    return {label: version for label, version in
            re.findall(r"(PyTorch|JAX|TensorFlow|autograd) ([^\s,]+)[,.]", head)}


def test_the_committed_page_is_a_fresh_run(rows):
    names = fw.available()
    fresh_text = zoo.markdown(rows, names)
    page_text = PAGE.read_text(encoding="utf-8")
    page, fresh = _table(page_text), _table(fresh_text)
    assert set(page) == set(fresh), "the page lists other cases: run asd audit --zoo " \
                                    "--write-docs docs/kink-zoo.md"
    installed = _versions(fresh_text)
    recorded = _versions(page_text)
    same = [fw.LABELS[n] for n in names if installed.get(fw.LABELS[n]) == recorded.get(
        fw.LABELS[n])]
    header = ["#", "case", "f", "x", "exact", "asd", *[fw.LABELS[n] for n in names]]
    for key, cells in fresh.items():
        for i, column in enumerate(header):
            if i >= 6 and column not in same:
                continue            # another version of that framework: its cells may differ
            assert page[key][i] == cells[i], (
                f"docs/kink-zoo.md row {key} column {column!r} says {page[key][i]!r}, a fresh "
                f"run {cells[i]!r}: regenerate it with asd audit --zoo --write-docs "
                "docs/kink-zoo.md")
    if len(same) == len(names):
        assert page_text.split("\n", 3)[3] == fresh_text.split("\n", 3)[3]


def test_ellipsoid_and_refusal_sets():
    std_set = next(c for c in zoo.CASES if c.name == "std of a constant vector").clarke
    assert std_set.contains([1 / np.sqrt(6), -1 / np.sqrt(6), 0.0])
    assert not std_set.contains([0.5, -0.5, 0.0])           # |g| > 1/sqrt(3)
    assert not std_set.contains([0.1, 0.1, 0.1])            # not orthogonal to (1, 1, 1)
    assert not zoo.Refusal("jump").contains(0.0)
    assert zoo.status(zoo.Refusal("jump"), float("nan")) == "not finite"
