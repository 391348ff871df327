"""`kind: focal`: Keras' CategoricalFocalCrossentropy on logits, for class-imbalanced classification."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import Identifier, NonNegativeFloat, SpecModel
from specgen.fields.losses import LABELS, TERM_NAME, WEIGHT
from specgen.kinds.losses.base import LossDef


class FocalLoss(SpecModel):
    """Focal cross-entropy (Lin et al. 2017), Keras' CategoricalFocalCrossentropy with from_logits=True:
    sum over classes of -alpha x (1 - p)**gamma x labels x log(p), p the softmax of the logits; the mean."""

    kind: Literal["focal"]
    logits: Identifier = Field(description="An output name: logits before any softmax (the softmax is the loss's).")
    labels: Identifier = Field(description="Class probabilities (one-hot), like softmax_cross_entropy's: "
                                           + LABELS.description)
    alpha: NonNegativeFloat = Field(0.25, description="The weight of every class's term.")
    gamma: NonNegativeFloat = Field(2.0, description="The focusing exponent: 0 gives alpha x the cross-entropy.")
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


KINDS = (LossDef("focal", FocalLoss, "specgen.runtime.lib.losses.focal", "onehot", args=("alpha", "gamma")),)
