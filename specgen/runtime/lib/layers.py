"""Stateful or multi-step layers used by generated modules (the rest are plain tf.nn calls)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

# Generated modules call them as layers.<op> (the `as` marks the re-export).
from specgen.runtime.lib.attention import multi_head_attention as multi_head_attention
from specgen.runtime.lib.dropout import dropout as dropout
from specgen.runtime.lib.masks import masked_mean as masked_mean
from specgen.runtime.lib.masks import masked_product as masked_product
from specgen.runtime.lib.masks import token_mask as token_mask
from specgen.runtime.lib.norms import rms_norm as rms_norm
from specgen.runtime.lib.positional_embedding import positional_embedding as positional_embedding
from specgen.runtime.lib.precision import in_float32
from specgen.runtime.lib.recurrent import bidirectional as bidirectional
from specgen.runtime.lib.recurrent import gru as gru
from specgen.runtime.lib.recurrent import lstm as lstm
from specgen.runtime.lib.recurrent import simple_rnn as simple_rnn

# train.distribute.sync_batch_norm, set by specgen.runtime.placement.replicas before the steps are traced. A module
# setting rather than an argument: the generated model's calls stay the same for every strategy.
_SYNC_BATCH_NORM = [False]


def synchronize_batch_norm(enabled: bool) -> None:
    """Under replicas, batch statistics over the global batch (all-reduced) instead of each replica's slice."""
    _SYNC_BATCH_NORM[0] = enabled


def _moments(x: tf.Tensor, axes: Sequence[int], synchronized: bool) -> tuple[tf.Tensor, tf.Tensor]:
    """tf.nn.moments, over every replica's rows when synchronized (two passes, as tf.nn.moments: mean, then
    the mean squared deviation from it), so the statistics are those of one process on the whole batch."""
    context = tf.distribute.get_replica_context()
    if not (synchronized or _SYNC_BATCH_NORM[0]) or context is None or context.num_replicas_in_sync == 1:
        moments: tuple[tf.Tensor, tf.Tensor] = tf.nn.moments(x, axes=list(axes))
        return moments
    count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), list(axes))), x.dtype)
    total, count = context.all_reduce(tf.distribute.ReduceOp.SUM, [tf.reduce_sum(x, axis=list(axes)), count])
    mean = total / count
    squares = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(tf.square(x - mean), axis=list(axes)))
    return mean, squares / count


@in_float32  # under train.precision: mixed_*, as Keras' BatchNormalization
def batch_norm(x: tf.Tensor, gamma: tf.Variable | None, beta: tf.Variable | None, moving_mean: tf.Variable,
               moving_variance: tf.Variable, *, training: bool, axes: Sequence[int], epsilon: float,
               momentum: float | None = None, synchronized: bool = False) -> tf.Tensor:
    """Batch statistics (and a moving-average update) in training; moving statistics otherwise.

    A None gamma or beta (`scale: false`, `center: false`) is no scaling or no offset, as in Keras.
    `synchronized` (the layer's `sync: true`): the statistics of the global batch under replicas.
    `momentum` is read only in training: a frozen layer (always `training=False`) is generated without it.
    """
    if training:
        if momentum is None:
            raise ValueError("batch_norm in training mode needs a momentum")
        mean, variance = _moments(x, axes, synchronized)
        moving_mean.assign(moving_mean * momentum + mean * (1.0 - momentum))
        moving_variance.assign(moving_variance * momentum + variance * (1.0 - momentum))
    else:
        mean, variance = moving_mean, moving_variance
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


@in_float32
def layer_norm(x: tf.Tensor, gamma: tf.Variable, beta: tf.Variable, *, epsilon: float) -> tf.Tensor:
    """Normalize over the last axis, like ONNX LayerNormalization(axis=-1)."""
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


@in_float32
def softmax(x: tf.Tensor, *, axis: int) -> tf.Tensor:
    """The softmax op and `activation: softmax`: under a mixed policy, computed in float32 and cast back to the
    compute type. Keras 3's Softmax layer under mixed_float16 computes in float16 (its guide asks for a float32
    policy on an output softmax instead); its MultiHeadAttention's fused path (ops.dot_product_attention) casts
    the scores to float32 for the softmax and the probabilities back. specgen does the latter everywhere: computed in
    float16, 20 classes' probabilities were off by up to 7.4 float16 units in the last place; the float32 softmax
    rounded once is off by at most half of one (tests/test_precision_softmax.py)."""
    return tf.nn.softmax(x, axis=axis)
