"""Keras' MultiHeadAttention math over [batch, time, features]; generated modules call it.

Written out with einsum rather than calling keras.layers: generated code depends on TensorFlow only and
the weights stay specgen's tf.Variables in Keras' layouts. The steps and their order are Keras': the
query is scaled by 1/sqrt(key_dim) before the scores, masked scores are replaced by Keras' large negative
number of the path the layer takes (`masked_score` below), the softmax runs in float32 and dropout falls on the
attention weights in training only. A query step with no allowed key (a padded one under a causal and padding
mask) follows Keras' two paths: with `dropout > 0` Keras takes its Softmax layer, which zeroes masked weights,
so the row is all zeros and the step's attention output is the output bias alone; with `dropout: 0` it takes
ops.dot_product_attention, where the row is a softmax of equal masked scores, uniform over every key. The explicit
mask and the causal one combine with a logical and, as Keras' _compute_attention_mask does. Rotary
position embedding is KerasHub's RotaryEmbedding (split halves, [-x2, x1]) on the projected query and key.
Padding masks ([batch, time] bool from mask_zero embeddings, specgen/ir/masks.py) join them as Keras'
_compute_attention_mask does: the query's as rows, the value's and the key's as columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

from specgen.runtime.lib.dropout import dropout as drop

# Keras 3's two masked-score values. Its ops.dot_product_attention (MultiHeadAttention with dropout 0) replaces
# masked float32 scores, whatever the compute type, by -0.7 * float32's max (keras/src/backend/tensorflow/nn.py,
# _get_large_negative), so a masked key gets no weight at any finite score below it; its Softmax layer (dropout > 0)
# replaces them by -1e9, -3e4 in float16, in the compute type (keras/src/layers/activations/softmax.py,
# _large_negative_number), so there a row whose allowed scores are all below about -1e9 puts its weight on the
# masked keys, which the layer then zeroes. specgen/kinds/ops/attention.py holds the same values for ONNX.
FUSED_MASKED = -0.7 * 3.38953e38
SOFTMAX_MASKED = -1e9
SOFTMAX_MASKED_FLOAT16 = -3e4


def _project(x: tf.Tensor, kernel: tf.Variable, bias: tf.Variable | None) -> tf.Tensor:
    out = tf.einsum("btd,dhk->bthk", x, kernel)  # [batch, time, heads, size]
    return out if bias is None else out + bias


def causal_mask(scores: tf.Tensor) -> tf.Tensor:
    """[query time, key time] True on and below the diagonal, from the runtime lengths."""
    shape = tf.shape(scores)[-2:]
    return tf.cast(tf.linalg.band_part(tf.ones(shape), -1, 0), tf.bool)


def rotary(x: tf.Tensor, frequencies: Sequence[float]) -> tf.Tensor:
    """KerasHub's RotaryEmbedding over [batch, time, heads, size]: angles position * frequency, the
    frequencies (specgen/kinds/ops/attention.py computes them) repeated for the two halves."""
    positions = tf.cast(tf.range(tf.shape(x)[1]), tf.float32)
    freq = tf.einsum("i,j->ij", positions, tf.constant(frequencies, tf.float32))  # [time, size/2]
    angles = tf.concat([freq, freq], axis=-1)[None, :, None, :]
    x1, x2 = tf.split(x, 2, axis=-1)
    rotated = tf.concat([-x2, x1], axis=-1)
    # Angles in float32, cos and sin cast to x's type (float16 or bfloat16 under a mixed policy), as KerasHub's
    # RotaryEmbedding does: positions past 2048 have no exact float16 value.
    return x * tf.cast(tf.cos(angles), x.dtype) + rotated * tf.cast(tf.sin(angles), x.dtype)


def _padding(query_mask: tf.Tensor | None, value_mask: tf.Tensor | None, key_mask: tf.Tensor | None
             ) -> tf.Tensor | None:
    """[batch, 1, query time, key time] (or broadcastable) from the padding masks, None without any."""
    keep = None if query_mask is None else query_mask[:, None, :, None]
    for columns in (value_mask, key_mask):
        if columns is not None:
            keep = columns[:, None, None, :] if keep is None else tf.logical_and(keep, columns[:, None, None, :])
    return keep


def _keep(scores: tf.Tensor, mask: tf.Tensor | None, causal: bool, padding: tf.Tensor | None) -> tf.Tensor | None:
    keep = None if mask is None else tf.cast(mask, tf.bool)[:, None]  # [batch, 1 (heads), query, key]
    if causal:
        keep = causal_mask(scores) if keep is None else tf.logical_and(keep, causal_mask(scores))
    if padding is not None:
        keep = padding if keep is None else tf.logical_and(keep, padding)
    return keep


def masked_score(scores: tf.Tensor, keep: tf.Tensor | None, *, softmax_layer: bool) -> tf.Tensor:
    """`scores` with the masked ones replaced as Keras does on the path it takes: its Softmax layer's (dropout > 0)
    value in the compute type, else ops.dot_product_attention's in float32 (the result is then float32)."""
    if keep is None:
        return scores
    if softmax_layer:
        value = SOFTMAX_MASKED_FLOAT16 if scores.dtype == tf.float16 else SOFTMAX_MASKED
        return tf.where(keep, scores, tf.constant(value, scores.dtype))
    return tf.where(keep, tf.cast(scores, tf.float32), tf.constant(FUSED_MASKED, tf.float32))


def multi_head_attention(query: tf.Tensor, weights: dict[str, tf.Variable | None], *, key_dim: int, causal: bool,
                         dropout: float, training: bool, seed: tf.Tensor | None, salt: int,
                         value: tf.Tensor | None = None, key: tf.Tensor | None = None,
                         mask: tf.Tensor | None = None, rotary_frequencies: Sequence[float] | None = None,
                         query_mask: tf.Tensor | None = None, value_mask: tf.Tensor | None = None,
                         key_mask: tf.Tensor | None = None) -> tf.Tensor:
    """`weights`: Keras' roles (`query/kernel`, ..., `attention_output/bias`); biases None without use_bias.
    `value` defaults to `query` (self-attention) and `key` to `value`, as Keras' call(query, value, key)."""
    value = query if value is None else value
    key = value if key is None else key
    q = _project(query, weights["query/kernel"], weights.get("query/bias"))
    k = _project(key, weights["key/kernel"], weights.get("key/bias"))
    v = _project(value, weights["value/kernel"], weights.get("value/bias"))
    if rotary_frequencies is not None:
        q, k = rotary(q, rotary_frequencies), rotary(k, rotary_frequencies)
    q = q * (1.0 / math.sqrt(key_dim))
    scores = tf.einsum("bshk,bthk->bhts", k, q)  # [batch, heads, query time, key time]
    padding = _padding(query_mask, value_mask, key_mask)
    keep = _keep(scores, mask, causal, padding)
    compute = scores.dtype
    # Normalized in float32 whatever the compute type, as Keras' fused path (ops.dot_product_attention) does; its
    # Softmax layer normalizes in the compute type, which only rounds differently (masked as Keras, either way).
    scores = tf.cast(masked_score(scores, keep, softmax_layer=dropout > 0), tf.float32)
    probs = tf.cast(tf.nn.softmax(scores, axis=-1), compute)
    if keep is not None and dropout > 0:  # Keras' Softmax-layer path (taken whenever dropout > 0, in inference
        probs = tf.where(keep, probs, tf.zeros_like(probs))  # too) zeroes every masked weight: a row with no
        # allowed key is zeros, as one whose allowed scores are all below the masked value; its
        # ops.dot_product_attention path (dropout 0) leaves the first uniform and never gives the second.
    probs = drop(probs, rate=dropout, training=training, seed=seed, salt=salt)
    context = tf.einsum("bhts,bshv->bthv", probs, v)
    out = tf.einsum("bthv,hvd->btd", context, weights["attention_output/kernel"])
    bias = weights.get("attention_output/bias")
    return out if bias is None else out + bias
