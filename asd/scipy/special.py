"""A scipy.special-mirroring namespace: ``import asd.scipy.special as sp``.

Functions with an asd rule (`asd.library.special`) resolve to it; everything else is
scipy.special's own, so a ufunc without a rule raises a clear ``UnsupportedError`` as soon as
it meets a traced array. Use this namespace for ``polygamma``, ``logsumexp``, ``softmax`` and
``log_softmax``: scipy's own convert their arguments to plain arrays, which a traced value
refuses.
"""

from __future__ import annotations

import scipy.special as _sc

from asd.library import special as _special


def __getattr__(name: str):
    if name in _special.__all__:
        return getattr(_special, name)
    return getattr(_sc, name)


def __dir__():
    return sorted(set(dir(_sc)) | set(_special.__all__))
