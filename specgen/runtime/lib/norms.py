"""Normalizations over the last axis that generated modules call as layers.<name>."""

from __future__ import annotations

import tensorflow as tf

from specgen.runtime.lib.precision import in_float32


@in_float32
def rms_norm(x: tf.Tensor, scale: tf.Variable, *, epsilon: float) -> tf.Tensor:
    """Keras' RMSNormalization (keras.ops.rms_normalization): x * rsqrt(mean(x^2) + epsilon) * scale,
    the mean over the last axis, computed in float32 as Keras does."""
    rrms = tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + epsilon)
    return x * rrms * scale
