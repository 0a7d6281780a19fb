"""The torch front end's program cache: what a walk of the function reads is guarded."""

from __future__ import annotations

import pytest

import asd

torch = pytest.importorskip("torch")
import asd.torch  # noqa: E402  (registers the front end)


class _SlottedScale:
    __slots__ = ("s",)

    def __init__(self, s):
        self.s = s


def test_a_slotted_objects_attribute_is_guarded():
    """An object with ``__slots__`` has no ``__dict__``: the walk read nothing of it, so a
    changed attribute replayed the stale program (gradient 2 after the scale became 3)."""
    cfg = _SlottedScale(2.0)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)

    def f(x):
        return torch.relu(x).sum() * cfg.s

    assert torch.equal(asd.torch.subgrad(f, x), torch.full((2,), 2.0, dtype=torch.float64))
    cfg.s = 3.0
    assert torch.equal(asd.torch.subgrad(f, x), torch.full((2,), 3.0, dtype=torch.float64))
