"""Importing a PyTorch function: ``torch.export``, the graph as an asd program, and its cache.

`TorchProgram` exports a function or module (with every module it reaches registered under
its path, so that their parameters are lifted to graph inputs), checks that every node on the
differentiated path has an `ATEN` handler, and evaluates the graph on numpy or traced arrays
(`TorchProgram.numpy_fn`). `import_program` caches programs under a key holding everything the
trace reads (`asd.frontends.reach`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import logging
import operator
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

import asd
from asd.errors import OutputError, TracerBoolError, UnsupportedError
from asd.frontends import reach
from asd.frontends.torch.convert import (
    _constant,
    _flat_values,
    _native,
    _to_numpy,
    _to_torch,
)
from asd.frontends.torch.ops import ATEN, USED, NotComputed, _on_torch


def _settings():
    """The package ``asd.frontends.torch`` (``asd.torch``), whose flags (`NATIVE`) users set."""
    return importlib.import_module(__package__)


# ----- what a function reaches: its parameters, and the state its trace depends on -----

def _opaque(value) -> bool:
    return isinstance(value, torch.Tensor | torch.nn.Module)


_MODULE_INTERNALS = {"training", "_parameters", "_buffers", "_modules"}


def _expand(path: tuple, value):
    """A module's plain attributes (not its registered parameters, buffers and children) and
    the classes whose ``forward`` reads globals; a tensor has no children."""
    if not isinstance(value, torch.nn.Module):
        return
    for qual, sub in value.named_modules():
        sub_path = (*path, *qual.split(".")) if qual else path
        if not reach.is_library(type(sub)):
            yield (*sub_path, "__class__"), type(sub)
        for k, v in vars(sub).items():
            if k not in _MODULE_INTERNALS and not k.startswith("_"):
                yield (*sub_path, k), v


def _token(value):
    """Tensors count by identity, shape and dtype (their values are read at every call);
    modules by identity, their flags and their tensors."""
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), tuple(value.shape), str(value.dtype), str(value.device),
                value.requires_grad, isinstance(value, torch.nn.Parameter))
    if isinstance(value, torch.nn.Module):
        return ("nn.Module", id(value), tuple(
            (qual, type(sub).__qualname__, sub.training,
             tuple((n, id(t), tuple(t.shape), str(t.dtype), t.requires_grad)
                   for n, t in [*sub._parameters.items(), *sub._buffers.items()]
                   if t is not None))
            for qual, sub in value.named_modules()))
    return None


def _fingerprint(fn) -> tuple[tuple, list]:
    return reach.fingerprint(fn, _token, _opaque, _expand)


def _tensor_meta(t: torch.Tensor) -> tuple:
    return (t.shape, t.dtype, t.device, t.requires_grad, type(t))


def _metas(tensors: list) -> list:
    return [(t.shape, t.dtype, t.device, t.requires_grad, type(t)) for t in tensors]


def _guard(value, guard: reach.Guard) -> None:
    """What `_token` and `_expand` read of a tensor or module, for `reach.Guard`: a tensor's
    shape, dtype, device and ``requires_grad``; every submodule's class, ``training`` flag
    and plain attributes, and its parameters', buffers' and children's dicts."""
    if isinstance(value, torch.Tensor):
        guard.custom(functools.partial(_tensor_meta, value), _tensor_meta(value))
        return
    tensors = []
    for sub in value.modules():
        guard.checks.append((reach._ATTR, sub, "__class__", type(sub)))
        names = ("training", "_parameters", "_buffers", "_modules", *(
            k for k in vars(sub) if k not in _MODULE_INTERNALS and not k.startswith("_")))
        guard.entries(sub.__dict__, names)
        for d in (sub._parameters, sub._buffers, sub._modules):
            guard.dict_of(d)
        tensors += [t for t in [*sub._parameters.values(), *sub._buffers.values()]
                    if t is not None]
    guard.custom(functools.partial(_metas, tensors), _metas(tensors))


def _reached(fn) -> tuple[list[tuple[tuple, torch.nn.Module]], list[tuple[tuple, torch.Tensor]]]:
    """The modules and the tensors outside them that ``fn`` reaches, with their paths."""
    modules, tensors = [], []
    for path, value in reach.walk(fn, _opaque, _expand):
        if isinstance(value, torch.nn.Module):
            modules.append((path, value))
        elif isinstance(value, torch.Tensor):
            tensors.append((path, value))
    inner = {id(sub) for _, m in modules for sub in list(m.modules())[1:]}
    modules = [(p, m) for p, m in modules if id(m) not in inner]
    owned = {id(t) for _, m in modules for t in [*m.parameters(), *m.buffers()]}
    return modules, [(p, t) for p, t in tensors if id(t) not in owned]


class _FunctionModule(torch.nn.Module):
    """The function (or module) to export, with the modules it reaches registered under it.

    ``torch.export`` lifts the parameters and buffers of the module it exports to graph
    inputs. So the modules ``fn`` reaches through closures, globals, object attributes, dicts,
    lists and tuples are registered here under their paths (``cfg.net`` for ``cfg['net']``):
    their parameters become inputs named ``'cfg.net.0.weight'``. A module ``fn`` itself is
    registered as ``self`` (`TorchProgram` drops that prefix). Tensors kept outside modules
    are matched to the constants export lifts (`TorchProgram`), since ``fn`` reads them from
    their own containers, not from here.
    """

    def __init__(self, fn: Callable, modules: list[tuple[tuple, torch.nn.Module]]):
        super().__init__()
        object.__setattr__(self, "asd_fn", fn)    # not a submodule: its state is placed below
        self.asd_containers: set[int] = set()
        for path, module in modules:
            self._place(("self",) if module is fn else path, module)

    def _place(self, path: tuple, module: torch.nn.Module) -> None:
        parts = [_part(p) for p in path] or ["self"]
        owner: torch.nn.Module = self
        for part in parts[:-1]:
            child = owner._modules.get(part)
            while child is not None and id(child) not in self.asd_containers:
                part += "_"                  # never add to the user's own module
                child = owner._modules.get(part)
            if child is None:
                while hasattr(owner, part):
                    part += "_"
                child = torch.nn.Module()
                self.asd_containers.add(id(child))
                owner.add_module(part, child)
            owner = child
        name = parts[-1]
        while hasattr(owner, name):
            name += "_"
        owner.add_module(name, module)

    def forward(self, *args, **kwargs):
        return self.asd_fn(*args, **kwargs)


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are the same memory (export lifts a Parameter outside a module as
    a plain copy sharing its storage)."""
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.data_ptr() == b.data_ptr())


def _part(p) -> str:
    text = str(p).replace(".", "_")
    return text if (text and text.isidentifier()) or text.isdigit() else f"_{text}"


def _where_from(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    path = " / ".join(f"{p or 'root'} ({t.split('.')[-1] if isinstance(t, str) else t})"
                      for p, t in stack.values())
    src = (node.meta.get("stack_trace") or "").strip().splitlines()
    line = src[-1].strip() if src else ""
    if "self.asd_fn(" in line:      # export recorded asd's wrapper, not the user's line
        line = ""
    parts = [f"node '{node.name}'"]
    if path:
        parts.append(f"module path {path}")
    if line:
        parts.append(f"source `{line}`")
    return ", ".join(parts)


def _op_key(target) -> tuple[str, str]:
    if target is operator.getitem:
        return "getitem", ""
    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return getattr(target, "__name__", str(target)), ""
    return packet.__name__, target._overloadname


TRAINING_OPS = {
    "_native_batch_norm_legit_functional": "batch norm in training mode (it normalizes by the "
                                           "batch's statistics and updates the running ones)",
    "_native_batch_norm_legit": "batch norm in training mode (batch statistics)",
    "native_batch_norm": "batch norm in training mode (batch statistics)",
    "native_dropout": "dropout in training mode (a random mask)",
    "bernoulli": "random sampling (a random mask, as dropout in training mode draws)",
}
"""Operations that only appear in training mode, refused at import with the fix (``.eval()``)
before anything runs, so a refused call never updates running statistics."""


def _decompositions() -> dict:
    """torch's own decompositions into core ATen, for the operations asd has no handler for.

    A decomposition computes the same function from simpler operations (``hardswish`` as
    ``x * clamp(x + 3, 0, 6) / 6``, ``lstm`` as its gates, ``adaptive_avg_pool2d`` as a
    mean), and asd differentiates that program with its own rules, deciding every tie along
    the ray: only the operations, never PyTorch's derivatives, are borrowed. Operations with
    a handler stay whole (their rules know their kinks), and training-mode operations stay
    whole so that they are refused at import (`TRAINING_OPS`)."""
    table = torch.export.default_decompositions()
    return {op: fn for op, fn in table.items()
            if op.overloadpacket.__name__ not in ATEN
            and op.overloadpacket.__name__ not in TRAINING_OPS}


def _export(module: torch.nn.Module, example: tuple, kwargs: dict, label: str):
    """``torch.export`` with its failures turned into asd errors that say what to change."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = shapes_log.level
    shapes_log.setLevel(logging.ERROR)   # its warning dumps the graph; asd's error says more
    said = io.StringIO()                 # what export prints: passed on unless it failed
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(said):
            warnings.simplefilter("ignore", FutureWarning)
            # tensors requiring grad outside modules: asd maps them back (TorchProgram)
            warnings.filterwarnings("ignore", "A model attribute .* requires gradient")
            # RNN modules re-assign their flat weight list while export runs them
            warnings.filterwarnings("ignore", "The tensor attributes .* were assigned during")
            exported = torch.export.export(module, example, kwargs).run_decompositions(
                _decompositions())
        sys.stderr.write(said.getvalue())
        return exported
    except asd.ASDError:
        raise
    except GuardOnDataDependentSymNode as e:
        raise TracerBoolError(
            f"{label} branches in Python on a value computed from its inputs, at "
            f"{reach.user_line(e)}: a Python `if`/`while`/`bool()` on a tensor picks one side for "
            "every point, so at a tie it ignores the direction asd differentiates along. Write "
            "the choice as torch.where(cond, a, b) (or torch.maximum, torch.clamp...)."
        ) from e
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UnsupportedError(
            f"torch.export could not import {label}: {type(e).__name__}: {first} (at "
            f"{reach.user_line(e)}). asd imports PyTorch programs through torch.export, which "
            "runs the function on symbolic tensors: use tensor operations on the inputs, no "
            ".item()/.tolist()/.numpy() or data-dependent shapes, and return tensors."
        ) from e
    finally:
        shapes_log.setLevel(level)


NON_FINITE_TESTS = {"isnan", "isinf", "isfinite", "isposinf", "isneginf"}


def _locally_constant(node) -> bool:
    """A test whose answer cannot change near a point where the inputs are finite (or
    already infinite): ``isnan``/``isinf``..., and ``x == -inf`` / ``x != inf`` against a
    non-finite constant (how attention masks check for fully masked rows). Evaluated on the
    values at the point, like JAX's ``is_finite``; not comparisons with finite constants,
    whose ties the comparison rule decides."""
    name, _ = _op_key(node.target)
    if name in NON_FINITE_TESTS:
        return True
    if name in ("eq", "ne") and len(node.args) == 2:
        other = node.args[1]
        return isinstance(other, float) and not np.isfinite(other)
    return False


NO_GRADIENT = {"detach", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
               "randn_like", "_assert_tensor_metadata", "_local_scalar_dense"}
"""Operations whose result PyTorch's autograd never differentiates (``detach``, the
``*_like`` factories, ``.item()``): a gradient does not pass them."""


def _floating(node) -> bool:
    """Whether autograd can carry a gradient through the value of ``node`` (a floating
    tensor, or a tuple holding one); without a recorded value, assume it can."""
    val = node.meta.get("val")
    if val is None:
        return True
    if isinstance(val, list | tuple):
        return any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in val)
    if isinstance(val, torch.Tensor):
        return val.is_floating_point()
    return isinstance(val, float | torch.SymFloat)


def _reaching(graph, outputs: list[str]) -> set[str]:
    """The nodes a gradient of the outputs reaches, walking back from them as autograd does:
    through floating values, never through `NO_GRADIENT` operations."""
    need = set(outputs)
    for node in reversed(graph.nodes):
        if node.name not in need or node.op != "call_function":
            continue
        if not _floating(node) or _op_key(node.target)[0] in NO_GRADIENT:
            continue
        need.update(a.name for a in node.all_input_nodes)
    return need


def _point_values(tree):
    """``tree`` with traced values replaced by their values at the point."""
    if isinstance(tree, asd.core.primitive.Traced):
        return tree.value
    if isinstance(tree, list | tuple):
        return type(tree)(_point_values(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _point_values(v) for k, v in tree.items()}
    return tree


class TorchProgram:
    """A ``torch.export``-ed function or module as a numpy function asd can sweep.

    ``numpy_fn(*inputs, params)`` evaluates the graph on numpy (or traced) arrays; ``params``
    maps parameter names (``'0.weight'``, or ``'lin.weight'`` for a module captured by a
    function as ``lin``, ``'cfg.w'`` for a tensor requiring grad kept in ``cfg``) to arrays.
    `params` reads their current values; `tensors` gives the tensors themselves.
    """

    def __init__(self, fn: Callable, example: tuple, kwargs: dict | None = None):
        self.fn = fn
        modules, reached = _reached(fn)
        self.module = _FunctionModule(fn, modules)
        label = f"`{getattr(fn, '__qualname__', type(fn).__qualname__)}`"
        self.label = label
        self.exported = _export(self.module, example, kwargs or {}, label)
        self.in_spec = self.exported.call_spec.in_spec
        """The tree of ``(args, kwargs)``: the graph's user inputs are its leaves."""
        self.out_spec = self.exported.call_spec.out_spec
        """The tree ``fn`` returns (a dict, list, nested tuples): its leaves are `outputs`."""
        self.graph = self.exported.graph_module.graph
        sig = self.exported.graph_signature
        strip = "self." if isinstance(fn, torch.nn.Module) else ""
        self.name_of = lambda target: target[len(strip):] if target.startswith(strip) else target
        owned = {**dict(self.module.named_parameters(remove_duplicate=False)),
                 **dict(self.module.named_buffers(remove_duplicate=False))}
        self.user_inputs: list[str] = []
        self.param_names: dict[str, str] = {}
        self.fixed: dict[str, Any] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        for spec in sig.input_specs:
            name = spec.arg.name
            if spec.kind == InputKind.USER_INPUT:
                self.user_inputs.append(name)
            elif spec.kind == InputKind.PARAMETER or (
                    spec.kind == InputKind.BUFFER and owned[spec.target].requires_grad):
                self.param_names[name] = self.name_of(spec.target)
                self._tensors[self.name_of(spec.target)] = owned[spec.target]
            elif spec.kind == InputKind.BUFFER:
                self.fixed[name] = owned[spec.target]
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                const = self.exported.constants[spec.target]
                alias = next((q for q, t in owned.items() if t is const), None) or next(
                    (q for q, t in owned.items() if _same_view(t, const)), None)
                if alias is not None:     # a module's own tensor, also read from elsewhere
                    if self.name_of(alias) in self._tensors:
                        self.param_names[name] = self.name_of(alias)
                    else:
                        self.fixed[name] = owned[alias]
                    continue
                found = next((p for p, t in reached if t is const), None) or next(
                    (p for p, t in reached if _same_view(t, const)), None)
                tensor = dict(reached).get(found) if found is not None else None
                if tensor is not None and tensor.requires_grad:
                    self.param_names[name] = ".".join(found)
                    self._tensors[".".join(found)] = tensor
                else:               # read afresh at every call when asd knows where it is
                    self.fixed[name] = const if tensor is None else tensor
            else:
                raise UnsupportedError(f"torch.export input {name} of kind {spec.kind}")
        self.outputs = []
        for s in sig.output_specs:
            if s.kind == OutputKind.BUFFER_MUTATION:
                raise UnsupportedError(
                    f"{label} changes the buffer {self.name_of(s.target)!r} as it runs (a "
                    "module in training mode updating running statistics); asd's program is a "
                    "function of the inputs only. Call model.eval() first.")
            if s.kind != OutputKind.USER_OUTPUT:
                continue
            if not isinstance(s.arg, torch.export.graph_signature.TensorArgument):
                raise OutputError(
                    f"{label} returned {getattr(s.arg, 'value', s.arg)!r} where a tensor was "
                    "expected: asd differentiates functions returning tensors (a missing "
                    "`return`?).")
            self.outputs.append(s.arg.name)
        by_name = {node.name: node for node in self.graph.nodes}
        self.output_dtypes = [by_name[name].meta["val"].dtype for name in self.outputs]
        """What each output is in torch (a bfloat16 model's sweep runs in float32)."""
        self.reach_checked = False
        """Whether ``fn`` has run once watched for tensors asd cannot reach (`function`)."""
        if not self.outputs:
            raise OutputError(f"{label} returned no tensor (None or an empty structure): "
                              "asd differentiates functions returning tensors (a missing "
                              "`return`?).")
        self._check()
        self.reaching = _reaching(self.graph, self.outputs)
        """The placeholders (inputs, parameters) through which PyTorch's autograd would carry
        a gradient to an output: `function` gives the others no gradient (None), as torch
        leaves ``.grad`` of an unused parameter None (so optimizers skip it)."""
        targets = {t for name, t in self.param_names.items() if name in self.reaching}
        self.reached = [name in self.reaching for name in self.user_inputs] + [
            t in targets for t in self._tensors]
        """Per autograd input of `function` (the user inputs, then `tensors`): `reaching`."""

    def leaves(self, args: tuple, kwargs: dict) -> list:
        """The graph's user inputs: the leaves of ``(args, kwargs)``, in export's order."""
        if not kwargs and all(type(a) is torch.Tensor for a in args):
            return list(args)
        return pytree.tree_leaves((args, kwargs))

    def call(self, leaves) -> list:
        """``fn`` itself on the arguments these leaves stand for: its outputs' leaves."""
        args, kwargs = pytree.tree_unflatten(list(leaves), self.in_spec)
        return pytree.tree_leaves(self.fn(*args, **kwargs))

    def structured(self, flat):
        """The program's outputs in the structure ``fn`` returns (a dict, a list...)."""
        return pytree.tree_unflatten(list(flat) if isinstance(flat, tuple) else [flat],
                                     self.out_spec)

    # ----- validation: every op on the differentiated path needs a mapping -----
    def _check(self) -> None:
        live = set(self.user_inputs) | set(self.param_names)
        self.constant_nodes: set[str] = set()
        self.point_nodes: set[str] = set()
        for node in self.graph.nodes:
            if node.op != "call_function":
                continue
            name, overload = _op_key(node.target)
            if name in TRAINING_OPS and f"{name}.{overload}" not in ATEN:
                raise UnsupportedError(
                    f"{TRAINING_OPS[name]}: aten.{name} ({_where_from(node)}). asd "
                    "differentiates the deterministic function of the inputs: call "
                    "model.eval() first (nothing has run yet, so running statistics are "
                    "unchanged).")
            deps = {a.name for a in node.all_input_nodes}
            if not deps & live:
                self.constant_nodes.add(node.name)
                continue
            if _locally_constant(node):
                self.point_nodes.add(node.name)   # evaluated on the values at the point
                continue
            live.add(node.name)
            if name == "getitem" or f"{name}.{overload}" in ATEN or name in ATEN:
                continue
            raise UnsupportedError(
                f"PyTorch operation aten.{name}.{overload} has no asd mapping "
                f"({_where_from(node)}). asd never falls back to PyTorch's own derivative "
                "at a kink. Rewrite it with a supported operation, or register a handler "
                "on numpy/traced arrays: "
                f"asd.frontends.torch.ATEN[{name!r}] = fn."
            )

    refused: str | None = None
    """Why the torch path was refused for this program (None: not refused)."""
    backend: str | None = None
    """Where the last sweep of this program ran: ``'torch'`` (natively, on the model's own
    tensors and device), ``'numpy (because: ...)'`` when a native sweep was refused (an
    operation without an array-API rule: `refused`) or `NATIVE` is False, None before the
    first sweep. A refusal is paid once: later calls go to numpy directly."""

    def sources(self) -> dict[str, Any]:
        """The program's own tensors by graph input name: the parameters (by their target)
        and the fixed buffers and constants, as the objects themselves (their identities are
        part of the cache key, their values are read when the graph runs)."""
        out: dict[str, Any] = {name: self._tensors[t] for name, t in self.param_names.items()}
        out.update(self.fixed)
        return out

    def native_program(self, differentiated: frozenset):
        """The program as PyTorch code with its tie flag (`asd.frontends.torch.native`), for
        these differentiated graph inputs (the placeholders requiring grad), built once; or
        a string saying why it has none."""
        from asd.frontends.torch import native

        cache = self.__dict__.setdefault("_native_programs", {})
        if differentiated not in cache:
            cache[differentiated] = native.build(self, differentiated)
        return cache[differentiated]

    def tensors(self) -> dict[str, torch.Tensor]:
        """The differentiable tensors the program reads, by name (the autograd inputs)."""
        return dict(self._tensors)

    def params(self, native: bool = False) -> dict:
        """Current values of the parameters, by name: numpy arrays, or with ``native`` the
        tensors themselves, detached (half precision in float32)."""
        conv = _native if native else _to_numpy
        return {name: conv(t) for name, t in self._tensors.items()}

    def _fixed_values(self, native: bool = False) -> dict:
        conv = _native if native else _to_numpy
        return {name: conv(t) for name, t in self.fixed.items()}

    @property
    def native(self) -> bool:
        """Whether the next sweep tries the torch path (`NATIVE`, and no refusal yet)."""
        return _settings().NATIVE and self.refused is None

    def numpy_fn(self, *inputs, params: dict | None = None):
        """Evaluate the program on numpy arrays, or natively on torch tensors (traced or not):
        the path follows the inputs. ``params`` defaults to the parameters' current values."""
        native = any(_on_torch(x) for x in inputs) or (
            params is not None and any(_on_torch(v) for v in params.values()))
        params = self.params(native) if params is None else params
        env: dict[str, Any] = self._fixed_values(native)
        for name, x in zip(self.user_inputs, inputs, strict=True):
            env[name] = x
        for name, target in self.param_names.items():
            env[name] = params[target]
        for node in self.graph.nodes:
            if node.op == "call_function":
                env[node.name] = self._run(node, env, native)
            elif node.op == "output":
                break
        outs = [env[name] for name in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, node, env, native: bool = False):
        def read(a):
            if isinstance(a, torch.fx.Node):
                return env[a.name]
            if isinstance(a, list | tuple):
                return type(a)(read(b) for b in a)
            return a

        args, kwargs = read(node.args), {k: read(v) for k, v in node.kwargs.items()}
        if node.target is operator.getitem:
            return args[0][args[1]]
        if node.name in self.point_nodes:
            args, kwargs = _point_values((args, kwargs))
            return node.target(*args, **kwargs) if native else _constant(node.target, args,
                                                                         kwargs)
        if native:
            flat = list(_flat_values((args, kwargs)))
            if not any(isinstance(a, asd.core.primitive.Traced) for a in flat):
                for a in flat:
                    if isinstance(a, NotComputed):    # an output asd does not compute
                        a._refuse()
                # nothing traced: a constant of this sweep, which PyTorch evaluates itself
                # (on tensors: a handler, the user's own among them, may answer in numpy)
                if any(isinstance(a, np.ndarray | np.generic) for a in flat):
                    device = next((a.device for a in flat if isinstance(a, torch.Tensor)), None)
                    args, kwargs = _to_torch((args, kwargs), device)
                return node.target(*args, **kwargs)
        elif node.name in self.constant_nodes:
            return _constant(node.target, args, kwargs)
        name, overload = _op_key(node.target)
        handler = ATEN.get(f"{name}.{overload}") or ATEN[name]
        kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "layout",
                                                                "memory_format")}
        if name in USED:
            reads = {u.args[1] if u.target is operator.getitem else None for u in node.users}
            kwargs["used"] = None if None in reads or "val" not in node.meta else tuple(
                i in reads for i in range(len(node.meta["val"])))
        try:
            return handler(*args, **kwargs)
        except asd.ASDError as e:
            raise type(e)(f"{e} [while importing aten.{name}.{overload}, {_where_from(node)}]"
                          ) from e


def dtype_of(fn: Callable) -> torch.dtype | None:
    """The floating dtype of the parameters and buffers ``fn`` reaches (None without any):
    the precision a model is meant to run in, which ``asd audit`` evaluates it in."""
    modules, tensors = _reached(fn)
    for t in [*(t for _, m in modules for t in [*m.parameters(), *m.buffers()]),
              *(t for _, t in tensors)]:
        if t.is_floating_point():
            return t.dtype
    return None


# ----- the cache: a program per function, signature and reachable state -----

_CACHE: dict[tuple, tuple[TorchProgram, list]] = {}
_GUARDED: dict[tuple, tuple[reach.Guard, TorchProgram]] = {}
"""Per function and signature, the guard of the last walk and the program it found."""
IMPORTS = {"count": 0}
"""How many programs have been exported (each cache miss adds one); tests read it."""


def _signature(tensors) -> tuple:
    return tuple((tuple(t.shape), t.dtype, t.requires_grad) if isinstance(t, torch.Tensor)
                 else (type(t), repr(t)) for t in tensors)


def _same(t):
    return t


def _plain_examples(tree):
    """Example arguments ``torch.export`` can trace: tensors wrapped by ``torch.func``
    transforms become plain tensors of their shape and dtype (export reads no values)."""
    is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor

    def plain(t):
        if isinstance(t, torch.Tensor) and is_wrapped(t):
            return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
        return t

    return pytree.tree_map(plain, tree)


def import_program(fn: Callable, *tensors, **kwargs) -> TorchProgram:
    """Export ``fn`` (a function or ``nn.Module``) at example arguments, cached.

    The arguments may be tensors, Python numbers, and tuples, lists and dicts of them,
    positional or by keyword; the program's inputs are their leaves (`TorchProgram.leaves`).
    The key is ``fn``'s identity, the arguments' tree, the tensors' shapes and dtypes, and
    the fingerprint of everything ``fn`` reaches (`asd.frontends.reach`): closure values,
    globals, object attributes, Python flags, ``module.training``, and the identity, shape
    and dtype of every parameter and buffer. Any change there imports anew, so a cached
    program is always the one ``fn`` would export now; tensor *values* are inputs of the
    program, read at each call. The walk is paid only when something it read has changed:
    a `reach.Guard` of the last walk (the same objects, by identity, in every container it
    read) answers the other calls.
    """
    if not kwargs and all(type(t) is torch.Tensor for t in tensors):
        leaves, tree = tensors, len(tensors)       # the common case, without pytree's cost
    else:
        leaves, tree = pytree.tree_flatten((tensors, kwargs))
    head = (id(fn), tree, _signature(leaves))
    last = _GUARDED.get(head)
    if last is not None and last[1].fn is fn and last[0].holds():
        return last[1]                  # nothing the walk read has changed: the same key
    state, held, guard = reach.fingerprint(fn, _token, _opaque, _expand, _guard)
    key = (*head, state)
    hit = _CACHE.get(key)
    if hit is not None and hit[0].fn is fn:
        prog = hit[0]
    else:
        if len(_CACHE) >= _settings().CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        wrapped = any(isinstance(t, torch.Tensor)
                      and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in leaves)
        from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack

        # export traces outside torch.func's transforms (on plain example tensors), and
        # outside an enclosing checkpoint (its saved tensors go through identity hooks)
        hooks = (temporarily_clear_interpreter_stack() if wrapped
                 else torch.autograd.graph.saved_tensors_hooks(_same, _same))
        with hooks, contextlib.ExitStack() as off:
            for device in {"cpu", *(t.device.type for t in leaves
                                    if isinstance(t, torch.Tensor))}:
                # the program is the function itself: autocast applies when it runs
                off.enter_context(torch.autocast(device, enabled=False))
            examples = _plain_examples((tensors, kwargs)) if wrapped else (tensors, kwargs)
            prog = TorchProgram(fn, tuple(examples[0]), examples[1])
        IMPORTS["count"] += 1
        _CACHE[key] = (prog, held)
    if len(_GUARDED) >= _settings().CACHE_SIZE:
        _GUARDED.pop(next(iter(_GUARDED)))
    _GUARDED[head] = (guard, prog)
    return prog


def program(fn: Callable, *tensors) -> asd.Program:
    """The asd ``Program`` of a PyTorch function or module at example tensors (traced on
    numpy arrays: a ``Program`` is replayed on numpy)."""
    prog = import_program(fn, *tensors)
    arrays = [_to_numpy(t) for t in tensors]
    params = prog.params()
    return asd.trace(lambda *xs: prog.numpy_fn(*xs[:-1], params=xs[-1]))(*arrays, params)
