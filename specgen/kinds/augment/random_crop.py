"""`random_crop: {size: [h, w], pad: p}`: zero-pad p pixels on each side, then keras.layers.RandomCrop(h, w).

Keras' layer draws one crop offset per batch; the output is [h, w], so the model's image input is [h, w, c].
At eval (and export) the entry is Keras' documented inference of RandomCrop: the largest centered window of
the crop's aspect ratio, resized (bilinear) to [h, w] -- keras.layers.Resizing(h, w, crop_to_aspect_ratio=True),
whose window is computed by the same formula. Not the layer itself at training=False: Keras 3.15's RandomCrop
returns its input unchanged there (keras-team/keras#21868), which no [h, w] model could take. The pad is a
training-only step, so eval resizes the unpadded image.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specgen.fields.base import NonNegativeInt, PositiveInt, SpecModel
from specgen.kinds.augment.base import AugmentDef, Size


class CropArgs(SpecModel):
    size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] = Field(
        description="[height, width] of the crop: the size of the images the model trains on.")
    pad: NonNegativeInt = Field(0, description="Zero pixels added on each side before cropping.")


class RandomCrop(SpecModel):
    random_crop: CropArgs


def _refuse(value: CropArgs, size: Size) -> str | None:
    padded = [s + 2 * value.pad for s in size]
    if any(c > p for c, p in zip(value.size, padded, strict=True)):
        return (f"random_crop size {value.size} is larger than the image: {list(size)} plus pad {value.pad} on "
                f"each side is {padded}; expected a size of at most {padded}")
    return None


KINDS = (AugmentDef(
    name="random_crop",
    spec=RandomCrop,
    doc="`{size: [<height>, <width>], pad: <pixels>}` (pad default 0): zero-pad, then crop `size` at one random "
        "offset per batch; at eval, the centered window of `size`'s aspect ratio resized to `size`",
    example={"size": [6, 6], "pad": 1},
    keras=lambda v: ("RandomCrop", {"height": v.size[0], "width": v.size[1]}),
    describe=lambda v: f"random_crop {v.size[0]}x{v.size[1]} after zero pad {v.pad}",
    size=lambda v, size: (v.size[0], v.size[1]),
    refuse=_refuse,
    pad=lambda v: v.pad,
    inference=lambda v: ("Resizing", {"height": v.size[0], "width": v.size[1], "crop_to_aspect_ratio": True}),
),)
