"""KerasHub's PositionEmbedding math; generated modules call it as layers.positional_embedding."""

from __future__ import annotations

import tensorflow as tf


def positional_embedding(x: tf.Tensor, embeddings: tf.Variable, *, layer: str) -> tf.Tensor:
    """Rows 0..time-1 of `embeddings` [max_length, features], broadcast to x's shape (x itself is not added).

    A sequence longer than max_length is an error, never a clipped slice: tf.slice would raise too, but
    with a message that names neither the layer nor the bound.
    """
    shape = tf.shape(x)
    steps, max_length = shape[-2], embeddings.shape[0]
    tf.debugging.assert_less_equal(
        steps, tf.constant(max_length, steps.dtype),
        message=f"layer '{layer}' (positional_embedding): the input's time steps exceed max_length {max_length}")
    rows = tf.slice(tf.convert_to_tensor(embeddings), [0, 0], tf.stack([steps, -1]))
    return tf.broadcast_to(rows, shape)
