"""The straight-line program: plain data, nodes in topological order, printable, re-callable."""

from __future__ import annotations

from typing import Any

import numpy as np

from asd.core import backend
from asd.core.primitive import Primitive, Traced, bind, numpy_only
from asd.errors import NonFiniteError, ShapeError
from asd.tree import TreeDef, flatten, unflatten


class Literal:
    """A constant operand (closed-over weights, Python numbers) stored in a node."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        v = self.value
        if np.ndim(v) == 0 and not isinstance(v, slice | tuple):
            return repr(v.item() if hasattr(v, "item") else v)
        if isinstance(v, np.ndarray):
            return f"const {type_str(v.shape, v.dtype)}"
        return repr(v)


class Node:
    """One equation ``%k = prim args params`` of a program."""

    __slots__ = ("prim", "args", "params", "shape", "dtype", "active")

    def __init__(self, prim: Primitive | None, args: tuple, params: dict, shape, dtype, active):
        self.prim, self.args, self.params = prim, args, params
        self.shape, self.dtype, self.active = shape, dtype, active

    @property
    def name(self) -> str:
        return "input" if self.prim is None else self.prim.name


def type_str(shape, dtype) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:  # another library's dtype (torch.float32)
        name = str(dtype).rsplit(".", 1)[-1]
    return f"{name}[{','.join(map(str, shape))}]"


def format_param(v) -> str:
    if isinstance(v, np.ndarray):
        return f"const {type_str(v.shape, v.dtype)}"
    return repr(v)


def format_node(k: int, node: Node) -> str:
    """``%3 = relu %2`` (with parameters and the output type)."""
    if node.prim is None:
        return f"%{k} = input {type_str(node.shape, node.dtype)}"
    args = ", ".join(f"%{a}" if isinstance(a, int) else repr(a) for a in node.args)
    params = " ".join(f"{key}={format_param(v)}" for key, v in node.params.items())
    return f"%{k} = {node.name} {args}{' ' + params if params else ''}"


class Program:
    """A traced function as a straight-line graph; call it to re-evaluate at new inputs.

    >>> import asd, numpy as np
    >>> p = asd.trace(lambda x: asd.relu(x) - asd.relu(-x))(np.zeros(3))
    >>> print(p)  # doctest: +NORMALIZE_WHITESPACE
    program(%0: float64[3]) {
      %1 = relu %0
      %2 = negative %0
      %3 = relu %2
      %4 = subtract %1, %3
      return %4
    }
    >>> p(np.array([1.0, -2.0, 0.0]))
    array([ 1., -2.,  0.])
    """

    def __init__(self, nodes: list[Node], inputs: list[int], in_tree: TreeDef,
                 outputs: list, out_tree: TreeDef):
        self.nodes, self.inputs, self.in_tree = nodes, inputs, in_tree
        self.outputs, self.out_tree = outputs, out_tree

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        sig = ", ".join(f"%{k}: {type_str(self.nodes[k].shape, self.nodes[k].dtype)}"
                        for k in self.inputs)
        body = [f"  {format_node(k, n)}" for k, n in enumerate(self.nodes) if n.prim is not None]
        outs = ", ".join(f"%{o}" if isinstance(o, int) else repr(o) for o in self.outputs)
        return "\n".join([f"program({sig}) {{", *body, f"  return {outs}", "}"])

    __repr__ = __str__

    def __call__(self, *args) -> Any:
        """Re-evaluate at new inputs of the same shapes (traced inputs are traced through).

        A NaN or infinity in an output raises `NonFiniteError` naming the first node that
        produced one, as the derivative transforms do.
        """
        from asd.core.arguments import as_leaf

        leaves, tree = flatten(args)
        if not tree.same_structure(self.in_tree):
            raise ShapeError(f"the program was traced with arguments structured "
                             f"{self.in_tree}, but was called with {tree}; call it with the "
                             "same structure (trace again for a different one)")
        env: list[Any] = [None] * len(self.nodes)
        foreign = None
        for i, (k, leaf) in enumerate(zip(self.inputs, leaves, strict=True)):
            node = self.nodes[k]
            if not isinstance(leaf, Traced):
                leaf = as_leaf(leaf, f"argument leaf {i}")
                foreign = foreign or (leaf if backend.is_foreign(leaf) else None)
            if tuple(np.shape(leaf)) != tuple(node.shape):
                raise ShapeError(f"input %{k} was traced with shape {node.shape} but was given "
                                 f"shape {np.shape(leaf)}; trace the function again for new "
                                 "shapes")
            env[k] = leaf

        def read(a):
            return env[a] if isinstance(a, int) else a.value

        with np.errstate(all="ignore"):
            for k, node in enumerate(self.nodes):
                if node.prim is not None:
                    if foreign is not None and not node.prim.array_api:
                        raise numpy_only(node.prim, backend.library(
                            backend.namespace(foreign))).at(format_node(k, node))
                    env[k] = bind(node.prim, tuple(read(a) for a in node.args), node.params)
        outs = [read(o) for o in self.outputs]
        if not all(isinstance(o, Traced) or _finite(o) for o in outs):
            self._raise_nonfinite(env)
        return unflatten(self.out_tree, outs)

    def _raise_nonfinite(self, env: list) -> None:
        for k, v in enumerate(env):
            if v is not None and not isinstance(v, Traced) and not _finite(v):
                node = self.nodes[k]
                ins = ", ".join(_summary(env[a]) if isinstance(a, int) else repr(a)
                                for a in node.args)
                raise NonFiniteError(
                    f"{format_node(k, node)} produced {_summary(v)} from inputs ({ins}); the "
                    "program's output is not finite. Keep the inputs in the primitive's "
                    "domain (e.g. asd.numpy.where(x > 0, x, 1) before log) or rescale.")
        raise NonFiniteError("the program's output is not finite")


def _finite(v) -> bool:
    return backend.all_finite(v)


def _summary(v) -> str:
    a = backend.to_host(v)
    if a.size <= 6:
        return np.array2string(a, precision=6, separator=", ")
    return f"{a.dtype.name}{list(a.shape)} with {int(np.sum(~np.isfinite(a)))} non-finite entries"
