"""What `specgen train` asks of the training features beyond the generated steps, at fixed points.

The session calls these and never names a feature. Each point loops over the functions the features
declare for it (FeatureDef.runtime_hooks, specgen/kinds/features), in the one pipeline order; they live
with their feature's runtime code (specgen/runtime/lib/<feature>.py) and decide from the generated
classes' Protocols (lib/interface.py) whether they apply: a spec without the feature passes through
them unchanged. A new feature that needs the runtime names its functions in its own module, not here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from functools import cache
from typing import Any

from specgen.ir.model import ModelIR
from specgen.ir.training.model import TrainIR
from specgen.ir.training.terms import LossTermIR
from specgen.kinds import compat, features
from specgen.runtime.lib.interface import (
    GeneratedModel,
    GeneratedTrainer,
    OptionalState,
    ProgressReporter,
    Tensor,
    TermReporter,
)

__all__ = ["after_restore", "checkpoint_meta", "evaluation_weights", "fine_tuning_targets", "fine_tuning_variables",
           "loss_scalars", "refusal"]

# The points a feature's runtime_hooks may name, with each function's signature:
RUNTIME_POINTS = (
    "restore_targets",  # (ir) -> {key: (shape, dtype)}: what a fine-tuning restore fills beside the model variables
    "restore_variables",  # (ir, model) -> {key: variable}: the variables of its restore_targets
    "restore_weights",  # (model, trainer, variables, restored): after a restore, fix the restored weights first
    "after_restore",  # (model, trainer, variables, restored): then derive state from them again
    "checkpoint_meta",  # (trainer) -> dict: keys added to a checkpoint's meta.json, after spec, overrides, data
    "evaluation_weights",  # (trainer, train) -> context manager: the weights the eval stage runs on
)


@cache
def _point(point: str) -> tuple[Callable[..., Any], ...]:
    """The functions the features declare at `point`, in pipeline order."""
    found = []
    for feature in features.PIPELINE_DEFS:
        for name, dotted in feature.runtime_hooks:
            if name not in RUNTIME_POINTS:
                raise RuntimeError(f"feature '{feature.name}' names the unknown runtime point '{name}'")
            if name == point:
                module, _, attr = dotted.rpartition(".")
                found.append(getattr(importlib.import_module(module), attr))
    return tuple(found)


def fine_tuning_targets(ir: ModelIR) -> dict[str, tuple[tuple[int, ...], str]]:
    """What a `checkpoint.restore` plan fills for a new run: model variables and what features keep beside them."""
    targets = {v.path: (v.shape, v.dtype) for v in ir.model_variables}
    for hook in _point("restore_targets"):
        targets |= hook(ir)
    return targets


def fine_tuning_variables(ir: ModelIR, model: GeneratedModel) -> dict[str, Tensor]:
    """The variables of `fine_tuning_targets`, by the same keys."""
    variables: dict[str, Tensor] = model.variables_by_path()
    for hook in _point("restore_variables"):
        variables |= hook(ir, model)
    return variables


def after_restore(model: GeneratedModel, trainer: GeneratedTrainer, variables: Mapping[str, Tensor],
                  restored: frozenset[str]) -> None:
    """After a fine-tuning restore (`restored`: the keys the plan filled): the restored weights are fixed first
    (pruning's masks zero them), then state the trainer derived from the initial weights when it was built is
    derived again from them (EMA shadows, target copies)."""
    for hook in (*_point("restore_weights"), *_point("after_restore")):
        hook(model, trainer, variables, restored)


def checkpoint_meta(trainer: GeneratedTrainer) -> dict[str, Any]:
    """What the features add to a checkpoint's meta.json."""
    meta: dict[str, Any] = {}
    for hook in _point("checkpoint_meta"):
        meta.update(hook(trainer))
    return meta


@contextmanager
def _evaluation_weights(trainer: GeneratedTrainer, train: TrainIR) -> Any:
    with ExitStack() as stack:
        for hook in _point("evaluation_weights"):
            stack.enter_context(hook(trainer, train))
        yield


def evaluation_weights(trainer: GeneratedTrainer, train: TrainIR) -> AbstractContextManager[None]:
    """The weights the eval stage runs on, in place inside the block (the EMA shadows when train.ema.eval)."""
    return _evaluation_weights(trainer, train)


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
    """The trainer's optional checkpoint keys that a checkpoint (its keys: `saved`) lacks: a run under other
    settings wrote it (a feature's optional state was off); the resume leaves them at their first values."""
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
    """Why the spec's features do not combine with `beside` (specgen/kinds/compat.py: the compatibility table)."""
    return compat.refusal(ir, beside)
