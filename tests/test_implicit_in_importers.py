"""Solution maps inside imported programs: ``asd.torch.function`` / ``asd.jax.function``.

A layer made by `asd.implicit.as_torch` / `as_jax` is one primitive node of the imported
program (the custom op ``asd_implicit::asd_solution_map`` / the JAX primitive
``asd_solution_map``), so the whole loss is one asd sweep: ties in the model's ReLUs and at the
solution map's degenerate points are decided along the same direction.

Oracles: the loss of a QP layer is piecewise linear in the parameters here (a box QP's solution
is piecewise affine in ``q``, ``q`` is affine in the parameters, the loss is a ReLU and a
weighted sum), so its gradient on the piece a ray enters is an exact one-sided quotient at
``θ + δv``, computed in rational arithmetic with an independent active-set QP solver; the
ReLU equilibrium inside a jnp program is checked against ``asd.subgrad`` of the same numpy
program (the same element along the same direction).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import asd
from asd.testing.exact import solve_fractions

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy
import asd.jax  # noqa: E402
import asd.torch  # noqa: E402

DELTA = Fraction(1, 2**20)
EPS = Fraction(1, 2**44)

# ----- a box QP with a weakly active bound: x* = (0, 1/2, 1), x0 >= 0 with multiplier 0 -----

P = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 1.0]])
G = np.vstack([np.eye(3), -np.eye(3)])
H = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
X_STAR = np.array([0.0, 0.5, 1.0])
Q_STAR = -P @ X_STAR - 0.5 * G[2]          # x2 <= 1 strongly active (λ = 1/2), x0 >= 0 weakly
X_IN = np.array([1.0, -0.5])
W0 = np.array([[0.5, -0.25], [1.0, 0.75], [-0.5, 0.25]])
A_CUT = np.array([-0.25, 0.5, 0.5])       # relu(x* - a): entry 1 ties exactly (x*_1 = 1/2)
U = np.array([1.0, -2.0, 0.75])
V = np.array([1.0, -0.5, -1.0, -0.5, -0.5, 1.0, -0.5, -1.0, -0.5])
"""A direction in (W, c): ``q̇ = (0.75, -1.75, -1.5)``, so along ``+V`` x0 stays on its bound
and along ``-V`` it leaves it, and x*_1 moves off the ReLU's kink both ways (a ray along which
the ReLU stayed tied would leave that tie to later directions)."""


def exact_qp(q: list[Fraction]) -> list[Fraction]:
    """``argmin ½xᵀPx + qᵀx s.t. Gx <= H`` exactly (P ≻ 0): the active set whose KKT system
    is primal and dual feasible, in Fractions."""
    Pf = [[Fraction(v) for v in row] for row in P]
    Gf = [[Fraction(v) for v in row] for row in G]
    hf = [Fraction(v) for v in H]
    n = len(q)
    for k in range(n + 1):
        for act in itertools.combinations(range(len(hf)), k):
            K = [Pf[i] + [Gf[a][i] for a in act] for i in range(n)]
            K += [Gf[a] + [Fraction(0)] * k for a in act]
            sol = solve_fractions(K, [-v for v in q] + [hf[a] for a in act])
            if sol is None or any(v < 0 for v in sol[n:]):
                continue
            x = sol[:n]
            if all(sum(g * xi for g, xi in zip(Gf[i], x, strict=True)) <= hf[i]
                   for i in range(len(hf))):
                return x
    raise AssertionError("no KKT point")


def exact_loss(W: list[list[Fraction]], c: list[Fraction]) -> Fraction:
    """The model's loss in rational arithmetic: ``Σ u · relu(x*(W x_in + c) - a)``."""
    xin = [Fraction(v) for v in X_IN]
    q = [sum(w * v for w, v in zip(row, xin, strict=True)) + ci for row, ci in zip(W, c,
                                                                                  strict=True)]
    x = exact_qp(q)
    return sum(Fraction(u) * max(xi - Fraction(a), Fraction(0))
               for u, xi, a in zip(U, x, A_CUT, strict=True))


def exact_piece_gradient(theta: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The gradient of the loss on the piece the ray ``θ + δv`` enters: exact one-sided
    quotients along each coordinate at ``θ + δv`` (the loss is piecewise linear)."""
    base = [Fraction(t) + DELTA * Fraction(d) for t, d in zip(theta, v, strict=True)]

    def loss(th):
        return exact_loss([th[2 * i:2 * i + 2] for i in range(3)], th[6:9])  # W row-major, c

    f0 = loss(base)
    grad = []
    for k in range(theta.size):
        moved = list(base)
        moved[k] += EPS
        grad.append(float((loss(moved) - f0) / EPS))
    return np.array(grad)


def _qp_layer():
    return asd.implicit.as_torch(lambda q: asd.implicit.qp(P, q, None, None, G, H), seed=0,
                                 out_shape=lambda shape: shape)


def _qp_model():
    lin = torch.nn.Linear(2, 3).double()
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(W0))
        lin.bias.copy_(torch.tensor(Q_STAR - W0 @ X_IN))
    layer = _qp_layer()
    cut, u = torch.tensor(A_CUT), torch.tensor(U)

    def model(x):
        return (u * torch.relu(layer(lin(x)) - cut)).sum()

    return lin, model


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_qp_layer_in_drop_in_gradient_is_the_exact_one_sided_piece(sign):
    """At a weakly active bound of the QP and a tied ReLU after it, the drop-in's gradient
    along ``±v`` is the gradient of the piece the ray enters (exact rational quotients)."""
    lin, model = _qp_model()
    theta = np.concatenate([W0.ravel(), Q_STAR - W0 @ X_IN])
    assert np.allclose(asd.implicit.qp(P, theta[6:] + W0 @ X_IN, None, None, G, H), X_STAR)
    v = sign * V
    assert np.all(v[:6].reshape(3, 2) @ X_IN + v[6:] != 0)
    direction = {"lin.weight": torch.tensor(v[:6].reshape(3, 2)),
                 "lin.bias": torch.tensor(v[6:])}
    f = asd.torch.function(model, direction=direction)
    f(torch.tensor(X_IN)).backward()
    got = np.concatenate([lin.weight.grad.numpy().ravel(), lin.bias.grad.numpy()])
    want = exact_piece_gradient(theta, v)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_qp_layer_directions_select_different_pieces():
    """The point is degenerate: opposite directions give different exact gradients, each the
    drop-in's (so the test above is not passing on a smooth point)."""
    theta = np.concatenate([W0.ravel(), Q_STAR - W0 @ X_IN])
    assert not np.allclose(exact_piece_gradient(theta, V), exact_piece_gradient(theta, -V))


def test_qp_layer_is_one_primitive_of_the_imported_program():
    _, model = _qp_model()
    text = str(asd.torch.program(model, torch.tensor(X_IN)))
    assert "= qp " in text and "relu" in text


def test_qp_layer_trains_through_the_drop_in():
    torch.manual_seed(0)
    layer = _qp_layer()
    teacher, student = torch.nn.Linear(2, 3).double(), torch.nn.Linear(2, 3).double()
    feats = torch.randn(4, 2, dtype=torch.float64)
    with torch.no_grad():
        targets = torch.stack([layer(2 * teacher(f)) for f in feats])

    def loss_fn(x):
        return ((torch.stack([layer(student(f)) for f in x]) - targets) ** 2).sum()

    f = asd.torch.function(loss_fn, seed=0)
    opt = torch.optim.Adam(student.parameters(), lr=0.1)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = f(feats)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]


def test_traced_layer_without_a_shape_is_refused_with_the_fix():
    layer = asd.implicit.as_torch(lambda q: asd.implicit.qp(P, q, None, None, G, H))
    with pytest.raises(asd.UnsupportedError, match="out_shape"):
        asd.torch.function(lambda x: layer(x).sum())(torch.zeros(3, dtype=torch.float64))


# ----- a ReLU equilibrium inside a jnp program -----

WZ = np.array([[0.25, -0.25, 0.125], [0.125, 0.25, -0.25], [-0.25, 0.125, 0.25]])
Z_STAR = np.array([1.0, 0.0, 0.5])          # unit 1 sits on its kink: pre-activation 0
H_STAR = Z_STAR - WZ @ Z_STAR
H_STAR[1] = -(WZ @ Z_STAR)[1]
AX = np.array([[1.0, 0.5], [-0.5, 1.0], [0.25, -1.0]])
X0 = np.array([0.5, -0.25])
B0 = H_STAR - AX @ X0
CUT = np.array([0.25, -0.5, 0.5])           # relu(z* - cut): entry 2 ties too


def _equilibrium():
    def step(z, h):
        return asd.relu(WZ @ z + h)

    def solve(h):
        z = np.zeros(3)
        for _ in range(200):
            z = np.maximum(WZ @ z + h, 0.0)
        return z

    return asd.implicit.fixed_point(step, solve, name="relu_equilibrium")


def _programs():
    fp = _equilibrium()
    layer = asd.implicit.as_jax(fp, out_shape=(3,))

    def jax_loss(x):
        z = layer(jnp.asarray(AX) @ x + jnp.asarray(B0))
        return jnp.sum(jnp.asarray([1.0, 2.0, -1.0]) * jax.nn.relu(z - jnp.asarray(CUT)))

    def numpy_loss(x):
        z = fp(AX @ x + B0)
        return asd.sum(np.array([1.0, 2.0, -1.0]) * asd.relu(z - CUT))

    return jax_loss, numpy_loss


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def test_relu_equilibrium_in_jax_programs_is_asds_element(x64):
    """``asd.jax.subgrad`` / ``jax.grad(asd.jax.function(f))`` of a jnp program calling the
    equilibrium layer give the element ``asd.subgrad`` gives for the same numpy program,
    along the same direction; the directions select different elements."""
    jax_loss, numpy_loss = _programs()
    assert np.allclose(np.asarray(_equilibrium()(H_STAR)), Z_STAR)
    x = jnp.asarray(X0)
    seen = set()
    for v in (np.array([1.0, 0.5]), np.array([-1.0, -0.5]), np.array([0.25, -1.0]),
              np.array([-0.5, 1.0])):
        want = np.asarray(asd.subgrad(numpy_loss, direction=v)(X0))
        got = np.asarray(asd.jax.subgrad(jax_loss, direction=jnp.asarray(v))(x))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        seen.add(tuple(np.round(want, 9)))
    assert len(seen) > 1
    for seed in (0, 1, 2):
        want = np.asarray(asd.subgrad(numpy_loss, seed=seed)(X0))
        got = np.asarray(jax.grad(asd.jax.function(jax_loss, seed=seed))(x))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_relu_equilibrium_drop_in_under_jit(x64):
    """Under ``jit`` the layer's rule cannot stage (it solves on the host): the drop-in's
    reverse rule runs the exact sweep through a host callback, with the eager result."""
    jax_loss, _ = _programs()
    f = asd.jax.function(jax_loss, seed=0)
    x = jnp.asarray(X0)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(f))(x)),
                               np.asarray(jax.grad(f)(x)), rtol=1e-12)


# ----- where the solution map is not Lipschitz: the refusal reaches the caller -----

def _not_lipschitz():
    """``relu(y) = t`` at ``t = 0``: ``∂_y F`` holds 0 (a singular element)."""
    return asd.implicit.root(lambda y, t: asd.relu(y) - t, lambda t: np.maximum(t, 0.0),
                             name="relu_root")


def test_not_lipschitz_reaches_torch_drop_in_caller():
    layer = asd.implicit.as_torch(_not_lipschitz(), out_shape=lambda s: s)
    t = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    with pytest.raises(asd.NotLipschitzError, match="relu_root"):
        asd.torch.function(lambda t: (layer(2 * t) ** 2).sum())(t).backward()


def test_not_lipschitz_reaches_jax_drop_in_caller(x64):
    """Raised in the drop-in's backward: before, the error was its own ``__cause__``
    (``raise e from e``) and JAX's error handling walked that chain forever."""
    layer = asd.implicit.as_jax(_not_lipschitz(), out_shape=(1,))
    f = asd.jax.function(lambda t: (layer(2 * t) ** 2).sum())
    with pytest.raises(asd.NotLipschitzError, match="relu_root"):
        jax.grad(f)(jnp.zeros(1))
    with pytest.raises(asd.NotLipschitzError, match="relu_root"):
        asd.jax.subgrad(lambda t: (layer(2 * t) ** 2).sum())(jnp.zeros(1))


def _cause_chain_is_acyclic(e: BaseException) -> bool:
    seen = set()
    while e is not None:
        if id(e) in seen:
            return False
        seen.add(id(e))
        e = e.__cause__
    return True


@pytest.mark.parametrize("fn", [lambda x: np.sqrt(x).sum(),
                                lambda x: asd.sum(_not_lipschitz()(2 * x) ** 2)])
def test_refusals_are_not_their_own_cause(fn):
    """``raise e from e`` (an asd error passed through as its own explanation) made ``e`` its
    own cause; JAX's handling of an error in a custom VJP's backward walks that chain."""
    with pytest.raises(asd.NotLipschitzError) as info:
        asd.subgrad(fn)(np.zeros(1))
    assert _cause_chain_is_acyclic(info.value)


def test_qp_layer_drop_in_compiles_fullgraph_with_the_eager_gradient():
    """The solution map's operator flags every call (`native.ALWAYS_SWEPT`), so the drop-in
    traces without a graph break and its backward is asd's sweep, as eagerly."""
    lin, model = _qp_model()
    direction = {"lin.weight": torch.tensor(V[:6].reshape(3, 2)), "lin.bias": torch.tensor(V[6:])}
    f = asd.torch.function(model, direction=direction)
    x = torch.tensor(X_IN)
    f(x).backward()
    want = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    torch._dynamo.reset()
    torch.compile(lambda x: f(x), backend="aot_eager", fullgraph=True)(x).backward()
    for g, p in zip(want, lin.parameters(), strict=True):
        assert torch.equal(g, p.grad)


def test_as_jax_layer_under_vmap_is_the_per_example_layer(x64):
    """The primitive's batching rule solves per example (before: JAX's NotImplementedError
    from pure_callback without a vmap_method)."""
    layer = asd.implicit.as_jax(lambda q: asd.implicit.qp(P, q, None, None, G, H),
                                out_shape=(3,))
    Q = jnp.asarray(np.array([Q_STAR, Q_STAR + 0.25, -Q_STAR]))

    def loss(q):
        return jnp.sum(jnp.asarray(U) * layer(q))

    for batched in (jax.vmap(layer), jax.jit(jax.vmap(layer))):
        np.testing.assert_array_equal(np.asarray(batched(Q)),
                                      np.stack([np.asarray(layer(q)) for q in Q]))
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(jax.grad(loss)))(Q)),
                                  np.stack([np.asarray(jax.grad(loss)(q)) for q in Q]))
