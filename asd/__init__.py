"""asd: provably correct automatic subdifferentiation (Kakade & Lee, NeurIPS 2018).

>>> import asd
>>> float(asd.subgrad(lambda x: asd.relu(x) - asd.relu(-x))(0.0))
1.0
"""

from . import (
    library,  # registers the primitives with numpy dispatch
    projections,  # namespace asd.projections (asd.projections.simplex, ...)
    spectral,  # namespace asd.spectral (asd.spectral.lambda_max, ...)
)
from .api import asd, directional, jacobian, subgrad, trace, value_and_subgrad
from .branching_program import branch, branching
from .certificate import certify
from .clarke_sample import ClarkeSample, clarke
from .errors import (
    ASDError,
    NestingError,
    NonFiniteError,
    NotLipschitzError,
    ShapeError,
    TracerBoolError,
    UnsupportedError,
)
from .library import *  # noqa: F403  (the primitives: asd.relu, asd.maximum, ...)
from .primitive import Primitive
from .program import Program
from .result import ASDResult

__version__ = "0.1.0"

__all__ = [
    *library.__all__,
    "ASDError",
    "ASDResult",
    "ClarkeSample",
    "NestingError",
    "NonFiniteError",
    "NotLipschitzError",
    "Primitive",
    "Program",
    "ShapeError",
    "TracerBoolError",
    "UnsupportedError",
    "asd",
    "branch",
    "branching",
    "certify",
    "clarke",
    "directional",
    "jacobian",
    "library",
    "projections",
    "spectral",
    "subgrad",
    "trace",
    "value_and_subgrad",
]
