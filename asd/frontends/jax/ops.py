"""The lax operator table: every lax primitive ``asd.jax`` imports, as a handler on numpy or
traced arrays (`LAX`), and the primitive sets the interpreter consults."""

from __future__ import annotations

import operator
from collections.abc import Callable

import jax
import numpy as np

import asd
from asd.core import backend
from asd.core.linear import FanIn, Take
from asd.core.primitive import Primitive
from asd.errors import (
    NotLipschitzError,
    UnsupportedError,
)
from asd.frontends import common

# ----- helpers -----


def _lib(name: str) -> Callable:
    return common.library_function(name, "JAX primitive")


def _raw(x):
    return common.numpy_value(x)






def _transpose(x, perm):
    perm = tuple(int(a) for a in perm)
    return x if perm == tuple(range(len(perm))) else np.transpose(x, perm)


def _move_to_end(x, axes: tuple[int, ...]):
    """Transpose ``axes`` to the end; returns the array and the inverse permutation."""
    rest = tuple(a for a in range(np.ndim(x)) if a not in axes)
    perm = rest + tuple(axes)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return _transpose(x, perm), inverse


# ----- the lax table -----

def _integer_pow(x, *, y):
    return x ** int(y)


def _select_n(pred, *cases):
    if len(cases) == 1:
        return cases[0]
    if len(cases) != 2:
        if not common.is_traced(pred):
            return np.choose(np.asarray(pred, dtype=int), cases)
        # a traced selector (jnp.select's index, made from comparisons): case k where it is
        # k, nested as np.select's path nests its wheres, so its ties are decided the same way
        out = cases[-1]
        for k in range(len(cases) - 2, -1, -1):
            out = np.where(pred == k, cases[k], out)
        return out
    # select_n(p, a, b) is b where p else a
    return np.where(pred, cases[1], cases[0])


def _reduce(np_fn):
    def reduce(x, *, axes, **_):
        return np_fn(x, axis=tuple(int(a) for a in axes))

    return reduce


def _argminmax(np_fn):
    def arg(x, *, axes, index_dtype):
        index = np_fn(x, axis=int(axes[0]))  # traced: discrete, so using it as a number raises
        return index if common.is_traced(index) else index.astype(index_dtype)

    return arg


def _dot_general(lhs, rhs, *, dimension_numbers, **_):
    """Batch axes first, contracted axes last/first, one batched matmul, then reshape."""
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (tuple(int(a) for a in t) for t in (lc, rc, lb, rb))
    ls, rs = np.shape(lhs), np.shape(rhs)
    lf = tuple(a for a in range(len(ls)) if a not in lc + lb)
    rf = tuple(a for a in range(len(rs)) if a not in rc + rb)
    batch = tuple(ls[a] for a in lb)
    size = lambda shape, axes: int(np.prod([shape[a] for a in axes], dtype=int))  # noqa: E731
    a = _transpose(lhs, lb + lf + lc).reshape(batch + (size(ls, lf), size(ls, lc)))
    b = _transpose(rhs, rb + rc + rf).reshape(batch + (size(rs, rc), size(rs, rf)))
    out = a @ b
    return out.reshape(batch + tuple(ls[i] for i in lf) + tuple(rs[i] for i in rf))


def _conv(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
          dimension_numbers, feature_group_count, batch_group_count, **_):
    if any(d != 1 for d in lhs_dilation):
        raise UnsupportedError("conv_general_dilated with lhs_dilation (a transposed conv)")
    if batch_group_count != 1:
        raise UnsupportedError("conv_general_dilated with batch_group_count != 1")
    if isinstance(padding, str):
        raise UnsupportedError(f"conv_general_dilated with padding={padding!r}")
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    x = _transpose(lhs, lhs_spec)
    w = _transpose(rhs, rhs_spec)
    y = asd.conv(x, w, None, tuple(window_strides), tuple(tuple(p) for p in padding),
                 tuple(rhs_dilation), int(feature_group_count))
    return _transpose(y, np.argsort(out_spec))


def _window_axes(window_dimensions, window_strides, padding):
    return tuple(a for a, (k, s, p) in enumerate(zip(window_dimensions, window_strides, padding))
                 if k != 1 or s != 1 or tuple(p) != (0, 0))


def _reduce_window_max(x, *, window_dimensions, window_strides, padding, base_dilation,
                       window_dilation):
    if any(d != 1 for d in base_dilation) or any(d != 1 for d in window_dilation):
        raise UnsupportedError("reduce_window_max with dilation")
    axes = _window_axes(window_dimensions, window_strides, padding)
    if not axes:
        return x
    if len(axes) > 2:
        raise UnsupportedError(f"reduce_window_max over {len(axes)} axes (1 or 2 supported)")
    moved, inverse = _move_to_end(x, axes)
    pads = tuple(tuple(padding[a]) for a in axes)
    if any(lo != hi for lo, hi in pads):
        raise UnsupportedError(f"reduce_window_max with asymmetric padding {pads}")
    pool = _lib("max_pool1d" if len(axes) == 1 else "max_pool2d")
    y = pool(moved, tuple(window_dimensions[a] for a in axes),
             stride=tuple(window_strides[a] for a in axes),
             padding=tuple(lo for lo, _ in pads))
    return _transpose(y, inverse)


def _reduce_window_sum(x, *, window_dimensions, window_strides, padding, base_dilation,
                       window_dilation):
    if any(d != 1 for d in base_dilation) or any(d != 1 for d in window_dilation):
        raise UnsupportedError("reduce_window_sum with dilation")
    axes = _window_axes(window_dimensions, window_strides, padding)
    if not axes:
        return x
    moved, inverse = _move_to_end(x, axes)
    lead = np.shape(moved)[:np.ndim(moved) - len(axes)]
    spatial = np.shape(moved)[len(lead):]
    kernel = tuple(window_dimensions[a] for a in axes)
    pads = tuple(tuple(padding[a]) for a in axes)
    if any(lo != hi for lo, hi in pads):
        raise UnsupportedError(f"reduce_window_sum with asymmetric padding {pads}")
    flat = moved.reshape((1, int(np.prod(lead, dtype=int))) + spatial)
    y = asd.avg_pool(flat, kernel, tuple(window_strides[a] for a in axes),
                     tuple(lo for lo, _ in pads)) * float(np.prod(kernel))
    y = y.reshape(lead + np.shape(y)[2:])
    return _transpose(y, inverse)


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    shape = tuple(int(s) for s in shape)
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = np.shape(x)[i]
    y = x.reshape(tuple(expanded)) if np.shape(x) != tuple(expanded) else x
    return common.broadcast(y, shape) if tuple(expanded) != shape else y


def _reshape(x, *, new_sizes, dimensions=None, **_):
    if dimensions is not None:
        x = _transpose(x, dimensions)
    return x.reshape(tuple(int(s) for s in new_sizes))


def _squeeze(x, *, dimensions):
    shape = np.shape(x)
    return x.reshape(tuple(n for i, n in enumerate(shape) if i not in set(dimensions)))


def _expand_dims(x, *, dimensions):
    shape = list(np.shape(x))
    for d in sorted(dimensions):
        shape.insert(d, 1)
    return x.reshape(tuple(shape))


def _convert(x, *, new_dtype, **_):
    new = np.dtype(new_dtype)
    if np.issubdtype(new, np.inexact):
        # the dtype read from the value (a staged sweep's is a JAX tracer: no host copy)
        return x if backend.numpy_dtype(x) == new else x.astype(new)
    if common.is_traced(x) and backend.numpy_dtype(x) == np.bool_:
        return x  # a traced comparison as 0/1: its jump rule still decides its ties
    if (common.is_traced(x) and np.issubdtype(backend.numpy_dtype(x), np.integer)
            and np.issubdtype(new, np.integer) and new.itemsize >= 4):
        return x  # a traced position (argmax) as int32: the same integers; where it is
        # used as an index, that use decides its ties (`_dynamic_slice`) or refuses it
    if common.is_traced(x):
        raise UnsupportedError(f"convert_element_type to {new} of a differentiated value (a "
                               "step function: rounding to integers or booleans)")
    return np.asarray(x).astype(new)


def _slice(x, *, start_indices, limit_indices, strides=None):
    strides = strides or (1,) * len(start_indices)
    return x[tuple(slice(int(a), int(b), int(s))
                   for a, b, s in zip(start_indices, limit_indices, strides))]


def _dynamic_slice(x, *starts, slice_sizes):
    """``lax.dynamic_slice`` at constant starts (clamped into the operand, as JAX does), or
    at one start that is an argmax/argmin of the differentiated input (`_slice_at_position`:
    decided along the ray, refused where tied positions read different values)."""
    traced = [i for i, s in enumerate(starts) if common.is_traced(s)]
    shape = np.shape(x)
    idx = tuple(slice(None) if i in traced else slice(s, s + n) for i, (s, n) in enumerate(
        (s if i in traced else int(np.clip(_raw(s), 0, dim - n)), n)
        for i, (s, n, dim) in enumerate(zip(starts, slice_sizes, shape, strict=True))))
    if traced:
        return _slice_at_position(x[idx], starts, slice_sizes, traced)
    return x[idx]


def _slice_at_position(x, starts, slice_sizes, traced: list[int]):
    """``x`` (its other axes already sliced) at the traced start, read as `gather_at` reads
    ``np.take(x, argmax(y), axis)``: the position is decided along the ray and a tie whose
    positions read different values is refused. Only a single entry along one axis, at a
    position that never needs JAX's clamping (argmax over at most that axis' length)."""
    from asd.library.order import _source_of, gather_at

    i = traced[0]
    s = starts[i]
    source = _source_of(s) if len(traced) == 1 and slice_sizes[i] == 1 else None
    if source is not None:
        _, y, axis, post = source
        reach = int(np.size(y.value)) if axis is None else int(np.shape(y.value)[axis])
        if not post and np.ndim(s.value) == 0 and reach <= np.shape(x)[i]:
            return np.expand_dims(gather_at(x, s, mode="take", axis=i), i)
    raise NotLipschitzError(
        "dynamic_slice at a position computed from the differentiated input other than an "
        "argmax/argmin within the operand's range (e.g. x[argmax(x) + 1]): the position "
        "jumps with the input, so the result does too. Index by jnp.argmax(y) itself, or use "
        "a reduction such as jnp.max instead.")


def _positions(shape) -> np.ndarray:
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int32).reshape(shape)


def _inactive(x) -> bool:
    """Whether a traced value is a constant of the sweep: computed only from arguments that
    are not differentiated (integer labels inside ``jax.jit``) or behind ``stop_gradient``.
    A walk over its ancestors in the trace (shapes, not values), since a position computed
    from the differentiated input (``argmax(x)``) is inactive too but jumps with it."""
    if not common.is_traced(x):
        return False
    nodes, todo, seen = x._trace.nodes, [x._id], set()
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        node = nodes[k]
        if node.active:
            return False
        if node.prim is None:
            continue
        if node.prim.stops_gradient:
            continue
        todo.extend(r for r in node.args if type(r) is int)
    return True


def _fill_for(dtype, fill_value):
    """The value a fill-mode gather reads out of bounds: JAX's default (NaN for inexact
    dtypes, the extreme integer otherwise) unless the program gives one."""
    dtype = np.dtype(dtype)
    if fill_value is not None:
        return np.asarray(fill_value, dtype)
    if dtype.kind in "fc":
        return np.asarray(np.nan, dtype)
    if dtype.kind == "b":
        return np.asarray(True)
    info = np.iinfo(dtype)
    return np.asarray(info.max if dtype.kind == "u" else info.min, dtype)


def _device_positions(shape, indices, gather: tuple):
    """The flat operand position each gathered entry reads, ``size`` where a fill-mode read
    is out of bounds (the fill appended to the flat operand): JAX's gather of the entry
    positions, an array computation on the indices' device (they may be jit tracers)."""
    dn, slice_sizes, mode, extra = gather
    size = int(np.prod(shape, dtype=np.int64))
    where = jax.lax.gather(jax.numpy.asarray(_positions(shape)), jax.numpy.asarray(indices),
                           dn, slice_sizes, mode=mode, fill_value=-1, **dict(extra))
    return jax.numpy.where(where < 0, size, where)


def _take_gather_impl(flat, indices, *, shape, gather):
    """``flat[positions]`` with the positions gathered from ``indices`` (`_device_positions`);
    ``flat`` is the flattened operand with its fill appended."""
    where = _device_positions(shape, indices, gather)
    if backend.is_host(flat):
        return np.asarray(flat)[np.asarray(where)]
    return backend.namespace(flat).take(flat, jax.numpy.reshape(where, (-1,)), axis=0).reshape(
        tuple(where.shape))


def _take_gather_rule(xs, dxs, *, shape, gather):
    """A gather at constant positions is linear in the operand: a `Take` map of the same
    positions (its pull scatter-adds); the indices carry no tangent."""
    flat, indices = xs
    ans = _take_gather_impl(flat, indices, shape=shape, gather=gather)
    where = jax.numpy.reshape(_device_positions(shape, indices, gather), (-1,))
    if backend.is_host(flat):
        where = np.asarray(where)
    out = tuple(np.shape(ans)) if backend.is_host(ans) else tuple(ans.shape)
    return ans, FanIn(Take(where, tuple(np.shape(flat)) if backend.is_host(flat)
                           else tuple(flat.shape), out), None)


take_gather_p = Primitive("jax_gather", _take_gather_impl, _take_gather_rule, array_api=True)


def _gather_traced_indices(x, indices, dimension_numbers, slice_sizes, mode, fill_value,
                           params):
    """A gather whose indices are traced but constant (not differentiated: labels inside
    ``jax.jit``): the positions are computed on the device inside the sweep, never read."""
    dtype = backend.numpy_dtype(x.value if common.is_traced(x) else x)
    flat = np.concatenate([np.reshape(x, (-1,)), np.reshape(_fill_for(dtype, fill_value), 1)])
    extra = tuple(sorted((k, v) for k, v in params.items()
                         if k in ("indices_are_sorted", "unique_indices")))
    return take_gather_p(flat, indices, shape=tuple(np.shape(x)),
                         gather=(dimension_numbers, tuple(slice_sizes), mode, extra))


def _take_along_axis(shape, index_shape, dn, slice_sizes) -> tuple[int, tuple] | None:
    """``(axis, unit)`` for a gather that reads ``np.take_along_axis(x, p, axis)``, as
    ``jnp.take_along_axis`` (and ``x[p]`` for a 1-d ``x``) spell it: one entry per index
    along ``axis``, every other axis batched with itself, except the ``unit`` axes of one
    entry, which JAX takes as slices (offset dimensions) and leaves out of the indices (then
    ``p``'s shape less those axes, plus a trailing unit axis). None for any other gather."""
    nd = len(shape)
    if (len(dn.collapsed_slice_dims) != 1
            or tuple(dn.start_index_map) != tuple(dn.collapsed_slice_dims)
            or any(int(n) != 1 for n in slice_sizes)):
        return None
    axis = int(dn.collapsed_slice_dims[0])
    unit = tuple(int(d) for d in dn.offset_dims)
    if any(d == axis or shape[d] != 1 for d in unit):
        return None
    kept = [d for d in range(nd) if d not in unit]
    batched = tuple(d for d in kept if d != axis)
    if (tuple(dn.operand_batching_dims) != batched
            or tuple(dn.start_indices_batching_dims) != tuple(kept.index(d) for d in batched)
            or len(index_shape) != len(kept) + 1 or index_shape[-1] != 1
            or any(index_shape[kept.index(d)] != shape[d] for d in batched)):
        return None
    return axis, unit


def _positions_behind(indices, nd: int, unit: tuple):
    """The traced positions ``p`` (``nd`` axes, of one entry along ``unit``) behind JAX's
    spelling of an index array, ``reshape(where(p < 0, p + n, p))`` (either step may be
    missing), where ``p`` is an argmax, argmin or argsort (then static indexing or unit
    axes: `asd.library.order`'s position sources; never negative, so the wrap is the
    identity); None for any other traced index."""
    from asd.library.order import _source_of

    trace, k = indices._trace, indices._id
    node = trace.nodes[k]
    if node.name == "reshape" and type(node.args[0]) is int:
        k = node.args[0]
        node = trace.nodes[k]
    if (node.name == "where" and node.params.get("op") == "<" and len(node.args) == 4
            and type(node.args[0]) is int and node.args[0] == node.args[3]
            and getattr(node.args[1], "value", None) is not None
            and np.ndim(node.args[1].value) == 0 and node.args[1].value == 0):
        k = node.args[0]
    shape = tuple(np.shape(trace.values[k]))
    kept = tuple(n for d, n in enumerate(shape) if d not in unit)
    if (len(shape) != nd or any(shape[d] != 1 for d in unit)
            or kept + (1,) != tuple(np.shape(indices.value))):
        return None
    pos = type(indices)(trace, k, trace.values[k])
    return pos if _source_of(pos) is not None else None


def _within(pos, extent: int) -> bool:
    """Whether every position its source can produce indexes an axis of ``extent`` entries
    (JAX fills or clamps reads beyond it where numpy would raise)."""
    from asd.library.order import _source_of

    _, y, axis, _ = _source_of(pos)
    shape = np.shape(y.value)
    reach = int(np.prod(shape, dtype=np.int64)) if axis is None else int(shape[axis])
    return reach <= extent


def _gather(x, indices, *, dimension_numbers, slice_sizes, mode=None, fill_value=None,
            **params):
    """Any gather with constant indices: JAX's own gather, run on the operand's entry
    positions, says which entry each output reads; asd then indexes the flat operand (a
    linear map whose pull scatter-adds). Out-of-bounds reads in fill mode give the fill.
    Traced indices that are constants of the sweep go through `take_gather_p`."""
    if _inactive(indices):
        return _gather_traced_indices(x, indices, dimension_numbers, slice_sizes, mode,
                                      fill_value, params)
    if common.is_traced(indices):
        along = _take_along_axis(np.shape(x), np.shape(indices), dimension_numbers,
                                 slice_sizes)
        axis, unit = along if along is not None else (None, ())
        pos = None if along is None else _positions_behind(indices, np.ndim(x), unit)
        if pos is not None and _within(pos, np.shape(x)[axis]):
            from asd.library.order import take_along_axis

            return take_along_axis(x, pos, axis)
        raise NotLipschitzError(
            "gather at positions computed from the differentiated input other than "
            "argmax/argmin/argsort positions read along their own axis (x[argsort(x)], "
            "jnp.take_along_axis(x, jnp.argsort(y), axis)): the positions jump where values "
            "tie, so the result does too. Use a reduction such as jnp.max instead.")
    where = np.asarray(jax.lax.gather(
        _positions(np.shape(x)), np.asarray(indices), dimension_numbers, tuple(slice_sizes),
        mode=mode, fill_value=-1, **{k: v for k, v in params.items()
                                     if k in ("indices_are_sorted", "unique_indices")}))
    fill = np.nan if fill_value is None else float(fill_value)
    return _lib("take_flat")(x, where, fill)


def _scatter_targets(operand_shape, indices, updates_shape, dn, mode) -> np.ndarray:
    """The operand position each update entry lands on (``-1``: dropped), from JAX's own
    gather with the dimension numbers that transpose the scatter."""
    window = iter(int(updates_shape[d]) for d in dn.update_window_dims)
    skipped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    sizes = tuple(1 if d in skipped else next(window) for d in range(len(operand_shape)))
    gdn = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(dn.update_window_dims),
        collapsed_slice_dims=tuple(dn.inserted_window_dims),
        start_index_map=tuple(dn.scatter_dims_to_operand_dims),
        operand_batching_dims=tuple(dn.operand_batching_dims),
        start_indices_batching_dims=tuple(dn.scatter_indices_batching_dims))
    clip = mode is not None and "CLIP" in str(mode)
    gmode = jax.lax.GatherScatterMode.CLIP if clip else jax.lax.GatherScatterMode.FILL_OR_DROP
    return np.asarray(jax.lax.gather(_positions(operand_shape), np.asarray(indices), gdn,
                                     sizes, mode=gmode, fill_value=-1))


def _scatter_add(operand, indices, updates, *, dimension_numbers, mode=None, **_):
    """``operand.at[indices].add(updates)``: a linear primitive (`scatter_add`) over the
    positions the updates land on; repeated positions accumulate."""
    if common.is_traced(indices):
        raise NotLipschitzError("scatter-add at positions computed from the differentiated "
                                "input: where the values land jumps with it.")
    targets = _scatter_targets(np.shape(operand), indices, np.shape(updates),
                               dimension_numbers, mode)
    size = int(np.prod(np.shape(operand), dtype=np.int64))
    added = _lib("scatter_add")(updates, targets, size)
    return operand + np.reshape(added, np.shape(operand))


def _scatter(operand, indices, updates, *, dimension_numbers, mode=None, **_):
    """``operand.at[indices].set(updates)``: each written entry reads its update, the others
    the operand (one gather from both, so linear and exact); a position written twice takes
    the last update, as XLA does on CPU."""
    if common.is_traced(indices):
        raise NotLipschitzError("scatter at positions computed from the differentiated "
                                "input: which entries are overwritten jumps with it.")
    targets = _scatter_targets(np.shape(operand), indices, np.shape(updates),
                               dimension_numbers, mode).ravel()
    size = int(np.prod(np.shape(operand), dtype=np.int64))
    writer = np.full(size, -1, np.int64)
    kept = np.flatnonzero(targets >= 0)
    writer[targets[kept]] = kept
    source = np.where(writer >= 0, size + writer, np.arange(size))
    both = np.concatenate([np.reshape(operand, (-1,)), np.reshape(updates, (-1,))])
    return np.reshape(both[source], np.shape(operand))


def _rev(x, *, dimensions):
    return x[tuple(slice(None, None, -1) if a in set(dimensions) else slice(None)
                   for a in range(np.ndim(x)))]


def _concatenate(*xs, dimension):
    return np.concatenate(xs, axis=int(dimension))


def _pad(x, value, *, padding_config):
    if any(int(i) for _, _, i in padding_config):
        raise UnsupportedError("pad with interior padding")
    if common.is_traced(value) or float(_raw(value)) != 0.0:
        raise UnsupportedError("pad with a nonzero or differentiated padding value")
    pads = tuple((int(lo), int(hi)) for lo, hi, _ in padding_config)
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise UnsupportedError("pad with negative padding (cropping)")
    return _lib("pad")(x, pads)


def _sort(*operands, dimension, is_stable=True, num_keys=1):
    if num_keys != 1:
        raise UnsupportedError(f"sort with num_keys={num_keys}")
    keys = operands[0]
    dimension = int(dimension)
    values = np.sort(keys, axis=dimension)
    if len(operands) == 1:
        return [values]
    order = np.argsort(keys, axis=dimension, kind="stable")
    if not common.is_traced(order):
        order = np.asarray(order)
    rest = []
    for other in operands[1:]:
        if common.is_traced(other):
            raise UnsupportedError("sort carrying a differentiated operand along the keys")
        other = np.asarray(other)
        positions = np.arange(other.shape[dimension]).reshape(
            [-1 if a == dimension else 1 for a in range(other.ndim)])
        if common.is_traced(order) and np.array_equal(
                other, np.broadcast_to(positions, other.shape)):
            rest.append(order)  # argsort: the positions, discrete (refused as a number)
        elif common.is_traced(order):
            raise UnsupportedError("sort carrying a constant operand along differentiated keys "
                                   "(its result jumps where keys tie); only argsort is supported")
        else:
            rest.append(np.take_along_axis(other, order, axis=dimension))
    return [values, *rest]


def _top_k(x, *, k, axis=-1, **_):
    axis = int(axis) % np.ndim(x)
    values = np.sort(x, axis=axis)
    index = [slice(None)] * np.ndim(x)
    index[axis] = slice(None, -int(k) - 1 if int(k) < np.shape(x)[axis] else None, -1)
    order = np.take(_rev(np.argsort(x, axis=axis, kind="stable"), dimensions=(axis,)),
                    np.arange(int(k)), axis=axis)  # traced: discrete, refused as a number
    return [values[tuple(index)], order if common.is_traced(order) else order.astype(np.int32)]


def _clamp(lo, x, hi):
    return np.clip(x, lo, hi)


def _cumlogsumexp(x, axis: int):
    """Each prefix's logsumexp, from the triangle of prefixes (``n²`` per row, like
    ``cumprod``): a running shift would need a Python loop over the axis."""
    n = np.shape(x)[axis]
    moved = np.moveaxis(x, axis, -1)
    rows = np.broadcast_to(np.expand_dims(moved, -2), np.shape(moved)[:-1] + (n, n))
    prefixes = np.where(np.tri(n, dtype=bool), rows, -np.inf)
    return np.moveaxis(_lib("logsumexp")(prefixes, axis=-1), -1, axis)


CUMULATIVE = {
    "cumsum": lambda x, axis: np.cumsum(x, axis=axis),
    "cumprod": lambda x, axis: np.cumprod(x, axis=axis),
    "cummax": lambda x, axis: _lib("cummax")(x, axis=axis),
    "cummin": lambda x, axis: -_lib("cummax")(-x, axis=axis),
    "cumlogsumexp": _cumlogsumexp,
}


def _cumulative(name):
    def op(x, *, axis, reverse=False):
        axis = int(axis)
        if reverse:
            return np.flip(CUMULATIVE[name](np.flip(x, axis), axis), axis)
        return CUMULATIVE[name](x, axis)

    op.__name__ = name
    return op


def _round(x, *, rounding_method=1):
    """``lax.round``: to nearest even (method 1, numpy's) or away from zero (method 0)."""
    if int(rounding_method) == 1:
        return np.round(x)
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


def _rem(x, y):
    """``lax.rem`` (C's fmod, the sign of ``x``): ``x - y trunc(x / y)``, whose jumps the
    discontinuous-primitive policy checks (``trunc``'s, at ``x / y`` an integer, decided
    along the ray whether or not ``y`` is differentiated, as numpy's ``x % y`` is)."""
    return x - y * np.trunc(x / y)


def _split(x, *, sizes, axis):
    return np.split(x, np.cumsum([int(s) for s in sizes])[:-1], axis=int(axis))


def _stack(*xs, axis):
    return np.stack(xs, axis=int(axis))


def _signs(mine, theirs) -> np.ndarray:
    """Per column of the vectors ``mine`` (asd's: numpy's signs at the point), the sign that
    makes them JAX's ``theirs``: one basis up to a sign per simple value, so the flip is a
    constant and the derivative that of JAX's vectors."""
    dots = np.sum(_raw(mine) * np.asarray(theirs), axis=-2)
    return np.where(dots < 0, -1.0, 1.0).astype(_raw(mine).dtype)


def _svd(x, *, full_matrices, compute_uv, subset_by_index=None, used=None, **_):
    """``lax.linalg.svd`` (outputs ``s`` or ``s, u, vt``) through numpy.linalg.svd's rules:
    singular values everywhere, vectors where the singular values are simple and nonzero,
    each pair flipped to JAX's sign at the point. Vectors nobody reads are not computed (their
    rule refuses repeated values, which the values alone do not). A batch of matrices goes
    to the library as it is (which refuses it where it takes one matrix only)."""
    if subset_by_index is not None and tuple(subset_by_index) != (0, min(np.shape(x)[-2:])):
        raise UnsupportedError(f"svd with subset_by_index={subset_by_index}")
    s = np.linalg.svd(x, compute_uv=False)
    if not compute_uv:
        return [s]
    if used is not None and not any(used[1:]):
        return [s, None, None]
    u, s, vt = np.linalg.svd(x, full_matrices=bool(full_matrices))
    theirs = jax.lax.linalg.svd(_raw(x), full_matrices=bool(full_matrices), compute_uv=True)
    d = _signs(u, theirs[0])
    return [s, u * d[..., None, :], vt * d[..., :, None]]


def _eigh(x, *, lower=True, sort_eigenvalues=True, subset_by_index=None, used=None, **_):
    """``lax.linalg.eigh`` (outputs ``v, w``) through numpy.linalg.eigh's rules, reading the
    triangle ``lower`` names, each vector flipped to JAX's sign at the point; the vectors
    only where they are read (``jnp.linalg.eigvalsh`` drops them)."""
    if not sort_eigenvalues:
        raise UnsupportedError("eigh with sort_eigenvalues=False (numpy's order is ascending)")
    if subset_by_index is not None and tuple(subset_by_index) != (0, np.shape(x)[-1]):
        raise UnsupportedError(f"eigh with subset_by_index={subset_by_index}")
    if used is not None and not used[0]:
        return [None, np.linalg.eigvalsh(x, UPLO="L" if lower else "U")]
    w, v = np.linalg.eigh(x, UPLO="L" if lower else "U")
    d = _signs(v, jax.lax.linalg.eigh(_raw(x), lower=bool(lower))[0])
    return [v * d[..., None, :], w]


def _identity(x, **_):
    return x


def _plain(fn: Callable) -> Callable:
    """A handler for a primitive whose parameters (``accuracy``...) do not change the math."""

    def handler(*args, **_):
        return fn(*args)

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def _logistic(x, **_):
    return _lib("sigmoid")(x)


LAX: dict[str, Callable] = {
    # arithmetic
    "add": _plain(operator.add), "sub": _plain(operator.sub), "mul": _plain(operator.mul),
    "div": _plain(operator.truediv), "neg": _plain(operator.neg), "pow": _plain(operator.pow),
    "integer_pow": _integer_pow, "square": _plain(lambda x: x * x),
    "dot_general": _dot_general,
    # elementwise
    "abs": _plain(np.abs), "exp": _plain(np.exp), "log": _plain(np.log),
    "sqrt": _plain(np.sqrt), "tanh": _plain(np.tanh), "expm1": _plain(np.expm1),
    "log1p": _plain(np.log1p), "logistic": _logistic, "exp2": _plain(np.exp2),
    "rsqrt": _plain(lambda x: 1.0 / np.sqrt(x)), "cbrt": _plain(np.cbrt),
    "sin": _plain(np.sin), "cos": _plain(np.cos), "tan": _plain(np.tan),
    "asin": _plain(np.arcsin), "acos": _plain(np.arccos), "atan": _plain(np.arctan),
    "sinh": _plain(np.sinh), "cosh": _plain(np.cosh), "asinh": _plain(np.arcsinh),
    "acosh": _plain(np.arccosh), "atanh": _plain(np.arctanh), "atan2": _plain(np.arctan2),
    # discontinuous: their jumps are checked like every jump
    "sign": _plain(np.sign), "floor": _plain(np.floor), "ceil": _plain(np.ceil),
    "round": _round, "rem": _plain(_rem),
    # piecewise
    "max": _plain(np.maximum), "min": _plain(np.minimum), "select_n": _select_n,
    "clamp": _clamp, "and": _plain(np.bitwise_and), "or": _plain(np.bitwise_or),
    "xor": _plain(np.bitwise_xor), "not": _plain(np.invert),  # logical on comparisons
    "gt": _plain(operator.gt), "ge": _plain(operator.ge),
    "lt": _plain(operator.lt), "le": _plain(operator.le), "eq": _plain(operator.eq),
    "ne": _plain(operator.ne),
    # reductions and order
    "reduce_sum": _reduce(np.sum), "reduce_max": _reduce(np.max), "reduce_min": _reduce(np.min),
    "argmax": _argminmax(np.argmax), "argmin": _argminmax(np.argmin),
    "reduce_prod": _reduce(np.prod),
    "sort": _sort, "top_k": _top_k, **{name: _cumulative(name) for name in CUMULATIVE},
    # nn
    "conv_general_dilated": _conv, "reduce_window_max": _reduce_window_max,
    "reduce_window_sum": _reduce_window_sum,
    # structure
    "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape, "squeeze": _squeeze,
    "expand_dims": _expand_dims,
    "transpose": lambda x, *, permutation: _transpose(x, permutation),
    "convert_element_type": _convert, "slice": _slice, "dynamic_slice": _dynamic_slice,
    "gather": _gather, "scatter-add": _scatter_add, "scatter": _scatter, "split": _split,
    "concatenate": _concatenate, "stack": _stack, "pad": _pad, "rev": _rev,
    "tile": lambda x, *, reps: np.tile(x, tuple(int(r) for r in reps)),
    "copy": _identity, "copy_p": _identity, "optimization_barrier": lambda *xs: list(xs),
    "stop_gradient": _plain(lambda x: asd.stop_gradient(x)),
    # linear algebra
    "svd": _svd, "eigh": _eigh,
}
"""lax primitive name -> handler on numpy or traced arrays (params as keywords). Handlers of
primitives with several results return a list. Extend it to teach the importer a primitive."""

MULTIPLE = {"sort", "top_k", "optimization_barrier", "split", "svd", "eigh"}

USED = {"svd", "eigh"}
"""Primitives whose handler is told which results are read (``used=``): it skips the
others."""

# Call-like primitives: the name and the parameter holding the body to interpret.
CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
         "remat": "jaxpr", "checkpoint": "jaxpr", "custom_jvp_call": "call_jaxpr",
         "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
         "custom_lin": None}

def _det(a):
    """``jnp.linalg.det`` as asd's ``det`` primitive: JAX computes it as ``sign * exp(log|det|)``
    (slogdet, by LU) under its own ``custom_jvp``, whose body has no derivative at a singular
    matrix (``log 0``); the polynomial's gradient there is the cofactor matrix."""
    return np.linalg.det(a)


def _hypot(a, b):
    """``jnp.hypot`` as asd's ``hypot``: JAX scales by the larger operand behind
    ``where(max == 0, ...)``, a jump in the jaxpr where the norm itself is Lipschitz (F39)."""
    return np.hypot(a, b)


def _trunc(x):
    """``jnp.trunc`` as asd's ``trunc``: JAX writes it ``where(x < 0, ceil(x), floor(x))``, whose
    condition ties at 0 between two jumps; numpy's trunc has one jump per nonzero integer and
    is constant near 0 (so ``x % y`` with a traced divisor, ``x - y trunc(x / y)``, is read
    as numpy's path reads it)."""
    return np.trunc(x)


def _floor_divide(x, y):
    """``jnp.floor_divide`` as numpy's: JAX corrects a truncated quotient by
    ``where((sign(x) != sign(y)) & (rem != 0), q - 1, q)``, whose condition ties wherever
    the quotient is an integer (the jump the floor has there anyway, read as such)."""
    return np.floor_divide(x, y)


def _remainder(x, y):
    """``jnp.remainder`` as numpy's (JAX's correction of ``rem`` ties as floor_divide's)."""
    return np.remainder(x, y)


CUSTOM_JVP: dict[tuple[str, str], Callable] = {
    ("trunc", "jax/_src/numpy/lax_numpy.py"): _trunc,
    ("floor_divide", "jax/_src/numpy/ufuncs.py"): _floor_divide,
    ("remainder", "jax/_src/numpy/ufuncs.py"): _remainder,
    ("_det", "jax/_src/numpy/linalg.py"): _det,
    ("hypot", "jax/_src/numpy/ufuncs.py"): _hypot,
}
"""JAX-internal functions (``custom_jvp`` or jitted) mapped as a whole, by the function's
name and its source file (a user's function of the same name is not matched): their bodies
compute a function asd knows as one primitive in a way that is undefined (or a jump) where
the function is not."""

# Primitives whose result is locally constant at every finite point.
LOCALLY_CONSTANT = {"is_finite"}
