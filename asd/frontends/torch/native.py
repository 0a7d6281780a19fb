"""The imported program as PyTorch code that also says whether a tie matters.

`asd.torch.function` runs the exported graph itself (``torch.export``'s ATen graph: generated
straight-line code over torch operators, no per-node Python of asd's) under PyTorch's autograd,
so a training step costs what PyTorch's own costs, with its fused kernels, on any device and
inside ``torch.compile``. That is exact wherever no tie matters (proofs/README.md, "Native
gradients where no tie matters"): with every nonsmooth operation strictly inside one of its
pieces, the program is differentiable at the point, its derivative is unique, and PyTorch's
backward computes it (up to rounding). So the graph is instrumented (`NativeProgram`): each
operation on the differentiated path whose derivative can depend on a branch also computes,
as a 0-d tensor (a *margin*, positive unless a tie may matter; no host synchronisation),
whether one of its entries sits on a kink where the branches' gradients may differ:

- ``relu``, ``abs``, ``sign``, ``leaky_relu``, ``elu`` at 0; ``clamp``/``hardtanh``/``relu6``
  at a bound; ``maximum``/``minimum`` and the comparisons ``gt``, ``ge``, ``lt``, ``le``,
  ``eq``, ``ne`` (read by ``where``) where their two sides are equal;
- max pooling, ``amax``/``amin`` and ``max``/``min`` (all, per dim) where two candidates of
  a window share its maximum, **except** windows whose maximum is exactly 0 over a ``relu``
  whose input has no 0 (the tied candidates are dead units: each has a zero gradient row, so
  whichever the branch, the window passes no gradient; the common case at a random
  initialisation);
- the jumps of the step functions: ``floor``, ``ceil``, ``trunc``, ``frac`` at integers,
  ``round`` (without ``decimals``) at halves (PyTorch's derivative, 0 or 1, is the
  derivative off them); ``hypot`` at the origin;
- the points where a function is not Lipschitz or not finite: ``sqrt``/``rsqrt``/fractional
  ``pow`` at or below 0, ``log`` at or below 0, division and ``reciprocal`` by 0, the
  2-norm and ``std`` at 0, ``asin``/``acos``/``atanh`` at ±1; and any non-finite output.

Operations that are differentiable everywhere on their domain (`SMOOTH`: arithmetic,
matrix products, convolutions, the smooth activations, losses and normalisations, pooling
by averages, every structural operation) need no flag. A program with any other operation
on its differentiated path (sort, top-k, median, the linear algebra, argmax used as a
number...) has no native form: `function` sweeps it with asd at every call, as before.

Nodes that do not depend on a differentiated tensor (one requiring grad) need no flag: no
gradient passes through them, whatever their branches.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import operator
from collections.abc import Sequence

import torch
import torch.nn.functional as F

SMOOTH = frozenset({
    # arithmetic and products
    "add", "sub", "rsub", "mul", "neg", "square", "matmul", "mm", "bmm", "mv", "dot", "addmm",
    "linear", "trace", "baddbmm", "addmv", "einsum", "conv1d", "conv2d", "conv3d",
    "convolution", "conv_transpose1d", "conv_transpose2d",
    # smooth elementwise functions (everywhere on their domain; domains are flagged below)
    "exp", "exp2", "expm1", "tanh", "sigmoid", "sin", "cos", "tan", "sinh", "cosh", "asinh",
    "atan", "erf", "erfc", "gelu",
    # losses, normalisations, attention
    "softmax", "_softmax", "log_softmax", "_log_softmax", "cross_entropy_loss", "nll_loss",
    "nll_loss_forward", "mse_loss", "layer_norm", "_native_batch_norm_legit_no_training",
    "batch_norm", "native_group_norm", "_native_batch_norm_legit", "dropout",
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    # linear pooling and resampling
    "avg_pool1d", "avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool2d",
    "upsample_bilinear2d", "upsample_nearest2d",
    # reductions and polynomials
    "sum", "mean", "cumsum", "var",
    # structure
    "view", "reshape", "_unsafe_view", "flatten", "unsqueeze", "squeeze", "permute",
    "transpose", "t", "select", "slice", "index", "expand", "broadcast_tensors", "cat", "stack",
    "clone", "contiguous", "alias", "lift_fresh_copy", "_to_copy", "to", "detach", "split",
    "split_with_sizes", "flip", "repeat", "gather", "index_select", "index_put", "slice_scatter",
    "copy", "constant_pad_nd", "diagonal", "zeros_like", "ones_like", "full_like", "empty_like",
    "_assert_tensor_metadata", "getitem",
    # booleans (their ties are flagged at the comparison that made them)
    "where", "logical_not", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitwise_not", "any", "all",
})
"""ATen operations (overload packets) differentiable at every point of their domain, whose
PyTorch derivative is therefore the derivative (asd's element) wherever they are evaluated.
Not ``prod``/``cumprod``: smooth, but PyTorch's backward forms products of the other entries
that overflow where the product itself does not (``0 * inf``: a NaN gradient where the
derivative is 0), so they stay with asd's sweep."""

# ----- the tie tests: each returns a margin, a 0-d tensor computed on the device -----
#
# A margin is positive where no tie matters and 0, negative or NaN where one may: the flag
# of a call is "some margin is not > 0" (`flag`). Margins are reductions to one number per
# operation, in floating point: a comparison into a boolean tensor costs several times more
# on CPUs, and on the host (eager, CPU tensors) reading the numbers needs no further kernel.


def _positive(like) -> torch.Tensor:
    return torch.ones((), dtype=torch.float32, device=like.device)


def _plain(x):
    """``x`` outside autograd: a margin is a number, never differentiated, so computing it
    records no graph (and saves no tensor for a backward)."""
    return x.detach() if isinstance(x, torch.Tensor) else x


def off_value(x, p=None) -> torch.Tensor:
    """``min |x - p|`` (``p`` 0 when None): 0 exactly where an entry equals ``p`` (``x - p``
    is 0 only where ``x == p`` in floating point), the kink of an elementwise function."""
    x, p = _plain(x), _plain(p)
    if x.numel() == 0:
        return _positive(x)
    d = x if p is None or (not isinstance(p, torch.Tensor) and p == 0) else x - p
    if d.is_floating_point() and d.device.type != "cpu":
        # min |d| in one reduction (a NaN gives NaN, as it should): one kernel on a GPU,
        # but on CPUs twenty times abs then amin (which gives NaN too)
        return torch.linalg.vector_norm(d, -math.inf)
    return torch.abs(d).amin()


def above(x, bound) -> torch.Tensor:
    """``min x - bound``: positive where every entry is above ``bound`` (an open domain)."""
    x = _plain(x)
    if x.numel() == 0:
        return _positive(x)
    return x.amin() - bound


def apart(a, b) -> torch.Tensor:
    """``min |a - b|``: 0 where the two sides of a max/min or a comparison are equal."""
    a, b = _plain(a), _plain(b)
    like = a if isinstance(a, torch.Tensor) else b
    if like.numel() == 0 or (isinstance(b, torch.Tensor) and b.numel() == 0):
        return _positive(like)
    if like.dtype == torch.bool:
        return 1.0 - (a == b).any().float()
    return off_value(a - b) if isinstance(a, torch.Tensor) else off_value(b - a)


def inside_unit(x) -> torch.Tensor:
    """``1 - max |x|``: positive where every entry is inside (-1, 1)."""
    x = _plain(x)
    if x.numel() == 0:
        return _positive(x)
    return 1 - torch.abs(x).amax()


def off_integer(x) -> torch.Tensor:
    """``min |x - round(x)|``: 0 where an entry is an integer (or too large to be anything
    else), the jumps of floor, ceil, trunc and frac; NaN where one is not finite."""
    x = _plain(x)
    if x.numel() == 0 or not x.is_floating_point():
        return _positive(x)
    return off_value(x - torch.round(x))


def off_half(x) -> torch.Tensor:
    """``min |x - floor(x) - 1/2|``: 0 exactly where ``x - floor(x) == 0.5`` (asd's test of
    round's jumps: an exact half gives an exact 0.5), NaN where an entry is not finite."""
    x = _plain(x)
    if x.numel() == 0 or not x.is_floating_point():
        return _positive(x)
    return off_value(x - torch.floor(x), 0.5)


def off_origin(a, b) -> torch.Tensor:
    """``min |a| + |b|``: 0 where ``atan2(a, b)`` is evaluated at the origin."""
    return off_value(torch.abs(a) + torch.abs(b))


def _tuple(v, nd: int) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * nd
    v = tuple(int(a) for a in v)
    return v * nd if len(v) == 1 else v


def _hashable(v):
    return tuple(v) if isinstance(v, list | tuple) else v


@functools.lru_cache(maxsize=256)
def _pool_plan(in_shape, out_shape, nd, kernel, stride, padding, dilation):
    """The padding of a max pooling's input and each kernel offset's strided slice of its
    candidates (computed once per geometry: a step of a small model pays for no Python
    arithmetic here)."""
    kernel = _tuple(kernel, nd)
    stride = _tuple(stride, nd) if stride not in ((), [], None) else kernel
    padding, dilation = _tuple(padding, nd), _tuple(dilation, nd)
    pads: list[int] = []
    for k in reversed(range(nd)):
        need = (out_shape[k] - 1) * stride[k] + (kernel[k] - 1) * dilation[k] + 1
        extra = max(0, need - (in_shape[k] + 2 * padding[k]))
        pads += [padding[k], padding[k] + extra]
    indices = tuple((Ellipsis, *(slice(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in
                                 zip(offset, dilation, stride, out_shape, strict=True)))
                    for offset in itertools.product(*(range(k) for k in kernel)))
    return pads, indices


def pool_margin(x, m, nd: int, kernel, stride, padding, dilation, ceil_mode, dead
                ) -> torch.Tensor:
    """Max pooling of ``x`` (windows over its last ``nd`` axes) to ``m``: positive unless two
    candidates of a window share its maximum, leaving out windows whose maximum is 0 when
    ``dead`` (the input is a relu's output whose input has no 0: every candidate at 0 is a
    dead unit). Per kernel offset, on strided slices of the (-inf) padded input, with no
    unfolded copy, ``s = Σ sign(m - x_i)`` counts a window's entries below its maximum: the
    window ties where ``s <= K - 2`` (``K`` offsets)."""
    x, m = _plain(x), _plain(m)
    if x.numel() == 0:
        return _positive(x)
    pads, indices = _pool_plan(tuple(x.shape[-nd:]), tuple(m.shape[-nd:]), nd,
                               _hashable(kernel), _hashable(stride), _hashable(padding),
                               _hashable(dilation))
    xp = F.pad(x, pads, value=-math.inf) if any(pads) else x
    offsets = indices
    below = step = None
    for index in indices:
        step = torch.sub(m, xp[index], out=step)
        step.sign_()
        if below is None:
            below, step = step, None
        else:
            below.add_(step)
    if dead:            # m >= 0: windows at 0 move up by K, out of reach of the test
        below.sub_(torch.sign(m), alpha=len(offsets))
        return below.amin() + 1.5
    return below.amin() - (len(offsets) - 1.5)


def reduce_margin(x, dims, dead, largest: bool = True) -> torch.Tensor:
    """A max (or min) reduction over ``dims`` (all when None): positive unless two entries
    share an extremum, leaving out maxima at 0 over dead relus when ``dead``; ``Σ sign(m - x)``
    counts the entries off the extremum, as in `pool_margin`."""
    x = _plain(x)
    if dims is None or (isinstance(dims, list | tuple) and len(dims) == 0):
        dims = tuple(range(x.ndim))
    elif isinstance(dims, int):
        dims = (dims,)
    dims = tuple(int(d) % max(x.ndim, 1) for d in dims)
    if x.ndim == 0 or x.numel() == 0:
        return _positive(x)
    n = math.prod(x.shape[d] for d in dims)
    m = torch.amax(x, dims, keepdim=True) if largest else torch.amin(x, dims, keepdim=True)
    below = torch.sign(m - x if largest else x - m).sum(dims, keepdim=True)
    if dead:
        return (below - n * torch.sign(m)).amin() + 1.5
    return below.amin() - (n - 1.5)


def total(*outs) -> torch.Tensor:
    """The sum of the floating outputs: finite unless an output is not (a margin read with
    ``isfinite``; asd refuses where PyTorch returns inf or nan)."""
    outs = [_plain(o) for o in outs]
    sums = [o.sum(dtype=torch.float32) for o in outs
            if isinstance(o, torch.Tensor) and o.is_floating_point()]
    if not sums:
        return _positive(next(o for o in outs if isinstance(o, torch.Tensor)))
    return sums[0] if len(sums) == 1 else torch.stack(sums).sum()


def flag(margins: Sequence, finite: torch.Tensor) -> torch.Tensor:
    """Whether a tie matters, as a 0-d bool tensor on the device (no synchronisation): some
    margin is not positive, or the outputs are not finite."""
    bad = ~torch.isfinite(finite)
    if margins:
        ms = [m if m.dtype == torch.float32 else m.float() for m in margins]
        low = ms[0] if len(ms) == 1 else torch.stack(ms).amin()
        bad = bad | ~(low > 0)
    return bad


ALWAYS_SWEPT: set[str] = set()
"""Operations with no margin whose derivative is always asd's: an `asd.implicit` solution
map registers its operator here (its degenerate points are its solver's, invisible to a
margin). The program is flagged at every call: `function`'s backward is asd's sweep of it."""


def always(like) -> torch.Tensor:
    """A zero margin: a tie may matter at every point."""
    t = like[0] if isinstance(like, list | tuple) else like
    return torch.zeros((), dtype=torch.float32, device=t.device)


def flag_on_host(margins: Sequence, finite: torch.Tensor) -> bool:
    """`flag` read on the host, one number at a time (CPU tensors: no kernel launched)."""
    return not (math.isfinite(finite.item()) and all(m.item() > 0 for m in margins))


# ----- operations whose exported form autograd does not differentiate -----

def copy_into(dst, src, non_blocking=False):
    """``aten.copy`` (``h[:, 0] = 0.1`` after export functionalises it), which eager
    autograd does not differentiate: ``src`` broadcast to ``dst``'s shape, dtype and device
    (``dst``'s old values are overwritten, so no derivative flows to them)."""
    if not isinstance(src, torch.Tensor):
        src = torch.as_tensor(src)
    return src.to(dtype=dst.dtype, device=dst.device).expand(dst.shape).clone()


REPLACED = {"copy": copy_into}
"""ATen operations an exported graph holds but eager autograd refuses to differentiate,
and the same function written with operations it does."""


# ----- which flag each operation gets -----

def _name(node) -> str:
    if node.target is operator.getitem:
        return "getitem"
    packet = getattr(node.target, "overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(node.target, "__name__", "")


def _arg(node, i: int, name: str, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _over_dead_relu(graph_node, flagged_relus: set) -> bool:
    """Whether ``graph_node`` is the output of a relu whose input is tested for a 0 (so a
    window of zeros over it, when no flag is raised, holds dead units only)."""
    return (isinstance(graph_node, torch.fx.Node) and _name(graph_node) == "relu"
            and graph_node.name in flagged_relus)


def _is_int_power(p) -> bool:
    return isinstance(p, int | float) and float(p).is_integer() and p >= 0


class NotNative(Exception):
    """A program without a native form (an operation outside `SMOOTH` and the flagged ones
    on its differentiated path)."""


def _discrete_cast(node) -> bool:
    """Whether a cast node makes integers or booleans (``x.long()``): a step function of a
    floating input, which PyTorch's autograd silently cuts (its derivative 0 even where the
    cast jumps); asd's sweep refuses it."""
    dtype = node.kwargs.get("dtype")
    if dtype is None:
        dtype = next((a for a in node.args[1:] if isinstance(a, torch.dtype)), None)
    return isinstance(dtype, torch.dtype) and not (dtype.is_floating_point or dtype.is_complex)


def _bounds(call, x, *bounds) -> list:
    """The margins of an input to its clamping bounds (None: no bound)."""
    return [call(off_value, (x, b)) for b in bounds if b is not None]


def _decide(node, flagged_relus: set) -> bool:
    """In a decided program: replace ``node`` by its decided form where it has one (a relu,
    a 2-d max pooling whose indices are not read), so that its ties need no margin."""
    name = _name(node)
    if name == "relu":
        node.target = decided_relu
        flagged_relus.add(node.name)
        return True
    if name == "max_pool2d":
        a0 = node.args[0]
        dead = isinstance(a0, torch.fx.Node) and a0.target is decided_relu
        node.target = decided_max_pool2d
        node.kwargs = {**node.kwargs, "dead": dead}
        return True
    return False


def flag_for(node, graph: torch.fx.Graph, flagged_relus: set, decided: bool = False) -> list:
    """Insert (after ``node``) the nodes computing the margins of ``node``'s ties that may
    matter; return them (none for a smooth operation). Raises `NotNative` for an operation
    with neither. With ``decided``, a relu or 2-d max pooling becomes its decided form
    (`decided_relu`, `decided_max_pool2d`) instead, which counts what it cannot decide."""
    name = _name(node)
    call = graph.call_function
    a0 = node.args[0] if node.args else None
    if name in ("_to_copy", "to") and _discrete_cast(node):
        raise NotNative(f"aten.{name} to an integer or boolean dtype (a step function)")
    if name in SMOOTH:
        return []
    if name in ALWAYS_SWEPT:
        if decided:  # its backward is asd's sweep, never first-order decided kernels
            raise NotNative(name)
        return [call(always, (a0,))]
    if decided and _decide(node, flagged_relus):
        return []
    if name in ("relu", "abs", "sign", "leaky_relu", "elu"):
        if name == "relu":
            flagged_relus.add(node.name)
        return [call(off_value, (a0,))]
    if name in ("clamp", "clip"):
        return _bounds(call, a0, _arg(node, 1, "min"), _arg(node, 2, "max"))
    if name == "clamp_min":
        return _bounds(call, a0, _arg(node, 1, "min"))
    if name == "clamp_max":
        return _bounds(call, a0, _arg(node, 1, "max"))
    if name == "hardtanh":
        return _bounds(call, a0, _arg(node, 1, "min_val", -1.0), _arg(node, 2, "max_val", 1.0))
    if name == "relu6":
        return _bounds(call, a0, 0.0, 6.0)
    if name in ("maximum", "minimum", "gt", "ge", "lt", "le", "eq", "ne", "fmax", "fmin"):
        return [call(apart, (a0, node.args[1]))]
    if name in ("max_pool1d", "max_pool2d", "max_pool1d_with_indices",
                "max_pool2d_with_indices"):
        nd = 1 if "1d" in name else 2
        values = node if "indices" not in name else call(operator.getitem, (node, 0))
        args = [_arg(node, 1, "kernel_size"), _arg(node, 2, "stride", ()),
                _arg(node, 3, "padding", 0), _arg(node, 4, "dilation", 1),
                _arg(node, 5, "ceil_mode", False)]
        dead = _over_dead_relu(a0, flagged_relus)
        return [call(pool_margin, (a0, values, nd, *args, dead))]
    if name in ("amax", "amin"):
        dead = _over_dead_relu(a0, flagged_relus) and name == "amax"
        return [call(reduce_margin, (a0, _arg(node, 1, "dim", None), dead, name == "amax"))]
    if name in ("max", "min"):
        overload = node.target._overloadname
        if overload == "other":
            return [call(apart, (a0, node.args[1]))]
        dim = _arg(node, 1, "dim", None) if overload == "dim" else None
        dead = _over_dead_relu(a0, flagged_relus) and name == "max"
        return [call(reduce_margin, (a0, dim, dead, name == "max"))]
    if name == "embedding":
        # PyTorch zeroes the gradient of the padding row (a convention, not the derivative)
        if _arg(node, 2, "padding_idx", -1) not in (None, -1):
            raise NotNative("aten.embedding with a padding_idx (PyTorch drops that row's "
                            "gradient)")
        return []
    if name in ("argmax", "argmin"):       # positions: constant away from a tie of the max
        dim = _arg(node, 1, "dim", None)
        return [call(reduce_margin, (a0, dim, False, name == "argmax"))]
    if name in ("sqrt", "rsqrt", "log", "log2", "log10"):
        return [call(above, (a0, 0.0))]
    if name == "log1p":
        return [call(above, (a0, -1.0))]
    if name == "acosh":
        return [call(above, (a0, 1.0))]
    if name in ("asin", "acos", "atanh", "erfinv"):
        return [call(inside_unit, (a0,))]
    if name in ("atan2", "hypot"):
        return [call(off_origin, (a0, node.args[1]))]
    if name in ("floor", "ceil", "trunc", "frac"):   # constant (frac: slope 1) off integers
        return [call(off_integer, (a0,))]
    if name == "round":
        if _arg(node, 1, "decimals", 0):
            raise NotNative("aten.round with decimals (its jumps are of the scaled value)")
        return [call(off_half, (a0,))]
    if name == "reciprocal":
        return [call(off_value, (a0,))]
    if name == "div":
        if _arg(node, 2, "rounding_mode") is not None:
            raise NotNative(f"aten.{name} with rounding")
        b = node.args[1]
        if isinstance(b, torch.fx.Node):
            return [call(off_value, (b,))]
        if b == 0:
            raise NotNative("a division by the constant 0")
        return []
    if name == "pow":
        p = node.args[1]
        if isinstance(a0, torch.fx.Node) and not isinstance(p, torch.fx.Node):
            if _is_int_power(p):
                return []
            if isinstance(p, int | float) and float(p).is_integer():
                return [call(off_value, (a0,))]        # x ** -n: a pole at 0 only
            return [call(above, (a0, 0.0))]
        if not isinstance(a0, torch.fx.Node) and isinstance(a0, int | float) and a0 > 0:
            return []                          # c ** x with c > 0: exp(x log c)
        raise NotNative("aten.pow of a tensor exponent")
    if name in ("linalg_vector_norm", "norm"):
        order = _arg(node, 1, "ord" if name == "linalg_vector_norm" else "p", 2)
        if order == 2 or order is None:
            return [call(off_value, (node,))]
        if order == 1:
            return [call(off_value, (a0,))]
        raise NotNative(f"aten.{name} of order {order}")
    if name == "std":
        return [call(off_value, (node,))]
    raise NotNative(f"aten.{name}")


def _constant_input_conv(node, live: set) -> bool:
    """Whether ``node`` is a 2-d convolution (``aten.conv2d.default`` of a batch) of an input
    no differentiated tensor reaches, whose tangent `decided_conv2d` computes without
    PyTorch's convolution of a zero tangent."""
    if node.target is not torch.ops.aten.conv2d.default:
        return False
    x = node.args[0]
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.ndim == 4 and x.name not in live


class NativeProgram:
    """A `TorchProgram`'s exported graph as a ``torch.fx.GraphModule`` that returns, after
    its outputs, the sum of its floating outputs (`total`) and the margins of its
    nonsmooth operations (`flag_for`), for the differentiated placeholders ``differentiated``
    (those requiring grad). ``module(*flat)`` takes the graph's placeholders in order:
    `template` holds the program's own tensors (parameters, buffers, constants: their
    identities are part of the program's cache key), with the user inputs at `positions`."""

    def __init__(self, prog, differentiated: frozenset, decided: bool = False):
        src = prog.exported.graph_module.graph
        self.prog = prog
        graph = torch.fx.Graph()
        env: dict = {}
        live = set(differentiated)
        margins: list = []
        flagged_relus: set = set()
        placeholders: list[str] = []
        for node in src.nodes:
            if node.op == "placeholder":
                env[node] = graph.placeholder(node.name)
                env[node].meta = dict(node.meta)
                placeholders.append(node.name)
                continue
            if node.op == "output":
                break
            new = graph.node_copy(node, lambda n: env[n])
            if node.op == "call_function" and _name(node) in REPLACED:
                new.target = REPLACED[_name(node)]
            env[node] = new
            if node.op != "call_function" or not any(a.name in live
                                                     for a in node.all_input_nodes):
                continue
            if node.name in prog.point_nodes:
                continue                      # locally constant (an isnan test)
            live.add(node.name)
            margins += flag_for(new, graph, flagged_relus, decided)
            if decided and _constant_input_conv(node, live):
                new.target = decided_conv2d
        by_name = {n.name: n for n in src.nodes}
        user = [env[by_name[name]] for name in prog.outputs]
        graph.output((*user, graph.call_function(total, tuple(user)), *margins))
        self.module = torch.fx.GraphModule(torch.nn.Module(), graph)
        self.differentiated, self.decided = differentiated, decided
        self.n_outputs = len(user)
        self.n_margins = len(margins)
        sources = prog.sources()
        self.names = placeholders
        self.template = [sources.get(name) for name in placeholders]
        self.positions = [placeholders.index(name) for name in prog.user_inputs]
        n = len(placeholders)
        self.tail = self.positions == list(range(n - len(self.positions), n))
        self.prefix = self.template[:n - len(self.positions)] if self.tail else None

    def flat(self, leaves: Sequence, replace: dict | None = None) -> list:
        """The graph's placeholders for these user inputs (and, by placeholder name, other
        tensors in place of the program's own)."""
        if replace:
            flat = [replace.get(name, t) for name, t in zip(self.names, self.template,
                                                               strict=True)]
            for pos, leaf in zip(self.positions, leaves, strict=True):
                flat[pos] = leaf
            return flat
        if self.tail:
            return [*self.prefix, *leaves]
        flat = list(self.template)
        for pos, leaf in zip(self.positions, leaves, strict=True):
            flat[pos] = leaf
        return flat


def build(prog, differentiated: frozenset, decided: bool = False) -> NativeProgram | str:
    """The native form of ``prog`` for these differentiated placeholders (its decided form
    with ``decided``), or why it has none."""
    try:
        return NativeProgram(prog, differentiated, decided)
    except NotNative as e:
        return f"{e} on the differentiated path has no native form"


# ----- ties decided at first order: PyTorch's kernels on the decided branches -----
#
# Where a margin flags a tie, the decided program (`NativeProgram(..., decided=True)`) runs
# the graph once more with forward-mode AD along the sweep's direction ``v`` (dual tensors:
# each operation's own tangent formula) and its relus and 2-d max poolings replaced by
# `decided_relu` / `decided_max_pool2d`: each tied entry takes the side its tangent along
# ``v`` fixes, as the staged sweep decides (`asd.core.ties.staged_sign` at level 0: a tangent
# counts only above ``SMALL`` times the direction's largest entry), and PyTorch's backward
# then differentiates the decided branches with its own kernels (proofs/README.md, "Ties
# decided at first order"). An entry first order cannot decide is counted (`Deciding`): the
# call then goes to asd's full sweep, which decides it exactly.

SMALL = 2.0 ** -20
"""The staged sweep's threshold (`asd.core.ties.SMALL`): tangents at most ``SMALL`` times the
direction's largest entry do not decide."""


class Deciding:
    """The state of one decided run: the threshold of a clear tangent and the margins of
    what the decided operations left open (0-d tensors, no synchronisation): as a native
    margin, positive where nothing is undecided."""

    current: Deciding | None = None

    def __init__(self, threshold: torch.Tensor, random: bool):
        self.threshold = threshold
        self.random = random
        """Whether the direction was drawn at random: then a tied quantity whose tangent is
        exactly 0 has a zero composite linearization almost surely (a nonzero linear form
        vanishes on a null set), so either side gives the same gradient (the staged sweep's
        rule at its last, random, level)."""
        self.margins: list[torch.Tensor] = []
        self._clear = None

    def __enter__(self):
        self.outer, Deciding.current = Deciding.current, self
        return self

    def __exit__(self, *exc):
        Deciding.current = self.outer

    @property
    def clear(self) -> torch.Tensor:
        """``2 threshold + 1``: a number past the threshold whatever its scale, added to the
        entries a decided operation's margin leaves out so that they cannot reach it."""
        if self._clear is None:
            self._clear = self.threshold * 2 + 1
        return self._clear

    def count(self, mask: torch.Tensor) -> None:
        """Record undecided entries (``mask``): a margin positive where there are none."""
        self.margins.append(0.5 - mask.sum())

    def margin(self, m: torch.Tensor) -> None:
        """Record a decided operation's margin: positive where it left nothing undecided
        (NaN, from a non-finite value or tangent, counts as open)."""
        self.margins.append(m)

    def open(self, margins: Sequence, finite: torch.Tensor) -> bool:
        """Whether the run left something open: an undecided entry, a tie of another
        nonsmooth operation (``margins``) or a non-finite output; one host read."""
        margins = [*margins, *self.margins]
        if finite.device.type == "cpu":
            return flag_on_host(margins, finite)
        return bool(flag(margins, finite))


def _deciding() -> Deciding:
    if Deciding.current is None:
        raise RuntimeError("a decided operation ran outside a decided program")
    return Deciding.current


class _DecidedRelu(torch.autograd.Function):
    """``relu`` whose derivative at 0 is the side the tangent picks: ``x > 0``, or ``x == 0``
    with a clearly positive tangent. Needs forward-mode AD (the tangent is its input's)."""

    @staticmethod
    def forward(x):
        return torch.relu(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_forward(x)
        ctx.side = None

    @staticmethod
    def jvp(ctx, x_t):
        # the decision and the tangent are never differentiated: computed outside autograd
        # (the values require grad, and every operation would be recorded)
        x, x_t = ctx.saved_tensors[0].detach(), x_t.detach()
        state = _deciding()
        # floating-point arithmetic only, no boolean tensor: on CPUs a comparison costs four
        # times an elementwise product, `torch.where` and `masked_fill` thirty times (a step
        # meets these at every relu); in place where it can, as every fresh tensor of a
        # large layer costs its pages' faults. sign(x) is -1, 0, 1 (NaN for NaN); `off` is
        # 1 off the ties, 0 at them
        sign = torch.sign(x)
        off = torch.abs(sign)
        if x.numel() == 0:
            ctx.side = sign
            return x_t
        # the margin: |x_t| - threshold at the ties (not clearly nonzero where <= 0), moved
        # past 0 off the ties and, along a random direction, where the tangent is exactly 0
        # (either side gives the same gradient there). NaN wherever x_t is NaN, and, through
        # 0 * sum(x), wherever x is not finite (torch.sign reads a NaN as 0, a tie): then
        # the run is open, and asd's sweep decides
        # (the threshold subtracted after the minimum: the sign of a difference is exact)
        work = torch.abs(x_t)
        out = torch.sign(work).neg_().add_(1).add_(off) if state.random else off
        margin = work.addcmul_(out, state.clear).amin().sub_(state.threshold)
        del out
        state.margin(margin.add_(x.sum().mul_(0)))
        # the side, positive where the piece is on: 2 sign(x) + sign(x_t - threshold), the
        # sign of x off the ties, of the tangent beyond the threshold at them (small
        # integers, exact)
        del off
        ctx.side = torch.sub(x_t, state.threshold, out=work).sign_().add_(sign, alpha=2)
        return torch.ops.aten.threshold_backward.grad_input(x_t, ctx.side, 0, grad_input=sign)

    @staticmethod
    def backward(ctx, ct):
        side = ctx.side
        if side is None:                  # no tangent reached it: no tie was decided
            raise RuntimeError("decided_relu was differentiated without its tangent")
        # exactly 0 where the piece is off (the side is not positive), as PyTorch's relu (an
        # inf cotangent there is no NaN: ct * mask would make one)
        return torch.ops.aten.threshold_backward(ct, side, 0)


# Function.apply binds default arguments through inspect.signature at every call when
# setup_context is defined: computed once here (as dropin._Correct's)
_DecidedRelu.forward.__signature__ = inspect.signature(_DecidedRelu.forward)


def decided_relu(x):
    """`_DecidedRelu` (an fx graph target)."""
    return _DecidedRelu.apply(x)


class _DecidedConv(torch.autograd.Function):
    """``aten.conv2d`` of an input without a tangent (the network's input), whose tangent
    is PyTorch's forward-mode formula ``conv(x_t, w, b_t) + conv(x, w_t)`` without its first
    term's convolution of a zero tangent: ``conv(x, w_t) + b_t`` (the same numbers: that
    convolution is ``b_t`` exactly). Its backward is PyTorch's (``convolution_backward``, as
    ``ConvolutionBackward0`` calls it)."""

    @staticmethod
    def forward(x, w, b, stride, padding, dilation, groups):
        return torch.ops.aten.conv2d.default(x, w, b, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, b, *args = inputs
        ctx.save_for_forward(x, w)
        ctx.save_for_backward(x, w)
        ctx.args, ctx.bias = args, None if b is None else list(b.shape)
        ctx.set_materialize_grads(False)        # a missing tangent arrives as None

    @staticmethod
    def jvp(ctx, x_t, w_t, b_t, *_):
        if x_t is not None:
            raise RuntimeError("decided_conv2d's input has a tangent")
        x, w = (t.detach() for t in ctx.saved_tensors)   # never differentiated
        stride, padding, dilation, groups = ctx.args
        out = torch.ops.aten.conv2d.default(
            x, torch.zeros_like(w) if w_t is None else w_t.detach(), None, stride, padding,
            dilation, groups)
        return out if b_t is None else out.add_(b_t.detach()[:, None, None])

    @staticmethod
    def backward(ctx, ct):
        if ct is None:
            return None, None, None, None, None, None, None
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.args
        need = ctx.needs_input_grad
        gx, gw, gb = torch.ops.aten.convolution_backward(
            ct, x, w, ctx.bias, stride, padding, dilation, False, [0, 0], groups,
            [need[0], need[1], need[2] and ctx.bias is not None])
        return gx, gw, gb, None, None, None, None


_DecidedConv.forward.__signature__ = inspect.signature(_DecidedConv.forward)


def decided_conv2d(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                   groups=1):
    """`_DecidedConv` with ``aten.conv2d``'s arguments (an fx graph target)."""
    return _DecidedConv.apply(x, weight, bias, list(_tuple(stride, 2)),
                              list(_tuple(padding, 2)), list(_tuple(dilation, 2)), int(groups))


def _padded(x, fill, kernel, stride, padding, dilation, out_shape):
    """``x`` padded with ``fill`` on its last two axes (and, for ceil mode, to the last
    window), so that each kernel offset's candidates are one strided slice."""
    pads: list[int] = []
    for k in (1, 0):
        need = (out_shape[k] - 1) * stride[k] + (kernel[k] - 1) * dilation[k] + 1
        extra = max(0, need - (x.shape[-2 + k] + 2 * padding[k]))
        pads += [padding[k], padding[k] + extra]
    return F.pad(x, pads, value=fill) if any(pads) else x


def _offsets(kernel, stride, dilation, out_shape):
    """Per kernel offset: the index of its candidates' strided slice, and (through
    `_places`) their flat positions in the unpadded input."""
    for oh, ow in itertools.product(range(kernel[0]), range(kernel[1])):
        yield (oh, ow), (..., slice(oh * dilation[0], oh * dilation[0] + stride[0] * (
            out_shape[0] - 1) + 1, stride[0]), slice(ow * dilation[1], ow * dilation[1]
                                                     + stride[1] * (out_shape[1] - 1) + 1,
                                                     stride[1]))


@functools.lru_cache(maxsize=64)
def _places(w, device, offset, stride, padding, dilation, out_shape):
    """The flat input positions ``(Ho, Wo)`` (int64) of one kernel offset's candidates."""
    rows = torch.arange(out_shape[0], device=device) * stride[0] + offset[0] * dilation[0] \
        - padding[0]
    cols = torch.arange(out_shape[1], device=device) * stride[1] + offset[1] * dilation[1] \
        - padding[1]
    return rows[:, None] * w + cols[None, :]


def _open_windows(exact, unclear, m, best, state, dead) -> torch.Tensor:
    """The windows first order leaves open: a candidate within the threshold of the best
    tangent (not equal to it), and, along a given direction, several with exactly the best
    (unless ``dead`` and the window is all dead units: value 0, tangent 0). Along a random
    direction exactly equal tangents are the same linearization, almost surely."""
    if state.random:
        return unclear
    many = exact > 1
    if dead:
        many = many & ~((m == 0) & (best == 0))
    return unclear | many


def _decided_windows(x, x_t, m, state, dead, geometry):
    """`_DecidedPool`'s decision on the windows as one view (``unfold`` of the padded input,
    undilated pooling): the lexicographic best (value, tangent) per window by one ``max``
    over its candidates (the first on ties, as PyTorch's own), a handful of kernels in all
    (per-offset loops cost one kernel launch per offset and comparison)."""
    kernel, stride, padding, _, out_shape = geometry
    (kh, kw), (sh, sw) = kernel, stride
    ho, wo = out_shape
    lead = x.shape[:-2]

    def windows(t, fill):       # a view (..., Ho, Wo, kh, kw): no copy of the input
        t = _padded(t, fill, *geometry).unfold(-2, kh, sh).unfold(-2, kw, sw)
        return t[..., :ho, :wo, :, :]

    top = m[..., None, None]
    # a fresh (..., Ho, Wo, kh, kw) tensor, so its candidates flatten as a view
    key = torch.where(windows(x, -math.inf) == top, windows(x_t, 0.0), -math.inf)
    key = key.reshape(*lead, ho, wo, kh * kw)
    best, arg = key.max(-1)
    near = key >= (best - state.threshold).unsqueeze(-1)
    same = key == best.unsqueeze(-1)
    unclear = (near & ~same).any(-1)
    exact = None if state.random else same.sum(-1, dtype=torch.int8)
    open_ = _open_windows(exact, unclear, m, best, state, dead)
    w = x.shape[-1]
    base = _places(w, x.device, (0, 0), stride, padding, (1, 1), out_shape)
    shift = _shifts(w, x.device, kernel)
    return best, (base + shift[arg]).contiguous(), open_


def _pooled_shape(shape, kernel, stride, padding, dilation, ceil_mode) -> tuple:
    """``max_pool2d``'s output size (its own formula: a ceil-mode window must start inside
    the input or its left padding)."""
    out = []
    for n, k, s, p, d in zip(shape, kernel, stride, padding, dilation, strict=True):
        span = n + 2 * p - d * (k - 1) - 1
        o = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        out.append(o)
    return tuple(out)


def _tiling(shape, geometry) -> bool:
    """Whether the windows tile the input without overlap or padding (stride = kernel, no
    padding, no dilation, no window past the edge): each entry is in at most one window."""
    kernel, stride, padding, dilation, out_shape = geometry
    return kernel == stride and padding == (0, 0) and dilation == (1, 1) and all(
        o * k <= n for o, k, n in zip(out_shape, kernel, shape, strict=True))


def _tile_slices(kernel, out_shape):
    """Per kernel offset, the strided slice of its candidates in tiling windows."""
    (kh, kw), (ho, wo) = kernel, out_shape
    return [(..., slice(a, a + kh * (ho - 1) + 1, kh), slice(b, b + kw * (wo - 1) + 1, kw))
            for a in range(kh) for b in range(kw)]


def tiled_max(x, kernel, out_shape):
    """Max pooling over tiling windows as elementwise maxima of the offsets' strided
    slices (the same numbers, NaN included, as ``max_pool2d``, whose CPU kernel costs ten
    times this on a channels-first tensor)."""
    slices = _tile_slices(kernel, out_shape)
    if len(slices) == 1:
        return x[slices[0]].clone()
    m = torch.maximum(x[slices[0]], x[slices[1]])
    for at in slices[2:]:
        torch.maximum(m, x[at], out=m)     # in place: one fresh tensor in all
    return m


def _decided_tiles(x, x_t, m, state, dead, geometry):
    """`_DecidedPool`'s decision where the windows tile the input (`_tiling`): the key of a
    candidate is its tangent where it attains its window's maximum, -inf elsewhere; the
    winner is the first candidate (row-major, PyTorch's index format) with the largest key.
    The candidates are laid out once as a contiguous ``(K, ..., Ho, Wo)`` stack (one copy
    per operand: elementwise operations on stride-2 slices do not vectorise), and decided
    in floating-point arithmetic only (on CPUs a comparison costs four times an elementwise
    product, ``torch.where`` thirty times). Returns the winner's tangent, its flat index,
    and the margin of the open windows (`_tile_margin`)."""
    kernel, _, _, _, out_shape = geometry
    if m.numel() == 0:
        return m, torch.zeros(m.shape, dtype=torch.int64, device=m.device), _positive(m)
    slices = _tile_slices(kernel, out_shape)
    keys = torch.stack([x_t[at] for at in slices])
    # 0 where a candidate attains its window's maximum, inf elsewhere (m - x >= 0, and
    # 0 * inf = NaN is the maximum; a NaN value gives 0 too, and a NaN output: open)
    gap = torch.stack([x[at] for at in slices])
    gap = torch.sub(m, gap, out=gap).mul_(math.inf).nan_to_num_(nan=0.0, posinf=math.inf)
    keys.sub_(gap)
    best = keys.amax(0)
    below = torch.sign(torch.sub(best, keys, out=gap))  # 0 exactly where key == best, else 1
    # the first offset with the best key: the least of its flat offset in the input, plus
    # the window's size elsewhere (small integers, exact)
    w = x.shape[-1]
    first = torch.mul(below, w * kernel[0], out=gap).add_(
        _tile_offsets(w, x.device, x.dtype, tuple(kernel), m.ndim)).amin(0).to(torch.int64)
    margin = _tile_margin(keys, below, best, m, state, dead)      # (overwrites both)
    base = _places(x.shape[-1], x.device, (0, 0), tuple(kernel), (0, 0), (1, 1),
                   tuple(out_shape))
    return best, base + first, margin


def _tile_margin(keys, below, best, m, state, dead) -> torch.Tensor:
    """Positive unless a window is open: a candidate whose key is within the threshold of
    the best (``key >= best - threshold``) but not equal to it, and, along a given
    direction, several with exactly the best key (unless ``dead`` and the window is all dead
    units: value 0, tangent 0). ``below`` is ``sign(best - key)`` (0 exactly at the best,
    else 1). Computed in place, in the storage of ``keys`` and ``below`` (every fresh tensor
    costs its page faults)."""
    same = below.neg_().add_(1)                        # 1 at the best, 0 elsewhere
    low = best - state.threshold
    # low - key <= 0 where a key is near the best; moved past 0 at the best itself
    near = torch.sub(low, keys, out=keys).addcmul_(same, state.clear).amin()
    if state.random:
        return near
    many = 1.5 - same.sum(0)                           # <= 0 where several share the best
    if dead:                                           # m == 0 and best == 0: all dead units
        spared = (1 - torch.sign(torch.abs(m))) * (1 - torch.sign(torch.abs(best)))
        many = many + spared * len(keys)
    return torch.minimum(near, many.amin())


@functools.lru_cache(maxsize=64)
def _tile_offsets(w, device, dtype, kernel, ndim):
    """The flat input offset of each kernel position (row-major), as a ``(K, 1, ..., 1)``
    tensor of ``dtype`` (``ndim`` ones; exact: offsets are small integers)."""
    offsets = [oh * w + ow for oh in range(kernel[0]) for ow in range(kernel[1])]
    return torch.tensor(offsets, dtype=dtype, device=device).reshape(-1, *(1,) * ndim)


def _in_plane(index, crop, w):
    """Flat indices in a ``crop``-wide plane as indices in the ``w``-wide input."""
    return index if crop[1] == w else index // crop[1] * w + index % crop[1]




@functools.lru_cache(maxsize=64)
def _shifts(w, device, kernel):
    """The flat input offset of each kernel position (row-major), for undilated windows."""
    return torch.tensor([oh * w + ow for oh in range(kernel[0]) for ow in range(kernel[1])],
                        dtype=torch.int64, device=device)


def _decided_offsets(x, x_t, m, state, dead, geometry):
    """`_DecidedPool`'s decision per kernel offset, on strided slices (dilated pooling)."""
    kernel, stride, padding, dilation, out_shape = geometry
    xp = _padded(x, -math.inf, *geometry)
    tp = _padded(x_t, 0.0, *geometry)
    best = index = None
    keys = []
    for offset, at in _offsets(kernel, stride, dilation, out_shape):
        key = torch.where(xp[at] == m, tp[at], -math.inf)    # first one on ties
        keys.append(key)
        place = _places(x.shape[-1], x.device, offset, stride, padding, dilation, out_shape)
        if best is None:
            best, index = key, place.expand(key.shape)
        else:
            better = key > best
            best = torch.where(better, key, best)
            index = torch.where(better, place, index)
    low = best - state.threshold
    exact = unclear = None
    for key in keys:                    # candidates tied with the best to first order
        same = key == best
        near = (key != best) & (key >= low)
        exact = same.to(torch.int8) if exact is None else exact + same
        unclear = near if unclear is None else unclear | near
    return best, index.contiguous(), _open_windows(exact, unclear, m, best, state, dead)


class _DecidedPool(torch.autograd.Function):
    """2-d max pooling whose winner in a tied window is the lexicographic maximum of
    (value, tangent): candidates whose tangents are within the threshold of the best are a
    first-order tie, counted undecided unless ``dead`` (the input is a decided relu's output)
    and they are all dead units (value 0, tangent 0: zero gradient rows, so any one will do).
    Its backward is PyTorch's ``max_pool2d_with_indices_backward`` with the decided indices.
    The windows are read per kernel offset, as strided slices (no unfolded copy)."""

    @staticmethod
    def forward(x, kernel, stride, padding, dilation, ceil_mode, dead):
        out_shape = _pooled_shape(x.shape[-2:], kernel, stride, padding, dilation, ceil_mode)
        if _tiling(x.shape[-2:], (tuple(kernel), tuple(stride), tuple(padding),
                                  tuple(dilation), out_shape)):
            return tiled_max(x, tuple(kernel), out_shape)
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, *args, dead = inputs
        ctx.save_for_forward(x, output)
        ctx.save_for_backward(x)
        ctx.args, ctx.dead, ctx.indices = args, dead, None

    @staticmethod
    def jvp(ctx, x_t, *_):
        x, m, x_t = (t.detach() for t in (*ctx.saved_tensors, x_t))  # as `_DecidedRelu`'s
        kernel, stride, padding, dilation = (tuple(a) for a in ctx.args[:4])
        state = _deciding()
        out_shape = tuple(m.shape[-2:])
        geometry = (kernel, stride, padding, dilation, out_shape)
        if _tiling(x.shape[-2:], geometry):
            best, index, margin = _decided_tiles(x, x_t, m, state, ctx.dead, geometry)
            state.margin(margin)
        else:
            decide = _decided_windows if dilation == (1, 1) else _decided_offsets
            best, index, open_ = decide(x, x_t, m, state, ctx.dead, geometry)
            state.count(open_)
        ctx.indices = index
        return best     # the winner's tangent (finite: the maximum is some candidate's)

    @staticmethod
    def backward(ctx, ct):
        if ctx.indices is None:
            raise RuntimeError("decided_max_pool2d was differentiated without its tangent")
        x = ctx.saved_tensors[0]
        kernel, stride, padding, dilation, ceil_mode = ctx.args
        g = torch.ops.aten.max_pool2d_with_indices_backward(
            ct, x, kernel, stride, padding, dilation, ceil_mode, ctx.indices)
        return g, None, None, None, None, None, None


_DecidedPool.forward.__signature__ = inspect.signature(_DecidedPool.forward)


def decided_max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False,
                       dead=False):
    """`_DecidedPool` with ``aten.max_pool2d``'s arguments (an fx graph target)."""
    kernel = _tuple(kernel_size, 2)
    stride = _tuple(stride, 2) if stride not in ((), [], None) else kernel
    return _DecidedPool.apply(x, list(kernel), list(stride), list(_tuple(padding, 2)),
                              list(_tuple(dilation, 2)), bool(ceil_mode), dead)
