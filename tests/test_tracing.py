"""Traced arrays: operators, numpy protocols and array methods all record into the sweep."""

import numpy as np
import pytest

import asd
import asd.numpy as anp

X = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
W = np.array([[2.0, 0.0], [1.0, -1.0], [0.5, 4.0]])

# (name, function written with operators / numpy calls / methods, its gradient at X)
CASES = [
    ("add", lambda x: (x + 1.0 + x).sum(), 2 * np.ones_like(X)),
    ("radd-rsub", lambda x: (1.0 + x - (2.0 - x)).sum(), 2 * np.ones_like(X)),
    ("mul-div", lambda x: (x * 3.0 / 2.0).sum(), 1.5 * np.ones_like(X)),
    ("rdiv", lambda x: (1.0 / (x + 5.0)).sum(), -1.0 / (X + 5.0) ** 2),
    ("pow", lambda x: (x ** 3).sum(), 3 * X ** 2),
    ("neg-pos", lambda x: (-(+x)).sum(), -np.ones_like(X)),
    ("matmul", lambda x: (x @ W).sum(), np.ones((2, 2)) @ W.T),
    ("rmatmul", lambda x: (W @ x).sum(), W.T @ np.ones((3, 3))),
    ("index", lambda x: x[1, 1] + x[0][2] + x[:, 0].sum(),
     np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])),
    ("fancy-index", lambda x: x[[0, 0, 1], [1, 1, 2]].sum(),
     np.array([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0]])),
    ("ufunc", lambda x: np.add(np.multiply(x, x), 1.0).sum(), 2 * X),
    # the direction is +1 everywhere, so ties (X == 0.5, X == 0) take the increasing side
    ("function", lambda x: np.sum(np.maximum(x, 0.5)), (X >= 0.5) * 1.0),
    ("method-T", lambda x: (x.T @ x).sum(), 2 * X @ np.ones((3, 3))),
    ("reshape", lambda x: (x.reshape(3, 2) * np.arange(6.0).reshape(3, 2)).sum(),
     np.arange(6.0).reshape(2, 3)),
    ("mean", lambda x: x.mean() + np.mean(x, axis=0).sum(), (1 / 6 + 1 / 2) * np.ones_like(X)),
    ("reduce", lambda x: np.add.reduce(x, axis=1).sum(), np.ones_like(X)),
    ("iter-len", lambda x: sum(row.sum() * len(x) for row in x), 2 * np.ones_like(X)),
    ("where", lambda x: anp.where(x > 0, x, -x).sum(), np.where(X >= 0, 1.0, -1.0)),
    ("reflected-comparison", lambda x: anp.where(0 < x, x, 0.0).sum(), (X >= 0) * 1.0),
]


@pytest.mark.parametrize("name,f,expected", CASES, ids=[c[0] for c in CASES])
def test_operations_record_and_differentiate(name, f, expected):
    value, g = asd.value_and_subgrad(f, direction=np.ones_like(X))(X)
    assert np.isclose(value, f(X))
    np.testing.assert_allclose(g, expected)


def test_metadata_queries_do_not_record():
    def f(x):
        assert np.shape(x) == (2, 3) and np.ndim(x) == 2 and np.size(x) == 6
        assert x.shape == (2, 3) and x.dtype == np.float64
        return (x * np.ones_like(x)).sum()

    prog = asd.trace(f)(X)
    assert [n.name for n in prog.nodes] == ["input", "multiply", "sum"]


def test_asd_numpy_mirrors_numpy():
    assert anp.pi == np.pi and anp.float32 is np.float32
    assert anp.maximum is asd.maximum
    assert anp.sum(np.ones(3)) == 3.0  # plain arrays run plain numpy
    assert anp.exp is asd.exp  # a function with a rule resolves to the library
    assert anp.frexp is np.frexp  # no rule: numpy's own, which refuses traced arrays clearly


def test_program_listing_names_constants_and_parameters():
    prog = asd.trace(lambda x: anp.sum(x @ W, axis=0) + 1.0)(X)
    text = str(prog)
    assert "matmul %0, const float64[3,2]" in text
    assert "sum %1 axis=0 keepdims=False" in text
    assert "add %2, 1.0" in text


def test_a_python_branch_on_a_value_behind_stop_gradient_is_a_constant():
    """``stop_gradient`` marks a constant by intent: ``if np.allclose(stop_gradient(x), 0)``
    picks a branch of the program, not of the differentiated function; a compiled replay
    re-reads it (a guard). A branch on the inputs themselves is still refused."""
    def f(x):
        if np.allclose(asd.stop_gradient(x), 0):
            return np.sum(x)
        return np.sum(x * x)

    np.testing.assert_array_equal(asd.subgrad(f)(np.array([2.0, 3.0])), [4.0, 6.0])
    np.testing.assert_array_equal(asd.subgrad(f)(np.zeros(2)), [1.0, 1.0])
    compiled = asd.jit(asd.subgrad(f))
    for x, want in (([2.0, 3.0], [4.0, 6.0]), ([0.0, 0.0], [1.0, 1.0])):
        np.testing.assert_array_equal(compiled(np.array(x)), want)
    with pytest.raises(asd.TracerBoolError):
        asd.subgrad(lambda x: np.sum(x) if np.all(x > 1) else 0.0)(np.array([2.0, 3.0]))
