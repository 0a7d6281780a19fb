"""Smooth primitives: arithmetic, elementwise functions, reductions, structure, contraction.

Rules sit right under their primal. Multi-input rules return a ``FanIn`` with one map per
input; broadcasting is handled by ``Diagonal`` (it knows the input and output shapes).
"""

from __future__ import annotations

import numpy as np

from asd.errors import NotLipschitzError
from asd.extend import (
    Diagonal,
    FanIn,
    Index,
    MatMul,
    Primitive,
    Reshape,
    Sum,
    Transpose,
    defsmooth,
    deflinear,
    identity,
    is_traced,
    register_method,
    register_numpy,
    register_reduce,
    unsupported,
)


def shape_of(x) -> tuple:
    return np.shape(x)


# ----- Binary arithmetic (broadcasting) -----

add_p = Primitive("add", np.add)


@add_p.defrule
def add_rule(xs, dxs):
    a, b = xs
    ans = np.add(a, b)
    out = np.shape(ans)
    return ans, FanIn(Diagonal(None, shape_of(a), out), Diagonal(None, shape_of(b), out))


subtract_p = Primitive("subtract", np.subtract)


@subtract_p.defrule
def subtract_rule(xs, dxs):
    a, b = xs
    ans = np.subtract(a, b)
    out = np.shape(ans)
    return ans, FanIn(Diagonal(None, shape_of(a), out), Diagonal(-1.0, shape_of(b), out))


multiply_p = Primitive("multiply", np.multiply)


@multiply_p.defrule
def multiply_rule(xs, dxs):
    a, b = xs
    ans = np.multiply(a, b)
    out = np.shape(ans)
    return ans, FanIn(Diagonal(b, shape_of(a), out), Diagonal(a, shape_of(b), out))


divide_p = Primitive("divide", np.true_divide)


@divide_p.defrule
def divide_rule(xs, dxs):
    a, b = xs
    ans = np.true_divide(a, b)
    out = np.shape(ans)
    return ans, FanIn(Diagonal(1.0 / np.asarray(b), shape_of(a), out),
                      Diagonal(-ans / b, shape_of(b), out))


def power(x, y):
    """``x ** y``: integer exponents get the exact polynomial rule; constant reals check 0."""
    if is_traced(y):
        return pow_p(x, y)
    if isinstance(y, int | np.integer) or (np.ndim(y) == 0 and float(y).is_integer()):
        return integer_pow_p(x, n=int(y))
    if np.ndim(y) == 0:
        return real_pow_p(x, p=float(y))
    return pow_p(x, y)


integer_pow_p = Primitive("integer_pow", lambda x, n: np.power(x, n))


@integer_pow_p.defrule
def integer_pow_rule(xs, dxs, n):
    (x,) = xs
    ans = np.power(x, n) if n >= 0 else np.power(np.asarray(x, dtype=float), n)
    slope = n * np.power(x, n - 1) if n not in (0, 1) else np.full(np.shape(x), float(n))
    return ans, Diagonal(slope, shape_of(x))


real_pow_p = Primitive("real_pow", lambda x, p: np.power(x, p))


@real_pow_p.defrule
def real_pow_rule(xs, dxs, p):
    (x,) = xs
    ans = np.power(x, p)
    if p < 1 and np.any(np.asarray(x) == 0):
        raise NotLipschitzError(
            f"x ** {p} is not Lipschitz at x = 0 (infinite slope) and the input has exact "
            "zeros. For a norm write asd.norm(v) instead of sqrt(sum(v**2)); otherwise keep "
            "the input away from 0."
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = p * np.power(x, p - 1) if p != 1 else np.ones(np.shape(x))
    return ans, Diagonal(slope, shape_of(x))


pow_p = Primitive("power", np.power)


@pow_p.defrule
def pow_rule(xs, dxs):
    a, b = xs
    ans = np.power(a, b)
    out = np.shape(ans)
    with np.errstate(divide="ignore", invalid="ignore"):
        da = b * np.power(a, np.asarray(b) - 1)
        db = ans * np.log(a) if not getattr(dxs[1], "is_zero", False) else 0.0
    return ans, FanIn(Diagonal(da, shape_of(a), out), Diagonal(db, shape_of(b), out))


# ----- Unary elementwise -----

negative_p = deflinear("negative", np.negative, lambda i, o: Diagonal(-1.0, i, o))


def _sqrt_derivative(x, ans):
    if np.any(np.asarray(x) == 0):
        raise NotLipschitzError(
            "sqrt is not Lipschitz at 0 (infinite slope) and the input has exact zeros. For "
            "a Euclidean norm use asd.norm(v), whose rule is correct at 0; for sqrt(x**2) use "
            "asd.abs(x)."
        )
    return 0.5 / ans


sqrt_p = defsmooth("sqrt", np.sqrt, _sqrt_derivative, numpy=np.sqrt)
log_p = defsmooth("log", np.log, lambda x, ans: 1.0 / np.asarray(x), numpy=np.log)


# ----- Casting and stopping -----

stop_gradient_p = Primitive("stop_gradient", lambda x: x, stops_gradient=True)


def stop_gradient(x):
    """Treat ``x`` as a constant: no tangent or cotangent flows through it."""
    return stop_gradient_p(x) if is_traced(x) else x


def astype(x, dtype, copy=True):
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        raise unsupported(f"astype({dtype}) (a cast to a discrete type)")
    return cast_p(x, dtype=dtype)


cast_p = deflinear("cast", lambda x, dtype: np.asarray(x).astype(dtype),
                   lambda i, o, dtype: identity(i))


# ----- Reductions -----

def _sum_impl(x, axis=None, keepdims=False):
    return np.sum(x, axis=axis, keepdims=keepdims)


sum_p = deflinear("sum", _sum_impl, lambda i, o, axis=None, keepdims=False: Sum(axis, keepdims,
                                                                                    i, o))


def sum(x, axis=None, dtype=None, out=None, keepdims=False, **kwargs):  # noqa: A001
    if out is not None or kwargs:
        raise unsupported(f"numpy.sum with {', '.join(['out'] * (out is not None) + list(kwargs))}")
    if isinstance(axis, list):
        axis = tuple(axis)
    r = sum_p(x, axis=axis, keepdims=bool(keepdims))
    return r if dtype is None else astype(r, dtype)


def mean(x, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    shape = np.shape(x)
    axes = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    count = int(np.prod([shape[a] for a in axes]))
    return sum(x, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs) * (1.0 / count)


# ----- Structure -----

def _reshape_impl(x, shape):
    return np.reshape(x, shape)


reshape_p = deflinear("reshape", _reshape_impl, lambda i, o, shape: Reshape(i, o))


def reshape(x, *shape, order="C", **kwargs):
    if order != "C":
        raise unsupported(f"reshape with order={order!r}")
    if "newshape" in kwargs:
        shape = (kwargs.pop("newshape"),)
    if "shape" in kwargs:
        shape = (kwargs.pop("shape"),)
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    full = np.empty(np.shape(x), dtype=bool).reshape(shape).shape
    return reshape_p(x, shape=full)


transpose_p = deflinear("transpose", lambda x, axes: np.transpose(x, axes),
                        lambda i, o, axes: Transpose(axes, i))


def transpose(x, *axes):
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], tuple | list)):
        axes = axes[0]
    nd = np.ndim(x)
    axes = tuple(range(nd))[::-1] if not axes else tuple(int(a) % nd for a in axes)
    return transpose_p(x, axes=axes)


def swapaxes(x, axis1, axis2):
    axes = list(range(np.ndim(x)))
    axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
    return transpose_p(x, axes=tuple(axes))


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


getitem_p = deflinear("getitem", lambda x, index: np.asarray(x)[index],
                      lambda i, o, index: Index(index, i, o))


def getitem(x, index):
    if isinstance(index, list):
        index = np.asarray(index)
    return getitem_p(x, index=_check_static_index(index))


# ----- Contraction -----

matmul_p = Primitive("matmul", np.matmul)


@matmul_p.defrule
def matmul_rule(xs, dxs):
    a, b = xs
    a, b = np.asarray(a), np.asarray(b)
    ans = np.matmul(a, b)
    out = np.shape(ans)
    return ans, FanIn(MatMul(b, "a", a.shape, b.shape, out), MatMul(a, "b", a.shape, b.shape, out))


def matmul(a, b, **kwargs):
    if kwargs:
        raise unsupported(f"numpy.matmul with {', '.join(kwargs)}")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        raise ValueError("matmul: input operand does not have enough dimensions (use *)")
    return matmul_p(a, b)


def dot(a, b, out=None):
    if out is not None:
        raise unsupported("numpy.dot with out=")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return multiply_p(a, b)
    if np.ndim(b) > 2:
        raise unsupported("numpy.dot with an operand of more than 2 dimensions (use einsum)")
    return matmul_p(a, b)


# ----- numpy dispatch -----

register_numpy(np.add, add_p)
register_numpy(np.subtract, subtract_p)
register_numpy(np.multiply, multiply_p)
register_numpy(np.true_divide, divide_p)
register_numpy(np.power, power)
register_numpy(np.negative, negative_p)
register_numpy(np.matmul, matmul)
register_numpy(np.dot, dot)
register_numpy(np.sum, sum)
register_numpy(np.mean, mean)
register_numpy(np.reshape, reshape)
register_numpy(np.transpose, transpose)
register_numpy(np.swapaxes, swapaxes)
register_reduce(np.add, sum)

register_method("getitem", getitem)
register_method("reshape", reshape)
register_method("transpose", transpose)
register_method("swapaxes", swapaxes)
register_method("sum", sum)
register_method("mean", mean)
register_method("dot", dot)
register_method("astype", astype)

add, subtract, multiply, divide, negative = add_p, subtract_p, multiply_p, divide_p, negative_p
sqrt, log = sqrt_p, log_p

__all__ = [
    "add", "astype", "divide", "dot", "getitem", "log", "matmul", "mean", "multiply",
    "negative", "power", "reshape", "sqrt", "stop_gradient", "subtract", "sum", "swapaxes",
    "transpose",
]
