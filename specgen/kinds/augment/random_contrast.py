"""`random_contrast: f` or `{factor: f, value_range: [0, 255]}`: keras.layers.RandomContrast(f), each image's
deviation from its mean scaled by a factor drawn in [1 - f, 1 + f], the result clipped to value_range."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from specgen.kinds.augment.base import AugmentDef, Fraction, ValueRange, args, factor_or
from specgen.spec.base import SpecModel


class ContrastArgs(ValueRange):
    factor: Fraction = Field(description="Contrast scale drawn in [1 - factor, 1 + factor].")


class RandomContrast(SpecModel):
    random_contrast: factor_or(ContrastArgs, "a fraction in [0, 1] or {factor, value_range}")


def _keras(value: Any) -> tuple[str, dict[str, Any]]:
    a = args(value, ContrastArgs)
    return "RandomContrast", {"factor": a.factor, "value_range": tuple(a.value_range)}


def _describe(value: Any) -> str:
    a = args(value, ContrastArgs)
    return f"random_contrast x[{1 - a.factor:g}, {1 + a.factor:g}] in [{a.value_range[0]:g}, {a.value_range[1]:g}]"


KINDS = (AugmentDef(
    name="random_contrast",
    spec=RandomContrast,
    doc="`<fraction>` or `{factor, value_range}` (value_range default [0, 255])",
    example=0.2,
    keras=_keras,
    describe=_describe,
),)
