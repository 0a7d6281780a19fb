"""Rules ported to torch and JAX after the first batch: erf/erfc (gelu's exact form), exp2 and
reciprocal (each library's own function), cumsum,
prod (exact at zeros), constant padding (per-axis constants, corners included), item
assignment (``y[i] = v``: repeated positions resolved as numpy does, last write wins) and the
p-norms (var/std/norm/cdist in imported torch programs), whose zero rows are ties decided
along the ray: by the tangent, or by the exact series where the tangent is 0 too; sort, top-k
sums, the median and quantiles (sorted on the device; a row holding equal entries is decided
on the host by numpy's own `lex_order`); and the statistics of ``library/statistics.py``
(var, std, average, cov, corrcoef, ptp), whose dtype used to be read through numpy.

Each program runs on numpy (the reference, verified by the rest of the suite) and on torch
(float64, float32) and JAX; results must come back in the arguments' library, dtype and
device, equal to numpy's. prod is also checked at exact zeros (one and two per slice), where
the gradient is a product of the other entries, and torch autograd is an independent oracle
at random points. The order rules are also checked at repeated entries along directions that
keep the ties alive (a coordinate, one equal on the tied entries so the series or the index
decides): the gradient, the ties met and the decisions reported must be numpy's, and on torch
the Jacobian-vector product must be the one-sided quotient ``(f(x + hv) - f(x)) / h``. std is
checked at a constant row, where it is not differentiable.
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
    "exp2, reciprocal": lambda x: asd.numpy.sum(
        asd.numpy.exp2(x) * np.arange(12.0).reshape(3, 4)
        + asd.numpy.reciprocal(2.0 + x * x) ** 2),
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
        "exp2, reciprocal": lambda t: (torch.exp2(t) * torch.arange(12.0, dtype=t.dtype)
                                       .reshape(3, 4) + torch.reciprocal(2.0 + t * t) ** 2).sum(),
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


# ----- sort, top-k sum, median and quantile: sorted on the device, ties decided on the host -----

W = np.arange(12.0).reshape(3, 4) - 5.5
"""Weights that tell the sorted positions apart (no entry 0, none equal)."""

ORDER_PROGRAMS = {
    "sort along each axis and flattened": lambda x: asd.numpy.sum(asd.numpy.sort(x, axis=1) * W)
    + asd.numpy.sum(asd.numpy.sort(x, axis=0) * W[::-1] ** 2)
    + asd.numpy.sum(asd.numpy.sort(x, axis=None) * W.ravel() ** 3),
    "top-k sums along each axis": lambda x: asd.numpy.sum(
        asd.topk_sum(x, 2, axis=1) * np.array([1.0, -2.0, 3.0]))
    + asd.numpy.sum(asd.topk_sum(x, 2, axis=0) * W[0]) + asd.numpy.sum(asd.topk_sum(x, 4)),
    "median: odd and even lengths, flattened, per axis, keepdims": lambda x: asd.numpy.median(x)
    + asd.numpy.sum(asd.numpy.median(x, axis=0) * W[0])
    + asd.numpy.sum(asd.numpy.median(x, axis=1, keepdims=True) * W[:, :1])
    + asd.numpy.median(x[:, :3]) * 3.0
    + asd.numpy.sum(asd.numpy.median(x[:, :3], axis=(1,)) * np.array([1.0, -1.0, 2.0])),
    "quantile and percentile, scalar and vector q": lambda x: asd.numpy.quantile(x, 0.3)
    + asd.numpy.sum(asd.numpy.quantile(x, np.array([0.1, 0.5, 0.93]), axis=1) * W[:, :3].T)
    + asd.numpy.sum(asd.numpy.percentile(x, np.array([[25.0], [80.0]]), axis=0, keepdims=True)
                    * W[:2, None, :])
    + asd.numpy.percentile(x, 100.0) - asd.numpy.quantile(x, 0.0, axis=(0, 1)),
}

X_TIES = np.array([[1.0, 2.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0], [3.0, -1.0, 3.0, 0.0]])
"""Repeated entries in every row and column, and zeros, where ``x * x`` has tangent 0."""

TIE_DIRECTIONS = {
    "a coordinate (the tangent decides one tie, the index the rest)": np.eye(12)[2].reshape(3, 4),
    "another coordinate": np.eye(12)[5].reshape(3, 4),
    "equal on tied entries (the series decides x * x's zeros)": np.array(
        [[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, -3.0, 1.0], [2.0, 0.0, 2.0, 1.0]]),
    "generic": (np.arange(12.0).reshape(3, 4) * 7) % 5 - 2.0,
}


def at_ties(program):
    """``program`` of ``x`` and of ``x * x``: at the zeros of ``x`` the square's tangents
    are 0, so its ties go on to the exact series (or to the index, where the series agree)."""
    return lambda x: program(x) + program(x * x)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("name", list(ORDER_PROGRAMS))
def test_order_rules_at_ties_decide_as_numpy(name, lib):
    """At repeated entries the tie is decided on the host exactly as numpy decides it: the
    same gradient along each direction, the same ties met and the same decisions reported
    (tangent, series, or index where the entries stay equal)."""
    f = at_ties(ORDER_PROGRAMS[name])
    conv, dtype = LIBRARIES[lib]
    for v in TIE_DIRECTIONS.values():
        compare(f, X_TIES, lib, direction=v)
        ref = asd.asd(f, direction=v.astype(dtype))(X_TIES.astype(dtype))
        got = asd.asd(f, direction=conv(v))(conv(X_TIES))
        assert got.ties == ref.ties and got.ties
        assert got.decisions == ref.decisions
        assert got.degenerate == ref.degenerate


@pytest.mark.parametrize("lib", LIBS)
def test_order_jacobians_at_ties_match_numpy(lib):
    """Batched tangents (forward) and cotangents (reverse) through the `Take`, `MaskSum` and
    `Lerp` maps, at ties."""
    conv, dtype = LIBRARIES[lib]

    def f(x):
        return asd.numpy.concatenate([
            asd.numpy.ravel(asd.numpy.sort(x * x, axis=0)), asd.topk_sum(x, 3, axis=1),
            asd.numpy.ravel(asd.numpy.quantile(x, np.array([0.2, 0.5]), axis=1)),
            asd.numpy.ravel(asd.numpy.median(x, axis=0, keepdims=True))])

    v = TIE_DIRECTIONS["equal on tied entries (the series decides x * x's zeros)"]
    for mode in ("forward", "reverse"):
        ref = asd.jacobian(f, mode=mode, direction=v.astype(dtype))(X_TIES.astype(dtype))
        got = asd.jacobian(f, mode=mode, direction=conv(v))(conv(X_TIES))
        assert type(got) is type(conv(X_TIES)) and got.dtype == conv(X_TIES).dtype
        np.testing.assert_allclose(host(got), ref, atol=1e-6)


def test_sort_and_median_at_ties_give_the_one_sided_derivative_on_torch():
    """The oracle: along ``v`` the Jacobian-vector product is ``f'(x; v)``, which for these
    piecewise-linear functions is the one-sided quotient ``(f(x + hv) - f(x)) / h`` for small
    ``h`` (computed by torch itself; torch.quantile at 0.5 is numpy's median)."""
    x = torch.tensor(X_TIES)
    primal = {
        "sort": (lambda t: asd.numpy.sort(t, axis=1), lambda t: torch.sort(t, dim=1).values),
        "sort flattened": (lambda t: asd.numpy.sort(t, axis=None),
                           lambda t: torch.sort(t.reshape(-1)).values),
        "median per row (even)": (lambda t: asd.numpy.median(t, axis=1),
                                  lambda t: torch.quantile(t, 0.5, dim=1)),
        "median per column (odd)": (lambda t: asd.numpy.median(t, axis=0),
                                    lambda t: torch.quantile(t, 0.5, dim=0)),
        "top-2 sum": (lambda t: asd.topk_sum(t, 2), lambda t: torch.topk(t, 2).values.sum(1)),
    }
    h = 2.0 ** -20
    for name, (f, ref) in primal.items():
        for v in TIE_DIRECTIONS.values():
            v = torch.tensor(v)
            jac = asd.jacobian(f, mode="forward", direction=v)(x)
            jvp = (jac.reshape(-1, 12) @ v.reshape(-1)).reshape(ref(x).shape)
            quotient = (ref(x + h * v) - ref(x)) / h
            torch.testing.assert_close(jvp, quotient, rtol=0, atol=1e-9, msg=name)


# ----- statistics: dtypes read from the value, not through numpy -----

STATISTICS = {
    "var and std per axis, ddof, keepdims": lambda x: asd.numpy.sum(
        asd.numpy.std(x, axis=1) * np.array([1.0, 2.0, 3.0]))
    + asd.numpy.std(x, ddof=1) + asd.numpy.sum(
        asd.numpy.var(x, axis=0, ddof=1, keepdims=True) * W[:1]) + asd.numpy.var(x[:, 1:]),
    "average, weighted, returned": lambda x: asd.numpy.sum(asd.numpy.average(
        x, axis=1, weights=np.array([1.0, 2.0, 3.0, 4.0])))
    + asd.numpy.sum(asd.numpy.average(x, axis=0, returned=True)[0] * W[0])
    + asd.numpy.average(np.arange(4.0), weights=x[0] * x[0] + 1.0),
    "cov (weights), corrcoef, ptp": lambda x: covariances(x)
    + asd.numpy.sum(asd.numpy.ptp(x, axis=1) * np.array([1.0, -2.0, 0.5])),
}


def covariances(x):
    c = asd.numpy.cov(x)
    w = asd.numpy.cov(x, aweights=np.array([1.0, 2.0, 1.0, 0.5]), fweights=np.array([1, 2, 1, 3]))
    r = asd.numpy.corrcoef(x[::2])
    return c[0, 1] + 2.0 * c[1, 2] - c[2, 2] + w[0, 2] * 3.0 + r[0, 1] * 5.0


AT_RANDOM_POINTS = {**PROGRAMS, **ORDER_PROGRAMS, **STATISTICS}
"""Every program of this module, compared with numpy at a random point (no ties)."""


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("name", list(AT_RANDOM_POINTS))
def test_ported_rules_match_numpy(name, lib):
    compare(AT_RANDOM_POINTS[name], RNG.uniform(-1.5, 1.5, (3, 4)), lib)


@pytest.mark.parametrize("lib", LIBS)
def test_std_at_a_constant_row_matches_numpy(lib):
    """Row 1 is constant: its std is a norm at 0, not differentiable. Along ``v`` the norm's
    rule takes the gradient at the centred tangent; where that is 0 too (a direction constant
    on the row), the exact series of ``x * x`` decides."""
    x = RNG.uniform(-1.5, 1.5, (3, 4))
    x[1] = 0.0

    def f(x):
        return (asd.numpy.sum(asd.numpy.std(x, axis=1) * np.array([1.0, 2.0, 3.0]))
                + asd.numpy.std(x * x, axis=1)[1] + asd.numpy.sum(asd.numpy.var(x, axis=1)))

    for v in (np.arange(12.0).reshape(3, 4) % 5 - 2.0, np.eye(12)[6].reshape(3, 4),
              np.array([[1.0, 0.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]]),
              np.array([[1.0, 0.0, 2.0, 1.0], [1.0, -1.0, 2.0, -2.0], [0.0, 1.0, 0.0, 1.0]])):
        got = compare(f, x, lib, direction=v)
        assert np.all(np.isfinite(host(got)))


def test_statistics_on_torch_refuse_clearly_where_not_ported():
    """A dtype= cast (asd.astype) has no array-API rule: the refusal names it."""
    with pytest.raises(asd.UnsupportedError, match=r"cast .*numpy arrays only"):
        asd.subgrad(lambda x: asd.numpy.std(x, dtype=np.float32))(torch.ones(3, 4))


@pytest.mark.parametrize("lib", LIBS)
def test_a_float64_cotangent_pulls_through_a_float32_product(lib):
    """A float64 constant after a float32 product promotes the cotangent to float64, as
    numpy does; torch's matmul refuses mixed dtypes, so the map promotes first."""
    compare(lambda x: asd.numpy.sum((x @ x.T) * np.arange(9.0).reshape(3, 3)),
            RNG.uniform(-1.5, 1.5, (3, 4)), lib)
    conv, _ = LIBRARIES[lib]
    jac = asd.jacobian(lambda x: (x @ x.T) * np.arange(9.0).reshape(3, 3), mode="forward")
    ref = jac(np.arange(12.0).reshape(3, 4))
    np.testing.assert_allclose(host(jac(conv(np.arange(12.0).reshape(3, 4)))), ref, rtol=1e-6)
