"""Solution maps: derivatives of what a solver returns (nonsmooth implicit differentiation).

- `root(F, solve)` / `fixed_point(T, solve)`: ``θ ↦ y*(θ)`` with ``F(y*, θ) = 0`` or
  ``y* = T(y*, θ)``, ``F`` an asd program and ``y*`` any solver's answer (`asd.implicit.root`);
- `qp(P, q, A, b, G, h)`: the solution of a convex QP (an LP when ``P = 0``), differentiable
  in all data, with the directional derivative from the active set the ray enters, exact at
  degenerate vertices (`asd.implicit.qp`);
- `conic(A, b, c, cones)`: a conic program in diffcp's form over zero, nonnegative, SOC, PSD,
  exponential and power cones, as the root of its residual map (`asd.implicit.conic`).

Each is a primitive, so ``asd.subgrad``, ``asd.jacobian``, ``asd.directional``, ``asd.vjp``
differentiate losses of solution maps; `as_torch` / `as_jax` wrap any such function as a
PyTorch layer / JAX ``custom_vjp`` whose backward is asd's pullback, and which
``asd.torch.function`` / ``asd.jax.function`` import as one primitive of the model's program
(`asd.implicit.frameworks`).

May import: the public API (``asd.api``), ``asd.extend``, ``asd.errors``, ``asd.library``
(the projections); torch and JAX only inside the wrappers that need them; of the front ends
only their operator tables (``ATEN``, ``LAX``, ``native.ALWAYS_SWEPT``), inside
`asd.implicit.frameworks`' registration functions, where the layers register themselves.
"""

from asd.implicit.conic import conic
from asd.implicit.frameworks import as_jax, as_torch
from asd.implicit.qp import qp
from asd.implicit.root import SolutionInfo, SolutionMap, fixed_point, root

__all__ = ["SolutionInfo", "SolutionMap", "as_jax", "as_torch", "conic", "fixed_point", "qp",
           "root"]
