"""Traced arrays: numpy-like values that record every operation into the current sweep.

Values are computed eagerly (the primal runs once, inside the rules), so a ``Tracer`` is a
numpy value plus the id of the node that produced it. Operators and numpy calls reach the
library through the dispatch tables in ``asd.primitive``; the engine never names a primitive.
"""

from __future__ import annotations

import numpy as np

from .errors import TracerBoolError
from .primitive import (
    FUNCTIONS,
    METHODS,
    UFUNC_ACCUMULATE,
    UFUNC_REDUCE,
    UFUNCS,
    Primitive,
    Traced,
    unsupported,
)


def _ufunc(uf):
    # When the table entry is a primitive and the other operand is a constant or from the
    # same sweep, go straight to the trace: operators are the hottest path of a program.
    def op(self, other):
        fn = UFUNCS.get(uf)
        if type(fn) is Primitive and (type(other) is not Tracer or other._trace is self._trace):
            return self._trace.apply(fn, (self, other), {})
        if fn is None:
            raise unsupported(f"numpy.{uf.__name__}")
        return fn(self, other)

    def rop(self, other):
        fn = UFUNCS.get(uf)
        if type(fn) is Primitive and type(other) is not Tracer:
            return self._trace.apply(fn, (other, self), {})
        if fn is None:
            raise unsupported(f"numpy.{uf.__name__}")
        return fn(other, self)

    return op, rop


def _method(name):
    def method(self, *args, **kwargs):
        fn = METHODS.get(name)
        if fn is None:
            raise unsupported(f"the array method .{name}()")
        return fn(self, *args, **kwargs)

    method.__name__ = name
    return method


def _value_of(x):
    return x.value if isinstance(x, Tracer) else x


# Functions that only read shape or dtype: they answer from the value, recording nothing.
METADATA = {
    np.shape: np.shape,
    np.ndim: np.ndim,
    np.size: np.size,
    np.result_type: np.result_type,
    np.zeros_like: np.zeros_like,
    np.ones_like: np.ones_like,
    np.empty_like: np.empty_like,
    np.full_like: np.full_like,
}


class Tracer(Traced):
    """A value in a sweep. Behaves like a read-only numpy array; Python branching on it raises."""

    __slots__ = ("_trace", "_id", "value")
    __array_priority__ = 1000

    def __init__(self, trace, node_id: int, value):
        self._trace, self._id, self.value = trace, node_id, value

    # ----- array attributes -----
    shape = property(lambda self: np.shape(self.value))
    dtype = property(lambda self: np.result_type(self.value))
    ndim = property(lambda self: np.ndim(self.value))
    size = property(lambda self: np.size(self.value))
    T = property(lambda self: METHODS["transpose"](self))
    mT = property(lambda self: METHODS["swapaxes"](self, -1, -2))

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Tracer(%{self._id}, {self.dtype.name}{list(self.shape)})"

    # ----- Python control flow is refused: it would ignore the direction at ties -----
    def __bool__(self):
        raise TracerBoolError(
            f"Python `if`/`while`/`bool()` on traced value %{self._id} {self.dtype.name}"
            f"{list(self.shape)}: a Python branch at a tie ignores the sweep direction and "
            "breaks the subgradient guarantee. Use asd.numpy.where(cond, a, b) or a library "
            "primitive (asd.relu, asd.maximum, asd.abs, ...), or write the function with "
            "@asd.branching."
        )

    def _concrete(self, kind):
        raise TracerBoolError(
            f"{kind}() of traced value %{self._id} would drop it from the program. Keep "
            "computing with asd.numpy, or wrap it in asd.stop_gradient(...) and take "
            ".value if the number is only for logging."
        )

    def __float__(self):
        self._concrete("float")

    def __int__(self):
        self._concrete("int")

    def __index__(self):
        self._concrete("operator.index")

    def item(self, *args):
        self._concrete("item")

    def tolist(self):
        self._concrete("tolist")

    def __array__(self, dtype=None, copy=None):
        raise TracerBoolError(
            f"traced value %{self._id} was converted to a plain numpy array (np.array, "
            "np.asarray or a C extension), which drops it from the program. Use asd.numpy "
            "(e.g. asd.numpy.stack instead of np.array([...]))."
        )

    # ----- numpy protocols -----
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if kwargs.get("out") is not None:
            raise unsupported(f"numpy.{ufunc.__name__} with out=")
        kwargs.pop("out", None)
        if method == "__call__":
            fn = UFUNCS.get(ufunc)
            if fn is not None:
                return fn(*inputs, **kwargs)
        elif method in ("reduce", "accumulate"):
            fn = (UFUNC_REDUCE if method == "reduce" else UFUNC_ACCUMULATE).get(ufunc)
            if fn is not None:
                return fn(*inputs, **kwargs)
        suffix = "" if method == "__call__" else f".{method}"
        raise unsupported(f"numpy.{ufunc.__name__}{suffix}")

    def __array_function__(self, func, types, args, kwargs):
        meta = METADATA.get(func)
        if meta is not None:
            return meta(*(_value_of(a) for a in args),
                        **{k: _value_of(v) for k, v in kwargs.items()})
        fn = FUNCTIONS.get(func)
        if fn is None:
            raise unsupported(f"numpy.{func.__name__}")
        return fn(*args, **kwargs)

    # ----- operators -----
    __add__, __radd__ = _ufunc(np.add)
    __sub__, __rsub__ = _ufunc(np.subtract)
    __mul__, __rmul__ = _ufunc(np.multiply)
    __truediv__, __rtruediv__ = _ufunc(np.true_divide)
    __pow__, __rpow__ = _ufunc(np.power)
    __matmul__, __rmatmul__ = _ufunc(np.matmul)
    __gt__, _ = _ufunc(np.greater)
    __ge__, _ = _ufunc(np.greater_equal)
    __lt__, _ = _ufunc(np.less)
    __le__, _ = _ufunc(np.less_equal)
    __eq__, _ = _ufunc(np.equal)
    __ne__, _ = _ufunc(np.not_equal)
    __hash__ = object.__hash__

    def __neg__(self):
        return UFUNCS[np.negative](self)

    def __pos__(self):
        return self

    def __abs__(self):
        return UFUNCS[np.absolute](self)

    __getitem__ = _method("getitem")
    reshape = _method("reshape")
    transpose = _method("transpose")
    swapaxes = _method("swapaxes")
    sum = _method("sum")
    mean = _method("mean")
    prod = _method("prod")
    max = _method("max")
    min = _method("min")
    dot = _method("dot")
    astype = _method("astype")
    squeeze = _method("squeeze")
    ravel = _method("ravel")
    flatten = _method("ravel")
    clip = _method("clip")
    cumsum = _method("cumsum")

    def __setitem__(self, key, value):
        raise TypeError(
            "traced arrays are immutable; build the result with asd.numpy.where, "
            "concatenate or stack instead of item assignment"
        )
