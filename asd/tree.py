"""Nested tuples, lists and dicts of arrays: flatten to leaves, rebuild; results mirror inputs.

Containers keep their type on the way back: a namedtuple comes back as the same namedtuple
(a gradient of ``Params(w, b)`` is a ``Params``), a list subclass as a list, and ``None``
entries stay ``None``.

>>> from collections import namedtuple
>>> Params = namedtuple("Params", "w b")
>>> leaves, tree = flatten(Params(1.0, [2.0, 3.0]))
>>> leaves, tree
([1.0, 2.0, 3.0], Params(*, [*, *]))
>>> unflatten(tree, [10.0, 20.0, 30.0])
Params(w=10.0, b=[20.0, 30.0])
"""

from __future__ import annotations

from typing import Any


class TreeDef:
    """The shape of a nested container.

    ``kind`` is 'leaf', 'tuple', 'list', 'dict', 'none' or 'namedtuple' (then ``cls`` is the
    namedtuple class, used to rebuild it).
    """

    __slots__ = ("kind", "keys", "children", "n_leaves", "cls")

    def __init__(self, kind: str, keys=(), children=(), cls=None):
        self.kind, self.keys, self.children = kind, tuple(keys), tuple(children)
        self.cls = cls
        self.n_leaves = 1 if kind == "leaf" else sum(c.n_leaves for c in self.children)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, TreeDef)
            and (self.kind, self.keys, self.children, self.cls)
            == (other.kind, other.keys, other.children, other.cls)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.keys, self.children))

    def same_structure(self, other: TreeDef) -> bool:
        """Equal up to the tuple type: a plain tuple matches a namedtuple of the same length.

        So a direction may be written as a plain tuple for a namedtuple argument.
        """
        tuples = ("tuple", "namedtuple")
        if self.kind in tuples and other.kind in tuples:
            return len(self.children) == len(other.children) and all(
                a.same_structure(b) for a, b in zip(self.children, other.children, strict=True))
        return (self.kind, self.keys, len(self.children)) == (
            other.kind, other.keys, len(other.children)) and all(
            a.same_structure(b) for a, b in zip(self.children, other.children, strict=True))

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(
            f"{k!r}: {c!r}" if self.kind == "dict" else repr(c)
            for k, c in zip(self.keys or [None] * len(self.children), self.children, strict=True)
        )
        if self.kind == "namedtuple":
            return f"{self.cls.__name__}({inner})"
        return {"tuple": f"({inner})", "list": f"[{inner}]", "dict": f"{{{inner}}}"}[self.kind]


LEAF = TreeDef("leaf")


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields") and hasattr(type(x), "_make")


def flatten(tree: Any) -> tuple[list, TreeDef]:
    """The leaves of ``tree`` in order, and its structure (see `unflatten`)."""
    leaves: list = []
    return leaves, _walk(tree, leaves)


def _walk(x, leaves: list) -> TreeDef:
    """`flatten`'s recursion. A module function, not a closure: a closure calling itself
    is a reference cycle (function -> cell -> function) that would keep the leaves, and
    with traced leaves a whole sweep's arrays, alive until the cyclic GC ran."""
    if isinstance(x, tuple):
        kids = [_walk(c, leaves) for c in x]
        if _is_namedtuple(x):
            return TreeDef("namedtuple", children=kids, cls=type(x))
        return TreeDef("tuple", children=kids)
    if isinstance(x, list):
        return TreeDef("list", children=[_walk(c, leaves) for c in x])
    if isinstance(x, dict):
        return TreeDef("dict", keys=list(x), children=[_walk(x[k], leaves) for k in x])
    if x is None:
        return TreeDef("none")
    leaves.append(x)
    return LEAF


def flatten_as(treedef: TreeDef, tree: Any, *, array_leaves: bool = False) -> list:
    """The leaves of ``tree`` read in the structure ``treedef``, where ``None`` may stand for a
    whole subtree (each of its leaves ``None``: a cotangent an output did not get). Dicts
    are read by key, in ``treedef``'s order, whatever order ``tree`` lists them in; a plain
    tuple may stand for a namedtuple. With ``array_leaves``, a list or tuple where
    ``treedef`` has a leaf is that leaf (an array written as a list: ``direction=[1, 2]``).
    Raises ValueError where the two structures differ otherwise.

    >>> leaves, tree = flatten(([1.0, 2.0], 3.0))
    >>> flatten_as(tree, (None, 4.0))
    [None, None, 4.0]
    >>> flatten_as(flatten({"a": 1.0, "b": 2.0})[1], {"b": 20.0, "a": 10.0})
    [10.0, 20.0]
    """
    out: list = []
    _walk_as(treedef, tree, out, array_leaves)
    return out


def _walk_as(td: TreeDef, x, out: list, array_leaves: bool) -> None:
    """`flatten_as`'s recursion (a module function: see `_walk`)."""
    if x is None:
        out.extend([None] * td.n_leaves)
        return
    if td.kind == "leaf":
        if isinstance(x, dict) or (isinstance(x, tuple | list) and not array_leaves):
            raise ValueError(f"a {type(x).__name__} where a leaf was expected")
        out.append(x)
        return
    if td.kind == "dict":
        if not isinstance(x, dict) or set(x) != set(td.keys):
            raise ValueError(f"expected a dict with keys {list(td.keys)}")
        for k, c in zip(td.keys, td.children, strict=True):
            _walk_as(c, x[k], out, array_leaves)
        return
    kind = list if td.kind == "list" else tuple     # "none": x is not None here
    if td.kind == "none" or not isinstance(x, kind) or len(x) != len(td.children):
        raise ValueError(f"expected {td!r}")
    for c, xc in zip(td.children, x, strict=True):
        _walk_as(c, xc, out, array_leaves)


def unflatten(treedef: TreeDef, leaves) -> Any:
    """Rebuild the structure ``treedef`` with ``leaves`` in order."""
    return _build(treedef, iter(leaves))


def _build(td: TreeDef, it):
    """`unflatten`'s recursion (a module function: see `_walk`)."""
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return None
    kids = [_build(c, it) for c in td.children]
    if td.kind == "dict":
        return dict(zip(td.keys, kids, strict=True))
    if td.kind == "namedtuple":
        return td.cls._make(kids)
    return tuple(kids) if td.kind == "tuple" else kids
