"""Norms: l1, l2, l-infinity, p-norms, Frobenius and the induced 1/inf matrix norms.

``sqrt(sum(x**2))`` is not Lipschitz-differentiable through ``sqrt`` at 0, so the l2 and
p-norms are primitives of their own: away from 0 the gradient is ``x / ||x||`` (scaled by a
power of two first, so neither the value nor the gradient overflows or underflows); at a zero
vector the branch the ray ``δd`` enters gives ``d / ||d||`` for the tangent ``d``, the gradient
of the norm at the tangent; if ``d = 0`` the exact series along the ray supply the direction
(0 if the vector stays 0). l1, l-infinity and the induced matrix norms are compositions of
``abs``, ``sum`` and ``max``, whose rules already decide every kink.

A zero row is a tie the rule states, not one it tests for: eagerly its tangent and, where that
is 0, its exact series are read on the host (`exact_where`); in a staged sweep (inside
``jax.jit``, where ``jnp.linalg.norm`` imports as this norm) the row's first-order term along
``v``, else ``w1``, … decides as array operations, and a row no direction moves is counted.
"""

from __future__ import annotations

import numpy as np

from asd.errors import NotLipschitzError, UndecidedTieError, UnsupportedError
from asd.extend import (
    Primitive,
    from_host,
    is_host,
    leading_vector,
    namespace,
    numpy_dtype,
    refuse_where,
    register_numpy,
    to_host,
)

from . import smooth
from .linalg import inv, svdvals_p
from .order import Layout, Ray, amax, amin, normalize_axes
from .piecewise import absolute
from .smooth import WeightedSum
from .spectral import exact_where, lex_tangents, reach, sweep_mode

# ----- p-norms, 1 < p < inf, as one primitive -----


def _scaled(rows, p: float):
    """``(rows / c, c)`` for a scale ``c > 0`` per row (1 for a zero row), so that the sums
    below neither overflow nor underflow, and ``c`` itself is finite.

    For ``p = 2``, ``c`` is twice the power of two ``2**(e-1) <= max |row| < 2**e``, built as
    ``2**(e-1) * 2`` in the division (``2**1024`` is not a float): the scaling is exact and
    every scaled entry is below 1. For other ``p``, ``c = max |row|``, so the largest term of
    ``sum |y|**p`` is exactly 1 and ``|y|**p`` cannot underflow to a zero norm for any ``p``
    (a power of two would leave ``0.5**p``, which is 0 beyond ``p = 1074``).
    """
    xp = namespace(rows)
    big = xp.max(xp.abs(rows), axis=-1, keepdims=True)
    big = xp.where(big > 0, big, xp.ones_like(big))
    if p != 2:
        return rows / big, big
    if is_host(rows):
        half = np.ldexp(np.ones_like(big, dtype=float), np.frexp(big.astype(float))[1] - 1)
        half = half.astype(rows.dtype)
    else:  # frexp is not in the array API; any power of two near the maximum scales exactly
        half = 2.0 ** xp.floor(xp.log2(big))
    return rows / half / 2.0, half


def _norm_and_gradient(rows, p: float):
    """Row norms (keepdims) and their gradients; a zero row gets norm 0 and gradient 0.

    The norm is ``root * c`` for the scale of `_scaled` (for ``p = 2`` as ``(root * 2) *
    2**(e-1)``): it overflows only where the norm itself does."""
    xp = namespace(rows)
    y, scale = _scaled(rows, p)
    if p == 2:
        s = xp.sum(y * y, axis=-1, keepdims=True)
        root = xp.sqrt(s)
        grad = y / xp.where(root > 0, root, xp.ones_like(root))
        return root * 2.0 * scale, grad
    a = xp.abs(y)
    s = xp.sum(a ** p, axis=-1, keepdims=True)
    root = s ** (1 / p)
    grad = xp.sign(y) * a ** (p - 1) / xp.where(root > 0, root, xp.ones_like(root)) ** (p - 1)
    return root * scale, grad


def _numpys_value(x: np.ndarray, value: np.ndarray, p: float, lay: Layout) -> np.ndarray:
    """The 2-norm of all of ``x`` as numpy computes it (``sqrt(x.ravel('K') @ x.ravel('K'))``,
    whose rounding differs from a pairwise sum of squares in the last bit) wherever that sum
    of squares is a normal float; elsewhere numpy's under- or overflows, and ``value`` (the
    scaled computation) is the norm."""
    if p != 2 or lay.outer != () or x.dtype.kind != "f" or x.size == 0:
        return value
    flat = x.ravel(order="K")
    with np.errstate(all="ignore"):
        sq = flat.dot(flat)
    if not (np.isfinite(sq) and sq >= np.finfo(sq.dtype).tiny):
        return value
    return np.sqrt(sq).astype(value.dtype).reshape(value.shape)


def _leading_direction(d: np.ndarray, flat: np.ndarray, ray: Ray) -> np.ndarray:
    """Rows that stay at 0 to first order (``flat``) move along ``δ^k c`` for the first order
    ``k`` with a nonzero coefficient vector ``c``; the norm's branch there is its gradient at
    ``c`` (0 if the row is 0 along the whole ray). Exact power series, degenerate rows only."""
    series = ray.series(np.broadcast_to(flat[..., None], d.shape))
    if series is None:
        return d
    d = d.copy()
    rows, out = series.reshape(-1, d.shape[-1]), d.reshape(-1, d.shape[-1])
    for r in np.flatnonzero(flat.reshape(-1)):
        c = leading_vector(list(rows[r]))
        if c is not None:
            out[r] = [float(e) for e in c]
    return out.reshape(d.shape)


def _kept_shape(shape: tuple, axis: tuple, keepdims: bool, outer: tuple) -> tuple:
    return tuple(1 if a in axis else n for a, n in enumerate(shape)) if keepdims else outer


def _pnorm_impl(x, p, axis, keepdims):
    if not is_host(x):
        lay = Layout(tuple(x.shape), axis)
        value, _ = _norm_and_gradient(lay.to_xp(x, namespace(x)), p)
        return namespace(x).reshape(value, _kept_shape(lay.shape, axis, keepdims, lay.outer))
    x = np.asarray(x)
    lay = Layout(x.shape, axis)
    if x.dtype == object:  # exact series along the ray (a tie's cone)
        out = _series_norms(lay.to(x), p)
        return out.reshape(_kept_shape(x.shape, axis, keepdims, lay.outer))
    value, _ = _norm_and_gradient(lay.to(x), p)
    value = _numpys_value(x, value, p, lay)
    out = value.reshape(_kept_shape(x.shape, axis, keepdims, lay.outer))
    return out.astype(np.result_type(x, np.float16), copy=False)


def _series_norms(rows: np.ndarray, p: float) -> np.ndarray:
    """Row norms of exact series (``|s|`` of a one-entry row, ``sqrt`` of a sum of squares,
    a sum or a maximum of absolute values): a row that vanishes at the point leaves it as
    its leading term's norm (`RaySeries.sqrt` at 0, one level of series). Other ``p`` have
    no power series here."""
    flat = rows.reshape(-1, rows.shape[-1])
    if (rows.shape[-1] == 1 and p > 0) or p == np.inf:  # |s|, exactly (no root to take)
        norms = [max(np.abs(r)) if r.size else 0.0 for r in flat]
    elif p == 2:
        norms = [np.sqrt(np.sum(r * r)) if r.size else 0.0 for r in flat]
    elif p == 1:
        norms = [np.sum(np.abs(r)) if r.size else 0.0 for r in flat]
    else:
        raise TypeError(f"the {p}-norm of exact series is not computed (p = 1, 2 or inf)")
    out = np.empty(len(norms), dtype=object)
    out[:] = norms
    return out.reshape(rows.shape[:-1] + (1,))


pnorm_p = Primitive("pnorm", _pnorm_impl, array_api=True)


def _at_zero_rows(x, dx, lay: Layout, zero, grad, p: float):
    """``grad`` (the rows' gradients, in the layout) with the branch gradient of the rows
    that are exactly 0 (``zero``): the gradient of the norm at the row's tangent ``d`` (at
    ``δd`` the norm is ``δ||d||``), or at the leading term of the exact series where ``d``
    is 0 too (`_exact_zero_rows`, eagerly). A staged sweep takes ``d`` along ``v`` where it
    is not 0 (the eager choice, bit for bit) and counts the rows it leaves open
    (`_staged_zero_rows`)."""
    mode = sweep_mode(dx)
    if mode:
        return _staged_zero_rows(dx, lay, zero, grad, p, mode)
    return exact_where(zero, lambda: _exact_zero_rows(x, dx, lay, zero, grad, p),
                       lambda: grad)


def _exact_zero_rows(x, dx, lay: Layout, zero, grad, p: float):
    """The eager zero rows, on host copies (as the maximum's tied rows are): the tangent of
    those rows only, and the exact series where it is 0 too."""
    host = is_host(x)
    dtype = np.result_type(x, np.float16) if host else numpy_dtype(x)
    zero = np.asarray(to_host(zero))
    need = np.broadcast_to(zero[..., None], lay.outer + (lay.size,))
    ray = Ray(lay, np.asarray(to_host(x)), dx)
    d = np.where(need, ray.tangent(need), 0.0)
    flat = zero & ~np.any(d, axis=-1)
    d = exact_where(flat, lambda: _leading_direction(d, flat, ray), lambda: d)
    _, at_d = _norm_and_gradient(d.astype(dtype), p)
    if host:
        return np.where(need, at_d, grad)
    return namespace(x).where(from_host(need, x), from_host(at_d, x, "like"), grad)


def _staged_zero_rows(dx, lay: Layout, zero, grad, p: float, mode: str):
    """The zero rows of a staged sweep, as array operations: a probe flags them (its values
    alone cannot tell the branch); a full sweep takes the gradient at the row's first-order
    term along ``v``, else along ``w1``, … (the first that is not 0: where it is ``v``'s, the
    eager choice bit for bit), and counts undecided the rows that no direction moves to first
    order, unless no input moves them at all (`reach` 0: their cotangent goes nowhere,
    whatever their gradient)."""
    def undecided():
        return UndecidedTieError("pnorm: a zero row with a zero tangent needs its exact series")

    xp = namespace(grad)
    if mode == "values":
        refuse_where(zero, undecided)
        return grad
    flat = zero
    for t in lex_tangents(dx):
        d = xp.astype(lay.to_xp(xp.asarray(t), xp), grad.dtype)
        moving = flat & xp.any(d != 0, axis=-1)
        _, at_d = _norm_and_gradient(d, p)
        grad = xp.where(moving[..., None], at_d, grad)
        flat = flat & ~moving
    moves = reach(dx)
    if moves is not None:
        flat = flat & xp.any(lay.to_xp(xp.asarray(moves), xp) != 0, axis=-1)
    refuse_where(flat, undecided)
    return grad


@pnorm_p.defrule
def pnorm_rule(xs, dxs, p, axis, keepdims):
    (x,) = xs
    if not is_host(x):
        return _pnorm_rule_xp(x, dxs[0], p, axis, keepdims)
    x = np.asarray(x)
    dtype = np.result_type(x, np.float16)
    lay = Layout(x.shape, axis)
    value, grad = _norm_and_gradient(lay.to(x), p)
    value = _numpys_value(x, value, p, lay)
    grad = _at_zero_rows(x, dxs[0], lay, value[..., 0] == 0, grad, p)
    ans = value.reshape(_kept_shape(x.shape, axis, keepdims, lay.outer))
    w = lay.back(grad.astype(dtype, copy=False))
    return ans.astype(dtype, copy=False), WeightedSum(w, axis, keepdims, x.shape, ans.shape)


def _pnorm_rule_xp(x, dx, p, axis, keepdims):
    """The rule on another library's arrays, on their device (a zero row eagerly on host
    copies, `_exact_zero_rows`)."""
    xp = namespace(x)
    lay = Layout(tuple(x.shape), axis)
    value, grad = _norm_and_gradient(lay.to_xp(x, xp), p)
    grad = _at_zero_rows(x, dx, lay, value[..., 0] == 0, grad, p)
    moved = xp.reshape(grad, lay.outer + lay.inner)
    w = xp.permute_dims(moved, tuple(int(i) for i in np.argsort(lay.perm)))
    ans = xp.reshape(value, _kept_shape(lay.shape, axis, keepdims, lay.outer))
    return ans, WeightedSum(w, axis, keepdims, lay.shape, tuple(ans.shape))


def pnorm(x, p: float = 2.0, axis=None, keepdims: bool = False):
    """``(sum |x|**p) ** (1/p)`` over ``axis`` (None: all entries) for ``p >= 1``.

    At a zero vector the subgradient is the gradient of the norm at the tangent ``d``
    (``d / ||d||`` for p = 2); when ``d = 0``, at the leading term of the exact series along
    the ray, and 0 if there is none.

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.pnorm, direction=np.array([3.0, -4.0]))(np.zeros(2))
    array([ 0.6, -0.8])
    >>> big = np.array([3.0, 4.0]) * 2.0 ** 600  # x * x overflows; the norm does not
    >>> bool(asd.pnorm(big) == 5 * 2.0 ** 600)
    True
    """
    p = float(p)
    if not p >= 1:
        raise UnsupportedError(
            f"pnorm with p = {p}: for p < 1 (s**(1/p) of sum |x|**p) the function is not a "
            "norm and is not Lipschitz at zeros; asd supports p >= 1"
        )
    axes = normalize_axes(axis, np.ndim(x))
    if p == 1:
        return smooth.sum(absolute(x), axis=axes, keepdims=keepdims)
    if p == np.inf:
        return amax(absolute(x), axis=axes, keepdims=keepdims)
    return pnorm_p(x, p=p, axis=axes, keepdims=bool(keepdims))


def l1_norm(x, axis=None, keepdims: bool = False):
    """``sum |x|``; at a zero entry the sign of its tangent decides.

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.l1_norm, direction=np.array([1.0, -1.0, 1.0]))(np.array([0.0, 0.0, -2.0]))
    array([ 1., -1., -1.])
    """
    return pnorm(x, 1.0, axis, keepdims)


def l2_norm(x, axis=None, keepdims: bool = False):
    """The Euclidean norm, stable for huge and tiny entries; ``d / ||d||`` at 0.

    >>> import numpy as np, asd
    >>> asd.l2_norm(np.array([[3.0, 4.0], [0.0, 0.0]]), axis=1)
    array([5., 0.])
    """
    return pnorm(x, 2.0, axis, keepdims)


def linf_norm(x, axis=None, keepdims: bool = False):
    """``max |x|``; ties go to the largest tangent of ``|x|``, then the first entry.

    >>> import numpy as np, asd
    >>> asd.subgrad(asd.linf_norm, direction=np.array([0.0, -1.0]))(np.array([2.0, -2.0]))
    array([ 0., -1.])
    """
    return pnorm(x, np.inf, axis, keepdims)


def frobenius_norm(x, axis=(-2, -1), keepdims: bool = False):
    """The Frobenius norm over two axes (default the last two): l2 of the entries.

    >>> import numpy as np, asd
    >>> float(asd.frobenius_norm(np.array([[1.0, 2.0], [2.0, 4.0]])))
    5.0
    """
    return pnorm(x, 2.0, axis, keepdims)


# ----- numpy.linalg.norm -----

def _matrix_norm(x, ord, axes: tuple[int, int], keepdims: bool):
    row, col = axes
    if ord in (None, "fro"):
        return pnorm(x, 2.0, axes, keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        # Induced norms: the extreme column (ord 1) or row (ord inf) absolute sum.
        inner, outer = (row, col) if ord in (1, -1) else (col, row)
        sums = smooth.sum(absolute(x), axis=inner, keepdims=True)
        pick = amax if ord in (1, np.inf) else amin
        out = pick(sums, axis=outer, keepdims=True)
        if keepdims:
            return out
        shape = tuple(n for a, n in enumerate(np.shape(x)) if a not in axes)
        return smooth.reshape(out, shape)
    if ord in (2, -2, "nuc"):
        return _singular_value_norm(x, ord, axes, keepdims)
    raise ValueError(f"invalid norm order {ord!r} for matrices")


def _singular_value_norm(x, ord, axes: tuple[int, int], keepdims: bool):
    """ord 2 / -2 / 'nuc': the largest, smallest or summed singular values of the matrices
    over ``axes`` (the other axes a stack, as numpy takes them), whose rule
    (`linalg.svdvals`) decides repeated and zero singular values along the ray."""
    nd = np.ndim(x)
    rest = tuple(a for a in range(nd) if a not in axes)
    s = svdvals_p(smooth.transpose(x, rest + axes) if rest + axes != tuple(range(nd)) else x)
    if ord == "nuc":
        out = smooth.sum(s, axis=-1)
    else:
        out = smooth.getitem(s, (Ellipsis, 0 if ord == 2 else -1))
    if keepdims:
        out = smooth.reshape(out, tuple(1 if a in axes else n for a, n in enumerate(np.shape(x))))
    return out


def _vector_norm(x, ord, axis: int, keepdims: bool):
    if ord is None:
        return pnorm(x, 2.0, axis, keepdims)
    if isinstance(ord, str):
        raise ValueError(f"invalid norm order {ord!r} for vectors")
    if ord == -np.inf:
        return amin(absolute(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        raise NotLipschitzError(
            "norm(ord=0) counts the nonzero entries: it is piecewise constant and jumps at "
            "every zero, so it has no subgradient. Use ord=1 as its convex surrogate."
        )
    if ord < 1:
        # (sum |x|**p) ** (1/p) for p < 1 (not a norm): smooth where no entry is 0; there
        # |x|**p has an infinite slope (0 < p < 1) or value (p < 0), and power refuses.
        p = float(ord)
        total = smooth.sum(smooth.power(absolute(x), p), axis=axis, keepdims=keepdims)
        return smooth.power(total, 1.0 / p)
    return pnorm(x, ord, axis, keepdims)


def norm(x, ord=None, axis=None, keepdims: bool = False):
    """``numpy.linalg.norm`` on traced arrays, with a correct subgradient at every kink.

    Vector norms: ord in {None, 2, 1, inf, -inf} or any p >= 1 (p < 1, p != 0, away from zero
    entries, where ``|x|**p`` is not Lipschitz: refused there); matrix norms (two axes, or a
    2-D array with ``axis=None`` and ``ord`` given): 'fro', 1, -1, inf, -inf, and through the
    singular values 2, -2, 'nuc'. ``ord=None``
    with ``axis=None`` is the l2 norm of all entries, as in numpy.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.linalg.norm(x), direction=np.array([0.0, 2.0]))(np.zeros(2))
    array([0., 1.])
    >>> float(asd.norm(np.array([[1.0, -2.0], [3.0, 4.0]]), ord=1))
    6.0
    """
    nd = np.ndim(x)
    if axis is None:
        if ord is None:
            return pnorm(x, 2.0, None, keepdims)
        if nd == 1:
            return _vector_norm(x, ord, 0, keepdims)
        if nd == 2:
            return _matrix_norm(x, ord, (0, 1), keepdims)
        raise ValueError("improper number of dimensions to norm: give axis for ord with "
                         f"a {nd}-D array")
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    axes = tuple(int(a) % nd for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) == 2 and axes[0] != axes[1]:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"improper axis {axis!r} for norm: one axis (vector) or two (matrix)")


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """``numpy.linalg.vector_norm``: the entries over ``axis`` (None: all; a tuple: several)
    read as one vector per slice, as numpy does.

    >>> import numpy as np, asd
    >>> float(np.linalg.vector_norm(np.array([[3.0, 0.0], [0.0, 4.0]])))
    5.0
    """
    nd = np.ndim(x)
    axes = tuple(range(nd)) if axis is None else normalize_axes(axis, nd)
    rest = tuple(a for a in range(nd) if a not in axes)
    flat = smooth.reshape(smooth.transpose(x, rest + axes),
                          tuple(np.shape(x)[a] for a in rest) + (-1,))
    out = norm(flat, ord, axis=-1)
    if keepdims:
        out = smooth.reshape(out, tuple(1 if a in axes else n for a, n in enumerate(np.shape(x))))
    return out


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """``numpy.linalg.matrix_norm``: `norm` over the last two axes."""
    return norm(x, ord, axis=(-2, -1), keepdims=keepdims)


def cond(x, p=None):
    """``numpy.linalg.cond``: ``σ_max / σ_min`` for p in (None, 2), ``σ_min / σ_max`` for -2,
    else ``norm(x, p) norm(inv(x), p)``; refused where ``x`` is singular (``inv``), and
    through the singular values where ``σ_min = 0`` gives inf.

    >>> import numpy as np, asd
    >>> asd.subgrad(np.linalg.cond)(np.diag([4.0, 2.0]))
    array([[ 0.5,  0. ],
           [ 0. , -1. ]])
    """
    if p is None or p in (2, -2):
        s = svdvals_p(x)
        big, small = smooth.getitem(s, (Ellipsis, 0)), smooth.getitem(s, (Ellipsis, -1))
        return smooth.divide(small, big) if p == -2 else smooth.divide(big, small)
    return smooth.multiply(norm(x, p, axis=(-2, -1)), norm(inv(x), p, axis=(-2, -1)))


register_numpy(np.linalg.norm, norm)
register_numpy(np.linalg.vector_norm, vector_norm)
register_numpy(np.linalg.matrix_norm, matrix_norm)
register_numpy(np.linalg.cond, cond)

__all__ = ["cond", "frobenius_norm", "l1_norm", "l2_norm", "linf_norm", "matrix_norm", "norm",
           "pnorm", "vector_norm"]
