"""JAX programs in, correct subgradients out: ``asd.jax.subgrad`` and ``asd.jax.function``.

``jax.grad`` picks a fixed derivative at kinks (``jax.nn.relu`` declares ``relu'(0) = 0``,
``jnp.maximum`` splits ties 0.5/0.5), which does not compose. These functions trace the JAX
function to a jaxpr and interpret it with asd's library (below), so the answer
is an element of the Clarke subdifferential.

- ``subgrad(fn, argnums=0, seed=None, direction=None, key=None)(*args)``: like ``jax.grad``;
  args may be pytrees (tuples, lists, dicts). With ``direction=v`` the result is the limiting
  gradient ``lim ∇f(x + δv)``, δ ↓ 0. ``value_and_subgrad`` returns the value too.
- ``function(fn, seed=None)``: ``fn`` as a ``jax.custom_vjp`` whose reverse rule is asd's
  vector-limiting-Jacobian product: ``jax.grad`` of anything built on it gets correct
  subgradients. Its forward is the imported jaxpr and its backward differentiates that same
  jaxpr; integer arguments (labels) get ``float0`` cotangents.
- Inside ``jax.jit``, ``jax.vmap``, ``jax.grad`` or ``lax.scan`` every one of them runs as a
  staged sweep (`asd.frontends.jax.staged`): all decisions are array operations, no host
  callback, any device.
- ``program(fn, *args)``: the imported ``asd.Program``.

Programs are cached under a key holding everything the trace reads (`import_program`,
`asd.frontends.reach`: closure values, globals, object attributes, captured arrays by value),
and traced through a fresh wrapper, so neither asd's cache nor JAX's answers for an old
version of the function.

Computation happens in the arrays' own precision (float32 unless JAX's x64 mode is on).
This module is ``asd.frontends.jax``, published as ``asd.jax``; ``import asd`` does not import
it, so JAX is imported only when ``asd.jax`` is first used.

How a jaxpr becomes an asd program:

``jax.make_jaxpr`` gives the program as lax primitives (``max``, ``select_n``, ``dot_general``,
``conv_general_dilated``, ``reduce_window_max``...). `JaxProgram` evaluates that jaxpr on
numpy or traced arrays, mapping every primitive that depends on the differentiated inputs to
an asd library function (`LAX`). Nested jaxprs (``jit``/``pjit``, ``custom_jvp_call``,
``custom_vjp_call``, ``closed_call``, ``remat``) are interpreted recursively; a custom JVP or
VJP rule is ignored on purpose, because it is exactly the framework's own choice at a kink
(``jax.nn.relu`` declares ``relu'(0) = 0``) that asd replaces by the direction's.

An equation whose inputs are all constants is evaluated by JAX itself (index arithmetic,
``iota``, NaN checks): it carries no derivative. One that depends on the differentiated
inputs and has no mapping raises `asd.UnsupportedError` when the program is imported, naming
the primitive, the equation and the path of nested calls; nothing falls back to JAX's
derivative.

Two rewrites keep jax.numpy's idioms correct at kinks:
- ``x != x`` and ``x == x`` (NaN checks) compare a value with itself: constant for finite
  inputs, so they are constants here rather than comparisons with a permanent tie.
- ``sqrt(reduce_sum(x * x))`` and ``sqrt(reduce_sum(x ** 2))`` (``jnp.linalg.norm``) become
  ``asd.norm``: ``sqrt`` alone is not Lipschitz at 0, the norm is.

>>> import jax, jax.numpy as jnp, asd.jax
>>> f = lambda x: (jax.nn.relu(x) - jax.nn.relu(-x)).sum()
>>> asd.jax.subgrad(f)(jnp.zeros(3))
Array([1., 1., 1.], dtype=float32)
>>> jax.grad(f)(jnp.zeros(3))                          # JAX's own answer
Array([0., 0., 0.], dtype=float32)
>>> jax.grad(lambda x: asd.jax.function(lambda x: jax.nn.relu(x) - jax.nn.relu(-x))(x).sum())(
...     jnp.zeros(3))
Array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

import asd
from asd.core import backend
from asd.core.arguments import check_argnums
from asd.core.linear import FanIn, Take
from asd.core.primitive import Primitive
from asd.errors import (
    ArgumentError,
    NotLipschitzError,
    OutputError,
    TracerBoolError,
    UnsupportedError,
)
from asd.frontends import common, reach
from asd.frontends.jax import staged as jax_staged

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
        if common.is_traced(pred):
            raise UnsupportedError("select_n with more than two cases and a traced selector")
        return np.choose(np.asarray(pred, dtype=int), cases)
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
    return y + common.zeros(shape, x) if tuple(expanded) != shape else y


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
        return x if np.result_type(_raw(x)) == new else x.astype(new)
    if common.is_traced(x) and backend.numpy_dtype(x) == np.bool_:
        return x  # a traced comparison as 0/1: its jump rule still decides its ties
    if common.is_traced(x):
        raise UnsupportedError(f"convert_element_type to {new} of a differentiated value (a "
                               "step function: rounding to integers or booleans)")
    return np.asarray(x).astype(new)


def _slice(x, *, start_indices, limit_indices, strides=None):
    strides = strides or (1,) * len(start_indices)
    return x[tuple(slice(int(a), int(b), int(s))
                   for a, b, s in zip(start_indices, limit_indices, strides))]


def _dynamic_slice(x, *starts, slice_sizes):
    if any(common.is_traced(s) for s in starts):
        raise NotLipschitzError(
            "dynamic_slice at a position computed from the differentiated input (e.g. "
            "x[argmax(x)]): the position jumps where values tie, so the result does too. Use "
            "a reduction such as jnp.max instead."
        )
    shape = np.shape(x)
    idx = tuple(slice(s, s + n) for s, n in
                ((int(np.clip(_raw(s), 0, dim - n)), n)
                 for s, n, dim in zip(starts, slice_sizes, shape)))
    return x[idx]


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
        raise NotLipschitzError(
            "gather at positions computed from the differentiated input (e.g. x[argmax(x)]): "
            "the positions jump where values tie, so the result does too. Use a reduction "
            "such as jnp.max instead.")
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
    discontinuous-primitive policy checks."""
    if common.is_traced(y):
        raise UnsupportedError("rem with a differentiated divisor (its jumps move with it)")
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
    "clamp": _clamp, "gt": _plain(operator.gt), "ge": _plain(operator.ge),
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

# Primitives whose result is locally constant at every finite point.
LOCALLY_CONSTANT = {"is_finite"}


# ----- the interpreter -----

def _body(eqn):
    key = CALLS[eqn.primitive.name]
    body = eqn.params.get(key) if key else None
    if body is None:
        for k in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
            if k in eqn.params:
                body = eqn.params[k]
                break
    if body is None:
        raise UnsupportedError(f"{eqn.primitive.name}: cannot find the called jaxpr")
    if isinstance(body, jcore.ClosedJaxpr):
        return body.jaxpr, list(body.consts)
    return body, []


def _describe(eqn, path: tuple[str, ...]) -> str:
    where = " > ".join(path) if path else "top level"
    text = str(eqn).strip().splitlines()
    line = text[0] if len(text) == 1 else text[0] + " ..."
    src = ""
    info = getattr(eqn, "source_info", None)
    if info is not None:
        try:
            from jax._src import source_info_util

            src = source_info_util.summarize(info)
        except Exception:  # source locations are a courtesy; never fail on them
            src = ""
    return f"equation `{line}` in {where}" + (f" (from {src})" if src else "")


def _is_same_var_compare(eqn) -> bool:
    return (eqn.primitive.name in ("ne", "eq") and len(eqn.invars) == 2
            and not isinstance(eqn.invars[0], jcore.Literal) and eqn.invars[0] is eqn.invars[1])


def _needed(jaxpr) -> list[bool]:
    """Which equations contribute to the outputs (jax.numpy leaves dead ones, like the
    ``sign`` logsumexp computes and drops)."""
    used = {v for v in jaxpr.outvars if not isinstance(v, jcore.Literal)}
    keep = [False] * len(jaxpr.eqns)
    for i in range(len(jaxpr.eqns) - 1, -1, -1):
        eqn = jaxpr.eqns[i]
        if any(v in used for v in eqn.outvars) or eqn.effects:
            keep[i] = True
            used.update(v for v in eqn.invars if not isinstance(v, jcore.Literal))
    return keep


def check(jaxpr, live: list[bool], path: tuple[str, ...] = ()) -> list[bool]:
    """Raise `UnsupportedError` for the first live equation without a mapping; return which
    outputs are live (depend on the differentiated inputs)."""
    flags: dict[Any, bool] = {v: f for v, f in zip(jaxpr.invars, live, strict=True)}

    def is_live(v):
        return not isinstance(v, jcore.Literal) and flags.get(v, False)

    for eqn, needed in zip(jaxpr.eqns, _needed(jaxpr), strict=True):
        if not needed:
            continue
        ins = [is_live(v) for v in eqn.invars]
        name = eqn.primitive.name
        if not any(ins) or name in LOCALLY_CONSTANT or _is_same_var_compare(eqn):
            outs = [False] * len(eqn.outvars)
        elif name in CALLS:
            body, _ = _body(eqn)
            label = eqn.params.get("name") or name
            outs = check(body, ins, (*path, f"{name}[{label}]"))
        elif name in CONTROL:
            outs = _check_control(eqn, ins, path)
        elif name in LAX:
            outs = [True] * len(eqn.outvars)
        else:
            raise UnsupportedError(
                f"JAX primitive `{name}` has no asd mapping ({_describe(eqn, path)}). asd never "
                "falls back to JAX's own derivative at a kink. Rewrite it with a supported "
                f"operation, or register a handler: asd.frontends.jax.LAX[{name!r}] = fn."
            )
        for v, f in zip(eqn.outvars, outs, strict=True):
            flags[v] = f
    return [is_live(v) for v in jaxpr.outvars]


def evaluate(jaxpr, consts: list, args: list, path: tuple[str, ...] = (),
             used: tuple[bool, ...] | None = None) -> list:
    """Evaluate a jaxpr on numpy or traced arrays with asd's library. ``used`` says which
    outputs the caller reads (all by default): a `USED` handler skips results nobody reads
    (None in their place)."""
    env: dict[Any, Any] = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = np.asarray(c)
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    producer: dict[Any, Any] = {}
    read_vars = {v for e in jaxpr.eqns for v in e.invars if not isinstance(v, jcore.Literal)}
    read_vars.update(v for v, u in zip(jaxpr.outvars, used or [True] * len(jaxpr.outvars),
                                       strict=True) if u and not isinstance(v, jcore.Literal))
    for eqn, needed in zip(jaxpr.eqns, _needed(jaxpr), strict=True):
        if not needed:
            continue
        vals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        squares = _sum_of_squares(eqn, producer) if name == "sqrt" else None
        if not any(common.is_traced(v) for v in vals) and name not in CALLS:
            outs = _constant(eqn, vals)     # a call's body is read (custom_jvp cannot bind)
        elif squares is not None:
            base, axes = squares
            outs = [_norm_over(env[base], axes)]
        elif name in LOCALLY_CONSTANT or _is_same_var_compare(eqn):
            outs = _constant(eqn, [_raw(v) for v in vals])
        elif name in CALLS:
            body, body_consts = _body(eqn)
            label = eqn.params.get("name") or name
            outs = evaluate(body, body_consts, vals, (*path, f"{name}[{label}]"),
                            tuple(v in read_vars for v in eqn.outvars))
        elif name in CONTROL:
            outs = CONTROL[name](eqn, vals, path)
        else:
            handler = LAX.get(name)
            if handler is None:
                raise UnsupportedError(f"JAX primitive `{name}` has no asd mapping "
                                       f"({_describe(eqn, path)})")
            params = {k: v for k, v in eqn.params.items() if k not in ("sharding",
                                                                         "out_sharding")}
            if name in USED:
                params["used"] = tuple(v in read_vars for v in eqn.outvars)
            try:
                out = handler(*vals, **params)
            except asd.ASDError as e:
                raise type(e)(f"{e} [while importing {_describe(eqn, path)}]") from e
            outs = list(out) if name in MULTIPLE else [out]
        for v, o in zip(eqn.outvars, outs, strict=True):
            env[v] = o
            producer[v] = eqn
    return [read(v) for v in jaxpr.outvars]


# ----- control flow: unrolled, or decided along the ray -----

def _closed(closed) -> tuple[Any, list]:
    return closed.jaxpr, list(closed.consts)


def _cond(eqn, vals, path):
    """``lax.cond``/``switch``: the branch a constant index names; with an index computed
    from the differentiated input every branch runs and ``select_n`` picks, so a tied
    predicate is decided along the ray with the continuity check ``where`` makes."""
    index, *operands = vals
    branches = eqn.params["branches"]
    run = [lambda b=b, k=k: evaluate(*_closed(b), operands, (*path, f"cond[branch {k}]"))
           for k, b in enumerate(branches)]
    if not common.is_traced(index):
        k = int(np.clip(_raw(index), 0, len(branches) - 1))
        return run[k]()
    if len(branches) != 2:
        raise UnsupportedError(f"lax.switch over {len(branches)} branches with an index "
                               "computed from the differentiated input; use lax.cond "
                               "(two branches) or jnp.where")
    outs = [b() for b in run]
    return [_select_n(index, a, b) for a, b in zip(*outs, strict=True)]


def _scan(eqn, vals, path):
    """``lax.scan`` (and ``fori_loop`` with a static trip count), unrolled: the body runs
    ``length`` times on asd's arrays, ties inside decided in every step."""
    p = eqn.params
    body, body_consts = _closed(p["jaxpr"])
    n_consts, n_carry, length = int(p["num_consts"]), int(p["num_carry"]), int(p["length"])
    consts, carry, xs = vals[:n_consts], vals[n_consts:n_consts + n_carry], vals[
        n_consts + n_carry:]
    steps = range(length - 1, -1, -1) if p.get("reverse") else range(length)
    ys = []
    for t in steps:
        out = evaluate(body, body_consts, [*consts, *carry, *(x[t] for x in xs)],
                       (*path, f"scan[step {t}]"))
        carry, y = out[:n_carry], out[n_carry:]
        ys.append(y)
    if p.get("reverse"):
        ys.reverse()
    stacked = [np.stack([y[i] for y in ys]) if ys else
               np.zeros((0,) + tuple(v.aval.shape), v.aval.dtype)
               for i, v in enumerate(eqn.outvars[n_carry:])]
    return [*carry, *stacked]


def _while(eqn, vals, path):
    """``lax.while_loop`` whose predicate does not depend on the differentiated input (a
    counter, a tolerance on constants): run as written. A predicate that does would stop
    at a different step near the point, so the loop is refused."""
    p = eqn.params
    cond, cond_consts = _closed(p["cond_jaxpr"])
    body, body_consts = _closed(p["body_jaxpr"])
    nc, nb = int(p["cond_nconsts"]), int(p["body_nconsts"])
    c_consts, b_consts, carry = vals[:nc], vals[nc:nc + nb], vals[nc + nb:]
    step = 0
    while True:
        (pred,) = evaluate(cond, cond_consts, [*c_consts, *carry], (*path, "while[cond]"))
        if common.is_traced(pred):
            raise TracerBoolError(
                f"lax.while_loop's predicate depends on the differentiated input (after "
                f"{step} steps, {_describe(eqn, path)}): near the point the loop would stop "
                "at another step, so its result jumps. Loop a fixed number of times "
                "(lax.fori_loop with constant bounds, or lax.scan) and select with jnp.where.")
        if not bool(np.asarray(pred)):
            return list(carry)
        carry = evaluate(body, body_consts, [*b_consts, *carry], (*path, f"while[step {step}]"))
        step += 1


CONTROL: dict[str, Callable] = {"cond": _cond, "scan": _scan, "while": _while}
"""Control-flow primitives, interpreted by asd: their bodies are jaxprs evaluated like the
program's own equations."""


def _fixpoint(body, fixed: list[bool], carry: list[bool], rest: list[bool], path) -> list[bool]:
    """Which outputs of a loop body are live, once the carry's liveness stops growing."""
    while True:
        outs = check(body, [*fixed, *carry, *rest], path)
        grown = [a or b for a, b in zip(carry, outs[:len(carry)], strict=True)]
        if grown == carry:
            return outs
        carry = grown


def _check_control(eqn, ins: list[bool], path) -> list[bool]:
    p, name = eqn.params, eqn.primitive.name
    if name == "cond":
        outs = [check(b.jaxpr, ins[1:], (*path, f"cond[branch {k}]"))
                for k, b in enumerate(p["branches"])]
        return [ins[0] or any(o[i] for o in outs) for i in range(len(eqn.outvars))]
    if name == "scan":
        nc, ncar = int(p["num_consts"]), int(p["num_carry"])
        return _fixpoint(p["jaxpr"].jaxpr, ins[:nc], ins[nc:nc + ncar], ins[nc + ncar:],
                         (*path, "scan"))
    nc, nb = int(p["cond_nconsts"]), int(p["body_nconsts"])
    outs = _fixpoint(p["body_jaxpr"].jaxpr, ins[nc:nc + nb], ins[nc + nb:], [],
                     (*path, "while"))
    return [a or b for a, b in zip(ins[nc + nb:], outs, strict=True)]


def _sum_of_squares(eqn, producer) -> tuple[Any, tuple[int, ...]] | None:
    """``(x, axes)`` when ``eqn`` is ``sqrt(reduce_sum(x * x))`` or ``sqrt(reduce_sum(x**2))``."""
    (arg,) = eqn.invars
    total = producer.get(arg)
    if total is None or total.primitive.name != "reduce_sum":
        return None
    square = producer.get(total.invars[0])
    if square is None:
        return None
    name, ins = square.primitive.name, square.invars
    is_square = ((name == "mul" and len(ins) == 2 and ins[0] is ins[1]
                  and not isinstance(ins[0], jcore.Literal))
                 or (name == "integer_pow" and square.params.get("y") == 2))
    if not is_square or isinstance(ins[0], jcore.Literal):
        return None
    return ins[0], tuple(int(a) for a in total.params["axes"])


def _norm_over(x, axes: tuple[int, ...]):
    """The Euclidean norm over ``axes`` (several axes are flattened into one)."""
    norm = _lib("norm")
    if len(axes) == 1:
        return norm(x, axis=axes[0])
    moved, _ = _move_to_end(x, axes)
    flat = moved.reshape(np.shape(moved)[:np.ndim(x) - len(axes)] + (-1,))
    return norm(flat, axis=-1)


def _constant(eqn, vals) -> list:
    """An equation on constants: JAX computes it (no derivative flows through it). Inside
    a transformation (a staged sweep under ``jax.jit``) constants stay concrete where their
    inputs are (``ensure_compile_time_eval``); a result that depends on a traced,
    undifferentiated argument stays a JAX value."""
    with jax.ensure_compile_time_eval():
        out = eqn.primitive.bind(*vals, **eqn.params)
    outs = out if eqn.primitive.multiple_results else [out]
    return [o if isinstance(o, jax.core.Tracer) else np.asarray(o) for o in outs]


def _dtype(a) -> np.dtype:
    return np.dtype(a.dtype) if hasattr(a, "dtype") else np.result_type(a)


def _inexact(a) -> bool:
    """Floating or complex (JAX's own test: a PRNG key array's extended dtype is not)."""
    dtype = getattr(a, "dtype", None)
    return jax.dtypes.issubdtype(dtype if dtype is not None else np.result_type(a), np.inexact)


def _spec(a) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(a), _dtype(a))


def _make_jaxpr(fn: Callable, args: tuple):
    """``jax.make_jaxpr`` through a fresh wrapper, with tracing failures as asd errors.

    JAX caches traces by function identity and ignores the globals and closure values the
    function reads; asd's own cache (`import_program`) keys on those, so each import must
    really trace: a fresh wrapper is a function JAX has never seen.
    """
    label = f"`{getattr(fn, '__qualname__', type(fn).__qualname__)}`"
    try:
        closed, out_shape = jax.make_jaxpr(lambda *a: fn(*a), return_shape=True)(*args)
    except (jax.errors.ConcretizationTypeError,         # TracerBoolConversionError and kin
            jax.errors.TracerIntegerConversionError) as e:
        raise TracerBoolError(
            f"{label} uses a value computed from its inputs as a Python value (a branch, "
            f"bool(), int() or an index), at {reach.user_line(e)}: a Python `if` picks one "
            "side for every point, so at a tie it ignores the direction asd differentiates "
            "along. Write the choice as jnp.where(cond, a, b) (or jnp.maximum, jnp.clip...)."
        ) from e
    except (jax.errors.JAXTypeError, jax.errors.JAXIndexError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UnsupportedError(
            f"JAX could not trace {label}: {type(e).__name__}: {first} (at {reach.user_line(e)}). "
            "asd imports JAX programs through jax.make_jaxpr, which runs the function on "
            "abstract arrays: use jax.numpy on the inputs (not numpy, .item() or boolean masks "
            "with data-dependent shapes: jnp.where keeps the shape)."
        ) from e
    leaves = jax.tree_util.tree_leaves(out_shape)
    if not leaves or any(not hasattr(o, "shape") for o in leaves):
        raise OutputError(f"{label} returned {out_shape!r}: asd differentiates functions "
                          "returning arrays (a missing `return`?).")
    return closed, out_shape


class JaxProgram:
    """``fn``'s jaxpr at example arguments, as a function of numpy (or traced) pytrees.

    ``live`` names the arguments that are differentiated (all by default); integer and
    boolean leaves never are (labels, indices).
    """

    def __init__(self, fn: Callable, args: tuple, live: tuple[int, ...] | None = None):
        self.fn = fn
        closed, out_shape = _make_jaxpr(fn, args)
        self.closed = closed
        self.in_tree = jax.tree_util.tree_structure(args)
        self.out_tree = jax.tree_util.tree_structure(out_shape)
        live_args = range(len(args)) if live is None else live
        flags = [i in live_args and _inexact(leaf) for i, a in enumerate(args)
                 for leaf in jax.tree_util.tree_leaves(a)]
        check(closed.jaxpr, flags)
        self._vjps: dict[Any, Callable] = {}

    def numpy_fn(self, *args):
        leaves = jax.tree_util.tree_leaves(args, is_leaf=common.is_traced)
        outs = evaluate(self.closed.jaxpr, list(self.closed.consts), leaves)
        return jax.tree_util.tree_unflatten(self.out_tree, outs)

    def with_vjp(self, seed) -> Callable:
        """This program as a ``jax.custom_vjp`` (see `function`), built once per seed."""
        if seed not in self._vjps:
            self._vjps[seed] = _custom_vjp(self, seed)
        return self._vjps[seed]


def _custom_vjp(prog: JaxProgram, seed) -> Callable:
    """The primal evaluates the program's jaxpr (what ``fn`` computes, traced once), and the
    reverse rule differentiates that same program: forward and backward cannot disagree."""
    flat_fn = jcore.jaxpr_as_fun(prog.closed)

    @jax.custom_vjp
    def wrapped(*args):
        return jax.tree_util.tree_unflatten(prog.out_tree,
                                            flat_fn(*jax.tree_util.tree_leaves(args)))

    def fwd(*args):
        return wrapped(*args), args

    def bwd(args, ct):
        arg_tree = jax.tree_util.tree_structure(args)
        flat_args = jax.tree_util.tree_leaves(args)
        flat_ct = jax.tree_util.tree_leaves(ct)
        floats = [i for i, a in enumerate(flat_args) if _inexact(a)]

        def host(*flat):
            leaves = [np.asarray(a) for a in flat[:len(flat_args)]]
            cts = [np.asarray(c) for c in flat[len(flat_args):]]

            def scalarized(*xs):
                outs = jax.tree_util.tree_leaves(
                    prog.numpy_fn(*jax.tree_util.tree_unflatten(arg_tree, list(xs))),
                    is_leaf=common.is_traced)
                total = 0.0
                for o, c in zip(outs, cts, strict=True):
                    total = total + (o * c).sum()
                return total

            g = asd.subgrad(scalarized, tuple(floats), seed=seed)(*leaves)
            return tuple(jax.numpy.asarray(np.asarray(gi, dtype=leaves[i].dtype).reshape(
                leaves[i].shape)) for gi, i in zip(g, floats, strict=True))

        def staged_pull(*flat):
            rebuilt = jax.tree_util.tree_unflatten(arg_tree, list(flat[:len(flat_args)]))
            active = [i in floats for i in range(len(flat_args))]
            return tuple(jax_staged.vjp_leaves(prog, rebuilt, active, flat[len(flat_args):],
                                               seed=seed))

        grads = [np.zeros(np.shape(a), jax.dtypes.float0) for a in flat_args]
        if floats:
            # under jit or vmap: staged, on the device; on concrete values (an eager
            # jax.grad): the exact sweep, run directly. Neither is a host callback; only a
            # program with a rule that cannot stage yet (sort, pooling, projections) runs
            # the exact sweep on the host through jax.pure_callback, as before.
            pull = staged_pull if jax_staged.tracing(args, ct) else host
            try:
                out = _first_order_only(pull, prog.fn)(*flat_args, *flat_ct)
            except jax_staged.NOT_STAGED:
                shapes = tuple(_spec(flat_args[i]) for i in floats)
                out = _first_order_only(lambda *flat: jax.pure_callback(host, shapes, *flat),
                                        prog.fn)(*flat_args, *flat_ct)
            for i, gi in zip(floats, out, strict=True):
                grads[i] = gi
        return jax.tree_util.tree_unflatten(arg_tree, grads)

    wrapped.defvjp(fwd, bwd)
    return wrapped


def _holds_arrays(value) -> bool:
    """A keyword argument that is an input of the drop-in (arrays or tracers in it)."""
    return any(isinstance(leaf, jax.Array | np.ndarray)
               for leaf in jax.tree_util.tree_leaves(value))


def _first_order_only(pull: Callable, fn: Callable) -> Callable:
    """The reverse rule's computation, refusing to be differentiated: a limiting gradient
    has no derivative at a kink, and JAX would otherwise differentiate the linearizations
    the sweep selected. asd gives first derivatives only."""
    label = getattr(fn, "__qualname__", type(fn).__qualname__)

    @jax.custom_jvp
    def call(*flat):
        return pull(*flat)

    @call.defjvp
    def call_jvp(primals, tangents):
        raise UnsupportedError(
            f"a gradient computed through asd.jax.function({label}) is being differentiated "
            "again (jax.grad of a gradient, as a gradient penalty takes). asd gives first "
            "derivatives only (a limiting gradient has no derivative at a kink): compute the "
            "term that differentiates a gradient with the function itself, and the rest "
            "through asd.jax.function.")

    return call


# ----- the cache: a program per function, argument types and reachable state -----

_CACHE: dict[tuple, tuple[JaxProgram, list]] = {}
CACHE_SIZE = 64

IMPORTS = {"count": 0}
"""How many jaxprs have been traced for asd (each cache miss adds one); tests read it."""


def _token(value):
    """JAX arrays read by ``fn`` are baked into its jaxpr as constants: count them by value."""
    if isinstance(value, jax.core.Tracer):
        return "tracer", id(value)
    if isinstance(value, jax.Array):
        return ("jax.Array", value.shape, str(value.dtype),
                hash(np.ascontiguousarray(np.asarray(value)).tobytes()))
    return None


def import_program(fn: Callable, args: tuple, live: tuple[int, ...] | None = None
                   ) -> JaxProgram:
    """The program of ``fn`` at arguments of these shapes and dtypes, cached.

    The key is ``fn``'s identity, the arguments' tree, shapes and dtypes, which arguments are
    differentiated, and the fingerprint of everything ``fn`` reaches (`asd.frontends.reach`):
    closure values, globals, object attributes, Python flags, and the values of the arrays it
    closes over (JAX bakes those into the jaxpr). Any change there traces anew.
    """
    state, held = reach.fingerprint(fn, _token)
    specs = tuple((np.shape(a), str(_dtype(a)))
                  for a in jax.tree_util.tree_leaves(args))
    key = (id(fn), jax.tree_util.tree_structure(args), specs, live, state)
    hit = _CACHE.get(key)
    if hit is not None and hit[0].fn is fn:
        return hit[0]
    if len(_CACHE) >= CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    prog = JaxProgram(fn, jax.tree_util.tree_map(_spec, args), live)
    IMPORTS["count"] += 1
    _CACHE[key] = (prog, held)
    return prog


def _to_numpy(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a), tree)


def _checked_argnums(argnums, n: int) -> int | tuple[int, ...]:
    """``argnums`` as `asd.subgrad` takes it, negative indices counted from the last
    argument as in Python; out of range or repeated: asd's `ArgumentError`."""
    single, nums = check_argnums(argnums, n)
    nums = tuple(a % n for a in nums)
    return nums[0] if single else nums


def _argnum_tuple(argnums) -> tuple[int, ...]:
    return (int(argnums),) if isinstance(argnums, int) else tuple(int(a) for a in argnums)


def program(fn: Callable, *args) -> asd.Program:
    """The asd ``Program`` of a JAX function at example arguments."""
    prog = import_program(fn, args)
    return asd.trace(prog.numpy_fn)(*_to_numpy(args))


NUMBERS = (jax.Array, np.ndarray, np.generic, float, int, bool)
"""Pytree leaves that are numbers; any other leaf (an activation function in an equinox
module, a string, None) is held static, as ``equinox.filter_grad`` does."""

_CONTAINER_KEYS = (jax.tree_util.SequenceKey, jax.tree_util.DictKey)


def _differentiated(path: tuple, leaf) -> bool:
    """Whether a pytree leaf is an argument to differentiate: a floating-point array
    anywhere, or a number reached through lists, tuples and dicts only (as ``jax.grad``
    takes them). A Python scalar or an integer array held as an object's attribute (an
    equinox pooling layer's ``-inf`` init, a dropout rate, an index buffer) is the module's
    configuration and stays static, as ``equinox.filter_grad`` holds it."""
    if not isinstance(leaf, NUMBERS):
        return False
    if isinstance(leaf, (jax.Array, np.ndarray)) and _inexact(leaf):
        return True
    return all(isinstance(key, _CONTAINER_KEYS) for key in path)

_STATIC: dict[tuple, tuple] = {}


def _numbers_only(fn: Callable, args: tuple) -> tuple[Callable, tuple, list]:
    """``fn`` as a function of the number leaves of ``args`` only, those arguments, and per
    argument ``(treedef, is_number flags)`` to rebuild gradients (None at static leaves).

    The wrapper is kept per function, tree and static leaves, so the imported program's cache
    sees the same function on every call."""
    with_paths = [jax.tree_util.tree_flatten_with_path(a) for a in args]
    flat = [([leaf for _, leaf in pairs], tree) for pairs, tree in with_paths]
    flags = [[_differentiated(path, leaf) for path, leaf in pairs] for pairs, _ in with_paths]
    layout = [(tree, tuple(f)) for (_, tree), f in zip(flat, flags, strict=True)]
    if all(all(f) for f in flags):
        return fn, args, layout
    statics = [[leaf for leaf, n in zip(leaves, f, strict=True) if not n]
               for (leaves, _), f in zip(flat, flags, strict=True)]
    key = (id(fn), tuple(layout), tuple(id(x) for group in statics for x in group))
    hit = _STATIC.get(key)
    if hit is None:
        def numbers_fn(*numbers):
            rebuilt = []
            for (tree, f), nums, fixed in zip(layout, numbers, statics, strict=True):
                nums, fixed = iter(nums), iter(fixed)
                rebuilt.append(jax.tree_util.tree_unflatten(
                    tree, [next(nums) if n else next(fixed) for n in f]))
            return fn(*rebuilt)

        numbers_fn.__name__ = getattr(fn, "__name__", "fn")
        if len(_STATIC) >= CACHE_SIZE:
            _STATIC.pop(next(iter(_STATIC)))
        hit = _STATIC[key] = (numbers_fn, fn, statics)   # holds fn and statics: ids stay valid
    numbers = tuple([leaf for leaf, n in zip(leaves, f, strict=True) if n]
                    for (leaves, _), f in zip(flat, flags, strict=True))
    return hit[0], numbers, layout


def value_and_subgrad(fn: Callable, argnums=0, *, seed=None, direction=None, key=None,
                      report: bool = False) -> Callable:
    """``(value, subgradient)`` of a scalar JAX function, as JAX arrays. Arguments may be
    any pytree; leaves that are not numbers (functions in equinox modules) are held static
    and get None in the gradient.

    Called inside a JAX transformation (``jax.jit``, ``jax.vmap``, ``lax.scan``) it runs
    staged, with no host callback (`asd.frontends.jax.staged`); so does a call with ``key=``
    (the direction drawn from that PRNG key) or ``report=True``, which returns
    ``(value, subgradient, undecided)``: the count of tied entries that first order along
    the directions left open (0: the result is the eager sweep's element)."""

    def wrapped(*args):
        which = _checked_argnums(argnums, len(args))
        user_fn, args, layout = _numbers_only(fn, args)
        if user_fn is not fn:
            vg = value_and_subgrad(user_fn, which, seed=seed, direction=None if direction
                                   is None else _direction_numbers(direction, which, layout),
                                   key=key, report=report)
            value, g, *undecided = vg(*args)

            def with_statics(i, gi):
                tree, f = layout[i]
                it = iter(gi)
                return jax.tree_util.tree_unflatten(tree, [next(it) if n else None
                                                           for n in f])

            nums = _argnum_tuple(which)
            g = (with_statics(nums[0], g) if isinstance(which, int)
                 else tuple(with_statics(i, gi) for i, gi in zip(nums, g, strict=True)))
            return (value, g, *undecided)
        nums = _argnum_tuple(which)
        for i in nums:
            bad = [leaf for leaf in jax.tree_util.tree_leaves(args[i]) if not _inexact(leaf)]
            if bad:
                raise ArgumentError(
                    f"argnums includes argument {i}, which holds {bad[0].dtype} values: only "
                    "floating-point arrays are differentiated (integer labels and indices are "
                    "constants); leave it out of argnums.")
        prog = import_program(fn, args, nums)
        if jax_staged.tracing(args, direction) or key is not None or report:
            return jax_staged.value_and_subgrad(prog, args, which, seed=seed, key=key,
                                                direction=direction, report=report)
        # any registered JAX pytree (a flax or equinox module, a dataclass) is handed to asd
        # as the list of its leaves and rebuilt around the traced leaves inside
        trees = [jax.tree_util.tree_structure(a) for a in args]
        flat = [[np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(a)] for a in args]

        def flat_fn(*lists):
            return prog.numpy_fn(*(jax.tree_util.tree_unflatten(t, list(leaves))
                                   for t, leaves in zip(trees, lists, strict=True)))

        def leaves_of(d):
            return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(d)]

        d = None
        if direction is not None:
            d = (leaves_of(direction) if isinstance(which, int)
                 else tuple(leaves_of(di) for di in direction))
        value, g = asd.value_and_subgrad(flat_fn, which, seed=seed, direction=d)(*flat)

        def rebuilt(i, gi):
            return jax.tree_util.tree_unflatten(
                trees[i], [jax.numpy.asarray(leaf) for leaf in gi])

        g = (rebuilt(nums[0], g) if isinstance(which, int)
             else tuple(rebuilt(i, gi) for i, gi in zip(nums, g, strict=True)))
        return jax.numpy.asarray(value), g

    return wrapped


def _direction_numbers(direction, argnums, layout):
    """A direction given in the arguments' structure, reduced to the differentiated leaves:
    picked by the arguments' flags when it has their structure, or its number leaves when
    it leaves the static ones out (``equinox.filter(model, equinox.is_array)``)."""
    def numbers(d, i):
        tree, flags = layout[i]
        leaves, d_tree = jax.tree_util.tree_flatten(d)
        if d_tree == tree:
            return [leaf for leaf, n in zip(leaves, flags, strict=True) if n]
        leaves = [leaf for leaf in leaves if isinstance(leaf, NUMBERS)]
        if len(leaves) != sum(flags):
            raise ArgumentError(
                f"the direction for argument {i} has {len(leaves)} number leaves, but the "
                f"argument has {sum(flags)} differentiated leaves: give it in the argument's "
                "own structure (jax.tree_util.tree_map over the argument).")
        return leaves

    nums = _argnum_tuple(argnums)
    return numbers(direction, nums[0]) if isinstance(argnums, int) else tuple(
        numbers(d, i) for d, i in zip(direction, nums, strict=True))


def subgrad(fn: Callable, argnums=0, *, seed=None, direction=None, key=None) -> Callable:
    """A Clarke subgradient of scalar ``fn``, as JAX arrays (see ``asd.jax``)."""
    vg = value_and_subgrad(fn, argnums, seed=seed, direction=direction, key=key)
    return lambda *args: vg(*args)[1]


def vjp(fn: Callable, argnums=0, *, seed=None, direction=None, key=None) -> Callable:
    """``(out, pullback)`` like ``jax.vjp``: ``pullback(ct)`` is ``Jᵀ ct`` for the limiting
    Jacobian along the direction, with respect to the arguments ``argnums`` (one tree each, a
    tuple for a tuple of argnums), for any output structure and as many cotangents as wanted.
    Staged (no host callback) inside a JAX transformation or with ``key=``; otherwise the
    exact eager sweep.

    >>> import jax, jax.numpy as jnp, asd.jax
    >>> out, pull = asd.jax.vjp(jax.nn.relu, direction=jnp.array([1.0, -1.0]))(jnp.zeros(2))
    >>> pull(jnp.ones(2))
    Array([1., 0.], dtype=float32)
    """

    def wrapped(*args):
        which = _checked_argnums(argnums, len(args))
        nums = _argnum_tuple(which)
        prog = import_program(fn, args, nums)
        if jax_staged.tracing(args, direction) or key is not None:
            return jax_staged.vjp(prog, args, which, seed=seed, key=key, direction=direction)
        trees = [jax.tree_util.tree_structure(a) for a in args]
        flat = [[np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(a)] for a in args]

        def flat_fn(*lists):
            return jax.tree_util.tree_leaves(
                prog.numpy_fn(*(jax.tree_util.tree_unflatten(t, list(leaves))
                                for t, leaves in zip(trees, lists, strict=True))),
                is_leaf=common.is_traced)

        d = None
        if direction is not None:
            d = ([np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(direction)]
                 if isinstance(which, int) else tuple(
                     [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(di)]
                     for di in direction))
        outs, pullback = asd.vjp(flat_fn, which, seed=seed, direction=d)(*flat)
        out = jax.tree_util.tree_unflatten(prog.out_tree, [jax.numpy.asarray(o) for o in outs])

        def pull(ct):
            cts = [np.asarray(c) for c in jax.tree_util.tree_leaves(ct)]
            g = pullback(cts)
            per_arg = [g] if isinstance(which, int) else list(g)
            rebuilt = tuple(jax.tree_util.tree_unflatten(
                trees[i], [jax.numpy.asarray(leaf) for leaf in gi])
                for i, gi in zip(nums, per_arg, strict=True))
            return rebuilt[0] if isinstance(which, int) else rebuilt

        return out, pull

    return wrapped


# ----- the drop-in custom_vjp -----

def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with asd's vector-Jacobian product as its JAX reverse rule.

    Each call imports (or finds in the cache) the program of ``fn`` as it is now and runs it as
    a ``jax.custom_vjp`` whose forward is that program and whose backward differentiates the
    same program: on concrete values by the exact eager sweep, inside ``jit``/``vmap`` by the
    staged sweep (`asd.frontends.jax.staged`), with no host callback either way. Integer
    arguments (labels) get zero cotangents (``float0``), as JAX expects. Keyword arguments
    holding arrays are inputs too; the others are fixed, like ``jit``'s static arguments. The
    reverse rule is a first derivative: ``jax.grad`` of it raises `asd.UnsupportedError`.
    """

    callers: dict[tuple, Callable] = {}

    def wrapped(*args, **kwargs):
        if not kwargs:
            return import_program(fn, args).with_vjp(seed)(*args)
        caller, inputs = common.positional(fn, args, kwargs, callers, _holds_arrays)
        return import_program(caller, inputs).with_vjp(seed)(*inputs)

    wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapped.__doc__ = f"{wrapped.__name__} with asd's subgradient as its reverse rule."
    return wrapped

