"""`schedule: constant`: one rate (with `warmup_steps`, a linear warm-up to it)."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import NonNegativeFloat
from specgen.kinds.schedules.base import Args, Literal_, ScheduleBase, ScheduleDef


class ConstantSchedule(ScheduleBase):
    schedule: Literal["constant"]
    initial: NonNegativeFloat


def _call(function: str, args: Args, literal: Literal_) -> str:
    return f"{function}({literal(dict(args)['initial'])})"  # the one argument, positional


KINDS = (ScheduleDef("constant", ConstantSchedule, "specgen.runtime.lib.schedules.constant", call=_call),)
