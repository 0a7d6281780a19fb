"""asd's primitive library (installed as ``asd.library``): one module per family.

Importing it registers every primitive with numpy dispatch, so plain numpy calls on traced
arrays and the ``asd.numpy`` namespace both reach these rules. Each family module lists its
public functions in ``__all__``; they are re-exported here and at the top level of ``asd``.

``special`` (scipy.special's functions) is not imported here: it loads the first time a
traced array meets a scipy.special ufunc, and ``asd.scipy`` imports it.

Every public function also carries the paper's ASD routine as ``.asd`` (attached by
``asd.routine``, in the API layer this package does not import).
"""

from __future__ import annotations

from asd.extend import register_lazy_ufuncs

from . import (
    discontinuous,
    elementwise,
    linalg,
    nn,
    norms,
    order,
    piecewise,
    smooth,
    statistics,
    structure,
    update,
)
from .discontinuous import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .linalg import *  # noqa: F403
from .nn import *  # noqa: F403
from .norms import *  # noqa: F403
from .order import *  # noqa: F403
from .piecewise import *  # noqa: F403
from .smooth import *  # noqa: F403
from .statistics import *  # noqa: F403
from .structure import *  # noqa: F403
from .update import *  # noqa: F403

# the scipy.special rules (library/special.py) load when a traced array first meets one of its
# ufuncs, so that importing asd does not import scipy
register_lazy_ufuncs("scipy.special", "asd.library.special")

MODULES = (smooth, piecewise, nn, order, norms, statistics, linalg, discontinuous, elementwise,
           update, structure)
"""The families whose public functions are asd's (``asd.relu``, ``asd.flip``...)."""

__all__ = [name for module in MODULES for name in module.__all__]
