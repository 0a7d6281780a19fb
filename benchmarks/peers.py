"""The contenders for one benchmark: numpy primal, hand-written, asd and installed peers.

Each contender is a zero-argument callable doing the whole job (value and gradient with
respect to every parameter, inputs already converted to the framework's arrays), plus a
converter from its result to ``(value, [numpy gradients])`` for the correctness check.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import asd

from . import ops as backends
from .programs import Benchmark

PEERS = ("autograd", "torch", "jax")


@dataclass
class Contender:
    """``run()`` is what is timed; ``result(out)`` gives (value, grads) or None (primal)."""

    name: str
    run: Callable
    result: Callable | None
    tracemalloc: bool  # numpy-based: its allocations are visible to tracemalloc


def installed(peer: str) -> bool:
    return importlib.util.find_spec(peer) is not None


def _arrays(data: tuple, convert: Callable) -> tuple:
    return tuple(convert(d) if isinstance(d, np.ndarray) else d for d in data)


def numpy_contenders(bench: Benchmark, asd_ops) -> list[Contender]:
    np_ops = backends.numpy_ops()
    params, data = bench.params, bench.data
    out = [Contender("primal", lambda: bench.loss(np_ops, params, data), None, True)]
    if bench.hand is not None:
        out.append(Contender("hand", lambda: bench.hand(params, data), _plain, True))
    vg = asd.value_and_subgrad(lambda p: bench.loss(asd_ops, p, data))
    out.append(Contender("asd", lambda: vg(params), _plain, True))
    if bench.untied is not None:
        out.append(Contender("asd untied", lambda: vg(bench.untied), None, True))
    jitted = asd.jit(asd.value_and_subgrad(lambda p: bench.loss(asd_ops, p, data)))
    out.append(Contender("asd jit", lambda: jitted(params), _plain, True))
    if bench.clarke:
        sample = asd.jit(asd.clarke(lambda p: bench.loss(asd_ops, p, data), n=bench.clarke,
                                    seed=0))
        out.append(Contender(f"asd jit clarke{bench.clarke}", lambda: sample(params), None,
                             True))
    return out


def _plain(out):
    value, grads = out
    return float(value), [np.asarray(g) for g in grads]


def autograd_contender(bench: Benchmark) -> Contender:
    import autograd

    ops = backends.autograd_ops()
    vg = autograd.value_and_grad(lambda p: bench.loss(ops, p, bench.data))
    return Contender("autograd", lambda: vg(list(bench.params)), _plain, True)


def torch_contender(bench: Benchmark) -> Contender:
    import torch

    ops = backends.torch_ops()
    params = [torch.tensor(p, requires_grad=True) for p in bench.params]
    data = _arrays(bench.data, torch.from_numpy)

    def run():
        for p in params:
            p.grad = None
        loss = bench.loss(ops, params, data)
        loss.backward()
        return loss, [p.grad for p in params]

    def result(out):
        loss, grads = out
        return float(loss.detach()), [g.numpy() for g in grads]

    return Contender("torch", run, result, False)


def jax_contenders(bench: Benchmark) -> list[Contender]:
    import jax
    import jax.numpy as jnp

    ops = backends.jax_ops()
    params = [jnp.asarray(p) for p in bench.params]
    data = _arrays(bench.data, jnp.asarray)
    vg = jax.value_and_grad(lambda p: bench.loss(ops, p, data))
    jitted = jax.jit(vg)

    def result(out):
        value, grads = out
        return float(value), [np.asarray(g) for g in grads]

    return [
        Contender("jax", lambda: jax.block_until_ready(vg(params)), result, False),
        Contender("jax.jit", lambda: jax.block_until_ready(jitted(params)), result, False),
    ]


MAKERS = {"autograd": lambda b: [autograd_contender(b)], "torch": lambda b: [torch_contender(b)],
          "jax": jax_contenders}


def contenders(bench: Benchmark, asd_ops, peers: tuple[str, ...]) -> list[Contender]:
    """Every contender for ``bench``: numpy ones first, then the requested installed peers."""
    out = numpy_contenders(bench, asd_ops)
    for peer in peers:
        if installed(peer):
            out.extend(MAKERS[peer](bench))
    return out
