"""Nested tuples, lists and dicts of arrays: flatten to leaves, rebuild; results mirror inputs."""

from __future__ import annotations

from typing import Any


class TreeDef:
    """The shape of a nested container: ``kind`` is 'leaf', 'tuple', 'list', 'dict' or 'none'."""

    __slots__ = ("kind", "keys", "children", "n_leaves")

    def __init__(self, kind: str, keys=(), children=()):
        self.kind, self.keys, self.children = kind, tuple(keys), tuple(children)
        self.n_leaves = 1 if kind == "leaf" else sum(c.n_leaves for c in self.children)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, TreeDef)
            and (self.kind, self.keys, self.children) == (other.kind, other.keys, other.children)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.keys, self.children))

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(
            f"{k!r}: {c!r}" if self.kind == "dict" else repr(c)
            for k, c in zip(self.keys or [None] * len(self.children), self.children, strict=True)
        )
        return {"tuple": f"({inner})", "list": f"[{inner}]", "dict": f"{{{inner}}}"}[self.kind]


LEAF = TreeDef("leaf")


def flatten(tree: Any) -> tuple[list, TreeDef]:
    leaves: list = []

    def walk(x) -> TreeDef:
        if isinstance(x, tuple | list):
            return TreeDef(type(x).__name__ if type(x) in (tuple, list) else "tuple",
                           children=[walk(c) for c in x])
        if isinstance(x, dict):
            return TreeDef("dict", keys=list(x), children=[walk(x[k]) for k in x])
        if x is None:
            return TreeDef("none")
        leaves.append(x)
        return LEAF

    return leaves, walk(tree)


def unflatten(treedef: TreeDef, leaves) -> Any:
    it = iter(leaves)

    def build(td: TreeDef):
        if td.kind == "leaf":
            return next(it)
        if td.kind == "none":
            return None
        kids = [build(c) for c in td.children]
        if td.kind == "dict":
            return dict(zip(td.keys, kids, strict=True))
        return tuple(kids) if td.kind == "tuple" else kids

    return build(treedef)
