"""`kind: rmsprop`: Keras' RMSprop, with optional momentum and centering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from specgen.fields.base import Flag, PositiveFloat, UnitInterval, bounds
from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall


class RmsProp(OptimizerBase):
    kind: Literal["rmsprop"]
    rho: UnitInterval = 0.9
    momentum: Annotated[float, *bounds(float, ge=0, lt=1)] = 0.0
    epsilon: PositiveFloat = 1e-7
    centered: Flag = False


def _slots(hyper: Mapping[str, Any]) -> Slots:
    """The mean square always; a velocity with momentum; the mean gradient when centered."""
    momentum = (("momentum", 0.0),) if hyper["momentum"] > 0 else ()
    return (("rms", 0.0), *momentum, *((("mg", 0.0),) if hyper["centered"] else ()))


def _update(c: UpdateCall) -> str:
    return (f"{c.function}({c.variables}, {c.gradients}, lr, {c.slot('rms')}, {c.slot('momentum')}, {c.slot('mg')}, "
            f"{c.keywords('rho', 'momentum', 'epsilon')})")


KINDS = (OptimizerDef("rmsprop", RmsProp, "specgen.runtime.lib.optimizers.rmsprop", _update, _slots),)
