"""`prune`: magnitude-pruning masks recomputed on a schedule, applied after every update (docs/pruning.md)."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="pruning",
    doc="magnitude pruning: masks recomputed on a schedule, re-applied after every update",
    spec_keys=("prune",),
    enabled=lambda ir: ir.pruning is not None,
    ir="specgen.ir.pruning (PruningIR)",
    state=("specgen.ir.training.keys.mask",),
    partial="tf/features/pruning.py.j2",
    hooks=("init", "before_step", "after_update", "state"),
    context="specgen.render.prune_plan.prune_context",
    lib=("pruning",),
    runtime=("specgen.runtime.lib.pruning.update_masks", "specgen.runtime.lib.pruning.apply_masks",
             "specgen.runtime.pruning_state"),
    report="specgen.report.pruning.pruning_table",
    after=("targets",),  # masks re-applied last, after everything that moves weights
    runtime_hooks=(("restore_targets", "specgen.runtime.pruning_state.mask_targets"),
                   ("restore_variables", "specgen.runtime.pruning_state.mask_variables"),
                   ("restore_weights", "specgen.runtime.lib.pruning.after_restore")),
)
