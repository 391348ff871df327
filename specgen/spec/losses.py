"""The `loss` section: one term (a mapping) or a list of weighted terms (multi-task, regularizers).

A data term reads one output and compares it with labels: a label name from the data section,
or another output's name (a computed target, held constant: no gradient flows into it). A
regularizer term adds `weight x` the l2 (`sum(w**2) / 2`, TensorFlow's `l2_loss`) or l1
(`sum(|w|)`) norm of the weights its `variables` selection names.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specgen.spec.base import Identifier, NonNegativeFloat, Pattern, PositiveFloat, SpecModel
from specgen.spec.unions import by_shape, scalar_or_list

TERM_NAME = Field(None, description="The term's name in reports and TensorBoard (`loss/<name>`); "
                                    "default: the output it reads; for a regularizer its kind, with "
                                    "`_<collection>` when `variables` is one name (`l2_backbone`). A default that "
                                    "another term has gets `_2`, `_3`...")
LABELS = Field(description="A label name from the data section, or an output name (a computed target, "
                           "held constant: no gradient flows into it).")
WEIGHT = Field(1.0, description="The term's factor in the total loss.")


class ClassificationLoss(SpecModel):
    kind: Literal["sparse_softmax_cross_entropy", "softmax_cross_entropy", "sigmoid_cross_entropy"]
    logits: Identifier = Field(description="An output name.")
    labels: Identifier = LABELS
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


class RegressionLoss(SpecModel):
    kind: Literal["mean_squared_error", "mean_absolute_error"]
    predictions: Identifier = Field(description="An output name.")
    labels: Identifier = LABELS
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


class HuberLoss(SpecModel):
    """Keras' Huber: 0.5 x err**2 where |err| <= delta, else delta x (|err| - delta / 2); the mean."""

    kind: Literal["huber"]
    predictions: Identifier = Field(description="An output name.")
    labels: Identifier = LABELS
    delta: PositiveFloat = Field(1.0, description="Where the quadratic part turns linear.")
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


Selection = by_shape(scalar_or_list, "a collection name, a pattern or a list of them",
                     scalar=Pattern, list=Annotated[list[Pattern], Field(min_length=1)])


class RegularizerLoss(SpecModel):
    kind: Literal["l2", "l1"]
    variables: Selection = Field(description="A collection name (or 'trainable'), a glob pattern, or a list of them.")
    weight: NonNegativeFloat = Field(description="The factor: l2 adds weight x sum(w**2) / 2, l1 weight x sum(|w|).")
    name: Identifier | None = TERM_NAME


LossTerm = Annotated[ClassificationLoss | RegressionLoss | HuberLoss | RegularizerLoss, Field(discriminator="kind")]


def _term_or_list(value: object) -> str:
    return "list" if isinstance(value, list) else "term"


Loss = by_shape(_term_or_list, "a loss term (a mapping with 'kind') or a list of them",
                term=LossTerm, list=Annotated[list[LossTerm], Field(min_length=1)])
