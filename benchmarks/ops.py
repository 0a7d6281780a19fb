"""One namespace of operations per backend, so each benchmark program is written once.

A program is ``loss(ops, params, data)``; ``ops`` supplies the few operations whose spelling
differs between numpy, autograd, PyTorch and JAX. asd runs the *numpy* spelling unchanged
(numpy calls on traced arrays reach asd's rules), except where numpy has no asd rule yet:
then ``asd_ops`` names the asd construction it uses instead (reported in the table).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import asd
from asd.core.primitive import FUNCTIONS


def maxpool2_slices(x, maximum):
    """2x2 max pooling with stride 2 as the maximum of four strided slices (NCHW)."""
    top = maximum(x[:, :, 0::2, 0::2], x[:, :, 0::2, 1::2])
    bottom = maximum(x[:, :, 1::2, 0::2], x[:, :, 1::2, 1::2])
    return maximum(top, bottom)


def conv2d_slices(x, w, tensordot, transpose):
    """Valid 2-d cross-correlation as a sum of shifted slices (for backends without conv)."""
    kh, kw = w.shape[2], w.shape[3]
    h, wd = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = None
    for i in range(kh):
        for j in range(kw):
            part = tensordot(x[:, :, i:i + h, j:j + wd], w[:, :, i, j], ([1], [1]))
            out = part if out is None else out + part
    return transpose(out, (0, 3, 1, 2))  # (N, H, W, O) -> (N, O, H, W)


def sorting_network(n: int) -> list[tuple[int, int]]:
    """Batcher's odd-even merge sort comparators for ``n`` (a power of two) keys."""
    pairs = []

    def merge(lo, size, step):
        double = step * 2
        if double < size:
            merge(lo, size, double)
            merge(lo + step, size, double)
            pairs.extend((i, i + step) for i in range(lo + step, lo + size - step, double))
        else:
            pairs.append((lo, lo + step))

    def sort(lo, size):
        if size > 1:
            half = size // 2
            sort(lo, half)
            sort(lo + half, half)
            merge(lo, size, 1)

    if n & (n - 1):
        raise ValueError(f"the sorting network needs a power of two keys, got {n}")
    sort(0, n)
    return pairs


def network_sort_columns(s, minimum, maximum) -> list:
    """The columns of ``s`` (B, n) in ascending order, by min/max comparators on columns."""
    cols = [s[:, i] for i in range(s.shape[1])]
    for i, j in sorting_network(len(cols)):
        cols[i], cols[j] = minimum(cols[i], cols[j]), maximum(cols[i], cols[j])
    return cols


def _numpy_top_sum(s, k):
    return np.sort(s, axis=1)[:, -k:].sum()


def _network_top_sum(s, k):
    return sum(network_sort_columns(s, np.minimum, np.maximum)[-k:]).sum()


def has_numpy_rule(fn) -> bool:
    return fn in FUNCTIONS


def _asd_maxpool():
    for module in ("order", "nn"):
        fn = getattr(getattr(asd.library, module, None), "max_pool2d", None)
        if fn is not None:
            return (lambda x, fn=fn: fn(x, 2)), f"asd.library.{module}.max_pool2d"
    return (lambda x: maxpool2_slices(x, np.maximum)), "maximum of 4 strided slices"


def numpy_ops() -> SimpleNamespace:
    pool, _ = _asd_maxpool()
    return SimpleNamespace(
        name="numpy", relu=lambda z: np.maximum(z, 0), abs=np.abs, clip=np.clip, box=np.clip,
        maximum=np.maximum, conv2d=asd.conv2d, maxpool2=pool, top_sum=_numpy_top_sum)


def asd_ops() -> SimpleNamespace:
    """The numpy spelling, with asd's constructions where numpy has no rule yet."""
    ops = numpy_ops()
    ops.name = "asd"
    pool, ops.pool_impl = _asd_maxpool()
    ops.maxpool2 = pool
    if has_numpy_rule(np.sort):
        ops.sort_impl = "numpy.sort"
    else:
        ops.top_sum, ops.sort_impl = _network_top_sum, "min/max sorting network"
    box = getattr(getattr(asd, "projections", None), "box", None)
    if box is not None:
        ops.box, ops.box_impl = box, "asd.projections.box"
    else:
        ops.box_impl = "numpy.clip"
    return ops


def autograd_ops() -> SimpleNamespace:
    """autograd has no gradient for sorting rows of a matrix: it gets the sorting network."""
    import autograd.numpy as anp

    return SimpleNamespace(
        name="autograd", relu=lambda z: anp.maximum(z, 0), abs=anp.abs, clip=anp.clip,
        box=anp.clip,
        maximum=anp.maximum,
        conv2d=lambda x, w: conv2d_slices(x, w, anp.tensordot, anp.transpose),
        maxpool2=lambda x: maxpool2_slices(x, anp.maximum),
        top_sum=lambda s, k: sum(network_sort_columns(s, anp.minimum, anp.maximum)[-k:]).sum())


def torch_ops() -> SimpleNamespace:
    import torch
    import torch.nn.functional as F

    return SimpleNamespace(
        name="torch", relu=torch.relu, abs=torch.abs, clip=torch.clamp, box=torch.clamp,
        maximum=torch.maximum,
        conv2d=F.conv2d, maxpool2=lambda x: F.max_pool2d(x, 2),
        top_sum=lambda s, k: torch.topk(s, k, dim=1).values.sum())


def jax_ops() -> SimpleNamespace:
    import jax
    import jax.numpy as jnp

    def conv2d(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID")

    def maxpool2(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    return SimpleNamespace(
        name="jax", relu=jax.nn.relu, abs=jnp.abs, clip=jnp.clip, box=jnp.clip,
        maximum=jnp.maximum,
        conv2d=conv2d, maxpool2=maxpool2,
        top_sum=lambda s, k: jax.lax.top_k(s, k)[0].sum())
