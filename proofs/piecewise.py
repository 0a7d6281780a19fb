"""Certificates for ``library/piecewise.py`` (and the elementwise kinks of ``library/nn.py``).

Each primitive is written here a second time, as a branching program in the paper's model
(Algorithm 3). ``asd.certify`` proves its constraints qualified and its pieces continuous;
then the rule Algorithm 7 derives from the program must agree with the hand-written rule
on values, Dini derivatives and branch gradients at points sitting on the kinks.
"""

from __future__ import annotations

import numpy as np
from asd.library import nn, piecewise

import asd
from asd import branch, branching

from .registry import (
    DiscontinuousProof,
    OracleProof,
    ProgramProof,
    Row,
    SymbolicProof,
    compare_rules,
)

# ----- the programs -----


@branching
def relu(x):
    return x if branch(x) else 0


@branching
def absolute(x):
    return x if branch(x) else -x


@branching
def maximum(a, b):
    return a if branch(a - b) else b


@branching
def minimum(a, b):
    return a if branch(b - a) else b


@branching
def clip(x, lo, hi):
    m = x if branch(x - lo) else lo
    return m if branch(hi - m) else hi


@branching
def leaky_relu(x):
    return x if branch(x) else x / 10


@branching
def relu6(x):
    if branch(x - 6):
        return 6
    return x if branch(x) else 0


@branching
def hardtanh(x):
    if branch(x - 1):
        return 1
    return x if branch(x + 1) else -1


@branching
def hard_sigmoid(x):
    if branch(x - 3):
        return 1
    return x / 6 + 0.5 if branch(x + 3) else 0


@branching
def soft_threshold(x):
    if branch(x - 0.5):
        return x - 0.5
    return 0 if branch(x + 0.5) else x + 0.5


@branching
def hinge(x):
    return 0 if branch(x - 1) else 1 - x


@branching
def huber(x):
    if branch(x - 1):
        return x - 0.5
    return x * x / 2 if branch(x + 1) else -x - 0.5


@branching(smooth={"expm1"})
def elu(x):
    return x if branch(x) else np.expm1(x) / 2


@branching
def where_ge(lhs, rhs, a, b):
    return a if branch(lhs - rhs) else b


@branching
def where_le(lhs, rhs, a, b):
    return a if branch(rhs - lhs) else b


# ----- kink-heavy points -----

def univariate_points(breaks, seed: int) -> list:
    """Every breakpoint and random points; generic directions, then zero ones at the kinks."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.asarray(breaks, float), np.asarray(breaks, float),
                        rng.normal(0, 3, 4).round(3)])
    pts = []
    for _ in range(3):
        v = rng.choice([-1.0, 1.0], x.size) * rng.uniform(0.5, 2, x.size)
        pts.append(((x,), (v,), True))
    v = rng.normal(size=x.size)
    v[: 2 * len(breaks)] = 0.0
    pts.append(((x,), (v,), False))
    return pts


def tied_points(k: int, seed: int, n: int = 6) -> list:
    """``k`` arguments with exact ties between them (pairs, all), generic and tied directions."""
    rng = np.random.default_rng(seed)
    pts = []
    for trial in range(4):
        base = rng.integers(-2, 3, n).astype(float)
        args = [base.copy() for _ in range(k)]
        for a in args[1:]:
            move = rng.random(n) < 0.4
            a[move] += rng.integers(-2, 3, int(move.sum()))
        generic = trial < 3
        dirs = [rng.normal(size=n) for _ in range(k)]
        if not generic:
            dirs = [dirs[0].copy() for _ in range(k)]
        pts.append((tuple(args), tuple(dirs), generic))
    return pts


def _where_ok(lhs, rhs, a, b):
    return asd.where(lhs >= rhs, a, b)


def _where_lt(lhs, rhs, a, b):
    return asd.where(lhs <= rhs, a, b)


def continuous_where_points(seed: int) -> list:
    """where's pieces agree where its condition is tied: the only places it may be used."""
    pts = []
    for args, dirs, generic in tied_points(4, seed):
        lhs, rhs, a, b = args
        b = np.where(lhs == rhs, a, b)
        pts.append(((lhs, rhs, a, b), dirs, generic))
    return pts


class WhereProof(ProgramProof):
    """where(lhs >= rhs, a, b): qualified constraint, but a jump unless a == b on the tie.

    The certifier must find that jump (with a witness on lhs = rhs); the library rule must
    raise NotLipschitzError there, and agree with the derived rule where the pieces meet.
    """

    def run(self) -> Row:
        cert = self.certificate()
        kinds = {f.kind for f in cert.failures}
        row = Row(self.label, constraints=", ".join(map(str, cert.constraints)),
                  cq=cert.checks.get("CQ", "failed"))
        jump_found = kinds == {"continuity"} and all(f.witness for f in cert.failures)
        try:
            asd.subgrad(lambda x: asd.where(x >= 0, x + 1, x).sum())(np.zeros(2))
            refused = False
        except asd.NotLipschitzError:
            refused = True
        row.continuity = "jump found; refused at run time" if jump_found and refused else \
            "UNCHECKED"
        why, n = None, 0
        for program, library in zip(self.program, self.library, strict=True):
            why, m = compare_rules(program, library, self.points, self.stacked)
            n += m
            if why:
                break
        row.gradient = f"auto = rule ({n} pts)" if why is None else "MISMATCH"
        row.ok = cert.checks.get("CQ") == "proved" and jump_found and refused and why is None
        row.detail = why or ("" if row.ok else str(cert))
        return row

    def certificate(self):
        return asd.certify(self.program[0])


# ----- the table -----

P = piecewise
PROOFS = [
    ProgramProof((P.relu_p,), relu, asd.relu, univariate_points([0.0], 1)),
    ProgramProof((P.abs_p,), absolute, asd.abs, univariate_points([0.0], 2)),
    ProgramProof((P.maximum_p,), maximum, P.maximum_p, tied_points(2, 3)),
    ProgramProof((P.minimum_p,), minimum, P.minimum_p, tied_points(2, 4)),
    ProgramProof((P.clip_p,), clip, lambda x, lo, hi: asd.clip(x, lo, hi),
                 tied_points(3, 5) + tied_points(3, 6)),
    ProgramProof((P.leaky_relu_p,), leaky_relu, lambda x: asd.leaky_relu(x, 0.1),
                 univariate_points([0.0], 7)),
    ProgramProof((P.relu6_p,), relu6, asd.relu6, univariate_points([0.0, 6.0], 8)),
    ProgramProof((P.hardtanh_p,), hardtanh, asd.hardtanh, univariate_points([-1.0, 1.0], 9)),
    ProgramProof((P.hard_sigmoid_p,), hard_sigmoid, asd.hard_sigmoid,
                 univariate_points([-3.0, 3.0], 10)),
    ProgramProof((P.soft_threshold_p,), soft_threshold, lambda x: asd.soft_threshold(x, 0.5),
                 univariate_points([-0.5, 0.5], 11)),
    ProgramProof((P.hinge_p,), hinge, asd.hinge, univariate_points([1.0], 12)),
    ProgramProof((P.huber_p,), huber, asd.huber, univariate_points([-1.0, 1.0], 13)),
    ProgramProof((nn.elu_p,), elu, lambda x: asd.elu(x, 0.5), univariate_points([0.0], 14)),
    WhereProof((P.where_cmp_p,), (where_ge, where_le), (_where_ok, _where_lt),
               continuous_where_points(15)),
    SymbolicProof((P.select_p,), lambda a, b: asd.where(np.array([True, False, True]), a, b),
                  [(np.array([1.0, 2.0, -1.0]), np.array([0.5, 2.0, 3.0]))],
                  formula=lambda a, b: np.where(np.array([True, False, True]), a, b),
                  what="fixed mask, sympy diff"),
    *[DiscontinuousProof((prim,), lambda x, fn=prim: (fn(x, 0.0) + x).sum(),
                         away=(0.25, 1.5)) for prim in P.comparison_prims.values()],
    *[DiscontinuousProof((prim,), lambda x, fn=prim, n=n: (fn(*[x > 0.0, x > 1.0][:n]) * 1.0
                                                           + x).sum(),
                         away=(0.25, 1.5), slope="0 (a boolean of comparisons)")
      for prim, n in ((P.logical_prims["and"], 2), (P.logical_prims["or"], 2),
                      (P.logical_prims["xor"], 2), (P.logical_prims["not"], 1))],
    *[DiscontinuousProof((prim,), lambda x, fn=prim, n=n: (
        fn(*[(x > 0.0) * 3, (x > 1.0) * 1][:n]) * 1.0 + x).sum(),
                         away=(0.25, 1.5), slope="0 (integer bits of comparisons)")
      for prim, n in ((P.bits_prims["and"], 2), (P.bits_prims["or"], 2),
                      (P.bits_prims["xor"], 2), (P.bits_prims["not"], 1))],
    OracleProof((P.where_logic_p,), lambda x: np.where((x > 0) & ~(x >= 2.0), x * (2.0 - x),
                                                       0.0),
                [((np.array([0.0, 2.0, 1.0]),), np.array([1.0, -1.0, 0.5])),
                 ((np.array([0.0, 2.0, 0.0]),), np.array([-1.0, 1.0, 0.0]))],
                note="continuous across both ties", title="where_logic ((x > 0) & ~(x >= 2))"),
]

__all__ = ["PROOFS"]
