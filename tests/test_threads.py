"""Calls on several threads at once: each call's state is its own.

A branching program keeps the evaluation it is running on a stack that ``asd.branch``
consults; a process-wide stack let one thread's ``asd.branch`` decide in another thread's
run (raw ``TypeError``s and wrong branches). The stack is per thread now, and so is the rule
context through which rules report their ties to the sweep (tie diagnostics).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

import asd


@asd.branching
def clip01(x):
    if asd.branch(x):
        return 1.0 if asd.branch(x - 1) else x
    return 0.0


@asd.branching
def max2(a, b):
    return a if asd.branch(a - b) else b


def clip_identity(x):
    """``clip01(x) - clip01(-x)`` is ``x`` on [-1, 1]: its limiting gradient at 0 is 1."""
    return np.sum(clip01(x) - clip01(-x)) + np.sum(max2(x, -x))


def run_threads(work, n_threads: int = 4, rounds: int = 30) -> list:
    """Run ``work(thread, round)`` on ``n_threads`` threads started together; its results."""
    barrier = threading.Barrier(n_threads)
    results: list = [None] * n_threads
    errors: list = []

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = [work(i, r) for r in range(rounds)]
        except Exception as e:  # reported below, with the thread
            errors.append((i, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so their calls interleave
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    return results


def test_branching_programs_on_four_threads_match_the_serial_answers():
    points = [np.zeros(5), np.array([0.0, 1.0, -1.0, 0.5, 0.0]), np.full(5, 1.0)]
    dirs = [np.array([1.0, -1.0, 2.0, 0.0, -3.0]), np.array([-1.0, 1.0, 1.0, -2.0, 1.0])]

    def one(i: int, r: int):
        x, d = points[(i + r) % len(points)], dirs[(i * 7 + r) % len(dirs)]
        value, g = asd.value_and_subgrad(clip_identity, direction=d)(x)
        dini = asd.directional(clip_identity)(x, d)[1]
        return (i + r) % len(points), (i * 7 + r) % len(dirs), value, g, dini

    expected = {}
    for p, x in enumerate(points):
        for q, d in enumerate(dirs):
            value, g = asd.value_and_subgrad(clip_identity, direction=d)(x)
            expected[p, q] = value, g, asd.directional(clip_identity)(x, d)[1]
    for per_thread in run_threads(one):
        for p, q, value, g, dini in per_thread:
            want_value, want_g, want_dini = expected[p, q]
            assert value == want_value
            np.testing.assert_array_equal(g, want_g)
            assert dini == want_dini


def test_branching_answer_at_the_kink_is_the_limiting_gradient_on_every_thread():
    # along +1 the ray enters x in (0, 1): clip01' = 1 and the max2 branch a >= b (slope 1);
    # the second clip01 sits at -x = 0 going down: slope 0; so the total slope is 2
    def one(i: int, r: int):
        return float(asd.subgrad(clip_identity, direction=np.ones(1))(np.zeros(1))[0])

    for per_thread in run_threads(one, rounds=40):
        assert per_thread == [2.0] * 40


def test_plain_programs_on_four_threads_match_the_serial_answers():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4))
    xs = [np.zeros(4), rng.standard_normal(4), np.array([1.0, -1.0, 0.0, 0.0])]

    def loss(x):
        return np.sum(np.abs(np.maximum(w @ x, 0.0) - 1.0)) + np.max(x)

    serial = [asd.subgrad(loss, seed=3)(x) for x in xs]

    def one(i: int, r: int):
        k = (i + r) % len(xs)
        return k, asd.subgrad(loss, seed=3)(xs[k])

    for per_thread in run_threads(one):
        for k, g in per_thread:
            np.testing.assert_array_equal(g, serial[k])


def test_tie_diagnostics_stay_with_their_own_call():
    """Each thread's sweep meets a different number of ties; the rule context that reports
    them is per thread, so every call's decisions are its own."""

    def tied(k):
        return lambda x: np.sum(asd.relu(x[:k])) + np.sum(asd.relu(x[k:] + 1.0))

    def work(thread, _):
        r = asd.asd(tied(thread + 1), direction=np.ones(8))(np.zeros(8))
        return [(d.how, d.count) for d in r.decisions], [t.count for t in r.ties]

    for thread, rounds in enumerate(run_threads(work)):
        for decisions, ties in rounds:
            assert decisions == [("tangent", thread + 1)] and ties == [thread + 1]
