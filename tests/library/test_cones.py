"""Exponential and power cones: projections and limiting Jacobians at every boundary piece.

For each piece of each cone (interiors, the smooth region, the curved boundaries of the cone
and of its polar, the exponential cone's face ``s = 0`` and the region that projects onto it,
the edges where the face meets the curved surface, the power cone's plane ``z = 0`` and its
edges, the apexes) and several directions ``d``, ``asd.jacobian(proj, direction=d)(x)`` must
equal ``lim J P(x + δd)``. The oracle is `asd.testing.check_rule` with references written
independently below in mpmath (the root of each projection found by bisection to the working
precision), so the one-sided quotients are taken at 80 digits. Where the smooth region meets
an edge of the exponential cone's face the Jacobian converges like ``1/log(1/δ)``, too slowly
for any fixed δ: there the test checks convergence at δ = 1e-30, 1e-300 and 1e-3000. Every
Jacobian is symmetric with eigenvalues in [0, 1]. diffcp (when installed) agrees at points
clear of every boundary.
"""

from __future__ import annotations

import zlib

import mpmath
import numpy as np
import pytest

import asd
from asd.testing import check_rule
from asd.testing.precise import to_mpf

P = asd.projections


# ----- independent references in mpmath -----

def _mp_vec(x):
    return [to_mpf(v) for v in np.asarray(x).ravel()]


def _out(values, like):
    like = np.asarray(like)
    if like.dtype != object:
        return np.array([float(v) for v in values])
    out = np.empty(3, dtype=object)
    out[:] = list(values)
    return out


def _bisect(f, lo, hi):
    """``f(lo) < 0 < f(hi)``: a root to the working precision."""
    for _ in range(mpmath.mp.prec + 20):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _expand(f, x, step, sign):
    """Move ``x`` by doubling steps until ``sign * f(x) > 0``."""
    while sign * f(x) <= 0:
        x, step = x + step, 2 * step
    return x


def extra_digits(proj):
    """Run ``proj`` 40 digits above the caller's precision: its root variables lose up to
    ``log10(1/δ)`` digits where a coordinate is of order δ."""
    def run(v):
        with mpmath.workdps(mpmath.mp.dps + 40):
            return proj(v)
    return run


@extra_digits
def mp_exp_cone(v):
    """Projection onto the exponential cone, by Friberg's root function in ``ε`` or ``η``."""
    r, s, t = _mp_vec(v)
    e = mpmath.e
    if (s > 0 and s * mpmath.exp(r / s) <= t) or (s == 0 and r <= 0 and t >= 0):
        return _out([r, s, t], v)
    if (r > 0 and r * mpmath.exp(s / r) <= -e * t) or (r == 0 and s <= 0 and t <= 0):
        return _out([r * 0, r * 0, r * 0], v)
    if r <= 0 and s <= 0:
        return _out([r, 0 * s, max(t, 0 * t)], v)

    def h(rho):
        return ((rho - 1) * r + s) * mpmath.exp(rho) - (r - rho * s) * mpmath.exp(-rho) - (
            rho * rho - rho + 1) * t

    if s <= 0:  # then r > 0: ρ = 1 + (e^le - s)/r, h increasing in le
        def f(le):
            return h(1 + (mpmath.exp(le) - s) / r)
        le = _bisect(f, _expand(f, mpmath.mpf(0), -1, -1), _expand(f, mpmath.mpf(0), 1, 1))
        rho = 1 + (mpmath.exp(le) - s) / r
    else:  # ρ = (r - e^le)/s, h decreasing in le (η = e^le < (r² - rs + s²)/r if r > 0)
        def f(le):
            return -h((r - mpmath.exp(le)) / s)
        hi = mpmath.log((r * r - r * s + s * s) / r) if r > 0 else _expand(
            f, mpmath.mpf(0), 1, 1)
        le = _bisect(f, _expand(f, hi - 1, -1, -1), hi)
        rho = (r - mpmath.exp(le)) / s
    y = ((rho - 1) * r + s) / (rho * rho - rho + 1)
    return _out([y * rho, y, y * mpmath.exp(rho)], v)


def mp_exp_cone_dual(v):
    neg = mp_exp_cone(-np.asarray(v))
    return _out([a + b for a, b in zip(_mp_vec(v), _mp_vec(neg))], v)


def mp_power_cone(alpha):
    @extra_digits
    def proj(v):
        x, y, z = _mp_vec(v)
        a = mpmath.mpf(alpha)
        if x >= 0 and y >= 0 and x**a * y**(1 - a) >= abs(z):
            return _out([x, y, z], v)
        if x <= 0 and y <= 0 and (-x / a)**a * (-y / (1 - a))**(1 - a) >= abs(z):
            return _out([0 * x] * 3, v)
        if z == 0:
            return _out([max(x, 0 * x), max(y, 0 * y), 0 * z], v)
        w = abs(z)

        def xy(r):
            g = r * (w - r)
            return (x + mpmath.sqrt(x * x + 4 * a * g)) / 2, (
                y + mpmath.sqrt(y * y + 4 * (1 - a) * g)) / 2

        def f(r):
            X, Y = xy(r)
            return r - X**a * Y**(1 - a)

        r = _bisect(f, 0 * w, w)
        X, Y = xy(r)
        return _out([X, Y, mpmath.sign(z) * r], v)
    return proj


def mp_power_cone_dual(alpha):
    primal = mp_power_cone(alpha)

    def proj(v):
        neg = primal(-np.asarray(v))
        return _out([a + b for a, b in zip(_mp_vec(v), _mp_vec(neg))], v)
    return proj


# ----- the pieces -----

def _dirs(seed, k=2, avoid=None):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < k:
        d = rng.standard_normal(3)
        if avoid is None or avoid(d):
            out.append(d)
    return out


def assert_projection_jacobian(J):
    J = np.asarray(J).reshape(3, 3)
    assert np.allclose(J, J.T, atol=1e-9), "the limiting Jacobian is not symmetric"
    eig = np.linalg.eigvalsh((J + J.T) / 2)
    assert eig.min() >= -1e-9 and eig.max() <= 1 + 1e-9, f"eigenvalues {eig} outside [0, 1]"


def _pow(alpha):
    return lambda x: P.power_cone(x, alpha)


def _pow_dual(alpha):
    return lambda x: P.power_cone_dual(x, alpha)


EXP_CASES = [  # (id, point, which directions)
    ("interior", [1.0, 2.0, 10.0], None),
    ("polar interior", [2.0, -1.0, -10.0], None),
    ("smooth, r and s > 0", [1.0, 1.0, 1.0], None),
    ("smooth, r < 0 < s", [-1.0, 2.0, -0.5], None),
    ("smooth, s < 0 < r", [1.0, -0.5, 0.5], None),
    ("curved boundary", [0.0, 1.0, 1.0], None),
    ("polar's curved boundary", [1.0, 1.0, -1.0], None),
    ("face region", [-1.0, -1.0, 2.0], None),
    ("edge region", [-1.0, -2.0, -1.0], None),
    ("face s = 0", [-1.0, 0.0, 2.0], None),
    ("face region, t = 0", [-1.0, -1.0, 0.0], None),
    ("r = 0 below the face", [0.0, -1.0, 2.0], lambda d: d[0] < 0),
    ("polar's face", [0.0, -1.0, -2.0], None),
    ("s = 0, t < 0", [-1.0, 0.0, -1.0], None),
    ("face edge (r, 0, 0)", [-1.0, 0.0, 0.0], None),
    ("polar face edge (0, s, 0)", [0.0, -1.0, 0.0], None),
    ("s = 0, r > 0", [1.0, 0.0, -0.25], None),
    ("apex", [0.0, 0.0, 0.0], None),
    # the edges (0, 0, t): only the pieces with fast convergence (see the test below)
    ("cone edge (0, 0, 1)", [0.0, 0.0, 1.0], lambda d: d[1] > 0 or d[0] < 0),
    ("polar edge (0, 0, -1)", [0.0, 0.0, -1.0], lambda d: d[0] > 0 or d[1] < 0),
]


@pytest.mark.parametrize("case", EXP_CASES, ids=[c[0] for c in EXP_CASES])
def test_exp_cone_at_its_pieces(case):
    name, x, avoid = case
    x = np.array(x)
    dirs = _dirs(zlib.crc32(name.encode()), avoid=avoid)
    report = check_rule(P.exp_cone, x, directions=dirs, reference=mp_exp_cone, exact=False,
                        name=name, rtol=1e-8)
    assert report.checks["jacobian"] == len(dirs)
    for d in dirs:
        assert_projection_jacobian(asd.jacobian(P.exp_cone, direction=d)(x))


@pytest.mark.parametrize("x", [[1.0, 2.0, 10.0], [-1.0, 1.0, 1.0], [-1.0, -1.0, 1.0],
                               [0.0, 1.0, 1.0], [1.0, 0.0, 2.0], [0.0, 0.0, 0.0]],
                         ids=str)
def test_exp_cone_dual(x):
    x = np.array(x)
    dirs = _dirs(3)
    check_rule(P.exp_cone_dual, x, directions=dirs, reference=mp_exp_cone_dual, exact=False,
               rtol=1e-8)
    for d in dirs:
        assert_projection_jacobian(asd.jacobian(P.exp_cone_dual, direction=d)(x))


def _mp_jacobian(ref, x, d, delta: str, dps: int):
    """Forward differences of ``ref`` at ``x + δd`` at ``dps`` digits (step δ·10^-20)."""
    with mpmath.workdps(dps):
        delta = mpmath.mpf(delta)
        base = np.array([to_mpf(a) + delta * to_mpf(b) for a, b in zip(x, d)], dtype=object)
        f0 = np.array(_mp_vec(ref(base)), dtype=object)
        h = delta * mpmath.mpf("1e-20")
        cols = []
        for i in range(3):
            step = base.copy()
            step[i] = step[i] + h
            cols.append((np.array(_mp_vec(ref(step)), dtype=object) - f0) / h)
        return np.array([[float(c[j]) for c in cols] for j in range(3)])


@pytest.mark.parametrize("x, dirs", [([0.0, 0.0, 1.0], [[1.0, -1.0, 0.25]]),
                                     ([0.0, 0.0, 1.0], [[1.0, 0.0, 0.25], [0.0, -1.0, 0.0]]),
                                     ([0.0, 0.0, -1.0], [[-1.0, 1.0, 0.25]])], ids=str)
def test_exp_cone_slow_edges_converge(x, dirs):
    """Where the smooth region meets the edges (0, 0, ±1) its Jacobian tends to asd's answer
    only like 1/log(1/δ): the distance at δ = 1e-30, 1e-60, 1e-120 must fall like that.
    (Along (1, 0, 0.25) the tie s = 0 persists and the second direction decides; the
    limit along the first is the same matrix.)"""
    x, d = np.array(x), np.array(dirs[0])
    J = asd.jacobian(P.exp_cone, directions=[np.array(w) for w in dirs])(x)
    errors = []
    for k in (30, 60, 120):
        Jk = _mp_jacobian(mp_exp_cone, x, d, f"1e-{k}", 60 + k)
        errors.append(float(np.max(np.abs(Jk - J))))
    assert max(e * k for e, k in zip(errors, (30, 60, 120))) < 1.0, errors
    assert errors[2] < errors[0] / 2.5, errors
    assert_projection_jacobian(J)


def test_exp_cone_below_the_face_along_r_positive():
    """At (0, s < 0, t > 0), rays with r > 0 enter the smooth region where ρ ≈ -s/r: the
    projection is (0, 0, t) up to terms of order e^(-1/δ) (below any float, and below any
    fixed-precision oracle too), so the quotient is that of (0, 0, t): J = diag(0, 0, 1)."""
    x = np.array([0.0, -1.0, 2.0])
    for d in _dirs(11, avoid=lambda d: d[0] > 0):
        np.testing.assert_array_equal(P.exp_cone(x + 1e-3 * d), [0.0, 0.0, 2.0 + 1e-3 * d[2]])
        np.testing.assert_array_equal(asd.jacobian(P.exp_cone, direction=d)(x),
                                      np.diag([0.0, 0.0, 1.0]))


POW_CASES = [  # (id, alpha, point)
    ("interior", 0.3, [1.0, 2.0, 0.5]),
    ("polar interior", 0.7, [-1.0, -2.0, 0.3]),
    ("smooth", 0.3, [1.0, 1.0, 2.0]),
    ("smooth, mixed signs", 0.7, [-1.0, 2.0, 1.0]),
    ("smooth, z < 0", 0.5, [1.0, -1.0, -1.0]),
    ("curved boundary", 0.5, [1.0, 4.0, 2.0]),
    ("curved boundary, z < 0", 0.25, [16.0, 1.0, -2.0]),
    ("polar's curved boundary", 0.5, [-1.0, -1.0, 2.0]),
    ("plane z = 0, alpha < 1/2", 0.3, [1.0, -1.0, 0.0]),
    ("plane z = 0, alpha = 1/2", 0.5, [1.0, -1.0, 0.0]),
    ("plane z = 0, alpha > 1/2", 0.7, [1.0, -1.0, 0.0]),
    ("plane z = 0, other side", 0.3, [-1.0, 2.0, 0.0]),
    ("cone edge (0, y, 0)", 0.3, [0.0, 1.0, 0.0]),
    ("cone edge (x, 0, 0)", 0.7, [2.0, 0.0, 0.0]),
    ("polar edge (0, y, 0)", 0.3, [0.0, -1.0, 0.0]),
    ("polar edge (x, 0, 0)", 0.7, [-1.0, 0.0, 0.0]),
    ("on the z axis", 0.5, [0.0, 0.0, 1.0]),
    ("apex", 0.3, [0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("case", POW_CASES, ids=[c[0] for c in POW_CASES])
def test_power_cone_at_its_pieces(case):
    name, alpha, x = case
    x = np.array(x)
    dirs = _dirs(zlib.crc32(name.encode()))
    report = check_rule(_pow(alpha), x, directions=dirs, reference=mp_power_cone(alpha),
                        exact=False, name=name, rtol=1e-8)
    assert report.checks["jacobian"] == len(dirs)
    for d in dirs:
        assert_projection_jacobian(asd.jacobian(_pow(alpha), direction=d)(x))


@pytest.mark.parametrize("alpha, x", [(0.3, [1.0, 2.0, 0.5]), (0.5, [-1.0, -1.0, 2.0]),
                                      (0.7, [1.0, -1.0, 0.0]), (0.5, [0.0, 0.0, 0.0])],
                         ids=str)
def test_power_cone_dual(alpha, x):
    x = np.array(x)
    dirs = _dirs(5)
    check_rule(_pow_dual(alpha), x, directions=dirs, reference=mp_power_cone_dual(alpha),
               exact=False, rtol=1e-8)


def test_cone_errors():
    with pytest.raises(asd.ASDError, match="alpha"):
        P.power_cone(np.ones(3), 1.5)
    with pytest.raises(asd.ASDError, match="3-vector"):
        P.exp_cone(np.ones(4))


# ----- diffcp, where installed: agreement where the projection is differentiable -----

@pytest.mark.parametrize("x", [[1.0, 1.0, 1.0], [-1.0, 2.0, -0.5], [1.0, -0.5, 0.5],
                               [1.0, 2.0, 10.0], [-1.0, -1.0, 2.0]], ids=str)
def test_exp_cone_agrees_with_diffcp_off_the_boundaries(x):
    diffcp = pytest.importorskip("diffcp")
    from diffcp import _diffcp
    x = np.array(x)
    cones = diffcp.cones.parse_cone_dict_cpp([("ep", 1)])
    for dual, proj in ((False, P.exp_cone), (True, P.exp_cone_dual)):
        np.testing.assert_allclose(proj(x), diffcp.cones.pi(x, [("ep", 1)], dual), atol=1e-7)
        theirs = np.asarray(_diffcp.dprojection_dense(x, cones, dual))
        np.testing.assert_allclose(asd.jacobian(proj, seed=0)(x), theirs, atol=1e-6)


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.7])
def test_power_cone_value_near_the_plane(alpha):
    """Where y < 0 and z is tiny the projection's y-root cancels (y + √(y² + g))/2 unless it
    is computed as g / (2(√(y² + g) - y)); it made P_z = 1e-62 instead of z/3 at α = 1/2.
    Every coordinate to rounding of |v| there."""
    for z in (1e-7, -1e-12):
        v = np.array([1.0, -1.0, z])
        want = np.array([float(e) for e in mp_power_cone(alpha)(v.astype(object))])
        got = P.power_cone(v, alpha)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
