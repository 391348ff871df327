"""`schedule: cosine_decay`: half a cosine from initial down to alpha x initial over decay_steps, Keras' CosineDecay."""

from __future__ import annotations

from typing import Annotated, Literal

from specgen.fields.base import NonNegativeFloat, PositiveInt, bounds
from specgen.kinds.schedules.base import ScheduleBase, ScheduleDef


class CosineDecay(ScheduleBase):
    schedule: Literal["cosine_decay"]
    initial: NonNegativeFloat
    decay_steps: PositiveInt
    alpha: Annotated[float, *bounds(float, ge=0, le=1)] = 0.0


KINDS = (ScheduleDef("cosine_decay", CosineDecay, "specgen.runtime.lib.schedules.cosine_decay"),)
