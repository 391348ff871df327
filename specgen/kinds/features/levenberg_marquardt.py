"""`kind: levenberg_marquardt`: damped Gauss-Newton iterations on the whole training set. A step kind.

Its step (templates/tf/train_levenberg_marquardt.py.j2) replaces the gradient step and apply();
its cross-section checks are specgen/ir/training/levenberg_marquardt.py, with the messages of the
pairs it refuses taken from compat.py.
"""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="levenberg_marquardt",
    doc="Levenberg-Marquardt iterations (a step kind): one Jacobian, damped steps until the loss falls",
    spec_keys=("optimizers.<name>.kind: levenberg_marquardt",),
    enabled=lambda ir: any(o.levenberg_marquardt for o in ir.training.optimizers),
    ir="specgen.ir.training.build._optimizer (OptimizerIR.damping_key, step_bound_key)",
    state=("specgen.ir.training.keys.damping", "specgen.ir.training.keys.step_bound",
           "specgen.ir.training.keys.slot_prefix"),
    partial="tf/features/levenberg_marquardt.py.j2",
    hooks=("optimizer_variables", "apply", "learning_rate", "optimizer_state"),
    step="tf/train_levenberg_marquardt.py.j2",
    lib=("levenberg_marquardt",),
    runtime=("specgen.runtime.lib.levenberg_marquardt.step", "specgen.runtime.lib.levenberg_marquardt.residuals"),
)
