"""Solution maps of nonsmooth equations: ``root(F, solve)`` and ``fixed_point(T, solve)``.

``y*(θ)`` solves ``F(y, θ) = 0``, with ``F`` an asd program (projections, proximal operators,
relu, max, ...) and ``y*`` computed by any solver. The map is one primitive: its rule solves the
problem, reads the tangent ``θ̇`` of its inputs along the sweep direction, and finds the exact
one-sided derivative ``ẏ = y*'(θ; θ̇)`` as the solution of the piecewise-linear directional
equation (nonsmooth implicit function theorem; Scholtes, *Piecewise Differentiable Functions*,
ch. 4; Bolte, Le, Pauwels, Silveti-Falls, NeurIPS 2021)

    F'((y*, θ); (ẏ, θ̇)) = 0,

by semismooth Newton on that equation: from ``ẏ₀ = 0``, ``[A B]`` is asd's limiting Jacobian of
``F`` along ``(ẏ_k, θ̇)`` and ``ẏ_(k+1) = -A⁻¹ B θ̇``, until ``asd.directional`` says
``F'((y*, θ); (ẏ, θ̇)) = 0`` exactly (to rounding). The linearization handed to the engine is
``-A⁻¹B`` of the piece that last ray enters: pushed in forward mode, pulled in reverse mode,
the same element in both. Since ``F`` vanishes along that ray, ``A ẏ + B θ̇ = 0`` on the piece,
so the map's Dini derivative is exact; where ``F`` is piecewise affine (QPs, LPs, polyhedral
projections) and the direction is drawn at random, ``-A⁻¹B`` is almost surely the Jacobian of
``y*`` on the open piece the ray enters, i.e. a limiting Jacobian of the solution map.

Regularity: ``y*`` is locally Lipschitz when every element of the generalized Jacobian of
``F`` in ``y`` is nonsingular (Clarke's implicit function theorem), or for piecewise affine
``F`` when its pieces are coherently oriented (every ``det A`` has one sign). The rule checks
the elements it meets and ``samples`` more along random directions in ``(y, θ)``; a singular
one, or two of opposite orientation, raises `NotLipschitzError` naming that element (the
direction that selects it and its smallest singular value). ``SolutionMap.last`` says which
element the last call returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from asd.api import directional, jacobian
from asd.errors import ASDError, NotLipschitzError
from asd.extend import Closure, FanIn, Primitive

SINGULAR = 1e-12
"""``σ_min / σ_max`` below this counts as a singular element of the generalized Jacobian."""


@dataclass
class SolutionInfo:
    """What the last differentiated call of a `SolutionMap` returned, and how it knows.

    ``element``: which generalized derivative the linearization is; ``directions``: the ray
    ``(ẏ, θ̇)`` that selected the piece of ``F`` (flattened); ``newton``: semismooth Newton
    iterations on the directional equation; ``checked``: elements of ``∂_y F`` checked
    nonsingular and of one orientation; ``condition``: the selected ``A``'s condition number.
    """

    element: str
    direction: np.ndarray
    newton: int
    checked: int
    condition: float
    sign: int = 0
    extra: dict = field(default_factory=dict)


class SolutionMap:
    """``θ ↦ y*(θ)`` for ``F(y*, θ) = 0`` as an asd primitive (see the module docstring)."""

    def __init__(self, F: Callable, solve: Callable, name: str, tol: float, samples: int,
                 max_newton: int = 50):
        self.F, self.solve, self.name = F, solve, name
        self.tol, self.samples, self.max_newton = tol, samples, max_newton
        self.last: SolutionInfo | None = None
        self.prim = Primitive(name, self._impl)
        self.prim.defrule(self._rule)

    def __call__(self, *thetas):
        return self.prim(*thetas)

    # ----- the primal: the solver's answer, checked -----

    def _impl(self, *thetas):
        thetas = [np.asarray(t, dtype=float) for t in thetas]
        return self._solved(thetas)

    def _solved(self, thetas: list[np.ndarray]) -> np.ndarray:
        y = np.asarray(self.solve(*thetas), dtype=float)
        r = np.asarray(self.F(y, *thetas), dtype=float)
        if r.shape != y.shape:
            raise ASDError(f"{self.name}: F(y, θ) has shape {r.shape} but the solution has "
                           f"shape {y.shape}; a root map needs as many equations as unknowns")
        scale = max(1.0, float(np.max(np.abs(y), initial=0.0)))
        if not float(np.max(np.abs(r), initial=0.0)) <= self.tol * scale:
            raise ASDError(
                f"{self.name}: the solver's answer leaves the residual max|F(y, θ)| = "
                f"{float(np.max(np.abs(r))):.3g} above tol = {self.tol:g} (times max(1, |y|)); "
                "the derivative of a solution map is only that of its exact solution. Solve "
                "to higher accuracy (or refine: a few Newton steps on F), or raise tol.")
        return y

    # ----- the rule: the directional equation, then the selected piece -----

    def _jacobian(self, y, thetas, direction):
        """``(A, [B_i])``: asd's limiting Jacobian of F along ``direction`` = (ẏ, θ̇...)."""
        argnums = tuple(range(1 + len(thetas)))
        blocks = jacobian(self.F, argnums, directions=[tuple(direction)], seed=0)(y, *thetas)
        n = y.size
        return (np.asarray(blocks[0], dtype=float).reshape(n, n),
                [np.asarray(b, dtype=float).reshape(n, t.size)
                 for b, t in zip(blocks[1:], thetas, strict=True)])

    def _refuse(self, what: str, direction, sv) -> NotLipschitzError:
        ray = np.array2string(np.concatenate([np.ravel(d) for d in direction]), precision=4,
                              threshold=12)
        return NotLipschitzError(
            f"{self.name}: {what} — the limiting Jacobian of F in y along (ẏ, θ̇) = {ray} "
            f"has singular values from {sv[-1]:.3g} to {sv[0]:.3g}. The solution map is not "
            "locally Lipschitz here (or its derivative is not determined by F): the "
            "nonsmooth implicit function theorem needs every element of ∂_y F nonsingular, of "
            "one orientation. Make the problem strongly regular (a small strongly convex "
            "term, linearly independent active constraints) or move θ off this point.")

    def _check(self, A, direction) -> int:
        sv = np.linalg.svd(A, compute_uv=False)
        if sv.size and sv[-1] <= SINGULAR * max(sv[0], 1.0):
            raise self._refuse("a singular element of the generalized Jacobian", direction, sv)
        return int(np.sign(np.linalg.det(A))) if A.size else 1

    def _directional(self, y, thetas, tdots):
        """Semismooth Newton on ``ẏ ↦ F'((y, θ); (ẏ, θ̇))``; returns ``(ẏ, A, Bs, k)``."""
        ydot = np.zeros_like(y)
        scale = max(1.0, *(float(np.max(np.abs(t), initial=0.0)) for t in tdots))
        seen = []
        for k in range(1, self.max_newton + 1):
            A, Bs = self._jacobian(y, thetas, (ydot, *tdots))
            seen.append(self._check(A, (ydot, *tdots)))
            rhs = -sum((B @ t.ravel() for B, t in zip(Bs, tdots, strict=True)),
                       np.zeros(y.size))
            new = np.linalg.solve(A, rhs).reshape(y.shape)
            argnums = tuple(range(1 + len(thetas)))
            _, g = directional(self.F, argnums)(y, *thetas, (new, *tdots))
            if float(np.max(np.abs(g), initial=0.0)) <= 1e-10 * scale * max(
                    1.0, float(np.max(np.abs(new), initial=0.0))):
                A, Bs = self._jacobian(y, thetas, (new, *tdots))
                seen.append(self._check(A, (new, *tdots)))
                return new, A, Bs, k, seen
            if np.array_equal(new, ydot):
                break
            ydot = new
        raise ASDError(
            f"{self.name}: semismooth Newton on the directional equation F'((y*, θ); (ẏ, θ̇)) "
            f"= 0 did not find its solution in {self.max_newton} steps (its pieces cycle). "
            "The solution map may not be directionally differentiable here; try another "
            "direction, or a strongly regular formulation of F.")

    def _sample(self, y, thetas, signs: list[int]) -> int:
        """Check ``samples`` more elements of ∂_y F along random directions, in opposite
        pairs ``±d`` (a fold shows as opposite orientations on opposite sides)."""
        rng = np.random.default_rng(12345)
        for k in range(self.samples):
            if k % 2 == 0:
                d = [rng.standard_normal(np.shape(a)) for a in (y, *thetas)]
            else:
                d = [-e for e in d]
            A, _ = self._jacobian(y, thetas, d)
            signs.append(self._check(A, d))
        if len(set(signs)) > 1:
            raise NotLipschitzError(
                f"{self.name}: the limiting Jacobians of F in y at this solution have "
                "determinants of both signs, so F is not coherently oriented here and the "
                "solution map is not a Lipschitz function of θ (it may fold or branch). "
                "Move θ off this point or regularize the problem.")
        return len(signs)

    def _rule(self, xs, dxs):
        thetas = [np.asarray(x, dtype=float) for x in xs]
        # the tangents first: they are this sweep's, and the solves below run sweeps of F
        tdots = [np.zeros_like(t) if getattr(dx, "is_zero", False) else
                 np.asarray(dx(), dtype=float).reshape(t.shape)
                 for t, dx in zip(thetas, dxs, strict=True)]
        y = self._solved(thetas)
        ydot, A, Bs, k, signs = self._directional(y, thetas, tdots)
        checked = self._sample(y, thetas, signs)
        sv = np.linalg.svd(A, compute_uv=False)
        self.last = SolutionInfo(
            "limiting Jacobian -A⁻¹B of the piece of F entered by the ray (ẏ, θ̇)",
            np.concatenate([ydot.ravel(), *(t.ravel() for t in tdots)]), k, checked,
            float(sv[0] / sv[-1]) if sv.size else 1.0, signs[-1])
        maps = [_implicit_map(A, B, t.shape, y.shape) for B, t in zip(Bs, thetas, strict=True)]
        return y, maps[0] if len(maps) == 1 else FanIn(*maps)


def _implicit_map(A: np.ndarray, B: np.ndarray, in_shape: tuple, out_shape: tuple) -> Closure:
    """``t ↦ -A⁻¹ B t`` and its transpose, with an optional leading batch axis."""
    n, m = B.shape
    JT = -np.linalg.solve(A, B).T  # (m, n): one solve, shared by push and pull

    def implicit_push(t):
        t = np.asarray(t, dtype=float)
        lead = t.shape[:t.ndim - len(in_shape)]
        return (t.reshape(lead + (m,)) @ JT).reshape(lead + tuple(out_shape))

    def implicit_pull(ct):
        ct = np.asarray(ct, dtype=float)
        lead = ct.shape[:ct.ndim - len(out_shape)]
        return (ct.reshape(lead + (n,)) @ JT.T).reshape(lead + tuple(in_shape))

    return Closure(implicit_push, implicit_pull, in_shape, out_shape)


def root(F: Callable, solve: Callable, *, name: str | None = None, tol: float = 1e-9,
         samples: int = 4) -> SolutionMap:
    """The solution map ``θ ↦ y*(θ)`` of ``F(y, θ) = 0`` as an asd primitive.

    ``F(y, *thetas)`` is written with asd primitives and returns an array shaped like ``y``;
    ``solve(*thetas)`` is any solver's answer (checked: ``max|F| <= tol · max(1, |y|)``).
    Every asd transform differentiates the result (see the module docstring for what is
    returned at nonsmooth points and how regularity is checked; ``samples`` extra random
    elements of ``∂_y F`` are checked per differentiated call).

    >>> import numpy as np, asd
    >>> F = lambda y, t: y - asd.relu(t - y)            # y = max(t - y, 0): y* = max(t, 0)/2
    >>> y = asd.implicit.root(F, lambda t: np.maximum(t, 0) / 2)
    >>> [float(asd.subgrad(y, direction=d)(0.0)) for d in (1.0, -1.0)]
    [0.5, 0.0]
    """
    return SolutionMap(F, solve, name or f"root_{getattr(F, '__name__', 'F')}", tol, samples)


def fixed_point(T: Callable, solve: Callable, *, name: str | None = None, tol: float = 1e-9,
                samples: int = 4) -> SolutionMap:
    """The map ``θ ↦ y*(θ)`` with ``y* = T(y*, θ)``: `root` of ``F(y, θ) = y - T(y, θ)``.

    >>> import numpy as np, asd
    >>> soft = lambda y, lam: asd.relu(y - lam) - asd.relu(-y - lam)
    >>> T = lambda y, lam: soft(y - 0.5 * (y - 1.0), 0.5 * lam)   # prox-gradient, ½(y-1)² + λ|y|
    >>> y = asd.implicit.fixed_point(T, lambda lam: np.maximum(1.0 - lam, 0.0))
    >>> [float(asd.subgrad(y, direction=d)(1.0)) for d in (1.0, -1.0)]   # the kink at λ = 1
    [0.0, -1.0]
    """
    def F(y, *thetas):
        return y - T(y, *thetas)

    F.__name__ = f"fixed_point_{getattr(T, '__name__', 'T')}"
    return SolutionMap(F, solve, name or F.__name__, tol, samples)
