"""The exceptions asd raises: every one names the node, the primitive, the values and the fix.

A rule raises these without knowing where it sits in a program; the engine adds the node
context (``%5 = sqrt %4``) on the way out, so messages stay specific without rules knowing
about programs.
"""

from __future__ import annotations


class ASDError(Exception):
    """Base class of every error asd raises on purpose."""

    node: str | None = None

    def at(self, node: str) -> ASDError:
        """Attach the node description (``%5 = sqrt %4``) once; returns self for ``raise``."""
        if self.node is None:
            self.node = node
            self.args = (f"{node}: {self.args[0]}" if self.args else node,) + self.args[1:]
        return self


class TracerBoolError(ASDError, TypeError):
    """Python control flow on a traced value: the branch would ignore the sweep direction."""


class NotLipschitzError(ASDError, ValueError):
    """A discontinuous or non-Lipschitz operation reached a differentiated output."""


class NonFiniteError(ASDError, FloatingPointError):
    """A NaN or infinity appeared; the message names the first node that produced it."""


class ShapeError(ASDError, ValueError):
    """Operands whose shapes do not fit, caught while tracing."""


class UnsupportedError(ASDError, NotImplementedError):
    """A numpy function or operation asd has no rule for."""


class StagedUnsupported(UnsupportedError):
    """A staged sweep (inside ``jax.jit`` / ``jax.vmap``) met a rule that still needs a
    concrete value to decide."""


class NestingError(ASDError, RuntimeError):
    """Traced values from two different sweeps met in one operation."""


class ArgumentError(ASDError, ValueError):
    """An argument asd cannot differentiate at: bad ``argnums``, huge integers, a zero direction.

    It is a ``ValueError`` too, so code written against numpy's conventions keeps working.
    """


class ArgumentTypeError(ASDError, TypeError):
    """A value of a kind asd refuses: complex, strings, sets, other objects (a ``TypeError``)."""


class OutputError(ASDError, TypeError):
    """The differentiated function returned something that is not a real number or array."""


class IndexingError(ASDError, IndexError):
    """An index out of range on a traced array (an ``IndexError``, as numpy raises)."""


class DeadTraceError(ASDError, RuntimeError):
    """A traced value was used after the call that traced it had returned."""


class UndecidedTieError(ASDError):
    """A tie whose side changes the result but that no direction could decide exactly."""
