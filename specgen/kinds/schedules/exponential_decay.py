"""`schedule: exponential_decay`: initial x decay_rate ** (step / decay_steps), Keras' ExponentialDecay."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import Flag, NonNegativeFloat, PositiveFloat, PositiveInt
from specgen.kinds.schedules.base import ScheduleBase, ScheduleDef


class ExponentialDecay(ScheduleBase):
    schedule: Literal["exponential_decay"]
    initial: NonNegativeFloat
    decay_steps: PositiveInt
    decay_rate: PositiveFloat
    staircase: Flag = False


KINDS = (ScheduleDef("exponential_decay", ExponentialDecay, "specgen.runtime.lib.schedules.exponential_decay"),)
