"""asd inside ``jax.jit`` and ``jax.vmap`` against JAX's own gradient (issue 24's targets).

Each row times, interleaved, ``jax.jit(asd.jax.value_and_subgrad(loss))`` against
``jax.jit(jax.value_and_grad(loss))`` on the same data, both blocked until ready: a ReLU MLP
and a CNN (conv, ReLU, 2x2 max pooling, dense) at a random initialisation (no tie) and with
ties in every layer (the first layer's weights and biases 0: every ReLU of the first layer and,
in the CNN, every pooling window sits on a kink), and per-example subgradients of the MLP
(``jax.vmap`` over a batch of 256 single-example losses) against ``jax.vmap(jax.grad)``. Each
row checks its gradient against JAX's where no tie is met (the two must agree there) and
reports how many tied entries first order left undecided (``report=True``). A program whose
rules cannot stage yet is reported as such, not timed.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .peers import Contender

TARGETS = (  # (row, limit): asd / jax, from issue 24
    ("jax mlp", 1.2), ("jax mlp ties", 2.0), ("jax cnn", 1.2), ("jax cnn ties", 2.0),
    ("jax vmap mlp", 1.5),
)


@dataclass
class JaxRow:
    name: str
    about: str
    make: Callable  # (jax, quick) -> (loss, params, data, tied, vmapped)


def _mlp(jax, quick: bool, tied: bool):
    jnp = jax.numpy
    rng = np.random.default_rng(0)
    sizes = (32, 64, 64, 10) if quick else (256, 512, 512, 10)
    batch = 16 if quick else 256
    params = []
    for i, (m, n) in enumerate(itertools.pairwise(sizes)):
        w = rng.standard_normal((m, n)) / np.sqrt(m)
        b = np.full(n, 0.01)
        if tied and i == 0:
            w, b = np.zeros_like(w), np.zeros_like(b)
        params += [jnp.asarray(w, jnp.float32), jnp.asarray(b, jnp.float32)]
    x = jnp.asarray(rng.standard_normal((batch, sizes[0])), jnp.float32)
    y = jnp.asarray(rng.standard_normal((batch, sizes[-1])), jnp.float32)

    def loss(params, x, y):
        h = x
        for i in range(0, len(params) - 2, 2):
            h = jax.nn.relu(h @ params[i] + params[i + 1])
        d = h @ params[-2] + params[-1] - y
        return jnp.mean(d * d)

    return loss, params, (x, y)


def _cnn(jax, quick: bool, tied: bool):
    jnp = jax.numpy
    rng = np.random.default_rng(1)
    batch, side = (4, 12) if quick else (64, 28)
    w1 = rng.standard_normal((8, 1, 3, 3)) / 3
    b1 = np.full(8, 0.01)
    if tied:
        w1, b1 = np.zeros_like(w1), np.zeros_like(b1)
    w2 = rng.standard_normal((16, 8, 3, 3)) / np.sqrt(72)
    pooled = ((side - 2) // 2 - 2) // 2  # two valid 3x3 convolutions, each pooled 2x2
    flat = 16 * pooled * pooled
    w3 = rng.standard_normal((flat, 10)) / np.sqrt(flat)
    params = [jnp.asarray(p, jnp.float32) for p in (w1, b1, w2, np.full(16, 0.01), w3,
                                                     np.zeros(10))]
    x = jnp.asarray(rng.standard_normal((batch, 1, side, side)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((batch, 10)), jnp.float32)

    return cnn_loss(jax, jnp.mean), params, (x, y)


def cnn_loss(jax, reduce):
    """The CNN's loss: two blocks conv (valid, 3x3) - bias - relu - 2x2 max pool, a dense
    layer, ``reduce`` of the squared errors; ``params`` as `_cnn` makes them."""
    jnp = jax.numpy

    def block(h, w, b):
        h = jax.lax.conv_general_dilated(h, w, (1, 1), "VALID") + b.reshape(1, -1, 1, 1)
        h = jax.nn.relu(h)
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def loss(params, x, y):
        h = block(block(x, params[0], params[1]), params[2], params[3])
        d = h.reshape(x.shape[0], -1) @ params[4] + params[5] - y
        return reduce(d * d)

    return loss


def rows() -> list[JaxRow]:
    return [
        JaxRow("jax mlp", "ReLU MLP 256-512-512-10, batch 256, random init",
               lambda jax, q: (*_mlp(jax, q, False), False)),
        JaxRow("jax mlp ties", "the same MLP, first layer 0: every first-layer ReLU tied",
               lambda jax, q: (*_mlp(jax, q, True), True)),
        JaxRow("jax cnn", "conv-relu-maxpool x2-dense, 28x28, batch 64, random init",
               lambda jax, q: (*_cnn(jax, q, False), False)),
        JaxRow("jax cnn ties", "the same CNN, first conv 0: every ReLU and window tied",
               lambda jax, q: (*_cnn(jax, q, True), True)),
    ]


def _contenders(jax, loss, params, data) -> tuple[list[Contender], Callable]:
    import asd.jax

    mine = jax.jit(asd.jax.value_and_subgrad(loss, seed=0, report=True))
    theirs = jax.jit(jax.value_and_grad(loss))
    run_mine = lambda: jax.block_until_ready(mine(params, *data))  # noqa: E731
    run_theirs = lambda: jax.block_until_ready(theirs(params, *data))  # noqa: E731
    return [Contender("jax.jit", run_theirs, None, False),
            Contender("asd.jax jit", run_mine, None, False)], mine


def _vmap_contenders(jax, quick: bool) -> tuple[list[Contender], Callable, tuple]:
    import asd.jax

    loss, params, (x, y) = _mlp(jax, quick, False)

    def one(params, xi, yi):
        return loss(params, xi[None], yi[None])

    mine = jax.jit(jax.vmap(asd.jax.subgrad(one, seed=0), in_axes=(None, 0, 0)))
    theirs = jax.jit(jax.vmap(jax.grad(one), in_axes=(None, 0, 0)))
    return [Contender("jax.vmap(grad)", lambda: jax.block_until_ready(theirs(params, x, y)),
                      None, False),
            Contender("asd.jax vmap", lambda: jax.block_until_ready(mine(params, x, y)),
                      None, False)], (mine, theirs), (params, x, y)


def run(quick: bool, reps: int, warmup: int, only: str | None = None) -> list[dict]:
    import jax

    from asd.errors import StagedUnsupported

    from .runner import time_interleaved

    out = []
    for row in rows():
        if only is not None and only not in row.name:
            continue
        loss, params, data, tied = row.make(jax, quick)
        try:
            cands, mine = _contenders(jax, loss, params, data)
            _value, grads, undecided = mine(params, *data)
        except StagedUnsupported as e:
            out.append({"name": row.name, "about": row.about, "staged": False,
                        "why": str(e).split(":")[0]})
            continue
        want = jax.value_and_grad(loss)(params, *data)[1]
        error = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in
                    zip(grads, want, strict=True))
        times = time_interleaved(cands, reps, warmup)
        med = {c.name: 1e3 * statistics.median(times[c.name]) for c in cands}
        out.append({"name": row.name, "about": row.about, "staged": True,
                    "median_ms": med, "ratio": med["asd.jax jit"] / med["jax.jit"],
                    "undecided": int(undecided), "tied": tied,
                    "check": {"max_abs_difference_to_jax": error,
                              "ok": tied or error <= 1e-5}})
    if only is None or only in "jax vmap mlp":
        cands, (mine, theirs), args = _vmap_contenders(jax, quick)
        error = float(np.max(np.abs(np.concatenate([
            np.ravel(np.asarray(a) - np.asarray(b)) for a, b in
            zip(mine(*args), theirs(*args), strict=True)]))))
        times = time_interleaved(cands, reps, warmup)
        med = {c.name: 1e3 * statistics.median(times[c.name]) for c in cands}
        out.append({"name": "jax vmap mlp", "staged": True, "median_ms": med,
                    "about": "per-example subgradients of the MLP, batch 256",
                    "ratio": med["asd.jax vmap"] / med["jax.vmap(grad)"], "tied": False,
                    "undecided": 0,
                    "check": {"max_abs_difference_to_jax": error, "ok": error <= 1e-5}})
    return out


def targets(rows_: list[dict]) -> list[dict]:
    out = []
    for name, limit in TARGETS:
        for r in rows_:
            if r["name"] == name and r.get("staged"):
                out.append({"target": f"{name}: asd / jax (jit)", "program": name,
                            "ratio": r["ratio"], "limit": limit, "met": r["ratio"] <= limit})
    return out


def table(rows_: list[dict]):
    from rich.table import Table

    t = Table(title="asd.jax inside jax.jit / jax.vmap: median ms per call",
              title_justify="left")
    for col in ("program", "jax", "asd", "ratio", "undecided", "check"):
        t.add_column(col, justify="left" if col == "program" else "right")
    for r in rows_:
        if not r.get("staged"):
            t.add_row(r["name"], "-", "-", "-", "-", f"not staged: {r['why']}")
            continue
        theirs, mine = list(r["median_ms"].values())
        t.add_row(r["name"], f"{theirs:.3g}", f"{mine:.3g}", f"{r['ratio']:.2f}",
                  str(r["undecided"]), "ok" if r["check"]["ok"] else "FAIL")
    return t
