"""`random_translation: f` or `{factor: f, width: g, fill_mode: reflect}`: keras.layers.RandomTranslation(f, g),
a shift drawn in [-f, f] of the height (and [-g, g] of the width; default g = f) per image."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment.base import AugmentDef, FillMode, Fraction, args, factor_or


class TranslationArgs(SpecModel):
    factor: Fraction = Field(description="Vertical shift drawn in [-factor, factor] x height.")
    width: Fraction | None = Field(None, description="Horizontal shift range; default: factor.")
    fill_mode: FillMode = "reflect"


if TYPE_CHECKING:  # factor_or picks a branch at run time; statically, the union of its branches
    Translation: TypeAlias = float | TranslationArgs
else:
    Translation = factor_or(TranslationArgs, "a fraction in [0, 1] or {factor, width, fill_mode}")


class RandomTranslation(SpecModel):
    random_translation: Translation


def _keras(value: Any) -> tuple[str, dict[str, Any]]:
    a = args(value, TranslationArgs)
    width = a.factor if a.width is None else a.width
    return "RandomTranslation", {"height_factor": a.factor, "width_factor": width, "fill_mode": a.fill_mode}


def _describe(value: Any) -> str:
    a = args(value, TranslationArgs)
    return f"random_translation ±{a.factor:g} height, ±{a.factor if a.width is None else a.width:g} width ({a.fill_mode})"


KINDS = (AugmentDef(
    name="random_translation",
    spec=RandomTranslation,
    doc="`<fraction>` or `{factor, width, fill_mode}` (width default: factor; fill_mode default reflect)",
    example=0.1,
    keras=_keras,
    describe=_describe,
),)
