"""asd.vjp: one sweep, then ``ct -> Jᵀ ct`` for any cotangent, where ``J`` is the limiting
Jacobian along the direction.

The oracle is the exact limiting Jacobian (`asd.testing.exact.limiting_jacobian`, Fractions
along ``x + δv``) on random vector programs at their kinks, contracted with random
cotangents; and, independently, `subgrad` of ``<ct, f>`` along the same direction, which
must select the same branches (a tie is decided by values and tangents, never by the
cotangent)."""

from fractions import Fraction
from functools import partial

import numpy as np
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

import asd
from asd.testing.exact import DegenerateTie, limiting_jacobian
from asd.testing.strategies import dyadics
from tests.programs import run, vector_programs


def contract(ct: np.ndarray, jac: np.ndarray) -> np.ndarray:
    """``ctᵀ J`` in exact rationals, as floats: ``J`` is ``out.shape + x.shape``."""
    cs = [Fraction(float(c)) for c in np.ravel(ct)]
    rows = jac.reshape(len(cs), -1)
    return np.asarray([float(sum((c * r for c, r in zip(cs, col, strict=True)), Fraction(0)))
                       for col in rows.T])


@settings(max_examples=120, deadline=None)
@given(vector_programs(), st.data())
def test_pullback_is_the_limiting_jacobian_transposed(case, data):
    program, x, v = case
    f = partial(run, program)
    value, pullback = asd.vjp(f, direction=v)(x)
    shape = np.shape(value)
    ct = np.asarray(data.draw(st.lists(dyadics(), min_size=int(np.prod(shape)),
                                       max_size=int(np.prod(shape)))), dtype=float)
    ct = ct.reshape(shape)
    got = pullback(ct)
    try:
        jac = limiting_jacobian(f, x, v)
    except DegenerateTie:
        reject()
    want = contract(ct, jac).reshape(np.shape(x))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(value, f(x))
    # the same branches as a sweep of the scalar <ct, f> along v
    g = asd.subgrad(lambda y: asd.numpy.sum(f(y) * ct), direction=v)(x)
    np.testing.assert_allclose(got, g, rtol=1e-12, atol=1e-12)


def test_one_sweep_serves_every_cotangent():
    calls = []

    def f(x):
        calls.append(1)
        return asd.relu(x) * np.array([1.0, 2.0, 3.0])

    x = np.array([0.0, 1.0, -1.0])
    _, pullback = asd.vjp(f, direction=np.array([1.0, 1.0, 1.0]))(x)
    first = pullback(np.array([1.0, 1.0, 1.0]))
    np.testing.assert_array_equal(first, [1.0, 2.0, 0.0])   # relu at 0 along +1: active
    np.testing.assert_array_equal(pullback(np.array([0.0, 5.0, 7.0])), [0.0, 10.0, 0.0])
    np.testing.assert_array_equal(pullback(np.array([1.0, 1.0, 1.0])), first)
    assert len(calls) == 1


def relu_net(params, x):
    w, b = params
    return {"h": asd.relu(w @ x + b), "s": asd.abs(x).sum()}


def test_structured_outputs_and_a_missing_cotangent():
    w = np.array([[1.0, -1.0, 0.0], [2.0, 0.0, 1.0]])
    b = np.array([0.0, -2.0])
    x = np.array([1.0, 1.0, 0.0])        # w @ x + b = [0, 0]: both relus at their kink
    v = np.array([1.0, -1.0, 2.0])       # w @ v = [2, 4] > 0: both active along v
    value, pullback = asd.vjp(relu_net, argnums=1, direction=v)((w, b), x)
    np.testing.assert_array_equal(value["h"], [0.0, 0.0])
    jac = asd.jacobian(relu_net, argnums=1, direction=v)((w, b), x)
    ch = np.array([3.0, -1.0])
    np.testing.assert_array_equal(pullback({"h": ch, "s": 2.0}), ch @ jac["h"] + 2 * jac["s"])
    np.testing.assert_array_equal(pullback({"h": ch, "s": None}), ch @ jac["h"])
    np.testing.assert_array_equal(pullback({"h": None, "s": 1.0}), jac["s"])
    with pytest.raises(asd.ShapeError, match="structure"):
        pullback(ch)
    with pytest.raises(asd.ShapeError, match="shape"):
        pullback({"h": np.ones(3), "s": 1.0})


def test_parameters_in_a_tuple_come_back_in_their_structure():
    w = np.array([[1.0, -1.0], [0.5, 2.0]])
    x = np.array([1.0, 1.0])             # w @ x = [0, 2.5]: the first relu at its kink
    _, pullback = asd.vjp(lambda w, x: asd.relu(w @ x), argnums=(0, 1),
                          direction=(-np.ones((2, 2)), np.zeros(2)))(w, x)
    gw, gx = pullback(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(gw, [[0.0, 0.0], [1.0, 1.0]])   # along -1: relu 0 dead
    np.testing.assert_array_equal(gx, w[1])


def test_a_compiled_vjp_replays_the_same_pullback():
    f = lambda x: asd.numpy.maximum(x, 0.0) * 3.0 + asd.abs(x)   # noqa: E731
    jitted = asd.jit(asd.vjp(f, direction=np.array([1.0, -1.0, 1.0])))
    plain = asd.vjp(f, direction=np.array([1.0, -1.0, 1.0]))
    for x in (np.array([1.0, -1.0, 0.0]), np.array([0.0, 0.0, 2.0])):
        (y1, p1), (y2, p2) = jitted(x), plain(x)
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(p1(np.array([1.0, 2.0, 3.0])),
                                      p2(np.array([1.0, 2.0, 3.0])))
    assert jitted.traces == 1


def test_torch_arguments_get_torch_cotangents():
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)
    v = torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64)
    value, pullback = asd.vjp(lambda x: asd.relu(x) * 2.0, direction=v)(x)
    assert isinstance(value, torch.Tensor)
    g = pullback(torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float64
    assert torch.equal(g, torch.tensor([0.0, 2.0, 0.0], dtype=torch.float64))
    x32 = x.float()      # a cotangent of another dtype is taken in the value's dtype
    _, pullback = asd.vjp(lambda x: asd.relu(x), direction=v.float())(x32)
    assert pullback(torch.ones(3, dtype=torch.bfloat16)).dtype == torch.float32
