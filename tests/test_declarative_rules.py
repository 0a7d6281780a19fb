"""Rules declare their ties and refusals; the engine decides them (issue 24, DESIGN.md).

No function in the library may branch in Python on a value computed from the data: a tie is
stated to `asd.extend.ray_compare` / `ray_nonnegative` (the engine decides it, exactly when
eager, as array operations when staged), a refusing check to `asd.extend.refuse_where`. A
Python branch on data would synchronise a device per node and cannot run inside ``jax.jit``.
This test reads the library's source (the AST): an ``if``, ``while``, conditional expression
or ``assert`` whose test calls ``.any()``, ``.all()``, ``.item()``, ``bool()``, ``any()``,
``all()`` or a namespace's ``any``/``all``/``count_nonzero`` is reported with its function
and line. Branches on shapes, dtypes, parameters and the array library stay allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parent.parent / "library"

ALLOWED: dict[str, str] = {
    # "module.py:function": why this branch never reads a value a sweep traces
    # exact paths, run eagerly on host values only where a rule's `exact_where` found a tie
    # (a staged sweep counts those ties undecided and never enters them):
    "projections.py:ray_signs": "exact path: the line's rationals, then the input's series",
    "projections.py:_soc_tied": "exact path: a second-order cone's boundary and apex",
    "projections.py:_cone_escape": "exact path: distance's residual on a cone's boundary",
    "projections.py:_psd_escape": "exact path: distance's residual on the PSD cone",
    "spectral.py:limit_eigh": "exact path: Kato's reduction of a tied eigenvalue cluster",
    "spectral.py:reduce_cluster": "exact path: one cluster's Riccati series (Kato)",
    "spectral.py:_inverse_sqrt": "exact path: a matrix series' binomial root (Kato)",
    "statistics.py:_refuse": "numpy's argument checks while tracing (not a rule): eagerly a "
                             "read_value guard, staged no read (counted as refuse_where does)",
    # -- piecewise, discontinuous, elementwise, structure, smooth (h24b) --
    "elementwise.py:_finite": "fmax/fmin read their operands' finiteness when the program "
                              "is traced (read_value: a guard asd.jit re-checks), to refuse "
                              "NaN semantics numpy's fmax has and maximum lacks (a NaN "
                              "in a constant operand is replaced, not tested)",
    "smooth.py:push_at": "Embed.push_at answers the eager numpy sweep's demand for some "
                         "tangent entries (Trace.tangent_at, a host mask); staged sweeps "
                         "push full tangents and never call it",
    "smooth.py:_root_map": "the exact series of a root at 0 (root_limit) runs eagerly on the "
                           "host; a staged sweep returns before that branch, counting the "
                           "zeros undecided (refuse_where)",
    "structure.py:__getitem__": "r_ / c_ test their index items' types (a directive string)",
    "structure.py:_spacings": "numpy.gradient tests whether its spacings are traced (a type)",
    "structure.py:refused": "a refused numpy function tests whether an argument is traced",
}
VALUE_TESTS = {"any", "all", "item", "count_nonzero"}
BUILTIN_TESTS = {"bool", "any", "all"}


def _value_test(node: ast.AST) -> bool:
    """Whether an expression reads data to decide: a call of a reduction to a Python bool."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        if isinstance(func, ast.Attribute) and func.attr in VALUE_TESTS:
            return True
        if isinstance(func, ast.Name) and func.id in BUILTIN_TESTS:
            return True
    return False


def branches_on_values(path: Path) -> list[str]:
    """``function:line`` of every branch on data in the module at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                else function
            test = getattr(child, "test", None)
            if isinstance(child, ast.If | ast.While | ast.IfExp | ast.Assert) and \
                    _value_test(test) and f"{path.name}:{name}" not in ALLOWED:
                found.append(f"{path.name}:{name}:{child.lineno}")
            visit(child, name)

    visit(tree, "<module>")
    return found


@pytest.mark.parametrize("path", sorted(LIBRARY.glob("*.py")), ids=lambda p: p.name)
def test_no_rule_branches_on_a_value(path):
    found = branches_on_values(path)
    assert not found, (
        f"{len(found)} Python branches on data in {path.name}: state ties to ray_compare / "
        f"ray_nonnegative and checks to refuse_where instead:\n  " + "\n  ".join(found))


def test_the_scan_finds_a_branch_on_a_value(tmp_path):
    """The checker itself: a rule that tests ``tie.any()`` is found, a shape test is not."""
    module = tmp_path / "rules.py"
    module.write_text("def rule(xs, dxs):\n"
                      "    tie = xs[0] == 0\n"
                      "    if tie.any():\n"
                      "        pass\n"
                      "    if xs[0].ndim == 2:\n"
                      "        pass\n"
                      "    return xs[0] if bool(xs[0].all()) else 0\n")
    assert branches_on_values(module) == ["rules.py:rule:3", "rules.py:rule:7"]
