"""`schedule: piecewise_constant`: values[i] between boundaries, Keras' PiecewiseConstantDecay."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specgen.fields.base import NonNegativeFloat, PositiveInt
from specgen.kinds.schedules.base import ScheduleBase, ScheduleDef


class PiecewiseConstant(ScheduleBase):
    schedule: Literal["piecewise_constant"]
    boundaries: Annotated[list[PositiveInt], Field(min_length=1)]
    values: Annotated[list[NonNegativeFloat], Field(min_length=2)]

    @model_validator(mode="after")
    def _consistent(self) -> PiecewiseConstant:
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError(f"piecewise_constant needs one more value than boundaries; received "
                             f"{len(self.boundaries)} boundaries and {len(self.values)} values")
        if any(b >= a for b, a in zip(self.boundaries, self.boundaries[1:], strict=False)):
            raise ValueError(f"boundaries must increase strictly; received {self.boundaries}")
        return self


KINDS = (ScheduleDef("piecewise_constant", PiecewiseConstant, "specgen.runtime.lib.schedules.piecewise_constant",
                     first=lambda rate: rate.values[0]),)
