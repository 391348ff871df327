"""Render-ready facts for pruning (ir/pruning.py): the masks model.py creates and reads (train.py's calls:
kinds/features/pruning.py's plan)."""

from __future__ import annotations

from dataclasses import dataclass

from specgen.ir.model import ModelIR
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

