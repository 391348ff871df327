"""Numbers of the generated training step against independent references.

Optimizer updates against Keras 3 optimizers on copies of the weights, two optimizers and
schedules against float64 closed forms, frozen variables, gradient accumulation against one
big batch, EMA shadows, batch-norm statistics, dropout and metrics against numpy.
Specs are tiny (inputs [6], one or two dense layers, batches of 8 to 64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.lib.generated import load_generated
from specgen.spec.load import load_spec_text

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

FEATURES = 6
CLASSES = 3
BATCH = 8
OPTIMIZER_TOLERANCE = 1e-6  # a few float32 updates of weights of order 0.1-1: ulps (6e-8 at 1), not a formula slip
MLP_LAYERS = [
    {"name": "body", "op": "dense", "input": "x", "units": 5, "activation": "tanh"},
    {"name": "out", "op": "dense", "units": CLASSES},
]
SPARSE_LOSS = {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"}


# ---------------------------------------------------------------------------------------------
# Building a generated model and training module from an in-memory spec
# ---------------------------------------------------------------------------------------------


def spec_doc(name: str, optimizers: dict[str, Any] | None = None, *, layers: list[dict[str, Any]] | None = None,
             train: dict[str, Any] | None = None, loss: dict[str, Any] | None = None,
             outputs: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A spec document: by default the MLP x[6] -> dense 5 tanh -> dense 3 with a softmax loss."""
    doc: dict[str, Any] = {"specgen": 1, "name": name, "inputs": {"x": {"shape": [FEATURES]}},
                           "outputs": outputs or {"logits": "out"}, "layers": layers or MLP_LAYERS, **extra}
    if optimizers is not None:
        doc["loss"] = loss or SPARSE_LOSS
        doc["optimizers"] = optimizers
        doc["train"] = {"batch_size": BATCH, **(train or {})}
    return doc


def one_optimizer(kind: str, learning_rate: Any, **params: Any) -> dict[str, Any]:
    return {"all": {"variables": ["*"], "kind": kind, "learning_rate": learning_rate, **params}}


@dataclass
class Built:
    ir: Any
    model: Any
    trainer: Any
    train_module: Any


def build(tmp_path: Path, doc: dict[str, Any], folder: str = "code") -> Built:
    """Render the spec, write model.py and train.py under tmp_path/folder and instantiate them (seed 0)."""
    loaded = load_spec_text(yaml.safe_dump(doc, sort_keys=False), f"{doc['name']}.yaml")
    ir = build_ir(loaded)
    files = render_files(ir)
    out = tmp_path / folder
    out.mkdir(parents=True)
    (out / "model.py").write_bytes(files["model.py"])
    model = getattr(load_generated(out / "model.py"), ir.class_name)(seed=0)
    if "train.py" not in files:
        return Built(ir, model, None, None)
    (out / "train.py").write_bytes(files["train.py"])
    train_module = load_generated(out / "train.py")
    trainer = getattr(train_module, f"{ir.class_name}Training")(model)
    return Built(ir, model, trainer, train_module)


def data(n: int, seed: int, classes: int = CLASSES) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, FEATURES)).astype(np.float32), rng.integers(0, classes, n).astype(np.int64)


def step_seed(a: int = 0, b: int = 0) -> Any:
    return tf.constant([a, b], tf.int64)


def train_step(trainer: Any, x: np.ndarray, y: np.ndarray, seed: Any = None) -> float:
    loss = trainer.train_step({"x": tf.constant(x)}, {"label": tf.constant(y)}, step_seed() if seed is None else seed)
    return float(loss)


def values(variables: dict[str, Any]) -> dict[str, np.ndarray]:
    return {path: var.numpy().copy() for path, var in variables.items()}


def mlp_loss(weights: dict[str, Any], x: np.ndarray, y: np.ndarray) -> Any:
    """The MLP's mean sparse cross-entropy, written out in plain TensorFlow (independent of the generated code)."""
    hidden = tf.tanh(tf.matmul(x, weights["body/kernel"]) + weights["body/bias"])
    logits = tf.matmul(hidden, weights["out/kernel"]) + weights["out/bias"]
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def weight_copy(model: Any) -> dict[str, Any]:
    return {path: tf.Variable(var.numpy(), name=path.replace("/", "_"))
            for path, var in model.variables_by_path().items()}


def reference_gradients(copy: dict[str, Any], paths: list[str], x: np.ndarray, y: np.ndarray) -> list[Any]:
    with tf.GradientTape() as tape:
        loss = mlp_loss(copy, x, y)
    return tape.gradient(loss, [copy[p] for p in paths])


# ---------------------------------------------------------------------------------------------
# 1. Every optimizer kind against the Keras 3 optimizer, step by step
# ---------------------------------------------------------------------------------------------

EXP_SCHEDULE = {"schedule": "exponential_decay", "initial": 0.05, "decay_steps": 2, "decay_rate": 0.5}

# case -> (spec optimizer entry, extra train keys, Keras optimizer factory)
OPTIMIZER_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], Any]] = {
    "sgd": ({"kind": "sgd", "learning_rate": 0.1}, {}, lambda: keras.optimizers.SGD(0.1)),
    "sgd_weight_decay": ({"kind": "sgd", "learning_rate": 0.1, "weight_decay": 0.05}, {},
                         lambda: keras.optimizers.SGD(0.1, weight_decay=0.05)),
    "sgd_momentum": ({"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9}, {},
                     lambda: keras.optimizers.SGD(0.1, momentum=0.9)),
    "sgd_momentum_weight_decay": ({"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.05}, {},
                                  lambda: keras.optimizers.SGD(0.1, momentum=0.9, weight_decay=0.05)),
    "sgd_nesterov": ({"kind": "sgd", "learning_rate": 0.1, "momentum": 0.8, "nesterov": True}, {},
                     lambda: keras.optimizers.SGD(0.1, momentum=0.8, nesterov=True)),
    "sgd_nesterov_weight_decay": ({"kind": "sgd", "learning_rate": 0.1, "momentum": 0.8, "nesterov": True,
                                   "weight_decay": 0.05}, {},
                                  lambda: keras.optimizers.SGD(0.1, momentum=0.8, nesterov=True, weight_decay=0.05)),
    "adam": ({"kind": "adam", "learning_rate": 0.01}, {}, lambda: keras.optimizers.Adam(0.01, epsilon=1e-7)),
    "adam_betas": ({"kind": "adam", "learning_rate": 0.01, "beta_1": 0.5, "beta_2": 0.9, "epsilon": 1e-4}, {},
                   lambda: keras.optimizers.Adam(0.01, beta_1=0.5, beta_2=0.9, epsilon=1e-4)),
    "adam_weight_decay": ({"kind": "adam", "learning_rate": 0.01, "weight_decay": 0.5}, {},
                          lambda: keras.optimizers.Adam(0.01, epsilon=1e-7, weight_decay=0.5)),
    "adamw_default_decay": ({"kind": "adamw", "learning_rate": 0.01}, {},
                            lambda: keras.optimizers.AdamW(0.01, epsilon=1e-7)),
    "adamw_weight_decay": ({"kind": "adamw", "learning_rate": 0.01, "weight_decay": 0.5}, {},
                           lambda: keras.optimizers.AdamW(0.01, weight_decay=0.5, epsilon=1e-7)),
    "rmsprop": ({"kind": "rmsprop", "learning_rate": 0.01}, {}, lambda: keras.optimizers.RMSprop(0.01, epsilon=1e-7)),
    "rmsprop_weight_decay": ({"kind": "rmsprop", "learning_rate": 0.01, "weight_decay": 0.5}, {},
                             lambda: keras.optimizers.RMSprop(0.01, epsilon=1e-7, weight_decay=0.5)),
    "rmsprop_momentum": ({"kind": "rmsprop", "learning_rate": 0.01, "momentum": 0.9, "rho": 0.8}, {},
                         lambda: keras.optimizers.RMSprop(0.01, rho=0.8, momentum=0.9, epsilon=1e-7)),
    "rmsprop_centered": ({"kind": "rmsprop", "learning_rate": 0.01, "centered": True}, {},
                         lambda: keras.optimizers.RMSprop(0.01, centered=True, epsilon=1e-7)),
    "rmsprop_centered_momentum": ({"kind": "rmsprop", "learning_rate": 0.01, "centered": True, "momentum": 0.9}, {},
                                  lambda: keras.optimizers.RMSprop(0.01, centered=True, momentum=0.9, epsilon=1e-7)),
    "rmsprop_centered_momentum_weight_decay": (
        {"kind": "rmsprop", "learning_rate": 0.01, "centered": True, "momentum": 0.9, "weight_decay": 0.5}, {},
        lambda: keras.optimizers.RMSprop(0.01, centered=True, momentum=0.9, epsilon=1e-7, weight_decay=0.5)),
    "adagrad": ({"kind": "adagrad", "learning_rate": 0.1}, {}, lambda: keras.optimizers.Adagrad(0.1, epsilon=1e-7)),
    "adagrad_weight_decay": ({"kind": "adagrad", "learning_rate": 0.1, "weight_decay": 0.05}, {},
                             lambda: keras.optimizers.Adagrad(0.1, epsilon=1e-7, weight_decay=0.05)),
    "adagrad_initial_accumulator": ({"kind": "adagrad", "learning_rate": 0.1, "initial_accumulator_value": 0.5}, {},
                                    lambda: keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5,
                                                                     epsilon=1e-7)),
    # Schedules and clipping go through the same path in both.
    "adam_exponential_decay_weight_decay": (
        {"kind": "adam", "learning_rate": EXP_SCHEDULE, "weight_decay": 0.5}, {},
        lambda: keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.05, 2, 0.5), epsilon=1e-7,
                                      weight_decay=0.5)),
    "sgd_momentum_train_clip_global_norm": (
        {"kind": "sgd", "learning_rate": 0.5, "momentum": 0.9}, {"clip": {"global_norm": 0.1}},
        lambda: keras.optimizers.SGD(0.5, momentum=0.9, global_clipnorm=0.1)),
    "sgd_optimizer_clip_value": (
        {"kind": "sgd", "learning_rate": 0.5, "clip": {"value": 0.02}}, {},
        lambda: keras.optimizers.SGD(0.5, clipvalue=0.02)),
}


@pytest.mark.parametrize("case", list(OPTIMIZER_CASES))
def test_optimizer_matches_keras_for_three_steps(case: str, tmp_path: Path) -> None:
    entry, train, make_keras = OPTIMIZER_CASES[case]
    built = build(tmp_path, spec_doc(f"opt_{case}", {"all": {"variables": ["*"], **entry}}, train=train))
    model, trainer = built.model, built.trainer
    paths = list(trainer.trainable_paths)
    assert sorted(paths) == sorted(model.variables_by_path())
    copy = weight_copy(model)
    reference = make_keras()
    for step in range(3):
        x, y = data(BATCH, seed=step)
        train_step(trainer, x, y)
        reference.apply_gradients(zip(reference_gradients(copy, paths, x, y), [copy[p] for p in paths], strict=True))
        for path, var in model.variables_by_path().items():
            np.testing.assert_allclose(var.numpy(), copy[path].numpy(), rtol=0, atol=OPTIMIZER_TOLERANCE,
                                       err_msg=f"{case}: {path} after update {step + 1}")
    assert int(trainer.global_step.numpy()) == 3
    assert int(trainer.state_by_path()["optimizers/all/iterations"].numpy()) == 3


# ---------------------------------------------------------------------------------------------
# 2. Two optimizers under one global step
# ---------------------------------------------------------------------------------------------


def test_two_optimizers_one_step_against_float64(tmp_path: Path) -> None:
    optimizers = {
        "body": {"variables": ["body/*"], "kind": "sgd", "learning_rate": 0.1},
        "head": {"variables": ["out/*"], "kind": "adam", "learning_rate": 1e-3},
    }
    built = build(tmp_path, spec_doc("two_optimizers", optimizers))
    model, trainer = built.model, built.trainer
    state = trainer.state_by_path()
    assert int(state["global_step"].numpy()) == 0
    before = values(model.variables_by_path())
    copy = weight_copy(model)
    x, y = data(BATCH, seed=11)
    paths = ["body/kernel", "body/bias", "out/kernel", "out/bias"]
    gradients = dict(zip(paths, (g.numpy().astype(np.float64)
                                 for g in reference_gradients(copy, paths, x, y)), strict=True))

    train_step(trainer, x, y)

    expected = {p: before[p].astype(np.float64) - 0.1 * gradients[p] for p in ("body/kernel", "body/bias")}
    beta_1, beta_2, epsilon, lr = 0.9, 0.999, 1e-7, 1e-3
    for p in ("out/kernel", "out/bias"):
        m = (1 - beta_1) * gradients[p]
        v = (1 - beta_2) * gradients[p] ** 2
        alpha = lr * math.sqrt(1 - beta_2) / (1 - beta_1)
        expected[p] = before[p].astype(np.float64) - alpha * m / (np.sqrt(v) + epsilon)
    for path, var in model.variables_by_path().items():
        np.testing.assert_allclose(var.numpy(), expected[path], rtol=0, atol=1e-6, err_msg=path)
        assert not np.array_equal(var.numpy(), before[path]), f"{path} did not move"
    assert int(state["global_step"].numpy()) == 1
    assert int(state["optimizers/body/iterations"].numpy()) == 1
    assert int(state["optimizers/head/iterations"].numpy()) == 1
    assert {k for k in state if k.startswith("optimizers/head/m/")} == {"optimizers/head/m/out/kernel",
                                                                        "optimizers/head/m/out/bias"}
    assert {k for k in state if k.startswith("optimizers/body/")} == {"optimizers/body/learning_rate",
                                                                       "optimizers/body/iterations"}


def test_two_optimizers_with_own_clipping_match_two_keras_optimizers(tmp_path: Path) -> None:
    """Each optimizer clips its own gradients, as a separate Keras optimizer would; three steps."""
    optimizers = {
        "body": {"variables": ["body/*"], "kind": "sgd", "learning_rate": 0.5, "momentum": 0.9,
                 "clip": {"global_norm": 0.05}},
        "head": {"variables": ["out/*"], "kind": "adamw", "learning_rate": 0.02, "weight_decay": 0.2,
                 "clip": {"value": 0.01}},
    }
    built = build(tmp_path, spec_doc("two_clipped", optimizers))
    model, trainer = built.model, built.trainer
    copy = weight_copy(model)
    groups = {"body": (["body/kernel", "body/bias"], keras.optimizers.SGD(0.5, momentum=0.9, global_clipnorm=0.05)),
              "head": (["out/kernel", "out/bias"], keras.optimizers.AdamW(0.02, weight_decay=0.2, epsilon=1e-7,
                                                                          clipvalue=0.01))}
    for step in range(3):
        x, y = data(BATCH, seed=20 + step)
        everything = [p for paths, _ in groups.values() for p in paths]
        gradients = dict(zip(everything, reference_gradients(copy, everything, x, y), strict=True))
        train_step(trainer, x, y)
        for paths, reference in groups.values():
            reference.apply_gradients([(gradients[p], copy[p]) for p in paths])
        for path, var in model.variables_by_path().items():
            np.testing.assert_allclose(var.numpy(), copy[path].numpy(), rtol=0, atol=OPTIMIZER_TOLERANCE,
                                       err_msg=f"{path} after update {step + 1}")
    assert int(trainer.global_step.numpy()) == 3


# ---------------------------------------------------------------------------------------------
# 3. Learning-rate schedules of the global step
# ---------------------------------------------------------------------------------------------

SCHEDULE_STEPS = 10
WARMUP = 3
SCHEDULES: dict[str, dict[str, Any]] = {
    "constant": {"schedule": "constant", "initial": 0.07},
    "exponential_decay": {"schedule": "exponential_decay", "initial": 0.1, "decay_steps": 3, "decay_rate": 0.5},
    "exponential_decay_staircase": {"schedule": "exponential_decay", "initial": 0.1, "decay_steps": 3,
                                    "decay_rate": 0.5, "staircase": True},
    "cosine_decay_alpha": {"schedule": "cosine_decay", "initial": 0.1, "decay_steps": 5, "alpha": 0.2},
    "piecewise_constant": {"schedule": "piecewise_constant", "boundaries": [2, 5], "values": [0.1, 0.05, 0.01]},
}


def _exponential_decay(schedule: dict[str, Any], t: int) -> float:
    progress = t / schedule["decay_steps"]
    if schedule.get("staircase"):
        progress = math.floor(progress)
    return float(schedule["initial"] * schedule["decay_rate"] ** progress)


def _cosine_decay(schedule: dict[str, Any], t: int) -> float:
    progress = min(t, schedule["decay_steps"]) / schedule["decay_steps"]
    alpha = schedule.get("alpha", 0.0)
    return float(schedule["initial"] * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * progress)) + alpha))


@dataclass(frozen=True)
class ScheduleReference:
    """A schedule kind's two references: its rate at step t in float64 (without warm-up), and Keras' schedule."""

    closed_form: Any  # (the SCHEDULES case, step) -> float
    keras: Any  # (the SCHEDULES case) -> a function of the step, Keras' own class where Keras has the schedule


# schedule kind -> its references. Each kind of SCHEDULES has its entry here: no kind falls back to another's
# formula or to a constant "Keras" rate, which would pass a wrong schedule (docs/extending.md, Schedules, step 2).
SCHEDULE_REFERENCES: dict[str, ScheduleReference] = {
    "constant": ScheduleReference(lambda s, t: s["initial"], lambda s: (lambda step: s["initial"])),
    "exponential_decay": ScheduleReference(_exponential_decay, lambda s: keras.optimizers.schedules.ExponentialDecay(
        s["initial"], s["decay_steps"], s["decay_rate"], staircase=s.get("staircase", False))),
    "cosine_decay": ScheduleReference(_cosine_decay, lambda s: keras.optimizers.schedules.CosineDecay(
        s["initial"], s["decay_steps"], alpha=s.get("alpha", 0.0))),
    "piecewise_constant": ScheduleReference(
        lambda s, t: s["values"][sum(t > b for b in s["boundaries"])],
        lambda s: keras.optimizers.schedules.PiecewiseConstantDecay(s["boundaries"], s["values"])),
}


def schedule_reference(kind: str) -> ScheduleReference:
    """The references of `kind`; a kind without them fails here, saying what to add where."""
    if kind not in SCHEDULE_REFERENCES:
        pytest.fail(f"schedule '{kind}': no entry in SCHEDULE_REFERENCES of tests/test_training_numerics.py; add "
                    "ScheduleReference(<its rate at step t in float64>, <its Keras schedule, e.g. "
                    "keras.optimizers.schedules.InverseTimeDecay(...)>) (docs/extending.md, Schedules, step 2)")
    return SCHEDULE_REFERENCES[kind]


def closed_form(schedule: dict[str, Any], t: int) -> float:
    """The schedule's rate at step t, in float64, with the warm-up rule in front."""
    warmup = schedule.get("warmup_steps", 0)
    if t < warmup:
        return closed_form({**schedule, "warmup_steps": 0}, 0) * t / warmup
    return float(schedule_reference(schedule["schedule"]).closed_form(schedule, t - warmup))


def keras_schedule(schedule: dict[str, Any]) -> Any:
    return schedule_reference(schedule["schedule"]).keras(schedule)


def keras_rate(schedule: dict[str, Any], t: int) -> float:
    """Keras' schedule at step t, with the warm-up rule in front."""
    rate = keras_schedule(schedule)
    warmup = schedule.get("warmup_steps", 0)
    if t < warmup:
        return float(rate(0)) * t / warmup
    return float(rate(t - warmup))


@pytest.mark.parametrize("warmup", [0, WARMUP], ids=["plain", "warmup"])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_rate_per_update(name: str, warmup: int, tmp_path: Path) -> None:
    schedule = {**SCHEDULES[name], **({"warmup_steps": warmup} if warmup else {})}
    built = build(tmp_path, spec_doc(f"schedule_{name}", one_optimizer("sgd", schedule)))
    model, trainer = built.model, built.trainer
    rate_var = trainer.state_by_path()["optimizers/all/learning_rate"]
    copy = weight_copy(model)
    paths = list(trainer.trainable_paths)
    rates = []
    for t in range(SCHEDULE_STEPS):
        x, y = data(BATCH, seed=100 + t)
        gradients = [g.numpy() for g in reference_gradients(copy, paths, x, y)]
        before = values(model.variables_by_path())
        train_step(trainer, x, y)
        rate = float(rate_var.numpy())
        rates.append(rate)
        expected = closed_form(schedule, t)
        np.testing.assert_allclose(rate, expected, rtol=1e-6, atol=1e-12, err_msg=f"{name}: rate at step {t}")
        np.testing.assert_allclose(rate, keras_rate(schedule, t), rtol=1e-6, atol=1e-12,
                                   err_msg=f"{name}: Keras rate at step {t}")
        # Plain SGD: the rate in the variable is the one the update used.
        for path, gradient in zip(paths, gradients, strict=True):
            after = model.variables_by_path()[path].numpy()
            if expected == 0:
                np.testing.assert_array_equal(after, before[path], err_msg=f"{path} moved with a zero rate")
            else:
                np.testing.assert_allclose(after, before[path] - expected * gradient, rtol=0, atol=1e-6,
                                           err_msg=f"{name}: {path} at step {t}")
            copy[path].assign(after)
    assert int(trainer.global_step.numpy()) == SCHEDULE_STEPS
    if warmup:
        assert rates[0] == 0.0


# ---------------------------------------------------------------------------------------------
# 4. Frozen variables
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("frozen", [["backbone"], ["body/*"], ["body/kernel", "body/bias"]],
                         ids=["collection", "pattern", "paths"])
def test_frozen_variables_are_bitwise_unchanged(frozen: list[str], tmp_path: Path) -> None:
    optimizers = {"head": {"variables": ["out/*"], "kind": "adam", "learning_rate": 0.05, "weight_decay": 0.1}}
    doc = spec_doc("frozen", optimizers, train={"clip": {"global_norm": 1.0}, "ema": {"decay": 0.9}},
                   collections={"backbone": ["body/*"]}, frozen=frozen)
    built = build(tmp_path, doc)
    model, trainer = built.model, built.trainer
    assert list(trainer.trainable_paths) == ["out/kernel", "out/bias"]
    assert not any("body/" in key for key in trainer.state_by_path())
    before = values(model.variables_by_path())
    for step in range(4):
        train_step(trainer, *data(BATCH, seed=200 + step))
    after = values(model.variables_by_path())
    for path in ("body/kernel", "body/bias"):
        np.testing.assert_array_equal(after[path], before[path], err_msg=f"frozen {path} changed")
    for path in ("out/kernel", "out/bias"):
        assert np.abs(after[path] - before[path]).max() > 1e-3, f"trainable {path} did not move"


@pytest.mark.parametrize(("kind", "params"), [
    ("sgd", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    ("adam", {"weight_decay": 0.1}),
    ("rmsprop", {"centered": True, "momentum": 0.5}),
    ("adagrad", {"weight_decay": 0.1}),
])
def test_zero_learning_rate_holds_weights_bitwise(kind: str, params: dict[str, Any], tmp_path: Path) -> None:
    """A learning rate of 0 holds a group still (slots may move, weights may not)."""
    built = build(tmp_path, spec_doc(f"zero_{kind}", one_optimizer(kind, 0, **params)))
    before = values(built.model.variables_by_path())
    for step in range(3):
        train_step(built.trainer, *data(BATCH, seed=250 + step))
    np.testing.assert_equal(values(built.model.variables_by_path()), before)
    assert int(built.trainer.global_step.numpy()) == 3


# ---------------------------------------------------------------------------------------------
# 5. Gradient accumulation
# ---------------------------------------------------------------------------------------------


def test_accumulate_four_micro_batches_equals_one_big_batch(tmp_path: Path) -> None:
    optimizers = one_optimizer("sgd", 0.2, momentum=0.9, weight_decay=0.05)
    micro = build(tmp_path, {**spec_doc("accumulate", optimizers), "train": {"batch_size": 16, "accumulate": 4}},
                  "micro")
    whole = build(tmp_path, {**spec_doc("accumulate", optimizers), "train": {"batch_size": 64}}, "whole")
    np.testing.assert_equal(values(micro.model.variables_by_path()), values(whole.model.variables_by_path()))
    trainer = micro.trainer
    state = trainer.state_by_path()
    for update in range(2):
        x, y = data(64, seed=300 + update)
        start = values(micro.model.variables_by_path())
        for i in range(4):
            trainer.accumulate_step({"x": tf.constant(x[16 * i:16 * (i + 1)])},
                                    {"label": tf.constant(y[16 * i:16 * (i + 1)])}, step_seed(update * 4 + i))
            assert int(state["accumulators/micro_batches"].numpy()) == i + 1
            assert int(state["global_step"].numpy()) == update
            if i == 1:
                np.testing.assert_equal(values(micro.model.variables_by_path()), start)
        trainer.apply_accumulated()
        assert int(state["accumulators/micro_batches"].numpy()) == 0
        assert int(state["global_step"].numpy()) == update + 1
        assert int(state["optimizers/all/iterations"].numpy()) == update + 1
        for path in trainer.trainable_paths:
            assert not np.any(state[f"accumulators/{path}"].numpy()), f"accumulator {path} not cleared"
        train_step(whole.trainer, x, y)
        for path, var in whole.model.variables_by_path().items():
            np.testing.assert_allclose(micro.model.variables_by_path()[path].numpy(), var.numpy(), rtol=0, atol=1e-5,
                                       err_msg=f"{path} after update {update + 1}")


# ---------------------------------------------------------------------------------------------
# 6. EMA shadows
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("decay", [0.25, 0.99])
def test_ema_shadows_follow_num_updates_rule(decay: float, tmp_path: Path) -> None:
    built = build(tmp_path, spec_doc("ema", one_optimizer("adam", 0.05), train={"ema": {"decay": decay}}))
    model, trainer = built.model, built.trainer
    state = trainer.state_by_path()
    shadows = {p: v.astype(np.float64) for p, v in values(model.variables_by_path()).items()}
    for path in shadows:
        np.testing.assert_array_equal(state[f"ema/{path}"].numpy(), shadows[path].astype(np.float32))
    for t in range(1, 6):
        train_step(trainer, *data(BATCH, seed=400 + t))
        d = min(decay, (1 + t) / (10 + t))
        for path, weight in values(model.variables_by_path()).items():
            shadows[path] = d * shadows[path] + (1 - d) * weight.astype(np.float64)
            np.testing.assert_allclose(state[f"ema/{path}"].numpy(), shadows[path], rtol=0, atol=1e-6,
                                       err_msg=f"ema/{path} after update {t}")
        assert any(not np.array_equal(state[f"ema/{p}"].numpy(), w) for p, w in values(model.variables_by_path()).items())


# ---------------------------------------------------------------------------------------------
# 7. Batch norm statistics
# ---------------------------------------------------------------------------------------------

BN_LAYERS = [
    {"name": "fc", "op": "dense", "input": "x", "units": 4},
    {"name": "bn", "op": "batch_norm", "momentum": 0.9, "epsilon": 0.001},
    {"name": "out", "op": "dense", "units": CLASSES},
]


def test_batch_norm_statistics_update_in_training_only(tmp_path: Path) -> None:
    doc = spec_doc("bn", one_optimizer("sgd", 0.1), layers=BN_LAYERS, train={"metrics": ["accuracy"]})
    built = build(tmp_path, doc)
    model, trainer = built.model, built.trainer
    variables = model.variables_by_path()
    assert "bn/moving_mean" not in trainer.trainable_paths
    assert "bn/moving_variance" not in trainer.trainable_paths
    initial = values(variables)
    x, y = data(BATCH, seed=500)
    fc = x.astype(np.float64) @ initial["fc/kernel"].astype(np.float64) + initial["fc/bias"].astype(np.float64)

    train_step(trainer, x, y)

    np.testing.assert_allclose(variables["bn/moving_mean"].numpy(), 0.9 * 0.0 + 0.1 * fc.mean(axis=0),
                               rtol=0, atol=1e-6)
    np.testing.assert_allclose(variables["bn/moving_variance"].numpy(), 0.9 * 1.0 + 0.1 * fc.var(axis=0),
                               rtol=0, atol=1e-6)
    assert not np.array_equal(variables["bn/moving_mean"].numpy(), initial["bn/moving_mean"])
    assert not np.array_equal(variables["bn/moving_variance"].numpy(), initial["bn/moving_variance"])

    trained = values(variables)
    x_eval, y_eval = data(20, seed=501)
    trainer.eval_step({"x": tf.constant(x_eval)}, {"label": tf.constant(y_eval)})
    model({"x": tf.constant(x_eval)}, training=False)
    np.testing.assert_equal(values(variables), trained)

    train_step(trainer, *data(BATCH, seed=502))
    assert not np.array_equal(variables["bn/moving_mean"].numpy(), trained["bn/moving_mean"])


# ---------------------------------------------------------------------------------------------
# 8. Dropout
# ---------------------------------------------------------------------------------------------


def test_dropout_only_in_training_and_replayable_by_seed(tmp_path: Path) -> None:
    fc = {"name": "fc", "op": "dense", "input": "x", "units": 5}
    with_dropout = build(tmp_path, spec_doc("drop", layers=[fc, {"name": "drop", "op": "dropout", "rate": 0.5}],
                                            outputs={"y": "drop"}), "drop")
    without = build(tmp_path, spec_doc("nodrop", layers=[fc], outputs={"y": "fc"}), "nodrop")
    for path, var in without.model.variables_by_path().items():
        var.assign(with_dropout.model.variables_by_path()[path])
    model = with_dropout.model
    x = tf.constant(data(64, seed=600)[0])

    inference = model({"x": x}, training=False)["y"].numpy()
    np.testing.assert_array_equal(model({"x": x}, training=False)["y"].numpy(), inference)
    np.testing.assert_array_equal(model({"x": x}, training=False, seed=step_seed(5, 5))["y"].numpy(), inference)
    np.testing.assert_array_equal(without.model({"x": x})["y"].numpy(), inference)

    first = model({"x": x}, training=True, seed=step_seed(1, 2))["y"].numpy()
    again = model({"x": x}, training=True, seed=step_seed(1, 2))["y"].numpy()
    other = model({"x": x}, training=True, seed=step_seed(2, 2))["y"].numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    for output in (first, other):
        dropped = output == 0
        assert 0.3 < dropped.mean() < 0.7, f"dropped fraction {dropped.mean():.2f} for rate 0.5"
        np.testing.assert_allclose(output[~dropped], inference[~dropped] * 2.0, rtol=1e-6, atol=0)


# ---------------------------------------------------------------------------------------------
# 9. Metrics, reset between stages
# ---------------------------------------------------------------------------------------------


def metric_results(trainer: Any) -> dict[str, float]:
    return {m.name: float(m.result().numpy()) for m in trainer.metrics}


def reset_metrics(trainer: Any) -> None:
    for metric in trainer.metrics:
        metric.reset()


def eval_in_batches(trainer: Any, x: np.ndarray, y: np.ndarray, sizes: list[int]) -> None:
    assert sum(sizes) == len(x)
    start = 0
    for size in sizes:
        trainer.eval_step({"x": tf.constant(x[start:start + size])}, {"label": tf.constant(y[start:start + size])})
        start += size


def test_sparse_metrics_reset_between_stages(tmp_path: Path) -> None:
    doc = spec_doc("metrics", one_optimizer("adam", 0.05), train={"metrics": ["accuracy", "mean_loss"]})
    built = build(tmp_path, doc)
    model, trainer = built.model, built.trainer
    losses = [train_step(trainer, *data(BATCH, seed=700 + i)) for i in range(3)]
    accuracy = {m.name: m for m in trainer.metrics}["accuracy"]
    assert float(accuracy.state[1].numpy()) == 3 * BATCH
    np.testing.assert_allclose(metric_results(trainer)["mean_loss"], np.mean(losses), rtol=1e-6)

    reset_metrics(trainer)
    assert all(not np.any(v.numpy()) for m in trainer.metrics for v in m.state)
    x, y = data(45, seed=710)
    eval_in_batches(trainer, x, y, [16, 16, 13])

    logits = model({"x": tf.constant(x)}, training=False)["logits"].numpy().astype(np.float64)
    hits = int(np.sum(np.argmax(logits, axis=-1) == y))
    assert float(accuracy.state[0].numpy()) == hits
    assert float(accuracy.state[1].numpy()) == len(y)
    results = metric_results(trainer)
    np.testing.assert_allclose(results["accuracy"], hits / len(y), rtol=1e-7)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    cross_entropy = -log_softmax[np.arange(len(y)), y].mean()
    np.testing.assert_allclose(results["mean_loss"], cross_entropy, rtol=0, atol=1e-5)


def exact_roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by sorting scores (ties share one ROC point), trapezoid rule."""
    order = np.argsort(-scores, kind="stable")
    sorted_scores, sorted_labels = scores[order], labels[order]
    last_of_tie = np.r_[np.nonzero(np.diff(sorted_scores))[0], len(scores) - 1]
    tps = np.cumsum(sorted_labels)[last_of_tie]
    fps = np.cumsum(1 - sorted_labels)[last_of_tie]
    tpr = np.r_[0.0, tps / labels.sum()]
    fpr = np.r_[0.0, fps / (len(labels) - labels.sum())]
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))


def test_binary_metrics_against_numpy(tmp_path: Path) -> None:
    layers = [{"name": "body", "op": "dense", "input": "x", "units": 5, "activation": "tanh"},
              {"name": "out", "op": "dense", "units": 1}]
    loss = {"kind": "sigmoid_cross_entropy", "logits": "logits", "labels": "label"}
    doc = spec_doc("binary", one_optimizer("adam", 0.05), layers=layers, loss=loss,
                   train={"metrics": ["accuracy", "precision", "recall", "auc", "mean_loss"]})
    built = build(tmp_path, doc)
    model, trainer = built.model, built.trainer
    for i in range(3):
        x, _ = data(BATCH, seed=800 + i)
        train_step(trainer, x, (x[:, 0] > 0).astype(np.float32))
    reset_metrics(trainer)

    x, _ = data(300, seed=810)
    logits = model({"x": tf.constant(x)}, training=False)["logits"].numpy()[:, 0].astype(np.float64)
    rng = np.random.default_rng(811)
    y = (logits + rng.normal(scale=logits.std(), size=len(logits)) > 0).astype(np.float32)  # correlated labels
    eval_in_batches(trainer, x, y, [128, 128, 44])

    predicted, actual = logits > 0, y == 1
    tp, fp, fn = np.sum(predicted & actual), np.sum(predicted & ~actual), np.sum(~predicted & actual)
    metrics = {m.name: m for m in trainer.metrics}
    assert [float(v.numpy()) for v in metrics["precision"].state] == [tp, fp]
    assert [float(v.numpy()) for v in metrics["recall"].state] == [tp, fn]
    results = metric_results(trainer)
    np.testing.assert_allclose(results["precision"], tp / (tp + fp), rtol=1e-7)
    np.testing.assert_allclose(results["recall"], tp / (tp + fn), rtol=1e-7)
    np.testing.assert_allclose(results["accuracy"], np.mean(predicted == actual), rtol=1e-7)
    exact = exact_roc_auc(1 / (1 + np.exp(-logits)), y.astype(np.float64))
    assert 0.6 < exact < 0.99, f"labels should correlate with the scores; exact AUC {exact:.3f}"
    assert abs(results["auc"] - exact) <= 1e-2, f"auc {results['auc']:.4f} vs exact {exact:.4f}"
    keras_auc = keras.metrics.AUC(num_thresholds=200)  # same thresholds and trapezoid rule
    keras_auc.update_state(y, tf.sigmoid(tf.constant(logits, tf.float32)))
    np.testing.assert_allclose(results["auc"], float(keras_auc.result()), rtol=0, atol=1e-4)
    cross_entropy = np.mean(np.maximum(logits, 0) - logits * y + np.log1p(np.exp(-np.abs(logits))))
    np.testing.assert_allclose(results["mean_loss"], cross_entropy, rtol=0, atol=1e-5)
