"""asd.proofs: every library primitive has a certificate and every certificate holds.

Also the negative controls (a certificate that cannot fail proves nothing): a hand-written
rule with a framework-style fixed choice at the kink, and a smooth rule with a wrong
derivative formula, must both be caught. And the headline cross-check of issue 4 as a
hypothesis test: the rules Algorithm 7 derives for relu, abs, max and clip agree with the
hand-written library rules on kink-heavy points (values, Dini derivatives against the exact
oracle, branch gradients along generic directions).
"""

from __future__ import annotations

import numpy as np
import pytest
from asd.proofs import piecewise as pw
from asd.proofs.registry import ProgramProof, SymbolicProof, compare_rules
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd import proofs
from asd.extend import Diagonal, Primitive, defsmooth
from asd.testing import exact
from asd.testing.strategies import directions, kink_arrays, tied_arrays


@pytest.fixture(scope="module")
def rows():
    return proofs.run_all()


def test_every_library_primitive_has_a_certificate():
    assert proofs.uncovered() == []


def test_the_enumeration_sees_the_library():
    names = {p.name for _, p in proofs.library_primitives().values()}
    assert {"relu", "abs", "maximum", "clip", "sort", "exp", "greater"} <= names


def test_every_certificate_holds(rows):
    bad = [(r.primitive, r.detail) for r in rows if not r.ok]
    assert bad == []
    assert len(rows) == len(proofs.proofs())


def test_branching_certificates_are_proofs(rows):
    programs = [r for r in rows if r.gradient.startswith("auto = rule")]
    assert len(programs) >= 15
    assert all(r.cq == "proved" for r in programs)
    assert all(r.continuity == "proved" for r in programs if r.primitive != "where")


# ----- negative controls -----

frozen_relu_p = Primitive("frozen_relu", lambda x: np.maximum(x, 0))


@frozen_relu_p.defrule
def frozen_relu_rule(xs, dxs):  # what PyTorch does: slope 0 at 0, whatever the direction
    (x,) = xs
    return np.maximum(x, 0), Diagonal((np.asarray(x) > 0).astype(float), np.shape(x))


def test_a_fixed_kink_choice_is_caught():
    proof = ProgramProof((frozen_relu_p,), pw.relu, frozen_relu_p, pw.univariate_points([0.0], 1))
    row = proof.run()
    assert not row.ok and row.gradient == "MISMATCH"
    assert "differ" in row.detail  # its Dini derivative and branch gradient at 0


def test_an_unqualified_program_is_caught():
    relu_cubed = asd.branching(lambda x: x if asd.branch(x ** 3) else 0)
    row = ProgramProof((asd.library.piecewise.relu_p,), relu_cubed, asd.relu,
                       pw.univariate_points([0.0], 2)).run()
    assert not row.ok and row.cq == "failed"


def test_a_wrong_derivative_formula_is_caught():
    bad_tanh = defsmooth("bad_tanh", np.tanh, lambda x, ans: 1 - ans)  # should be 1 - ans**2
    import sympy as sp

    row = SymbolicProof((bad_tanh,), bad_tanh, [(np.array([0.3, 0.8]),)],
                        lambda x: np.vectorize(sp.tanh, otypes=[object])(x)).run()
    assert not row.ok and row.gradient == "MISMATCH"


# ----- derived rules against hand-written ones, kink-heavy -----

def _agree(program, library, args, v, generic=True):
    why, n = compare_rules(program, library, [(args, v, generic)])
    assert why is None, why
    assert n == 1


def _nonzero(shape):
    return directions(shape, allow_zero_entries=False)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_relu_and_abs_agree_on_kinks(data):
    x = data.draw(kink_arrays((5,)))
    v = data.draw(_nonzero((5,)))
    _agree(pw.relu, asd.relu, (x,), (v,))
    _agree(pw.absolute, asd.abs, (x,), (v,))
    w = data.draw(directions((5,)))  # zeros allowed: values and Dini only
    _agree(pw.relu, asd.relu, (x,), (w,), generic=False)
    _, dini = asd.directional(lambda z: pw.absolute(z).sum())(x, w)
    assert dini == float(exact.directional_derivative(lambda z: np.sum(np.abs(z)), x, w))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_maximum_agrees_on_ties(data):
    ab = data.draw(tied_arrays((2, 4)))
    a, b = ab[0], ab[1]
    va, vb = data.draw(_nonzero((4,))), data.draw(_nonzero((4,)))
    generic = bool(np.all(va != vb))
    _agree(pw.maximum, asd.maximum, (a, b), (va, vb), generic)
    _agree(pw.minimum, asd.minimum, (a, b), (va, vb), generic)
    _, dini = asd.directional(lambda z: pw.maximum(z[0], z[1]).sum())(ab, np.stack([va, vb]))
    want = exact.directional_derivative(lambda z: np.sum(np.maximum(z[0], z[1])), ab,
                                        np.stack([va, vb]))
    assert dini == float(want)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_clip_agrees_on_its_bounds(data):
    xlh = data.draw(tied_arrays((3, 3)))
    v = [data.draw(_nonzero((3,))) for _ in range(3)]
    generic = bool(np.all((v[0] != v[1]) & (v[0] != v[2]) & (v[1] != v[2])))
    _agree(pw.clip, asd.clip, tuple(xlh), tuple(v), generic)


def test_a_broken_certificate_module_is_reported_not_raised(monkeypatch):
    def broken(name, *args, **kwargs):
        if name == "asd.proofs.norms":
            raise AttributeError("module 'asd.library.norms' has no attribute 'pnorm_p'")
        return real(name, *args, **kwargs)

    real = proofs.importlib.import_module
    monkeypatch.setattr(proofs.importlib, "import_module", broken)
    rows = proofs.run_all("norms")
    assert [(r.primitive, r.ok) for r in rows] == [("<norms certificates>", False)]
    assert "pnorm_p" in rows[0].detail


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_order_statistics_agree_on_ties(data):
    from asd.library import order
    from asd.proofs import order as po

    X = data.draw(tied_arrays((3, 4)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    v = tuple(rng.normal(size=4) for _ in range(3))  # generic: no tangent ties
    pts = [(tuple(X), v, True)]
    for program, library in [(po.max3, lambda M: order.amax(M, axis=0)),
                             (po.mid3, lambda M: order.median(M, axis=0)),
                             (po.min3, lambda M: order.sort(M, axis=0)[0]),
                             (po.top2_sum, lambda M: order.topk_sum(M, 2, axis=0))]:
        why, _ = compare_rules(program, library, pts, stacked=True)
        assert why is None, why
