"""pytest collection: the framework front ends' doctests need their framework.

``asd/frontends/tf.py`` (and torch.py, jax.py) import their framework at module level, as
their doctests show; without it installed (the extra is optional) they are skipped, like
the tests that ``importorskip`` the framework, instead of stopping the collection."""

from __future__ import annotations

import importlib.util

FRAMEWORKS = {"torch.py": "torch", "jax.py": "jax", "jax_staged.py": "jax", "tf.py": "tensorflow"}

collect_ignore = [f"asd/frontends/{module}" for module, package in FRAMEWORKS.items()
                  if importlib.util.find_spec(package) is None]
