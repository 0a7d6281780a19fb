"""Fuzz the public API with malformed arguments, directions, argnums and functions.

Whatever goes in, what comes out is a result, an ``asd.ASDError``, or the user's own
exception raised inside the function: never a bare ``ValueError``/``TypeError``/
``IndexError`` from inside asd, which would leave the user guessing whose mistake it was.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asd
import asd.numpy as anp
from asd.core.tracing import Tracer
from asd.tree import flatten

Point = namedtuple("Point", "x y")


class UserError(Exception):
    """Raised by the user's function on purpose: it must pass through unchanged."""


class Opaque:
    """An object numpy cannot read as a number."""


# ----- leaves: good, bad and awkward -----

good_leaves = st.one_of(
    st.floats(-10, 10, allow_nan=False),
    st.sampled_from([0.0, 1.0, -1.0, 5e-324, 1e300, 3, True]),
    st.sampled_from([np.zeros(3), np.ones((2, 2)), np.arange(4.0), np.zeros(3, np.float32),
                     np.array([0.0, 0.0, 1.0]), np.arange(3), np.zeros(0), np.float32(2.0)]),
)
bad_leaves = st.sampled_from([
    np.nan, np.inf, -np.inf, np.array([np.nan, 1.0]), np.array([1.0, np.inf]),
    1 + 1j, np.array([1j, 2.0]), np.complex64(1.0),
    "1.5", "abc", b"x", {1, 2}, frozenset(), Opaque(), object(), slice(1),
    2 ** 63, -(2 ** 63) - 1, 2 ** 64, 10 ** 30, np.array([2 ** 63], dtype=np.uint64),
    np.array(["a", "b"]), np.array([object()], dtype=object), np.datetime64("2020-01-01"),
    np.array([1, "a"], dtype=object), (lambda: 1),
])
leaves = st.one_of(good_leaves, good_leaves, bad_leaves)
trees = st.recursive(
    st.one_of(leaves, st.none()),
    lambda kids: st.one_of(
        st.tuples(kids, kids), st.lists(kids, max_size=3),
        st.dictionaries(st.sampled_from("abc"), kids, max_size=2),
        st.builds(Point, kids, kids)),
    max_leaves=4)

argnums_values = st.one_of(
    st.integers(-4, 4), st.tuples(st.integers(-3, 3)), st.tuples(st.integers(-3, 3),
                                                                  st.integers(-3, 3)),
    st.sampled_from([(), [0, 1], (0, 0), "0", 0.0, None, True, (0, "a"), np.int64(0),
                     (np.int64(1),)]))
directions = st.one_of(st.none(), trees, st.sampled_from([0.0, np.nan, np.zeros(3),
                                                         np.array([1.0, 0.0, 0.0])]))
seeds = st.sampled_from([None, 0, 7, -1, "seed", 1.5, np.random.default_rng(0), [1, 2]])


# ----- the user's functions: valid and invalid bodies on the first traced leaf -----

def _raise(t):
    raise UserError("the user's own error")


BODIES = [
    lambda t: anp.sum(t),
    lambda t: anp.sum(asd.relu(t)) - anp.sum(asd.relu(-t)),
    lambda t: anp.max(t),
    lambda t: anp.sum(anp.maximum(t, 0.0) * t),
    lambda t: t,
    lambda t: (anp.sum(t), anp.sum(t)),
    lambda t: [t, {"a": t}],
    lambda t: "abc",
    lambda t: 1j,
    lambda t: anp.sum(t) * 1j,
    lambda t: None,
    lambda t: np.inf,
    lambda t: t[5],
    lambda t: t.reshape(7),
    lambda t: anp.reshape(t, (7, -1)),
    lambda t: anp.take(t, [9]),
    lambda t: anp.concatenate([t, np.ones((2, 2, 2))]),
    lambda t: anp.sum(t, axis=5),
    lambda t: anp.sort(anp.ravel(t))[0],
    lambda t: anp.sum(anp.log(t)),
    lambda t: anp.sum(t ** 0.01),
    lambda t: anp.sum(anp.sqrt(t)),
    lambda t: anp.sum(t / 0.0),
    lambda t: anp.sum(t) if anp.sum(t) > 0 else -anp.sum(t),
    lambda t: float(anp.sum(t)),
    lambda t: np.array([t]).sum(),
    lambda t: len(t),
    lambda t: anp.sum(t + "a"),
    lambda t: anp.sum(t @ t),
    lambda t: anp.sum(t[..., None] * t),
    _raise,
]


def make_function(body):
    def f(*args):
        traced = [leaf for leaf in flatten(args)[0] if isinstance(leaf, Tracer)]
        return body(traced[0]) if traced else 0.0

    return f


def call_api(kind: str, f, args: tuple, argnums, direction, seed, other_args: tuple):
    if kind == "subgrad":
        return asd.subgrad(f, argnums, seed=seed, direction=direction)(*args)
    if kind == "value_and_subgrad":
        return asd.value_and_subgrad(f, argnums, seed=seed, direction=direction)(*args)
    if kind == "asd":
        return asd.asd(f, argnums, seed=seed, direction=direction)(*args)
    if kind == "directional":
        return asd.directional(f, argnums)(*args, direction)
    if kind == "jacobian":
        return asd.jacobian(f, argnums, seed=seed, direction=direction)(*args)
    if kind == "clarke":
        return asd.clarke(f, 3, seed=0, argnums=argnums)(*args)
    if kind == "trace":
        program = asd.trace(f)(*args)
        str(program)
        return program(*other_args)
    raise AssertionError(kind)


KINDS = ["subgrad", "value_and_subgrad", "asd", "directional", "jacobian", "clarke", "trace"]


def check_outcome(kind, f, args, argnums, direction, seed, other_args) -> None:
    try:
        call_api(kind, f, args, argnums, direction, seed, other_args)
    except (asd.ASDError, UserError):
        return  # an asd error or the user's own exception: what the contract allows
    except Exception as e:  # pragma: no cover - this is what the test exists to catch
        raise AssertionError(
            f"{kind} raised a raw {type(e).__name__}: {e}\n  args={args!r}\n"
            f"  argnums={argnums!r} direction={direction!r} seed={seed!r}") from e


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(KINDS), body=st.sampled_from(BODIES),
       args=st.lists(trees, min_size=0, max_size=3).map(tuple),
       argnums=st.one_of(st.just(0), argnums_values), direction=directions, seed=seeds,
       other=st.lists(trees, min_size=0, max_size=2).map(tuple))
def test_malformed_inputs_raise_asd_errors_only(kind, body, args, argnums, direction, seed,
                                                other):
    f = make_function(body)
    other_args = other if other else args
    check_outcome(kind, f, args, argnums, direction, seed, other_args)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(KINDS), body=st.sampled_from(BODIES),
       x=st.sampled_from([np.zeros(3), np.array([1.0, -1.0, 0.0]), np.ones((3, 3)), 0.0,
                          2.0, np.zeros(0), Point(0.0, np.ones(2)), [0.0, 1.0]]),
       direction=directions)
def test_every_body_on_good_arguments(kind, body, x, direction):
    """Well-formed arguments, so the failures come from the function or the direction."""
    check_outcome(kind, make_function(body), (x,), 0, direction, 0, (x,))


def test_known_raw_exceptions_of_the_issue_are_asd_errors():
    """The cases that used to escape as bare exceptions, one by one."""
    cases = [
        lambda: asd.subgrad(lambda x: x.sum(), argnums=(0, 0))(np.ones(2)),
        lambda: asd.subgrad(lambda x: x.sum())({1, 2}),
        lambda: asd.subgrad(lambda x: x * 2.0)(Opaque()),
        lambda: asd.subgrad(lambda x: x * 2.0)(2 ** 63),
        lambda: asd.subgrad(lambda x: x * 2.0, direction=0.0)(1.0),
        lambda: asd.subgrad(lambda x: x * 2.0, direction=np.nan)(1.0),
        lambda: asd.trace(lambda x: x.sum())(np.ones(3))(np.ones(4)),
        lambda: asd.subgrad(lambda x: x[5])(np.ones(3)),
        lambda: asd.subgrad(lambda x: x.reshape(4).sum())(np.ones(3)),
        lambda: asd.subgrad(lambda x: (x, x))(1.0),
        lambda: asd.subgrad(lambda x: x ** 0.01)(5e-324),
    ]
    for case in cases:
        try:
            case()
        except asd.ASDError:
            continue
        raise AssertionError("no asd error raised")


def test_clarke_of_a_function_returning_an_earlier_input():
    s = asd.clarke(lambda p: p[0], 4, seed=0)((0.0, 0.0))
    assert s.contains([1.0, 0.0])


def test_subgrad_and_jacobian_of_a_function_returning_an_earlier_input():
    assert asd.subgrad(lambda p: p[0])((0.0, 0.0)) == (1.0, 0.0)
    j = asd.jacobian(lambda p: p[0], mode="reverse")((2.0, 3.0))
    assert j == (1.0, 0.0)
