"""`mixup: alpha`: keras.layers.MixUp(alpha): each image and its one-hot label mixed with those
of another image of the batch, with a weight drawn from Beta(alpha, alpha); the loss takes the soft labels."""

from __future__ import annotations

from pydantic import Field

from specgen.fields.base import PositiveFloat, SpecModel
from specgen.kinds.augment.base import AugmentDef


class MixUp(SpecModel):
    mixup: PositiveFloat = Field(description="alpha of the Beta(alpha, alpha) mixing weight (Keras' default 0.2).")

KINDS = (AugmentDef(
    name="mixup",
    spec=MixUp,
    doc="`<alpha>`: images and one-hot labels mixed pairwise within the batch, weight ~ Beta(alpha, alpha)",
    example=0.2,
    keras=lambda alpha: ("MixUp", {"alpha": alpha}),
    describe=lambda alpha: f"mixup Beta({alpha:g}, {alpha:g}), labels mixed",
    mixes_labels=True,
),)
