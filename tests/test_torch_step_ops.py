"""PyTorch's step functions and their relatives through asd's importer: fmax / fmin, round
(with ``decimals``), hypot, ``& | ^ ~`` on comparisons, diagonal, kthvalue, trunc, floor,
ceil, remainder (all overloads), fmod, div with ``rounding_mode``, frac, sign / sgn and
floor_divide (the fuzz campaign found them unmapped: ``UnsupportedError: PyTorch operation
aten.X has no asd mapping``).

Every program runs on each of asd's paths: the numpy sweep (``asd.torch.NATIVE = False``),
the sweep on torch tensors, the default (PyTorch's autograd on the instrumented graph where
no tie matters, asd's sweep elsewhere) and the drop-in ``asd.torch.function``.

Oracles: off every kink and jump the program is differentiable, so its gradient is
torch.autograd's, and its value PyTorch's bit for bit. On a kink, the one-sided derivative
along the direction ``v``: the programs are piecewise linear along the ray and evaluated at
dyadic points, so float64 evaluations are exact and the difference quotient
``(f(x + t v) - f(x)) / t`` is an exact `Fraction`, the same for two steps ``t``; hypot at
the origin by mpmath. On a jump the output sees: `asd.NotLipschitzError`; where a later
operation hides the jump (``floor(x) * 0``, a saturated clamp), the number.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest

torch = pytest.importorskip("torch")

import asd.torch  # noqa: E402

import asd  # noqa: E402
from asd.frontends import torch as frontend  # noqa: E402

D = torch.float64
DTYPES = [torch.float32, torch.float64]
PATHS = ["numpy", "torch", "native", "function"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Which of asd's paths answers: the numpy sweep, the sweep on torch tensors, the
    default (PyTorch's autograd where no tie matters), or the drop-in."""
    monkeypatch.setattr(frontend, "NATIVE", request.param != "numpy")
    monkeypatch.setattr(frontend, "NATIVE_BACKWARD", request.param in ("native", "function"))
    return request.param


def value_and_grad(path: str, fn, *xs, direction=None):
    """``fn``'s value and gradient in every argument, by asd on ``path``."""
    nums = tuple(range(len(xs)))
    if path != "function":
        return asd.torch.value_and_subgrad(fn, *xs, argnums=nums, direction=direction)
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    out = asd.torch.function(fn, seed=0)(*leaves)
    return out.detach(), torch.autograd.grad(out, leaves)


def autograd(fn, *xs):
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    out = fn(*leaves)
    return out.detach(), torch.autograd.grad(out, leaves, allow_unused=True)


# ----- off the kinks: PyTorch's value, autograd's gradient -----

X = torch.tensor([0.3, -1.7, 2.6, 0.43, -0.8, 3.3], dtype=D)
Y = torch.tensor([1.2, -0.4, 2.3, 3.1, 0.7, -1.9], dtype=D)
NANS = torch.tensor([0.1, float("nan"), 5.0, float("nan"), -3.0, 0.2], dtype=D)


SMOOTH = {
    # name: a program of x and y with a tensor output, compared entry by entry
    "fmax": lambda x, y: torch.fmax(x, y),
    "fmin": lambda x, y: torch.fmin(x, y),
    "fmax / fmin with a constant's NaN": lambda x, y: torch.fmax(x, NANS.to(x.dtype))
    + torch.fmin(NANS.to(x.dtype), y),
    "round": lambda x, y: torch.round(x * 3) * y + x,
    "round decimals=1": lambda x, y: torch.round(x, decimals=1) * y,
    "round decimals=-1": lambda x, y: torch.round(x * 10, decimals=-1) * y,
    "hypot": lambda x, y: torch.hypot(x, y),
    "hypot with a constant, broadcast": lambda x, y: torch.hypot(
        x[:, None], NANS[:3].nan_to_num(1.5).to(x.dtype)) * y[:, None],
    "& on comparisons": lambda x, y: torch.where((x > 0) & (y < 1), x, y * 2),
    "| on comparisons": lambda x, y: torch.where((x > 0) | (y > 2), x * y, y),
    "^ on comparisons": lambda x, y: torch.where((x > 0) ^ (y > 0), x, -y),
    "~ of a comparison": lambda x, y: torch.where(~(x > y), x, y * 3),
    "diagonal": lambda x, y: torch.cat([torch.diagonal(torch.outer(x, y), 1),
                                        torch.diagonal(torch.outer(x, y), -2)]),
    "diagonal offset, dim1, dim2": lambda x, y: torch.diagonal(
        torch.outer(x, y).reshape(6, 3, 2), 1, 2, 0),
    "kthvalue": lambda x, y: torch.kthvalue(x * y, 3).values,
    "kthvalue dim, keepdim": lambda x, y: torch.kthvalue(
        torch.outer(x, y), 2, dim=0, keepdim=True).values,
    "trunc": lambda x, y: torch.trunc(x * 2) * y + x,
    "floor": lambda x, y: torch.floor(x * 2) * y + x,
    "ceil": lambda x, y: torch.ceil(x * 2) * y + x,
    "remainder": lambda x, y: torch.remainder(x, y),
    "x % y": lambda x, y: x % y,
    "remainder by a constant": lambda x, y: torch.remainder(x, 0.7) * y,
    "remainder by a negative constant": lambda x, y: torch.remainder(x, -0.7) * y,
    "c % x (remainder.Scalar_Tensor)": lambda x, y: torch.remainder(2.0, y) * x + y,
    "fmod": lambda x, y: torch.fmod(x, y),
    "fmod by a constant": lambda x, y: torch.fmod(x, 0.7) * y,
    "fmod and remainder of a constant": lambda x, y: torch.fmod(NANS.nan_to_num(-2.5).to(
        x.dtype), y) + torch.remainder(NANS.nan_to_num(4.5).to(x.dtype), x),
    "fmod by a negative constant": lambda x, y: torch.fmod(x, -0.7) * y,
    "div rounding_mode='floor'": lambda x, y: torch.div(x, y, rounding_mode="floor") * x,
    "div rounding_mode='trunc'": lambda x, y: torch.div(x, y, rounding_mode="trunc") * x,
    "div by a constant, rounded": lambda x, y: (torch.div(x, 0.35, rounding_mode="trunc")
                                                + torch.div(x, -0.35, rounding_mode="floor")
                                                ) * y,
    "floor_divide": lambda x, y: torch.floor_divide(x, y) * y,
    "x // y": lambda x, y: (x // y) * x + (x // 0.6) * y,
    "frac": lambda x, y: torch.frac(x * 2) * y,
    "sign": lambda x, y: torch.sign(x) * y,
    "sgn": lambda x, y: torch.sgn(x) * y * x,
}


AUTOGRAD_SPELLING = {
    # autograd has no derivative for these overloads ("derivative for aten::remainder is not
    # implemented"): its reference is the same function in overloads it differentiates
    "c % x (remainder.Scalar_Tensor)": lambda x, y: (2.0 - y * torch.floor(2.0 / y)) * x + y,
    "floor_divide": lambda x, y: torch.div(x, y, rounding_mode="floor") * y,
    "x // y": lambda x, y: torch.div(x, y, rounding_mode="floor") * x + torch.div(
        x, 0.6, rounding_mode="floor") * y,
}


def _cotangent(out: torch.Tensor) -> torch.Tensor:
    """A fixed cotangent of dyadic entries for an output."""
    gen = torch.Generator().manual_seed(out.numel())
    return (torch.randint(-8, 9, out.shape, generator=gen) / 4).to(out.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SMOOTH))
def test_value_is_pytorchs_and_gradient_is_autograds_off_the_jumps(name, dtype, path):
    fn = SMOOTH[name]
    x, y = X.to(dtype), Y.to(dtype)
    ref = fn(x, y)
    ct = _cotangent(ref)
    leaves = [x.clone().requires_grad_(True), y.clone().requires_grad_(True)]
    value = asd.torch.function(fn, seed=0)(*leaves)      # asd's forward on this path
    assert value.dtype == dtype and torch.equal(value.detach(), ref), (value, ref)
    if path == "function":
        grads = torch.autograd.grad(value, leaves, ct)
    else:
        grads = asd.torch.subgrad(lambda x, y: (fn(x, y) * ct).sum(), x, y, argnums=(0, 1))
    spelling = AUTOGRAD_SPELLING.get(name, fn)
    torch.testing.assert_close(spelling(x, y), ref)
    ref_grads = torch.autograd.grad(spelling(*leaves), leaves, ct, allow_unused=True)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == D else {"rtol": 1e-5, "atol": 1e-5}
    for g, r in zip(grads, ref_grads, strict=True):
        assert g.dtype == dtype
        torch.testing.assert_close(g, torch.zeros_like(g) if r is None else r, **tol)


def test_kthvalue_indices_read_a_constant_as_pytorch_does(path):
    table = torch.arange(6, dtype=D) * 10.0

    def fn(x, y):
        k = torch.kthvalue(x * y, 2)
        return k.values + table[k.indices] + (x * 0).sum()

    value, (gx, gy) = value_and_grad(path, fn, X, Y)
    ref_value, (rx, ry) = autograd(fn, X, Y)
    assert float(value) == pytest.approx(float(ref_value), rel=1e-15)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gy, ry)


def test_kthvalue_indices_at_a_tie_reading_different_entries_are_refused(path):
    """Tied k-th entries: PyTorch's index is its choice, and a constant read through it
    jumps between the tied positions' entries, so asd refuses rather than pick."""
    table = torch.arange(4, dtype=D) * 10.0

    def fn(x):
        k = torch.kthvalue(x, 2)
        return k.values + table[k.indices]

    with pytest.raises(asd.NotLipschitzError, match="argsort"):
        value_and_grad(path, fn, t(1.0, 1.0, 3.0, 0.0))


# ----- on kinks: the one-sided derivative along the direction, exactly -----

def exact_slope(fn, xs, vs) -> Fraction:
    """``f'(x; v)`` as the exact difference quotient of float64 evaluations at dyadic points
    (piecewise linear along the ray: two steps must agree)."""
    at = Fraction(float(fn(*xs)))
    slopes = set()
    for t in (2.0 ** -12, 2.0 ** -13):
        moved = [x + t * v for x, v in zip(xs, vs, strict=True)]
        assert all(torch.equal((m - x) / t, v) for m, x, v in zip(moved, xs, vs, strict=True))
        slopes.add((Fraction(float(fn(*moved))) - at) / Fraction(t))
    assert len(slopes) == 1, slopes
    return slopes.pop()


def pairing(grads, vs) -> Fraction:
    """``<g, v>`` exactly (dyadic entries)."""
    return sum((Fraction(float(a)) * Fraction(float(b)) for g, v in zip(grads, vs, strict=True)
                for a, b in zip(g.reshape(-1).tolist(), v.reshape(-1).tolist(), strict=True)),
               Fraction(0))


def t(*values):
    return torch.tensor(values, dtype=D)


KINKS = {
    # name: (program, point, directions)
    "fmax / fmin at equal sides": (
        lambda x, y: (torch.fmax(x, y) * t(1.5, -0.5, 2.0) + torch.fmin(x, y)).sum(),
        (t(1.0, -2.0, 0.5), t(1.0, -2.0, 0.75)),
        [(t(1.0, -1.0, 0.0), t(-1.0, 2.0, 1.0)), (t(-1.0, 0.5, 2.0), t(0.0, 0.5, -1.0))]),
    "kthvalue at tied entries": (
        lambda x, y: torch.kthvalue(x * 2 + y, 2).values * 3 + torch.kthvalue(
            torch.stack([x, y]), 1, dim=0).values.sum(),
        (t(1.0, 0.5, 1.0, 4.0), t(1.0, 2.0, 1.0, 0.0)),
        [(t(1.0, 0.0, -1.0, 0.0), t(-1.0, 0.0, 0.5, 1.0)),
         (t(0.0, 0.5, 1.0, -2.0), t(2.0, -1.0, 1.0, 0.0))]),
    "& and | of comparisons at their ties": (
        lambda x, y: torch.where((x > 0) & (y >= 1), x * 3, -x).sum() + torch.where(
            (x < y) | (x > 2), y, x).sum(),
        (t(0.0, 0.0, 2.0), t(1.0, 0.0, 2.0)),
        [(t(1.0, -1.0, 0.5), t(-1.0, 1.0, -1.0)), (t(-1.0, 2.0, -0.5), t(1.0, -1.0, 1.0))]),
    "fmod at a zero dividend (continuous: fmod is x nearby)": (
        lambda x, y: (torch.fmod(x, y) * t(1.5, -2.0)).sum() + torch.fmod(x, 0.75).sum(),
        (t(0.0, 0.0), t(1.25, -0.5)),
        [(t(1.0, -1.0), t(0.5, 1.0)), (t(-1.0, 1.0), t(0.0, -1.0))]),
    "trunc at 0 (continuous)": (
        lambda x, y: (torch.trunc(x) * y).sum() + x.sum() + torch.frac(x).sum(),
        (t(0.0, 0.0), t(1.0, -3.0)),
        [(t(1.0, -1.0), t(0.5, 1.0)), (t(-1.0, 1.0), t(0.0, -1.0))]),
    "x * sign(x) at 0": (
        lambda x, y: (x * torch.sgn(x) * t(1.0, 3.0)).sum() + (x * torch.sign(x)).sum()
        + y.sum(),
        (t(0.0, 0.0), t(1.0, 3.0)),
        [(t(1.0, -1.0), t(0.5, 1.0)), (t(-1.0, 1.0), t(0.0, -1.0))]),
}


@pytest.mark.parametrize("name", list(KINKS))
def test_the_gradient_along_a_direction_gives_the_exact_one_sided_derivative(name, path):
    fn, xs, directions = KINKS[name]
    for vs in directions:
        expected = exact_slope(fn, xs, vs)
        if path == "function":    # its own direction: an element of the Clarke set
            _, grads = value_and_grad(path, fn, *xs)
            assert all(torch.isfinite(g).all() for g in grads)
            continue
        value, grads = value_and_grad(path, fn, *xs, direction=vs)
        assert value == fn(*xs)
        assert pairing(grads, vs) == expected, (grads, vs, expected)


@pytest.mark.parametrize("v", [(3.0, -4.0), (-1.0, 0.0), (0.5, 1.5)])
def test_hypot_at_the_origin_is_the_gradient_of_the_norm_along_the_ray(v, path):
    fn = lambda x, y: torch.hypot(x, y).sum()  # noqa: E731
    xs, vs = (t(0.0), t(0.0)), (t(v[0]), t(v[1]))
    scale = mpmath.mpf(2) ** -40
    slope = mpmath.hypot(scale * v[0], scale * v[1]) / scale    # exact for this homogeneous f
    if path == "function":
        _, grads = value_and_grad(path, fn, *xs)
    else:
        _, grads = value_and_grad(path, fn, *xs, direction=vs)
        assert abs(float(grads[0]) * v[0] + float(grads[1]) * v[1] - float(slope)) < 1e-12
    assert float(grads[0]) ** 2 + float(grads[1]) ** 2 <= 1 + 1e-12   # in the unit ball


# ----- on jumps: refused where the output sees them, the number where it does not -----

JUMPS = {
    "floor at an integer": (lambda x, y: (torch.floor(x) * y).sum(), t(0.5, 2.0)),
    "ceil at an integer": (lambda x, y: (torch.ceil(x) * y).sum(), t(-1.0, 0.5)),
    "trunc at a nonzero integer": (lambda x, y: (torch.trunc(x) * y).sum(), t(0.5, -3.0)),
    "round at a half": (lambda x, y: (torch.round(x) * y).sum(), t(2.5, 0.25)),
    "round decimals=1 at a half": (lambda x, y: (torch.round(x, decimals=1) * y).sum(),
                                   t(0.25, 0.1)),
    "frac at a nonzero integer": (lambda x, y: (torch.frac(x) * y).sum(), t(0.5, 2.0)),
    "sign at 0": (lambda x, y: (torch.sign(x) * y).sum(), t(0.0, 1.0)),
    "remainder at a multiple": (lambda x, y: (torch.remainder(x, y) * y).sum(), t(3.0, 0.5)),
    "remainder by a constant at a multiple": (lambda x, y: (torch.remainder(x, 0.5) + y).sum(),
                                              t(1.0, 0.25)),
    "c % x at a divisor": (lambda x, y: (torch.remainder(3.0, x) * y).sum(), t(1.5, 0.25)),
    "fmod at a nonzero multiple": (lambda x, y: (torch.fmod(x, y) * y).sum(), t(-3.0, 0.25)),
    "fmod by a constant at a multiple": (lambda x, y: torch.fmod(x, 0.5).sum() + y.sum(),
                                         t(1.0, -1.5)),
    "div rounding_mode='floor' at an integer quotient": (
        lambda x, y: (torch.div(x, y, rounding_mode="floor") * y).sum(), t(3.0, 0.5)),
    "div rounding_mode='trunc' at an integer quotient": (
        lambda x, y: (torch.div(x, y, rounding_mode="trunc") * y).sum(), t(-3.0, 0.5)),
    "x // c at a multiple": (lambda x, y: ((x // 0.5) * y).sum(), t(1.5, 0.25)),
}


@pytest.mark.parametrize("name", list(JUMPS))
def test_a_jump_the_output_sees_is_refused(name, path):
    fn, x = JUMPS[name]
    y = t(1.5, -0.75)
    with pytest.raises(asd.NotLipschitzError, match="jump"):
        value_and_grad(path, fn, x, y)


HIDDEN = {
    # name: (program, point, direction): the jump reaches no output value
    "floor(x) * 0": (lambda x: (torch.floor(x) * 0).sum() + x.sum(), t(2.0, -1.0, 0.5)),
    "ceil under a saturated clamp": (lambda x: torch.clamp(torch.ceil(x), max=2.0).sum()
                                     + (x * 3).sum(), t(3.0, 4.0, 2.5)),
    "floor under a saturated clamp": (lambda x: torch.clamp(torch.floor(x), max=2.0).sum()
                                      + (x * 3).sum(), t(3.0, 4.0, 3.5)),
    "remainder under a saturated clamp": (lambda x: torch.clamp(torch.remainder(x, 1.0),
                                                                max=0.0).sum() + x.sum(),
                                          t(2.0, -1.0, 0.0)),
    "fmod under saturated clamps": (lambda x: (torch.clamp(torch.fmod(x, 1.0), max=0.0)
                                               + torch.clamp(torch.fmod(-x, 1.0), min=0.0)
                                               ).sum() + x.sum(), t(2.0, 3.0, 1.0)),
    "fmod and remainder by a traced divisor under saturated clamps": (lambda x: (
        torch.clamp(torch.fmod(x[:1], x[1:2]), max=0.0) + torch.clamp(torch.remainder(
            x[:1], x[1:2]), max=0.0) + torch.clamp(torch.fmod(-x[:1], x[1:2]), min=0.0)
    ).sum() + x.sum(), t(2.0, 1.0, 0.5)),
    "div rounding_mode='floor' times 0": (lambda x: (torch.div(
        x, 0.5, rounding_mode="floor") * 0).sum() + (x * 3).sum(), t(1.0, -1.5, 2.0)),
}


@pytest.mark.parametrize("name", list(HIDDEN))
def test_a_jump_no_output_sees_gives_the_number(name, path):
    fn, x = HIDDEN[name]
    for v in (torch.ones_like(x), -torch.ones_like(x), t(1.0, -1.0, 0.5)[: x.numel()]):
        expected = exact_slope(fn, (x,), (v,))
        if path == "function":
            value, (g,) = value_and_grad(path, fn, x)
        else:
            value, (g,) = value_and_grad(path, fn, x, direction=(v,))
        assert value == fn(x)
        assert pairing((g,), (v,)) == expected, (g, v, expected)
        if path == "function":
            break


def test_fmax_refuses_nan_in_a_differentiated_operand(path):
    """PyTorch's fmax takes ``y`` where ``x * c`` is NaN; asd differentiates finite values
    and says so (a constant's NaN is fine: see SMOOTH)."""
    c = t(1.0, float("nan"), 2.0)
    with pytest.raises(asd.NonFiniteError, match="fmax"):
        value_and_grad(path, lambda x, y: torch.fmax(x * c, y).sum(), t(1.0, 2.0, 3.0),
                       t(0.5, 0.5, 0.5))


def test_a_cast_to_integers_before_bitwise_ops_is_refused_on_every_path(path):
    """``x.long() & 3`` truncates: at ``x = 1`` it jumps, where PyTorch's autograd (which cuts
    the cast) answered 3 on the native path; the advice (torch.trunc) gives the number."""
    fn = lambda x: (x.long() & 3).sum().double() * x.sum()  # noqa: E731
    for x in (t(1.0, 2.0), t(1.5, 2.5)):
        with pytest.raises(asd.UnsupportedError, match=r"torch\.trunc"):
            value_and_grad(path, fn, x)
    advised = lambda x: torch.trunc(x).sum() * x.sum()  # noqa: E731
    value, (g,) = value_and_grad(path, advised, t(1.5, 2.5))
    assert value == advised(t(1.5, 2.5)) and torch.equal(g, t(3.0, 3.0))
    with pytest.raises(asd.NotLipschitzError):
        value_and_grad(path, advised, t(1.0, 2.0))


# ----- the native fast path: PyTorch's derivative off the jumps, asd's sweep on them -----

MARGINS = {
    # name: (program, a point off its jumps, a point on one)
    "floor": (lambda x: (torch.floor(x) * x).sum(), t(0.5, -1.25), t(0.5, -1.0)),
    "ceil": (lambda x: torch.ceil(x).sum() + x.sum(), t(0.5, -1.25), t(3.0, -1.25)),
    "trunc": (lambda x: (torch.trunc(x) * x).sum(), t(0.5, -1.25), t(0.5, 2.0)),
    "frac": (lambda x: torch.frac(x).sum(), t(0.5, -1.25), t(-4.0, 0.25)),
    "round at a half": (lambda x: (torch.round(x) * x).sum(), t(0.75, -1.25), t(0.75, -1.5)),
    "hypot at the origin": (lambda x: torch.hypot(x[0], x[1]), t(0.0, -1.25), t(0.0, 0.0)),
}


def native_flag(fn, x) -> bool:
    """Whether the instrumented native program flags a tie at ``x`` (PyTorch's autograd
    answers only where it does not)."""
    prog = frontend.import_program(fn, x)
    form = prog.native_program(frozenset(prog.user_inputs))
    assert not isinstance(form, str), form
    res = form.module(*form.flat([x]))
    return frontend.native.flag_on_host(res[2:], res[1])


@pytest.mark.parametrize("name", list(MARGINS))
def test_the_native_path_flags_exactly_the_jumps(name):
    fn, off, on = MARGINS[name]
    assert not native_flag(fn, off)
    assert native_flag(fn, on)


def test_round_with_decimals_and_the_rounded_divisions_have_no_native_form():
    for fn in (lambda x: torch.round(x, decimals=1).sum(),
               lambda x: torch.div(x, 0.5, rounding_mode="floor").sum(),
               lambda x: torch.fmod(x, 0.5).sum() + torch.remainder(x, 0.5).sum()):
        prog = frontend.import_program(fn, t(0.3, 0.7))
        assert isinstance(prog.native_program(frozenset(prog.user_inputs)), str)


def test_a_bool_cast_is_the_comparison_with_zero(path):
    """``x.bool()`` is ``x != 0``: off 0 a constant mask, at 0 a tie decided along the ray
    (the two sides of this where agree there, so the number exists)."""
    fn = lambda x: torch.where(x.bool(), x * 3, x * 0.5 + x * x).sum()  # noqa: E731
    value, (g,) = value_and_grad(path, fn, t(1.0, -0.5))
    assert value == fn(t(1.0, -0.5)) and torch.equal(g, t(3.0, 3.0))
    if path != "function":
        for v in (t(1.0, -1.0), t(-1.0, 2.0)):
            _, (g,) = value_and_grad(path, fn, t(0.0, 2.0), direction=(v,))
            assert pairing((g,), (v,)) == exact_slope(fn, (t(0.0, 2.0),), (v,))


def test_diagonal_and_xor_of_comparisons_run_natively_off_ties():
    """diagonal is linear and ``^`` of comparisons a boolean whose ties the comparisons
    flag: neither stops PyTorch's autograd from answering where no tie matters."""
    fn = lambda x: torch.where((x > 0) ^ (x < 1), x, -x).sum() + torch.diagonal(  # noqa: E731
        torch.outer(x, x), 1).sum()
    assert not native_flag(fn, t(0.5, 2.0, -1.0))
    assert native_flag(fn, t(0.0, 2.0, -1.0))
