"""Optimizer updates with Keras 3's formulas, over variables and slots that specgen names.

Why not Keras' optimizer objects: their slot variables and counters carry Keras'
own names and each keeps its own step, while specgen needs (1) checkpoint keys
derived from spec paths (`optimizers/<name>/<slot>/<variable path>`), (2) one
global step driving every schedule, and (3) learning rates in variables that a
resumed run can change. The arithmetic is Keras' own, and tests check each kind
against a Keras optimizer step by step.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

Vars = Sequence[tf.Variable]
Grads = Sequence[tf.Tensor]


def slots(prefix: str, paths: Sequence[str], variables: Vars, initial: float = 0.0) -> list[tf.Variable]:
    """One slot per variable, named `<prefix>/<variable path>`, filled with `initial`."""
    return [tf.Variable(tf.fill(v.shape, tf.constant(initial, v.dtype)), trainable=False, name=f"{prefix}/{p}")
            for p, v in zip(paths, variables, strict=True)]


def summed(gradient: tf.Tensor | tf.IndexedSlices | None) -> tf.Tensor | tf.IndexedSlices | None:
    """A sparse gradient (an embedding's IndexedSlices: one slice per occurrence of an id) with the slices of each id
    summed: the gradient the loss defines. Clipping must see that one, as it sees the dense accumulators of
    `train.accumulate`: on the occurrences, clip_by_value bounds each occurrence (a row moved by 12 x the bound for
    an id seen 12 times) and clip_by_global_norm measures a norm the gradient does not have. Kept sparse (only the
    ids seen), as Keras' optimizers deduplicate before a sparse update."""
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    ids, position = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(ids)[0])
    return tf.IndexedSlices(values, ids, gradient.dense_shape)


def clip(gradients: Grads, *, global_norm: float | None = None, value: float | None = None) -> list[tf.Tensor]:
    gradients = [summed(g) for g in gradients]
    if global_norm is not None:
        clipped: list[tf.Tensor]
        clipped, _ = tf.clip_by_global_norm(list(gradients), global_norm)
        return clipped
    if value is not None:
        return [tf.clip_by_value(g, -value, value) for g in gradients]
    return list(gradients)


def weight_decay(variables: Vars, lr: tf.Tensor, decay: float) -> None:
    """Decoupled weight decay, applied before the update as Keras does for every optimizer."""
    if decay:
        for var in variables:
            var.assign(var - var * decay * lr)


def sgd(variables: Vars, gradients: Grads, lr: tf.Tensor, momentums: Vars, *, momentum: float,
        nesterov: bool) -> None:
    for var, grad, m in zip(variables, gradients, momentums or [None] * len(variables), strict=True):
        if m is None:
            var.assign_sub(grad * lr)
            continue
        m.assign(m * momentum - grad * lr)
        var.assign_add(m * momentum - grad * lr if nesterov else m)


def adam(variables: Vars, gradients: Grads, lr: tf.Tensor, ms: Vars, vs: Vars, iterations: tf.Variable, *,
         beta_1: float, beta_2: float, epsilon: float) -> None:
    step = tf.cast(iterations + 1, tf.float32)
    alpha = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
    for var, grad, m, v in zip(variables, gradients, ms, vs, strict=True):
        m.assign_add((grad - m) * (1 - beta_1))
        v.assign_add((tf.square(grad) - v) * (1 - beta_2))
        var.assign_sub((m * alpha) / (tf.sqrt(v) + epsilon))


def rmsprop(variables: Vars, gradients: Grads, lr: tf.Tensor, velocities: Vars, momentums: Vars,
            average_grads: Vars, *, rho: float, momentum: float, epsilon: float) -> None:
    n = len(variables)
    for var, grad, vel, mom, avg in zip(variables, gradients, velocities, momentums or [None] * n,
                                        average_grads or [None] * n, strict=True):
        vel.assign(rho * vel + (1 - rho) * tf.square(grad))
        if avg is not None:
            avg.assign(rho * avg + (1 - rho) * grad)
            denominator = vel - tf.square(avg) + epsilon
        else:
            denominator = vel + epsilon
        increment = lr * grad / tf.sqrt(denominator)
        if mom is not None:
            mom.assign(momentum * mom + increment)
            var.assign_sub(mom)
        else:
            var.assign_sub(increment)


def adagrad(variables: Vars, gradients: Grads, lr: tf.Tensor, accumulators: Vars, *, epsilon: float) -> None:
    for var, grad, acc in zip(variables, gradients, accumulators, strict=True):
        acc.assign_add(tf.square(grad))
        var.assign_sub(lr * grad / tf.sqrt(acc + epsilon))


def lion(variables: Vars, gradients: Grads, lr: tf.Tensor, ms: Vars, *, beta_1: float, beta_2: float) -> None:
    """Keras' Lion: the step is the sign of the interpolated momentum; the momentum follows afterwards."""
    for var, grad, m in zip(variables, gradients, ms, strict=True):
        var.assign_sub(lr * tf.sign(m * beta_1 + grad * (1 - beta_1)))
        m.assign(m * beta_2 + grad * (1 - beta_2))


def ema_decay(decay: float, step: tf.Tensor) -> tf.Tensor:
    """tf.train.ExponentialMovingAverage's rule with num_updates: min(decay, (1 + t) / (10 + t)).

    Early on the shadows follow the weights closely, so a short run's EMA weights
    are not stuck near the initial values.
    """
    t = tf.cast(step, tf.float32)
    return tf.minimum(tf.constant(decay, tf.float32), (1.0 + t) / (10.0 + t))


def ema(shadows: Vars, variables: Vars, decay: float, step: tf.Tensor) -> None:
    """shadow <- d * shadow + (1 - d) * variable after each update, d = ema_decay(decay, step)."""
    d = ema_decay(decay, step)
    for shadow, var in zip(shadows, variables, strict=True):
        shadow.assign(d * shadow + (1 - d) * var)


def all_reduce(gradients: Grads) -> list[tf.Tensor]:
    """The mean of every replica's gradients, so that each replica applies the global batch's gradient.

    Each replica's loss is the mean over its slice of the global batch, so the mean over replicas is the
    gradient of the global batch's mean loss: what one process computes on the whole batch. Clipping and
    the updates come after it. Outside a tf.distribute strategy (one replica) the gradients pass as they are.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return list(gradients)
    reduced: list[tf.Tensor] = context.all_reduce(tf.distribute.ReduceOp.MEAN, list(gradients))
    return reduced
