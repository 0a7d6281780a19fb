"""``torch.linalg.norm`` through asd's PyTorch importer: PyTorch's own value and gradient for
every ``ord``, ``dim`` and ``keepdim`` it accepts (fuzz finding F46: with a 2-D input and
``ord`` given, asd returned the vector norm of the flattened matrix). The points are away
from every kink (distinct singular values, no zero or tied entries), so autograd's gradient
is the derivative; kinks are the numpy norm's tests' business."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import asd  # noqa: E402

A = [[1.0, -2.0, 0.5], [3.0, 4.5, -1.25]]
ORDS = [None, 1, -1, 2, -2, float("inf"), float("-inf"), "fro", "nuc", 3]
DIMS = [None, (0, 1), (1, 0), (-1, -2), 1, (0,)]


def _cases():
    x = torch.tensor(A, dtype=torch.float64)
    for ord_ in ORDS:
        for dim in DIMS:
            try:
                torch.linalg.norm(x, ord_, dim=dim)
            except RuntimeError:  # a combination PyTorch itself refuses
                continue
            yield ord_, dim


@pytest.mark.parametrize("ord_, dim", list(_cases()))
@pytest.mark.parametrize("keepdim", [False, True])
def test_linalg_norm_is_pytorchs(ord_, dim, keepdim):
    def f(x):
        return torch.linalg.norm(x, ord_, dim=dim, keepdim=keepdim)

    x = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    want = f(x)
    (want_grad,) = torch.autograd.grad(want.sum(), x)
    y = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    got = asd.torch.function(f)(y)
    (got_grad,) = torch.autograd.grad(got.sum(), y)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(got_grad.numpy(), want_grad.numpy(), rtol=1e-12, atol=1e-15)


def test_an_ord_without_dim_on_a_3d_input_is_refused_as_pytorch_does():
    x = torch.ones((2, 2, 2), dtype=torch.float64)
    with pytest.raises(RuntimeError):
        torch.linalg.norm(x, 1)
    with pytest.raises((asd.ASDError, RuntimeError)):
        asd.torch.function(lambda t: torch.linalg.norm(t, 1))(x)
