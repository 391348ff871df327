"""`specgen train --probe`: one gradient update shown weight by weight. Every train.py has its `gradients` method."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="probe",
    doc="`specgen train --probe`: one batch's gradients and one update, weight by weight",
    spec_keys=("(command line) specgen train --probe",),
    table=(("probe", "`specgen train --probe`"),),
    enabled=lambda ir: True,
    ir="(none: it reads the training IR)",
    partial="tf/features/probe.py.j2",
    hooks=("step_methods",),
    runtime=("specgen.runtime.commands.probe",),
    after=("distribute",),  # reads the step as every other feature left it
)
