"""Scaled dot-product attention: PyTorch's fused kernels (flash, memory-efficient, cuDNN on
CUDA; flash on CPU) are each mapped to one composition, softmax(q kᵀ s + mask) v, checked
here against ``torch.nn.functional.scaled_dot_product_attention`` and its autograd (attention
is smooth, so off every kink the gradients must agree)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import asd  # noqa: E402
import asd.frontends.torch.ops as importer  # noqa: E402

RNG = np.random.default_rng(0)
Q, K, V = (RNG.standard_normal((2, 3, 5, 4)) for _ in range(3))
BIAS = RNG.standard_normal((5, 5))
KEEP = RNG.random((5, 5)) > 0.3
KEEP[:, 0] = True  # every row keeps an entry


def reference(mask=None, is_causal=False, scale=None):
    q = torch.tensor(Q, requires_grad=True)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, torch.tensor(K), torch.tensor(V), attn_mask=None if mask is None else
        torch.tensor(mask), is_causal=is_causal, scale=scale)
    (out ** 2).sum().backward()
    return out.detach().numpy(), q.grad.numpy()


CALLS = {
    "scaled_dot_product_attention": lambda q, m, c, s: importer._sdpa(q, K, V, m, 0.0, c,
                                                                      scale=s),
    "_scaled_dot_product_flash_attention": lambda q, m, c, s: importer._sdpa_flash(
        q, K, V, 0.0, c, scale=s)[0],
    "_scaled_dot_product_efficient_attention": lambda q, m, c, s: importer._sdpa_efficient(
        q, K, V, m, True, 0.0, c, scale=s)[0],
    "_scaled_dot_product_cudnn_attention": lambda q, m, c, s: importer._sdpa_cudnn(
        q, K, V, m, True, 0.0, c, scale=s)[0],
    "_scaled_dot_product_flash_attention_for_cpu": lambda q, m, c, s: importer._sdpa_cpu(
        q, K, V, 0.0, c, attn_mask=m, scale=s)[0],
}


SETTINGS = [(None, False, None), (None, True, 0.3), (BIAS, False, None), (KEEP, False, None)]
CASES = [(name, *setting) for name in CALLS for setting in SETTINGS
         if name != "_scaled_dot_product_flash_attention" or setting[0] is None]  # no mask


@pytest.mark.parametrize("name,mask,causal,scale", CASES)
def test_fused_attention_equals_pytorchs(name, mask, causal, scale):
    assert name in importer.ATEN
    want, want_grad = reference(mask, causal, scale)

    def loss(q):
        return np.sum(CALLS[name](q, mask, causal, scale) ** 2)

    np.testing.assert_allclose(np.asarray(CALLS[name](Q, mask, causal, scale)), want,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(asd.subgrad(loss, seed=0)(Q), want_grad, rtol=1e-10,
                               atol=1e-12)


def test_attention_with_dropout_is_refused():
    with pytest.raises(asd.UnsupportedError, match="dropout"):
        importer._sdpa_efficient(Q, K, V, None, False, 0.1, False)
