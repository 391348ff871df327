"""`train.precision: mixed_float16 | mixed_bfloat16`: compute in a reduced type, variables kept float32.

A setting, not a row of the pairwise feature table (kinds/features/__init__.py SETTINGS): it renders at the
skeleton's hooks like a feature and combines with every feature but levenberg_marquardt.

The model is called through specgen.runtime.lib.precision.CastModel (float32 variables read as casts,
normalizations in float32, outputs back in float32 for the losses); under mixed_float16 the step scales the
loss, apply() unscales once and skips the whole update on non-finite gradients (templates/tf/features/precision.py.j2).
Its refusals (Levenberg-Marquardt, ops that cannot run in the reduced type): specgen/ir/training/precision.py.
"""

from typing import Any

from specgen.kinds.features.base import FeatureDef


def refusal(ir: Any, beside: str) -> str | None:
    """Why train.precision does not combine with `beside`, a feature a command adds; None when it does."""
    if beside == "probe" and ir.training.train.precision == "mixed_float16":
        return ("--probe shows unscaled gradients and applies them as one update, and mixed_float16's update "
                "expects the loss-scaled ones: probe this spec with train.precision: float32 (its checkpoints "
                "are interchangeable)")
    return None


SETTING = FeatureDef(
    name="precision",
    doc="mixed precision: compute in float16 or bfloat16, float32 variables; dynamic loss scaling for float16",
    spec_keys=("train.precision",),
    enabled=lambda ir: ir.training.train.precision != "float32",
    ir="specgen.ir.training.build._train (TrainIR.precision)",
    state=("specgen.ir.training.keys.LOSS_SCALE",),
    partial="tf/features/precision.py.j2",
    hooks=("init", "before_update", "methods", "state"),
    context="specgen.render.train_plan.precision_context",
    lib=("precision",),
    runtime=("specgen.runtime.lib.precision.CastModel", "specgen.runtime.lib.precision.unscale",
             "specgen.runtime.lib.precision.adjust", "specgen.runtime.lib.precision.guarded"),
)
