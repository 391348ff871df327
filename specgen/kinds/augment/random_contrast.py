"""`random_contrast: f` or `{factor: f, value_range: [0, 255]}`: keras.layers.RandomContrast((f, f)), each
image's deviation from its mean scaled by a factor drawn uniformly in [1 - f, 1 + f], the result clipped to
value_range. The factor goes to Keras as a pair: a scalar f would draw in [1, 1 + f] (Keras 3.15 clamps a
scalar's lower bound at 0, contrary to its own docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment.base import AugmentDef, Fraction, ValueRange, args, factor_or


class ContrastArgs(ValueRange):
    factor: Fraction = Field(description="Contrast scale drawn in [1 - factor, 1 + factor].")


if TYPE_CHECKING:  # factor_or picks a branch at run time; statically, the union of its branches
    Contrast: TypeAlias = float | ContrastArgs
else:
    Contrast = factor_or(ContrastArgs, "a fraction in [0, 1] or {factor, value_range}")


class RandomContrast(SpecModel):
    random_contrast: Contrast


def _keras(value: Any) -> tuple[str, dict[str, Any]]:
    a = args(value, ContrastArgs)
    # As a pair: Keras 3.15 clamps a scalar's lower bound to its _FACTOR_BOUNDS (0, 1), so RandomContrast(f)
    # draws in [1, 1 + f]; the pair (f, f) is its documented [1 - f, 1 + f] (tests/test_augment_parity.py).
    return "RandomContrast", {"factor": (a.factor, a.factor), "value_range": tuple(a.value_range)}


def _describe(value: Any) -> str:
    a = args(value, ContrastArgs)
    return f"random_contrast x[{1 - a.factor:g}, {1 + a.factor:g}] in [{a.value_range[0]:g}, {a.value_range[1]:g}]"


KINDS = (AugmentDef(
    name="random_contrast",
    spec=RandomContrast,
    doc="`<fraction>` or `{factor, value_range}` (value_range default [0, 255]): each image's deviation from its "
        "mean scaled by a factor uniform in [1 - factor, 1 + factor]",
    example=0.2,
    keras=_keras,
    describe=_describe,
),)
