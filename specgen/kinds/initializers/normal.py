"""`kind: random_normal` and `kind: truncated_normal`: Keras' RandomNormal and TruncatedNormal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from specgen.fields.base import Float, PositiveFloat, SpecModel
from specgen.kinds.initializers.base import InitializerDef, Moments, Shape, runtime

# Var(truncated_normal) / stddev^2 for TensorFlow's truncation at two standard deviations;
# Keras divides the glorot/he normal stddev by its square root, 0.87962566103423978.
TRUNCATED_VARIANCE = 0.7737413035499232


class Normal(SpecModel):
    kind: Literal["random_normal", "truncated_normal"]
    mean: Float = 0.0
    stddev: PositiveFloat = 0.05


def _moments(factor: float) -> Callable[[Mapping[str, float], Shape], Moments]:
    def moments(args: Mapping[str, float], shape: Shape) -> Moments:
        mean, std = args.get("mean", 0.0), args.get("stddev", 0.05)
        return mean, factor * std * std + mean * mean
    return moments


KINDS = (
    InitializerDef("random_normal", Normal, runtime("random_normal"), _moments(1.0), keras=("RandomNormal",)),
    InitializerDef("truncated_normal", Normal, runtime("truncated_normal"), _moments(TRUNCATED_VARIANCE),
                   keras=("TruncatedNormal",)),
)
