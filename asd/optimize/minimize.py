"""`minimize`: nonsmooth minimization that ends with a stationarity certificate."""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable

import numpy as np
from scipy.optimize import OptimizeResult

from asd.analysis.clarke import Stationarity, clarke
from asd.errors import ArgumentError, ArgumentTypeError
from asd.optimize.bundle import proximal_bundle
from asd.optimize.sampling import gradient_sampling
from asd.optimize.sources import AsdSource, OracleSource

METHODS = ("bundle", "sampling")


def stationarity(f: Callable, x, radius: float, *, n: int = 64, seed=0,
                 points: int = 0) -> Stationarity:
    """dist(0, ∂_ε f(x)) for the Goldstein radius ``ε = radius``, as a certified interval.

    ``upper`` (= ``measure``) from the hull of limiting gradients asd took within ``ε`` of
    ``x`` (``n`` directions, ``points`` random ball points: raise them to tighten it),
    ``lower`` from the outer enclosure of ∂_ε f(x) (`asd.analysis.enclosure`).

    >>> import asd, numpy as np
    >>> c = asd.optimize.stationarity(lambda x: np.max(np.abs(x)), np.array([1e-9, -1e-9]), 1e-6)
    >>> c.upper <= 1e-12
    True
    """
    x = np.asarray(x, dtype=float)
    return clarke(f, n=n, radius=radius, seed=seed, points=points)(x).stationarity


class _Progress:
    """Calls the callback and prints a line every ``every`` iterations (``disp``)."""

    def __init__(self, callback, disp, method: str):
        self.callback = callback
        self.every = 0 if not disp else (10 if disp is True else int(disp))
        self.method = method
        self.start = time.perf_counter()
        if self.every:
            from rich.console import Console

            self.console = Console(highlight=False)
            self.console.print(f"[bold]asd.optimize.minimize[/bold] ({method})")

    def __call__(self, x, fx, nit, info) -> bool:
        if self.every and nit % self.every == 0:
            extra = "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in info.items())
            self.console.print(f"{nit:6d}  f {fx: .10g}  {extra}  "
                               f"{time.perf_counter() - self.start:.1f}s")
        if self.callback is None:
            return False
        try:
            return bool(self.callback(OptimizeResult(x=x.copy(), fun=fx, nit=nit, **info)))
        except StopIteration:
            return True


def minimize(f: Callable, x0, *, method: str = "bundle", tol: float | None = None,
             maxiter: int = 1000, callback: Callable | None = None, disp: bool | int = False,
             fg: Callable | None = None, seed=0, certify_radius: float | None = None,
             gtol: float = 1e-4, samples: int = 64, options: dict | None = None
             ) -> OptimizeResult:
    """Minimize a nonsmooth ``f`` from ``x0``; ``success`` only where stationarity is proven.

    ``method``: ``"bundle"`` (proximal bundle with nonconvex safeguards, fast on convex and
    max-type problems) or ``"sampling"`` (gradient sampling on asd's ε-subdifferential
    samples, robust on nonconvex ones). Gradients come from asd (``f`` written with numpy or
    asd primitives) or from ``fg(x) -> (value, gradient)`` (torch autograd, say, to compare).
    Either way the run ends with ``result.stationarity``: dist(0, ∂_ε f(x)) at ``result.x``
    as a certified interval (`Stationarity`), ``ε = certify_radius`` (default
    ``1e-6 max(1, |x|)``). ``success`` is True only when its upper bound is at most
    ``gtol``: x is then proven (ε, gtol)-stationary. The bundle method checks that bound
    each time its own test says stop, and restarts its bundle at ``x`` when it does not
    hold, so it stops on the certificate rather than on its model.

    ``samples``: the directions of every ε-subdifferential sample (the certificate's and
    gradient sampling's): the certificate's upper bound needs a direction per piece to see,
    so raise it where many pieces meet at the solution (``2**k`` for ``k`` kinks). ``tol``:
    the method's own stopping tolerance (bundle: predicted decrease relative to ``1 + |f|``,
    default 1e-11; sampling: the min-norm at the final radius, default 1e-7).
    ``callback(intermediate)``: called each iteration with an ``OptimizeResult`` (``x``,
    ``fun``, ``nit``, method details); returning True or raising ``StopIteration`` stops.
    ``disp``: print progress every 10 (or ``disp``) iterations. ``options``: the method's
    own settings (bundle: ``u``, ``max_size``, ``gamma``; sampling: ``radius``,
    ``radius_tol``, ``points``, ``theta``).

    >>> import asd, numpy as np
    >>> res = asd.optimize.minimize(lambda x: np.max(np.abs(x - 1.0)), np.zeros(3))
    >>> bool(abs(res.fun) < 1e-8), res.success, bool(res.stationarity.upper < 1e-8)
    (True, True, True)
    """
    if method not in METHODS:
        raise ArgumentError(f"method must be one of {', '.join(map(repr, METHODS))}, got "
                            f"{method!r}")
    if not callable(f):
        raise ArgumentTypeError(f"f must be a callable x -> scalar, got {type(f).__name__}")
    if fg is not None and not callable(fg):
        raise ArgumentTypeError(f"fg must be a callable x -> (value, gradient), got "
                                f"{type(fg).__name__}")
    if isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral) or maxiter < 0:
        raise ArgumentError(f"maxiter must be a whole number >= 0, got {maxiter!r}")
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or samples < 1:
        raise ArgumentError(f"samples must be a whole number >= 1 of directions, got "
                            f"{samples!r}")
    x0 = np.asarray(x0, dtype=float)
    if x0.size == 0 or not np.all(np.isfinite(x0)):
        raise ArgumentError(f"x0 must be a nonempty finite array, got {x0!r}")
    opts = dict(options or {})
    shape = x0.shape
    src = (AsdSource(f, shape, seed, samples) if fg is None
           else OracleSource(fg, shape, seed))
    report = _Progress(callback, disp, method)

    def radius_at(x: np.ndarray) -> float:
        return (1e-6 * max(1.0, float(np.max(np.abs(x)))) if certify_radius is None
                else float(certify_radius))

    def certify(x: np.ndarray) -> Stationarity:
        return stationarity(f, x.reshape(shape), radius_at(x), n=samples, seed=seed)

    if method == "bundle":
        tol = 1e-11 if tol is None else float(tol)
        unknown = set(opts) - {"u", "max_size", "gamma"}
        run = proximal_bundle
        opts["certified"] = lambda x: certify(x).upper <= gtol
    else:
        tol = 1e-7 if tol is None else float(tol)
        unknown = set(opts) - {"radius", "radius_tol", "points", "theta"}
        run = gradient_sampling
    if unknown:
        raise ArgumentError(f"unknown options for method {method!r}: {', '.join(sorted(unknown))}")
    x, fx, nit, message, _, radius = run(src, x0.ravel().copy(), tol=tol, maxiter=maxiter,
                                         report=report, **opts)
    cert = certify(x)
    x = x.reshape(shape)
    success = bool(cert.upper <= gtol)
    if not success:
        message += (f"; not certified: dist(0, ∂_ε f(x)) is in [{cert.lower:.3g}, "
                    f"{cert.upper:.3g}] (ε = {cert.radius:.3g}), above gtol = {gtol:g}")
        if cert.lower < gtol:
            message += (f"; the upper bound may be loose: raise samples (now {samples}) "
                        "for more directions")
    return OptimizeResult(x=x, fun=fx, nit=nit, nfev=src.nfev, ngev=src.ngev,
                          success=success, message=message, method=method,
                          stationarity=cert, method_radius=radius)
