"""Every node's values on a ball, as affine forms: which kinks the ball reaches, for certain.

The outer enclosure of Goldstein's ε-subdifferential (`asd.analysis.enclosure` with
``radius > 0``) needs, at every node, the set of Jacobians its primitive takes anywhere in
the ball ``|y - x| <= ε``. That needs the node's *inputs* on the ball: here each node's value
is enclosed by an affine form (Stolfi and de Figueiredo's affine arithmetic; the zonotope
domain of DeepZ)

    y(x + δ) ∈ y0 + B δ + E η,   |δ|_2 <= ε,  η ∈ [-1, 1]^q,

exact for affine nodes (so a kink 2000 radii away through a map that cancels, issue 26's
``W = [[1000, -999], [-1000, 1000]]``, is seen 2000 radii away), with one new error symbol
per entry where a nonlinear node is bounded by its mean-value form
``φ(u) ∈ φ(u0) + m (u - u0) ± r |u - u0|`` (Lebourg's mean value theorem: the slopes
``[m - r, m + r]`` enclose the Clarke derivatives on the input's range). An entry's range is
``y0 ± (ε |B_row|_2 + |E_row|_1)``, widened for rounding.

Supported: linear primitives (one traced operand for the products), the piecewise-linear
kinks (relu, abs, leaky_relu, relu6, hardtanh, hard_sigmoid, soft_threshold, hinge, huber,
maximum, minimum, max/min over axes), products of two traced values, the Euclidean norm, and
smooth elementwise functions whose derivative's extremes on an interval are at its ends or at
known points (exp, log, tanh, sigmoid, softplus, square, ...). Any other primitive makes the
enclosure unbounded, with its node named: nothing is claimed where nothing is known.
"""

from __future__ import annotations

import numpy as np

from asd.analysis.enclosure import (
    BILINEAR,
    LINEAR,
    TieJacobian,
    _active_args,
    _broadcast_index,
    _segments,
)
from asd.core.linear import FanIn
from asd.core.primitive import FixedTangent
from asd.core.program import format_node

MAX_CELLS = 20_000_000
"""Most form coefficients (entries × symbols) one node may hold; past it the node is not
ranged (the enclosure is then unbounded, and says why)."""

KINKS = {
    "relu": lambda p: [0.0], "abs": lambda p: [0.0], "leaky_relu": lambda p: [0.0],
    "relu6": lambda p: [0.0, 6.0], "hardtanh": lambda p: [p["lo"], p["hi"]],
    "hard_sigmoid": lambda p: [-3.0, 3.0], "hinge": lambda p: [1.0],
    "soft_threshold": lambda p: [-p["lam"], p["lam"]],
    "huber": lambda p: [-p["delta"], p["delta"]],
}
"""Unary piecewise primitives: their breakpoints. Each piece's slope is monotone, so its
extremes on an interval are at the interval's ends or at the breakpoints inside."""

SMOOTH = {
    "exp": lambda p: [], "expm1": lambda p: [], "exp2": lambda p: [],
    "softplus": lambda p: [], "square": lambda p: [], "cosh": lambda p: [],
    "tanh": lambda p: [0.0], "sigmoid": lambda p: [0.0], "arctan": lambda p: [0.0],
    "arcsinh": lambda p: [0.0], "sinh": lambda p: [0.0],
    "log": lambda p: [], "log1p": lambda p: [], "log2": lambda p: [], "log10": lambda p: [],
    "sqrt": lambda p: [],
    # n x^(n-1): monotone for n <= 2, extreme at 0 otherwise (n < 0: a pole, refused below)
    "integer_pow": lambda p: [] if 0 <= p["n"] <= 2 else [0.0],
}
"""Smooth unary primitives: the points where the derivative has interior extrema (zeros of
the second derivative), as a function of the parameters. ``DOMAIN`` bounds those defined on
a half-line."""

DOMAIN = {"log": 0.0, "log2": 0.0, "log10": 0.0, "sqrt": 0.0, "log1p": -1.0}


class Form:
    """``y0 + B δ + E η`` for one node's entries (flat): ``B`` (size, N), ``E`` (size, q)."""

    __slots__ = ("y0", "B", "E")

    def __init__(self, y0: np.ndarray, B: np.ndarray, E: np.ndarray):
        self.y0, self.B, self.E = y0, B, E

    def radius(self, eps: float) -> np.ndarray:
        r = eps * np.linalg.norm(self.B, axis=1) + np.sum(np.abs(self.E), axis=1)
        # rounding in the forms' arithmetic: far below this relative widening
        return r * (1 + 1e-12) + 1e-12 * np.abs(self.y0) + 1e-300

    def bounds(self, eps: float) -> tuple[np.ndarray, np.ndarray]:
        r = self.radius(eps)
        return self.y0 - r, self.y0 + r


class _Ranger:
    """The forward pass over forms (module docstring)."""

    def __init__(self, trace, out: int, ids: list[int], eps: float):
        self.trace, self.out, self.ids, self.eps = trace, out, ids, eps
        self.N = sum(int(np.prod(trace.nodes[i].shape, dtype=int)) for i in ids)
        self.q = 0
        self.forms: dict[int, Form] = {}
        self.jacobians: dict[int, TieJacobian] = {}
        self.depends: list[bool] = [False] * (out + 1)

    def describe(self, k: int) -> str:
        return format_node(k, self.trace.nodes[k])

    def new_symbols(self, n: int) -> np.ndarray:
        first = self.q
        self.q += n
        return np.arange(first, first + n)

    def E(self, form: Form) -> np.ndarray:
        if form.E.shape[1] < self.q:
            form.E = np.hstack([form.E, np.zeros((len(form.E), self.q - form.E.shape[1]))])
        return form.E

    def run(self) -> list[str]:
        trace = self.trace
        start = 0
        for i in self.ids:
            size = int(np.prod(trace.nodes[i].shape, dtype=int))
            B = np.zeros((size, self.N))
            B[np.arange(size), start + np.arange(size)] = 1.0
            self.forms[i] = Form(np.asarray(trace.values[i], float).ravel(), B,
                                 np.zeros((size, 0)))
            start += size
        for k in range(self.out + 1):
            node = trace.nodes[k]
            self.depends[k] = k in self.forms or any(
                type(r) is int and r <= self.out and self.depends[r] for r in node.args)
            if k in self.forms or node.prim is None or not self.depends[k]:
                continue
            if trace.lins[k] is None:
                continue
            size = int(np.prod(node.shape, dtype=int))
            if size * (self.N + self.q + size) > MAX_CELLS:
                return [f"{self.describe(k)}: too large to range ({size} entries × "
                        f"{self.N + self.q} symbols)"]
            why = self.node(k, node)
            if why:
                return [f"{self.describe(k)}: {why}"]
        return []

    # ----- one node -----

    def node(self, k: int, node) -> str | None:
        name = node.name
        args = _active_args(self.trace, k)
        traced = [r for r in node.args if type(r) is int and self.depends[r]]
        if name in LINEAR or (name in BILINEAR and len(traced) == 1 and (
                name != "divide" or (type(node.args[0]) is int and self.depends[node.args[0]]
                and not (type(node.args[1]) is int and self.depends[node.args[1]])))):
            self.push_linear(k, node, args)
            return None
        if name in ("select", "where") and not any(
                type(r) is int and self.depends[r] for r in node.args[:-2]):
            self.push_linear(k, node, args)
            return None
        if name in KINKS or name in SMOOTH:
            return self.unary(k, node, args)
        if name in ("maximum", "minimum"):
            return self.pair(k, node, args)
        if name == "reduce_max":
            return self.extreme(k, node, args)
        if name == "multiply" and len(args) == 2:
            return self.product(k, node, args)
        if name == "pnorm" and node.params.get("p") == 2:
            return self.norm(k, node, args)
        return (f"{name} has no range rule on a ball (asd.analysis.ranges), so the "
                "ε-enclosure cannot bound it")

    def push_linear(self, k: int, node, args) -> None:
        lin = self.trace.lins[k]
        size = int(np.prod(node.shape, dtype=int))
        cols = self.N + self.q
        ins = []
        for _, r in args:
            f = self.forms[r]
            ins.append(np.hstack([f.B, self.E(f)]).T.reshape((cols, *self.trace.nodes[r].shape)))
        if type(lin) is FanIn:
            pos = {i: t for (i, _), t in zip(args, ins, strict=True)}
            pushed = lin.push(*[pos.get(i) for i in range(len(lin.maps))])
        else:
            pushed = lin.push(ins[0])
        M = np.asarray(pushed, float).reshape(cols, size).T
        self.forms[k] = Form(np.asarray(self.trace.values[k], float).ravel(), M[:, :self.N],
                             M[:, self.N:])

    def mean_value(self, k: int, u: Form, value: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> None:
        """Node ``k`` = φ(u) elementwise with slopes in ``[lo, hi]`` on u's range: the form
        ``φ(u0) + m (u - u0) ± r rad(u)``, one new symbol per entry that needs one."""
        m, r = (lo + hi) / 2, (hi - lo) / 2
        err = r * u.radius(self.eps) + 1e-12 * np.abs(value)
        E = self.E(u) * m[:, None]
        new = np.flatnonzero(err > 0)
        sym = self.new_symbols(len(new))
        E = np.hstack([E, np.zeros((len(E), len(sym)))])
        E[new, sym] = err[new]
        self.forms[k] = Form(value, u.B * m[:, None], E)

    def unary(self, k: int, node, args) -> str | None:
        if not args:
            return None
        u = self.forms[args[0][1]]
        low, h = u.bounds(self.eps)
        shape = self.trace.nodes[k].shape
        if node.name in DOMAIN and np.any(low <= DOMAIN[node.name]):
            return (f"its input's range on the ball reaches {float(np.min(low)):.3g}, outside "
                    f"its domain (> {DOMAIN[node.name]})")
        if node.name == "integer_pow" and node.params["n"] < 0 and np.any((low <= 0) & (h >= 0)):
            return "its input's range on the ball reaches its pole at 0"
        table = KINKS if node.name in KINKS else SMOOTH
        points = table[node.name](node.params)
        lo, hi = self.slope(node, low, +1, shape), self.slope(node, h, -1, shape)
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        for b in points:
            inside = (low <= b) & (b <= h)
            if inside.any():
                for side in (+1, -1):
                    s = self.slope(node, np.full(len(low), b), side, shape)
                    lo = np.where(inside, np.minimum(lo, s), lo)
                    hi = np.where(inside, np.maximum(hi, s), hi)
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            return "its slope is not finite on its input's range"
        value = np.asarray(self.trace.values[k], float).ravel()
        self.mean_value(k, u, value, lo, hi)
        tied = np.flatnonzero(lo < hi)
        if len(tied):
            self.jacobians[k] = _segments(tied, lo[tied], hi[tied], 0, tied, False)
        return None

    def slope(self, node, at: np.ndarray, side: float, shape) -> np.ndarray:
        """The rule's slope at the points ``at`` (one per entry), entering along ``side``."""
        x = at.reshape(shape).astype(float)
        dx = FixedTangent(np.full(x.shape, side), [np.full(x.shape, side)])
        with np.errstate(all="ignore"):
            _, lin = node.prim.rule([x], [dx], **node.params)
        if type(lin) is FanIn:
            lin = lin.maps[0]
        d = getattr(lin, "d", None)
        if d is None:
            return np.asarray(lin.push(np.ones(x.shape)), float).ravel()
        return np.broadcast_to(np.asarray(d, float), x.shape).ravel().copy()

    def broadcast(self, form: Form, shape: tuple, out: tuple) -> Form:
        idx = _broadcast_index(shape, out)
        return Form(form.y0[idx], form.B[idx], self.E(form)[idx])

    def operand(self, r, out: tuple) -> Form:
        """An operand's form broadcast to ``out`` (a constant has no symbols)."""
        size = int(np.prod(out, dtype=int))
        if type(r) is int and self.depends[r]:
            return self.broadcast(self.forms[r], self.trace.nodes[r].shape, out)
        value = self.trace.values[r] if type(r) is int else r.value
        return Form(np.broadcast_to(np.asarray(value, float), out).ravel().copy(),
                    np.zeros((size, self.N)), np.zeros((size, self.q)))

    def pair(self, k: int, node, args) -> str | None:
        out = tuple(self.trace.nodes[k].shape)
        a, b = (self.operand(r, out) for r in node.args)
        sign = 1.0 if node.name == "maximum" else -1.0
        d = Form(a.y0 - b.y0, a.B - b.B, self.E(a) - self.E(b))   # a - b
        low, h = d.bounds(self.eps)
        tied = np.flatnonzero((low <= 0) & (h >= 0))
        value = np.asarray(self.trace.values[k], float).ravel()
        # max(a, b) = b + relu(a - b); min(a, b) = b - relu(b - a)
        lo, hi = np.where(sign * low > 0, 1.0, 0.0), np.where(sign * h >= 0, 1.0, 0.0)
        if sign < 0:
            lo, hi = np.where(h < 0, 1.0, 0.0), np.where(low <= 0, 1.0, 0.0)
        # the slope of the result in a: in [lo, hi]; in b: 1 minus it (a mean-value form in d)
        m, r = (lo + hi) / 2, (hi - lo) / 2
        err = r * d.radius(self.eps)
        E = self.E(b) + m[:, None] * self.E(d)
        new = np.flatnonzero(err > 0)
        sym = self.new_symbols(len(new))
        E = np.hstack([E, np.zeros((len(E), len(sym)))])
        E[new, sym] = err[new]
        self.forms[k] = Form(value, b.B + m[:, None] * d.B, E)
        if len(tied):
            sa = tuple(np.shape(self.trace.values[node.args[0]] if type(node.args[0]) is int
                                else node.args[0].value))
            sb = tuple(np.shape(self.trace.values[node.args[1]] if type(node.args[1]) is int
                                else node.args[1].value))
            n = len(tied)
            comps = np.arange(n)
            ia, ib = _broadcast_index(sa, out)[tied], _broadcast_index(sb, out)[tied]
            self.jacobians[k] = TieJacobian(
                tied, tied, np.full(n, 2), np.repeat(comps, 2), np.tile([0, 1], n),
                np.tile([0, 1], n), np.stack([ia, ib], axis=1).ravel(), np.ones(2 * n), False)
        return None

    def extreme(self, k: int, node, args) -> str | None:
        p = node.params
        x_node = self.trace.nodes[args[0][1]]
        x = np.asarray(self.trace.values[args[0][1]], float)
        u = self.forms[args[0][1]]
        sign = 1.0 if p["kind"] == "max" else -1.0
        low, h = u.bounds(self.eps)
        lo_s, hi_s = (low, h) if sign > 0 else (-h, -low)
        keep = np.max(sign * x, axis=p["axis"], keepdims=True)
        owner = np.broadcast_to(np.arange(keep.size).reshape(keep.shape), x_node.shape).ravel()
        best_low = np.full(keep.size, -np.inf)
        np.maximum.at(best_low, owner, lo_s)
        cand = hi_s >= best_low[owner]
        value = np.asarray(self.trace.values[k], float).ravel()
        counts = np.bincount(owner[cand], minlength=keep.size)
        single = counts == 1
        B = np.zeros((keep.size, self.N))
        E = np.zeros((keep.size, self.q))
        Eu = self.E(u)
        pick = np.flatnonzero(cand & single[owner])
        B[owner[pick]] = u.B[pick]
        E[owner[pick]] = Eu[pick]
        multi = np.flatnonzero(~single)
        if len(multi):
            top = np.full(keep.size, -np.inf)
            np.maximum.at(top, owner[cand], hi_s[cand])
            center = sign * (top[multi] + best_low[multi]) / 2
            rad = (top[multi] - best_low[multi]) / 2 + np.abs(value[multi] - center)
            sym = self.new_symbols(len(multi))
            E = np.hstack([E, np.zeros((keep.size, len(sym)))])
            E[multi, sym] = rad
            value = value.copy()
            value[multi] = center
            sel = np.flatnonzero(cand & ~single[owner])
            comp_of_row = np.full(keep.size, -1)
            comp_of_row[multi] = np.arange(len(multi))
            comp = comp_of_row[owner[sel]]
            order = np.argsort(comp, kind="stable")
            sel, comp = sel[order], comp[order]
            vert = np.arange(len(sel)) - np.searchsorted(comp, comp)
            self.jacobians[k] = TieJacobian(multi, multi, counts[multi], comp,
                                            vert, np.zeros(len(sel), int), sel,
                                            np.ones(len(sel)), False)
        self.forms[k] = Form(value, B, E)
        return None

    def product(self, k: int, node, args) -> str | None:
        out = tuple(self.trace.nodes[k].shape)
        if any(tuple(self.trace.nodes[r].shape) != out for _, r in args):
            return "a product of traced operands of different shapes has no range rule"
        a, b = (self.forms[r] for _, r in args)
        ra, rb = a.radius(self.eps), b.radius(self.eps)
        value = np.asarray(self.trace.values[k], float).ravel()
        Ea, Eb = self.E(a), self.E(b)
        err = ra * rb + 1e-12 * np.abs(value)
        sym = self.new_symbols(len(value))
        E = b.y0[:, None] * Ea + a.y0[:, None] * Eb
        E = np.hstack([E, np.zeros((len(E), len(sym)))])
        E[np.arange(len(value)), sym] = err
        self.forms[k] = Form(value, b.y0[:, None] * a.B + a.y0[:, None] * b.B, E)
        # ∂(ab) = (b, a): each operand's slope ranges over the other's values
        n = len(value)
        lb, hb = b.bounds(self.eps)
        la, ha = a.bounds(self.eps)
        idx = np.arange(n)
        comps = np.arange(2 * n)
        self.jacobians[k] = TieJacobian(
            idx, np.r_[idx, idx], np.full(2 * n, 2), np.repeat(comps, 2),
            np.tile([0, 1], 2 * n), np.r_[np.zeros(2 * n, int), np.ones(2 * n, int)],
            np.repeat(np.r_[idx, idx], 2), np.r_[np.stack([lb, hb], 1).ravel(),
                                                 np.stack([la, ha], 1).ravel()], False)
        return None

    def norm(self, k: int, node, args) -> str | None:
        if node.params.get("axis") is not None or node.params.get("keepdims"):
            return "a norm over some axes has no range rule (only the norm of all entries)"
        u = self.forms[args[0][1]]
        low, h = u.bounds(self.eps)
        x = u.y0
        value = np.asarray(self.trace.values[k], float).ravel()
        far = np.maximum(np.abs(low), np.abs(h))
        near = np.where((low <= 0) & (h >= 0), 0.0, np.minimum(np.abs(low), np.abs(h)))
        nmin, nmax = float(np.linalg.norm(near)), float(np.linalg.norm(far))
        if nmin == 0.0:   # the ball may reach 0: every gradient is in the unit ball
            lo, hi = -np.ones(len(x)), np.ones(len(x))
        else:             # y_e / |y| over the box, each bound by its extremes
            cands = np.stack([low / nmin, low / nmax, h / nmin, h / nmax])
            lo, hi = np.clip(cands.min(0), -1, 1), np.clip(cands.max(0), -1, 1)
        m, r = (lo + hi) / 2, (hi - lo) / 2
        err = float(np.sum(r * u.radius(self.eps))) + 1e-12 * float(value[0])
        E = np.hstack([m @ self.E(u), [err]])[None]
        self.new_symbols(1)
        self.forms[k] = Form(value, (m @ u.B)[None], E)
        tied = np.flatnonzero(lo < hi)
        if len(tied):
            n = len(tied)
            comps = np.arange(n)
            self.jacobians[k] = TieJacobian(
                np.zeros(1, int), np.zeros(n, int), np.full(n, 2), np.repeat(comps, 2),
                np.tile([0, 1], n), np.zeros(2 * n, int), np.repeat(tied, 2),
                np.stack([lo[tied], hi[tied]], 1).ravel(), False)
        return None


def ball_ties(trace, out: int, ids: list[int], eps: float
              ) -> tuple[dict[int, TieJacobian], list[str]]:
    """``(jacobians, unranged)``: for every node whose Jacobian is not one map on the ball
    ``|y - x| <= eps``, its set of Jacobians there; and why the ball could not be ranged
    (empty when it could)."""
    ranger = _Ranger(trace, out, ids, eps)
    why = ranger.run()
    return ranger.jacobians, why
