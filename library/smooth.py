"""Smooth primitives: arithmetic, elementwise functions, softmax family, reductions, structure,
contraction.

Smooth rules have no branch to choose, so they never ask for a tangent; what they must get right
is the value (numerically stable where numpy's naive formula is not: softplus, logsumexp,
log_softmax, sigmoid), the dtype (float32 stays float32: constants are Python floats), and a
structured linear map that accepts a leading batch axis. Rules compute value and derivative
jointly where it pays: exp, tanh, sigmoid, softplus and sqrt differentiate from their answer,
the softmax family from its normalized exponentials.

Non-Lipschitz points (sqrt, cbrt and real powers below 1 at 0, arcsin at +-1) raise
`NotLipschitzError` naming the node; NaN and infinities (log of a negative) are reported by
the engine as `NonFiniteError` naming the first node that produced them.

>>> import numpy as np, asd
>>> x = np.array([0.0, 1.0])
>>> asd.subgrad(lambda x: asd.logsumexp(x))(x).round(4)
array([0.2689, 0.7311])

Array libraries: the rules a network needs (arithmetic, the elementwise functions with an
array API name, reductions, structure, matmul, the softmax family) are written against the
array API (``xp = namespace(x)``; numpy values keep numpy's own calls) and declared
``array_api=True``, so they run on torch and JAX arrays as given (prod, cumsum and constant
padding too; exp2 and reciprocal through the library's own function). The others (cbrt,
real and traced powers, einsum, astype) run on numpy only so far.
"""

from __future__ import annotations

import contextlib
import math
import operator
import string
from fractions import Fraction

import numpy as np

from asd.errors import NotLipschitzError, ShapeError, UnsupportedError
from asd.extend import (
    Diagonal,
    FanIn,
    Index,
    LinearMap,
    MatMul,
    Primitive,
    Reroute,
    Reshape,
    Sum,
    Transpose,
    Zero,
    deflinear,
    defsmooth,
    device,
    from_host,
    identity,
    index_array,
    is_host,
    is_traced,
    namespace,
    numpy_dtype,
    operation_of,
    refuse_where,
    register_method,
    register_numpy,
    register_reduce,
    root_limit,
    set_at,
    to_host,
    unsupported,
)


def shape_of(x) -> tuple:
    return tuple(np.shape(x))


def _axes(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple) as sorted nonnegative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        axis = (axis,)
    out = []
    for a in axis:
        if not -ndim <= int(a) < max(ndim, 1):
            raise ShapeError(f"axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(int(a) % max(ndim, 1))
    return tuple(sorted(out))


def _nb(t, shape) -> int:
    """Number of leading batch axes of a tangent (0 or 1)."""
    return np.ndim(t) - len(shape)


def _binary(np_fn, op):
    """numpy's ufunc on numpy values, the operator (the array API's) on other libraries'."""
    def fn(a, b):
        return np_fn(a, b) if is_host(a) and is_host(b) else op(a, b)

    fn.__name__ = np_fn.__name__
    return fn


def _unary(np_fn, xp_name: str):
    """numpy's function on numpy values, the array API's ``xp_name`` on other libraries'."""
    def fn(x):
        return np_fn(x) if is_host(x) else getattr(namespace(x), xp_name)(x)

    fn.__name__ = np_fn.__name__
    return fn


def _refuse(name: str, bad, x, where: str, fix: str) -> None:
    """Refuse the entries ``bad`` of ``x``, where ``name`` has an infinite slope: eagerly
    `NotLipschitzError`, in a staged sweep counted undecided (`refuse_where`)."""
    bad = np.asarray(bad) if is_host(bad) else bad

    def error() -> NotLipschitzError:
        b, v = to_host(bad), to_host(x)
        examples = np.asarray(v)[b].ravel()[:3].tolist() if np.ndim(v) else [float(v)]
        return NotLipschitzError(
            f"{name} is not Lipschitz at {where} (infinite slope) and {int(b.sum())} input "
            f"entries sit there (e.g. {examples}). {fix}"
        )

    refuse_where(bad, error)


# ----- structured linear maps used by the rules below -----

class Embed(LinearMap):
    """``t`` written into zeros of the output's shape at ``index``; the pull reads it back.

    The map of concatenate, stack and constant padding: O(output) memory, no dense matrix.
    """

    __slots__ = ("index",)

    def __init__(self, index: tuple, in_shape, out_shape):
        super().__init__(in_shape, out_shape)
        self.index = tuple(index)

    def push(self, t):
        lead = (slice(None),) * _nb(t, self.in_shape)
        shape = tuple(np.shape(t)[:len(lead)]) + self.out_shape
        if is_host(t):
            out = np.zeros(shape, np.result_type(t))
        else:
            out = namespace(t).zeros(shape, dtype=t.dtype, device=device(t))
        return set_at(out, lead + self.index, t)

    def pull(self, ct):
        ct = np.asarray(ct) if is_host(ct) else ct
        return ct[(slice(None),) * _nb(ct, self.out_shape) + self.index]

    def push_at(self, mask, t_at):
        """Only the requested entries inside the block are asked for; the rest are 0."""
        inner = np.asarray(mask[self.index])
        vals = t_at(inner) if inner.any() else None
        if vals is None:
            return None
        full = np.zeros(self.out_shape, np.result_type(vals))
        block = np.zeros(self.in_shape, np.result_type(vals))
        block[inner] = vals
        full[self.index] = block
        return full[mask]


def _slices_of(mask, axes, keepdims: bool, in_shape) -> np.ndarray:
    """The input entries that the requested output entries of a reduction along ``axes`` read."""
    if not keepdims:
        mask = np.expand_dims(mask, axes)
    return np.ascontiguousarray(np.broadcast_to(np.any(mask, axis=axes, keepdims=True),
                                                in_shape))


class WeightedSum(LinearMap):
    """``t -> sum(w * t, axes)``; the pull broadcasts back and scales by ``w`` (prod, logsumexp)."""

    __slots__ = ("w", "axes", "keepdims")

    def __init__(self, w, axes, keepdims: bool, in_shape, out_shape):
        super().__init__(in_shape, out_shape)
        self.w, self.axes, self.keepdims = w, axes, keepdims

    def push(self, t):
        nb = _nb(t, self.in_shape)
        wt = self.w * t
        return namespace(wt).sum(wt, axis=tuple(a + nb for a in self.axes),
                                 keepdims=self.keepdims)

    def pull(self, ct):
        nb = _nb(ct, self.out_shape)
        if not self.keepdims:
            kept = tuple(1 if i in self.axes else n for i, n in enumerate(self.in_shape))
            ct = namespace(ct).reshape(ct, tuple(np.shape(ct)[:nb]) + kept)
        return ct * self.w

    def push_at(self, mask, t_at):
        t = self._spread(_slices_of(mask, self.axes, self.keepdims, self.in_shape), t_at)
        return None if t is None else self.push(t)[mask]


class _PerSlice(LinearMap):
    """A map acting on each slice along ``axes`` separately, through the probabilities ``p``:
    an entry's image reads its whole slice, so a request asks for the slices it touches."""

    __slots__ = ("p", "axes")

    def __init__(self, p, axes, shape):
        super().__init__(shape, shape)
        self.p, self.axes = p, axes

    def push_at(self, mask, t_at):
        t = self._spread(_slices_of(mask, self.axes, True, self.in_shape), t_at)
        return None if t is None else self.push(t)[mask]


class SoftmaxMap(_PerSlice):
    """The softmax Jacobian ``diag(p) - p p^T`` per slice along ``axes``: symmetric."""

    __slots__ = ()

    def push(self, t):
        axes = tuple(a + _nb(t, self.in_shape) for a in self.axes)
        pt = self.p * t
        return pt - self.p * namespace(pt).sum(pt, axis=axes, keepdims=True)

    pull = push


class LogSoftmaxMap(_PerSlice):
    """The log_softmax Jacobian ``I - 1 p^T`` per slice along ``axes`` (pull: ``I - p 1^T``)."""

    __slots__ = ()

    def push(self, t):
        axes = tuple(a + _nb(t, self.in_shape) for a in self.axes)
        pt = self.p * t
        return t - namespace(pt).sum(pt, axis=axes, keepdims=True)

    def pull(self, ct):
        axes = tuple(a + _nb(ct, self.out_shape) for a in self.axes)
        return ct - self.p * namespace(ct).sum(ct, axis=axes, keepdims=True)


class CumSum(LinearMap):
    """Running sum along ``axis``; its transpose is the running sum from the other end."""

    __slots__ = ("axis",)

    def __init__(self, axis: int, shape):
        super().__init__(shape, shape)
        self.axis = axis

    def push(self, t):
        return _cumsum_impl(t, self.axis + _nb(t, self.in_shape))

    def pull(self, ct):
        ax = self.axis + _nb(ct, self.out_shape)
        return _flip(_cumsum_impl(_flip(ct, ax), ax), ax)


def _cumsum_impl(x, axis: int):
    return np.cumsum(x, axis=axis) if is_host(x) else namespace(x).cumulative_sum(x, axis=axis)


def _flip(x, axis: int):
    return np.flip(x, axis) if is_host(x) else namespace(x).flip(x, axis=axis)


class EinsumOperand(LinearMap):
    """Tangent of operand ``i`` of an einsum, the others held fixed, computed by einsum itself.

    Push replaces operand ``i`` by the tangent; a fresh subscript letter carries the batch
    axis. Pull contracts the cotangent with the other operands into operand ``i``'s
    subscripts; repeated letters (diagonals, ``'ii->i'``) get an identity operand and letters
    summed away within operand ``i`` alone get a ones operand, so every output letter exists.
    """

    __slots__ = ("ins", "out", "i", "operands", "batch", "pull_spec", "pull_extra")

    def __init__(self, ins: list[str], out: str, i: int, operands: list, in_shape, out_shape):
        super().__init__(in_shape, out_shape)
        self.ins, self.out, self.i, self.operands = ins, out, i, operands
        used = set("".join(ins) + out)
        fresh = iter(c for c in string.ascii_letters if c not in used)
        self.batch = next(fresh)
        mine, extra_subs, extra_ops, seen = [], [], [], {}
        others = set("".join(s for j, s in enumerate(ins) if j != i) + out)
        for letter, n in zip(ins[i], in_shape, strict=True):
            if letter in seen:  # a diagonal: tie the new letter to the old one by an identity
                new = next(fresh)
                extra_subs.append(letter + new)
                extra_ops.append(np.eye(seen[letter], dtype=np.result_type(*operands)))
                mine.append(new)
                continue
            seen[letter] = n
            mine.append(letter)
            if letter not in others:  # summed away inside operand i: broadcast back
                extra_subs.append(letter)
                extra_ops.append(np.ones(n, dtype=np.result_type(*operands)))
        subs = [out] + [s for j, s in enumerate(ins) if j != i] + extra_subs
        self.pull_spec = (",".join(subs), "".join(mine))
        self.pull_extra = extra_ops

    def push(self, t):
        b = self.batch if _nb(t, self.in_shape) else ""
        ins = [b + s if j == self.i else s for j, s in enumerate(self.ins)]
        ops = [t if j == self.i else o for j, o in enumerate(self.operands)]
        return np.einsum(f"{','.join(ins)}->{b}{self.out}", *ops)

    def pull(self, ct):
        b = self.batch if _nb(ct, self.out_shape) else ""
        subs, target = self.pull_spec
        others = [o for j, o in enumerate(self.operands) if j != self.i]
        g = np.einsum(f"{b}{subs}->{b}{target}", ct, *others, *self.pull_extra)
        squash = tuple(len(b) + k for k, n in enumerate(self.in_shape)
                       if n == 1 and g.shape[len(b) + k] != 1)
        return g.sum(axis=squash, keepdims=True) if squash else g


# ----- Binary arithmetic (broadcasting) -----

_add, _subtract = _binary(np.add, operator.add), _binary(np.subtract, operator.sub)
_multiply, _divide = _binary(np.multiply, operator.mul), _binary(np.true_divide, operator.truediv)

add_p = Primitive("add", _add, array_api=True)


@add_p.defrule
def add_rule(xs, dxs):
    a, b = xs
    ans = _add(a, b)
    out = tuple(np.shape(ans))
    return ans, FanIn(Diagonal(None, shape_of(a), out), Diagonal(None, shape_of(b), out))


subtract_p = Primitive("subtract", _subtract, array_api=True)


@subtract_p.defrule
def subtract_rule(xs, dxs):
    a, b = xs
    ans = _subtract(a, b)
    out = tuple(np.shape(ans))
    return ans, FanIn(Diagonal(None, shape_of(a), out), Diagonal(-1.0, shape_of(b), out))


multiply_p = Primitive("multiply", _multiply, array_api=True)


@multiply_p.defrule
def multiply_rule(xs, dxs):
    a, b = xs
    ans = _multiply(a, b)
    out = tuple(np.shape(ans))
    return ans, FanIn(Diagonal(b, shape_of(a), out), Diagonal(a, shape_of(b), out))


divide_p = Primitive("divide", _divide, array_api=True)


@divide_p.defrule
def divide_rule(xs, dxs):
    a, b = xs
    ans = _divide(a, b)
    out = tuple(np.shape(ans))
    return ans, FanIn(Diagonal(1.0 / (np.asarray(b) if is_host(b) else b), shape_of(a), out),
                      Diagonal(-ans / b, shape_of(b), out))


# ----- Powers -----

def power(x, y, **kwargs):
    """``x ** y``. Integer exponents get the exact polynomial rule (any sign of ``x``);
    constant real exponents below 1 raise at ``x == 0``; traced exponents differentiate in
    both arguments (``d/dy = x**y log x``, so the base must be positive, or 0 with ``y > 0``).

    >>> import asd
    >>> float(asd.subgrad(lambda x: x ** 3)(-2.0)), float(asd.subgrad(lambda y: 2.0 ** y)(0.0))
    (12.0, 0.6931471805599453)
    """
    if kwargs:
        raise unsupported(f"numpy.power with {', '.join(kwargs)}")
    return _power(x, y, operator=False)


def power_operator(x, y):
    """``x ** y``: as `power`, but where numpy's ``**`` meets a numpy scalar it runs scalar
    math (libm's pow), not the ufunc's loop, which differs from it in the last bit for some
    bases (float32 and float64 alike). numpy's operations return scalars where their result
    is 0-d, so a 0-d value some operation made is one; the function's own 0-d argument is
    an array (`_numpy_scalar`)."""
    return _power(x, y, operator=any(_numpy_scalar(t) for t in (x, y) if is_traced(t)))


def _numpy_scalar(t) -> bool:
    """Whether numpy would hold traced ``t`` as a scalar: 0-d and made by an operation (a
    reduction, a ufunc), or a scalar passed in."""
    return np.ndim(t) == 0 and is_host(t.value) and (
        isinstance(t.value, np.generic) or operation_of(t) is not None)


def _power(x, y, operator: bool):
    if is_traced(y):
        return pow_p(x, y, operator=True) if operator else pow_p(x, y)
    if isinstance(y, int | np.integer) or (np.ndim(y) == 0 and float(y).is_integer()):
        return integer_pow_p(x, n=int(y), operator=operator)
    if np.ndim(y) == 0:
        return real_pow_p(x, p=float(y), operator=operator)
    return pow_p(x, y)


def _as_scalar(v):
    """A 0-d host array as its numpy scalar (what numpy's ``**`` saw); anything else as is."""
    return v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v  # Python numbers stay


def _scalar_power(x, p, operator: bool):
    """``x ** p`` by numpy's scalar math where numpy's ``**`` would use it (``operator``: a
    scalar base, `power_operator`), else None."""
    if operator and is_host(x) and np.ndim(x) == 0 and np.asarray(x).dtype.kind == "f":
        with np.errstate(all="ignore"):
            return _as_scalar(x) ** p
    return None


def _inexact(x) -> np.ndarray:
    """``x`` as an array, integers promoted to float64; floats and object arrays (the exact
    series the engine evaluates impls on at degenerate ties) pass through unchanged.
    Other libraries' arrays promote to their default float."""
    if not is_host(x):
        xp = namespace(x)
        return x if xp.isdtype(x.dtype, "real floating") else xp.astype(x, xp.float32)
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind in "biu" else x


def _integer_pow_impl(x, n, operator=False):
    scalar = _scalar_power(x, n, operator)
    if scalar is not None:
        return scalar
    x = _inexact(x)
    if not is_host(x):
        return x ** n if n >= 0 else 1.0 / x ** -n
    return np.power(x, n)  # numpy's own loop (1 / x ** 2 rounds differently from x ** -2)


integer_pow_p = Primitive("integer_pow", _integer_pow_impl, array_api=True)


@integer_pow_p.defrule
def integer_pow_rule(xs, dxs, n, operator=False):
    (x,) = xs
    ans = _integer_pow_impl(x, n, operator)
    x = _inexact(x)
    if n in (0, 1):
        slope = (np.full(x.shape, float(n), dtype=x.dtype) if is_host(x)
                 else namespace(x).full(tuple(x.shape), float(n), dtype=x.dtype,
                                        device=device(x)))
    else:
        slope = n * (ans / x if n < 0 else _integer_pow_impl(x, n - 1))
    return ans, Diagonal(slope, tuple(x.shape))


def _real_pow_impl(x, p, operator=False):
    scalar = _scalar_power(x, p, operator)
    return np.power(x, p) if scalar is None else scalar


real_pow_p = Primitive("real_pow", _real_pow_impl)


@real_pow_p.defrule
def real_pow_rule(xs, dxs, p, operator=False):
    (x,) = xs
    ans = _real_pow_impl(x, p, operator)
    x = _inexact(x)
    if p < 0:
        _refuse(f"x ** {p}", x == 0, x, "x = 0", "Keep the input away from 0.")
    if p >= 1 or p <= 0:
        slope = p * np.power(x, p - 1) if p != 1 else np.ones(x.shape, x.dtype)
        return ans, Diagonal(slope, x.shape)
    with np.errstate(divide="ignore"):
        slope = p * np.power(x, p - 1)
    return ans, _root_map(f"x ** {p}", x, dxs[0], slope, Fraction(p), _ROOT_FIX,
                          where="x = 0")


def _pow_impl(a, b, operator=False):
    """``a ** b`` with numpy's operator where it was spelled so: on a numpy scalar that is
    scalar math, not np.power's loop (`power_operator`)."""
    with np.errstate(all="ignore") if operator else contextlib.nullcontext():
        return _as_scalar(a) ** _as_scalar(b) if operator else np.power(a, b)


pow_p = Primitive("power", _pow_impl)


@pow_p.defrule
def pow_rule(xs, dxs, operator=False):
    a, b = xs
    ans = _pow_impl(a, b, operator)  # the operands as given: a Python float stays weak
    out, dtype = np.shape(ans), np.result_type(ans)
    base, expo = np.broadcast_to(a, out), np.broadcast_to(b, out)
    a_moves = not getattr(dxs[0], "is_zero", False)
    b_moves = not getattr(dxs[1], "is_zero", False)
    da = db = None
    if a_moves:
        _refuse("x ** y", (base == 0) & (expo < 1), expo, "x = 0 with an exponent below 1",
                "Keep the base away from 0 or use an exponent >= 1.")
        da = Diagonal(np.asarray(b * np.power(a, np.subtract(b, 1)), dtype), np.shape(a), out)
    if b_moves:
        _refuse("x ** y (differentiated in y)", (base < 0) | ((base == 0) & (expo <= 0)), base,
                "a base <= 0",
                "x ** y is undefined for non-integer y near a negative x, and jumps in y at "
                "x = 0; keep the base positive (e.g. exp(y * log(x)) with x > 0).")
        log_a = np.log(np.where(base == 0, 1, base))  # 0 ** y == 0 for all y > 0: slope 0
        db = Diagonal(np.asarray(ans * log_a, dtype), np.shape(b), out)
    return ans, FanIn(da, db)


# ----- Unary elementwise (derivative formulas reuse the answer where they can) -----

negative_p = deflinear("negative", _unary(np.negative, "negative"),
                       lambda i, o: Diagonal(-1.0, i, o), array_api=True)
positive_p = deflinear("positive", _unary(np.positive, "positive"),
                       lambda i, o: identity(i), array_api=True)


# ----- roots of sums of even powers: Lipschitz composites through a non-Lipschitz node -----
# sqrt(x**2), sqrt(sum(x**2)), a standard deviation at zero variance are Lipschitz (|x|, ||x||)
# although sqrt is not at 0: its slope there is infinite while its input's tangent is 0. Where
# the input is a nonnegative combination of even powers of traced values (read off the
# program, so the composite is provably Lipschitz), the limiting gradient is read off the exact
# series along the ray (`root_limit`) and the root's map is rerouted to the inputs; any other
# root at 0 is refused.

_LINEAR_VIEWS = frozenset({"getitem", "reshape", "transpose", "broadcast_to", "sum", "squeeze",
                           "expand_dims", "take", "moveaxis", "ravel"})


def _positive_constant(ref) -> bool:
    """Whether ``ref`` is a constant operand whose entries are all > 0."""
    if type(ref) is int:
        return False
    value = to_host(ref.value)
    return bool(np.all(np.asarray(value) > 0))


def _same_value(trace, a, b, depth: int = 8) -> bool:
    """Whether operands ``a`` and ``b`` are the same computation: the same node, or nodes of
    the same primitive and parameters over the same operands (``(x - c) * (x - c)`` writes
    ``x - c`` twice), compared a few levels deep."""
    if type(a) is int and type(b) is int:
        if a == b:
            return True
        na, nb = trace.nodes[a], trace.nodes[b]
        return (depth > 0 and na.prim is not None and na.prim is nb.prim
                and len(na.args) == len(nb.args) and na.params == nb.params
                and all(_same_value(trace, x, y, depth - 1)
                        for x, y in zip(na.args, nb.args)))
    if type(a) is int or type(b) is int:
        return False
    va, vb = to_host(a.value), to_host(b.value)
    return np.shape(va) == np.shape(vb) and bool(np.array_equal(va, vb))


def even_order(trace, ref) -> int | None:
    """The least power ``2m`` of the terms when node ``ref`` is a nonnegative combination
    ``sum c_j |g_j| ** (2 m_j)`` of even powers of traced values (``c_j > 0``): squares,
    ``u * u``, even integer powers, ``u @ u``, and sums, means, positive scalings, additions
    and views of those. Then ``h ** p`` is locally Lipschitz wherever ``p * 2m >= 1``
    (``p (Σa)^(p-1) |∂a_j| <= |∂(a_j^p)|``, each ``a_j^p`` a power >= 1 of a Lipschitz
    function). None where the structure is not recognised."""
    if type(ref) is not int:
        return None
    node = trace.nodes[ref]
    name, args = node.name, node.args
    if name == "square" or (name == "multiply" and type(args[0]) is int
                            and _same_value(trace, args[0], args[1])):
        return 2
    if name in ("integer_pow", "real_pow"):
        n = node.params.get("n", node.params.get("p"))
        return int(n) if float(n) == int(n) and int(n) >= 2 and int(n) % 2 == 0 else None
    if (name in ("matmul", "dot", "inner", "vdot") and type(args[0]) is int
            and _same_value(trace, args[0], args[1]) and len(trace.nodes[args[0]].shape) == 1):
        return 2
    if name in _LINEAR_VIEWS:
        return even_order(trace, args[0])
    if name == "multiply":
        for a, b in ((args[0], args[1]), (args[1], args[0])):
            if _positive_constant(b):
                return even_order(trace, a)
        return None
    if name == "divide" and _positive_constant(args[1]):
        return even_order(trace, args[0])
    if name == "add":
        orders = [even_order(trace, a) if type(a) is int else (
            None if not _positive_constant(a) else 10**9) for a in args]
        return None if None in orders else min(orders)
    return None


def _root_map(name: str, x, dx, slope, p: Fraction, fallback: str, odd: bool = False,
              where: str = "0"):
    """The linearization of the root ``x ** p`` (``0 < p < 1``) with slope ``slope`` where
    ``x != 0``. Where ``x == 0`` the slope in ``x`` is infinite; if ``x`` is a nonnegative
    combination of even powers of order ``2m`` with ``p * 2m >= 1`` (`even_order`), the
    composite is Lipschitz and its limiting gradient in the inputs is read off the exact
    series (`root_limit`), the map rerouted there; any other root at 0 is refused."""
    shape = shape_of(x)
    zero = x == 0
    trace = getattr(dx, "trace", None)
    if getattr(trace, "staged", False):  # no exact series inside a trace: counted undecided
        refuse_where(zero, lambda: None)
        return Diagonal(slope, shape)
    if not zero.any():  # eager only: the exact series below runs on the host
        return Diagonal(slope, shape)
    order = even_order(trace, dx.k) if trace is not None and hasattr(trace, "nodes") else None
    limit = None if order is None or p * order < 1 else root_limit(dx, zero, p, odd)
    if limit is None:
        _refuse(name, zero, x, where, fallback)
    refs, maps = limit
    xp = namespace(slope)
    slope = xp.where(zero, xp.zeros_like(slope), slope)
    return Reroute(FanIn(Diagonal(slope, shape), *maps), refs)


_ROOT_FIX = ("The composite is Lipschitz at a zero of its input only where the input is a sum "
             "of even powers (sqrt(sum(x**2)), sqrt((x - a)**2)), which asd differentiates "
             "exactly; for a Euclidean norm asd.norm(v) is the direct spelling. Otherwise keep "
             "the input away from 0.")

_sqrt = _unary(np.sqrt, "sqrt")
sqrt_p = Primitive("sqrt", _sqrt, array_api=True)


@sqrt_p.defrule
def sqrt_rule(xs, dxs):
    (x,) = xs
    x = np.asarray(x) if is_host(x) else x
    ans = _sqrt(x)
    with np.errstate(divide="ignore"):
        slope = 0.5 / ans
    return ans, _root_map("sqrt", x, dxs[0], slope, Fraction(1, 2), _ROOT_FIX)


register_numpy(np.sqrt, sqrt_p)


def _cbrt_slope(x, ans):
    _refuse("cbrt", np.asarray(x) == 0, x, "0", "Keep the input away from 0.")
    return 1.0 / (3.0 * ans * ans)


def _arcsin_slope(sign):
    def slope(x, ans):
        xp = namespace(x)
        x = np.asarray(x) if xp is np else x
        _refuse("arcsin" if sign > 0 else "arccos", xp.abs(x) == 1, x, "x = +-1",
                "Keep the input strictly inside (-1, 1).")
        return sign / xp.sqrt((1.0 - x) * (1.0 + x))

    return slope


def _sigmoid_impl(x):
    xp = namespace(x)
    x = np.asarray(x) if xp is np else x
    e = xp.exp(-xp.abs(x))  # never overflows; both branches are exact in their half-line
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus_impl(x):
    xp = namespace(x)
    if xp is np:
        x = np.asarray(x)
        return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))
    return xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x)))


def _xp(x):
    """The namespace of ``x``, numpy values as numpy arrays (the derivative formulas below)."""
    return namespace(x)


_LN2, _LN10 = math.log(2.0), math.log(10.0)

def _smooth(name: str, np_fn, xp_name: str, derivative):
    """A smooth elementwise primitive with an array API name: runs on every library."""
    return defsmooth(name, _unary(np_fn, xp_name), derivative, numpy=np_fn, array_api=True)


def _host_or_self(x):
    return np.asarray(x) if is_host(x) else x


exp_p = _smooth("exp", np.exp, "exp", lambda x, ans: ans)
def _exp2(x):
    """``2 ** x``: numpy's, or the library's own ``exp2`` (torch and JAX have one; it is not
    in the array API standard, so elsewhere ``pow``)."""
    if is_host(x):
        return np.exp2(x)
    xp = namespace(x)
    return xp.exp2(x) if hasattr(xp, "exp2") else xp.pow(2.0, x)


def _reciprocal(x):
    """``1 / x`` with integers promoted, by the library's own ``reciprocal`` where it has
    one."""
    x = _inexact(x)
    if is_host(x):
        return np.reciprocal(x)
    xp = namespace(x)
    return xp.reciprocal(x) if hasattr(xp, "reciprocal") else 1.0 / x


exp2_p = defsmooth("exp2", _exp2, lambda x, ans: ans * _LN2, numpy=np.exp2, array_api=True)
expm1_p = _smooth("expm1", np.expm1, "expm1", lambda x, ans: ans + 1.0)
log_p = _smooth("log", np.log, "log", lambda x, ans: 1.0 / _host_or_self(x))
log2_p = _smooth("log2", np.log2, "log2", lambda x, ans: 1.0 / (_host_or_self(x) * _LN2))
log10_p = _smooth("log10", np.log10, "log10", lambda x, ans: 1.0 / (_host_or_self(x) * _LN10))
log1p_p = _smooth("log1p", np.log1p, "log1p", lambda x, ans: 1.0 / (1.0 + _host_or_self(x)))
cbrt_p = defsmooth("cbrt", np.cbrt, _cbrt_slope, numpy=np.cbrt)
square_p = _smooth("square", np.square, "square", lambda x, ans: 2.0 * _host_or_self(x))
reciprocal_p = defsmooth("reciprocal", _reciprocal, lambda x, ans: -ans * ans,
                         numpy=np.reciprocal, array_api=True)
sin_p = _smooth("sin", np.sin, "sin", lambda x, ans: _xp(x).cos(x))
cos_p = _smooth("cos", np.cos, "cos", lambda x, ans: -_xp(x).sin(x))
tan_p = _smooth("tan", np.tan, "tan", lambda x, ans: 1.0 + ans * ans)
arcsin_p = _smooth("arcsin", np.arcsin, "asin", _arcsin_slope(1.0))
arccos_p = _smooth("arccos", np.arccos, "acos", _arcsin_slope(-1.0))
arctan_p = _smooth("arctan", np.arctan, "atan", lambda x, ans: 1.0 / (1.0 + x * x))
sinh_p = _smooth("sinh", np.sinh, "sinh", lambda x, ans: _xp(x).cosh(x))
cosh_p = _smooth("cosh", np.cosh, "cosh", lambda x, ans: _xp(x).sinh(x))
tanh_p = _smooth("tanh", np.tanh, "tanh", lambda x, ans: 1.0 - ans * ans)
arcsinh_p = _smooth("arcsinh", np.arcsinh, "asinh",
                    lambda x, ans: 1.0 / _xp(x).sqrt(1.0 + x * x))
arctanh_p = _smooth("arctanh", np.arctanh, "atanh", lambda x, ans: 1.0 / (1.0 - x * x))
sigmoid_p = defsmooth("sigmoid", _sigmoid_impl, lambda x, ans: ans * (1.0 - ans),
                      array_api=True)
# softplus' = sigmoid = 1 - exp(-softplus): stable for every x, and reuses the answer
softplus_p = defsmooth("softplus", _softplus_impl, lambda x, ans: -_xp(ans).expm1(-ans),
                       array_api=True)


# ----- The softmax family (along axes; stable: shifted by the maximum) -----

def _array(x):
    """``(xp, x)``: the namespace of ``x``, and numpy values as numpy arrays."""
    xp = namespace(x)
    return xp, (np.asarray(x) if xp is np else x)


def _max_shift(x, axes):
    """The maximum along ``axes`` (kept), 0 where it is infinite: exp never overflows."""
    xp = namespace(x)
    if math.prod(x.shape) == 0:
        return np.zeros((1,) * x.ndim, x.dtype) if xp is np else xp.zeros(
            (1,) * x.ndim, dtype=x.dtype, device=device(x))
    m = xp.max(x, axis=axes, keepdims=True)
    if xp is np:
        return np.where(np.isfinite(m), m, 0).astype(x.dtype)
    return xp.where(xp.isfinite(m), m, xp.zeros_like(m))


def _shifted(x, axes):
    _, x = _array(x)
    return x - _max_shift(x, axes)


def _logsumexp_impl(x, axes, keepdims):
    xp, x = _array(x)
    m = _max_shift(x, axes)
    lse = xp.log(xp.sum(xp.exp(x - m), axis=axes, keepdims=True)) + m
    return lse if keepdims else xp.squeeze(lse, axis=axes)


logsumexp_p = Primitive("logsumexp", _logsumexp_impl, array_api=True)


@logsumexp_p.defrule
def logsumexp_rule(xs, dxs, axes, keepdims):
    (x,) = xs
    xp, x = _array(x)
    ans = _logsumexp_impl(x, axes, True)
    p = xp.exp(x - ans)  # the softmax: the gradient of logsumexp
    out = ans if keepdims else xp.squeeze(ans, axis=axes)
    return out, WeightedSum(p, axes, keepdims, shape_of(x), shape_of(out))


def _softmax_impl(x, axes):
    xp = namespace(x)
    e = xp.exp(_shifted(x, axes))
    return e / xp.sum(e, axis=axes, keepdims=True)


softmax_p = Primitive("softmax", _softmax_impl, array_api=True)


@softmax_p.defrule
def softmax_rule(xs, dxs, axes):
    (x,) = xs
    p = _softmax_impl(x, axes)
    return p, SoftmaxMap(p, axes, shape_of(x))


def _log_softmax_impl(x, axes):
    xp = namespace(x)
    s = _shifted(x, axes)
    return s - xp.log(xp.sum(xp.exp(s), axis=axes, keepdims=True))


log_softmax_p = Primitive("log_softmax", _log_softmax_impl, array_api=True)


@log_softmax_p.defrule
def log_softmax_rule(xs, dxs, axes):
    (x,) = xs
    ans = _log_softmax_impl(x, axes)
    return ans, LogSoftmaxMap(namespace(ans).exp(ans), axes, shape_of(x))


def logsumexp(x, axis=None, keepdims: bool = False):
    """``log(sum(exp(x), axis))``, computed stably; its gradient is the softmax.

    >>> import numpy as np, asd
    >>> asd.value_and_subgrad(asd.logsumexp)(np.array([1000.0, 1000.0]))
    (np.float64(1000.6931471805599), array([0.5, 0.5]))
    """
    return logsumexp_p(x, axes=_axes(axis, np.ndim(x)), keepdims=bool(keepdims))


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x), axis)`` along ``axis`` (default the last; None: all entries).

    >>> import numpy as np, asd
    >>> asd.jacobian(asd.softmax)(np.zeros(2))
    array([[ 0.25, -0.25],
           [-0.25,  0.25]])
    """
    return softmax_p(x, axes=_axes(axis, np.ndim(x)))


def log_softmax(x, axis=-1):
    """``x - logsumexp(x, axis, keepdims=True)``, computed stably.

    >>> import numpy as np, asd
    >>> asd.log_softmax(np.array([[0.0, 0.0]]), axis=1)
    array([[-0.69314718, -0.69314718]])
    """
    return log_softmax_p(x, axes=_axes(axis, np.ndim(x)))


# ----- Casting and stopping -----

stop_gradient_p = Primitive("stop_gradient", lambda x: x, stops_gradient=True, array_api=True)


def stop_gradient(x):
    """Treat ``x`` as a constant: no tangent or cotangent flows through it.

    >>> import asd
    >>> float(asd.subgrad(lambda x: x * asd.stop_gradient(x))(3.0))
    3.0
    """
    return stop_gradient_p(x) if is_traced(x) else x


def astype(x, dtype, copy=True):
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact) and np.dtype(x.dtype).kind not in "biu":
        # from a bool or an integer the cast is numpy's own (no rounding to decide)
        raise UnsupportedError(
            f"astype({dtype}) of a traced array: a cast to a discrete type is a step function "
            "(it truncates toward 0), with nothing to differentiate and jumps at the "
            "integers. Write np.trunc(x), the same integers as floats (asd decides its jumps "
            "and refuses one the output sees), or np.trunc(asd.stop_gradient(x)) where they "
            "are constants by intent.")
    return cast_p(x, dtype=dtype)


def _cast_impl(x, dtype):
    x = np.asarray(x)
    return x if x.dtype == object else x.astype(dtype)  # exact series stay exact


cast_p = deflinear("cast", _cast_impl,
                   lambda i, o, dtype: identity(i))


# ----- Reductions -----

def _reject(what: str, out=None, **kwargs) -> None:
    extra = ["out"] * (out is not None) + [k for k, v in kwargs.items() if v is not None]
    if extra:
        raise unsupported(f"numpy.{what} with {', '.join(extra)}")


def _sum_impl(x, axis=None, keepdims=False):
    return namespace(x).sum(x, axis=axis, keepdims=keepdims)


sum_p = deflinear("sum", _sum_impl, lambda i, o, axis=None, keepdims=False: Sum(axis, keepdims,
                                                                                    i, o),
                  array_api=True)


def sum(x, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    if out is not None or kwargs:
        raise unsupported(f"numpy.sum with {', '.join(['out'] * (out is not None) + list(kwargs))}")
    if isinstance(axis, list):
        axis = tuple(axis)
    r = sum_p(x, axis=axis, keepdims=bool(keepdims))
    return r if dtype is None else astype(r, dtype)


def mean(x, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    """numpy's mean, bit for bit: the sum (numpy's pairwise one, `sum_p`) divided by the
    count, a float16 argument summed and divided in float32 and rounded back, ``dtype``
    the type the sum accumulates in (`numpy_mean_dtype`)."""
    if out is not None or kwargs:
        given = ["out"] * (out is not None) + list(kwargs)
        raise unsupported(f"numpy.mean with {', '.join(given)}")
    shape = np.shape(x)
    count = int(np.prod([shape[a] for a in _axes(axis, len(shape))]))
    acc, result = numpy_mean_dtype(x, dtype)
    total = sum(x if acc == _dtype(x) else astype(x, acc), axis=axis, keepdims=keepdims)
    avg = divide_by_count(total, count, acc)
    return avg if result == acc else astype(avg, result)


def divide_by_count(total, count: int, dtype):
    """``total / count`` rounded as numpy rounds it (numpy divides by the integer count in
    float64 and casts back): by the count in ``dtype`` where it is exact there (a float32 or
    float16 quotient of exact operands is correctly rounded either way), else in float64."""
    dtype = np.dtype(dtype)
    if float(dtype.type(count)) == count:
        return divide_p(total, np.asarray(count, dtype))
    wide = divide_p(astype(total, np.float64), np.asarray(count, np.float64))
    return astype(wide, dtype)


def _dtype(x) -> np.dtype:
    return numpy_dtype(x.value if is_traced(x) else x)


def numpy_mean_dtype(x, dtype=None) -> tuple[np.dtype, np.dtype]:
    """``(accumulation dtype, result dtype)`` of ``numpy.mean(x, dtype=dtype)``: float16 is
    summed and divided in float32 and rounded back; integers in float64."""
    own = _dtype(x)
    if dtype is not None:
        dtype = np.dtype(dtype)
        return dtype, dtype
    if own == np.float16:
        return np.dtype(np.float32), own
    if not np.issubdtype(own, np.inexact):
        return np.dtype(np.float64), np.dtype(np.float64)
    return own, own


def _others_product(x, axes):
    """For each entry, the product of the *other* entries of its reduced slice.

    Prefix and suffix products (no division by ``x``) of the slice with its zeros read as 1,
    then the zeros put back by counting them: an entry's product is 0 where another entry of
    its slice is 0, so a large partial product that overflows never meets a zero (``inf * 0``
    would be NaN where the exact answer is 0). Narrow floats accumulate in float64, so a
    product the result's dtype can hold is not lost to an overflowing prefix.
    """
    xp = namespace(x)
    keep = [a for a in range(x.ndim) if a not in axes]
    perm = keep + list(axes)
    back = tuple(int(i) for i in np.argsort(perm))
    xt = xp.permute_dims(x, tuple(perm))
    lead = tuple(xt.shape[:len(keep)])
    flat = xp.reshape(xt, lead + (-1,))
    wide = _wide_float(flat, xp)
    zero = flat == 0
    nonzero = xp.where(zero, xp.ones_like(wide), wide)
    one = xp.ones_like(nonzero[..., :1])
    left = _cumprod(xp.concat([one, nonzero[..., :-1]], axis=-1))
    right = _flip(_cumprod(xp.concat([one, _flip(nonzero, -1)[..., :-1]], axis=-1)), -1)
    zeros = xp.sum(xp.astype(zero, xp.int64), axis=-1, keepdims=True)
    # the product of the others is nonzero only in a slice without zeros, or at its one zero
    alive = (zeros == 0) | ((zeros == 1) & zero)
    others = xp.where(alive, left * right, xp.zeros_like(left))
    others = xp.astype(others, x.dtype) if others.dtype != x.dtype else others
    return xp.permute_dims(xp.reshape(others, tuple(xt.shape)), back)


def _wide_float(x, xp):
    """``x`` in float64 where it is a narrower float (the exact products of float32 entries
    need float64's range), else as it is."""
    if xp.isdtype(x.dtype, "real floating") and x.dtype != xp.float64:
        return xp.astype(x, xp.float64)
    return x


def _cumprod(x):
    """Running product along the last axis."""
    return np.cumprod(x, axis=-1) if is_host(x) else namespace(x).cumulative_prod(x, axis=-1)


def _prod_impl(x, axes, keepdims):
    if is_host(x):
        return np.prod(x, axis=axes, keepdims=keepdims)
    return namespace(x).prod(x, axis=axes, keepdims=keepdims)


prod_p = Primitive("prod", _prod_impl, array_api=True)


@prod_p.defrule
def prod_rule(xs, dxs, axes, keepdims):
    x = xs[0]
    x = np.asarray(x) if is_host(x) else x
    ans = _prod_impl(x, axes, keepdims)
    if math.prod(x.shape) == 0:
        return ans, Zero(tuple(x.shape), shape_of(ans))
    return ans, WeightedSum(_others_product(x, axes), axes, keepdims, tuple(x.shape),
                            shape_of(ans))


def prod(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Product along ``axis``; the derivative uses products of the other entries (exact at 0).

    >>> import numpy as np, asd
    >>> asd.subgrad(np.prod)(np.array([2.0, 0.0, 3.0]))
    array([0., 6., 0.])
    """
    _reject("prod", out, initial=initial, where=where)
    r = prod_p(x, axes=_axes(axis, np.ndim(x)), keepdims=bool(keepdims))
    return r if dtype is None else astype(r, dtype)


def cumsum(x, axis=None, dtype=None, out=None):
    """Running sum along ``axis`` (None: of the flattened array).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.cumsum(x)[1])(np.ones(3))
    array([1., 1., 0.])
    """
    _reject("cumsum", out)
    if axis is None:
        x, axis = ravel(x), 0
    r = cumsum_p(x, axis=_axes(axis, np.ndim(x))[0])
    return r if dtype is None else astype(r, dtype)


cumsum_p = deflinear("cumsum", _cumsum_impl, lambda i, o, axis: CumSum(axis, i),
                     array_api=True)


# ----- Structure: reshaping and moving axes -----

def _reshape_impl(x, shape):
    return np.reshape(x, shape) if is_host(x) else namespace(x).reshape(x, shape)


reshape_p = deflinear("reshape", _reshape_impl, lambda i, o, shape: Reshape(i, o),
                      array_api=True)


def reshape(x, *shape, order="C", **kwargs):
    if order != "C":
        raise unsupported(f"reshape with order={order!r}")
    if "newshape" in kwargs:
        shape = (kwargs.pop("newshape"),)
    if "shape" in kwargs:
        shape = (kwargs.pop("shape"),)
    if kwargs:
        raise unsupported(f"reshape with {', '.join(kwargs)}")
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    full = np.empty(np.shape(x), dtype=bool).reshape(shape).shape
    return reshape_p(x, shape=full)


def ravel(x, order="C"):
    return reshape(x, -1, order=order)


def squeeze(x, axis=None):
    return reshape_p(x, shape=np.squeeze(np.empty(np.shape(x), bool), axis=axis).shape)


def expand_dims(x, axis):
    return reshape_p(x, shape=np.expand_dims(np.empty(np.shape(x), bool), axis).shape)


transpose_p = deflinear(
    "transpose",
    lambda x, axes: np.transpose(x, axes) if is_host(x) else namespace(x).permute_dims(x, axes),
    lambda i, o, axes: Transpose(axes, i), array_api=True)


def transpose(x, *axes, **kwargs):
    if kwargs:  # numpy.transpose(x, axes=...)
        if axes or set(kwargs) != {"axes"}:
            raise TypeError(f"transpose() got unexpected arguments {sorted(kwargs)}")
        axes = (kwargs["axes"],)
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], tuple | list)):
        axes = axes[0]
    nd = np.ndim(x)
    axes = tuple(range(nd))[::-1] if not axes else tuple(int(a) % nd for a in axes)
    return transpose_p(x, axes=axes)


def swapaxes(x, axis1, axis2):
    axes = list(range(np.ndim(x)))
    axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
    return transpose_p(x, axes=tuple(axes))


def moveaxis(x, source, destination):
    nd = np.ndim(x)
    src = [int(a) % nd for a in np.atleast_1d(source)]
    dst = [int(a) % nd for a in np.atleast_1d(destination)]
    axes = [a for a in range(nd) if a not in src]
    for d, a in sorted(zip(dst, src, strict=True)):
        axes.insert(d, a)
    return transpose_p(x, axes=tuple(axes))


broadcast_to_p = deflinear("broadcast_to", lambda x, shape: namespace(x).broadcast_to(x, shape),
                           lambda i, o, shape: Diagonal(None, i, o), array_api=True)


def broadcast_to(x, shape, subok=False):
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    return broadcast_to_p(x, shape=shape)


# ----- Structure: joining and padding -----

def _all_host(xs) -> bool:
    """Whether every operand is a numpy value (a type test: numpy's own function applies)."""
    return all(map(is_host, xs))


def _concatenate_impl(*xs, axis):
    if _all_host(xs):
        return np.concatenate(xs, axis=axis)
    like = next(x for x in xs if not is_host(x))
    return namespace(like).concat([x if not is_host(x) else from_host(x, like, "like")
                                   for x in xs], axis=axis)


concatenate_p = Primitive("concatenate", _concatenate_impl, array_api=True)


@concatenate_p.defrule
def concatenate_rule(xs, dxs, axis):
    ans = _concatenate_impl(*xs, axis=axis)
    maps, start = [], 0
    for x in xs:
        n = np.shape(x)[axis]
        index = (slice(None),) * axis + (slice(start, start + n),)
        maps.append(Embed(index, shape_of(x), shape_of(ans)))
        start += n
    return ans, maps[0] if len(maps) == 1 else FanIn(*maps)


def concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    """``numpy.concatenate``; each input's map writes its block into zeros (pull: a slice).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: (np.concatenate([x, 2 * x]) ** 2).sum())(np.ones(1))
    array([10.])
    """
    _reject("concatenate", out, dtype=dtype, casting=casting)
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    ndim = np.ndim(arrays[0])
    if ndim == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    return concatenate_p(*arrays, axis=_axes(axis, ndim)[0])


def _stack_impl(*xs, axis):
    if _all_host(xs):
        return np.stack(xs, axis=axis)
    like = next(x for x in xs if not is_host(x))
    return namespace(like).stack([x if not is_host(x) else from_host(x, like, "like")
                                  for x in xs], axis=axis)


stack_p = Primitive("stack", _stack_impl, array_api=True)


@stack_p.defrule
def stack_rule(xs, dxs, axis):
    ans = _stack_impl(*xs, axis=axis)
    maps = [Embed((slice(None),) * axis + (k,), shape_of(x), shape_of(ans))
            for k, x in enumerate(xs)]
    return ans, maps[0] if len(maps) == 1 else FanIn(*maps)


def stack(arrays, axis=0, out=None, dtype=None, casting=None):
    """``numpy.stack`` of traced and constant arrays along a new axis.

    >>> import numpy as np, asd
    >>> asd.jacobian(lambda x: np.stack([x, np.zeros(1)], axis=1))(np.ones(1)).shape
    (1, 2, 1)
    """
    _reject("stack", out, dtype=dtype, casting=casting)
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    return stack_p(*arrays, axis=_axes(axis, np.ndim(arrays[0]) + 1)[0])


def hstack(arrays, dtype=None, casting=None):
    arrays = [a if np.ndim(a) else reshape(a, 1) for a in arrays]
    return concatenate(arrays, axis=0 if np.ndim(arrays[0]) == 1 else 1, dtype=dtype,
                       casting=casting)


def vstack(arrays, dtype=None, casting=None):
    arrays = [reshape(a, (1, -1)) if np.ndim(a) < 2 else a for a in arrays]
    return concatenate(arrays, axis=0, dtype=dtype, casting=casting)


def _pad_impl(x, pad_width, constant_values):
    if is_host(x):
        return np.pad(x, pad_width, mode="constant", constant_values=constant_values)
    # the array API has no pad: the constants (numpy lays out per-axis ones, corners
    # included), then ``x`` written into its block, on ``x``'s library and device
    shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, pad_width, strict=True))
    frame = np.pad(np.zeros(tuple(x.shape)), pad_width, constant_values=constant_values)
    out = from_host(np.ascontiguousarray(frame), x, "like")
    block = tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape, strict=True))
    return set_at(namespace(x).reshape(out, shape), block, x)


pad_p = deflinear(
    "pad", _pad_impl,
    lambda i, o, pad_width, constant_values: Embed(
        tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, i, strict=True)), i, o),
    array_api=True,
)


def pad(x, pad_width, mode="constant", **kwargs):
    """``numpy.pad``. Constant padding embeds ``x``; the other modes (edge, reflect, symmetric,
    wrap, ...) are gathers, so they become an index of the flattened input.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.pad(x, 1, mode="edge").sum())(np.ones(2))
    array([2., 2.])
    """
    nd = np.ndim(x)
    width = tuple((int(a), int(b)) for a, b in
                  np.broadcast_to(np.asarray(pad_width, dtype=int), (nd, 2)))
    if mode == "constant":
        c = kwargs.pop("constant_values", 0)
        if kwargs or is_traced(c):
            raise unsupported("numpy.pad with a traced constant_values or extra options")
        c = c if np.ndim(c) == 0 else tuple(map(tuple, np.broadcast_to(c, (nd, 2)).tolist()))
        return pad_p(x, pad_width=width, constant_values=c)
    if not isinstance(mode, str):
        raise unsupported("numpy.pad with a callable mode")
    if mode not in _GATHER_PADS or kwargs.get("reflect_type", "even") != "even":
        # statistics, ramps and odd reflections compute new values: padding the positions
        # would gather the wrong entries (the maximum of the positions is the last one)
        raise unsupported(f"numpy.pad with mode={mode!r}"
                          + (" and reflect_type='odd'" if mode in _GATHER_PADS else "")
                          + f" (asd pads by copying entries: modes {', '.join(_GATHER_PADS)} "
                          "with even reflection, and 'constant')")
    source = np.pad(np.arange(np.size(x)).reshape(np.shape(x)), width, mode=mode, **kwargs)
    return getitem(ravel(x), source)


_GATHER_PADS = ("edge", "wrap", "reflect", "symmetric")
"""The padding modes that copy entries of the input (a gather of its positions)."""


# ----- Structure: indexing -----

def _check_static_index(index):
    parts = index if isinstance(index, tuple) else (index,)
    for p in parts:
        if is_traced(p):
            raise NotLipschitzError(
                "indexing with a traced index: the index is a discrete function of the input "
                "(e.g. argmax), so the result jumps where it changes. Use a reduction "
                "(asd.numpy.max, sort) instead of x[argmax(x)]."
            )
    return index


getitem_p = deflinear("getitem", index_array, lambda i, o, index: Index(index, i, o),
                      array_api=True)


def getitem(x, index):
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if is_traced(index):  # positions from argmax/argsort are decided along the ray
        from .order import gather_at

        return gather_at(x, index)
    if isinstance(index, list):
        index = np.asarray(index)
    elif isinstance(index, tuple):
        index = tuple(np.asarray(i) if isinstance(i, list) else i for i in index)
    return getitem_p(x, index=_check_static_index(index))


def take(a, indices, axis=None, out=None, mode="raise"):
    """``numpy.take``: a gather, so its transpose scatter-adds (repeated indices accumulate).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.take(x, [0, 0, 2]).sum())(np.ones(3))
    array([2., 0., 1.])
    """
    if out is not None or mode != "raise":
        raise unsupported("numpy.take with out= or mode other than 'raise'")
    if is_traced(indices):
        from .order import gather_at

        return gather_at(a, indices, "take", axis)
    _check_static_index(indices)
    indices = np.asarray(indices)
    if axis is None:
        return getitem(ravel(a), indices)
    axis = _axes(axis, np.ndim(a))[0]
    return getitem(a, (slice(None),) * axis + (indices,))


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """``numpy.diff`` as differences of shifted slices (linear: two index nodes and a subtract).

    >>> import numpy as np, asd
    >>> asd.jacobian(np.diff)(np.zeros(3))
    array([[-1.,  1.,  0.],
           [ 0., -1.,  1.]])
    """
    nd = np.ndim(a)
    axis = _axes(axis, nd)[0]
    parts = []
    for extra in (prepend, append):
        if extra is np._NoValue:
            parts.append(None)
            continue
        shape = list(np.shape(a))
        shape[axis] = 1
        parts.append(broadcast_to(extra, shape) if np.ndim(extra) == 0 else extra)
    if parts[0] is not None or parts[1] is not None:
        a = concatenate([p for p in (parts[0], a, parts[1]) if p is not None], axis=axis)
    lead = (slice(None),) * axis
    for _ in range(n):
        a = subtract_p(getitem(a, lead + (slice(1, None),)), getitem(a, lead + (slice(None, -1),)))
    return a


# ----- Contraction -----

_matmul = _binary(np.matmul, operator.matmul)
matmul_p = Primitive("matmul", _matmul, array_api=True)


@matmul_p.defrule
def matmul_rule(xs, dxs):
    a, b = xs
    a, b = _host_or_self(a), _host_or_self(b)
    ans = _matmul(a, b)
    out = shape_of(ans)
    return ans, FanIn(MatMul(b, "a", shape_of(a), shape_of(b), out),
                      MatMul(a, "b", shape_of(a), shape_of(b), out))


def matmul(a, b, **kwargs):
    if kwargs:
        raise unsupported(f"numpy.matmul with {', '.join(kwargs)}")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        raise ValueError("matmul: input operand does not have enough dimensions (use *)")
    return matmul_p(a, b)


def _einsum_impl(*xs, subscripts, dot=False, axes=None):
    if (dot or axes is not None) and _plain_arrays(xs):
        # numpy.dot of N-d operands sums in its own order (a dot product per output entry),
        # and numpy.tensordot is a BLAS dot of reshaped operands, not einsum's order: the
        # value is numpy's own, bit for bit. Series and jets are summed exactly or with an
        # order-free bound, so the einsum serves them.
        return np.dot(*xs) if axes is None else np.tensordot(*xs, axes=axes)
    return np.einsum(subscripts, *xs)


def _plain_arrays(xs) -> bool:
    """Whether every operand is a numpy array of numbers (by type and dtype, not value)."""
    return all(type(x) is np.ndarray and x.dtype != object for x in xs)


einsum_p = Primitive("einsum", _einsum_impl)


@einsum_p.defrule
def einsum_rule(xs, dxs, subscripts, dot=False, axes=None):
    xs = [np.asarray(x) for x in xs]
    ans = _einsum_impl(*xs, subscripts=subscripts, dot=dot, axes=axes)
    lhs, out = subscripts.split("->")
    ins = lhs.split(",")
    maps = [None if getattr(dx, "is_zero", False) else
            EinsumOperand(ins, out, i, xs, x.shape, ans.shape)
            for i, (x, dx) in enumerate(zip(xs, dxs, strict=True))]
    if len(maps) == 1:
        return ans, maps[0] if maps[0] is not None else Zero(xs[0].shape, ans.shape)
    return ans, FanIn(*maps)


def _einsum_spec(subscripts: str, shapes: list[tuple]) -> str:
    """Explicit subscripts without ellipses (``'...ij,jk'`` -> ``'abij,jk->abik'``)."""
    spec = subscripts.replace(" ", "")
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(shapes)} operands")
    used = set(spec) - set(".,->")
    fresh = [c for c in string.ascii_letters if c not in used]
    n_ell = 0
    for s, shape in zip(ins, shapes, strict=True):
        if "..." in s:
            n_ell = max(n_ell, len(shape) - (len(s) - 3))
    ell = "".join(fresh[:n_ell])
    full = []
    for s, shape in zip(ins, shapes, strict=True):
        if "..." in s:
            k = len(shape) - (len(s) - 3)
            s = s.replace("...", ell[n_ell - k:] if k else "")
        if len(s) != len(shape):
            raise ShapeError(f"einsum: subscripts {s!r} for an operand of shape {shape}")
        full.append(s)
    if arrow:
        out = out.replace("...", ell)
    else:
        letters = "".join(full)
        out = ell + "".join(sorted(c for c in set(letters) - set(ell) if letters.count(c) == 1))
    return ",".join(full) + "->" + out


def _sublist_spec(args: tuple) -> tuple[str, tuple]:
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as ``('ab,bc->ac', (a, b))``."""
    arrays, subs = args[0:-1:2], args[1::2]
    out = args[-1] if len(args) % 2 else None

    def word(sub) -> str:
        return "".join("..." if s is Ellipsis else string.ascii_letters[int(s)] for s in sub)

    spec = ",".join(word(s) for s in subs) + ("" if out is None else "->" + word(out))
    return spec, tuple(arrays)


def einsum(subscripts, *operands, optimize=False, **kwargs):
    """``numpy.einsum`` (string form); each operand's map is an einsum too, batched by a fresh
    letter, so a contraction never builds a dense Jacobian.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.einsum("ii->", a))(np.ones((2, 2)))
    array([[1., 0.],
           [0., 1.]])
    """
    if not isinstance(subscripts, str):  # (operand, sublist, ..., [output sublist])
        subscripts, operands = _sublist_spec((subscripts, *operands))
    if kwargs:
        raise unsupported(f"numpy.einsum with {', '.join(kwargs)}")
    spec = _einsum_spec(subscripts, [np.shape(o) for o in operands])
    return einsum_p(*operands, subscripts=spec)


def _numpy_operands(*xs) -> bool:
    """Whether every operand (a traced value's value) is a numpy array or number: a type
    test, not a value test."""
    return all(is_host(getattr(x, "value", x)) for x in xs)


def dot(a, b, out=None):
    if out is not None:
        raise unsupported("numpy.dot with out=")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return multiply_p(a, b)
    na, nb = np.ndim(a), np.ndim(b)
    if na <= 2 and nb <= 2:
        return matmul_p(a, b)
    if not _numpy_operands(a, b):
        # another library's arrays (the einsum rule runs on numpy only): matmul there
        if nb == 1:
            return matmul_p(a, b)
        shape_a, shape_b = tuple(np.shape(a)), tuple(np.shape(b))
        rows = reshape(a, (-1, shape_a[-1]))
        cols = reshape(moveaxis(b, -2, 0), (shape_b[-2], -1))
        return reshape(matmul_p(rows, cols), shape_a[:-1] + shape_b[:-2] + shape_b[-1:])
    # N-d: numpy sums one dot product per output entry, in an order matmul's does not share
    letters = string.ascii_letters
    sa = letters[:na - 1] + "Z"
    if nb == 1:
        return einsum_p(a, b, subscripts=f"{sa},Z->{sa[:-1]}", dot=True)
    sb = letters[na - 1:na + nb - 3] + "Z" + letters[na + nb - 3]
    return einsum_p(a, b, subscripts=f"{sa},{sb}->{sa[:-1]}{sb[:-2]}{sb[-1]}", dot=True)


def vdot(a, b):
    """``numpy.vdot`` of real arrays: the dot product of the flattened operands, summed as
    numpy sums it (one dot loop; a multiply then a sum rounded differently, in float16
    each product too)."""
    return matmul_p(ravel(a), ravel(b))


def inner(a, b):
    """``numpy.inner``, as numpy computes it: ``dot(a, b)`` with b's last axis moved next to
    last, so its sums round as numpy's do (a tensordot's einsum rounded about a third of
    random products differently in the last bit, campaign seed 2931)."""
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return multiply_p(a, b)
    return dot(a, b if np.ndim(b) == 1 else swapaxes(b, -1, -2))


def outer(a, b, out=None):
    """``outer(a, b)[i, j] = a.ravel()[i] * b.ravel()[j]``: a broadcast multiply.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.outer(a, [1.0, 2.0]).sum())(np.ones(2))
    array([3., 3.])
    """
    if out is not None:
        raise unsupported("numpy.outer with out=")
    return multiply_p(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2):
    """``numpy.tensordot`` as an einsum (its value numpy's own, bit for bit).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda a: np.tensordot(a, a))(np.eye(2))
    array([[2., 0.],
           [0., 2.]])
    """
    na, nb = np.ndim(a), np.ndim(b)
    if isinstance(axes, int | np.integer):
        ax_a, ax_b = list(range(na - int(axes), na)), list(range(int(axes)))
    else:
        ax_a, ax_b = (list(np.atleast_1d(ax)) for ax in axes)
    ax_a = [int(x) % na for x in ax_a]
    ax_b = [int(x) % nb for x in ax_b]
    letters = iter(string.ascii_letters)
    sa = [next(letters) for _ in range(na)]
    sb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b, strict=True):
        sb[j] = sa[i]
    out = [c for k, c in enumerate(sa) if k not in ax_a] + \
          [c for k, c in enumerate(sb) if k not in ax_b]
    spec = f"{''.join(sa)},{''.join(sb)}->{''.join(out)}"
    return einsum_p(a, b, subscripts=_einsum_spec(spec, [np.shape(a), np.shape(b)]),
                    axes=(tuple(ax_a), tuple(ax_b)))


# ----- numpy dispatch -----

add, subtract, multiply, divide, negative = add_p, subtract_p, multiply_p, divide_p, negative_p
positive = positive_p
sqrt, cbrt, square, reciprocal = sqrt_p, cbrt_p, square_p, reciprocal_p
exp, exp2, expm1, log, log2, log10, log1p = exp_p, exp2_p, expm1_p, log_p, log2_p, log10_p, log1p_p
sin, cos, tan, arcsin, arccos, arctan = sin_p, cos_p, tan_p, arcsin_p, arccos_p, arctan_p
sinh, cosh, tanh, arcsinh, arctanh = sinh_p, cosh_p, tanh_p, arcsinh_p, arctanh_p
sigmoid, softplus = sigmoid_p, softplus_p
true_divide = divide

for _ufunc, _fn in [
    (np.add, add_p), (np.subtract, subtract_p), (np.multiply, multiply_p),
    (np.true_divide, divide_p), (np.power, power), (np.negative, negative_p),
    (np.positive, positive_p), (np.matmul, matmul),
]:
    register_numpy(_ufunc, _fn)

for _fn, _impl in [
    (np.dot, dot), (np.vdot, vdot), (np.inner, inner), (np.outer, outer),
    (np.tensordot, tensordot), (np.einsum, einsum), (np.sum, sum), (np.mean, mean),
    (np.prod, prod), (np.cumsum, cumsum), (np.diff, diff), (np.reshape, reshape),
    (np.ravel, ravel), (np.squeeze, squeeze), (np.expand_dims, expand_dims),
    (np.transpose, transpose), (np.swapaxes, swapaxes), (np.moveaxis, moveaxis),
    (np.broadcast_to, broadcast_to), (np.concatenate, concatenate), (np.stack, stack),
    (np.hstack, hstack), (np.vstack, vstack), (np.take, take), (np.pad, pad),
]:
    register_numpy(_fn, _impl)

register_reduce(np.add, sum)
register_reduce(np.multiply, prod)

for _name, _fn in [
    ("getitem", getitem), ("reshape", reshape), ("transpose", transpose),
    ("swapaxes", swapaxes), ("sum", sum), ("mean", mean), ("prod", prod), ("dot", dot),
    ("astype", astype), ("squeeze", squeeze), ("ravel", ravel), ("cumsum", cumsum),
    ("__pow__", power_operator),
]:
    register_method(_name, _fn)

__all__ = [
    "add",
    "arccos",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctanh",
    "astype",
    "broadcast_to",
    "cbrt",
    "concatenate",
    "cos",
    "cosh",
    "cumsum",
    "diff",
    "divide",
    "dot",
    "einsum",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "getitem",
    "hstack",
    "inner",
    "log",
    "log1p",
    "log2",
    "log10",
    "log_softmax",
    "logsumexp",
    "matmul",
    "mean",
    "moveaxis",
    "multiply",
    "negative",
    "outer",
    "pad",
    "positive",
    "power",
    "prod",
    "ravel",
    "reciprocal",
    "reshape",
    "sigmoid",
    "sin",
    "sinh",
    "softmax",
    "softplus",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "stop_gradient",
    "subtract",
    "sum",
    "swapaxes",
    "take",
    "tan",
    "tanh",
    "tensordot",
    "transpose",
    "true_divide",
    "vdot",
    "vstack",
]
