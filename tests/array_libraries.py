"""The array libraries the backend tests run on, and how their results are compared with
numpy's: shared by tests/test_backends*.py (each test module skips without torch or JAX)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import asd
from asd.core import backend

torch = pytest.importorskip("torch")
jnp = pytest.importorskip("jax.numpy")

LIBRARIES = {
    "torch-float64": (lambda a: torch.tensor(np.asarray(a), dtype=torch.float64), np.float64),
    "torch-float32": (lambda a: torch.tensor(np.asarray(a), dtype=torch.float32), np.float32),
    "jax": (lambda a: jnp.asarray(np.asarray(a, dtype=np.float32)), np.float32),
}
"""name -> (conversion of a numpy array into the library, the numpy dtype it computes in)"""
LIBS = list(LIBRARIES)


def host(a) -> np.ndarray:
    return np.asarray(backend.to_host(a), dtype=float)


def same_kind(result, arg) -> None:
    """``result`` is an array of ``arg``'s library (not numpy), dtype, shape and device."""
    assert type(result) is type(arg), (type(result), type(arg))
    assert not isinstance(result, np.ndarray)
    assert result.dtype == arg.dtype
    assert tuple(result.shape) == tuple(arg.shape)
    assert backend.device(result) == backend.device(arg)


def compare(f, args, lib, tol: Callable[[type], float], **kw):
    """``value_and_subgrad`` of ``f`` in every argument on numpy and on ``lib`` (with the
    same ``direction=``/``directions=``, given per argument); they must agree to
    ``tol(dtype)``, and ``lib``'s results must be its own arrays. Returns both gradients."""
    conv, dtype = LIBRARIES[lib]
    direction = kw.pop("direction", None)
    directions = kw.pop("directions", None)
    np_kw, lib_kw = dict(kw), dict(kw)
    if direction is not None:
        np_kw["direction"] = tuple(np.asarray(d, dtype) for d in direction)
        lib_kw["direction"] = tuple(conv(d) for d in direction)
    if directions is not None:
        np_kw["directions"] = [tuple(np.asarray(d, dtype) for d in ds) for ds in directions]
        lib_kw["directions"] = [tuple(conv(d) for d in ds) for ds in directions]
    argnums = tuple(range(len(args)))
    ref_value, ref = asd.value_and_subgrad(f, argnums, **np_kw)(
        *[np.asarray(a, dtype) for a in args])
    lib_args = [conv(a) for a in args]
    value, got = asd.value_and_subgrad(f, argnums, **lib_kw)(*lib_args)
    assert type(value) is type(lib_args[0])
    np.testing.assert_allclose(float(value), float(ref_value), rtol=tol(dtype), atol=tol(dtype))
    for g, r, a in zip(got, ref, lib_args, strict=True):
        same_kind(g, a)
        np.testing.assert_allclose(host(g), r, atol=tol(dtype) * max(1.0, np.abs(r).max()))
    return got, ref
