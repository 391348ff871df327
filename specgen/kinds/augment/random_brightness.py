"""`random_brightness: f` or `{factor: f, value_range: [0, 255]}`: keras.layers.RandomBrightness(f), a shift
drawn in [-f, f] x (high - low) per image, the result clipped to value_range."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment.base import AugmentDef, Fraction, ValueRange, args, factor_or


class BrightnessArgs(ValueRange):
    factor: Fraction = Field(description="Shift drawn in [-factor, factor] of the value range.")


if TYPE_CHECKING:  # factor_or picks a branch at run time; statically, the union of its branches
    Brightness: TypeAlias = float | BrightnessArgs
else:
    Brightness = factor_or(BrightnessArgs, "a fraction in [0, 1] or {factor, value_range}")


class RandomBrightness(SpecModel):
    random_brightness: Brightness


def _keras(value: Any) -> tuple[str, dict[str, Any]]:
    a = args(value, BrightnessArgs)
    return "RandomBrightness", {"factor": a.factor, "value_range": tuple(a.value_range)}


def _describe(value: Any) -> str:
    a = args(value, BrightnessArgs)
    return f"random_brightness ±{a.factor:g} of [{a.value_range[0]:g}, {a.value_range[1]:g}]"


KINDS = (AugmentDef(
    name="random_brightness",
    spec=RandomBrightness,
    doc="`<fraction>` or `{factor, value_range}` (value_range default [0, 255])",
    example=0.2,
    keras=_keras,
    describe=_describe,
),)
