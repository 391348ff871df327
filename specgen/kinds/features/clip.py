"""`train.clip` (all gradients together) and an optimizer's own `clip` (its gradients, after that).

The optimizer's own clip renders through its optimizer plan (render/train_plan.py OptimizerPlan.clip):
the `optimizer_gradients` hook is called with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.kinds.features.base import FeatureDef


@dataclass(frozen=True)
class ClipPlan:
    """templates/tf/features/clip.py.j2's context: train.clip, or None fields when only optimizers clip."""

    kind: str | None  # global_norm or value: the optimizers.clip keyword
    value: float | None


def plan(ir: Any) -> ClipPlan:
    clip = ir.training.train.clip
    return ClipPlan(None, None) if clip is None else ClipPlan(clip.kind, clip.value)


FEATURE = FeatureDef(
    name="clip",
    doc="gradient clipping by global norm or value, over all gradients and per optimizer",
    spec_keys=("train.clip", "optimizers.<name>.clip"),
    enabled=lambda ir: ir.training.train.clip is not None or any(o.clip for o in ir.training.optimizers),
    ir="specgen.ir.training.build._clip (ClipIR)",
    partial="tf/features/clip.py.j2",
    hooks=("before_update", "optimizer_gradients"),
    runtime=("specgen.runtime.lib.optimizers.clip",),
    after=("precision",),  # clips unscaled gradients
    plan=plan,
)
