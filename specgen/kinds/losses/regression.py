"""Regression terms on predictions: `mean_squared_error` and `mean_absolute_error`; one model for both."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import Identifier, NonNegativeFloat, SpecModel
from specgen.fields.losses import LABELS, TERM_NAME, WEIGHT
from specgen.kinds.losses.base import LossDef


class RegressionLoss(SpecModel):
    kind: Literal["mean_squared_error", "mean_absolute_error"]
    predictions: Identifier = Field(description="An output name.")
    labels: Identifier = LABELS
    name: Identifier | None = TERM_NAME
    weight: NonNegativeFloat = WEIGHT


KINDS = (
    LossDef("mean_squared_error", RegressionLoss, "specgen.runtime.lib.losses.mean_squared_error", "regression"),
    LossDef("mean_absolute_error", RegressionLoss, "specgen.runtime.lib.losses.mean_absolute_error", "regression"),
)
