"""The paper's Figure 1: two programs for relu, one qualified, one not.

Both return max(x, 0). The left one branches on ``x >= 0``; the right one on ``x**3 >= 0``,
whose gradient vanishes where the constraint does (x = 0), so first-order information
cannot tell which side a direction enters: at x = 0 the tangent of x**3 is 0 for every
direction, Algorithm 7 falls to the ">=" side, and the derived rule claims slope 1 even when
the ray goes left. Composed into the identity ``relu(x) - relu(-x)``, the unqualified
version reports the subgradient 2 at 0 (the identity's derivative is 1), for every
direction. The certifier rejects it before it runs, with the witness x = 0, and the sweep
flags the degenerate ties it met.

Run: python examples/figure1_cq.py
"""

from __future__ import annotations

import numpy as np

import asd


@asd.branching
def relu_left(x):
    return x if asd.branch(x) else 0.0


@asd.branching
def relu_right(x):
    return x if asd.branch(x ** 3) else 0.0


def identity_from(relu):
    return lambda x: relu(x) - relu(-x)


def main() -> None:
    xs = np.linspace(-2, 2, 9)
    assert np.array_equal(relu_left(xs), relu_right(xs)), "both programs compute relu"

    print("subgradient of relu(x) - relu(-x) at x = 0 (the identity: the answer is 1)")
    print(f"{'direction':>10} {'branch on x':>12} {'branch on x**3':>15}")
    for v in (1.0, -1.0, 0.5, -3.0):
        good = asd.subgrad(identity_from(relu_left), direction=v)(0.0)
        _, bad, report = asd.value_and_subgrad(identity_from(relu_right), direction=v,
                                               diagnostics=True)(0.0)
        degenerate = report.degenerate
        print(f"{v:>10} {float(good):>12} {float(bad):>15}   degenerate ties: "
              f"{[str(t) for t in degenerate]}")
        assert good == 1.0
        assert bad == 2.0, "the unqualified constraint gives a wrong subgradient"
        assert len(degenerate) == 2, "and the sweep flags both relu nodes"

    # Along the ray to the left the unqualified rule takes the wrong branch of relu itself:
    _, dini, grad = relu_right.asd(np.array(0.0), direction=np.array(-1.0))
    assert (float(dini), float(grad)) == (-1.0, 1.0)  # the true Dini derivative is 0
    _, dini, grad = relu_left.asd(np.array(0.0), direction=np.array(-1.0))
    assert (float(dini), float(grad)) == (0.0, 0.0)

    left, right = asd.certify(relu_left), asd.certify(relu_right)
    print()
    print(left)
    print(right)
    assert left.ok
    assert not right.ok
    assert [(f.kind, f.witness) for f in right.failures] == [("cq", {"x": 0})]
    print("\nthe certifier accepts the left program and rejects the right one at x = 0")


if __name__ == "__main__":
    main()
