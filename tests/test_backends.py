"""One engine, every array library: the same programs on numpy, torch and JAX arrays.

numpy's results are the reference (the rest of the suite verifies them against exact oracles);
on kinks (relu and abs at 0, tied maxima) the exact ``fractions.Fraction`` oracle of
`asd.testing.exact` checks the other libraries directly as well. Results must come back in
the arguments' library, dtype and device, and a primitive not yet ported to the array API
must refuse other libraries' arrays with a clear error, never convert them.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, reject, settings

import asd
from asd.core import backend
from asd.core.linear import Diagonal, Index, MatMul, Reshape, Sum, Transpose
from asd.testing.exact import (
    DegenerateTie,
    directional_derivative,
    limiting_gradient,
    limiting_jacobian,
)
from tests.programs import assert_exact, programs, run, run_exact, vector_programs

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from tests.array_libraries import LIBRARIES, LIBS, host, same_kind  # noqa: E402

# ----- the libraries under test -----

def tol(dtype) -> float:
    return 1e-12 if dtype == np.float64 else 2e-5


# ----- programs (numpy reference via asd on numpy arrays) -----

def mlp(params, x):
    w1, b1, w2, b2 = params
    h = asd.relu(x @ w1 + b1)
    z = h @ w2 + b2
    return (asd.logsumexp(z, axis=1) - z[:, 0]).mean() + 0.1 * asd.numpy.max(h)


def kinks(x):
    """relu, abs, maximum, minimum, where and clip, each at a tie when ``x == 0``."""
    a = asd.relu(x[0]) - asd.relu(-x[0])
    b = asd.abs(x[1]) + asd.maximum(x[2], x[3]) - asd.minimum(x[2], -x[3])
    c = asd.numpy.where(x[4] > x[5], x[4], x[5]) + asd.clip(x[6], 0.0, 1.0)
    return a + b + c + asd.numpy.max(x[:4]) - asd.numpy.min(x[4:])


def structure(x):
    y = asd.numpy.concatenate([x, 2.0 * x[::-1]])
    m = asd.numpy.reshape(y, (2, -1)).T
    s = asd.softmax(m, axis=0) * asd.log_softmax(m, axis=1)
    picked = m[[0, 0, 2], 1]  # repeated indices: the pull scatter-adds
    pairs = asd.numpy.stack([x, -x], axis=1)[:, 1]
    return (asd.numpy.sum(s) + asd.numpy.sum(asd.numpy.tanh(picked) * asd.numpy.exp(picked))
            + asd.numpy.sum(pairs * pairs * x))


def kinks_exact(x):
    """`kinks` in plain numpy, for the exact oracle (object arrays of jets)."""
    a = np.maximum(x[0], 0) - np.maximum(-x[0], 0)
    b = abs(x[1]) + np.maximum(x[2], x[3]) - np.minimum(x[2], -x[3])
    c = np.maximum(x[4], x[5]) + np.minimum(np.maximum(x[6], 0), 1)
    top = np.maximum(np.maximum(x[0], x[1]), np.maximum(x[2], x[3]))
    bottom = np.minimum(np.minimum(x[4], x[5]), x[6])
    return a + b + c + top - bottom


RNG = np.random.default_rng(7)
MLP_PARAMS = [RNG.standard_normal((3, 4)), np.zeros(4), RNG.standard_normal((4, 2)),
              np.zeros(2)]
MLP_X = np.zeros((5, 3))  # every hidden unit at relu's kink, every row of max tied


def coordinate(n: int, i: int) -> np.ndarray:
    e = np.zeros(n)
    e[i] = 1.0
    return e


# ----- subgradients on kinks -----

@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("i", [0, 2, 4, 6])
def test_kinks_along_coordinates_match_numpy_and_the_exact_oracle(lib, i):
    """A coordinate vector leaves most ties alive along the ray: ``w`` decides them."""
    conv, dtype = LIBRARIES[lib]
    x = np.zeros(7)
    v, w = coordinate(7, i), np.array([0.5, -1.0, 1.5, -0.25, 2.0, -2.5, 0.75])
    ref = asd.subgrad(kinks, directions=[v, w])(x.astype(dtype))
    got = asd.subgrad(kinks, directions=[conv(v), conv(w)])(conv(x))
    same_kind(got, conv(x))
    np.testing.assert_allclose(host(got), ref, atol=tol(dtype))
    _, exact = limiting_gradient(kinks_exact, x, v, w=w)
    np.testing.assert_array_equal(host(got), np.asarray(exact, dtype=float))


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("i", [1, 3, 5])
def test_ties_persisting_along_a_coordinate_draw_the_same_w_as_numpy(lib, i):
    conv, dtype = LIBRARIES[lib]
    x, v = np.zeros(7), coordinate(7, i)
    ref = asd.value_and_subgrad(kinks, direction=v, seed=5, diagnostics=True)(x.astype(dtype))
    got = asd.value_and_subgrad(kinks, direction=conv(v), seed=5, diagnostics=True)(conv(x))
    np.testing.assert_allclose(host(got[1]), ref[1], atol=tol(dtype))
    assert got[2].element == ref[2].element


@pytest.mark.parametrize("lib", LIBS)
def test_degenerate_ties_go_to_the_series_on_host_copies(lib):
    """relu(x0**2 - x1) - relu(x1 - x0**2) at 0 along e0: the tangent is 0, the series says
    the tied quantity grows like x0**2, in every library."""
    conv, dtype = LIBRARIES[lib]

    def f(x):
        h = x[0] * x[0] - x[1]
        return asd.relu(h) - asd.relu(-h) + asd.relu(h)

    x, v = np.zeros(2), coordinate(2, 0)
    ref = asd.value_and_subgrad(f, direction=v, diagnostics=True)(x.astype(dtype))
    got = asd.value_and_subgrad(f, direction=conv(v), diagnostics=True)(conv(x))
    np.testing.assert_allclose(host(got[1]), ref[1], atol=tol(dtype))
    assert [str(d) for d in got[2].decisions] == [str(d) for d in ref[2].decisions]
    assert any(d.how == "series" for d in got[2].decisions)


@pytest.mark.parametrize("lib", LIBS)
def test_mlp_with_ties_matches_numpy_with_a_seeded_random_direction(lib):
    conv, dtype = LIBRARIES[lib]
    params = [p.astype(dtype) for p in MLP_PARAMS]
    ref = asd.subgrad(mlp, seed=3)(params, MLP_X.astype(dtype))
    got = asd.subgrad(mlp, seed=3)([conv(p) for p in MLP_PARAMS], conv(MLP_X))
    for g, r, p in zip(got, ref, MLP_PARAMS, strict=True):
        same_kind(g, conv(p))
        np.testing.assert_allclose(host(g), r, atol=10 * tol(dtype))


@pytest.mark.parametrize("lib", LIBS)
def test_structure_and_softmax_family_match_numpy(lib):
    conv, dtype = LIBRARIES[lib]
    x = RNG.standard_normal(4)
    ref_value, ref = asd.value_and_subgrad(structure)(x.astype(dtype))
    value, got = asd.value_and_subgrad(structure)(conv(x))
    assert type(value) is type(conv(x))
    np.testing.assert_allclose(float(value), float(ref_value), rtol=tol(dtype))
    np.testing.assert_allclose(host(got), ref, atol=10 * tol(dtype))


# ----- directional derivatives and Jacobians -----

@pytest.mark.parametrize("lib", LIBS)
def test_directional_derivative_on_kinks_is_exact(lib):
    conv, _ = LIBRARIES[lib]
    x, v = np.zeros(7), np.array([1.0, -1.0, 2.0, 2.0, -3.0, -3.0, 1.0])
    value, dot = asd.directional(kinks)(conv(x), conv(v))
    assert type(dot) is type(conv(x))
    assert float(dot) == float(directional_derivative(kinks_exact, x, v))
    assert float(value) == 0.0


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_at_a_kink_matches_numpy(lib, mode):
    conv, dtype = LIBRARIES[lib]

    def f(x):
        return asd.relu(x[:3] - x[3:]) * x[:3] + asd.numpy.reshape(x, (2, 3)).sum(axis=0)

    x = np.array([1.0, 0.0, -1.0, 1.0, 0.0, 2.0])  # entries 0 and 1 tied
    v = np.array([1.0, -1.0, 0.5, 0.0, 0.0, 0.0])
    ref = asd.jacobian(f, direction=v, mode=mode)(x.astype(dtype))
    got = asd.jacobian(f, direction=conv(v), mode=mode)(conv(x))
    assert type(got) is type(conv(x)) and tuple(got.shape) == (3, 6)
    np.testing.assert_allclose(host(got), ref, atol=tol(dtype))


# ----- array API user code -----

def array_api_program(x):
    """Written against the standard only: runs on whatever library ``x`` comes from."""
    xp = x.__array_namespace__()
    h = xp.maximum(xp.matmul(xp.reshape(x, (2, 2)), xp.permute_dims(xp.reshape(x, (2, 2)),
                                                                     (1, 0))), 0.0)
    y = xp.concat([xp.reshape(h, (-1,)), xp.abs(x)])
    return xp.sum(xp.where(y > 0.5, y, 0.5)) + xp.max(xp.exp(-x)) + xp.mean(xp.tanh(y))


@pytest.mark.parametrize("lib", ["numpy", *LIBS])
def test_array_api_user_code_traces_in_every_library(lib):
    conv, dtype = LIBRARIES.get(lib, (np.asarray, np.float64))
    x = np.array([0.0, 1.0, -0.5, 0.0])
    v = np.array([1.0, -1.0, 0.5, 2.0])
    ref = asd.subgrad(array_api_program, direction=v)(x)
    got = asd.subgrad(array_api_program, direction=conv(v))(conv(x))
    np.testing.assert_allclose(host(got), ref, atol=10 * tol(dtype))
    assert type(got) is type(conv(x))


def test_array_namespace_creates_arrays_in_the_arguments_library():
    seen = []

    def f(x):
        xp = x.__array_namespace__()
        seen.append(xp.zeros(2, dtype=xp.float32))
        return xp.sum(x * xp.asarray(2.0))

    assert float(asd.subgrad(f)(torch.ones(2))[0]) == 2.0
    assert isinstance(seen[0], torch.Tensor) and seen[0].dtype == torch.float32


# ----- what is not ported refuses, clearly -----

@pytest.mark.parametrize("lib", LIBS)
def test_an_unported_primitive_names_itself_and_says_numpy_only(lib):
    conv, _ = LIBRARIES[lib]
    with pytest.raises(asd.UnsupportedError, match=r"cbrt .*numpy arrays only so far"):
        asd.subgrad(lambda x: asd.numpy.cbrt(x).sum())(conv(np.ones(3)))
    with pytest.raises(asd.UnsupportedError, match=r"logaddexp .*numpy arrays only"):
        asd.subgrad(lambda x: asd.numpy.logaddexp(x, x).sum())(conv(np.ones(3)))


def test_a_kernel_missing_for_a_library_refuses_instead_of_copying():
    with pytest.raises(asd.UnsupportedError, match="scatter_add has no cupy implementation"):
        backend.kernel("scatter_add", type("cp", (), {"__name__": "cupy"})())


def test_a_speed_only_kernel_falls_back_to_its_array_api_default():
    """relu's float mask has a torch kernel only; every other library (numpy included) gets
    the array-API default instead of a refusal."""
    cupy = type("cp", (), {"__name__": "cupy"})()

    def default(x):
        return x

    assert backend.kernel("positive", cupy, default) is default
    assert backend.kernel("positive", np, default) is default
    assert backend.kernel("positive", backend.namespace(torch.ones(1)), default) is not default


# ----- the linear maps, batched, in every library -----

MAPS = [
    lambda: Diagonal(RNG.standard_normal((3, 1)), (3, 1), (3, 4)),
    lambda: Sum((0,), False, (3, 4), (4,)),
    lambda: Sum(None, True, (3, 4), (1, 1)),
    lambda: Reshape((3, 4), (2, 6)),
    lambda: Transpose((1, 0), (3, 4)),
    lambda: Index((np.array([0, 0, 2]), slice(1, 3)), (3, 4), (3, 2)),
    lambda: Index((slice(None), 1), (3, 4), (3,)),
    lambda: MatMul(RNG.standard_normal((4, 2)), "a", (3, 4), (4, 2), (3, 2)),
    lambda: MatMul(RNG.standard_normal(3), "b", (3,), (3, 4), (4,)),
]


def _converted(lin, conv):
    """The same map with its arrays in another library (as a rule there builds it)."""
    for slot in ("d", "other"):
        value = getattr(lin, slot, None)
        if isinstance(value, np.ndarray):
            setattr(lin, slot, conv(value))
    return lin


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("make", MAPS)
def test_maps_push_pull_and_magnitude_in_every_library(lib, make):
    conv, dtype = LIBRARIES[lib]
    lin = make()
    other = _converted(_copy(lin), conv)
    for batch in ((), (5,)):
        t = RNG.standard_normal(batch + lin.in_shape)
        ct = RNG.standard_normal(batch + lin.out_shape)
        pushed, pulled = other.push(conv(t)), other.pull(conv(ct))
        assert type(pushed) is type(conv(t)) and type(pulled) is type(conv(t))
        np.testing.assert_allclose(host(pushed), lin.push(t.astype(dtype)), atol=10 * tol(dtype))
        np.testing.assert_allclose(host(pulled), lin.pull(ct.astype(dtype)), atol=10 * tol(dtype))
        np.testing.assert_allclose(host(other.magnitude().push(conv(np.abs(t)))),
                                   lin.magnitude().push(np.abs(t)), atol=10 * tol(dtype))


def _copy(lin):
    clone = object.__new__(type(lin))
    for cls in type(lin).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if hasattr(lin, slot):
                setattr(clone, slot, getattr(lin, slot))
    return clone


# ----- numpy keeps its fast path -----

def test_numpy_sweeps_never_call_array_api_compat(monkeypatch):
    import array_api_compat

    def refuse(*args, **kwargs):
        raise AssertionError("array_api_compat called on a numpy sweep")

    monkeypatch.setattr(array_api_compat, "array_namespace", refuse)
    g = asd.subgrad(mlp, seed=3)(MLP_PARAMS, MLP_X)
    assert all(type(a) is np.ndarray for a in g)
    assert backend.namespace(np.ones(2), 1.0, None) is np


# ----- devices -----

@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_stay_on_the_gpu_and_match_cpu():
    x = torch.zeros(7, dtype=torch.float64)
    v = torch.tensor(coordinate(7, 2))
    cpu = asd.subgrad(kinks, direction=v)(x)
    gpu = asd.subgrad(kinks, direction=v.cuda())(x.cuda())
    assert gpu.device.type == "cuda"
    np.testing.assert_array_equal(host(gpu), host(cpu))


# ----- traced programs -----

@pytest.mark.parametrize("lib", ["torch-float32", "jax"])
def test_a_traced_program_keeps_the_library_and_refuses_unported_nodes(lib):
    conv, dtype = LIBRARIES[lib]
    x = RNG.standard_normal(4)
    program = asd.trace(structure)(conv(x))
    assert "float32[4]" in str(program)
    value = program(conv(x))
    assert type(value) is type(conv(x))
    np.testing.assert_allclose(float(value), float(structure(x.astype(dtype))), rtol=1e-5)
    cube_root = asd.trace(lambda x: asd.numpy.cbrt(x))(np.ones(3))
    with pytest.raises(asd.UnsupportedError, match=r"cbrt .*numpy arrays only"):
        cube_root(conv(np.ones(3)))


# ----- random programs with planted ties, against the exact oracle -----

PORTED = ("relu", "abs", "maximum", "minimum", "where", "add", "subtract", "multiply",
          "negative", "divide_by_constant", "add_constant", "multiply_constant",
          "integer_power", "sum", "matmul", "dot", "index", "square", "transpose", "reshape",
          "concatenate", "stack", "take", "clip", "clip_traced", "max", "min")
"""The ops of tests/programs.py whose primitives are ported to the array API."""


@settings(max_examples=200, deadline=None)
@given(programs(names=PORTED))
def test_random_programs_on_torch_give_the_exact_limiting_gradient(case):
    """Programs written with numpy calls and numpy constants, run on float64 tensors: the
    tracer sends the calls to asd's primitives and the constants to torch."""
    program, x, v = case
    if any(op.name not in PORTED for op in program.ops):
        reject()
    f = partial(run, program)
    w = np.linspace(1.0, -0.5, x.size).reshape(x.shape) + 0.125
    try:
        _, expected = limiting_gradient(f, x, v, w=w)
    except DegenerateTie:
        reject()
    got = asd.subgrad(f, directions=[torch.tensor(v), torch.tensor(w)])(torch.tensor(x))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert_exact(host(got), expected, "subgrad on torch")


@settings(max_examples=100, deadline=None)
@given(programs(names=PORTED))
def test_random_programs_on_torch_give_the_exact_directional_derivative(case):
    program, x, v = case
    if any(op.name not in PORTED for op in program.ops):
        reject()
    f = partial(run, program)
    value, derivative = asd.directional(f)(torch.tensor(x), torch.tensor(v))
    assert_exact(host(value), run_exact(program, x), "value on torch")
    assert_exact(host(derivative), directional_derivative(f, x, v), "derivative on torch")


@settings(max_examples=100, deadline=None)
@given(vector_programs(names=PORTED))
def test_random_vector_programs_on_torch_give_the_exact_limiting_jacobian(case):
    program, x, v = case
    if any(op.name not in PORTED for op in program.ops):
        reject()
    f = partial(run, program)
    w = np.linspace(1.0, -0.5, x.size).reshape(x.shape) + 0.125
    try:
        expected = limiting_jacobian(f, x, v, w=w)
    except DegenerateTie:
        reject()
    got = asd.jacobian(f, directions=[torch.tensor(v), torch.tensor(w)])(torch.tensor(x))
    assert isinstance(got, torch.Tensor)
    assert_exact(host(got), expected, "jacobian on torch")


def test_finiteness_is_tested_per_leaf_with_one_device_wait():
    torch = pytest.importorskip("torch")
    good, bad = torch.ones(3), torch.tensor([1.0, float("nan")])
    assert backend.first_nonfinite_of([good, np.ones(2), good]) is None
    assert backend.first_nonfinite_of([good, np.array([np.inf]), bad]) == 1
    assert backend.first_nonfinite_of([good, good, bad, np.ones(1)]) == 2
    with pytest.raises(asd.NonFiniteError, match=r"argument 1 has non-finite"):
        asd.subgrad(lambda a, b: (a * b).sum(), (0, 1))(good, torch.tensor([1.0, 2.0,
                                                                            float("inf")]))


def test_tie_counts_are_the_tied_entries_on_every_library():
    """A rule's reported tie count is how many entries it asked the tangent of, on torch and
    JAX as on numpy (not the size of the whole tangent)."""
    def f(x, b):
        return (asd.relu(x).sum() + asd.maximum(x, b).sum()) * 0.5

    x = np.array([0.0, 1.0, 0.0, -2.0, 3.0, 0.0])
    b = np.array([1.0, 1.0, 0.5, 0.0, 3.0, 2.0])  # x == b at entries 1 and 4
    v = np.array([1.0, -1.0, -0.5, 2.0, 0.25, 1.5])
    want = asd.asd(f, direction=v)(x, b)
    for lib in (torch.tensor, jax.numpy.asarray):
        got = asd.asd(f, direction=v)(lib(x), lib(b))
        assert got.ties == want.ties
        np.testing.assert_array_equal(np.asarray(got.subgradient), want.subgradient)


@pytest.mark.parametrize("shapes", [((2, 1, 1), (1,)), ((2, 3, 4), (4,)), ((2, 3, 4), (4, 5)),
                                    ((2, 3), (5, 3, 2)), ((2, 2, 3), (4, 3, 2))])
def test_an_n_d_dot_runs_on_torch_arrays(shapes):
    """``np.dot`` of an N-d operand is an einsum node on numpy (numpy's own summation order),
    whose rule runs on numpy only: on torch arrays it was refused (the random-program test
    drew ``dot`` of a (2, 1, 1) stack). There it is a matmul of reshaped operands, with the
    gradient numpy's sweep gives."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])

    def f(x):
        return (asd.relu(np.dot(x, b)) ** 2).sum()

    value, got = asd.value_and_subgrad(f)(torch.tensor(a))
    want_value, want = asd.value_and_subgrad(f)(a)
    assert np.allclose(got.numpy(), want, rtol=1e-12) and np.isclose(float(value), want_value)
