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

from specgen.spec.base import PositiveFloat, PositiveInt, SpecModel, number

# Why each optimizer key that LM does without is refused (rather than as an unknown key). The compatibility
# table (specgen/kinds/features/compat.py) holds these as the refusals of the pairs levenberg_marquardt +
# schedule, weight_decay and optimizer_clip; their text is here because the table imports the optimizer
# registry (its opt_<kind> names), which imports this module: the other way round would be a cycle.
REFUSED = {
    "learning_rate": (
        "levenberg_marquardt takes no learning rate: the damping sets the step length (Marquardt's rule moves it "
        "after every iteration); set initial_damping instead"),
    "weight_decay": (
        "levenberg_marquardt takes no weight decay: each step solves the damped normal equations of the "
        "residuals, so a decay outside them would undo the fit; add an L2 term to the model instead"),
    "clip": (
        "levenberg_marquardt takes no clipping: the step is a damped Gauss-Newton solve, not a gradient step; a "
        "larger damping shortens it"),
}


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
        raise ValueError(REFUSED[info.field_name])
