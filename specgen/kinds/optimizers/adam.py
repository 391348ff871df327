"""`kind: adam`: Keras' Adam (weight decay, when given, is decoupled, as Keras applies it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from specgen.fields.base import PositiveFloat, UnitInterval
from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall


class Adam(OptimizerBase):
    kind: Literal["adam"]
    beta_1: UnitInterval = 0.9
    beta_2: UnitInterval = 0.999
    epsilon: PositiveFloat = 1e-7


def slots(hyper: Mapping[str, Any]) -> Slots:
    return (("m", 0.0), ("v", 0.0))  # first and second moments


def update(c: UpdateCall) -> str:
    return (f"{c.function}({c.variables}, {c.gradients}, lr, {c.slot('m')}, {c.slot('v')}, self.{c.attr}_iterations, "
            f"{c.keywords('beta_1', 'beta_2', 'epsilon')})")


KINDS = (OptimizerDef("adam", Adam, "specgen.runtime.lib.optimizers.adam", update, slots),)
