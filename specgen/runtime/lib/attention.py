"""Keras' MultiHeadAttention math (self-attention) over [batch, time, features]; generated modules call it.

Written out with einsum rather than calling keras.layers: generated code depends on TensorFlow only and
the weights stay specgen's tf.Variables in Keras' layouts. The steps and their order are Keras': the
query is scaled by 1/sqrt(key_dim) before the scores, masked scores become -1e9 (keras' Softmax layer),
the softmax runs in float32 and dropout falls on the attention weights in training only.
A padding mask ([batch, time] bool) becomes Keras' attention mask (`_compute_attention_mask`): query mask
AND key mask, AND the causal one.
"""

from __future__ import annotations

import math

import tensorflow as tf

from specgen.runtime.lib.dropout import dropout as drop

MASKED = -1e9  # Keras' large negative number for float32 (keras/src/layers/activations/softmax.py)


def _project(x: tf.Tensor, kernel: tf.Variable, bias: tf.Variable | None) -> tf.Tensor:
    out = tf.einsum("btd,dhk->bthk", x, kernel)  # [batch, time, heads, size]
    return out if bias is None else out + bias


def causal_mask(scores: tf.Tensor) -> tf.Tensor:
    """[query time, key time] True on and below the diagonal, from the runtime lengths."""
    shape = tf.shape(scores)[-2:]
    return tf.cast(tf.linalg.band_part(tf.ones(shape), -1, 0), tf.bool)


def padding_mask(mask: tf.Tensor, causal: bool) -> tf.Tensor:
    """[batch, 1, query time, key time] from a [batch, time] padding mask, as Keras' MultiHeadAttention."""
    allowed = tf.logical_and(mask[:, :, None], mask[:, None, :])
    if causal:
        allowed = tf.logical_and(allowed, tf.cast(tf.linalg.band_part(tf.ones(tf.shape(allowed)[1:]), -1, 0), tf.bool))
    return allowed[:, None]


def multi_head_attention(x: tf.Tensor, weights: dict[str, tf.Variable | None], *, key_dim: int, causal: bool,
                         dropout: float, training: bool, seed: tf.Tensor | None, salt: int,
                         mask: tf.Tensor | None = None) -> tf.Tensor:
    """`weights`: Keras' roles (`query/kernel`, ..., `attention_output/bias`); biases None without use_bias."""
    query = _project(x, weights["query/kernel"], weights.get("query/bias"))
    key = _project(x, weights["key/kernel"], weights.get("key/bias"))
    value = _project(x, weights["value/kernel"], weights.get("value/bias"))
    query = query * (1.0 / math.sqrt(key_dim))
    scores = tf.einsum("bshk,bthk->bhts", key, query)  # [batch, heads, query time, key time]
    allowed = padding_mask(mask, causal) if mask is not None else causal_mask(scores) if causal else None
    if allowed is not None:
        scores = tf.where(allowed, scores, tf.constant(MASKED, scores.dtype))
    probs = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32), axis=-1), scores.dtype)
    if mask is not None and dropout > 0:  # Keras' Softmax layer path (taken with dropout) zeroes a fully masked row;
        probs = tf.where(allowed, probs, tf.zeros_like(probs))  # its fused path (no dropout) leaves it uniform
    probs = drop(probs, rate=dropout, training=training, seed=seed, salt=salt)
    context = tf.einsum("bhts,bshv->bthv", probs, value)
    out = tf.einsum("bthv,hvd->btd", context, weights["attention_output/kernel"])
    bias = weights.get("attention_output/bias")
    return out if bias is None else out + bias
