"""The kinds of certificate a library primitive can have, and the table row each produces.

Each family module (``proofs/piecewise.py``, ...) declares ``PROOFS``: a list of certificates,
each naming the primitive objects it covers. ``asd prove`` runs them all; the coverage test
fails when a primitive of ``asd.library`` is not covered by any. Kinds:

- `ProgramProof`: the primitive written as a branching program. ``asd.certify`` proves CQ and
  continuity symbolically; then the automatically derived rule (Algorithm 7) and the
  hand-written rule must agree on values, Dini derivatives and branch gradients at kink-heavy
  points (branch gradients along generic directions, where they are unique).
- `SymbolicProof`: a smooth (or linear) primitive: its rule's Jacobian equals the Jacobian
  sympy differentiates from the symbolic formula, at sample points.
- `OracleProof`: a primitive whose kinks are not a finite branching program of its inputs
  (sets, spectra, norms): ``asd.testing.check_rule`` against the exact or 60-digit oracle of
  the one-sided derivative and limiting Jacobian ``lim J(x + δv)`` at points on the kinks.
- `DiscontinuousProof`: comparisons: not Lipschitz, so the engine must refuse to
  differentiate through them (``NotLipschitzError``); ``where`` reads them as branches.
- `ConstantProof`: ``stop_gradient``: no derivative by declaration.
- `LimitProof`: a semialgebraic kink (the l2 norm at 0): the limiting-gradient argument in
  sympy, plus the rule's answer along directions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import asd
from asd.analysis.certificate import Certificate, certify
from asd.core.primitive import Primitive
from asd.errors import ASDError, NotLipschitzError


@dataclass
class Row:
    """One line of the ``asd prove`` table."""

    primitive: str
    family: str = ""
    constraints: str = "-"
    cq: str = "n/a"
    continuity: str = "n/a"
    gradient: str = ""
    ok: bool = True
    detail: str = ""


@dataclass
class Proof:
    """Base: a certificate covering ``prims`` (the primitive objects of the library)."""

    prims: tuple[Primitive, ...]
    title: str = field(default="", kw_only=True)  # shown instead of the primitive names

    @property
    def label(self) -> str:
        return self.title or "/".join(dict.fromkeys(p.name for p in self.prims))

    def run(self) -> Row:
        raise NotImplementedError(f"{type(self).__name__} does not define run")


def pack(shapes: Sequence[tuple]) -> tuple[Callable, Callable]:
    """Split one flat vector into arrays of ``shapes`` (and join them back)."""
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.cumsum([0, *sizes])

    def split(z):
        return [z[offsets[i]:offsets[i + 1]].reshape(s) for i, s in enumerate(shapes)]

    def join(arrays):
        return np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in arrays])

    return split, join


def _close(a, b, tol=1e-12) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= tol * (1 + np.abs(b))))


# ----- branching programs against hand-written rules -----

@dataclass
class ProgramProof(Proof):
    """``program`` (a ``@asd.branching`` primitive) is the library function ``library``.

    ``points`` are ``(args, direction, generic)``: ``args`` a tuple of equally shaped
    arrays, ``direction`` a tuple like it, ``generic`` whether branch gradients must agree
    (False for degenerate directions, where only values and Dini derivatives are unique).
    ``program`` and ``library`` may be tuples (one program per output component). With
    ``stacked`` the library gets the arguments as the rows of one matrix.
    """

    program: Any = None
    library: Callable = None
    points: list = field(default_factory=list)
    stacked: bool = False

    def certificate(self) -> Certificate:
        """The certificate of the program (of every program, merged, for tuples)."""
        programs = self.program if isinstance(self.program, tuple) else (self.program,)
        certs = [certify(p) for p in programs]
        merged = certs[0]
        for c in certs[1:]:
            merged.constraints += [h for h in c.constraints if h not in merged.constraints]
            merged.failures += c.failures
            merged.paths += c.paths
            for k, v in c.checks.items():
                if merged.checks.get(k) == "proved" or v == "failed":
                    merged.checks[k] = v
        return merged

    def run(self) -> Row:
        cert = self.certificate()
        row = Row(self.label, constraints=", ".join(map(str, cert.constraints)) or "-",
                  cq=cert.checks.get("CQ", "failed"),
                  continuity=cert.checks.get("continuity", "failed"), ok=cert.ok)
        if not cert.ok:
            row.detail = "; ".join(map(str, cert.failures))
        programs = self.program if isinstance(self.program, tuple) else (self.program,)
        libraries = self.library if isinstance(self.library, tuple) else (self.library,)
        agree, n = None, 0
        for program, library in zip(programs, libraries, strict=True):
            agree, m = compare_rules(program, library, self.points, self.stacked)
            n += m
            if agree is not None:
                break
        row.gradient = f"auto = rule ({n} pts)" if agree is None else "MISMATCH"
        if agree is not None:
            row.ok = False
            row.detail = (row.detail + "; " if row.detail else "") + agree
        return row


def compare_rules(program, library, points, stacked: bool = False) -> tuple[str | None, int]:
    """None if the derived and the hand-written rule agree at every point, else why not."""
    for args, direction, generic in points:
        args = [np.asarray(a, dtype=float) for a in args]
        split, join = pack([a.shape for a in args])
        z, v = join(args), join(direction)
        rows = (len(args), *args[0].shape)
        f_auto = lambda z, split=split: program(*split(z))  # noqa: E731
        if stacked:
            f_lib = lambda z, rows=rows: library(z.reshape(rows))  # noqa: E731
        else:
            f_lib = lambda z, split=split: library(*split(z))  # noqa: E731
        y_auto, d_auto = asd.directional(f_auto)(z, v)
        y_lib, d_lib = asd.directional(f_lib)(z, v)
        where = f"at {[a.tolist() for a in args]} along {[np.ravel(d).tolist() for d in direction]}"
        if not _close(y_auto, y_lib):
            return f"values differ {where}: program {y_auto}, library {y_lib}", 0
        if not _close(d_auto, d_lib):
            return f"Dini derivatives differ {where}: program {d_auto}, library {d_lib}", 0
        if generic:
            j_auto = asd.jacobian(f_auto, direction=v)(z)
            j_lib = asd.jacobian(f_lib, direction=v)(z)
            if not _close(j_auto, j_lib):
                return (f"branch gradients differ {where}: program {j_auto.tolist()}, "
                        f"library {j_lib.tolist()}"), 0
    return None, len(points)


# ----- smooth and linear primitives against sympy -----

@dataclass
class SymbolicProof(Proof):
    """``library(*arrays)`` equals ``formula(*object arrays of sympy symbols)``; Jacobians too.

    ``formula`` defaults to ``library`` itself run on object arrays (linear primitives and
    arithmetic run unchanged on sympy expressions). ``points`` are tuples of arrays.
    """

    library: Callable = None
    points: list = field(default_factory=list)
    formula: Callable | None = None
    what: str = "sympy diff"

    def run(self) -> Row:
        import sympy

        row = Row(self.label, cq="n/a (smooth)", continuity="n/a (smooth)")
        checked = 0
        for args in self.points:
            args = [np.asarray(a, dtype=float) for a in args]
            split, join = pack([a.shape for a in args])
            z = join(args)
            syms = sympy.symbols(f"z0:{z.size}", real=True)
            sym_args = split(np.array(syms, dtype=object))
            expr = np.asarray((self.formula or self.library)(*sym_args), dtype=object)
            flat = list(expr.ravel())
            jac_sym = sympy.Matrix(flat).jacobian(list(syms))
            at = dict(zip(syms, (sympy.Float(float(t), 30) for t in z), strict=True))
            want_val = np.array([float(sympy.sympify(e).evalf(30, subs=at)) for e in flat])
            want_jac = np.array(jac_sym.evalf(30, subs=at).tolist(), dtype=float)
            f = lambda z, split=split: self.library(*split(z))  # noqa: E731
            val = np.ravel(np.asarray(self.library(*args), dtype=float))
            jac = np.asarray(asd.jacobian(f, seed=0)(z), dtype=float).reshape(len(flat), z.size)
            if not _close(val, want_val, 1e-10) or not _close(jac, want_jac, 1e-9):
                row.ok = False
                row.gradient = "MISMATCH"
                row.detail = (f"at {[a.tolist() for a in args]}: rule Jacobian {jac.tolist()} "
                              f"but sympy gives {want_jac.tolist()}")
                return row
            checked += 1
        row.gradient = f"{self.what} ({checked} pts)"
        return row


# ----- oracle-checked primitives (sets, spectra) -----

@dataclass
class OracleProof(Proof):
    """``asd.testing.check_rule`` at kink points: Dini and limiting Jacobian vs an oracle."""

    library: Callable = None
    points: list = field(default_factory=list)  # (args tuple, direction tuple or None)
    reference: Callable | None = None
    argnums: Any = None
    note: str = ""

    def run(self) -> Row:
        from asd.testing import check_rule

        row = Row(self.label, cq=self.note or "n/a (semialgebraic)", continuity="rule check")
        oracles = set()
        for args, direction in self.points:
            try:
                rep = check_rule(self.library, *args, direction=direction,
                                 reference=self.reference, argnums=self.argnums,
                                 n_directions=2, name=self.label)
            except (AssertionError, ASDError) as e:
                row.ok = False
                row.gradient = "MISMATCH"
                row.detail = str(e).splitlines()[0][:300]
                return row
            oracles.add(rep.oracle)
        row.gradient = f"{'/'.join(sorted(oracles))} oracle ({len(self.points)} pts)"
        return row


# ----- numeric limit check (kinks without a small exact model: sets, spectra) -----

@dataclass
class NumericLimitProof(Proof):
    """At kink points: the Dini derivative against a one-sided difference quotient, and the
    limiting Jacobian ``lim J(x + δv)`` against forward differences at ``x + δv`` (δ = 1e-5).

    A floating-point check, labelled as such: it catches a rule that takes the wrong branch
    (an O(1) error) but is not a proof. ``points`` are ``(x, n_directions)``.
    """

    library: Callable = None
    points: list = field(default_factory=list)
    note: str = "n/a (semialgebraic)"

    def run(self) -> Row:
        row = Row(self.label, constraints="semialgebraic", cq=self.note,
                  continuity="Lipschitz (rule)")
        rng = np.random.default_rng(0)
        n = 0
        for x, k in self.points:
            x = np.asarray(x, dtype=float)
            for _ in range(k):
                v = rng.normal(size=x.shape)
                why = limit_mismatch(self.library, x, v)
                if why:
                    row.ok, row.gradient, row.detail = False, "MISMATCH", why
                    return row
                n += 1
        row.gradient = f"numeric limit ({n} dirs)"
        return row


def limit_mismatch(f, x, v, delta=1e-5, h=1e-10, tol=1e-3) -> str | None:
    """Why ``asd``'s Dini derivative or limiting Jacobian of ``f`` at ``x`` along ``v`` is off."""
    y0 = np.asarray(f(x), dtype=float)
    _, dini = asd.directional(f)(x, v)
    quotient = (np.asarray(f(x + 1e-7 * v), dtype=float) - y0) / 1e-7
    if not _close(dini, quotient, tol):
        return f"Dini derivative {np.ravel(dini)} but difference quotient {np.ravel(quotient)}"
    jac = np.asarray(asd.jacobian(f, direction=v)(x), dtype=float).reshape(y0.size, x.size)
    base = x + delta * v
    yb = np.ravel(np.asarray(f(base), dtype=float))
    cols = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        cols.append((np.ravel(np.asarray(f(base + e.reshape(x.shape)), dtype=float)) - yb) / h)
    fd = np.stack(cols, axis=-1)
    if not _close(jac, fd, tol):
        return f"limiting Jacobian {jac.round(6).tolist()} but J(x + δv) = {fd.round(6).tolist()}"
    return None


# ----- semialgebraic kinks with a symbolic limit argument -----

@dataclass
class LimitProof(Proof):
    """A kink at one point ``x0`` about which ``∇f`` is positively homogeneous of degree 0
    (norms at 0, a repeated eigenvalue): sympy shows ``∇f(x0 + δv) = ∇f(x0 + v)`` for every
    δ > 0, so the limiting gradient along ``v`` is ``∇f(x0 + v)``; the rule must return
    exactly that at ``x0``, and match sympy at ``x0 + v`` (off the kink).
    """

    library: Callable = None
    formula: Callable = None  # list of sympy symbols -> expression
    dim: int = 3
    directions: int = 4
    kink: str = "x = 0 (semialgebraic)"
    at: tuple | None = None  # x0; zeros when None
    continuity: str = "continuous (norm)"

    def run(self) -> Row:
        import sympy

        x0 = np.zeros(self.dim) if self.at is None else np.asarray(self.at, dtype=float)
        xs = sympy.symbols(f"x0:{self.dim}", real=True)
        vs = sympy.symbols(f"v0:{self.dim}", real=True)
        d = sympy.Symbol("delta", positive=True)
        f = self.formula(list(xs))
        grad = [sympy.diff(f, x) for x in xs]
        base = [sympy.nsimplify(c) for c in x0]

        def along(scale):
            return dict(zip(xs, [b + scale * v for b, v in zip(base, vs, strict=True)],
                            strict=True))

        at_ray = [g.subs(along(d)) for g in grad]
        at_v = [g.subs(along(1)) for g in grad]
        homogeneous = all(sympy.simplify(a - b) == 0 for a, b in zip(at_ray, at_v, strict=True))
        row = Row(self.label, constraints=self.kink, cq="n/a", continuity=self.continuity)
        if not homogeneous:
            row.ok, row.gradient = False, "NOT HOMOGENEOUS"
            row.detail = "the symbolic gradient along the ray depends on δ"
            return row
        rng = np.random.default_rng(1)
        for _ in range(self.directions):
            v = rng.normal(size=self.dim)
            want = np.array([float(g.subs(dict(zip(vs, v, strict=True)))) for g in at_v])
            got = np.asarray(asd.jacobian(self.library, direction=v)(x0))
            off = np.asarray(asd.jacobian(self.library, seed=0)(x0 + v))
            if not (_close(got, want, 1e-10) and _close(off, want, 1e-10)):
                row.ok, row.gradient = False, "MISMATCH"
                row.detail = (f"along v = {v.tolist()}: rule {got.tolist()}, off the kink "
                              f"{off.tolist()}, sympy {want.tolist()}")
                return row
        row.gradient = f"sympy: ∇f(x0+δv) = ∇f(x0+v); rule ({self.directions} dirs)"
        return row


# ----- discontinuous and constant primitives -----

@dataclass
class DiscontinuousProof(Proof):
    """A jump: differentiating through it at ``at`` (on the jump) raises NotLipschitzError;
    at ``away`` (off every jump) the primitive is locally constant (``slope`` 0; remainder:
    1), so asd's gradient equals the forward difference of ``use`` there."""

    use: Callable = None  # x -> an expression using the primitive as a number
    at: tuple = (0.0, 1.0)
    away: tuple | None = None
    slope: str = "0"

    def run(self) -> Row:
        row = Row(self.label, constraints="jump", cq="n/a", continuity="jump: refused")
        if self.slope == "0" and not all(p.discontinuous for p in self.prims):
            row.ok, row.detail = False, "not marked discontinuous"
            return row
        try:
            asd.subgrad(self.use)(np.array(self.at))
        except NotLipschitzError:
            row.gradient = "NotLipschitzError raised"
        else:
            row.ok, row.gradient = False, "MISSING ERROR"
            row.detail = "differentiating through the jump did not raise NotLipschitzError"
            return row
        if self.away is not None:
            x = np.array(self.away)
            g = np.asarray(asd.subgrad(self.use)(x))
            y0 = float(self.use(x))
            fd = np.array([(float(self.use(x + 1e-7 * e)) - y0) / 1e-7 for e in np.eye(x.size)])
            if not _close(g, fd, 1e-5):
                row.ok, row.gradient = False, "MISMATCH"
                row.detail = f"off the jumps at {x.tolist()}: asd {g.tolist()}, " \
                             f"difference quotient {fd.tolist()}"
                return row
            row.gradient += f"; slope {self.slope} off the jumps"
        return row


@dataclass
class ConstantProof(Proof):
    """No derivative by declaration: the engine passes no cotangent through it."""

    use: Callable = None
    expected: float = 0.0

    def run(self) -> Row:
        g = float(asd.subgrad(self.use)(1.5))
        ok = g == self.expected
        return Row(self.label, cq="n/a", continuity="n/a", ok=ok,
                   gradient=("zero by declaration" if ok else f"got {g}"),
                   detail="" if ok else f"expected {self.expected}")


__all__ = ["ConstantProof", "DiscontinuousProof", "LimitProof", "NumericLimitProof",
           "OracleProof", "ProgramProof", "Proof", "Row",
           "SymbolicProof", "compare_rules", "pack"]
