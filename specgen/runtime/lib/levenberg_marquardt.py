"""Levenberg-Marquardt iterations for squared-error fits on the whole training set, as MINPACK's lmder does them.

One iteration (one "epoch" of `specgen train`, one Jacobian evaluation, one `njev` of scipy's
`least_squares(method="lm")`, which calls lmder):

1. r = predictions - labels (flattened) and its Jacobian J = dr/dw from `GradientTape.jacobian`;
2. the scaling D: the column norms of J, kept as their running maximum (a zero column starts at 1);
3. tries until one is kept, at most `max_tries`: the step p minimizing ‖J p + r‖ within the trust region
   ‖D p‖ <= Δ, found as MINPACK's lmpar finds it (p solves (JᵀJ + λ·DᵀD) p = -Jᵀr, λ = 0 when the
   Gauss-Newton step is within 1.1·Δ, otherwise λ with ‖D p‖ within 10% of Δ); then ρ, the actual
   over the predicted reduction of ‖r‖², moves Δ and λ (`update_bound`) and the step is kept when ρ >= 1e-4.

Where lmder uses a QR factorization of J with column pivoting, this uses the SVD of J·D⁻¹: the same
step for every λ, and each λ of the search costs vector operations only. Everything is float64 (the
weights and the model stay float32). Hand-written because TensorFlow has no trust-region least-squares
solver, and the step has to run inside the generated trainer's graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

FACTOR = 100.0  # lmder's `factor`: the first step bound is FACTOR·‖D w‖ (scipy passes 100, MINPACK's advice)
ACCEPT = 1e-4  # lmder keeps a step when ρ >= 1e-4
# The iteration stops as stalled when the step bound Δ falls to this fraction of ‖D w‖ (lmder's xtol test,
# with float32's resolution in place of xtol: a step that much shorter than the weights cannot change them).
STALL = 2.0**-23
LMPAR_ITERATIONS = 10  # lmpar's bound on its search for λ
DWARF = 2.2250738585072014e-308  # lmpar's smallest positive float64
ACCEPTED, REJECTED, STALLED = 0, 1, 2  # what `step` returns


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


def _norm(v: tf.Tensor) -> tf.Tensor:
    return tf.norm(tf.cast(v, tf.float64))


def _scale(jac: tf.Tensor, scales: Sequence[tf.Variable], first: tf.Tensor) -> tf.Tensor:
    """D: lmder's `diag` with mode 1, the running maximum of J's column norms (a zero column starts at 1)."""
    norms = tf.norm(jac, axis=0)
    flat = tf.concat([tf.reshape(tf.cast(s, tf.float64), [-1]) for s in scales], axis=0)
    scale = tf.maximum(flat, tf.where(first & tf.equal(norms, 0.0), tf.ones_like(norms), norms))
    sizes = [s.shape.num_elements() for s in scales]
    for slot, piece in zip(scales, tf.split(scale, sizes), strict=True):
        slot.assign(tf.reshape(tf.cast(piece, slot.dtype), slot.shape))
    # As stored (float32 in the generated trainer): a resumed run continues with the same D.
    return tf.concat([tf.reshape(tf.cast(s, tf.float64), [-1]) for s in scales], axis=0)


def lmpar(s: tf.Tensor, c: tf.Tensor, delta: tf.Tensor, par: tf.Tensor, full_rank: tf.Tensor
          ) -> tuple[tf.Tensor, tf.Tensor]:
    """MINPACK's lmpar in the SVD basis of J·D⁻¹ = U·diag(s)·Vᵀ, c = Uᵀr: (λ, z) with the scaled step D·p = V·z.

    z(λ) = -s·c / (s² + λ). λ = 0 when the Gauss-Newton step is within 1.1·Δ; otherwise Newton's method on
    1/‖z(λ)‖ (Hebden's, as lmpar), kept inside [parl, paru], until ‖z‖ is within 10% of Δ or 10 iterations.
    """
    nonzero = s > 0
    z = tf.where(nonzero, -c / tf.where(nonzero, s, tf.ones_like(s)), tf.zeros_like(c))
    dxnorm = tf.norm(z)
    fp = dxnorm - delta
    gauss_newton = fp <= 0.1 * delta
    # The Newton step from λ = 0 bounds λ below when J has full column rank; ‖D⁻¹Jᵀr‖ / Δ bounds it above.
    inverse = tf.where(nonzero, 1.0 / tf.where(nonzero, s, tf.ones_like(s)), tf.zeros_like(s))
    parl = tf.where(full_rank, fp / delta / (tf.reduce_sum(tf.square(z * inverse)) / dxnorm**2),
                    tf.constant(0.0, tf.float64))
    gnorm = tf.norm(s * c)
    paru = gnorm / delta
    paru = tf.where(tf.equal(paru, 0.0), DWARF / tf.minimum(delta, 0.1), paru)
    par = tf.minimum(tf.maximum(par, parl), paru)
    par = tf.where(tf.equal(par, 0.0), gnorm / dxnorm, par)
    for i in tf.range(tf.where(gauss_newton, 0, LMPAR_ITERATIONS)):
        par = tf.where(tf.equal(par, 0.0), tf.maximum(tf.constant(DWARF, tf.float64), 0.001 * paru), par)
        z = -s * c / (tf.square(s) + par)
        dxnorm, previous = tf.norm(z), fp
        fp = dxnorm - delta
        if tf.abs(fp) <= 0.1 * delta or (parl == 0.0 and fp <= previous and previous < 0.0) \
                or i == LMPAR_ITERATIONS - 1:
            break
        correction = fp / delta / (tf.reduce_sum(tf.square(z) / (tf.square(s) + par)) / dxnorm**2)
        parl = tf.where(fp > 0.0, tf.maximum(parl, par), parl)
        paru = tf.where(fp < 0.0, tf.minimum(paru, par), paru)
        par = tf.maximum(parl, par + correction)
    par = tf.where(gauss_newton, tf.constant(0.0, tf.float64), par)
    return par, z


def update_bound(delta: tf.Tensor, par: tf.Tensor, pnorm: tf.Tensor, ratio: tf.Tensor, actred: tf.Tensor,
                 dirder: tf.Tensor, blown_up: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """lmder's rule for the step bound Δ and λ after a try: (Δ, λ).

    ρ <= 0.25: Δ shrinks to μ·min(Δ, 10‖Dp‖) and λ grows to λ/μ, μ = 0.5, or where the sum of squares grew,
    the minimizer of the quadratic through the directional derivative (clamped to [0.1, 0.5]; 0.1 when ‖r‖
    grew tenfold, `blown_up`). ρ >= 0.75 (or λ = 0 and ρ > 0.25): Δ = 2‖Dp‖, λ halves. Otherwise both stay.
    """
    quadratic = 0.5 * dirder / (dirder + 0.5 * actred)
    shrink = tf.where(actred < 0.0, quadratic, tf.constant(0.5, tf.float64))
    shrink = tf.where(blown_up | (shrink < 0.1), tf.constant(0.1, tf.float64), shrink)
    grow = tf.equal(par, 0.0) | (ratio >= 0.75)
    new_delta = tf.where(ratio <= 0.25, shrink * tf.minimum(delta, pnorm / 0.1), tf.where(grow, pnorm / 0.5, delta))
    new_par = tf.where(ratio <= 0.25, par / shrink, tf.where(grow, 0.5 * par, par))
    return new_delta, new_par


def _first_bound(s: tf.Tensor, c: tf.Tensor, xnorm: tf.Tensor, damping: tf.Tensor) -> tf.Tensor:
    """Δ of the first iteration: lmder's FACTOR·‖D w‖ (FACTOR when w = 0); with `initial_damping` λ₀ set
    (the damping variable starts above 0), the length of the λ₀-damped step, so that it is the first one tried."""
    minpack = tf.where(xnorm > 0.0, FACTOR * xnorm, tf.constant(FACTOR, tf.float64))
    return tf.where(damping > 0.0, tf.norm(s * c / (tf.square(s) + damping)), minpack)


def _reductions(fnorm: tf.Tensor, fnorm1: tf.Tensor, s: tf.Tensor, z: tf.Tensor, par: tf.Tensor
                ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """lmder's scaled actual and predicted reductions of ‖r‖² and its directional derivative."""
    actred = tf.where(0.1 * fnorm1 < fnorm, 1.0 - tf.square(fnorm1 / fnorm), tf.constant(-1.0, tf.float64))
    along = tf.square(tf.norm(s * z) / fnorm)  # ‖J p‖² / ‖r‖²
    damped = tf.square(tf.sqrt(par) * tf.norm(z) / fnorm)
    return actred, along + 2.0 * damped, -(along + damped)


def step(variables: Sequence[tf.Variable], residual_fn: Callable[[], tf.Tensor], damping: tf.Variable,
         step_bound: tf.Variable, scales: Sequence[tf.Variable], first: tf.Tensor, *, max_tries: int) -> tf.Tensor:
    """One iteration (see the module doc); updates `variables`, `damping` (λ), `step_bound` (Δ) and `scales` (D);
    `first` is true before the first iteration. Returns ACCEPTED, REJECTED (max_tries tries, none kept; the
    next iteration goes on with the smaller Δ) or STALLED (Δ reached STALL·‖D w‖, or r or Jᵀr is 0)."""
    r, jac = jacobian(residual_fn, variables)
    r, jac = tf.cast(r, tf.float64), tf.cast(jac, tf.float64)
    scale = _scale(jac, scales, first)
    s, u, v = tf.linalg.svd(jac / scale, full_matrices=False)
    c = tf.linalg.matvec(u, r, transpose_a=True)
    start = [tf.identity(var.read_value()) for var in variables]
    x = tf.concat([tf.reshape(tf.cast(w, tf.float64), [-1]) for w in start], axis=0)
    xnorm, fnorm = tf.norm(scale * x), tf.norm(r)
    par = tf.cast(damping, tf.float64)
    delta = tf.where(first, _first_bound(s, c, xnorm, par), tf.cast(step_bound, tf.float64))
    full_rank = (tf.shape(jac)[0] >= tf.shape(jac)[1]) & tf.reduce_all(s > 0.0)
    movable = (fnorm > 0.0) & (tf.norm(s * c) > 0.0)
    outcome = tf.where(movable, REJECTED, STALLED)
    for _ in tf.range(tf.where(movable, max_tries, 0)):
        if delta <= STALL * xnorm:
            outcome = tf.constant(STALLED)
            break
        par, z = lmpar(s, c, delta, par, full_rank)
        pnorm = tf.norm(z)
        delta = tf.where(first, tf.minimum(delta, pnorm), delta)
        _assign(variables, start, tf.linalg.matvec(v, z) / scale)
        fnorm1 = _norm(residual_fn())
        actred, prered, dirder = _reductions(fnorm, fnorm1, s, z, par)
        ratio = tf.where(tf.equal(prered, 0.0), tf.constant(0.0, tf.float64), actred / prered)
        delta, par = update_bound(delta, par, pnorm, ratio, actred, dirder, 0.1 * fnorm1 >= fnorm)
        if ratio >= ACCEPT:
            outcome = tf.constant(ACCEPTED)
            break
    if outcome != ACCEPTED:
        _assign(variables, start, tf.zeros_like(x))
    damping.assign(tf.cast(par, damping.dtype))
    step_bound.assign(tf.cast(delta, step_bound.dtype))
    return outcome


def note(name: str, step: int, outcome: int, previous: int, max_tries: int) -> str | None:
    """What the log says about an iteration that kept no step: each rejection, and the first of a run of stalls.

    Returned, not printed: the trainer keeps it in `notes` and the command prints it (runtime/hooks.py).
    """
    if outcome == REJECTED:
        return (f"note: levenberg_marquardt optimizer '{name}': step {step} rejected: none of its {max_tries} tries "
                "lowered the loss enough; the weights stay and the next iteration tries shorter steps")
    if outcome == STALLED and previous != STALLED:
        return (f"note: levenberg_marquardt optimizer '{name}': stalled at step {step}: the step bound reached "
                f"{STALL:.2g}·‖D·w‖ (float32's resolution of the weights) or the gradient is 0, so no step can lower "
                "the loss: a minimum, or a stationary point; the weights stay, and later iterations change nothing")
    return None
