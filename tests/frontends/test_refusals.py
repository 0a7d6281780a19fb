"""The front ends refuse clearly and early, skip integers, and keep the model's dtype.

- Training-mode batch norm and dropout are refused when the program is imported, before the
  forward runs: the running statistics are unchanged after the refused call.
- Python control flow on traced values, a function returning None and export failures arrive
  as `asd.ASDError`s naming the source line and the fix, never as the framework's raw error.
- Integer arguments (labels) are never differentiated: ``jax.grad(asd.jax.function(loss))``
  and ``asd.torch.function`` work with integer labels and give the framework's gradient where
  the loss is smooth, and the exact one on a kink; asking to differentiate them is an error.
- ``asd audit`` runs a model in its own dtype (float32, bfloat16, float64).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy
nn = torch.nn

import asd.jax  # noqa: E402
import asd.torch  # noqa: E402

import asd  # noqa: E402
from asd.cli import audit  # noqa: E402

DOUBLE = torch.float64


# ----- training mode: refused before anything runs -----


def bn_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1)).double()


@pytest.mark.parametrize("call", ["function", "subgrad"])
def test_training_batch_norm_is_refused_before_running_statistics_change(call):
    m = bn_model()
    bn = m[1]
    stats = [bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()]
    x = torch.randn(5, 3, dtype=DOUBLE)
    with pytest.raises(asd.UnsupportedError, match=r"eval\(\)"):
        if call == "function":
            asd.torch.function(m)(x).sum().backward()
        else:
            asd.torch.subgrad(lambda x: m(x).sum(), x)
    for before, after in zip(stats, [bn.running_mean, bn.running_var, bn.num_batches_tracked],
                             strict=True):
        assert torch.equal(before, after)
    m.eval()
    y = asd.torch.function(m)(x).sum()
    y.backward()
    assert m[0].weight.grad is not None and torch.equal(bn.num_batches_tracked, stats[2])


def test_training_dropout_is_refused_naming_the_module():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).double()
    with pytest.raises(asd.UnsupportedError, match=r"dropout in training mode.*Dropout.*eval"):
        asd.torch.function(m)(torch.ones(2, 3, dtype=DOUBLE))
    m.eval()
    g = asd.torch.subgrad(lambda x: m(x).sum(), torch.ones(2, 3, dtype=DOUBLE))
    torch.testing.assert_close(g, m[0].weight.sum(0).expand(2, 3))


# ----- importer errors are asd errors -----


def branchy_torch(x):
    if x.sum() > 0:
        return x.sum()
    return -x.sum()


def branchy_jax(x):
    if x.sum() > 0:
        return x.sum()
    return -x.sum()


def test_python_branch_on_a_tensor_is_a_tracer_bool_error_with_the_line_and_the_fix():
    with pytest.raises(asd.TracerBoolError, match=r"test_refusals.py:\d+: `if x.sum\(\) > 0:`"
                       r".*torch\.where"):
        asd.torch.subgrad(branchy_torch, torch.ones(2))
    with pytest.raises(asd.TracerBoolError, match=r"test_refusals.py:\d+: `if x.sum\(\) > 0:`"
                       r".*jnp\.where"):
        asd.jax.subgrad(branchy_jax)(jnp.ones(2))
    with pytest.raises(asd.TracerBoolError, match=r"jnp\.where"):
        jax.grad(asd.jax.function(branchy_jax))(jnp.ones(2))


def no_return(x):
    x.sum()


@pytest.mark.parametrize("front", ["torch", "jax"])
def test_a_function_returning_none_is_an_output_error(front):
    with pytest.raises(asd.OutputError, match=r"returned None.*missing `return`"):
        if front == "torch":
            asd.torch.subgrad(no_return, torch.ones(2))
        else:
            asd.jax.subgrad(no_return)(jnp.ones(2))


def test_an_export_failure_names_the_cause_and_the_fix():
    def via_numpy(x):
        return torch.from_numpy(x.numpy()).sum()

    with pytest.raises(asd.ASDError, match=r"torch\.export.*numpy.*test_refusals.py:\d+.*"
                       r"no \.item\(\)/\.tolist\(\)/\.numpy\(\)"):
        asd.torch.subgrad(via_numpy, torch.ones(2))


@pytest.mark.parametrize("f, what", [
    (lambda x: jnp.asarray(np.asarray(x)).sum(), "TracerArrayConversionError"),
    (lambda x: x[x > 0].sum(), "NonConcreteBooleanIndexError"),
], ids=["numpy", "mask"])
def test_a_jax_tracing_failure_names_the_cause_and_the_fix(f, what):
    with pytest.raises(asd.UnsupportedError, match=rf"JAX could not trace.*{what}.*"
                       r"test_refusals.py:\d+.*jnp\.where keeps the shape"):
        asd.jax.subgrad(f)(jnp.ones(2))


# ----- integer arguments -----


def jax_loss(w, x, labels):
    z = jax.nn.relu(x @ w)
    return -jnp.mean(jax.nn.log_softmax(z)[jnp.arange(labels.shape[0]), labels])


def test_jax_grad_of_function_with_integer_labels_matches_jax_off_kinks():
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((2, 4)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((5, 2)), jnp.float32)
    labels = jnp.array([0, 3, 1, 2, 3])
    f = asd.jax.function(jax_loss)
    want = jax.grad(jax_loss)(w, x, labels)
    np.testing.assert_allclose(jax.grad(f)(w, x, labels), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(w, x, labels), want, rtol=2e-5, atol=2e-6)
    _, gl = jax.grad(f, argnums=(0, 2), allow_int=True)(w, x, labels)
    assert gl.dtype == jax.dtypes.float0 and gl.shape == labels.shape


def identity_loss(w, x, labels):
    z = jax.nn.relu(x @ w) - jax.nn.relu(-(x @ w))           # = x @ w, written with relus
    return -jnp.mean(jax.nn.log_softmax(z)[jnp.arange(labels.shape[0]), labels])


def test_jax_grad_of_function_with_integer_labels_at_a_kink():
    """At w = 0 every relu is tied; the function is the smooth loss of x @ w, so its only
    limiting gradient is that loss's gradient, where JAX's relu'(0) = 0 gives zero."""
    w, x, labels = jnp.zeros((2, 3)), jnp.array([[1.0, 2.0], [-1.0, 0.5]]), jnp.array([2, 0])
    got = jax.grad(asd.jax.function(identity_loss, seed=4))(w, x, labels)
    want = jax.grad(lambda w: -jnp.mean(jax.nn.log_softmax(x @ w)[jnp.arange(2), labels]))(w)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.abs(np.asarray(want)).max() > 0.1
    np.testing.assert_array_equal(jax.grad(identity_loss)(w, x, labels), np.zeros((2, 3)))


def test_torch_function_with_integer_labels_gives_pytorchs_gradient_off_kinks():
    torch.manual_seed(0)
    lin = nn.Linear(3, 4).double()
    x, labels = torch.randn(6, 3, dtype=DOUBLE), torch.tensor([0, 3, 1, 1, 2, 0])
    loss = lambda x, y: nn.functional.cross_entropy(torch.relu(lin(x)), y)  # noqa: E731
    asd.torch.function(loss, seed=0)(x, labels).backward()
    ours = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    loss(x, labels).backward()
    for a, p in zip(ours, lin.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, rtol=1e-12, atol=1e-12)


def test_differentiating_an_integer_argument_is_an_argument_error():
    with pytest.raises(asd.ArgumentError, match=r"argument 1.*int64.*leave it out"):
        asd.torch.subgrad(lambda x, y: x.sum() * y.sum(), torch.ones(2), torch.ones(2).long(),
                          argnums=(0, 1))
    with pytest.raises(asd.ArgumentError, match=r"argument 1.*int32.*leave it out"):
        asd.jax.subgrad(lambda x, y: x.sum() * y.sum(), argnums=(0, 1))(
            jnp.ones(2), jnp.ones(2, jnp.int32))


# ----- asd audit in the model's dtype -----


def tied_mlp(dtype):
    """Units (a.x, -a.x) with output weights (c, -c): c relu(a.x) - c relu(-a.x) = c a.x, so
    the function is linear, but every relu is tied at 0."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 3, generator=g, dtype=DOUBLE)
    c = torch.randn(1, 3, generator=g, dtype=DOUBLE)
    mlp = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1)).double()
    with torch.no_grad():
        mlp[0].weight.copy_(torch.cat([a, -a]))
        mlp[0].bias.zero_()
        mlp[2].weight.copy_(torch.cat([c, -c], 1))
    return mlp.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64],
                         ids=str)
def test_audit_runs_a_model_in_its_own_dtype(dtype):
    mlp = tied_mlp(dtype)
    f = lambda x: mlp(x).sum()  # noqa: E731
    report = audit.audit(f, np.zeros(3), framework="torch", samples=16)
    # the function is linear near 0 (relu(a.x) - relu(-a.x) = a.x per pair): the Clarke set
    # is the one gradient, which the model's exactly rounded weights give in float64
    w = [p.detach().to(DOUBLE) for p in mlp.parameters()]
    want = w[2][0, :3] @ w[0][:3]
    np.testing.assert_allclose(report["asd"], want.numpy(), rtol=1e-6, atol=1e-6)
    # proven outside: the enclosure separates torch's zero gradient with a positive margin
    assert report["verdict"].startswith("outside") and report["margin"] > 0
    np.testing.assert_array_equal(report["framework_gradient"], np.zeros(3))
    away = audit.audit(f, np.array([0.31, -0.2, 0.45]), framework="torch", samples=8)
    assert away["verdict"] == "inside"
