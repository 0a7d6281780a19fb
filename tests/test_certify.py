"""asd.certify: CQ, continuity and piece checks on branching programs, with witnesses.

Every rejection must come with a witness that really shows the failure: the constraint
and its gradient vanish there (CQ), or the two pieces differ there while the constraint
is zero (continuity). Those witnesses are re-checked here with sympy, independently of
how the certifier found them.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import asd


def relu(x):
    return x if asd.branch(x) else 0


def relu_cubed(x):
    return x if asd.branch(x ** 3) else 0


def heaviside(x):
    return 1 if asd.branch(x) else 0


def clip(x):
    if asd.branch(x + 1):
        return 1 if asd.branch(x - 1) else x
    return -1


def clip_traced(x, lo, hi):
    m = x if asd.branch(x - lo) else lo
    return m if asd.branch(hi - m) else hi


def max3(a, b, c):
    if asd.branch(a - b):
        return a if asd.branch(a - c) else c
    return b if asd.branch(b - c) else c


def max3_broken(a, b, c):
    if asd.branch(a - b):
        return a if asd.branch(a - c) else c
    return b if asd.branch(b - c) else c + 1


def disk(x, y):
    return 1 if asd.branch(x * x + y * y - 1) else x * x + y * y


def saddle(x, y):
    return x if asd.branch(x * y) else x + x * y


def square_kink(x):
    return x * x if asd.branch(x * x - 1) else 1


def square_jump(x):  # continuous at x = 1, a jump at x = -1
    return x if asd.branch(x * x - 1) else 1


def huber(x):
    if asd.branch(x - 1):
        return x - 0.5
    return x * x / 2 if asd.branch(x + 1) else -x - 0.5


def jump_2d(x, y):
    return x if asd.branch(x - y) else y + 1


@pytest.mark.parametrize("program", [relu, clip, clip_traced, max3, disk, square_kink, huber])
def test_qualified_continuous_programs_pass(program):
    cert = asd.certify(program)
    assert cert.ok, str(cert)
    assert cert.checks == {"pieces": "proved", "CQ": "proved", "continuity": "proved"}
    assert "OK" in str(cert)


def _check_cq_witness(cert, failure):
    point = {sp.Symbol(k, real=True): sp.nsimplify(v) for k, v in failure.witness.items()}
    hits = [h for h in cert.constraints
            if h.subs(point) == 0 and all(sp.diff(h, s).subs(point) == 0 for s in cert.symbols)]
    assert hits, f"{failure.witness} is not a CQ failure of any constraint"


def test_cubed_constraint_fails_cq_at_zero():
    cert = asd.certify(relu_cubed)
    assert not cert.ok
    assert [(f.kind, f.witness) for f in cert.failures] == [("cq", {"x": 0})]
    assert cert.checks["continuity"] == "proved"
    _check_cq_witness(cert, cert.failures[0])
    assert "REJECTED" in str(cert) and "x = 0" in str(cert)


def test_saddle_constraint_fails_cq_at_the_origin():
    cert = asd.certify(saddle)
    assert [f.kind for f in cert.failures] == ["cq"]
    assert cert.failures[0].witness == {"x": 0, "y": 0}
    _check_cq_witness(cert, cert.failures[0])


def test_square_constraint_is_qualified_where_it_is_zero():
    assert asd.certify(lambda x: x if asd.branch(x * x - 1) else 1).checks["CQ"] == "proved"
    assert not asd.certify(lambda x: x if asd.branch(x * x) else 0).ok


def _check_jump_witness(cert, failure):
    point = {s: sp.nsimplify(failure.witness[str(s)]) for s in cert.symbols}
    values = {p.piece.subs(point) for p in cert.paths
              if all((h.subs(point) >= 0) if d else (h.subs(point) <= 0)
                     for h, d in p.constraints)}
    assert len(values) > 1, f"pieces agree at {failure.witness}: {values}"


def test_jump_on_one_of_two_boundary_points():
    cert = asd.certify(square_jump)
    assert [(f.kind, f.witness) for f in cert.failures] == [("continuity", {"x": -1})]
    _check_jump_witness(cert, cert.failures[0])


def test_heaviside_fails_continuity_at_its_boundary():
    cert = asd.certify(heaviside)
    assert [(f.kind, f.witness) for f in cert.failures] == [("continuity", {"x": 0})]
    assert cert.checks["CQ"] == "proved"
    _check_jump_witness(cert, cert.failures[0])


@pytest.mark.parametrize("program", [max3_broken, jump_2d])
def test_multivariate_jumps_are_found_with_witnesses(program):
    cert = asd.certify(program)
    assert not cert.ok
    assert {f.kind for f in cert.failures} == {"continuity"}
    for f in cert.failures:
        assert f.witness is not None
        _check_jump_witness(cert, f)


def test_paths_and_constraints_are_listed():
    cert = asd.certify(clip_traced)
    assert len(cert.paths) == 4
    x, lo, hi = cert.symbols
    up_to_sign = {frozenset({h, -h}) for h in cert.constraints}
    assert up_to_sign == {frozenset({h, -h}) for h in (x - lo, hi - x, hi - lo)}
    assert {p.piece for p in cert.paths} == {x, lo, hi}


def test_infeasible_paths_are_pruned():
    def mid3(a, b, c):
        return a + b + c - max3(a, b, c) + max3(-a, -b, -c)

    cert = asd.certify(mid3)
    assert cert.ok
    assert len(cert.paths) < 16  # 4 x 4 paths enumerated, the contradictory ones dropped


def test_smooth_pieces_need_a_declaration():
    def elu(x):
        return x if asd.branch(x) else np.exp(x) - 1

    rejected = asd.certify(elu)
    assert [f.kind for f in rejected.failures] == ["model"]
    assert "smooth" in str(rejected.failures[0])
    accepted = asd.certify(elu, smooth={"exp"})
    assert accepted.ok, str(accepted)
    assert asd.certify(asd.branching(elu, smooth={"exp"})).ok

    def exp_jump(x):
        return x if asd.branch(x) else np.exp(x)

    cert = asd.certify(exp_jump, smooth={"exp"})
    assert [(f.kind, f.witness) for f in cert.failures] == [("continuity", {"x": 0})]


def test_programs_outside_the_model_are_rejected():
    cert = asd.certify(lambda x: x if asd.branch(x) else 1 / x)
    assert [f.kind for f in cert.failures] == ["model"]


def test_certify_accepts_decorated_programs():
    prim = asd.branching(max3)
    cert = asd.certify(prim)
    assert cert.ok and cert.name == "max3"


def test_constant_conditions_are_not_constraints():
    def running_max(x):  # max(x, 2) written with a loop; later conditions become constants
        k = 0
        while k < 3:
            x = x if asd.branch(x - k) else k + 0 * x
            k += 1
        return x

    cert = asd.certify(running_max)
    assert cert.ok, str(cert)
    (x,) = cert.symbols
    assert set(cert.constraints) == {x, x - 1, x - 2}


def test_jump_on_a_curved_boundary():
    cert = asd.certify(lambda x, y: x * y if asd.branch(x * x - y) else y * y)
    assert cert.checks["CQ"] == "proved"
    assert [f.kind for f in cert.failures] == ["continuity"]
    _check_jump_witness(cert, cert.failures[0])


def test_non_polynomial_constraint_with_a_declared_function():
    cert = asd.certify(lambda x: x if asd.branch(np.exp(x) - 1) else 0, smooth={"exp"})
    assert cert.ok, str(cert)
