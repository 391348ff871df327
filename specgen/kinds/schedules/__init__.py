"""The learning-rate schedule registry: one module per `schedule:` kind, every schedule list derived from it.

Each module defines its spec model and a `KINDS` tuple of `ScheduleDef`s (base.py). Derived here:
`REGISTRY` (kind -> ScheduleDef), `Schedule` (the discriminated union of the models) and
`LearningRate` (a number or a schedule mapping), which the optimizer models take; ir/training/build.py
and render/train_plan.py resolve and render through `REGISTRY`. docs/extending.md says what else a new
schedule needs; tests/test_schedule_registry.py names what one lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypeAlias, Union

from pydantic import Field

from specgen.fields.base import NonNegativeFloat
from specgen.fields.unions import by_shape, scalar_or_mapping
from specgen.kinds.collect import collect, models
from specgen.kinds.schedules.base import WARMUP, ScheduleBase, ScheduleDef

__all__ = ["REGISTRY", "WARMUP", "LearningRate", "Schedule", "ScheduleBase", "ScheduleDef"]

# The first kinds, in the order the published JSON schema lists them; later ones follow alphabetically.
SCHEMA_ORDER = ("constant", "exponential_decay", "cosine_decay", "piecewise_constant")

REGISTRY: dict[str, ScheduleDef] = collect(__name__, __path__, SCHEMA_ORDER)

if TYPE_CHECKING:  # pydantic's discriminated union of the registry's models, built at run time; statically, their base
    Schedule: TypeAlias = ScheduleBase
else:
    Schedule = Annotated[Union[models(REGISTRY)], Field(discriminator="schedule")]  # noqa: UP007 (built from a tuple)
LearningRate = by_shape(scalar_or_mapping, "a number or a schedule mapping", scalar=NonNegativeFloat, mapping=Schedule)
