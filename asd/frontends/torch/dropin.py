"""``asd.torch.function``: a drop-in replacement whose backward is asd's subgradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import asd
from asd.errors import ArgumentError, UnsupportedError
from asd.frontends.torch.api import _as_torch_result, _like, _sweep
from asd.frontends.torch.convert import _flat_values, _native, _to_numpy
from asd.frontends.torch.importer import TorchProgram, import_program

# ----- the drop-in autograd function -----

class _Unseen(torch.overrides.TorchFunctionMode):
    """Watches the forward for a tensor that requires grad but is no input of the autograd
    function (one the importer could not reach): it would silently get no gradient."""

    def __init__(self, known: list[torch.Tensor], label: str):
        super().__init__()
        self.known = {id(t) for t in known}
        self.label = label

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in (v for v in _flat_values((args, kwargs)) if isinstance(v, torch.Tensor)):
            # a view (W.t(), W.T, W[0], W.reshape(...), tied weights) is where its base is
            base = t._base if t._base is not None else t
            if t.requires_grad and base.is_leaf and id(base) not in self.known \
                    and id(t) not in self.known:
                raise ArgumentError(
                    f"{self.label} uses a tensor of shape {tuple(t.shape)} ({t.dtype}) that "
                    f"requires grad in {getattr(func, '__name__', func)}, but asd cannot see "
                    "where it is kept, so it would get no gradient. Keep it where the "
                    "importer looks (a module, or a closure variable, global, object "
                    "attribute, dict, list or tuple the function refers to) or pass it as an "
                    "argument.")
        return func(*args, **kwargs)


class _ASDFunction(torch.autograd.Function):
    """The forward is asd's sweep (`asd.vjp`) of the program imported for exactly this call:
    its value is the output, and the linearizations it chose wait in ``ctx``; the backward
    pulls the incoming gradient back through them. So a training step costs one sweep and one
    reverse pass, as torch's own does, and the direction decides every tie before any
    cotangent exists (the branch chosen cannot depend on the loss downstream)."""

    @staticmethod
    def forward(ctx, prog, seed, n_inputs, *flat):
        inputs, params = flat[:n_inputs], flat[n_inputs:]
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        # only what requires grad and what a gradient reaches (an unused parameter keeps
        # .grad None, as in torch, so that an optimizer leaves it alone)
        ctx.reached = prog.reached
        wants = [i for i, t in enumerate(inputs) if ctx.needs_input_grad[3 + i]
                 and ctx.reached[i] and isinstance(t, torch.Tensor) and t.is_floating_point()]
        want_params = any(need and reached for need, reached in zip(
            ctx.needs_input_grad[3 + n_inputs:], ctx.reached[n_inputs:], strict=True))
        nums = tuple(wants) + ((n_inputs,) if want_params else ())
        ctx.n_inputs, ctx.nums, ctx.pullback, ctx.label = n_inputs, nums, None, prog.label
        ctx.is_tensor = [isinstance(t, torch.Tensor) for t in flat]
        # the linearizations read these tensors' storage: saved, so that one changed in place
        # before the backward raises torch's usual error instead of bending the gradient (and
        # each gradient comes back in its tensor's dtype and device)
        ctx.save_for_backward(*tensors)
        if not nums:                 # nothing to differentiate: torch's own forward
            with torch.no_grad():
                outs = prog.call(inputs)
            return _detached(tuple(outs) if len(outs) > 1 else outs[0], flat)

        def run(arrays, values, native):
            def f(*xs):
                return prog.numpy_fn(*xs[:-1], params=xs[-1])

            return asd.vjp(f, nums, seed=seed)(*arrays, values), native

        names = list(prog.tensors())
        (value, ctx.pullback), ctx.native = _sweep(
            prog, inputs, dict(zip(names, params, strict=True)), run)
        outs = value if isinstance(value, tuple) else (value,)
        device = tensors[0].device
        typed = tuple(_detached(_as_torch_result(o).to(device=device, dtype=d), flat)
                      for o, d in zip(outs, prog.output_dtypes, strict=True))
        return typed if isinstance(value, tuple) else typed[0]

    @staticmethod
    def backward(ctx, *cts):
        return _backward(ctx, *cts)


def _detached(out, flat):
    """The forward's output as a fresh tensor: never one of the inputs or a view of one,
    which autograd would treat as changed in place."""
    if isinstance(out, tuple):
        return tuple(_detached(o, flat) for o in out)
    if not isinstance(out, torch.Tensor):
        return out
    base = out.untyped_storage().data_ptr()
    if any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == base
           for t in flat):
        return out.clone()
    return out


@torch.compiler.disable(recursive=True)
def _backward(ctx, *cts):
    """The incoming gradient pulled back through the forward's sweep (a graph break under
    torch.compile: it runs eagerly)."""
    n, nums = ctx.n_inputs, ctx.nums
    grads: list = [None] * len(ctx.is_tensor)
    if ctx.pullback is None:
        return (None, None, None, *grads)
    saved = iter(ctx.saved_tensors)   # torch checks that none was changed in place since
    flat = [next(saved) if is_tensor else None for is_tensor in ctx.is_tensor]
    conv = _native if ctx.native else _to_numpy
    with torch.no_grad():
        cts_ = tuple(conv(c) if c is not None else None for c in cts)
        g = ctx.pullback(cts_ if len(cts_) > 1 else cts_[0])   # freed with the graph
        for i, gi in zip(nums, g, strict=True):
            if i == n:
                for j, v in enumerate(gi.values()):
                    if ctx.reached[n + j]:
                        grads[n + j] = _like(_as_torch_result(v), flat[n + j])
            else:
                grads[i] = _like(_as_torch_result(gi), flat[i])
    if torch.is_grad_enabled():     # create_graph=True: the gradient will be differentiated
        grads = _first_order_only(grads, ctx.label)
    return (None, None, None, *grads)


class _FirstOrderOnly(torch.autograd.Function):
    """The gradients `function`'s backward returns under ``create_graph=True``, unchanged,
    with a backward that refuses: asd gives first derivatives only, and a gradient without
    a graph would make a gradient penalty silently contribute nothing (PyTorch's
    ``once_differentiable`` skips its error when the incoming gradient needs none, so it is
    not used)."""

    @staticmethod
    def forward(ctx, label, *grads):
        ctx.label = label
        return tuple(g.clone() for g in grads)

    @staticmethod
    def backward(ctx, *cts):
        raise UnsupportedError(
            f"a gradient computed through asd.torch.function({ctx.label}) with "
            "create_graph=True is being differentiated again (a gradient penalty, a "
            "Hessian-vector product). asd gives first derivatives only (a limiting gradient "
            "has no derivative at a kink): compute the term that differentiates a gradient "
            "with the model itself, e.g. torch.autograd.grad(model(x).sum(), x, "
            "create_graph=True) for a WGAN-GP penalty, and the rest of the loss through "
            "asd.torch.function; or leave out create_graph=True where the gradient is only "
            "read.")


def _first_order_only(grads: list, label: str) -> list:
    """``grads`` (None kept) passed through `_FirstOrderOnly`, so that a backward through
    any of them raises instead of finding no graph."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return grads
    marked = _FirstOrderOnly.apply(label, *(grads[i].detach().requires_grad_() for i in present))
    out = list(grads)
    for i, g in zip(present, marked, strict=True):
        out[i] = g
    return out


def _check_reach(prog: TorchProgram, args: tuple, kwargs: dict) -> None:
    """Run ``fn`` once, watched, the first time its program is called with gradients on: a
    tensor that requires grad but that the importer cannot reach (export bakes it in as a
    constant) raises here instead of silently getting no gradient."""
    flat = [*prog.leaves(args, kwargs), *prog.tensors().values()]
    with torch.no_grad(), _Unseen(flat, prog.label):
        prog.fn(*args, **kwargs)
    prog.reach_checked = True


def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with PyTorch's backward replaced by asd's (see ``asd.torch.function``).

    Each call first imports (or finds in the cache) the program for ``fn`` as it is now, so
    an operation asd refuses is refused before anything runs; the forward sweeps that very
    program and the backward pulls back through the branches it chose (only for the inputs
    and parameters that require grad and that the output depends on: an unused parameter's
    ``.grad`` stays None, as in torch). The parameters ``fn`` reaches are inputs of the
    autograd function and get their gradients; a tensor requiring grad that ``fn`` uses but
    asd cannot reach raises, checked by running ``fn`` once when its program is new.
    Arguments may be passed by keyword and nested in tuples, lists and dicts; the result
    has the structure ``fn`` returns. The gradient is a first derivative: differentiating
    it again (``create_graph=True``) raises `asd.UnsupportedError`.
    """

    def wrapped(*args, **kwargs):
        kwargs = dict(sorted(kwargs.items()))      # one program whatever the keyword order
        prog = import_program(fn, *args, **kwargs)
        if not torch.is_grad_enabled():      # no backward can follow: torch's own forward
            return prog.fn(*args, **kwargs)
        if not prog.reach_checked:
            _check_reach(prog, args, kwargs)
        leaves = prog.leaves(args, kwargs)
        return prog.structured(_ASDFunction.apply(prog, seed, len(leaves), *leaves,
                                                  *prog.tensors().values()))

    # torch.compile around a step calling it: a graph break here, the call runs eagerly
    # (dynamo tracing into export and the sweep would take minutes and gain nothing)
    wrapped = torch.compiler.disable(wrapped, recursive=True)
    wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapped.__doc__ = f"{wrapped.__name__} with asd's subgradient as its backward."
    return wrapped
