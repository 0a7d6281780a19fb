"""The fuzz tests draw the same programs whatever ran before them (time is no verdict
either: `harness.TIME_LIMIT` is a hang guard outside campaigns).

Hypothesis (6.131 and later) draws some numbers from a pool of "local constants" that it
harvests from every non-test module of the project in ``sys.modules``; which of asd's modules
are imported depends on the tests that ran earlier in the session (the torch tests import
``asd.frontends.torch``, say), so the derandomized CI campaigns drew other programs in another
test order: ``test_jax_function_agrees_with_the_oracle`` met a program with a jump only after
the torch test had run. The fixture below empties that pool while a fuzz test runs, so each
draws its programs from the strategies' own distributions alone, the same in every order.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_local_constants(monkeypatch):
    """Hypothesis' pool of project constants, empty for the duration of the test (and its
    cache of permitted constants cleared on both sides, so no other test sees the change)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.conjecture.providers import Constants
    except ImportError:  # an older or newer hypothesis without the pool: nothing to pin
        yield
        return
    if not hasattr(providers, "_get_local_constants") or not hasattr(providers,
                                                                      "CONSTANTS_CACHE"):
        yield
        return
    empty = Constants()
    monkeypatch.setattr(providers, "_get_local_constants", lambda: empty)
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers.CONSTANTS_CACHE.cache.clear()

