"""The rule checker: one function every rule test calls, and users call on their own rules.

`check_rule` runs a function built from asd primitives through every derivative mode at a
point and along one or more directions, and checks each part of the rule contract
(DESIGN.md, "The rule protocol") against an independent oracle:

1. value: the traced value equals the plain numpy reference, same shape and dtype (float32
   stays float32), and every rule's answer equals its primitive's ``impl``;
2. maps: every branch linearization has the shapes of its node, accepts a leading batch axis
   in push and pull (batched equals unbatched), computes entries on demand (``push_at``) as
   its full push does, and pull is the transpose of push (dot-product test
   ``<lin t, c> == <t, lin.T c>``); forward- and reverse-mode Jacobians agree;
3. dini: ``asd.directional`` equals the one-sided derivative ``lim (f(x + δv) - f(x)) / δ``;
4. jacobian: ``asd.jacobian(f, direction=v)`` equals the limiting Jacobian
   ``lim J f(x + δv)`` as δ ↓ 0 (never a central difference: that averages the two sides of
   a kink, which is exactly what asd must not do).

The oracle for 3 and 4 is exact (``fractions.Fraction`` power series in δ, `asd.testing.exact`)
when the reference is piecewise polynomial, and high precision otherwise: the reference is
evaluated on `asd.testing.precise.Precise` numbers at 80 digits, with δ = 1e-30 and Jacobian
columns by forward differences of step 1e-45 at ``x + δv``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mpmath
import numpy as np

from asd.api import directional, jacobian
from asd.core.linear import FanIn
from asd.core.program import format_node
from asd.core.sweep import Trace
from asd.core.tracing import Tracer
from asd.testing import exact as exact_oracle
from asd.testing.precise import DPS, precise_array, to_mpf

__all__ = ["RuleReport", "check_rule", "dyadic_direction"]

DINI_STEP = mpmath.mpf("1e-30")
JACOBIAN_STEP = mpmath.mpf("1e-45")
BATCH = 2


@dataclass
class RuleReport:
    """What `check_rule` checked: the oracle, the directions and how often each check ran."""

    name: str
    oracle: str = ""
    directions: int = 0
    checks: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def ran(self, check: str) -> None:
        self.checks[check] = self.checks.get(check, 0) + 1

    def __str__(self) -> str:
        runs = ", ".join(f"{k} x{n}" for k, n in self.checks.items())
        skip = f"; skipped: {'; '.join(self.skipped)}" if self.skipped else ""
        return f"{self.name}: {self.directions} directions, {self.oracle} oracle: {runs}{skip}"


# ----- the problem: differentiated leaves flattened into one vector -----


class _Problem:
    """``fn`` at ``args`` seen as a function of one flat vector ``z`` (the differentiated args)."""

    def __init__(self, fn, args, argnums, reference, name):
        self.fn, self.args, self.name = fn, tuple(args), name
        self.argnums = tuple(range(len(args))) if argnums is None else (
            (argnums,) if isinstance(argnums, int) else tuple(argnums))
        self.reference = fn if reference is None else reference
        self.xs = []
        for i in self.argnums:
            x = np.asarray(args[i])
            if not np.issubdtype(x.dtype, np.floating):
                x = x.astype(np.float64)
            self.xs.append(x)
        self.sizes = [x.size for x in self.xs]
        self.z = np.concatenate([x.ravel() for x in self.xs]) if self.xs else np.zeros(0)
        self.n = self.z.size

    def split(self, flat) -> list:
        parts, start = [], 0
        for x in self.xs:
            parts.append(np.asarray(flat[start:start + x.size]).reshape(x.shape))
            start += x.size
        return parts

    def with_diff(self, parts) -> list:
        args = list(self.args)
        for i, p in zip(self.argnums, parts, strict=True):
            args[i] = p
        return args

    def flat_reference(self, flat):
        """The reference as a function of the flat vector (object arrays welcome)."""
        with np.errstate(all="ignore"):
            return self.reference(*self.with_diff(self.split(flat)))

    def joint(self, blocks, out_size: int) -> np.ndarray:
        """Per-argument Jacobian blocks as one ``(out size, n)`` matrix."""
        return np.concatenate([np.reshape(b, (out_size, s)) for b, s in
                               zip(blocks, self.sizes, strict=True)], axis=1)


def dyadic_direction(shape, rng: np.random.Generator) -> np.ndarray:
    """A nonzero direction of small dyadic entries (zeros included), exact in any dtype."""
    pool = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 0.25])
    while True:
        d = rng.choice(pool, size=shape)
        if np.any(d) or d.size == 0:
            return d


# ----- assertion messages that teach the contract -----


def _fmt(a) -> str:
    a = np.asarray(a)
    if a.dtype == object:
        a = a.astype(float)
    return np.array2string(a, precision=10, separator=", ", threshold=40)


def _fail(problem: _Problem, check: str, contract: str, v, expected, got, extra: str = ""):
    lines = [
        f"check_rule({problem.name}) failed the {check!r} check.",
        f"  contract: {contract}",
        f"  at x = {_fmt(problem.z) if problem.n > 1 else _fmt(problem.z.reshape(()))}",
    ]
    if v is not None:
        lines.append(f"  along v = {_fmt(v)}")
    lines += [f"  expected: {_fmt(expected)}", f"  got:      {_fmt(got)}"]
    if extra:
        lines.append(f"  {extra}")
    raise AssertionError("\n".join(lines))


def _close(got, expected, rtol: float, atol: float) -> tuple[bool, str]:
    got = np.asarray(got, dtype=float)
    expected = np.asarray(expected, dtype=float) if np.asarray(expected).dtype != object \
        else np.asarray(expected).astype(float)
    if got.shape != expected.shape:
        return False, f"shape {got.shape} instead of {expected.shape}"
    if got.size == 0:
        return True, ""
    scale = max(1.0, float(np.max(np.abs(expected))) if np.all(np.isfinite(expected)) else 1.0)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - expected)
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    bad = ~(same | (err <= atol * scale + rtol * np.abs(expected)))
    if not bad.any():
        return True, ""
    i = int(np.flatnonzero(bad)[0])
    return False, (f"{int(bad.sum())} of {bad.size} entries differ; first at flat index {i}: "
                   f"{got.flat[i]!r} vs {expected.flat[i]!r}")


# ----- the checks -----


def _check_value(p: _Problem, value, tol) -> None:
    with np.errstate(all="ignore"):
        want = np.asarray(p.reference(*p.args))
    got = np.asarray(value)
    if got.shape != want.shape or got.dtype != want.dtype:
        _fail(p, "value", "the traced function returns the reference's shape and dtype "
              "(float32 stays float32)", None, f"{want.dtype}{list(want.shape)}",
              f"{got.dtype}{list(got.shape)}")
    ok, why = _close(got, want, *tol)
    if not ok:
        _fail(p, "value", "the traced value equals plain numpy's", None, want, got, why)


def _trace(p: _Problem, v_parts) -> tuple[Trace, Any]:
    trace = Trace()
    tracers = [trace.new_input(x, d.astype(x.dtype)) for x, d in
               zip(p.xs, v_parts, strict=True)]
    with np.errstate(all="ignore"):
        out = p.fn(*p.with_diff(tracers))
    return trace, out


def _check_maps(p: _Problem, trace: Trace, rng, tol, report: RuleReport) -> None:
    """Every rule in the trace: answer == impl, shapes, batching, and pull == push^T."""
    for k, node in enumerate(trace.nodes):
        lin = trace.lins[k]
        if lin is None:
            continue
        where = format_node(k, node)
        ins = [trace.values[r] if isinstance(r, int) else r.value for r in node.args]
        with np.errstate(all="ignore"):
            impl = np.asarray(node.prim.impl(*ins, **node.params))
        jump = trace.jumps.get(k)
        if jump is not None:  # on a jump the rule answers the side the ray enters
            impl = np.where(jump.mask, trace.values[k], impl)
        ok, why = _close(trace.values[k], impl, *tol)
        if not ok or np.shape(trace.values[k]) != impl.shape:
            _fail(p, "rule value", f"the rule of {where} returns the same answer as its "
                  "primitive's impl", None, impl, trace.values[k], why)
        report.ran("rule value")
        maps = lin.maps if type(lin) is FanIn else (lin,)
        for j, (m, x) in enumerate(zip(maps, ins, strict=True)):
            if m is not None:
                _check_map(p, where, j, m, np.shape(x), node.shape, rng, tol)
                report.ran("dot-product")


def _check_map(p, where, j, m, in_shape, out_shape, rng, tol) -> None:
    label = f"{where}, input {j} ({type(m).__name__})"
    if tuple(m.in_shape) != tuple(in_shape) or tuple(m.out_shape) != tuple(out_shape):
        _fail(p, "map shapes", f"the linear map of {label} goes from the input's shape to "
              "the output's", None, f"{tuple(in_shape)} -> {tuple(out_shape)}",
              f"{m.in_shape} -> {m.out_shape}")
    t = rng.standard_normal((BATCH, *in_shape))
    c = rng.standard_normal((BATCH, *out_shape))
    pushed, pulled = np.asarray(m.push(t)), np.asarray(m.pull(c))
    for what, got, want in (("push", pushed, (BATCH, *out_shape)),
                            ("pull", pulled, (BATCH, *in_shape))):
        if got.shape != want:
            _fail(p, "batched map", f"{what} of {label} keeps a leading batch axis",
                  None, f"shape {want}", f"shape {got.shape}")
    rtol = tol[0]
    for b in range(BATCH):
        one_push, one_pull = np.asarray(m.push(t[b])), np.asarray(m.pull(c[b]))
        for what, got, want in (("push", one_push, pushed[b]), ("pull", one_pull, pulled[b])):
            ok, why = _close(got, want, rtol, rtol)
            if not ok:
                _fail(p, "batched map", f"{what} of {label} on one tangent equals the same "
                      "entry of a batched call", None, want, got, why)
        _check_push_at(p, label, m, t[b], one_push, rng, rtol)
        lhs = float(np.vdot(one_push, c[b]))
        rhs = float(np.vdot(t[b], one_pull))
        scale = (np.linalg.norm(one_push) * np.linalg.norm(c[b])
                 + np.linalg.norm(t[b]) * np.linalg.norm(one_pull) + 1.0)
        if not abs(lhs - rhs) <= rtol * scale:
            _fail(p, "dot-product", f"pull of {label} is the transpose of its push: "
                  "<lin t, c> == <t, lin.T c> for random t, c", None, lhs, rhs,
                  "push and pull disagree: reverse mode (subgrad) and forward mode "
                  "(directional, jacobian) would give different answers")


def _check_push_at(p, label, m, t, pushed, rng, rtol) -> None:
    """A map that computes some entries on demand (``push_at``) agrees with its full push."""
    mask = np.asarray(rng.random(np.shape(pushed)) < 0.5)
    got = m.push_at(mask, lambda need: np.asarray(t)[need])
    if got is NotImplemented:
        return
    want = np.asarray(pushed)[mask]
    got = np.zeros_like(want) if got is None else np.asarray(got)
    ok, why = _close(got, want, rtol, rtol)
    if not ok:
        _fail(p, "push_at", f"push_at(mask) of {label} returns the entries mask of its push "
              "(the engine asks for tied entries only)", None, want, got, why)


LEX_STEP = 2.0 ** -30
"""η in the oracle's ray ``v + ηw`` for a lexicographic result: exact in binary, and small
enough that the pieces the ray enters are those the lexicographic order picks."""


def _asd_results(p: _Problem, v_parts, report: RuleReport, tol, w_parts=None):
    """(dini, forward Jacobian) from the public API; also forward == reverse and dini == J v.

    ``w_parts`` is the second direction of the lexicographic sequence, for ties that persist
    along ``v``.
    """
    argnums, args = p.argnums, p.args
    value, dini = directional(p.fn, argnums)(*args, tuple(v_parts))
    seq = [tuple(v_parts)] + ([] if w_parts is None else [tuple(w_parts)])
    jf = jacobian(p.fn, argnums, directions=seq, mode="forward")(*args)
    jr = jacobian(p.fn, argnums, directions=seq, mode="reverse")(*args)
    out_size = int(np.size(value))
    jf, jr = p.joint(jf, out_size), p.joint(jr, out_size)
    v = np.concatenate([d.ravel() for d in v_parts]) if v_parts else np.zeros(0)
    ok, why = _close(jr, jf, *tol)
    if not ok:
        _fail(p, "forward == reverse", "the Jacobian pushed forward (mode='forward') equals "
              "the one pulled back (mode='reverse')", v, jf, jr, why)
    report.ran("forward == reverse")
    ok, why = _close(np.ravel(dini), jf @ v, *tol)
    if not ok:
        _fail(p, "dini == J v", "the Dini derivative is the selected branch's Jacobian "
              "applied to the direction (paper: x_dot_k = u_k . x_dot_parents)", v,
              jf @ v, np.ravel(dini), why)
    report.ran("dini == J v")
    return value, np.asarray(dini), jf, v


def _exact_oracle(p: _Problem, v):
    """(f'(x; v), lim J f(x + δv) or None at a degenerate tie) from the Fraction oracle."""
    dini = np.asarray(exact_oracle.directional_derivative(p.flat_reference, p.z, v),
                      dtype=object)
    try:
        jac = exact_oracle.limiting_jacobian(p.flat_reference, p.z, v)
    except exact_oracle.DegenerateTie:
        return dini, None
    return dini, jac.reshape(-1, p.n)


def _mp_values(p: _Problem, z) -> np.ndarray:
    out = np.asarray(p.flat_reference(precise_array(z)), dtype=object)
    flat = np.empty(out.size, dtype=object)
    flat[:] = [to_mpf(e) for e in out.flat]
    return flat


def _mp_oracle(p: _Problem, v):
    """The same two quantities by one-sided differences at 80 digits (δ = 1e-30, h = 1e-45)."""
    with mpmath.workdps(DPS):
        z = np.array([to_mpf(a) for a in p.z], dtype=object)
        w = np.array([to_mpf(a) for a in v], dtype=object)
        f0 = _mp_values(p, z)
        dini = (_mp_values(p, z + DINI_STEP * w) - f0) / DINI_STEP
        base = z + DINI_STEP * w
        fb = _mp_values(p, base)
        cols = []
        for i in range(p.n):
            step = base.copy()
            step[i] = step[i] + JACOBIAN_STEP
            cols.append((_mp_values(p, step) - fb) / JACOBIAN_STEP)
        jac = np.stack(cols, axis=1) if cols else np.zeros((f0.size, 0), dtype=object)
        return (np.array([float(d) for d in dini]),
                np.array([[float(e) for e in row] for row in jac]).reshape(f0.size, p.n))


def _pick_oracle(p: _Problem, exact, v) -> tuple[str, Any, Any]:
    if exact is not False:
        try:
            return ("exact", *_exact_oracle(p, v))
        except (TypeError, ZeroDivisionError) as e:
            if exact:
                raise TypeError(
                    f"check_rule({p.name}, exact=True): the reference does not evaluate on "
                    f"the exact oracle's power series ({e}). exact=True needs a plain numpy "
                    "reference built from + - * /, integer powers, abs, maximum, minimum, "
                    "where and indexing; pass exact=False for transcendental functions."
                ) from e
    try:
        return ("mpmath", *_mp_oracle(p, v))
    except (TypeError, AttributeError) as e:
        raise TypeError(
            f"check_rule({p.name}): the reference cannot run on object arrays of "
            f"high-precision numbers ({e}). Pass reference=<a plain numpy function of the "
            "same arguments> that uses numpy ufuncs and operators only."
        ) from e


def _default_tol(p: _Problem, rtol, atol) -> tuple[float, float]:
    with np.errstate(all="ignore"):
        value = np.asarray(p.reference(*p.args))
    dtypes = [x.dtype for x in p.xs] + [value.dtype]
    low = any(np.finfo(d).bits < 64 for d in dtypes if np.issubdtype(d, np.floating))
    r = (1e-4 if low else 1e-10) if rtol is None else rtol
    return r, r if atol is None else atol


def _directions(p: _Problem, direction, directions, n_directions, rng) -> list[list]:
    given = [direction] if direction is not None else list(directions or ())
    if not given:
        return [[dyadic_direction(x.shape, rng) for x in p.xs] if p.n else []
                for _ in range(n_directions)]
    out = []
    for d in given:
        parts = [d] if len(p.xs) == 1 else list(d)
        if len(parts) != len(p.xs):
            raise ValueError(f"a direction needs one array per differentiated argument "
                             f"({len(p.xs)}), got {len(parts)}")
        parts = [np.asarray(a, dtype=float).reshape(x.shape) if np.size(a) == x.size else
                 np.broadcast_to(np.asarray(a, dtype=float), x.shape).copy()
                 for a, x in zip(parts, p.xs, strict=True)]
        out.append(parts)
    return out


def check_rule(
    fn: Callable,
    *args: Any,
    direction: Any = None,
    directions: Sequence[Any] | None = None,
    n_directions: int = 2,
    seed: int | None = 0,
    reference: Callable | None = None,
    exact: bool | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    argnums: int | Sequence[int] | None = None,
    name: str | None = None,
) -> RuleReport:
    """Check asd's derivatives of ``fn`` at ``args`` against an independent oracle.

    ``fn`` is built from asd primitives (a primitive, a library function or a small
    composition) and returns one array. ``argnums`` (default: every argument) picks the
    differentiated arguments; ``direction`` is one direction (an array, or a tuple of arrays
    for several arguments), ``directions`` several; otherwise ``n_directions`` random nonzero
    dyadic directions drawn with ``seed``. ``reference`` is a plain numpy function of the
    same arguments (default ``fn`` itself on plain arrays); the oracle runs it on object
    arrays. ``exact=True`` demands the exact Fraction oracle (piecewise-polynomial
    references), ``False`` the mpmath one, ``None`` tries exact and falls back.
    Tolerances default to 1e-10 (1e-4 when float32 is involved), relative to
    ``max(1, |expected|)``.

    Raises ``AssertionError`` naming the failed check, the point, the direction, what was
    expected and what came back. Returns a `RuleReport` of the checks run.

    >>> import numpy as np, asd
    >>> from asd.testing import check_rule
    >>> report = check_rule(asd.relu, np.array([0.0, -1.0, 2.0]),
    ...                     direction=np.array([-1.0, 0.0, 1.0]),
    ...                     reference=lambda x: np.maximum(x, 0.0))
    >>> report.oracle, report.checks["jacobian"]
    ('exact', 1)
    >>> check_rule(np.log, np.float32(0.5)).oracle
    'mpmath'
    """
    label = name or getattr(fn, "__name__", None) or getattr(fn, "name", None) or repr(fn)
    p = _Problem(fn, args, argnums, reference, label)
    rng = np.random.default_rng(seed)
    report = RuleReport(label)
    tol = _default_tol(p, rtol, atol)
    for v_parts in _directions(p, direction, directions, n_directions, rng):
        trace, out = _trace(p, v_parts)
        if not isinstance(out, Tracer):
            raise TypeError(f"check_rule({label}): fn returned {type(out).__name__}, not one "
                            "traced array; check one output at a time")
        _check_maps(p, trace, rng, tol, report)
        _check_value(p, out.value, tol)
        report.ran("value")
        # A tie persisting along v is decided by a second direction w (the tie contract): the
        # Jacobian is then the limit along v + ηw for small η, which the oracle checks.
        w_parts = None
        if any(how in ("lexicographic", "flat") for _, how in trace.decisions):
            w_parts = [rng.choice([-1.0, -0.5, 0.5, 1.0], size=np.shape(x)) for x in p.xs]
        value, dini, jac, v = _asd_results(p, v_parts, report, tol, w_parts)
        _check_value(p, value, tol)
        oracle, want_dini, want_jac = _pick_oracle(p, exact, v)
        if w_parts is not None:
            w = np.concatenate([np.ravel(d) for d in w_parts])
            want_jac = _pick_oracle(p, exact, v + LEX_STEP * w)[2]
        report.oracle = oracle
        src = "the exact Fraction oracle" if oracle == "exact" else "mpmath at 80 digits"
        ok, why = _close(dini, np.reshape(want_dini, np.shape(dini)), *tol)
        if not ok:
            _fail(p, "dini", "asd.directional(f)(x, v) is the one-sided derivative "
                  f"lim (f(x + δv) - f(x)) / δ as δ ↓ 0 (expected from {src})", v,
                  want_dini, dini, why)
        report.ran("dini")
        if want_jac is None:
            report.skipped.append(f"jacobian along v = {_fmt(v)}: a degenerate tie, so the "
                                  "limiting Jacobian is not determined by v")
        else:
            ok, why = _close(jac, want_jac, *tol)
            if not ok:
                _fail(p, "jacobian", "asd.jacobian(f, direction=v)(x) is the limiting "
                      f"Jacobian lim J f(x + δv) as δ ↓ 0 (expected from {src}); a wrong "
                      "entry means a rule took a branch the ray x + δv does not enter", v,
                      want_jac, jac, why)
            report.ran("jacobian")
        report.directions += 1
    return report

