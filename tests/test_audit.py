"""``asd audit`` and ``asd.cli.frameworks``: framework gradients against the Clarke set.

- a PyTorch MLP at zero pre-activations (first layer of (a, -a) pairs, so the function is
  linear near 0 and its Clarke set is one gradient): PyTorch's gradient is outside, exit 1;
- the same for a JAX function, and an inside verdict (exit 0) where the framework's choice
  happens to lie in the set;
- the battery runs, writes its table and exits 0, and asd is inside every exact set;
- ``asd.cli.frameworks.derivative`` reports what each framework says for the paper's programs.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import asd
from asd.cli import audit, battery, frameworks
from asd.cli.main import load_target


def write(tmp_path, name: str, source: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


TORCH_MLP = """
    import torch
    import torch.nn as nn

    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64)
    mlp = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 3), nn.ReLU(),
                        nn.Linear(3, 1)).double()
    with torch.no_grad():
        mlp[0].weight.copy_(torch.cat([a, -a]))
        mlp[0].bias.zero_()
        mlp[2].weight.copy_(torch.cat([torch.eye(3), -torch.eye(3)], 1).double())
        mlp[2].bias.fill_(1.0)


    def f(x):
        return mlp(x).sum()


    def relu_sum(x):
        return torch.relu(x).sum()
"""


def test_audit_flags_torch_gradient_outside_a_singleton_set(tmp_path, capsys):
    pytest.importorskip("torch")
    path = write(tmp_path, "model.py", TORCH_MLP)
    code = audit.main([f"{path}:f", "--at", "[0, 0, 0]", "--samples", "64"])
    out = capsys.readouterr().out
    assert code == 1        # certified: the layer's relu(a x), relu(-a x) switch together
    assert "PyTorch gradient" in out and "[0.0, 0.0, 0.0]" in out
    assert "outside" in out and "separating direction" in out


def test_audit_report_holds_the_true_gradient(tmp_path):
    torch = pytest.importorskip("torch")
    fn = load_target(f"{write(tmp_path, 'model2.py', TORCH_MLP)}:f")
    report = audit.audit(fn, np.zeros(3), samples=32)
    assert report["framework"] == "torch"
    assert len(report["clarke"]) == 1 and report["asd_inside"]
    x = torch.full((3,), 1e-3, dtype=torch.float64, requires_grad=True)
    fn(x).backward()                                  # f is linear near 0: any nearby gradient
    np.testing.assert_allclose(report["asd"], x.grad.numpy(), rtol=1e-12)
    assert not np.allclose(report["framework_gradient"], report["asd"])


def test_audit_inside_when_the_framework_choice_is_a_limiting_gradient(tmp_path, capsys):
    pytest.importorskip("torch")
    path = write(tmp_path, "model3.py", TORCH_MLP)
    assert audit.main([f"{path}:relu_sum", "--at", "[0, 0]", "--samples", "64"]) == 0
    assert "inside" in capsys.readouterr().out


def test_audit_jax_function_and_npy_point(tmp_path, capsys):
    pytest.importorskip("jax")
    path = write(tmp_path, "jmodel.py", """
        import jax


        def f(x):
            return (jax.nn.relu(x) - jax.nn.relu(-x)).sum()
    """)
    point = tmp_path / "x.npy"
    np.save(point, np.zeros(2))
    # relu(x) - relu(-x) in two nodes: the chain-rule enclosure is [0, 2] per entry, so
    # JAX's 0 (truly outside {1}) is undetermined, never claimed (issue 26)
    assert audit.main([f"{path}:f", "--at", str(point), "--samples", "16"]) == 3
    out = capsys.readouterr().out
    assert "JAX gradient" in out and "undetermined" in out


def test_audit_plain_numpy_function_has_no_framework_verdict(tmp_path, capsys):
    path = write(tmp_path, "npmodel.py", """
        import numpy as np


        def f(x):
            return np.maximum(x[0], x[1])
    """)
    assert audit.main([f"{path}:f", "--at", "[1, 1]", "--samples", "16"]) == 0
    out = capsys.readouterr().out
    assert "2 distinct limiting gradient(s)" in out


def test_detect_reads_the_framework_from_the_file(tmp_path):
    pytest.importorskip("torch")
    fn = load_target(f"{write(tmp_path, 'model4.py', TORCH_MLP)}:relu_sum")
    assert audit.detect(fn) == "torch"


def test_audit_exit_code_2_when_the_program_cannot_be_imported(tmp_path, capsys):
    pytest.importorskip("torch")
    path = write(tmp_path, "lgamma.py", """
        import torch


        def f(x):
            return torch.lgamma(x).sum()
    """)
    assert audit.main([f"{path}:f", "--at", "[1, 2]"]) == 2
    assert "aten.lgamma" in capsys.readouterr().err
    assert audit.main([f"{path}:missing", "--at", "[0]"]) == 2


@pytest.mark.parametrize("bad", ["nofile.py:f", "no_colon", ":f"])
def test_audit_rejects_bad_targets(bad):
    with pytest.raises((ValueError, FileNotFoundError)):
        load_target(bad)


# ----- the battery -----


def test_battery_runs_writes_the_table_and_exits_zero(tmp_path, capsys):
    doc = tmp_path / "framework-gradients.md"
    code = audit.main(["--battery", "--no-progress", "--write-docs", str(doc)])
    out = capsys.readouterr().out
    assert code == 0
    text = doc.read_text()
    assert len(battery.CATALOG) >= 25
    for p in battery.CATALOG:
        assert f"| {p.name} |" in text
    summary = f"asd: {len(battery.CATALOG)}/{len(battery.CATALOG)} inside"
    assert summary in text and summary in out
    for name in frameworks.available():
        assert frameworks.LABELS[name] in text
    assert "version unknown" not in text        # tensorflow-cpu installs tensorflow


@pytest.mark.parametrize("pattern", battery.CATALOG, ids=[p.name for p in battery.CATALOG])
def test_every_asd_limiting_gradient_lies_in_the_exact_set(pattern):
    o = battery.asd_ops()
    f = pattern.asd_f or (lambda t: pattern.f(o, t))
    sample = asd.clarke(f, n=16, seed=1)(pattern.point)
    for g in sample.gradients:
        assert pattern.clarke.contains(g), (pattern.name, g)


def test_exact_sets_reject_points_outside():
    assert battery.Hull([1, 0], [0, 1]).contains([0.5, 0.5])
    assert not battery.Hull([1, 0], [0, 1]).contains([0.5, 0.6])
    assert not battery.Hull(1.0).contains(float("nan"))
    assert battery.Ball([0, 0], 1).contains([0.6, 0.8])
    assert not battery.Ball([0, 0], 1).contains([0.6, 0.81])


# ----- asd.cli.frameworks -----


@pytest.mark.parametrize("name", frameworks.available())
def test_framework_derivatives_of_the_paper_programs(name):
    got = {p: frameworks.derivative(name, p, 0.0) for p in frameworks.PROGRAMS}
    assert got["f1"] == 1.0
    away = {p: frameworks.derivative(name, p, 0.7) for p in frameworks.PROGRAMS}
    assert away == {"f1": 1.0, "f2": 1.0, "f3": 1.0, "f4": 0.0}
    truth = {"f1": 1.0, "f2": 1.0, "f3": 1.0, "f4": 0.0}
    assert any(got[p] != truth[p] for p in ("f2", "f3", "f4")), (name, got)


def test_relu_frameworks_pick_zero_at_the_kink():
    for name in set(frameworks.available()) & {"torch", "jax"}:
        assert frameworks.derivative(name, "f2", 0.0) == 0.0
        assert frameworks.derivative(name, "f3", 0.0) == 10.0


def test_unknown_framework_and_program_are_errors():
    with pytest.raises(ValueError, match="unknown framework"):
        frameworks.derivative("caffe", "f1", 0.0)
    with pytest.raises(ValueError, match="unknown program"):
        frameworks.derivative(frameworks.available()[0], "f9", 0.0)


# ----- messages that name the real cause (issue 23) -----


TWO_ARGS = """
    import torch


    def f(x, y):
        return (torch.relu(x) * y).sum()


    def f_x(x):
        return f(x, torch.ones(2, dtype=torch.float64))
"""


def test_audit_two_argument_function_names_the_signature_and_the_wrapper(tmp_path, capsys):
    pytest.importorskip("torch")
    path = write(tmp_path, "two.py", TWO_ARGS)
    assert audit.main([f"{path}:f", "--at", "[0, 0]", "--samples", "8"]) == 2
    err = capsys.readouterr().err
    assert "`f` takes 2 required arguments (x, y)" in err and "def f_x(x):" in err
    assert "torch.export" not in err and "tensor operations" not in err
    # the advice works: the one-argument wrapper is audited
    assert audit.main([f"{path}:f_x", "--at", "[0, 0]", "--samples", "8"]) == 0
    assert "inside" in capsys.readouterr().out


def test_audit_two_argument_numpy_function(tmp_path, capsys):
    path = write(tmp_path, "np2.py", """
        import numpy as np


        def f(x, y):
            return np.maximum(x, y).sum()
    """)
    assert audit.main([f"{path}:f", "--at", "[0, 0]"]) == 2
    err = capsys.readouterr().err
    assert "takes 2 required arguments (x, y)" in err and "Operands" not in err


def test_audit_wrong_point_shape_torch(tmp_path, capsys):
    pytest.importorskip("torch")
    path = write(tmp_path, "model5.py", TORCH_MLP)
    assert audit.main([f"{path}:f", "--at", "[0, 0]", "--samples", "8"]) == 2
    err = capsys.readouterr().err
    assert "when called on the --at point, an array of shape (2,)" in err
    assert "give --at a point of the shape `f` takes" in err
    assert "torch.export" not in err and "data-dependent" not in err


def test_audit_wrong_point_shape_jax_is_exit_2_not_a_traceback(tmp_path, capsys):
    pytest.importorskip("jax")
    path = write(tmp_path, "jmlp.py", """
        import jax.numpy as jnp

        W = jnp.ones((3, 2))


        def f(x):
            return jnp.maximum(W.T @ x, 0.0).sum()
    """)
    assert audit.main([f"{path}:f", "--at", "[0, 0]", "--samples", "8"]) == 2
    assert "an array of shape (2,)" in capsys.readouterr().err
    assert audit.main([f"{path}:f", "--at", "[0, 0, 0]", "--samples", "8"]) in (0, 1)


def test_audit_wrong_point_shape_numpy(tmp_path, capsys):
    path = write(tmp_path, "npv.py", """
        import numpy as np

        W = np.ones((3, 2))


        def f(x):
            return np.maximum(W.T @ x, 0.0).sum()


        def g(x):
            return x[0] * x[1]


        def vec(x):
            return np.maximum(x, 0.0)


        def vec_sum(x):
            return vec(x).sum()


        def nothing(x):
            np.sum(x)
    """)
    assert audit.main([f"{path}:f", "--at", "[0, 0]"]) == 2
    err = capsys.readouterr().err
    assert "`f` raised ValueError when called on the --at point, an array of shape (2,)" in err
    assert "reshape or expand_dims" not in err
    assert audit.main([f"{path}:g", "--at", "0"]) == 2
    err = capsys.readouterr().err
    assert "raised IndexError" in err and "shape ()" in err
    assert audit.main([f"{path}:vec", "--at", "[0, 0]"]) == 2
    err = capsys.readouterr().err
    assert "`vec` returns an array of shape (2,)" in err and "def vec_sum(x):" in err
    assert "asd.jacobian" not in err
    assert audit.main([f"{path}:vec_sum", "--at", "[0, 0]", "--samples", "8"]) == 0
    capsys.readouterr()
    assert audit.main([f"{path}:nothing", "--at", "[0, 0]"]) == 2
    assert "returns a NoneType" in capsys.readouterr().err


def test_audit_rejects_a_ragged_point_by_name(capsys):
    with pytest.raises(ValueError, match="JSON array of numbers"):
        audit.parse_point("[[0], [0, 1]]")
    with pytest.raises(ValueError, match="JSON array of numbers"):
        audit.parse_point('[1, "a"]')


TF_MODEL = """
    import tensorflow as tf

    w = tf.Variable(tf.ones((3, 2)))                 # float32


    def f(x):
        return tf.reduce_sum(tf.nn.relu(x) - tf.nn.relu(-x))


    def layer(x):
        return tf.reduce_sum(tf.nn.relu(tf.linalg.matvec(w, x, transpose_a=True)))
"""


def test_audit_imports_a_tensorflow_file(tmp_path, capsys):
    pytest.importorskip("tensorflow")
    path = write(tmp_path, "tfmodel.py", TF_MODEL)
    assert audit.main([f"{path}:f", "--at", "[0, 0]", "--samples", "8"]) == 3
    captured = capsys.readouterr()
    assert "TensorFlow gradient" in captured.out and "[0.0, 0.0]" in captured.out
    assert "undetermined" in captured.out
    assert "no TensorFlow importer" not in captured.out + captured.err
    assert audit.main([f"{path}:layer", "--at", "[0, 0]"]) == 2     # w is 3 x 2
    assert "`layer` raised InvalidArgumentError" in capsys.readouterr().err


def test_audit_tensorflow_float32_variables(tmp_path):
    pytest.importorskip("tensorflow")
    fn = load_target(f"{write(tmp_path, 'tfmodel2.py', TF_MODEL)}:layer")
    report = audit.audit(fn, np.zeros(3), samples=16)
    assert report["framework"] == "tensorflow"
    # relu(x . w_j) summed over two equal columns: the limiting gradients are 0 and 2 * ones
    got = sorted(tuple(np.round(np.asarray(g, dtype=float), 6)) for g in report["clarke"])
    assert got == [(0.0, 0.0, 0.0), (2.0, 2.0, 2.0)]
    assert report["verdict"] == "inside"             # TensorFlow's relu'(0) = 0 is a vertex


TF_FILE = """
    import tensorflow as tf

    dense = tf.keras.layers.Dense(3, activation="relu", kernel_initializer="ones")
    dense.build((None, 2))


    @tf.function
    def pooled(x):
        return tf.reduce_sum(tf.nn.max_pool1d(tf.reshape(x, (1, 4, 1)), 2, 2, "VALID"))


    def keras_layer(x):
        return tf.reduce_sum(dense(x[None]))


    def gap(x, y):
        return tf.reduce_max(tf.abs(x - y))
"""


def test_audit_tensorflow_files_tf_function_keras_and_two_arguments(tmp_path, capsys):
    """``asd audit`` takes TensorFlow files: a ``tf.function``, a Keras layer (float32, printed
    as float32) and a function of two arguments (``--argnums``), each checked against the
    limiting gradients of its program at a kink."""
    pytest.importorskip("tensorflow")
    path = write(tmp_path, "tffile.py", TF_FILE)
    # max pooling over the tied window (1, 1): TensorFlow routes to the first entry, a vertex
    report = audit.audit(load_target(f"{path}:pooled"), np.array([1.0, 1.0, 0.0, 2.0]),
                         samples=16)
    assert report["framework"] == "tensorflow" and report["verdict"] == "inside"
    got = sorted(tuple(np.asarray(g, dtype=float)) for g in report["clarke"])
    assert got == [(0.0, 1.0, 0.0, 1.0), (1.0, 0.0, 0.0, 1.0)]
    # relu(x1 + x2) three times at x1 + x2 = 0: the limiting gradients are 0 and (3, 3)
    assert audit.main([f"{path}:keras_layer", "--at", "[1, -1]", "--samples", "16"]) == 0
    out = capsys.readouterr().out
    # the title wraps at 80 columns where the temporary path is long (pytest-of-root/pytest-N)
    assert "(TensorFlow, float32)" in " ".join(out.split())
    assert "TensorFlow gradient    [0.0, 0.0]" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    # max |x - y| at x = y: both arguments differentiated together (four limiting gradients)
    assert audit.main([f"{path}:gap", "--at", "[1, 0]", "--at", "[1, 0]", "--argnums", "0,1",
                       "--samples", "64"]) == 0
    out = capsys.readouterr().out
    assert "TensorFlow gradient (arg 1)" in out and "4 distinct limiting gradient(s)" in out


def test_detect_keras_only_file_as_tensorflow(tmp_path):
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras runs on another backend here")
    path = write(tmp_path, "kmodel.py", """
        import keras

        layer = keras.layers.Dense(1)


        def f(x):
            return keras.ops.sum(layer(x[None]))
    """)
    assert audit.detect(load_target(f"{path}:f")) == "tensorflow"


# ----- issue 26: three-valued verdicts -----

def test_audit_exit_3_when_undetermined_and_never_outside_for_a_limiting_gradient(tmp_path,
                                                                                capsys):
    """Linear(3, 4) -> ReLU -> Linear(4, 1), first bias 0, at x = 0: PyTorch's [0, 0, 0] is a
    genuine limiting gradient (the all-inactive pattern); a sample that misses it used to print
    outside (exit 1). Now: inside when found, undetermined (exit 3) otherwise, never outside."""
    pytest.importorskip("torch")
    path = write(tmp_path, "net.py", """
        import torch

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                                  torch.nn.Linear(4, 1)).double()
        with torch.no_grad():
            net[0].bias.zero_()


        def f(x):
            return net(x).sum()
    """)
    codes = [audit.main([f"{path}:f", "--at", "[0, 0, 0]", "--seed", str(s)]) for s in (0, 1)]
    out = capsys.readouterr().out
    assert codes == [3, 0]
    assert "undetermined" in out and "what would settle it" in out and "outside" not in out
    assert audit.exit_code("outside") == 1
