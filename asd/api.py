"""The public derivative API: subgrad, value_and_subgrad, asd, directional, jacobian, trace.

Arguments may be numpy, torch or JAX arrays: each sweep runs in the arguments' library and
device (`asd.core.backend`), random directions are drawn on the host by numpy's generator
(the same direction whatever the library) and moved there, and results come back in the
arguments' library, dtype and device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from asd.core import arguments, backend
from asd.core.arguments import as_float, check_argnums, check_leaves_finite, describe_leaf
from asd.core.jit import CompiledFunction
from asd.core.sweep import LazyDirection, LexDirections, Trace, summarize
from asd.core.tracing import Tracer, as_asd_error, close_trace, raised_by_asd, stored_by_numpy
from asd.errors import ArgumentError, ArgumentTypeError, ASDError, NonFiniteError, ShapeError
from asd.result import ASDResult, TieReport, decisions_of, ties_of
from asd.tree import flatten, flatten_as, unflatten

ArgNums = int | tuple[int, ...]


# ----- preparing a sweep -----

class _Inputs:
    """The differentiated leaves of a call, their kinds, and how to rebuild the arguments."""

    def __init__(self, args: tuple, argnums: ArgNums):
        self.single, self.argnums = check_argnums(argnums, len(args))
        self.args = args
        arguments.refuse_masked(args, tuple(a % len(args) for a in self.argnums))
        diff = args[self.argnums[0]] if self.single else tuple(args[a] for a in self.argnums)
        raw, self.tree = flatten(diff)
        self.is_array = [isinstance(x, np.ndarray) or backend.is_foreign(x) for x in raw]
        self.weak = tuple(type(x) is float for x in raw)
        """Which leaves are Python floats: numpy types them weakly (`Trace.weak`)."""
        self.leaves = [as_float(x, self.describe(i), check=False) for i, x in enumerate(raw)]
        foreign = [i for i, a in enumerate(self.leaves) if not backend.is_host(a)]
        if foreign:   # the host leaves were checked one by one; these in one go
            check_leaves_finite([self.leaves[i] for i in foreign],
                                [self.describe(i) for i in foreign])
        arguments.check_not_empty(self.leaves, self.argnums)

    def describe(self, i: int) -> str:
        """Leaf ``i`` named for a message: 'argument 1' or 'argument 0 (leaf 2)'."""
        if self.single:
            return describe_leaf(self.argnums[0] % len(self.args), i, self.tree.n_leaves)
        start = 0
        for a, sub in zip(self.argnums, self.tree.children, strict=True):
            if i < start + sub.n_leaves:
                return describe_leaf(a % len(self.args), i - start, sub.n_leaves)
            start += sub.n_leaves
        return f"leaf {i}"

    def checked_direction(self, direction, *, allow_zero: bool = False):
        """The user's direction validated and rebuilt in the arguments' structure."""
        return arguments.check_direction(direction, self.tree, self.leaves,
                                         allow_zero=allow_zero)

    def checked_sequence(self, direction, directions) -> tuple:
        """``(direction, directions)`` validated: ``v``, and the lexicographic ``[v, w1, ...]``
        whose later entries may be zero (they only decide ties that persist)."""
        if directions is None:
            return self.checked_direction(direction), None
        first = _first_direction(direction, directions)  # zero only with a w to decide
        return None, [self.checked_direction(first, allow_zero=len(directions) > 1)] + [
            self.checked_direction(w, allow_zero=True) for w in directions[1:]]

    def direction(self, direction, seed, *, allow_zero: bool = False) -> list[np.ndarray]:
        """The direction as one array per leaf, as given (random and normalized if None)."""
        if direction is None:
            return self.random_direction(seed).normalized()
        return self._in_libraries(self._host_direction(direction, allow_zero))

    def unit_direction(self, direction, *, allow_zero: bool = False) -> tuple[list, int]:
        """``(dirs, e)``: the given direction times ``2**-e``, its largest entry in [0.5, 1).

        Branch choices do not depend on a direction's scale, but its arithmetic does: the
        tangents of ``[1e308, 1e308]`` overflow and the series of ``[1e-320, 1e-320]``
        underflow, each deciding ties wrongly. A power of two scales exactly, so every
        direction sweeps at unit scale with the same decisions as any multiple of it;
        ``f'(x; v)`` is the swept derivative times ``2**e`` (`times_power_of_two`).
        """
        host = self._host_direction(direction, allow_zero)
        e = arguments.unit_exponent(host)
        return self._in_libraries([np.ldexp(d, -e) for d in host]), e

    def _host_direction(self, direction, allow_zero: bool) -> list[np.ndarray]:
        """The direction's leaves as float64 numpy arrays shaped like the arguments."""
        try:
            dirs = flatten_as(self.tree, direction, array_leaves=True)
        except ValueError as e:
            raise ShapeError(f"direction has structure {flatten(direction)[1]}, but the "
                             f"differentiated arguments have structure {self.tree} "
                             f"({e})") from e
        out = []
        for d, x in zip(dirs, self.leaves, strict=True):
            # float64 whatever the argument's dtype: every tie is decided in full precision
            d = np.asarray(backend.to_host(d), dtype=np.float64)
            if d.shape != tuple(x.shape):
                raise ShapeError(f"direction entry of shape {d.shape} does not match the "
                                 f"argument of shape {x.shape}")
            if not np.all(np.isfinite(d)):
                raise ArgumentError("the direction must be finite")
            out.append(d)
        if not allow_zero and not any(np.any(d) for d in out):
            raise ArgumentError("the direction must be nonzero: it selects the branch at "
                                "every tie")
        return out

    def _in_libraries(self, dirs: list[np.ndarray]) -> list:
        """Each leaf of a host direction in its argument's library (torch's maps may not mix
        dtypes: a torch argument's direction takes its dtype and device)."""
        return [d if backend.is_host(x) else backend.from_host(d, x, "like")
                for d, x in zip(dirs, self.leaves, strict=True)]

    def lex(self, directions, seed) -> LexDirections:
        """The directions after ``v`` (``directions[1:]``), then draws from ``seed``; each
        at unit scale (`unit_direction`: only their signs decide)."""
        given = [self.unit_direction(w, allow_zero=True)[0] for w in (directions or [])[1:]]
        return LexDirections(given, _lex_seed(seed))

    def random_direction(self, seed) -> LazyDirection:
        """Independent normals per leaf (drawn lazily): normalized, uniform on the sphere."""
        return LazyDirection(seed, [tuple(x.shape) for x in self.leaves],
                             [x.dtype for x in self.leaves],
                             None if all(map(backend.is_host, self.leaves)) else self.leaves)

    def call(self, f: Callable, tracers: list) -> Any:
        """``f`` at the arguments with the differentiated leaves replaced by ``tracers``;
        its program is then checked for constants asd cannot differentiate through
        (`arguments.check_real_program`), also where ``f`` failed because of one."""
        args = list(self.args)
        rebuilt = unflatten(self.tree, tracers)
        if self.single:
            args[self.argnums[0]] = rebuilt
        else:
            for a, r in zip(self.argnums, rebuilt, strict=True):
                args[a] = r
        trace = tracers[0]._trace if tracers else None
        try:
            with np.errstate(all="ignore"):
                out = f(*args)
        except Exception as e:
            _cut_cause_cycles(e)
            # a raw failure may come from a complex constant: name it; an asd refusal
            # (complex operands of maximum, say) already names its cause
            if trace is not None and not isinstance(e, ASDError):
                arguments.check_real_program(trace)
            if isinstance(e, IndexError | ValueError | TypeError):
                _raise_explained(e)
            raise
        finally:
            if trace is not None:  # the call is over: values that escaped it refuse use
                close_trace(trace)
        if trace is not None:
            arguments.check_real_program(trace)
        return out

    def restore(self, arrays: list, cast: bool = True) -> Any:
        """Cast results back to each leaf's dtype; Python scalars come back as numpy scalars,
        torch and JAX results in the argument's library and on its device. ``cast=False``
        keeps host arrays in their own dtype (a direction as given: it need not fit a
        float16 argument's range, and is no derivative to be refused)."""
        fixed = [(_narrowed(a, x, self.describe(i)) if cast else np.asarray(a)).reshape(
                     x.shape) if backend.is_host(x) else _in_library_of(a, x)
                 for i, (a, x) in enumerate(zip(arrays, self.leaves, strict=True))]
        fixed = [a if arr else a[()] for a, arr in zip(fixed, self.is_array, strict=True)]
        return unflatten(self.tree, fixed)


def _narrowed(a, x, name: str) -> np.ndarray:
    """``a`` in the dtype of leaf ``x``, refusing a finite entry that overflows there: a
    float16 argument's derivative computed in a wider type can exceed float16's range, and
    the cast would return inf for a finite exact number."""
    out = np.asarray(a, dtype=x.dtype)
    wide = np.asarray(a)
    if (out.dtype.kind == "f" and wide.dtype.kind == "f"
            and wide.dtype.itemsize > out.dtype.itemsize):
        with np.errstate(all="ignore"):
            bad = np.isinf(out) & np.isfinite(wide)
        if bad.any():
            raise NonFiniteError(
                f"the derivative for {name} holds {wide[bad].ravel()[:3].tolist()}, beyond "
                f"{out.dtype}'s range (largest {float(np.finfo(out.dtype).max):g}): in the "
                f"argument's dtype it would be inf. Pass the argument in a wider dtype "
                f"(x.astype(np.float32) or np.float64).")
    return out


def _in_library_of(a, x):
    """``a`` with ``x``'s shape and dtype, in ``x``'s library and on its device."""
    if backend.is_host(a):
        return backend.from_host(np.broadcast_to(a, tuple(x.shape)), x, "like")
    xp = backend.namespace(x)
    a = xp.broadcast_to(a, tuple(x.shape))
    return a if a.dtype == x.dtype else xp.astype(a, x.dtype)


def _zeros_like(x):
    return np.zeros_like(x) if backend.is_host(x) else backend.namespace(x).zeros_like(x)


def _explained(e: Exception) -> Exception:
    """A bare error raised inside asd's library while ``f`` ran, as an asd error.

    The user's own exceptions (raised outside asd) are returned unchanged.
    """
    if isinstance(e.__cause__, ASDError) and stored_by_numpy(e):
        return e.__cause__  # numpy's wrapping of asd's refusal (`c[0] = t`)
    where = None if isinstance(e, ASDError) else raised_by_asd(e)
    return e if where is None else as_asd_error(e, f"asd's {where}()", ())


def _raise_explained(e: Exception) -> None:
    """Raise `_explained` of ``e`` chained to ``e``, or return (the caller re-raises ``e``)
    where that is ``e`` itself (an asd error that is also a ValueError, like
    `NotLipschitzError`) or its own cause: ``raise e from e`` made ``e`` its own cause, a
    cycle on which code walking ``__cause__`` never ends (JAX's error handling hung)."""
    err = _explained(e)
    if err is e:
        return
    raise err from (None if err is e.__cause__ else e)


def _cut_cause_cycles(e: BaseException) -> None:
    """Cut the ``__cause__`` chain of ``e`` where it returns to an exception already on it.
    A cycle (an error raised as its own cause, as ``raise e from e`` makes one) hangs code
    walking the chain (JAX's error handling in a custom VJP's backward); asd no longer makes
    one itself (`asd.core.tracing.raise_as_asd_error`), but user code and libraries can."""
    seen = {id(e)}
    while e.__cause__ is not None:
        if id(e.__cause__) in seen:
            e.__cause__ = None
            return
        seen.add(id(e.__cause__))
        e = e.__cause__


def _lex_seed(seed):
    """The seed of the further directions: its own stream, apart from the draw of ``v``
    (None: the fixed default stream every sweep shares, so repeated calls agree)."""
    if seed is None:
        return None
    if isinstance(seed, np.random.Generator):
        return seed.bit_generator.seed_seq.spawn(1)[0]
    if isinstance(seed, np.random.SeedSequence):
        return seed.spawn(1)[0]
    return np.random.SeedSequence(seed).spawn(1)[0]


def _first_direction(direction, directions):
    """``direction``, or the first of ``directions`` (the lexicographic sequence)."""
    if directions is None:
        return direction
    if direction is not None:
        raise ArgumentError("pass direction= or directions=[v, w1, ...], not both")
    if isinstance(directions, np.ndarray) or not isinstance(directions, list | tuple) \
            or not directions:
        raise ArgumentError("directions must be a non-empty list [v, w1, ...] of directions, "
                            "each shaped like the differentiated arguments")
    return directions[0]


def _sweep(f, inputs: _Inputs, direction, seed, allow_zero=False, directions=None):
    """``(trace, out, input ids)`` of a sweep along the direction (see `_unit_sweep`)."""
    return _unit_sweep(f, inputs, direction, seed, allow_zero, directions)[:3]


def _unit_sweep(f, inputs: _Inputs, direction, seed, allow_zero=False, directions=None):
    """``(trace, out, input ids, e)``: a sweep along the direction at unit scale, which is
    the given one times ``2**-e`` (`_Inputs.unit_direction`; 0 for a random draw)."""
    direction = _first_direction(direction, directions)
    if direction is None:
        dirs, e = inputs.direction(None, seed), 0
    else:
        dirs, e = inputs.unit_direction(direction, allow_zero=allow_zero)
    return (*sweep_along(f, inputs, dirs, inputs.lex(directions, seed)), e)


def sweep_along(f, inputs: _Inputs, dirs: list[np.ndarray], lex: LexDirections | None = None):
    """Run ``f`` once on traced inputs whose tangents are ``dirs`` (one per leaf); a
    compiled ``f`` (`jit`) replays its program for a signature it has traced."""
    if type(f) is CompiledFunction:
        return f.sweep(inputs, dirs, lex)
    trace = Trace(lex)
    tracers = [trace.new_input(x, d, weak=w)
               for x, d, w in zip(inputs.leaves, dirs, inputs.weak, strict=True)]
    out = inputs.call(f, tracers)
    return trace, out, [t._id for t in tracers]


def _scalar_output(out, trace: Trace):
    """The traced scalar output, None for a real constant; see `arguments.scalar_output`."""
    return arguments.scalar_output(out, trace)


def _check_finite(trace: Trace, out_id: int, arrays: list, finite: bool | None = None
                  ) -> None:
    arguments.check_finite(trace, out_id, arrays, finite=finite)


def _finite(arrays: list) -> bool:
    """Whether every array is finite. A derivative that is not is redone with ``0 * inf = 0``
    (``absorbing=True``) before it is refused, where `Trace.absorbable` says that is right:
    an infinite slope on a branch the output does not read near the point
    (``where(x > 0, 0.0, x * inf)``) contributes nothing, as it does to the value."""
    return backend.first_nonfinite_of(arrays) is None


def _gradients(ct: list, ids: list[int], leaves: list) -> list:
    """The inputs' cotangents from a pull (zero for an input the output does not read, or
    one after the output node, when f returned an earlier input)."""
    return [ct[i] if i < len(ct) and ct[i] is not None else _zeros_like(x)
            for i, x in zip(ids, leaves, strict=True)]


# ----- the public functions -----

def own_errstate(wrapped: Callable) -> Callable:
    """``wrapped`` run under asd's own floating-point error state, whatever the caller's.

    asd computes on the caller's values outside ``f`` too (argument screens, direction
    scaling, the reverse sweep, series, magnitudes), where an underflow or overflow is
    expected and handled; under the caller's ``np.errstate(all="raise")`` numpy would turn
    it into a ``FloatingPointError`` from asd's inside. ``f`` itself already runs with
    errors ignored (its NaN and infinities are named by asd's finiteness checks).
    """

    @functools.wraps(wrapped)
    def quiet(*args):
        with np.errstate(all="ignore"):
            return wrapped(*args)

    return quiet


def transform(wrapped: Callable, factory: Callable, f: Callable, **options) -> Callable:
    """Mark ``wrapped`` as ``factory(f, **options)``, so `jit` can rebuild it over a
    compiled ``f``; it runs under asd's own error state (`own_errstate`)."""
    quiet = own_errstate(wrapped)
    quiet.__asd_transform__ = (factory, f, options)
    return quiet

def value_and_subgrad(f: Callable, argnums: ArgNums = 0, *, seed=None, direction=None,
                      directions=None, full: bool = False,
                      diagnostics: bool = False) -> Callable:
    """Return a function computing ``(f(*args), g)`` with ``g`` in the Clarke subdifferential.

    One sweep along a direction drawn uniformly on the unit sphere (or the given
    ``direction``), then reverse mode over the branch linearizations it selected. For the
    given direction ``v`` the result is the limiting gradient ``lim ∇f(x + δv)`` as δ ↓ 0.
    Where a tie persists along ``v`` it is decided by the next direction of the lexicographic
    sequence ``directions=[v, w1, ...]`` (drawn from ``seed`` past those given), and the
    result is then a lexicographic element of the Clarke subdifferential (proofs/README.md).
    With ``full=True`` the function returns the whole `ASDResult` instead (see `asd`).
    With ``diagnostics=True`` it returns ``(value, subgradient, report)``: a `TieReport` of
    how every tie was decided, which element the result is, and the degenerate ties
    (``h == 0`` and ``h_dot == 0``), which flag a possible constraint-qualification failure
    in user-written branches.

    >>> import asd
    >>> asd.value_and_subgrad(lambda x: asd.relu(x) - asd.relu(-x))(0.0)
    (np.float64(0.0), np.float64(1.0))
    """

    arguments.check_seed(seed)

    # the generated path draws no direction; a generator or seed sequence as seed must then
    # still spawn one per call (as the sweep does), so those calls take the replay
    compiled = (type(f) is CompiledFunction and not (full or diagnostics)
                and not isinstance(seed, np.random.Generator | np.random.SeedSequence))

    def wrapped(*args):
        if compiled:  # the generated tie-free path, where this signature has one
            single, diff = check_argnums(argnums, len(args))
            out = f.fast_value_and_grad(args, single, diff)
            if out is not None:
                return out
        inputs = _Inputs(args, argnums)
        direction_, directions_ = inputs.checked_sequence(direction, directions)
        result = _asd_sweep(f, inputs, direction_, seed, full or diagnostics, directions_)
        if compiled:
            f.learn_fast(args, inputs.argnums)
        if full:
            return result
        if diagnostics:
            return result.value, result.subgradient, TieReport(result.decisions,
                                                               result.degenerate)
        return result.value, result.subgradient

    wrapped.__doc__ = f"Value and a Clarke subgradient of {getattr(f, '__name__', f)}."
    return transform(wrapped, value_and_subgrad, f, argnums=argnums, seed=seed,
                     direction=direction, directions=directions, full=full,
                     diagnostics=diagnostics)


def asd(f: Callable, argnums: ArgNums = 0, *, seed=None, direction=None,
        directions=None) -> Callable:
    """Return a function running one ASD sweep of scalar ``f`` and returning an `ASDResult`.

    The result holds the value, the subgradient (the limiting gradient along the
    direction), the exact Dini derivative ``f'(x; v)`` along it, the direction itself, the
    ties met (``(node, primitive, count)``: the rules whose branch the direction chose) and
    the degenerate ties (``h == 0`` and ``h_dot == 0``).

    >>> import asd
    >>> r = asd.asd(lambda x: asd.maximum(x[0], x[1]), direction=[1.0, 2.0])([0.0, 0.0])
    >>> r.subgradient, float(r.dini), r.ties
    ([np.float64(0.0), np.float64(1.0)], 2.0, [Tie(node=2, primitive='maximum', count=1)])
    """

    arguments.check_seed(seed)

    def wrapped(*args) -> ASDResult:
        inputs = _Inputs(args, argnums)
        direction_, directions_ = inputs.checked_sequence(direction, directions)
        return _asd_sweep(f, inputs, direction_, seed, True, directions_)

    wrapped.__doc__ = f"One ASD sweep of {getattr(f, '__name__', f)}, as an ASDResult."
    return transform(wrapped, asd, f, argnums=argnums, seed=seed, direction=direction,
                     directions=directions)


def _sweep_directions(inputs: _Inputs, direction, seed, directions=None):
    """``(dirs, e)``: the direction of a sweep, a random one drawn only where a rule meets a
    tie (or the Dini derivative is asked for), or the given one times ``2**-e``
    (`_Inputs.unit_direction`)."""
    direction = _first_direction(direction, directions)
    if direction is None and any(backend.size(x) for x in inputs.leaves):
        return inputs.random_direction(seed), 0
    if direction is None:
        return inputs.direction(None, seed), 0
    return inputs.unit_direction(direction, allow_zero=directions is not None)


def _asd_sweep(f, inputs: _Inputs, direction, seed, full: bool, directions=None) -> ASDResult:
    """The sweep behind `value_and_subgrad` and `asd`; the Dini derivative only if ``full``."""
    dirs, e = _sweep_directions(inputs, direction, seed, directions)
    trace, out, ids = sweep_along(f, inputs, dirs, inputs.lex(directions, seed))
    traced = _scalar_output(out, trace)
    given = _first_direction(direction, directions)

    def reported():  # the direction as given (a random one normalized: drawn only here)
        arrays = _resolved(dirs) if given is None else flatten_as(inputs.tree, given)
        try:
            return inputs.restore(arrays)
        except NonFiniteError:  # a direction past a float16 argument's range: as given
            return inputs.restore(arrays, cast=False)

    if traced is None:
        value = _scalar(out)
        grads = [_zeros_like(x) for x in inputs.leaves]
        dini = (np.zeros_like(value, dtype=float)[()] if backend.is_host(value)
                else backend.namespace(value).zeros_like(value))
        return ASDResult(value, inputs.restore(grads), dini, reported() if full else None,
                         [], [])
    k = traced._id
    trace.check_lipschitz(k)
    v = traced.value
    one = (np.ones((), dtype=traced.dtype) if backend.is_host(v)
           else backend.namespace(v).ones_like(v))
    grads = _gradients(trace.pull(k, one), ids, inputs.leaves)
    finite = _finite(grads)
    if not finite and trace.absorbable(k):  # infinite slopes on a branch not read?
        grads = _gradients(trace.pull(k, one, absorbing=True), ids, inputs.leaves)
        finite = _finite(grads)
    _check_finite(trace, k, grads, finite)
    value = _scalar(v)
    if not full:
        return ASDResult(value, inputs.restore(grads), None, None, [], [])
    dini = _scalar(trace.tangent(k))
    if isinstance(dirs, LazyDirection):  # the sweep ran along the unnormalized draw
        dini = dini * dirs.scale()
    elif e:  # the sweep ran along the given direction at unit scale
        dini = arguments.times_power_of_two(dini, e)
        if not backend.all_finite(dini):
            raise arguments.direction_overflow("the Dini derivative f'(x; v)", e)
    return ASDResult(value, inputs.restore(grads), dini, reported(),
                     ties_of(trace.nodes, trace.ties), ties_of(trace.nodes, trace.degenerate),
                     decisions_of(trace.nodes, trace.decisions))


def vjp(f: Callable, argnums: ArgNums = 0, *, seed=None, direction=None,
        directions=None) -> Callable:
    """Return a function computing ``(f(*args), pullback)`` for any (structured) output.

    One sweep along the direction (random if omitted, drawn only where a rule meets a tie)
    chooses every branch; ``pullback(ct)``, with ``ct`` shaped like the output, then runs
    reverse mode over those linearizations and returns ``Jᵀ ct`` in the arguments'
    structure, where ``J`` is the limiting Jacobian along the direction (`jacobian`). So
    ``pullback(ct)`` is the limiting gradient of ``<ct, f>`` along the direction: an element
    of its Clarke subdifferential, the same as ``subgrad`` of ``<ct, f>`` along the same
    direction. The sweep runs once, whatever the number of pullbacks: the shape of a
    framework's backward, whose cotangent arrives after the forward (``asd.torch.function``).
    Cotangents are real, like the function: a complex one is refused (its imaginary part is
    never cast away); pull ``ct.real`` and ``ct.imag`` separately and combine them as
    ``pullback(ct.real) + 1j * pullback(ct.imag)``, exact because the Jacobian is real.

    >>> import asd, numpy as np
    >>> y, pullback = asd.vjp(asd.relu, direction=np.array([1.0, -1.0]))(np.zeros(2))
    >>> y, pullback(np.array([2.0, 3.0]))
    (array([0., 0.]), array([2., 0.]))
    """
    arguments.check_seed(seed)

    def wrapped(*args):
        inputs = _Inputs(args, argnums)
        direction_, directions_ = inputs.checked_sequence(direction, directions)
        dirs, _ = _sweep_directions(inputs, direction_, seed, directions_)
        trace, out, ids = sweep_along(f, inputs, dirs, inputs.lex(directions_, seed))
        outs, out_tree = arguments.output_leaves(out, trace)
        arguments.check_finite_outputs(trace, outs)
        for o in outs:
            if isinstance(o, Tracer):
                trace.check_lipschitz(o._id)
        value = unflatten(out_tree, [_scalar(o.value) if isinstance(o, Tracer) else o
                                     for o in outs])
        return value, _Pullback(trace, inputs, ids, outs, out_tree)

    wrapped.__doc__ = f"Value and pullback of {getattr(f, '__name__', f)}."
    return transform(wrapped, vjp, f, argnums=argnums, seed=seed, direction=direction,
                     directions=directions)


class _Pullback:
    """``ct -> Jᵀ ct`` over the linearizations one sweep chose (see `vjp`)."""

    def __init__(self, trace: Trace, inputs: _Inputs, ids: list[int], outs: list, tree):
        self.trace, self.inputs, self.ids, self.outs, self.tree = trace, inputs, ids, outs, tree

    def __call__(self, ct) -> Any:
        with np.errstate(all="ignore"):  # see `own_errstate`
            return self._pull(ct)

    def _pull(self, ct) -> Any:
        try:
            cts = flatten_as(self.tree, ct)
        except ValueError as e:
            raise ShapeError(f"the cotangent has structure {flatten(ct)[1]}, but the output "
                             f"has structure {self.tree} ({e})") from e
        seeds: dict[int, Any] = {}
        for i, (o, c) in enumerate(zip(self.outs, cts, strict=True)):
            if c is None or not isinstance(o, Tracer):
                continue             # a constant output (or no cotangent): no contribution
            shape = tuple(np.shape(o.value))
            where = "the cotangent" if len(cts) == 1 else f"cotangent {i}"
            if not backend.is_foreign(c):
                c = np.asarray(_real_cotangent(c, where), dtype=o.dtype)
            else:
                c = _real_cotangent(c, where)
                if c.dtype != o.value.dtype:  # a half-precision cotangent of a float32 sweep
                    c = backend.namespace(c).astype(c, o.value.dtype)
            if tuple(np.shape(c)) != shape:
                raise ShapeError(f"cotangent {i} has shape {tuple(np.shape(c))}, but output "
                                 f"leaf {i} has shape {shape}")
            if not backend.all_finite(c):
                raise NonFiniteError(
                    f"{where} holds NaN or infinite entries ({summarize(c)}): the product "
                    "Jᵀ ct would be too, whatever the derivative. Pass a finite cotangent "
                    "(a NaN often comes from the loss upstream of this call).")
            seeds[o._id] = c if o._id not in seeds else seeds[o._id] + c
        leaves = self.inputs.leaves
        grads = _gradients(self.trace.pull_seeds(seeds) if seeds else [], self.ids, leaves)
        finite = _finite(grads) if seeds else True
        if not finite and self.trace.absorbable(max(seeds)):
            grads = _gradients(self.trace.pull_seeds(seeds, absorbing=True), self.ids, leaves)
            finite = _finite(grads)
        if seeds:
            arguments.check_finite(self.trace, max(seeds), grads, "the vector-Jacobian product",
                                   finite=finite)
        return self.inputs.restore(grads)


def _real_cotangent(c, where: str):
    """A cotangent checked as an argument is: real and numeric. A complex one is refused,
    not cast (which keeps only its real part): the Jacobian is real, so ``Jᵀ(a + ib)`` is
    ``Jᵀa + i Jᵀb``, two pullbacks the caller combines (see `vjp`)."""
    try:
        return arguments.as_leaf(c, where)
    except ArgumentTypeError as e:
        if "complex" not in str(e):
            raise
        dtype = getattr(c, "dtype", type(c).__name__)
        raise ArgumentTypeError(
            f"{where} is complex ({dtype}); the pullback of a real function is a real linear "
            "map and asd does not cast the imaginary part away. Pull the real and imaginary "
            "parts separately: pullback(ct.real) + 1j * pullback(ct.imag).") from None


def _scalar(v):
    """A numpy scalar for numpy values; another library's 0-d array as it is."""
    return np.asarray(v)[()] if backend.is_host(v) else v


def _resolved(dirs) -> list:
    return dirs.normalized() if isinstance(dirs, LazyDirection) else dirs


def subgrad(f: Callable, argnums: ArgNums = 0, *, seed=None, direction=None,
            directions=None) -> Callable:
    """Return a function computing an element of the Clarke subdifferential of scalar ``f``.

    ``argnums`` (int or tuple) picks the differentiated arguments; arguments may be floats,
    arrays or nested tuples/lists/dicts of them, and the result mirrors their structure.

    >>> import asd
    >>> f = lambda x: 10 * x - 9 * (asd.relu(x) - asd.relu(-x))
    >>> float(asd.subgrad(f)(0.0))
    1.0
    """
    vg = value_and_subgrad(f, argnums, seed=seed, direction=direction, directions=directions)

    def wrapped(*args):
        return vg(*args)[1]

    wrapped.__doc__ = f"A Clarke subgradient of {getattr(f, '__name__', f)}."
    return transform(wrapped, subgrad, f, argnums=argnums, seed=seed, direction=direction,
                     directions=directions)


def directional(f: Callable, argnums: ArgNums = 0) -> Callable:
    """Return ``g(*args, v) -> (f(*args), f'(args; v))``: the exact one-sided derivative.

    ``v`` (the last positional argument) is shaped like the differentiated arguments and may
    be any vector, zero included. The output may be an array or a nested structure.

    >>> import asd
    >>> asd.directional(asd.abs)(0.0, -1.0)
    (np.float64(0.0), np.float64(1.0))
    """

    def wrapped(*args_and_v):
        if len(args_and_v) < 2:
            raise ArgumentError(f"directional(f) is called as g(*args, v): the arguments, then "
                                f"the direction; got {len(args_and_v)} value(s)")
        *args, v = args_and_v
        inputs = _Inputs(tuple(args), argnums)
        v = inputs.checked_direction(v, allow_zero=True)
        trace, out, _, e = _unit_sweep(f, inputs, v, None, allow_zero=True)
        leaves, tree = arguments.output_leaves(out, trace)
        arguments.check_finite_outputs(trace, leaves)
        values, dots = [], []
        for leaf in leaves:
            if isinstance(leaf, Tracer):
                trace.check_lipschitz(leaf._id)
                values.append(_scalar(leaf.value))
                dot = trace.tangent(leaf._id)
                if not _finite([dot]) and trace.absorbable(leaf._id):
                    dot = trace.tangent_absorbing(leaf._id)
                dots.append(_scalar(dot))
            elif backend.is_host(leaf):
                values.append(np.asarray(leaf)[()])
                dots.append(np.zeros_like(np.asarray(leaf, dtype=float))[()])
            else:
                values.append(leaf)
                dots.append(_zeros_like(backend.floating(leaf)))
        arguments.check_finite_tangents(trace, leaves, dots)
        if e:  # the sweep ran along v at unit scale: f'(x; v) = 2**e f'(x; v / 2**e)
            dots = [arguments.times_power_of_two(d, e) for d in dots]
            if not all(backend.all_finite(d) for d in dots):
                raise arguments.direction_overflow("the directional derivative", e)
        return unflatten(tree, values), unflatten(tree, dots)

    return transform(wrapped, directional, f, argnums=argnums)


def jacobian(f: Callable, argnums: ArgNums = 0, *, seed=None, direction=None,
             directions=None, mode: str | None = None) -> Callable:
    """Return a function computing the limiting Jacobian of ``f`` along the direction.

    The branches are chosen by one sweep along ``direction`` (random if omitted); the
    Jacobian of those branches is then pushed (``mode='forward'``, one batched push of an
    identity) or pulled (``mode='reverse'``), whichever needs fewer columns unless ``mode``
    says. The result has shape ``out.shape + arg.shape`` and mirrors both structures.

    >>> import asd, numpy as np
    >>> asd.jacobian(asd.relu, direction=np.array([1.0, -1.0]))(np.zeros(2))
    array([[1., 0.],
           [0., 0.]])
    """
    if mode not in (None, "forward", "reverse"):
        raise ArgumentError(f"mode must be 'forward', 'reverse' or None, got {mode!r}")
    arguments.check_seed(seed)

    def wrapped(*args):
        inputs = _Inputs(args, argnums)
        direction_, directions_ = inputs.checked_sequence(direction, directions)
        trace, out, ids = _sweep(f, inputs, direction_, seed, directions=directions_)
        outs, out_tree = arguments.output_leaves(out, trace)
        arguments.check_finite_outputs(trace, outs)
        for o in outs:
            if isinstance(o, Tracer):
                trace.check_lipschitz(o._id)
        n_in = sum(backend.size(x) for x in inputs.leaves)
        n_out = sum(backend.size(o.value if isinstance(o, Tracer) else np.asarray(o))
                    for o in outs)
        chosen = mode or ("forward" if n_in <= n_out else "reverse")
        builds = (_forward_jacobian, _reverse_jacobian)
        if chosen != "forward":
            builds = builds[::-1]
        for build in builds:  # the other mode where this one's tangents overflow (float16)
            blocks = build(trace, inputs, ids, outs)
            if not _finite([b for row in blocks for b in row]) and trace.absorbable(
                    len(trace.nodes) - 1):
                blocks = build(trace, inputs, ids, outs, absorbing=True)
            if _finite([b for row in blocks for b in row]):
                break
        per_out = [
            unflatten(inputs.tree, [_block(b, x, o) for b, x in zip(row, inputs.leaves,
                                                                     strict=True)])
            for row, o in zip(blocks, outs, strict=True)
        ]
        for row, o in zip(blocks, outs, strict=True):
            if isinstance(o, Tracer):
                arguments.check_finite(trace, o._id, row, "the Jacobian")
        return unflatten(out_tree, per_out)

    return transform(wrapped, jacobian, f, argnums=argnums, seed=seed, direction=direction,
                     directions=directions, mode=mode)


def _block(b, x, o):
    """One Jacobian block in the argument's library, dtype promoted with the output's."""
    if backend.is_host(x):
        return np.asarray(b, dtype=np.result_type(x.dtype, _out_dtype(o)))
    xp = backend.namespace(x)
    if backend.is_host(b):
        b = backend.from_host(b, x)
    ov = o.value if isinstance(o, Tracer) else o
    dtype = xp.result_type(x.dtype, ov.dtype) if not backend.is_host(ov) else x.dtype
    return b if b.dtype == dtype else xp.astype(b, dtype)


def _out_shape(o) -> tuple:
    return tuple(np.shape(o.value if isinstance(o, Tracer) else o))


def _forward_jacobian(trace: Trace, inputs: _Inputs, ids: list[int], outs: list,
                      absorbing: bool = False) -> list:
    n = sum(backend.size(x) for x in inputs.leaves)
    eye = np.eye(n)
    seeds, start = {}, 0
    for i, x in zip(ids, inputs.leaves, strict=True):
        size, xshape = backend.size(x), tuple(x.shape)
        block = eye[:, start:start + size].reshape((n,) + xshape)
        seeds[i] = (block.astype(x.dtype) if backend.is_host(x)
                    else backend.from_host(block, x, "like"))
        start += size
    ts = trace.push_batch(seeds, absorbing)
    like = trace.like
    xp = np if like is None else backend.namespace(like)
    rows = []
    for o in outs:
        shape = _out_shape(o)
        t = ts[o._id] if isinstance(o, Tracer) else None
        if t is None:
            t = np.zeros((n,) + shape) if like is None else backend.zeros((n,) + shape, like)
        else:
            t = xp.broadcast_to(t, (n,) + shape)
        flat = xp.moveaxis(xp.reshape(t, (n, -1)), 0, -1)  # (out size, n)
        blocks, start = [], 0
        for x in inputs.leaves:
            size = backend.size(x)
            blocks.append(xp.reshape(flat[:, start:start + size], shape + tuple(x.shape)))
            start += size
        rows.append(blocks)
    return rows


def _reverse_jacobian(trace: Trace, inputs: _Inputs, ids: list[int], outs: list,
                      absorbing: bool = False) -> list:
    rows = []
    like = trace.like
    xp = np if like is None else backend.namespace(like)

    def zeros(shape):
        return np.zeros(shape) if like is None else backend.zeros(shape, like)

    for o in outs:
        shape = _out_shape(o)
        m = int(np.prod(shape))
        if not isinstance(o, Tracer):
            rows.append([zeros(shape + tuple(x.shape)) for x in inputs.leaves])
            continue
        if like is None:
            seed = np.eye(m, dtype=o.dtype).reshape((m,) + shape)
        else:
            seed = backend.from_host(np.eye(m).reshape((m,) + shape), o.value, "like")
        ct = trace.pull(o._id, seed, absorbing)
        rows.append([
            zeros(shape + tuple(x.shape)) if i >= len(ct) or ct[i] is None
            else xp.reshape(xp.broadcast_to(ct[i], (m,) + tuple(x.shape)),
                            shape + tuple(x.shape))
            for i, x in zip(ids, inputs.leaves, strict=True)
        ])
    return rows


def _out_dtype(o):
    v = o.value if isinstance(o, Tracer) else o
    if not backend.is_host(v):
        return np.float64
    return np.result_type(v if isinstance(o, Tracer) else np.asarray(o, dtype=float))


def trace(f: Callable) -> Callable[..., Any]:
    """Return a function that traces ``f`` at example arguments into a ``Program``.

    >>> import asd, numpy as np
    >>> print(asd.trace(lambda x: asd.relu(x).sum())(np.ones(2)))
    program(%0: float64[2]) {
      %1 = relu %0
      %2 = sum %1 axis=None keepdims=False
      return %2
    }
    """

    @own_errstate
    def wrapped(*args):
        t = Trace()
        leaves, in_tree = flatten(args)
        tracers = [t.new_input(arguments.as_leaf(x, f"argument leaf {i}"), active=False)
                   for i, x in enumerate(leaves)]
        try:
            with np.errstate(all="ignore"):
                out = f(*unflatten(in_tree, tracers))
        except (IndexError, ValueError, TypeError) as e:
            _cut_cause_cycles(e)
            _raise_explained(e)
            raise
        finally:
            program_nodes = t.nodes
            close_trace(t)
        outs, out_tree = arguments.output_leaves(out, t)
        from asd.core.program import Literal, Program

        refs = [o._id if isinstance(o, Tracer) else Literal(o) for o in outs]
        return Program(program_nodes, [x._id for x in tracers], in_tree, refs, out_tree)

    return wrapped


def jit(fn: Callable, *, dynamic_argnums: int | tuple[int, ...] = ()) -> Callable:
    """Compile ``fn``: trace once per input signature, then replay the straight-line program.

    ``fn`` is an asd transform (`subgrad`, `value_and_subgrad`, `asd`, `directional`,
    `jacobian`, `asd.clarke`), rebuilt over the compiled function, or a function of traced
    values (then ``asd.subgrad(asd.jit(f))`` works too). Results equal the uncompiled ones
    bit for bit, ties included: a replay runs each node's own rule, and tie-free subgradients
    on numpy take a generated fast path that gives way to the rules at the first tie.

    A signature is the arguments' structure, each differentiated leaf's shape, dtype,
    library and device, and the value of every other argument: numbers, flags and strings
    by type and value (floats by their bits: ``0.0`` is not ``-0.0``), arrays by their type
    and bytes, so ``fn`` sees them exactly as uncompiled and a new value traces again.
    Arguments listed in ``dynamic_argnums`` are instead traced as constant inputs of the
    program (as ``jax.jit`` traces its arguments): new values replay without tracing (no
    hashing either: use it for large or changing data), but ``fn`` then sees traced values
    there, so Python cannot branch on them, and library functions that treat constants
    specially (an exponent, clip bounds) may build a different, equally correct program.

    As with ``jax.jit``, values ``fn`` reads that are not arguments (closures, globals) are
    fixed when a signature is first traced (array constants are copied then); call
    ``.clear_cache()`` on the result to trace again after changing them. See
    docs/compiled.md.

    >>> import asd, numpy as np
    >>> vg = asd.jit(asd.value_and_subgrad(lambda w: asd.abs(w).sum()))
    >>> vg(np.array([1.0, -2.0]))
    (np.float64(3.0), array([ 1., -1.]))
    >>> vg(np.array([-3.0, 4.0]))  # replayed: no Python, no tracing
    (np.float64(7.0), array([-1.,  1.]))
    >>> vg.traces
    1
    """
    dynamic = (dynamic_argnums,) if isinstance(dynamic_argnums, int) else tuple(
        dynamic_argnums)
    spec = getattr(fn, "__asd_transform__", None)
    if spec is None:
        return CompiledFunction(fn, dynamic)
    factory, f, options = spec
    compiled = CompiledFunction(f, dynamic)
    return _Jitted(factory(compiled, **options), compiled)


class _Jitted:
    """A transform rebuilt over a `CompiledFunction` (what `jit` returns for a transform)."""

    def __init__(self, wrapped: Callable, compiled: CompiledFunction):
        self.__wrapped__, self.compiled = wrapped, compiled
        self.__doc__ = wrapped.__doc__
        self.__name__ = f"jit({getattr(wrapped, '__name__', 'transform')})"
        self.__asd_transform__ = wrapped.__asd_transform__

    def __call__(self, *args):
        return self.__wrapped__(*args)

    def __repr__(self) -> str:
        return f"asd.jit({self.compiled.__name__})"

    @property
    def traces(self) -> int:
        """How many times the function has been traced (one per new signature)."""
        return self.compiled.traces

    def clear_cache(self) -> None:
        """Forget the traced programs (see `CompiledFunction.clear_cache`)."""
        self.compiled.clear_cache()
