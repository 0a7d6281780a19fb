"""``asd.torch.audit``: what PyTorch's gradients are, step by step, in an ordinary training loop.

>>> import torch, asd.torch
>>> torch.manual_seed(0)  # doctest: +ELLIPSIS
<torch._C.Generator object at ...>
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
>>> with asd.torch.audit(model) as log:
...     for _ in range(3):
...         opt.zero_grad()
...         torch.nn.functional.cross_entropy(model(x), y).backward()
...         opt.step()
>>> len(log), log[0].verdict, log[0].checked
(3, 'inside', 'census')

The monitor hooks the model (nothing in the loop changes) and, for every ``every``-th backward
pass through it, records a `asd.analysis.training.StepRecord`:

- **the census** (``checks`` holds ``'ties'``): a dispatch mode sees every ATen operation of the
  model's own forward, in its own dtype, and counts the tied entries of each nonsmooth one
  (relu and clamp at their kinks, ties in maximum/max/amax/max pooling/sort/topk, norms at 0,
  comparisons and step functions at their jumps), per layer (the module running it). A tie
  whose candidates are provably the same function of the parameters is counted but not
  *live*: a pooling window of ReLUs that are all off (their inputs below 0, so constant
  nearby), or of convolution outputs whose receptive fields are all zero (each equals its
  channel's bias: digits' blank margins). The rules are conservative; an operation the census
  does not know is named in ``unknown`` and sends the step to asd.
- **the verdict** (``checks`` holds ``'equal'`` and ``'clarke'``): without a live tie the step
  is smooth and PyTorch's gradient is the gradient (``checked='census'``). Otherwise asd sweeps
  ``<ct, model(x; p)>`` (``ct`` the gradient PyTorch's backward brought to the model's output,
  captured by a hook) along a random direction and compares its element with PyTorch's
  gradient of the parameters; where they differ by more than rounding, `asd.clarke` certifies
  inside / outside / undetermined (`asd.analysis.training.judge`). That work runs after the
  backward pass, before the next forward, on a snapshot of the parameters (the optimizer step
  in between does not move the audited point).

What "PyTorch's gradient" means: the gradients of the model's parameters computed by the
backward pass that the output's cotangent started. A loss term that reads the parameters
outside the model (an L2 penalty added to the loss) adds to them and not to asd's side: use the
optimizer's ``weight_decay`` instead. Models in training mode with dropout or batch norm are
censused, but asd refuses to import them (``checked='error'`` where a step needs asd).

This module is attached to ``asd.torch`` as ``asd.torch.audit`` (see ``asd/__init__.py``).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import asd
from asd.analysis.training import StepRecord, TrainingLog, judge
from asd.errors import ArgumentError, ASDError

CHECKS = ("ties", "equal", "clarke")
"""What the monitor can do at an audited step (`audit`'s ``checks``)."""

HALF = (torch.bfloat16, torch.float16)

# ----- the census: ties in the framework's own forward -----

GENERIC, CONST, BIAS = 0, 1, 2
"""What an entry is, as a function of the parameters near the point: ``CONST`` does not
depend on them (data, a ReLU that is off); ``BIAS`` equals its channel's bias (a convolution or
linear output whose inputs are all constant zeros), so two ``BIAS`` entries of one channel are
the same function; ``GENERIC`` is anything else."""

SMOOTH = frozenset("""
    add sub mul div neg exp exp2 expm1 log log1p log2 tanh sigmoid sin cos erf softplus gelu
    silu mish _softmax _log_softmax softmax log_softmax addmm mm bmm matmul linear convolution
    _convolution conv2d mean sum where pow rsqrt reciprocal square avg_pool1d avg_pool2d
    avg_pool3d _adaptive_avg_pool2d adaptive_avg_pool2d native_layer_norm native_group_norm
    native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional
    _native_batch_norm_legit_no_training native_dropout embedding scalar_tensor zeros ones
    zeros_like ones_like full full_like empty empty_like fill lift_fresh copy_ _to_copy
    arange lerp addcmul addcdiv baddbmm rsub logsumexp
""".split())
"""ATen operations with no kink (smooth where defined); an operation neither here, in
`LAYOUT` nor in `RULES` is ``unknown`` to the census."""

LAYOUT = frozenset("""
    view _unsafe_view reshape _reshape_alias t transpose permute expand unsqueeze squeeze clone
    contiguous detach alias flatten slice select split split_with_sizes unbind cat stack
    as_strided
""".split())
"""Operations that only move entries: an entry's kind follows it."""


class _Census(TorchDispatchMode):
    """Counts the tied entries of every nonsmooth ATen operation of one forward pass, per
    ``'layer:primitive'`` (``layer`` from the module stack the monitor keeps), and tracks the
    kind of every entry (`GENERIC`, `CONST`, `BIAS`) to tell live ties from harmless ones."""

    def __init__(self, layer: Callable[[], str]):
        super().__init__()
        self.layer = layer
        self.ties: Counter = Counter()
        self.live: Counter = Counter()
        self.unknown: set[str] = set()
        self.kinds = _Kinds()
        self.pending: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__.rstrip("_")
        rule = RULES.get(name)
        if rule is not None:
            rule(self, name, args, kwargs, out)
        elif name in LAYOUT:
            self._follow(func, args, kwargs, out)
        elif name not in SMOOTH:
            self.unknown.add(name)
        if name in KIND_RULES:
            KIND_RULES[name](self, args, kwargs, out)
        return out

    # ----- kinds, computed only when a tie asks for them -----

    def kind(self, t) -> torch.Tensor | int:
        """The kinds of ``t``'s entries: a stored int8 tensor (computed now if it was stored
        as a thunk), else one kind for all (`CONST` for a tensor that does not require grad,
        `GENERIC` otherwise)."""
        stored = self.kinds.get(t) if isinstance(t, torch.Tensor) else None
        if callable(stored):
            stored = stored()
            if stored is None:
                del self.kinds[t]
            else:
                self.kinds[t] = stored
        if stored is not None:
            return stored
        return GENERIC if isinstance(t, torch.Tensor) and t.requires_grad else CONST

    def store(self, t, kind) -> None:
        """Remember ``t``'s kinds: an int8 tensor, or a zero-argument callable making one."""
        if isinstance(t, torch.Tensor) and kind is not None:
            self.kinds[t] = kind

    def _follow(self, func, args, kwargs, out) -> None:
        """Apply a layout operation to the kinds of its inputs (lazily)."""
        tensors = [a for a in pytree.tree_leaves(args) if isinstance(a, torch.Tensor)]
        if not any(a in self.kinds for a in tensors):
            return

        def kinds_of(a):
            if not isinstance(a, torch.Tensor) or not a.is_floating_point():
                return a
            return _full(self.kind(a), a)

        @functools.cache
        def moved():
            try:
                return pytree.tree_leaves(func(*pytree.tree_map(kinds_of, args), **kwargs))
            except (RuntimeError, TypeError):     # an int8 tensor it will not take
                return None

        for i, o in enumerate(pytree.tree_leaves(out)):
            self.store(o, lambda i=i: None if moved() is None else moved()[i])

    # ----- counting: one host synchronisation per forward, at `finish` -----

    def count(self, name: str, tied: torch.Tensor, live) -> None:
        """Record ``tied`` entries of primitive ``name`` in the current layer; ``live`` (a
        mask, or a callable making one) is evaluated only if some entry is tied."""
        self.pending.append((f"{self.layer()}:{name}", tied.sum(), live))

    def finish(self) -> None:
        """Add up what `count` recorded (after the forward: nothing here is censused), then
        let go of the forward's tensors."""
        try:
            self._add_up()
        finally:
            self.pending = []
            self.kinds.clear()

    def _add_up(self) -> None:
        if not self.pending:
            return
        sums = torch.stack([s.to(torch.int64) for _, s, _ in self.pending]).tolist()
        lives = []
        for (key, _, live), n in zip(self.pending, sums, strict=True):
            if n:
                self.ties[key] += n
                lives.append((key, live() if callable(live) else live))
        if lives:
            counts = torch.stack([torch.as_tensor(m).sum().to(torch.int64).cpu()
                                  for _, m in lives]).tolist()
            for (key, _), n in zip(lives, counts, strict=True):
                if n:
                    self.live[key] += n


class _Kinds:
    """The kinds of one forward's tensors, keyed by identity. Holding each tensor keeps its
    id unique while the census lives (one forward; `_Census.finish` clears it), and costs
    less per operation than a weak dictionary, whose references dominated a small model's
    census."""

    def __init__(self):
        self._items: dict[int, tuple[torch.Tensor, object]] = {}

    def __contains__(self, t) -> bool:
        return id(t) in self._items

    def get(self, t):
        item = self._items.get(id(t))
        return None if item is None else item[1]

    def __setitem__(self, t, kind) -> None:
        self._items[id(t)] = (t, kind)

    def __delitem__(self, t) -> None:
        del self._items[id(t)]

    def clear(self) -> None:
        self._items.clear()


def _full(kind, like: torch.Tensor) -> torch.Tensor:
    if isinstance(kind, torch.Tensor):
        return kind.expand(like.shape) if kind.shape != like.shape else kind
    return torch.full(like.shape, kind, dtype=torch.int8, device=like.device)


def _kinks(name: str, args) -> list[float]:
    """The points where an elementwise primitive has a kink, from its arguments."""
    if name == "relu" or name == "abs" or name == "leaky_relu":
        return [0.0]
    if name == "elu":
        alpha = args[1] if len(args) > 1 else 1.0
        return [] if float(alpha) == 1.0 else [0.0]
    if name == "hardtanh":
        return [float(args[1]) if len(args) > 1 else -1.0, float(args[2]) if len(args) > 2
                else 1.0]
    if name in ("hardswish", "hardsigmoid"):
        return [-3.0, 3.0]
    if name in ("clamp", "clip"):
        return [float(b) for b in args[1:3] if b is not None and not isinstance(b, torch.Tensor)]
    if name == "clamp_min" or name == "clamp_max":
        return [float(args[1])] if not isinstance(args[1], torch.Tensor) else []
    return []


def _elementwise(census: _Census, name: str, args, kwargs, out) -> None:
    """Elementwise kinks: tied where the input sits on a kink; live unless constant."""
    x = args[0]
    kinks = _kinks(name, args)
    if name in ("clamp", "clip", "clamp_min", "clamp_max") and any(
            isinstance(b, torch.Tensor) for b in args[1:]):
        bounds = [b for b in args[1:] if isinstance(b, torch.Tensor)]
        tied = torch.zeros_like(x, dtype=torch.bool)
        for b in bounds:
            tied |= x == b
        census.count(name, tied, lambda: tied & (_full(census.kind(x), x) != CONST))
        return
    if not kinks:
        return
    tied = x == kinks[0]
    for k in kinks[1:]:
        tied |= x == k
    census.count(name, tied, lambda: tied & (_full(census.kind(x), x) != CONST))


def _flat_outside(name: str, x: torch.Tensor, args) -> torch.Tensor | None:
    """Entries where the primitive is locally constant (strictly in a flat piece)."""
    if name == "relu":
        return x < 0
    if name == "hardtanh":
        lo, hi = _kinks(name, args)
        return (x < lo) | (x > hi)
    if name in ("clamp", "clip") and not any(isinstance(b, torch.Tensor) for b in args[1:]):
        lo = args[1] if len(args) > 1 else None
        hi = args[2] if len(args) > 2 else None
        flat = torch.zeros_like(x, dtype=torch.bool)
        if lo is not None:
            flat |= x < lo
        if hi is not None:
            flat |= x > hi
        return flat
    if name == "clamp_min" and not isinstance(args[1], torch.Tensor):
        return x < args[1]
    if name == "clamp_max" and not isinstance(args[1], torch.Tensor):
        return x > args[1]
    return None


def _clamp_kind(name: str):
    def kind_rule(census: _Census, args, kwargs, out) -> None:
        x = args[0]

        def kinds():
            flat = _flat_outside(name, x, args)
            if flat is None:
                return None
            return torch.where(flat, torch.tensor(CONST, dtype=torch.int8, device=x.device),
                               _full(census.kind(x), x))

        census.store(out, kinds)
    return kind_rule


def _pairwise(census: _Census, name: str, args, kwargs, out) -> None:
    """maximum/minimum and comparisons: tied where the two sides are equal, live unless both
    sides are constant."""
    a, b = args[0], args[1]
    if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (a, b)):
        return
    tied = torch.as_tensor(a == b)

    def live():
        ka = census.kind(a) if isinstance(a, torch.Tensor) else CONST
        kb = census.kind(b) if isinstance(b, torch.Tensor) else CONST
        return tied & ~((torch.as_tensor(ka) == CONST) & (torch.as_tensor(kb) == CONST))

    census.count(name, tied, live)


def _maximizers(vals: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Along ``dim``: the entries attaining the maximum, and whether it is attained twice or
    more (a tie)."""
    at = vals == vals.amax(dim=dim, keepdim=True)
    return at, at.sum(dim=dim) >= 2


def _live(at: torch.Tensor, tied: torch.Tensor, kinds: torch.Tensor, dim: int,
          same_bias: bool) -> torch.Tensor:
    """Ties that may matter: the maximizers are not all constant, nor (``same_bias``: one
    channel's window) all that channel's bias."""
    live = tied & (at & (kinds != CONST)).any(dim=dim)
    if same_bias:
        live &= (at & (kinds != BIAS)).any(dim=dim)
    return live


def _reduction(census: _Census, name: str, args, kwargs, out) -> None:
    """max/min/amax/amin over dims: one tie per reduced slice whose extremum repeats."""
    x = args[0]
    if len(args) > 1 and isinstance(args[1], torch.Tensor):     # max(a, b): elementwise
        _pairwise(census, "maximum" if name == "max" else "minimum", args, kwargs, out)
        return
    if not x.is_floating_point() or x.numel() == 0:
        return
    sign = -1.0 if name in ("min", "amin") else 1.0
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    dims = list(range(x.ndim)) if dims is None or dims == [] else (
        [dims] if isinstance(dims, int) else list(dims))
    dims = [d % max(x.ndim, 1) for d in dims]
    keep = [d for d in range(x.ndim) if d not in dims]
    shape = [*[x.shape[d] for d in keep], -1]
    at, tied = _maximizers((sign * x).permute(*keep, *dims).reshape(shape), -1)

    def live():
        kinds = _full(census.kind(x), x).permute(*keep, *dims).reshape(at.shape)
        return _live(at, tied, kinds, -1, same_bias=False)

    census.count(name, tied, live)


def _pool(census: _Census, name: str, args, kwargs, out) -> None:
    """max pooling (1-3 d): one tie per window whose maximum repeats; windows whose maximizers
    are all constant (dead ReLUs) or all their channel's bias (blank margins) are harmless."""
    x = args[0]
    nd = {"max_pool1d": 1, "max_pool2d": 2, "max_pool3d": 3}.get(
        name.replace("_with_indices", ""), 2)
    kernel = _tuple(args[1], nd)
    stride = _tuple(args[2] if len(args) > 2 and args[2] else kernel, nd)
    padding = _tuple(args[3] if len(args) > 3 else 0, nd)
    dilation = _tuple(args[4] if len(args) > 4 else 1, nd)
    ceil = bool(args[5]) if len(args) > 5 else False
    if ceil or nd == 3:
        census.unknown.add(name)
        return
    at, tied = _maximizers(_windows(x, kernel, stride, padding, dilation, nd, -torch.inf), -1)

    @functools.cache
    def kinds():
        k = _full(census.kind(x), x).to(x.dtype)
        return _windows(k, kernel, stride, padding, dilation, nd, float(CONST)).to(torch.int8)

    census.count("max_pool", tied, lambda: _live(at, tied, kinds(), -1, same_bias=True))

    def pooled_kinds():
        const = ~(at & (kinds() != CONST)).any(dim=-1)
        bias = ~(at & (kinds() != BIAS)).any(dim=-1)
        return torch.where(const, CONST, torch.where(bias, BIAS, GENERIC)).to(torch.int8)

    values = out[0] if isinstance(out, tuple | list) else out
    census.store(values, lambda: pooled_kinds().reshape(values.shape))


def _tuple(v, nd: int) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * nd
    v = tuple(int(a) for a in v)
    return v * nd if len(v) == 1 else v


def _windows(x: torch.Tensor, kernel, stride, padding, dilation, nd: int, fill: float):
    """The pooling windows of ``x`` as its last axis: shape ``(*lead, *out_spatial, k)``
    (disjoint windows tiling ``x`` by a reshape, others by unfolding)."""
    lead = x.shape[: x.ndim - nd]
    spatial = x.shape[x.ndim - nd:]
    if (tuple(stride) == tuple(kernel) and not any(padding) and set(dilation) == {1}
            and all(n % k == 0 for n, k in zip(spatial, kernel, strict=True))):
        split = [a for n, k in zip(spatial, kernel, strict=True) for a in (n // k, k)]
        t = x.reshape(*lead, *split)
        order = [*range(len(lead)), *(len(lead) + 2 * i for i in range(nd)),
                 *(len(lead) + 2 * i + 1 for i in range(nd))]
        return t.permute(*order).reshape(*lead, *(n // k for n, k in zip(
            spatial, kernel, strict=True)), -1)
    flat = x.reshape(-1, 1, *x.shape[x.ndim - nd:])
    if nd == 1:
        flat = flat.unsqueeze(-2)
        kernel, stride, padding, dilation = ((1, *kernel), (1, *stride), (0, *padding),
                                             (1, *dilation))
    pad = [p for pair in ((q, q) for q in reversed(padding)) for p in pair]
    flat = F.pad(flat, pad, value=fill) if any(padding) else flat
    cols = F.unfold(flat, kernel, dilation=dilation, stride=stride)   # (B, k, L)
    size = [(flat.shape[-2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
            for i in range(2)]
    spatial = size[1:] if nd == 1 else size
    return cols.transpose(1, 2).reshape(*lead, *spatial, cols.shape[1])


def _sorting(census: _Census, name: str, args, kwargs, out) -> None:
    """sort/topk/kthvalue/median(dim): a tie per pair of equal neighbours in sorted order,
    live unless both are constant."""
    x = args[0]
    if not x.is_floating_point() or x.numel() < 2:
        return
    dim = -1
    if name in ("sort", "kthvalue", "median", "topk") and len(args) > 1:
        spot = {"sort": 1, "median": 1, "kthvalue": 2, "topk": 2}[name]
        if len(args) > spot and isinstance(args[spot], int):
            dim = args[spot]
    dim = kwargs.get("dim", dim)
    if name == "median" and len(args) == 1:
        x, dim = x.reshape(-1), 0
    vals, order = torch.sort(x, dim=dim)
    n = x.shape[dim]
    tied = vals.narrow(dim, 1, n - 1) == vals.narrow(dim, 0, n - 1)

    def live():
        kinds = torch.gather(_full(census.kind(x), x), dim, order)
        const = (kinds.narrow(dim, 1, n - 1) == CONST) & (kinds.narrow(dim, 0, n - 1) == CONST)
        return tied & ~const

    census.count(name, tied, live)


def _norm(census: _Census, name: str, args, kwargs, out) -> None:
    """A vector norm at 0 (its Clarke set is the dual unit ball): tied where it is 0."""
    x = args[0]
    values = out if isinstance(out, torch.Tensor) else out[0]
    tied = values == 0
    census.count(name, tied, lambda: tied & (not _all_const(census.kind(x))))


def _all_const(kind) -> bool:
    return bool((kind == CONST).all()) if isinstance(kind, torch.Tensor) else kind == CONST


def _step(census: _Census, name: str, args, kwargs, out) -> None:
    """Step functions (sign, floor, round...): their outputs are constant nearby except at
    their jumps, where the function is not Lipschitz: those entries are live ties."""
    x = args[0]
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return
    at = x == 0 if name == "sign" else (x == torch.floor(x) if name != "round" else
                                        (x - torch.floor(x)) == 0.5)
    census.count(name, at, lambda: at & (_full(census.kind(x), x) != CONST))


def _linear_kind(census: _Census, args, kwargs, out) -> None:
    """addmm(bias, x, w): a row of ``x`` that is all constant zeros gives its bias."""
    bias, x = args[0], args[1]
    if not (isinstance(bias, torch.Tensor) and x.ndim == 2 and out.ndim == 2):
        return

    def kinds():
        zero = ((x == 0) & (_full(census.kind(x), x) == CONST)).all(dim=1, keepdim=True)
        fill = BIAS if bias.requires_grad else CONST
        return torch.where(zero, torch.tensor(fill, dtype=torch.int8, device=out.device),
                           torch.tensor(GENERIC, dtype=torch.int8, device=out.device)
                           ).expand(out.shape)

    census.store(out, kinds)


def _conv_kind(census: _Census, args, kwargs, out) -> None:
    """convolution: an output whose receptive field holds only constant zeros is its bias."""
    x, weight, bias, stride, padding, dilation, transposed, _, groups = args[:9]
    if transposed or x.ndim not in (3, 4):
        return

    def kinds():
        nonzero = ~((x == 0) & (_full(census.kind(x), x) == CONST))
        conv = F.conv1d if x.ndim == 3 else F.conv2d
        per_group = nonzero.reshape(x.shape[0], groups, -1, *x.shape[2:]).sum(2).to(x.dtype)
        ones = torch.ones(groups, 1, *weight.shape[2:], dtype=x.dtype, device=x.device)
        field = conv(per_group, ones, stride=stride, padding=padding, dilation=dilation,
                     groups=groups)
        blank = (field == 0).repeat_interleave(out.shape[1] // groups, dim=1)
        fill = CONST if bias is None or not bias.requires_grad else BIAS
        return torch.where(blank, torch.tensor(fill, dtype=torch.int8, device=x.device),
                           torch.tensor(GENERIC, dtype=torch.int8, device=x.device))

    census.store(out, kinds)


RULES = {
    **{n: _elementwise for n in ("relu", "abs", "leaky_relu", "elu", "hardtanh", "hardswish",
                                 "hardsigmoid", "clamp", "clip", "clamp_min", "clamp_max")},
    **{n: _pairwise for n in ("maximum", "minimum", "fmax", "fmin", "gt", "lt", "ge", "le",
                              "eq", "ne")},
    **{n: _reduction for n in ("max", "min", "amax", "amin")},
    **{n: _pool for n in ("max_pool1d", "max_pool2d", "max_pool1d_with_indices",
                          "max_pool2d_with_indices", "max_pool3d_with_indices")},
    **{n: _sorting for n in ("sort", "topk", "kthvalue", "median", "msort")},
    **{n: _norm for n in ("linalg_vector_norm", "norm")},
    **{n: _step for n in ("sign", "floor", "ceil", "round", "trunc")},
}
"""ATen packet name -> census rule ``rule(census, name, args, kwargs, out)``."""

KIND_RULES = {
    "relu": _clamp_kind("relu"), "hardtanh": _clamp_kind("hardtanh"),
    "clamp": _clamp_kind("clamp"), "clamp_min": _clamp_kind("clamp_min"),
    "clamp_max": _clamp_kind("clamp_max"), "addmm": _linear_kind, "convolution": _conv_kind,
}
"""Operations that give their outputs kinds beyond the default (see `GENERIC`)."""


# ----- the monitor -----


class audit:
    """Watch ``model`` in an ordinary training loop: ``with asd.torch.audit(model) as log:``.

    ``every``: audit one backward pass in ``every`` (1: all). ``checks``: a subset of
    ``('ties', 'equal', 'clarke')``: the census; asd's element compared with PyTorch's
    gradient; the certified verdict where they differ. ``sweep='ties'`` runs asd only at
    steps with a live tie (or an operation the census does not know); ``'always'`` at every
    audited step. ``samples`` and ``seed`` are those of the sweep and of `asd.clarke`.
    ``live=True`` shows the log as a table updated at each audited step (``rich``).

    ``log`` (a `asd.analysis.training.TrainingLog`) fills as training runs: one record per
    audited step, ``log.steps`` the backward passes seen, ``log.summary()``, ``log.lines()``,
    ``log.to_json(path)``, ``log.plot(path)``.
    """

    def __init__(self, model: torch.nn.Module, *, every: int = 1,
                 checks: Sequence[str] = CHECKS, samples: int = 16, seed: int = 0,
                 sweep: str = "ties", live: bool = False):
        if not isinstance(model, torch.nn.Module):
            raise ArgumentError(f"asd.torch.audit watches an nn.Module (its forward and its "
                                f"parameters), got {type(model).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ArgumentError(f"every must be a whole number >= 1, got {every!r}")
        bad = [c for c in checks if c not in CHECKS]
        if bad or isinstance(checks, str):
            raise ArgumentError(f"checks must be a sequence drawn from {CHECKS}, got "
                                f"{checks!r}")
        if sweep not in ("ties", "always"):
            raise ArgumentError(f"sweep must be 'ties' or 'always', got {sweep!r}")
        self.model, self.every, self.checks = model, every, tuple(checks)
        self.samples, self.seed, self.sweep, self.live = samples, seed, sweep, live
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.params:
            raise ArgumentError(f"{type(model).__name__} has no parameter that requires "
                                "grad: there is no training step to audit")
        self.dtype = next((p.dtype for _, p in self.params if p.is_floating_point()),
                          torch.float32)
        self.log = TrainingLog(meta={"model": type(model).__name__,
                                     "dtype": str(self.dtype).replace("torch.", ""),
                                     "parameters": sum(p.numel() for _, p in self.params),
                                     "every": every, "checks": list(self.checks)})
        self._handles: list = []
        self._stack: list[str] = []
        self._census: _Census | None = None
        self._calls: list[dict] = []
        self._pending: list[tuple] = []
        self._busy = False
        self._live = None

        self._weighted = _Weighted(model)

    # ----- attaching -----

    def __enter__(self) -> TrainingLog:
        m = self.model
        self._handles += [m.register_forward_pre_hook(self._pre, with_kwargs=True),
                          m.register_forward_hook(self._post, with_kwargs=True,
                                                  always_call=True)]
        for name, sub in m.named_modules():
            if sub is m:
                continue
            self._handles += [sub.register_forward_pre_hook(self._enter_layer(name)),
                              sub.register_forward_hook(self._leave_layer, always_call=True)]
        self._handles.append(torch.autograd.graph.register_multi_grad_hook(
            [p for _, p in self.params], self._backward, mode="all"))
        if self.live:
            from rich.live import Live

            self._live = Live(self.log.table(title=self._title()), auto_refresh=False)
            self._live.start()
        return self.log

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stop_census()
        if exc[0] is None:
            self.flush()
        if self._live is not None:
            self._live.update(self.log.table(title=self._title()), refresh=True)
            self._live.stop()

    def _title(self) -> str:
        s = self.log.summary()
        return (f"asd audit · {self.log.meta['model']} ({self.log.meta['dtype']}) · step "
                f"{self.log.steps} · tied {s['tied']:.0%} · live {s['live']:.0%}")

    # ----- hooks -----

    def _enter_layer(self, name: str):
        def pre(module, args):
            if self._census is not None:
                self._stack.append(name)
        return pre

    def _leave_layer(self, module, args, out):
        if self._census is not None and self._stack:
            self._stack.pop()

    def _layer(self) -> str:
        return self._stack[-1] if self._stack else "model"

    def _sampled(self) -> bool:
        return self.log.steps % self.every == 0

    def _pre(self, module, args, kwargs):
        if self._busy or not torch.is_grad_enabled():
            return
        self.flush()
        if not self._sampled():
            return
        if "ties" in self.checks:
            self._stack = []
            self._census = _Census(self._layer)
            self._census.__enter__()
        self._calls.append({"args": _detached(args), "kwargs": _detached(kwargs),
                            "census": self._census, "ct": None})
        del self._calls[:-8]        # forwards without a backward (evaluation with grad on)

    def _post(self, module, args, kwargs, out):
        if self._busy or not self._calls or self._calls[-1].get("done"):
            return
        call = self._calls[-1]
        self._stop_census()
        call["done"] = True
        call["kwargs"] = _detached(kwargs)
        leaves = pytree.tree_leaves(out)
        call["ct"] = [None] * len(leaves)
        call["shapes"] = [tuple(o.shape) for o in leaves if isinstance(o, torch.Tensor)]
        for i, o in enumerate(leaves):
            if isinstance(o, torch.Tensor) and o.requires_grad:
                o.register_hook(self._catch(call, i, o))

    def _stop_census(self) -> None:
        if self._census is not None:
            self._census.__exit__(None, None, None)
            self._census.finish()
            self._census = None
            self._stack = []

    @staticmethod
    def _catch(call: dict, i: int, out: torch.Tensor):
        def hook(grad):
            call["ct"][i] = grad.detach().clone()
        return hook

    def _backward(self, grads) -> None:
        """After PyTorch's backward has computed every parameter's gradient: record the step
        (census verdict at once; asd's work deferred to `flush`, on snapshots)."""
        if self._busy:
            return
        step = self.log.steps
        self.log.steps += 1
        calls = [c for c in self._calls if c.get("done") and any(
            g is not None for g in c["ct"])]
        self._calls = []
        if not calls:
            return
        record = StepRecord(step, self.log.meta["dtype"])
        for c in calls:
            if c["census"] is not None:
                record.ties.update(c["census"].ties)
                record.live.update({k: v for k, v in c["census"].live.items() if v})
                record.unknown = sorted(set(record.unknown) | c["census"].unknown)
        record.ties, record.live = dict(record.ties), dict(record.live)
        framework = [torch.zeros_like(p) if g is None else g.detach()
                     for (_, p), g in zip(self.params, grads, strict=True)]
        needs_asd = "equal" in self.checks and (
            self.sweep == "always" or "ties" not in self.checks or record.live_tied
            or record.unknown)
        if not needs_asd:
            if "ties" in self.checks and not record.live_tied and not record.unknown:
                record.equal, record.verdict = True, "inside"
            record.checked = "census"
            self._append(record)
            return
        snapshot = {id(p): p.detach().clone() for _, p in self.params}
        self._pending.append((record, calls, [g.clone() for g in framework], snapshot))

    def flush(self) -> None:
        """Run asd's part of the audited steps waiting for it (after their backward)."""
        while self._pending:
            record, calls, framework, snapshot = self._pending.pop(0)
            start = time.perf_counter()
            self._busy = True
            try:
                self._judge(record, calls, framework, snapshot)
            except ASDError as e:
                record.checked, record.note = "error", _first_line(e)
            finally:
                self._busy = False
            record.seconds = time.perf_counter() - start
            self._append(record)

    def _append(self, record: StepRecord) -> None:
        self.log.append(record)
        if self._live is not None:
            self._live.update(self.log.table(title=self._title()), refresh=True)

    # ----- asd's side -----

    def _judge(self, record: StepRecord, calls: list[dict], framework: list[torch.Tensor],
               snapshot: dict) -> None:
        programs = [self._program(c) for c in calls]
        names = list(programs[0][0].tensors())
        for prog, _ in programs[1:]:
            names += [n for n in prog.tensors() if n not in names]
        by_id = {id(t): n for prog, _ in programs for n, t in prog.tensors().items()}
        order = [by_id.get(id(p)) for _, p in self.params]
        element = {n: 0.0 for n in names}
        decisions: Counter = Counter()
        for prog, leaves in programs:
            g, report = self._sweep(prog, leaves, snapshot, record.step)
            for n in prog.tensors():
                element[n] = element[n] + _numpy(g[n])
            for d in report.decisions:
                decisions[f"{d.primitive}/{d.how}"] += d.count
        record.decisions = dict(decisions)
        fw = {n: _numpy(g) for n, g in zip(order, framework, strict=True) if n is not None}
        shapes = {n: np.shape(_numpy(t)) for prog, _ in programs
                  for n, t in prog.tensors().items()}
        flat_fw = _flat(fw, names, shapes)
        flat_el = _flat({n: np.broadcast_to(v, shapes[n]) for n, v in element.items()}, names,
                        shapes)
        slices, start = [], 0
        for n in names:
            size = int(np.prod(shapes[n]))
            slices.append((n.split(".", 1)[1] if n.startswith("model.") else n,
                           slice(start, start + size)))
            start += size
        sample = None
        if "clarke" in self.checks:
            def sample():
                return _FlatSample(self._clarke(programs, snapshot, record.step), names, shapes)
        eps = float(torch.finfo(self.dtype).eps)
        for key, value in judge(flat_fw, flat_el, sample, eps, slices).items():
            setattr(record, key, value)

    def _program(self, call: dict):
        """The imported program of ``<ct, model(*args)>`` for one forward call, and its
        input leaves (``ct`` first)."""
        ct = [c if c is not None else torch.zeros(s, dtype=self.dtype)
              for c, s in zip(call["ct"], call["shapes"], strict=True)]
        prog = asd.torch.import_program(self._weighted, ct, *call["args"], **call["kwargs"])
        leaves = prog.leaves((ct, *call["args"]), call["kwargs"])
        return prog, leaves

    def _sweep(self, prog, leaves: list, snapshot: dict, step: int):
        """asd's element (a dict by parameter name) along the direction drawn from the seed
        and the step, on PyTorch tensors where the program allows it, else on numpy."""
        params = {n: snapshot.get(id(t), t.detach()) for n, t in prog.tensors().items()}

        def run(native: bool):
            conv = _native if native else _host
            xs = [conv(x) for x in leaves]
            ps = {n: conv(t) for n, t in params.items()}

            def f(*a):
                return prog.numpy_fn(*a[:-1], params=a[-1])

            _, g, report = asd.value_and_subgrad(f, len(xs), seed=self.seed + step,
                                                 diagnostics=True)(*xs, ps)
            return g, report

        try:
            return run(True)
        except asd.UnsupportedError as e:
            if "numpy arrays only so far" not in str(e):
                raise
            return run(False)

    def _clarke(self, programs, snapshot: dict, step: int):
        """`asd.clarke` of the step's function on numpy copies (the sum over its calls)."""
        params = {}
        for prog, _ in programs:
            for n, t in prog.tensors().items():
                params.setdefault(n, _host(snapshot.get(id(t), t.detach())))
        inputs = [[_host(x) for x in leaves] for _, leaves in programs]

        def f(p):
            return sum(prog.numpy_fn(*xs, params={n: p[n] for n in prog.tensors()})
                       for (prog, _), xs in zip(programs, inputs, strict=True))

        return asd.clarke(f, n=self.samples, seed=self.seed + step)(params)


class _Weighted(torch.nn.Module):
    """``<ct, model(*args)>``: the function a training step differentiates, as a module (so
    the importer finds the model's parameters as ``model.<name>``)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ct, *args, **kwargs):
        outs = pytree.tree_leaves(self.model(*args, **kwargs))
        return sum((o * c).sum() for o, c in zip(outs, ct, strict=True))


class _FlatSample:
    """A `ClarkeSample` over a dict of parameters, asked about flat vectors in ``names``'
    order."""

    def __init__(self, sample, names: list[str], shapes: dict):
        self.sample, self.names, self.shapes = sample, names, shapes

    def contains(self, flat: np.ndarray, tol: float):
        parts, start = {}, 0
        for n in self.names:
            size = int(np.prod(self.shapes[n]))
            parts[n] = flat[start:start + size].reshape(self.shapes[n])
            start += size
        return self.sample.contains(parts, tol)


def _flat(values: dict, names: list[str], shapes: dict) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(values.get(n, np.zeros(shapes[n])),
                                               dtype=float)) for n in names])


def _numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return (t.float() if t.dtype in HALF else t).numpy().astype(float)
    return np.asarray(t, dtype=float)


def _native(t):
    """A tensor as asd's native sweep takes it: detached, half precision in float32."""
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return t.float() if t.dtype in HALF else t
    return t


def _host(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return (t.float() if t.dtype in HALF else t).numpy()
    return t


def _detached(tree):
    return pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, tree)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


__all__ = ["CHECKS", "audit"]
