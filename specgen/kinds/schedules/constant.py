"""`schedule: constant`: one rate (with `warmup_steps`, a linear warm-up to it)."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import NonNegativeFloat
from specgen.kinds.schedules.base import ScheduleBase, ScheduleDef


class ConstantSchedule(ScheduleBase):
    schedule: Literal["constant"]
    initial: NonNegativeFloat


# keyword_call: `schedules.constant(initial=...)`, by name as every other schedule
KINDS = (ScheduleDef("constant", ConstantSchedule, "specgen.runtime.lib.schedules.constant"),)
