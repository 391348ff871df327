"""Metrics whose accumulators are variables named `metrics/<metric>/<accumulator>` (collection `metrics`).

`reset()` zeroes them at the start of each stage, so train and eval never mix.
Every metric accumulates sums and counts (hits and rows, confusion counts), never a mean: under replicas
each replica adds its slice of the batch and reading sums the replicas' copies (replicas.py), so a slice
of 0 rows must add 0 to every accumulator. tests/test_epochs_replicas.py feeds each metric an empty slice.
Classification targets: `sparse` (integer labels, softmax logits), `onehot`
(probability labels) and `binary` (sigmoid logits, threshold 0).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from specgen.kinds.metrics import REGISTRY
from specgen.kinds.pointers import resolve
from specgen.runtime.lib.losses import soft_labels

AUC_THRESHOLDS = 200


def _variable(path: str, shape: tuple[int, ...] = ()) -> tf.Variable:
    return tf.Variable(tf.zeros(shape, tf.float32), trainable=False, name=path)


class Metric(tf.Module):  # type: ignore[misc]  # tensorflow ships no types: tf.Module is Any
    accumulators: tuple[str, ...] = ("total", "count")

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name=name)
        self.target = target
        self.state = [_variable(f"metrics/{name}/{acc}", self.shape) for acc in self.accumulators]

    shape: tuple[int, ...] = ()

    def reset(self) -> None:
        for var in self.state:
            var.assign(tf.zeros_like(var))

    def result(self) -> tf.Tensor:
        total, count = self.state
        return tf.math.divide_no_nan(total, count)


def _predicted_and_true(target: str, labels: tf.Tensor, logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    if target == "sparse" and not soft_labels(labels, logits):
        return tf.argmax(logits, axis=-1), tf.reshape(tf.cast(labels, tf.int64), [-1])
    if target == "sparse":  # mixed labels (mixup, cutmix): the class with the largest share
        return tf.argmax(logits, axis=-1), tf.argmax(labels, axis=-1)
    if target == "onehot":
        return tf.argmax(logits, axis=-1), tf.argmax(labels, axis=-1)
    if target != "binary":  # validate refuses the metric for other losses (specgen/kinds/metrics/accuracy.py)
        raise ValueError(f"accuracy cannot read a {target!r} loss's labels")
    labels = tf.reshape(tf.cast(labels, tf.float32), tf.shape(logits))
    return tf.cast(logits > 0, tf.int64), tf.cast(labels > 0.5, tf.int64)


class Accuracy(Metric):
    def update(self, loss: tf.Tensor, labels: tf.Tensor, logits: tf.Tensor) -> None:
        predicted, true = _predicted_and_true(self.target, labels, logits)
        hits = tf.cast(tf.equal(tf.reshape(predicted, [-1]), tf.reshape(true, [-1])), tf.float32)
        self.state[0].assign_add(tf.reduce_sum(hits))
        self.state[1].assign_add(tf.cast(tf.size(hits), tf.float32))


class MeanLoss(Metric):
    """Mean of the per-batch mean loss, weighted by batch size (Keras' `loss` in History and `evaluate`).

    Its accumulators are a sum and a row count like every metric here. The generated step hands over the
    loss as its slice's mean (the loss terms reduce inside the loss: a masked sequence loss is a mean over
    tokens, an `l2` term is added once), so the slice's sum is that mean times its rows, taken only for a
    slice that has rows: under replicas an eval batch of fewer rows than replicas leaves some replica 0
    rows (runtime/placement/replicas.py's `own_slice`), whose mean is 0/0 = NaN, and NaN * 0 would make the
    whole stage NaN. Such a slice adds 0 to both accumulators. Needs no labels: `labels` may be None (a loss
    that reads only computed targets, such as a DQN's TD target).
    """

    def update(self, loss: tf.Tensor, labels: tf.Tensor | None, logits: tf.Tensor) -> None:
        rows = tf.cast(tf.shape(logits)[0], tf.float32)
        self.state[0].assign_add(tf.where(rows > 0, tf.cast(loss, tf.float32) * rows, 0.0))
        self.state[1].assign_add(rows)


class Precision(Metric):
    accumulators = ("true_positives", "false_positives")

    def update(self, loss: tf.Tensor, labels: tf.Tensor, logits: tf.Tensor) -> None:
        predicted, true = _predicted_and_true("binary", labels, logits)
        positive = tf.cast(predicted == 1, tf.float32)
        self.state[0].assign_add(tf.reduce_sum(positive * tf.cast(true == 1, tf.float32)))
        self.state[1].assign_add(tf.reduce_sum(positive * tf.cast(true == 0, tf.float32)))

    def result(self) -> tf.Tensor:
        tp, fp = self.state
        return tf.math.divide_no_nan(tp, tp + fp)


class Recall(Metric):
    accumulators = ("true_positives", "false_negatives")

    def update(self, loss: tf.Tensor, labels: tf.Tensor, logits: tf.Tensor) -> None:
        predicted, true = _predicted_and_true("binary", labels, logits)
        actual = tf.cast(true == 1, tf.float32)
        self.state[0].assign_add(tf.reduce_sum(actual * tf.cast(predicted == 1, tf.float32)))
        self.state[1].assign_add(tf.reduce_sum(actual * tf.cast(predicted == 0, tf.float32)))

    def result(self) -> tf.Tensor:
        tp, fn = self.state
        return tf.math.divide_no_nan(tp, tp + fn)


class Auc(Metric):
    """ROC AUC from confusion counts at 200 thresholds (trapezoid rule), Keras' AUC's definition: a score counts
    where `score > threshold` exactly (Keras' bucketing can differ for a score equal to a threshold)."""

    accumulators = ("true_positives", "false_positives", "true_negatives", "false_negatives")
    shape = (AUC_THRESHOLDS,)

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, target)
        inner = [(i + 1) / (AUC_THRESHOLDS - 1) for i in range(AUC_THRESHOLDS - 2)]
        self.thresholds = tf.constant([-1e-7, *inner, 1 + 1e-7], tf.float32)

    def update(self, loss: tf.Tensor, labels: tf.Tensor, logits: tf.Tensor) -> None:
        scores = tf.reshape(tf.sigmoid(logits), [-1, 1])
        true = tf.reshape(tf.cast(labels, tf.float32) > 0.5, [-1, 1])
        above = scores > self.thresholds[tf.newaxis, :]
        for var, mask in zip(self.state, (above & true, above & ~true, ~above & ~true, ~above & true), strict=True):
            var.assign_add(tf.reduce_sum(tf.cast(mask, tf.float32), axis=0))

    def result(self) -> tf.Tensor:
        tp, fp, tn, fn = self.state
        tpr = tf.math.divide_no_nan(tp, tp + fn)
        fpr = tf.math.divide_no_nan(fp, fp + tn)
        return tf.reduce_sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2)


class TopKAccuracy(Metric):
    """The share of examples whose label is among the k largest logits: `tf.math.in_top_k`, as Keras'
    SparseTopKCategoricalAccuracy (one-hot labels: their arg-max, as TopKCategoricalAccuracy). Classes tied
    with the k-th largest logit all count as in the top k; a label whose logit is not finite never does."""

    def __init__(self, name: str, target: str, k: int = 5) -> None:
        super().__init__(name, target)
        self.k = k

    def update(self, loss: tf.Tensor, labels: tf.Tensor, logits: tf.Tensor) -> None:
        scores = tf.cast(tf.reshape(logits, [-1, tf.shape(logits)[-1]]), tf.float32)
        if self.target == "sparse" and not soft_labels(labels, logits):
            true = tf.reshape(tf.cast(labels, tf.int64), [-1])
        else:
            true = tf.argmax(tf.reshape(labels, tf.shape(scores)), axis=-1)
        hits = tf.cast(tf.math.in_top_k(true, scores, self.k), tf.float32)
        self.state[0].assign_add(tf.reduce_sum(hits))
        self.state[1].assign_add(tf.cast(tf.size(hits), tf.float32))


def make(name: str, target: str, **args: Any) -> Metric:
    """The metric `name`: the class its kind module points to (specgen/kinds/metrics/<name>.py), with
    the keys of its mapping form in `train.metrics` (every one written out by the generated trainer)."""
    metric: Metric = resolve(REGISTRY[name].runtime)(name, target, **args)
    return metric
