"""`top_k_accuracy` against Keras' SparseTopKCategoricalAccuracy / TopKCategoricalAccuracy, in the generated trainer,
and validate's refusals of it.

Both sides call `tf.math.in_top_k`: a class tied with the k-th largest logit counts as in the top k (so
ties can only raise the value), and both sum 0/1 hits and counts in float32, which is exact below 2**24
examples: the results are compared with `==`, ties included (the logits below are small integers, so
most rows have ties at the k-th place).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from test_training_numerics import BATCH, CLASSES, build, data, one_optimizer, reset_metrics, spec_doc

from specgen.cli import main
from specgen.runtime.lib import metrics

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

BATCHES = (7, 16, 5)  # uneven sizes: the running mean must weight each batch by its examples


def _batches(seed: int, classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(integer labels, logits) per batch; logits are integers in [-2, 2], so ties at the k-th place are common."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, classes, n), rng.integers(-2, 3, (n, classes)).astype(np.float32)) for n in BATCHES]


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("target", ["sparse", "onehot"])
def test_top_k_accuracy_matches_keras_over_batches(target: str, k: int) -> None:
    classes = 6
    ours = metrics.make("top_k_accuracy", target, k=k)
    keras_metric = (keras.metrics.SparseTopKCategoricalAccuracy(k=k) if target == "sparse"
                    else keras.metrics.TopKCategoricalAccuracy(k=k))
    hits = count = 0
    for labels, logits in _batches(seed=10 * k + len(target), classes=classes):
        given = labels if target == "sparse" else np.eye(classes, dtype=np.float32)[labels]
        ours.update(tf.constant(0.0), tf.constant(given), tf.constant(logits))
        keras_metric.update_state(given, logits)
        # in_top_k by hand: the label's logit is at least the k-th largest (ties at the k-th place count)
        kth = np.sort(logits, axis=-1)[:, -k]
        hits, count = hits + int(np.sum(logits[np.arange(len(labels)), labels] >= kth)), count + len(labels)
        assert float(ours.result()) == float(keras_metric.result()), f"after {count} examples"
    assert float(ours.result()) == np.float32(hits) / np.float32(count)
    assert (float(ours.state[0].numpy()), float(ours.state[1].numpy())) == (hits, sum(BATCHES))
    assert 0 < hits < count  # neither all nor none: the comparison can fail


def test_ties_at_the_kth_place_all_count() -> None:
    logits = tf.constant([[3.0, 1.0, 1.0, 0.0], [0.0, 2.0, 2.0, 2.0], [5.0, 4.0, 3.0, 2.0]])
    labels = tf.constant([2, 3, 2])
    ours = metrics.make("top_k_accuracy", "sparse", k=2)
    ours.update(tf.constant(0.0), labels, logits)
    keras_metric = keras.metrics.SparseTopKCategoricalAccuracy(k=2)
    keras_metric.update_state(labels, logits)
    # row 0: class 2 ties class 1 at the 2nd place; row 1: three classes tie at the top; row 2: 3rd place
    assert float(ours.result()) == float(keras_metric.result()) == np.float32(2 / 3)


def test_the_generated_trainer_makes_it_with_its_k(tmp_path: Path) -> None:
    metrics_listed = [{"kind": "top_k_accuracy", "k": 2}, "accuracy"]
    built = build(tmp_path, spec_doc("top_k", one_optimizer("sgd", 0.1), train={"metrics": metrics_listed}))
    train_py = (tmp_path / "code" / "train.py").read_text()
    line = ('self.metrics = [metrics.make("top_k_accuracy", "sparse", k=2), '
            'metrics.make("accuracy", "sparse")]')
    assert line in train_py
    trainer = built.trainer
    reset_metrics(trainer)
    keras_metric = keras.metrics.SparseTopKCategoricalAccuracy(k=2)
    for i in range(3):
        x, y = data(BATCH, seed=900 + i)
        trainer.eval_step({"x": tf.constant(x)}, {"label": tf.constant(y)})
        keras_metric.update_state(y, built.model({"x": tf.constant(x)}, training=False)["logits"])
    top_k = {m.name: m for m in trainer.metrics}["top_k_accuracy"]
    assert [v.name for v in top_k.state] == ["metrics/top_k_accuracy/total:0", "metrics/top_k_accuracy/count:0"]
    assert float(top_k.result()) == float(keras_metric.result())
    assert float(top_k.state[1].numpy()) == 3 * BATCH and CLASSES == 3


def test_a_plain_name_is_k_5(tmp_path: Path) -> None:
    build(tmp_path, spec_doc("top_k", one_optimizer("sgd", 0.1), train={"metrics": ["top_k_accuracy"]}))
    assert 'metrics.make("top_k_accuracy", "sparse", k=5)' in (tmp_path / "code" / "train.py").read_text()


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], **changes: object) -> list[str]:
    doc = spec_doc("top_k", one_optimizer("sgd", 0.1), **changes)  # type: ignore[arg-type]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    return [line.removeprefix(f"{path}:") for line in err.splitlines()]


BINARY = {"kind": "sigmoid_cross_entropy", "logits": "logits", "labels": "label"}
REGRESSION = {"kind": "mean_squared_error", "predictions": "logits", "labels": "label"}


@pytest.mark.parametrize(("loss", "kind"), [(BINARY, "sigmoid_cross_entropy"), (REGRESSION, "mean_squared_error")])
def test_validate_refuses_a_loss_without_classes(loss: dict[str, str], kind: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    lines = _validate(tmp_path, capsys, loss=loss, train={"metrics": [{"kind": "top_k_accuracy", "k": 2}]})
    assert lines == [
        f"31:5: error: metric 'top_k_accuracy' ranks classes and needs a loss over softmax classes (integer or "
        f"one-hot labels); the loss is '{kind}'", "1 error found"]


def test_validate_refuses_it_listed_again_with_another_k(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listed = ["top_k_accuracy", {"kind": "top_k_accuracy", "k": 5}, {"kind": "top_k_accuracy", "k": 3}]
    lines = _validate(tmp_path, capsys, train={"metrics": listed})
    assert lines == ["34:5: error: metric 'top_k_accuracy' is listed again with other keys (k 3; before: k 5); "
                     "list it once", "1 error found"]


def test_validate_refuses_k_below_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _validate(tmp_path, capsys, train={"metrics": [{"kind": "top_k_accuracy", "k": 0}]})
    assert lines == ["32:8: error: k: received 0, expected a value > 0", "1 error found"]
