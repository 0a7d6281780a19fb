"""Jets (`asd.core.jet`): float series along the ray with rigorous error bounds.

A jet must enclose the exact series (the Fraction one of `asd.core.series`, computed from the
same float constants) coefficient by coefficient, never claim a sign, a zero or a constant
the exact series does not have, and the tie service must decide with jets exactly as with the
exact series alone (same element, same reports), evaluating nothing on object arrays where
the jets settle every question (the CNN of issue 24: dead pooling windows).
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction
from functools import partial
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import asd
import asd.core.ties as ties
from asd.core.jet import HI, LO, Jet, JetUnsupported, basis, jet_sign
from asd.core.series import Series, UnprovenSign
from asd.core.sweep import Trace, missing_cone
from tests.programs import IMPLEMENTATIONS, Program, apply, programs, run

ORDER = 4


# ----- the exact series of the same program, for comparison -----

def coefficient(entry, monomial: tuple[int, ...]):
    """The exact coefficient of ``ε₁^k₁ ε₂^k₂ …`` in an entry of an exact (nested) series."""
    for k in reversed(monomial):  # the last direction is the outer series
        if isinstance(entry, Series):
            entry = entry.coefficient(k)
        elif k:
            return Fraction(0)
    return entry.coefficient(0) if isinstance(entry, Series) else Fraction(entry)


def monomials(b) -> list[tuple[int, ...]]:
    return [tuple(int(p) for p in np.unravel_index(f, (b.order + 1,) * b.levels)[::-1])
            for f in range(b.size)]


def assert_encloses(jet: Jet, exact, where: str) -> None:
    """Every coefficient of ``exact`` within ``jet``'s bound; every sign, zero and constant
    the jet claims true of ``exact``."""
    exact = np.broadcast_to(np.asarray(exact, dtype=object), jet.shape)
    sign, sure = jet_sign(jet)
    mono = monomials(jet.basis)
    for idx in np.ndindex(jet.shape):
        e = exact[idx]
        coeffs = [coefficient(e, m) for m in mono]
        for f, true in enumerate(coeffs):
            c = jet.c[(f,) + idx] if f < jet.c.shape[0] else 0.0
            bound = jet.e[(f,) + idx] if f < jet.c.shape[0] else 0.0
            assert bound >= 0
            assert math.isinf(bound) or abs(Fraction(c) - true) <= Fraction(bound), (
                f"{where}{idx}: coefficient {mono[f]} is {true}, the jet says {c} ± {bound}")
        if sure[idx]:
            leading = next((t for t in coeffs if t), 0)
            want = (leading > 0) - (leading < 0)
            assert int(sign[idx]) == want, f"{where}{idx}: sign {sign[idx]} != {want}"
            if want == 0:  # a proven zero: nothing past the order either
                assert not isinstance(e, Series) or e.exact, f"{where}{idx}: cut zero"
        if not jet.cut[idx]:
            assert not isinstance(e, Series) or _exact(e), f"{where}{idx}: not cut, inexact"
        if jet.still[idx]:
            assert all(t == 0 for t in coeffs[1:]), f"{where}{idx}: still, yet it moves"


def _exact(e) -> bool:
    return e.exact and all(_exact(c) for c in e.coeffs if isinstance(c, Series))


def evaluate_both(program: Program, jet: Jet, exact) -> list[tuple[str, object, object]]:
    """The program's values on jets and on exact series, op by op, as far as both run."""
    out = [("input", jet, exact)]
    jets, exacts = [jet], [exact]
    for k, op in enumerate(program.ops, start=1):
        try:
            exacts.append(apply(op, exacts))
        except (UnprovenSign, ArithmeticError, TypeError):
            break
        try:
            jets.append(apply(op, jets))
        except JetUnsupported:
            break
        if isinstance(jets[-1], Jet):
            out.append((f"%{k} {op.name}", jets[-1], exacts[-1]))
        else:  # a value that does not depend on the input
            jets[-1] = Jet.constant(jets[-1], jet.basis)
    return out


POLYNOMIAL = tuple(sorted(set(IMPLEMENTATIONS) - {"hard_sigmoid", "proj_simplex"}))


@st.composite
def perturbed(draw, case):
    """A random program on its kinks, the point and direction as drawn (dyadic: planted
    ties), or moved by random floats (bounds then carry rounding)."""
    program, x, v = case
    if draw(st.booleans()):
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        x = x + rng.standard_normal(np.shape(x)) * draw(st.sampled_from([1e-3, 0.3]))
        v = v * rng.uniform(0.5, 2.0, np.shape(v))
    return program, np.asarray(x, float), np.asarray(v, float)


@pytest.mark.parametrize("precise", [False, True])
@settings(max_examples=300, deadline=None)
@given(case=programs(names=POLYNOMIAL).flatmap(perturbed))
def test_jets_enclose_the_exact_series(case, precise):
    program, x, v = case
    jet = Jet.line(x, [v], basis(ORDER, 1, precise))
    exact = ties.line(x, [v], ORDER)
    for where, j, e in evaluate_both(program, jet, exact):
        assert_encloses(j, e, where)


@settings(max_examples=150, deadline=None)
@given(case=programs(names=POLYNOMIAL).flatmap(perturbed), seed=st.integers(0, 2 ** 32 - 1))
def test_nested_jets_enclose_the_nested_series(case, seed):
    program, x, v = case
    w = np.random.default_rng(seed).integers(-2, 3, np.shape(x)) / 2.0
    jet = Jet.line(x, [v, w], basis(2, 2))
    exact = ties.line(x, [v, w], 2)
    for where, j, e in evaluate_both(program, jet, exact):
        assert_encloses(j, e, where)


@settings(max_examples=150, deadline=None)
@given(case=programs(names=POLYNOMIAL).flatmap(perturbed), seed=st.integers(0, 2 ** 32 - 1))
def test_still_entries_are_constant_along_further_directions(case, seed):
    """``still`` on a jet along ``v`` is a claim about every further direction: checked
    against the exact series along ``x + ε₁v + ε₂w``."""
    program, x, v = case
    w = np.random.default_rng(seed).integers(-2, 3, np.shape(x)) / 2.0
    jets = evaluate_both(program, Jet.line(x, [v]), ties.line(x, [v, w], ORDER))
    for where, j, e in jets:
        e = np.broadcast_to(np.asarray(e, dtype=object), j.shape)
        for idx in np.ndindex(j.shape):
            if not j.still[idx]:
                continue
            nested = [coefficient(e[idx], (k1, k2)) for k1 in range(3) for k2 in range(3)]
            assert not any(nested[1:]), f"{where}{idx}: still, yet it moves along w"


def test_a_tie_along_v_selects_a_branch_that_is_not_still():
    """``where(x > d, x, d)`` with ``d = relu(x - 1)`` (dead: 0 along every direction) at
    ``x = 0``, ``v = 0``: along ``v`` the comparison is an equality and picks ``d``, but
    along ``w = 1`` it picks ``x``, which moves: the result is not still."""
    x, v, w = np.zeros(1), np.zeros(1), np.ones(1)

    def f(a):
        d = np.maximum(a - 1.0, 0.0)
        return np.where(a > d, a, d)

    d = np.maximum(Jet.line(x, [v]) - 1.0, 0.0)
    assert d.still.all()
    out = f(Jet.line(x, [v]))
    assert not out.still.any()
    assert coefficient(f(ties.line(x, [v, w], ORDER))[0], (0, 1)) == 1


VECTOR, MATRIX = np.array([0.5, 2.0]), np.array([[0.5, 2.0], [1.0, 3.0]])


@pytest.mark.parametrize(("spec", "other", "first"), [
    ("a,b->ab", VECTOR, True), ("a,b->ba", VECTOR, False), ("a,ab->ab", MATRIX, True),
    ("ab,b->a", MATRIX, False)])
def test_a_contraction_with_a_factor_zero_only_along_v_is_not_still(spec, other, first):
    """F50: ``s = soft_threshold(x + 1, 1)`` at ``x = 0`` along ``v = 0`` is 0 along ``v``
    (its kink holds) but grows along ``w = 1``; a contraction with ``s`` as a factor is 0
    along ``v`` too, yet not still (it was claimed still, and a max over its entries was
    decided 'equal'). A dead factor (``relu(x - 1)``: 0 along every direction) keeps it
    still."""
    x, v, w = np.zeros(2), np.zeros(2), np.ones(2)

    def contract(factor):
        return np.einsum(spec, factor, other) if first else np.einsum(spec, other, factor)

    s = asd.soft_threshold(Jet.line(x, [v]) + 1.0, 1.0)
    assert not s.top() >= 0 and not s.still.any()
    out = contract(s)
    assert not out.still.any()
    moving = contract(asd.soft_threshold(ties.line(x, [v, w], ORDER) + 1.0, 1.0))
    assert all(coefficient(e, (0, 1)) != 0 for e in np.ravel(moving))
    dead = contract(np.maximum(Jet.line(x, [v]) - 1.0, 0.0))
    assert dead.still.all()


def test_f50_the_max_of_a_tensordot_with_a_tie_moving_along_w():
    """The campaign's program: the max of ``tensordot(soft_threshold(x + c), x, 0)`` with
    every entry tied at 0 along ``v``, separated along ``w``; its exact Jacobian along
    ``[v, w]`` (``np.outer`` computes the same products through a broadcast multiply)."""
    c = np.array((1.0, -1.5))
    x, dirs = np.array([0.0, 0.5]), [np.array([0.0, 1.0]), np.array([0.25, -0.5])]

    def through(product):
        return lambda a: a + np.amax(product(asd.soft_threshold(a + c, 1.0), a))

    want = np.array([[1.5, 0.0], [0.5, 1.0]])
    for product in (lambda s, a: np.tensordot(s, a, 0), np.outer,
                    lambda s, a: np.einsum("a,b->ab", s, a)):
        np.testing.assert_array_equal(asd.jacobian(through(product), directions=dirs)(x), want)


def sweep_trace(f, x, **kwargs) -> Trace:
    """The `Trace` of one sweep of ``f`` at ``x``."""
    traces = []
    real = Trace.__init__

    def keep(self, *args, **kw):
        real(self, *args, **kw)
        traces.append(self)

    with mock.patch.object(Trace, "__init__", keep):
        asd.value_and_subgrad(f, **kwargs)(x)
    return traces[-1]


_W = np.random.default_rng(7).standard_normal((4, 3))
CONES = {  # the library's own implementations of the common layers, run on jets
    "conv2d stride groups padding": (lambda x: asd.numpy.sum(asd.conv2d(
        x, np.full((4, 1, 2, 2), 0.5), stride=2, groups=2, padding=1)), (1, 2, 5, 5)),
    "conv1d": (lambda x: asd.numpy.sum(asd.conv1d(x, _W[:2, None], padding=2)), (2, 1, 7)),
    "avg_pool2d": (lambda x: asd.numpy.sum(asd.avg_pool2d(x, 2)), (1, 2, 4, 4)),
    "max_pool2d padded": (lambda x: asd.numpy.sum(asd.max_pool2d(asd.relu(x), 3, 2, 1)),
                          (1, 2, 5, 5)),
    "max over an axis": (lambda x: asd.numpy.sum(np.max(np.maximum(x, 0), axis=1)), (3, 4)),
    "dense relu": (lambda x: asd.numpy.sum(asd.relu(x @ _W + 1.0)), (2, 4)),
    "einsum": (lambda x: asd.numpy.sum(np.einsum("ij,jk->ik", x, _W)), (2, 4)),
    "stack concatenate transpose": (lambda x: asd.numpy.sum(
        np.concatenate([x, x.T.T * 2.0]) + np.stack([x, x])[0].sum()), (2, 3)),
    "clip where abs": (lambda x: asd.numpy.sum(
        np.where(x > 0.1, np.clip(x, -0.5, 0.5), np.abs(x))), (3, 3)),
    "mean cumsum product": (lambda x: asd.numpy.mean(np.cumsum(x, axis=0) * x), (3, 3)),
    "indexing": (lambda x: asd.numpy.sum(x[[0, 2], 1:] * x[::-1][[1, 1], :-1]), (3, 3)),
    "division powers": (lambda x: asd.numpy.sum(x / 4.0 - x / 3.0 + np.square(x) + x ** 3),
                        (3,)),
}


@pytest.mark.parametrize("name", list(CONES))
def test_library_layers_run_on_jets(name):
    """Every node of these programs runs on jets (no exact series needed for their ties),
    enclosing the exact series of the same node."""
    f, shape = CONES[name]
    x = np.random.default_rng(3).standard_normal(shape)
    trace = sweep_trace(f, x, seed=0)
    for k, node in enumerate(trace.nodes):
        if node.prim is None:
            continue
        jet = ties.node_jet(trace, k)
        if isinstance(jet, Jet):  # (a comparison's result is a `JetMask`)
            assert_encloses(jet, ties.node_series(trace, k, 1, ORDER), f"%{k} {node.name}")


# ----- the tie service: jets decide exactly as the exact series -----

def no_jets(*args, **kwargs):
    raise JetUnsupported("jets switched off by the test")


def report(result) -> tuple:
    grad = result.subgradient
    grads = list(grad) if isinstance(grad, list | tuple) else [grad]
    decisions = sorted(str(d) for d in result.decisions)
    return (np.asarray(result.value), grads, np.asarray(result.dini),
            [str(t) for t in result.ties], decisions, [str(t) for t in result.degenerate])


def exact_series_alone():
    """The tie service with its float filters off: no jets, no constant pieces read from
    the sweep."""
    return mock.patch.multiple(ties, node_jet=no_jets, selected_constants=lambda *a: None)


def both_ways(f, x, **kwargs) -> tuple:
    """``f``'s full result with the tie service's float filters and with the exact series
    alone."""
    jets = report(asd.value_and_subgrad(f, full=True, **kwargs)(x))
    with exact_series_alone():
        exact = report(asd.value_and_subgrad(f, full=True, **kwargs)(x))
    return jets, exact


def assert_same(jets, exact) -> None:
    np.testing.assert_array_equal(jets[0], exact[0])
    for a, b in zip(jets[1], exact[1], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(jets[2], exact[2])
    assert jets[3:] == exact[3:]


@settings(max_examples=300, deadline=None)
@given(case=programs(), seed=st.integers(0, 2 ** 32 - 1))
def test_decisions_equal_the_exact_series_on_random_programs(case, seed):
    """Planted ties (zeros, equal entries, dead relus, maxima and pools of equal entries),
    decided along ``v`` and a dyadic ``w``: the same element, ties and decisions."""
    program, x, v = case
    w = np.random.default_rng(seed).integers(-4, 5, np.shape(x)) / 4.0
    assume(np.any(w))
    jets, exact = both_ways(partial(run, program), x, directions=[v, w])
    assert_same(jets, exact)


@settings(max_examples=300, deadline=None)
@given(case=programs(), seed=st.integers(0, 2 ** 32 - 1))
def test_selected_constants_are_constant_along_the_lexicographic_ray(case, seed):
    """Entries whose rule took a constant piece (`selected_constants`, read from the sweep's
    maps: dead relus, clipped entries) have the exact nested series of a constant, their
    value, along ``[v, w, ...]``."""
    program, x, v = case
    w = np.random.default_rng(seed).integers(-4, 5, np.shape(x)) / 4.0
    trace = sweep_trace(partial(run, program), x, directions=[v, w])
    for k, node in enumerate(trace.nodes):
        constant = ties.selected_constants(trace, k)
        if constant is None or not np.any(constant):
            continue
        constant = np.broadcast_to(np.asarray(constant), node.shape)
        try:
            series = ties.node_series(trace, k, 1 + trace.lex.levels, 8)
        except ties.SeriesUnavailable:
            continue
        values = np.broadcast_to(np.asarray(trace.values[k], dtype=float), node.shape)
        for idx in np.ndindex(node.shape):
            if not constant[idx]:
                continue
            mono = [(a, b, c) for a in range(3) for b in range(3) for c in range(3)]
            coeffs = [coefficient(series[idx], m) for m in mono]
            assert coeffs[0] == Fraction(values[idx]) and not any(coeffs[1:]), (
                f"%{k} {node.name}{idx}: a selected constant that moves")


# ----- cost: the CNN of issue 24, and a long chain of series ties -----

@pytest.fixture
def exact_entries(monkeypatch):
    """Counts the entries the tie service evaluates on exact series (object arrays)."""
    counted = []
    real = ties._evaluate_cone

    def counting(trace, k, memo, *args, **kwargs):
        counted.append(sum(math.prod(trace.nodes[j].shape)
                           for j in missing_cone(trace.nodes, k, memo)))
        return real(trace, k, memo, *args, **kwargs)

    monkeypatch.setattr(ties, "_evaluate_cone", counting)
    return counted


def cnn(batch: int = 8, seed: int = 0, zero_weights: bool = False):
    """``Conv2d(1, 3, 3, padding=1) -> ReLU -> MaxPool2d(2) -> Linear`` at a random init:
    many pooling windows hold only dead relus (equal zeros, zero tangents)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 1, 6, 6))
    y = rng.standard_normal((batch, 10))
    params = [rng.standard_normal((3, 1, 3, 3)) / 3, rng.standard_normal(3) * 0.1,
              rng.standard_normal((27, 10)) / 5, np.zeros(10)]
    if zero_weights:  # every relu on its kink
        params[0], params[1] = params[0] * 0, params[1] * 0

    def loss(p):
        h = asd.conv2d(x, p[0], padding=1) + p[1].reshape(1, -1, 1, 1)
        h = asd.max_pool2d(np.maximum(h, 0.0), 2)
        d = h.reshape(batch, -1) @ p[2] + p[3] - y
        return (d * d).sum() * (0.5 / batch)

    return loss, params


FILTERS = {
    "constant pieces by index": {},
    "constant pieces as keys": {"index_decided": lambda *a: None},
    "jets": {"index_decided": lambda *a: None, "selected_constants": lambda *a: None},
}
"""The float filters that decide pools of dead relus, each with the ones before it off:
the rule keeps the first of entries on constant pieces unasked (`index_decided`); their
values rank them (`first_order_keys`); their jets do (the cone re-run on float series)."""


@pytest.mark.parametrize("how", list(FILTERS))
@pytest.mark.parametrize("zero_weights", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cnn_dead_windows_evaluate_nothing_on_exact_series(seed, zero_weights, how,
                                                           exact_entries):
    """The CNN of issue 24 (random init: dead pooling windows; zero weights: every relu
    tied), with every filter: nothing evaluated on object arrays, and the element, ties and
    decisions of the exact series alone."""
    import asd.core.ordering as ordering

    loss, params = cnn(seed=seed, zero_weights=zero_weights)
    with contextlib.ExitStack() as stack:
        for name, fn in FILTERS[how].items():
            stack.enter_context(mock.patch.object(ordering if name == "index_decided" else ties,
                                                  name, fn))
        result = asd.value_and_subgrad(loss, seed=seed, full=True)(params)
    assert sum(exact_entries) == 0
    assert any("max_pool" in str(t) for t in result.ties)  # tied windows were met
    exact_entries.clear()
    with exact_series_alone():
        exact = report(asd.value_and_subgrad(loss, seed=seed, full=True)(params))
    assert sum(exact_entries) > 0  # the exact series alone does evaluate the cone
    assert_same(report(result), exact)


def series_chain(blocks: int):
    """``y <- relu(y + s) - relu(-(y + s))``, ``s = x0² + x1²``: at 0 every relu ties with a
    zero tangent and only the series (``δ²|v|²``) decides."""
    def f(x):
        s = x[0] * x[0] + x[1] * x[1]
        y = s * 0.0
        for _ in range(blocks):
            h = y + s
            y = asd.relu(h) - asd.relu(-h)
        return y + x[0] + 2.0 * x[1]
    return f


def test_series_chain_evaluates_every_node_on_jets_once(monkeypatch, exact_entries):
    """Memoized per sweep: the jets' work grows with the chain, not with its square."""
    calls = []
    real = ties._jet_of
    monkeypatch.setattr(ties, "_jet_of", lambda *a: calls.append(a[0]) or real(*a))
    counts = []
    for blocks in (50, 100, 200):
        calls.clear()
        f = series_chain(blocks)
        result = asd.value_and_subgrad(f, seed=0, full=True)(np.zeros(2))
        np.testing.assert_array_equal(result.subgradient, [1.0, 2.0])
        assert sum(d.count for d in result.decisions if d.how == "series") == 2 * blocks
        counts.append(len(calls))
        assert len(calls) == len(set(map(id, calls)))  # no node twice
    assert counts[2] - counts[1] == 2 * (counts[1] - counts[0])
    assert sum(exact_entries) == 0


# ----- what the jets hand back to the exact series -----

def test_values_jets_cannot_multiply_exactly_go_to_the_exact_series():
    """``relu(x * 1e-200 * 1e-200)`` at 0: the jets' floats would underflow, so the constant
    is refused and the exact series decides: the ray's side, not a rounded zero."""
    def f(x):
        return asd.relu(x[0] * 1e-200 * 1e-200 - x[1] * 1e-200 * 1e-200)

    x, v = np.zeros(2), np.array([1.0, 1.0 - 2 ** -40])
    jets, exact = both_ways(f, x, direction=v)
    assert_same(jets, exact)
    assert any("series" in d for d in jets[4])


def test_transcendental_cones_go_to_the_exact_series():
    """``relu(exp(x) - 1 - x)`` at 0: a jet has no exp, the exact series expands it (δ²/2)."""
    def f(x):
        return asd.relu(np.exp(x) - 1.0 - x) - asd.relu(x * x * 0.5)

    jets, exact = both_ways(f, np.array(0.0), direction=np.array(1.0))
    assert_same(jets, exact)


def test_uncertain_comparisons_make_their_entries_uncertain():
    """A comparison the bounds cannot settle selects nothing: the entries it chooses get an
    unknown bound (and decide nothing), the others keep theirs."""
    b = basis(ORDER, 1)
    rounded = Jet(np.array([[0.0, -1.0], [0.0, 1.0]]), np.array([[1e-17, 0.0], [0.0, 0.0]]),
                  np.zeros(2, bool), np.zeros(2, bool), b)
    out = np.maximum(rounded, 0.0)
    assert np.isinf(out.e[:, 0]).all()
    assert out.c[0, 1] == 0.0 and out.e[0, 1] == 0.0 and out.still[1]
    sign, sure = jet_sign(out)
    assert not sure[0] and sure[1] and sign[1] == 0
    # what reads an uncertain entry is uncertain; a zero weight on it reads nothing
    for unknown in (out.sum(), np.cumsum(out)[1], (out * 2.0)[0], out @ np.array([1.0, 1.0]),
                    np.mean(out)):
        assert np.isinf(unknown.e[0]) and not jet_sign(unknown)[1]
    known = out @ np.array([0.0, 1.0])  # exactly 0, though not proven 0 to every order:
    assert known.c[0] == 0.0 and known.e[0] == 0.0 and known.cut  # an unknown term reads 0


def test_range_guard():
    """Values a float product could not hold exactly become bounds, never wrong numbers."""
    j = Jet.line(np.array([1e-300, 1e300, 2.0]), [np.array([1.0, 1.0, 1.0])])
    assert j.c[0, 0] == 0.0 and j.e[0, 0] >= 1e-300
    assert j.c[0, 1] == 0.0 and np.isinf(j.e[0, 1])
    assert j.c[0, 2] == 2.0 and j.e[0, 2] == 0.0
    assert LO < 1e-100 and HI > 1e100
    with pytest.raises(JetUnsupported):
        j * 1e-300


def test_a_jet_is_never_read_as_plain_floats():
    j = Jet.line(np.zeros(3), [np.ones(3)])
    with pytest.raises(JetUnsupported):
        np.asarray(j)
    with pytest.raises(JetUnsupported):
        bool(j[0] > 0)
    with pytest.raises(JetUnsupported):
        np.exp(j)


def test_contractions_of_dyadic_values_are_exact():
    """A product whose terms lie on a common power-of-two grid is exact in floats: precise
    jets prove it (bound 0), so equal dyadic entries compare equal without the exact series;
    plain ones bound the rounding."""
    a = np.array([[0.5, -0.25, 3.0], [1.0, 1.0, 1.0]])
    x = np.array([0.75, 2.0, -1.5])
    for precise, exact in ((True, True), (False, False)):
        j = Jet.line(x, [np.array([1.0, 0.0, 0.5])], basis(ORDER, 1, precise))
        out = a @ j
        assert (not out.e.any()) == exact
        assert_encloses(out, a @ ties.line(x, [np.array([1.0, 0.0, 0.5])], ORDER), "a @ x")


def test_operators_and_rearrangements_follow_numpy():
    rng = np.random.default_rng(4)
    x, t = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    j, s = Jet.line(x, [t]), ties.line(x, [t], ORDER)
    for fn in (lambda a: a.transpose(2, 0, 1), lambda a: np.moveaxis(a, 0, -1),
               lambda a: a.reshape(6, 4)[::2, [3, 0]], lambda a: np.flip(a, 1),
               lambda a: np.concatenate([a, a[:1] * 2.0]), lambda a: np.stack([a, -a], 1),
               lambda a: np.pad(a, [(0, 0), (1, 0), (0, 2)]), lambda a: np.max(a, axis=(0, 2)),
               lambda a: np.min(a, axis=1, keepdims=True), lambda a: np.clip(a, -0.5, 0.5),
               lambda a: np.where(a > 0.1, a, a * 0.5), lambda a: np.abs(a).sum(axis=-1),
               lambda a: np.tensordot(a, x, axes=([1, 2], [1, 2])), lambda a: a ** 3,
               lambda a: np.dot(a, x[0].T), lambda a: np.mean(a, axis=0) / 3.0,
               lambda a: np.einsum("ijk,ljk->il", a, a), lambda a: np.take(a, [5, 1, 5]),
               lambda a: np.cumsum(a, axis=1), lambda a: np.cumsum(a)):
        assert_encloses(fn(j), fn(s), "op")
