"""asd: provably correct automatic subdifferentiation (Kakade & Lee, NeurIPS 2018).

>>> import asd
>>> float(asd.subgrad(lambda x: asd.relu(x) - asd.relu(-x))(0.0))
1.0

The parts that need heavy libraries load on first use, so ``import asd`` stays fast:
``asd.certify`` (sympy), ``asd.clarke`` and ``asd.ClarkeSample`` (scipy), and the
subpackages ``asd.testing`` and ``asd.numpy``.

>>> asd.testing.check_rule.__name__
'check_rule'
"""

import importlib as _importlib

from . import (
    library,  # registers the primitives with numpy dispatch
    projections,  # namespace asd.projections (asd.projections.simplex, ...)
    spectral,  # namespace asd.spectral (asd.spectral.lambda_max, ...)
)
from .api import asd, directional, jacobian, subgrad, trace, value_and_subgrad
from .branching_program import branch, branching
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    ASDError,
    DeadTraceError,
    IndexingError,
    NestingError,
    NonFiniteError,
    NotLipschitzError,
    OutputError,
    ShapeError,
    TracerBoolError,
    UndecidedTieError,
    UnsupportedError,
)
from .library import *  # noqa: F403  (the primitives: asd.relu, asd.maximum, ...)
from .primitive import Primitive
from .program import Program
from .result import ASDResult
from .routine import attach_asd_routines

attach_asd_routines()  # f.asd on every public library function (the paper's ASD routine)

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself), imported on first access
_LAZY = {
    "certify": ("asd.certificate", "certify"),
    "clarke": ("asd.clarke_sample", "clarke"),
    "ClarkeSample": ("asd.clarke_sample", "ClarkeSample"),
    "testing": ("asd.testing", None),
    "numpy": ("asd.numpy", None),
}


def __getattr__(name: str):
    """Load the heavy parts of the public API on first use (see the module docstring)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'asd' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = _importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    *library.__all__,
    "ASDError",
    "ArgumentError",
    "ArgumentTypeError",
    "DeadTraceError",
    "IndexingError",
    "OutputError",
    "ASDResult",
    "ClarkeSample",  # noqa: F405  (loaded on first use, see __getattr__)
    "NestingError",
    "NonFiniteError",
    "NotLipschitzError",
    "Primitive",
    "Program",
    "ShapeError",
    "TracerBoolError",
    "UndecidedTieError",
    "UnsupportedError",
    "asd",
    "branch",
    "branching",
    "certify",  # noqa: F405  (loaded on first use, see __getattr__)
    "clarke",  # noqa: F405  (loaded on first use, see __getattr__)
    "directional",
    "jacobian",
    "library",
    "projections",
    "spectral",
    "subgrad",
    "trace",
    "value_and_subgrad",
]
