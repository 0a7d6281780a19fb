"""The fuzz campaign through ``asd.torch`` and ``asd.jax``: the same programs in the frameworks'
own operators (`ops.apply_framework`), against the same oracle and the framework's own value.

Checks, each an `harness.Outcome`:

- ``<fw>.value``: the framework's own value of its spelling equals numpy's (a check of the
  spelling table, so a mismatch is reported as ``skipped``, never blamed on asd);
- ``<fw>.function``: ``asd.<fw>.function(fn, seed=s)``: its forward equals the framework's own
  value (bit for bit where the exact oracle applies), and its backward of a cotangent ``ct``
  equals ``ct . J`` for the limiting Jacobian ``J`` along the direction asd draws from ``s``
  (`oracle.drawn_direction`), exact or mpmath;
- ``<fw>.subgrad``: ``asd.<fw>.subgrad(fn, direction=v)`` of scalar programs equals the limiting
  gradient along ``v``; where ``v`` leaves a tie open (asd then draws further directions from its
  seed) the answer must still satisfy ``<g, v> = f'(x; v)``, which holds for every lexicographic
  element.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np

from asd.testing.exact import as_fractions
from tests.fuzz import harness, ops, oracle
from tests.fuzz.harness import Case, Expect, Outcome, _compare, _guard, _no_number
from tests.programs import Program

FRAMEWORKS = ("torch", "jax")


def frontend(framework: str) -> Any:
    """``asd.torch`` or ``asd.jax`` (imported on first use, like the frameworks)."""
    import importlib

    return importlib.import_module(f"asd.{framework}")


def framework_function(program: Program, framework: str) -> Callable[[Any], Any]:
    """``program`` as a function of one framework array, in the framework's operators."""

    def fn(x: Any) -> Any:
        values = [x]
        for op in program.ops:
            values.append(ops.apply_framework(op, values, framework))
        out = values[-1]
        if program.reduce and program.shapes[-1] != ():
            out = out.sum()
        return out

    fn.__name__ = f"fuzzed_{framework}"
    return fn


def _context(framework: str) -> Any:
    if framework == "jax":
        import jax

        return jax.enable_x64(True)
    return nullcontext()


def _array(framework: str, a: np.ndarray, requires_grad: bool = False) -> Any:
    if framework == "torch":
        import torch

        t = torch.tensor(np.asarray(a, dtype=np.float64))
        return t.requires_grad_(requires_grad)
    import jax.numpy as jnp

    return jnp.asarray(np.asarray(a, dtype=np.float64))


def _numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach()
    return np.asarray(a)


def _oracle_along(case: Case, expected: Expect, d: np.ndarray) -> tuple[Any, Any, str]:
    """The limiting Jacobian along ``d`` (exact, or mpmath at numpy's floats)."""
    if expected.exact is not None:
        jac, w = oracle.exact_jacobian(case.program, case.x, d)
        if jac is None:
            return None, None, "exact: the drawn direction leaves a tie open"
        return jac, w, ""
    h = oracle.hybrid_oracle(case.program, case.x, d, np.float64)
    if h.jacobian is None:
        return None, None, f"mpmath: {h.undecided or h.singular}"
    return h.jacobian, None, ""


def rounding_difference(case: Case, framework: str) -> str | None:
    """The first step whose value the framework rounds otherwise than numpy (``torch.sinh(2)``
    is 1 ulp above ``np.sinh(2)``), or None. The oracle decides ties at numpy's floats: where
    the framework's program rounds a tied step off its tie, that is another program, whose
    derivative there is its own (asd.<fw> differentiates the framework's program)."""
    want = oracle.float_values(case.program, case.x)
    got = [_array(framework, case.x)]
    with _context(framework), np.errstate(all="ignore"):
        for k, op in enumerate(case.program.ops):
            got.append(ops.apply_framework(op, got, framework))
            g, w = _numpy(got[-1]), np.asarray(np.ma.getdata(want[k + 1]))
            if g.shape == w.shape and not np.array_equal(g, w, equal_nan=True):
                at = np.flatnonzero(np.ravel(g != w) & ~np.ravel(np.isnan(g) & np.isnan(w)))
                i = int(at[0]) if at.size else 0
                return (f"step {k + 1} ({op.name}) rounds otherwise in {framework}: "
                        f"{np.ravel(g)[i]!r} against numpy's {np.ravel(w)[i]!r}")
    return None


def _values_agree(got: Any, want: Any, expected: Expect) -> bool:
    got, want = np.asarray(got, dtype=float), np.asarray(np.ma.getdata(want), dtype=float)
    if got.shape != want.shape:
        return False
    if expected.exact is not None:
        return bool(np.array_equal(got, want))
    return bool(np.allclose(got, want, rtol=1e-12, atol=1e-12))


def check_value(case: Case, expected: Expect, framework: str) -> list[Outcome]:
    """The spelling table against numpy: a mismatch is the table's, not asd's."""
    name = f"{framework}.value"
    fn = framework_function(case.program, framework)
    try:
        with _context(framework):
            own = _numpy(fn(_array(framework, case.x)))
    except Exception as e:
        return [Outcome(name, "skipped", f"the framework rejects its spelling: {e}"[:200],
                        "spelling rejected")]
    if np.iscomplexobj(np.ma.getdata(expected.value)) and not np.iscomplexobj(own):
        # the spelling casts a complex constant to the framework's real dtype: another
        # program than numpy's, whose complex result is what asd must refuse
        return [Outcome(name, "skipped", f"numpy's result is complex, {framework}'s real",
                        "spelling differs")]
    if not _values_agree(own, expected.value, expected):
        return [Outcome(name, "skipped", f"{framework} {own.tolist()} != numpy "
                        f"{np.asarray(expected.value).tolist()}", "spelling differs")]
    return [Outcome(name, "ok")]


def check_function(case: Case, expected: Expect, framework: str) -> list[Outcome]:
    name = f"{framework}.function"
    fn = framework_function(case.program, framework)
    seed = case.seed
    ct = harness.cotangent(case, np.shape(expected.value))

    def body() -> list[Outcome]:
        with _context(framework):
            x = _array(framework, case.x, requires_grad=True)
            own = _numpy(fn(_array(framework, case.x)))
            if framework == "torch":
                g = frontend("torch").function(fn, seed=seed)
                y = g(x)
                (y * _array(framework, ct)).sum().backward()
                # None: no gradient path reaches x (a step function is all the output sees
                # of it), as torch leaves .grad; the zero gradient, compared as such
                value = _numpy(y)
                grad = np.zeros(np.shape(case.x)) if x.grad is None else _numpy(x.grad)
            else:
                import jax

                g = frontend("jax").function(fn, seed=seed)
                y, pullback = jax.vjp(g, x)
                (grad,) = pullback(_array(framework, ct).astype(y.dtype))
                value, grad = _numpy(y), _numpy(grad)
        # the forward's value at a jump is the program's own (asd.jax.function refuses in
        # the pullback, asd.torch.function in the forward): no derivative may come back
        _no_number(name, expected)
        assert _values_agree(value, own, expected), (
            f"{name} value: asd {value.tolist()} != {framework} {own.tolist()}")
        (d,) = oracle.drawn_direction(seed, [np.shape(case.x)])
        jac, w, why = _oracle_along(case, expected, d)
        if jac is None or w is not None:
            return [Outcome(name, "skipped", why or "a tie open along the drawn direction",
                            "undecided")]
        cts = as_fractions(ct) if expected.exact is not None else np.vectorize(
            oracle.mp_value, otypes=[object])(ct.astype(object))
        want = oracle.contract(jac, cts, len(case.program.shapes[0]))
        if expected.exact is not None:
            assert oracle.close(grad, want, harness._scale(want), np.float64), (
                f"{name} gradient: asd {grad.tolist()} != exact {harness._show(want)} "
                f"(cotangent {ct.tolist()}, seed {seed})")
        else:
            assert oracle.close(grad, want, _mp_scale(jac), np.float64), (
                f"{name} gradient: asd {grad.tolist()} != mpmath {harness._show(want)}")
        return [Outcome(name, "ok")]

    return _differently_rounded(case, framework, _guard(name, expected, body))


def _differently_rounded(case: Case, framework: str, outcomes: list[Outcome]) -> list[Outcome]:
    """A wrong gradient where the framework rounds a step otherwise than numpy is not
    judged: the oracle's ties are numpy's (`rounding_difference`)."""
    for o in outcomes:
        if o.status == "wrong" and (why := rounding_difference(case, framework)):
            o.status, o.detail, o.kind = "skipped", f"{why} ({o.detail[:160]})", "rounding"
    return outcomes


def _mp_scale(jac: Any) -> Any:
    return max((abs(e) for e in np.ravel(np.asarray(jac, dtype=object))), default=0)


def check_subgrad(case: Case, expected: Expect, framework: str) -> list[Outcome]:
    if not case.program.reduce:
        return []
    name = f"{framework}.subgrad"
    fn = framework_function(case.program, framework)

    def body() -> list[Outcome]:
        with _context(framework):
            x = _array(framework, case.x)
            v = _array(framework, case.v)
            if framework == "torch":
                g = _numpy(frontend("torch").subgrad(fn, x, direction=v, seed=case.seed))
            else:
                g = _numpy(frontend("jax").subgrad(fn, direction=v, seed=case.seed)(x))
        _no_number(name, expected)
        jac, w, why = harness._jacobian_oracle(case, expected)
        if jac is not None and w is None:
            _compare(f"{name} gradient", g, case, expected, jac, jac,
                     expected.jacobian_float_path)
            return [Outcome(name, "ok")]
        if expected.exact is None:
            return [Outcome(name, "skipped", why, "undecided")]
        # v leaves a tie open: any lexicographic element satisfies <g, v> = f'(x; v), exactly
        # where g's entries are exact, within rounding otherwise (np.average's 4 / 8.5)
        slope = expected.exact.derivative[()]
        got = oracle.inner(as_fractions(g), case.v)
        assert harness._inner_agrees(g, case.v, case), (
            f"{name}: <g, v> = {float(got)} but f'(x; v) = {float(slope)} (g = {g.tolist()}, "
            "v leaves a tie open)")
        return [Outcome(name, "ok", "lexicographic: <g, v> = f'(x; v)")]

    return _differently_rounded(case, framework, _guard(name, expected, body))


UNMAPPED = ("has no asd mapping", "rounding_mode='floor' (a step function)")
"""asd.torch / asd.jax refuse operations they have no mapping for with UnsupportedError, as
their module docstrings say: a coverage gap (reported by the campaign, op by op), not a wrong
number."""


def _unmapped(outcomes: list[Outcome]) -> list[Outcome]:
    for o in outcomes:
        if o.status == "bad-refusal" and o.kind.startswith("UnsupportedError") and any(
                u in o.detail for u in UNMAPPED):
            o.status, o.detail = "refused", f"unmapped framework op: {o.detail[:120]}"
    return outcomes


_WARM: set[str] = set()


def warm_up(framework: str) -> None:
    """Import and run the framework's importer once, before any check runs under a time
    limit: a limit that fired inside a first import would leave the module half-imported."""
    if framework in _WARM:
        return
    program = Program((ops.Op("relu", (0,)),), ((2,), (2,)), True)
    fn = framework_function(program, framework)
    with _context(framework):
        x = _array(framework, np.zeros(2), requires_grad=True)
        if framework == "torch":
            frontend("torch").function(fn, seed=0)(x).backward()
            frontend("torch").subgrad(fn, _array(framework, np.zeros(2)), direction=_array(
                framework, np.ones(2)))
        else:
            import jax

            jax.grad(frontend("jax").function(fn, seed=0))(x)
            frontend("jax").subgrad(fn, direction=_array(framework, np.ones(2)))(x)
    _WARM.add(framework)


TIME_LIMIT = 30.0
"""Seconds a framework check may take (torch.export alone takes a second or two)."""


def run_framework_checks(case: Case, framework: str) -> tuple[Expect | None, list[Outcome]]:
    """The framework checks of ``case`` (its program must use ops with ``framework``
    spellings: `ops.framework_names`)."""
    warm_up(framework)
    limit, harness.TIME_LIMIT = harness.TIME_LIMIT, max(harness.TIME_LIMIT, TIME_LIMIT)
    try:
        return _run_framework_checks(case, framework)
    finally:
        harness.TIME_LIMIT = limit


def _run_framework_checks(case: Case, framework: str) -> tuple[Expect | None,
                                                                list[Outcome]]:
    expected, skipped = harness.timed_expect(case)
    if expected is None:
        return None, skipped
    outcomes = check_value(case, expected, framework)
    if outcomes[0].status != "ok":
        return expected, outcomes
    outcomes += _unmapped(check_function(case, expected, framework))
    outcomes += _unmapped(check_subgrad(case, expected, framework))
    return expected, outcomes


def framework_cases(framework: str, **kwargs: Any) -> Any:
    """`harness.cases` over the ops spelled in ``framework``, one float64 array argument."""
    return harness.cases(names=tuple(n for n in ops.framework_names(framework)
                                     if n not in ops.UNPLANTED),
                         structures=("array",), dtypes=("float64",), **kwargs)


