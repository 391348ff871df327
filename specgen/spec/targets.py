"""The `targets` section: copies of a set of weights that follow them (DQN's target network).

    targets:
      q_target: {online: "qnet/*", target: "target_qnet/*", tau: 0.005}   # soft: after every update
      slow:     {online: "qnet/*", target: "slow_qnet/*", every_steps: 500} # hard: every N-th update

Checks across sections (the patterns match, paths pair up, shapes agree) are in specgen/ir/targets.py.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specgen.fields.base import Pattern, PositiveInt, SpecModel, bounds
from specgen.fields.unions import by_key, by_shape

PREFIX = "A prefix ending in '*' (e.g. 'qnet/*'); paths pair up by their part after the prefix."


class TargetBase(SpecModel):
    online: Pattern = Field(description="The weights followed. " + PREFIX)
    target: Pattern = Field(description="The copies, which no optimizer trains. " + PREFIX)


class SoftTarget(TargetBase):
    tau: Annotated[float, *bounds(float, gt=0, le=1)] = Field(
        description="After every update: target <- (1 - tau) * target + tau * online.")


class HardTarget(TargetBase):
    every_steps: PositiveInt = Field(description="After every N-th update (global_step % N == 0): target <- online.")


Target = by_shape(by_key("tau", "every_steps"), "a mapping with 'online', 'target' and exactly one of 'tau' or "
                  "'every_steps'", tau=SoftTarget, every_steps=HardTarget)
