"""Statistics: variance, standard deviation, weighted averages, covariance, correlation, range.

Most of these are compositions of primitives whose rules already decide every kink, so they
inherit the tie contract instead of restating it:

- ``var`` is a polynomial (smooth everywhere, zero variance included);
- ``std(x) = ||x - mean(x)|| / sqrt(n - ddof)`` goes through the l2 norm (`norms.pnorm`),
  which is Lipschitz at 0 and returns the gradient of the norm at the direction there: at zero
  variance the limiting gradient along ``v`` is ``(v - mean v) / (||v - mean v|| sqrt(n))``,
  exactly, and a direction with ``v - mean v = 0`` goes on to the exact series;
- ``ptp = max - min``: each tie is decided along the ray by the max and min rules;
- ``average`` and ``cov`` are rational/polynomial in their inputs.

``corrcoef`` is the one primitive here: ``C_ij / sqrt(C_ii C_jj)`` of the covariance. It is
smooth where every variance is positive and not even continuous where one is 0 (it jumps
between -1 and 1 nearby), so its rule refuses there with `NotLipschitzError`.
"""

from __future__ import annotations

import numpy as np

from asd.errors import NotLipschitzError, ShapeError
from asd.extend import (
    Closure,
    Primitive,
    device,
    from_host,
    is_host,
    is_traced,
    namespace,
    numpy_dtype,
    read_value,
    refuse_where,
    register_numpy,
    to_host,
    unsupported,
)

from . import smooth
from .norms import pnorm_rule
from .order import amax, amin, normalize_axes
from .smooth import WeightedSum


def _value(x) -> np.ndarray:
    """The numbers behind ``x``, traced or not, on the host (for error messages)."""
    return to_host(x.value if is_traced(x) else x)


def _refuse(value, bad, error) -> None:
    """numpy's check of an argument, made while tracing: raise ``error()`` where the mask
    ``bad(v)`` (``v`` the value, in its array library) holds anywhere. Eagerly the value is
    read as a guard (`read_value`: a compiled replay re-checks it); a staged sweep (inside
    ``jax.jit``) reads no value: it counts the entries undecided for the node that made the
    value (its probe flags them), as `refuse_where` does inside a rule."""
    trace = value._trace if is_traced(value) else None
    if trace is not None and trace.staged:
        mask = bad(value.value)
        if trace.staged == "values":
            trace.flag_tie(value._id, mask)
        else:
            trace.count_undecided(value._id, mask)
        return
    if read_value(value, lambda v: bool(np.any(bad(to_host(v))))):
        raise error()


def _count(shape: tuple, axes: tuple) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _reject(name: str, **kwargs) -> None:
    given = [k for k, v in kwargs.items() if v is not None]
    if given:
        raise unsupported(f"numpy.{name} with {', '.join(given)}")


def _centered(x, axes: tuple):
    return smooth.subtract(x, smooth.mean(x, axis=axes, keepdims=True))


# ----- variance and standard deviation -----

def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
    """``sum((x - mean x)**2) / (n - ddof)`` over ``axis``, with numpy's operations in
    numpy's order (`_deviations`), so the value is numpy's bit for bit: a polynomial, smooth
    everywhere.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.var(x))(np.array([1.0, 2.0, 3.0]))
    array([-0.66666667,  0.        ,  0.66666667])
    """
    _reject("var", out=out, where=where, mean=mean, correction=correction)
    x, axes, d = _deviations(a, axis, dtype)
    total = smooth.sum(smooth.multiply(d, d), axis=axes, keepdims=bool(keepdims))
    return _per_degree(total, _count(np.shape(x), axes) - ddof)


def _deviations(a, axis, dtype):
    """``(x, axes, x - mean x)`` as numpy's var computes them: the mean is the sum divided
    by the count in the accumulation dtype (a float16 argument stays float16 here, unlike
    `numpy.mean`), subtracted with keepdims."""
    x = a if dtype is None else smooth.astype(a, dtype)
    axes = normalize_axes(axis, np.ndim(x))
    dt = np.result_type(numpy_dtype(x.value if is_traced(x) else x), np.float16)
    x = x if dt == numpy_dtype(x.value if is_traced(x) else x) else smooth.astype(x, dt)
    total = smooth.sum(x, axis=axes, keepdims=True)
    mean = smooth.divide_by_count(total, _count(np.shape(x), axes), dt)
    return x, axes, smooth.subtract(x, mean)


def _per_degree(total, n: int):
    """``total / n`` as numpy divides (``n <= 0``, ddof too large: by ``max(n, 0)``, which
    gives inf or NaN as numpy does)."""
    dt = np.result_type(numpy_dtype(total.value if is_traced(total) else total), np.float16)
    if n > 0:
        return smooth.divide_by_count(total, n, dt)
    return smooth.multiply(total, _inverse(n, dt))


def _inverse(n, dtype) -> np.ndarray:
    """``1 / n`` in the result's float type (``dtype``: numpy's name of the argument's dtype,
    `asd.extend.numpy_dtype`); ``n <= 0`` (ddof too large) gives inf as numpy."""
    return np.asarray(1.0 / n if n > 0 else np.inf, dtype=np.result_type(dtype, np.float16))


def _std_impl(d, axes, keepdims, n):
    """numpy's std of the deviations ``d``: ``sqrt(sum(d * d) / n)``, the same operations
    in the same order as `numpy.std` (so its value, bit for bit)."""
    xp = namespace(d)
    total = xp.sum(d * d, axis=axes, keepdims=keepdims)
    if n > 0:
        return xp.sqrt(total / xp.asarray(n, dtype=total.dtype))
    return xp.sqrt(total * xp.asarray(np.inf, dtype=total.dtype))


std_p = Primitive("std", lambda d, axes, keepdims, n: _std_impl(
    np.asarray(d) if is_host(d) else d, axes, keepdims, n), array_api=True)


@std_p.defrule
def std_rule(xs, dxs, axes, keepdims, n):
    """The l2 norm's rule of the deviations (`pnorm_rule`: at zero variance the gradient of
    the norm at the tangent, or at the exact series' leading term) scaled by
    ``1 / sqrt(n)``, with numpy's value."""
    (d,) = xs
    _, lin = pnorm_rule(xs, dxs, p=2.0, axis=axes, keepdims=keepdims)
    scale = np.sqrt(_inverse(n, numpy_dtype(d)))
    return std_p.impl(d, axes, keepdims, n), WeightedSum(
        lin.w * scale, lin.axes, lin.keepdims, lin.in_shape, lin.out_shape)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None):
    """``||x - mean x|| / sqrt(n - ddof)`` over ``axis``, through the l2 norm's rule, with
    numpy's value (``sqrt(var)``, `std_p`).

    At zero variance (all entries equal) the norm's rule gives the limiting gradient along the
    direction ``v``: ``(v - mean v) / (||v - mean v|| sqrt(n - ddof))``.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.std(x), direction=np.array([2.0, 0.0]))(np.ones(2))
    array([ 0.5, -0.5])
    """
    _reject("std", out=out, where=where, mean=mean, correction=correction)
    x, axes, d = _deviations(a, axis, dtype)
    return std_p(d, axes=axes, keepdims=bool(keepdims), n=_count(np.shape(x), axes) - ddof)


# ----- weighted averages -----

def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """``sum(w * a) / sum(w)`` over ``axis`` (``mean`` without weights), as ``numpy.average``.

    Smooth in ``a`` and ``w`` where the weights do not sum to 0 (numpy refuses that point).

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda w: np.average(np.array([1.0, 3.0]), weights=w))(np.array([1.0, 1.0]))
    array([-0.5,  0.5])
    """
    nd = np.ndim(a)
    axes = normalize_axes(axis, nd)
    if weights is None:
        avg = smooth.mean(a, axis=axes, keepdims=bool(keepdims))
        if not returned:
            return avg
        scl = np.asarray(_count(np.shape(a), axes), np.result_type(numpy_dtype(a), np.float16))
        raw = a.value if is_traced(a) else a
        scl = np.broadcast_to(scl, np.shape(avg))
        return avg, (scl if is_host(raw) else from_host(scl, raw))
    w = weights
    if np.shape(w) != np.shape(a):
        if axis is None:
            raise ShapeError("average: axis must be given when the weights' shape "
                             f"{np.shape(w)} differs from a's {np.shape(a)}")
        if np.ndim(w) != 1 or len(axes) != 1 or np.shape(w)[0] != np.shape(a)[axes[0]]:
            raise ShapeError(f"average: weights of shape {np.shape(w)} must have a's shape "
                             f"{np.shape(a)} or be 1-D of the length of axis {axis}")
        w = smooth.reshape(w, tuple(-1 if i == axes[0] else 1 for i in range(nd)))
        w = smooth.broadcast_to(w, np.shape(a))
    scl = smooth.sum(w, axis=axes, keepdims=bool(keepdims))
    _refuse(scl, lambda v: v == 0, lambda: ZeroDivisionError(
        "average: the weights sum to zero along the axis, so the average is not defined; "
        "give weights with a nonzero sum"))
    avg = smooth.divide(smooth.sum(smooth.multiply(a, w), axis=axes, keepdims=bool(keepdims)),
                        scl)
    return (avg, scl) if returned else avg


# ----- covariance and correlation -----

def _not_counts(v):
    """Where frequency weights are not nonnegative integers (numpy.cov's requirement)."""
    return (v != namespace(v).round(v)) | (v < 0)


def _observations(m, y, rowvar: bool):
    """The variables as the rows of a 2-D array (numpy.cov's layout), ``y`` appended."""
    rows = []
    for z in (m, y):
        if z is None:
            continue
        if np.ndim(z) > 2:
            raise ShapeError(f"cov: m and y have at most 2 dimensions, got shape {np.shape(z)}")
        z = smooth.reshape(z, (1, -1)) if np.ndim(z) < 2 else z
        if not rowvar and np.shape(z)[0] != 1:
            z = smooth.transpose(z)
        rows.append(z)
    return rows[0] if len(rows) == 1 else smooth.concatenate(rows, axis=0)


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """``numpy.cov``: ``(X - avg) W (X - avg).T / fact`` with numpy's weights and ``ddof``.

    Polynomial in ``m`` and ``y`` (rational in traced ``aweights``): smooth everywhere,
    including at zero variance.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.cov(x, np.array([1.0, 2.0, 4.0]))[0, 1])(np.zeros(3))
    array([-0.66666667, -0.16666667,  0.83333333])
    """
    X = _observations(m, y, rowvar)
    if dtype is not None:
        X = smooth.astype(X, dtype)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        _refuse(fweights, _not_counts,
                lambda: ValueError("cov: fweights must be nonnegative integers"))
        w = fweights
    if aweights is not None:
        _refuse(aweights, lambda v: v < 0, lambda: ValueError("cov: aweights must be nonnegative"))
        w = aweights if w is None else smooth.multiply(w, aweights)
    n = np.shape(X)[1]
    if w is None:
        avg = smooth.mean(X, axis=1, keepdims=True)
        fact = n - ddof
    else:
        if np.shape(w) != (n,):
            raise ShapeError(f"cov: weights need shape ({n},) (one per observation), got "
                             f"{np.shape(w)}")
        w_sum = smooth.sum(w)
        _refuse(w_sum, lambda v: v == 0, lambda: ZeroDivisionError(
            "cov: the weights sum to zero; give weights with a nonzero sum"))
        avg = smooth.divide(smooth.sum(smooth.multiply(X, w), axis=1, keepdims=True), w_sum)
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = smooth.subtract(w_sum, ddof)
        else:
            fact = smooth.subtract(w_sum, smooth.divide(
                smooth.multiply(ddof, smooth.sum(smooth.multiply(w, aweights))), w_sum))
    _refuse(fact, lambda v: v <= 0, lambda: ValueError(
        f"cov: the degrees of freedom are {float(_value(fact))} <= 0 (ddof {ddof} for {n} "
        "observations); lower ddof or add observations"))
    Xc = smooth.subtract(X, avg)
    Xw = Xc if w is None else smooth.multiply(Xc, w)
    c = smooth.divide(smooth.matmul(Xc, smooth.transpose(Xw)), fact)
    return smooth.squeeze(c)


def _float(C):
    """``C`` as floats (numpy's at least float16), in its own library."""
    return np.asarray(C, dtype=np.result_type(C, np.float16)) if is_host(C) else C


def _correlation_impl(C):
    C = _float(C)
    s = namespace(C).sqrt(namespace(C).linalg.diagonal(C))
    return C / s[..., :, None] / s[..., None, :]


correlation_p = Primitive("correlation", _correlation_impl, array_api=True)


@correlation_p.defrule
def correlation_rule(xs, dxs):
    """``R = C / (s s.T)``, ``s = sqrt(diag C)``; ``dR = dC / (s s.T) - R (g_i + g_j) / 2`` with
    ``g = diag(dC) / diag(C)``."""
    C = _float(xs[0])
    xp = namespace(C)
    d = xp.linalg.diagonal(C)
    refuse_where(~(d > 0), lambda: _zero_variance(to_host(d)))
    s = xp.sqrt(d)
    outer = s[:, None] * s[None, :]
    R = C / outer
    eye = xp.eye(d.shape[0], dtype=C.dtype, device=device(C))

    def push(t):
        g = namespace(t).linalg.diagonal(t) / d
        return t / outer - 0.5 * R * (g[..., :, None] + g[..., None, :])

    def pull(ct):
        xq = namespace(ct)
        cr = ct * R
        diag = -0.5 * (xq.sum(cr, axis=-1) + xq.sum(cr, axis=-2)) / d
        return ct / outer + diag[..., :, None] * eye

    return R, Closure(push, pull, tuple(C.shape), tuple(C.shape))


def _zero_variance(d: np.ndarray) -> NotLipschitzError:
    bad = ~(d > 0)
    return NotLipschitzError(
        f"corrcoef: variable(s) {np.flatnonzero(bad).tolist()} have variance "
        f"{d[bad].tolist()}; the correlation C_ij / sqrt(C_ii C_jj) is undefined there and "
        "jumps between -1 and 1 nearby (not Lipschitz). Drop constant variables, add noise, "
        "or differentiate np.cov instead.")


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """Pearson correlation coefficients (``numpy.corrcoef``): smooth where every variance is
    positive; a zero variance raises `NotLipschitzError` naming the variable.

    >>> import numpy as np, asd
    >>> g = asd.subgrad(lambda x: np.corrcoef(x, np.array([1.0, 2.0, 4.0]))[0, 1])
    >>> g(np.array([0.0, 2.0, 1.0])).round(6)
    array([-0.272772, -0.272772,  0.545545])
    """
    c = cov(x, y, rowvar, dtype=dtype)
    if np.ndim(c) == 0:
        return smooth.divide(c, c)
    return correlation_p(c)


# ----- range -----

def ptp(a, axis=None, out=None, keepdims=False):
    """``max - min`` over ``axis``; ties of either are decided along the ray by their rules.

    >>> import numpy as np, asd
    >>> asd.subgrad(lambda x: np.ptp(x), direction=np.array([1.0, 0.0, -1.0]))(np.zeros(3))
    array([ 1.,  0., -1.])
    """
    _reject("ptp", out=out)
    return smooth.subtract(amax(a, axis=axis, keepdims=keepdims),
                           amin(a, axis=axis, keepdims=keepdims))


for _fn, _impl in [(np.var, var), (np.std, std), (np.average, average), (np.cov, cov),
                   (np.corrcoef, corrcoef), (np.ptp, ptp)]:
    register_numpy(_fn, _impl)

__all__ = ["average", "corrcoef", "cov", "ptp", "std", "var"]
