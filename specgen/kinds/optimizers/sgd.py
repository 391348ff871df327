"""`kind: sgd`: plain steps, with optional (Nesterov) momentum; Keras' SGD."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from specgen.fields.base import Flag, bounds
from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall


class Sgd(OptimizerBase):
    kind: Literal["sgd"]
    momentum: Annotated[float, *bounds(float, ge=0, lt=1)] = 0.0
    nesterov: Flag = False


def _slots(hyper: Mapping[str, Any]) -> Slots:
    return (("momentum", 0.0),) if hyper["momentum"] > 0 else ()  # no velocity to keep without momentum


def _update(c: UpdateCall) -> str:
    return f"{c.function}({c.variables}, {c.gradients}, lr, {c.slot('momentum')}, {c.keywords('momentum', 'nesterov')})"


KINDS = (OptimizerDef("sgd", Sgd, "specgen.runtime.lib.optimizers.sgd", _update, _slots),)
