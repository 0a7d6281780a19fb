"""Rules ported to torch and JAX after the first batch: erf/erfc (gelu's exact form), cumsum,
prod (exact at zeros), constant padding (per-axis constants, corners included), item
assignment (``y[i] = v``: repeated positions resolved as numpy does, last write wins) and the
p-norms (var/std/norm/cdist in imported torch programs), whose zero rows are ties decided
along the ray: by the tangent, or by the exact series where the tangent is 0 too.

Each program runs on numpy (the reference, verified by the rest of the suite) and on torch
(float64, float32) and JAX; results must come back in the arguments' library, dtype and
device, equal to numpy's. prod is also checked at exact zeros (one and two per slice), where
the gradient is a product of the other entries, and torch autograd is an independent oracle
at random points.
"""

from __future__ import annotations

import numpy as np
import pytest
from asd.library import special

import asd

torch = pytest.importorskip("torch")
jnp = pytest.importorskip("jax.numpy")

from tests.array_libraries import LIBRARIES, LIBS, host  # noqa: E402
from tests.array_libraries import compare as shared_compare  # noqa: E402

RNG = np.random.default_rng(17)


def tol(dtype) -> float:
    return 1e-12 if dtype == np.float64 else 2e-5


def compare(f, x, lib, direction=None):
    """`tests.array_libraries.compare` for one argument (and one direction) at this
    module's tolerances; returns the library's gradient."""
    along = {} if direction is None else {"direction": (direction,)}
    (got,), _ = shared_compare(f, (x,), lib, tol, **along)
    return got


PROGRAMS = {
    "erf, erfc (exact gelu)": lambda x: asd.numpy.sum(
        0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0))) + special.erfc(x * x)),
    "cumsum both axes": lambda x: asd.numpy.sum(asd.numpy.cumsum(x, axis=1) ** 2)
    + asd.numpy.sum(asd.numpy.cumsum(x, axis=0) * np.arange(12.0).reshape(3, 4)),
    "prod over each axis and all": lambda x: asd.numpy.sum(asd.numpy.prod(x, axis=0))
    + asd.numpy.sum(asd.numpy.prod(x, axis=1, keepdims=True) ** 2) + asd.numpy.prod(x[:2, :2]),
    "constant padding, per-axis constants": lambda x: asd.numpy.sum(
        asd.numpy.pad(x, ((1, 0), (2, 1)), constant_values=((1.5, 2.0), (3.0, -1.0))) ** 2
        * np.arange(28.0).reshape(4, 7)) + asd.numpy.sum(asd.numpy.pad(x, 2) * 0.5),
    "item assignment (repeated positions, broadcast scalars)": lambda x: asd.numpy.sum(
        assigned(x) ** 2 * np.arange(12.0).reshape(3, 4)),
}


def assigned(x):
    y = x * 1.0
    y[0] = x[1] ** 2
    y[1, np.array([2, 2, 3])] = x[2, :3] * 3.0
    y[1:3, 1] = 7.0
    return y


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_item_assignment_jacobian_matches_numpy(lib, mode):
    """Batched tangents through the gather and the scatter-add of the written entries."""
    conv, dtype = LIBRARIES[lib]
    x = RNG.uniform(-1.5, 1.5, (3, 4))
    ref = asd.jacobian(assigned, mode=mode)(x.astype(dtype))
    got = asd.jacobian(assigned, mode=mode)(conv(x))
    assert type(got) is type(conv(x)) and tuple(got.shape) == (3, 4, 3, 4)
    np.testing.assert_allclose(host(got), ref, atol=1e-6)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_ported_rules_match_numpy(name, lib):
    compare(PROGRAMS[name], RNG.uniform(-1.5, 1.5, (3, 4)), lib)


@pytest.mark.parametrize("lib", LIBS)
def test_prod_at_exact_zeros_matches_numpy(lib):
    """One zero in a slice: only it gets a nonzero derivative; two zeros: none does."""
    x = np.array([[2.0, 0.0, 3.0, 0.5], [0.0, -1.0, 0.0, 2.0], [1.5, 0.25, -2.0, 4.0]])
    got = compare(PROGRAMS["prod over each axis and all"], x, lib)
    assert np.all(np.isfinite(host(got)))


def test_ported_rules_agree_with_torch_autograd_off_the_kinks():
    x = RNG.uniform(-1.5, 1.5, (3, 4))
    torch_ops = {
        "erf, erfc (exact gelu)": lambda t: (torch.nn.functional.gelu(t)
                                             + torch.erfc(t * t)).sum(),
        "cumsum both axes": lambda t: (torch.cumsum(t, 1) ** 2).sum()
        + (torch.cumsum(t, 0) * torch.arange(12.0, dtype=t.dtype).reshape(3, 4)).sum(),
    }
    for name, op in torch_ops.items():
        t = torch.tensor(x, requires_grad=True)
        op(t).backward()
        got = asd.subgrad(PROGRAMS[name])(torch.tensor(x))
        np.testing.assert_allclose(host(got), t.grad.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=name)


def norms(x):
    return (asd.numpy.sum(asd.l2_norm(x, axis=1) * np.array([1.0, 2.0, 3.0]))
            + asd.pnorm(x, 3.0) + asd.numpy.sum(asd.pnorm(x[:, :2], 2.5, axis=0, keepdims=True))
            + asd.l2_norm(x[2] * x[2]))


@pytest.mark.parametrize("lib", LIBS)
def test_pnorms_match_numpy_off_and_at_zero_rows(lib):
    """Row 1 and the first two entries of row 2 are 0: ties. Along ``v`` the tangent decides
    row 1; ``x[2] * x[2]`` has tangent 0 at a zero entry, so there the series decides."""
    compare(norms, RNG.uniform(-1.5, 1.5, (3, 4)), lib)
    x = np.array([[2.0, 0.0, 3.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    for v in (np.arange(12.0).reshape(3, 4) - 5.0, np.eye(3, 4)):
        compare(norms, x, lib, direction=v)


def test_pnorm_on_torch_keeps_huge_entries_finite():
    big = torch.tensor([3.0, 4.0], dtype=torch.float64) * 2.0 ** 600
    value, g = asd.value_and_subgrad(asd.l2_norm)(big)
    assert float(value) == 5 * 2.0 ** 600
    np.testing.assert_array_equal(host(g), [0.6, 0.8])
