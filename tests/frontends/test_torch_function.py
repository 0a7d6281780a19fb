"""The drop-in ``asd.torch.function`` behaves as the function it replaces, in torch's terms.

What a training loop sees besides the gradient's numbers: a gradient penalty through it
(``create_graph=True``) is refused instead of silently contributing nothing; a parameter the
forward never uses keeps ``.grad = None`` (so AdamW's weight decay leaves it alone, as in
plain torch); the model's output structure (dicts, lists, nested tuples) comes back as the
model returns it; keyword and nested arguments are accepted. Oracle: plain torch autograd,
on smooth models or off the kinks, where PyTorch's gradient is the gradient.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import asd.torch  # noqa: E402

import asd  # noqa: E402

DOUBLE = torch.float64


def seeded(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DOUBLE)


# ----- a WGAN-GP gradient penalty needs a second derivative: refused, not dropped -----


def critic():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 8), nn.Softplus(),
                         nn.Linear(8, 1)).double()


def wgan_gp_loss(score, penalty_score, real, fake, eps):
    """The critic's WGAN-GP loss: the penalty differentiates the critic's input gradient."""
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    (g,) = torch.autograd.grad(penalty_score(mixed).sum(), mixed, create_graph=True)
    penalty = ((g.norm(dim=1) - 1) ** 2).mean()
    return score(fake).mean() - score(real).mean() + 10.0 * penalty


REAL, FAKE, EPS = seeded(6, 2, seed=1), seeded(6, 2, seed=2), torch.rand(
    6, 1, generator=torch.Generator().manual_seed(3), dtype=DOUBLE)


def test_a_gradient_penalty_through_function_is_refused_not_dropped():
    model = critic()
    fn = asd.torch.function(model, seed=0)
    loss = wgan_gp_loss(fn, fn, REAL, FAKE, EPS)
    with pytest.raises(asd.UnsupportedError, match=r"create_graph=True.*first derivatives "
                                                    r"only.*model itself"):
        loss.backward()


def test_the_first_derivative_under_create_graph_is_still_asds():
    model = critic()
    x = seeded(6, 2, seed=4).requires_grad_(True)
    (g,) = torch.autograd.grad(asd.torch.function(model, seed=0)(x).sum(), x,
                               create_graph=True)
    (want,) = torch.autograd.grad(model(x).sum(), x)
    torch.testing.assert_close(g.detach(), want, rtol=1e-12, atol=1e-12)


def test_the_advice_works_penalty_by_the_model_the_rest_by_asd():
    """The fix the error names: the penalty through the model itself, the rest through
    asd: on this smooth critic the parameter gradient is plain torch's."""
    model, twin = critic(), critic()
    fn = asd.torch.function(model, seed=0)
    wgan_gp_loss(fn, model, REAL, FAKE, EPS).backward()
    wgan_gp_loss(twin, twin, REAL, FAKE, EPS).backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12)


# ----- a parameter the forward never uses keeps .grad None -----


class PartlyUsed(nn.Module):
    """``unused`` is never read, ``frozen`` only behind ``detach``: torch gives neither a
    gradient, so an optimizer (AdamW's weight decay included) leaves both alone."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.used = nn.Linear(3, 2)
        self.unused = nn.Linear(3, 2)
        self.frozen = nn.Parameter(torch.randn(2))

    def forward(self, x):
        return (torch.relu(self.used(x)) * self.frozen.detach()).sum()


def test_adamw_leaves_unused_parameters_where_plain_torch_does():
    model = PartlyUsed().double()
    twin = copy.deepcopy(model)
    fn = asd.torch.function(model, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.5)
    opt_twin = torch.optim.AdamW(twin.parameters(), lr=0.05, weight_decay=0.5)
    x = torch.tensor([0.7, -0.4, 1.3], dtype=DOUBLE)        # off every kink
    for _ in range(5):
        opt.zero_grad()
        opt_twin.zero_grad()
        fn(x).backward()
        twin(x).backward()
        assert model.unused.weight.grad is None and model.frozen.grad is None
        opt.step()
        opt_twin.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12, msg=name)
    assert not torch.equal(model.used.weight, PartlyUsed().double().used.weight)


def test_an_unused_input_gets_no_gradient():
    fn = asd.torch.function(lambda x, y: torch.relu(x).sum(), seed=0)
    x, y = seeded(3).requires_grad_(True), seeded(3, seed=1).requires_grad_(True)
    fn(x, y).backward()
    assert y.grad is None and x.grad is not None


def _stepped(x):
    """The input reaches the output only through a step function: no gradient path in
    torch's graph, constant off the step's jump, discontinuous on it."""
    h = torch.heaviside(x, torch.tensor(0.5, dtype=x.dtype))
    return torch.abs((h * torch.tensor([1.0, 2.0], dtype=x.dtype)).sum() - 0.5)


@pytest.mark.parametrize("native", [True, False])
def test_an_input_seen_only_through_a_step_is_refused_on_the_jump_and_gets_no_gradient(
        native):
    """F60 (torch campaign seed 2982): with no gradient path from any input, the drop-in's
    backward at a flagged jump crashed (a raw RuntimeError from an empty stack) instead of
    refusing, and asd.torch.subgrad off the jump raised torch's raw 'does not require
    grad'. On the jump, refused as asd.subgrad refuses; off it, no gradient (torch's None,
    the zero gradient of a locally constant function)."""
    old, asd.torch.NATIVE_BACKWARD = asd.torch.NATIVE_BACKWARD, native
    try:
        fn = asd.torch.function(_stepped, seed=0)
        x = torch.tensor([0.0, 0.75], dtype=DOUBLE, requires_grad=True)
        with pytest.raises(asd.NotLipschitzError):
            fn(x).backward()
        x = torch.tensor([0.5, 0.75], dtype=DOUBLE, requires_grad=True)
        y = fn(x)
        torch.testing.assert_close(y, _stepped(x.detach()))
        y.backward()
        assert x.grad is None
        g = asd.torch.subgrad(_stepped, x.detach())
        torch.testing.assert_close(g, torch.zeros(2, dtype=DOUBLE))
        with pytest.raises(asd.NotLipschitzError):
            asd.torch.subgrad(_stepped, torch.tensor([0.0, 0.75], dtype=DOUBLE))
    finally:
        asd.torch.NATIVE_BACKWARD = old


# ----- the model's output structure, keyword and nested arguments -----


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.body = nn.Linear(3, 4)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return {"logits": h, "aux": [h.sum(), (h * 2, h.square())]}


def _combine(out):
    return out["logits"].sum() + 3 * out["aux"][0] - out["aux"][1][0].mean() + \
        out["aux"][1][1].sum()


def test_function_returns_the_models_structure():
    model = Heads().double()
    x = seeded(2, 3, seed=5)
    got = asd.torch.function(model, seed=0)(x)
    want = model(x)
    assert isinstance(got, dict) and list(got) == ["logits", "aux"]
    assert isinstance(got["aux"], list) and isinstance(got["aux"][1], tuple)
    for a, b in zip(torch.utils._pytree.tree_leaves(got),
                    torch.utils._pytree.tree_leaves(want), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-12, atol=1e-12)
    _combine(got).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    _combine(model(x)).backward()
    for g, p in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-12, atol=1e-12)


def test_a_single_output_in_a_tuple_stays_a_tuple():
    out = asd.torch.function(lambda x: (torch.relu(x).sum(),), seed=0)(
        seeded(3).requires_grad_(True))
    assert isinstance(out, tuple) and len(out) == 1


def scaled(x, pair, *, weight, shift=0.0, extra=None):
    y = torch.relu(x * weight + shift) * pair[0] + pair[1]
    return (y * extra["gain"]).sum()


def test_keyword_and_nested_arguments():
    x, w = seeded(3).requires_grad_(True), seeded(3, seed=1).requires_grad_(True)
    a, b, gain = (seeded(3, seed=s).requires_grad_(True) for s in (2, 3, 4))
    fn = asd.torch.function(scaled, seed=0)
    leaves = (x, w, a, b, gain)
    fn(x, [a, b], weight=w, shift=0.25, extra={"gain": gain}).backward()
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    scaled(x, [a, b], weight=w, shift=0.25, extra={"gain": gain}).backward()
    for g, t in zip(got, leaves, strict=True):
        torch.testing.assert_close(g, t.grad, rtol=1e-12, atol=1e-12)
    # another keyword order is the same program; another Python value a new one
    before = asd.frontends.torch.IMPORTS["count"]
    fn(x, [a, b], extra={"gain": gain}, shift=0.25, weight=w)
    assert asd.frontends.torch.IMPORTS["count"] == before
    out = fn(x, [a, b], weight=w, shift=-5.0, extra={"gain": gain})
    with torch.no_grad():
        want = scaled(x, [a, b], weight=w, shift=-5.0, extra={"gain": gain})
    assert out.item() == pytest.approx(want.item())
