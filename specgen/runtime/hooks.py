"""What `specgen train` asks of the training features beyond the generated steps, at fixed points.

The session calls these and never names a feature. Each point is a list of per-feature functions that
live with their feature's runtime code (specgen/runtime/lib/<feature>.py) and decide from the generated
classes' Protocols (lib/interface.py) whether they apply: a spec without the feature passes through
them unchanged. A new feature that needs the runtime adds its function to the list of its point here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from specgen.ir.model import ModelIR
from specgen.ir.training.model import TrainIR
from specgen.ir.training.terms import LossTermIR
from specgen.kinds import features
from specgen.runtime.lib import ema, pruning, target_networks
from specgen.runtime.lib.interface import (
    GeneratedModel,
    GeneratedTrainer,
    OptionalState,
    ProgressReporter,
    Tensor,
    TermReporter,
)
from specgen.runtime.pruning_state import mask_variables, restore_targets

__all__ = ["after_restore", "checkpoint_meta", "evaluation_weights", "fine_tuning_targets", "fine_tuning_variables",
           "loss_scalars", "refusal"]

AfterRestore = Callable[[GeneratedModel, GeneratedTrainer, Mapping[str, Tensor], frozenset[str]], None]
# In this order: the masks zero the restored weights before EMA shadows and target copies are taken from them.
AFTER_RESTORE: tuple[AfterRestore, ...] = (pruning.after_restore, ema.after_restore, target_networks.after_restore)
# Each adds its keys to a checkpoint's meta.json, after `spec`, `overrides` and `data`.
CHECKPOINT_META: tuple[Callable[[GeneratedTrainer], dict[str, Any]], ...] = (target_networks.checkpoint_meta,)


def fine_tuning_targets(ir: ModelIR) -> dict[str, tuple[tuple[int, ...], str]]:
    """What a `checkpoint.restore` plan fills for a new run: model variables and what features keep beside them."""
    return restore_targets(ir)


def fine_tuning_variables(ir: ModelIR, model: GeneratedModel) -> dict[str, Tensor]:
    """The variables of `fine_tuning_targets`, by the same keys."""
    return model.variables_by_path() | mask_variables(ir, model)


def after_restore(model: GeneratedModel, trainer: GeneratedTrainer, variables: Mapping[str, Tensor],
                  restored: frozenset[str]) -> None:
    """After a fine-tuning restore (`restored`: the keys the plan filled): state the trainer derived from the
    initial weights when it was built is derived again from the restored ones."""
    for hook in AFTER_RESTORE:
        hook(model, trainer, variables, restored)


def checkpoint_meta(trainer: GeneratedTrainer) -> dict[str, Any]:
    """What the features add to a checkpoint's meta.json."""
    meta: dict[str, Any] = {}
    for hook in CHECKPOINT_META:
        meta.update(hook(trainer))
    return meta


def evaluation_weights(trainer: GeneratedTrainer, train: TrainIR) -> AbstractContextManager[None]:
    """The weights the eval stage runs on, in place inside the block (the EMA shadows when train.ema.eval)."""
    return ema.evaluation_weights(trainer, train)


def loss_scalars(trainer: GeneratedTrainer, terms: tuple[LossTermIR, ...], loss: float) -> dict[str, float]:
    """TensorBoard's `loss/<term name>` scalars of the last micro-batch (a lone term is the loss itself)."""
    if isinstance(trainer, TermReporter):
        return {f"loss/{name}": float(value) for name, value in trainer.loss_terms().items()}
    return {f"loss/{term.name}": loss for term in terms}




def progress_values(trainer: GeneratedTrainer) -> dict[str, float]:
    """What the trainer reports beside the metrics on each progress line and to TensorBoard."""
    if isinstance(trainer, ProgressReporter):
        return {name: float(value) for name, value in trainer.progress_values().items()}
    return {}


def absent_optional(trainer: GeneratedTrainer, saved: set[str]) -> set[str]:
    """The trainer's optional checkpoint keys that a checkpoint (its keys: `saved`) lacks: a run at another
    train.precision wrote it; the resume leaves them at their first values."""
    return set(trainer.optional_state()) - saved if isinstance(trainer, OptionalState) else set()


def notes(trainer: GeneratedTrainer) -> list[str]:
    """Log lines the trainer kept since the last call (a step kind that reports iterations it kept no step
    from); the list is emptied, so each line is printed once."""
    kept = getattr(trainer, "notes", None)
    if not isinstance(kept, list):
        return []
    lines = list(kept)
    kept.clear()
    return lines


def refusal(ir: ModelIR, beside: str) -> str | None:
    """Why the spec's features do not combine with `beside` (kinds/features: the compatibility table)."""
    return features.refusal(ir, beside)
