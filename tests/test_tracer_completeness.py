"""Traced arrays behave like numpy arrays for the methods and operators users call: each case
is checked by `check_rule` against the same function run by plain numpy (the reference),
with the exact oracle, on kinks where the function has them."""

from __future__ import annotations

import numpy as np
import pytest

import asd
from asd.testing import check_rule


def _assign_first(x):
    y = x.copy()
    y[0] = x[0] ** 2
    return y


def _assign_mask(x):
    y = x.copy()
    y[np.array([True, False, True, False])] = x[:2] * 3.0
    return y


def _assign_slice_scalar(x):
    y = x * 1.0
    y[1:3] = 0.5
    return y * x


def _assign_broadcast(x):
    y = np.reshape(x, (2, 2)).copy()
    y[:, 0] = x[3]
    return y


def _assign_repeated(x):
    y = x.copy()
    y[[0, 0, 1]] = x[1:4] * 2.0  # numpy: the last write to an entry wins
    return y


def _assign_relu(x):
    y = x.copy()
    y[1] = np.maximum(x[1], 0.0)
    y[2] = y[1] * x[2]
    return y


def _assign_twice(x):
    y = np.zeros_like(x) + x
    y[0] = x[1]
    y[0] = y[0] * x[0]
    return y.sum()


def _assign_traced_mask(x):
    y = x.copy()
    y[x > 0] = 0.0
    return y


def _np_copy(x):
    y = np.copy(x)
    y[1] = 2.0 * x[2]
    return y + x


CASES = [
    ("copy", lambda x: x.copy() * x),
    ("y[0] = x[0] ** 2", _assign_first),
    ("y[mask] = values", _assign_mask),
    ("y[1:3] = scalar", _assign_slice_scalar),
    ("y[:, 0] = broadcast", _assign_broadcast),
    ("repeated indices", _assign_repeated),
    ("y[1] = relu", _assign_relu),
    ("assign twice", _assign_twice),
    ("np.copy", _np_copy),
    ("argmax", lambda x: x[x.argmax()] * x),
    ("argmin", lambda x: x[x.argmin()] + x),
    ("real", lambda x: x.real * 2.0),
    ("imag", lambda x: x.imag + x),
    ("conj", lambda x: x.conj() * x.conjugate(), lambda x: x * x),
    ("clip", lambda x: x.clip(-0.5, 0.5)),
    ("cumsum", lambda x: x.cumsum()),
    ("prod", lambda x: x.prod()),
    ("dot", lambda x: x.dot(x)),
    ("flatten", lambda x: np.reshape(x, (2, 2)).flatten()),
    ("ravel", lambda x: np.reshape(x, (2, 2)).ravel()),
    ("squeeze", lambda x: x[None, :].squeeze(0)),
    ("astype float", lambda x: x.astype(np.float64) * 2.0, lambda x: x * 2.0),
    ("floor division", lambda x: x // 0.75 + x, lambda x: Q + x),
    ("modulo", lambda x: x % 0.75, lambda x: x - 0.75 * Q),
    ("divmod", lambda x: divmod(x, 0.75)[0] * divmod(x, 0.75)[1],
     lambda x: Q * (x - 0.75 * Q)),
    ("comparison as a number", lambda x: (x < 0.1) * x + (x >= 0.1) + 0.0),
    ("astype of a comparison", lambda x: (x > 0.1).astype(float) * x),
    ("sum of a comparison", lambda x: np.sum(x < 0.1) + x),
    ("any/all", lambda x: (x > 0.1).any() * x + (x > 5).all()),
]
IDS = [c[0] for c in CASES]
GENERIC = np.array([0.3, -1.2, 2.2, 0.6])
Q = np.floor_divide(GENERIC, 0.75)  # the piece of // and % that GENERIC sits on


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_method_or_operator_at_a_generic_point(case):
    name, fn, ref = (*case, None)[:3]
    check_rule(fn, GENERIC, name=name, reference=ref, n_directions=2)


@pytest.mark.parametrize("fn", [_assign_relu, _assign_traced_mask], ids=["relu", "mask"])
@pytest.mark.parametrize("v", [[1.0, -1.0, 0.5, 0.0], [-0.5, 1.0, -1.0, 2.0]])
def test_item_assignment_on_kinks(fn, v):
    x = np.array([0.0, 0.0, 1.5, -1.0])
    check_rule(fn, x, direction=np.array(v), exact=True, name=fn.__name__)


def test_item_assignment_leaves_the_original_and_its_copies():
    def f(x):
        y = x * 1.0
        z = y.copy()
        z[0] = 10.0 * x[0]
        return y + 2.0 * z

    np.testing.assert_array_equal(asd.jacobian(f)(np.array([1.0, 2.0])),
                                  [[21.0, 0.0], [0.0, 3.0]])


def test_assignment_into_an_argument_is_refused_with_the_fix():
    def f(x):
        x[0] = 1.0
        return x.sum()

    with pytest.raises(asd.ArgumentTypeError, match=r"argument %0.*y = x.copy\(\)"):
        asd.subgrad(f)(np.ones(2))


def test_assignment_with_a_traced_key_names_the_key():
    def f(x):
        y = x.copy()
        y[np.argmax(x) + 0.0] = 1.0
        return y.sum()

    with pytest.raises(asd.NotLipschitzError, match="item assignment with the traced key"):
        asd.subgrad(f)(np.array([1.0, 2.0]))


def test_item_is_refused_clearly():
    with pytest.raises(asd.TracerBoolError, match=r"item\(\).*stop_gradient"):
        asd.subgrad(lambda x: x.item())(1.0)


def test_size_one_output_is_a_scalar():
    g = asd.subgrad(lambda x: (x[:1] * x[1:2]) ** 2)(np.array([1.0, 3.0]))
    np.testing.assert_array_equal(g, [18.0, 6.0])
    assert asd.value_and_subgrad(lambda x: np.reshape(x * x, (1, 1)))(2.0) == (4.0, 4.0)


def test_output_that_is_an_input_leaf():
    assert asd.subgrad(lambda x: x)(2.0) == 1.0
    np.testing.assert_array_equal(asd.jacobian(lambda x: x)(np.ones(2)), np.eye(2))
    np.testing.assert_array_equal(asd.subgrad(lambda x, y: x, argnums=1)(1.0, np.ones(2)),
                                  np.zeros(2))


def test_empty_arrays():
    with pytest.raises(asd.ArgumentError, match="hold no numbers"):
        asd.subgrad(lambda x: np.sum(x))(np.zeros(0))
    assert asd.subgrad(lambda x, e: np.sum(e * x) + x, argnums=0)(1.0, np.zeros(0)) == 1.0
    g = asd.subgrad(lambda x: np.sum(np.maximum(x[:0], 0.0)) + x[0])(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(g, [1.0, 0.0])

