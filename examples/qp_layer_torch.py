"""A QP layer trained inside a PyTorch model.

    features ──Linear──▶ q ──QP layer──▶ x*(q) = argmin ½xᵀPx + qᵀx  s.t.  0 <= x <= 1, Σx = 1

The layer is ``asd.implicit.qp`` wrapped by ``asd.implicit.as_torch``, and the whole loss is
wrapped by ``asd.torch.function``: the model is imported with the QP as one primitive, so each
step is one asd sweep of the loss, whose ties (at a weakly active bound of the QP) are decided
along one direction and whose backward is the limiting Jacobian of the piece that direction
enters (never a blend). The model learns to output the allocations of a teacher model with the
same QP layer; many targets sit on the bounds, so the layer works at its kinks. The script
asserts that the loss falls below a quarter of its start.

Run: python examples/qp_layer_torch.py
"""

from __future__ import annotations

import sys

import numpy as np

try:
    import torch
except ImportError:
    print("skipped: needs torch (pip install torch)")
    sys.exit(0)

import asd

N, F = 4, 3
P = np.diag([1.0, 2.0, 1.0, 0.5])
G = np.vstack([np.eye(N), -np.eye(N)])
H = np.concatenate([np.ones(N), np.zeros(N)])
A = np.ones((1, N))
B = np.ones(1)


def allocation(q):
    return asd.implicit.qp(P, q, A, B, G, H)


def main() -> int:
    torch.manual_seed(0)
    # out_shape: the layer is traced (torch.export) before it ever runs: x* is shaped like q
    layer = asd.implicit.as_torch(allocation, seed=0, out_shape=lambda q_shape: q_shape)
    teacher = torch.nn.Linear(F, N).double()
    student = torch.nn.Linear(F, N).double()
    features = torch.randn(6, F, dtype=torch.float64)
    with torch.no_grad():
        targets = torch.stack([layer(2 * teacher(f)) for f in features])

    def loss_fn(features):
        out = torch.stack([layer(student(f)) for f in features])
        return ((out - targets) ** 2).sum()

    step = asd.torch.function(loss_fn, seed=0)   # the QP is one primitive of the loss
    opt = torch.optim.Adam(student.parameters(), lr=0.1)
    losses = []
    for epoch in range(15):
        opt.zero_grad()
        loss = step(features)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if epoch % 5 == 0 or epoch == 14:
            print(f"epoch {epoch:2d}: loss {losses[-1]:.6f}")
    at_bounds = int(((targets == 0) | (targets == 1)).sum())
    print(f"{at_bounds} of {targets.numel()} target entries sit on a bound")
    if not losses[-1] < 0.25 * losses[0]:
        print("the QP layer did not train", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
