"""`cutmix: factor`: keras.layers.CutMix(factor): a box of another image of the batch pasted into each image,
its area ratio drawn from Beta(factor, factor), and the one-hot labels mixed by area; the loss takes soft labels."""

from __future__ import annotations

from pydantic import Field

from specgen.kinds.augment.base import AugmentDef
from specgen.spec.base import PositiveFloat, SpecModel


class CutMix(SpecModel):
    cutmix: PositiveFloat = Field(description="The Beta(factor, factor) of the pasted area (Keras' default 1.0).")

KINDS = (AugmentDef(
    name="cutmix",
    spec=CutMix,
    doc="`<factor>`: a box from another image of the batch pasted in, labels mixed by area, area ~ "
        "Beta(factor, factor)",
    example=1.0,
    keras=lambda factor: ("CutMix", {"factor": factor}),
    describe=lambda factor: f"cutmix Beta({factor:g}, {factor:g}), labels mixed",
    mixes_labels=True,
),)
