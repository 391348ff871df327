"""A resume's learning rates: the spec's, not the checkpoint's (`specgen train --resume` and `--probe --resume`).

A checkpoint's learning-rate variable holds the rate of its last update; `follow_spec_rates` puts the spec's back
after a restore and says where it changed (docs/training.md, "Still allowed")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

import numpy as np
import tensorflow as tf

from specgen.ir.training import OptimizerIR, ScheduleIR
from specgen.kinds.pointers import resolve
from specgen.kinds.schedules import REGISTRY as SCHEDULES
from specgen.runtime.lib import schedules
from specgen.runtime.lib.interface import GeneratedTrainer


def rates_before_restore(optimizers: Sequence[OptimizerIR], trainer: GeneratedTrainer) -> dict[str, np.float32]:
    """Each learning-rate variable as the spec (with its --set overrides) builds it, read before a restore replaces
    it: a constant rate, or a schedule's first rate. levenberg_marquardt has none."""
    return {o.name: np.float32(trainer.learning_rate(o.name).numpy()) for o in optimizers if o.learning_rate_key}


def follow_spec_rates(optimizers: Sequence[OptimizerIR], trainer: GeneratedTrainer, spec: dict[str, np.float32],
                      step: int, checkpoint: str, quiet: AbstractSet[str] = frozenset()) -> list[str]:
    """After a restore at `step`, make every learning rate the spec's again (`spec`: rates_before_restore's), and
    return a note per rate that changed since `checkpoint`, but those of the optimizers in `quiet`.

    Why: a checkpoint's learning-rate variable holds the rate of its last update, and a constant rate's update reads
    that variable, so an edited constant (or a schedule edited into one) went unused while spec.resolved.yaml
    recorded it; a schedule assigns the variable from the step at each update. A resume reinterprets nothing
    (docs/training.md): the spec's rates apply, as a --set's always did. It is the only hyperparameter a
    checkpoint holds (Keras 3 holds its constant learning rate in a variable too); `iterations`, slots and
    levenberg_marquardt's damping are state, and are restored."""
    notes = []
    for o in optimizers:
        if not o.learning_rate_key:
            continue
        variable = trainer.learning_rate(o.name)
        saved = np.float32(variable.numpy())
        if o.schedule is None:
            variable.assign(spec[o.name])  # a schedule assigns it from the step at its next update
        last, new = _spec_rate(o, spec[o.name], step)
        # A compiled step may round a schedule's rate an ulp away from this eager one: not a change.
        changed = saved != last if o.schedule is None else not np.isclose(saved, last, rtol=1e-6, atol=0)
        if changed and o.name not in quiet:
            notes.append(f"optimizers.{o.name}.learning_rate changed since {checkpoint} ({saved!s} -> {new}): "
                         "training goes on at the spec's rate, not the checkpoint's")
    return notes


def _spec_rate(optimizer: OptimizerIR, first: np.float32, step: int) -> tuple[np.float32, str]:
    """The rate the spec gives a checkpoint's last update at `step` (`first` before any update: the variable's first
    value), and the rate it trains at from there, as a note says it (a schedule's, with its kind)."""
    if optimizer.schedule is None:
        return first, str(first)  # str: float32's shortest digits (0.2), where a format shows float64's
    schedule = spec_schedule(optimizer.schedule)
    last = first if step == 0 else np.float32(schedule(tf.constant(step - 1, tf.int64)).numpy())
    now = np.float32(schedule(tf.constant(step, tf.int64)).numpy())
    return last, f"{optimizer.schedule.kind}: {now!s} at step {step}"


def spec_schedule(schedule: ScheduleIR) -> Callable[[tf.Tensor], tf.Tensor]:
    """The schedule as the generated train.py builds it (render/train_plan.py): the kind's runtime function with its
    keys by name (`keyword_call`, every kind's), inside the shared warm-up. Built again here rather than by eval of
    render/train_plan.py's text (nothing outside the generated modules runs generated text), so a kind given another
    `call` needs the same here: tests/test_resume_lr_r12.py compares the two for every kind of the registry."""
    rate = resolve(SCHEDULES[schedule.kind].runtime)(**dict(schedule.args))
    return schedules.warmup(rate, schedule.warmup_steps)
