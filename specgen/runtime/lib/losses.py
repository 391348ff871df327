"""Loss functions: data terms return the mean over the batch (and over output elements); regularizers a sum."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def soft_labels(labels: tf.Tensor, logits: tf.Tensor) -> bool:
    """Whether class-index labels arrive as class probabilities instead: [batch, classes] floats, as mixup and
    cutmix (specgen/runtime/augment) make them. Decided on static shapes, when the step is traced."""
    classes = logits.shape[-1]
    return (labels.dtype.is_floating and labels.shape.rank == logits.shape.rank and classes is not None
            and classes > 1 and labels.shape[-1] == classes)


def sparse_softmax_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    if soft_labels(labels, logits):  # mixed one-hot labels: the cross entropy of the soft targets
        return softmax_cross_entropy(labels, logits)
    labels = tf.reshape(tf.cast(labels, tf.int64), [-1])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def softmax_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf.cast(labels, logits.dtype), logits=logits))


def sigmoid_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    labels = tf.reshape(tf.cast(labels, logits.dtype), tf.shape(logits))
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


def mean_squared_error(labels: tf.Tensor, predictions: tf.Tensor) -> tf.Tensor:
    labels = tf.reshape(tf.cast(labels, predictions.dtype), tf.shape(predictions))
    return tf.reduce_mean(tf.square(predictions - labels))


def mean_absolute_error(labels: tf.Tensor, predictions: tf.Tensor) -> tf.Tensor:
    labels = tf.reshape(tf.cast(labels, predictions.dtype), tf.shape(predictions))
    return tf.reduce_mean(tf.abs(predictions - labels))


def huber(labels: tf.Tensor, predictions: tf.Tensor, delta: float = 1.0) -> tf.Tensor:
    """Keras' Huber: 0.5 * e**2 where |e| <= delta, else delta * (|e| - delta / 2); the mean."""
    labels = tf.reshape(tf.cast(labels, predictions.dtype), tf.shape(predictions))
    error = tf.abs(predictions - labels)
    quadratic = tf.minimum(error, delta)  # the part of the error below delta; the rest grows linearly
    return tf.reduce_mean(0.5 * tf.square(quadratic) + delta * (error - quadratic))


def focal(labels: tf.Tensor, logits: tf.Tensor, alpha: float = 0.25, gamma: float = 2.0) -> tf.Tensor:
    """Keras' CategoricalFocalCrossentropy(from_logits=True): its steps, clipping to [1e-7, 1 - 1e-7] included."""
    labels = tf.cast(labels, logits.dtype)
    probabilities = tf.nn.softmax(logits, axis=-1)
    probabilities = probabilities / tf.reduce_sum(probabilities, axis=-1, keepdims=True)  # as Keras renormalizes
    probabilities = tf.clip_by_value(probabilities, 1e-7, 1.0 - 1e-7)  # Keras' backend.epsilon()
    terms = alpha * tf.pow(1.0 - probabilities, gamma) * (-labels * tf.math.log(probabilities))
    return tf.reduce_mean(tf.reduce_sum(terms, axis=-1))


def l2(weights: Sequence[tf.Variable]) -> tf.Tensor:
    """sum(w**2) / 2 over every weight: TensorFlow's `tf.nn.l2_loss` convention (a sum, not a mean)."""
    return tf.add_n([tf.reduce_sum(tf.square(w)) for w in weights]) / 2


def l1(weights: Sequence[tf.Variable]) -> tf.Tensor:
    """sum(|w|) over every weight (Keras' L1 regularizer without its factor)."""
    return tf.add_n([tf.reduce_sum(tf.abs(w)) for w in weights])
