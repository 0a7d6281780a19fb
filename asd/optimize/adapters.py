"""asd's subgradients in the shapes other optimizers ask for.

- `scipy_fg`: ``x -> (f, g)`` for ``scipy.optimize.minimize(fun, x0, jac=True)``;
- `nsopy_oracle`: ``x -> (0, f, g)``, the first-order oracle of nsopy's methods;
- `torch_module`: a ``torch.nn.Module`` mapping a batch ``(B, n)`` to ``(B, m)`` whose
  backward (and ``torch.func`` ``jacrev``/``vmap``, which ncOPT uses for its objective and
  constraints) returns asd's limiting Jacobians instead of autograd's conventions;
- `torch_fg`: the other way round, ``x -> (f, g)`` from a torch function by autograd, to run
  asd's methods on framework gradients for comparison.

PyGRANSO's ``combined_fn`` differentiates torch code with ``backward()``: wrap the torch
objective with ``asd.torch.function`` (its backward is asd's), or a numpy objective with
`torch_module` (docs/optimize.md).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from asd.api import jacobian, value_and_subgrad
from asd.errors import ArgumentError


def _seeds(seed):
    rng = np.random.default_rng(seed)
    return lambda: int(rng.integers(2**63))


def scipy_fg(f: Callable, *, seed=None) -> Callable:
    """``x -> (f(x), g)`` with ``g`` asd's subgradient, for scipy's ``jac=True``.

    Each call draws its own sweep direction from ``seed`` (reproducible runs).

    >>> import asd, numpy as np, scipy.optimize as so
    >>> fg = asd.optimize.scipy_fg(lambda x: np.sum(np.abs(x - 1.0)) + 0.5 * x @ x, seed=0)
    >>> res = so.minimize(fg, np.zeros(2), jac=True, method="L-BFGS-B")
    >>> np.round(res.x, 6).tolist()
    [1.0, 1.0]
    """
    draw = _seeds(seed)

    def fg(x):
        value, grad = value_and_subgrad(f, seed=draw())(np.asarray(x, dtype=float))
        return float(value), np.asarray(grad, dtype=float)

    fg.__name__ = f"{getattr(f, '__name__', 'f')}_fg"
    return fg


def nsopy_oracle(f: Callable, *, seed=None) -> Callable:
    """``x -> (0, f(x), g)``: nsopy's first-order oracle (primal point, value, subgradient).

    nsopy solves dual problems and names the first entry a primal solution; for a plain
    objective it is unused (0).
    """
    fg = scipy_fg(f, seed=seed)

    def oracle(x):
        value, grad = fg(x)
        return 0, value, grad

    return oracle


def torch_fg(fn: Callable) -> Callable:
    """``x -> (f(x), g)`` from a torch function by ``torch.autograd`` (float64): the
    framework's gradient, with its conventions at kinks."""
    import torch

    def fg(x):
        t = torch.tensor(np.asarray(x, dtype=float), dtype=torch.float64, requires_grad=True)
        out = fn(t)
        (grad,) = torch.autograd.grad(out, t)
        return float(out.detach()), grad.numpy()

    return fg


def torch_module(f: Callable, dim: int, dim_out: int = 1, *, seed=None):
    """A ``torch.nn.Module``: ``(B, dim) -> (B, dim_out)``, row ``b`` = ``f(X[b])``, whose
    derivatives are asd's (a subgradient, or the limiting Jacobian for ``dim_out > 1``).

    ``f`` is a numpy/asd function of one vector. The module supports ``backward()`` and the
    ``torch.func`` transforms ncOPT applies (``vmap`` over ``jacrev``): the Jacobian rows are
    computed with the value and saved, so the backward is a torch contraction.
    """
    import torch

    draw = _seeds(seed)

    def rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values ``(B, dim_out)`` and Jacobians ``(B, dim_out, dim)`` of the rows."""
        values, jacs = [], []
        for row in x.reshape(-1, dim):  # one program evaluation per sample point
            if dim_out == 1:
                v, g = value_and_subgrad(f, seed=draw())(row)
                values.append(np.reshape(v, 1))
                jacs.append(np.reshape(g, (1, dim)))
            else:
                values.append(np.reshape(f(row), dim_out))
                jacs.append(np.reshape(jacobian(f, seed=draw())(row), (dim_out, dim)))
        return np.asarray(values, dtype=float), np.asarray(jacs, dtype=float)

    class AsdRows(torch.autograd.Function):
        @staticmethod
        def forward(x):
            if x.shape[-1] != dim:
                raise ArgumentError(f"expected inputs with last dimension {dim}, got shape "
                                    f"{tuple(x.shape)}")
            values, jacs = rows(x.detach().cpu().double().numpy())
            lead = tuple(x.shape[:-1])
            out = torch.as_tensor(values, dtype=x.dtype, device=x.device)
            jac = torch.as_tensor(jacs, dtype=x.dtype, device=x.device)
            return out.reshape(lead + (dim_out,)), jac.reshape(lead + (dim_out, dim))

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output[1])
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, ct, _ct_jac):
            (jac,) = ctx.saved_tensors
            return (ct.unsqueeze(-1) * jac).sum(-2)

        @staticmethod
        def vmap(info, in_dims, x):
            (d,) = in_dims
            x = x.movedim(d, 0) if d is not None else x.expand(info.batch_size, *x.shape)
            return AsdRows.apply(x), (0, 0)

    class AsdModule(torch.nn.Module):
        """``f`` row by row, with asd's derivatives."""

        def forward(self, x):
            return AsdRows.apply(x)[0]

        def extra_repr(self) -> str:
            return f"{getattr(f, '__name__', 'f')}: {dim} -> {dim_out}"

    return AsdModule()
