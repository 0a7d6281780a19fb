"""Every structured linear map: push and pull are adjoint, batched and unbatched, and match
an explicit matrix built column by column from unbatched pushes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asd.core.linear import (
    Closure,
    Dense,
    Diagonal,
    FanIn,
    Index,
    MatMul,
    Reshape,
    Sum,
    Transpose,
    Zero,
    unbroadcast,
)

rng = np.random.default_rng(0)


def explicit(m):
    """The matrix of ``m`` from unbatched pushes of basis vectors."""
    n = int(np.prod(m.in_shape))
    cols = [np.ravel(m.push(e.reshape(m.in_shape))) for e in np.eye(n)]
    return np.stack(cols, axis=1) if cols else np.zeros((int(np.prod(m.out_shape)), 0))


def check_map(m, batch=3):
    t = rng.standard_normal(m.in_shape)
    c = rng.standard_normal(m.out_shape)
    pushed, pulled = m.push(t), m.pull(c)
    assert np.shape(pushed) == m.out_shape
    assert np.shape(pulled) == m.in_shape
    assert np.isclose(np.sum(pushed * c), np.sum(t * pulled)), "push and pull are not adjoint"
    tb = rng.standard_normal((batch, *m.in_shape))
    cb = rng.standard_normal((batch, *m.out_shape))
    pb, qb = m.push(tb), m.pull(cb)
    assert pb.shape == (batch, *m.out_shape)
    assert qb.shape == (batch, *m.in_shape)
    for i in range(batch):
        np.testing.assert_allclose(pb[i], m.push(tb[i]), atol=1e-12)
        np.testing.assert_allclose(qb[i], m.pull(cb[i]), atol=1e-12)
    matrix = explicit(m)
    np.testing.assert_allclose(np.ravel(m.pull(c)), matrix.T @ np.ravel(c), atol=1e-10)


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@st.composite
def broadcast_pair(draw):
    out = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple))
    keep = draw(st.integers(0, len(out)))
    tail = out[len(out) - keep:]
    ins = tuple(1 if draw(st.booleans()) else n for n in tail)
    return ins, out


@settings(max_examples=60, deadline=None)
@given(broadcast_pair(), st.sampled_from(["none", "scalar", "array", "mask"]))
def test_diagonal_with_broadcasting(pair, kind):
    ins, out = pair
    d = {"none": None, "scalar": -2.5, "array": rng.standard_normal(out),
         "mask": rng.standard_normal(out) > 0}[kind]
    check_map(Diagonal(d, ins, out))


@settings(max_examples=40, deadline=None)
@given(shapes, st.data())
def test_sum_transpose_reshape(shape, data):
    nd = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1) if nd else st.none()))
    keepdims = data.draw(st.booleans())
    out = np.sum(np.zeros(shape), axis=axis, keepdims=keepdims).shape
    check_map(Sum(axis, keepdims, shape, out))
    perm = tuple(data.draw(st.permutations(range(nd))))
    check_map(Transpose(perm, shape))
    check_map(Reshape(shape, (int(np.prod(shape)),)))


@pytest.mark.parametrize("index", [
    1, (slice(None), 0), (Ellipsis, 1), (slice(0, 2), None), np.array([0, 1, 1]),
    (np.array([0, 1]), np.array([1, 1])), np.array([[True, False, True], [False, True, True]]),
    (Ellipsis, np.array([2, 0, 0])), (slice(None, None, -1),),
])
def test_index(index):
    shape = (2, 3)
    out = np.zeros(shape)[index].shape
    check_map(Index(index, shape, out))


matmul_cases = [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (5, 3, 1)),
    ((5, 2, 3), (3,)), ((3,), (5, 3, 4)),
]


@pytest.mark.parametrize("a_shape,b_shape", matmul_cases)
@pytest.mark.parametrize("side", ["a", "b"])
def test_matmul(a_shape, b_shape, side):
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    out = np.matmul(a, b).shape
    m = MatMul(b if side == "a" else a, side, a_shape, b_shape, out)
    check_map(m)
    t = rng.standard_normal(a_shape if side == "a" else b_shape)
    expected = t @ b if side == "a" else a @ t
    np.testing.assert_allclose(m.push(t), expected, atol=1e-12)


def test_dense_closure_zero():
    mat = rng.standard_normal((6, 4))
    check_map(Dense(mat, (2, 2), (3, 2)))
    check_map(Closure(lambda t: 2 * t, lambda c: 2 * c, (3,), (3,)))
    z = Zero((2,), (3,))
    check_map(z)
    assert not np.any(z.push(np.ones(2)))


def test_fanin_skips_missing_tangents_and_unwanted_cotangents():
    lin = FanIn(Diagonal(2.0, (3,)), None, Diagonal(None, (), (3,)))
    np.testing.assert_allclose(lin(np.ones(3), np.ones(5), None), [2.0, 2.0, 2.0])
    assert lin(None, None, None) is None
    a, b, c = lin.T(np.ones(3), (True, True, False))
    np.testing.assert_allclose(a, 2.0 * np.ones(3))
    assert b is None and c is None


def test_unbroadcast_keeps_the_batch_axis():
    ct = np.ones((4, 2, 3))
    assert unbroadcast(ct, (3,), 1).shape == (4, 3)
    assert unbroadcast(ct, (2, 1), 1).shape == (4, 2, 1)
    assert float(unbroadcast(np.ones((2, 3)), (), 0)) == 6.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_float_mask_maps_as_the_bool_mask_bit_for_bit(dtype):
    """`Mask` holds a relu's slope as 0/1 floats (torch multiplies by them ~4x faster than by
    bools) but must give the bool mask's bits: in the tangent's dtype, narrower ones
    included, with signed zeros, infinities and NaN where the mask is 0."""
    torch = pytest.importorskip("torch")
    from asd.core.linear import Mask

    x = torch.tensor(rng.standard_normal((3, 4)), dtype=getattr(torch, dtype))
    bool_mask, float_mask = Diagonal(x > 0, (3, 4)), Mask((x > 0).to(x.dtype), (3, 4))
    specials = torch.tensor([-0.0, float("inf"), float("-inf"), float("nan")])
    for t_dtype in (torch.float16, torch.float32, torch.float64):
        for batch in ((), (2,)):
            t = torch.tensor(rng.standard_normal(batch + (3, 4)), dtype=t_dtype)
            t.view(-1)[:4] = specials.to(t_dtype)
            t.view(-1)[-3:] *= -1.0
            for a, b in ((float_mask.push(t), bool_mask.push(t)),
                         (float_mask.pull(t), bool_mask.pull(t))):
                assert a.dtype == b.dtype == t_dtype
                bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
                assert torch.equal(a.view(bits), b.view(bits))
    assert torch.equal(float_mask.zero_rows(), bool_mask.zero_rows())
    assert float_mask.magnitude() is float_mask
