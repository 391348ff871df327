"""`specgen sweep`: a hyperparameter search declared in the spec's `sweep` section (docs/sweeps.md).

spec.py is the section's model (spec/model.py holds it); space.py checks the searched keys against the spec and
turns drawn values into `--set` overrides; storage.py opens Optuna's storage; plan.py is the checked sweep and what
defines its study; membership.py says which sweeps may join it; study.py makes the study (its sampler and pruner,
the budget); driver.py runs it, each trial an ordinary `specgen train` subprocess whose TensorBoard events it reads;
summary.py prints and draws the trials; katib.py writes the same search as a Kubeflow Katib Experiment. The sweep
process never imports TensorFlow: only its trials do.
"""
