"""Imported programs are never stale: the cache key holds what the trace depends on.

Each test changes one thing a trace bakes in (a closure value, a Python flag kept as a global
or in a closure, an object attribute, ``module.training``) between two calls of the *same*
function object, and checks that ``subgrad``, ``value_and_subgrad`` and ``function`` answer
for the function as it is now. The oracles are exact: the functions are linear or
``c * (relu(x) - relu(-x))`` (gradient ``c`` everywhere, kink included). The cache must still
hit when nothing changed (counted by the importers' ``IMPORTS``, not timed), also after an
optimizer step, whose new parameter values are inputs of the program, not part of it.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy

import asd.jax  # noqa: E402
import asd.torch  # noqa: E402

DOUBLE = torch.float64
FLAG = False


def here():
    return sys.modules[__name__]


def imports(frontend) -> int:
    return frontend.IMPORTS["count"]


# ----- PyTorch -----


def torch_closure():
    c = 2.0

    def f(x):
        return (c * (torch.relu(x) - torch.relu(-x))).sum()

    def set_c(value):
        nonlocal c
        c = value

    return f, set_c


def torch_global_flag(x):
    return (3 * x).sum() if FLAG else x.sum()


def test_torch_subgrad_follows_a_mutated_closure_value():
    f, set_c = torch_closure()
    x = torch.zeros(3, dtype=DOUBLE)
    assert torch.equal(asd.torch.subgrad(f, x, seed=0), torch.full((3,), 2.0, dtype=DOUBLE))
    set_c(-5.0)
    assert torch.equal(asd.torch.subgrad(f, x, seed=0), torch.full((3,), -5.0, dtype=DOUBLE))
    value, g = asd.torch.value_and_subgrad(f, torch.ones(3, dtype=DOUBLE), seed=0)
    assert value.item() == -15.0 and torch.equal(g, torch.full((3,), -5.0, dtype=DOUBLE))


def test_torch_subgrad_follows_a_global_flag(monkeypatch):
    x = torch.ones(2, dtype=DOUBLE)
    assert torch.equal(asd.torch.subgrad(torch_global_flag, x), torch.ones(2, dtype=DOUBLE))
    monkeypatch.setattr(here(), "FLAG", True)
    value, g = asd.torch.value_and_subgrad(torch_global_flag, x)
    assert value.item() == 6.0 and torch.equal(g, torch.full((2,), 3.0, dtype=DOUBLE))


def test_torch_subgrad_follows_a_closure_flag_and_an_object_attribute():
    class Config:
        scale = 1.0

    cfg, flags = Config(), {"double": False}
    f = lambda x: (cfg.scale * x * (2 if flags["double"] else 1)).sum()  # noqa: E731
    x = torch.ones(2, dtype=DOUBLE)
    assert asd.torch.subgrad(f, x).tolist() == [1.0, 1.0]
    flags["double"] = True
    assert asd.torch.subgrad(f, x).tolist() == [2.0, 2.0]
    cfg.scale = 4.0
    assert asd.torch.subgrad(f, x).tolist() == [8.0, 8.0]


class TrainScaled(torch.nn.Module):
    """Python logic on ``self.training``: 3x in training mode, x in eval mode."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1, bias=False).double()
        with torch.no_grad():
            self.lin.weight.copy_(torch.tensor([[1.0, -2.0]]))

    def forward(self, x):
        y = self.lin(x).sum()
        return 3 * y if self.training else y


def test_torch_module_switched_between_train_and_eval():
    m = TrainScaled()
    x = torch.ones(2, dtype=DOUBLE)
    assert asd.torch.subgrad(m, x).tolist() == [3.0, -6.0]
    m.eval()
    assert asd.torch.subgrad(m, x).tolist() == [1.0, -2.0]
    value, g = asd.torch.value_and_subgrad(m, x, argnums="params")
    assert value.item() == -1.0 and g["lin.weight"].tolist() == [[1.0, 1.0]]
    m.train()
    step = asd.torch.function(m)
    step(x).backward()
    assert m.lin.weight.grad.tolist() == [[3.0, 3.0]]


def test_torch_function_follows_changes_between_calls():
    f, set_c = torch_closure()
    g = asd.torch.function(f)
    x = torch.zeros(3, dtype=DOUBLE, requires_grad=True)
    g(x).backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    set_c(7.0)
    x.grad = None
    y = g(x)
    assert y.item() == 0.0
    y.backward()
    assert x.grad.tolist() == [7.0, 7.0, 7.0]


def test_torch_function_backward_uses_the_program_of_its_forward():
    """A change between the forward and the backward does not reach the backward: it
    differentiates the program imported for the forward that ran."""
    f, set_c = torch_closure()
    g = asd.torch.function(f)
    x = torch.ones(3, dtype=DOUBLE, requires_grad=True)
    y = g(x)
    set_c(100.0)
    y.backward()
    assert y.item() == 6.0 and x.grad.tolist() == [2.0, 2.0, 2.0]


def test_torch_cache_hits_when_nothing_changed_even_after_an_optimizer_step():
    mlp = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                              torch.nn.Linear(4, 1)).double()
    opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
    step = asd.torch.function(mlp)
    loss = lambda x: mlp(x).sum()  # noqa: E731
    x = torch.tensor([[0.3, -0.2, 0.5]], dtype=DOUBLE)
    step(x).sum().backward()
    before = imports(asd.torch)
    for _ in range(3):
        opt.step()
        opt.zero_grad()
        step(x).sum().backward()
        asd.torch.subgrad(loss, x, argnums="params")
    assert imports(asd.torch) == before + 1     # loss is a second program, imported once
    ours = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad()
    mlp(x).sum().backward()                      # the current weights, read afresh
    for a, p in zip(ours, mlp.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad)


def test_torch_a_new_parameter_object_invalidates():
    m = TrainScaled().eval()
    x = torch.ones(2, dtype=DOUBLE)
    asd.torch.subgrad(m, x, argnums="params")
    m.lin = torch.nn.Linear(2, 3, bias=False).double()   # a new shape, same attribute
    g = asd.torch.subgrad(m, x, argnums="params")
    assert g["lin.weight"].shape == (3, 2)


# ----- JAX -----


def jax_closure():
    c = 2.0

    def f(x):
        return (c * (jax.nn.relu(x) - jax.nn.relu(-x))).sum()

    def set_c(value):
        nonlocal c
        c = value

    return f, set_c


def jax_global_flag(x):
    return (3 * x).sum() if FLAG else x.sum()


def test_jax_subgrad_follows_a_mutated_closure_value():
    f, set_c = jax_closure()
    x = jnp.zeros(3)
    np.testing.assert_array_equal(asd.jax.subgrad(f, seed=0)(x), np.full(3, 2.0))
    set_c(-5.0)
    np.testing.assert_array_equal(asd.jax.subgrad(f, seed=0)(x), np.full(3, -5.0))
    value, g = asd.jax.value_and_subgrad(f, seed=0)(jnp.ones(3))
    assert float(value) == -15.0
    np.testing.assert_array_equal(g, np.full(3, -5.0))


def test_jax_subgrad_follows_a_global_flag_and_captured_arrays(monkeypatch):
    x = jnp.ones(2)
    np.testing.assert_array_equal(asd.jax.subgrad(jax_global_flag)(x), [1.0, 1.0])
    monkeypatch.setattr(here(), "FLAG", True)
    value, g = asd.jax.value_and_subgrad(jax_global_flag)(x)
    assert float(value) == 6.0
    np.testing.assert_array_equal(g, [3.0, 3.0])
    w = {"w": jnp.array([1.0, 2.0])}
    f = lambda x: (w["w"] * x).sum()  # noqa: E731
    np.testing.assert_array_equal(asd.jax.subgrad(f)(x), [1.0, 2.0])
    w["w"] = jnp.array([-1.0, 5.0])        # a captured array is baked into the jaxpr
    np.testing.assert_array_equal(asd.jax.subgrad(f)(x), [-1.0, 5.0])


class Model:
    """A flax-like object: weights and a ``train`` flag as plain attributes."""

    def __init__(self):
        self.w = jnp.array([1.0, -2.0])
        self.train = True

    def __call__(self, x):
        y = (self.w * x).sum()
        return 3 * y if self.train else y


def test_jax_object_switched_between_train_and_eval():
    m = Model()
    x = jnp.ones(2)
    np.testing.assert_array_equal(asd.jax.subgrad(m)(x), [3.0, -6.0])
    m.train = False
    np.testing.assert_array_equal(asd.jax.subgrad(m)(x), [1.0, -2.0])
    g = jax.grad(asd.jax.function(m))(x)
    np.testing.assert_array_equal(g, [1.0, -2.0])


def test_jax_function_follows_changes_between_calls():
    f, set_c = jax_closure()
    g = asd.jax.function(f)
    np.testing.assert_array_equal(jax.grad(g)(jnp.zeros(3)), np.full(3, 2.0))
    set_c(7.0)
    np.testing.assert_array_equal(jax.grad(g)(jnp.zeros(3)), np.full(3, 7.0))
    np.testing.assert_array_equal(jax.jit(jax.grad(g))(jnp.ones(3)), np.full(3, 7.0))


def test_jax_function_backward_uses_the_program_of_its_forward():
    f, set_c = jax_closure()
    y, vjp = jax.vjp(asd.jax.function(f), jnp.ones(3))
    set_c(100.0)
    (g,) = vjp(jnp.ones(()))
    assert float(y) == 6.0
    np.testing.assert_array_equal(g, np.full(3, 2.0))


def test_jax_cache_hits_when_nothing_changed():
    f, _ = jax_closure()
    g = asd.jax.function(f)
    x = jnp.array([0.5, -1.0, 0.0])
    asd.jax.subgrad(f, seed=0)(x)
    jax.grad(g)(x)
    before = imports(asd.jax)
    for _ in range(3):
        np.testing.assert_array_equal(asd.jax.subgrad(f, seed=0)(x), np.full(3, 2.0))
        np.testing.assert_array_equal(jax.grad(g)(x), np.full(3, 2.0))
    assert imports(asd.jax) == before


def test_fingerprints_see_through_containers_methods_and_helpers():
    from asd.frontends import reach

    state = {"k": [1, (2.0, "a")]}

    def helper(x):
        return state["k"][1][0] * x

    f = lambda x: helper(x)  # noqa: E731
    key = lambda: reach.fingerprint(f, lambda v: None)[0]  # noqa: E731
    first = key()
    assert key() == first
    state["k"][1] = (2.5, "a")
    assert key() != first
    paths = {p for p, _ in reach.walk(f)}
    assert ("helper", "state", "k", "1", "0") in paths    # a helper's closure, under its name


# ----- the whole matrix: every kind of change, every entry point, both front ends -----


class Switch:
    """One change a trace bakes in, for one framework: ``fn`` has gradient ``before`` (a
    scalar times ones) until ``flip()``, then ``after``."""

    def __init__(self, kind: str, framework: str):
        self.kind, self.framework = kind, framework
        relu = torch.relu if framework == "torch" else jax.nn.relu
        ident = lambda x: relu(x) - relu(-x)  # noqa: E731   (the identity, with kinks at 0)
        state = {"c": 2.0, "flag": False}
        if kind == "closure value":
            self.fn = lambda x: (state["c"] * ident(x)).sum()
            self.flip = lambda: state.update(c=-3.0)
            self.before, self.after = 2.0, -3.0
        elif kind == "closure flag":
            self.fn = lambda x: (ident(x) * (5 if state["flag"] else 1)).sum()
            self.flip = lambda: state.update(flag=True)
            self.before, self.after = 1.0, 5.0
        elif kind == "global flag":
            self.fn = torch_global_flag if framework == "torch" else jax_global_flag
            self.flip = lambda: setattr(here(), "FLAG", True)
            self.before, self.after = 1.0, 3.0
        else:                                         # train / eval
            if framework == "torch":
                m = torch.nn.Module()
                m.forward = lambda x: (ident(x) * (4 if m.training else 1)).sum()
                self.fn, self.flip = m, m.eval
            else:
                m = Model()
                m.w = jnp.ones(2)
                self.fn, self.flip = m, lambda: setattr(m, "train", False)
            self.before, self.after = 4.0 if framework == "torch" else 3.0, 1.0

    def grad(self, api: str):
        x0 = np.zeros(2)
        if self.framework == "torch":
            x = torch.tensor(x0, dtype=DOUBLE)
            if api == "subgrad":
                return asd.torch.subgrad(self.fn, x, seed=0).numpy()
            if api == "value_and_subgrad":
                return asd.torch.value_and_subgrad(self.fn, x, seed=0)[1].numpy()
            x.requires_grad_(True)
            self.g = getattr(self, "g", None) or asd.torch.function(self.fn, seed=0)
            self.g(x).backward()
            return x.grad.numpy()
        x = jnp.asarray(x0, jnp.float32)
        if api == "subgrad":
            return np.asarray(asd.jax.subgrad(self.fn, seed=0)(x))
        if api == "value_and_subgrad":
            return np.asarray(asd.jax.value_and_subgrad(self.fn, seed=0)(x)[1])
        self.g = getattr(self, "g", None) or asd.jax.function(self.fn, seed=0)
        return np.asarray(jax.grad(self.g)(x))


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("kind", ["closure value", "closure flag", "global flag",
                                  "train/eval"])
@pytest.mark.parametrize("api", ["subgrad", "value_and_subgrad", "function"])
def test_every_change_reaches_every_entry_point(framework, kind, api, monkeypatch):
    monkeypatch.setattr(here(), "FLAG", False)
    s = Switch(kind, framework)
    np.testing.assert_array_equal(s.grad(api), np.full(2, s.before))
    count = imports(asd.torch if framework == "torch" else asd.jax)
    np.testing.assert_array_equal(s.grad(api), np.full(2, s.before))     # a cache hit
    assert imports(asd.torch if framework == "torch" else asd.jax) == count
    s.flip()
    np.testing.assert_array_equal(s.grad(api), np.full(2, s.after))
