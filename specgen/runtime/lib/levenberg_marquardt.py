"""Levenberg-Marquardt iterations for squared-error fits on the whole training set.

One iteration (one "epoch" of `specgen train`, one Jacobian evaluation):

1. r = predictions - labels (flattened) and its Jacobian J = dr/dw from `GradientTape.jacobian`;
2. solve (JᵀJ + λ·D) δ = -Jᵀr with Marquardt's scaling D = diag(JᵀJ) (the squared column norms of J), kept
   as its running maximum over the iterations as MINPACK's lmder does (Moré 1978): the step does not
   depend on the units of each weight, and a weight whose column shrinks for a while (a saturating
   tanh unit) keeps the damping it had instead of taking a huge step that is then refused;
3. if the loss at w + δ is below the loss at w, keep the step and divide λ by the factor ν (default 10);
   otherwise multiply λ by ν and solve again, at most `max_tries` times, then keep w unchanged.

JᵀJ, Jᵀr and the solve are float64: the normal equations square J's condition number, which float32
would lose for a badly scaled fit. The weights and the model stay float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

# Floors and bounds that keep the damped system solvable without changing its solution: a weight
# whose column of J is all zeros gets a tiny scale (its δ is then 0), and λ stays where float64
# still tells JᵀJ + λ·D apart from JᵀJ (below) and from λ·D (above).
SCALE_FLOOR = 1e-12  # relative to the largest diagonal entry of JᵀJ
MIN_DAMPING, MAX_DAMPING = 1e-12, 1e12


def residuals(labels: tf.Tensor, predictions: tf.Tensor) -> tf.Tensor:
    """predictions - labels as one vector: the mean_squared_error loss is its mean square."""
    labels = tf.reshape(tf.cast(labels, predictions.dtype), tf.shape(predictions))
    return tf.reshape(predictions - labels, [-1])


def jacobian(residual_fn: Callable[[], tf.Tensor], variables: Sequence[tf.Variable]) -> tuple[tf.Tensor, tf.Tensor]:
    """The residuals and their Jacobian [residuals, weights], weights in `variables` order, each flattened."""
    with tf.GradientTape() as tape:
        r = residual_fn()
    parts = tape.jacobian(r, list(variables))
    count = tf.shape(r)[0]
    return r, tf.concat([tf.reshape(part, [count, -1]) for part in parts], axis=1)


def _assign(variables: Sequence[tf.Variable], start: Sequence[tf.Tensor], delta: tf.Tensor) -> None:
    """w <- start + δ, δ split back into the variables' shapes."""
    sizes = [v.shape.num_elements() for v in variables]
    for var, base, piece in zip(variables, start, tf.split(delta, sizes), strict=True):
        var.assign(base + tf.reshape(tf.cast(piece, var.dtype), var.shape))


def _sum_squares(r: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.square(tf.cast(r, tf.float64)))


def _scale(normal: tf.Tensor, scales: Sequence[tf.Variable]) -> tf.Tensor:
    """D: the running maximum of diag(JᵀJ), kept in `scales` (one slot per variable), floored above 0."""
    flat = tf.concat([tf.reshape(tf.cast(s, tf.float64), [-1]) for s in scales], axis=0)
    scale = tf.maximum(flat, tf.linalg.diag_part(normal))
    sizes = [s.shape.num_elements() for s in scales]
    for slot, piece in zip(scales, tf.split(scale, sizes), strict=True):
        slot.assign(tf.reshape(tf.cast(piece, slot.dtype), slot.shape))
    return tf.maximum(scale, SCALE_FLOOR * tf.reduce_max(scale) + tf.constant(1e-300, tf.float64))


def step(variables: Sequence[tf.Variable], residual_fn: Callable[[], tf.Tensor], damping: tf.Variable,
         scales: Sequence[tf.Variable], *, factor: float, max_tries: int) -> tf.Tensor:
    """One iteration (see the module doc); updates `variables`, `damping` and `scales`; returns whether a
    step was kept."""
    r, jac = jacobian(residual_fn, variables)
    jac = tf.cast(jac, tf.float64)
    normal = tf.matmul(jac, jac, transpose_a=True)
    gradient = tf.linalg.matvec(jac, tf.cast(r, tf.float64), transpose_a=True)
    scale = _scale(normal, scales)
    start = [tf.identity(v.read_value()) for v in variables]
    before = _sum_squares(r)
    lam = tf.cast(damping, tf.float64)
    kept = tf.constant(False)
    for _ in tf.range(max_tries):
        delta = tf.linalg.solve(normal + tf.linalg.diag(lam * scale), -gradient[:, None])[:, 0]
        _assign(variables, start, delta)
        if _sum_squares(residual_fn()) < before:
            lam = tf.maximum(lam / factor, MIN_DAMPING)
            kept = tf.constant(True)
            break
        lam = tf.minimum(lam * factor, MAX_DAMPING)
    if not kept:
        _assign(variables, start, tf.zeros_like(gradient))
    damping.assign(tf.cast(lam, damping.dtype))
    return kept
