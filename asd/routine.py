"""The paper's ASD routine (Assumption 3.2) on every public library function.

``f.asd(*xs, direction=v, **params) -> (value, dini, branch_gradient)`` is computed by one
sweep of ``f`` itself along ``v``, so a composite public function (a projection, a norm written
from several primitives) gets it as well as a single primitive, and the branch is chosen by
the same rules and tie service as any program (never a second copy of a rule). It lives in the
API layer: ``asd/__init__`` attaches it to the library, which imports only the engine.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

from asd.api import _forward_jacobian, _Inputs, _reverse_jacobian, sweep_along
from asd.core.arguments import direction_overflow, times_power_of_two
from asd.core.tracing import Tracer
from asd.tree import flatten, unflatten

NOT_DIFFERENTIABLE = frozenset({"argmax", "argmin", "argsort", "piecewise_polynomial"})
"""Public names without an ASD routine: positions (discrete outputs) and a factory."""


def asd_routine(fn: Callable) -> Callable[..., tuple[Any, Any, Any]]:
    """``fn``'s ASD routine: ``(fn(*xs), D[fn; v](xs), grad p_z(xs))`` for the branch ``v`` picks.

    Positional arguments are the inputs (each may be a nested list/tuple of arrays, as for
    ``concatenate``); booleans, strings and functions (``where``'s condition, ``einsum``'s
    subscripts, ``distance``'s set) are constants and take no direction; pass integer
    indices and shapes by keyword (``take.asd(x, indices=i, direction=v)``).
    ``direction`` holds one tangent per differentiated input (a single array for one input).
    Keywords are ``fn``'s static parameters. The branch gradient has shape
    ``value.shape + x.shape`` per input (a tuple for several inputs): the limiting Jacobian
    along the direction, pulled (or pushed) through the linearizations the sweep selected.
    The direction must be nonzero: it is what selects the branch at a tie.

    >>> import asd
    >>> asd.maximum.asd(0.0, 0.0, direction=(1.0, -1.0))
    (array(0.), array(1.), (array(1.), array(0.)))
    """
    def routine(*xs, direction, **params):
        diff = tuple(i for i, x in enumerate(xs) if not is_constant_argument(x))
        if not diff:
            raise TypeError(f"{fn.__name__}.asd needs at least one numeric input")
        single = len(diff) == 1
        inputs = _Inputs(xs, diff[0] if single else diff)
        if not single and isinstance(direction, list):
            direction = tuple(direction)  # one entry per input, as the inputs are gathered
        dirs, e = inputs.unit_direction(direction)  # swept at unit scale, exactly
        trace, out, ids = sweep_along(lambda *a: fn(*a, **params), inputs, dirs)
        outs, out_tree = flatten(out)
        values, dinis = [], []
        for o in outs:
            if isinstance(o, Tracer):
                trace.check_lipschitz(o._id)
                values.append(np.asarray(o.value))
                dini = np.asarray(times_power_of_two(
                    np.broadcast_to(trace.tangent(o._id), o.shape).copy(), e))
                if not np.all(np.isfinite(dini)):
                    raise direction_overflow("the directional derivative", e)
                dinis.append(dini)
            else:
                values.append(np.asarray(o))
                dinis.append(np.zeros(np.shape(o)))
        n_in = builtins.sum(x.size for x in inputs.leaves)
        n_out = builtins.sum(v.size for v in values)
        jac = _forward_jacobian if n_in <= n_out else _reverse_jacobian
        grads = [unflatten(inputs.tree, [np.asarray(b, dtype=float) for b in row])
                 for row in jac(trace, inputs, ids, outs)]
        return (unflatten(out_tree, values), unflatten(out_tree, dinis),
                unflatten(out_tree, grads))

    routine.__name__ = f"{getattr(fn, '__name__', 'f')}_asd"
    routine.__doc__ = f"The ASD routine of {getattr(fn, '__name__', fn)}: see asd_routine."
    return routine


def is_constant_argument(x) -> bool:
    """Booleans, names and functions (``where``'s condition, ``distance``'s set) carry no
    tangent; every other positional argument is a differentiated input."""
    return (isinstance(x, bool | np.bool_ | str) or callable(x)
            or (isinstance(x, np.ndarray) and x.dtype == bool))


def attach_asd_routines() -> None:
    """Give every public library function without one (Primitives have their own) an
    ``.asd``; called once by ``asd/__init__`` after the library and the API are loaded."""
    from asd.library import MODULES, projections, spectral

    for module in (*MODULES, projections, spectral):
        for name in module.__all__:
            fn = getattr(module, name)
            if name not in NOT_DIFFERENTIABLE and not hasattr(fn, "asd"):
                fn.asd = asd_routine(fn)

