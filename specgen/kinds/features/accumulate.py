"""`train.accumulate` > 1: gradients of several micro-batches summed, one update from their mean.

A step kind: the skeleton's gradient step becomes `accumulate_step` + `apply_accumulated`
(templates/tf/steps/accumulate.py.j2); the runtime drives them (specgen/runtime/placement/replicas.py).
"""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="accumulate",
    doc="micro-batches per optimizer update: their gradients are summed, the update uses the mean",
    spec_keys=("train.accumulate",),
    enabled=lambda ir: ir.training.train.accumulate > 1,
    ir="specgen.ir.training.build._train (TrainIR.accumulate)",
    state=("specgen.ir.training.keys.accumulator", "specgen.ir.training.keys.MICRO_BATCHES"),
    partial="tf/features/accumulate.py.j2",
    hooks=("init", "state"),
    context="specgen.render.train_plan.accumulate_context",
    step="tf/steps/accumulate.py.j2",
    runtime=("specgen.runtime.placement.replicas.Replicas.accumulated_updates",),
    after=("levenberg_marquardt",),  # its step sums micro-batches; apply() then sees the summed gradients
)
