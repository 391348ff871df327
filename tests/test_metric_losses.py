"""Each metric runs beside the losses validate lets it read, and is refused beside the others.

The class of bug this guards: validate accepted `accuracy` beside a `huber` loss, and the runtime then
counted "prediction > 0" as a hit on regression values, so the logged accuracy was the share of positive
labels whatever the model learnt (0.39 where Keras' BinaryAccuracy read 0.98). Here every (metric, loss
kind) pair validate accepts must be one the metric's runtime class reads (its update runs on a batch of
that loss's labels and gives a value in [0, 1] or a mean loss), and every pair it refuses is refused with
one line at the metric's position.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.kinds.metrics import REGISTRY as METRICS

DATA_LOSSES = sorted(kind for kind, loss in LOSSES.items() if not loss.regularizer)
READING = {"regression": "predictions"}  # the key naming the model output: `logits` for every other label form
METRIC_LINE = 13  # the line of `metrics: [...]` in _spec's text


def _spec(loss: str, metric: str) -> str:
    target = LOSSES[loss].target
    assert target is not None
    return f"""specgen: 1
name: metric_{metric}
inputs:
  x: {{shape: [4]}}
outputs: {{out: out}}
layers:
  - {{name: out, op: dense, input: x, units: 3}}
loss: {{kind: {loss}, {READING.get(target, "logits")}: out, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: sgd, learning_rate: 0.1}}
train:
  batch_size: 4
  metrics: [{metric}]
"""


def _pairs() -> list[tuple[str, str]]:
    return [(loss, metric) for loss in DATA_LOSSES for metric in sorted(METRICS)]


@pytest.mark.parametrize(("loss", "metric"), _pairs())
def test_validate_accepts_exactly_the_metric_s_refusal(loss: str, metric: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(_spec(loss, metric))
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    why = METRICS[metric].refuse(loss, LOSSES[loss].target)
    if why is None:
        assert code == 0, err
    else:
        assert (code, err.splitlines()) == (1, [f"{path}:{METRIC_LINE}:13: error: {why}", "1 error found"])
        assert "Traceback" not in out + err


def test_accuracy_is_refused_beside_every_regression_loss() -> None:
    regression = [kind for kind in DATA_LOSSES if LOSSES[kind].target == "regression"]
    assert "huber" in regression  # computed from the registry: a new regression loss joins without a count to edit
    for kind in regression:
        assert METRICS["accuracy"].refuse(kind, "regression") == (
            f"metric 'accuracy' needs a classification loss; the loss is {kind!r}")


def _batch(target: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    logits = rng.normal(size=(16, 3)).astype(np.float32)
    if target == "sparse":
        return rng.integers(0, 3, 16), logits
    if target == "onehot":
        return np.eye(3, dtype=np.float32)[rng.integers(0, 3, 16)], logits
    return rng.integers(0, 2, (16, 3)).astype(np.float32), logits  # 0/1 labels (regression: values alike)


def _keras_reference(metric: str, target: str) -> tuple[object, bool] | None:
    """Keras' metric reading the same batch, and whether it takes the sigmoid of the logits; None: no reference,
    which means specgen has no meaning for the pair either."""
    import keras

    if metric == "mean_loss":
        return keras.metrics.Mean(), False
    table: dict[tuple[str, str], tuple[object, bool]] = {
        ("accuracy", "sparse"): (keras.metrics.SparseCategoricalAccuracy(), False),
        ("accuracy", "onehot"): (keras.metrics.CategoricalAccuracy(), False),
        ("accuracy", "binary"): (keras.metrics.BinaryAccuracy(threshold=0.0), False),  # logit > 0: sigmoid > 0.5
        ("top_k_accuracy", "sparse"): (keras.metrics.SparseTopKCategoricalAccuracy(k=5), False),
        ("top_k_accuracy", "onehot"): (keras.metrics.TopKCategoricalAccuracy(k=5), False),
        ("precision", "binary"): (keras.metrics.Precision(thresholds=0.0), False),
        ("recall", "binary"): (keras.metrics.Recall(thresholds=0.0), False),
        ("auc", "binary"): (keras.metrics.AUC(num_thresholds=200), True),
    }
    return table.get((metric, target))


@pytest.mark.parametrize(("loss", "metric"), [(loss, metric) for loss, metric in _pairs()
                                              if METRICS[metric].refuse(loss, LOSSES[loss].target) is None])
def test_every_pair_validate_accepts_reads_as_keras_reads_it(loss: str, metric: str) -> None:
    tf = pytest.importorskip("tensorflow")
    from specgen.runtime.lib import metrics

    target = LOSSES[loss].target
    assert target is not None
    reference = _keras_reference(metric, target)
    assert reference is not None, (
        f"validate accepts metric '{metric}' beside loss '{loss}' ({target} labels), and it has no Keras reading: "
        "refuse the pair (specgen/kinds/metrics/) or give it a reference here")
    keras_metric, sigmoid = reference
    ours = metrics.make(metric, target)
    labels, logits = _batch(target, np.random.default_rng(0))
    ours.update(tf.constant(0.5), tf.constant(labels), tf.constant(logits))
    if metric == "mean_loss":
        keras_metric.update_state(0.5, sample_weight=len(logits))
    else:
        keras_metric.update_state(labels, tf.sigmoid(logits) if sigmoid else logits)
    # Counts of 16 examples are exact in float32, so every ratio is the one float division on both sides;
    # AUC sums 199 trapezoids of such ratios (a few ulps of 1).
    assert float(ours.result()) == pytest.approx(float(keras_metric.result()), abs=1e-6)
