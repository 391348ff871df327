"""`train.clip` (all gradients together) and an optimizer's own `clip` (its gradients, after that).

The optimizer's own clip renders through its optimizer plan (render/train_plan.py OptimizerPlan.clip):
the `optimizer_gradients` hook is called with it. Both resolve to a `ClipIR` (`resolve`); `train.clip` is this
feature's TRAIN_KEY, an optimizer's own is resolved with the optimizer (ir/training/build.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from specgen.kinds.features.base import FeatureDef, TrainKey
from specgen.kinds.optimizers import Clip


@dataclass(frozen=True)
class ClipIR:
    kind: str  # 'global_norm' or 'value'
    value: float


def resolve(clip: Any) -> ClipIR | None:
    """A validated clip mapping (train.clip or an optimizer's clip) as its IR; None when it is left out."""
    if clip is None:
        return None
    return ClipIR("global_norm", clip.global_norm) if hasattr(clip, "global_norm") else ClipIR("value", clip.value)


def of(train: Any) -> ClipIR | None:
    """train.clip of a TrainIR."""
    clip: ClipIR | None = train.clip
    return clip


TRAIN_KEY = TrainKey("clip", Clip | None, Field(None), after="accumulate", ir_type=ClipIR | None,
                     ir_default=lambda: None, resolve=resolve)


@dataclass(frozen=True)
class ClipPlan:
    """templates/tf/features/clip.py.j2's context: train.clip, or None fields when only optimizers clip."""

    kind: str | None  # global_norm or value: the optimizers.clip keyword
    value: float | None


def plan(ir: Any) -> ClipPlan:
    clip = of(ir.training.train)
    return ClipPlan(None, None) if clip is None else ClipPlan(clip.kind, clip.value)


FEATURE = FeatureDef(
    name="clip",
    doc="gradient clipping by global norm or value, over all gradients and per optimizer",
    spec_keys=("train.clip", "optimizers.<name>.clip"),
    enabled=lambda ir: of(ir.training.train) is not None or any(o.clip for o in ir.training.optimizers),
    train_key=TRAIN_KEY,
    table=(("clip", "`train.clip`"), ("optimizer_clip", "an optimizer's own `clip`")),
    partial="tf/features/clip.py.j2",
    hooks=("before_update", "optimizer_gradients"),
    runtime=("specgen.runtime.lib.optimizers.clip",),
    after=("precision",),  # clips unscaled gradients
    plan=plan,
)
