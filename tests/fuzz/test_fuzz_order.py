"""The fuzz campaigns draw the same programs in every test order (tests/fuzz/conftest.py)."""

from __future__ import annotations

import importlib
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz import harness

DRAWS = settings(max_examples=60, derandomize=True, database=None, deadline=None)


def _drawn(strategy) -> list:
    """The examples a derandomized test of ``strategy`` sees, in order."""
    seen = []

    @DRAWS
    @given(strategy)
    def record(example):
        seen.append(repr(example))

    record()
    return seen


def test_draws_do_not_depend_on_the_modules_imported_before(tmp_path, monkeypatch):
    """Importing a project module with new constants between two runs (as an earlier test
    importing ``asd.frontends.torch`` does) leaves the drawn floats and fuzz cases as they
    were: hypothesis' pool of local constants is pinned empty while a fuzz test runs."""
    strategy = st.tuples(st.lists(st.floats(allow_nan=False), min_size=5, max_size=5),
                         harness.cases(vector=False, max_steps=2))
    before = _drawn(strategy)
    (tmp_path / "h23r_constants.py").write_text(
        "C = [" + ", ".join(f"{1.0 + k / 7:.17g}" for k in range(200)) + "]\n"
        "N = [" + ", ".join(str(10 ** 6 + 17 * k) for k in range(200)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("h23r_constants")
    try:
        assert _drawn(strategy) == before
    finally:
        sys.modules.pop("h23r_constants", None)
