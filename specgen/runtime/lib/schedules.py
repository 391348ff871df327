"""Learning-rate schedules of the global step (the number of updates already applied).

Formulas follow Keras 3's schedules. A `warmup_steps` W in front of any schedule
scales it linearly from 0: lr(step) = schedule(0) * step / W for step < W, then
schedule(step - W).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import tensorflow as tf

Schedule = Callable[[tf.Tensor], tf.Tensor]


def _float(step: tf.Tensor) -> tf.Tensor:
    return tf.cast(step, tf.float32)


def constant(initial: float) -> Schedule:
    return lambda step: tf.constant(initial, tf.float32)


def exponential_decay(initial: float, decay_steps: int, decay_rate: float, staircase: bool = False) -> Schedule:
    def rate(step: tf.Tensor) -> tf.Tensor:
        progress = _float(step) / decay_steps
        if staircase:
            progress = tf.floor(progress)
        return initial * tf.pow(tf.constant(decay_rate, tf.float32), progress)

    return rate


def cosine_decay(initial: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    def rate(step: tf.Tensor) -> tf.Tensor:
        progress = tf.minimum(_float(step), float(decay_steps)) / decay_steps
        cosine = 0.5 * (1.0 + tf.cos(math.pi * progress))
        return initial * ((1 - alpha) * cosine + alpha)

    return rate


def piecewise_constant(boundaries: Sequence[int], values: Sequence[float]) -> Schedule:
    """values[0] while step <= boundaries[0], values[1] while step <= boundaries[1], ..."""

    def rate(step: tf.Tensor) -> tf.Tensor:
        index = tf.reduce_sum(tf.cast(tf.cast(step, tf.int64) > tf.constant(list(boundaries), tf.int64), tf.int32))
        return tf.gather(tf.constant(list(values), tf.float32), index)

    return rate


def warmup(schedule: Schedule, warmup_steps: int) -> Schedule:
    if warmup_steps <= 0:
        return schedule

    def rate(step: tf.Tensor) -> tf.Tensor:
        fraction = _float(step) / warmup_steps
        after = schedule(tf.maximum(tf.cast(step, tf.int64) - warmup_steps, 0))
        return tf.where(fraction < 1.0, schedule(tf.constant(0, tf.int64)) * fraction, after)

    return rate
