"""A `loss` list (or a regularizer, a weight, labels from an output): the loss is a weighted sum of terms."""

from typing import Any

from specgen.kinds.features.base import FeatureDef


def single(training: Any) -> bool:
    """One term with data labels and weight 1: the skeleton's single-call loss (training: TrainingIR)."""
    terms = training.terms
    return len(terms) == 1 and terms[0].data_labels and terms[0].weight == 1.0


FEATURE = FeatureDef(
    name="loss_terms",
    doc="a weighted sum of loss terms: data terms, computed targets and l1/l2 regularizers",
    spec_keys=("loss: [list]", "loss.weight", "loss.kind: l1 or l2", "loss.labels: <output>"),
    table=(("loss_terms", "a loss that is not one data term of weight 1"),),
    enabled=lambda ir: not single(ir.training),
    ir="specgen.ir.loss_terms (LossTermIR, specgen/ir/training/terms.py)",
    partial="tf/features/loss_terms.py.j2",
    hooks=("loss_init", "loss"),
    render_plan="specgen.render.loss_plan.terms_plan",  # its calls are Python text, built in render/
    runtime=("specgen.runtime.lib.losses",),
    report="specgen.report.loss_terms.loss_table",
    after=("pruning",),  # the loss: its own hooks, after the update stages
)
