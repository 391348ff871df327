"""The dropout generated modules use (layers.dropout) and attention uses on its weights: its own module so
that both layers.py and attention.py import it without a cycle."""

from __future__ import annotations

import tensorflow as tf


def dropout(x: tf.Tensor, *, rate: float, training: bool, seed: tf.Tensor | None, salt: int) -> tf.Tensor:
    """Dropout in training only; with a seed it is stateless, so a resumed run drops the same units."""
    if not training or rate == 0:
        return x
    if seed is None:
        return tf.nn.dropout(x, rate=rate)
    return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed + tf.constant([0, salt], tf.int64))
