"""asd on Keras models against TensorFlow itself: a training step whose backward is asd's.

What a Keras user pays for correct subgradients: one SGD step (forward, cross-entropy,
gradient of every weight, update) with the model called through ``asd.tf.function`` against
the same step with the model itself, eagerly and with both steps under ``tf.function``. The
models: an MLP, a small CNN (two conv-relu-maxpool blocks and a dense layer), a residual
network, and the CNN with a zero first convolution (every ReLU of its layer tied; the steps
run with a zero learning rate so that every step meets the ties).

Each row is checked on a fresh step: off ties against TensorFlow's gradient (no tie matters, so
the two must agree), with ties against asd's full sweep at every call
(``asd.tf.NATIVE_BACKWARD = False``). Timing is interleaved (``runner.time_interleaved``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .peers import Contender

# (row, limit): asd step / TensorFlow step, issue 25
TARGETS = (
    ("tf train-step mlp", 1.3), ("tf train-step cnn", 1.3), ("tf train-step residual", 1.3),
    ("tf compiled-step mlp", 1.3), ("tf compiled-step cnn", 1.3),
    ("tf compiled-step residual", 1.3),
)


@dataclass
class KerasProgram:
    name: str
    about: str
    make: Callable  # (quick) -> (model, x, labels)
    ties: bool = False


def _models(keras):
    layers = keras.layers

    def mlp():
        return keras.Sequential([keras.Input((64,)), layers.Dense(256, activation="relu"),
                                 layers.Dense(256, activation="relu"), layers.Dense(10)])

    def cnn(side=28):
        return keras.Sequential([
            keras.Input((side, side, 1)), layers.Conv2D(8, 3, activation="relu"),
            layers.MaxPooling2D(2), layers.Conv2D(16, 3, activation="relu"),
            layers.MaxPooling2D(2), layers.Flatten(), layers.Dense(10)])

    def residual(width=16, blocks=3, side=16):
        x = keras.Input((side, side, 1))
        h = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
        for _ in range(blocks):
            r = layers.Conv2D(width, 3, padding="same", activation="relu")(h)
            r = layers.Conv2D(width, 3, padding="same")(r)
            h = layers.ReLU()(layers.Add()([h, r]))
        return keras.Model(x, layers.Dense(10)(layers.GlobalAveragePooling2D()(h)))

    return mlp, cnn, residual


def programs(tf, keras) -> list[KerasProgram]:
    mlp, cnn, residual = _models(keras)

    def make(build, shape, batch, quick_batch, prepare=None):
        def make_(quick):
            keras.utils.set_random_seed(0)
            model = build()
            if prepare is not None:
                prepare(model)
            n = quick_batch if quick else batch
            rng = np.random.default_rng(0)
            x = tf.constant(rng.standard_normal((n, *shape)), tf.float32)
            return model, x, tf.constant(rng.integers(0, 10, n))
        return make_

    def zero_first(model):
        first = model.layers[0]
        first.kernel.assign(tf.zeros_like(first.kernel))
        first.bias.assign(tf.zeros_like(first.bias))

    return [
        KerasProgram("mlp", "64-256-256-10 ReLU MLP, batch 128", make(mlp, (64,), 128, 8)),
        KerasProgram("cnn", "conv(1->8)-relu-maxpool-conv(8->16)-relu-maxpool-dense, 28x28, "
                     "batch 32", make(cnn, (28, 28, 1), 32, 4)),
        KerasProgram("residual", "conv stem and 3 residual conv-relu-conv blocks, 16x16, "
                     "batch 32", make(residual, (16, 16, 1), 32, 4)),
        KerasProgram("zero-init conv", "the CNN with a zero first convolution: every ReLU of "
                     "its layer tied", make(cnn, (28, 28, 1), 32, 4, zero_first), ties=True),
    ]


def step_contenders(tf, keras, model, x, labels, lr=1e-3, compiled=False) -> list[Contender]:
    """One SGD step with TensorFlow's gradient against one through ``asd.tf.function``;
    with ``compiled``, both steps under ``tf.function``."""
    import asd.tf

    twin = keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    dropped = asd.tf.function(twin, seed=0)
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step_of(forward, module):
        opt = keras.optimizers.SGD(lr)
        variables = module.trainable_variables

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = xent(y, forward(x))
            grads = tape.gradient(loss, variables)
            opt.apply_gradients(zip(grads, variables, strict=True))
            return loss, grads

        step = tf.function(step) if compiled else step

        def run():
            loss, grads = step(x, labels)
            return float(loss), tuple(grads)
        return run

    return [Contender("tf step", step_of(model, model), None, False),
            Contender("asd step", step_of(dropped, twin), None, False)]


def _check(cands: list[Contender], full_sweep: Callable | None) -> dict:
    """Relative error of asd's step gradients on a fresh call: against TensorFlow's off ties,
    against asd's full sweep at every call where ties matter."""
    import asd.tf

    got = cands[1].run()[1]
    if full_sweep is None:
        reference, ref = "tf step", cands[0].run()[1]
    else:
        old = asd.tf.NATIVE_BACKWARD
        asd.tf.NATIVE_BACKWARD = False
        try:
            reference, ref = "asd full sweep", full_sweep()[1].run()[1]
        finally:
            asd.tf.NATIVE_BACKWARD = old
    want = [np.asarray(w, dtype=np.float64) for w in ref]
    scale = max(1.0, max(float(np.abs(w).max()) for w in want))
    err = max(float(np.abs(np.asarray(g, dtype=np.float64) - w).max())
              for g, w in zip(got, want, strict=True)) / scale
    return {"reference": reference, "relative_error": {"asd step": err}, "tolerance": 1e-4,
            "ok": err <= 1e-4}


KINDS = ("train-step", "compiled-step")


def run(quick: bool, reps: int, warmup: int, only: str | None = None) -> list[dict]:
    """One row per (program, kind): medians, the asd/tf ratio, the check, and how many eager
    calls took TensorFlow's gradient (no tie mattered) and how many asd's."""
    import keras
    import tensorflow as tf

    from asd.frontends.tf import dropin

    from .runner import time_interleaved

    rows = []
    for prog in programs(tf, keras):
        for kind in KINDS:
            name = f"tf {kind} {prog.name}"
            if only is not None and only not in name:
                continue
            lr = 0.0 if prog.ties else 1e-3

            def make(prog=prog, kind=kind, lr=lr):
                model, x, labels = prog.make(quick)
                return step_contenders(tf, keras, model, x, labels, lr,
                                       compiled=kind == "compiled-step")

            cands = make()
            check = _check(cands, make if prog.ties else None)
            before = dict(dropin.PATHS)
            times = time_interleaved(cands, reps, warmup)
            paths = {k: dropin.PATHS[k] - before[k] for k in before}
            medians = {c.name: 1e3 * statistics.median(times[c.name]) for c in cands}
            rows.append({"name": name, "about": prog.about, "device": "cpu",
                         "dtype": "float32", "median_ms": medians,
                         "ratio": medians["asd step"] / medians["tf step"],
                         "ratio_of": "asd step / tf step", "check": check,
                         "eager paths": paths})
    return rows


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for program, limit in TARGETS:
        for r in rows:
            if r["name"] == program:
                out.append({"target": f"{program}: asd step / tf step", "program": r["name"],
                            "ratio": r["ratio"], "limit": limit, "met": r["ratio"] <= limit})
    return out


def table(rows: list[dict]):
    from rich.table import Table

    t = Table(title="asd on Keras models: median ms per training step, float32, CPU",
              title_justify="left")
    for col in ("program", "tf step", "asd step", "ratio", "eager paths", "check"):
        t.add_column(col, justify="left" if col == "program" else "right")
    for r in rows:
        paths = r["eager paths"]
        t.add_row(r["name"], f"{r['median_ms']['tf step']:.3g}",
                  f"{r['median_ms']['asd step']:.3g}", f"{r['ratio']:.2f}",
                  f"{paths['native']} tf / {paths['asd']} asd",
                  "ok" if r["check"]["ok"] else "FAIL")
    return t


if __name__ == "__main__":       # python -m benchmarks.tf_models [quick] [only]
    import sys

    from rich.console import Console

    quick = "quick" in sys.argv[1:]
    only = next((a for a in sys.argv[1:] if a != "quick"), None)
    Console().print(table(run(quick, 3 if quick else 11, 1 if quick else 2, only)))
