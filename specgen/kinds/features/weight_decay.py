"""An optimizer's `weight_decay` (a rate, or `{rate, exclude}`; adamw's default): decoupled decay before its update."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="weight_decay",
    doc="decoupled weight decay per optimizer, with weights left out by pattern",
    spec_keys=("optimizers.<name>.weight_decay",),
    table=(("weight_decay", "an optimizer's `weight_decay` (adamw's default included)"),),
    enabled=lambda ir: any(o.weight_decay for o in ir.training.optimizers),
    ir="specgen.ir.training.build._optimizer (OptimizerIR.weight_decay, decay_excluded)",
    partial="tf/features/weight_decay.py.j2",
    hooks=("optimizer_init", "optimizer_update"),
    runtime=("specgen.runtime.lib.optimizers.weight_decay",),
    after=("clip",),  # decays beside the clipped update
)
