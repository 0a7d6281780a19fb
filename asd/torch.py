"""PyTorch programs in, correct subgradients out: ``asd.torch.subgrad`` and ``asd.torch.function``.

PyTorch picks a fixed derivative at every kink (``relu'(0) = 0``), which does not compose:
``relu(x) - relu(-x)`` is the identity, yet its PyTorch gradient at 0 is 0. These functions
import the PyTorch program (through ``torch.export``, see ``asd.frontends.torch``) and run
asd's sweep on it, so the answer is an element of the Clarke subdifferential.

- ``subgrad(fn, *tensors, argnums=0, seed=None, direction=None)``: ``fn`` is a function or an
  ``nn.Module`` returning a scalar. ``argnums`` is an int or a tuple of ints (positions in
  ``tensors``), or ``'params'`` for the module parameters (then the result, and a given
  ``direction``, are dicts ``{qualified name: tensor}``; a function's captured module ``lin``
  names its parameters ``'lin.weight'``...); ``'params'`` may also appear inside a tuple.
  With ``direction=v`` the result is the limiting gradient ``lim ∇f(x + δv)``, δ ↓ 0.
- ``value_and_subgrad``: the same with the value.
- ``function(fn, seed=None)``: a drop-in replacement for ``fn`` whose forward runs ``fn`` and
  whose backward (a ``torch.autograd.Function``) is asd's: the incoming gradient pulled back
  through the linearizations selected along a random direction, i.e. a vector-limiting-
  Jacobian product. Module parameters used by ``fn`` receive their gradients too.
- ``program(fn, *tensors)``: the imported ``asd.Program``.

PyTorch is imported only when one of these is called.

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

from collections.abc import Callable
from typing import Any


def _frontend():
    from .frontends import torch as frontend

    return frontend


def subgrad(fn: Callable, *tensors, argnums: Any = 0, seed=None, direction=None):
    """A Clarke subgradient of scalar ``fn(*tensors)`` as torch tensors (module docstring)."""
    return _frontend().subgrad(fn, *tensors, argnums=argnums, seed=seed, direction=direction)


def value_and_subgrad(fn: Callable, *tensors, argnums: Any = 0, seed=None, direction=None):
    """``(fn(*tensors), subgradient)`` as torch tensors."""
    return _frontend().value_and_subgrad(fn, *tensors, argnums=argnums, seed=seed,
                                         direction=direction)


def function(fn: Callable, *, seed=None) -> Callable:
    """``fn`` with asd's subgradient as its PyTorch backward (module docstring)."""
    return _frontend().function(fn, seed=seed)


def program(fn: Callable, *tensors):
    """The asd ``Program`` of a PyTorch function or module at example tensors."""
    return _frontend().program(fn, *tensors)


__all__ = ["function", "program", "subgrad", "value_and_subgrad"]
