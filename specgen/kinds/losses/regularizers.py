"""Regularizer terms over a selection of weights: `l2` (sum(w**2) / 2, TensorFlow's l2_loss) and `l1` (sum(|w|))."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import Identifier, NonNegativeFloat, SpecModel
from specgen.fields.losses import TERM_NAME, Selection
from specgen.kinds.losses.base import LossDef


class RegularizerLoss(SpecModel):
    kind: Literal["l2", "l1"]
    variables: Selection = Field(description="A collection name (or 'trainable'), a glob pattern, or a list of them.")
    weight: NonNegativeFloat = Field(description="The factor: l2 adds weight x sum(w**2) / 2, l1 weight x sum(|w|).")
    name: Identifier | None = TERM_NAME


KINDS = (
    LossDef("l2", RegularizerLoss, "specgen.runtime.lib.losses.l2", None),
    LossDef("l1", RegularizerLoss, "specgen.runtime.lib.losses.l1", None),
)
