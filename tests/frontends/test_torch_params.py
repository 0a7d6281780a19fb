"""Every parameter a function reaches gets its gradient from ``asd.torch.function``.

Parameters kept in a module attribute, a plain object's attribute, a dict, a list, a tuple,
a closure, or nested in those, as ``nn.Parameter`` or as plain tensors that require grad:
away from kinks each gradient must equal PyTorch's own; on the kink of
``relu(w * x) - relu(-w * x)`` (= ``w * x``) at ``w = 0`` it must be the exact ``x``, where
PyTorch says 0. A tensor asd cannot reach raises instead of silently getting no gradient.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import asd.torch  # noqa: E402

import asd  # noqa: E402

DOUBLE = torch.float64
RNG = np.random.default_rng(0)


def tensor(shape, grad=True, parameter=False):
    t = torch.tensor(RNG.standard_normal(shape), dtype=DOUBLE)
    return nn.Parameter(t) if parameter else t.requires_grad_(grad)


def kink(w, x):
    """``w * x`` written with relus: PyTorch's gradient at ``w * x = 0`` is 0, the true one x."""
    return (torch.relu(w * x) - torch.relu(-w * x)).sum()


class Holder:
    """A plain object (no nn.Module) holding parameters."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def layouts():
    """(name, function, the tensors it uses) for each way of keeping parameters."""
    lin = nn.Linear(3, 2).double()
    w_dict = {"w": tensor(3), "b": tensor(2, parameter=True)}
    w_list = [tensor(3), tensor(3, parameter=True)]
    w_tuple = (tensor(3), nn.Linear(3, 1).double())
    holder = Holder(net=nn.Linear(3, 1).double(), scale=tensor(1))
    nested = {"layers": [Holder(w=tensor(3)), {"v": (tensor(3, parameter=True),)}]}
    closed = tensor(3)

    class WithPlainList(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1).double()
            self.extra = [tensor(3, parameter=True)]          # not a ParameterList

        def forward(self, x):
            return (self.lin(x).sum() + torch.relu(self.extra[0] * x).sum())

    module = WithPlainList()

    class TiedAutoencoder(nn.Module):
        """The decoder is the encoder's weight, transposed: one parameter, two views."""

        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(3, 2).double()

        def forward(self, x):
            return (torch.nn.functional.linear(torch.relu(self.enc(x)), self.enc.weight.t())
                    - x).square().sum()

    tied = TiedAutoencoder()
    w_mat = tensor((2, 3), parameter=True)
    w_flat = tensor((2, 3))
    views = lin.weight

    return [
        # views of a parameter: asd finds them where their base is kept
        ("view x @ W.t()", lambda x: torch.relu(x @ w_mat.t()).sum(), [w_mat]),
        ("view x @ W.T", lambda x: torch.tanh(x @ w_mat.T).sum(), [w_mat]),
        ("view W[0, 0]", lambda x: (torch.relu(x * w_mat[0, 0]) + x * w_mat[1]).sum(),
         [w_mat]),
        ("view W.reshape", lambda x: (w_flat.reshape(6)[:3] * torch.exp(x)).sum(), [w_flat]),
        ("view of a module's weight", lambda x: (x @ views.t()).square().sum() + lin(x).sum(),
         list(lin.parameters())),
        ("tied encoder/decoder weights", tied, list(tied.parameters())),
        ("module attribute", lambda x: torch.tanh(lin(x)).sum(), list(lin.parameters())),
        ("dict", lambda x: (torch.relu(w_dict["w"] * x).sum() * w_dict["b"]).sum(),
         list(w_dict.values())),
        ("list", lambda x: (w_list[0] * torch.tanh(w_list[1] * x)).sum(), w_list),
        ("tuple", lambda x: torch.relu(w_tuple[1](x * w_tuple[0])).sum(),
         [w_tuple[0], *w_tuple[1].parameters()]),
        ("object attribute", lambda x: (holder.scale * holder.net(x)).sum(),
         [*holder.net.parameters(), holder.scale]),
        ("nested", lambda x: (nested["layers"][0].w * nested["layers"][1]["v"][0] * x).sum(),
         [nested["layers"][0].w, nested["layers"][1]["v"][0]]),
        ("closure", lambda x: torch.exp(closed * x).sum(), [closed]),
        ("module with a plain list", module, [*module.lin.parameters(), module.extra[0]]),
    ]


LAYOUTS = layouts()


@pytest.mark.parametrize("name, fn, params", LAYOUTS, ids=[n for n, _, _ in LAYOUTS])
def test_function_gives_every_reachable_parameter_pytorchs_gradient_off_kinks(name, fn, params):
    x = torch.tensor([0.7, -0.4, 1.3], dtype=DOUBLE)
    for p in params:
        p.grad = None
    fn(x).sum().backward()
    want = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    asd.torch.function(fn, seed=0)(x).sum().backward()
    for p, w in zip(params, want, strict=True):
        assert p.grad is not None, f"{name}: a parameter got no gradient"
        torch.testing.assert_close(p.grad, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("keep", ["dict", "list", "tuple", "object", "closure", "nested"])
def test_function_gives_the_exact_gradient_at_a_kink(keep):
    w = torch.zeros(3, dtype=DOUBLE, requires_grad=True)
    x = torch.tensor([1.0, -2.0, 0.5], dtype=DOUBLE)
    store = {"dict": {"w": w}, "list": [w], "tuple": (w,), "object": Holder(w=w),
             "closure": w, "nested": {"a": [Holder(b=(w,))]}}[keep]
    get = {"dict": lambda: store["w"], "list": lambda: store[0], "tuple": lambda: store[0],
           "object": lambda: store.w, "closure": lambda: store,
           "nested": lambda: store["a"][0].b[0]}[keep]
    f = lambda x: kink(get(), x)  # noqa: E731
    asd.torch.function(f, seed=0)(x).backward()
    assert torch.equal(w.grad, x)                      # d(w . x)/dw = x, kink included
    w.grad = None
    f(x).backward()
    assert torch.equal(w.grad, torch.zeros(3, dtype=DOUBLE))   # PyTorch's own: 0


def test_a_view_of_a_parameter_at_a_kink_gives_the_one_sided_derivative():
    """Tied weights at a dead unit (the encoder's pre-activation exactly 0): along each
    direction the limiting gradient's product with it is the one-sided derivative of the
    model's own forward."""
    enc = nn.Linear(3, 2, bias=False).double()
    with torch.no_grad():
        enc.weight.copy_(torch.tensor([[1.0, -1.0, 0.5], [0.5, 0.5, 0.0]], dtype=DOUBLE))

    def f(x):
        return (torch.nn.functional.linear(torch.relu(enc(x)), enc.weight.t()) * x).sum()

    x = torch.tensor([1.0, 1.0, 0.0], dtype=DOUBLE)     # enc.weight[0] @ x == 0: a kink
    for seed in range(6):
        gen = torch.Generator().manual_seed(seed)
        vx, vw = (torch.randn(s, generator=gen, dtype=DOUBLE) for s in ((3,), (2, 3)))
        gx, gp = asd.torch.subgrad(f, x, argnums=(0, "params"),
                                   direction=(vx, {"enc.weight": vw}))
        t = 1e-7
        with torch.no_grad():
            base = f(x)
            enc.weight += t * vw
            moved = f(x + t * vx)
            enc.weight -= t * vw
        quotient = float((moved - base) / t)
        slope = float((gx * vx).sum() + (gp["enc.weight"] * vw).sum())
        assert slope == pytest.approx(quotient, rel=1e-5, abs=1e-6)


def test_subgrad_params_reports_every_reachable_parameter_by_path():
    w = torch.zeros(3, dtype=DOUBLE, requires_grad=True)
    lin = nn.Linear(3, 1, bias=False).double()
    cfg = {"enc": lin, "extra": [w]}
    x = torch.tensor([1.0, -2.0, 0.5], dtype=DOUBLE)
    g = asd.torch.subgrad(lambda x: kink(cfg["extra"][0], x) + cfg["enc"](x).sum(), x,
                          argnums="params", seed=0)
    assert set(g) == {"cfg.enc.weight", "cfg.extra.0"}
    assert torch.equal(g["cfg.extra.0"], x)
    assert torch.equal(g["cfg.enc.weight"], x[None])


def test_a_parameter_asd_cannot_reach_raises_instead_of_getting_no_gradient():
    @functools.lru_cache
    def hidden():               # a library object (the cache) stands between fn and w
        return torch.ones(3, dtype=DOUBLE, requires_grad=True)

    f = asd.torch.function(lambda x: (hidden() * x).sum())
    with pytest.raises(asd.ArgumentError, match=r"shape \(3,\).*requires grad.*no gradient"):
        f(torch.ones(3, dtype=DOUBLE))
