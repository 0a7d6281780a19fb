"""Positions computed from a differentiated input (``argsort``, ``argmax``) through the
PyTorch importer: ``torch.gather``, ``torch.take_along_dim`` and ``F.embedding`` with them
are decided by asd (PyTorch's own gradient away from ties; a refusal where a tie makes the
permutation jump), and operations that would read them as constants refuse. Before, the
importer read their numbers, so at a tie ``take_along_dim(a, argsort(t))`` returned one
permutation's gradient silently (torch fuzz campaign: a wrong gradient).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import asd  # noqa: E402

A = torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64)
W = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float64)
SPELLINGS = {
    "take_along_dim": lambda t: torch.take_along_dim(t * 2 + A, torch.argsort(t, stable=True),
                                                     dim=0),
    "take_along_dim, no dim": lambda t: torch.take_along_dim(
        t * 2 + A, torch.argsort(t, stable=True)),
    "gather": lambda t: torch.gather(t * 2 + A, 0, torch.argsort(t, dim=0, stable=True)),
    "embedding": lambda t: torch.nn.functional.embedding(
        torch.argsort(t, stable=True), torch.stack([t, 2 * t], dim=1) + A[:, None]).sum(dim=1),
}


def _run(f, point):
    t = torch.tensor(point, dtype=torch.float64, requires_grad=True)
    out = asd.torch.function(lambda t: (f(t) * W).sum())(t)
    out.backward()
    return out.item(), t.grad.numpy()


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("point", [[0.0, 1.0, 2.0], [2.0, 1.0, 0.0], [1.0, 3.0, 2.0]])
def test_positions_away_from_ties_give_pytorchs_gradient(spelling, point):
    f = SPELLINGS[spelling]
    value, grad = _run(f, point)
    t = torch.tensor(point, dtype=torch.float64, requires_grad=True)
    want = (f(t) * W).sum()
    want.backward()
    assert value == want.item()
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-15)


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_positions_at_a_tie_that_permutes_are_refused(spelling):
    """At t = 0 every order of t is a limit: the permuted output jumps (its entries differ),
    so no gradient is right."""
    with pytest.raises(asd.NotLipschitzError):
        _run(SPELLINGS[spelling], [0.0, 0.0, 0.0])


def test_permuting_equal_rows_at_a_tie_is_a_kink_and_is_answered():
    """Rows equal at the point (``embedding(argsort(t), stack([t, 2t]) + 1)`` at t = 0): the
    permuted output is continuous there, a kink; the answer is the gradient of the order the
    direction enters: 3 times the weights in the order of the direction's entries."""
    f = lambda t: torch.nn.functional.embedding(  # noqa: E731
        torch.argsort(t, stable=True), torch.stack([t, 2 * t], dim=1) + 1.0).sum(dim=1)
    for d in ([1.0, 3.0, 2.0], [3.0, 2.0, 1.0]):
        g = asd.torch.subgrad(lambda t: (f(t) * W).sum(), torch.zeros(3, dtype=torch.float64),
                              direction=torch.tensor(d, dtype=torch.float64))
        rank = np.argsort(np.argsort(d))
        np.testing.assert_array_equal(g.numpy(), 3 * W.numpy()[rank])


def test_a_loss_target_computed_from_the_input_at_a_tie():
    """``cross_entropy(z, argmax(z))`` where z ties (a kink: both targets give the same
    loss there). A number must be the gradient of the
    loss's with one of the tied targets (autograd's, a smooth function near the ray), or
    the call refuses rather than read the target's numbers as constants (today's answer:
    asd's indexing with positions paired with row numbers is refused)."""
    def f(z):
        return torch.nn.functional.cross_entropy(z, torch.argmax(z, dim=1))

    z0 = torch.tensor([[2.0, 2.0, 0.5]], dtype=torch.float64)
    branches = []
    for target in (0, 1):
        z = z0.clone().requires_grad_(True)
        torch.nn.functional.cross_entropy(z, torch.tensor([target])).backward()
        branches.append(z.grad.numpy())
    def drop_in():
        z = z0.clone().requires_grad_(True)
        asd.torch.function(f)(z).backward()
        return z.grad

    for spelling in (lambda: asd.torch.subgrad(f, z0), drop_in):
        try:
            g = spelling()
        except asd.NotLipschitzError as e:  # the target's numbers are not read
            assert "target" in str(e)
            continue
        assert any(np.allclose(g.numpy(), b, rtol=1e-14, atol=0) for b in branches)
