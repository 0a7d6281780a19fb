"""``asd bench``: the smoke run prints the table, writes a complete JSON report, and asd's
subgradient on every program equals the references (hand-written backprop, the
direction-aware hand-written ASD for the programs with ties, the peers). Never timing."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from asd.benchmarks import ops, peers, programs, runner

from asd.cli import bench

QUICK = programs.build(quick=True)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "report.json"
    return path


def test_quick_run_prints_the_table_and_writes_json(quick_run, capsys):
    md = quick_run.with_suffix(".md")
    code = bench.main(["--quick", "--json", str(quick_run), "--markdown", str(md),
                       "--peers", "autograd,torch"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "asd bench: median ms per call" in out
    # quick mode judges no time: the targets table is left out and the run says so
    assert "targets (this run)" not in out and "time targets are not judged" in out
    report = json.loads(quick_run.read_text())
    names = [p["name"] for p in report["programs"]]
    assert names == [b.name for b in QUICK]
    table = md.read_text().splitlines()
    assert table[0].startswith("| program | primal | hand | asd | asd untied | asd jit | "
                               "asd jit clarke64 | autograd | torch |")
    assert [row.split(" | ")[0].lstrip("| ") for row in table[2:]] == names
    for p in report["programs"]:
        rows = p["contenders"]
        assert {"primal", "asd", "autograd"} <= set(rows), p["name"]
        assert all(len(r["times_ms"]) == report["settings"]["reps"] for r in rows.values())
        assert rows["asd"]["peak_mb"] is not None and rows["asd"]["peak_mb"] > 0
        assert p["ratios"]["asd/primal"] > 0
    assert {t["program"] for t in report["targets"]} >= {
        "mlp float32", "mlp float64", "mlp-ties float64", "scalar-chain float64"}


def test_pytorch_models_run_on_their_device_and_match_torch(quick_run):
    """The PyTorch rows: value+subgradient and a training step per model on the CPU (and CUDA
    when present), each checked against torch's own gradients at a tie-free point, and the
    rows with ties against asd's full sweep at every call."""
    pytest.importorskip("torch")
    report = json.loads(quick_run.read_text())
    rows = report["torch_models"]
    names = {(r["name"], r["device"]) for r in rows}
    for model in ("cnn", "mlp", "residual", "transformer", "dead windows"):
        assert {(model, "cpu"), (f"train-step {model}", "cpu")} <= names
    assert ("train-step zero-init conv", "cpu") in names
    for r in rows:
        assert r["check"]["ok"], (r["name"], r["check"])
        assert set(r["check"]["relative_error"]) == {r["ratio_of"].split(" / ")[0]}
        want = "asd full sweep" if r["name"].endswith("zero-init conv") else \
            r["ratio_of"].split(" / ")[1]
        assert r["check"]["reference"] == want, r["name"]
        assert r["ratio"] > 0
    assert {t["program"] for t in report["targets"]} >= {"cnn", "train-step cnn"}


def test_every_program_is_checked_against_a_reference(quick_run):
    report = json.loads(quick_run.read_text())
    for p in report["programs"]:
        check = p["check"]
        assert check["ok"], (p["name"], check)
        assert check["required"], p["name"]
        if p["ties"]:
            assert check["required"] == ["hand"]
        else:
            assert "autograd" in check["required"]
        for name in check["required"]:
            assert check["relative_error"][name] <= check["tolerance"]
        if p["name"].startswith("mlp-ties"):
            assert check["tied entries met"] > 0
        if p["name"].startswith("mlp "):
            assert check["tied entries met"] == 0


HANDED = [b for b in QUICK if b.hand is not None]


@pytest.mark.parametrize("bench_", HANDED, ids=[b.name for b in HANDED])
def test_asd_matches_the_hand_written_reference(bench_):
    """The check itself can fail: a wrong gradient (scaled by 1.01) is caught."""
    import asd

    direction = programs.draw_direction(bench_.params, np.random.default_rng(7))
    vg = asd.value_and_subgrad(lambda p: bench_.loss(ops.asd_ops(), p, bench_.data),
                               direction=direction)
    value, grads = vg(bench_.params)
    ref = bench_.hand(bench_.params, bench_.data, direction)
    ours = (float(value), [np.asarray(g) for g in grads])
    want = (float(ref[0]), [np.asarray(g) for g in ref[1]])
    tol = 1e-3 if bench_.dtype == np.float32 else 1e-8
    assert runner.rel_error(ours, want) <= tol
    wrong = (want[0], [g * 1.01 for g in want[1]])
    assert runner.rel_error(ours, wrong) > tol


@pytest.mark.parametrize("bench_", QUICK, ids=[b.name for b in QUICK])
def test_sweeps_hold_only_structured_maps(bench_):
    """No dense Jacobian is ever materialized in a benchmark's sweep."""
    from asd import api
    from asd.core.linear import Dense, FanIn

    inputs = api._Inputs((bench_.params,), 0)
    trace, _, _ = api._sweep(lambda p: bench_.loss(ops.asd_ops(), p, bench_.data), inputs,
                             None, 0)
    maps = [m for lin in trace.lins if lin is not None
            for m in (lin.maps if isinstance(lin, FanIn) else (lin,))]
    assert maps and not any(isinstance(m, Dense) for m in maps)


def test_ties_really_occur_in_every_layer():
    """The tied MLP meets ties in all of its relus, and asd answers them by direction."""
    import asd

    b = next(b for b in QUICK if b.name == "mlp-ties float64")
    result = asd.asd(lambda p: b.loss(ops.asd_ops(), p, b.data), seed=0)(b.params)
    relus = [t for t in result.ties if t.primitive == "relu"]
    assert len(relus) == len(b.params) // 2 - 1
    assert all(t.count == b.data[0].shape[0] // 4 * b.params[2 * i].shape[1]
               for i, t in enumerate(relus))


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_sorting_network_sorts_every_zero_one_input(n):
    """The 0-1 principle: a comparator network that sorts all 0/1 inputs sorts everything."""
    s = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
    cols = ops.network_sort_columns(s, np.minimum, np.maximum)
    np.testing.assert_array_equal(np.stack(cols, axis=1), np.sort(s, axis=1))


def test_jax_contenders_agree_when_installed():
    pytest.importorskip("jax")
    b = next(b for b in QUICK if b.name.startswith("scalar-chain"))
    with runner._jax_x64(("jax",)):
        report = runner.run_one(b, reps=1, warmup=1, peers=("jax",))
    assert {"jax", "jax.jit"} <= set(report["contenders"])
    assert report["check"]["ok"], report["check"]


def test_bench_rejects_unknown_peers_and_programs(capsys):
    assert bench.main(["--quick", "--peers", "tensorflowx"]) == 2
    assert bench.main(["--quick", "--only", "no-such-program", "--peers", ""]) == 2
    assert "no program name contains" in capsys.readouterr().err


def test_contenders_follow_the_installed_peers():
    b = next(b for b in QUICK if b.name.startswith("sort"))
    names = [c.name for c in peers.contenders(b, ops.asd_ops(), ())]
    assert names == ["primal", "hand", "asd", "asd jit"]
    chain = next(b for b in QUICK if b.name.startswith("series-chain"))
    names = [c.name for c in peers.contenders(chain, ops.asd_ops(), ())]
    assert names == ["primal", "hand", "asd", "asd untied", "asd jit"]
    svm = next(b for b in QUICK if b.name.startswith("svm"))
    names = [c.name for c in peers.contenders(svm, ops.asd_ops(), ())]
    assert names == ["primal", "hand", "asd", "asd jit", "asd jit clarke64"]


def test_gpu_benchmark_runs_in_smoke_mode_on_the_cpu(tmp_path):
    """benchmarks/gpu.py, the one command a CUDA machine runs: every model and dtype steps
    through torch and through asd, and the two steps' gradients agree."""
    pytest.importorskip("torch")
    from asd.benchmarks import gpu

    out = tmp_path / "gpu.json"
    assert gpu.main(["--smoke", "--rounds", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["model"], r["dtype"]) for r in rows} == {
        (m, d) for m in ("resnet18", "transformer") for d in ("float32", "bfloat16")}
    for r in rows:
        assert r["relative_error"] <= (1e-5 if r["dtype"] == "float32" else 5e-2), r


def test_only_torch_selects_every_pytorch_row_and_nothing_else(capsys):
    """``asd bench --only torch`` runs the PyTorch rows (their names do not say torch)."""
    pytest.importorskip("torch")
    from asd.benchmarks import torch_models

    assert torch_models._wanted("torch", "train-step cnn")
    assert torch_models._wanted("torch cnn", "compiled-step cnn") is False
    assert torch_models._wanted("torch cnn", "cnn-1ms")
    assert not torch_models._wanted("jax", "cnn")
    assert not [b for b in QUICK if "torch" in b.name]    # no numpy program is selected
