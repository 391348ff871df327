"""The `prune` section: magnitude pruning with TF Model Optimization's two schedules (docs/pruning.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from specgen.fields.base import NonNegativeInt, PositiveFloat, PositiveInt, SpecModel, bounds
from specgen.fields.losses import Selection

# TFMOT refuses a sparsity of 1 (every weight pruned): [0, 1), as its schedules validate.
Sparsity = Annotated[float, *bounds(float, ge=0, lt=1)]


def _no_end(value: object) -> object:
    """TFMOT's end_step -1 means "until training stops"; here that is an absent end_step: say so (other negatives get
    the bound's message)."""
    if value == -1 and not isinstance(value, bool):
        raise ValueError("received -1: to prune until training stops (TF Model Optimization's end_step -1), leave "
                         "end_step out")
    return value


def _needs_end(value: object) -> object:
    if value == -1 and not isinstance(value, bool):
        raise ValueError("received -1: polynomial_decay needs the step at which final_sparsity is reached (TF Model "
                         "Optimization refuses -1 here too); only constant_sparsity prunes until training stops, "
                         "without end_step")
    return value


# A before-validator listed last runs first (pydantic runs them right to left), ahead of the bound's own message.
EndStep = Annotated[int, *bounds(int, ge=0), BeforeValidator(_no_end)]
PolynomialEndStep = Annotated[int, *bounds(int, gt=0), BeforeValidator(_needs_end)]


class ConstantSparsity(SpecModel):
    """`sparsity` at every pruning step in [begin_step, end_step] (tfmot.sparsity.keras.ConstantSparsity)."""

    kind: Literal["constant_sparsity"]
    sparsity: Sparsity
    begin_step: NonNegativeInt = 0
    end_step: EndStep | None = Field(None, description="Left out: masks keep updating until training stops.")
    frequency: PositiveInt = Field(100, description="Updates between two mask updates.")

    @model_validator(mode="after")
    def _steps(self) -> ConstantSparsity:
        if self.end_step is not None and self.end_step < self.begin_step:
            raise ValueError(f"end_step must not come before begin_step; received begin_step {self.begin_step} "
                             f"and end_step {self.end_step}")
        return self


class PolynomialDecay(SpecModel):
    """From `initial_sparsity` at begin_step to `final_sparsity` at end_step (tfmot.sparsity.keras.PolynomialDecay)."""

    kind: Literal["polynomial_decay"]
    initial_sparsity: Sparsity = 0.0
    final_sparsity: Sparsity
    begin_step: NonNegativeInt = 0
    end_step: PolynomialEndStep
    frequency: PositiveInt = Field(100, description="Updates between two mask updates.")
    power: PositiveFloat = 3.0

    @model_validator(mode="after")
    def _steps(self) -> PolynomialDecay:
        # TFMOT divides by end_step - begin_step: equal steps would make the sparsity 0/0.
        if self.end_step <= self.begin_step:
            raise ValueError(f"end_step must come after begin_step; received begin_step {self.begin_step} "
                             f"and end_step {self.end_step}")
        return self


PruneSchedule = Annotated[ConstantSparsity | PolynomialDecay, Field(discriminator="kind")]


class Prune(SpecModel):
    """Which weights get a mask, and when the masks are recomputed."""

    variables: Selection = Field(description=(
        "A collection name, a glob pattern, or a list of them: the trained weights to prune (kernels, say)."))
    schedule: PruneSchedule
