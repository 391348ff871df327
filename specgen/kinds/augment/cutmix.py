"""`cutmix: factor`: keras.layers.CutMix((factor, factor)): a box of another image of the batch pasted into each
image, its area ratio drawn from Beta(factor, factor), and the one-hot labels mixed by area; the loss takes soft
labels.

Why the pair: Keras 3's CutMix(f) draws the Beta's alpha uniformly in [0, f] for each batch and then the ratio from
Beta(alpha, alpha); the pair (f, f) fixes alpha at f, the documented Beta(f, f) (as random_contrast passes (f, f)).
Keras accepts factors in [0, 1] only, so the spec does too: a larger one would validate and then fail at the first
training step."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specgen.fields.base import SpecModel, bounds
from specgen.kinds.augment.base import AugmentDef


class CutMix(SpecModel):
    cutmix: Annotated[float, *bounds(float, gt=0, le=1)] = Field(
        description="The Beta(factor, factor) of the pasted area, in (0, 1] as Keras takes it (Keras' default 1.0).")


KINDS = (AugmentDef(
    name="cutmix",
    spec=CutMix,
    doc="`<factor>` in (0, 1]: a box from another image of the batch pasted in, labels mixed by area, area ~ "
        "Beta(factor, factor)",
    example=1.0,
    keras=lambda factor: ("CutMix", {"factor": (factor, factor)}),
    describe=lambda factor: f"cutmix Beta({factor:g}, {factor:g}), labels mixed",
    mixes_labels=True,
),)
