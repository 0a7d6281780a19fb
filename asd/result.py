"""What one ASD sweep found, beyond the subgradient: the Dini derivative and the ties it met.

`ASDResult` is what ``asd.asd(f)(x)`` and ``asd.value_and_subgrad(f, full=True)(x)`` return.
The ties say *where* the direction mattered: without a tie every branch is fixed near ``x``,
``f`` is smooth there and the subgradient is the gradient. Degenerate ties (``h == 0`` and
``h_dot == 0``) are harmless for the library's primitives but flag a possible constraint
qualification failure in user-written branches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Tie(NamedTuple):
    """Node ``node`` (primitive ``primitive``) met a tie at ``count`` entries."""

    node: int
    primitive: str
    count: int

    def __str__(self) -> str:
        return f"%{self.node} {self.primitive} ({self.count} tied)"


class Decision(NamedTuple):
    """Node ``node``'s rule decided ``count`` tied entries by ``how``
    (`asd.core.primitive.DECIDED_BY`).

    ``tangent``: the first-order derivative along ``v``; ``series``: the exact power series
    along the ray ``x + δv``; ``lexicographic``: a further direction ``w_k`` (the tie persists
    along ``v``); ``equal``: the two sides are equal near ``x``, so every branch agrees;
    ``flat``: equal to first order along every direction tried but not proven equal (the
    branches' gradients agree almost surely); ``tolerance``: a near-tie created by rounding.
    """

    node: int
    primitive: str
    how: str
    count: int

    def __str__(self) -> str:
        return f"%{self.node} {self.primitive}: {self.count} by {self.how}"


LIMITING = "limiting gradient along the direction"
LEXICOGRAPHIC = "lexicographic element of the Clarke subdifferential"


def element_of(decisions: list[Decision]) -> str:
    """Which element a sweep returned, from how its ties were decided (proofs/README.md)."""
    along_v = {"tangent", "series", "equal"}
    return LIMITING if all(d.how in along_v for d in decisions) else LEXICOGRAPHIC


@dataclass(frozen=True)
class TieReport:
    """How one sweep decided its ties: what ``diagnostics=True`` returns beside the result.

    ``element`` says whether the subgradient is the limiting gradient along ``v`` (every tie
    decided along the ray) or a lexicographic element (some tie persisted along ``v``).
    """

    decisions: list[Decision]
    degenerate: list[Tie]

    @property
    def element(self) -> str:
        return element_of(self.decisions)

    def __str__(self) -> str:
        lines = [f"element     {self.element}"]
        lines += [f"  {d}" for d in self.decisions]
        if self.degenerate:
            lines.append(f"degenerate  {', '.join(map(str, self.degenerate))}")
        return "\n".join(lines)


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
    decisions: list[Decision] = field(default_factory=list)

    @property
    def element(self) -> str:
        """`LIMITING` or `LEXICOGRAPHIC`: see `TieReport.element`."""
        return element_of(self.decisions)

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
        if self.ties:
            lines.append(f"element     {self.element}")
        return "\n".join(lines)


def decisions_of(nodes: list, counts: dict[tuple[int, str], int]) -> list[Decision]:
    """``Decision`` records in program order from a sweep's (node, how) -> count table."""
    return [Decision(k, nodes[k].name, how, int(c)) for (k, how), c in sorted(counts.items())
            if c]


def ties_of(nodes: list, counts: dict[int, int]) -> list[Tie]:
    """``Tie`` records, in program order, from a node -> count table of a sweep."""
    return [Tie(k, nodes[k].name, int(c)) for k, c in sorted(counts.items()) if c]
