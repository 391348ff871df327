"""`kind: random_uniform`: uniform in [minval, maxval); Keras' RandomUniform."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import model_validator

from specgen.fields.base import Float, SpecModel
from specgen.kinds.initializers.base import InitializerDef, Moments, Shape, runtime


class Uniform(SpecModel):
    kind: Literal["random_uniform"]
    minval: Float = -0.05
    maxval: Float = 0.05

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.minval >= self.maxval:
            raise ValueError(f"minval {self.minval} must be below maxval {self.maxval}")
        return self


def _moments(args: Mapping[str, float], shape: Shape) -> Moments:
    low, high = args.get("minval", -0.05), args.get("maxval", 0.05)
    mean = (low + high) / 2
    return mean, (high - low) * (high - low) / 12 + mean * mean


KINDS = (InitializerDef("random_uniform", Uniform, runtime("random_uniform"), _moments, keras=("RandomUniform",)),)
