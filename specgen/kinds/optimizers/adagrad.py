"""`kind: adagrad`: Keras' Adagrad; the accumulators start at `initial_accumulator_value`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from specgen.fields.base import NonNegativeFloat, PositiveFloat
from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall


class Adagrad(OptimizerBase):
    kind: Literal["adagrad"]
    initial_accumulator_value: NonNegativeFloat = 0.1
    epsilon: PositiveFloat = 1e-7


def _slots(hyper: Mapping[str, Any]) -> Slots:
    return (("accumulator", hyper["initial_accumulator_value"]),)


def _update(c: UpdateCall) -> str:
    return f"{c.function}({c.variables}, {c.gradients}, lr, {c.slot('accumulator')}, {c.keywords('epsilon')})"


KINDS = (OptimizerDef("adagrad", Adagrad, "specgen.runtime.lib.optimizers.adagrad", _update, _slots),)
