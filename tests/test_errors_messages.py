"""Messages of the refusals users meet most (issue 23): each names the node or function, the
values and a fix, and the fix is tested to work where the message gives one."""

from __future__ import annotations

import numpy as np
import pytest

import asd


def raises(exc, f, x, *fragments, **kwargs):
    with pytest.raises(exc) as info:
        asd.subgrad(f, seed=0, **kwargs)(x)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert isinstance(info.value, asd.ASDError)
    return info.value


X = np.array([0.5, 1.5])


# ----- another framework's functions on asd's traced numpy values -----

def test_jax_numpy_inside_subgrad_names_asd_jax():
    jnp = pytest.importorskip("jax.numpy")
    for f in (lambda x: jnp.sum(jnp.sin(x)), lambda x: jnp.asarray(x).sum()):
        raises(asd.UnsupportedError, f, X, "JAX", "asd.jax.subgrad(f)(x)", "test_errors")
    # the fix works: the same program through asd.jax
    g = asd.jax.subgrad(lambda x: jnp.sum(jnp.abs(x)))(jnp.array([1.0, -2.0]))
    assert np.asarray(g).tolist() == [1.0, -1.0]


def test_torch_inside_subgrad_names_asd_torch():
    torch = pytest.importorskip("torch")
    raises(asd.ArgumentTypeError, lambda x: torch.sin(x).sum(), X, "torch.sin",
           "asd.torch.subgrad(f, x)")
    raises(asd.ArgumentTypeError, lambda x: np.sum(x + torch.ones(2)), X, "PyTorch",
           "asd.torch.subgrad")
    raises(asd.ArgumentTypeError, lambda x: torch.as_tensor(x).sum(), X,
           "asd.torch.subgrad")
    g = asd.torch.subgrad(lambda x: torch.abs(x).sum(), torch.tensor([1.0, -2.0]))
    assert g.tolist() == [1.0, -1.0]


def test_tensorflow_inside_subgrad_names_asd_tf():
    tf = pytest.importorskip("tensorflow")
    raises(asd.ArgumentTypeError, lambda x: tf.reduce_sum(tf.sin(x)), X, "TensorFlow",
           "asd.tf.subgrad(f, x)")


# ----- refusals say the reason and the fix, not "register a rule" -----

def test_fft_says_complex_values_not_register_a_rule():
    e = raises(asd.UnsupportedError, lambda x: np.sum(np.fft.fft(x).real), X,
               "numpy.fft.fft", "complex values", "real programs")
    assert "register" not in str(e).lower()
    for f in (lambda x: np.nonzero(x)[0] * x, lambda x: np.unique(x) * x,
              lambda x: np.searchsorted(x, 0.7) * x):
        with pytest.raises(asd.UnsupportedError, match="nothing to differentiate"):
            asd.subgrad(lambda x, f=f: np.sum(f(x)))(X)


def test_out_buffer_says_drop_out_and_a_traced_out_works():
    e = raises(asd.UnsupportedError, lambda x: np.sum(np.add(x, x, out=np.empty(2))), X,
               "numpy.add", "out=", "Drop out=")
    assert "rule" not in str(e)

    def f(x):
        y = x * 1.0
        np.multiply(x, x, out=y)  # numpy writes into y: so does asd
        return np.sum(y)

    np.testing.assert_array_equal(asd.subgrad(f)(X), 2 * X)
    raises(asd.ArgumentTypeError, lambda x: np.sum(np.add(x, x, out=x)), X, "argument",
           "x.copy()")


# ----- non-finite values and derivatives name their node and the fix that fits -----

def test_an_overflowed_slope_names_its_node():
    with pytest.raises(asd.NonFiniteError, match=r"derivative at %1 = real_pow %0 p=0\.01"):
        asd.subgrad(lambda x: x ** 0.01)(5e-324)


def test_a_pole_gets_the_divisor_advice_not_logs():
    with pytest.raises(asd.NonFiniteError, match="divisor is 0") as info:
        asd.subgrad(lambda x: np.sum(1.0 / x))(np.array([0.0, 1.0]))
    assert "log" not in str(info.value)
    with pytest.raises(asd.NonFiniteError, match="input of log in its domain"):
        asd.subgrad(lambda x: np.sum(np.log(x)))(np.array([0.0, 1.0]))
    # what the advice allows: the pole on a branch where does not select near the point
    safe = asd.subgrad(lambda x: np.sum(np.where(x > 0.5, 1.0 / x, x)))(np.array([0.0, 2.0]))
    np.testing.assert_array_equal(safe, [1.0, -0.25])


def test_a_nan_cotangent_is_blamed_on_the_cotangent():
    _, pullback = asd.vjp(lambda x: 2.0 * x)(np.ones(2))
    with pytest.raises(asd.NonFiniteError, match="cotangent holds NaN"):
        pullback(np.array([np.nan, 1.0]))
