"""Sensitivity of an LP at a degenerate vertex: one-sided derivatives, exactly.

    x*(h) = argmin -x₁ - 2x₂   subject to   x₁ <= h₁,  x₂ <= h₂,  x₁ + x₂ <= h₃

At h = (1, 1, 2) three constraints are active at the vertex (1, 1) of the plane: the vertex is
degenerate, x* is piecewise linear in h with three pieces meeting there (one per pair of
constraints), and its derivative depends on the direction. ``asd.implicit.qp`` returns, along
each direction, the Jacobian of the piece the ray enters, so its directional derivative is the
exact one-sided derivative; the script checks it against the LP re-solved exactly (vertex
enumeration in rational arithmetic) at h + δd. Where diffcp is installed, its derivative
(a least-squares blend of the pieces) is printed beside it: inside the Clarke hull, but along
every direction where the pieces differ it mispredicts how the vertex moves.

Run: python examples/lp_degenerate_vertex.py
"""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction

import numpy as np

import asd

G = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
Q = np.array([-1.0, -2.0])
H = np.array([1.0, 1.0, 2.0])


def lp(h):
    return asd.implicit.qp(np.zeros((2, 2)), Q, None, None, G, h)


def exact_lp(h: list[Fraction]) -> tuple[Fraction, Fraction]:
    """The optimal vertex, by enumerating pairs of constraints in rational arithmetic."""
    best = None
    for i, j in itertools.combinations(range(3), 2):
        (a, b), (c, d) = G[i], G[j]
        det = Fraction(a * d - b * c)
        if det == 0:
            continue
        x1 = (h[i] * Fraction(d) - Fraction(b) * h[j]) / det
        x2 = (Fraction(a) * h[j] - Fraction(c) * h[i]) / det
        if all(Fraction(G[k, 0]) * x1 + Fraction(G[k, 1]) * x2 <= h[k] for k in range(3)):
            cost = Fraction(Q[0]) * x1 + Fraction(Q[1]) * x2
            if best is None or cost < best[0]:
                best = (cost, (x1, x2))
    return best[1]


def diffcp_jacobian():
    try:
        import diffcp
        import scipy.sparse as sp
    except ImportError:
        return None
    *_, D, _ = diffcp.solve_and_derivative(sp.csc_matrix(G), H, Q, {"l": 3}, eps=1e-12)
    return np.stack([D(sp.csc_matrix((3, 2)), e, np.zeros(2))[0] for e in np.eye(3)], axis=1)


def main() -> int:
    delta = Fraction(1, 2**20)
    theirs = diffcp_jacobian()
    base = exact_lp([Fraction(v) for v in H])
    ok = True
    print("x*(h) =", lp(H), " (three active constraints)")
    print(f"  {'direction':>18}  {'asd x*′(h; d)':>18}  {'exact quotient':>18}"
          + (f"  {'diffcp J d':>18}" if theirs is not None else ""))
    for d in ([0, 0, -1], [0, 0, 1], [-1, 0, 0], [0, -1, 0], [1, 1, 0], [1, -1, 1]):
        d = np.array(d, dtype=float)
        _, got = asd.directional(lp)(H, d)
        moved = exact_lp([Fraction(v) + delta * Fraction(w) for v, w in zip(H, d)])
        want = np.array([float((m - b) / delta) for m, b in zip(moved, base)])
        ok &= bool(np.allclose(got, want, atol=1e-12))
        row = f"  {d!s:>18}  {np.round(got, 4)!s:>18}  {np.round(want, 4)!s:>18}"
        if theirs is not None:
            row += f"  {np.round(theirs @ d, 4)!s:>18}"
        print(row)
    J = asd.jacobian(lp, seed=0)(H)
    print("asd's Jacobian along a random direction (one piece's):\n", J)
    if theirs is not None:
        print("diffcp's Jacobian (a blend of the pieces):\n", np.round(theirs, 4))
    else:
        print("skipped the diffcp comparison: needs diffcp (pip install diffcp)")
    if not ok:
        print("a directional derivative disagrees with the exact quotient", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
