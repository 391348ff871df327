"""`random_flip: horizontal | vertical | horizontal_and_vertical`: keras.layers.RandomFlip(mode)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment.base import AugmentDef

Mode = Literal["horizontal", "vertical", "horizontal_and_vertical"]


class RandomFlip(SpecModel):
    random_flip: Mode = Field(description="Which flips, each with probability 0.5 per image.")


KINDS = (AugmentDef(
    name="random_flip",
    spec=RandomFlip,
    doc="`horizontal`, `vertical` or `horizontal_and_vertical`: each image flipped with probability 0.5",
    example="horizontal",
    keras=lambda mode: ("RandomFlip", {"mode": mode}),
    describe=lambda mode: f"random_flip {mode} (p=0.5 per image)",
),)
