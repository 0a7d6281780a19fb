"""Filtered series along the ray: float coefficient arrays with rigorous error bounds.

A tie ``h == 0`` that first order leaves open is decided by the power series of ``h`` along
``x + δv`` (`asd.core.ties`). Its exact form (`asd.core.series`) holds one Python object per
entry per node; a `Jet` holds the same series as arrays: coefficients ``c`` of shape
``(terms, *shape)`` in float64 and a bound ``e`` of the same shape with
``|exact coefficient - c| <= e``, the exact coefficient being the one the Fraction series
computes for the same program with the same float constants. It is the floating-point filter
of an exact geometric predicate (CGAL, Shewchuk): a sign is read in floats wherever the bound
settles it (the first coefficient not proven 0 has ``|c_k| > e_k``; a coefficient is proven 0
only where ``c_k == 0`` and ``e_k == 0``), and only the entries whose bound leaves it open go
to the exact path. Nested rays ``x + ε₁v + ε₂w₁ + …`` (the lexicographic directions) are
jets too: their coefficients are the monomials ``ε₁^k₁ ε₂^k₂ …`` of a `Basis`, flattened in
the order that decides a sign.

A jet is a numpy duck array (``__array_ufunc__``, ``__array_function__``, indexing, shape), so
the primitives' own numpy implementations run on it unchanged, as they run on object arrays
of series. Every float operation is accounted for: sums and products of coefficients carry
their exact rounding errors (TwoSum, Dekker's TwoProduct), contractions and reductions the
bound ``γ_n Σ|a||b|`` (precise jets, the second filter the tie service tries, prove it 0
per entry where every term sits on a common power-of-two grid small enough for the float
result to be exact), and each computed bound is rounded upward by a relative margin. A
comparison is lexicographic on coefficients; where its bound cannot settle it the entries it
selects become uncertain (bound ``inf``), never guessed. Anything a jet does not cover raises
`JetUnsupported`, and the caller uses the exact path instead.

Two flags per entry complete what the exact series knows:

- ``cut``: a nonzero term past the truncation may have been dropped (the exact series'
  ``exact`` is False). Along one direction a series proven zero to its order is zero only
  where ``cut`` is False; on a nested ray a cut entry decides nothing (a dropped term may
  precede the coefficient that would decide). It follows the exact series' rule (a product
  is cut where the powers add past the order, and a sum, product or contraction is cut where
  any of its terms is), so a jet never proves a series zero that the exact path leaves open;
- ``still``: the entry's series is the same constant along every nested ray: a constant, or
  a branch (``maximum(x, 0)``, ``where``) selected by a comparison that the series along the
  jet's ray decides (every further direction is infinitesimal beside it), when that branch is
  still. A dead ReLU's output is still (0 along every direction), so equal entries of a
  pooling window of dead ReLUs are equal along the whole lexicographic ray without a nested
  series.
"""

from __future__ import annotations

import functools
import math
import string

import numpy as np

__all__ = ["ORDER", "Basis", "Jet", "JetMask", "JetUnsupported", "basis", "jet_sign"]

ORDER = 4
"""Highest power of δ a jet along one direction keeps: ties that open later go to the exact
series."""

U = 2.0 ** -53
"""Unit roundoff of float64."""

LO, HI = 2.0 ** -480, 2.0 ** 480
"""Magnitudes a jet holds as floats: products of two of them neither underflow nor
overflow, so Dekker's TwoProduct is exact; values outside become bounds (``c = 0``)."""

BIG = 2.0 ** 1000
"""An unknown bound (``inf``) inside a product: ``BIG * 0 = 0`` where ``inf * 0`` is NaN, and
``BIG`` times any held magnitude exceeds ``HI``, so it reads as unknown again."""


_QUIET = np.errstate(over="ignore", invalid="ignore")
"""Bounds overflow to inf on purpose (an unknown bound times a held value): no warning."""


class JetUnsupported(Exception):
    """An operation a jet does not cover: the caller evaluates the cone on exact series."""


def gamma(n: int) -> float:
    """A bound on ``γ_n = n u / (1 - n u)``, the relative error of ``n`` rounded operations,
    with room for the rounding of the bound itself."""
    return 2.0 * (n + 2) * U


def _up(b, n: int):
    """``b`` (a bound computed from nonnegative terms in ``n`` rounded steps) made an upper
    bound of the exact value it approximates."""
    return b * (1.0 + gamma(n))


# ----- error-free transformations -----

def _two_sum(a, b):
    """``(s, err)`` with ``s = fl(a + b)`` and ``a + b = s + err`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


_SPLIT = 134217729.0  # 2**27 + 1


def _two_prod(a, b):
    """``(p, err)`` with ``p = fl(a b)`` and ``a b = p + err`` exactly (Dekker; operands
    within [LO, HI] in magnitude, or 0)."""
    p = a * b
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _grid_weights(a: np.ndarray) -> tuple[np.ndarray, float]:
    """``(w, offset)``: per entry of ``a``, ``w = 2**-(g + offset)`` for the largest ``g``
    with the entry an integer multiple of ``2**g`` (0 for a zero entry), raised to at least
    ``2**-450`` (a coarser claim, still true). Products of such weights sum to a bound on the
    finest grid a sum of products sits on (`_exact_where`)."""
    nz = a != 0
    if not nz.any():
        return np.zeros(a.shape), 0.0
    m, ex = np.frexp(a)
    mant = (np.abs(m) * 2.0 ** 53).astype(np.int64)
    _, low = np.frexp((mant & -mant).astype(float))
    neg = np.where(nz, 54 - ex - low, -np.inf)  # -g: the lowest set bit is 2**(ex - 54 + low)
    offset = float(neg.max())
    return np.where(nz, np.exp2(np.maximum(neg - offset, -450.0)), 0.0), offset


def _exact_where(weights: np.ndarray, offset: float, total: np.ndarray) -> np.ndarray:
    """Per entry, whether a float sum of products is exact, in any order: the products'
    grid weights (`_grid_weights`, multiplied) add to ``weights`` scaled by ``2**-offset``,
    their magnitudes to ``total``. Every term sits on ``2**g`` with ``-g - offset`` at most
    ``floor(log2 weights)`` (each weight is a power of two no larger than their float sum),
    so every product and partial sum below ``2**(g + 53)`` is representable."""
    held = np.where(weights > 0, weights, 1.0)
    k = np.floor(np.log2(held))
    k = k - (np.exp2(k) > held) + (np.exp2(k + 1) <= held)  # floor(log2) exactly
    limit = np.exp2(np.minimum(-offset - k + 53, 1000.0))
    return (weights == 0) | (_up(total, 2) < limit)


# ----- the monomials a jet keeps -----

class Basis:
    """The monomials of a jet: ``ε₁^k₁ ⋯ ε_D^k_D`` with every ``k_l <= order``, for a ray
    nested ``levels = D`` deep (``x + ε₁v + ε₂w₁ + …``), each level truncated at ``order`` as
    the nested exact series is. They are flattened as ``Σ k_l (order + 1)^(l-1)``: ascending
    flat index is the order in which coefficients decide a sign (the power of the last,
    smallest infinitesimal first, then the earlier ones), so a sign reads the first
    coefficient not proven 0 at any depth. One basis per ``(order, levels, precise)``
    (`basis`)."""

    __slots__ = ("order", "levels", "precise", "size", "units", "valid")

    def __init__(self, order: int, levels: int, precise: bool):
        n = order + 1
        self.order, self.levels, self.precise, self.size = order, levels, precise, n ** levels
        self.units = tuple(n ** level for level in range(levels))
        powers = np.stack(np.unravel_index(np.arange(self.size), (n,) * levels)[::-1])
        # monomials i and j multiply to monomial i + j where no power passes the order
        self.valid = np.all(powers[:, :, None] + powers[:, None, :] <= order, axis=0)

    def pairs(self, top_a: int, top_b: int) -> tuple[dict[int, list], list]:
        """The products of monomials up to ``top_a`` and ``top_b``: ``{k: [(i, j), ...]}``
        for those kept, and the pairs whose product is dropped (past the order)."""
        kept: dict[int, list] = {}
        dropped = []
        for i in range(top_a + 1):
            for j in range(top_b + 1):
                if self.valid[i, j]:
                    kept.setdefault(i + j, []).append((i, j))
                else:
                    dropped.append((i, j))
        return kept, dropped


@functools.cache
def basis(order: int = ORDER, levels: int = 1, precise: bool = False) -> Basis:
    """The `Basis` of jets truncated at ``order`` along a ray ``levels`` deep. ``precise``
    jets also prove sums exact where their terms lie on a common power-of-two grid
    (`_exact_where`: a few more passes per sum), so equal dyadic values compare equal; the
    others bound every rounded sum by ``γ_n Σ|terms|``."""
    return Basis(order, levels, precise)


# ----- the jet -----

def _clean(c: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(c, e)`` with every coefficient in [LO, HI] or 0 and every bound 0, in [LO, HI] or
    inf: a value outside becomes a bound (``c = 0``), a tiny bound rounds up to ``LO``."""
    if not c.size:
        return c, e
    a = np.abs(c)
    if a.max() <= HI and np.min(a, where=a > 0, initial=HI) >= LO:  # the common case
        if not e.any() or (e.max() <= HI and np.min(e, where=e > 0, initial=HI) >= LO):
            return c, e
    bad = ~(a <= HI) | ((a < LO) & (c != 0))
    if bad.any():
        held = np.isfinite(a)
        e = np.where(bad, np.where(held, _up(np.where(held, a, 0.0) + e, 2), np.inf), e)
        c = np.where(bad, 0.0, c)
    if not np.all(e <= HI) or np.any((e > 0) & (e < LO)):
        e = np.where(e <= HI, np.where((e > 0) & (e < LO), LO, e), np.inf)
    return c, e


def _factor(a: Jet) -> Jet:
    """``a`` ready to multiply: `_clean` (sums and selections leave values as they come;
    products need every factor in [LO, HI])."""
    if a.clean:
        return a
    c, e = _clean(a.c, a.e)
    return Jet.view(c, e, a.cut, a.still, a.basis, clean=True)


def _zeros(shape: tuple) -> np.ndarray:
    """Zero bounds (a read-only view: an exact jet allocates none)."""
    return np.broadcast_to(np.zeros(()), shape)


def _finite(e: np.ndarray) -> np.ndarray:
    """``e`` with unknown bounds as `BIG`, for products in which a 0 must stay 0."""
    return np.where(np.isinf(e), BIG, e) if np.isinf(e).any() else e


class Jet:
    """A truncated power series along the ray per entry, as float arrays with error bounds.

    ``c``, ``e``: ``(n, *shape)`` float64 coefficients and bounds of the first ``n`` monomials
    of ``basis`` (the others are exactly 0: an input along the ray stores 2, a constant 1);
    ``cut``, ``still``: bool arrays of ``shape`` (see the module docstring).
    Immutable: operations return new jets. Built by `Jet.line` (an input along the ray) and
    `Jet.constant`.

    >>> import numpy as np
    >>> x = Jet.line(np.array([0.0, 0.0]), [np.array([1.0, -1.0])])
    >>> [int(s) for s in jet_sign(np.maximum(x, 0.0) * 3.0 - x)[0]]
    [1, 1]
    """

    __slots__ = ("c", "e", "cut", "still", "basis", "clean", "_top")

    def __init__(self, c: np.ndarray, e: np.ndarray, cut: np.ndarray, still: np.ndarray,
                 basis_: Basis):
        self.c, self.e = c, e
        self.cut, self.still, self.basis, self._top = cut, still & ~cut, basis_, None
        self.clean = False  # values as sums and selections leave them (`_factor`)

    @classmethod
    def checked(cls, c, e, cut, still, basis_: Basis) -> Jet:
        """A jet of a product's coefficients, made `_clean`."""
        out = cls(*_clean(c, e), cut, still, basis_)
        out.clean = True
        return out

    @classmethod
    def view(cls, c, e, cut, still, basis_: Basis, top: int | None = None,
             clean: bool = False) -> Jet:
        """A jet of given arrays (a rearrangement of other jets': flags as they are)."""
        out = object.__new__(cls)
        out.c, out.e, out.cut, out.still, out.basis, out._top = c, e, cut, still, basis_, top
        out.clean = clean
        return out

    @classmethod
    def line(cls, x, tangents: list, basis_: Basis | None = None) -> Jet:
        """``x + ε₁t₀ + ε₂t₁ + …``: an input along the (nested) ray, held exactly."""
        basis_ = basis_ or basis(ORDER, len(tangents))
        x = _float(x)
        c = np.zeros((1 + max(basis_.units[:len(tangents)], default=0),) + x.shape)
        c[0] = x
        for unit, t in zip(basis_.units, tangents, strict=True):
            c[unit] = np.broadcast_to(_float(t), x.shape)
        return cls.checked(c, _zeros(c.shape), np.zeros(x.shape, bool),
                           np.zeros(x.shape, bool), basis_)

    @classmethod
    def constant(cls, x, basis_: Basis | None = None) -> Jet:
        """``x`` as a jet: the same value along every direction."""
        basis_ = basis_ or basis()
        x = _float(x)[None]
        return cls.checked(x, _zeros(x.shape), np.zeros(x.shape[1:], bool),
                           np.ones(x.shape[1:], bool), basis_)

    # ----- the array protocol -----

    @property
    def shape(self) -> tuple:
        return self.c.shape[1:]

    @property
    def ndim(self) -> int:
        return self.c.ndim - 1

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)

    @property
    def T(self) -> Jet:
        return _transpose(self)

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d jet")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        raise JetUnsupported("a jet read as a plain array (np.asarray): its series would be "
                             "lost")

    def __bool__(self) -> bool:
        raise JetUnsupported("a Python branch on a jet")

    def __float__(self) -> float:
        raise JetUnsupported("a jet read as a float")

    def __iter__(self):
        raise JetUnsupported("iterating over a jet")

    def top(self) -> int:
        """The last monomial with a coefficient (or bound) nonzero somewhere; -1 for 0."""
        if self._top is None:
            nz = (self.c != 0) | (self.e != 0)
            hits = np.flatnonzero(nz.reshape(nz.shape[0], -1).any(-1))
            self._top = int(hits[-1]) if hits.size else -1
        return self._top

    def live(self) -> np.ndarray:
        """Per monomial and entry, whether the coefficient is not proven 0."""
        return (self.c != 0) | (self.e != 0)

    def broadcast(self, shape: tuple) -> Jet:
        """This jet broadcast to ``shape`` (``np.broadcast_to`` without its dispatch)."""
        return _lift(self, tuple(shape))

    def __getitem__(self, index) -> Jet:
        index = index if isinstance(index, tuple) else (index,)
        if all(i is None or i is Ellipsis or isinstance(i, slice | int | np.integer)
               for i in index):
            at = (slice(None),) + index
            return Jet.view(self.c[at], self.e[at], self.cut[index], self.still[index],
                            self.basis, self._top, self.clean)
        if any(isinstance(i, Jet | JetMask) for i in index):
            raise JetUnsupported("indexing with a jet")
        if len(index) == 1 and isinstance(index[0], np.ndarray) and (
                index[0].dtype.kind == "b" and index[0].shape == self.shape):
            # a mask of entries (the tie service's)
            mask = index[0]
            return Jet.view(self.c[:, mask], self.e[:, mask], self.cut[mask], self.still[mask],
                            self.basis, self._top, self.clean)
        pos = np.arange(self.size).reshape(self.shape)[index]
        k = self.c.shape[0]
        return Jet.view(self.c.reshape(k, -1)[:, pos], self.e.reshape(k, -1)[:, pos],
                        self.cut.reshape(-1)[pos], self.still.reshape(-1)[pos], self.basis,
                        self._top, self.clean)

    def __setitem__(self, index, value):
        raise JetUnsupported("assignment into a jet")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _function(func, args, kwargs)

    # the methods of numpy arrays that implementations call
    def reshape(self, *shape, order="C"):
        if order != "C":
            raise JetUnsupported(f"reshape with order={order!r}")
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
        return _reshape(self, shape)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], tuple | list) else axes
        return _transpose(self, axes or None)

    def swapaxes(self, a, b):
        return _swapaxes(self, a, b)

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    flatten = ravel

    def squeeze(self, axis=None):
        return _squeeze(self, axis)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        return _sum(self, axis, keepdims, dtype, out)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        return _mean(self, axis, keepdims, dtype, out)

    def max(self, axis=None, out=None, keepdims=False):
        return _extreme(self, axis, keepdims, np.greater_equal, out)

    def min(self, axis=None, out=None, keepdims=False):
        return _extreme(self, axis, keepdims, np.less_equal, out)

    def astype(self, dtype, copy=True):
        return _astype(self, dtype)

    def copy(self):
        return self

    def __neg__(self):
        return _neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return np.absolute(self)

    def __repr__(self) -> str:
        return (f"Jet(shape={self.shape}, order={self.basis.order}, levels="
                f"{self.basis.levels}, c={self.c!r}, e={self.e!r})")


def _binop(ufunc, swap: bool = False):
    if swap:
        def method(self, other):
            return ufunc(other, self)
    else:
        def method(self, other):
            return ufunc(self, other)
    return method


for _name, _uf in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("matmul", np.matmul), ("pow", np.power)):
    setattr(Jet, f"__{_name}__", _binop(_uf))
    setattr(Jet, f"__r{_name}__", _binop(_uf, swap=True))
for _name, _uf in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)):
    setattr(Jet, f"__{_name}__", _binop(_uf))
Jet.__hash__ = None


class JetMask:
    """A comparison of jets: ``value`` where ``sure`` (proven by the bounds), and whether
    that answer holds along every further direction of the lexicographic ray (``still``).
    `where` selects with it; an entry it is not sure of makes the selection uncertain."""

    __slots__ = ("value", "sure", "still")

    def __init__(self, value: np.ndarray, sure: np.ndarray, still: np.ndarray):
        self.value, self.sure, self.still = value, sure, still & sure

    @property
    def shape(self) -> tuple:
        return self.value.shape

    @property
    def ndim(self) -> int:
        return self.value.ndim

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(bool)

    def __array__(self, dtype=None, copy=None):
        raise JetUnsupported("a comparison of jets read as a plain array")

    def __bool__(self) -> bool:
        raise JetUnsupported("a Python branch on a comparison of jets")

    def _map(self, fn) -> JetMask:
        return JetMask(fn(self.value), fn(self.sure), fn(self.still))

    def __getitem__(self, index) -> JetMask:
        return self._map(lambda a: a[index])

    def reshape(self, *shape):
        return self._map(lambda a: a.reshape(*shape))

    def __invert__(self) -> JetMask:
        return JetMask(~self.value, self.sure, self.still)

    def __and__(self, other) -> JetMask:
        return _logic(np.logical_and, self, other)

    def __or__(self, other) -> JetMask:
        return _logic(np.logical_or, self, other)

    __rand__, __ror__ = __and__, __or__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise JetUnsupported(f"np.{ufunc.__name__}.{method} on a comparison of jets")
        if ufunc in (np.logical_not, np.invert):
            return ~inputs[0]
        if ufunc in (np.logical_and, np.bitwise_and):
            return _logic(np.logical_and, *inputs)
        if ufunc in (np.logical_or, np.bitwise_or):
            return _logic(np.logical_or, *inputs)
        raise JetUnsupported(f"np.{ufunc.__name__} on a comparison of jets")

    def __array_function__(self, func, types, args, kwargs):
        return _function(func, args, kwargs)


def _as_mask(m) -> JetMask:
    if isinstance(m, JetMask):
        return m
    if isinstance(m, Jet):
        raise JetUnsupported("a series as a condition")
    m = np.asarray(m)
    if m.dtype == object:
        raise JetUnsupported("an object array as a condition")
    m = m.astype(bool)
    ones = np.ones(m.shape, bool)
    return JetMask(m, ones, ones)


def _logic(fn, a, b) -> JetMask:
    a, b = _as_mask(a), _as_mask(b)
    return JetMask(fn(a.value, b.value), a.sure & b.sure, a.still & b.still)


# ----- operands -----

def _float(x) -> np.ndarray:
    """``x`` as float64, exactly (a value float64 cannot hold raises `JetUnsupported`)."""
    x = np.asarray(x)
    if x.dtype == object or x.dtype.kind not in "biuf":
        raise JetUnsupported(f"a {x.dtype} constant")
    if x.dtype.kind in "iu" and x.size and np.max(np.abs(x)) >= 2 ** 53:
        raise JetUnsupported("an integer constant beyond float64's exact range")
    if x.dtype.kind == "f" and x.dtype.itemsize > 8:
        raise JetUnsupported("a long double constant")
    return x.astype(np.float64, copy=False)


def _const(x) -> np.ndarray:
    """A constant factor: float64, every nonzero magnitude within [LO, HI]."""
    x = _float(x)
    _in_range(np.abs(x))
    return x


def _in_range(magnitudes: np.ndarray) -> None:
    """Refuse a constant factor whose nonzero magnitudes leave [LO, HI] (its products could
    underflow or overflow, beyond what the bounds account for)."""
    if magnitudes.size and not (np.max(magnitudes) <= HI and np.min(
            magnitudes, where=magnitudes != 0, initial=HI) >= LO):
        raise JetUnsupported("a constant outside the range a jet multiplies exactly")


def _shapes(*shapes: tuple) -> tuple:
    """The broadcast shape (the common case of equal shapes without numpy's machinery)."""
    first = tuple(shapes[0])
    if all(tuple(s) == first for s in shapes[1:]):
        return first
    return np.broadcast_shapes(*shapes)


def _lift(j: Jet, shape: tuple) -> Jet:
    """``j`` broadcast to ``shape`` (a view)."""
    shape = tuple(shape)
    if j.shape == shape:
        return j
    k = j.c.shape[0]
    at = (k,) + (1,) * (len(shape) - j.ndim) + j.shape
    return Jet.view(np.broadcast_to(j.c.reshape(at), (k,) + shape),
                    np.broadcast_to(j.e.reshape(at), (k,) + shape),
                    np.broadcast_to(j.cut, shape), np.broadcast_to(j.still, shape), j.basis,
                    j._top, j.clean)


def _rows(a: Jet, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``a``'s coefficients and bounds extended with zero rows to ``n`` monomials."""
    k = a.c.shape[0]
    if k >= n:
        return a.c, a.e
    pad = np.zeros((n - k,) + a.c.shape[1:])
    return np.concatenate([a.c, pad]), np.concatenate([a.e, pad])


def _basis_of(*xs) -> Basis:
    bases = {x.basis for x in xs if isinstance(x, Jet)}
    if len(bases) != 1:
        raise JetUnsupported("jets along different rays in one operation")
    return bases.pop()


def _as_jet(x, basis_: Basis) -> Jet:
    return x if isinstance(x, Jet) else Jet.constant(x, basis_)


# ----- elementwise arithmetic -----

def _add(a, b) -> Jet:
    if not isinstance(a, Jet):
        a, b = b, a
    if not isinstance(b, Jet):  # a constant moves the value only
        b = _float(b)
        a = _lift(a, _shapes(a.shape, b.shape))
        s, err = _two_sum(a.c[0], b)
        c, e = np.array(a.c), np.array(a.e)
        c[0], e[0] = s, _up(a.e[0] + np.abs(err), 2)
        return Jet(c, e, np.array(a.cut), np.array(a.still), a.basis)
    basis_ = _basis_of(a, b)
    shape = _shapes(a.shape, b.shape)
    a, b = _lift(a, shape), _lift(b, shape)
    n = max(a.c.shape[0], b.c.shape[0])
    (ac, ae), (bc, be) = _rows(a, n), _rows(b, n)
    s, err = _two_sum(ac, bc)
    return Jet(s, _up(ae + be + np.abs(err), 3), a.cut | b.cut, a.still & b.still, basis_)


def _neg(a) -> Jet:
    if not isinstance(a, Jet):
        return -_float(a)
    return Jet.view(-a.c, a.e, a.cut, a.still, a.basis, a._top, a.clean)


@_QUIET
def _scale(a: Jet, k) -> Jet:
    """``a * k`` for a constant ``k``: each coefficient's product with its exact error."""
    k = _const(k)
    a = _lift(_factor(a), _shapes(a.shape, k.shape))
    p, err = _two_prod(a.c, k)
    e = np.abs(err) if not a.e.any() else _up(_finite(a.e) * np.abs(k) + np.abs(err), 3)
    return Jet.checked(p, e, np.array(a.cut), np.array(a.still), a.basis)


def _dropped_any(a: Jet, b: Jet, dropped: list) -> np.ndarray:
    """Per entry, whether some dropped product of monomials has both factors live."""
    hit = np.zeros(_shapes(a.shape, b.shape), bool)
    if dropped:
        la, lb = a.live(), b.live()
        for i, j in dropped:
            hit |= la[i] & lb[j]
    return hit


@_QUIET
def _product(a: Jet, b: Jet) -> Jet:
    """The Cauchy product, entry by entry: each term's exact rounding error (TwoProduct),
    the sum's (TwoSum), and the operands' bounds ``|a| e_b + e_a |b| + e_a e_b``."""
    basis_ = _basis_of(a, b)
    shape = _shapes(a.shape, b.shape)
    a, b = _lift(_factor(a), shape), _lift(_factor(b), shape)
    kept, dropped = basis_.pairs(a.c.shape[0] - 1, b.c.shape[0] - 1)
    c = np.zeros((max(kept, default=0) + 1,) + shape)
    e = np.zeros_like(c)
    bounded = a.e.any() or b.e.any()
    ea, eb = _finite(a.e), _finite(b.e)
    for k, terms in kept.items():
        s = err_sum = prop = None
        for i, j in terms:
            p, err = _two_prod(a.c[i], b.c[j])
            if s is None:
                s, err_sum = p, np.abs(err)
            else:
                s, serr = _two_sum(s, p)
                err_sum = err_sum + np.abs(err) + np.abs(serr)
            if bounded:
                t = np.abs(a.c[i]) * eb[j] + ea[i] * (np.abs(b.c[j]) + eb[j])
                prop = t if prop is None else prop + t
        c[k] = s
        e[k] = _up(err_sum if prop is None else err_sum + prop, 6 * len(terms))
    cut = a.cut | b.cut | _dropped_any(a, b, dropped)
    return Jet.checked(c, e, cut, a.still & b.still, basis_)


@_QUIET
def _divide(a, b) -> Jet:
    """``a / k`` for a constant ``k``: the quotient's exact remainder bounds its error."""
    if isinstance(b, Jet):
        if b.top() > 0 or b.e.any():
            raise JetUnsupported("division by a series (its reciprocal is not a polynomial)")
        b = b.c[0]  # a constant carried as a jet
    if not isinstance(a, Jet):
        raise JetUnsupported("a constant divided by a series")
    k = _const(b)
    if not np.all(k != 0):
        raise JetUnsupported("division by 0")
    a = _lift(_factor(a), _shapes(a.shape, k.shape))
    q = a.c / k
    p, perr = _two_prod(q, k)
    r = (a.c - p) - perr  # a - q k, exactly
    e = _up(np.abs(r) / np.abs(k) + _finite(a.e) / np.abs(k), 4)
    return Jet.checked(q, e, np.array(a.cut), np.array(a.still), a.basis)


def _power(a: Jet, n) -> Jet:
    if isinstance(n, Jet) or np.ndim(n) or float(n) != int(n) or int(n) < 0:
        raise JetUnsupported(f"a power {n!r} other than a constant integer >= 0")
    n = int(n)
    if n == 0:
        return Jet.constant(np.ones(a.shape), a.basis)
    out = a
    for _ in range(n - 1):
        out = _product(out, a)
    return out


# ----- comparisons and selection -----

def jet_sign(d: Jet) -> tuple[np.ndarray, np.ndarray]:
    """``(sign, sure)`` of the series ``d`` per entry: the sign of its first coefficient not
    proven 0, where the bound proves it (``sure``); 0 where every coefficient is proven 0 and
    nothing was cut. On a nested ray a cut entry is never sure (the dropped term may come
    first)."""
    c, e = d.c, d.e
    pos, neg = c > e, c < -e
    codes = pos.view(np.int8) - neg.view(np.int8)  # per monomial: 1, -1 proven; 0 zero
    codes[~(pos | neg) & ((c != 0) | (e != 0))] = 2  # live, sign unproven
    rows = codes.reshape(codes.shape[0], -1)
    first = np.argmax(rows != 0, axis=0)  # the first monomial not proven 0 decides
    code = rows[first, np.arange(rows.shape[1])].reshape(d.shape)
    sure = code != 2
    sure &= (code != 0) | ~d.cut
    if d.basis.levels > 1:
        sure &= ~d.cut
    return np.where(sure, code, 0).astype(np.int8), sure


_TESTS = {np.greater: lambda s: s > 0, np.greater_equal: lambda s: s >= 0,
          np.less: lambda s: s < 0, np.less_equal: lambda s: s <= 0,
          np.equal: lambda s: s == 0, np.not_equal: lambda s: s != 0}


def _compare(ufunc, a, b) -> JetMask:
    basis_ = _basis_of(a, b)
    zero = not isinstance(b, Jet) and not np.any(b)  # a constant 0: the difference is a
    d = _as_jet(a, basis_) if zero else _add(_as_jet(a, basis_), _neg(b))
    sign, sure = jet_sign(d)
    # decided by a coefficient along this ray: every further direction is infinitesimal
    # beside it, so the answer holds along all of them
    return JetMask(_TESTS[ufunc](sign), sure, (sign != 0) | d.still)


def _where(cond, a, b) -> Jet:
    cond = _as_mask(cond)
    basis_ = _basis_of(a, b)
    shape = _shapes(cond.shape, np.shape(a), np.shape(b))
    n = max(x.c.shape[0] if isinstance(x, Jet) else 1 for x in (a, b))
    (ac, ae, acut, astill), (bc, be, bcut, bstill) = _side(a, n, shape), _side(b, n, shape)
    c = np.where(cond.value, ac, bc)
    e = np.where(cond.value, ae, be)
    if not cond.sure.all():  # either side may be the one the ray enters
        c = np.where(cond.sure, c, 0.0)
        e = np.where(cond.sure, e, np.inf)
    cut = np.where(cond.value, acut, bcut) | ~cond.sure
    still = cond.still & np.where(cond.value, astill, bstill)
    full = (n,) + shape
    if c.shape != full or e.shape != full:
        c, e = np.broadcast_to(c, full), np.broadcast_to(e, full)
    if np.shape(cut) != shape or np.shape(still) != shape:
        cut, still = np.broadcast_to(cut, shape), np.broadcast_to(still, shape)
    return Jet(c, e, cut, still, basis_)


def _side(x, n: int, shape: tuple) -> tuple:
    """A side of `_where`: coefficients and bounds (``n`` monomials, the entries' axes
    padded on the left to broadcast against ``shape``) and flags; a constant needs no jet."""
    if isinstance(x, Jet):
        c, e = _rows(x, n)
        at = (n,) + (1,) * (len(shape) - x.ndim) + x.shape
        return c.reshape(at), e.reshape(at), x.cut, x.still
    x = _float(x)
    c = np.zeros((n,) + (1,) * (len(shape) - x.ndim) + x.shape)
    c[0] = x
    return c, np.zeros(()), False, True


def _maximum(a, b, ge=np.greater_equal) -> Jet:
    """``a if a >= b else b`` (numpy's maximum on objects), lexicographically."""
    return _where(_compare(ge, a, b), a, b)


# ----- rearrangements -----

def _reshape(a: Jet, shape) -> Jet:
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    full = np.empty(a.shape, bool).reshape(shape).shape
    k = a.c.shape[0]
    return Jet.view(a.c.reshape((k,) + full), a.e.reshape((k,) + full), a.cut.reshape(full),
                    a.still.reshape(full), a.basis, a._top, a.clean)


def _transpose(a: Jet, axes=None) -> Jet:
    axes = tuple(range(a.ndim))[::-1] if axes is None else tuple(int(x) % max(a.ndim, 1)
                                                                  for x in axes)
    shifted = (0,) + tuple(x + 1 for x in axes)
    return Jet.view(a.c.transpose(shifted), a.e.transpose(shifted), a.cut.transpose(axes),
                    a.still.transpose(axes), a.basis, a._top, a.clean)


def _swapaxes(a: Jet, x, y) -> Jet:
    axes = list(range(a.ndim))
    axes[x], axes[y] = axes[y], axes[x]
    return _transpose(a, axes)


def _moveaxis(a: Jet, source, destination) -> Jet:
    src = [int(x) % a.ndim for x in np.atleast_1d(source)]
    dst = [int(x) % a.ndim for x in np.atleast_1d(destination)]
    axes = [x for x in range(a.ndim) if x not in src]
    for d, x in sorted(zip(dst, src, strict=True)):
        axes.insert(d, x)
    return _transpose(a, axes)


def _squeeze(a: Jet, axis=None) -> Jet:
    return _reshape(a, np.squeeze(np.empty(a.shape, bool), axis=axis).shape)


def _expand_dims(a: Jet, axis) -> Jet:
    return _reshape(a, np.expand_dims(np.empty(a.shape, bool), axis).shape)


def _broadcast_to(a: Jet, shape, subok=False) -> Jet:
    return _lift(a, (int(shape),) if np.ndim(shape) == 0 else tuple(shape))


def _flip(a: Jet, axis=None) -> Jet:
    axes = _axes(axis, a.ndim)
    return a[tuple(slice(None, None, -1) if x in axes else slice(None) for x in range(a.ndim))]


def _take(a: Jet, indices, axis=None, **kwargs) -> Jet:
    if kwargs or isinstance(indices, Jet):
        raise JetUnsupported("np.take with out=/mode=")
    if axis is None:
        return _reshape(a, -1)[np.asarray(indices)]
    return a[(slice(None),) * (int(axis) % a.ndim) + (np.asarray(indices),)]


def _take_along_axis(a: Jet, indices, axis) -> Jet:
    if isinstance(indices, Jet):
        raise JetUnsupported("np.take_along_axis at series positions")
    return _reshape(a, -1)[np.take_along_axis(np.arange(a.size).reshape(a.shape), indices,
                                              axis)]


def _concatenate(xs, axis=0) -> Jet:
    basis_ = _basis_of(*xs)
    js = [_as_jet(x, basis_) for x in xs]
    if axis is None:
        js, axis = [_reshape(j, -1) for j in js], 0
    ax = int(axis) % js[0].ndim
    rows = [_rows(j, max(j.c.shape[0] for j in js)) for j in js]
    return Jet.view(np.concatenate([c for c, _ in rows], axis=ax + 1),
                    np.concatenate([e for _, e in rows], axis=ax + 1),
                    np.concatenate([j.cut for j in js], axis=ax),
                    np.concatenate([j.still for j in js], axis=ax), basis_,
                    clean=all(j.clean for j in js))


def _stack(xs, axis=0) -> Jet:
    basis_ = _basis_of(*xs)
    js = [_as_jet(x, basis_) for x in xs]
    ax = int(axis) % (js[0].ndim + 1)
    rows = [_rows(j, max(j.c.shape[0] for j in js)) for j in js]
    return Jet.view(np.stack([c for c, _ in rows], axis=ax + 1),
                    np.stack([e for _, e in rows], axis=ax + 1),
                    np.stack([j.cut for j in js], axis=ax),
                    np.stack([j.still for j in js], axis=ax), basis_,
                    clean=all(j.clean for j in js))


def _pad(a: Jet, pad_width, mode="constant", **kwargs) -> Jet:
    value = kwargs.pop("constant_values", 0)
    if mode != "constant" or kwargs or np.ndim(value):
        raise JetUnsupported(f"np.pad with mode={mode!r} or per-axis constants")
    width = np.broadcast_to(np.asarray(pad_width, dtype=int), (a.ndim, 2)).tolist()
    c = np.pad(a.c, [(0, 0)] + width)
    if value:
        c[0] = np.pad(a.c[0], width, constant_values=value)
    return Jet(c, np.pad(a.e, [(0, 0)] + width), np.pad(a.cut, width),
               np.pad(a.still, width, constant_values=True), a.basis)


def _astype(a: Jet, dtype) -> Jet:
    if np.dtype(dtype).kind != "f":
        raise JetUnsupported(f"a cast of a series to {np.dtype(dtype)}")
    return a  # as on exact series, a cast keeps the series


def _sliding_window_view(a: Jet, window_shape, axis=None, **kwargs) -> Jet:
    from numpy.lib.stride_tricks import sliding_window_view as view

    window = (window_shape,) if np.ndim(window_shape) == 0 else tuple(window_shape)
    axes = tuple(range(a.ndim)) if axis is None else tuple(
        int(x) % a.ndim for x in np.atleast_1d(axis))
    shifted = tuple(x + 1 for x in axes)
    return Jet.view(view(a.c, window, axis=shifted), view(a.e, window, axis=shifted),
                    view(a.cut, window, axis=axes), view(a.still, window, axis=axes),
                    a.basis, a._top, a.clean)


# ----- reductions -----

def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(int(x) % ndim for x in np.atleast_1d(axis)))


def _sum(a: Jet, axis=None, keepdims=False, dtype=None, out=None) -> Jet:
    if out is not None or (dtype is not None and np.dtype(dtype).kind != "f"):
        raise JetUnsupported("sum with out= or a discrete dtype")
    axes = _axes(axis, a.ndim)
    shifted = tuple(x + 1 for x in axes)
    n = math.prod(a.shape[x] for x in axes)
    c = a.c.sum(axis=shifted, keepdims=keepdims)
    mag = np.abs(a.c).sum(axis=shifted, keepdims=keepdims)
    rnd = gamma(n) * mag
    if a.basis.precise:
        weights, offset = _grid_weights(a.c)
        rnd = np.where(_exact_where(weights.sum(axis=shifted, keepdims=keepdims), offset, mag),
                       0.0, rnd)
    e = _up(a.e.sum(axis=shifted, keepdims=keepdims) + rnd, n + 2)  # inf stays inf
    return Jet(c, e, a.cut.any(axis=axes, keepdims=keepdims),
               a.still.all(axis=axes, keepdims=keepdims), a.basis)


def _cumsum(a: Jet, axis=None, dtype=None, out=None, include_initial=False) -> Jet:
    """Running sums along ``axis``: each a sum of at most the axis' length of terms."""
    if out is not None or include_initial or (dtype is not None and
                                              np.dtype(dtype).kind != "f"):
        raise JetUnsupported("cumsum with out=, include_initial= or a discrete dtype")
    if axis is None:
        a, axis = _reshape(a, -1), 0
    ax = int(axis) % a.ndim
    n = a.shape[ax]
    c = np.cumsum(a.c, axis=ax + 1)
    mag = np.cumsum(np.abs(a.c), axis=ax + 1)
    rnd = gamma(n) * mag
    if a.basis.precise:
        weights, offset = _grid_weights(a.c)
        rnd = np.where(_exact_where(np.cumsum(weights, axis=ax + 1), offset, mag), 0.0, rnd)
    e = _up(np.cumsum(a.e, axis=ax + 1) + rnd, n + 2)
    return Jet(c, e, np.logical_or.accumulate(a.cut, axis=ax),
               np.logical_and.accumulate(a.still, axis=ax), a.basis)


def _mean(a: Jet, axis=None, keepdims=False, dtype=None, out=None) -> Jet:
    n = math.prod(a.shape[x] for x in _axes(axis, a.ndim))
    return _divide(_sum(a, axis, keepdims, dtype, out), float(n))


def _extreme(a: Jet, axis, keepdims, ge, out=None) -> Jet:
    """max (``ge`` is ``>=``) or min over axes: pairwise selections, halving the axis."""
    if out is not None:
        raise JetUnsupported("max/min with out=")
    axes = _axes(axis, a.ndim)
    keep = tuple(x for x in range(a.ndim) if x not in axes)
    rows = _reshape(_transpose(a, keep + axes), tuple(a.shape[x] for x in keep) + (-1,))
    n = rows.shape[-1]
    if n == 0:
        raise JetUnsupported("max of an empty axis")
    while n > 1:
        h = n // 2
        top = _maximum(rows[..., :h], rows[..., h:2 * h], ge)
        rows = _concatenate([top, rows[..., 2 * h:]], -1) if n % 2 else top
        n = rows.shape[-1]
    res = rows[..., 0]
    if keepdims:
        res = _reshape(res, tuple(1 if x in axes else a.shape[x] for x in range(a.ndim)))
    return res


# ----- contractions -----

def _parse(subscripts: str, shapes: list[tuple]) -> tuple[list[str], str]:
    """Explicit einsum subscripts without ellipses: ``(inputs, output)``."""
    spec = subscripts.replace(" ", "")
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise JetUnsupported("einsum operands and subscripts disagree")
    spare = [ch for ch in string.ascii_letters if ch not in spec]
    n_ell = max((len(s) - len(i.replace("...", "")) for i, s in zip(ins, shapes, strict=True)
                 if "..." in i), default=0)
    ell = "".join(spare[:n_ell])
    full = []
    for i, s in zip(ins, shapes, strict=True):
        if "..." in i:
            k = len(s) - len(i.replace("...", ""))
            i = i.replace("...", ell[n_ell - k:])
        full.append(i)
    if not arrow:
        letters = "".join(full)
        out = ("..." if n_ell else "") + "".join(sorted(ch for ch in set(letters) - set(ell)
                                                        if letters.count(ch) == 1))
    return full, out.replace("...", ell)


_PATHS: dict = {}
"""einsum contraction orders by subscripts and shapes: finding one costs more than running
a small contraction."""


def _cached_einsum(spec: str, args: list) -> np.ndarray:
    """``np.einsum``: small two-operand contractions directly (finding a contraction order
    costs more than running them), others in the order numpy finds, remembered."""
    key = (spec, *(np.shape(a) for a in args))
    path = _PATHS.get(key)
    if path is None:
        sizes = {ch: n for sub, a in zip(spec.split("->")[0].split(","), args, strict=True)
                 for ch, n in zip(sub, np.shape(a), strict=True)}
        small = len(args) == 2 and math.prod(sizes.values()) <= 2 ** 18
        path = _PATHS[key] = False if small else np.einsum_path(spec, *args,
                                                                 optimize="greedy")[0]
    if path is False:  # numpy's direct loop is several times faster on contiguous operands
        return np.einsum(spec, *(np.asarray(a, order="C") for a in args))
    return np.einsum(spec, *args, optimize=path)


_LAYOUTS: dict = {}
"""Parsed contractions by subscripts, shapes and jet positions (see `_layout`)."""


def _layout(subscripts: str, shapes: tuple, jets: list) -> tuple:
    """``(inputs, output, terms per output entry, output shape, einsum spec with a monomial
    axis on each jet)`` of a contraction."""
    ins, out = _parse(subscripts, list(shapes))
    sizes: dict[str, int] = {}
    for spec, shape in zip(ins, shapes, strict=True):
        for ch, n in zip(spec, shape, strict=True):
            sizes[ch] = max(sizes.get(ch, 1), n)
    terms = math.prod(n for ch, n in sizes.items() if ch not in out)
    spare = [ch for ch in string.ascii_letters if ch not in sizes]
    tags = {i: spare[n] for n, i in enumerate(jets)}
    spec = ",".join(tags.get(i, "") + s for i, s in enumerate(ins)) + "->" + (
        "".join(tags.values()) + out)
    return ins, out, terms, tuple(sizes[ch] for ch in out), spec


class _Contraction:
    """One einsum with jet operands ``jets`` (positions) and constants, in explicit form."""

    def __init__(self, subscripts: str, operands: tuple):
        shapes = tuple(np.shape(o) for o in operands)
        self.jets = [i for i, o in enumerate(operands) if isinstance(o, Jet)]
        if not self.jets or len(self.jets) > 2:
            raise JetUnsupported("einsum of more than two series")
        key = (subscripts, shapes, tuple(self.jets))
        if key not in _LAYOUTS:
            _LAYOUTS[key] = _layout(subscripts, shapes, self.jets)
        self.ins, self.out, self.terms, self.shape, self.spec = _LAYOUTS[key]
        self.consts = {i: _float(o) for i, o in enumerate(operands) if i not in self.jets}
        self.absolute = {i: np.abs(k) for i, k in self.consts.items()}
        for a in self.absolute.values():
            _in_range(a)

    def run(self, parts: list, consts: dict | None = None) -> np.ndarray:
        """The contraction with the jets' places taken by coefficient stacks ``parts`` (a
        leading monomial axis each) and the constants by ``consts`` (position -> array;
        the operands' own by default)."""
        consts = self.consts if consts is None else consts
        args = [parts[self.jets.index(i)] if i in self.jets else consts[i]
                for i in range(len(self.ins))]
        return _cached_einsum(self.spec, args)

    def plain(self, flags: list, consts: dict) -> np.ndarray:
        """The contraction of arrays over the entries only (no monomial axis)."""
        args = [flags[self.jets.index(i)] if i in self.jets else consts[i]
                for i in range(len(self.ins))]
        return _cached_einsum(",".join(self.ins) + "->" + self.out, args)

    def consts_as(self, fn) -> dict:
        """The constants mapped by ``fn``."""
        return {i: fn(k) for i, k in self.consts.items()}


@_QUIET
def _einsum(subscripts, *operands, **kwargs) -> Jet:
    """``np.einsum`` with one or two jet operands: coefficient by coefficient (a Cauchy
    product for two), bounded by ``γ_n Σ|terms|`` where the float result may be rounded."""
    if not isinstance(subscripts, str) or set(kwargs) - {"optimize"}:
        raise JetUnsupported("einsum in the interleaved form or with out=/dtype=")
    con = _Contraction(subscripts, operands)
    js = [_factor(operands[i]) for i in con.jets]
    basis_ = _basis_of(*js)
    tops = [j.top() for j in js]
    cut = con.plain([j.cut.astype(float) for j in js], con.consts_as(np.ones_like)) > 0 if any(
        j.cut.any() for j in js) else np.zeros(con.shape, bool)
    if min(tops) < 0:  # a zero factor: the contraction is 0 along this ray, but it is
        # still only where every term is (the factor's 0 may be a tie that moves further on)
        zero = np.zeros((1,) + con.shape)
        return Jet(zero, zero.copy(), cut, _still_contraction(con, js), basis_)
    cs = [j.c[:t + 1] for j, t in zip(js, tops, strict=True)]
    mags = [np.abs(x) for x in cs]
    absolute = con.absolute
    full, mag = con.run(cs), con.run(mags, absolute)
    prop = None
    if any(j.e[:t + 1].any() for j, t in zip(js, tops, strict=True)):
        es = [_finite(j.e[:t + 1]) for j, t in zip(js, tops, strict=True)]
        prop = (con.run(es, absolute) if len(js) == 1 else
                con.run([es[0], mags[1] + es[1]], absolute) + con.run([mags[0], es[1]],
                                                                       absolute))
    if len(js) == 1:
        kept, dropped = {k: [(k,)] for k in range(tops[0] + 1)}, []
    else:
        kept, dropped = basis_.pairs(*tops)
    c = np.zeros((max(kept) + 1,) + con.shape)
    e = np.zeros_like(c)
    grids = _contraction_grids(con, cs) if basis_.precise and len(con.ins) == 2 else None
    for k, idxs in kept.items():
        ck, mk = full[idxs[0]], mag[idxs[0]]
        for idx in idxs[1:]:
            ck, mk = ck + full[idx], mk + mag[idx]
        n = con.terms * len(idxs) + len(con.ins)
        rnd = gamma(n) * mk
        if grids is not None:  # 0 where the float sum is exact
            weights, offset = grids
            rnd = np.where(_exact_where(sum(weights[idx] for idx in idxs), offset, mk), 0.0,
                           rnd)
        pk = 0.0 if prop is None else sum(prop[idx] for idx in idxs)
        c[k] = ck
        e[k] = _up(pk + rnd, n + len(idxs) + 2)
    for idx in dropped:  # a product past the order: cut where it is not 0
        cut = cut | (mag[idx] + (0.0 if prop is None else prop[idx]) > 0)
    return Jet.checked(c, e, cut, _still_contraction(con, js), basis_)


def _contraction_grids(con: _Contraction, cs: list) -> tuple[np.ndarray, float]:
    """The contraction of the operands' grid weights (`_grid_weights`), per monomial (pair)
    and output entry, with its offset: where the float contraction is exact."""
    parts, offset = [], 0.0
    for x in cs:
        w, off = _grid_weights(x)
        parts.append(w)
        offset += off
    consts = {}
    for i, x in con.consts.items():
        consts[i], off = _grid_weights(x)
        offset += off
    return con.run(parts, consts), offset


def _still_contraction(con: _Contraction, js: list) -> np.ndarray:
    """Per output entry, whether every term it sums is still along every nested ray: a term
    is still where one of its factors is a still 0 (a dead unit, a constant 0), or where all
    its factors are still. The terms that are not are counted by two contractions of
    indicators: those with no still-zero factor, less those whose factors are all still and
    nonzero. (A factor that is 0 along this ray but not still, a tie that moves along a later
    direction, does not make its terms still.)"""
    if all(j.still.all() for j in js):
        return np.ones(con.shape, bool)
    zero = [j.still & ~(j.c.any(axis=0) | j.e.any(axis=0)) for j in js]
    nonzero = con.consts_as(lambda k: (k != 0).astype(float))
    free = con.plain([(~z).astype(float) for z in zero], nonzero)
    held = con.plain([(j.still & ~z).astype(float) for j, z in zip(js, zero, strict=True)],
                     nonzero)
    return free - held < 0.5


def _matmul(a, b) -> Jet:
    na, nb = np.ndim(a), np.ndim(b)
    if not na or not nb:
        raise JetUnsupported("matmul of a scalar")
    if na == 1 and nb == 1:
        return _einsum("i,i->", a, b)
    if na == 1:
        return _einsum("k,...kj->...j", a, b)
    if nb == 1:
        return _einsum("...ik,k->...i", a, b)
    return _einsum("...ik,...kj->...ij", a, b)


def _dot(a, b) -> Jet:
    na, nb = np.ndim(a), np.ndim(b)
    if not na or not nb:
        return np.multiply(a, b)
    if nb == 1:
        return _einsum("...k,k->...", a, b)
    sa, sb = "abcdefghij"[:na - 1], "lmnopqrstu"[:nb - 2]
    return _einsum(f"{sa}k,{sb}ky->{sa}{sb}y", a, b)


def _tensordot(a, b, axes=2) -> Jet:
    na, nb = np.ndim(a), np.ndim(b)
    if isinstance(axes, int | np.integer):
        ax_a, ax_b = list(range(na - axes, na)), list(range(axes))
    else:
        ax_a, ax_b = (list(np.atleast_1d(x)) for x in axes)
    ax_a, ax_b = [int(x) % na for x in ax_a], [int(x) % nb for x in ax_b]
    la, lb = list(string.ascii_lowercase[:na]), list(string.ascii_uppercase[:nb])
    for x, y in zip(ax_a, ax_b, strict=True):
        lb[y] = la[x]
    out = [la[x] for x in range(na) if x not in ax_a] + [lb[y] for y in range(nb)
                                                         if y not in ax_b]
    return _einsum("".join(la) + "," + "".join(lb) + "->" + "".join(out), a, b)


# ----- dispatch: numpy's protocols -----

def _ufunc(ufunc, method, inputs, kwargs):
    if kwargs.get("out") is not None or set(kwargs) - {"out", "dtype", "casting"}:
        raise JetUnsupported(f"np.{ufunc.__name__} with {sorted(kwargs)}")
    if method == "reduce":
        axis = kwargs.get("axis", 0) if len(inputs) < 2 else inputs[1]
        if ufunc is np.add:
            return _sum(inputs[0], axis)
        if ufunc in (np.maximum, np.minimum):
            return _extreme(inputs[0], axis, False, np.greater_equal if ufunc is np.maximum
                            else np.less_equal)
    if method != "__call__" or any(isinstance(x, JetMask) for x in inputs):
        raise JetUnsupported(f"np.{ufunc.__name__}.{method} on series")
    handler = _UFUNCS.get(ufunc)
    if handler is None:
        raise JetUnsupported(f"np.{ufunc.__name__} on a series (not piecewise polynomial)")
    return handler(*inputs)


def _multiply(a, b) -> Jet:
    if isinstance(a, Jet) and isinstance(b, Jet):
        return _product(a, b)
    return _scale(a, b) if isinstance(a, Jet) else _scale(b, a)


def _raise(a, n) -> Jet:
    if not isinstance(a, Jet):
        raise JetUnsupported("a power with a series exponent")
    return _power(a, n)


_UFUNCS = {
    np.add: _add,
    np.subtract: lambda a, b: _add(a, _neg(b)),
    np.multiply: _multiply,
    np.true_divide: _divide,
    np.maximum: _maximum,
    np.minimum: lambda a, b: _maximum(a, b, np.less_equal),
    np.matmul: _matmul,
    np.power: _raise,
    np.negative: _neg,
    np.positive: lambda a: a,
    np.absolute: lambda a: _where(_compare(np.greater_equal, a, 0.0), a, _neg(a)),
    np.square: lambda a: _product(a, a),
    **{u: functools.partial(_compare, u) for u in _TESTS},
}


def _function(func, args, kwargs):
    handler = _FUNCTIONS.get(func)
    if handler is None:
        raise JetUnsupported(f"np.{getattr(func, '__name__', func)} on a series")
    return handler(*args, **kwargs)


def _where3(cond, x=None, y=None):
    if x is None or y is None:
        raise JetUnsupported("np.where with one argument")
    return _where(cond, x, y)


def _clip(a, a_min=None, a_max=None, **kwargs):
    if kwargs:
        raise JetUnsupported("np.clip with out=")
    if a_min is not None:
        a = _maximum(a, a_min)
    if a_max is not None:
        a = _maximum(a, a_max, np.less_equal)
    return a


def _sure(mask: JetMask, what: str) -> np.ndarray:
    """A comparison's answer as a plain bool array, where the bounds prove every entry."""
    if not mask.sure.all():
        raise JetUnsupported(f"{what}: a comparison the bounds cannot settle")
    return mask.value


def _isin(element, test_elements, **kwargs):
    """Which entries equal (as series along the ray) one of the constants."""
    if kwargs or isinstance(test_elements, Jet):
        raise JetUnsupported("np.isin with options or series to look for")
    hit = np.zeros(np.shape(element), bool)
    for b in np.ravel(_float(test_elements)):
        hit |= _sure(_compare(np.equal, element, b), "np.isin")
    return hit


def _searchsorted(a, v, side="left", sorter=None):
    """Positions of the series ``v`` among the sorted constants ``a``: how many lie below
    (``side='left'``) or at or below (``'right'``) each entry, along the ray."""
    if sorter is not None or isinstance(a, Jet) or np.ndim(a) != 1:
        raise JetUnsupported("np.searchsorted of series, or with a sorter")
    ufunc = np.greater if side == "left" else np.greater_equal
    at = np.zeros(np.shape(v), np.intp)
    for b in _float(a):
        at += _sure(_compare(ufunc, v, b), "np.searchsorted")
    return at


def _select(condlist, choicelist, default=0):
    """The first choice whose condition holds (conditions plain bool arrays)."""
    out = default
    for cond, choice in zip(condlist[::-1], choicelist[::-1], strict=True):
        out = _where(cond, choice, out)
    return out


def _result_type(*args):
    return np.result_type(*(np.float64 if isinstance(a, Jet) else bool
                            if isinstance(a, JetMask) else a for a in args))


def _zeros_like(a, dtype=None, **kwargs):
    return np.zeros(np.shape(a), dtype=dtype or np.float64)


def _ones_like(a, dtype=None, **kwargs):
    return np.ones(np.shape(a), dtype=dtype or np.float64)


def _window_view_function():
    from numpy.lib.stride_tricks import sliding_window_view

    return sliding_window_view


_FUNCTIONS = {
    np.sum: lambda a, axis=None, dtype=None, out=None, keepdims=False, **kw: _sum(
        a, axis, keepdims, dtype, out),
    np.mean: lambda a, axis=None, dtype=None, out=None, keepdims=False, **kw: _mean(
        a, axis, keepdims, dtype, out),
    np.max: lambda a, axis=None, out=None, keepdims=False, **kw: _extreme(
        a, axis, keepdims, np.greater_equal, out),
    np.min: lambda a, axis=None, out=None, keepdims=False, **kw: _extreme(
        a, axis, keepdims, np.less_equal, out),
    np.reshape: lambda a, shape=None, order="C", **kw: a.reshape(
        kw.get("newshape", shape), order=order),
    np.transpose: lambda a, axes=None: _transpose(a, axes),
    np.swapaxes: _swapaxes,
    np.moveaxis: _moveaxis,
    np.broadcast_to: _broadcast_to,
    np.squeeze: lambda a, axis=None: _squeeze(a, axis),
    np.expand_dims: _expand_dims,
    np.ravel: lambda a, order="C": a.ravel(order),
    np.concatenate: lambda arrays, axis=0, **kw: _concatenate(arrays, axis),
    np.stack: lambda arrays, axis=0, **kw: _stack(arrays, axis),
    np.pad: _pad,
    np.where: _where3,
    np.einsum: _einsum,
    np.dot: _dot,
    np.tensordot: _tensordot,
    np.clip: _clip,
    np.flip: _flip,
    np.take: _take,
    np.take_along_axis: _take_along_axis,
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    np.astype: lambda a, dtype, copy=True, **kw: _astype(a, dtype),
    np.zeros_like: _zeros_like,
    np.ones_like: _ones_like,
    np.copy: lambda a, **kw: a,
    np.isin: _isin,
    np.cumsum: _cumsum,
    np.searchsorted: _searchsorted,
    np.select: _select,
    np.result_type: _result_type,
    _window_view_function(): _sliding_window_view,
}
for _alias, _target in (("amax", np.max), ("amin", np.min), ("permute_dims", np.transpose),
                        ("concat", np.concatenate), ("cumulative_sum", np.cumsum)):
    if getattr(np, _alias, None) is not None and getattr(np, _alias) not in _FUNCTIONS:
        _FUNCTIONS[getattr(np, _alias)] = _FUNCTIONS[_target]
