"""`train.accumulate` > 1: gradients of several micro-batches summed, one update from their mean.

A step kind: the skeleton's gradient step becomes `accumulate_step` + `apply_accumulated`
(templates/tf/steps/accumulate.py.j2); the runtime drives them (specgen/runtime/placement/replicas.py).
Its spec key and IR field (`TRAIN_KEY`), checkpoint keys, training state and render plan live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from specgen.fields.base import PositiveInt
from specgen.kinds.features.base import FeatureDef, StateRow, TrainKey

ROOT = "accumulators"  # first part of every accumulator's checkpoint key
MICRO_BATCHES = f"{ROOT}/micro_batches"  # the count of micro-batches summed since the last update


TRAIN_KEY = TrainKey("accumulate", PositiveInt, Field(1, description="Micro-batches per optimizer update."),
                     after="epochs", ir_type=int, ir_default=lambda: 1)


def of(train: Any) -> int:
    """train.accumulate of a TrainIR: micro-batches per update (1: no accumulation)."""
    return int(train.accumulate)


def accumulator(path: str) -> str:
    """The checkpoint key of a trainable weight's gradient accumulator."""
    return f"{ROOT}/{path}"


def variables(training: Any, trainable: list[str], shapes: dict[str, tuple[int, ...]]) -> list[StateRow]:
    """One float32 accumulator per trainable weight and the micro-batch count, in the optimizer collection."""
    if training.train is None or of(training.train) <= 1:
        return []
    rows: list[StateRow] = [(accumulator(p), shapes[p], "float32", ("optimizer",)) for p in trainable]
    return [*rows, (MICRO_BATCHES, (), "int64", ("optimizer",))]


@dataclass(frozen=True)
class AccumulatePlan:
    """templates/tf/features/accumulate.py.j2's context."""

    key: str  # the accumulators' key prefix (ROOT)
    micro_batches: str


def plan(ir: Any) -> AccumulatePlan:
    return AccumulatePlan(ROOT, MICRO_BATCHES)


FEATURE = FeatureDef(
    name="accumulate",
    doc="micro-batches per optimizer update: their gradients are summed, the update uses the mean",
    spec_keys=("train.accumulate",),
    enabled=lambda ir: of(ir.training.train) > 1,
    train_key=TRAIN_KEY,
    table=(("accumulate", "`train.accumulate` > 1"),),
    state=("specgen.kinds.features.accumulate.accumulator", "specgen.kinds.features.accumulate.MICRO_BATCHES"),
    partial="tf/features/accumulate.py.j2",
    hooks=("init", "state"),
    step="tf/steps/accumulate.py.j2",
    runtime=("specgen.runtime.placement.replicas.Replicas.accumulated_updates",),
    after=("levenberg_marquardt",),  # its step sums micro-batches; apply() then sees the summed gradients
    plan=plan,
    variables=variables,
    roots=(ROOT,),
)
