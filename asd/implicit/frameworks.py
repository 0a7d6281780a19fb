"""Solution maps inside PyTorch and JAX: framework layers, and primitives of imported programs.

`as_torch(fn)` is ``fn`` (any function asd differentiates: a solution map, a loss of one) as
a PyTorch layer. Called eagerly it is a ``torch.autograd.Function``: its forward runs
``asd.vjp(fn)`` on the tensors' values (one sweep, along a random direction drawn from
``seed``, chooses every piece, the solution map's included), its backward pulls the incoming
gradient back through those pieces, so the gradient a torch model receives from the layer is
a limiting-Jacobian product, never a least-squares blend at a degenerate point. Traced by
``torch.export`` or ``torch.compile`` it is one registered custom operator,
``asd_implicit::asd_solution_map(Tensor[] xs, int key)``, whose fake implementation gives
the output's shape (``out_shape=``, or the shape of an earlier eager call).

`as_jax(fn)` is the same as a ``jax.custom_vjp`` whose primal is one JAX primitive,
``asd_solution_map[key]`` (evaluated on the host, a ``pure_callback`` under ``jit``), and
whose backward is asd's pullback (the direction comes from ``seed``, so forward and backward
choose the same pieces).

Inside asd's importers. The custom operator and the primitive are entries of the importers'
tables (`asd.frontends.torch.ATEN`, `asd.frontends.jax.LAX`), registered here when the first
layer is made (`register_torch`, `register_jax`): a model wrapped in ``asd.torch.function``
or ``asd.jax.function`` (or differentiated by ``asd.torch.subgrad`` / ``asd.jax.subgrad``)
is imported with the layer as one primitive node that calls ``fn`` itself. The whole loss is
then one asd sweep: ties in the model's ReLUs and at the solution map's degenerate points are
decided along the same direction, and a refusal (`NotLipschitzError`) reaches the caller as
that class. The layer's own ``seed`` is not used there (the sweep's direction is).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from asd.api import vjp
from asd.errors import UnsupportedError

# ----- the registry: a layer's function, by the key its operator node carries -----

OP_NAME = "asd_solution_map"
"""The name of the torch custom operator (namespace ``asd_implicit``) and of the JAX
primitive: the key of the importers' tables."""


@dataclass
class _Layer:
    """What an operator node with this key computes: ``fn``, and how to know its shape."""

    fn: Callable
    out_shape: tuple | Callable | None
    name: str
    seed: object = None
    shapes: dict = field(default_factory=dict)

    def shape(self, in_shapes: tuple) -> tuple:
        """The output's shape for inputs of these shapes (no values: a traced call)."""
        if callable(self.out_shape):
            return tuple(self.out_shape(*in_shapes))
        if self.out_shape is not None:
            return tuple(self.out_shape)
        if in_shapes in self.shapes:
            return self.shapes[in_shapes]
        raise UnsupportedError(
            f"the solution-map layer {self.name} is traced (torch.export / torch.compile / "
            f"jax.jit) at inputs of shapes {list(in_shapes)} before any concrete call, so its "
            "output's shape is unknown (the solver would have to run). Pass out_shape= (a "
            "shape, or a function of the inputs' shapes) to asd.implicit.as_torch / as_jax, "
            "or call the layer once on concrete values first.")

    def value(self, arrays: list[np.ndarray]) -> np.ndarray:
        """``fn`` on plain arrays (no derivative), remembering the shape it returned."""
        out = np.asarray(self.fn(*arrays))
        self.shapes[tuple(np.shape(a) for a in arrays)] = out.shape
        return out


LAYERS: dict[int, _Layer] = {}
"""Every layer made by `as_torch` / `as_jax`, by its operator key (held for the process)."""
_KEYS = itertools.count()


def _layer(fn: Callable, out_shape, seed) -> int:
    key = next(_KEYS)
    LAYERS[key] = _Layer(fn, out_shape, getattr(fn, "__name__", "solution_map"), seed)
    return key


def imported_node(xs, key: int):
    """The handler of an operator node in an imported program: ``fn`` on the node's inputs
    (numpy arrays, torch tensors or traced values), so asd's sweep differentiates the
    solution map by its own rule, along the sweep's direction."""
    return LAYERS[int(key)].fn(*xs)


# ----- PyTorch -----

_TORCH_OP: list = []


def register_torch():
    """The custom operator ``asd_implicit::asd_solution_map`` (made once), with its fake
    implementation and autograd formula, and its entry in the torch importer's table."""
    if _TORCH_OP:
        return _TORCH_OP[0]
    import torch

    from asd.frontends.torch.native import ALWAYS_SWEPT
    from asd.frontends.torch.ops import ATEN

    @torch.library.custom_op(f"asd_implicit::{OP_NAME}", mutates_args=(),
                             schema="(Tensor[] xs, int key) -> Tensor")
    def solution_map_op(xs, key):
        layer = LAYERS[key]
        out = layer.value([t.detach().cpu().numpy().astype(float) for t in xs])
        return torch.as_tensor(out, dtype=xs[0].dtype, device=xs[0].device)

    @solution_map_op.register_fake
    def _(xs, key):
        return xs[0].new_empty(LAYERS[key].shape(tuple(tuple(t.shape) for t in xs)))

    @torch.library.custom_op(f"asd_implicit::{OP_NAME}_vjp", mutates_args=(),
                             schema="(Tensor[] xs, Tensor ct, int key) -> Tensor[]")
    def solution_map_vjp(xs, ct, key):
        layer = LAYERS[key]
        return list(_torch_pull(layer.fn, layer.seed, xs, ct))

    @solution_map_vjp.register_fake
    def _(xs, ct, key):
        return [torch.empty_like(t) for t in xs]

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[0])
        ctx.key = inputs[1]

    def backward(ctx, ct):
        # traced use (torch.compile of a model calling the layer): the pullback, recomputed
        # at the saved inputs, is one more opaque operator (the eager layer keeps its own)
        return solution_map_vjp(list(ctx.saved_tensors), ct, ctx.key), None

    solution_map_op.register_autograd(backward, setup_context=setup_context)
    ATEN[OP_NAME] = imported_node
    ALWAYS_SWEPT.add(OP_NAME)          # the drop-in's backward is always asd's sweep
    _TORCH_OP.append(solution_map_op)
    return solution_map_op


def _torch_pull(fn, seed, tensors, ct):
    import torch

    arrays = [t.detach().cpu().numpy().astype(float) for t in tensors]
    _, pullback = vjp(fn, tuple(range(len(arrays))), seed=seed)(*arrays)
    grads = pullback(ct.detach().cpu().numpy().astype(float))
    grads = grads if isinstance(grads, tuple) else (grads,)
    return tuple(torch.as_tensor(np.asarray(g), dtype=t.dtype, device=t.device)
                 for g, t in zip(grads, tensors, strict=True))


def as_torch(fn: Callable, *, seed=None, out_shape=None) -> Callable:
    """``fn`` on torch tensors, differentiable by torch autograd through asd's pullback.

    ``out_shape`` (a shape, or a function of the inputs' shapes) is the output's shape, needed
    only where the layer is traced before any eager call (``asd.torch.function`` of a model
    using it, ``torch.compile``). Inside ``asd.torch.function`` / ``asd.torch.subgrad`` the
    layer is one primitive of the imported program (see the module docstring).

    >>> import torch, numpy as np, asd
    >>> layer = asd.implicit.as_torch(lambda h: asd.implicit.qp(
    ...     np.zeros((1, 1)), np.array([-1.0]), None, None, np.array([[1.0]]), h))
    >>> h = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    >>> layer(h).sum().backward(); h.grad                 # x* = h: dx*/dh = 1
    tensor([1.], dtype=torch.float64)
    """
    import torch

    op = register_torch()
    key = _layer(fn, out_shape, seed)

    class SolutionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            arrays = [t.detach().cpu().numpy().astype(float) for t in tensors]
            value, pullback = vjp(fn, tuple(range(len(arrays))), seed=seed)(*arrays)
            LAYERS[key].shapes[tuple(a.shape for a in arrays)] = np.shape(value)
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
        if torch.compiler.is_compiling() or torch.compiler.is_exporting():
            return op(list(tensors), key)      # one node of the traced graph
        return SolutionFunction.apply(*tensors)

    torch_layer.__name__ = getattr(fn, "__name__", "solution_map")
    torch_layer.asd_key = key
    return torch_layer


# ----- JAX -----

_JAX_PRIM: list = []


def register_jax():
    """The JAX primitive ``asd_solution_map`` (made once): ``fn`` on the host, eagerly or
    through ``jax.pure_callback`` under ``jit``, and its entry in the JAX importer's table."""
    if _JAX_PRIM:
        return _JAX_PRIM[0]
    import jax
    from jax.extend.core import Primitive
    from jax.interpreters import batching, mlir

    import asd.frontends.jax as jax_frontend

    prim = Primitive(OP_NAME)

    def spec(arrays, key):
        shape = LAYERS[key].shape(tuple(tuple(a.shape) for a in arrays))
        return jax.ShapeDtypeStruct(shape, arrays[0].dtype)

    def host(*arrays, key):
        out = LAYERS[key].value([np.asarray(a, dtype=float) for a in arrays])
        return out.astype(np.asarray(arrays[0]).dtype)

    def lowered(*arrays, key):
        return jax.pure_callback(lambda *a: host(*a, key=key), spec(arrays, key), *arrays)

    prim.def_impl(lambda *arrays, key: jax.numpy.asarray(host(*arrays, key=key)))
    prim.def_abstract_eval(
        lambda *avals, key: jax.core.ShapedArray(spec(avals, key).shape, avals[0].dtype))
    mlir.register_lowering(prim, mlir.lower_fun(lowered, multiple_results=False))

    def batched(args, dims, *, key):
        """``jax.vmap``: one host solve per example (``lax.map``)."""
        size = next(a.shape[d] for a, d in zip(args, dims, strict=True)
                    if d is not None)
        args = [jax.numpy.broadcast_to(a, (size, *a.shape)) if d is None
                else jax.numpy.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True)]
        return jax.lax.map(lambda xs: prim.bind(*xs, key=key), args), 0

    batching.primitive_batchers[prim] = batched
    jax_frontend.LAX[OP_NAME] = lambda *xs, key: imported_node(xs, key)
    _JAX_PRIM.append(prim)
    return prim


def as_jax(fn: Callable, *, seed=0, out_shape=None) -> Callable:
    """``fn`` on JAX arrays as a ``jax.custom_vjp`` with asd's pullback (host callbacks).

    ``out_shape`` (a shape, or a function of the inputs' shapes) is the output's shape;
    without it the first call must be on concrete arrays (outside ``jit``), which runs ``fn``
    once to read it. Inside ``asd.jax.function`` / ``asd.jax.subgrad`` the layer is one
    primitive of the imported program (see the module docstring).

    >>> import jax, jax.numpy as jnp, numpy as np, asd
    >>> layer = asd.implicit.as_jax(lambda h: asd.implicit.qp(
    ...     np.zeros((1, 1)), np.array([-1.0]), None, None, np.array([[1.0]]), h))
    >>> jax.grad(lambda h: layer(h).sum())(jnp.array([2.0]))
    Array([1.], dtype=float32)
    """
    import jax

    prim = register_jax()
    key = _layer(fn, out_shape, seed)

    def host_pull(ct, *arrays):
        _, pullback = vjp(fn, tuple(range(len(arrays))), seed=seed)(
            *(np.asarray(a, dtype=float) for a in arrays))
        grads = pullback(np.asarray(ct, dtype=float))
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(np.asarray(g, dtype=np.asarray(a).dtype)
                     for g, a in zip(grads, arrays, strict=True))

    @jax.custom_vjp
    def jax_layer(*arrays):
        return prim.bind(*arrays, key=key)

    def forward(*arrays):
        return jax_layer(*arrays), arrays

    def backward(arrays, ct):
        specs = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)
        return jax.pure_callback(host_pull, specs, ct, *arrays, vmap_method="sequential")

    jax_layer.defvjp(forward, backward)
    jax_layer.asd_key = key
    return jax_layer
