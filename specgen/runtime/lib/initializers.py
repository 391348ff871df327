"""Seeded, deterministic initializers for generated modules.

Each takes the variable's shape and a (run seed, per-variable seed) pair and uses
TensorFlow's stateless random ops, so the same spec and seed give the same
weights on every run. Fan-based ones follow Keras' definitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

Seed = tuple[int, int]
# Keras divides by this so that a normal truncated at two standard deviations keeps its variance.
TRUNCATION_STDDEV = 0.87962566103423978


def fans(shape: Sequence[int]) -> tuple[int, int]:
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def zeros(shape: Sequence[int]) -> tf.Tensor:
    return tf.zeros(shape, tf.float32)


def ones(shape: Sequence[int]) -> tf.Tensor:
    return tf.ones(shape, tf.float32)


def constant(shape: Sequence[int], value: float) -> tf.Tensor:
    return tf.fill(shape, tf.constant(value, tf.float32))


def random_normal(shape: Sequence[int], mean: float = 0.0, stddev: float = 0.05, *, seed: Seed) -> tf.Tensor:
    return tf.random.stateless_normal(shape, seed, mean, stddev, tf.float32)


def truncated_normal(shape: Sequence[int], mean: float = 0.0, stddev: float = 0.05, *, seed: Seed) -> tf.Tensor:
    return tf.random.stateless_truncated_normal(shape, seed, mean, stddev, tf.float32)


def random_uniform(shape: Sequence[int], minval: float = -0.05, maxval: float = 0.05, *, seed: Seed) -> tf.Tensor:
    return tf.random.stateless_uniform(shape, seed, minval, maxval, tf.float32)


def glorot_uniform(shape: Sequence[int], *, seed: Seed) -> tf.Tensor:
    fan_in, fan_out = fans(shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return random_uniform(shape, -limit, limit, seed=seed)


def glorot_normal(shape: Sequence[int], *, seed: Seed) -> tf.Tensor:
    fan_in, fan_out = fans(shape)
    return truncated_normal(shape, 0.0, math.sqrt(2.0 / (fan_in + fan_out)) / TRUNCATION_STDDEV, seed=seed)


def he_normal(shape: Sequence[int], *, seed: Seed) -> tf.Tensor:
    fan_in, _ = fans(shape)
    return truncated_normal(shape, 0.0, math.sqrt(2.0 / fan_in) / TRUNCATION_STDDEV, seed=seed)


def he_uniform(shape: Sequence[int], *, seed: Seed) -> tf.Tensor:
    fan_in, _ = fans(shape)
    limit = math.sqrt(6.0 / fan_in)
    return random_uniform(shape, -limit, limit, seed=seed)


def orthogonal(shape: Sequence[int], gain: float = 1.0, *, seed: Seed) -> tf.Tensor:
    """Keras' Orthogonal: Q of the QR decomposition of a normal draw, signs fixed by R's diagonal."""
    rows, cols = math.prod(shape[:-1]), shape[-1]
    q, r = tf.linalg.qr(tf.random.stateless_normal((max(rows, cols), min(rows, cols)), seed, dtype=tf.float32))
    q = q * tf.sign(tf.linalg.diag_part(r))
    if rows < cols:
        q = tf.transpose(q)
    return gain * tf.reshape(q, shape)


def unit_forget_bias(shape: Sequence[int], value: float = 0.0, *, seed: Seed) -> tf.Tensor:
    """An LSTM bias (gates i, f, c, o) of `value` with the forget gate's quarter at 1 (Keras' unit_forget_bias).

    `seed` is unused (the value is fixed); it is taken because the renderer seeds every non-constant kind.
    """
    units = shape[0] // 4
    return tf.concat([constant([units], value), ones([units]), constant([2 * units], value)], axis=0)
