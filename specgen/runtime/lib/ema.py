"""The runtime's side of `train.ema` (the shadows themselves are updated by `optimizers.ema` in train.py).

Each function reaches the shadows through the trainer's Protocol (`ema_variables()`, in `trainable` order,
empty without train.ema), so a spec without EMA passes through them unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from specgen.ir.training.model import TrainIR
from specgen.kinds.features import ema
from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer, Tensor


def after_restore(model: GeneratedModel, trainer: GeneratedTrainer, variables: Mapping[str, Tensor],
                  restored: frozenset[str]) -> None:
    """The shadows were copied from the initial weights when the trainer was built: start them from the
    restored ones (a fine-tuning restore)."""
    for path, shadow in zip(trainer.trainable_paths, trainer.ema_variables(), strict=False):
        shadow.assign(variables[path])


@contextmanager
def evaluation_weights(trainer: GeneratedTrainer, train: TrainIR) -> Iterator[None]:
    """With train.ema.eval, the shadows stand in for the trained weights inside the block, and the trained
    weights are put back after it, whatever happens in it."""
    shadows = ema.of(train)
    swap = shadows is not None and shadows.eval
    saved: list[Any] = [v.read_value() for v in trainer.trainable] if swap else []
    if swap:
        for var, shadow in zip(trainer.trainable, trainer.ema_variables(), strict=True):
            var.assign(shadow)
    try:
        yield
    finally:
        if swap:
            for var, value in zip(trainer.trainable, saved, strict=True):
                var.assign(value)
