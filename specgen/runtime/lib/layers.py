"""Stateful or multi-step layers used by generated modules (the rest are plain tf.nn calls)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def batch_norm(x: tf.Tensor, gamma: tf.Variable | None, beta: tf.Variable | None, moving_mean: tf.Variable,
               moving_variance: tf.Variable, *, training: bool, axes: Sequence[int], momentum: float,
               epsilon: float) -> tf.Tensor:
    """Batch statistics (and a moving-average update) in training; moving statistics otherwise.

    A None gamma or beta (`scale: false`, `center: false`) is no scaling or no offset, as in Keras.
    """
    if training:
        mean, variance = tf.nn.moments(x, axes=list(axes))
        moving_mean.assign(moving_mean * momentum + mean * (1.0 - momentum))
        moving_variance.assign(moving_variance * momentum + variance * (1.0 - momentum))
    else:
        mean, variance = moving_mean, moving_variance
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


def layer_norm(x: tf.Tensor, gamma: tf.Variable, beta: tf.Variable, *, epsilon: float) -> tf.Tensor:
    """Normalize over the last axis, like ONNX LayerNormalization(axis=-1)."""
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


def dropout(x: tf.Tensor, *, rate: float, training: bool, seed: tf.Tensor | None, salt: int) -> tf.Tensor:
    """Dropout in training only; with a seed it is stateless, so a resumed run drops the same units."""
    if not training or rate == 0:
        return x
    if seed is None:
        return tf.nn.dropout(x, rate=rate)
    return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed + tf.constant([0, salt], tf.int64))
