"""Certificates for branching programs: constraint qualification and continuity, by sympy.

``certify(fn)`` runs a branching program (``@asd.branching``) on sympy symbols and enumerates
every branch path: its constraints ``h`` (with the side taken) and its piece ``p_z``. Then:

- **CQ** (the practical form of the paper's Assumption 3.1): no point where a constraint is
  zero has a zero gradient. ``{h = 0, ∇h = 0}`` is a polynomial system: a Groebner basis of
  ``[1]`` proves it has no solution; otherwise its real solutions inside the region where the
  program evaluates ``h`` are witnesses.
- **continuity**: two paths first differ at some branch ``h``, so their pieces meet only on
  ``h = 0``; there they must agree. Proved by divisibility (the difference vanishes on the
  whole variety), by exact rational linear programming when the constraints are affine (the
  pieces agree on the affine hull of the common face), or by exhaustion when the boundary is
  finitely many points; otherwise searched on sample points and reported as "sampled".
- **pieces**: every piece and constraint is a polynomial or uses declared smooth functions.

Continuity makes the function locally Lipschitz (finitely many polynomial pieces); with CQ,
Algorithm 7 returns the branch gradient of the piece the ray enters (Lemma 3.2).

>>> import asd
>>> cert = asd.certify(lambda x: x if asd.branch(x ** 3) else 0)
>>> cert.ok, cert.failures[0].kind, cert.failures[0].witness
(False, 'cq', {'x': 0})
"""

from __future__ import annotations

import inspect
import itertools
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import sympy

from asd.analysis.branching import (
    _ACTIVE,
    SMOOTH,
    BranchingPrimitive,
    Smooth,
    _not_in_model,
    ufunc_in_model,
)
from asd.errors import ASDError, TracerBoolError

MAX_PATHS = 512
_GRID = [sympy.Rational(v) for v in ("0", "1", "-1", "1/2", "-1/2", "2", "-2", "3", "-3",
                                     "1/3", "-5/2", "7/4")]

# ----- running a program on symbols -----


class Symbolic:
    """A program value during certification: a sympy expression."""

    __slots__ = ("expr", "run")

    def __init__(self, run: _SymbolicRun, expr):
        self.run, self.expr = run, expr

    def _lift(self, other):
        if isinstance(other, Symbolic):
            return other.expr
        if isinstance(other, numbers.Real) or (
            isinstance(other, np.ndarray | np.generic) and np.ndim(other) == 0
        ):
            return constant(other)
        raise _not_in_model(f"combining a branching value with {type(other).__name__}")

    def _new(self, expr):
        return Symbolic(self.run, expr)

    def __add__(self, other):
        return self._new(self.expr + self._lift(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._new(self.expr - self._lift(other))

    def __rsub__(self, other):
        return self._new(self._lift(other) - self.expr)

    def __mul__(self, other):
        return self._new(self.expr * self._lift(other))

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, Symbolic):
            raise _not_in_model("division by a branching value")
        return self._new(self.expr / self._lift(other))

    def __rtruediv__(self, other):
        raise _not_in_model("division by a branching value")

    def __neg__(self):
        return self._new(-self.expr)

    def __pos__(self):
        return self

    def __pow__(self, n):
        if not isinstance(n, numbers.Integral) or n < 0:
            raise _not_in_model(f"x ** {n!r} (only non-negative integer powers are monomials)")
        return self._new(self.expr ** int(n))

    def apply_smooth(self, s: Smooth):
        self.run.check_declared(s.name)
        return self._new(s.sympy(sympy, self.expr))

    def __bool__(self):
        raise TracerBoolError("a branching program used a value in Python control flow; "
                              "branch with `if asd.branch(h):` (h >= 0)")

    def _compare(self, other):
        raise TracerBoolError("comparisons inside a branching program are not branches; write "
                              "`asd.branch(a - b)` for a >= b")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = _compare
    __hash__ = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ufunc_in_model(ufunc, method, inputs, kwargs, Symbolic.apply_smooth)


def constant(c):
    """A program constant as an exact rational (the shortest decimal that round-trips)."""
    if isinstance(c, numbers.Integral):
        return sympy.Integer(int(c))
    return sympy.Rational(repr(float(c)))


class _SymbolicRun:
    """One run along a forced prefix of decisions; new branches take the ">=" side."""

    def __init__(self, program: BranchingPrimitive, prefix: tuple[bool, ...]):
        self.program, self.prefix = program, prefix
        self.decisions: list[tuple[sympy.Expr, bool]] = []

    @staticmethod
    def owns(a) -> bool:
        return isinstance(a, Symbolic)

    def check_declared(self, name: str) -> None:
        if name not in self.program.smooth:
            raise _Undeclared(name)

    def decide(self, h) -> bool:
        if not isinstance(h, Symbolic):
            return bool(h >= 0)
        expr = sympy.expand(h.expr)
        if not expr.free_symbols:  # a constant condition is not a constraint
            return bool(expr >= 0)
        i = len(self.decisions)
        d = self.prefix[i] if i < len(self.prefix) else True
        self.decisions.append((expr, d))
        return d


class _Undeclared(ASDError):
    """A piece calls a smooth function the program did not declare (``smooth={...}``)."""


# ----- the certificate -----


@dataclass
class Failure:
    """One reason a program is not certified, with a point that shows it (if found)."""

    kind: str  # 'cq', 'continuity', 'piece', 'model'
    message: str
    witness: dict | None = None

    def __str__(self) -> str:
        at = "" if self.witness is None else " at " + _fmt_point(self.witness)
        return f"[{self.kind}] {self.message}{at}"


@dataclass
class Path:
    """One straight-line path: its branch decisions (True = "h >= 0") and its piece."""

    constraints: tuple[tuple[sympy.Expr, bool], ...]
    piece: sympy.Expr

    @property
    def decisions(self) -> tuple[bool, ...]:
        return tuple(d for _, d in self.constraints)

    def region(self) -> str:
        parts = [f"{h} {'>=' if d else '<'} 0" for h, d in self.constraints]
        return " and ".join(parts) or "everywhere"


@dataclass
class Certificate:
    """The result of ``certify``: paths, constraints, per-check status and failures."""

    name: str
    symbols: tuple[sympy.Symbol, ...]
    paths: list[Path] = field(default_factory=list)
    constraints: list[sympy.Expr] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)  # check -> proved | sampled | failed

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        args = ", ".join(map(str, self.symbols))
        lines = [f"certificate for {self.name}({args}): {'OK' if self.ok else 'REJECTED'}"]
        for p in self.paths:
            lines.append(f"  piece {p.piece}  on  {p.region()}")
        checks = ", ".join(f"{k} {v}" for k, v in self.checks.items())
        lines.append(f"  checks: {checks}")
        lines += [f"  {f}" for f in self.failures]
        return "\n".join(lines)


def _fmt_point(point: dict) -> str:
    return "(" + ", ".join(f"{k} = {v}" for k, v in point.items()) + ")"


def certify(fn: Callable, *, smooth: Iterable[str] | None = None) -> Certificate:
    """Certify a branching program: CQ, continuity, and polynomial/smooth pieces.

    ``fn`` is a ``@asd.branching`` primitive or a plain function in the same model
    (``smooth`` then declares its smooth functions).

    >>> import asd
    >>> @asd.branching
    ... def heaviside(x):
    ...     return 1 if asd.branch(x) else 0
    >>> cert = asd.certify(heaviside)
    >>> cert.ok, [(f.kind, f.witness) for f in cert.failures]
    (False, [('continuity', {'x': 0})])
    >>> asd.certify(lambda x: x if asd.branch(x) else 0).ok
    True
    """
    if hasattr(fn, "fn") and hasattr(fn, "smooth"):  # a @asd.branching primitive
        base, declared, name = fn.fn, fn.smooth, fn.name
    else:
        base, declared, name = fn, (), None
    program = BranchingPrimitive(base, declared if smooth is None else smooth, name)
    names = list(inspect.signature(program.fn).parameters)
    symbols = tuple(sympy.Symbol(n, real=True) for n in names)
    cert = Certificate(program.name, symbols)
    try:
        cert.paths = enumerate_paths(program, symbols)
    except _Undeclared as e:
        cert.failures.append(Failure("model", f"np.{e.args[0]} is used but not declared smooth "
                                     f"(write @asd.branching(smooth={{'{e.args[0]}'}}))"))
        return cert
    except ASDError as e:
        cert.failures.append(Failure("model", str(e)))
        return cert
    cert.paths = [p for p in cert.paths if _nonempty(p, symbols)]
    seen = []
    for p in cert.paths:
        for h, _ in p.constraints:
            h = -h if h.could_extract_minus_sign() else h  # h and -h share their boundary
            if h not in seen:
                seen.append(h)
    cert.constraints = seen
    _check_pieces(cert, program)
    _check_cq(cert)
    _check_continuity(cert)
    return cert


def enumerate_paths(program: BranchingPrimitive, symbols) -> list[Path]:
    """Every branch path of the program, found by re-running it with forced decisions."""
    stack: list[tuple[bool, ...]] = [()]
    paths = []
    while stack:
        prefix = stack.pop()
        run = _SymbolicRun(program, prefix)
        _ACTIVE.append(run)
        try:
            out = program.fn(*(Symbolic(run, s) for s in symbols))
        finally:
            _ACTIVE.pop()
        decisions = tuple(d for _, d in run.decisions)
        for i in range(len(prefix), len(decisions)):
            stack.append(decisions[:i] + (not decisions[i],))
        if isinstance(out, Symbolic):
            piece = sympy.expand(out.expr)
        elif isinstance(out, numbers.Real):
            piece = constant(out)
        else:
            raise _not_in_model(f"returning {type(out).__name__}")
        paths.append(Path(tuple(run.decisions), piece))
        if len(paths) > MAX_PATHS:
            raise ASDError(f"{program.name} has more than {MAX_PATHS} branch paths; certify a "
                           "smaller instance")
    paths.sort(key=lambda p: tuple(not d for d in p.decisions))
    return paths


# ----- (c) pieces -----

def _is_model_expr(expr, symbols, program) -> bool:
    if expr.is_polynomial(*symbols):
        return True
    t = sympy.Symbol("t")
    allowed = {f.func for name in program.smooth
               for f in SMOOTH[name].sympy(sympy, t).atoms(sympy.Function)}
    return all(f.func in allowed for f in expr.atoms(sympy.Function))


def _check_pieces(cert: Certificate, program) -> None:
    bad = [e for e in [p.piece for p in cert.paths] + cert.constraints
           if not _is_model_expr(e, cert.symbols, program)]
    for e in bad:
        cert.failures.append(Failure("piece", f"{e} is neither a polynomial nor built from "
                                     "declared smooth functions"))
    cert.checks["pieces"] = "failed" if bad else "proved"


# ----- (a) constraint qualification -----

def _satisfies(point: dict, constraints) -> bool:
    """Closure of a region: each h >= 0 (taken) or h <= 0 (not taken), decided exactly."""
    for h, d in constraints:
        v = sympy.nsimplify(h.subs(point)) if h.free_symbols - set(point) == set() else None
        if v is None or not v.is_real:
            return False
        if (d and v.is_negative) or (not d and v.is_positive):
            return False
    return True


def _real_points(solutions, symbols):
    """Real points from sympy.solve dicts; free parameters are set to grid values."""
    for sol in solutions:
        free = sorted(set().union(*(sympy.sympify(v).free_symbols for v in sol.values()))
                      | (set(symbols) - set(sol)), key=str)
        for values in itertools.islice(itertools.product(_GRID[:5], repeat=len(free)), 25):
            sub = dict(zip(free, values, strict=True))
            point = {s: sympy.nsimplify(sympy.sympify(sol.get(s, s)).subs(sub)) for s in symbols}
            if all(v.is_real for v in point.values()):
                yield point


def _check_cq(cert: Certificate) -> None:
    status = "proved"
    done = set()
    for p in cert.paths:
        for i, (h, _) in enumerate(p.constraints):
            prefix = p.constraints[:i]
            if (h, prefix) in done:
                continue
            done.add((h, prefix))
            xs = sorted(h.free_symbols, key=str)
            if not xs:
                continue
            system = [h] + [sympy.diff(h, x) for x in xs]
            if h.is_polynomial(*xs) and list(sympy.groebner(system, *xs, order="lex")) == [1]:
                continue
            try:
                solutions = sympy.solve(system, xs, dict=True)
            except NotImplementedError:
                cert.failures.append(Failure("cq", f"could not decide whether {h} = 0 and "
                                             f"grad {h} = 0 have a common real solution"))
                status = "failed"
                continue
            for point in _real_points(solutions, cert.symbols):
                if _satisfies(point, prefix):
                    cert.failures.append(Failure(
                        "cq", f"constraint {h} is zero with zero gradient (the side a direction "
                        "selects is not decided by first-order information)",
                        _named(point)))
                    status = "failed"
                    break
    cert.checks["CQ"] = status


def _named(point: dict) -> dict:
    return {str(k): _plain(v) for k, v in point.items()}


def _plain(v):
    v = sympy.nsimplify(v)
    if v.is_Integer:
        return int(v)
    if v.is_Rational:
        return Fraction(int(v.p), int(v.q))
    return v


# ----- (b) continuity -----

def _check_continuity(cert: Certificate) -> None:
    status = "proved"
    reported = set()
    for a, b in itertools.combinations(cert.paths, 2):
        k = next(i for i, (x, y) in enumerate(zip(a.decisions, b.decisions, strict=False))
                 if x != y)
        h = a.constraints[k][0]
        if (k, a.decisions[:k], a.piece, b.piece) in reported:
            continue
        try:
            verdict, witness = _agree_on_boundary(h, a, b, cert.symbols)
        except (NotImplementedError, sympy.polys.polyerrors.PolynomialError,
                sympy.polys.polyerrors.ComputationFailed) as e:
            cert.failures.append(Failure(
                "continuity", f"could not decide whether {a.piece} and {b.piece} agree on "
                f"{h} = 0 ({type(e).__name__})"))
            status = "failed"
            continue
        if verdict == "sampled" and status == "proved":
            status = "sampled"
        if verdict == "failed":
            reported.add((k, a.decisions[:k], a.piece, b.piece))
            status = "failed"
            cert.failures.append(Failure(
                "continuity", f"pieces {a.piece} (on {a.region()}) and {b.piece} (on "
                f"{b.region()}) disagree on their common boundary {h} = 0, so the function "
                "jumps there", None if witness is None else _named(witness)))
    cert.checks["continuity"] = status


def _agree_on_boundary(h, a: Path, b: Path, symbols) -> tuple[str, dict | None]:
    """'proved' | 'sampled' | 'failed' (with a witness) for pieces of a and b on h = 0."""
    diff = sympy.expand(a.piece - b.piece)
    if diff == 0:
        return "proved", None
    constraints = list(a.constraints) + [c for c in b.constraints if c not in a.constraints]
    polys = all(e.is_polynomial(*symbols) for e in [diff, h] + [c for c, _ in constraints])
    if polys:
        q = sympy.sqf_part(h)
        if sympy.reduced(diff, [q], *symbols)[1] == 0:
            return "proved", None
        if all(sympy.Poly(c, *symbols).total_degree() <= 1 for c, _ in constraints):
            return _linear_face(h, constraints, diff, symbols)
    elif sympy.simplify(diff) == 0:
        return "proved", None
    free = set(h.free_symbols)
    for c, _ in constraints:
        free |= c.free_symbols
    free |= diff.free_symbols
    if len(free) <= 1:
        x = next(iter(free)) if free else symbols[0]
        roots = sympy.solveset(h, x, sympy.S.Reals)
        if isinstance(roots, sympy.FiniteSet):
            for r in roots:
                point = {s: (r if s == x else sympy.Integer(0)) for s in symbols}
                if _satisfies(point, constraints) and sympy.simplify(diff.subs(point)) != 0:
                    return "failed", point
            return "proved", None
    return _sample_boundary(h, constraints, diff, symbols)


def _linear_face(h, constraints, diff, symbols) -> tuple[str, dict | None]:
    """Affine constraints: find the affine hull of the common face exactly (rational LP).

    An inequality is an implicit equality of the face iff its maximum over the face is 0;
    the difference of the pieces must vanish on the affine hull those equalities span.
    """
    from sympy.solvers.simplex import InfeasibleLPError, UnboundedLPError, lpmax

    ineqs = [g for g in dict.fromkeys(c if d else -c for c, d in constraints) if g.free_symbols]
    cons = [sympy.Eq(h, 0)] + [g >= 0 for g in ineqs]
    eqs = [h]
    for g in ineqs:
        try:
            best, _ = lpmax(g, cons)
        except InfeasibleLPError:
            return "proved", None  # the two pieces do not touch
        except UnboundedLPError:
            continue
        if best == 0:
            eqs.append(g)
    sol = sympy.solve(eqs, symbols, dict=True)
    if not sol:
        return "proved", None
    on_face = sympy.expand(diff.subs(sol[0]))
    if on_face == 0:
        return "proved", None
    cons = [sympy.Eq(e, 0) for e in eqs] + [g >= 0 for g in ineqs if g not in eqs]
    cons = [c for c in cons if c is not sympy.true]
    box = [s <= 3 for s in symbols] + [s >= -3 for s in symbols]
    vertices: list[dict] = []
    for weights in itertools.islice(itertools.product(_GRID[1:6], repeat=len(symbols)), 40):
        objective = sum(w * s for w, s in zip(weights, symbols, strict=True))
        try:
            _, point = lpmax(objective, cons + box)
        except (InfeasibleLPError, UnboundedLPError):
            continue
        point = {s: point.get(s, sympy.Integer(0)) for s in symbols}
        for q in [point] + [{s: (point[s] + v[s]) / 2 for s in symbols} for v in vertices]:
            if diff.subs(q) != 0:
                return "failed", q
        vertices.append(point)
    return "failed", None


def _nonempty(path: Path, symbols) -> bool:
    """False only when a path's region is provably empty (affine constraints, exact LP)."""
    from sympy.solvers.simplex import InfeasibleLPError, UnboundedLPError, lpmax

    cs = [(h, d) for h, d in path.constraints if h.free_symbols]
    if not all(h.is_polynomial(*symbols) and sympy.Poly(h, *symbols).total_degree() <= 1
               for h, _ in cs):
        return True
    t = sympy.Dummy("t")
    cons = [h >= 0 if d else -h >= t for h, d in cs] + [t <= 1]
    try:
        best, _ = lpmax(t, cons)
    except InfeasibleLPError:
        return False
    except UnboundedLPError:
        return True
    return best > 0 or all(d for _, d in cs)


def _sample_boundary(h, constraints, diff, symbols) -> tuple[str, dict | None]:
    """Search the boundary on rational sample points; no witness -> 'sampled'."""
    x = next((s for s in symbols if h.has(s)), None)
    if x is None:
        return "proved", None
    solutions = sympy.solve(h, x, dict=True)
    others = [s for s in symbols if s != x]
    for sol in solutions:
        for values in itertools.islice(itertools.product(_GRID, repeat=len(others)), 400):
            point = dict(zip(others, values, strict=True))
            xv = sympy.nsimplify(sol[x].subs(point))
            if not xv.is_real:
                continue
            point[x] = xv
            if _satisfies(point, constraints) and sympy.simplify(diff.subs(point)) != 0:
                return "failed", {s: point[s] for s in symbols}
    return "sampled", None


__all__ = ["Certificate", "Failure", "Path", "certify", "enumerate_paths"]
