"""PyTorch programs in, correct subgradients out: ``asd.torch.subgrad`` and ``asd.torch.function``.

PyTorch picks a fixed derivative at every kink (``relu'(0) = 0``), which does not compose:
``relu(x) - relu(-x)`` is the identity, yet its PyTorch gradient at 0 is 0. These functions
import the PyTorch program through ``torch.export`` (below) and run asd's sweep on it, so
the answer is an element of the Clarke subdifferential.

- ``subgrad(fn, *tensors, argnums=0, seed=None, direction=None)``: ``fn`` is a function or an
  ``nn.Module`` returning a scalar. ``argnums`` is an int or a tuple of ints (positions in
  ``tensors``), or ``'params'`` for the parameters ``fn`` reaches (then the result, and a
  given ``direction``, are dicts ``{path: tensor}``: a function's captured module ``lin``
  names its parameters ``'lin.weight'``, a tensor requiring grad in ``cfg['w']`` is
  ``'cfg.w'``); ``'params'`` may also appear inside a tuple.
  With ``direction=v`` the result is the limiting gradient ``lim ∇f(x + δv)``, δ ↓ 0.
- ``value_and_subgrad``: the same with the value.
- ``function(fn, seed=None)``: a drop-in replacement for ``fn`` (a ``torch.autograd.Function``)
  whose forward is asd's sweep of the imported program along a random direction (`asd.vjp`)
  and whose backward pulls the incoming gradient back through the linearizations that sweep
  selected, i.e. a vector-limiting-Jacobian product: one sweep and one reverse pass per
  step, as torch's own. Every parameter ``fn`` reaches (in modules, closures, globals,
  objects, dicts, lists, tuples) receives its gradient; one it uses but cannot reach raises
  (``fn`` runs once, watched, when its program is first imported). Half-precision models
  are swept in float32, so the output is rounded once to the model's dtype; under
  ``torch.no_grad()`` the call is ``fn``'s own forward.

Programs are cached under a key holding everything the trace reads (`import_program`,
`asd.frontends.reach`), so a changed closure, flag or ``module.training`` is never answered
with the old program, and ``function``'s backward differentiates the program imported for
its own forward.
- ``program(fn, *tensors)``: the imported ``asd.Program``.

This package is ``asd.frontends.torch``, published as ``asd.torch``; ``import asd`` does not
import it, so PyTorch is imported only when ``asd.torch`` is first used. Its modules: `ops`
(the ATen table), `convert` (tensors and arrays), `importer` (``torch.export``, the program,
its cache), `api` (``subgrad``), `dropin` (``function``).

Why ``torch.export`` and not ``torch.fx.symbolic_trace``: both were tried on the model set
(MLP, CNN with conv/batch norm/pooling/dropout, and functions using topk, sort, norm, where,
clamp and the losses). ``fx`` records the *spelling* of the source (``F.relu``,
``torch.relu``, ``x.relu()``, ``nn.ReLU`` modules, ``operator.add``, ``torch.add``, named-tuple
attribute access ...), so every spelling needs its own mapping, modules stay opaque
``call_module`` nodes, and a model with Python logic on shapes breaks its symbolic proxies.
``export`` runs the real Python (through dynamo) and yields the closed, canonical ATen
operator set: every spelling of relu is ``aten.relu``, ``Linear`` is ``aten.linear``, eval-mode
dropout disappears, eval batch norm is an explicit no-training op, and parameters and buffers
are *lifted to graph inputs* with their qualified names, which is exactly what differentiating
with respect to module parameters needs. Its cost (about 0.1 s per export after the first) is
paid once per function, input signature and reachable state: exports are cached
(`import_program`).

Where it runs. When every operation of the graph has an array-API rule, the sweep runs
natively: on the model's own tensors (detached), on their device and in their dtype (bfloat16
and float16 in float32), returning tensors of the inputs' dtype on their device, with no copy
to numpy. When a primitive refuses (its rule "runs on numpy arrays only so far"), the call is
swept on numpy copies instead and the program remembers it: ``TorchProgram.backend`` is
``'torch'`` or ``'numpy (because: sort has no array-API rule yet; ...)'``, and
``asd.torch.NATIVE = False`` forces numpy everywhere. ``function`` and its backward are graph
breaks under ``torch.compile`` (they run eagerly inside a compiled step).

The graph becomes a Python function on numpy arrays (`TorchProgram.numpy_fn`) whose every
node calls asd's library (``asd.relu``, ``asd.conv2d``, ``np.sort`` on traced arrays...); on
the native path the same function runs on torch tensors, where nodes whose arguments are not
traced in this sweep are evaluated by PyTorch itself.
A node that depends on the differentiated inputs and has no mapping raises
`asd.UnsupportedError` when the program is imported, naming the ATen op, the node, the module
path and the source line; nothing ever falls back to PyTorch's own derivative. Nodes that
depend only on constants (``torch.zeros``, index arithmetic) are evaluated by PyTorch itself:
they carry no derivative.

>>> import torch, asd.torch
>>> f = lambda x: (torch.relu(x) - torch.relu(-x)).sum()
>>> asd.torch.subgrad(f, torch.zeros(3))
tensor([1., 1., 1.])
>>> x = torch.zeros(3, requires_grad=True)
>>> (torch.relu(x) - torch.relu(-x)).sum().backward(); x.grad     # PyTorch's own answer
tensor([0., 0., 0.])
>>> x.grad = None
>>> g = asd.torch.function(lambda x: torch.relu(x) - torch.relu(-x))
>>> g(x).sum().backward(); x.grad
tensor([1., 1., 1.])
"""

from __future__ import annotations

from asd.frontends.torch.api import subgrad, value_and_subgrad
from asd.frontends.torch.dropin import function
from asd.frontends.torch.importer import (
    IMPORTS,
    TorchProgram,
    dtype_of,
    import_program,
    program,
)
from asd.frontends.torch.ops import ATEN, USED, NotComputed

CACHE_SIZE = 64
"""How many imported programs the cache keeps (the oldest goes first)."""

NATIVE_BACKWARD = True
"""Whether `function` runs the imported graph under PyTorch's own autograd wherever no tie
matters (`asd.frontends.torch.native`), and asd's sweep only where one does. Set it to False
to sweep every call with asd (the reference the native path is tested against)."""

NATIVE = True
"""Whether sweeps try the torch path first (see `TorchProgram.backend`). Set it to False to
run every program on numpy, as before the native path existed (to compare the two)."""

__all__ = ["ATEN", "CACHE_SIZE", "IMPORTS", "NATIVE", "NATIVE_BACKWARD", "USED", "NotComputed",
           "TorchProgram", "dtype_of", "function", "import_program", "program", "subgrad",
           "value_and_subgrad"]
