"""Loss terms and weight decay `exclude` against independent references (issue 12, part 1).

The generated multi-term step (cross-entropy + huber on a target read from another output +
an l2 regularizer) against a training step written by hand in TensorFlow with Keras' own loss
classes and `tf.nn.l2_loss`, the target fed as a numpy constant (so a gradient through it would
show); weight decay `exclude` against Keras' AdamW with `exclude_from_weight_decay`. Tiny specs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.lib.generated import load_generated
from specgen.runtime.lib.interface import TermReporter
from specgen.spec.load import load_spec_text

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

TOLERANCE = 1e-6  # absolute, float32 weights after each update
BATCH = 8
LAYERS = [
    {"name": "body", "op": "dense", "input": "x", "units": 5, "activation": "tanh"},
    {"name": "out", "op": "dense", "units": 3},
    {"name": "qhead", "op": "dense", "input": "body", "units": 2},
    {"name": "target", "op": "dense", "input": "body", "units": 2},
]
DELTA, HUBER_WEIGHT, L2_WEIGHT, RATE = 0.5, 0.5, 0.01, 0.1
MULTI_LOSS = [
    {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"},
    {"kind": "huber", "predictions": "q", "labels": "target", "delta": DELTA, "weight": HUBER_WEIGHT, "name": "td"},
    {"kind": "l2", "variables": ["body/kernel", "out/kernel"], "weight": L2_WEIGHT},
]


def doc(name: str, loss: Any, optimizer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"specgen": 1, "name": name, "inputs": {"x": {"shape": [6]}},
            "outputs": {"logits": "out", "q": "qhead", "target": "target"}, "layers": LAYERS,
            "frozen": ["target/*"], "loss": loss, "optimizers": {"all": optimizer},
            "train": {"batch_size": BATCH}, **extra}


def build(tmp_path: Path, document: dict[str, Any]) -> tuple[Any, Any, Any]:
    ir = build_ir(load_spec_text(yaml.safe_dump(document, sort_keys=False), f"{document['name']}.yaml"))
    files = render_files(ir)
    for name in ("model.py", "train.py"):
        (tmp_path / name).write_bytes(files[name])
    model = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    trainer = getattr(load_generated(tmp_path / "train.py"), f"{ir.class_name}Training")(model)
    return ir, model, trainer


def batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, 6)).astype(np.float32), rng.integers(0, 3, BATCH).astype(np.int64)


def dense(w: dict[str, Any], layer: str, x: Any) -> Any:
    return tf.matmul(x, w[f"{layer}/kernel"]) + w[f"{layer}/bias"]


def reference_terms(w: dict[str, Any], x: np.ndarray, y: np.ndarray, target: np.ndarray) -> dict[str, Any]:
    """The three terms by hand: Keras' loss classes, tf.nn.l2_loss, the target a constant."""
    body = tf.tanh(dense(w, "body", x))
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, dense(w, "out", body))
    huber = keras.losses.Huber(delta=DELTA)(target, dense(w, "qhead", body))
    l2 = tf.nn.l2_loss(w["body/kernel"]) + tf.nn.l2_loss(w["out/kernel"])
    return {"logits": cross_entropy, "td": huber, "l2": l2}


def test_multi_term_step_equals_hand_written_step(tmp_path: Path) -> None:
    ir, model, trainer = build(tmp_path, doc("multi", MULTI_LOSS, {
        "variables": ["body/*", "out/*", "qhead/*"], "kind": "sgd", "learning_rate": RATE}))
    assert [(t.name, t.kind, t.weight) for t in ir.training.terms] == [
        ("logits", "sparse_softmax_cross_entropy", 1.0), ("td", "huber", HUBER_WEIGHT), ("l2", "l2", L2_WEIGHT)]
    assert ir.training.loss.output == "logits"  # the primary term: the first with data labels
    assert isinstance(trainer, TermReporter)
    weights = {p: tf.Variable(v.numpy()) for p, v in model.variables_by_path().items()}
    trained = list(trainer.trainable_paths)
    for step in range(3):
        x, y = batch(step)
        target = model({"x": tf.constant(x)})["target"].numpy()  # the computed target, as a constant
        with tf.GradientTape() as tape:
            terms = reference_terms(weights, x, y, target)
            total = terms["logits"] + HUBER_WEIGHT * terms["td"] + L2_WEIGHT * terms["l2"]
        gradients = tape.gradient(total, [weights[p] for p in trained])
        for path, gradient in zip(trained, gradients, strict=True):
            weights[path].assign_sub(RATE * gradient)
        loss = trainer.train_step({"x": tf.constant(x)}, {"label": tf.constant(y)}, tf.constant([step, 0], tf.int64))
        assert float(loss) == pytest.approx(float(total), abs=TOLERANCE)
        reported = {k: float(v) for k, v in trainer.loss_terms().items()}
        assert reported == pytest.approx({k: float(v) for k, v in terms.items()}, abs=TOLERANCE)
        for path, var in model.variables_by_path().items():
            np.testing.assert_allclose(var.numpy(), weights[path].numpy(), rtol=0, atol=TOLERANCE,
                                       err_msg=f"{path} after update {step + 1}")
    # The target head is frozen and feeds only labels: it never moved.
    np.testing.assert_array_equal(model.variables_by_path()["target/kernel"].numpy(),
                                  weights["target/kernel"].numpy())
    # Evaluation leaves the reported training values alone.
    before = {k: float(v) for k, v in trainer.loss_terms().items()}
    trainer.eval_step({"x": tf.constant(batch(9)[0])}, {"label": tf.constant(batch(9)[1])})
    assert {k: float(v) for k, v in trainer.loss_terms().items()} == before


@pytest.mark.parametrize("delta", [0.3, 1.0, 2.5])
def test_huber_matches_keras(delta: float) -> None:
    from specgen.runtime.lib import losses

    rng = np.random.default_rng(1)
    labels, predictions = rng.normal(size=(16, 3)) * 2, rng.normal(size=(16, 3)) * 2
    expected = float(keras.losses.Huber(delta=delta)(labels, predictions))
    error = np.abs(predictions - labels)  # float64 closed form as a second reference
    closed = np.mean(np.where(error <= delta, 0.5 * error**2, delta * error - 0.5 * delta**2))
    actual = float(losses.huber(tf.constant(labels, tf.float32), tf.constant(predictions, tf.float32), delta))
    assert actual == pytest.approx(expected, abs=1e-6) and actual == pytest.approx(closed, rel=1e-6)


def test_l2_and_l1_match_references() -> None:
    from specgen.runtime.lib import losses

    rng = np.random.default_rng(2)
    arrays = [rng.normal(size=(4, 3)), rng.normal(size=(3,))]
    weights = [tf.Variable(a.astype(np.float32)) for a in arrays]
    assert float(losses.l2(weights)) == pytest.approx(float(sum(tf.nn.l2_loss(w) for w in weights)), rel=1e-6)
    assert float(losses.l2(weights)) == pytest.approx(sum(np.sum(a**2) for a in arrays) / 2, rel=1e-6)
    assert float(losses.l1(weights)) == pytest.approx(sum(np.sum(np.abs(a)) for a in arrays), rel=1e-6)


def test_single_weighted_huber_term_from_data_labels(tmp_path: Path) -> None:
    """A single mapping with weight 2 and data labels: twice Keras' Huber, and a gradient of twice its own."""
    loss = {"kind": "huber", "predictions": "q", "labels": "value", "delta": 1.5, "weight": 2.0}
    _, model, trainer = build(tmp_path, doc("one", loss, {"variables": ["body/*", "qhead/*"], "kind": "sgd",
                                                           "learning_rate": 0.0}, outputs={"q": "qhead"},
                                             layers=LAYERS[:1] + LAYERS[2:3], frozen=[]))
    x = batch(0)[0]
    value = np.random.default_rng(3).normal(size=(BATCH, 2)).astype(np.float32)
    predictions = model({"x": tf.constant(x)})["q"].numpy()
    loss_value = trainer.train_step({"x": tf.constant(x)}, {"value": tf.constant(value)}, tf.constant([0, 0], tf.int64))
    assert float(loss_value) == pytest.approx(2 * float(keras.losses.Huber(delta=1.5)(value, predictions)), abs=1e-6)
    assert {k: float(v) for k, v in trainer.loss_terms().items()} == pytest.approx(
        {"q": float(keras.losses.Huber(delta=1.5)(value, predictions))}, abs=1e-6)


def test_weight_decay_exclude_matches_keras_adamw(tmp_path: Path) -> None:
    """`exclude: ['*/bias']` decays the kernels only, as Keras' AdamW with exclude_from_weight_decay(['bias'])."""
    loss = {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"}
    optimizer = {"variables": ["*"], "kind": "adamw", "learning_rate": 0.05,
                 "weight_decay": {"rate": 0.2, "exclude": ["*/bias"]}}
    ir, model, trainer = build(tmp_path, doc("decay", loss, optimizer, outputs={"logits": "out"},
                                             layers=LAYERS[:2], frozen=[]))
    assert ir.training.optimizers[0].decay_excluded == ("body/bias", "out/bias")
    paths = list(trainer.trainable_paths)
    copy = {p: tf.Variable(v.numpy(), name=p.replace("/", "_")) for p, v in model.variables_by_path().items()}
    reference = keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.2)
    reference.exclude_from_weight_decay(var_names=["bias"])
    # The same run decaying every weight, to show that the exclusion changes the numbers at these settings.
    everything = {p: tf.Variable(v.numpy()) for p, v in model.variables_by_path().items()}
    decay_all = keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.2)
    for step in range(3):
        x, y = batch(step)
        for weights, optimizer in ((copy, reference), (everything, decay_all)):
            with tf.GradientTape() as tape:
                body = tf.tanh(dense(weights, "body", x))
                value = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, dense(weights, "out", body))
            optimizer.apply_gradients(zip(tape.gradient(value, [weights[p] for p in paths]),
                                          [weights[p] for p in paths], strict=True))
        trainer.train_step({"x": tf.constant(x)}, {"label": tf.constant(y)}, tf.constant([step, 0], tf.int64))
        for path, var in model.variables_by_path().items():
            np.testing.assert_allclose(var.numpy(), copy[path].numpy(), rtol=0, atol=TOLERANCE,
                                       err_msg=f"{path} after update {step + 1}")
    gap = np.max(np.abs(everything["out/bias"].numpy() - model.variables_by_path()["out/bias"].numpy()))
    assert gap > 100 * TOLERANCE


def logged_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """TensorBoard scalars by tag, then step, from the event files in `folder`."""
    scalars: dict[str, dict[int, float]] = {}
    for events in folder.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return scalars


@pytest.mark.parametrize("accumulate", [1, 2], ids=["in-graph chunks", "accumulate 2"])
def test_tensorboard_logs_each_term_beside_the_total(tmp_path: Path, accumulate: int) -> None:
    """`specgen train` writes loss/<term> for every term; the weighted terms add up to the logged total."""
    from specgen.pipeline import build
    from specgen.runtime.commands.train import Options, train
    from specgen.spec.load import load_spec_text

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(64, 6)).astype("float32"), y=rng.integers(0, 3, 64))
    document = doc("logged", [*MULTI_LOSS[:2], {"kind": "l2", "variables": "backbone", "weight": L2_WEIGHT}],
                   {"variables": ["body/*", "out/*", "qhead/*"], "kind": "adam", "learning_rate": 0.01},
                   collections={"backbone": ["body/*"]},
                   data={"train": {"npz": "d.npz", "features": {"x": "x"}, "labels": {"label": "y"}}},
                   checkpoint={"dir": "run", "every_steps": 1000})
    document["train"] = {"batch_size": BATCH, "accumulate": accumulate}
    text = yaml.safe_dump(document, sort_keys=False)
    (tmp_path / "spec.yaml").write_text(text)
    train(build(load_spec_text(text, "spec.yaml", tmp_path / "spec.yaml")), Options(steps=4))
    scalars = logged_scalars(tmp_path / "run" / "tensorboard" / "train")
    assert {"loss", "loss/logits", "loss/td", "loss/l2_backbone"} <= set(scalars)
    for step, total in scalars["loss"].items():
        weighted = (scalars["loss/logits"][step] + HUBER_WEIGHT * scalars["loss/td"][step]
                    + L2_WEIGHT * scalars["loss/l2_backbone"][step])
        assert total == pytest.approx(weighted, abs=1e-6), step
