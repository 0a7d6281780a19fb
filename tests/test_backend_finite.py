"""`asd.core.backend.first_nonfinite_of` on torch tensors: the fused screen (one pass over
every tensor) answers exactly as testing each array does, including where it must fall back
(a norm that overflows although every entry is finite)."""

from __future__ import annotations

import numpy as np
import pytest

from asd.core import backend

torch = pytest.importorskip("torch")


def reference(arrays) -> int | None:
    bad = [i for i, a in enumerate(arrays) if not bool(np.all(np.isfinite(backend.to_host(a))))]
    return min(bad) if bad else None


def arrays(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    shapes = [(4, 1, 6, 6), (3, 1, 2, 2), (3,), (0,), (), (5, 7)]
    return [torch.randn(s, generator=g, dtype=dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", [[], [0], [2], [5], [1, 4], [4]])
def test_screen_finds_the_first_nonfinite_array(dtype, bad, where):
    xs = arrays(dtype)
    for i in where:
        xs[i].view(-1)[-1] = bad
    assert backend.first_nonfinite_of(xs) == reference(xs) == (min(where) if where else None)


def test_overflowing_norms_of_finite_entries_are_finite():
    big = torch.full((8,), torch.finfo(torch.float32).max)  # its 1-norm overflows
    xs = [torch.ones(3), big, torch.ones(2, dtype=torch.float64)]
    assert backend.first_nonfinite_of(xs) is None
    xs[2][1] = float("nan")
    assert backend.first_nonfinite_of(xs) == 2


def test_numpy_and_torch_arrays_together():
    xs = [np.array([1.0, np.inf]), torch.ones(3), np.ones(2), torch.tensor([np.nan])]
    assert backend.first_nonfinite_of(xs) == 0
    xs[0] = np.ones(2)
    assert backend.first_nonfinite_of(xs) == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_on_large_host_arrays_by_the_sum_of_squares(dtype):
    # the fast path (one BLAS sum of squares) must not hide a NaN or infinity, and a sum that
    # overflows while every entry is finite must still read finite
    a = np.ones((128, 64), dtype)
    assert backend.all_finite(a)
    big = np.full((128, 64), np.finfo(dtype).max / 2, dtype)
    assert backend.all_finite(big)
    for bad in (np.nan, np.inf, -np.inf):
        b = a.copy()
        b[77, 5] = bad
        assert not backend.all_finite(b)
        assert not backend.all_finite(b.T)          # not contiguous: the entrywise test
