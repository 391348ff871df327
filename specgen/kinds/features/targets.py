"""`targets`: copies of online variables that follow them after each update, softly (tau) or every n steps."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="targets",
    doc="target networks: copies that follow their online weights (soft or hard updates)",
    spec_keys=("targets",),
    enabled=lambda ir: bool(ir.training.targets),
    ir="specgen.ir.targets (TargetIR)",
    partial="tf/features/targets.py.j2",
    hooks=("imports", "init", "after_step", "methods"),
    context="specgen.render.target_plan.targets_context",
    runtime=("specgen.runtime.lib.target_networks.copy", "specgen.runtime.lib.target_networks.soft",
             "specgen.runtime.lib.target_networks.hard"),
    report="specgen.report.targets.targets_table",
    after=("ema",),  # copies follow the updated weights
    runtime_hooks=(("after_restore", "specgen.runtime.lib.target_networks.after_restore"),
                   ("checkpoint_meta", "specgen.runtime.lib.target_networks.checkpoint_meta")),
)
