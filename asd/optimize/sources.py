"""Where a method gets values and gradients: asd's sweeps, or a user's ``(f, g)`` oracle.

Both count evaluations; both answer the three questions the methods ask: ``f(x)``,
``(f(x), g)`` with ``g`` a subgradient, and a sample of the Goldstein ε-subdifferential
at ``x``. asd answers the last with `asd.clarke` at ``radius=ε`` (every piece active within
reach, found by the rules, plus random ball points); a plain oracle can only evaluate
gradients at random points of the ball, as Burke, Lewis and Overton's gradient sampling
does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from asd.analysis.clarke import clarke
from asd.api import jit, value_and_subgrad
from asd.errors import ArgumentError, NonFiniteError


class Source(ABC):
    """Values and gradients of ``f`` at flat float vectors, counted."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nfev = 0
        self.ngev = 0

    @abstractmethod
    def value(self, x: np.ndarray) -> float:
        """``f(x)`` (inf where it is not finite, so a line search backs off)."""

    @abstractmethod
    def value_and_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """``(f(x), g)`` with ``g`` a subgradient, as a flat vector."""

    def ball(self, x: np.ndarray, radius: float, points: int) -> np.ndarray:
        """``points`` uniform random points of ``|y - x| <= radius``, one per row."""
        u = self.rng.standard_normal((points, x.size))
        u *= (radius * self.rng.random(points) ** (1.0 / x.size)
              / np.linalg.norm(u, axis=1))[:, None]
        return x + u

    def sample(self, x: np.ndarray, radius: float, points: int) -> np.ndarray:
        """Gradients spanning (an inner approximation of) the ε-subdifferential at ``x``."""
        rows = [self.value_and_grad(x)[1]]
        rows += [self.value_and_grad(y)[1] for y in self.ball(x, radius, points)]
        return np.asarray(rows)


def _finite(value, grad, x) -> tuple[float, np.ndarray]:
    value = float(value)
    grad = np.asarray(grad, dtype=float).ravel()
    if not np.isfinite(value) or not np.all(np.isfinite(grad)):
        raise NonFiniteError(f"the objective returned value {value} and a gradient with "
                             f"{int(np.count_nonzero(~np.isfinite(grad)))} non-finite entries "
                             f"at x = {x[:6].tolist()}{' ...' if x.size > 6 else ''}: the "
                             "method cannot continue; check the domain of f (log, sqrt, "
                             "division) along the path, or start elsewhere")
    return value, grad


class AsdSource(Source):
    """asd's subgradients: one sweep per gradient, `asd.clarke` for ε-subdifferentials."""

    def __init__(self, f: Callable, shape: tuple, seed, directions: int):
        super().__init__(seed)
        self.f, self.shape, self.directions = f, shape, directions
        # compiled once: every call replays f's program (a fresh direction per call, drawn
        # from this generator, decides the ties it meets)
        self.vg = jit(value_and_subgrad(f, seed=np.random.default_rng(self._seed())))

    def _seed(self) -> int:
        return int(self.rng.integers(2**63))

    def value(self, x):
        self.nfev += 1
        value = float(np.asarray(self.f(x.reshape(self.shape))))
        return value if np.isfinite(value) else np.inf

    def value_and_grad(self, x):
        self.nfev += 1
        self.ngev += 1
        value, grad = self.vg(x.reshape(self.shape))
        return _finite(value, grad, x)

    def sample(self, x, radius, points):
        self.nfev += 1
        self.ngev += 1 + points
        s = clarke(self.f, n=self.directions, radius=radius, points=points,
                   seed=self._seed())(x.reshape(self.shape))
        return s.gradients.reshape(len(s), -1)


class OracleSource(Source):
    """A user's ``x -> (f(x), g)`` oracle (torch autograd, a hand-written gradient)."""

    def __init__(self, fg: Callable, shape: tuple, seed):
        super().__init__(seed)
        self.fg, self.shape = fg, shape

    def value(self, x):
        return self.value_and_grad(x)[0]

    def value_and_grad(self, x):
        self.nfev += 1
        self.ngev += 1
        out = self.fg(x.reshape(self.shape))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ArgumentError(f"fg must return a pair (value, gradient), got "
                                f"{type(out).__name__}; for a function returning only values "
                                "leave fg out and let asd differentiate it")
        value, grad = out
        if np.size(grad) != x.size:
            raise ArgumentError(f"fg returned a gradient with {np.size(grad)} entries for x "
                                f"with {x.size}")
        return _finite(value, grad, x)
