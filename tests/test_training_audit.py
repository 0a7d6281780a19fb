"""The training monitor (`asd.torch.audit`, ``asd audit --train``) and the training-ties study.

- the census counts the ties of PyTorch's own forward exactly (constructed ties in ReLU,
  pooling, maximum, clamp and sort), tells live ties from harmless ones (dead ReLUs and blank
  receptive fields in a pooling window), and names operations it does not know;
- the verdicts: a step without a live tie is ``inside`` by the census; with one, asd's element
  is compared and a difference certified (a NaN gradient is ``outside``; a model whose ReLU
  pair is the identity, where PyTorch's relu'(0) = 0 leaves the Clarke set, is never called
  inside); asd's element at such steps is the exact gradient (the model's smooth twin's);
- the monitor runs on the test models of the study in all four dtypes, every N steps, with
  the checks asked for, and records an error (never raises into training) where asd cannot
  import the model;
- the log: JSON round trip, a table within 80 columns, plots; ``asd audit --train`` runs a
  script and exits 0 / 1 by the verdicts;
- the study's small settings run (CI's part of docs/training-ties.md).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import asd.torch  # noqa: E402  (attaches asd.torch.audit)
from asd.benchmarks import training_ties as tt  # noqa: E402

import asd  # noqa: E402
from asd.analysis.training import StepRecord, TrainingLog, judge, tolerance  # noqa: E402
from asd.cli import audit as cli  # noqa: E402
from asd.frontends import torch_audit  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

nn = torch.nn
F = torch.nn.functional


def steps(model, x, y, n=1, dtype=None):
    """``n`` SGD steps of ``model`` on ``(x, y)``."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(n):
        opt.zero_grad()
        F.cross_entropy(model(x).float(), y).backward()
        opt.step()


def test_audit_is_attached_to_asd_torch():
    assert asd.torch.audit is torch_audit.audit


# ----- the census -----


def test_relu_ties_in_zero_rows_are_counted_and_live():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    with torch.no_grad():
        model[0].bias.zero_()
    x = torch.randn(8, 3, dtype=torch.float64)
    x[:3] = 0                          # three rows: every pre-activation is its bias, 0
    with asd.torch.audit(model, checks=("ties",)) as log:
        steps(model, x, torch.zeros(8, dtype=torch.long))
    (r,) = log
    assert r.ties == {"1:relu": 12} and r.live == {"1:relu": 12}
    assert r.checked == "census" and r.verdict is None


def test_dead_relus_and_blank_fields_make_pool_ties_harmless():
    """conv -> relu -> max pool on an image that is blank (zeros) but for one pixel: the
    blank windows hold equal outputs (each its channel's bias, or 0 where the bias is below
    0): tied, and harmless; the census runs no asd for them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8, 2)).double()
    with torch.no_grad():
        model[0].bias.copy_(torch.tensor([0.5, -0.5]))
    x = torch.zeros(2, 1, 4, 4, dtype=torch.float64)
    x[0, 0, 0, 0] = 3.0
    with asd.torch.audit(model) as log:
        steps(model, x, torch.tensor([0, 1]))
    (r,) = log
    # windows: 2 images x 2 channels x 4 windows; image 0's top-left window (the pixel's
    # receptive field) has distinct values, every other window is constant: 15 ties
    assert r.ties == {"2:max_pool": 15}
    assert r.live == {} and r.checked == "census" and r.verdict == "inside"


def test_maximum_clamp_and_sort_ties():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 4)

        def forward(self, x):
            h = self.lin(x)
            a = torch.maximum(h, h.detach())         # tied everywhere, one side constant
            b = torch.clamp(h, min=0.0)              # tied where h == 0
            c = torch.sort(torch.cat([h, h], 1), dim=1).values   # every value twice
            return a[:, :2] + b[:, :2] + c[:, :2]

    model = M().double()
    with torch.no_grad():
        model.lin.bias.zero_()
    x = torch.zeros(3, 2, dtype=torch.float64)
    with asd.torch.audit(model, checks=("ties",)) as log:
        steps(model, x, torch.zeros(3, dtype=torch.long))
    (r,) = log
    assert r.ties["model:maximum"] == 12 and r.live["model:maximum"] == 12
    assert r.ties["model:clamp"] == 12
    # sorted rows of 8 zeros: 7 equal neighbours each
    assert r.ties["model:sort"] == 21


def test_unknown_operations_send_the_step_to_asd():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return torch.atan(self.lin(x)) * 2.0     # smooth, but not in the census' list

    model = M().double()
    x = torch.randn(4, 2, dtype=torch.float64)
    with asd.torch.audit(model) as log:
        steps(model, x, torch.zeros(4, dtype=torch.long))
    (r,) = log
    assert r.unknown == ["atan"] and r.checked == "asd" and r.equal and r.verdict == "inside"


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((2, 3, 8, 8), 2, 2, 0), ((1, 2, 7, 9), 3, 2, 1), ((2, 5, 12), 3, 3, 0),
    ((2, 5, 11), 2, 1, 1)])
def test_pool_windows_agree_with_unfolding(shape, kernel, stride, padding):
    x = torch.randn(shape, dtype=torch.float64)
    nd = len(shape) - 2
    k, s, p = (kernel,) * nd, (stride,) * nd, (padding,) * nd
    w = torch_audit._windows(x, k, s, p, (1,) * nd, nd, -torch.inf)
    pooled = (F.max_pool1d if nd == 1 else F.max_pool2d)(x, kernel, stride, padding)
    assert torch.equal(w.amax(-1), pooled)


# ----- verdicts -----


class Mirror(nn.Module):
    """``head(relu(h) - relu(-h))`` with ``h = lin(x)``, computed through one ReLU over
    ``[h, -h]``: the function is ``head(h)``, smooth, but where ``h = 0`` PyTorch's
    relu'(0) = 0 drops the terms of those rows."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.head = nn.Linear(2, 2)

    def forward(self, x):
        h = self.lin(x)
        z = torch.relu(torch.cat([h, -h], 1))
        return self.head(z[:, :2] - z[:, 2:])


class Smooth(Mirror):
    def forward(self, x):
        return self.head(self.lin(x))


def mirror_batch():
    torch.manual_seed(1)
    model = Mirror().double()
    with torch.no_grad():
        model.lin.bias.zero_()
    x = torch.randn(6, 3, dtype=torch.float64)
    x[:2] = 0
    return model, x, torch.tensor([0, 1, 0, 1, 0, 1])


def test_pytorch_gradient_off_a_singleton_set_is_never_called_inside():
    """The Clarke set is the smooth twin's gradient; PyTorch's differs by what relu'(0) = 0
    dropped. asd's sample finds only the twin's gradient; its enclosure (the chain rule
    through the ReLU over ``[h, -h]``) does not separate PyTorch's, so the verdict stays
    undetermined, with the gap recorded, never inside."""
    model, x, y = mirror_batch()
    twin = Smooth().double()
    twin.load_state_dict(model.state_dict())
    twin.zero_grad()
    F.cross_entropy(twin(x), y).backward()
    true = {n: p.grad.clone() for n, p in twin.named_parameters()}
    with asd.torch.audit(model, samples=8) as log:
        steps(model, x, y)
    (r,) = log
    assert r.live == {"model:relu": 8}
    assert r.checked == "clarke" and r.verdict in ("outside", "undetermined")
    assert not r.equal and r.inner > r.tol and "lin.bias" in r.differs
    assert r.decisions == {"relu/tangent": 8}
    # what PyTorch dropped is exactly the true gradient's part from the two zero rows
    model2, _, _ = mirror_batch()
    model2.zero_grad()
    F.cross_entropy(model2(x), y).backward()
    gap = (true["lin.bias"] - model2.lin.bias.grad).abs().max().item()
    assert r.differs["lin.bias"] == pytest.approx(gap, rel=1e-6)   # ct in float32


class RootSquare(nn.Module):
    """``sqrt(sum(h^2))`` per row: a norm, Lipschitz, whose PyTorch gradient at a zero row is
    NaN (sqrt'(0) = inf times 0)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.head = nn.Linear(1, 2)

    def forward(self, x):
        h = self.lin(x)
        return self.head(torch.sqrt((h * h).sum(1, keepdim=True)))


def test_a_nan_gradient_is_certified_outside():
    torch.manual_seed(0)
    model = RootSquare().double()
    with torch.no_grad():
        model.lin.bias.zero_()
    x = torch.randn(4, 3, dtype=torch.float64)
    x[0] = 0
    with asd.torch.audit(model, samples=8) as log:
        steps(model, x, torch.tensor([0, 1, 0, 1]))
    (r,) = log
    assert r.unknown == ["sqrt"] and r.checked == "asd" and "not finite" in r.note
    assert r.verdict == "outside" and r.distance == float("inf")
    assert set(r.differs) == {"lin.weight", "lin.bias"}


def test_asd_element_is_the_smooth_twins_gradient():
    """``sweep='always'`` at a step with ties: asd's element (recorded through the
    difference) equals the gradient of the smooth twin, exactly up to rounding."""
    model, x, y = mirror_batch()
    with asd.torch.audit(model, checks=("ties", "equal")) as log:
        steps(model, x, y)
    (r,) = log
    assert r.checked == "asd" and r.equal is False and r.verdict is None
    twin = Smooth().double()
    model3, _, _ = mirror_batch()
    twin.load_state_dict(model3.state_dict())
    F.cross_entropy(twin(x), y).backward()
    model3.zero_grad()
    F.cross_entropy(model3(x), y).backward()
    gap = max((a.grad - b.grad).abs().max().item() for a, b in
              zip(twin.parameters(), model3.parameters(), strict=True))
    assert r.difference == pytest.approx(gap, rel=1e-6)   # the loss in float32


def test_judge_and_tolerance():
    eps = 2.0 ** -52
    assert tolerance(eps, np.zeros(3)) == 0.0
    r = judge(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-15]), None, eps)
    assert r["equal"] and r["verdict"] == "inside" and r["checked"] == "asd"
    r = judge(np.array([1.0, 0.0]), np.array([1.0, 1.0]), None, eps, [("w", slice(1, 2))])
    assert r["equal"] is False and "verdict" not in r and r["differs"] == {"w": 1.0}

    class Broken:
        def contains(self, g, tol):
            raise KeyError(9)

    r = judge(np.array([1.0, 0.0]), np.array([1.0, 1.0]), lambda: Broken(), eps)
    assert r["verdict"] == "undetermined" and "KeyError" in r["note"]


def test_outside_stands_only_where_the_enclosure_agrees_with_asds_own_sample():
    """Regression (the study's wide network in float32, step 64): a float32 enclosure's
    lower bound 3.8e-5 on the distance, above the distance 4.6e-6 to asd's sampled hull, was
    reported as a certified ``outside``. Bounds that contradict each other certify nothing."""
    from asd.analysis.clarke import Membership

    eps = 2.0 ** -23
    # a genuine certificate stands: |x| at 0, PyTorch-like 1.5 against asd's element 0.3
    genuine = asd.clarke(asd.abs, n=8, seed=0)(0.0)
    r = judge(np.array([1.5]), np.array([0.3]), lambda: genuine, eps)
    assert r["verdict"] == "outside" and r["distance"] == pytest.approx(0.5)

    class Rounded:
        """The observed float32 answer: outer lower bound above the inner distance."""

        def __init__(self, element_verdict="inside"):
            self.element_verdict = element_verdict

        def contains(self, g, tol):
            if np.array_equal(g, [0.0, 1.0]):         # asd's element
                return Membership(self.element_verdict, 0.0, 0.0)
            return Membership("outside", 4.579e-6, 3.826e-5, None, 3.826e-5)

    fw, el = np.array([0.0, 1.0 - 4.579e-6]), np.array([0.0, 1.0])
    eps = 2.0 ** -52          # a difference beyond rounding, so the sample is asked
    r = judge(fw, el, lambda: Rounded(), eps)
    assert r["verdict"] == "undetermined" and "exceeds the distance" in r["note"]

    class ElementOutside(Rounded):
        def contains(self, g, tol):
            if np.array_equal(g, [0.0, 1.0]):
                return Membership("outside", 1e-3, 1e-3, None, 1e-3)
            return Membership("outside", 2e-3, 1e-3, None, 1e-3)

    r = judge(fw, el, lambda: ElementOutside(), eps)
    assert r["verdict"] == "undetermined" and "own element is outside" in r["note"]


# ----- the monitor on the study's test models, every dtype -----


@pytest.mark.parametrize("dtype", list(tt.DTYPES))
@pytest.mark.parametrize("name", ["mlp", "cnn", "maxout", "sortpool"])
def test_monitor_runs_on_the_test_models(name, dtype):
    Xtr, ytr, _, _ = tt.digits(64)
    torch.manual_seed(0)
    model = tt.MODELS[name]().to(tt.DTYPES[dtype])
    with asd.torch.audit(model, samples=4) as log:
        steps(model, Xtr[:16].to(tt.DTYPES[dtype]), ytr[:16], n=2)
    assert log.steps == 2 and len(log) == 2
    for r in log:
        assert r.dtype == dtype and r.checked != "error", r.note
        assert r.verdict in ("inside", "outside", "undetermined")


def test_every_n_and_checks():
    torch.manual_seed(0)
    model = tt.mlp(16)
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    with asd.torch.audit(model, every=3) as log:
        steps(model, x, y, n=7)
    assert log.steps == 7 and [r.step for r in log] == [0, 3, 6]
    with pytest.raises(asd.ArgumentError, match="every"):
        asd.torch.audit(model, every=0)
    with pytest.raises(asd.ArgumentError, match="checks"):
        asd.torch.audit(model, checks=("ties", "grad"))
    with pytest.raises(asd.ArgumentError, match=r"nn\.Module"):
        asd.torch.audit(lambda x: x)


def test_a_model_asd_cannot_import_is_recorded_not_raised():
    """Dropout in training mode: asd refuses to import it; the step is recorded as an error
    naming the fix, and training goes on."""
    model, x, y = mirror_batch()
    model.lin = nn.Sequential(model.lin, nn.Dropout(0.5)).double()
    with asd.torch.audit(model) as log:
        steps(model, x, y)
    assert [r.checked for r in log] == ["error"] and log[0].verdict is None
    assert "dropout" in log[0].note and "eval" in log[0].note


def test_evaluation_forwards_are_not_steps():
    torch.manual_seed(0)
    model = tt.mlp(16)
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    with asd.torch.audit(model) as log:
        steps(model, x, y)
        with torch.no_grad():
            model(x)
        model(x)                        # a forward with grad on, never backpropagated
        steps(model, x, y)
    assert log.steps == 2 and len(log) == 2


# ----- the log -----


def test_log_json_table_and_plot(tmp_path):
    model, x, y = mirror_batch()
    with asd.torch.audit(model, samples=8) as log:
        steps(model, x, y, n=3)
    path = tmp_path / "log.json"
    log.to_json(path)
    data = json.loads(path.read_text())
    assert data["summary"]["verdicts"]["undetermined"] == pytest.approx(1 / 3)
    back = TrainingLog.from_json(path.read_text())
    assert [r.to_dict() for r in back] == [r.to_dict() for r in log]
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(log.table(title="t"))
    for line in log.lines():
        console.print(line)
    assert max(len(line) for line in console.export_text().splitlines()) <= 80
    log.plot(tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 1000


def test_record_dict_is_json_ready():
    r = StepRecord(0, "float32", difference=float("inf"), differs={"w": float("nan")})
    assert json.loads(json.dumps(r.to_dict()))["difference"] == "inf"


# ----- asd audit --train -----

SCRIPT = """
    import sys
    import torch

    torch.manual_seed(1)
    {model}
    x = torch.randn(6, 3, dtype=torch.float64)
    x[:2] = 0
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(int(sys.argv[1])):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
"""

MIRROR = """class Mirror(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.head = torch.nn.Linear(2, 2)

        def forward(self, x):
            h = self.lin(x)
            z = torch.relu(torch.cat([h, -h], 1))
            return self.head(z[:, :2] - z[:, 2:])

    model = Mirror().double()
    with torch.no_grad():
        model.lin.bias.zero_()"""

ROOT = """class Root(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.head = torch.nn.Linear(1, 2)

        def forward(self, x):
            h = self.lin(x)
            return self.head(torch.sqrt((h * h).sum(1, keepdim=True)))

    model = Root().double()
    with torch.no_grad():
        model.lin.bias.zero_()"""

PLAIN = """model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                                torch.nn.Linear(4, 2)).double()"""


def test_train_cli_exit_codes_log_and_plot(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(model=ROOT)))
    code = cli.main(["--train", str(script), "--no-progress", "--samples", "8", "--log",
                     str(tmp_path / "log.json"), "--plot", str(tmp_path / "p.png"), "--",
                     "2"])
    out = capsys.readouterr().out
    assert code == 1                                  # a NaN gradient: outside
    assert max(len(line) for line in out.splitlines()) <= 80
    log = TrainingLog.from_json((tmp_path / "log.json").read_text())
    assert log.steps == 2 and log[0].verdict == "outside"
    assert (tmp_path / "p.png").exists()
    script.write_text(textwrap.dedent(SCRIPT.format(model=MIRROR)))
    assert cli.main(["--train", str(script), "--no-progress", "--samples", "8", "--",
                     "1"]) == 3                        # undetermined


def test_train_cli_inside_exits_0_and_missing_script_2(tmp_path, capsys):
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent(SCRIPT.format(model=PLAIN)))
    assert cli.main(["--train", str(script), "--no-progress", "--", "2"]) == 0
    assert "2 of 2 steps audited (float64)" in capsys.readouterr().out
    assert cli.main(["--train", str(tmp_path / "none.py"), "--no-progress"]) == 2
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert cli.main(["--train", str(empty), "--no-progress"]) == 2
    assert "trained no PyTorch model" in capsys.readouterr().err


# ----- the study (CI's small settings) and the overhead benchmark -----


def test_study_small_settings_produce_the_page_section(tmp_path):
    results = tt.study(tt.SMALL, progress=None)
    assert set(results) == {(d, m, t) for d in tt.SMALL["datasets"]
                            for m in tt.SMALL["models"] for t in tt.DTYPES}
    for runs in results.values():
        assert set(runs) == set(tt.VARIANTS)
        base = runs[tt.VARIANTS[0]]
        assert len(base.log) == len(base.losses) == len(base.bifurcating) > 0
        assert all(r.checked != "error" for r in base.log)
    figures = tt.plots(results, tmp_path)
    section = tt.render(results, tt.SMALL, figures, 1.0)
    assert section.count("\n| digits |") + section.count("\n| synthetic |") >= 16
    assert all((tmp_path / f).exists() for f in figures)
    doc = tmp_path / "page.md"
    doc.write_text(f"# t\n\n{tt.BEGIN}\nold\n{tt.END}\nprose\n")
    tt.splice(doc, section)
    text = doc.read_text()
    assert "old" not in text and text.endswith(f"{tt.END}\nprose\n") and "| mlp |" in text


def test_float64_and_float32_steps_never_leave_the_clarke_set():
    """In float64 and float32 the study's networks meet no ReLU tie where the pieces differ:
    PyTorch's gradient is the gradient at every step (docs/training-ties.md)."""
    for dtype in ("float64", "float32"):
        run = tt.train("cnn", "digits", dtype, tt.VARIANTS[0], 1, n=200, audit=True)
        assert all(r.verdict == "inside" for r in run.log)
        assert not any(run.bifurcating)


def test_relu_one_changes_only_the_backward():
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    tt.ReLUOne()(x).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0]
    model = tt.with_relu_one(tt.mlp(4))
    assert not any(isinstance(m, nn.ReLU) for m in model.modules())


def test_overhead_rows_and_their_part_of_the_page(tmp_path):
    rows = tt.overhead(models=("mlp",), dtypes=("float32",), steps=2)
    (row,) = rows
    assert row["plain_ms"] > 0 and row["census_ms"] > 0 and row["audited_ms"] > 0
    assert row["ratio"] == pytest.approx(row["audited_ms"] / row["plain_ms"])
    assert row["census_ratio"] == pytest.approx(row["census_ms"] / row["plain_ms"])
    section = tt.render_overhead(rows, "cpu", threads=1)
    assert "| mlp | float32 |" in section and "of 1 configurations" in section
    page = tmp_path / "page.md"
    begin, end = tt.markers("overhead-cpu")
    page.write_text(f"prose\n{begin}\nold\n{end}\nmore prose\n", encoding="utf-8")
    tt.splice(page, section, "overhead-cpu")
    text = page.read_text(encoding="utf-8")
    assert "old" not in text and "| mlp | float32 |" in text
    assert text.startswith("prose\n") and text.endswith(f"{end}\nmore prose\n")


def test_the_page_has_both_generated_parts():
    """docs/training-ties.md carries the study's part and the CPU overhead part, each
    between its markers, and its prose quotes only numbers of the generated parts."""
    text = (REPO / "docs" / "training-ties.md").read_text(encoding="utf-8")
    generated, prose = "", text
    for part in ("", "overhead-cpu", "overhead-cuda"):
        begin, end = tt.markers(part)
        if part == "overhead-cuda" and begin not in text:
            continue
        start, stop = text.index(begin), text.index(end)
        assert "Generated by" in text[start:stop]
        generated += text[start:stop]
        prose = prose.replace(text[start:stop], "")
    quoted = set(re.findall(r"\d+(?:\.\d+)?(?:%|x\b)", prose))
    missing = {q for q in quoted if q not in generated}
    assert not missing, f"numbers in the prose that no generated table shows: {missing}"
