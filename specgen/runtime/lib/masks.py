"""Keras' padding masks, passed explicitly: generated modules build them from the ids (specgen/ir/masks.py
decides which layers take one) and hand them to the recurrent, pooling and attention helpers."""

from __future__ import annotations

import tensorflow as tf


def token_mask(*ids: tf.Tensor) -> tf.Tensor:
    """[batch, time] bool: a step is real where any of the id tensors is non-zero (Keras' mask_zero, and the
    OR its merge layers take of several masks)."""
    found = tf.not_equal(ids[0], 0)
    for more in ids[1:]:
        found = tf.logical_or(found, tf.not_equal(more, 0))
    return found


def masked_mean(x: tf.Tensor, mask: tf.Tensor, *, keepdims: bool) -> tf.Tensor:
    """Keras' GlobalAveragePooling1D with a mask: the mean over the real steps only (0/0 = NaN for a row
    with none, as Keras gives)."""
    kept = tf.expand_dims(mask, -1)
    total = tf.reduce_sum(tf.where(kept, x, tf.zeros_like(x)), axis=1, keepdims=keepdims)
    return total / tf.reduce_sum(tf.cast(kept, x.dtype), axis=1, keepdims=keepdims)
