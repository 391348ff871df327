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


def masked_product(xs: list[tf.Tensor], masks: list[tf.Tensor | None]) -> tf.Tensor:
    """Keras 3's Multiply with masks (keras/src/layers/merging/multiply.py): a masked input counts as 1 at its
    masked steps; when every input carries a mask, the output is 0 where all of them are masked."""
    out, union = None, None
    for x, mask in zip(xs, masks, strict=True):
        if mask is not None:
            kept = tf.expand_dims(mask, -1)
            x = tf.where(kept, x, tf.ones_like(x))
            union = kept if union is None else tf.logical_or(union, kept)
        out = x if out is None else out * x
    assert out is not None
    if all(m is not None for m in masks):
        out = tf.where(union, out, tf.zeros_like(out))
    return out


def masked_mean(x: tf.Tensor, mask: tf.Tensor, *, keepdims: bool) -> tf.Tensor:
    """Keras' GlobalAveragePooling1D with a mask: the mean over the real steps only (0/0 = NaN for a row
    with none, as Keras gives)."""
    kept = tf.expand_dims(mask, -1)
    total = tf.reduce_sum(tf.where(kept, x, tf.zeros_like(x)), axis=1, keepdims=keepdims)
    return total / tf.reduce_sum(tf.cast(kept, x.dtype), axis=1, keepdims=keepdims)
