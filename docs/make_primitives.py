"""Write ``docs/primitives.md``: every library primitive, its kinks, and what asd and the
installed frameworks return there, all computed when this script runs.

Usage: ``python docs/make_primitives.py [OUTPUT]`` (default: ``docs/primitives.md`` next to
this script). The primitives are enumerated from the ``asd.library`` modules (the same walk
as ``asd.proofs.library_primitives``), so a new primitive shows up here without editing this
file; `KINKS` describes where each nonsmooth one has kinks and `CASES` evaluates a function
at one of its kinks: asd's subgradient along ``+v`` and ``-v`` (one sweep each, exact branch
choice along the ray) and each framework's own gradient of the same function written with
the framework's own operation ("—" where it has none).

It is a developer script rather than part of the installed package because it imports the
frameworks (PyTorch, JAX, TensorFlow), which asd does not depend on.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from asd.library import spectral
from asd.proofs import library_primitives

import asd
import asd.cli.frameworks as fw

FRAMEWORKS = ("torch", "jax", "tensorflow")

KINKS: dict[str, str] = {
    "relu": "x = 0",
    "abs": "x = 0",
    "maximum": "a = b",
    "minimum": "a = b",
    "clip": "x = lo, x = hi (and lo = hi)",
    "leaky_relu": "x = 0",
    "relu6": "x = 0, x = 6",
    "hardtanh": "x = lo, x = hi",
    "hard_sigmoid": "x = -3, x = 3",
    "soft_threshold": "x = -lam, x = lam",
    "hinge": "x = 1",
    "huber": "none: C^1 (second derivative jumps at |x| = delta)",
    "argmax": "ties of the maximum (integer output, constant elsewhere; an index: gather_at)",
    "argmin": "ties of the minimum (integer output, constant elsewhere; an index: gather_at)",
    "argsort": "ties among entries (integer output, constant elsewhere; an index: gather_at)",
    "gather_at": "tied positions (decided along the ray; a jump where they gather "
                 "different values raises)",
    "greater": "a = b (boolean output, constant elsewhere; decides where/select)",
    "greater_equal": "a = b (boolean output, constant elsewhere; decides where/select)",
    "less": "a = b (boolean output, constant elsewhere; decides where/select)",
    "less_equal": "a = b (boolean output, constant elsewhere; decides where/select)",
    "equal": "a = b (boolean output, constant elsewhere)",
    "not_equal": "a = b (boolean output, constant elsewhere)",
    "sign": "jump at x = 0 (constant elsewhere)",
    "floor": "jumps at the integers (constant elsewhere)",
    "ceil": "jumps at the integers (constant elsewhere)",
    "trunc": "jumps at the nonzero integers (constant elsewhere)",
    "rint": "jumps at the half-integers (constant elsewhere)",
    "round": "jumps where x * 10**decimals is a half-integer (constant elsewhere)",
    "heaviside": "jump at x = 0 (constant elsewhere)",
    "floor_divide": "jumps at the multiples of c (constant elsewhere)",
    "remainder": "jumps at the multiples of c (slope 1 elsewhere)",
    "floor_divide_xy": "jumps where the traced c divides x (constant elsewhere)",
    "remainder_xy": "jumps where the traced c divides x (slopes 1 and -floor(x / c) elsewhere)",
    "angle": "jump at x = 0 (constant elsewhere: 0 above, pi below)",
    "any": "where its input jumps (boolean output)",
    "arctan2": "a 2 pi jump across y = 0, x < 0; refused at (0, 0)",
    "arccosh": "infinite slope at x = 1 (refused)",
    "all": "where its input jumps (boolean output)",
    "where": "lhs = rhs of the comparison (a jump a != b there raises)",
    "where_logic": "lhs = rhs of its comparisons (a jump a != b where the combined condition "
                   "changes raises)",
    "logical_and": "where its comparisons jump (boolean output)",
    "logical_or": "where its comparisons jump (boolean output)",
    "logical_xor": "where its comparisons jump (boolean output)",
    "logical_not": "where its comparison jumps (boolean output)",
    "select": "none inside: a fixed boolean mask picks entries",
    "reduce_max": "ties among the maximal entries",
    "sort": "ties among entries",
    "topk_sum": "ties at the k-th largest entry",
    "quantile": "ties at the order statistics interpolated",
    "median": "ties at the middle order statistics",
    "max_pool": "ties among the maximal entries of a window",
    "cummax": "ties between the running maximum and a new entry",
    "pnorm": "zero entries (p = 1), a zero vector (p > 1), ties of max |x_i| (p = inf)",
    "elu": "x = 0 when alpha != 1 (C^1 for alpha = 1)",
    "proj_nonneg": "x_i = 0",
    "proj_nonpos": "x_i = 0",
    "proj_box": "x_i = lo_i, x_i = hi_i",
    "proj_linf_ball": "|x_i| = r",
    "proj_halfspace": "<a, x> = b",
    "proj_l2_ball": "||x|| = r",
    "proj_simplex": "x_i = tau (the threshold)",
    "proj_standard_simplex": "x_i = tau, sum max(x, 0) = r",
    "proj_l1_ball": "|x_i| = tau, ||x||_1 = r",
    "proj_soc": "the cone's boundary and its polar's",
    "proj_exp_cone": "the cone's and its polar's curved boundaries, the face s = 0 and the region "
                     "r, s < 0 projecting onto it, their edges, the apex",
    "proj_exp_cone_dual": "the exponential cone's kinks at -x (Moreau)",
    "proj_power_cone": "the cone's and its polar's curved boundaries, the plane z = 0 outside "
                       "both, the edges (x, 0, 0) and (0, y, 0), the apex",
    "proj_power_cone_dual": "the power cone's kinks at -x (Moreau)",
    "proj_rsoc": "the cone's boundary and its polar's",
    "proj_psd": "zero eigenvalues",
    "proj_nuclear_ball": "singular values at the threshold, nuclear norm = r",
    "distance": "the set's boundary (and inside it: the distance is 0)",
    "eigvalsh": "repeated eigenvalues",
    "topk_eigsum": "lambda_k = lambda_(k+1)",
    "lambda_min": "a repeated smallest eigenvalue",
    "spectral_norm": "a repeated largest singular value",
    "nuclear_norm": "zero singular values",
    "real_pow": "x = 0 for exponents in (0, 1) (not Lipschitz: raises)",
    "sqrt": "x = 0 (not Lipschitz: raises)",
    "cbrt": "x = 0 (not Lipschitz: raises)",
    "correlation": "a zero variance (not Lipschitz: raises)",
    "svdvals": "repeated and zero singular values",
    "eigh_vectors": "the vectors of a repeated eigenvalue (not continuous: reading them raises)",
    "svd_vectors": "the vectors of a repeated or zero singular value (reading them raises)",
    "eigh_basis_of_repeated_eigenvalues": "repeated eigenvalues (a jump of their vectors)",
    "svd_basis_of_repeated_or_zero_singular_values": "repeated or zero singular values (a jump)",
    "eigvals": "complex or repeated eigenvalues (raises)",
    "eig_vectors": "complex or repeated eigenvalues (raises)",
    "pinv": "a rank change (a jump: raises)",
    "qr": "rank deficiency, and where numpy's Householder signs flip (raises)",
    "gammaln": "poles at 0, -1, -2, ... (raises)",
    "gamma": "poles at 0, -1, -2, ... (raises)",
    "digamma": "poles at 0, -1, -2, ... (raises)",
    "polygamma": "poles at 0, -1, -2, ... (raises)",
    "beta": "poles where a or b is 0, -1, ...; a + b = 0, -1, ... (raises)",
    "betaln": "poles where a or b is 0, -1, ...; a + b = 0, -1, ... (raises)",
    "xlogy": "x = y = 0 with x traced (not continuous: raises)",
    "xlog1py": "x = 0, y = -1 with x traced (not continuous: raises)",
    "logit": "x = 0, x = 1 (not finite: raises)",
    "erfinv": "x = -1, x = 1 (not finite: raises)",
    "erfcinv": "x = 0, x = 2 (not finite: raises)",
    "ndtri": "x = 0, x = 1 (not finite: raises)",
    "gammainc": "x = 0 for a < 1 (infinite slope: raises); a traced raises",
    "gammaincc": "x = 0 for a < 1 (infinite slope: raises); a traced raises",
    "betainc": "x = 0 for a < 1, x = 1 for b < 1 (infinite slope: raises); a, b traced raise",
    "betaincc": "x = 0 for a < 1, x = 1 for b < 1 (infinite slope: raises); a, b traced raise",
    "gamma_cdf": "z = 0: a kink for a = 1, smooth for a > 1, raises for a < 1; a traced raises",
    "gamma_sf": "z = 0: a kink for a = 1, smooth for a > 1, raises for a < 1; a traced raises",
    "beta_cdf": "z = 0 (by a), z = 1 (by b): a kink where it is 1, smooth above, raises below",
    "beta_sf": "z = 0 (by a), z = 1 (by b): a kink where it is 1, smooth above, raises below",
    "stdtr": "none in t; df traced raises",
}
"""Where each nonsmooth primitive has kinks; the others are smooth on their domain."""


@dataclass(frozen=True)
class Case:
    """``f`` at the kink ``x``: asd along ``±v`` and each framework's own gradient."""

    primitive: str
    formula: str
    f: Callable[[Any], Any]  # written with asd
    x: tuple | float
    v: tuple | float
    frameworks: dict[str, Callable[[Any], Any]]


def _torch():
    import torch
    import torch.nn.functional as F

    return torch, F


def _jax():
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _tf():
    import tensorflow as tf

    return tf


def _common(name: str, build: Callable[[Any, Any], Any]) -> dict[str, Callable]:
    """Frameworks whose `asd.cli.frameworks.ops` namespace has ``name``: ``build(ops, x)``."""
    return {f: (lambda x, f=f: build(fw.ops(f), x)) for f in FRAMEWORKS}


W2, W3 = (1.0, 2.0), (1.0, 2.0, 3.0)  # weights that make ties show in a scalar


CASES: list[Case] = [
    Case("relu", "relu(x)", asd.relu, 0.0, 1.0, _common("relu", lambda o, x: o.relu(x))),
    Case("abs", "|x|", asd.abs, 0.0, 1.0, _common("abs", lambda o, x: o.abs(x))),
    Case("maximum", "max(x1, x2)", lambda x: asd.maximum(x[0], x[1]), (0.0, 0.0), (1.0, -1.0),
         _common("maximum", lambda o, x: o.maximum(x[0], x[1]))),
    Case("minimum", "min(x1, x2)", lambda x: asd.minimum(x[0], x[1]), (0.0, 0.0), (1.0, -1.0),
         _common("minimum", lambda o, x: o.minimum(x[0], x[1]))),
    Case("clip", "clip(x, -1, 1)", lambda x: asd.clip(x, -1.0, 1.0), 1.0, 1.0,
         _common("clip", lambda o, x: o.clip(x, -1.0, 1.0))),
    Case("clip", "clip(x, 0, 0)", lambda x: asd.clip(x, 0.0, 0.0), 0.0, 1.0,
         _common("clip", lambda o, x: o.clip(x, 0.0, 0.0))),
    Case("leaky_relu", "leaky_relu(x, 0.01)", asd.leaky_relu, 0.0, 1.0,
         _common("leaky_relu", lambda o, x: o.leaky_relu(x, 0.01))),
    Case("relu6", "relu6(x)", asd.relu6, 6.0, 1.0, _common("relu6", lambda o, x: o.relu6(x))),
    Case("relu6", "relu6(x)", asd.relu6, 0.0, 1.0, _common("relu6", lambda o, x: o.relu6(x))),
    Case("hardtanh", "hardtanh(x)", asd.hardtanh, -1.0, 1.0,
         _common("hardtanh", lambda o, x: o.hardtanh(x))),
    Case("hard_sigmoid", "hard_sigmoid(x)", asd.hard_sigmoid, 3.0, 1.0, {
        "torch": lambda x: _torch()[1].hardsigmoid(x),
        "jax": lambda x: _jax()[0].nn.hard_sigmoid(x),
    }),
    Case("soft_threshold", "soft_threshold(x, 1)", lambda x: asd.soft_threshold(x, 1.0), 1.0,
         1.0, {"torch": lambda x: _torch()[1].softshrink(x, 1.0)}),
    Case("hinge", "hinge(x) = max(0, 1 - x)", asd.hinge, 1.0, 1.0, {}),
    Case("huber", "huber(x, 1)", asd.huber, 1.0, 1.0, {
        "torch": lambda x: _torch()[1].huber_loss(x, x * 0.0, reduction="sum", delta=1.0),
        # Keras 3 losses reduce over the last axis: give the scalar one
        "tensorflow": lambda x: _tf().keras.losses.Huber(1.0, reduction="sum")(x[None] * 0.0,
                                                                               x[None]),
    }),
    Case("where", "where(x >= 0, x, -x)", lambda x: asd.where(x >= 0, x, -x), 0.0, -1.0,
         _common("where", lambda o, x: o.where(x >= 0, x, -x))),
    Case("reduce_max", "max(x)", asd.max, (1.0, 1.0, 0.0), (0.0, 1.0, 0.0),
         _common("max", lambda o, x: o.max(x))),
    Case("reduce_max", "min(x)", asd.min, (0.0, 0.0, 1.0), (0.0, 1.0, 0.0),
         _common("min", lambda o, x: o.min(x))),
    Case("sort", "sort(x) . (1, 2)", lambda x: (asd.sort(x) * np.array(W2)).sum(), (0.0, 0.0),
         (1.0, -1.0), _common("sort", lambda o, x: o.sum(o.sort(x) * o.asarray(W2)))),
    Case("gather_at", "x[argmax(x)]", lambda x: x[np.argmax(x)], (1.0, 1.0, 0.0),
         (1.0, -1.0, 0.0), {}),
    Case("topk_sum", "topk_sum(x, 2)", lambda x: asd.topk_sum(x, 2), (1.0, 1.0, 1.0),
         (1.0, 0.0, -1.0), _common("topk_sum", lambda o, x: o.topk_sum(x, 2))),
    Case("median", "median(x)", asd.median, (0.0, 0.0, 0.0), (1.0, 0.0, -1.0),
         _common("median", lambda o, x: o.median(x))),
    Case("quantile", "quantile(x, 0.25)", lambda x: asd.quantile(x, 0.25), (0.0, 0.0, 0.0),
         (1.0, 0.0, -1.0), {
             "torch": lambda x: _torch()[0].quantile(x, 0.25),
             "jax": lambda x: _jax()[1].quantile(x, 0.25),
         }),
    Case("max_pool", "sum(max_pool1d(x, 2))", lambda x: asd.max_pool1d(x, 2).sum(),
         (0.0, 0.0, 1.0, 1.0), (1.0, -1.0, -1.0, 1.0),
         _common("max_pool1d", lambda o, x: o.sum(o.max_pool1d(x, 2)))),
    Case("cummax", "cummax(x) . (1, 2)", lambda x: (asd.cummax(x) * np.array(W2)).sum(),
         (1.0, 1.0), (-1.0, 1.0), {
             "torch": lambda x: (_torch()[0].cummax(x, 0).values * _torch()[0].tensor(
                 W2, dtype=x.dtype)).sum(),
             "jax": lambda x: (_jax()[0].lax.cummax(x) * _jax()[1].asarray(W2)).sum(),
         }),
    Case("pnorm", "l1_norm(x)", asd.l1_norm, (0.0, 0.0), (1.0, -1.0),
         _common("norm", lambda o, x: o.norm(x, 1))),
    Case("pnorm", "l2_norm(x)", asd.l2_norm, (0.0, 0.0), (3.0, -4.0),
         _common("norm", lambda o, x: o.norm(x))),
    Case("pnorm", "linf_norm(x)", asd.linf_norm, (2.0, -2.0), (0.0, -1.0),
         _common("norm", lambda o, x: o.norm(x, np.inf))),
    Case("elu", "elu(x, 0.5)", lambda x: asd.elu(x, 0.5), 0.0, 1.0, {
        "torch": lambda x: _torch()[1].elu(x, 0.5),
        "jax": lambda x: _jax()[0].nn.elu(x, 0.5),
        "tensorflow": lambda x: _tf().where(x > 0, x, 0.5 * (_tf().exp(x) - 1)),
    }),
    Case("proj_nonneg", "nonneg(x) . (1, 2)",
         lambda x: (asd.projections.nonneg(x) * np.array(W2)).sum(), (0.0, 0.0), (1.0, -1.0),
         {}),
    Case("proj_box", "box(x, 0, 1) . (1, 2)",
         lambda x: (asd.projections.box(x, 0.0, 1.0) * np.array(W2)).sum(), (0.0, 1.0),
         (1.0, -1.0), {}),
    Case("proj_linf_ball", "linf_ball(x) . (1, 2)",
         lambda x: (asd.projections.linf_ball(x) * np.array(W2)).sum(), (1.0, -1.0),
         (1.0, 1.0), {}),
    Case("proj_simplex", "simplex(x) . (1, 2, 3)",
         lambda x: (asd.projections.simplex(x) * np.array(W3)).sum(), (0.5, 0.5, 0.0),
         (1.0, 0.0, -1.0), {}),
    Case("proj_l1_ball", "l1_ball(x) . (1, 2)",
         lambda x: (asd.projections.l1_ball(x) * np.array(W2)).sum(), (1.0, 0.0),
         (1.0, 1.0), {}),
    Case("proj_l2_ball", "l2_ball(x) . (1, 2)",
         lambda x: (asd.projections.l2_ball(x) * np.array(W2)).sum(), (1.0, 0.0),
         (1.0, 1.0), {}),
    Case("topk_eigsum", "lambda_max([[x1, 0], [0, x2]])",
         lambda x: spectral.lambda_max(x[:, None] * np.eye(2)), (1.0, 1.0), (1.0, -1.0), {
             "torch": lambda x: _torch()[0].linalg.eigvalsh(_torch()[0].diag(x))[-1],
             "jax": lambda x: _jax()[1].linalg.eigvalsh(_jax()[1].diag(x))[-1],
         }),
]


def fmt(a: Any) -> str:
    """A gradient as text: ``1``, ``0.5``, ``(1, 0)`` (4 significant digits)."""
    a = np.asarray(a, dtype=float)
    text = [f"{e:.4g}" if e != 0 else "0" for e in a.ravel()]
    return text[0] if a.ndim == 0 else "(" + ", ".join(text) + ")"


def asd_answer(case: Case, sign: float) -> str:
    x, v = np.asarray(case.x, dtype=float), sign * np.asarray(case.v, dtype=float)
    try:
        return fmt(asd.subgrad(case.f, direction=v)(x))
    except Exception as e:  # an error is an answer too (a primitive that refuses)
        return f"error: {type(e).__name__}"


def framework_answer(case: Case, framework: str) -> str:
    if framework not in fw.available():
        return "not installed"
    if framework not in case.frameworks:
        return "—"
    try:
        return fmt(fw.gradient(framework, case.frameworks[framework], case.x))
    except Exception as e:  # the framework could not run it: report, do not hide
        return f"error: {type(e).__name__}"


def _versions() -> str:
    parts = [f"Python {platform.python_version()}", f"numpy {np.__version__}"]
    for name in FRAMEWORKS:
        if name in fw.available():
            parts.append(f"{fw.LABELS[name]} {sys.modules[fw._MODULES[name]].__version__}")
        else:
            parts.append(f"{fw.LABELS[name]} not installed")
    return ", ".join(parts)


def render() -> str:
    # one row per name: a position has two objects (constant off ties, jumping at them)
    prims = sorted({(m, p.name): (m, p) for m, p in library_primitives().values()}.values(),
                   key=lambda mp: (mp[0], mp[1].name))
    cases_of: dict[str, int] = {}
    for case in CASES:
        cases_of[case.primitive] = cases_of.get(case.primitive, 0) + 1
    lines = [
        "# Primitives",
        "",
        "Generated by `python docs/make_primitives.py` (do not edit by hand) with "
        f"{_versions()}. Every answer below is computed when the script runs.",
        "",
        f"## Every library primitive ({len(prims)})",
        "",
        "Enumerated from the `asd.library` modules. *Kinks*: where the primitive is not "
        "differentiable (blank: smooth on its domain). *Cases*: rows of the table below.",
        "",
        "Every public function (`asd.relu`, `asd.maximum`, `asd.norm`, `asd.projections.*`, "
        "`asd.spectral.*`, ...) also has the paper's ASD routine: `f.asd(*xs, direction=v, "
        "**params)` returns `(value, Dini derivative along v, branch gradient)` from one sweep "
        "of `f` (e.g. `asd.relu.asd(0.0, direction=-1.0)` is `(0, 0, 0)`).",
        "",
        "| family | primitive | kinks | cases |",
        "|---|---|---|---|",
    ]
    for module, prim in prims:
        kinks = KINKS.get(prim.name, "").replace("|", "\\|")
        lines.append(f"| {module} | `{prim.name}` | {kinks} | {cases_of.get(prim.name, '')} |")
    labels = [fw.LABELS[f] for f in FRAMEWORKS]
    lines += [
        "",
        f"## At the kinks ({len(CASES)} cases)",
        "",
        "asd's subgradient at the kink `x` along the direction `+v` and along `-v` (each a "
        "limit of gradients along the ray `x + δ(±v)`, so an element of the Clarke "
        "subdifferential), and each framework's own gradient of the same function written "
        "with its own operation at the same `x` (— where it has no such operation; JAX in its "
        "default float32).",
        "",
        "| primitive | f | x | v | asd along +v | asd along -v | " + " | ".join(labels) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(labels),
    ]
    for case in CASES:
        cells = [f"`{case.primitive}`", case.formula.replace("|", "\\|"), fmt(case.x),
                 fmt(case.v), asd_answer(case, 1.0), asd_answer(case, -1.0)]
        cells += [framework_answer(case, f) for f in FRAMEWORKS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).with_name("primitives.md")
    out.write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    main()
