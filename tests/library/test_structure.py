"""Structure functions (library/structure.py) against independent oracles.

- Linear functions: the value is numpy's own, and column ``i`` of asd's Jacobian is numpy's
  function applied to the basis vector ``e_i`` (exact: linearity is the oracle).
- Bilinear ``kron``/``cross``: the Jacobian in each argument is the function of basis
  vectors and the other argument, on small integers (exact in floats).
- ``cumprod`` (a polynomial): the exact Jacobian in rationals (`fractions.Fraction`) at
  points with zeros, where the product rule is easy to get wrong.
- Piecewise ``select``/``partition``: one-sided derivatives along rays that keep the ties
  alive (coordinate directions), against difference quotients of numpy's own function.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
import asd.numpy as anp
from asd.errors import (
    ArgumentTypeError,
    NotLipschitzError,
    TracerBoolError,
    UnsupportedError,
)


def basis_jacobian(fn, x: np.ndarray) -> np.ndarray:
    """The Jacobian of an affine ``fn`` at any point: its columns are ``fn(e_i) - fn(0)``."""
    at_zero = np.asarray(fn(np.zeros_like(x)), dtype=float).ravel()
    cols = [np.asarray(fn(e.reshape(x.shape)), dtype=float).ravel() - at_zero
            for e in np.eye(x.size)]
    out = np.asarray(fn(x)).shape
    return np.stack(cols, axis=-1).reshape(out + x.shape)


def check_linear(fn, x: np.ndarray, exact: bool = True) -> None:
    jac = np.asarray(asd.jacobian(fn)(x))
    expected = basis_jacobian(fn, x)
    assert jac.shape == expected.shape
    if exact:
        np.testing.assert_array_equal(jac, expected)
    else:
        np.testing.assert_allclose(jac, expected, rtol=1e-12, atol=1e-12)


X = np.arange(1.0, 25.0).reshape(2, 3, 4) * np.array([1, -1, 1, -1])  # signs: not symmetric

LINEAR = {
    "flip": lambda x: np.flip(x),
    "flip axis": lambda x: np.flip(x, axis=(0, 2)),
    "flipud": lambda x: np.flipud(x),
    "fliplr": lambda x: np.fliplr(x),
    "rot90": lambda x: np.rot90(x, 3, axes=(1, 2)),
    "roll flat": lambda x: np.roll(x, 5),
    "roll axes": lambda x: np.roll(x, (1, -2), axis=(0, 2)),
    "fftshift": lambda x: np.fft.fftshift(x, axes=(1, 2)),
    "ifftshift": lambda x: np.fft.ifftshift(x),
    "repeat": lambda x: np.repeat(x, [1, 0, 3], axis=1),
    "repeat flat": lambda x: np.repeat(x, 2),
    "tile": lambda x: np.tile(x, (2, 1, 1, 2)),
    "tril": lambda x: np.tril(x, -1),
    "triu": lambda x: np.triu(x, 1),
    "atleast_3d": lambda x: np.atleast_3d(x[0, 0]),
    "atleast_2d": lambda x: np.atleast_2d(x[0, 0]),
    "atleast_1d": lambda x: np.atleast_1d(x[0, 0, 0]),
    "split": lambda x: np.concatenate([p * (i + 1) for i, p in
                                       enumerate(np.split(x, [1, 3], axis=2))], axis=2),
    "array_split": lambda x: np.concatenate([p * (i + 1) for i, p in
                                             enumerate(np.array_split(x, 3, axis=1))], axis=1),
    "hsplit/vsplit/dsplit": lambda x: np.hsplit(x, 3)[1].sum() + np.vsplit(x, 2)[1].sum()
    + np.dsplit(x, 2)[0].sum() * 3,
    "append": lambda x: np.append(x, x[0] * 2),
    "append axis": lambda x: np.append(x, x[:, :1] * 2, axis=1),
    "column_stack": lambda x: np.column_stack([x[0, :, 0], x[1, :, :2]]),
    "dstack": lambda x: np.dstack([x[0, 0], x[1, 0]]),
    "meshgrid": lambda x: np.stack(np.meshgrid(x[0, 0], x[1, 1, :3]), axis=0),
    "meshgrid ij sparse": lambda x: np.meshgrid(x[0, 0], x[1, 1, :3], indexing="ij",
                                                sparse=True)[1] * 2,
    "ediff1d": lambda x: np.ediff1d(x, to_begin=x[0, 0, :2], to_end=x[1, 1, 1]),
    "transpose axes=": lambda x: np.transpose(x, axes=(2, 0, 1)),
    "einsum sublists": lambda x: np.einsum(x, [0, 1, 2], [2, 0]),
}


@pytest.mark.parametrize("name", list(LINEAR))
def test_linear_structure_functions_equal_numpy_and_their_basis_jacobian(name):
    fn = LINEAR[name]
    x = X.copy()
    np.testing.assert_array_equal(np.asarray(asd.trace(fn)(x)(x)), np.asarray(fn(x)))
    check_linear(fn, x)


def test_diag_of_a_vector_and_of_a_matrix():
    v = np.array([3.0, -1.0, 2.0])
    for k in (-1, 0, 2):
        check_linear(lambda x, k=k: np.diag(x, k), v)
        check_linear(lambda x, k=k: np.diag(x, k), np.outer(v, v[::-1]))


def test_zero_filled_entries_stay_exact_zeros_next_to_infinities():
    """``tril`` gathers, it does not multiply by a mask: an infinite entry it drops cannot
    turn into NaN (0 * inf) in the value or the derivative."""
    big = np.array([[1.0, 1e308], [2.0, 3.0]])
    g = asd.subgrad(lambda m: (np.tril(m * 10.0) * 0.5).sum())(big)
    np.testing.assert_array_equal(g, [[5.0, 0.0], [5.0, 5.0]])


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       shift=st.integers(-7, 7), reps=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       data=st.data())
def test_roll_tile_repeat_on_random_shapes(shape, shift, reps, data):
    x = np.arange(1.0, np.prod(shape) + 1).reshape(shape)
    axis = data.draw(st.sampled_from([None, *range(len(shape))]))
    for fn in (lambda y: np.roll(y, shift, axis=axis), lambda y: np.tile(y, reps),
               lambda y: np.repeat(y, 2, axis=axis), lambda y: np.flip(y, axis=axis)):
        np.testing.assert_array_equal(asd.trace(fn)(x)(x), fn(x))
        check_linear(fn, x)


def flat(arrays):
    """One vector of an array or of a tuple of arrays (``gradient`` returns either)."""
    parts = arrays if isinstance(arrays, tuple | list) else [arrays]
    return np.concatenate([np.reshape(p, -1) for p in parts])


def test_linspace_and_gradient_are_affine_in_their_inputs():
    ends = np.array([-1.5, 2.0])
    for kw in ({"num": 5}, {"num": 4, "endpoint": False}, {"num": 1}):
        fn = lambda e, kw=kw: np.linspace(e[0], e[1], **kw)  # noqa: E731
        np.testing.assert_allclose(asd.trace(fn)(ends)(ends), fn(ends), rtol=1e-15)
        jac = asd.jacobian(fn)(ends)
        expected = np.stack([fn(np.eye(2)[i]) - fn(np.zeros(2)) for i in range(2)], axis=-1)
        np.testing.assert_allclose(jac, expected, rtol=1e-12, atol=1e-15)
    vec = lambda e: np.linspace(e[:2], e[2:], 3, axis=1)  # noqa: E731
    np.testing.assert_allclose(asd.trace(vec)(np.arange(4.0))(np.arange(4.0)),
                               vec(np.arange(4.0)))
    assert np.asarray(asd.trace(lambda e: np.linspace(e[0], e[1], 5))(ends)(ends))[-1] == 2.0
    f = np.array([[1.0, 4.0, -2.0, 3.0], [0.5, 0.0, 7.0, 1.0], [2.0, 2.0, 1.0, -1.0]])
    for args, kw in [((), {}), ((2.0,), {"edge_order": 2}), ((np.array([0.0, 1.0, 3.0]),
                     np.array([0.0, 0.5, 2.0, 2.5])), {}), ((0.5,), {"axis": 1}),
                     ((np.array([0.0, 1.0, 3.0]),), {"axis": 0, "edge_order": 2})]:
        fn = lambda y, a=args, k=kw: flat(np.gradient(y, *a, **k))  # noqa: E731
        np.testing.assert_allclose(asd.trace(fn)(f)(f), fn(f), rtol=1e-12, atol=1e-12)
        check_linear(fn, f, exact=False)


def test_bilinear_kron_and_cross_have_their_exact_jacobians():
    a, b = np.array([[1.0, -2.0], [3.0, 0.5]]), np.array([2.0, -1.0, 4.0])
    for fn, p in ((np.kron, a), (np.kron, a[0]), (np.cross, np.array([1.0, -2.0, 3.0]))):
        jp, jq = asd.jacobian(fn, (0, 1))(p, b)
        np.testing.assert_array_equal(jp, basis_jacobian(lambda u, fn=fn: fn(u, b), p))
        np.testing.assert_array_equal(jq, basis_jacobian(lambda u, fn=fn, p=p: fn(p, u), b))
    np.testing.assert_array_equal(asd.trace(np.kron)(a, b)(a, b), np.kron(a, b))
    m, n = np.arange(6.0).reshape(2, 3), np.array([[1.0, 0.0, 2.0], [3.0, -1.0, 1.0]])
    fn = lambda p, q: np.cross(p, q, axis=1)  # noqa: E731
    jp = asd.jacobian(fn)(m, n)
    np.testing.assert_array_equal(jp, basis_jacobian(lambda p: fn(p, n), m))
    with pytest.raises(UnsupportedError, match="2-vectors"):
        asd.subgrad(lambda p: np.cross(p, p).sum())(np.ones(2))


def exact_cumprod_jacobian(x) -> np.ndarray:
    q = [Fraction(v) for v in x]
    jac = np.zeros((len(q), len(q)))
    for k in range(len(q)):
        for j in range(k + 1):
            p = Fraction(1)
            for i in range(k + 1):
                if i != j:
                    p *= q[i]
            jac[k, j] = float(p)
    return jac


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, -1.0], [0.0, 0.0, 5.0], [1.5, -2.0, 0.5, 4.0, 0.0],
                               [7.0]])
def test_cumprod_is_exact_at_zeros(x):
    x = np.array(x)
    np.testing.assert_array_equal(asd.trace(np.cumprod)(x)(x), np.cumprod(x))
    np.testing.assert_array_equal(asd.jacobian(np.cumprod)(x), exact_cumprod_jacobian(x))


def test_cumprod_along_an_axis():
    x = np.array([[1.0, 0.0, 2.0], [3.0, -1.0, 0.0]])
    jac = asd.jacobian(lambda y: np.cumprod(y, axis=0))(x)
    for col in range(3):
        np.testing.assert_array_equal(jac[:, col, :, col], exact_cumprod_jacobian(x[:, col]))
    np.testing.assert_array_equal(asd.trace(lambda y: np.cumprod(y, axis=1))(x)(x),
                                  np.cumprod(x, axis=1))


def one_sided(fn, x, v, t=2.0 ** -20):
    return (fn(x + t * v) - fn(x)) / t


def assert_one_sided_along_coordinates(fn, x, abs_tol):
    """asd's directional derivative along every signed coordinate vector (each keeps the
    other entries' ties alive) equals the difference quotient of numpy's own ``fn``."""
    for i in range(x.size):
        for sign in (1.0, -1.0):
            v = sign * np.eye(x.size)[i]
            _, d = asd.directional(fn)(x, v)
            assert d == pytest.approx(one_sided(fn, x, v), abs=abs_tol), (i, sign)


def select_program(x):
    """Continuous: each branch meets the next one where its condition ties."""
    return np.select([x > 0, x < -1], [x * 3.0, -0.5 * x ** 2], default=x * 0.5).sum()


@pytest.mark.parametrize("point", [[0.0, -1.0, 2.0], [0.0, 0.0, -1.0], [-3.0, 1.0, 0.0]])
def test_select_along_coordinate_rays_at_its_ties(point):
    assert_one_sided_along_coordinates(select_program, np.array(point), 1e-5)


def test_select_refuses_a_jump_at_a_tied_condition():
    with pytest.raises(NotLipschitzError, match="tied"):
        asd.subgrad(lambda x: np.select([x < -1], [x ** 2], default=x * 0.5).sum())(
            np.array([-1.0, 3.0]))


def test_partition_is_the_sorted_array_and_its_kth_entry_is_the_order_statistic():
    x = np.array([2.0, -1.0, 2.0, 0.0, 2.0])  # a three-way tie at the partition point
    kth = lambda y: np.partition(y, 3)[3]  # noqa: E731
    assert asd.trace(kth)(x)(x) == np.partition(x, 3)[3]
    assert_one_sided_along_coordinates(kth, x, 1e-6)


def test_arrays_built_from_traced_values():
    x = np.array([1.5, -2.0])
    fn = lambda y: anp.array([[y[0], y[1] ** 2], [3.0, y[0] * y[1]]])  # noqa: E731
    np.testing.assert_array_equal(asd.trace(fn)(x)(x), [[1.5, 4.0], [3.0, -3.0]])
    np.testing.assert_array_equal(asd.jacobian(fn)(x),
                                  [[[1.0, 0.0], [0.0, -4.0]], [[0.0, 0.0], [-2.0, 1.5]]])
    r = lambda y: anp.r_[y, 0:2, y[0]]  # noqa: E731
    np.testing.assert_array_equal(asd.trace(r)(x)(x), np.r_[x, 0:2, x[0]])
    check_linear(r, x)
    c = lambda y: anp.c_[y, y * 2]  # noqa: E731
    np.testing.assert_array_equal(asd.trace(c)(x)(x), np.c_[x, x * 2])
    check_linear(c, x)
    assert asd.subgrad(lambda y: np.mean(anp.asarray([y[0], y[1]])))(x).tolist() == [0.5, 0.5]


def test_refusals_name_the_problem():
    with pytest.raises(ArgumentTypeError, match="traced repeats"):
        asd.subgrad(lambda y: np.repeat(y, y).sum())(np.ones(2))
    with pytest.raises(TracerBoolError, match=r"numpy.mean\(asd.numpy.array"):
        asd.subgrad(lambda y: np.mean([y[0], y[1]]))(np.ones(2))
    with pytest.raises(UnsupportedError, match="dtype=int64"):
        asd.subgrad(lambda y: anp.array([y[0], y[1]], dtype=np.int64).sum())(np.ones(2))


ON_TORCH = ["flip axis", "rot90", "roll axes", "fftshift", "repeat", "tile", "tril", "triu",
            "atleast_3d", "split", "hsplit/vsplit/dsplit", "append axis", "column_stack",
            "dstack", "meshgrid", "ediff1d"]


@pytest.mark.parametrize("name", ON_TORCH)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_selections_run_on_torch_tensors_as_on_numpy(name, dtype):
    torch = pytest.importorskip("torch")
    fn, x = LINEAR[name], X.astype(dtype)
    weights = np.linspace(-1.0, 2.0, np.asarray(fn(x)).size).reshape(np.shape(fn(x)))

    def program(y):
        return (fn(y) * weights).sum()

    want = asd.subgrad(program)(x)
    got = asd.subgrad(lambda y: (fn(y) * torch.as_tensor(weights, dtype=y.dtype)).sum())(
        torch.from_numpy(x))
    assert isinstance(got, torch.Tensor) and got.dtype == getattr(torch, dtype)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def reference_add_at(a, indices, b):
    out = np.array(a, dtype=float, copy=True)
    np.add.at(out, indices, b)
    return out


AT_CASES = [
    (np.arange(5.0), np.array([0, 3, 0, 0, 4]), np.array([1.0, -2.0, 0.5, 3.0, 2.0])),
    (np.arange(6.0).reshape(2, 3), (np.array([0, 0, 1]), np.array([2, 2, 0])), np.array(1.5)),
    (np.arange(6.0).reshape(2, 3), (slice(None), [0, 0]), np.array([[1.0, 2.0], [3.0, 4.0]])),
]


@pytest.mark.parametrize("case", range(len(AT_CASES)))
def test_add_at_on_a_traced_copy_equals_numpy_and_is_affine(case):
    a, indices, b = AT_CASES[case]

    def program(a, b):
        y = a.copy()
        np.add.at(y, indices, b)
        return y

    np.testing.assert_array_equal(asd.trace(program)(a, b)(a, b), reference_add_at(a, indices, b))
    ja, jb = asd.jacobian(program, (0, 1))(a, b)
    np.testing.assert_array_equal(ja, basis_jacobian(lambda u: reference_add_at(u, indices, b), a))
    np.testing.assert_array_equal(jb, basis_jacobian(lambda u: reference_add_at(a, indices, u), b))


def test_add_at_refusals():
    with pytest.raises(ArgumentTypeError, match="plain numpy array"):
        asd.subgrad(lambda x: (np.add.at(np.zeros(3), [0], x[0]), x.sum())[1])(np.ones(3))
    with pytest.raises(ArgumentTypeError, match="Copy it first"):
        asd.subgrad(lambda x: (np.add.at(x, [0], 1.0), x.sum())[1])(np.ones(3))


def test_put_along_axis_writes_into_a_traced_copy():
    x = np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]])
    order = np.array([[1], [2]])

    def program(y, v):
        out = y.copy()
        np.put_along_axis(out, order, v, axis=1)
        return out

    def reference(y, v):
        out = np.array(y, copy=True)
        np.put_along_axis(out, order, v, axis=1)
        return out

    v = np.array([[10.0], [20.0]])
    np.testing.assert_array_equal(asd.trace(program)(x, v)(x, v), reference(x, v))
    jx, jv = asd.jacobian(program, (0, 1))(x, v)
    np.testing.assert_array_equal(jx, basis_jacobian(lambda u: reference(u, v), x))
    np.testing.assert_array_equal(jv, basis_jacobian(lambda u: reference(x, u), v))
