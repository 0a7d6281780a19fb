"""Neural-network primitives (library/nn.py): convolution, pooling, batch norm, elu, losses.

Convolution and average pooling are linear: `check_rule` verifies value, adjointness of push
and pull (the pull is the transposed convolution), batched maps and the Jacobian against the
exact oracle running a plain loop-over-kernel-offsets reference on Fractions, over strides,
paddings, dilations and groups drawn by hypothesis. elu is checked on its kink (x = 0, both
directions) with the mpmath oracle; the losses are smooth and checked off kinks the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asd
from asd.testing import check_rule
from asd.testing.strategies import directions, dyadics, kink_arrays


def conv_reference(x, w, stride, padding, dilation, groups):
    """Cross-correlation by loops over kernel offsets (works on object arrays of Fractions)."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    spatial, kernel = x.shape[2:], w.shape[2:]
    x, w = np.asarray(x), np.asarray(w)
    dt = object if object in (x.dtype, w.dtype) else np.result_type(x, w)
    xp = np.zeros((n, c) + tuple(s + 2 * p for s, p in zip(spatial, padding)), dtype=dt)
    xp[...] = 0.0
    xp[(slice(None), slice(None)) + tuple(slice(p, p + s) for s, p in zip(spatial, padding))] = x
    out_sp = tuple((s + 2 * p - d * (k - 1) - 1) // st_ + 1
                   for s, p, d, k, st_ in zip(spatial, padding, dilation, kernel, stride))
    out = np.empty((n, o) + out_sp, dtype=dt)
    out[...] = 0.0
    per = o // groups
    for oc in range(o):
        g = oc // per
        for ic in range(cg):
            for off in np.ndindex(*kernel):
                index = (slice(None), g * cg + ic) + tuple(
                    slice(d * k, d * k + st_ * (m - 1) + 1, st_)
                    for d, k, st_, m in zip(dilation, off, stride, out_sp))
                out[:, oc] = out[:, oc] + w[(oc, ic) + off] * xp[index]
    return out


@st.composite
def conv_cases(draw, nd: int):
    groups = draw(st.sampled_from([1, 2]))
    c = groups * draw(st.integers(1, 2))
    o = groups * draw(st.integers(1, 2))
    k = draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    dilation = draw(st.integers(1, 2))
    padding = draw(st.integers(0, 1))
    size = draw(st.integers(d := dilation * (k - 1) + 1, d + 3)) if nd == 1 else \
        draw(st.integers(dilation * (k - 1) + 1, dilation * (k - 1) + 2))
    shape_x = (1, c) + (size,) * nd
    shape_w = (o, c // groups) + (k,) * nd
    x = np.array(draw(st.lists(dyadics(2.0), min_size=int(np.prod(shape_x)),
                               max_size=int(np.prod(shape_x))))).reshape(shape_x)
    w = np.array(draw(st.lists(dyadics(2.0), min_size=int(np.prod(shape_w)),
                               max_size=int(np.prod(shape_w))))).reshape(shape_w)
    return x, w, (stride,) * nd, (padding,) * nd, (dilation,) * nd, groups


@pytest.mark.parametrize("nd", [1, 2])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_conv_rule(nd, data):
    x, w, stride, padding, dilation, groups = data.draw(conv_cases(nd))

    def fn(x, w):
        return asd.conv(x, w, None, stride, padding, dilation, groups)

    def ref(x, w):
        return conv_reference(x, w, stride, padding, dilation, groups)

    report = check_rule(fn, x, w, reference=ref, exact=True, n_directions=1,
                        seed=data.draw(st.integers(0, 100)))
    assert report.checks.get("jacobian", 0) >= 1


def test_conv_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((6, 2, 3, 2)), \
        rng.standard_normal(6)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b),
                                      (2, 1), (1, 0), (1, 2), 2).numpy()
    np.testing.assert_allclose(asd.conv2d(x, w, b, (2, 1), (1, 0), (1, 2), 2), want,
                               rtol=1e-12)


def test_conv_unbatched_input_and_shape_errors():
    x, w = np.ones((1, 5)), np.ones((2, 1, 2))
    np.testing.assert_allclose(asd.conv1d(x, w), np.full((2, 4), 2.0))
    with pytest.raises(asd.ShapeError, match="groups"):
        asd.conv1d(np.ones((1, 3, 5)), np.ones((2, 2, 2)), groups=2)


def avg_reference(x, kernel, stride, padding):
    c = x.shape[1]
    w = np.ones((c, 1) + kernel) / float(np.prod(kernel))
    return conv_reference(x, w, stride, padding, (1,) * len(kernel), c)


@pytest.mark.parametrize("kernel, stride, padding", [((2,), (2,), (0,)), ((3,), (1,), (1,)),
                                                     ((2, 2), (1, 2), (1, 0))])
def test_avg_pool_rule(kernel, stride, padding):
    rng = np.random.default_rng(len(kernel))
    x = rng.integers(-4, 5, (2, 2) + (5,) * len(kernel)) / 4.0
    report = check_rule(lambda x: asd.avg_pool(x, kernel, stride, padding), x,
                        reference=lambda x: avg_reference(x, kernel, stride, padding),
                        exact=True, n_directions=2)
    assert report.oracle == "exact"


def test_avg_pool_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((1, 2, 6, 5))
    want = torch.nn.functional.avg_pool2d(torch.tensor(x), 3, 2, 1).numpy()
    np.testing.assert_allclose(asd.avg_pool2d(x, 3, 2, 1), want, rtol=1e-12)


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 2, 3, 5)])
def test_avg_pool1d_any_leading_axes(shape):
    """avg_pool1d pools the last axis of any array, as max_pool1d does: a 1-D array was an
    IndexError inside the rule. Each leading index is pooled on its own (the reference pools
    the same entries as (1, C, L) windows), and the gradient is the exact one (linear)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, shape) / 4.0
    flat = x.reshape(1, -1, shape[-1])
    want = avg_reference(flat, (2,), (2,), (1,)).reshape(shape[:-1] + (3,))
    np.testing.assert_array_equal(asd.library.nn.avg_pool1d(x, 2, padding=1), want)
    report = check_rule(lambda x: asd.library.nn.avg_pool1d(x, 2, padding=1), x,
                        reference=lambda x: avg_reference(x.reshape(1, -1, shape[-1]), (2,),
                                                          (2,), (1,)).reshape(
                            shape[:-1] + (3,)), exact=True, n_directions=1)
    assert report.oracle == "exact"


def test_avg_pool_refuses_a_kernel_longer_than_the_input():
    with pytest.raises(asd.ShapeError, match="kernel"):
        asd.library.nn.avg_pool1d(np.ones(3), 5)


# ----- elu: the kink at 0 -----

@settings(max_examples=15, deadline=None)
@given(kink_arrays((4,), bound=2.0), directions((4,)), st.sampled_from([0.5, 1.0, 2.0]))
def test_elu_on_its_kink(x, v, alpha):
    def ref(x):
        return np.where(x > 0, x, alpha * (np.exp(x) - 1))

    check_rule(lambda x: asd.elu(x, alpha), x, direction=v, reference=ref, exact=False)


def test_elu_slope_at_zero_follows_the_direction():
    assert float(asd.subgrad(lambda x: asd.elu(x, 0.3), direction=-1.0)(0.0)) == 0.3
    assert float(asd.subgrad(lambda x: asd.elu(x, 0.3), direction=1.0)(0.0)) == 1.0
    assert float(asd.subgrad(lambda x: asd.elu(x, 0.3), direction=0.0 + 1e-300)(0.0)) == 1.0


# ----- losses and batch norm -----

def ce_reference(z, target):
    zz = np.exp(z)
    lse = np.log(np.sum(zz, axis=1))
    picked = np.array([z[i, t] for i, t in enumerate(target)], dtype=object)
    return np.sum(lse - picked) / len(target)


def test_cross_entropy_rule():
    z = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])
    target = np.array([2, 1])
    check_rule(lambda z: asd.cross_entropy(z, target), z,
               reference=lambda z: ce_reference(z, target), exact=False, n_directions=2)


def test_cross_entropy_probabilities_and_sum_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    z, p = rng.standard_normal((3, 4)), rng.dirichlet(np.ones(4), 3)
    tz = torch.tensor(z, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(tz, torch.tensor(p), reduction="sum")
    loss.backward()
    value, g = asd.value_and_subgrad(lambda z: asd.cross_entropy(z, p, reduction="sum"))(z)
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12)
    np.testing.assert_allclose(g, tz.grad.numpy(), rtol=1e-10)


def test_mse_and_batch_norm_values():
    a, b = np.array([1.0, 2.0, 4.0]), np.array([0.0, 2.0, 1.0])
    assert float(asd.mse_loss(a, b)) == pytest.approx(10.0 / 3.0)
    assert float(asd.mse_loss(a, b, reduction="sum")) == 10.0
    x = np.arange(12.0).reshape(1, 3, 2, 2)
    y = asd.batch_norm(x, np.array([1.0, 2.0, 3.0]), np.array([4.0, 1.0, 0.25]),
                       np.array([2.0, 1.0, 1.0]), np.array([0.0, 1.0, -1.0]), eps=0.0)
    np.testing.assert_allclose(y[0, 0], (x[0, 0] - 1.0) / 2.0 * 2.0)
    np.testing.assert_allclose(y[0, 2], (x[0, 2] - 3.0) / 0.5 - 1.0)


def test_batch_norm_parameters_are_differentiable():
    x = np.arange(8.0).reshape(2, 2, 2)
    g = asd.subgrad(lambda w: asd.batch_norm(x, np.zeros(2), np.ones(2), w, None, 0.0).sum())(
        np.ones(2))
    np.testing.assert_allclose(g, [x[:, 0].sum(), x[:, 1].sum()])


@pytest.mark.parametrize("bad", [lambda: asd.mse_loss(np.ones(2), np.ones(2), "none"),
                                 lambda: asd.cross_entropy(np.ones((1, 2)), [0], "max"),
                                 lambda: asd.conv1d(np.ones((1, 1, 4)), np.ones((1, 1, 2)),
                                                    padding="same")])
def test_unsupported_options_say_so(bad):
    with pytest.raises(asd.UnsupportedError):
        bad()
