"""Optimizer updates with Keras 3's formulas, over variables and slots that specgen names.

Why not Keras' optimizer objects: their slot variables and counters carry Keras'
own names and each keeps its own step, while specgen needs (1) checkpoint keys
derived from spec paths (`optimizers/<name>/<slot>/<variable path>`), (2) one
global step driving every schedule, and (3) learning rates in variables that a
resumed run can change. The arithmetic is Keras' own, and tests check each kind
against a Keras optimizer step by step.

Every update function here receives dense gradients: `global_gradients`, the one source of the generated
steps' gradients, densifies an embedding's tf.IndexedSlices (`dense`), so an update written with plain Python
arithmetic (`(1 - rho) * grad`, which IndexedSlices does not support) works for every weight.
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


def dense(gradient: tf.Tensor | tf.IndexedSlices | None) -> tf.Tensor | None:
    """A sparse gradient (an embedding's IndexedSlices: one slice per occurrence of an id) as the dense tensor of
    the variable's shape, the slices of a repeated id summed: the gradient the loss defines, which every
    optimizer here updates every row with (docs/training.md "Adam on an embedding").

    Why dense rather than the summed slices of the ids seen: the updates are Keras' dense formulas on dense
    slots (m and v decay on rows the batch did not touch), so they densify anyway; `train.accumulate`'s
    accumulators are dense; and a sparse value reaching an update written with Python arithmetic crashed it
    (rmsprop centered, lion: `float * IndexedSlices`). Clipping sees the same dense gradient, so `value` bounds
    each row's summed gradient, not each occurrence, and `global_norm` measures the norm the gradient has."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)  # TensorFlow's conversion sums the slices of a repeated index
    return gradient


def clip(gradients: Grads, *, global_norm: float | None = None, value: float | None = None) -> list[tf.Tensor]:
    gradients = [dense(g) for g in gradients]  # already dense from global_gradients; kept for direct callers
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


def global_gradients(tape: tf.GradientTape, loss: tf.Tensor, variables: Vars,
                     scale: tf.Tensor | None = None) -> list[tf.Tensor]:
    """The global batch's gradients of `loss` (times the loss scale `scale` under mixed_float16), the same on every
    replica: what one process computes on the whole batch, each dense (an embedding's IndexedSlices through
    `dense`). Clipping and the updates come after it.

    Under R replicas each replica's loss is the mean over its slice (batch_size / R rows). TensorFlow's convention
    for custom loops under a strategy is followed (tf.nn.compute_average_loss over the global batch, gradients
    all-reduced with SUM): each replica's backward pass starts from `scale / R` (1 / R in float32), the gradient
    of its rows' share of the global batch's mean loss, and the SUM over replicas is the global gradient. The loss
    value itself stays the slice's mean (the progress line and the metrics average it over replicas), and terms
    that are the same on every replica (weight penalties) come out once, as the seed is linear.
    Why not start from `scale` and all-reduce with MEAN, equal in exact arithmetic: every intermediate float16
    gradient of a replica's backward pass would be R times one process's (per row, d loss / d logits is
    scale / (batch_size / R) instead of scale / batch_size), so a replica overflows float16 at an R times smaller
    loss scale and skips updates one process makes. With the seed divided by R a replica's float16 magnitudes are
    one process's, and so is the skip decision. For a power-of-two R the division is exact and float32 results
    are bitwise those of the MEAN; otherwise they differ in the last bit. One replica (or no strategy): the
    backward pass starts from `scale` (from 1 without one) and the gradients pass as they are.
    """
    context = tf.distribute.get_replica_context()
    replicas = 1 if context is None else context.num_replicas_in_sync
    if replicas == 1:
        return [dense(g) for g in tape.gradient(loss, variables, output_gradients=scale)]
    seed = (tf.constant(1.0, loss.dtype) if scale is None else scale) / replicas
    gradients = tape.gradient(loss, variables, output_gradients=seed)
    # Densified after the all-reduce: an embedding's slices travel between replicas as slices (the ids seen),
    # not as the whole table.
    reduced: list[tf.Tensor] = context.all_reduce(tf.distribute.ReduceOp.SUM, list(gradients))
    return [dense(g) for g in reduced]
