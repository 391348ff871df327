"""`kind: huber`: squared error near zero, absolute error beyond `delta`; Keras' Huber."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import Identifier, NonNegativeFloat, PositiveFloat, SpecModel
from specgen.fields.losses import LABELS, TERM_NAME, WEIGHT
from specgen.kinds.losses.base import LossDef


class HuberLoss(SpecModel):
    """Keras' Huber: 0.5 x err**2 where |err| <= delta, else delta x (|err| - delta / 2); the mean."""

    kind: Literal["huber"]
    predictions: Identifier = Field(description="An output name.")
    labels: Identifier = LABELS
    delta: PositiveFloat = Field(1.0, description="Where the quadratic part turns linear.")
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


KINDS = (LossDef("huber", HuberLoss, "specgen.runtime.lib.losses.huber", "regression", args=("delta",)),)
