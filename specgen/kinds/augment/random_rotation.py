"""`random_rotation: f` or `{factor: f, fill_mode: reflect}`: keras.layers.RandomRotation(f), an angle drawn
uniformly in [-f, f] of a full turn per image."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment.base import AugmentDef, FillMode, Fraction, args, factor_or


class RotationArgs(SpecModel):
    factor: Fraction = Field(description="The angle is drawn in [-factor, factor] x 2 pi.")
    fill_mode: FillMode = "reflect"


if TYPE_CHECKING:  # factor_or picks a branch at run time; statically, the union of its branches
    Rotation: TypeAlias = float | RotationArgs
else:
    Rotation = factor_or(RotationArgs, "a fraction of a full turn in [0, 1] or {factor, fill_mode}")


class RandomRotation(SpecModel):
    random_rotation: Rotation


def _keras(value: Any) -> tuple[str, dict[str, Any]]:
    a = args(value, RotationArgs)
    return "RandomRotation", {"factor": a.factor, "fill_mode": a.fill_mode}


KINDS = (AugmentDef(
    name="random_rotation",
    spec=RandomRotation,
    doc="`<fraction of a turn>` or `{factor, fill_mode}` (fill_mode reflect, wrap, constant or nearest; "
        "default reflect)",
    example=0.05,
    keras=_keras,
    describe=lambda v: f"random_rotation ±{args(v, RotationArgs).factor:g} turn ({args(v, RotationArgs).fill_mode})",
),)
