"""Array libraries: the one place in asd that knows numpy, PyTorch and JAX apart.

Values, tangents and linear maps live in the caller's array library and on its device, so a
program on torch tensors is swept by torch (on its GPU, at its speed) and never copied to
numpy on the way. Rules are written once against the array API standard: `namespace` gives
the namespace of a set of values (array-api-compat adapts torch; ``jax.numpy`` is a standard
namespace itself), and the few kernels outside the standard (item assignment, scatter-add, a
fused finiteness screen; the convolution and its adjoints, registered by ``library/nn.py``, and
max pooling's first maximum per window, by ``library/order.py``) come from `KERNELS`, a small
per-library table whose numpy entries are the default.

numpy stays the default and keeps its speed: numpy arrays and Python scalars are recognised
by their type, without calling array-api-compat (which costs microseconds per call), and
their namespace is the ``numpy`` module itself (numpy 2 implements the standard's names).

What runs on the host is small or rare: the exact series along the ray (degenerate ties),
for which `to_host` copies the tied cone's values and tangents; the tied entries of a
tangent that is 0 or rounding-sized; the positions a max or min selects (one per output
entry), from which its index map is built; and the input of a sort, top-k sum, median or
quantile whose rows hold equal entries (a tie, decided there as numpy decides it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from asd.errors import UnsupportedError

HOST_TYPES = (float, int, bool, np.ndarray, np.generic)
"""Values that numpy computes with directly: the fast path of every sweep."""

_HOST_EXACT = frozenset({float, int, bool, np.ndarray, np.float64, np.float32, np.bool_,
                         np.int64, np.int32})


def is_host(x) -> bool:
    """Whether ``x`` is a numpy array or a Python/numpy scalar (no other library involved)."""
    return type(x) in _HOST_EXACT or isinstance(x, HOST_TYPES) or x is None


def is_foreign(x) -> bool:
    """Whether ``x`` is an array of another library than numpy (torch, JAX, ...)."""
    return (not is_host(x) and not getattr(x, "_asd_traced", False)
            and (hasattr(x, "__array_namespace__") or _is_torch(x)))


def namespace(*xs):
    """The array namespace of ``xs``: ``numpy`` unless one of them is another library's array.

    Non-array values (Python scalars, None) do not count; arrays of two libraries raise.
    """
    foreign = None
    for x in xs:
        if type(x) in _HOST_EXACT or x is None or isinstance(x, HOST_TYPES):
            continue
        if getattr(x, "_asd_traced", False) or (
                not hasattr(x, "__array_namespace__") and not _is_torch(x)):
            continue
        foreign = [x] if foreign is None else [*foreign, x]
    if foreign is None:
        return np
    return _namespace_of(foreign)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


_BY_TYPE: dict[type, object] = {}
"""The namespace of an array type (a torch ``Tensor``, a JAX ``ArrayImpl``), found once:
array-api-compat's lookup costs microseconds, and a torch sweep asks ~100 times a call."""


def _namespace_of(arrays: list):
    kinds = {type(a) for a in arrays}
    if len(kinds) == 1:
        kind = next(iter(kinds))
        xp = _BY_TYPE.get(kind)
        if xp is None:
            xp = _BY_TYPE[kind] = _lookup(arrays)
        return xp
    return _lookup(arrays)


def _lookup(arrays: list):
    import array_api_compat

    try:
        return array_api_compat.array_namespace(*arrays)
    except TypeError as e:
        raise UnsupportedError(
            f"values of different array libraries met "
            f"({', '.join(sorted({type(a).__name__ for a in arrays}))}): {e}. Give every "
            "argument and constant of the program in one library."
        ) from e


def library(xp) -> str:
    """``'numpy'``, ``'torch'`` or ``'jax'``: the key of `KERNELS` for a namespace."""
    if xp is np:
        return "numpy"
    name = getattr(xp, "__name__", "")
    if "torch" in name:
        return "torch"
    if "jax" in name:
        return "jax"
    if "numpy" in name:
        return "numpy"
    return name


def device(x):
    """The device ``x`` lives on (``'cpu'`` for numpy and scalars)."""
    if is_host(x):
        return "cpu"
    import array_api_compat

    return array_api_compat.device(x)


def size(x) -> int:
    """The number of entries of ``x`` (torch's ``.size`` is a method, the standard's a number)."""
    return math.prod(x.shape) if hasattr(x, "shape") else 1


def to_host(x) -> np.ndarray:
    """A numpy copy of ``x``: for the rare host-side work (exact series at degenerate ties,
    the sides of tied comparisons and jumps)."""
    if is_host(x):
        return np.asarray(x)
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def from_host(a, like, dtype=None):
    """The numpy array ``a`` in the namespace and on the device of ``like``.

    ``dtype`` (a dtype of that namespace, or ``'like'`` for ``like``'s own) casts it; None
    keeps numpy's dtype as the library maps it.
    """
    xp = namespace(like)
    if xp is np:
        a = np.asarray(a)
        if dtype is None:
            return a
        return a.astype(like.dtype if dtype == "like" else dtype, copy=False)
    a = np.asarray(a)
    if not a.flags.writeable:  # a broadcast view: torch refuses to wrap read-only memory
        a = a.copy()
    out = xp.asarray(a, device=device(like))
    if dtype is not None:
        out = xp.astype(out, like.dtype if isinstance(dtype, str) and dtype == "like"
                        else dtype)
    return out


def zeros(shape_: tuple, like, dtype=None):
    """Zeros of ``shape_`` in ``like``'s library and device (dtype: ``like``'s, or given)."""
    xp = namespace(like)
    dtype = like.dtype if dtype is None else dtype
    if xp is np:
        return np.zeros(shape_, dtype)
    return xp.zeros(tuple(shape_), dtype=dtype, device=device(like))


def is_floating(x) -> bool:
    xp = namespace(x)
    if xp is np:
        return np.issubdtype(np.result_type(x), np.inexact)
    return xp.isdtype(x.dtype, "real floating")


def floating(x):
    """``x`` itself if it holds floats, else cast to the library's default float."""
    if is_floating(x):
        return x
    xp = namespace(x)
    if xp is np:
        return np.asarray(x, dtype=np.float64)
    return xp.astype(x, xp.asarray(0.0, device=device(x)).dtype)


# ----- kernels outside the standard: one entry per library, numpy's is the default -----

def _set_in_place(x, index, values):
    x[index] = values
    return x


def _np_scatter_add(out, flat_index, values):
    """``out[flat_index[i]] += values[i]`` along the first axis, repeats accumulating."""
    np.add.at(out, flat_index, values)
    return out


def _torch_scatter_add(out, flat_index, values):
    import torch

    idx = torch.as_tensor(flat_index, device=out.device)
    return out.index_add_(0, idx, values.to(out.dtype))


def _torch_finite_screen(arrays) -> bool:
    """True only if every entry of the tensors is finite, in one fused pass: their 1-norms
    are NaN or infinite wherever an entry is (an overflowing norm of finite entries says
    False too; the caller then tests each array)."""
    import torch

    norms = torch._foreach_norm(arrays, 1)
    return bool(torch.isfinite(torch.stack(norms)).all())


def _jax_set_at(x, index, values):
    return x.at[index].set(values)


def _jax_scatter_add(out, flat_index, values):
    return out.at[flat_index].add(values)


def _jax_when_any(mask, fn: Callable, carry):
    import jax

    return jax.lax.cond(jax.numpy.any(mask), fn, lambda c: c, carry)


def when_any(mask, fn: Callable, carry):
    """``fn(carry)`` where some entry of ``mask`` holds, else ``carry`` unchanged: for work
    that changes nothing where ``mask`` is empty (a further tie-breaking direction). On JAX
    a ``lax.cond`` (skipped on the device, no host read); elsewhere ``fn`` runs: the same
    result, and no Python branch on a value."""
    return kernel("when_any", namespace(mask), lambda m, f, c: f(c))(mask, fn, carry)


KERNELS: dict[str, dict[str, Callable]] = {
    "set_at": {"numpy": _set_in_place, "torch": _set_in_place, "jax": _jax_set_at},
    "scatter_add": {"numpy": _np_scatter_add, "torch": _torch_scatter_add,
                    "jax": _jax_scatter_add},
    "finite_screen": {"torch": _torch_finite_screen},
    "when_any": {"jax": _jax_when_any},
}
"""name -> library -> kernel. A library without an entry raises `UnsupportedError` rather
than copying to numpy; `register_kernel` adds one (``library/nn.py`` adds the convolution's)."""


def register_kernel(name: str, lib: str, fn: Callable) -> None:
    """Make ``fn`` the kernel ``name`` for the library ``lib`` (``'numpy'``: the default)."""
    KERNELS.setdefault(name, {})[lib] = fn


def kernel(name: str, xp, default: Callable | None = None) -> Callable:
    """The kernel ``name`` for namespace ``xp``; ``default`` (array-API code) where the
    library has none, for kernels that only speed a library up."""
    table = KERNELS.get(name, {})
    if xp is np and default is None:
        return table["numpy"]
    fn = table.get(library(xp), default)
    if fn is None:
        raise UnsupportedError(f"the kernel {name} has no {library(xp)} implementation, so it "
                               "runs on numpy arrays only so far; add one with "
                               f"asd.extend.register_kernel({name!r}, {library(xp)!r}, fn)")
    return fn


def operands(*xs) -> tuple:
    """The operands of one operation as arrays of one library, on one device: Python numbers
    and numpy constants beside another library's arrays become arrays of the first floating
    one's dtype (bool constants stay bool)."""
    arrays = [x for x in xs if not is_host(x)]
    if not arrays:
        return tuple(np.asarray(x) for x in xs)
    xp = namespace(*arrays)
    like = next((x for x in arrays if xp.isdtype(x.dtype, "real floating")), arrays[0])
    return tuple(x if not is_host(x) else from_host(
        np.asarray(x), like, None if np.asarray(x).dtype == bool else "like") for x in xs)


def set_at(x, index, values):
    """``x[index] = values``, in place where the library allows it (JAX: a new array)."""
    if type(x) is np.ndarray:
        x[index] = values
        return x
    return kernel("set_at", namespace(x))(x, index, values)


def numpy_dtype(x) -> np.dtype:
    """The numpy dtype of ``x``'s entries, read from its ``dtype`` (no copy to the host): a
    torch dtype is named like numpy's; half types numpy lacks read as float32, in which asd
    computes them."""
    d = getattr(x, "dtype", None)
    if d is None:
        return np.asarray(x).dtype
    try:
        return np.dtype(d)
    except TypeError:
        try:
            return np.dtype(str(d).rsplit(".", 1)[-1])
        except TypeError:
            return np.dtype(np.float32)


def first_nonfinite_of(arrays) -> int | None:
    """The index of the first array holding a NaN or infinity, or None. Another library's
    arrays are tested together, with one transfer to the host per library (a test per
    array would wait for the device once per array)."""
    foreign: dict = {}
    bad = []
    for i, a in enumerate(arrays):
        if is_host(a) or not is_floating(a):
            if not all_finite(a):
                bad.append(i)
        else:
            foreign.setdefault(library(namespace(a)), []).append((i, a))
    for lib, group in foreign.items():
        xp = namespace(group[0][1])
        screen = KERNELS["finite_screen"].get(lib)
        if screen is not None and len(group) > 1 and screen([a for _, a in group]):
            continue
        flags = to_host(xp.stack([xp.all(xp.isfinite(a)) for _, a in group]))
        bad += [i for (i, _), ok in zip(group, flags, strict=True) if not ok]
    return min(bad) if bad else None


def all_finite(x) -> bool:
    """Whether every entry of ``x`` is finite (integers and bools always are)."""
    if is_host(x):
        a = np.asarray(x)
        if a.dtype.kind == "f" and a.size > 4096 and a.flags.c_contiguous:
            # the sum of squares (one BLAS pass, no bool temporary) is finite when every
            # entry is; only a NaN, an infinity or an overflowing sum sends it to the test
            flat = a.reshape(-1)
            with np.errstate(all="ignore"):
                if np.isfinite(np.dot(flat, flat)):
                    return True
        return a.dtype.kind not in "fc" or bool(np.all(np.isfinite(a)))
    if not is_floating(x):
        return True
    xp = namespace(x)
    return bool(xp.all(xp.isfinite(x)))
