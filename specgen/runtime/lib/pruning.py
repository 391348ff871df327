"""Magnitude pruning for generated training modules (the spec's `prune` section, docs/pruning.md).

The schedules are TF Model Optimization's (`tfmot.sparsity.keras.ConstantSparsity`,
`PolynomialDecay`): masks are recomputed at step s when begin_step <= s <= end_step and
(s - begin_step) % frequency == 0, where s counts as TFMOT 0.8's `pruning_step` does: the b-th
update (1-based) sees step b, so step 0 is never one (update_masks). A recomputed mask keeps
exactly max(round(n * (1 - sparsity)), 1) of a weight's n entries, the largest in magnitude;
equal magnitudes are kept in flat (row-major) index order, so the fraction zeroed is the
target's whatever the ties (TFMOT keeps every entry equal to its threshold, so ties can leave it
below the target). Sparsities are computed in float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import tensorflow as tf

from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer, PrunedModel, Tensor


@dataclass(frozen=True)
class Schedule:
    """step -> (whether the masks are recomputed before this update, the target sparsity)."""

    begin_step: int
    end_step: int | None  # None: no end
    frequency: int
    initial_sparsity: float
    final_sparsity: float
    power: float = 1.0
    decays: bool = False  # polynomial_decay; else the sparsity is constant

    def __call__(self, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        step = tf.cast(step, tf.int64)
        inside = step >= self.begin_step
        if self.end_step is not None:
            inside = tf.logical_and(inside, step <= self.end_step)
        turn = tf.equal(tf.math.floormod(step - self.begin_step, self.frequency), 0)
        return tf.logical_and(inside, turn), self.sparsity(step)

    def sparsity(self, step: tf.Tensor) -> tf.Tensor:
        if not self.decays:
            return tf.constant(self.final_sparsity, tf.float64)
        assert self.end_step is not None
        span = float(self.end_step - self.begin_step)
        p = tf.clip_by_value(tf.cast(step - self.begin_step, tf.float64) / span, 0.0, 1.0)
        return self.final_sparsity + (self.initial_sparsity - self.final_sparsity) * (1.0 - p) ** self.power


def constant_sparsity(sparsity: float, *, begin_step: int, end_step: int | None, frequency: int) -> Schedule:
    return Schedule(begin_step, end_step, frequency, sparsity, sparsity)


def polynomial_decay(initial_sparsity: float, final_sparsity: float, *, begin_step: int, end_step: int,
                     frequency: int, power: float) -> Schedule:
    """final + (initial - final) * (1 - p) ** power, p = clip((step - begin_step) / (end_step - begin_step), 0, 1)."""
    return Schedule(begin_step, end_step, frequency, initial_sparsity, final_sparsity, power, decays=True)


def magnitude_mask(weight: tf.Tensor, sparsity: tf.Tensor) -> tf.Tensor:
    """1 for the max(round(n * (1 - sparsity)), 1) largest |weight| entries (ties: lower flat index first), else 0."""
    flat = tf.reshape(tf.abs(weight), [-1])
    size = flat.shape[0]
    # tf.round rounds half to even, as TFMOT's k does.
    keep = tf.cast(tf.maximum(tf.round(size * (1.0 - tf.cast(sparsity, tf.float64))), 1.0), tf.int32)
    # A stable descending sort ranks equal magnitudes by index; the rank of each entry is the inverse permutation.
    rank = tf.math.invert_permutation(tf.argsort(flat, direction="DESCENDING", stable=True))
    return tf.reshape(tf.cast(rank < keep, weight.dtype), tf.shape(weight))


def update_masks(weights: Sequence[tf.Variable], masks: Sequence[tf.Variable], schedule: Schedule,
                 updates_done: tf.Tensor, when: tf.Tensor | bool = True) -> None:
    """Before the forward pass of update `updates_done + 1`: at a pruning step (and `when`), recompute each mask from
    its weight's magnitudes, then zero what it prunes.

    The schedule sees step `updates_done + 1`, as TF Model Optimization 0.6 to 0.8 counts: PruneLowMagnitude.call
    increments `pruning_step` (0 after UpdatePruningStep.on_train_begin) before its conditional mask update, so its
    b-th batch evaluates the schedule at b and never at 0 (pruning_wrapper.py asserts pruning_step >= 1). With
    begin_step 0 the first update that prunes is update `frequency`; the initial weights are never ranked. A resumed
    run restores `updates_done` (the global step), so it continues on the same updates.
    """
    prune, sparsity = schedule(tf.cast(updates_done, tf.int64) + 1)

    def recompute() -> tf.Tensor:
        for weight, mask in zip(weights, masks, strict=True):
            mask.assign(magnitude_mask(weight, sparsity))
            weight.assign(masked(weight, mask))
        return tf.constant(True)

    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        # Under replicas an assign is a synchronization point, which tf.cond may not hold: assign on every step,
        # the new mask at a pruning step and the old one otherwise (then both assigns change nothing).
        due = tf.logical_and(prune, when)
        for weight, mask in zip(weights, masks, strict=True):
            mask.assign(tf.where(due, magnitude_mask(weight, sparsity), mask))
            weight.assign(masked(weight, mask))
        return
    tf.cond(tf.logical_and(prune, when), recompute, lambda: tf.constant(False))


def apply_masks(variables: Sequence[tf.Variable], masks: Sequence[tf.Variable]) -> None:
    """variable = masked(variable, mask): after every update the pruned entries are exactly 0 (an optimizer's momentum,
    Adam's moments or weight decay would otherwise move them off zero)."""
    for var, mask in zip(variables, masks, strict=True):
        var.assign(masked(var, mask))


def masked(value: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """`value` where the mask is 1, +0.0 elsewhere (value * mask would leave -0.0 under negative entries)."""
    return tf.where(mask > 0, value, tf.zeros_like(value))


def after_restore(model: GeneratedModel, trainer: GeneratedTrainer, variables: Mapping[str, Tensor],
                  restored: frozenset[str]) -> None:
    """After a fine-tuning restore of weights and masks: they agree from the first step on, as after every update."""
    if isinstance(model, PrunedModel):
        apply_masks([variables[path] for path in model.masks], list(model.masks.values()))
