"""scipy on traced arrays: ``import asd.scipy.stats as st``, ``import asd.scipy.special``.

``asd.scipy.special`` mirrors ``scipy.special`` (like ``asd.numpy`` mirrors numpy): the
functions with an asd rule (`asd.library.special`) resolve to it, the rest to scipy's own.
``asd.scipy.stats`` writes the log-densities and cdfs of common distributions as
compositions of traced operations, so likelihood code differentiates in every parameter.

Layer: the public surface. It may import ``asd.library`` and ``asd.extend``; nothing here
imports the command line, the front ends or the analysis layer.
"""

from __future__ import annotations

from . import special, stats

__all__ = ["special", "stats"]
