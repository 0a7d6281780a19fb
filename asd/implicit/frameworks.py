"""Solution maps inside PyTorch and JAX training: backward = asd's pullback.

`as_torch(fn)` is ``fn`` (any function asd differentiates: a solution map, a loss of one)
as a ``torch.autograd.Function``: its forward runs ``asd.vjp(fn)`` on the tensors' values
(one sweep, along a random direction drawn from ``seed``, chooses every piece, the solution
map's included), its backward pulls the incoming gradient back through those pieces, so the
gradient a torch model receives from the layer is a limiting-Jacobian product, never a
least-squares blend at a degenerate point. `as_jax(fn)` is the same as a ``jax.custom_vjp``
whose forward and backward are host callbacks (eager and under ``jit``; the direction comes
from ``seed``, so forward and backward choose the same pieces). Neither imports asd's
framework importers: the layer is an opaque operation of the framework's own graph.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from asd.api import vjp


def as_torch(fn: Callable, *, seed=None) -> Callable:
    """``fn`` on torch tensors, differentiable by torch autograd through asd's pullback.

    >>> import torch, numpy as np, asd
    >>> layer = asd.implicit.as_torch(lambda h: asd.implicit.qp(
    ...     np.zeros((1, 1)), np.array([-1.0]), None, None, np.array([[1.0]]), h))
    >>> h = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    >>> layer(h).sum().backward(); h.grad                 # x* = h: dx*/dh = 1
    tensor([1.], dtype=torch.float64)
    """
    import torch

    class SolutionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            arrays = [t.detach().cpu().numpy().astype(float) for t in tensors]
            value, pullback = vjp(fn, tuple(range(len(arrays))), seed=seed)(*arrays)
            ctx.pullback, ctx.like = pullback, tensors
            return torch.as_tensor(np.asarray(value), dtype=tensors[0].dtype,
                                   device=tensors[0].device)

        @staticmethod
        def backward(ctx, ct):
            grads = ctx.pullback(ct.detach().cpu().numpy().astype(float))
            grads = grads if isinstance(grads, tuple) else (grads,)
            return tuple(torch.as_tensor(np.asarray(g), dtype=t.dtype, device=t.device)
                         for g, t in zip(grads, ctx.like, strict=True))

    def torch_layer(*tensors):
        return SolutionFunction.apply(*tensors)

    torch_layer.__name__ = getattr(fn, "__name__", "solution_map")
    return torch_layer


def as_jax(fn: Callable, *, seed=0, out_shape: tuple | None = None) -> Callable:
    """``fn`` on JAX arrays as a ``jax.custom_vjp`` with asd's pullback (host callbacks).

    ``out_shape`` is the output's shape; without it the first call must be on concrete
    arrays (outside ``jit``), which runs ``fn`` once to read it.

    >>> import jax, jax.numpy as jnp, numpy as np, asd
    >>> layer = asd.implicit.as_jax(lambda h: asd.implicit.qp(
    ...     np.zeros((1, 1)), np.array([-1.0]), None, None, np.array([[1.0]]), h))
    >>> jax.grad(lambda h: layer(h).sum())(jnp.array([2.0]))
    Array([1.], dtype=float32)
    """
    import jax

    shape = {"out": None if out_shape is None else tuple(out_shape)}

    def host_value(*arrays):
        value, _ = vjp(fn, tuple(range(len(arrays))), seed=seed)(
            *(np.asarray(a, dtype=float) for a in arrays))
        return np.asarray(value)

    def host_pull(ct, *arrays):
        _, pullback = vjp(fn, tuple(range(len(arrays))), seed=seed)(
            *(np.asarray(a, dtype=float) for a in arrays))
        grads = pullback(np.asarray(ct, dtype=float))
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(np.asarray(g, dtype=np.asarray(a).dtype)
                     for g, a in zip(grads, arrays, strict=True))

    @jax.custom_vjp
    def jax_layer(*arrays):
        if shape["out"] is None:
            if any(isinstance(a, jax.core.Tracer) for a in arrays):
                raise ValueError("as_jax: pass out_shape= to call the layer first inside a "
                                 "JAX transformation (jit, vmap)")
            shape["out"] = host_value(*arrays).shape
        spec = jax.ShapeDtypeStruct(shape["out"], arrays[0].dtype)
        return jax.pure_callback(lambda *a: host_value(*a).astype(spec.dtype), spec, *arrays)

    def forward(*arrays):
        return jax_layer(*arrays), arrays

    def backward(arrays, ct):
        specs = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)
        return jax.pure_callback(host_pull, specs, ct, *arrays)

    jax_layer.defvjp(forward, backward)
    return jax_layer
