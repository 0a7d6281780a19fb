"""``asd.torch.subgrad`` and ``value_and_subgrad``: asd's sweep of an imported program.

The sweep runs natively on the model's tensors when every primitive allows it, else on numpy
copies (`_sweep`); results come back as tensors in each argument's dtype and device.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
import torch

import asd
from asd.errors import ArgumentError, ArgumentTypeError, UnsupportedError
from asd.frontends import common
from asd.frontends.torch import native
from asd.frontends.torch.convert import HALF, _native, _to_numpy, in_float32
from asd.frontends.torch.importer import TorchProgram, import_program


def _refusal(e: Exception) -> str | None:
    """Why a native sweep was refused (an operation without an array-API rule, or a kernel
    without a torch implementation), or None when ``e`` is another error."""
    text = str(e)
    if "numpy arrays only so far" not in text:
        return None
    where = text[text.index("[while importing"):].strip("[] ") if "[while importing" in text \
        else ""
    head = text.split(" met ")[0].split(" runs on numpy")[0].split(" so it runs")[0]
    head = head.split(": ")[-1].strip()
    return f"{head} has no array-API rule yet" + (f"; {where}" if where else "")


def _sweep(prog: TorchProgram, tensors, param_tensors: dict, run: Callable):
    """``run(inputs, params, native)`` on the torch path when the program allows it, else on
    numpy copies; records the path that ran in ``prog.backend``."""
    if prog.native:
        try:
            out = run([_native(t) for t in tensors],
                      {k: _native(v) for k, v in param_tensors.items()}, True)
        except UnsupportedError as e:
            reason = _refusal(e)
            if reason is None:
                raise
            prog.refused = reason
        else:
            prog.backend = "torch"
            return out
    prog.backend = f"numpy (because: {prog.refused or 'asd.torch.NATIVE is False'})"
    return run([_to_numpy(t) for t in tensors],
               {k: _to_numpy(v) for k, v in param_tensors.items()}, False)


def _prepare(fn, tensors, argnums):
    prog = import_program(fn, *tensors)
    n = len(tensors)
    if len(prog.user_inputs) != n:
        raise ArgumentTypeError(
            f"{prog.label} was called with {n} arguments holding {len(prog.user_inputs)} "
            "values: asd.torch.subgrad takes tensors and Python numbers as arguments, not "
            "containers of them; pass each tensor as its own argument (asd.torch.function "
            "takes nested arguments and keyword arguments).")
    nums = common.argnums_with_params(argnums, n)
    if nums == n or (isinstance(nums, tuple) and n in nums):
        if not prog.param_names:
            raise ArgumentError("argnums='params' but the function reaches no parameters (no "
                                "module, and no tensor that requires grad)")
    for i in (nums,) if isinstance(nums, int) else nums:
        if i < n and not (isinstance(tensors[i], torch.Tensor)
                          and tensors[i].is_floating_point()):
            kind = getattr(tensors[i], "dtype", type(tensors[i]).__name__)
            raise ArgumentError(
                f"argnums includes argument {i}, a {kind} "
                "value: only floating-point tensors are differentiated (integer labels and "
                "indices are constants); leave it out of argnums.")
    return prog, nums


def _direction(direction, native: bool):
    if direction is None:
        return None
    if isinstance(direction, dict):
        return {k: _direction(v, native) for k, v in direction.items()}
    if isinstance(direction, list | tuple):
        return type(direction)(_direction(d, native) for d in direction)
    return _native(direction) if native else _to_numpy(direction)


def _as_torch_result(g):
    if isinstance(g, dict):
        return {k: _as_torch_result(v) for k, v in g.items()}
    if isinstance(g, list | tuple):
        return type(g)(_as_torch_result(v) for v in g)
    if isinstance(g, torch.Tensor):
        return g
    return torch.from_numpy(np.array(g))


def _like(g: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``g`` in the dtype and on the device of ``t`` (bfloat16 back from float32)."""
    return g.to(device=t.device, dtype=t.dtype)


def _settings():
    return importlib.import_module(__package__)


def _by_autograd(prog: TorchProgram, tensors: tuple, nums):
    """``(value, gradient)`` by PyTorch's own autograd on the native program, when no tie
    matters there (`asd.frontends.torch.native`: then it is asd's element, up to rounding);
    None when one may (or the program has no native form), and asd's sweep answers. Half
    precision runs in float32, as asd's sweep computes it (its element is the float32
    program's), and the results come back in the arguments' dtypes."""
    params = prog.tensors()
    positions = (nums,) if isinstance(nums, int) else nums
    n = len(tensors)
    wanted_params = n in positions
    diff = frozenset([prog.user_inputs[i] for i in positions if i < n]
                     + (list(prog.param_names) if wanted_params else []))
    form = prog.native_program(diff)
    if isinstance(form, str):
        return None
    half = any(isinstance(t, torch.Tensor) and t.dtype in HALF
               for t in (*tensors, *params.values()))
    leaves = [in_float32(t.detach()).requires_grad_(True) if i in positions else
              (in_float32(t.detach()) if isinstance(t, torch.Tensor) else t)
              for i, t in enumerate(tensors)]
    fresh = {k: in_float32(v.detach()).requires_grad_(True) if wanted_params
             else in_float32(v.detach()) for k, v in params.items()}
    with torch.enable_grad():
        try:
            res = form.module(*form.flat(leaves, {p: fresh[t] for p, t in
                                                  prog.param_names.items()}))
        except RuntimeError:
            if not half:
                raise
            return None     # a graph exported with half-only kernels: asd's sweep answers
        out, finite, margins = res[0], res[1], res[2:]
        if form.n_outputs != 1 or out.numel() != 1 or not out.is_floating_point():
            return None                 # asd's sweep says what is wrong with the output
        tied = (native.flag_on_host(margins, finite) if finite.device.type == "cpu"
                else bool(native.flag(margins, finite)))
        if tied:
            return None
        wrt = [leaves[i] for i in positions if i < n] + (list(fresh.values())
                                                         if wanted_params else [])
        # no path from the leaves (a step function's output off its jumps, as the tie
        # test found): locally constant, its gradient is zero
        grads = (torch.autograd.grad(out.reshape(()), wrt, allow_unused=True)
                 if out.requires_grad else [None] * len(wrt))
    grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt, strict=True)]
    originals = [tensors[i] for i in positions if i < n] + (list(params.values())
                                                            if wanted_params else [])
    it = (_like(g, t) for g, t in zip(grads, originals, strict=True))
    g = tuple(dict(zip(fresh, (next(it) for _ in fresh), strict=True)) if i == n else next(it)
              for i in positions)
    value = out.detach().reshape(()).to(prog.output_dtypes[0])
    return value, (g[0] if isinstance(nums, int) else g)


def value_and_subgrad(fn: Callable, *tensors, argnums=0, seed=None, direction=None):
    """``(value, subgradient)`` of a scalar PyTorch function, both as torch tensors: by
    PyTorch's own autograd where no tie matters (its derivative is then asd's element), by
    asd's sweep along ``direction`` (or a random one from ``seed``) where one may."""
    prog, nums = _prepare(fn, tensors, argnums)
    if _settings().NATIVE_BACKWARD and prog.native:
        done = _by_autograd(prog, tensors, nums)
        if done is not None:
            return done

    def run(arrays, params, native):
        def f(*xs):
            return prog.numpy_fn(*xs[:-1], params=xs[-1])

        return asd.value_and_subgrad(f, nums, seed=seed,
                                     direction=_direction(direction, native))(*arrays, params)

    tensors_of = {**dict(enumerate(tensors)), len(tensors): prog.tensors()}
    value, g = _sweep(prog, tensors, tensors_of[len(tensors)], run)

    def typed(i, gi):      # each gradient in its argument's dtype and device
        if i == len(tensors):
            return {k: _like(v, tensors_of[i][k]) for k, v in _as_torch_result(gi).items()}
        return _like(_as_torch_result(gi), tensors_of[i])

    g = typed(nums, g) if isinstance(nums, int) else tuple(
        typed(i, gi) for i, gi in zip(nums, g, strict=True))
    return _as_torch_result(value), g


def subgrad(fn: Callable, *tensors, argnums=0, seed=None, direction=None):
    """A Clarke subgradient of scalar ``fn(*tensors)``, as torch tensors (see ``asd.torch``)."""
    return value_and_subgrad(fn, *tensors, argnums=argnums, seed=seed, direction=direction)[1]
