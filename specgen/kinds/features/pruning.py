"""`prune`: magnitude-pruning masks recomputed on a schedule, applied after every update (docs/pruning.md).

Its IR is specgen/ir/pruning.py (PruningIR: the masks are model variables, keys ir/training/keys.py `mask`); its
render plan is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.kinds.features.base import FeatureDef


@dataclass(frozen=True)
class PrunePlan:
    """templates/tf/features/pruning.py.j2's context."""

    paths: tuple[str, ...]  # the pruned weights
    mask_keys: tuple[str, ...]  # their masks' checkpoint keys
    schedule: str  # the pruning.* function that builds the schedule in train.py
    arguments: tuple[tuple[str, Any], ...]  # its keyword arguments, rendered as literals
    # The mask update's extra condition; the accumulate + pruning interaction sets it (interactions.py).
    when: str = ""


def plan(ir: Any) -> PrunePlan:
    """The render plan of a spec with a prune section (ir: its ModelIR)."""
    pruning, s = ir.pruning, ir.pruning.schedule
    steps = (("begin_step", s.begin_step), ("end_step", s.end_step), ("frequency", s.frequency))
    arguments: tuple[tuple[str, Any], ...]
    if s.kind == "constant_sparsity":
        arguments = (("sparsity", s.final_sparsity), *steps)
    else:
        arguments = (("initial_sparsity", s.initial_sparsity), ("final_sparsity", s.final_sparsity), *steps,
                     ("power", s.power))
    return PrunePlan(pruning.paths, tuple(w.mask_key for w in pruning.weights), s.kind, arguments)


FEATURE = FeatureDef(
    name="pruning",
    doc="magnitude pruning: masks recomputed on a schedule, re-applied after every update",
    spec_keys=("prune",),
    table=(("prune", "a `prune` section"),),
    enabled=lambda ir: ir.pruning is not None,
    ir="specgen.ir.pruning (PruningIR)",
    state=("specgen.ir.training.keys.mask",),
    partial="tf/features/pruning.py.j2",
    hooks=("init", "before_step", "after_update", "state"),
    lib=("pruning",),
    runtime=("specgen.runtime.lib.pruning.update_masks", "specgen.runtime.lib.pruning.apply_masks",
             "specgen.runtime.pruning_state"),
    report="specgen.report.pruning.pruning_table",
    after=("targets",),  # masks re-applied last, after everything that moves weights
    collections=("pruning",),  # the pruned weights (ir/pruning.py)
    runtime_hooks=(("restore_targets", "specgen.ir.restore_targets.mask_targets"),
                   ("restore_variables", "specgen.runtime.pruning_state.mask_variables"),
                   ("restore_weights", "specgen.runtime.lib.pruning.after_restore")),
    plan=plan,
)
