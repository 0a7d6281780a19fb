"""No silent wrong number at the API boundary (issue 23): arguments, directions, cotangents,
compiled signatures, error states, aliasing writes. Each case gives the right number or a
clear asd error; the oracles are exact (Fractions along the ray) or numpy's own result."""

import decimal
import hashlib
import math
import pickle
import struct
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import asd
from asd.testing.exact import directional_derivative, limiting_gradient


def relu(x):
    return np.maximum(x, 0.0)


# ----- a direction's scale never changes the result -----

def kink_program(x):
    """A tie decided by the first-order tangent (max) and one decided at second order
    (relu(x0**2 - x1) along v with v1 = 0), where tiny directions underflow."""
    return np.maximum(x[0], x[2]) + relu(x[0] * x[0] - x[1]) * 3.0


SCALES = [1.0, 2.0 ** -1074, 1e-320, 1e-200, 1e-160, 1e160, 1e300, 1.7e308]


@pytest.mark.parametrize("scale", SCALES)
def test_subgradient_does_not_depend_on_the_direction_scale(scale):
    x = np.zeros(3)
    unit = np.array([1.0, 0.0, 0.5])
    v = unit * scale
    _, exact = limiting_gradient(kink_program, x, [Fraction(1), 0, Fraction(1, 2)])
    expected = np.array([float(g) for g in exact])
    np.testing.assert_array_equal(asd.subgrad(kink_program, direction=v)(x), expected)
    np.testing.assert_array_equal(
        asd.subgrad(kink_program, directions=[v, -v])(x), expected)
    np.testing.assert_array_equal(asd.jacobian(kink_program, direction=v)(x), expected)


@pytest.mark.parametrize("scale", SCALES)
def test_lexicographic_levels_do_not_depend_on_their_scale(scale):
    # relu(x0 - x1) along v = (1, 1) stays tied: the second direction w decides it
    f = lambda x: relu(x[0] - x[1])  # noqa: E731
    v, w = np.array([1.0, 1.0]), np.array([1.0, 0.0])
    g = asd.subgrad(f, directions=[v, w * scale])(np.zeros(2))
    np.testing.assert_array_equal(g, [1.0, -1.0])
    g = asd.subgrad(f, directions=[v * scale, -w * scale])(np.zeros(2))
    np.testing.assert_array_equal(g, [0.0, 0.0])


@pytest.mark.parametrize("scale", SCALES)
def test_the_norm_at_zero_along_any_scale(scale):
    # the limiting gradient of |x| at 0 along v is v / |v|, and f'(0; v) = |v| (mpmath)
    v = np.array([1.0, 0.5]) * scale
    exact = [mpmath.mpf(float(d)) for d in v]
    length = mpmath.sqrt(sum(d * d for d in exact))
    unit = [float(d / length) for d in exact]
    for kw in ({"direction": v}, {"direction": list(v)}, {"directions": [v, -v]}):
        g = asd.subgrad(asd.norm, **kw)(np.zeros(2))
        np.testing.assert_allclose(g, unit, rtol=4e-16, atol=0)
    np.testing.assert_allclose(asd.jacobian(asd.norm, direction=v)(np.zeros(2)), unit,
                               rtol=4e-16, atol=0)
    if length > mpmath.mpf(np.finfo(float).max):  # f'(0; v) itself is past the float range
        with pytest.raises(asd.NonFiniteError, match="smaller direction"):
            asd.directional(asd.norm)(np.zeros(2), v)
        return
    _, dot = asd.directional(asd.norm)(np.zeros(2), v)
    assert dot == pytest.approx(float(length), rel=4e-16, abs=0)


@pytest.mark.parametrize("scale", [1e-320, 2.0 ** -1070, 1e-200, 1e200, 1e308])
def test_directional_derivative_at_any_scale_is_the_exact_one_rounded(scale):
    # piecewise polynomial: the exact f'(x; v) is a Fraction, rounded once to float
    x = np.zeros(3)
    v = np.array([0.5, -0.25, 0.375]) * scale
    exact = directional_derivative(kink_program, x, [Fraction(d) for d in v])
    _, dot = asd.directional(kink_program)(x, v)
    assert dot == float(exact)
    result = asd.asd(kink_program, direction=v)(x)
    assert result.dini == float(exact)
    np.testing.assert_array_equal(result.direction, v)  # reported as given


def test_a_directional_derivative_past_the_float_range_is_refused():
    with pytest.raises(asd.NonFiniteError, match="smaller direction"):
        asd.directional(lambda x: 3.0 * x)(1.0, 1e308)
    with pytest.raises(asd.NonFiniteError, match="smaller direction"):
        asd.directional(asd.norm)(np.zeros(2), np.array([1.5e308, 1.5e308]))
    with pytest.raises(asd.NonFiniteError, match="smaller direction"):
        asd.asd(lambda x: 3.0 * x, direction=1e308)(1.0)
    # the advice works: a smaller direction, the derivative scaling with it
    assert asd.directional(lambda x: 3.0 * x)(1.0, 5e307)[1] == 3.0 * 5e307


def test_tiny_directions_on_torch_float32_arguments():
    torch = pytest.importorskip("torch")
    x = torch.zeros(3, dtype=torch.float32)
    v = np.array([1.0, 0.0, 0.5]) * 1e-300  # far below float32's range
    g = asd.subgrad(kink_program, direction=v)(x)
    assert g.dtype == torch.float32
    _, exact = limiting_gradient(kink_program, np.zeros(3), [Fraction(1), 0, Fraction(1, 2)])
    np.testing.assert_array_equal(g.numpy(), [float(e) for e in exact])


@pytest.mark.parametrize("scale", SCALES)
def test_clarke_and_the_asd_routine_at_any_direction_scale(scale):
    v = np.array([1.0, 0.5]) * scale
    exact = [mpmath.mpf(float(d)) for d in v]
    length = mpmath.sqrt(sum(d * d for d in exact))
    unit = np.array([float(d / length) for d in exact])
    sample = asd.clarke(asd.norm, directions=np.array([v, -v]))(np.zeros(2))
    np.testing.assert_allclose(sample.gradients, [unit, -unit], rtol=4e-16, atol=0)
    if length > mpmath.mpf(np.finfo(float).max):
        with pytest.raises(asd.NonFiniteError, match="smaller direction"):
            asd.norm.asd(np.zeros(2), direction=v)
        return
    _, dini, grad = asd.norm.asd(np.zeros(2), direction=v)
    np.testing.assert_allclose(grad, unit, rtol=4e-16, atol=0)
    assert dini == pytest.approx(float(length), rel=4e-16, abs=0)


# ----- dict directions are matched by key -----

def test_a_dict_direction_in_another_key_order():
    f = lambda d: asd.maximum(d["a"], d["b"])  # noqa: E731
    point = {"a": 0.0, "b": 0.0}
    g = asd.subgrad(f, direction={"b": 1.0, "a": -1.0})(point)
    assert list(g) == ["a", "b"] and (g["a"], g["b"]) == (0.0, 1.0)
    g = asd.subgrad(f, directions=[{"b": 1.0, "a": 1.0}, {"b": -1.0, "a": 0.0}])(point)
    assert (g["a"], g["b"]) == (1.0, 0.0)
    _, dot = asd.directional(f)(point, {"b": 2.0, "a": -1.0})
    assert dot == 2.0
    nested = lambda p: asd.relu(p["w"][0] - p["w"][1]) * p["s"]  # noqa: E731
    g = asd.subgrad(nested, direction={"s": 0.0, "w": np.array([1.0, 0.0])})(
        {"w": np.zeros(2), "s": 2.0})
    np.testing.assert_array_equal(g["w"], [2.0, -2.0])


def test_a_dict_direction_with_other_keys_is_still_refused():
    with pytest.raises(asd.ShapeError, match="keys"):
        asd.subgrad(lambda d: d["a"] * d["b"], direction={"a": 1.0, "c": 1.0})(
            {"a": 1.0, "b": 2.0})


# ----- asd's own arithmetic ignores the caller's np.errstate -----

def errstate_program(x):
    return asd.relu(x[0] * x[1]) + asd.norm(x) + np.sum(x * x)


ERRSTATE_CALLS = {
    "subgrad": lambda x: asd.subgrad(errstate_program, seed=0)(x),
    "full": lambda x: asd.value_and_subgrad(errstate_program, full=True, seed=0)(x),
    "asd": lambda x: asd.asd(errstate_program, direction=np.array([1e-200, 1e-300]))(x),
    "vjp": lambda x: asd.vjp(lambda x: x * x)(x)[1](np.array([1e-200, 1e-200])),
    "directional": lambda x: asd.directional(errstate_program)(x, np.array([1e-300, 1e-300])),
    "jacobian": lambda x: asd.jacobian(lambda x: x * 1e-200)(x),
    "trace": lambda x: asd.trace(errstate_program)(x),
    "jit": lambda x: [asd.jit(asd.value_and_subgrad(errstate_program))(x) for _ in range(3)],
    "jit plain": lambda x: [asd.jit(errstate_program)(x) for _ in range(3)],
    "clarke": lambda x: asd.clarke(errstate_program, n=4, seed=0)(x).gradients,
    "lexicographic": lambda x: asd.subgrad(lambda x: asd.relu(x[0] - 1e-200),
                                           directions=[np.array([0.0, 1.0]),
                                                       np.array([1e-300, 0.0])])(x),
}


@pytest.mark.parametrize("name", ERRSTATE_CALLS)
def test_a_raising_errstate_does_not_reach_asd_internals(name):
    x = np.array([1e-200, 1.0])
    expected = ERRSTATE_CALLS[name](x)
    with np.errstate(all="raise"):
        got = ERRSTATE_CALLS[name](x)
    if name not in ("trace", "asd"):
        for a, b in zip(np.atleast_1d(np.asarray(expected, dtype=object)).ravel(),
                        np.atleast_1d(np.asarray(got, dtype=object)).ravel(), strict=True):
            assert str(a) == str(b)


def test_errstate_raise_still_names_a_non_finite_value():
    with np.errstate(all="raise"), pytest.raises(asd.NonFiniteError):
        asd.subgrad(lambda x: np.log(x).sum())(np.array([-1.0, 1.0]))


# ----- complex values: refused, never truncated -----

COMPLEX_PROGRAMS = {
    "add": (lambda x: np.sum(np.abs(x + 1j)), "1j"),
    "array constant": (lambda x: np.sum(np.abs(x + np.array([1j, 2j]))), "complex128"),
    "matmul": (lambda x: np.abs(x @ np.array([1j, 2j])), "complex128"),
    "where": (lambda x: np.sum(np.abs(np.where(x > 0, x, 1j))), "1j"),
    "astype": (lambda x: np.sum(np.abs(x.astype(complex) + 1.0)), "cast"),
    "maximum": (lambda x: np.real(asd.maximum(x, 1j)).sum(), "1j"),
}


@pytest.mark.parametrize("name", COMPLEX_PROGRAMS)
def test_a_complex_intermediate_is_refused_naming_its_node(name):
    f, fragment = COMPLEX_PROGRAMS[name]
    with pytest.raises(asd.ArgumentTypeError, match="complex") as info:
        asd.subgrad(f)(np.ones(2))
    assert fragment in str(info.value) and "%" in str(info.value)
    with pytest.raises(asd.ArgumentTypeError, match="complex"):
        asd.jacobian(lambda x: f(x) * x)(np.ones(2))


def test_the_advice_for_a_complex_modulus_gives_the_exact_gradient():
    with pytest.raises(asd.ArgumentTypeError, match=r"np\.hypot"):
        asd.subgrad(lambda x: np.sum(np.abs(x + 1j)))(np.ones(2))
    x = np.array([1.0, 0.75])
    g = asd.subgrad(lambda x: np.sum(np.hypot(x, 1.0)))(x)
    expected = [float(mpmath.mpf(float(t)) / mpmath.sqrt(mpmath.mpf(float(t)) ** 2 + 1))
                for t in x]
    np.testing.assert_allclose(g, expected, rtol=2e-16, atol=0)


@pytest.mark.parametrize("value", [1j, np.complex128(1 + 2j), np.array([1j, 0j]), [1j, 2.0]])
def test_a_complex_value_assigned_into_a_real_traced_array_is_refused(value):
    def f(x):
        y = x.copy()
        y[:2] = value
        return y.sum()

    with pytest.raises(asd.ArgumentTypeError, match="imaginary part"):
        asd.subgrad(f)(np.ones(3))


@pytest.mark.parametrize("ct", [np.array([1 + 1j, 2 + 2j]), 1j])
def test_a_complex_cotangent_is_refused_and_the_advice_is_exact(ct):
    f = lambda x: asd.relu(x) * 3.0  # noqa: E731
    x = np.zeros(2)
    _, pullback = asd.vjp(f, direction=np.array([1.0, -1.0]))(x)
    with pytest.raises(asd.ArgumentTypeError, match=r"pullback\(ct.real\)"):
        pullback(ct)
    ct = np.broadcast_to(np.asarray(ct), (2,))
    combined = pullback(ct.real) + 1j * pullback(ct.imag)
    np.testing.assert_array_equal(combined, [3.0 * ct[0], 0.0])


def test_a_string_cotangent_is_refused():
    _, pullback = asd.vjp(lambda x: x * 2.0)(np.ones(2))
    with pytest.raises(asd.ArgumentTypeError, match="str"):
        pullback("1.5")


# ----- integers that float64 cannot hold -----

@pytest.mark.parametrize("arg", [
    np.array([2 ** 60 + 1, 2 ** 60]),
    np.array([2 ** 60 + 1, 2 ** 60], dtype=np.uint64),
    np.array([2 ** 63 - 1, 0]),
    [2 ** 53 + 1, 0],
    2 ** 53 + 1,
])
def test_an_integer_argument_that_float_rounds_is_refused(arg):
    f = lambda t: t[0] - t[1] if np.ndim(t) else t * 1.0  # noqa: E731
    with pytest.raises(asd.ArgumentError, match="cannot hold exactly") as info:
        asd.value_and_subgrad(f)(arg)
    assert "argument 0" in str(info.value) and "offset" in str(info.value)


def test_integers_float_holds_exactly_are_accepted():
    value, g = asd.value_and_subgrad(lambda t: t[0] - t[1])(np.array([2 ** 53, -(2 ** 53)]))
    assert value == 2.0 ** 54 and g.tolist() == [1.0, -1.0]
    value, _ = asd.value_and_subgrad(lambda t: t[0] - t[1])(np.array([2 ** 60, 2 ** 59]))
    assert value == float(2 ** 60 - 2 ** 59)   # powers of two are exact
    # the advice: subtract a common offset; the difference is then exact
    t = np.array([2 ** 60 + 1, 2 ** 60])
    value, g = asd.value_and_subgrad(lambda t: t[0] - t[1])(t - 2 ** 60)
    assert value == 1.0 and g.tolist() == [1.0, -1.0]


def test_an_integer_direction_that_float_rounds_is_refused():
    # rounded, [2**60 + 1, 2**60] would be a tie of max and the other side's gradient
    with pytest.raises(asd.ArgumentError, match="cannot hold exactly"):
        asd.subgrad(lambda x: asd.maximum(x[0], x[1]),
                    direction=np.array([2 ** 60 + 1, 2 ** 60]))(np.zeros(2))


def test_a_torch_integer_argument_that_float_rounds_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(asd.ArgumentError, match="cannot hold exactly"):
        asd.value_and_subgrad(lambda t: t[0] - t[1])(torch.tensor([2 ** 24 + 1, 2 ** 24]))
    value, _ = asd.value_and_subgrad(lambda t: t[0] - t[1])(torch.tensor([2 ** 24, 3]))
    assert float(value) == 2 ** 24 - 3


# ----- masked arrays: refused, read-only arrays kept -----

def test_a_masked_argument_is_refused_and_the_advice_works():
    m = np.ma.array([1.0, 2.0], mask=[0, 1])
    with pytest.raises(asd.ArgumentTypeError, match="masked array") as info:
        asd.value_and_subgrad(np.sum)(m)
    assert "argument 0" in str(info.value)
    mask = np.ma.getmaskarray(m)
    value, g = asd.value_and_subgrad(lambda x: np.sum(np.where(mask, 0.0, x)))(m.data)
    assert value == np.ma.sum(m) and g.tolist() == [1.0, 0.0]
    value, g = asd.value_and_subgrad(np.sum)(m.compressed())
    assert value == np.ma.sum(m) and g.tolist() == [1.0]


def test_a_masked_constant_is_refused_wherever_it_enters():
    m = np.ma.array([1.0, 2.0], mask=[0, 1])
    with pytest.raises(asd.ArgumentTypeError, match="masked array"):
        asd.value_and_subgrad(lambda x, w: np.sum(x * w), argnums=0)(np.ones(2), m)
    with pytest.raises(asd.ArgumentTypeError, match="masked array"):
        asd.value_and_subgrad(lambda x: np.sum(x * m))(np.ones(2))
    with pytest.raises(asd.ArgumentTypeError, match="masked array"):
        asd.subgrad(lambda x: asd.relu(x), direction=m)(np.zeros(2))
    with pytest.raises(asd.ArgumentTypeError, match="masked array"):
        asd.jit(lambda x: x * 2.0)(m)
    with pytest.raises(asd.ArgumentTypeError, match="masked array"):
        asd.jit(asd.value_and_subgrad(lambda x, w: np.sum(x * w)))(np.ones(2), (m,))


def test_read_only_arrays_keep_working():
    x = np.array([1.0, -2.0])
    w = np.array([3.0, 4.0])
    x.flags.writeable = False
    w.flags.writeable = False
    f = lambda x, w: np.sum(asd.relu(x) * w)  # noqa: E731
    assert asd.value_and_subgrad(f)(x, w)[1].tolist() == [3.0, 0.0]
    jf = asd.jit(asd.value_and_subgrad(f))
    for _ in range(3):
        assert jf(x, w)[1].tolist() == [3.0, 0.0]
    assert asd.subgrad(f, direction=w)(x, w).tolist() == [3.0, 0.0]


# ----- compiled signatures tell apart every value Python can branch on -----

def signed(x, s):
    return asd.relu(x) * math.copysign(1.0, s)


def test_jit_tells_signed_zeros_apart_on_every_path():
    jf = asd.jit(asd.value_and_subgrad(signed))
    for _ in range(3):  # the third call takes the generated fast path
        assert jf(2.0, 0.0) == (2.0, 1.0)
    assert jf(2.0, -0.0) == (-2.0, -1.0)
    assert jf(2.0, 0.0) == (2.0, 1.0)
    plain = asd.jit(lambda x, s: x * math.copysign(1.0, s))
    assert plain(np.array(2.0), 0.0) == 2.0 and plain(np.array(2.0), -0.0) == -2.0


def _payload_nan(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | bits))[0]


STATIC_PAIRS = {
    "signed zero in a tuple": ((0.0,), (-0.0,)),
    "signed zero in a dict": ({"s": 0.0}, {"s": -0.0}),
    "signed zero in a list of tuples": ([(1.0, 0.0)], [(1.0, -0.0)]),
    "dict keys": ({0.0: 1.0}, {-0.0: 1.0}),
    "frozenset": (frozenset([0.0]), frozenset([-0.0])),
    "nan payloads": (_payload_nan(1), _payload_nan(2)),
    "int and float": (1, 1.0),
    "bool and int": (True, 1),
    "numpy scalar and float": (np.float64(1.0), 1.0),
    "numpy scalar and 0-d array": (np.float64(1.0), np.array(1.0)),
    "signed zero numpy scalar": (np.float64(0.0), np.float64(-0.0)),
    "complex signed zero": (complex(0.0, 0.0), complex(0.0, -0.0)),
    "decimal exponent": (decimal.Decimal("1.0"), decimal.Decimal("1.00")),
}


def _fingerprint(s) -> float:
    """A number Python computes from a static argument: its pickled bytes (types, float
    bits and NaN payloads included), so the two of a pair give different numbers."""
    digest = hashlib.blake2b(pickle.dumps(s), digest_size=6).digest()
    return float(int.from_bytes(digest, "little"))


@pytest.mark.parametrize("name", STATIC_PAIRS)
def test_jit_signatures_tell_apart_static_values(name):
    a, b = STATIC_PAIRS[name]
    assert _fingerprint(a) != _fingerprint(b), "the pair must differ to Python"
    f = lambda x, s: asd.relu(x) * _fingerprint(s)  # noqa: E731
    jf = asd.jit(asd.value_and_subgrad(f))
    for s in (a, a, a, b, b, a):
        assert jf(2.0, s) == asd.value_and_subgrad(f)(2.0, s)


# ----- traced values stored into plain numpy arrays, np.vectorize -----

def store_item(x):
    c = np.zeros(3)
    c[0] = x[0]
    return (c * c).sum()


def store_slice(x):
    c = np.zeros(3)
    c[:2] = x[:2]
    return (c * c).sum()


def store_augmented(x):
    c = np.zeros(3)
    c[1] += x[0]
    return (c * c).sum()


@pytest.mark.parametrize("f", [store_item, store_slice, store_augmented])
def test_a_traced_value_stored_into_a_plain_array_names_the_fix(f):
    with pytest.raises(asd.TracerBoolError) as info:
        asd.subgrad(f)(np.ones(3))
    message = str(info.value)
    assert "plain numpy array 'c'" in message and "asd.numpy.stack" in message
    assert "np.zeros(n) + x[:0].sum()" in message and __file__ in message


def test_the_spellings_the_store_refusal_advises_work():
    import asd.numpy as anp

    def traced_zeros(x):
        c = np.zeros(3) + x[:0].sum()
        c[0] = x[0]
        c[2] = 2.0 * x[1]
        return (c * c).sum()

    spellings = [traced_zeros,
                 lambda x: (anp.stack([x[0], 0.0, 2.0 * x[1]]) ** 2).sum(),
                 lambda x: (anp.array([x[0], 0.0, 2.0 * x[1]]) ** 2).sum()]
    x = np.array([1.5, -2.0, 7.0])
    value, exact = limiting_gradient(lambda x: x[0] * x[0] + 4 * x[1] * x[1], x,
                                     [Fraction(1), 0, 0])
    for f in spellings:
        v, g = asd.value_and_subgrad(f)(x)
        assert v == float(value) and g.tolist() == [float(e) for e in exact]


def test_np_vectorize_is_named_with_what_to_write_instead():
    branch = lambda t: t if t > 0 else 0.0  # noqa: E731
    with pytest.raises(asd.TracerBoolError) as info:
        asd.subgrad(lambda x: np.vectorize(branch)(x).sum())(np.ones(2))
    message = str(info.value)
    assert message.startswith("numpy.vectorize converted")
    assert __file__ in message and "_function_base_impl" not in message
    assert "asd.numpy.where" in message
    import asd.numpy as anp

    g = asd.subgrad(lambda x: anp.where(x > 0, x, 0.0).sum())(np.array([1.0, -1.0]))
    assert g.tolist() == [1.0, 0.0]
    g = asd.subgrad(lambda x: (lambda t: t * 2.0 + 1.0)(x).sum())(np.array([1.0, -1.0]))
    assert g.tolist() == [2.0, 2.0]


# ----- in-place writes through numpy views: followed as numpy does -----
# The oracle runs the same function on exact Jets (numpy object arrays), where numpy's own
# views and in-place writes apply: the value and the limiting gradient along v, exactly.

def slice_iadd(x):  # the issue's example
    y = x.copy()
    v = y[:2]
    v += 1.0
    return (y * y).sum()


def slice_setitem(x):
    y = x.copy()
    v = y[1:4]
    v[0] = x[5] * 2.0
    return (y * y).sum()


def basic_index_view(x):
    y = x.reshape(2, 3).copy()
    row = y[1]
    row[::2] -= x[0]
    col = y[:, 1]
    col *= x[2]
    return (y * y).sum()


def base_write_seen_through_views(x):
    y = x.copy()
    v = y[:3]
    w = y.reshape(2, 3)[:, ::-1]
    y[0] = x[4] * 3.0
    y[4:] += v[:2]
    return (v * v).sum() + (w * w * w).sum() + y.sum()


def reshape_view(x):
    y = x.copy()
    m = y.reshape(2, 3)
    m[1, 1] = -x[0]
    return (y * y).sum()


def transpose_view(x):
    y = x.reshape(2, 3).copy()
    t = y.T
    t[0, 1] *= 5.0
    s = np.swapaxes(y, 0, 1)
    s[2] += x[1]
    return (y * y).sum() + (t * t).sum()


def views_of_views(x):
    y = x.copy()
    m = y.reshape(2, 3)
    r = m[1]
    r[::2] -= x[0]
    y += 1.0
    return (y * y).sum() + (m * m).sum() + (r * r * r).sum()


def a_second_name(x):
    y = x.copy()
    a = y
    y *= x[1]
    return (a * a).sum()


def numpy_view_functions(x):
    y = x.reshape(2, 3).copy()
    f = np.flip(y)
    f[0, 0] = 10.0 * x[1]
    top, bottom = np.split(y, 2)
    bottom += top
    r = np.rot90(y)
    r[0, 0] -= x[3]
    d = np.diagonal(y)
    lr = np.fliplr(y)
    lr[1, 0] *= 0.5
    y[0, 0] += x[5]
    return (y * y).sum() + (d * d).sum() + (f * y.real).sum()


def recurrence(x):
    y = np.stack([x[:2], x[:2], x[:2]]) * 1.0
    for i in range(1, 3):
        y[i] = y[i - 1] * 2.0 + x[2 + i]
    return (y * y).sum()


def flatten_is_a_copy(x):
    y = x.copy()
    f = y.flatten()
    r = y.ravel()
    y[0] = 100.0 * x[1]
    return (f * f).sum() + (r * r).sum()


def library_view_seen(x):
    import asd.numpy as anp

    y = x.copy()
    m = anp.reshape(y, (2, 3))  # a view made by a library call: still follows y
    y[1:3] = x[4:6] * x[0]
    return (m * m * m).sum()


ALIASING = [slice_iadd, slice_setitem, basic_index_view, base_write_seen_through_views,
            reshape_view, transpose_view, views_of_views, a_second_name,
            numpy_view_functions, recurrence, flatten_is_a_copy, library_view_seen]


@pytest.mark.parametrize("f", ALIASING, ids=lambda f: f.__name__)
def test_writes_through_views_follow_numpy(f):
    x = np.array([1.0, 2.0, 3.0, -1.5, 0.5, 2.5])
    v = [Fraction(1, k + 2) * (-1) ** k for k in range(6)]
    value, exact = limiting_gradient(f, x, v)
    assert float(value) == f(x.copy())  # the oracle is numpy's own run
    got_value, g = asd.value_and_subgrad(f, direction=np.array([float(e) for e in v]))(x)
    assert got_value == float(value)
    np.testing.assert_array_equal(g, [float(e) for e in exact])
    jf = asd.jit(asd.value_and_subgrad(f))
    for _ in range(3):
        got_value, g = jf(x)
        assert got_value == float(value)
        np.testing.assert_array_equal(g, [float(e) for e in exact])


def test_the_issue_example_numbers():
    assert asd.value_and_subgrad(slice_iadd)(np.array([1.0, 2.0, 3.0]))[0] == 22.0
    g = asd.subgrad(slice_iadd)(np.array([1.0, 2.0, 3.0]))
    assert g.tolist() == [4.0, 6.0, 6.0]


def write_into_argument_view(x):
    v = x[:2]
    v += 1.0
    return v.sum()


def in_place_on_argument(x):
    x -= 1.0
    return x.sum()


def write_into_diagonal(x):
    y = x.reshape(2, 3).copy()
    d = np.diagonal(y)
    d[0] = 1.0
    return (y * y).sum()


def write_into_library_view(x):
    import asd.numpy as anp

    y = x.copy()
    m = anp.reshape(y, (2, 3))  # a library call: no record of the array it views
    m[0, 0] = 5.0
    return (y * y).sum()


@pytest.mark.parametrize("f, fragment", [
    (write_into_argument_view, "caller's array"),
    (in_place_on_argument, "caller's array"),
    (write_into_diagonal, "read-only"),
    (write_into_library_view, "cannot trace this view back"),
], ids=["argument view", "argument", "diagonal", "library view"])
def test_writes_numpy_would_send_elsewhere_are_refused(f, fragment):
    with pytest.raises(asd.ArgumentTypeError, match=fragment) as info:
        asd.subgrad(f)(np.arange(1.0, 7.0))
    assert __file__ in str(info.value)


def test_the_advice_of_the_refusals_works():
    x = np.arange(1.0, 7.0)

    def copied_first(x):  # "copy the argument first"
        y = x.copy()
        v = y[:2]
        v += 1.0
        return v.sum()

    def rebound(x):  # "write x = x - 1.0"
        x = x - 1.0
        return x.sum()

    def into_the_base(x):  # "write into the base array itself"
        y = x.copy()
        y[0, ...] = 5.0
        return (y * y).sum()

    for f in (copied_first, rebound, into_the_base):
        value, exact = limiting_gradient(f, x, [Fraction(1)] * 6)
        got_value, g = asd.value_and_subgrad(f)(x)
        assert got_value == float(value) and g.tolist() == [float(e) for e in exact]


def test_a_scalar_argument_can_still_be_updated_in_place():
    def f(x):
        x += 1.0
        x *= 3.0
        return asd.relu(x)

    assert asd.value_and_subgrad(f)(0.5) == (4.5, 3.0)


def test_a_write_into_a_torch_view_is_refused_and_the_base_spelling_works():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)

    def through_a_view(x):
        y = x * 1.0
        v = y[:2]
        v += 1.0
        return (y * y).sum()

    with pytest.raises(asd.ArgumentTypeError, match="views only"):
        asd.value_and_subgrad(through_a_view)(x)

    def into_the_base(x):
        y = x * 1.0
        y[:2] += 1.0
        return (y * y).sum()

    value, g = asd.value_and_subgrad(into_the_base)(x)
    assert float(value) == 22.0 and g.tolist() == [4.0, 6.0, 6.0]


def test_the_users_own_error_chained_from_an_asd_error_passes_unchanged():
    def f(x):
        try:
            float(x)
        except asd.TracerBoolError as err:
            raise ValueError("mine") from err
        return x

    with pytest.raises(ValueError, match="mine"):
        asd.subgrad(f)(1.0)
