"""Spectral functions of symmetric matrices with direction-chosen branches: ``asd.spectral``.

The primitives live in ``asd.library.spectral``; this namespace re-exports them.

>>> import numpy as np, asd
>>> float(asd.spectral.lambda_max(np.diag([1.0, 3.0, 2.0])))
3.0
"""

from asd.library.spectral import *  # noqa: F403
from asd.library.spectral import __all__  # noqa: F401
