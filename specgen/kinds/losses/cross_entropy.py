"""Classification terms on logits: `sparse_softmax_cross_entropy` (class indices), `softmax_cross_entropy`
(class probabilities) and `sigmoid_cross_entropy` (independent 0/1 labels); one model for the three."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import Identifier, NonNegativeFloat, SpecModel
from specgen.fields.losses import LABELS, TERM_NAME, WEIGHT
from specgen.kinds.losses.base import LossDef


class ClassificationLoss(SpecModel):
    kind: Literal["sparse_softmax_cross_entropy", "softmax_cross_entropy", "sigmoid_cross_entropy"]
    logits: Identifier = Field(description="An output name.")
    labels: Identifier = LABELS
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


LIB = "specgen.runtime.lib.losses"
KINDS = (
    LossDef("sparse_softmax_cross_entropy", ClassificationLoss, f"{LIB}.sparse_softmax_cross_entropy", "sparse"),
    LossDef("softmax_cross_entropy", ClassificationLoss, f"{LIB}.softmax_cross_entropy", "onehot"),
    LossDef("sigmoid_cross_entropy", ClassificationLoss, f"{LIB}.sigmoid_cross_entropy", "binary"),
)
