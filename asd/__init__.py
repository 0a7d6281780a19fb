"""asd: provably correct automatic subdifferentiation (Kakade & Lee, NeurIPS 2018).

>>> import asd
>>> float(asd.subgrad(lambda x: asd.relu(x) - asd.relu(-x))(0.0))
1.0

The parts that need heavy libraries load on first use, so ``import asd`` stays fast:
``asd.certify`` (sympy), ``asd.clarke`` and ``asd.ClarkeSample`` (scipy), and the
subpackages ``asd.testing`` and ``asd.numpy``.

>>> asd.testing.check_rule.__name__
'check_rule'

The package's layers, top to bottom (each subpackage's docstring says what it may import):
this module and ``api``, ``result``, ``errors``, ``tree`` are the public surface; ``cli`` holds
the ``asd`` command; ``frontends`` the PyTorch, JAX and TensorFlow importers, published as
``asd.torch``, ``asd.jax`` and ``asd.tf`` (the same module objects, loaded on first use);
``analysis`` the Clarke-set tools, branching programs and certificates; ``core`` the engine;
``extend`` is the one surface through which the library (``asd.library``) and users add
primitives.
"""

import importlib as _importlib
import importlib.abc as _importlib_abc
import importlib.util as _importlib_util
import sys as _sys

from asd import (
    library,  # registers the primitives with numpy dispatch
    projections,  # namespace asd.projections (asd.projections.simplex, ...)
    spectral,  # namespace asd.spectral (asd.spectral.lambda_max, ...)
)
from asd.analysis.branching import branch, branching
from asd.api import (
    asd,
    directional,
    jacobian,
    jit,
    subgrad,
    trace,
    value_and_subgrad,
    vjp,
)
from asd.core.primitive import Primitive
from asd.core.program import Program
from asd.errors import (
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
from asd.library import *  # noqa: F403  (the primitives: asd.relu, asd.maximum, ...)
from asd.result import ASDResult
from asd.routine import attach_asd_routines

attach_asd_routines()  # f.asd on every public library function (the paper's ASD routine)

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself), imported on first access
_LAZY = {
    "certify": ("asd.analysis.certificate", "certify"),
    "clarke": ("asd.analysis.clarke", "clarke"),
    "ClarkeSample": ("asd.analysis.clarke", "ClarkeSample"),
    "testing": ("asd.testing", None),
    "optimize": ("asd.optimize", None),
    "implicit": ("asd.implicit", None),
    "numpy": ("asd.numpy", None),
    "torch": ("asd.frontends.torch", None),
    "jax": ("asd.frontends.jax", None),
    "tf": ("asd.frontends.tf", None),
}


# public name -> the module that implements it (one module object under both names)
_FRONTENDS = {"asd.torch": "asd.frontends.torch", "asd.jax": "asd.frontends.jax",
              "asd.tf": "asd.frontends.tf"}


class _FrontendFinder(_importlib_abc.MetaPathFinder, _importlib_abc.Loader):
    """Makes ``import asd.torch`` load ``asd.frontends.torch`` itself, not a second copy."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _FRONTENDS:
            return None
        return _importlib_util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = _frontend(_FRONTENDS[spec.name])
        spec.loader_state = module.__spec__  # the import system is about to overwrite it
        return module

    def exec_module(self, module):
        """The implementing module has already run: only give it back its own spec."""
        module.__spec__ = module.__spec__.loader_state


_sys.meta_path.append(_FrontendFinder())

# front-end name -> (attribute, module implementing it): attached when the front end loads
_ATTACHED = {"asd.frontends.torch": ("audit", "asd.frontends.torch_audit")}


def _frontend(name: str):
    """Import a front end and attach what lives in modules of its own (``asd.torch.audit``)."""
    module = _importlib.import_module(name)
    if name in _ATTACHED and not hasattr(module, _ATTACHED[name][0]):
        attribute, source = _ATTACHED[name]
        setattr(module, attribute, getattr(_importlib.import_module(source), attribute))
    return module


def __getattr__(name: str):
    """Load the heavy parts of the public API on first use (see the module docstring)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'asd' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = _frontend(module)
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
    "jit",
    "library",
    "projections",
    "spectral",
    "subgrad",
    "trace",
    "value_and_subgrad",
    "vjp",
]
