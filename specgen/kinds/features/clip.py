"""`train.clip` (all gradients together) and an optimizer's own `clip` (its gradients, after that)."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="clip",
    doc="gradient clipping by global norm or value, over all gradients and per optimizer",
    spec_keys=("train.clip", "optimizers.<name>.clip"),
    enabled=lambda ir: ir.training.train.clip is not None or any(o.clip for o in ir.training.optimizers),
    ir="specgen.ir.training.build._clip (ClipIR)",
    partial="tf/features/clip.py.j2",
    hooks=("before_update", "optimizer_gradients"),
    context="specgen.render.train_plan.clip_context",
    runtime=("specgen.runtime.lib.optimizers.clip",),
    after=("precision",),  # clips unscaled gradients
)
