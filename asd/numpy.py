"""A numpy-mirroring namespace: ``import asd.numpy as anp``.

Functions with an asd rule resolve to the library; everything else (dtypes, constants,
array creation) is numpy's own, and a numpy function without a rule raises a clear
``UnsupportedError`` as soon as it meets a traced array.
"""

from __future__ import annotations

import numpy as _np

from asd import library as _library
from asd.core.primitive import FUNCTIONS as _FUNCTIONS
from asd.core.primitive import UFUNCS as _UFUNCS


def __getattr__(name: str):
    if name in _library.structure.BUILDERS:  # array, asarray, r_, c_ of traced values
        return _library.structure.BUILDERS[name]
    if name in _library.__all__ and callable(getattr(_library, name)):
        return getattr(_library, name)
    target = getattr(_np, name)
    rule = _UFUNCS.get(target) or _FUNCTIONS.get(target)
    return rule if rule is not None else target


def __dir__():
    return sorted(set(dir(_np)) | set(_library.__all__) | set(_library.structure.BUILDERS))
