"""asd's testing tools, public so users test their own rules the same way asd does.

- `check_rule`: the rule checker every rule test calls (value, adjointness of push and pull,
  Dini derivative and limiting Jacobian against an exact or high-precision oracle).
- `asd.testing.exact`: the exact oracle (power series in δ with Fraction coefficients).
- `asd.testing.strategies`: hypothesis strategies that put points on kinks (needs hypothesis).

>>> import numpy as np, asd
>>> from asd.testing import check_rule
>>> check_rule(lambda x: asd.relu(x) - asd.relu(-x), np.zeros(3)).checks["jacobian"]
2
"""

from asd.testing.checker import RuleReport, check_rule, dyadic_direction
from asd.testing.exact import (
    DegenerateTie,
    Jet,
    Series,
    directional_derivative,
    limiting_gradient,
    limiting_jacobian,
)

__all__ = [
    "DegenerateTie",
    "Jet",
    "RuleReport",
    "Series",
    "check_rule",
    "directional_derivative",
    "dyadic_direction",
    "limiting_gradient",
    "limiting_jacobian",
]
