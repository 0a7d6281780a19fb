"""Regression tests of the issue-23 fixes of helper h28s: ``jnp.linalg.det`` imported as asd's
``det`` primitive (F23, JAX part), ... Every expected number is an exact oracle: Fraction
difference quotients along the ray, extrapolated exactly (det is a polynomial)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import asd

jax = pytest.importorskip("jax")
jnp = jax.numpy


@pytest.fixture(autouse=True)
def _x64():
    """float64 JAX arrays for these tests only (the exact oracles compare to 1e-12); a
    global switch would change the dtypes of other test files' JAX programs."""
    with jax.enable_x64(True):
        yield


# ----- F23 (JAX part): jnp.linalg.det is asd's det, the cofactor matrix at singular A -----

def _det_fraction(a: list[list[Fraction]]) -> Fraction:
    """The determinant by exact Gaussian elimination over the rationals."""
    m = [row[:] for row in a]
    n, sign, out = len(m), 1, Fraction(1)
    for c in range(n):
        pivot = next((r for r in range(c, n) if m[r][c] != 0), None)
        if pivot is None:
            return Fraction(0)
        if pivot != c:
            m[c], m[pivot], sign = m[pivot], m[c], -sign
        out *= m[c][c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    return sign * out


def _exact_slope(A: np.ndarray, V: np.ndarray) -> Fraction:
    """``d/dt det(A + t V)`` at 0: the quotient ``(det(A + tV) - det(A)) / t`` is a
    polynomial of degree n - 1 in t, so its values at t = 1..n (exact Fractions) give its
    value at 0 by Lagrange extrapolation, exactly."""
    n = A.shape[-1]
    fa = [[Fraction(float(x)) for x in row] for row in A]
    fv = [[Fraction(float(x)) for x in row] for row in V]
    base = _det_fraction(fa)
    ts = [Fraction(k) for k in range(1, n + 1)]
    qs = [(_det_fraction([[a + t * v for a, v in zip(ra, rv, strict=True)]
                          for ra, rv in zip(fa, fv, strict=True)]) - base) / t for t in ts]
    out = Fraction(0)
    for i, (ti, qi) in enumerate(zip(ts, qs, strict=True)):
        weight = Fraction(1)
        for j, tj in enumerate(ts):
            if j != i:
                weight *= (0 - tj) / (ti - tj)
        out += weight * qi
    return out


def _exact_gradient(A: np.ndarray) -> np.ndarray:
    """The gradient of det at A, entry (i, j) the exact slope along the unit matrix E_ij."""
    n = A.shape[-1]
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            E = np.zeros((n, n))
            E[i, j] = 1.0
            out[i, j] = float(_exact_slope(A, E))
    return out


RANK1_4 = np.outer([1.0, 2.0, -1.0, 0.5], [2.0, -1.0, 1.0, 3.0])
RANK3_4 = np.array([[1.0, 2.0, 0.0, 0.0], [2.0, 4.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.5],
                    [0.0, 0.0, -2.0, 3.0]])
SINGULAR = [
    pytest.param(np.zeros((1, 1)), id="1x1-zero"),
    pytest.param(np.array([[1.0, 2.0], [2.0, 4.0]]), id="2x2-rank1"),
    pytest.param(np.outer([1.0, -2.0, 0.5], [3.0, 1.0, -1.0]), id="3x3-rank1"),
    pytest.param(RANK1_4, id="4x4-rank1"),
    pytest.param(RANK3_4, id="4x4-rank3"),
    pytest.param(np.zeros((5, 5)), id="5x5-zero"),
]


@pytest.mark.parametrize("A", SINGULAR)
def test_f23_jax_det_gradient_is_the_cofactor_matrix_at_singular_matrices(A):
    """Before the fix, JAX's det (1x1 and n >= 4: slogdet's sign * exp(log|det|)) was
    refused with NonFiniteError (log 0) at every singular matrix; the gradient of the
    polynomial is the cofactor matrix, 0 where the rank is below n - 1."""
    expected = _exact_gradient(A)
    got = np.asarray(asd.jax.subgrad(jnp.linalg.det)(jnp.asarray(A)))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    through = jax.grad(lambda a: asd.jax.function(jnp.linalg.det)(a))(jnp.asarray(A))
    np.testing.assert_allclose(np.asarray(through), expected, rtol=1e-12, atol=1e-12)


def test_f23_jax_det_directional_derivative_along_a_ray_is_exact():
    """The one-sided slope along a direction V at a rank-3 4x4 matrix: asd's <G, V> against
    the Fraction quotients along the ray."""
    V = np.array([[0.5, -1.0, 2.0, 0.25], [1.0, 0.0, -0.5, 1.5], [-2.0, 1.0, 0.0, 0.5],
                  [0.75, -0.25, 1.0, -1.0]])
    got = asd.jax.value_and_subgrad(jnp.linalg.det, direction=jnp.asarray(V))(
        jnp.asarray(RANK3_4))[1]
    assert np.sum(np.asarray(got) * V) == pytest.approx(float(_exact_slope(RANK3_4, V)),
                                                        rel=1e-12, abs=1e-12)


def test_f23_jax_det_batched_stack_of_matrices():
    """``jnp.linalg.det`` of a stack (a leading batch axis): each matrix's cofactor matrix."""
    B = np.stack([RANK1_4, RANK3_4, np.eye(4) * 2.0])
    got = np.asarray(asd.jax.subgrad(lambda b: jnp.linalg.det(b).sum())(jnp.asarray(B)))
    for k in range(B.shape[0]):
        np.testing.assert_allclose(got[k], _exact_gradient(B[k]), rtol=1e-12, atol=1e-12)


def test_f23_jax_det_value_unchanged():
    """The imported det's value is numpy's det (JAX's is the same within rounding)."""
    A = np.array([[2.0, 1.0, 0.0, 1.0], [1.0, 3.0, 1.0, 0.0], [0.0, 1.0, 4.0, 1.0],
                  [1.0, 0.0, 1.0, 5.0]])
    value = asd.jax.value_and_subgrad(jnp.linalg.det)(jnp.asarray(A))[0]
    assert float(value) == pytest.approx(float(_det_fraction(
        [[Fraction(x) for x in row] for row in A])), rel=1e-13)


def test_f23_a_user_function_named_det_is_not_taken_for_jnp_det():
    """The mapping keys on JAX's own ``_det`` (name and source file), not on a name alone:
    a user's custom_jvp function called ``_det`` keeps its body (here 2 x, not det)."""

    @jax.custom_jvp
    def _det(a):
        return 2.0 * a.sum()

    _det.defjvp(lambda p, t: (_det(p[0]), 2.0 * t[0].sum()))
    got = asd.jax.subgrad(_det)(jnp.ones((1, 1)))
    np.testing.assert_array_equal(np.asarray(got), [[2.0]])


# ----- F36: a where tied between a median over a singleton axis and its operand -----

def _f36(x):
    """F36's reproducer: ``m = median(a, axis=0)`` of a ``(1, 2)`` array ``a`` is ``a``'s
    row, so ``where(m * [1, 3] >= a, ...)`` ties one quantity with itself at entry 0."""
    a = np.arctan(np.positive(np.abs(x))) + np.array(((0.75, 1.0),))
    m = np.median(a, axis=0) * np.array((1.0, 3.0))
    return np.median(np.where(m >= a, m, a) + np.array(((0.0, -2.25),)), axis=None)


def _f36_mp(t):
    """The same program along the ray ``x = t (1, 1)``, in mpmath, for the quotient."""
    import mpmath

    a = [mpmath.atan(abs(t)) + mpmath.mpf(0.75), mpmath.atan(abs(t)) + 1]
    m = [a[0], 3 * a[1]]
    w = [m[i] if m[i] >= a[i] else a[i] for i in range(2)]
    return (w[0] + w[1] - mpmath.mpf(2.25)) / 2


def test_f36_singleton_median_tie_is_proven_equal_without_a_series(monkeypatch):
    """Before the fix each call climbed the exact series to order 64 four times (~1.3 s a
    call, the where decided 'flat'); the median over a length-1 axis is now its operand, so
    the tie is one quantity, 'equal' with no series built (counted, not timed)."""
    import mpmath

    from asd.core import ties

    built = []
    _decide = ties._decide_by_series
    monkeypatch.setattr(ties, "_decide_by_series",
                        lambda *a, **k: built.append(1) or _decide(*a, **k))
    x, v = np.zeros((1, 2)), np.ones((1, 2))
    result = asd.asd(_f36, direction=v)(x)
    assert built == []
    where = [d for d in result.decisions if d.primitive == "where"]
    assert [d.how for d in where] == ["equal"]
    with mpmath.workdps(60):
        t = mpmath.mpf(10) ** -30
        slope = (_f36_mp(t) - _f36_mp(mpmath.mpf(0))) / t
    assert float(np.sum(result.subgradient * v)) == pytest.approx(float(slope), rel=1e-12)
    np.testing.assert_array_equal(result.subgradient, [[0.5, 1.5]])  # the only branch: no choice


@pytest.mark.parametrize("shape, reduce, same", [
    ((1, 2), lambda a: np.median(a, axis=0), True),
    ((1, 2), lambda a: np.sum(a, axis=0, keepdims=True), True),
    ((1, 1, 2), lambda a: np.max(a, axis=1), True),
    ((2, 1), lambda a: np.median(a, axis=1), False),   # (2,) broadcasts against (2, 1) crosswise
    ((2, 2), lambda a: np.median(a, axis=0), False),   # not a singleton axis
])
def test_f36_singleton_reduction_is_its_operand_only_where_it_broadcasts_alike(shape, reduce,
                                                                                same):
    """`ties._singleton_reduction` peels a reduction to its operand only where every reduced
    axis has length 1 and the shapes agree up to leading 1s (then both broadcast to any tie's
    shape entry for entry)."""
    from asd.core.ties import _singleton_reduction

    program = asd.trace(lambda x: reduce(np.arctan(x)))(np.zeros(shape))
    k = len(program.nodes) - 1
    assert (_singleton_reduction(program.nodes, k) == k - 1) is same


# ----- F38: asd.jax of table[jnp.argmax(x)] (a dynamic_slice at JAX's wrapped index) -----

TABLE = (0.75, -2.0, 3.0, 1.0, -2.0, -0.5, -2.0, 1.0, -0.5)
SHIFT = ((1.0, 1.0, -1.0), (0.0, -1.0, 1.0), (1.0, 0.0, 0.0))


def _f38(x, pick=jnp.argmax):
    x1 = x + jnp.asarray(SHIFT)
    return jnp.sum(jnp.asarray(TABLE)[pick(x1)] * x1)


def _f38_fraction(x: list[Fraction], arg=max) -> Fraction:
    """The program on exact rationals (flat 3x3 entries; numpy's first-index tie-break)."""
    x1 = [a + Fraction(c) for a, c in zip(x, [c for row in SHIFT for c in row], strict=True)]
    i = x1.index(arg(x1))
    return Fraction(TABLE[i]) * sum(x1)


X38 = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])   # the campaign's point


X38_MIN = np.array([[0.0, 0.0, 1.0], [-1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # one least entry


@pytest.mark.parametrize("pick, arg, x0", [(jnp.argmax, max, X38), (jnp.argmin, min, X38_MIN)])
def test_f38_jax_index_by_untied_argmax_is_differentiated(pick, arg, x0):
    """Before the fix asd.jax refused any dynamic_slice at a traced start; an untied argmax
    is locally constant, so the gradient is the table entry times the sum's: checked entry
    by entry against the exact quotient along each unit direction (f is linear near x)."""
    got = np.asarray(asd.jax.subgrad(lambda x: _f38(x, pick))(jnp.asarray(x0)))
    through = np.asarray(jax.grad(lambda x: asd.jax.function(lambda y: _f38(y, pick))(x))(
        jnp.asarray(x0)))
    base = [Fraction(float(a)) for a in x0.ravel()]
    t = Fraction(1, 1024)
    expected = np.array([float((_f38_fraction([b + (t if j == i else 0) for j, b in
                                               enumerate(base)], arg)
                                - _f38_fraction(base, arg)) / t) for i in range(9)])
    np.testing.assert_array_equal(got.ravel(), expected)
    np.testing.assert_array_equal(through.ravel(), expected)


def test_f38_jax_row_of_a_matrix_at_argmax():
    """``M[jnp.argmax(y)]``: a dynamic_slice of one row (the other axis sliced whole) at an
    untied argmax reads that row; its gradient is the row's (exact: a linear function)."""
    M = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    y0 = np.array([0.0, 2.0, 1.0])
    grad = asd.jax.subgrad(lambda y: jnp.sum(jnp.asarray(M)[jnp.argmax(y)] * y))(
        jnp.asarray(y0))
    np.testing.assert_array_equal(np.asarray(grad), M[1])


def test_f38_tied_argmax_reading_different_entries_is_refused_by_name():
    """At a tie of the argmax whose positions read different table entries the function
    jumps: refused (NotLipschitzError naming the gather at argmax positions), as numpy's."""
    with pytest.raises(asd.errors.NotLipschitzError, match="argmax positions"):
        asd.jax.subgrad(lambda x: jnp.sum(jnp.asarray(TABLE)[jnp.argmax(x)] * x))(
            jnp.zeros((3, 3)))


def test_f38_other_traced_starts_stay_refused_with_advice():
    """A start that is not an argmax/argmin itself (``argmax(x) - 1``) still jumps with the
    input in ways asd does not decide: refused, naming what works."""
    with pytest.raises(asd.errors.NotLipschitzError, match=r"Index by jnp\.argmax"):
        asd.jax.subgrad(lambda x: jnp.asarray(TABLE)[jnp.argmax(x) - 1] * jnp.sum(x))(
            jnp.asarray(np.arange(9.0)))


def test_f23_jax_det_under_jit_is_refused_by_name():
    """asd's det rule runs on numpy only: a staged sweep (``jax.jit`` of
    ``asd.jax.value_and_subgrad``) meets it as JAX tracers and refuses it by name
    (StagedUnsupported, an ASDError naming det), never JAX's slogdet derivative."""
    g = jax.jit(asd.jax.value_and_subgrad(jnp.linalg.det))
    with pytest.raises(asd.errors.StagedUnsupported, match="det"):
        g(jnp.asarray(RANK1_4))


# ----- JAX campaign: the boolean lax primitives and tile, mapped (were 'unmapped') -----

Y = np.array([0.0, 0.5, -1.0, 3.0])
BOOLEAN_AND_TILE = {
    "fmax (or)": (lambda x: jnp.sum(jnp.fmax(x, jnp.asarray(Y)) * jnp.arange(1.0, 5.0)),
                  lambda x: np.sum(np.fmax(x, Y) * np.arange(1.0, 5.0))),
    "fmin (or)": (lambda x: jnp.sum(jnp.fmin(x, x[::-1]) * jnp.arange(1.0, 5.0)),
                  lambda x: np.sum(np.fmin(x, x[::-1]) * np.arange(1.0, 5.0))),
    "remainder (and)": (lambda x: jnp.sum(jnp.remainder(x + 0.25, 2.0) * jnp.arange(1.0, 5.0)),
                        lambda x: np.sum(np.remainder(x + 0.25, 2.0) * np.arange(1.0, 5.0))),
    "floor_divide (and)": (lambda x: jnp.sum(jnp.floor_divide(x + 0.25, 2.0) * x),
                           lambda x: np.sum(np.floor_divide(x + 0.25, 2.0) * x)),
    "tile": (lambda x: jnp.sum(jnp.abs(jnp.tile(x, 2)) * jnp.arange(8.0)),
             lambda x: np.sum(np.abs(np.tile(x, 2)) * np.arange(8.0))),
    "not": (lambda x: jnp.sum(jnp.where(~(x > 0), x, 2 * x)),
            lambda x: np.sum(np.where(~(x > 0), x, 2 * x))),
    "and": (lambda x: jnp.sum(jnp.where((x > 0) & (x < 1.5), x, 0.0)),
            lambda x: np.sum(np.where((x > 0) & (x < 1.5), x, 0.0))),
}


@pytest.mark.parametrize("name", list(BOOLEAN_AND_TILE))
@pytest.mark.parametrize("v", [np.array([1.0, -1.0, 2.0, 0.5]), np.array([-1.0, 1.0, -0.5, 1.0])])
def test_jax_boolean_primitives_and_tile_are_mapped(name, v):
    """JAX's ``and``/``or``/``not`` (inside jnp.fmax, remainder, floor_divide, ``~``, ``&``)
    and ``tile`` were refused as unmapped; at kinks (x = 0 = Y[0], ties of fmin) the
    one-sided slope along v is the exact quotient (dyadic values and a dyadic step: float
    arithmetic is exact on these piecewise-linear functions)."""
    fj, fn = BOOLEAN_AND_TILE[name]
    x = np.array([0.0, 1.0, -1.0, 2.0])
    got = np.asarray(asd.jax.subgrad(fj, direction=jnp.asarray(v))(jnp.asarray(x)))
    t = 2.0 ** -20
    assert float(got @ v) == (fn(x + t * v) - fn(x)) / t


# ----- F40: lax.rem with a differentiated divisor -----

@pytest.mark.parametrize("name, fj, fn", [
    ("remainder",
     lambda x: jnp.sum(jnp.remainder(x + 0.5, jnp.abs(x) + 1.0) * jnp.arange(1.0, 5.0)),
     lambda x: np.sum(np.remainder(x + 0.5, np.abs(x) + 1.0) * np.arange(1.0, 5.0))),
    ("fmod", lambda x: jnp.sum(jnp.fmod(x - 2.5, jnp.abs(x) + 1.0) * jnp.arange(1.0, 5.0)),
     lambda x: np.sum(np.fmod(x - 2.5, np.abs(x) + 1.0) * np.arange(1.0, 5.0))),
])
def test_f40_jax_rem_with_a_differentiated_divisor(name, fj, fn):
    """Before the fix lax ``rem`` refused any traced divisor (UnsupportedError); away from its
    jumps it is linear in both operands: the one-sided slope along v (through a kink of
    ``|x|`` at 0) is the exact dyadic quotient."""
    x, v = np.array([-1.0, 0.0, 0.5, 2.0]), np.array([-0.5, 1.0, -0.5, 0.25])
    got = np.asarray(asd.jax.subgrad(fj, direction=jnp.asarray(v))(jnp.asarray(x)))
    t = 2.0 ** -20
    assert float(got @ v) == (fn(x + t * v) - fn(x)) / t


def test_f40_jax_rem_jump_with_a_differentiated_divisor_is_refused():
    """At a jump (x + 3 a multiple of the divisor |x| + 1: 4 = 2 * 2 at x = 1) the
    remainder is discontinuous: refused, as numpy's ``%`` is."""
    with pytest.raises(asd.errors.NotLipschitzError):
        asd.jax.subgrad(lambda x: jnp.sum(jnp.remainder(x + 3.0, jnp.abs(x) + 1.0)))(
            jnp.asarray([1.0]))


# ----- F39: jnp.hypot imported whole (its where(max == 0) was a jump in the vjp path) -----

def _hypots(x):
    return jnp.sum(jnp.hypot(x, x)) + jnp.hypot(x[0], 2.0 * x[1])


def _hypots_np(x):
    return np.sum(np.hypot(x, x)) + np.hypot(x[0], 2.0 * x[1])


def _hypots_slope(x, v):
    """The one-sided quotient along ``v`` in mpmath (hypot is positively homogeneous of
    degree 1 at 0 entrywise, but the quotient is taken, not assumed)."""
    import mpmath

    with mpmath.workdps(60):
        t = mpmath.mpf(10) ** -30

        def f(s):
            y = [mpmath.mpf(float(a)) + s * mpmath.mpf(float(b)) for a, b in zip(x, v)]
            return (sum(mpmath.hypot(a, a) for a in y) + mpmath.hypot(y[0], 2 * y[1]))
        return float((f(t) - f(mpmath.mpf(0))) / t)


@pytest.mark.parametrize("x, v", [([0.0, 0.0], [1.0, -2.0]), ([0.0, 0.0], [-3.0, 0.5]),
                                  ([0.0, 1.5], [2.0, -1.0]), ([1.0, 0.0], [0.0, 1.0])])
def test_f39_jax_hypot_at_zero_is_the_exact_slope_eager_and_under_jit(x, v):
    """At a zero of either operand, asd.jax.subgrad (eager, and the staged sweep under
    jax.jit) gives an element whose pairing with ``v`` is the one-sided slope."""
    x, v = np.asarray(x), np.asarray(v)
    slope = _hypots_slope(x, v)
    eager = asd.jax.subgrad(_hypots, direction=v)(jnp.asarray(x))
    _, staged, undecided = jax.jit(asd.jax.value_and_subgrad(
        _hypots, direction=v, report=True))(jnp.asarray(x))
    assert float(np.dot(np.asarray(eager), v)) == pytest.approx(slope, rel=1e-13, abs=1e-15)
    assert int(undecided) == 0
    np.testing.assert_allclose(np.asarray(staged), np.asarray(eager), rtol=1e-15)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_f39_jax_function_of_hypot_at_zero_is_numpys_element(seed):
    """The drop-in's vjp path (refused before, "where(lhs == rhs, a, b) jumps") gives the
    element numpy's path gives with the same seed."""
    x = np.array([0.0, 0.0])
    got = jax.grad(asd.jax.function(_hypots, seed=seed))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), asd.subgrad(_hypots_np, seed=seed)(x),
                               rtol=1e-14)


# ----- F41: jnp.select with a traced selector (argmax over its stacked conditions) -----

def _select_jnp(x):
    return jnp.sum(jnp.select([x < 0, x < 1, x < 2], [-x, x * x, 2 * x - 1], 3.0 + 0 * x))


def _select_piece(t: Fraction) -> Fraction:
    """The same function of one entry, exactly: first true condition wins."""
    if t < 0:
        return -t
    if t < 1:
        return t * t
    if t < 2:
        return 2 * t - 1
    return Fraction(3)


def _select_slope(x, v) -> float:
    h = Fraction(1, 10**30)
    return float(sum((_select_piece(Fraction(a) + h * Fraction(b)) - _select_piece(Fraction(a)))
                     / h for a, b in zip(x, v)))


@pytest.mark.parametrize("v", [[1.0, 1.0, 1.0, -1.0], [-1.0, -1.0, -1.0, 1.0],
                               [1.0, -1.0, 0.5, 2.0]])
def test_f41_jax_select_at_its_breakpoints_is_the_exact_slope(v):
    """At every breakpoint of a continuous jnp.select (refused before: select_n with more
    than two cases and a traced selector), eagerly, under jax.jit and per example under vmap,
    the element pairs with v to the exact one-sided slope; the staged sweep decides it all."""
    x, v = np.array([0.0, 1.0, 2.0, 0.5]), np.asarray(v)
    slope = _select_slope(x, v)
    eager = asd.jax.subgrad(_select_jnp, direction=v)(jnp.asarray(x))
    _, staged, undecided = jax.jit(asd.jax.value_and_subgrad(
        _select_jnp, direction=v, report=True))(jnp.asarray(x))
    batched = jax.vmap(asd.jax.subgrad(_select_jnp, direction=v))(jnp.stack([x, x]))
    assert float(np.dot(np.asarray(eager), v)) == pytest.approx(slope, rel=1e-12, abs=1e-14)
    assert int(undecided) == 0
    np.testing.assert_array_equal(np.asarray(staged), np.asarray(eager))
    np.testing.assert_array_equal(np.asarray(batched), np.stack([eager, eager]))


def test_f41_jax_select_across_a_jump_is_refused_by_name():
    """Where the chosen cases differ at a tied condition the select jumps: refused, naming
    the where, as numpy's np.select path refuses it."""
    def jumps(x):
        return jnp.sum(jnp.select([x < 0, x < 1], [-x, x * x + 1], 5.0 + 0 * x))

    with pytest.raises(asd.errors.NotLipschitzError, match="jumps"):
        asd.jax.subgrad(jumps, direction=np.ones(2))(jnp.array([1.0, 0.3]))


@pytest.mark.parametrize("v", [[1.0, -1.0], [-1.0, 1.0]])
def test_jax_trunc_at_zero_is_constant_as_numpys(v):
    """jnp.trunc is imported as asd's trunc: its jaxpr ``where(x < 0, ceil(x), floor(x))``
    ties at 0 between ceil's jump and floor's and was refused there, though trunc is 0 near
    0. The element is numpy's path's along the same direction."""
    def fj(x):
        return jnp.sum(jnp.trunc(x * x) + x * jnp.trunc(x) + x * x * x)

    def fn(x):
        return np.sum(np.trunc(x * x) + x * np.trunc(x) + x * x * x)

    x, v = np.array([0.0, 0.5]), np.asarray(v)
    np.testing.assert_array_equal(asd.jax.subgrad(fj, direction=v)(jnp.asarray(x)),
                                  asd.subgrad(fn, direction=v)(x))
    np.testing.assert_array_equal(jax.grad(asd.jax.function(fj, seed=3))(jnp.asarray(x)),
                                  asd.subgrad(fn, seed=3)(x))


@pytest.mark.parametrize("op, lo, hi", [("floor_divide", -1.0, 1.0), ("remainder", 0.0, 1.0)])
@pytest.mark.parametrize("v", [[1.0, -1.0, 2.0, 1.0], [-1.0, 1.0, 1.0, -2.0]])
def test_f43_jax_floor_divide_and_remainder_are_numpys_where_a_clip_holds_the_jump(op, lo, hi,
                                                                                   v):
    """At integer quotients held by a saturated clip (only one side of the floor reachable:
    F33's proof) asd.jax gives numpy's path's element, eagerly and through the drop-in; JAX's
    own lowering tied its where((sign(x) != sign(y)) & (rem != 0), ...) and was refused."""
    jop, nop = getattr(jnp, op), getattr(np, op)

    def fj(x):
        return jnp.sum(jnp.clip(jop(x, -0.25), lo, hi) * x + x * x)

    def fn(x):
        return np.sum(np.clip(nop(x, -0.25), lo, hi) * x + x * x)

    x, v = np.array([1.5, 0.75, 0.5, 0.3]), np.asarray(v)
    want = asd.subgrad(fn, direction=v)(x)
    np.testing.assert_array_equal(asd.jax.subgrad(fj, direction=v)(jnp.asarray(x)), want)
    np.testing.assert_array_equal(jax.grad(asd.jax.function(fj, seed=5))(jnp.asarray(x)),
                                  asd.subgrad(fn, seed=5)(x))


@pytest.mark.parametrize("v", [1.0, -1.0, 0.5])
def test_a_singleton_peel_below_a_scalar_tie_keeps_the_ties_shape(v):
    """``maximum(s, s)`` with ``s`` a 0-d sum of ``|x[[0]]|`` (shape (1,)): the same-quantity
    peel passes the singleton reduction and the abs below it, and its mask came back with
    shape (1,), which a 0-d tie cannot take (a ShapeError found by the random-program test).
    The element is the exact one-sided slope (Fraction quotient of |t| + relu(t))."""
    def f(x):
        s = np.sum(np.abs(np.take(x, [0])))
        return np.maximum(s, s) + asd.relu(x)

    h, fv = Fraction(1, 10**20), Fraction(v)
    slope = (abs(h * fv) + max(h * fv, 0)) / h
    value, derivative = asd.directional(f)(np.array(0.0), np.array(v))
    assert value == 0.0 and derivative == float(slope)


def test_values_gathered_at_sorted_positions_sum_bit_for_bit_as_numpys():
    """``take_along_axis(x, argsort(y, axis=0))`` with a traced ``y``: the rule's positions
    came out column-major, so the gathered array did too, and numpy's sum over it rounded in
    another order (last bit; the long campaign's only 'wrong' signature). Positions are
    C-ordered as numpy's argsort returns them."""
    x0 = np.array([[-0.5, -0.5], [2.0, 0.0], [-0.5, -0.5]])

    def f(x):
        x1 = -x
        x2 = x1 + np.array(((0.0, 0.0), (-0.25, -2.0), (0.0, 0.0)))
        return np.sum(np.sin(np.take_along_axis(x2, np.argsort(x1, axis=0, stable=True),
                                                axis=0)))

    value, _ = asd.value_and_subgrad(f, direction=np.ones((3, 2)))(x0)
    assert value == f(x0)


@pytest.mark.parametrize("spelling", ["method", "function"])
def test_a_copy_keeps_numpys_memory_order_so_a_sum_rounds_as_numpys(spelling):
    """``.copy()`` of a transposed array is C-ordered in numpy, ``np.copy`` keeps the layout;
    asd's copy kept it for both, so a sum over the method's copy rounded in another order
    (last bit: the long campaign, seed 2813). Both spellings give numpy's value bit for bit."""
    def f(x):
        t = np.transpose(np.concatenate([x, x], axis=0))
        c = np.fabs(t).copy() if spelling == "method" else np.copy(np.fabs(t))
        return np.sum(np.tanh(c) + np.sum(t - t))

    x0 = np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.0]])
    value, _ = asd.value_and_subgrad(f, direction=np.ones((2, 3)))(x0)
    assert value == f(x0)
