"""Classic nonsmooth test problems with known optima (Lukšan & Vlček 2000, and others).

Each problem is written once against an array namespace ``xp`` (numpy by default, where asd
traces the plain numpy calls; ``torch`` for the autograd comparison), so the two gradient
sources differentiate the same program. ``f_star`` is the known optimal value; where it is
only known numerically (CB2) it is recomputed here from its optimality conditions rather
than copied from a table.

Sources: L. Lukšan and J. Vlček, *Test problems for nonsmooth unconstrained and linearly
constrained optimization*, TR 798, ICS Prague (2000): CB2, CB3, DEM, QL, LQ, Mifflin 1,
Rosen-Suzuki, MAXQ, MAXL, chained LQ, chained CB3 I and II; the nonsmooth Rosenbrock
function of Overton (``8|x1² - x2| + (1 - x1)²``); a max-affine function whose minimum is a
known LP optimum with many pieces active.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import fsolve


@dataclass(frozen=True)
class Problem:
    """A test problem: ``f(x, xp)``, start ``x0``, optimum ``f_star`` (and ``x_star``)."""

    name: str
    f: Callable = field(repr=False)
    x0: np.ndarray = field(repr=False)
    f_star: float
    x_star: np.ndarray | None = field(default=None, repr=False)
    convex: bool = True

    @property
    def n(self) -> int:
        return len(self.x0)

    def gap(self, value: float) -> float:
        """``(f - f*) / max(1, |f*|)``: the relative gap the benchmark reports."""
        return (float(value) - self.f_star) / max(1.0, abs(self.f_star))


def _mx(xp, *terms):
    out = terms[0]
    for t in terms[1:]:
        out = xp.maximum(out, t)
    return out


def cb2(x, xp=np):
    return _mx(xp, x[0] ** 2 + x[1] ** 4, (2 - x[0]) ** 2 + (2 - x[1]) ** 2,
               2 * xp.exp(x[1] - x[0]))


def cb3(x, xp=np):
    return _mx(xp, x[0] ** 4 + x[1] ** 2, (2 - x[0]) ** 2 + (2 - x[1]) ** 2,
               2 * xp.exp(x[1] - x[0]))


def dem(x, xp=np):
    return _mx(xp, 5 * x[0] + x[1], -5 * x[0] + x[1], x[0] ** 2 + x[1] ** 2 + 4 * x[1])


def ql(x, xp=np):
    s = x[0] ** 2 + x[1] ** 2
    return _mx(xp, s, s + 10 * (-4 * x[0] - x[1] + 4), s + 10 * (-x[0] - 2 * x[1] + 6))


def lq(x, xp=np):
    return _mx(xp, -x[0] - x[1], -x[0] - x[1] + x[0] ** 2 + x[1] ** 2 - 1)


def mifflin1(x, xp=np):
    return -x[0] + 20 * xp.maximum(x[0] ** 2 + x[1] ** 2 - 1, 0 * x[0])


def rosen_suzuki(x, xp=np):
    f1 = x[0] ** 2 + x[1] ** 2 + 2 * x[2] ** 2 + x[3] ** 2 - 5 * x[0] - 5 * x[1] \
        - 21 * x[2] + 7 * x[3]
    return _mx(xp, f1,
               f1 + 10 * (x[0] ** 2 + x[1] ** 2 + x[2] ** 2 + x[3] ** 2 + x[0] - x[1]
                          + x[2] - x[3] - 8),
               f1 + 10 * (x[0] ** 2 + 2 * x[1] ** 2 + x[2] ** 2 + 2 * x[3] ** 2 - x[0]
                          - x[3] - 10),
               f1 + 10 * (x[0] ** 2 + x[1] ** 2 + x[2] ** 2 + 2 * x[0] - x[1] - x[3] - 5))


def maxq(x, xp=np):
    return xp.max(x ** 2)


def maxl(x, xp=np):
    return xp.max(xp.abs(x))


def nonsmooth_rosenbrock(x, xp=np):
    return 8 * xp.abs(x[0] ** 2 - x[1]) + (1 - x[0]) ** 2


def chained_lq(x, xp=np):
    a, b = x[:-1], x[1:]
    return xp.sum(xp.maximum(-a - b, -a - b + a ** 2 + b ** 2 - 1))


def chained_cb3_1(x, xp=np):
    a, b = x[:-1], x[1:]
    return xp.sum(_mx(xp, a ** 4 + b ** 2, (2 - a) ** 2 + (2 - b) ** 2, 2 * xp.exp(b - a)))


def chained_cb3_2(x, xp=np):
    a, b = x[:-1], x[1:]
    return _mx(xp, xp.sum(a ** 4 + b ** 2), xp.sum((2 - a) ** 2 + (2 - b) ** 2),
               xp.sum(2 * xp.exp(b - a)))


def max_affine(n: int = 10, pieces: int = 40, seed: int = 0) -> Problem:
    """``max_i a_i·x + b_i`` with a known minimum: ``n + 1`` pieces active at ``x*`` whose
    gradients hold 0 strictly inside their hull (so ``x*`` is the unique minimizer and
    ``f* = level``), the other pieces at least 1 below there."""
    rng = np.random.default_rng(seed)
    x_star = np.round(rng.uniform(-2, 2, n), 3)
    level = 1.5
    active = rng.standard_normal((n, n))
    weights = rng.uniform(0.5, 1.5, n + 1)
    weights /= weights.sum()
    # a_{n} = -(Σ w_i a_i) / w_n: 0 = Σ w_i a_i with all weights positive
    last = -(weights[:n] @ active) / weights[n]
    a_act = np.vstack([active, last])
    a_rest = rng.standard_normal((pieces - n - 1, n))
    a = np.vstack([a_act, a_rest])
    b = level - a @ x_star
    b[n + 1:] -= rng.uniform(1.0, 3.0, pieces - n - 1)
    x0 = x_star + rng.uniform(-3, 3, n)

    def f(x, xp=np):
        A = a if xp is np else xp.asarray(a, dtype=x.dtype)
        B = b if xp is np else xp.asarray(b, dtype=x.dtype)
        return xp.max(A @ x + B)

    return Problem(f"max-affine LP {n}x{pieces}", f, x0, level, x_star)


def _cb2_optimum() -> tuple[np.ndarray, float]:
    """CB2's minimizer from its KKT system: the first two pieces equal, a convex combination
    of their gradients zero (the third piece is inactive there: checked)."""
    def kkt(z):
        x1, x2, lam = z
        g1 = np.array([2 * x1, 4 * x2 ** 3])
        g2 = np.array([-2 * (2 - x1), -2 * (2 - x2)])
        p1, p2 = x1 ** 2 + x2 ** 4, (2 - x1) ** 2 + (2 - x2) ** 2
        return [p1 - p2, *(lam * g1 + (1 - lam) * g2)]

    z = fsolve(kkt, [1.1, 0.9, 0.5], xtol=1e-12)
    x = z[:2]
    assert 0 < z[2] < 1 and 2 * np.exp(x[1] - x[0]) < cb2(x) - 0.1, "not CB2's optimum"
    return x, float(cb2(x))


def problems() -> list[Problem]:
    """The benchmark set, in the order of the table in docs/optimize.md."""
    x_cb2, f_cb2 = _cb2_optimum()
    n20 = np.arange(1, 21, dtype=float)
    q0 = np.where(n20 <= 10, n20, -n20)
    n10 = 10
    return [
        Problem("CB2", cb2, np.array([1.0, -0.1]), f_cb2, x_cb2),
        Problem("CB3", cb3, np.array([2.0, 2.0]), 2.0, np.array([1.0, 1.0])),
        Problem("DEM", dem, np.array([1.0, 1.0]), -3.0, np.array([0.0, -3.0])),
        Problem("QL", ql, np.array([-1.0, 5.0]), 7.2, np.array([1.2, 2.4])),
        Problem("LQ", lq, np.array([-0.5, -0.5]), -np.sqrt(2.0), np.full(2, np.sqrt(0.5))),
        Problem("Mifflin 1", mifflin1, np.array([0.8, 0.6]), -1.0, np.array([1.0, 0.0])),
        Problem("Rosen-Suzuki", rosen_suzuki, np.zeros(4), -44.0,
                np.array([0.0, 1.0, 2.0, -1.0])),
        Problem("MAXQ", maxq, q0, 0.0, np.zeros(20)),
        Problem("MAXL", maxl, q0 / 20, 0.0, np.zeros(20)),
        Problem("nonsmooth Rosenbrock", nonsmooth_rosenbrock, np.array([-1.2, 1.0]), 0.0,
                np.ones(2), convex=False),
        Problem("chained LQ", chained_lq, np.full(n10, -0.5), -(n10 - 1) * np.sqrt(2.0),
                np.full(n10, np.sqrt(0.5))),
        Problem("chained CB3 I", chained_cb3_1, np.full(n10, 2.0), 2.0 * (n10 - 1),
                np.ones(n10)),
        Problem("chained CB3 II", chained_cb3_2, np.full(n10, 2.0), 2.0 * (n10 - 1),
                np.ones(n10)),
        max_affine(),
    ]
