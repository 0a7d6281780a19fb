"""What one ASD sweep found, beyond the subgradient: the Dini derivative and the ties it met.

`ASDResult` is what ``asd.asd(f)(x)`` and ``asd.value_and_subgrad(f, full=True)(x)`` return.
The ties say *where* the direction mattered: without a tie every branch is fixed near ``x``,
``f`` is smooth there and the subgradient is the gradient. Degenerate ties (``h == 0`` and
``h_dot == 0``) are harmless for the library's primitives but flag a possible constraint
qualification failure in user-written branches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class Tie(NamedTuple):
    """Node ``node`` (primitive ``primitive``) met a tie at ``count`` entries."""

    node: int
    primitive: str
    count: int

    def __str__(self) -> str:
        return f"%{self.node} {self.primitive} ({self.count} tied)"


@dataclass(frozen=True)
class ASDResult:
    """One sweep of Algorithm 6 along ``direction``.

    ``value`` is ``f(x)``; ``subgradient`` the limiting gradient ``lim grad f(x + δv)``
    (an element of the Clarke subdifferential), shaped like the differentiated arguments;
    ``dini`` the exact one-sided derivative ``f'(x; v)``, which equals
    ``<subgradient, direction>``; ``ties`` the rules whose branch the direction chose;
    ``degenerate`` the ties the direction could not break at first order.

    >>> import asd
    >>> r = asd.asd(lambda x: asd.relu(x) - asd.relu(-x), direction=-1.0)(0.0)
    >>> float(r.subgradient), float(r.dini), [str(t) for t in r.ties]
    (1.0, -1.0, ['%1 relu (1 tied)', '%3 relu (1 tied)'])
    """

    value: Any
    subgradient: Any
    dini: Any
    direction: Any
    ties: list[Tie]
    degenerate: list[Tie]

    @property
    def smooth(self) -> bool:
        """True when no rule met a tie: the function is differentiable along the whole sweep."""
        return not self.ties

    def __str__(self) -> str:
        ties = ", ".join(map(str, self.ties)) or "none"
        lines = [f"value       {self.value}", f"subgradient {self.subgradient}",
                 f"dini        {self.dini}", f"direction   {self.direction}", f"ties        {ties}"]
        if self.degenerate:
            lines.append(f"degenerate  {', '.join(map(str, self.degenerate))}")
        return "\n".join(lines)


def ties_of(nodes: list, counts: dict[int, int]) -> list[Tie]:
    """``Tie`` records, in program order, from a node -> count table of a sweep."""
    return [Tie(k, nodes[k].name, int(c)) for k, c in sorted(counts.items()) if c]
