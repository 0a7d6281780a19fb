"""The straight-line program: plain data, nodes in topological order, printable, re-callable."""

from __future__ import annotations

from typing import Any

import numpy as np

from .primitive import Primitive, bind
from .tree import TreeDef, flatten, unflatten


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
    return f"{np.dtype(dtype).name}[{','.join(map(str, shape))}]"


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
        """Re-evaluate at new inputs of the same shapes (traced inputs are traced through)."""
        leaves, tree = flatten(args)
        if tree != self.in_tree:
            raise ValueError(f"program expects arguments shaped {self.in_tree}, got {tree}")
        env: list[Any] = [None] * len(self.nodes)
        for k, leaf in zip(self.inputs, leaves, strict=True):
            node = self.nodes[k]
            if np.shape(leaf) != node.shape:
                raise ValueError(f"input %{k} has shape {node.shape}, got {np.shape(leaf)}")
            env[k] = leaf

        def read(a):
            return env[a] if isinstance(a, int) else a.value

        for k, node in enumerate(self.nodes):
            if node.prim is not None:
                env[k] = bind(node.prim, tuple(read(a) for a in node.args), node.params)
        return unflatten(self.out_tree, [read(o) for o in self.outputs])
