"""`kind: lion`: Keras' Lion (Chen et al. 2023): the sign of an interpolated momentum, one slot per weight."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from specgen.fields.base import UnitInterval, bounds
from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall


class Lion(OptimizerBase):
    """Lion: w -= lr * sign(beta_1 * m + (1 - beta_1) * g), then m = beta_2 * m + (1 - beta_2) * g.
    Every step moves each weight by exactly the learning rate, so Lion wants a rate 3-10x below Adam's."""

    kind: Literal["lion"]
    beta_1: Annotated[float, *bounds(float, gt=0, le=1)] = Field(0.9, description="Interpolation between momentum and gradient "
                                                                "for the step's sign (Keras: 0 < beta_1 <= 1).")
    beta_2: UnitInterval = Field(0.99, description="Decay of the momentum.")


def _slots(hyper: Mapping[str, Any]) -> Slots:
    return (("m", 0.0),)  # the momentum; Lion keeps no second moment


def _update(c: UpdateCall) -> str:
    return f"{c.function}({c.variables}, {c.gradients}, lr, {c.slot('m')}, {c.keywords('beta_1', 'beta_2')})"


KINDS = (OptimizerDef("lion", Lion, "specgen.runtime.lib.optimizers.lion", _update, _slots),)
