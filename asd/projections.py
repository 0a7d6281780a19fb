"""Projections onto convex sets with direction-chosen limiting Jacobians: ``asd.projections``.

The primitives live in ``asd.library.projections``; this namespace re-exports them so
``asd.projections.simplex(x)`` reads like the set it names.

>>> import numpy as np, asd
>>> asd.projections.simplex(np.array([0.8, 0.6, -1.0]))
array([0.6, 0.4, 0. ])
"""

from asd.library.projections import *  # noqa: F403
from asd.library.projections import __all__  # noqa: F401
