"""Every error class of DESIGN.md, raised with a message naming the node, the values and the fix."""

import textwrap

import numpy as np
import pytest

import asd
import asd.numpy as anp


def raises(exc, f, x, *fragments):
    with pytest.raises(exc) as info:
        asd.subgrad(f, seed=0)(x)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert isinstance(info.value, asd.ASDError)
    return info.value


def test_python_branch_on_a_traced_value():
    raises(asd.TracerBoolError, lambda x: x if x > 0 else -x, 0.0, "where", "direction")
    raises(asd.TracerBoolError, lambda x: x if bool(x) else -x, 1.0, "bool")
    raises(asd.TracerBoolError, lambda x: float(x), 1.0, "float()", "stop_gradient")
    raises(asd.TracerBoolError, lambda x: np.array([x, x]).sum(), 1.0,
           "converted to a plain numpy array", "asd.numpy.array([...])")


# ----- numpy functions given Python lists of traced values -----
# numpy dispatches __array_function__ only on arguments that are arrays themselves; a list of
# traced values reaches np.asarray inside numpy's code. asd refuses there (an object array of
# tracers breaks np.mean's final cast, and norm's sqrt(x . x) is not Lipschitz at 0) and names
# the numpy function with the spelling that works, which these tests also check.

ORDS = [None, 1, 2, np.inf, -np.inf, 3, 0.5, -1, -2]
ON_LISTS = {
    "numpy.mean": np.mean, "numpy.average": np.average,
    "numpy.sum": np.sum, "numpy.prod": np.prod, "numpy.var": np.var, "numpy.std": np.std,
    **{f"numpy.linalg.norm ord={o}": (lambda v, o=o: np.linalg.norm(v, o)) for o in ORDS},
}


@pytest.mark.parametrize("name", sorted(ON_LISTS))
def test_a_numpy_function_given_a_list_of_traced_values_names_the_spelling_that_works(name):
    fn = ON_LISTS[name]
    with pytest.raises(asd.TracerBoolError) as info:
        asd.subgrad(lambda p: fn([p[0], p[1], 2.0]))(np.array([0.3, -1.2]))
    public = name.split()[0]
    assert f"{public}(asd.numpy.array([...]))" in str(info.value)
    assert "test_errors.py" in str(info.value)  # the user's line, not numpy's
    # the spelling it names: the gradient equals central differences of numpy's own
    x = np.array([0.3, -1.2])
    g = asd.subgrad(lambda p: fn(anp.array([p[0], p[1], 2.0])))(x)
    h = 1e-6
    fd = [(fn([*(x + h * e), 2.0]) - fn([*(x - h * e), 2.0])) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_weighted_average_dot_and_inner_of_lists_are_refused_by_name():
    x = np.array([0.3, -1.2])
    for call, fragment in [
        (lambda p: np.average([p[0], p[1]], weights=[1.0, 3.0]), "numpy.average(asd.numpy"),
        (lambda p: np.dot([p[0], p[1]], [1.0, 2.0]), "asd.numpy.array([...])"),
        (lambda p: np.inner([p[0], p[1]], [1.0, 2.0]), "asd.numpy.array([...])"),
    ]:
        raises(asd.TracerBoolError, call, x, fragment)
    g = asd.subgrad(lambda p: np.dot(anp.array([p[0], p[1]]), [1.0, 2.0]))(x)
    np.testing.assert_array_equal(g, [1.0, 2.0])


@pytest.mark.parametrize("ord_", [None, 1, np.inf, 3])
def test_the_named_spelling_of_norm_is_right_at_its_kink(ord_):
    """norm(asd.numpy.array([x, y])) at 0 along coordinate and random directions: the Dini
    derivative is the one-sided quotient ``(norm(0 + t v) - 0) / t = norm(v)`` exactly."""
    f = lambda p: np.linalg.norm(anp.array([p[0], p[1]]), ord_)  # noqa: E731
    rng = np.random.default_rng(3)
    for v in [np.array([1.0, 0.0]), np.array([0.0, -1.0]), *rng.normal(size=(3, 2))]:
        _, dini = asd.directional(f)(np.zeros(2), v)
        np.testing.assert_allclose(dini, np.linalg.norm(v, ord_), rtol=1e-14)
        g = asd.subgrad(f, direction=v)(np.zeros(2))
        np.testing.assert_allclose(g @ v, np.linalg.norm(v, ord_), rtol=1e-14)


def test_while_loop_on_a_traced_value():
    def f(x):
        while x > 1:
            x = x / 2
        return x

    raises(asd.TracerBoolError, f, 4.0, "while")


def test_comparison_used_as_a_number_at_its_jump():
    err = raises(asd.NotLipschitzError, lambda x: (x > 0) + x, 0.0, "greater", "discontinuous",
                 "stop_gradient")
    assert err.args[0].startswith("%1 = greater %0, 0")


def test_comparison_used_as_a_number_away_from_its_jump_is_constant():
    assert asd.subgrad(lambda x: (x > 0) + x, seed=0)(0.5) == 1.0


def test_discontinuous_value_behind_stop_gradient_is_allowed():
    g = asd.subgrad(lambda x: asd.stop_gradient((x > 0) * 1.0) * x, seed=0)(0.5)
    assert g == 1.0


def test_sqrt_at_zero_is_not_lipschitz():
    # sqrt of a sum of squares is Lipschitz (its limit is exact); of a plain sum it is not
    err = raises(asd.NotLipschitzError, lambda x: anp.sqrt(anp.sum(x + x)), np.zeros(2),
                 "sqrt", "asd.norm")
    assert err.node.startswith("%3 = sqrt %2")


def test_fractional_power_at_zero_is_not_lipschitz():
    raises(asd.NotLipschitzError, lambda x: anp.sum(x ** 0.5), np.array([0.0, 1.0]),
           "real_pow", "not Lipschitz at x = 0")


def test_where_with_a_jump_at_the_tie():
    err = raises(asd.NotLipschitzError, lambda x: anp.where(x > 0, 1.0, 0.0) + x, 0.0,
                 "jumps", "a != b")
    assert "where" in err.node


def test_where_without_jump_is_fine_and_away_from_ties_too():
    assert asd.subgrad(lambda x: anp.where(x > 0, x, 0.0), direction=1.0)(0.0) == 1.0
    assert asd.subgrad(lambda x: anp.where(x > 0, 1.0, 0.0) * x, seed=0)(2.0) == 1.0


def test_log_of_a_negative_names_the_first_non_finite_node():
    err = raises(asd.NonFiniteError, lambda x: anp.log(x - 2.0) * 3.0, 1.0, "log", "nan",
                 "domain")
    assert err.node is None and str(err).startswith("%2 = log %1")


def test_overflow_is_reported():
    raises(asd.NonFiniteError, lambda x: (x * 1e200) * (x * 1e200), 1.0, "multiply", "inf")


def test_unsupported_numpy_function_names_it_and_how_to_register():
    raises(asd.UnsupportedError, lambda x: np.fft.fft(x).sum(), np.ones(2), "fft")
    err = raises(asd.UnsupportedError, lambda x: np.i0(x), 1.0, "numpy.i0", "defrule",
                 "register_numpy")
    assert isinstance(err, NotImplementedError)


def test_shape_mismatch_is_caught_at_trace_time_with_both_shapes():
    err = raises(asd.ShapeError, lambda x: anp.sum(x + np.ones(4)), np.ones(3), "(3,)", "(4,)")
    assert isinstance(err, ValueError) and "add" in str(err)


def test_nested_sweeps_are_refused():
    outer = {}

    def f(x):
        outer["t"] = x
        return x * 1.0

    asd.subgrad(f, seed=0)(1.0)
    with pytest.raises(asd.NestingError, match="two different sweeps"):
        asd.subgrad(lambda y: y * outer["t"], seed=0)(1.0)


def test_item_assignment_is_refused():
    def f(x):
        x[0] = 1.0
        return x.sum()

    with pytest.raises(TypeError, match="Copy it first"):
        asd.subgrad(f, seed=0)(np.ones(2))


# ----- argument, output and indexing errors: each names what was wrong and the fix -----

def call_raises(exc, call, *fragments):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    assert isinstance(info.value, asd.ASDError)
    return info.value


def test_duplicate_and_out_of_range_argnums():
    f = lambda x, y: x * y  # noqa: E731
    err = call_raises(asd.ArgumentError, lambda: asd.subgrad(f, argnums=(0, 0))(1.0, 2.0),
                      "argnums=(0, 0)", "twice", "once")
    assert isinstance(err, ValueError)
    call_raises(asd.ArgumentError, lambda: asd.subgrad(f, argnums=(1, -1))(1.0, 2.0), "twice")
    call_raises(asd.ArgumentError, lambda: asd.subgrad(f, argnums=2)(1.0, 2.0),
                "names argument 2", "got 2 arguments", "range(-2, 2)")
    err = call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(f, argnums="0")(1.0, 2.0),
                      "argnums must be an int", "argnums=(0, 1)")
    assert isinstance(err, TypeError)
    call_raises(asd.ArgumentError, lambda: asd.subgrad(f)(), "no arguments")


def test_complex_string_set_and_object_arguments_are_refused():
    square = lambda x: x * x  # noqa: E731
    err = call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(square)(1 + 1j),
                      "argument 0 is complex", "real and imaginary parts")
    assert isinstance(err, TypeError)
    call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(square)("1.5"), "str", "float(s)")
    call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(square)({1.0}), "set")
    call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(square)(object()), "object")
    call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(square)((1.0, 2j)),
                "argument 0 (leaf 1) is complex")


def test_integers_beyond_64_bits_are_refused():
    call_raises(asd.ArgumentError, lambda: asd.subgrad(lambda x: x * 2.0)(2 ** 64),
                "18446744073709551616", "64-bit", "float(n)")
    call_raises(asd.ArgumentError, lambda: asd.subgrad(lambda x: x * 2.0)(2 ** 63), "64-bit")


def test_zero_nan_and_misshaped_directions_are_refused():
    f = lambda x: anp.sum(asd.relu(x))  # noqa: E731
    call_raises(asd.ArgumentError, lambda: asd.subgrad(f, direction=np.zeros(2))(np.zeros(2)),
                "direction is zero", "selects the branch")
    call_raises(asd.ArgumentError,
                lambda: asd.subgrad(f, direction=np.array([np.nan, 1.0]))(np.zeros(2)),
                "not finite")
    call_raises(asd.ShapeError, lambda: asd.subgrad(f, direction=np.ones(3))(np.zeros(2)),
                "shape (3,)", "shape (2,)")
    call_raises(asd.ArgumentTypeError,
                lambda: asd.jacobian(f, direction=np.array([1j, 1.0]))(np.zeros(2)), "complex")
    # a zero direction is fine for the directional derivative: f'(x; 0) = 0
    assert asd.directional(f)(np.zeros(2), np.zeros(2))[1] == 0.0


def test_bad_seeds_are_refused_when_the_transform_is_made():
    call_raises(asd.ArgumentError, lambda: asd.subgrad(lambda x: x, seed=-1), "seed=-1")
    call_raises(asd.ArgumentError, lambda: asd.jacobian(lambda x: x, seed="s"), "seed='s'")


def test_empty_arguments_are_refused():
    call_raises(asd.ArgumentError, lambda: asd.subgrad(lambda x: anp.sum(x))(np.zeros(0)),
                "hold no numbers")


def test_non_numeric_and_complex_outputs_are_refused():
    err = call_raises(asd.OutputError, lambda: asd.subgrad(lambda x: "abc")(1.0),
                      "the output is a str")
    assert isinstance(err, TypeError)
    call_raises(asd.OutputError, lambda: asd.subgrad(lambda x: 1j)(1.0), "complex")
    # a complex value computed from the input is refused at the node that made it
    call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(lambda x: x * 1j)(1.0),
                "%1 = multiply %0, 1j holds complex values", "complex constant 1j")
    call_raises(asd.OutputError, lambda: asd.directional(lambda x: [x, "a"])(1.0, 1.0),
                "output leaf 1")


def test_a_tuple_output_of_subgrad_names_jacobian():
    call_raises(asd.ShapeError, lambda: asd.subgrad(lambda x: (x, x))(1.0),
                "needs a scalar output", "tuple of 2 values", "asd.jacobian")


def test_index_out_of_range_and_bad_reshape():
    err = call_raises(asd.IndexingError, lambda: asd.subgrad(lambda x: x[5])(np.ones(3)),
                      "index 5 is out of bounds", "Tracer(%0, float64[3])")
    assert isinstance(err, IndexError)
    call_raises(asd.ShapeError, lambda: asd.subgrad(lambda x: x.reshape(4).sum())(np.ones(3)),
                ".reshape()", "size 3 into shape (4,)")


def test_a_traced_value_used_after_its_call_raises():
    kept = []

    def f(x):
        kept.append(x)
        return anp.sum(x * 2.0)

    assert list(asd.subgrad(f, seed=0)(np.ones(2))) == [2.0, 2.0]
    err = call_raises(asd.DeadTraceError, lambda: kept[0] * 3.0, "after the call",
                      "escaped")
    assert isinstance(err, RuntimeError)
    call_raises(asd.DeadTraceError, lambda: asd.relu(kept[0]), "after the call")
    call_raises(asd.DeadTraceError, lambda: np.sin(kept[0]), "after the call")


def test_escaped_value_from_trace_raises_too_and_the_program_still_runs():
    kept = []

    def f(x):
        kept.append(x)
        return asd.relu(x)

    program = asd.trace(f)(np.ones(2))
    call_raises(asd.DeadTraceError, lambda: kept[0] + 1.0, "after the call")
    assert list(program(np.array([-1.0, 2.0]))) == [0.0, 2.0]


def test_nan_and_inf_in_every_mode():
    log_sum = lambda x: anp.sum(anp.log(x))  # noqa: E731
    err = call_raises(asd.NonFiniteError,
                      lambda: asd.directional(log_sum)(-np.ones(3), np.ones(3)), "log")
    assert str(err).startswith("%1 = log %0")
    call_raises(asd.NonFiniteError, lambda: asd.jacobian(anp.log)(-np.ones(2)), "log")
    call_raises(asd.NonFiniteError, lambda: asd.clarke(log_sum, 4, seed=0)(-np.ones(3)), "log")
    program = asd.trace(log_sum)(np.ones(3))
    call_raises(asd.NonFiniteError, lambda: program(-np.ones(3)), "%1 = log %0",
                "program's output")
    # NaN arguments are refused before the function runs: np.sort would move a NaN away
    # from x[0] and return a confident gradient
    call_raises(asd.NonFiniteError,
                lambda: asd.subgrad(lambda x: anp.sort(x)[0])(np.array([np.nan, 1.0])),
                "argument 0", "nan", "np.nan_to_num")
    call_raises(asd.NonFiniteError, lambda: asd.jacobian(asd.relu)(np.array([np.nan, 1.0])),
                "non-finite")


def test_an_overflowing_derivative_is_named_not_reported_as_a_bug():
    err = call_raises(asd.NonFiniteError, lambda: asd.subgrad(lambda x: x ** 0.01)(5e-324),
                      "overflowed", "x**0.01")
    assert "Report this" not in str(err)
    call_raises(asd.NonFiniteError,
                lambda: asd.directional(lambda x: x ** 0.01)(5e-324, 1.0), "overflowed",
                "%1 = real_pow %0")


def test_tracer_bool_error_shows_the_comparison_and_the_source_line():
    def f(x, y):
        if x > y:  # the line the message quotes
            return x
        return y

    err = call_raises(asd.TracerBoolError, lambda: asd.subgrad(f, argnums=(0, 1))(1.0, 2.0),
                      "%2 = %0 > %1", "test_errors.py", "`if x > y:  # the line the message")
    assert "asd.numpy.where" in str(err)


def test_namedtuple_arguments_come_back_as_namedtuples():
    from collections import namedtuple

    Params = namedtuple("Params", "w b")
    g = asd.subgrad(lambda p: anp.sum(p.w * 2.0) + p.b, seed=0)(Params(np.ones(2), 0.5))
    assert type(g) is Params and list(g.w) == [2.0, 2.0] and g.b == 1.0
    d = asd.subgrad(lambda p: asd.relu(p.b), direction=(np.zeros(2), 1.0))(
        Params(np.ones(2), 0.0))
    assert type(d) is Params and d.b == 1.0


def test_library_errors_inside_the_function_are_explained_and_the_users_pass_through():
    call_raises(asd.ShapeError, lambda: asd.subgrad(lambda x: anp.reshape(x, 4).sum())(
        np.ones(3)), "reshape", "size 3 into shape (4,)")
    call_raises(asd.IndexingError, lambda: asd.subgrad(lambda x: anp.take(x, [7]).sum())(
        np.ones(3)), "index 7 is out of bounds")
    call_raises(asd.ShapeError, lambda: asd.trace(lambda x: anp.reshape(x, 4))(np.ones(3)),
                "reshape")

    class Mine(ValueError):
        """The user's own exception: it must come back unchanged."""

    def mine(x):
        raise Mine("the user's own")

    with pytest.raises(Mine, match="the user's own"):
        asd.subgrad(mine)(1.0)
    # numpy called by the user on the user's own data: the user's error, unchanged
    with pytest.raises(ValueError, match="negative dimensions") as info:
        asd.subgrad(lambda x: np.ones(-1))(1.0)
    assert not isinstance(info.value, asd.ASDError)


def _registration_from_refusal(f, x, fill: dict[str, str]) -> str:
    """The snippet an UnsupportedError offers, with the user's part filled in."""
    with pytest.raises(asd.UnsupportedError) as info:
        asd.subgrad(f)(x)
    snippet = textwrap.dedent(str(info.value).split("\n\n", 1)[1])
    for placeholder, code in fill.items():
        assert placeholder in snippet
        snippet = snippet.replace(placeholder, code)
    return snippet


def test_a_refusal_names_the_real_function_and_its_registration_runs():
    """numpy.trapezoid (a linear function of y) is refused under its own name; the offered
    registration, with the Jacobian filled in, makes the same call differentiate."""
    from asd.core.primitive import FUNCTIONS

    y = np.array([1.0, -2.0, 0.5, 3.0])
    f = lambda y: np.trapezoid(y, dx=0.5)  # noqa: E731
    weights = "0.5 * np.array([[0.5, 1.0, 1.0, 0.5]])"
    snippet = _registration_from_refusal(f, y, {"jacobians = ...": f"jacobians = [{weights}]"})
    try:
        exec(snippet, {})
        g = asd.subgrad(f, seed=0)(y)
    finally:
        FUNCTIONS.pop(np.trapezoid, None)
    np.testing.assert_array_equal(g, [0.25, 0.5, 0.5, 0.25])


def test_a_refused_ufunc_is_named_by_its_module_and_gets_a_smooth_registration():
    """scipy.special.i0 is a ufunc without an asd rule; the refusal names scipy.special, and
    its defsmooth registration (derivative: i1) agrees with a central difference."""
    special = pytest.importorskip("scipy.special")
    from asd.core.primitive import UFUNCS

    x = np.array([0.7, 2.5])
    f = lambda x: special.i0(x).sum()  # noqa: E731
    snippet = _registration_from_refusal(
        f, x, {"return ...": "return scipy.special.i1(x)"})
    assert "scipy.special.i0" in snippet
    try:
        exec(snippet, {})
        g = asd.subgrad(f, seed=0)(x)
    finally:
        UFUNCS.pop(special.i0, None)
    h = 1e-6
    np.testing.assert_allclose(g, (special.i0(x + h) - special.i0(x - h)) / (2 * h),
                               rtol=1e-7)


def test_a_refusal_points_to_the_asd_spelling_that_exists():
    err = raises(asd.UnsupportedError,
                 lambda x: np.linalg.matmul(x.reshape(2, 2), x.reshape(2, 2)).sum(),
                 np.ones(4), "numpy.linalg.matmul has no asd rule",
                 "Use numpy.matmul (the @ operator)")
    assert "register_numpy(np.linalg.matmul" in str(err)


def test_an_asd_error_raised_through_a_traced_operation_is_not_its_own_cause():
    """``raise as_asd_error(e) from e`` made an asd error its own cause: a cycle on which code
    walking ``__cause__`` (JAX's error handling) never ends."""
    from asd.core.tracing import raise_as_asd_error

    own = asd.NotLipschitzError("sign jumps here")
    with pytest.raises(asd.NotLipschitzError) as info:
        try:
            raise own
        except Exception as e:
            raise_as_asd_error(e, "numpy.sign", ())
    assert info.value is own and info.value.__cause__ is None
    with pytest.raises(asd.ShapeError) as info:
        try:
            raise ValueError("operands could not be broadcast")
        except Exception as e:
            raise_as_asd_error(e, "numpy.add", ())
    assert isinstance(info.value.__cause__, ValueError)


def test_a_derivative_beyond_the_arguments_dtype_is_refused_by_name():
    """A float16 argument's derivative is computed in float32; cast back it can overflow
    float16 (inf for the finite exact 2e5): refused, naming the argument and the fix."""
    half = np.array([0.5], dtype=np.float16)  # value 4.5e4 (finite), derivative 9e4 (not)
    with pytest.raises(asd.NonFiniteError, match="float16's range"):
        asd.subgrad(lambda x: np.sum(x * 300.0 * 300.0))(half)
    g = asd.subgrad(lambda x: np.sum(x * 300.0 * 300.0))(half.astype(np.float32))
    assert g.dtype == np.float32 and g[0] == 9e4
    x = np.array([100.0, 1.0], dtype=np.float16)
    _, pullback = asd.vjp(lambda x: x * 300.0)(x)
    with pytest.raises(asd.NonFiniteError, match="wider dtype"):
        pullback(np.array([1000.0, 1.0]))


@pytest.mark.parametrize("part", ["real", "imag"])
def test_np_real_and_imag_of_a_complex_traced_value_are_refused_where_read(part):
    """``np.imag(x * c)`` with a complex constant ``c`` is refused at the read, as the
    ``.imag`` attribute is: it gave plain complex zeros, so a write of a traced value into
    them (``view[...] = y``) was refused as a store into a plain array, an undocumented
    class for this program (fuzz campaign seed 2813)."""
    fn = getattr(np, part)

    def f(x):
        out = fn(x * complex(1.5, 0.0)).copy()
        out[:1] = x[:1] * 2.0
        return out.sum()

    call_raises(asd.ArgumentTypeError, lambda: asd.subgrad(f)(np.array([0.0, 1.0])),
                f"holds complex values, and its .{part} is read", "test_errors.py")
