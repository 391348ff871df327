"""`schedule: cosine_decay`: half a cosine from initial down to alpha x initial over decay_steps, Keras' CosineDecay."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import NonNegativeFloat, PositiveInt, number
from specgen.kinds.schedules.base import ScheduleBase, ScheduleDef


class CosineDecay(ScheduleBase):
    schedule: Literal["cosine_decay"]
    initial: NonNegativeFloat
    decay_steps: PositiveInt
    alpha: number(float, ge=0, le=1) = 0.0


KINDS = (ScheduleDef("cosine_decay", CosineDecay, "specgen.runtime.lib.schedules.cosine_decay"),)
