"""`train.ema`: moving-average shadows of every trainable weight, updated after each optimizer update."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="ema",
    doc="moving-average shadows of the trainable weights, for evaluation and export",
    spec_keys=("train.ema", "export.onnx.weights: ema"),
    enabled=lambda ir: ir.training.train.ema is not None,
    ir="specgen.ir.training.build._train (EmaIR)",
    state=("specgen.ir.training.keys.ema",),
    partial="tf/features/ema.py.j2",
    hooks=("init", "after_step", "ema_variables", "state"),
    context="specgen.render.train_plan.ema_context",
    runtime=("specgen.runtime.lib.optimizers.ema",),
    after=("weight_decay",),  # averages the weights after every update
    runtime_hooks=(("after_restore", "specgen.runtime.lib.ema.after_restore"),
                   ("evaluation_weights", "specgen.runtime.lib.ema.evaluation_weights")),
)
