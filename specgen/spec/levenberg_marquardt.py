"""The `levenberg_marquardt` optimizer kind: damped Gauss-Newton steps for small full-batch squared-error fits.

It takes no learning rate (the damping sets the step), no gradient clipping and no weight decay
(the step solves for the residuals, not along a gradient): those keys are refused with the reason,
rather than as unknown keys. The checks across sections (loss kind, full batch, the only optimizer,
no accumulation or clipping, no dropout or batch-norm) are in specgen/ir/training/levenberg_marquardt.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from specgen.kinds.features import compat
from specgen.spec.base import PositiveFloat, PositiveInt, SpecModel, number

# The pair of features each optimizer key that LM does without stands for: the message is that pair's
# refusal in specgen/kinds/features/compat.py (rather than an unknown-key error).
REFUSED = {"learning_rate": "schedule", "weight_decay": "weight_decay", "clip": "optimizer_clip"}


class LevenbergMarquardtKeys(SpecModel):
    """The keys of `kind: levenberg_marquardt` besides `kind` and `variables` (spec/training.py adds those)."""

    initial_damping: PositiveFloat = Field(1e-3, description="The damping λ of the first iteration.")
    damping_factor: number(float, gt=1) = Field(2.0, description=(
        "Marquardt's ν: λ is divided by it after a step that lowers the loss, multiplied by it after one that "
        "does not."))
    max_tries: PositiveInt = Field(10, description=(
        "Damped steps tried per iteration before the iteration gives up and keeps the weights."))
    learning_rate: SkipJsonSchema[Any] = None
    weight_decay: SkipJsonSchema[Any] = None
    clip: SkipJsonSchema[Any] = None

    @field_validator("learning_rate", "weight_decay", "clip", mode="before")
    @classmethod
    def _refused(cls, value: Any, info: Any) -> Any:
        raise ValueError(compat.message("levenberg_marquardt", REFUSED[info.field_name]))
