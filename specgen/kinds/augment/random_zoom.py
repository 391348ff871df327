"""`random_zoom: f` or `{factor: f, width: g, fill_mode: reflect}`: keras.layers.RandomZoom(f, g), a zoom
drawn in [-f, f] per image (positive zooms out); without `width` the aspect ratio is kept."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment.base import AugmentDef, FillMode, Fraction, args, factor_or


class ZoomArgs(SpecModel):
    factor: Fraction = Field(description="Height zoom drawn in [-factor, factor].")
    width: Fraction | None = Field(None, description="Width zoom range; default: the height's (aspect kept).")
    fill_mode: FillMode = "reflect"


if TYPE_CHECKING:  # factor_or picks a branch at run time; statically, the union of its branches
    Zoom: TypeAlias = float | ZoomArgs
else:
    Zoom = factor_or(ZoomArgs, "a fraction in [0, 1] or {factor, width, fill_mode}")


class RandomZoom(SpecModel):
    random_zoom: Zoom


def _keras(value: Any) -> tuple[str, dict[str, Any]]:
    a = args(value, ZoomArgs)
    return "RandomZoom", {"height_factor": a.factor, "width_factor": a.width, "fill_mode": a.fill_mode}


def _describe(value: Any) -> str:
    a = args(value, ZoomArgs)
    width = "aspect kept" if a.width is None else f"width ±{a.width:g}"
    return f"random_zoom ±{a.factor:g} ({width}, {a.fill_mode})"


KINDS = (AugmentDef(
    name="random_zoom",
    spec=RandomZoom,
    doc="`<fraction>` or `{factor, width, fill_mode}` (width default: aspect kept; fill_mode default reflect)",
    example=0.1,
    keras=_keras,
    describe=_describe,
),)
