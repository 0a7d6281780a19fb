"""Tensors, numpy arrays and the sweep's values: the conversions the PyTorch front end makes.

The native path sweeps the model's own tensors (detached, half precision in float32); the
numpy path sweeps copies on the host. Nodes on constants only are evaluated by PyTorch.
"""

from __future__ import annotations

import numpy as np
import torch

NUMPY_DTYPE = {torch.bfloat16: np.dtype(np.float32), torch.float16: np.dtype(np.float32)}
"""Half-precision torch dtypes and the numpy dtype asd computes them in (their values are
exact in float32, so asd's sweep sees the very numbers the model holds; the native path
computes them in float32 on the device likewise, and both return the input's dtype)."""


def _np_dtype(dtype):
    if dtype in NUMPY_DTYPE:
        return NUMPY_DTYPE[dtype]
    return torch.empty((), dtype=dtype).numpy().dtype


HALF = (torch.bfloat16, torch.float16)
"""Torch dtypes asd computes in float32 (exactly: their values are float32 values)."""


def in_float32(t):
    """A half-precision tensor in float32 (exactly, and differentiably: autograd casts the
    gradient back), anything else as it is: asd computes half precision in float32."""
    return t.float() if isinstance(t, torch.Tensor) and t.dtype in HALF else t




def _flat_values(tree):
    if isinstance(tree, list | tuple):
        for t in tree:
            yield from _flat_values(t)
    elif isinstance(tree, dict):
        for t in tree.values():
            yield from _flat_values(t)
    else:
        yield tree


def _native(t):
    """A tensor as the native path sweeps it: detached, on its device, half precision
    (bfloat16, float16) in float32."""
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return t.to(torch.float32) if t.dtype in HALF else t
    return t


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return (t.to(torch.float32) if t.dtype in NUMPY_DTYPE else t).numpy()
    return np.asarray(t)

def _to_torch(a, device=None):
    if isinstance(a, np.ndarray | np.generic):
        return torch.from_numpy(np.asarray(a)).to(device) if device is not None else \
            torch.from_numpy(np.asarray(a))
    if isinstance(a, list | tuple):
        return type(a)(_to_torch(b, device) for b in a)
    if isinstance(a, dict):
        return {k: _to_torch(v, device) for k, v in a.items()}
    return a


def _constant(target, args, kwargs):
    """Evaluate a node that depends on constants only with PyTorch itself (no derivative)."""
    out = target(*_to_torch(args), **_to_torch(kwargs))
    if isinstance(out, list | tuple):
        return type(out)(_to_numpy(o) if isinstance(o, torch.Tensor) else o for o in out)
    return _to_numpy(out) if isinstance(out, torch.Tensor) else out
