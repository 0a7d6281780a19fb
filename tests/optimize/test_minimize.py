"""asd.optimize.minimize on problems with known optima, certificates, callbacks, errors.

Oracles: the known optimal values of the Lukšan–Vlček problems (CB2's recomputed from its
KKT system), a max-affine LP whose optimum is also solved by HiGHS (scipy.optimize.linprog),
and the certificate recomputed independently by asd.clarke at the same radius.
"""

import os

import numpy as np
import pytest
from scipy.optimize import linprog

import asd
from asd.errors import ArgumentError, ArgumentTypeError
from asd.optimize import problems

BY_NAME = {p.name: p for p in problems()}


@pytest.mark.parametrize("method, name", [
    ("bundle", "CB2"), ("bundle", "MAXL"), ("bundle", "LQ"), ("bundle", "chained CB3 II"),
    ("bundle", "nonsmooth Rosenbrock"), ("bundle", "max-affine LP 10x40"),
    ("sampling", "CB3"), ("sampling", "nonsmooth Rosenbrock"), ("sampling", "DEM"),
])
def test_reaches_the_known_optimum_with_a_certificate(method, name):
    p = BY_NAME[name]
    res = asd.optimize.minimize(p.f, p.x0, method=method, maxiter=1000)
    assert abs(p.gap(res.fun)) <= 1e-6, res
    assert res.stationarity.measure <= 1e-4
    assert res.stationarity.radius <= 1e-5
    assert res.success and res.nit >= 1 and res.nfev >= res.nit
    assert res.fun == pytest.approx(float(p.f(res.x)), abs=1e-12)


def test_lp_oracle_for_a_max_of_affine_pieces():
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((30, 4)), rng.standard_normal(30)
    lp = linprog(np.r_[np.zeros(4), 1.0], A_ub=np.c_[a, -np.ones(30)], b_ub=-b,
                 bounds=[(None, None)] * 5, method="highs")

    def f(x):
        return np.max(a @ x + b)

    for method in asd.optimize.METHODS:
        res = asd.optimize.minimize(f, np.zeros(4), method=method)
        assert abs(res.fun - lp.fun) <= 1e-6 * max(1.0, abs(lp.fun)), (method, res.fun, lp.fun)
        assert res.stationarity.measure <= 1e-4


def test_the_certificate_is_asd_clarke_at_its_radius():
    p = BY_NAME["MAXL"]
    res = asd.optimize.minimize(p.f, p.x0, certify_radius=1e-5)
    s = asd.clarke(p.f, radius=1e-5, seed=0)(res.x)
    assert res.stationarity.radius == 1e-5
    assert res.stationarity.measure == pytest.approx(s.stationarity.upper, abs=1e-12)
    # away from the optimum the certificate says so
    far = asd.optimize.stationarity(p.f, p.x0, 1e-6)
    assert far.measure >= 0.5


def test_callback_progress_and_stop(capsys):
    seen = []

    def callback(r):
        seen.append((r.nit, r.fun))
        return r.nit >= 3

    res = asd.optimize.minimize(BY_NAME["CB3"].f, BY_NAME["CB3"].x0, callback=callback, disp=1)
    assert [n for n, _ in seen] == [1, 2, 3]
    assert res.nit == 3 and not res.success and "callback" in res.message
    out = capsys.readouterr().out
    assert "asd.optimize.minimize" in out and out.count(" f ") == 3

    def stop(r):
        raise StopIteration

    res = asd.optimize.minimize(BY_NAME["CB3"].f, BY_NAME["CB3"].x0, method="sampling",
                                callback=stop)
    assert res.nit == 1


def test_torch_gradients_drive_the_same_methods():
    torch = pytest.importorskip("torch")
    p = BY_NAME["CB3"]
    fg = asd.optimize.torch_fg(lambda t: p.f(t, torch))
    res = asd.optimize.minimize(p.f, p.x0, method="bundle", fg=fg)
    assert abs(p.gap(res.fun)) <= 1e-6 and res.stationarity.measure <= 1e-4


def test_bad_arguments_are_refused():
    f = BY_NAME["CB3"].f
    with pytest.raises(ArgumentError, match="method must be one of"):
        asd.optimize.minimize(f, np.zeros(2), method="newton")
    with pytest.raises(ArgumentError, match="unknown options"):
        asd.optimize.minimize(f, np.zeros(2), options={"radius": 1.0})
    with pytest.raises(ArgumentError, match="x0"):
        asd.optimize.minimize(f, np.array([np.nan, 0.0]))
    with pytest.raises(ArgumentTypeError, match="fg must be"):
        asd.optimize.minimize(f, np.zeros(2), fg=3)
    with pytest.raises(ArgumentError, match="pair"):
        asd.optimize.minimize(f, np.zeros(2), fg=lambda x: 1.0)


# ----- issue 26: success only with a certificate -----

FULL = os.environ.get("ASD_CLARKE_BATTERY") is not None
TABLE = [p.name for p in problems()] if FULL else ["CB2", "MAXL", "Mifflin 1",
                                                   "nonsmooth Rosenbrock"]


@pytest.mark.parametrize("method", asd.optimize.METHODS)
@pytest.mark.parametrize("name", TABLE)
def test_success_means_the_certificate_holds(method, name):
    """On the Lukšan-Vlček table (all of it with ASD_CLARKE_BATTERY set): ``success`` is
    exactly ``stationarity.upper <= gtol``, the interval holds its bounds in order, and the
    run reaches the known optimum."""
    p = BY_NAME[name]
    res = asd.optimize.minimize(p.f, p.x0, method=method, maxiter=2000)
    st_ = res.stationarity
    assert res.success == (st_.upper <= 1e-4)
    assert 0.0 <= st_.lower <= st_.upper
    assert res.success and abs(p.gap(res.fun)) <= 1e-6, res.message


def test_bundle_converges_on_the_nonsmooth_rosenbrock_from_minus_one_one():
    """8|x0² - x1| + (1 - x0)² from (-1, 1): the bundle method used to stop at f = 3.11 with
    success=True (its convex model of a nonconvex f said stationary); its restarts on a failed
    certificate reach f* = 0, and success is the certificate's."""
    f = BY_NAME["nonsmooth Rosenbrock"].f
    res = asd.optimize.minimize(f, np.array([-1.0, 1.0]))
    assert res.fun <= 1e-8 and res.success
    assert res.stationarity.upper <= 1e-4
    stuck = asd.optimize.minimize(f, np.array([-1.0, 1.0]), maxiter=3)
    assert not stuck.success and "not certified" in stuck.message


def test_samples_is_the_certificates_direction_count():
    p = BY_NAME["MAXL"]
    res = asd.optimize.minimize(p.f, p.x0, samples=8)
    assert len(res.stationarity.sample.directions) == 8
    with pytest.raises(ArgumentError, match="samples"):
        asd.optimize.minimize(p.f, p.x0, samples=0)
