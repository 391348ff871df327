"""Render-ready facts for pruning (ir/pruning.py): the masks model.py creates and reads, and train.py's calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.ir.model import ModelIR
from specgen.ir.pruning import PruneScheduleIR
from specgen.render.environment import py_literal


@dataclass(frozen=True)
class MaskPlan:
    path: str  # the pruned weight's path: the key of model.masks
    key: str  # the mask's variable name and checkpoint key: pruning/<path>
    shape: tuple[int, ...]


def mask_plans(ir: ModelIR) -> list[MaskPlan]:
    return [MaskPlan(w.path, w.mask_key, w.shape) for w in ir.pruning.weights] if ir.pruning else []


def weight_reads(ir: ModelIR) -> dict[str, str]:
    """Pruned weight path -> what the forward pass reads instead of the variable: weight * mask, so that a
    pruned entry contributes nothing and gets a zero gradient."""
    if ir.pruning is None:
        return {}
    attribute = {v.path: v.py_name for v in ir.model_variables}
    return {w.path: f"self.{attribute[w.path]} * self.masks[{py_literal(w.path)}]" for w in ir.pruning.weights}


def schedule_call(schedule: PruneScheduleIR) -> tuple[str, str]:
    """The pruning.* function that builds the schedule in train.py, and its keyword arguments."""
    steps = f"begin_step={schedule.begin_step}, end_step={schedule.end_step}, frequency={schedule.frequency}"
    if schedule.kind == "constant_sparsity":
        return "constant_sparsity", f"sparsity={py_literal(schedule.final_sparsity)}, {steps}"
    return "polynomial_decay", (f"initial_sparsity={py_literal(schedule.initial_sparsity)}, "
                                f"final_sparsity={py_literal(schedule.final_sparsity)}, {steps}, "
                                f"power={py_literal(schedule.power)}")


def prune_context(ir: ModelIR) -> dict[str, Any] | None:
    """The pruning partial's context (templates/tf/features/pruning.py.j2); None when the spec prunes nothing."""
    if ir.pruning is None:
        return None
    # `when`: the mask update's extra condition; the accumulate + pruning interaction sets it
    # (kinds/features/interactions.py).
    return {"paths": list(ir.pruning.paths), "mask_keys": [w.mask_key for w in ir.pruning.weights],
            "schedule": schedule_call(ir.pruning.schedule), "when": ""}  # schedule: (function, keyword arguments)
