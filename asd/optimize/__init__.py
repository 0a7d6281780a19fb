"""Nonsmooth optimization on asd's subgradients: methods, certificates, adapters, problems.

`minimize` runs a proximal bundle method or gradient sampling and ends with a
`Stationarity` certificate from `asd.clarke` at a Goldstein radius: dist(0, ∂_ε f(x))
as an interval, certified from both sides; ``success`` means its upper bound is below
``gtol``. The adapters hand asd's
subgradients to the optimizers people already run: scipy (``jac=True``), nsopy oracles,
and torch modules for ncOPT and PyGRANSO-style code. `problems` holds the classic test
problems with known optima used by the benchmark table (docs/optimize.md).

May import: the public API (``asd.api``), ``asd.analysis``, ``asd.errors``; torch only
inside the adapters that need it.
"""

from asd.analysis.clarke import Stationarity
from asd.optimize.adapters import nsopy_oracle, scipy_fg, torch_fg, torch_module
from asd.optimize.minimize import METHODS, minimize, stationarity
from asd.optimize.problems import Problem, problems

__all__ = ["METHODS", "Problem", "Stationarity", "minimize", "nsopy_oracle", "problems",
           "scipy_fg", "stationarity", "torch_fg", "torch_module"]
