"""``np.pad`` of a traced array in every mode numpy has: the modes that copy entries (edge,
wrap, reflect, symmetric with even reflection, constant) give numpy's value, and, being
linear, a directional derivative that is the padded direction itself (exactly); the modes
that compute new values (statistics, ramps, odd reflections, empty) are refused. Padding the
positions and gathering, as asd does for the copying modes, gave silently wrong values for
these: the maximum of the positions is the last position, not the maximum entry."""

from __future__ import annotations

import numpy as np
import pytest

import asd

X = np.array([[5.0, -1.0, 2.5], [0.5, 4.0, -3.0]])
V = np.array([[1.0, 2.0, -0.5], [3.0, -2.0, 0.25]])
COPYING = [{"mode": "edge"}, {"mode": "wrap"}, {"mode": "reflect"}, {"mode": "symmetric"},
           {"mode": "reflect", "reflect_type": "even"}, {"mode": "constant"},
           {"mode": "constant", "constant_values": 7.0}]
COMPUTING = [{"mode": "maximum"}, {"mode": "minimum"}, {"mode": "mean"}, {"mode": "median"},
             {"mode": "linear_ramp"}, {"mode": "linear_ramp", "end_values": 3.0},
             {"mode": "reflect", "reflect_type": "odd"},
             {"mode": "symmetric", "reflect_type": "odd"}, {"mode": "empty"}]


@pytest.mark.parametrize("kw", COPYING, ids=str)
@pytest.mark.parametrize("width", [1, ((1, 2), (2, 0))])
def test_copying_modes_are_numpys_and_linear(kw, width):
    value, slope = asd.directional(lambda x: np.pad(x, width, **kw))(X, V)
    np.testing.assert_array_equal(value, np.pad(X, width, **kw))
    zero = {"constant_values": 0.0} if kw.get("mode") == "constant" else {}
    np.testing.assert_array_equal(slope, np.pad(V, width, **{**kw, **zero}))


@pytest.mark.parametrize("kw", COMPUTING, ids=str)
def test_computing_modes_are_refused(kw):
    with pytest.raises(asd.UnsupportedError, match=r"numpy\.pad with mode="):
        asd.directional(lambda x: np.pad(x, 1, **kw))(X, V)
