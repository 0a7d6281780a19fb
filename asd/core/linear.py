"""Structured linear maps: what a rule returns as its branch linearization.

A map takes the tangent of one input (shape ``in_shape``) to a tangent of the output
(``out_shape``): ``lin(t)`` pushes, ``lin.T(ct)`` pulls a cotangent back. Both accept one
extra *leading* batch axis, so many tangents or cotangents travel in one numpy call (that is
how Jacobians and several directions are computed without Python loops).

Maps are structured (diagonal, broadcast, sum, index, matmul, ...) so a sweep never holds
more than O(size of the values); ``Dense`` exists for the rare rule that needs it.
A primitive with several inputs returns a ``FanIn`` of one map per input (``None`` where an
input has no derivative, like an index or a condition).

Demand-driven tangents: ``lin.push_at(mask, t_at)`` computes only the entries ``mask`` (a
bool array of the output's shape) of the pushed tangent, in C order, asking the input's
tangent only where those entries read it: ``t_at(need)`` returns the input tangent at the
bool mask ``need`` (C order), or None when the input's tangent is zero. A map that cannot
narrow the request returns ``NotImplemented`` and the sweep computes the full tangent.

Array libraries: push, pull and magnitude compute in the namespace of the tangent they are
given (numpy, torch or JAX; `asd.core.backend`), so a map holding torch tensors pushes torch
tensors on their device. ``push_at`` narrows numpy requests only; sweeps of other libraries
ask for full (memoized) tangents and index them on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from asd.core import backend
from asd.core.backend import namespace

Shape = tuple[int, ...]


def batch_ndim(t: np.ndarray, shape: Shape) -> int:
    """0 for a plain tangent of ``shape``, 1 when it carries a leading batch axis."""
    extra = np.ndim(t) - len(shape)
    if extra not in (0, 1):
        raise ValueError(f"tangent of shape {np.shape(t)} does not fit a value of shape {shape}")
    return extra


def unbroadcast(ct: np.ndarray, shape: Shape, nb: int) -> np.ndarray:
    """Sum a cotangent of a broadcast result back to ``shape`` (keeping ``nb`` batch axes)."""
    xp = namespace(ct)
    if xp is np:
        ct = np.asarray(ct)
    lead = ct.ndim - nb - len(shape)
    axes = tuple(range(nb, nb + lead))
    axes += tuple(
        nb + lead + i for i, n in enumerate(shape) if n == 1 and ct.shape[nb + lead + i] != 1
    )
    if axes:
        ct = xp.sum(ct, axis=axes, keepdims=True)
        if lead:
            ct = ct.reshape(ct.shape[:nb] + ct.shape[nb + lead :])
    return ct


def align(t: np.ndarray, in_shape: Shape, out_ndim: int, nb: int) -> np.ndarray:
    """Insert unit axes after the batch axis so a batched tangent broadcasts like the value."""
    pad = out_ndim - len(in_shape)
    if nb and pad > 0:
        return t.reshape(t.shape[:1] + (1,) * pad + t.shape[1:])
    return t


class LinearMap:
    """A linear map between the tangent spaces of one input and the output."""

    __slots__ = ("in_shape", "out_shape")

    def __init__(self, in_shape: Shape, out_shape: Shape):
        self.in_shape = tuple(in_shape)
        self.out_shape = tuple(out_shape)

    def push(self, t: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not define push")

    def pull(self, ct: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not define pull")

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return self.push(t)

    def push_absorbing(self, t: np.ndarray) -> np.ndarray:
        """`push` with ``0 * inf = 0``: a zero coefficient (an unselected branch) kills an
        infinite tangent instead of making it NaN. The engine uses it only to redo a sweep
        whose result came out non-finite (`asd.core.sweep.Trace.pull_seeds`); maps whose
        products mix entries keep IEEE arithmetic, so a NaN there is still reported."""
        return self.push(t)

    def pull_absorbing(self, ct: np.ndarray) -> np.ndarray:
        """`pull` with ``0 * inf = 0`` (see `push_absorbing`): a zero cotangent, from a
        branch the output does not read, kills an infinite slope."""
        return self.pull(ct)

    def push_at(self, mask: np.ndarray, t_at: Callable):
        """The entries ``mask`` of the pushed tangent; ``NotImplemented``: push it all."""
        return NotImplemented

    def magnitude(self) -> LinearMap | None:
        """The map with every entry replaced by its absolute value, or None if unknown.

        Pushing ``|t|`` through magnitudes bounds what floating point can lose in a push
        (``|fl(Lt) - Lt| <= γ |L||t|``), so a tie's tangent whose sign rounding could flip is
        sent to the exact series instead (`asd.core.ties`).
        """
        return None

    def zero_rows(self):
        """Where the map sends every input to 0 (a bool array broadcastable to ``out_shape``,
        in the map's array library), or None if not known: the tangent there is 0 along every
        direction (`asd.core.ties.index_decided`)."""
        return None

    def _spread(self, need: np.ndarray, t_at: Callable) -> np.ndarray | None:
        """The input tangent with only the entries ``need`` filled in (zeros elsewhere)."""
        vals = t_at(need)
        if vals is None:
            return None
        t = np.zeros(self.in_shape, vals.dtype)
        t[need] = vals
        return t

    @property
    def T(self) -> Callable[[np.ndarray], np.ndarray]:
        return self.pull

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_shape} -> {self.out_shape})"


class Zero(LinearMap):
    """The zero map (a rule whose output does not move with this input)."""

    __slots__ = ()

    def push(self, t):
        nb = batch_ndim(t, self.in_shape)
        if backend.is_host(t):
            return np.zeros(np.shape(t)[:nb] + self.out_shape, np.result_type(t))
        return backend.zeros(tuple(t.shape)[:nb] + self.out_shape, t)

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        if backend.is_host(ct):
            return np.zeros(np.shape(ct)[:nb] + self.in_shape, np.result_type(ct))
        return backend.zeros(tuple(ct.shape)[:nb] + self.in_shape, ct)

    def push_at(self, mask, t_at):
        return None

    def magnitude(self):
        return self

    def zero_rows(self):
        return np.ones(self.out_shape, bool)


class Diagonal(LinearMap):
    """Elementwise scaling ``t -> d * t`` with numpy broadcasting from input to output.

    ``d=None`` means the identity (a pure broadcast); ``d`` may be a scalar, a bool mask or
    an array broadcastable to ``out_shape``.
    """

    __slots__ = ("d", "same")

    def __init__(self, d, in_shape: Shape, out_shape: Shape | None = None):
        self.in_shape = in_shape = tuple(in_shape)
        self.out_shape = in_shape if out_shape is None else tuple(out_shape)
        self.d = d
        # Input and output shapes agree and d does not widen them: push and pull are one
        # multiplication, batched or not (the hot path of elementwise programs).
        self.same = self.out_shape == in_shape and (
            d is None or type(d) is float or np.ndim(d) <= len(in_shape))

    def push(self, t):
        if self.same:
            return t if self.d is None else _scaled(t, self.d)
        nb = batch_ndim(t, self.in_shape)
        t = align(t, self.in_shape, len(self.out_shape), nb)
        r = t if self.d is None else _scaled(t, self.d)
        full = tuple(np.shape(t)[:nb]) + self.out_shape
        return r if tuple(np.shape(r)) == full else namespace(r).broadcast_to(r, full)

    def pull(self, ct):
        if self.same:
            return ct if self.d is None else ct * self.d
        nb = batch_ndim(ct, self.out_shape)
        r = ct if self.d is None else ct * self.d
        if tuple(np.shape(r)) != tuple(np.shape(ct)):
            r = namespace(r).broadcast_to(r, tuple(np.shape(ct)))
        return unbroadcast(r, self.in_shape, nb)

    def push_absorbing(self, t):
        if self.d is None:
            return self.push(t)
        t, d = _absorb(t, self.d)
        return Diagonal(d, self.in_shape, self.out_shape).push(t)

    def pull_absorbing(self, ct):
        if self.d is None:
            return self.pull(ct)
        ct, d = _absorb(ct, self.d)
        return Diagonal(d, self.in_shape, self.out_shape).pull(ct)

    def push_at(self, mask, t_at):
        """Only entries with a nonzero scale are asked for: a relu's tied entries on the off
        side, or an unselected max operand, cost nothing upstream."""
        d = None if self.d is None else np.broadcast_to(self.d, self.out_shape)
        live = mask
        if d is not None:
            # the live entries as one full-size ``and`` (not a gather, then a scatter into a
            # copy of the mask); a bool scale (a relu's side) is 1 on them: no multiply
            live = mask & (d if d.dtype == bool else d != 0)
            n_live = np.count_nonzero(live)
            if not n_live:
                return None
            if n_live == np.count_nonzero(mask):
                live = mask
            d = None if d.dtype == bool else d[live]
        if self.in_shape == self.out_shape:
            part = t_at(live)
        else:
            lead = len(self.out_shape) - len(self.in_shape)
            wide = tuple(lead + i for i, n in enumerate(self.in_shape)
                         if n == 1 and self.out_shape[lead + i] != 1)
            need = np.any(live, axis=tuple(range(lead)) + wide, keepdims=True)
            t = self._spread(need.reshape(need.shape[lead:]), t_at)
            part = None if t is None else np.broadcast_to(t, self.out_shape)[live]
        if part is None:
            return None
        part = part if d is None else part * d
        if live is mask:
            return part
        out = np.zeros(np.count_nonzero(mask), part.dtype)
        out[live[mask]] = part
        return out


    def zero_rows(self):
        d = self.d
        if d is None:
            return None
        if backend.is_host(d):
            d = np.asarray(d)
            return ~d if d.dtype == bool else d == 0
        xp = namespace(d)
        return xp.logical_not(d) if xp.isdtype(d.dtype, "bool") else d == 0

    def magnitude(self):
        d = self.d
        if d is None or (backend.is_host(d) and np.result_type(d).kind == "b"):
            return self
        xp = namespace(d)
        if xp is not np and xp.isdtype(d.dtype, "bool"):
            return self
        return Diagonal(abs(d) if xp is np else xp.abs(d), self.in_shape, self.out_shape)


class Mask(Diagonal):
    """`Diagonal` by a 0/1 mask ``d`` of the tangent's shape held in a floating dtype, for
    libraries that multiply by a float far faster than by a bool (torch on CPU: about 4x).
    It multiplies in the dtype of the tangent it is given, as a bool mask does, so the result
    is the bool mask's bit for bit (``t * 1.0`` is ``t``, ``t * 0.0`` is ``t * False``)."""

    __slots__ = ()

    def _like(self, t):
        d = self.d
        return d if d.dtype == t.dtype else namespace(d).astype(d, t.dtype)

    def push(self, t):
        return t * self._like(t)

    def pull(self, ct):
        return ct * self._like(ct)

    def magnitude(self):
        return self

    def zero_rows(self):
        """Where the mask is 0; a cast to bool, which torch does far faster than ``d == 0``."""
        xp = namespace(self.d)
        return xp.logical_not(xp.astype(self.d, xp.bool))


def _scaled(t, d):
    """``t * d``; a host bool ``d`` is a selection (where's branch, a max's operand): its
    unselected entries push 0 even where ``t`` is not finite (a NaN slope of the branch not
    taken, ``where(x > 0, x * sqrt(x), 0)`` at x < 0), which ``t * False`` would make NaN;
    the ties read such tangents (the first-order line of a tie whose series is out of
    reach), and a NaN there is no number to decide by."""
    if type(d) is np.ndarray and d.dtype == np.bool_ and backend.is_host(t):
        return np.where(d, t, np.zeros((), np.result_type(t)))
    return t * d


def _absorb(t, d):
    """``(t, d)`` with both set to 0 where their product would be ``0 * inf`` (one factor
    zero, the other not finite), broadcast together there: multiplying them then gives the
    measure-theoretic ``0 * inf = 0`` where IEEE gives NaN."""
    if backend.is_host(t) and backend.is_host(d):
        t, d = np.asarray(t), np.asarray(d)
        if d.dtype == bool:  # a selection: t * False is 0 unless t is not finite
            return np.where(d, t, 0), d
        kill = ((d == 0) & ~np.isfinite(t)) | ((t == 0) & ~np.isfinite(d))
        if not kill.any():
            return t, d
        return np.where(kill, 0, t), np.where(kill, 0, d)
    xp = namespace(t)
    if not backend.is_host(d) and xp.isdtype(d.dtype, "bool"):
        return xp.where(d, t, xp.zeros_like(t)), d
    if backend.is_host(d):
        d = backend.from_host(np.asarray(d), t, "like")
    kill = ((d == 0) & xp.logical_not(xp.isfinite(t))) | (
        (t == 0) & xp.logical_not(xp.isfinite(d)))
    return xp.where(kill, xp.zeros_like(t), t), xp.where(kill, xp.zeros_like(d), d)


def identity(shape: Shape) -> Diagonal:
    return Diagonal(None, shape, shape)


class Dense(LinearMap):
    """An explicit matrix on the flattened tangents; only for rules that truly need one."""

    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray, in_shape: Shape, out_shape: Shape):
        super().__init__(in_shape, out_shape)
        self.matrix = np.asarray(matrix) if backend.is_host(matrix) else matrix

    def push(self, t):
        nb = batch_ndim(t, self.in_shape)
        flat = t.reshape(tuple(np.shape(t)[:nb]) + (-1,))
        m = self.matrix
        return (flat @ namespace(m).matrix_transpose(m)).reshape(
            tuple(np.shape(t)[:nb]) + self.out_shape)

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        flat = ct.reshape(tuple(np.shape(ct)[:nb]) + (-1,))
        return (flat @ self.matrix).reshape(tuple(np.shape(ct)[:nb]) + self.in_shape)

    def magnitude(self):
        return Dense(namespace(self.matrix).abs(self.matrix), self.in_shape, self.out_shape)


class Closure(LinearMap):
    """A map given by two functions; each must accept an optional leading batch axis."""

    __slots__ = ("_push", "_pull")

    def __init__(self, push: Callable, pull: Callable, in_shape: Shape, out_shape: Shape):
        super().__init__(in_shape, out_shape)
        self._push = push
        self._pull = pull

    def push(self, t):
        return self._push(t)

    def pull(self, ct):
        return self._pull(ct)


class Reshape(LinearMap):
    __slots__ = ()

    def magnitude(self):
        return self

    def push_at(self, mask, t_at):
        return t_at(mask.reshape(self.in_shape))  # C order survives a reshape

    def push(self, t):
        nb = batch_ndim(t, self.in_shape)
        return namespace(t).reshape(t, tuple(np.shape(t)[:nb]) + self.out_shape)

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        return namespace(ct).reshape(ct, tuple(np.shape(ct)[:nb]) + self.in_shape)


class Transpose(LinearMap):
    __slots__ = ("axes", "inverse")

    def __init__(self, axes: Sequence[int], in_shape: Shape):
        axes = tuple(int(a) % len(in_shape) for a in axes) if in_shape else ()
        super().__init__(in_shape, tuple(in_shape[a] for a in axes))
        self.axes = axes
        self.inverse = tuple(int(i) for i in np.argsort(axes))

    def magnitude(self):
        return self

    def push_at(self, mask, t_at):
        t = self._spread(np.transpose(mask, self.inverse), t_at)
        return None if t is None else np.transpose(t, self.axes)[mask]

    def push(self, t):
        nb = batch_ndim(t, self.in_shape)
        return namespace(t).permute_dims(t, tuple(range(nb)) + tuple(a + nb for a in self.axes))

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        return namespace(ct).permute_dims(ct, tuple(range(nb)) +
                                          tuple(a + nb for a in self.inverse))


class Sum(LinearMap):
    """Summation over ``axis`` (an int, a tuple or None) with or without ``keepdims``."""

    __slots__ = ("axis", "keepdims")

    def __init__(self, axis, keepdims: bool, in_shape: Shape, out_shape: Shape):
        super().__init__(in_shape, out_shape)
        nd = len(in_shape)
        if axis is None:
            axis = tuple(range(nd))
        elif isinstance(axis, int | np.integer):
            axis = (int(axis),)
        self.axis = tuple(sorted(a % nd for a in axis)) if nd else ()
        self.keepdims = keepdims

    def magnitude(self):
        return self

    def push(self, t):
        nb = batch_ndim(t, self.in_shape)
        return namespace(t).sum(t, axis=tuple(a + nb for a in self.axis), keepdims=self.keepdims)

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        xp = namespace(ct)
        if not self.keepdims:
            kept = tuple(1 if i in self.axis else n for i, n in enumerate(self.in_shape))
            ct = xp.reshape(ct, tuple(np.shape(ct)[:nb]) + kept)
        return xp.broadcast_to(ct, tuple(np.shape(ct)[:nb]) + self.in_shape)


def expand_index(index, ndim: int) -> tuple:
    """Make an index a tuple with its Ellipsis spelled out, so a trailing axis can ride along."""
    index = index if isinstance(index, tuple) else (index,)
    used = sum(
        np.ndim(i) if isinstance(i, np.ndarray) and i.dtype == bool else 1
        for i in index
        if i is not None and i is not Ellipsis
    )
    out = []
    has_ellipsis = False
    for i in index:
        if i is Ellipsis:
            has_ellipsis = True
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(i)
    if not has_ellipsis:
        out.extend([slice(None)] * (ndim - used))
    return tuple(out)


def positive_steps(index: tuple, shape: Shape) -> tuple[tuple[int, ...], tuple]:
    """``(axes, index')`` with ``x[index] == flip(x, axes)[index']`` and no negative slice
    step in ``index'`` (torch has none); ``index`` is expanded (`expand_index`)."""
    axes, out, dim = [], [], 0
    for i in index:
        if i is None:
            out.append(i)
            continue
        if isinstance(i, slice) and i.step is not None and i.step < 0:
            n = shape[dim]
            pos = range(n)[i]
            out.append(slice(n - 1 - pos[0], n - pos[-1], -i.step) if len(pos) else slice(0, 0))
            axes.append(dim)
        else:
            out.append(i)
        dim += np.ndim(i) if isinstance(i, np.ndarray) and i.dtype == bool else 1
    return tuple(axes), tuple(out)


def index_array(x, index):
    """``x[index]`` in any array library."""
    if backend.is_host(x):
        return np.asarray(x)[index]
    axes, index = positive_steps(expand_index(index, x.ndim), tuple(x.shape))
    # index arrays go to x's device (a read-only numpy view cannot become a tensor)
    index = tuple(backend.from_host(np.array(i), x) if isinstance(i, np.ndarray) else i
                  for i in index)
    return (namespace(x).flip(x, axis=axes) if axes else x)[index]


def is_basic(index: tuple) -> bool:
    return all(i is None or isinstance(i, slice | int | np.integer) for i in index)


class Index(LinearMap):
    """``t -> t[index]``; the pull scatters back (``np.add.at`` when entries may repeat)."""

    __slots__ = ("index", "basic", "positions")

    def __init__(self, index, in_shape: Shape, out_shape: Shape):
        super().__init__(in_shape, out_shape)
        self.index = expand_index(index, len(in_shape))
        self.basic = is_basic(self.index)
        self.positions = None  # flat input positions read, for scatter-add outside numpy

    def magnitude(self):
        return self

    def push(self, t):
        if type(t) is not np.ndarray and not backend.is_host(t):
            xp = namespace(t)
            if batch_ndim(t, self.in_shape):
                return xp.moveaxis(index_array(xp.moveaxis(t, 0, -1), self.index), -1, 0)
            return index_array(t, self.index)
        if batch_ndim(t, self.in_shape):
            return np.moveaxis(np.moveaxis(t, 0, -1)[self.index], -1, 0)
        return t[self.index]

    def push_at(self, mask, t_at):
        if not self.basic:
            return NotImplemented
        need = np.zeros(self.in_shape, bool)
        need[self.index] = mask
        t = self._spread(need, t_at)
        return None if t is None else t[self.index][mask]

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        xp = namespace(ct)
        if xp is not np:
            return self._pull_xp(ct, nb, xp)
        batch = np.shape(ct)[:nb]
        out = np.zeros(self.in_shape + batch, np.result_type(ct))
        moved = np.moveaxis(ct, 0, -1) if nb else ct
        if self.basic:
            out[self.index] = moved
        else:
            np.add.at(out, self.index, moved)
        return np.moveaxis(out, -1, 0) if nb else out

    def _pull_xp(self, ct, nb: int, xp):
        """The pull in another library: item assignment for a basic index, else a
        scatter-add over the flat positions the index reads (repeats accumulate)."""
        batch = tuple(ct.shape)[:nb]
        moved = xp.moveaxis(ct, 0, -1) if nb else ct
        if self.basic:
            axes, index = positive_steps(self.index, self.in_shape)
            out = backend.set_at(backend.zeros(self.in_shape + batch, ct), index, moved)
            if axes:
                out = xp.flip(out, axis=axes)
        else:
            if self.positions is None:  # computed on the device, where the index may live
                n = int(np.prod(self.in_shape))
                self.positions = xp.reshape(index_array(xp.reshape(backend.from_host(
                    np.arange(n), ct), self.in_shape), self.index), (-1,))
            flat = backend.zeros((int(np.prod(self.in_shape)),) + batch, ct)
            flat = backend.kernel("scatter_add", xp)(
                flat, self.positions, xp.reshape(moved, (-1,) + batch))
            out = xp.reshape(flat, self.in_shape + batch)
        return xp.moveaxis(out, -1, 0) if nb else out


class Take(LinearMap):
    """``t -> t.flat[positions]``, shaped ``out_shape``: a gather at flat positions held in
    the tangent's array library (one per output entry, C order), so pushes and pulls never
    move an index to the device; the pull scatter-adds (repeated positions accumulate, as
    `Index`'s does). A max pool's map on another library's arrays."""

    __slots__ = ("positions",)

    def __init__(self, positions, in_shape: Shape, out_shape: Shape):
        super().__init__(in_shape, out_shape)
        self.positions = positions

    def magnitude(self):
        return self

    def push(self, t):
        nb = batch_ndim(t, self.in_shape)
        xp = namespace(t)
        batch = tuple(t.shape)[:nb]
        flat = xp.reshape(t, batch + (-1,))
        return xp.reshape(xp.take(flat, self.positions, axis=nb), batch + self.out_shape)

    def pull(self, ct):
        nb = batch_ndim(ct, self.out_shape)
        xp = namespace(ct)
        batch = tuple(ct.shape)[:nb]
        moved = xp.moveaxis(ct, 0, -1) if nb else ct
        flat = backend.zeros((int(np.prod(self.in_shape)),) + batch, ct)
        flat = backend.kernel("scatter_add", xp)(
            flat, self.positions, xp.reshape(moved, (-1,) + batch))
        out = xp.reshape(flat, self.in_shape + batch)
        return xp.moveaxis(out, -1, 0) if nb else out


def promoted(t, other):
    """``t`` and ``other`` in their common dtype, as numpy's matmul computes them: torch's
    refuses mixed dtypes, and a float32 value can meet a float64 cotangent (a program
    promoting to float64 after the product)."""
    if backend.is_host(t) or backend.is_host(other) or t.dtype == other.dtype:
        return t, other
    xp = namespace(t)
    dtype = xp.result_type(t.dtype, other.dtype)
    return xp.astype(t, dtype), xp.astype(other, dtype)


class MatMul(LinearMap):
    """Tangent of one operand of ``a @ b`` with the other held fixed (numpy matmul rules)."""

    __slots__ = ("other", "side", "a_shape", "b_shape", "plain")

    def __init__(self, other: np.ndarray, side: str, a_shape: Shape, b_shape: Shape, out_shape):
        super().__init__(a_shape if side == "a" else b_shape, out_shape)
        self.other, self.side = other, side
        self.a_shape, self.b_shape = tuple(a_shape), tuple(b_shape)
        # Two matrices: an unbatched push or pull is one product (the layers of a network).
        self.plain = len(self.a_shape) == 2 and len(self.b_shape) == 2

    def _as2d(self, x, shape, nb, which):
        """Give 1-D operands their implicit matrix axis; pad batched ones to the result rank."""
        if len(shape) == 1:
            x = namespace(x).expand_dims(x, axis=-2 if which == "a" else -1)
        if nb:
            pad = max(len(self.a_shape), len(self.b_shape), 2) - max(len(shape), 2)
            if pad > 0:
                x = x.reshape(x.shape[:1] + (1,) * pad + x.shape[1:])
        return x

    def _squeeze(self, r):
        if len(self.b_shape) == 1:
            r = r[..., 0]
        if len(self.a_shape) == 1:
            r = r[..., 0, :] if len(self.b_shape) != 1 else r[..., 0]
        return r

    def magnitude(self):
        return MatMul(namespace(self.other).abs(self.other), self.side, self.a_shape,
                      self.b_shape, self.out_shape)

    def push(self, t):
        t, other = promoted(t, self.other)
        if self.plain and np.ndim(t) == 2:
            return t @ other if self.side == "a" else other @ t
        nb = batch_ndim(t, self.in_shape)
        if self.side == "a":
            r = self._as2d(t, self.a_shape, nb, "a") @ self._as2d(other, self.b_shape, 0, "b")
        else:
            r = self._as2d(other, self.a_shape, 0, "a") @ self._as2d(t, self.b_shape, nb, "b")
        return self._squeeze(r)

    def push_at(self, mask, t_at):
        """``(A @ B)[i, j]`` reads row ``i`` of ``A`` and column ``j`` of ``B``: ask for the
        rows (columns) of the tangent that the requested entries touch, multiply by the
        matching part of the other operand only; for B's tangent, only its rows that meet
        a nonzero entry of those rows of A."""
        if len(self.a_shape) != 2 or len(self.b_shape) != 2:
            return NotImplemented
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        need = np.zeros(self.in_shape, bool)
        if self.side == "a":
            need[rows] = True
            part = t_at(need)
            if part is None:
                return None
            other = self.other if len(cols) == self.b_shape[1] else self.other[:, cols]
            block = part.reshape(len(rows), self.a_shape[1]) @ other
        else:
            other = self.other if len(rows) == self.a_shape[0] else self.other[rows]
            # Rows of B's tangent meet only nonzero columns of A's requested rows (a relu's
            # zero rows ask for nothing).
            live = np.flatnonzero(np.any(other != 0, axis=0))
            if not len(live):
                return None
            if len(live) < self.b_shape[0]:
                other = other[:, live]
                need[np.ix_(live, cols)] = True
            else:
                need[:, cols] = True
            part = t_at(need)
            if part is None:
                return None
            block = other @ part.reshape(len(live), len(cols))
        return block[mask[np.ix_(rows, cols)]]

    def pull(self, ct):
        xp = namespace(ct, self.other)
        ct, other = promoted(ct, self.other)
        if self.plain and np.ndim(ct) == 2:
            other_t = other.T if xp is np else xp.matrix_transpose(other)
            return ct @ other_t if self.side == "a" else other_t @ ct
        nb = batch_ndim(ct, self.out_shape)
        if len(self.b_shape) == 1:
            ct = ct[..., None]
        if len(self.a_shape) == 1:
            ct = xp.expand_dims(ct, axis=-2)
        pad = max(len(self.a_shape), len(self.b_shape), 2) - max(len(self.out_shape), 2)
        if nb and pad > 0:
            ct = ct.reshape(ct.shape[:1] + (1,) * pad + ct.shape[1:])
        if self.side == "a":
            g = ct @ xp.matrix_transpose(self._as2d(other, self.b_shape, 0, "b"))
            target = self.a_shape if len(self.a_shape) > 1 else (1,) + self.a_shape
        else:
            g = xp.matrix_transpose(self._as2d(other, self.a_shape, 0, "a")) @ ct
            target = self.b_shape if len(self.b_shape) > 1 else self.b_shape + (1,)
        g = unbroadcast(g, target, nb)
        return xp.reshape(g, tuple(g.shape[:nb]) + self.in_shape)


class FanIn:
    """The linearization of a primitive with several inputs: one map per input.

    ``lin(*tangents)`` sums the pushed tangents (``None`` tangents count as zero);
    ``lin.T(ct)`` returns one cotangent per input (``None`` where the entry is ``None``).
    """

    __slots__ = ("maps",)

    def __init__(self, *maps: LinearMap | None):
        self.maps = maps

    def push(self, *ts):
        total = None
        for m, t in zip(self.maps, ts, strict=True):
            if m is None or t is None:
                continue
            r = m.push(t)
            total = r if total is None else total + r
        return total

    __call__ = push

    def push_at(self, mask, t_ats: Sequence):
        """The entries ``mask`` of the summed tangent; ``t_ats`` has one request per input."""
        total = None
        for m, t_at in zip(self.maps, t_ats, strict=True):
            if m is None or t_at is None:
                continue
            r = m.push_at(mask, t_at)
            if r is NotImplemented:
                return NotImplemented
            if r is not None:
                total = r if total is None else total + r
        return total

    def pull(self, ct, wants: Sequence[bool] | None = None) -> list:
        if wants is None:
            return [None if m is None else m.pull(ct) for m in self.maps]
        return [m.pull(ct) if (w and m is not None) else None
                for m, w in zip(self.maps, wants, strict=True)]

    def push_absorbing(self, *ts):
        total = None
        for m, t in zip(self.maps, ts, strict=True):
            if m is None or t is None:
                continue
            r = m.push_absorbing(t)
            total = r if total is None else total + r
        return total

    def pull_absorbing(self, ct, wants: Sequence[bool] | None = None) -> list:
        wants = wants or [True] * len(self.maps)
        return [m.pull_absorbing(ct) if (w and m is not None) else None
                for m, w in zip(self.maps, wants, strict=True)]

    @property
    def T(self):
        return self.pull

    def __repr__(self) -> str:
        return f"FanIn{self.maps!r}"


class Reroute:
    """A linearization that reads other nodes besides the rule's arguments: ``lin`` is a
    `FanIn` with one map per argument and then one per node of ``refs`` (earlier nodes that
    move with the direction), and the output's tangent is their sum.

    For a limit the arguments' tangents cannot express: ``sqrt(h)`` where ``h`` vanishes to
    second order along the ray has an infinite slope in ``h`` but a finite limiting gradient
    in the inputs ``h`` is computed from (``refs``), read off the exact series
    (`asd.core.ties.root_limit`). The engine records the extra nodes (`Trace.reroute`) and
    every sweep reads them like arguments.
    """

    __slots__ = ("lin", "refs")

    def __init__(self, lin: FanIn, refs: Sequence[int]):
        self.lin, self.refs = lin, tuple(refs)

    def __repr__(self) -> str:
        return f"Reroute({self.lin!r}, via {self.refs})"

