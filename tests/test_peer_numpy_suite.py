"""A peer's numpy gradient suite, run through asd: the numpy functions and spellings that
HIPS/autograd's own tests differentiate (tests/test_numpy.py, test_systematic.py,
test_scalar_ops.py, test_linalg.py; real-valued cases only), each written here anew as a
case of our own and differentiated with `asd.jacobian`.

The oracle is independent of asd: numpy evaluates the same function and a fourth-order
central difference quotient gives its Jacobian. Every point is generic (random, seeded, off
every kink, jump and repeated eigenvalue), where the function is smooth and the difference
quotient converges to the derivative; tests on kinks belong to the rule tests.

Functions are called through ``asd.numpy`` (as autograd's tests call ``autograd.numpy``);
it resolves to numpy's own functions with asd's rules, so plain ``numpy`` calls differentiate
the same except for the spellings numpy never hands to asd (``np.array([x, y])`` of traced
values: ``asd.numpy.array``). A case is one peer test; it passes when every variant in it
matches. `KNOWN` lists the cases that fail on this branch and why (linear algebra belongs to
library/linalg.py); `test_the_pass_rate` prints the rate and pins its floor (issue 23: 95%;
at this branch's base commit 188/206 passed, 91.3%).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

import asd
import asd.numpy as anp


@dataclass
class Case:
    name: str
    fn: Callable
    variants: list  # each: (args tuple, kwargs dict)
    argnums: tuple = (0,)
    skip: str = field(default="")


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def R(rng, *shape):
    return rng.standard_normal(shape) if shape else float(rng.standard_normal())


def U(rng, lims, *shape):
    lo, hi = lims
    return lo + (hi - lo) * (rng.random(shape) if shape else float(rng.random()))


def _flat(out):
    """The outputs of a case as one vector (tuples and lists of arrays concatenated)."""
    if isinstance(out, tuple | list):
        return anp.concatenate([anp.ravel(anp.asarray(o) * 1.0) for o in out])
    return anp.ravel(out * 1.0)


def _numeric_jacobian(fn, args, kwargs, i):
    """d flat(fn) / d args[i] by the fourth-order central difference (generic points)."""
    x = np.asarray(args[i], dtype=float)
    base = np.asarray(_flat(fn(*args, **kwargs)), dtype=float)
    jac = np.zeros(base.shape + x.shape)
    for j in np.ndindex(x.shape):
        h = 1e-5 * max(1.0, abs(float(x[j])))
        vals = []
        for k in (-2, -1, 1, 2):
            y = x.copy()
            y[j] += k * h
            a = list(args)
            a[i] = y if np.ndim(args[i]) else np.float64(y)
            vals.append(np.asarray(_flat(fn(*a, **kwargs)), dtype=float))
        jac[(...,) + j] = (vals[0] - 8 * vals[1] + 8 * vals[2] - vals[3]) / (12 * h)
    return jac


def check_case(case: Case) -> None:
    for args, kwargs in case.variants:
        def f(*a, kwargs=kwargs):
            return _flat(case.fn(*a, **kwargs))

        got = asd.jacobian(f, argnums=case.argnums)(*args)
        got = got if isinstance(got, tuple) else (got,)
        for i, g in zip(case.argnums, got, strict=True):
            want = _numeric_jacobian(case.fn, args, kwargs, i)
            np.testing.assert_allclose(np.reshape(g, want.shape), want, rtol=1e-5,
                                       atol=1e-6 * max(1.0, np.abs(want).max(initial=0.0)),
                                       err_msg=f"{case.name} {kwargs} argument {i}")
        w = np.random.default_rng(0).standard_normal(np.size(f(*args)))
        value = asd.value_and_subgrad(lambda *a, f=f, w=w: f(*a) @ w,
                                      argnums=case.argnums)(*args)[0]
        np.testing.assert_allclose(value, np.asarray(f(*args)) @ w, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{case.name} {kwargs}: the value")


CASES: list[Case] = []


def case(name, fn, variants, argnums=(0,), skip=""):
    CASES.append(Case(name, fn, variants, tuple(argnums), skip))


# ----- statistics (test_systematic: stat_check) -----

def _stat_variants(rng):
    B, C, D = R(rng, 3), R(rng, 2, 3), R(rng, 1, 3)
    out = [((3.5,), {}), ((R(rng),), {})]
    out += [((a,), {"axis": ax, "keepdims": kd}) for a in (B, C, D) for ax in (None, 0)
            for kd in (True, False)]
    out += [((a,), {"axis": 1, "keepdims": kd}) for a in (C, D) for kd in (True, False)]
    return out


for _name in ("max", "min", "mean", "sum", "prod", "var", "std"):
    _r = _rng(_name)
    case(f"stat {_name}", getattr(anp, _name), _stat_variants(_r))

# ----- unary ufuncs (test_systematic and test_scalar_ops) -----

UNARY = {
    "sin": None, "abs": (0.1, 4.0), "absolute": (0.1, 4.0), "arccosh": (1.1, 4.0),
    "arcsinh": (-0.9, 0.9), "arctanh": (-0.9, 0.9), "ceil": (-1.5, 1.5), "cos": None,
    "cosh": None, "deg2rad": None, "degrees": None, "exp": None, "exp2": None, "expm1": None,
    "fabs": None, "floor": (-1.5, 1.5), "log": (0.2, 2.0), "log10": (0.2, 2.0),
    "log1p": (0.2, 2.0), "log2": (0.2, 2.0), "rad2deg": None, "radians": None, "sign": None,
    "sinh": None, "sqrt": (1.0, 3.0), "square": None, "tan": (-1.1, 1.1), "tanh": None,
    "real": None, "real_if_close": None, "imag": None, "conj": None, "conjugate": None,
    "angle": None, "arccos": (-0.9, 0.9), "arcsin": (-0.9, 0.9), "arctan": None,
    "negative": None, "reciprocal": (0.5, 2.0), "sinc": None,
}
for _name, _lims in UNARY.items():
    _r = _rng(_name)
    _lims = _lims or (-2.0, 2.0)
    case(f"unary {_name}", getattr(anp, _name),
         [((U(_r, _lims, *s),), {}) for s in ((), (2,), (3, 2), (1, 2))])

# ----- binary ufuncs and operators -----

BINARY = {
    "add": (np.add, None, None), "logaddexp": (np.logaddexp, None, None),
    "logaddexp2": (np.logaddexp2, None, None),
    "remainder": (np.remainder, (-0.9, 0.9), (0.7, 1.9)),
    "true_divide": (np.true_divide, None, (0.8, 1.2)), "mod": (np.mod, None, (0.8, 2.1)),
    "true_divide_neg": (np.true_divide, None, (-2.0, -0.3)),
    "mod_neg": (np.mod, None, (-2.0, -0.3)), "op_mul": (operator.mul, None, None),
    "op_add": (operator.add, None, None), "op_sub": (operator.sub, None, None),
    "op_mod": (operator.mod, None, (0.3, 2.0)), "op_mod_neg": (operator.mod, None, (-2.0, -0.3)),
    "multiply": (np.multiply, None, None), "divide": (np.divide, None, (0.5, 2.0)),
    "power_arg0": (np.power, (1.0, 2.0), (1.0, 2.0)), "power_arg1": (np.power, (0.2, 2.0),
                                                                      (0.0, 1.0)),
}
for _name, (_fn, _la, _lb) in BINARY.items():
    _r = _rng(_name)
    _la, _lb = _la or (-2.0, 2.0), _lb or (-2.0, 2.0)
    case(f"binary {_name}", _fn,
         [((U(_r, _la, *s), U(_r, _lb, *s2)), {}) for s, s2 in
          (((), ()), ((2,), (2,)), ((3, 2), (3, 2)), ((1, 2), (3, 2)), ((3, 2), ()))],
         argnums=(0, 1))
case("scalar power of 0 in y", lambda y: anp.power(0.0, y), [((0.7,), {})])

# ----- linear algebra of arrays, contractions, structure -----

_r = _rng("misc")
case("transpose", anp.transpose, [((R(_r, 2, 3, 4),), {"axes": a}) for a in
                                  (None, (0, 1, 2), (0, 2, 1), (2, 0, 1), (2, 1, 0), (1, 0, 2),
                                   (1, 2, 0))])
case("moveaxis", anp.moveaxis, [((R(_r, 2, 3, 4),), {"source": s, "destination": d})
                                for s in range(3) for d in range(3)])
case("repeat", anp.repeat, [((a,), {"repeats": n, "axis": ax}) for a in (R(_r, 2, 3, 4),
                                                                          R(_r, 3, 1))
                            for n in (0, 1, 2) for ax in (None, 0, 1)])
case("diff", anp.diff, [((R(_r, 5, 5),), {"n": n, "axis": a}) for n in (1, 2) for a in (0, 1)]
     + [((R(_r, 1),), {"axis": 0}), ((R(_r, 3, 1),), {"axis": 1})])
case("gradient", anp.gradient, [((R(_r, 5, 5),), {"axis": a}) for a in (None, 0, 1, -1)]
     + [((R(_r, 4, 4, 4),), {"axis": a}) for a in ((0, 1), (0, -1))])
case("tile", anp.tile, [((R(_r, 2, 1, 3, 1),), {"reps": (1, 4, 1, 2)}),
                        ((R(_r, 1, 2),), {"reps": (2, 3)}), ((R(_r, 1),), {"reps": 2})])
case("kron", anp.kron, [((R(_r, 3, 3), R(_r, 2, 2)), {})], argnums=(0, 1))
case("inner", anp.inner, [((a, b), {}) for a, b in ((1.5, 0.3), (R(_r, 3), R(_r, 3)),
                                                    (R(_r, 2, 3), R(_r, 4, 3)))], (0, 1))
case("dot", anp.dot, [((a, b), {}) for a, b in ((1.5, 0.3), (R(_r, 3), R(_r, 3)),
                                                (R(_r, 2, 3), R(_r, 3, 4)),
                                                (R(_r, 2, 2, 3), R(_r, 2, 3, 4)),
                                                (R(_r, 4, 5), R(_r)), (R(_r), R(_r, 4)))], (0, 1))
case("outer", anp.outer, [((R(_r, 3), R(_r, 4)), {})], (0, 1))
case("matmul", anp.matmul, [((a, b), {}) for a, b in ((R(_r, 3), R(_r, 3)),
                                                      (R(_r, 2, 3), R(_r, 3, 4)),
                                                      (R(_r, 2, 2, 3), R(_r, 2, 3, 4)),
                                                      (R(_r, 1, 2, 2), R(_r, 3, 2, 1)))], (0, 1))
case("matmul operator", operator.matmul, [((R(_r, 2, 3), R(_r, 3, 4)), {})], (0, 1))
for _i, (_a, _b, _axes) in enumerate([
    ((1, 3), (3,), [(1,), (0,)]), ((3,), (1, 3), [(0,), (1,)]),
    ((2, 3, 4), (1, 2, 3), [(0, 1), (1, 2)]), ((2, 2), (2, 2), 1), ((4, 2, 2), (2, 2, 4), 2),
    ((4,), (), 0), ((2, 6), (6, 3), [[-1], [0]]), ((2, 6), (6, 3), [-1, 0]),
    ((2,), (2, 2), [0, 1]),
]):
    case(f"tensordot {_i + 1}", anp.tensordot,
         [((R(_r, *_a), R(_r, *_b)), {"axes": _axes})], (0, 1))
case("tensordot kwargs by position", lambda x: anp.tensordot(x * np.ones((2, 2)),
                                                              x * np.ones((2, 2)), 2),
     [((1.3,), {})])
for _name, _fn in (("maximum", anp.maximum), ("fmax", anp.fmax), ("minimum", anp.minimum),
                   ("fmin", anp.fmin)):
    case(_name, _fn, [((R(_r, *s), R(_r, *s2)), {}) for s, s2 in
                      (((1,), (1,)), ((1, 4), (3, 4)), ((3, 4), (1, 4)))], (0, 1))
case("sort", anp.sort, [((R(_r, 1),), {}), ((R(_r, 7),), {})])
case("partition", anp.partition, [((R(_r, n),), {"kth": k}) for n in (7, 14) for k in (0, 3, 6)])
for _name in ("atleast_1d", "atleast_2d", "atleast_3d"):
    case(_name, getattr(anp, _name), [((a,), {}) for a in (1.2, R(_r, 1), R(_r, 7), R(_r, 1, 4),
                                                           R(_r, 2, 4), R(_r, 2, 4, 5))])
EINSUM = [
    ("ij->ji", [(1, 1)]), ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]), ("ijk,lji->lki", [(3, 4, 4), (4, 4, 3)]),
    ("...jk,...lj->...lk", [(3, 4, 4), (3, 4, 4)]), ("...,...->...", [(3, 4, 4), (3, 4, 4)]),
    ("jk...,lj...->lk...", [(3, 2, 4), (2, 3, 4)]), ("j...k,lj...->lk...", [(2, 2, 2), (2, 2, 2)]),
    ("ijk,lji,lli->lki", [(3, 4, 4), (4, 4, 3), (4, 4, 3)]), ("k,nk->", [(5,), (10, 5)]),
    ("abcd->bd", [(3, 2, 3, 2)]), ("...k,...nk->...", [(3, 5), (3, 10, 5)]),
    ("ij,k", [(3, 4), (3,)]),
]
for _spec, _shapes in EINSUM:
    _ops = tuple(R(_r, *s) for s in _shapes)
    case(f"einsum {_spec}", lambda *ops, spec=_spec: anp.einsum(spec, *ops), [(_ops, {})],
         tuple(range(len(_ops))))
case("einsum with a leading zero axis", lambda a, b: anp.einsum("...ij,...jk->...ik", a, b),
     [((R(_r, 0, 2, 3), R(_r, 0, 3, 4)), {})], (0, 1))
case("einsum sublists", lambda a, b: anp.einsum(a, [0, 1], b, [1, 2], [0, 2]),
     [((R(_r, 2, 3), R(_r, 3, 4)), {})], (0, 1))
case("trace", anp.trace, [((R(_r, *s),), {"offset": o}) for s in ((5, 5), (4, 5), (5, 4),
                                                                 (3, 4, 5)) for o in (-1, 0, 1)])
case("diag", anp.diag, [((R(_r, 5, 5),), {"k": k}) for k in (-1, 0, 1)]
     + [((R(_r, 5),), {"k": k}) for k in (-1, 0, 1)])
for _name in ("tril", "triu"):
    case(_name, getattr(anp, _name), [((R(_r, *s),), {"k": k}) for s in ((5, 5), (5, 5, 4))
                                      for k in (-1, 0, 1)])
case("swapaxes", anp.swapaxes, [((R(_r, 3, 4, 5),), {"axis1": a, "axis2": b}) for a in range(3)
                                for b in range(3)])
case("rollaxis", anp.rollaxis, [((R(_r, 2, 3, 4),), {"axis": a, "start": s}) for a in range(3)
                                for s in range(3)])
case("cross", anp.cross, [((R(_r, 3, 3), R(_r, 3, 3)), {"axisa": a, "axisb": b, "axisc": c})
                          for a in (-1, 0) for b in (-1, 1) for c in (-1, 0)]
     + [((R(_r, 3, 3), R(_r, 3, 3)), {"axis": a}) for a in (None, -1, 0, 1)], (0, 1))
for _name, _shapes in (("vsplit", ((4, 8), (4, 4, 4))), ("hsplit", ((4, 8), (4, 4, 4))),
                       ("dsplit", ((4, 4, 4),))):
    case(_name, getattr(anp, _name), [((R(_r, *s), p), {}) for s in _shapes
                                      for p in (2, [1, 2])])
case("split", anp.split, [((R(_r, 7), 1), {"axis": 0}), ((R(_r, 4, 8), 4), {"axis": 1}),
                          ((R(_r, 4, 4, 4), [1, 2]), {"axis": 2})])
case("array_split", anp.array_split, [((R(_r, 7), 3), {"axis": 0}),
                                      ((R(_r, 7, 7), [3, 5]), {"axis": 1}),
                                      ((R(_r, 7, 7, 7), 4), {"axis": 2})])
case("concatenate", lambda a, b, **k: anp.concatenate((a, b), **k),
     [((R(_r, 1), R(_r, 3)), {"axis": 0}), ((R(_r, 2, 2), R(_r, 2, 2)), {"axis": 1}),
      ((R(_r, 2, 2, 2), R(_r, 2, 2, 2)), {"axis": 2})], (0, 1))
case("concatenate list, positional axis", lambda a, b: anp.concatenate([b, a, b], 1),
     [((R(_r, 5, 6, 4), R(_r, 5, 6, 4)), {})], (0, 1))
for _name in ("vstack", "hstack", "column_stack", "row_stack"):
    _fn = getattr(asd.numpy, "vstack" if _name == "row_stack" else _name)
    case(_name, lambda a, b, fn=_fn: fn((a, b)),
         [((R(_r, 2), R(_r, 2)), {}), ((R(_r, 3, 2), R(_r, 3, 2)), {})], (0, 1))
case("stack", lambda a, b, **k: anp.stack((a, b), **k), [((R(_r, 2), R(_r, 2)), {"axis": a})
                                                         for a in (0, 1)], (0, 1))
_masks = [R(_r, 3, 4, 5) > 0 for _ in range(3)]
case("select", lambda a, b, c: anp.select(_masks, [a, b, c], default=1.1),
     [((R(_r, 3, 4, 5), R(_r, 3, 4, 5), R(_r, 3, 4, 5)), {})], (0, 1, 2))
case("pad", anp.pad, [((R(_r, 2, 2), w), {"mode": "constant"}) for w in
                      (0, 3, (3,), (3, 2), ((3, 2),), ((1, 2), (3, 4)), ((0, 0), (0, 0)))])

# ----- test_numpy: reductions, indexing, reshaping, building arrays -----

_r = _rng("numpy")
M = R(_r, 5, 6, 4)
case("dot with floats", anp.dot, [((R(_r, 4, 5), 1.7), {}), ((1.7, R(_r, 4, 5)), {})], (0, 1))
case("max over axes", anp.max, [((R(_r, 4, 5),), {"axis": a, "keepdims": k}) for a in (0, 1)
                                for k in (False, True)])
case("sum over an axis tuple", lambda x: anp.sum(x, axis=(1, 2)), [((R(_r, 4, 5, 3),), {})])
case("plain numpy reductions", lambda a: sum(f(np.exp(a) * np.array([1.5, 0.7, 2.0]))
                                             for f in (np.sum, np.prod, np.max, np.min)),
     [((0.7,), {})])
for _name in ("flipud", "fliplr", "rot90"):
    case(_name, getattr(anp, _name), [((R(_r, 4, 5),), {})])
case("cumsum", anp.cumsum, [((R(_r, 4, 5),), {"axis": a}) for a in (0, 1, None)]
     + [((R(_r, 6),), {})])
case("cumprod", anp.cumprod, [((R(_r, 4, 5),), {"axis": a}) for a in (0, 1, None)])
case("builtin sum of arrays", lambda x, y: sum([x, y]), [((R(_r, 3, 4), R(_r, 3, 4)), {})],
     (0, 1))
case("mean", anp.mean, [((R(_r, 4, 5),), {"axis": a, "keepdims": k}) for a in (None, 0)
                        for k in (False, True)])
case("mean/std/var of a list of arrays", lambda x: anp.stack(
    [anp.mean(anp.array([x, x + 2])), anp.std(anp.array([x, x + 2.5])),
     anp.var(anp.array((x, 3 * x)))]), [((0.3,), {})])
case("var ddof", anp.var, [((R(_r, 3, 4),), {"ddof": d, "axis": a, "keepdims": k})
                           for d in (0, 1, 2) for a in (None, 1) for k in (False, True)])
case("std ddof", anp.std, [((R(_r, 3, 4),), {"ddof": d, "axis": a, "keepdims": k})
                           for d in (0, 1, 2) for a in (None, 1) for k in (False, True)])
for _name, _fn in [
    ("index ints", lambda x: x[3, 0, 1]), ("index slice", lambda x: x[::-1, 2:4, :]),
    ("index lists", lambda x: x[[0, 1, 2], :, :]), ("index mixed", lambda x: x[3, 2:, [1, 3]]),
    ("index slice fanout", lambda x: x[::-1, 2:4, :] + x[::-1, 3:5, :]),
    ("index multiple slices", lambda x: x[2:5][1:3]),
    ("reshape method", lambda x: x.reshape((20, 6))), ("reshape call", lambda x: anp.reshape(
        x, (20, 6))), ("reshape method no tuple", lambda x: x.reshape(20, 6)),
    ("ravel method", lambda x: x.ravel()), ("ravel call", anp.ravel),
    ("flatten method", lambda x: x.flatten()), ("transpose method", lambda x: x.T),
    ("squeeze call", lambda x: anp.squeeze(x[:, :1])), ("squeeze method",
                                                        lambda x: x[:, :1].squeeze()),
    ("expand_dims", lambda x: anp.expand_dims(x, 2)),
    ("roll", lambda x: anp.roll(x, 2, axis=1)), ("roll flat", lambda x: anp.roll(x, 3)),
    ("clip", lambda x: anp.clip(x, -0.5, 0.5)),
    ("prod axis", lambda x: anp.prod(x, axis=1)), ("prod keepdims", lambda x: anp.prod(
        x, axis=0, keepdims=True)),
    ("multi index repeated", lambda x: anp.sum(x[[0, 0, 1]])),
    ("index dot slices", lambda x: anp.dot(x[0, 0, :2], x[1, 1, 2:])),
    ("len", lambda x: x * len(x)), ("no relation", lambda x: x * 0.0 + 1.0),
    ("diagonal", lambda x: anp.diagonal(x, axis1=-1, axis2=-2)),
    ("trace extra dims", lambda x: anp.trace(x, axis1=0, axis2=2)),
]:
    case(_name, _fn, [((M,), {})])
case("vector slice", lambda x: x[2:4], [((R(_r, 5),), {})])
case("append", anp.append, [((np.array([1.0, 2.0, 3.0]), 4.0), {}),
                            ((np.array([[1.0, 2.0, 3.0]]), np.array([[7.0, 8.0, 9.0]])),
                             {"axis": 0})], (0, 1))
case("concatenate with constants", lambda x: anp.concatenate((M[:2], x, M[:1])),
     [((R(_r, 4, 6, 4),), {})])
case("array from traced values", lambda x: anp.array([[x, x * 1.0, x + 2.5],
                                                      [x ** 2, x, x / 2.0]]), [((3.0,), {})])
case("array from a scalar", anp.array, [((3.0,), {})])
case("array from arrays", lambda x: anp.array([[2 * x, x + 1], [x, x]]),
     [((R(_r, 3, 2),), {})])
case("scalar attributes", lambda x: x ** 2 if (x.shape, x.ndim, x.size, x.dtype) == (
    (), 0, 1, np.float64) else None, [((np.float64(3.0),), {})])
_c = R(_r, 3, 2)
case("r_ and c_", lambda x: anp.concatenate([anp.r_[x].ravel(), anp.r_[x, x].ravel(),
                                             anp.r_[x, _c, x].ravel(), anp.c_[x, _c, x].ravel(),
                                             anp.r_[x[:, 0], _c[:, 0], 1:4]]),
     [((R(_r, 3, 2),), {})])
case("where constant mask", lambda x, y: anp.where(R(np.random.default_rng(1), 4, 5) > 0, x, y),
     [((R(_r, 4, 5), R(_r, 4, 5)), {})], (0, 1))
case("cast to int indices", lambda W: W[:, :-1][np.int64(anp.abs(W[:, -1]) * 2.0)].sum(),
     [((np.abs(R(_r, 5, 3)) + 0.25,), {})])
case("nan_to_num", lambda x: anp.sum(anp.sin(anp.nan_to_num(
    x + np.array([0.0, np.nan, np.inf, -np.inf])))), [((R(_r, 4),), {})])
case("max of equal values", lambda x: anp.concatenate([
    anp.ravel(anp.max(anp.array([x, x]))),
    anp.max(anp.array([[x, x], [x, 0.5]]), axis=1),
    anp.min(anp.array([[x, x, x], [x, 0.5, 0.5], [0.5, 0.5, 0.5], [x, x, 0.5]]), axis=0),
    anp.ravel(anp.maximum(x, x)),
    anp.ravel(anp.maximum(anp.array([x, x, 0.5]), anp.array([[x, 0.5, x], [x, x, 0.5]])))]),
     [((1.0,), {}), ((-1.0,), {}), ((2.0,), {})])
case("linspace", lambda x, y, num: anp.linspace(x, y, num),
     [((1.2, 3.4, n), {}) for n in (0, 1, 5)] + [((1.2, -3.4, 5), {})], (0, 1))
case("astype", lambda x: anp.sum(anp.sin(x.astype("float64"))),
     [((np.arange(3, dtype="float32"),), {})])

# ----- linear algebra (test_linalg; the rules are library/linalg.py's) -----

_r = _rng("linalg")


def _psd(rng, n):
    a = R(rng, n, n)
    return a @ a.T + n * np.eye(n)


def _sym(a):
    lower = anp.tril(a)
    return (lower + anp.swapaxes(lower, -1, -2)) / 2.0


case("inv", anp.linalg.inv, [((_psd(_r, 4),), {}), ((np.stack([_psd(_r, 3)] * 2),), {})])
case("pinv", anp.linalg.pinv, [((R(_r, 4, m),), {}) for m in (2, 4, 5)]
     + [((R(_r, 2, 4, 3),), {})])
case("solve", anp.linalg.solve, [((_psd(_r, 4), R(_r, 4, 2)), {}), ((_psd(_r, 4), R(_r, 4)), {}),
                                 ((np.stack([_psd(_r, 3)] * 2), R(_r, 2, 3, 2)), {})], (0, 1))
case("det", anp.linalg.det, [((R(_r, 4, 4),), {}), ((R(_r, 2, 3, 3),), {})])
case("slogdet", lambda x: anp.linalg.slogdet(x)[1], [((R(_r, 4, 4),), {}),
                                                      ((R(_r, 2, 3, 3),), {})])
case("vector 2-norm", anp.linalg.norm, [((R(_r, 6),), {})])
case("norm of a list of arrays", lambda x, y: anp.linalg.norm(anp.array([x, y])),
     [((1.3, -0.7), {})], (0, 1))
case("frobenius norm", anp.linalg.norm, [((R(_r, 4, 5),), {}), ((R(_r, 3, 4, 5),),
                                                                 {"axis": (0, 1)})])
case("vector norm ord", anp.linalg.norm, [((R(_r, 6),), {"ord": o}) for o in (1, 3, np.inf)])
case("norm axis", anp.linalg.norm, [((R(_r, 4, 5, 3),), {"axis": a}) for a in (0, 1, 2)])
case("nuclear norm", anp.linalg.norm, [((R(_r, 4, 3),), {"ord": "nuc"}),
                                       ((R(_r, 4, 3, 2),), {"ord": "nuc", "axis": (0, 1)})])
case("eigh", lambda x, **k: anp.linalg.eigh(_sym(x), **k), [((R(_r, 4, 4),), {}),
                                                             ((R(_r, 4, 4),), {"UPLO": "U"})])
case("eigh broadcasting", lambda x: anp.linalg.eigh(_sym(x)),
     [((R(_r, 2, 3, 4, 4) + 3 * np.eye(4),), {})])
case("cholesky", lambda x: anp.linalg.cholesky(_sym(x)), [((_psd(_r, 4),), {}),
                                                           ((np.stack([_psd(_r, 3)] * 2),), {})])
case("cholesky reparameterization", lambda x: anp.linalg.norm(
    anp.dot(anp.linalg.cholesky(_sym(x)), np.arange(1.0, 5.0))), [((_psd(_r, 4),), {})])
for _name, _shape in (("wide", (3, 5)), ("square", (4, 4)), ("tall", (5, 3))):
    case(f"svd {_name}", lambda x: anp.linalg.svd(x, full_matrices=False),
         [((R(_r, *_shape),), {}), ((R(_r, 2, *_shape),), {})])
case("svd only s", lambda x: anp.linalg.svd(x, compute_uv=False),
     [((R(_r, 3, 5),), {}), ((R(_r, 2, 5, 3),), {})])

# What fails on this branch, and why: each is a refusal or a linear-algebra rule of another
# file (library/linalg.py, whose batched and UPLO='U' rules are on main), never this file's
# functions. Marked xfail (not strict), so a fix shows up as an XPASS.
LINALG = "library/linalg.py (another helper's): "
KNOWN: dict[str, str] = {
    "einsum with a leading zero axis": "asd/core/arguments.py refuses differentiating empty "
                                       "arrays (ArgumentError: nothing to differentiate)",
    "nuclear norm": LINALG + "the nuclear norm of a stack of matrices is refused",
    "eigh": LINALG + "eigh(UPLO='U') returns eigenvectors of other signs than numpy's",
    "eigh broadcasting": LINALG + "eigh of a stack of matrices is refused",
    "svd wide": LINALG + "svd of a stack of matrices is refused",
    "svd square": LINALG + "svd of a stack of matrices is refused",
    "svd tall": LINALG + "svd of a stack of matrices is refused",
    "svd only s": LINALG + "svd of a stack of matrices is refused",
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_peer_case(case: Case, request):
    if case.name in KNOWN:
        request.applymarker(pytest.mark.xfail(reason=KNOWN[case.name], strict=False))
    check_case(case)


def _passes(c: Case) -> bool:
    try:
        check_case(c)
    except (AssertionError, asd.ASDError):
        return False
    return True


def test_the_pass_rate():
    """The share of the peer's cases asd differentiates correctly (issue 23 asks >= 95%)."""
    passed = [c.name for c in CASES if _passes(c)]
    rate = len(passed) / len(CASES)
    failing = sorted({c.name for c in CASES} - set(passed))
    print(f"peer numpy suite: {len(passed)}/{len(CASES)} = {rate:.1%}; failing: {failing}")
    assert set(failing) <= set(KNOWN), f"new failures: {sorted(set(failing) - set(KNOWN))}"
    assert rate >= 0.95
