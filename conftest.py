"""pytest collection: the framework front ends' doctests need their framework.

The packages ``asd/frontends/tf/`` (and ``torch/``, ``jax/``) import their framework at module
level, as their doctests show; without it installed (the extra is optional) they are skipped,
like the tests that ``importorskip`` the framework, instead of stopping the collection."""

from __future__ import annotations

import importlib.util

FRAMEWORKS = {"torch": "torch", "jax": "jax", "tf": "tensorflow"}

collect_ignore = [f"asd/frontends/{module}" for module, package in FRAMEWORKS.items()
                  if importlib.util.find_spec(package) is None]
