"""``asd.torch.function``: a drop-in replacement whose backward is asd's subgradient.

The imported program runs natively under PyTorch's autograd (`asd.frontends.torch.native`)
with a flag of any tie that matters: without one, PyTorch's backward is exact and is used;
with one, the backward is asd's sweep of the same program (`_Correct`). Programs without a
native form are swept by asd at every call (`_ASDFunction`). Under ``torch.compile`` the call
is traced (`_compiled`): the native program inline, asd's part an opaque op.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import operator
import weakref
from collections.abc import Callable

import numpy as np
import torch
from torch.autograd import forward_ad
from torch.utils import _pytree as pytree

import asd
from asd.core.sweep import LazyDirection
from asd.errors import ArgumentError, ArgumentTypeError, UnsupportedError
from asd.frontends.torch import native
from asd.frontends.torch.api import _as_torch_result, _direction, _like, _sweep
from asd.frontends.torch.convert import HALF, _flat_values, _native, _to_numpy, in_float32
from asd.frontends.torch.importer import TorchProgram, import_program

# ----- what the importer cannot see -----

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


# ----- asd's sweep of the program: the reference, and the correction where a tie matters -----

def _check_direction(prog: TorchProgram, direction, n_inputs: int) -> None:
    """A drop-in's ``direction=``: a dict from parameter names (as ``argnums='params'``
    names them) and input positions (the leaves of the arguments, in order) to tensors."""
    if direction is None:
        return
    if not isinstance(direction, dict):
        raise ArgumentTypeError(
            f"direction={type(direction).__name__}: asd.torch.function takes a dict from "
            "parameter names (as asd.torch.subgrad(..., argnums='params') names them) and "
            "input positions to tensors; leaves left out have direction 0")
    names = set(prog.tensors())
    bad = [k for k in direction if not (k in names or (isinstance(k, int) and 0 <= k < n_inputs))]
    if bad:
        raise ArgumentError(
            f"direction names {bad!r}, which {prog.label} does not differentiate; its "
            f"parameters are {sorted(names)!r} and its inputs positions 0..{n_inputs - 1}")


class _Sweep:
    """asd's sweep (`asd.vjp`) of a program at given leaves and tensors, differentiating the
    flat positions ``wanted`` (inputs, then the program's tensors) along ``direction`` (or a
    random one from ``seed``): the others are constants of the sweep, as they are of torch's
    autograd (a frozen parameter is not a direction of the sweep)."""

    def __init__(self, prog: TorchProgram, seed, direction, n_inputs: int, wanted: list[int]):
        self.prog, self.seed, self.direction = prog, seed, direction
        self.n_inputs, self.wanted = n_inputs, wanted
        self.names = list(prog.tensors())
        self.inputs = [i for i in wanted if i < n_inputs]
        self.params = [self.names[i - n_inputs] for i in wanted if i >= n_inputs]

    def vjp(self, flat: list):
        """``(value, pullback, native)``: the output and ``cts -> grads over flat`` (None
        where not wanted), on the path `_sweep` chose."""
        prog, n = self.prog, self.n_inputs
        inputs, params = flat[:n], dict(zip(self.names, flat[n:], strict=True))

        def run(arrays, values, native):
            xs = [arrays[i] for i in self.inputs]
            if self.params:
                xs.append({k: values[k] for k in self.params})

            def f(*xs_):
                ins = list(arrays)
                for i, x in zip(self.inputs, xs_, strict=False):
                    ins[i] = x
                ps = {**values, **xs_[-1]} if self.params else values
                return prog.numpy_fn(*ins, params=ps)

            out = asd.vjp(f, tuple(range(len(xs))), seed=self.seed,
                          direction=self._direction(xs, native))(*xs)
            return out, native

        (value, pull), native = _sweep(prog, inputs, params, run)

        def pullback(cts):
            conv = _native if native else _to_numpy
            cts_ = tuple(conv(c) if c is not None else None for c in cts)
            g = pull(cts_ if len(cts_) > 1 else cts_[0])
            grads: list = [None] * len(flat)
            for i, gi in zip(self.inputs, g, strict=False):
                grads[i] = _like(_as_torch_result(gi), flat[i])
            if self.params:
                for k, gk in g[-1].items():
                    j = n + self.names.index(k)
                    grads[j] = _like(_as_torch_result(gk), flat[j])
            return grads

        return value, pullback, native

    def _direction(self, xs: list, native: bool):
        if self.direction is None:
            return None
        d = self.direction
        out = [d[i] if i in d else torch.zeros_like(x) if isinstance(x, torch.Tensor)
               else np.zeros_like(x) for i, x in zip(self.inputs, xs, strict=False)]
        if self.params:
            out.append({k: d[k] if k in d else (torch.zeros_like(v) if isinstance(
                v, torch.Tensor) else np.zeros_like(v)) for k, v in xs[-1].items()})
        return _direction(tuple(out), native)


def _wanted(prog: TorchProgram, flat: list, needs) -> list[int]:
    """The flat positions (inputs, then the program's tensors) that get a gradient: floating
    tensors that require grad (``needs``) and that a gradient reaches (an unused parameter
    keeps ``.grad`` None, as in torch, so that an optimizer leaves it alone)."""
    return [i for i in _needed(flat, needs) if prog.reached[i]]


def _needed(flat: list, needs) -> list[int]:
    """The flat positions of floating tensors that require grad, reached or not: where no
    gradient reaches any of them (a step function of the input is all the output sees), a
    sweep over these is what says whether the program jumps at the point (refused) or is
    constant near it (no gradient, as torch gives none)."""
    return [i for i, (t, need) in enumerate(zip(flat, needs, strict=True))
            if need and isinstance(t, torch.Tensor) and t.is_floating_point()]


class _ASDFunction(torch.autograd.Function):
    """asd's sweep at every call (programs without a native form, `NATIVE_BACKWARD` off,
    and ``create_graph``): the forward is `asd.vjp` of the program imported for exactly this
    call, its value the output and its linearizations waiting in ``ctx``; the backward pulls
    the incoming gradient back through them. One sweep and one reverse pass per step, and the
    direction decides every tie before any cotangent exists."""

    @staticmethod
    def forward(ctx, prog, seed, direction, n_inputs, *flat):
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        wanted = _wanted(prog, list(flat), ctx.needs_input_grad[4:])
        ctx.pullback, ctx.label, ctx.n = None, prog.label, len(flat)
        ctx.is_tensor = [isinstance(t, torch.Tensor) for t in flat]
        # the linearizations read these tensors' storage: saved, so that one changed in place
        # before the backward raises torch's usual error instead of bending the gradient (and
        # each gradient comes back in its tensor's dtype and device)
        ctx.save_for_backward(*tensors)
        if not wanted:                 # nothing to differentiate: torch's own forward
            needed = _needed(list(flat), ctx.needs_input_grad[4:])
            if needed:                 # ... once asd's sweep has found no jump there
                with _no_autocast(tensors):
                    _Sweep(prog, seed, direction, n_inputs, needed).vjp(list(flat))
            with torch.no_grad():
                outs = prog.call(flat[:n_inputs])
            return _detached(tuple(outs) if len(outs) > 1 else outs[0], flat)
        with _no_autocast(tensors):
            value, ctx.pullback, _ = _Sweep(prog, seed, direction, n_inputs,
                                            wanted).vjp(list(flat))
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
    """The incoming gradient pulled back through the forward's sweep."""
    if ctx.pullback is None:
        return (None, None, None, None, *([None] * ctx.n))
    saved = ctx.saved_tensors      # torch checks that none was changed in place since
    with torch.no_grad(), _no_autocast(saved):
        grads = ctx.pullback(cts)  # freed with the graph
    if torch.is_grad_enabled():     # create_graph=True: the gradient will be differentiated
        grads = _first_order_only(grads, ctx.label)
    return (None, None, None, None, *grads)


# ----- the native path: PyTorch's own backward, and asd's where a tie matters -----

def _no_autocast(tensors):
    """asd's sweep runs the program in its own dtypes: an enclosing ``torch.autocast`` (the
    backward may run inside one) would round its products to half precision."""
    device = next((t.device.type for t in tensors if isinstance(t, torch.Tensor)), "cpu")
    return torch.autocast(device, enabled=False)


class _NoNativeForm(Exception):
    """The native program met an operation PyTorch's autograd does not differentiate."""


class _NativeCall:
    """One drop-in over one program and one pattern of differentiated leaves: the program's
    native form (`asd.frontends.torch.native`), and what its backward needs where a tie
    matters. Registered in `_CALLS` under `key`, which the compiled correction op names."""

    def __init__(self, prog: TorchProgram, native, seed, direction, leaves: list,
                 needs: tuple):
        self.prog, self.native, self.seed, self.direction = prog, native, seed, direction
        self.tensors = list(prog.tensors().values())
        flat = [*leaves, *self.tensors]
        self.n_inputs, self.needs = len(leaves), needs
        self.is_tensor = tuple(isinstance(t, torch.Tensor) for t in flat)
        # Python numbers among the leaves are part of the program's signature: fixed here
        self.scalars = [v for v, is_t in zip(flat, self.is_tensor, strict=True) if not is_t]
        self.wanted = _wanted(prog, flat, needs)
        position = list(itertools.accumulate(self.is_tensor))
        self.wanted_saved = [position[i] - 1 for i in self.wanted]
        """The positions among the saved tensors (tensor leaves, then the program's
        tensors) that get a gradient."""
        self.float_outputs = [d.is_floating_point for d in prog.output_dtypes]
        self.n_saved = sum(self.is_tensor)
        self.n_out = native.n_outputs
        self.half = any(isinstance(t, torch.Tensor) and t.dtype in HALF for t in flat)
        """Whether the program computes in half precision, which asd computes in float32
        (`_upcast`): the native program too, so its branches and ties are the float32
        program's, whose element asd gives."""
        self.out_dtypes = list(prog.output_dtypes)
        self.half_verified = False
        self._decided = None
        self._directions: dict = {}
        self.verified = False
        self.sticky = 0
        """Calls left to run the decided program in the forward (`_decided_forward`): set
        after a tie first order decided, counted down, so that a step that meets the same
        ties every call (a zero learning rate, a zero-initialised layer) runs its forward
        once, not natively and then again decided in the backward; at 0 the next call
        probes natively (a program whose ties went away returns to the native path)."""
        """Whether the native program has run once (an operation autograd does not
        differentiate raises then, and the call moves to asd's sweep)."""
        self.key = f"{next(_KEYS)}"
        _register(self)

    def run(self, leaves: list):
        """The program natively, its outputs passed through `_Correct` with the flag of a
        tie that matters: as a tensor when traced, else the margins, read in the backward.
        Right after tied calls, the decided program instead (`_decided_forward`)."""
        if self.sticky and not torch.compiler.is_compiling():
            self.sticky -= 1
            out = self._decided_forward(leaves)
            if out is not None:
                return out
        flat = self.native.flat(leaves)
        n = self.n_out
        res = self._in_float32(flat) if self.half else None
        if res is not None:
            res = (*self._rounded(res[:n]), *res[n:])
        elif self.verified:
            res = self.native.module(*flat)
        else:
            try:
                res = self.native.module(*flat)
            except RuntimeError as e:
                if "derivative for" not in str(e):
                    raise
                raise _NoNativeForm(str(e).splitlines()[0]) from e
            self.verified = True
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        test = (res[n], res[n + 1:])
        if torch.compiler.is_compiling():
            test = native.flag(res[n + 1:], res[n])
        return _Correct.apply(self, test, *res[:n], *tensors, *self.tensors)

    def _in_float32(self, flat: list):
        """The native program run in float32 on a half-precision call's tensors, or None
        where the exported graph cannot run there: export picks kernels by dtype (a CUDA
        bfloat16 attention is flash attention, which has no float32 form, and the strides
        of its outputs are what the graph's views expect). Such a program then runs in its
        own dtype, where the margins flag its rounded values' ties and the decided program
        settles them in float32 (`decided_gradients`)."""
        up = [in_float32(t) for t in flat]
        if self.half_verified:
            return self.native.module(*up)
        try:
            res = self.native.module(*up)
        except RuntimeError:
            self.half = False
            return None
        self.half_verified = True
        return res

    def _rounded(self, outs) -> list:
        """The float32 outputs of a half-precision program in their own dtypes (one rounding
        each, as asd's sweep returns them; autograd casts the cotangents back up)."""
        return [o.to(d) if isinstance(o, torch.Tensor) and o.dtype != d else o
                for o, d in zip(outs, self.out_dtypes, strict=True)]

    def tied(self, test) -> bool:
        """Whether a tie matters (eagerly: on the host for CPU tensors, else with one
        synchronisation)."""
        finite, margins = test
        if finite.device.type == "cpu":
            return native.flag_on_host(margins, finite)
        return bool(native.flag(margins, finite))

    def decided_gradients(self, saved: list, cts) -> list | None:
        """PyTorch's gradient on the branches first order decides (`native.Deciding`): the
        decided program run with forward-mode AD along the sweep's direction, then its
        backward; one per saved tensor. None where first order leaves a tie open, another
        nonsmooth operation ties, an operation has no forward-mode derivative, or the leaves
        are in half precision (asd sweeps those in float32): the caller then runs asd's
        sweep. A random direction without a seed that leaves a tie open is drawn once more
        (any random direction gives asd's element along it; a fixed seed's is kept). With no
        differentiated leaf (a program whose only path from its inputs is a step function)
        there is nothing to decide first order with: asd's sweep says whether it jumps."""
        program = self.decided_program()
        if program is None or not self.wanted:
            return None
        it, sc = iter(saved), iter(self.scalars)
        flat = [next(it) if is_t else next(sc) for is_t in self.is_tensor]
        dtypes = {i: flat[i].dtype for i in self.wanted}
        if any(flat[i].dtype in HALF for i in self.wanted):
            # asd sweeps a half-precision program in float32 (its element is the float32
            # program's; ties of the rounded values are not its ties): so does this run
            flat = [in_float32(t) for t in flat]
            upcast = {ph: in_float32(t) for ph, t in zip(program.names, program.template,
                                                       strict=True)}
        elif any(flat[i].dtype not in (torch.float32, torch.float64) for i in self.wanted):
            return None
        else:
            upcast = {}
        primals = {i: flat[i].detach().requires_grad_() for i in self.wanted}
        tries = 2 if self.direction is None and self.seed is None else 1
        for _ in range(tries):
            with torch.enable_grad(), _no_autocast(saved):
                res = self._decided_run(program, flat, primals, upcast)
            if res is not None:
                break
        else:
            return None
        pairs = [(o, c) for o, c, f in zip(res[:self.n_out], cts, self.float_outputs,
                                           strict=True)
                 if f and c is not None and o.requires_grad]
        got = [None] * len(self.wanted)
        if pairs:
            got = torch.autograd.grad([o for o, _ in pairs], [primals[i] for i in self.wanted],
                                      [c.to(o.dtype) for o, c in pairs], allow_unused=True)
        grads: list = [None] * self.n_saved
        for i, j, g in zip(self.wanted, self.wanted_saved, got, strict=True):
            g = torch.zeros_like(flat[i]) if g is None else g
            grads[j] = g.to(dtypes[i])
        self.sticky = STICKY
        return grads

    def _decided_forward(self, leaves: list):
        """The decided program run in the forward, on the leaves themselves: its outputs
        (PyTorch's graph over the decided branches, so the backward is the decided
        gradient, `decided_gradients`'s without running the forward twice) through
        `_Correct` with no tie flagged; None where it does not apply (half precision,
        autocast, a torch.func transform) or leaves something open (the call then runs
        natively, and its backward decides as usual)."""
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        flat = [*leaves, *self.tensors]
        wanted = [flat[i] for i in self.wanted]
        if not wanted or any(t.dtype not in (torch.float32, torch.float64) for t in wanted) \
                or torch.is_autocast_enabled(wanted[0].device.type) \
                or any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors):
            return None
        program = self.decided_program()
        if program is None:
            return None
        res = self._decided_run(program, flat, {i: flat[i] for i in self.wanted}, {})
        if res is None:
            return None
        n = self.n_out
        return _Correct.apply(self, (res[n], ()), *res[:n], *tensors, *self.tensors)

    def _decided_run(self, program, flat: list, primals: dict, upcast: dict):
        """The decided program's outputs (recorded for the backward) along the direction, or
        None where something was left undecided or tied elsewhere."""
        tangents, threshold = self._tangents(flat)
        names = list(self.prog.tensors())
        duals = list(flat)
        with native.Deciding(threshold, self.direction is None) as state, \
                forward_ad.dual_level():
            for i, t in zip(self.wanted, tangents, strict=True):
                duals[i] = forward_ad.make_dual(primals[i], t)
            by_name = {names[i - self.n_inputs]: duals[i] for i in self.wanted
                       if i >= self.n_inputs}
            replace = {**upcast, **{ph: by_name[t] for ph, t in
                                            self.prog.param_names.items() if t in by_name}}
            try:
                res = program.module(*program.flat(duals[:self.n_inputs], replace))
            except (RuntimeError, NotImplementedError) as e:
                if "forward AD" not in str(e) and "forward-mode" not in str(e) \
                        and not upcast:
                    raise
                # an operation without a forward derivative, or a half-precision graph
                # whose kernels have no float32 form (`_in_float32`): asd's sweep decides
                self._decided = False
                return None
        n = self.n_out
        return None if state.open(res[n + 1:], res[n]) else res

    def decided_program(self):
        """The decided form of the native program (`native.build` with ``decided``), built
        once; None where it has none."""
        if self._decided is None:
            built = native.build(self.prog, self.native.differentiated, decided=True)
            self._decided = built if not isinstance(built, str) else False
        return self._decided or None

    def _tangents(self, flat: list) -> tuple[list, torch.Tensor]:
        """The sweep's direction at the wanted leaves, as asd's sweep draws it: the given
        ``direction`` (zero where it names no leaf), else the seed's normals (`LazyDirection`,
        one stream per wanted leaf, in the same order); and the threshold of a clear tangent
        (`native.SMALL` times the direction's largest entry)."""
        leaves = [flat[i].detach() for i in self.wanted]
        if self.direction is not None:
            names = list(self.prog.tensors())
            keys = [i if i < self.n_inputs else names[i - self.n_inputs] for i in self.wanted]
            tangents = [self.direction[k].to(dtype=x.dtype, device=x.device)
                        if k in self.direction else torch.zeros_like(x)
                        for k, x in zip(keys, leaves, strict=True)]
            return tangents, _threshold(tangents)
        key = (tuple((tuple(x.shape), x.dtype, x.device) for x in leaves)
               if isinstance(self.seed, int) else None)
        if key is not None and key in self._directions:
            return self._directions[key]
        draw = LazyDirection(self.seed, [tuple(x.shape) for x in leaves],
                             [x.dtype for x in leaves], leaves)
        tangents = [draw.leaf(i) for i in range(len(leaves))]
        out = tangents, _threshold(tangents)
        if key is not None:
            # an integer seed fixes the direction: drawn (on the host, as asd's sweep draws
            # it) and moved to the device once, not every tied call (on a GPU the draw and
            # the copies cost far more than the step), its threshold with it
            self._directions = {key: out}
        return out

    def gradients(self, saved: list, cts) -> list:
        """asd's gradient at the saved leaves and tensors: one per saved tensor (None where
        none is wanted)."""
        it, sc = iter(saved), iter(self.scalars)
        flat = [next(it) if is_t else next(sc) for is_t in self.is_tensor]
        cts = tuple(c if f else None for c, f in zip(cts, self.float_outputs, strict=True))
        # with no reached leaf, a sweep over the others says whether the flagged tie is a
        # jump (refused); they get no gradient either way, as in torch
        swept = self.wanted or _needed(flat, self.needs)
        if not swept:
            return [None] * self.n_saved
        with torch.no_grad(), _no_autocast(saved):
            _, pullback, _ = _Sweep(self.prog, self.seed, self.direction, self.n_inputs,
                                    swept).vjp(flat)
            grads = pullback(cts)
        if not self.wanted:
            grads = [None] * len(grads)
        return [g for g, is_t in zip(grads, self.is_tensor, strict=True) if is_t]


def _threshold(tangents: list) -> torch.Tensor:
    """`native.SMALL` times the largest entry of the direction (a 0-d float32 tensor)."""
    return native.SMALL * torch.stack([t.abs().amax().float() for t in tangents
                                       if t.numel()]).amax()


STICKY = 16
"""Calls a drop-in runs its decided program in the forward after a tie first order decided
(`_NativeCall.sticky`)."""

_KEYS = itertools.count()
_CALLS: dict[str, _NativeCall] = {}
_CALLS_SIZE = 256


def _register(call: _NativeCall) -> None:
    if len(_CALLS) >= _CALLS_SIZE:
        _CALLS.pop(next(iter(_CALLS)))
    _CALLS[call.key] = call


class _Correct(torch.autograd.Function):
    """The native outputs, unchanged, whose backward reads the tie flag: without a tie that
    matters the incoming gradient goes on to PyTorch's backward of the graph, exactly;
    with one, asd's sweep gives the gradient (the native backward gets none, so nothing is
    added to it). Eagerly that is one host synchronisation per call, in the backward; traced
    (``torch.compile``), the gate is ``where(flag, 0, ct)`` and asd's part the opaque
    `vjp_correction` op, which returns zeros without a tie."""

    @staticmethod
    def forward(call, test, *rest):
        outs = tuple(o.view_as(o) for o in rest[:call.n_out])
        return outs if len(outs) > 1 else outs[0]

    @staticmethod
    def setup_context(ctx, inputs, output):
        # the separate context is what torch.func's transforms need of a Function
        call, test, *rest = inputs
        ctx.call = call
        if isinstance(test, torch.Tensor):           # traced: the flag, saved
            ctx.save_for_backward(test, *rest[call.n_out:])
        else:
            ctx.test = test
            ctx.save_for_backward(*rest[call.n_out:])
        for o in output if isinstance(output, tuple) else (output,):
            if not o.is_floating_point():
                ctx.mark_non_differentiable(o)

    @staticmethod
    def backward(ctx, *cts):
        call = ctx.call
        if torch.compiler.is_compiling():
            flag, *saved = ctx.saved_tensors
            gated = [None if c is None else torch.where(flag, torch.zeros_like(c), c)
                     for c in cts]
            corr = vjp_correction(call.key, flag, [c for c in cts if c is not None], saved)
            grads: list = [None] * len(saved)
            for i, g in zip(call.wanted_saved, corr, strict=True):
                grads[i] = g
            return (None, None, *gated, *grads)
        saved = list(ctx.saved_tensors)
        if any(torch._C._functorch.is_functorch_wrapped_tensor(s) for s in saved):
            return _under_torch_func(call, ctx.test, cts)
        create_graph = torch.is_grad_enabled()
        if not create_graph and not call.tied(ctx.test):
            return (None, None, *cts, *([None] * call.n_saved))
        grads = None if create_graph else _decided_gradients(call, saved, cts)
        if grads is None:
            grads = _asd_gradients(call, saved, cts)
        if create_graph:        # the gradient will be differentiated: asd's, first order only
            grads = _first_order_only(grads, call.prog.label)
        return (None, None, *([None] * call.n_out), *grads)


# Function.apply binds default arguments through inspect.signature at every call when
# setup_context is defined (~0.1 ms, a tenth of a small model's step): computed once here
_Correct.forward.__signature__ = inspect.signature(_Correct.forward)


def _under_torch_func(call: _NativeCall, test, cts) -> tuple:
    """The backward inside ``torch.func.grad`` / ``vjp``: PyTorch's where no tie matters.
    The transform differentiates with a graph (its own nesting), so ``create_graph`` says
    nothing there; a second transform around the first (a Hessian) is refused, as a second
    backward is, and so is a tie (asd's sweep cannot run on the transform's wrapped values)."""
    if torch._C._functorch.maybe_current_level() > 1:
        raise UnsupportedError(
            f"asd.torch.function({call.prog.label}) is being differentiated twice by torch.func "
            "(a Hessian, a gradient of a gradient): asd gives first derivatives only (a "
            "limiting gradient has no derivative at a kink).")
    if call.tied(test):
        raise UnsupportedError(
            f"asd.torch.function({call.prog.label}) met a tie that matters inside a "
            "torch.func transform, where asd's sweep cannot run (its values are wrapped by "
            "the transform): call the drop-in outside torch.func (loss.backward() or "
            "torch.autograd.grad) for this point.")
    return (None, None, *cts, *([None] * call.n_saved))


@torch.compiler.disable(recursive=True)
def _decided_gradients(call: _NativeCall, saved: list, cts) -> list | None:
    """PyTorch's gradient on the branches first order decides where a tie matters, or
    None where it cannot decide them all (`_NativeCall.decided_gradients`)."""
    return call.decided_gradients(saved, cts)


@torch.compiler.disable(recursive=True)
def _asd_gradients(call: _NativeCall, saved: list, cts) -> list:
    """asd's gradient where a tie matters (or under ``create_graph``): its sweep at the
    saved values, eagerly."""
    return call.gradients(saved, cts)


@torch.library.custom_op("asd::vjp_correction", mutates_args=(),
                         tags=tuple(t for t in (getattr(torch.Tag, "cudagraph_unsafe", None),)
                                    if t is not None))
def vjp_correction(key: str, flag: torch.Tensor, cts: list[torch.Tensor],
                   saved: list[torch.Tensor]) -> list[torch.Tensor]:
    """asd's gradient for the differentiated saved tensors of the native call ``key`` where
    its tie flag is set, zeros where it is not: the part of a compiled backward that the
    values decide (it reads the flag, one synchronisation, when it runs)."""
    call = _CALLS[key]
    wanted = call.wanted_saved
    if not bool(flag):
        return [torch.zeros_like(saved[i]) for i in wanted]
    cts_full = iter(cts)
    cts_ = tuple(next(cts_full) if f else None for f in call.float_outputs)
    grads = call.gradients(list(saved), cts_)
    return [torch.empty_like(saved[i]).copy_(grads[i]) if grads[i] is not None
            else torch.zeros_like(saved[i]) for i in wanted]     # the fake's layout


@vjp_correction.register_fake
def _(key, flag, cts, saved):
    return [torch.empty_like(saved[i]) for i in _CALLS[key].wanted_saved]


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


def _needs(leaves: list, tensors: list) -> tuple:
    """Which leaves and tensors autograd differentiates (require grad, floating)."""
    return tuple(isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
                 for t in (*leaves, *tensors))


class _DropIn:
    """The state of one `function`: the user's ``fn``, its seed and direction, and its native
    calls per program and pattern of differentiated leaves."""

    def __init__(self, fn: Callable, seed, direction):
        self.fn, self.seed, self.direction = fn, seed, direction
        self.calls: dict = {}
        self.token = f"dropin-{next(_KEYS)}"   # a str: dynamo passes it as a constant
        _DROPINS[self.token] = self

    def refuse(self, prog: TorchProgram, call: _NativeCall, why: str) -> None:
        """No native form after all (an operation autograd does not differentiate): this
        program and pattern are swept by asd at every call."""
        prog.native_refused = f"{why} (PyTorch's autograd)"
        for key, (p, c) in list(self.calls.items()):
            if c is call:
                self.calls[key] = (p, None)
        _CALLS.pop(call.key, None)

    def native_call(self, prog: TorchProgram, leaves: list) -> _NativeCall | None:
        """The native call for this program and these leaves (None: asd sweeps every call)."""
        tensors = list(prog.tensors().values())
        needs = _needs(leaves, tensors)
        key = (id(prog), needs)
        known = self.calls.get(key)
        if known is not None and known[0] is prog:
            return known[1]
        if not _settings().NATIVE_BACKWARD:
            return None
        placeholders = [*(prog.user_inputs), *prog.param_names]
        diff = frozenset(
            name for name, need in zip(placeholders, _needs(
                leaves, [prog.tensors()[prog.param_names[p]] for p in prog.param_names]),
                strict=True) if need)
        native = prog.native_program(diff)
        if isinstance(native, str):
            prog.native_refused = native
            return None
        _check_direction(prog, self.direction, len(leaves))
        call = _NativeCall(prog, native, self.seed, self.direction, leaves, needs)
        if len(self.calls) >= 64:
            self.calls.pop(next(iter(self.calls)))
        self.calls[key] = (prog, call)
        return call


_DROPINS: weakref.WeakValueDictionary[str, _DropIn] = weakref.WeakValueDictionary()
"""Every live drop-in, by token (`_resolve` finds its state from the traced graph)."""


def _settings():
    return importlib.import_module(__package__)


def _check_reach(prog: TorchProgram, args: tuple, kwargs: dict) -> None:
    """Run ``fn`` once, watched, the first time its program is called with gradients on: a
    tensor that requires grad but that the importer cannot reach (export bakes it in as a
    constant) raises here instead of silently getting no gradient."""
    flat = [*prog.leaves(args, kwargs), *prog.tensors().values()]
    with torch.no_grad(), _Unseen(flat, prog.label):
        prog.fn(*args, **kwargs)
    prog.reach_checked = True


def _eager(state: _DropIn, args: tuple, kwargs: dict):
    prog = import_program(state.fn, *args, **kwargs)
    if not torch.is_grad_enabled():      # no backward can follow: torch's own forward
        return prog.fn(*args, **kwargs)
    if not prog.reach_checked:
        _check_reach(prog, args, kwargs)
    leaves = prog.leaves(args, kwargs)
    call = state.native_call(prog, leaves)
    if call is not None:
        try:
            return prog.structured(call.run(leaves))
        except _NoNativeForm as e:       # once: the program is swept by asd from now on
            state.refuse(prog, call, str(e))
    _check_direction(prog, state.direction, len(leaves))
    return prog.structured(_ASDFunction.apply(prog, state.seed, state.direction, len(leaves),
                                              *leaves, *prog.tensors().values()))


# ----- under torch.compile -----

def _describe(tree):
    """The arguments' structure, shapes, dtypes, devices and ``requires_grad`` as Python
    constants (what a program is imported for), read while dynamo traces."""
    if isinstance(tree, torch.Tensor):
        # operator.index makes dynamo specialise a dynamic size (a guard, a recompile per
        # size): the program is imported for concrete shapes
        return ("tensor", tuple(operator.index(d) for d in tree.shape), tree.dtype,
                str(tree.device), tree.requires_grad)
    if isinstance(tree, dict):
        return ("dict", tuple((k, _describe(v)) for k, v in tree.items()))
    if isinstance(tree, list | tuple):
        return (type(tree).__name__, tuple(_describe(v) for v in tree))
    return ("value", tree)


def _example(desc):
    """Example arguments from `_describe`'s constants (zeros: the import reads no values)."""
    kind, body = desc[0], desc[1:]
    if kind == "tensor":
        shape, dtype, device, requires_grad = body
        t = torch.zeros(shape, dtype=dtype, device=device)
        return t.requires_grad_(True) if requires_grad else t
    if kind == "dict":
        return {k: _example(v) for k, v in body[0]}
    if kind in ("list", "tuple"):
        items = [_example(v) for v in body[0]]
        return items if kind == "list" else tuple(items)
    return body[0]


@torch.compiler.assume_constant_result
def _resolve(token: str, desc) -> str:
    """Run while dynamo traces a step calling the drop-in (not traced itself): import (or
    find) the program for these arguments and its native call; the key of `_CALLS` (a
    constant of the traced graph). What the import read is guarded by dynamo itself: the
    traced step also traces ``fn`` (`_compiled`), whose reads become the graph's guards."""
    state = _DROPINS[token]
    args, kwargs = _example(desc)
    # outside the step's tracing context: an export inside it reads the step's guards
    # (after a recompile with dynamic sizes its graph calls a guard on the step's locals)
    with torch.compiler.set_stance("force_eager"), torch._guards.tracing(None):
        prog = import_program(state.fn, *args, **kwargs)
        leaves = prog.leaves(args, kwargs)
        if not prog.reach_checked:
            _check_reach(prog, args, kwargs)
        call = state.native_call(prog, leaves)
    return "" if call is None else call.key


@torch.compiler.disable(recursive=True)
def _swept(state: _DropIn, args: tuple, kwargs: dict):
    """A program without a native form under ``torch.compile``: a graph break, the call runs
    eagerly through asd's sweep (``fullgraph=True`` refuses it, with dynamo's error)."""
    return _eager(state, args, kwargs)


def _compiled(state: _DropIn, args: tuple, kwargs: dict):
    """The drop-in as dynamo traces it: ``fn`` itself (its result unused and removed, but its
    reads become the graph's guards, so a changed closure, flag or module recompiles), then
    the native program and `_Correct`, with the program's tensors read from `_CALLS` so that
    dynamo lifts them as inputs."""
    state.fn(*args, **kwargs)
    key = _resolve(state.token, _describe((args, kwargs)))
    if not key:
        return _swept(state, args, kwargs)
    call = _CALLS[key]
    leaves = pytree.tree_leaves((args, kwargs))
    return call.prog.structured(call.run(leaves))


def function(fn: Callable, *, seed=None, direction=None) -> Callable:
    """``fn`` with PyTorch's backward replaced by asd's (see ``asd.torch.function``).

    Each call first imports (or finds in the cache) the program for ``fn`` as it is now, so
    an operation asd refuses is refused before anything runs. The program runs natively,
    under PyTorch's autograd, with a flag of any tie that matters (`asd.frontends.torch.
    native`): without one, PyTorch's backward is exact and is used; with one, the backward
    is asd's sweep of that very program along ``direction`` (a dict from parameter names and
    input positions to tensors; leaves left out have direction 0) or a random direction
    drawn from ``seed``. A program without a native form is swept by asd at every call.
    Only the inputs and parameters that require grad and that the output depends on get a
    gradient (an unused parameter's ``.grad`` stays None, as in torch). The parameters
    ``fn`` reaches are inputs of the autograd function; a tensor requiring grad that ``fn``
    uses but asd cannot reach raises, checked by running ``fn`` once when its program is
    new. Arguments may be passed by keyword and nested in tuples, lists and dicts; the result
    has the structure ``fn`` returns. The gradient is a first derivative: differentiating it
    again (``create_graph=True``) raises `asd.UnsupportedError`. Under ``torch.compile`` it
    is traced (no graph break, ``fullgraph=True`` works), guarded by dynamo's own guards on
    what ``fn`` reads.
    """
    state = _DropIn(fn, seed, direction)

    def wrapped(*args, **kwargs):
        if kwargs:
            kwargs = dict(sorted(kwargs.items()))      # one program whatever the order
        if torch.compiler.is_compiling():
            return _compiled(state, args, kwargs)
        return _eager(state, args, kwargs)

    wrapped.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapped.__doc__ = f"{wrapped.__name__} with asd's subgradient as its backward."
    wrapped.asd_state = state
    return wrapped
