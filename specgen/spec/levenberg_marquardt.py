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

from specgen.spec.base import PositiveFloat, SpecModel, number

# Why each optimizer key that LM does without is refused (rather than as an unknown key). The compatibility
# table (specgen/kinds/features/compat.py) holds these as the refusals of the pairs levenberg_marquardt +
# schedule, weight_decay and optimizer_clip; their text is here because the table imports the optimizer
# registry (its opt_<kind> names), which imports this module: the other way round would be a cycle.
REFUSED = {
    "learning_rate": (
        "levenberg_marquardt takes no learning rate: the damping sets the step length (the trust-region rule moves "
        "it after every try); set initial_damping instead"),
    "weight_decay": (
        "levenberg_marquardt takes no weight decay: each step solves the damped normal equations of the "
        "residuals, so a decay outside them would undo the fit; add an L2 term to the model instead"),
    "clip": (
        "levenberg_marquardt takes no clipping: the step is a damped Gauss-Newton solve, not a gradient step; a "
        "larger damping shortens it"),
    "damping_factor": (
        "levenberg_marquardt takes no damping_factor: the damping follows MINPACK's trust-region rule, as scipy's "
        "least_squares(method='lm') does (the step bound shrinks to 0.1-0.5 of itself after a poor step and "
        "doubles after a good one; the damping is solved from it); remove it"),
}
# Each rejected try at least halves the step bound (lmder's rule). From the first bound, 100·‖D·w‖, 30 halvings
# reach the stall (float32's resolution, 1.2e-7·‖D·w‖); 100 leave room for a bound that grew 2^70 times, which
# no fit reaches. A larger count could only loop (issue 17: 2147483647 never finished one iteration).
MAX_TRIES = 100


class LevenbergMarquardtKeys(SpecModel):
    """The keys of `kind: levenberg_marquardt` besides `kind` and `variables` (spec/training.py adds those)."""

    initial_damping: PositiveFloat | None = Field(None, description=(
        "The damping λ of the first step tried (its length becomes the first step bound); by default the first "
        "step bound is 100·‖D·w‖, as MINPACK's lmder with factor 100 (scipy's least_squares(method='lm'))."))
    max_tries: number(int, gt=0, le=MAX_TRIES) = Field(10, description=(
        "Steps tried per iteration before it keeps the weights; each rejected try at least halves the step bound."))
    learning_rate: SkipJsonSchema[Any] = None
    weight_decay: SkipJsonSchema[Any] = None
    clip: SkipJsonSchema[Any] = None
    # Refused since issue 17 (lmder's rule replaced Marquardt's ν); excluded from dumps so that it is no
    # hyperparameter of the resolved optimizer (kinds/optimizers/base.py's `hyper`).
    damping_factor: SkipJsonSchema[Any] = Field(None, exclude=True)

    @field_validator("learning_rate", "weight_decay", "clip", "damping_factor", mode="before")
    @classmethod
    def _refused(cls, value: Any, info: Any) -> Any:
        raise ValueError(REFUSED[info.field_name])
