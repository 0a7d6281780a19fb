"""asd.clarke: sampled limiting gradients, hull membership, min-norm element, stationarity.

Oracles: hand-derived Clarke sets (|x|, max(x1, x2), maxima of affine pieces whose gradients
are signed basis vectors shifted, where hull membership has a closed form), the exact
limiting gradient along each direction on random programs, and single ASD sweeps.
"""

import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import asd
from asd.extend import Closure, Diagonal, Primitive
from asd.testing.exact import DegenerateTie, as_fractions, limiting_gradient
from tests.programs import V_ENTRIES, programs, run


def as_set(rows) -> set:
    return {tuple(np.ravel(r).tolist()) for r in np.asarray(rows, dtype=float)}


# ----- the Done-when cases -----

def test_abs_at_zero():
    s = asd.clarke(asd.abs, seed=0)(0.0)
    assert as_set(s.gradients) == {(-1.0,), (1.0,)}
    assert s.contains(0.0) and s.contains(-1.0) and s.contains(0.5)
    assert not s.contains(1.5) and not s.contains(-1.01)
    assert s.distance(1.5) == pytest.approx(0.5, abs=1e-12)
    assert s.distance(-3.0) == pytest.approx(2.0, abs=1e-12)
    assert s.distance(0.25) <= 1e-12
    assert s.min_norm() == 0.0
    assert s.is_stationary() and not s.is_singleton
    assert s.gradients.shape == (2,) and s.directions.shape == (64,)


def test_abs_off_the_kink_is_a_singleton():
    s = asd.clarke(asd.abs, n=10, seed=1)(-2.0)
    assert s.is_singleton and s.gradients.tolist() == [-1.0]
    assert s.counts.tolist() == [10]
    assert not s.is_stationary() and s.min_norm() == -1.0


def test_max_of_two_coordinates_min_norm_is_the_midpoint():
    s = asd.clarke(lambda x: asd.maximum(x[0], x[1]), seed=3)(np.zeros(2))
    assert as_set(s.gradients) == {(1.0, 0.0), (0.0, 1.0)}
    np.testing.assert_allclose(s.min_norm(), [0.5, 0.5], atol=1e-12)
    np.testing.assert_allclose(s.min_norm_weights(), [0.5, 0.5], atol=1e-12)
    assert s.contains([0.5, 0.5]) and not s.contains([0.0, 0.0])
    assert not s.is_stationary()


def test_one_dimensional_inputs_always_get_both_sides():
    """Antithetic directions: even n = 2 samples both one-sided slopes of a 1-D kink."""
    for seed in range(20):
        s = asd.clarke(lambda x: asd.maximum(2 * x, -3 * x), n=2, seed=seed)(0.0)
        assert as_set(s.gradients) == {(2.0,), (-3.0,)}


# ----- max of affine pieces, all active at x -----

def signed_basis(d: int) -> list[tuple[int, int]]:
    return [(j, s) for j in range(d) for s in (1, -1)]


@st.composite
def affine_maxima(draw):
    """Pieces ``a_i . x + b_i`` all active at ``x0``, ``a_i = scale * (u_i - w)``.

    The ``u_i`` are distinct signed basis vectors, so every piece is essentially active with
    a normal cone of mass >= 1/4, and ``0 in conv{a_i}`` iff ``w in conv{u_i}``. ``w`` is a
    dyadic convex combination of the ``u_i`` (inside) or an arbitrary dyadic point.
    """
    d = draw(st.integers(1, 4))
    pieces = draw(st.lists(st.sampled_from(signed_basis(d)), min_size=1, max_size=4,
                           unique=True))
    u = np.zeros((len(pieces), d))
    for i, (j, s) in enumerate(pieces):
        u[i, j] = s
    if draw(st.booleans()):
        cuts = sorted(draw(st.lists(st.integers(0, 4), min_size=len(pieces) - 1,
                                    max_size=len(pieces) - 1)))
        weights = np.diff([0, *cuts, 4]) / 4
        w = weights @ u
    else:
        w = np.array(draw(st.lists(st.sampled_from([-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0]),
                                   min_size=d, max_size=d)))
    scale = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    x0 = np.array(draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0]), min_size=d,
                                max_size=d)))
    level = draw(st.sampled_from([0.0, 1.0, -0.5]))
    a = scale * (u - w)
    b = level - a @ x0
    return a, b, x0, u, w, draw(st.integers(0, 2**32 - 1))


def in_signed_basis_hull(w: np.ndarray, u: np.ndarray) -> bool:
    """Closed form: ``w in conv{u_i}`` for distinct signed basis vectors ``u_i``."""
    signs = [set(np.sign(u[u[:, j] != 0, j]).tolist()) for j in range(u.shape[1])]
    for j, wj in enumerate(w):
        if wj != 0 and np.sign(wj) not in signs[j]:
            return False
    total = np.abs(w).sum()
    burns = any(len(s) == 2 for s in signs)  # +e_j and -e_j can absorb spare weight
    return total == 1 or (total < 1 and burns)


def max_of_pieces(a, b):
    def f(x):
        y = a @ x + b
        out = y[0]
        for i in range(1, len(b)):
            out = np.maximum(out, y[i])
        return out

    return f


@settings(max_examples=120, deadline=None)
@given(affine_maxima())
def test_max_of_affine_finds_every_piece_and_decides_zero(case):
    a, b, x0, u, w, seed = case
    s = asd.clarke(max_of_pieces(a, b), n=64, seed=seed)(x0)
    assert as_set(s.gradients) == as_set(a)
    assert s.counts.sum() == 64
    inside = in_signed_basis_hull(w, u)
    assert s.contains(np.zeros_like(x0)) == ("inside" if inside else "outside")  # exact: regular
    assert s.is_stationary() == inside
    for g in a:
        assert s.contains(g)
    z = s.min_norm()
    assert s.contains(z)
    # the min-norm point is the projection of 0: no generator lies strictly on 0's side of it
    assert np.all(a @ z >= z @ z - 1e-9)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5).flatmap(lambda d: st.lists(
    st.lists(st.integers(-4, 4).map(float), min_size=d, max_size=d), min_size=1, max_size=8)))
def test_min_norm_certificate_on_arbitrary_hulls(rows):
    """The min-norm element z is in the hull and (g - z) . z >= 0 for every generator g:
    the optimality certificate of the projection of 0, checked without any solver."""
    g = np.array(rows)
    s = asd.clarke(lambda x: x @ g[0], n=2, seed=0)(np.zeros(g.shape[1])).with_gradients(g[1:])
    assert as_set(s.gradients) == as_set(g)
    z = s.min_norm()
    assert s.contains(z)
    assert all(s.distance(row) <= 1e-9 for row in g)
    assert np.all((g - z) @ z >= -1e-9 * max(1.0, float(z @ z)))
    assert np.isclose(s.min_norm_weights() @ s.gradients, z, atol=1e-9).all()
    assert bool(s.contains(np.zeros_like(z))) == s.is_stationary(1e-7)


# ----- the shared re-sweep against the exact oracle and single sweeps -----

@settings(max_examples=150, deadline=None)
@given(programs(), st.data())
def test_sampled_gradients_are_the_limiting_gradients(case, data):
    program, x, v = case
    f = partial(run, program)
    shape = np.shape(x)
    extra = data.draw(st.lists(st.lists(st.sampled_from(V_ENTRIES), min_size=x.size,
                                        max_size=x.size), min_size=1, max_size=4))
    dirs = [v, -v] + [np.reshape(e, shape) for e in extra if any(e)]
    s = asd.clarke(f, directions=np.array(dirs))(x)
    assert s.counts.sum() == len(dirs)
    singles = as_set([np.ravel(asd.subgrad(f, direction=d)(x)) for d in dirs])
    assert as_set(np.reshape(s.gradients, (len(s), -1))) == singles
    decided = []
    for d in dirs:
        try:
            decided.append(np.ravel(limiting_gradient(f, x, d)[1]))
        except DegenerateTie:
            continue
    assume(decided)
    exact = {tuple(g) for g in as_fractions(np.reshape(s.gradients, (len(s), -1)))}
    assert {tuple(g) for g in decided} <= exact


def counting_relu():
    """A relu whose rule counts its calls, to see which rules the re-sweep re-runs."""
    calls = []
    p = Primitive("counting_relu", lambda x: np.maximum(x, 0))

    @p.defrule
    def counting_relu_rule(xs, dxs):
        (x,) = xs
        calls.append(1)
        slope = np.asarray(x > 0)
        tie = x == 0
        if tie.any():
            slope[tie] = dxs[0](tie) >= 0
        return np.maximum(x, 0), Diagonal(slope, np.shape(x))

    return p, calls


@pytest.mark.parametrize(("point", "reruns"), [([1.0, -2.0], 0), ([0.0, 3.0], 16)])
def test_only_rules_at_ties_are_rerun(point, reruns):
    tied, tied_calls = counting_relu()
    smooth, smooth_calls = counting_relu()
    s = asd.clarke(lambda x: tied(x).sum() + smooth(x + 10.0).sum(), n=16, seed=0)(
        np.array(point))
    assert len(smooth_calls) == 1
    assert len(tied_calls) == 1 + reruns
    assert len(s) == (2 if reruns else 1)


def test_one_batched_pull_through_shared_linearizations():
    """The reverse sweep pulls one cotangent row per group of directions, in one call."""
    pulls = []
    square = Primitive("counting_square", np.square)

    @square.defrule
    def counting_square_rule(xs, dxs):
        (x,) = xs

        def pull(ct):
            pulls.append(np.shape(ct))
            return 2 * x * ct

        return x * x, Closure(lambda t: 2 * x * t, pull, np.shape(x), np.shape(x))

    x = np.array([0.0, 0.0, 2.0])  # two relu ties: up to four groups of directions
    s = asd.clarke(lambda y: square(asd.relu(y) + 1.0).sum(), n=64, seed=0)(x)
    assert as_set(s.gradients) == {(a, b, 2 * 3.0) for a in (0.0, 2.0) for b in (0.0, 2.0)}
    assert pulls == [(4, 3)]


def test_structured_arguments_are_flattened():
    s = asd.clarke(lambda a, b: asd.maximum(a, b), argnums=(0, 1), seed=0)(1.0, 1.0)
    assert as_set(s.gradients) == {(1.0, 0.0), (0.0, 1.0)}
    assert s.directions.shape == (64, 2)
    assert s.contains((0.5, 0.5)) and s.contains([np.float64(0.25), 0.75])
    assert not s.contains((1.0, 1.0))
    d = asd.clarke(lambda p: asd.maximum(p["a"], p["b"]).sum(), seed=0)(
        {"a": np.zeros(1), "b": np.zeros(1)})
    assert d.contains({"a": np.array([0.5]), "b": np.array([0.5])})


def test_constant_function_has_the_zero_gradient():
    s = asd.clarke(lambda x: 3.0, n=4, seed=0)(np.ones(3))
    assert s.is_singleton and s.gradients.tolist() == [[0.0, 0.0, 0.0]] and s.is_stationary()


def test_ties_and_degenerate_ties_are_reported():
    s = asd.clarke(lambda x: np.where(x > 0, x, 0.0).sum(), n=8, seed=0)(np.zeros(2))
    assert [(t.primitive, t.count) for t in s.ties] == [("where", 2)]
    assert s.degenerate == []
    assert as_set(s.gradients) <= {(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)}


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: asd.clarke(asd.abs, n=0), ValueError),
        (lambda: asd.clarke(asd.relu, seed=0)(np.zeros(2)), asd.ShapeError),
        (lambda: asd.clarke(asd.abs, directions=[[1.0, 0.0]])(np.zeros(3)), ValueError),
        (lambda: asd.clarke(asd.abs, directions=[0.0])(0.0), ValueError),
        (lambda: asd.clarke(asd.abs, seed=0)(0.0).contains([1.0, 2.0]), ValueError),
    ],
)
def test_bad_calls_raise(call, error):
    with pytest.raises(error):
        call()


# ----- the examples run end to end -----

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str, without_matplotlib: bool = False):
    script = str(EXAMPLES / name)
    block = "sys.modules['matplotlib'] = None; " if without_matplotlib else ""
    code = (f"import runpy, sys; {block}sys.argv = [{script!r}, *{list(args)!r}]; "
            f"runpy.run_path({script!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)


def test_nonsmooth_optimization_example_stops_at_the_stationary_point():
    done = run_example("nonsmooth_optimization.py")
    assert done.returncode == 0, done.stderr
    assert "x* is Clarke stationary" in done.stdout


def test_clarke_plot_example_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot example needs matplotlib")
    done = run_example("clarke_plot.py", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    png = tmp_path / "clarke_set.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "4 limiting gradients" in done.stdout


def test_clarke_plot_example_skips_cleanly_without_matplotlib(tmp_path):
    done = run_example("clarke_plot.py", "--out", str(tmp_path), without_matplotlib=True)
    assert done.returncode == 0, done.stderr
    assert "skipped: matplotlib is not installed" in done.stdout
    assert not any(tmp_path.iterdir())


def test_a_persistently_tied_chain_costs_series_linear_in_its_length(monkeypatch):
    """Each direction keeps its exact series across the tied nodes (one view per direction):
    a chain of ties that persist along every direction evaluates each node on series a
    bounded number of times per direction, not once per later tie (quadratic)."""
    from asd.core import ties

    evaluated = []
    real = ties._evaluate_cone

    def counting(trace, k, memo, input_line, order, snap=False):
        before = len(memo)
        out = real(trace, k, memo, input_line, order, snap)
        evaluated.append(len(memo) - before)
        return out

    monkeypatch.setattr(ties, "_evaluate_cone", counting)

    def chain(n):
        def f(x):
            y = x
            for _ in range(n):
                y = y + asd.relu(y - y) - asd.relu(y - y)
            return np.sum(y)
        return f

    counts = []
    for n in (10, 20):
        evaluated.clear()
        asd.clarke(chain(n), n=4, seed=0)(np.zeros(2))
        counts.append(sum(evaluated))
    assert counts[1] <= 2.5 * counts[0], counts


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("radius", [0.0, 0.5])
def test_a_program_that_does_not_read_its_argument_gives_zeros_of_its_dtype(dtype, radius):
    """A Clarke sample of a locally constant program (a table read at a position, no traced
    path to the output) is the zero gradient in the argument's dtype, as `asd.subgrad` gives
    it and as every other sample is (the fuzz campaign, seed 2921, met float64 zeros for a
    float16 argument)."""
    x = np.zeros(2, dtype)

    def f(x):
        return np.array((-1.0, 1.0))[asd.stop_gradient(np.argmax(x + np.array((0.0, -1.0))))]

    sample = asd.clarke(f, n=4, seed=0, radius=radius, points=2 if radius else 0)(x)
    assert [g.dtype for g in sample.gradients] == [np.dtype(dtype)]
    assert not np.any(sample.gradients[0])
    assert asd.subgrad(f)(x).dtype == np.dtype(dtype)


@pytest.mark.parametrize("radius", [0.0, 0.5])
def test_a_gradient_past_the_arguments_dtype_is_refused_as_subgrad_refuses_it(radius):
    """numpy campaign seed 3013: a float16 argument whose exact gradient (1e10, computed in
    float64 where a float64 constant promoted the program) exceeds float16's range. The
    sample came back as inf in the argument's dtype; it is refused, naming the overflow, as
    `asd.subgrad` refuses it, and a float32 argument gets the numbers."""
    def f(x):
        return np.sum(np.abs(x) * np.float64(1e10))

    with pytest.raises(asd.NonFiniteError, match="beyond float16's range"):
        asd.subgrad(f)(np.zeros(2, np.float16))
    with pytest.raises(asd.NonFiniteError, match="beyond float16's range"):
        asd.clarke(f, n=8, seed=0, radius=radius)(np.zeros(2, np.float16))
    sample = asd.clarke(f, n=8, seed=0, radius=radius)(np.zeros(2, np.float32))
    assert sample.gradients.dtype == np.float32
    assert set(np.abs(sample.gradients).ravel().tolist()) == {1e10}
