"""Loss functions: each returns the mean over the batch (and over output elements)."""

from __future__ import annotations

import tensorflow as tf


def sparse_softmax_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
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
