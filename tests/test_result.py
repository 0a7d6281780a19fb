"""asd.asd and value_and_subgrad(full=True): the ASDResult of one sweep.

Checked exactly against the oracle on random programs with planted ties (value, limiting
gradient, Dini derivative), and on small tables for the ties each primitive reports.
"""

from functools import partial

import numpy as np
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

import asd
from asd.result import Tie
from asd.testing.exact import (
    DegenerateTie,
    as_fractions,
    directional_derivative,
    limiting_gradient,
)
from tests.programs import assert_exact, programs, run, run_exact, tied_entries


@settings(max_examples=150, deadline=None)
@given(programs())
def test_result_matches_the_exact_oracle(case):
    program, x, v = case
    f = partial(run, program)
    r = asd.asd(f, direction=v)(x)
    assert_exact(r.value, run_exact(program, x), "value")
    assert_exact(r.dini, directional_derivative(f, x, v), "dini")
    assert np.array_equal(r.direction, v)
    assert bool(r.ties) == (tied_entries(program, x) > 0)
    assert all(t.count > 0 for t in r.ties)
    assert not r.smooth or not r.degenerate
    try:
        _, expected = limiting_gradient(f, x, v)
    except DegenerateTie:
        reject()
    assert_exact(r.subgradient, expected, "subgradient")
    # the Dini derivative along v is the limiting gradient applied to v
    assert_exact(np.sum(as_fractions(r.subgradient) * as_fractions(v)), r.dini, "<g, v>")


@settings(max_examples=40, deadline=None)
@given(programs())
def test_full_value_and_subgrad_is_the_same_sweep(case):
    program, x, v = case
    f = partial(run, program)
    r = asd.value_and_subgrad(f, direction=v, full=True)(x)
    value, g = asd.value_and_subgrad(f, direction=v)(x)
    assert isinstance(r, asd.ASDResult)
    assert r.value == value and np.array_equal(r.subgradient, g)
    other = asd.asd(f, direction=v)(x)
    assert r.dini == other.dini and r.ties == other.ties and r.degenerate == other.degenerate


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, -1.0]), min_size=1, max_size=8), st.data())
def test_relu_tie_count_is_the_number_of_zero_entries(entries, data):
    x = np.array(entries)
    v = np.array(data.draw(st.lists(st.sampled_from([1.0, -1.0, 2.0]), min_size=x.size,
                                    max_size=x.size)))
    r = asd.asd(lambda y: asd.relu(y).sum(), direction=v)(x)
    zeros = int(np.count_nonzero(x == 0))
    assert r.ties == ([Tie(1, "relu", zeros)] if zeros else [])
    assert_exact(r.subgradient, ((x > 0) | ((x == 0) & (v > 0))).astype(float), "relu")


CASES = [
    # (name, f, x, v, ties as (primitive, count), degenerate as (primitive, count))
    ("abs", lambda x: asd.abs(x).sum(), [0.0, 2.0, 0.0], [1.0, 1.0, -1.0],
     [("abs", 2)], []),
    ("maximum", lambda x: asd.maximum(x[:2], x[1:]).sum(), [1.0, 1.0, 1.0],
     [1.0, 2.0, 0.5], [("maximum", 2)], []),
    ("broadcast maximum", lambda x: asd.maximum(x[:, None], x[None, :]).sum(),
     [0.0, 1.0], [1.0, -1.0], [("maximum", 2)], []),
    ("minimum off kinks", lambda x: asd.minimum(x, 3 * x).sum(), [1.0, -2.0],
     [1.0, 1.0], [], []),
    ("where, degenerate", lambda x: np.where(x > 0, x, 0.0).sum(), [0.0, 1.0, 0.0],
     [0.0, 1.0, 1.0], [("where", 2)], [("where", 1)]),
    ("paper's identity", lambda x: asd.relu(x) - asd.relu(-x), 0.0, -1.0,
     [("relu", 1), ("relu", 1)], []),
]


@pytest.mark.parametrize(("name", "f", "x", "v", "ties", "degenerate"), CASES,
                         ids=[c[0] for c in CASES])
def test_ties_reported_per_primitive(name, f, x, v, ties, degenerate):
    r = asd.asd(f, direction=np.asarray(v))(np.asarray(x))
    assert [(t.primitive, t.count) for t in r.ties] == ties
    assert [(t.primitive, t.count) for t in r.degenerate] == degenerate
    assert r.smooth == (not ties)
    assert f"{ties[0][0]}" in str(r) if ties else "ties        none" in str(r)


def test_structured_arguments_and_random_direction():
    r = asd.asd(lambda a, b: asd.maximum(a["p"], b).sum(), argnums=(0, 1), seed=1)(
        {"p": np.zeros(2)}, np.zeros(2))
    (ga, gb), (va, vb) = r.subgradient, r.direction
    assert set(ga) == {"p"} and ga["p"].shape == (2,) and gb.shape == (2,)
    assert np.isclose(r.dini, np.sum(ga["p"] * va["p"]) + np.sum(gb * vb))
    assert np.isclose(np.sum(va["p"] ** 2) + np.sum(vb ** 2), 1.0)


def test_constant_output():
    r = asd.asd(lambda x: 2.0)(np.ones(2))
    assert r.value == 2.0 and r.subgradient.tolist() == [0.0, 0.0] and r.dini == 0.0
    assert r.ties == [] and r.smooth


def test_vector_output_points_to_jacobian():
    with pytest.raises(asd.ShapeError, match="jacobian"):
        asd.asd(asd.relu)(np.zeros(2))
