"""Target-network updates that generated train.py files call after each optimizer update.

Each function takes the target copies and their online variables in pairs (same order, same shapes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer, TargetFollowingTrainer, Tensor


def copy(copies: list[tf.Variable], online: list[tf.Variable]) -> None:
    """target <- online (how targets start, and a hard update)."""
    for target, source in zip(copies, online, strict=True):
        target.assign(source)


def soft(copies: list[tf.Variable], online: list[tf.Variable], tau: float) -> None:
    """Polyak averaging after every update: target <- (1 - tau) * target + tau * online."""
    for target, source in zip(copies, online, strict=True):
        target.assign((1.0 - tau) * target + tau * source)


def hard(copies: list[tf.Variable], online: list[tf.Variable], step: tf.Variable, every_steps: int) -> None:
    """target <- online after the update that makes `step` a multiple of `every_steps`."""

    due = step % every_steps == 0

    def assign() -> tf.Tensor:
        copy(copies, online)
        return tf.constant(True)

    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        # Under replicas an assign is a synchronization point, which tf.cond may not hold (merge_call inside a
        # branch): assign on every update, the online value when due and the copy's own value otherwise. tf.where
        # selects, so both are bitwise what a one-device copy (or no copy) gives; pruning.update_masks does the same.
        for target, source in zip(copies, online, strict=True):
            target.assign(tf.where(due, source, target))
        return
    # tf.cond rather than a Python `if`: `step` is a tensor inside the train step's tf.function.
    tf.cond(due, assign, lambda: tf.constant(False))


def after_restore(model: GeneratedModel, trainer: GeneratedTrainer, variables: Mapping[str, Tensor],
                  restored: frozenset[str]) -> None:
    """Targets were copied from the initial weights when the trainer was built: after a fine-tuning restore
    they copy the restored online weights, unless the restore filled the target itself (a restore map may
    address it by path)."""
    if isinstance(trainer, TargetFollowingTrainer):
        for online, target in trainer.target_pairs():
            if target not in restored:
                variables[target].assign(variables[online])


def checkpoint_meta(trainer: GeneratedTrainer) -> dict[str, Any]:
    """meta.json's `targets`: each target variable beside its online one, by path."""
    if isinstance(trainer, TargetFollowingTrainer):
        return {"targets": {target: online for online, target in trainer.target_pairs()}}
    return {}
