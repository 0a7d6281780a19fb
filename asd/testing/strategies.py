"""Hypothesis strategies that put points *on* kinks: where asd's rules have to decide.

Random floats almost never land on a kink, and away from kinks every AD tool is right. These
strategies plant exact zeros and breakpoints, tied entries, box boundaries and all-equal pooling
windows. Every number is a small dyadic rational (``k / 2**m``), so float64 and float32
evaluation of short piecewise-polynomial programs is exact and results can be compared with the
exact oracle's Fractions.

>>> from hypothesis import given, settings
>>> @settings(max_examples=5)
... @given(kink_arrays((3,)))
... def test(x):
...     assert x.shape == (3,)
>>> test()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = [
    "boundary_points",
    "directions",
    "dyadics",
    "kink_arrays",
    "pool_windows",
    "tied_arrays",
]

Shape = tuple[int, ...]


def dyadics(bound: float = 4.0, denominator: int = 4) -> st.SearchStrategy[float]:
    """Floats ``k / denominator`` in ``[-bound, bound]`` (``denominator`` a power of two)."""
    n = int(bound * denominator)
    return st.integers(-n, n).map(lambda k: k / denominator)


def _size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=int))


def _array(values: Sequence[float], shape: Shape, dtype) -> np.ndarray:
    return np.array(values, dtype=dtype).reshape(shape)


@st.composite
def kink_arrays(
    draw: Any,
    shape: Shape,
    kinks: Sequence[float] = (0.0,),
    *,
    bound: float = 4.0,
    dtype: Any = np.float64,
) -> np.ndarray:
    """Dyadic arrays with the breakpoints ``kinks`` planted on some entries (often several).

    For relu/abs use the default; for clip-like primitives pass the bounds; for a
    user's ``piecewise_polynomial`` its breakpoints.
    """
    size = _size(shape)
    entry = st.one_of(st.sampled_from(tuple(float(k) for k in kinks)), dyadics(bound))
    values = draw(st.lists(entry, min_size=size, max_size=size))
    if size and not any(v in kinks for v in values):
        values[draw(st.integers(0, size - 1))] = draw(st.sampled_from(tuple(kinks)))
    return _array(values, shape, dtype)


@st.composite
def tied_arrays(draw: Any, shape: Shape, *, bound: float = 4.0, dtype: Any = np.float64
                ) -> np.ndarray:
    """Arrays with ties: entries from a pool of 1-3 values, all-equal rows, a tied maximum.

    Ties among entries are where max, sort, top-k, median and pooling must decide.
    """
    size = _size(shape)
    kind = draw(st.sampled_from(["pool", "rows", "max"] if len(shape) >= 2 else ["pool", "max"]))
    if kind == "pool" or size < 2:
        pool = draw(st.lists(dyadics(bound), min_size=1, max_size=3))
        values = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
        return _array(values, shape, dtype)
    values = draw(st.lists(dyadics(bound), min_size=size, max_size=size))
    x = _array(values, shape, np.float64)
    if kind == "rows":
        rows = x.reshape(-1, shape[-1])
        equal = draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
        equal[0] = True
        rows[np.array(equal)] = rows[np.array(equal)][:, :1]
        return rows.reshape(shape).astype(dtype)
    top = float(np.max(x))
    flat = x.reshape(-1)
    picks = draw(st.lists(st.integers(0, size - 1), min_size=2, max_size=min(size, 4),
                          unique=True))
    flat[picks] = top
    return flat.reshape(shape).astype(dtype)


@st.composite
def directions(draw: Any, shape: Shape, *, dtype: Any = np.float64,
               allow_zero_entries: bool = True) -> np.ndarray:
    """Nonzero dyadic directions, often with zero and repeated entries.

    Zero entries keep a tie tied along the ray, repeated entries tie tangents too, so rules
    are exercised on second-order and degenerate ties as well.
    """
    size = _size(shape)
    pool = [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 0.25, -0.25]
    if allow_zero_entries:
        pool.append(0.0)
    values = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
    if size and not any(values):
        values[draw(st.integers(0, size - 1))] = draw(st.sampled_from([-1.0, 1.0]))
    return _array(values, shape, dtype)


@st.composite
def boundary_points(draw: Any, shape: Shape, lo: float = -1.0, hi: float = 1.0, *,
                    dtype: Any = np.float64) -> np.ndarray:
    """Points for clip-like boxes ``[lo, hi]``: entries on either bound, inside and outside."""
    size = _size(shape)
    width = hi - lo
    entry = st.one_of(
        st.sampled_from((float(lo), float(hi))),
        st.sampled_from((lo + width / 4, lo + width / 2, lo - 0.5, hi + 0.5, lo - 2.0, hi + 2.0)),
    )
    values = draw(st.lists(entry, min_size=size, max_size=size))
    if size and not any(v in (lo, hi) for v in values):
        values[draw(st.integers(0, size - 1))] = draw(st.sampled_from((float(lo), float(hi))))
    return _array(values, shape, dtype)


@st.composite
def pool_windows(
    draw: Any,
    shape: Shape,
    window: int | Sequence[int] = 2,
    *,
    bound: float = 4.0,
    dtype: Any = np.float64,
) -> np.ndarray:
    """Arrays tiled by pooling windows (over the trailing axes) that are often all equal.

    ``window`` is one size per pooled trailing axis (an int pools the last axis only); those
    axes must be multiples of it. Each window is either constant
    (every entry ties for the max) or has a tied maximum, or is random.
    """
    window = (window,) if isinstance(window, int) else tuple(window)
    lead, tail = tuple(shape[: len(shape) - len(window)]), tuple(shape[-len(window):])
    if any(n % w for n, w in zip(tail, window, strict=True)):
        raise ValueError(f"pool_windows: trailing shape {tail} is not a multiple of {window}")
    blocks = lead + tuple(n // w for n, w in zip(tail, window, strict=True))
    n_blocks, per = _size(blocks), _size(window)
    out = np.empty(blocks + window)
    flat_blocks = out.reshape(n_blocks, per)
    for b in range(n_blocks):
        kind = draw(st.sampled_from(["equal", "tied max", "random"]))
        values = np.array(draw(st.lists(dyadics(bound), min_size=per, max_size=per)))
        if kind == "equal":
            values[:] = values[0]
        elif kind == "tied max" and per > 1:
            i, j = draw(st.lists(st.integers(0, per - 1), min_size=2, max_size=2, unique=True))
            values[[i, j]] = values.max()
        flat_blocks[b] = values
    # interleave block axes with window axes, then merge each pair into one axis
    k = len(window)
    nl = len(lead)
    order = list(range(nl))
    for a in range(k):
        order += [nl + a, nl + k + a]
    return out.transpose(order).reshape(shape).astype(dtype)
