"""asd.torch.function inside torch's own DistributedDataParallel (gloo on CPU, 2 processes).

DDP all-reduces the gradients each rank's backward leaves on the parameters; with asd's
backward those are asd's subgradients. Two ranks on half a batch each must end with the
gradient one process computes on the whole batch (the loss is a mean over equal shards), and
must agree with each other, as DDP promises.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORKER = textwrap.dedent('''
    import gc, json, os, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import asd.torch

    torch.manual_seed(0)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    y = torch.randn(16, 1, generator=torch.Generator().manual_seed(2))

    class Model(torch.nn.Module):
        """The network with asd's backward: DDP sees an ordinary module."""

        def __init__(self, net):
            super().__init__()
            self.net = net
            plain = os.environ.get("BACKWARD") == "torch"
            self.asd_net = net if plain else asd.torch.function(net, seed=0)

        def forward(self, x):
            return self.asd_net(x)

    def loss_of(model, x, y):
        return ((model(x) - y).abs()).mean()

    if world == 1:
        model = Model(net)
        loss_of(model, x, y).backward()
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = DDP(Model(net))
        shard = slice(rank * 8, (rank + 1) * 8)
        loss_of(model, x[shard], y[shard]).backward()
    grads = {name: p.grad.tolist() for name, p in model.named_parameters()}
    json.dump({name.removeprefix("module."): g for name, g in grads.items()},
              open(sys.argv[1], "w"))
    if world > 1:
        # The DDP reducer holds the gloo process group and its pending work; release it while
        # the interpreter is fully alive, or gloo's threads can abort the exit (SIGABRT).
        del model
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, world: int, backward: str = "asd") -> list[dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    procs, outs = [], []
    for rank in range(world):
        out = tmp_path / f"grads_{backward}_{world}_{rank}.json"
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), BACKWARD=backward,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, str(script), str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outs.append(out)
    for p in procs:
        output, _ = p.communicate(timeout=240)
        assert p.returncode == 0, output.decode()
    return [json.loads(o.read_text()) for o in outs]


def test_ddp_all_reduces_asd_gradients_to_the_single_process_gradient(tmp_path):
    """At a point without ties (random data) asd's gradient is torch's, so the single-process
    run is also checked against torch's own backward."""
    (single,) = _run(tmp_path, 1)
    (reference,) = _run(tmp_path, 1, backward="torch")
    rank0, rank1 = _run(tmp_path, 2)
    assert set(single) == set(rank0) == set(rank1) == {
        "net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    for name in single:
        np.testing.assert_array_equal(rank0[name], rank1[name])  # DDP's promise
        np.testing.assert_allclose(single[name], reference[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rank0[name], single[name], rtol=1e-5, atol=1e-6)
        assert np.any(np.asarray(single[name]) != 0), f"{name} got no gradient"
