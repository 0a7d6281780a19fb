"""Ties among pooled entries are decided by float keys, in numpy.

`asd.extend.first_order_keys` gives a rule keys whose lexicographic order is the order of the
tied entries' series along the ray, so it decides all its windows in a few numpy passes. The
keys come from the entries' jets (`asd.core.jet`, float series with error bounds) where the
bounds prove that order; where the jets cannot run the exact series decides; where no series
can be computed (a transcendental cone) the keys are the first-order tangents along ``v``,
``w1``, ... (reported as ``flat``). Each must decide exactly as the exact series does wherever
first order is all there is: piecewise-linear programs, checked against the exact
lexicographic oracle.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import asd
import asd.core.ties as ties
from asd.core.jet import JetUnsupported
from asd.testing.exact import DegenerateTie
from tests.test_tie_contract import lex_oracle


def no_jets(*args, **kwargs):
    raise JetUnsupported("jets switched off by the test")


def no_series(*args, **kwargs):
    raise ties.SeriesUnavailable("series switched off by the test")


HOW = {"jets": {}, "exact series": {"node_jet": no_jets},
       "first-order keys": {"node_jet": no_jets, "node_series": no_series}}


def patched(how: str):
    """The tie service with the named paths switched off."""
    stack = [mock.patch.object(ties, name, fn) for name, fn in HOW[how].items()]
    for p in stack:
        p.start()
    return stack


def pooled(x, a, c, pool):
    """``c . pool(relu(a x))`` with ``a x`` laid out as one 4x4 image."""
    h = (a @ x).reshape(1, 1, 4, 4)
    return (pool(np.maximum(h, 0.0)).reshape(4) * c).sum()


def traced_pool(h):
    return asd.max_pool2d(h, 2)


def exact_pool(h):
    return h.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5))


def traced_rowmax(h):
    return np.max(h.reshape(4, 4), axis=1)


def exact_rowmax(h):
    return h.reshape(4, 4).max(axis=1)


@st.composite
def tied_windows(draw):
    """Forms ``a x`` all tied at x = 0, many of them dead along v (the windows of dead
    ReLUs), with a second direction w that separates them."""
    n = 3
    a = np.array(draw(st.lists(st.lists(st.integers(-1, 1), min_size=n, max_size=n),
                               min_size=16, max_size=16)), dtype=float)
    v = np.zeros(n)
    v[draw(st.integers(0, n - 1))] = 1.0
    w = np.array(draw(st.lists(st.sampled_from([-1.0, 0.5, 1.0, 2.0]), min_size=n,
                               max_size=n)))
    c = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0, 3.0]), min_size=4, max_size=4)),
                 dtype=float)
    return a, v, w, c


@pytest.mark.parametrize("how", sorted(HOW))
@pytest.mark.parametrize("pool", ["max_pool2d", "max over an axis"])
@settings(max_examples=60, deadline=None)
@given(case=tied_windows())
def test_tied_windows_decide_like_the_exact_lexicographic_oracle(how, pool, case):
    a, v, w, c = case
    traced, exact = ((traced_pool, exact_pool) if pool == "max_pool2d"
                     else (traced_rowmax, exact_rowmax))
    x = np.zeros(3)
    try:
        want = lex_oracle(lambda x: pooled(x, a, c, exact), x, v, w)
    except DegenerateTie:  # tied along v and w both: no element is singled out
        assume(False)
    stack = patched(how)
    try:
        r = asd.asd(lambda x: pooled(x, a, c, traced), directions=[v, w])(x)
    finally:
        for p in stack:
            p.stop()
    assume(r.element != "random")  # tied along v and w both: a drawn direction decided
    np.testing.assert_array_equal(np.asarray(r.subgradient), want)


def test_the_keys_decide_without_building_a_series_and_say_so():
    """Every window ties along v (dead ReLUs: v moves only x2, which the first three forms of
    each window ignore, and the fourth is x0); w decides. The jets decide as the exact series
    does, with no series built and nothing reported beyond it; where no series can be
    computed, the first-order keys decide the same element and report the fallback (flat)."""
    a = np.vstack([np.eye(3)[[0, 1, 0, 1]]] * 4)
    v, w = np.array([0.0, 0.0, 1.0]), np.array([1.0, 2.0, -1.0])
    f = lambda x: pooled(x, a, np.array([1.0, -1.0, 3.0, 1.0]), traced_pool)  # noqa: E731
    with mock.patch.object(ties, "node_jet", no_jets):
        exact = asd.asd(f, directions=[v, w])(np.zeros(3))
    with mock.patch.object(ties, "line", side_effect=AssertionError("a series was built")):
        jets = asd.asd(f, directions=[v, w])(np.zeros(3))
    with mock.patch.object(ties, "node_jet", no_jets), \
            mock.patch.object(ties, "node_series", no_series):
        keys = asd.asd(f, directions=[v, w])(np.zeros(3))
    for r in (jets, keys):
        np.testing.assert_array_equal(r.subgradient, exact.subgradient)
    assert np.any(exact.subgradient != 0)
    assert [str(d) for d in jets.decisions] == [str(d) for d in exact.decisions]
    assert [d.how for d in keys.decisions if d.primitive == "max_pool"] == ["flat"]
    assert all(d.how != "flat" for d in exact.decisions)
