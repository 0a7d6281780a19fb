"""asd.jax under ``jax.jit`` at ties in every layer: the eager sweep's element, and no
tangent work where a tie cannot change it.

The models are the benchmark's ("jax cnn ties", "jax mlp ties": the first layer's weights and
biases 0, so every first-layer ReLU sits on its kink and, in the CNN, every pooling window is
tied) at integer weights and inputs: every product and sum is then exact in float32, so the
staged sweep compiled by XLA (fused, reordered) and the eager sweep (numpy, one operation at a
time) must give the same gradient bit for bit, and a different selection at any tie would
show as a different integer.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import asd.jax  # noqa: E402
from asd.benchmarks import jax_models  # noqa: E402

from asd.core.sweep import Trace  # noqa: E402


def _ints(rng, shape, low=-3, high=4) -> jax.Array:
    return jnp.asarray(rng.integers(low, high, shape), jnp.float32)


def tied_cnn():
    """conv(1->4) - relu - 2x2 max pool - conv(4->4) - relu - 2x2 max pool - dense, the first
    conv 0: every first-layer ReLU tied at 0, every first pool's window tied (its dead relus
    among them), every second pool's window tied at the second bias."""
    rng = np.random.default_rng(3)
    params = [jnp.zeros((4, 1, 3, 3), jnp.float32), jnp.zeros(4, jnp.float32),
              _ints(rng, (4, 4, 3, 3)), jnp.ones(4, jnp.float32), _ints(rng, (16, 3)),
              _ints(rng, (3,))]
    x, y = _ints(rng, (4, 1, 14, 14)), _ints(rng, (4, 3))
    return jax_models.cnn_loss(jax, jnp.sum), params, (x, y)


def tied_mlp():
    """A ReLU MLP 6-8-8-3 whose first layer is 0: every first-layer ReLU tied at 0."""
    rng = np.random.default_rng(4)
    sizes = (6, 8, 8, 3)
    params = []
    for i, (m, n) in enumerate(itertools.pairwise(sizes)):
        w, b = _ints(rng, (m, n)), _ints(rng, (n,))
        params += [jnp.zeros_like(w), jnp.zeros_like(b)] if i == 0 else [w, b]
    x, y = _ints(rng, (5, sizes[0])), _ints(rng, (5, sizes[-1]))

    def loss(params, x, y):
        h = x
        for i in range(0, len(params) - 2, 2):
            h = jax.nn.relu(h @ params[i] + params[i + 1])
        d = h @ params[-2] + params[-1] - y
        return jnp.sum(d * d)

    return loss, params, (x, y)


MODELS = {"cnn": tied_cnn, "mlp": tied_mlp}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_under_jit_at_ties_is_the_eager_element(model, seed):
    loss, params, data = MODELS[model]()
    value, got, undecided = jax.jit(asd.jax.value_and_subgrad(loss, seed=seed, report=True))(
        params, *data)
    eager = asd.jax.value_and_subgrad(loss, seed=seed)(params, *data)
    assert int(undecided) == 0
    assert float(value) == float(eager[0])
    for g, e in zip(got, eager[1], strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))
    # the ties matter: JAX's own gradient (relu'(0) = 0, the first maximum) is another
    plain = jax.grad(loss)(params, *data)
    assert any(not np.array_equal(np.asarray(p), np.asarray(g))
               for p, g in zip(plain, got, strict=True))


def test_pools_of_dead_relus_take_no_further_direction(monkeypatch):
    """The tied CNN's first pools hold windows whose tied candidates are all dead relus
    (settled: constant along every direction). No direction can choose among them and any
    choice gives the same element, so the staged sweep runs neither a further direction's
    push nor the push of ones (`Trace.reach`) for them. Under ``jax.disable_jit`` every
    ``lax.cond`` runs only the branch it takes, so the calls show what runs."""
    loss, params, data = tied_cnn()
    calls = []
    lex_tangent, reach = Trace.lex_tangent, Trace.reach

    def counted_lex(self, k, level):
        calls.append(("lex_tangent", k, level))
        return lex_tangent(self, k, level)

    def counted_reach(self, k):
        calls.append(("reach", k))
        return reach(self, k)

    monkeypatch.setattr(Trace, "lex_tangent", counted_lex)
    monkeypatch.setattr(Trace, "reach", counted_reach)
    with jax.disable_jit():
        _, got, undecided = asd.jax.value_and_subgrad(loss, seed=0, report=True)(
            params, *data)
    assert int(undecided) == 0
    assert calls == []
    eager = asd.jax.value_and_subgrad(loss, seed=0)(params, *data)[1]
    for g, e in zip(got, eager, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))
