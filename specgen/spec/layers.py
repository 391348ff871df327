"""Field types and base classes that layer models share.

Each op's own model lives with the rest of its definition in specgen/kinds/ops/<module>.py;
the discriminated union of them all is `specgen.kinds.ops.Layer`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specgen.spec.base import (
    Float,
    LayerName,
    PositiveFloat,
    PositiveInt,
    SpecModel,
)
from specgen.spec.unions import by_shape, scalar_or_list, scalar_or_mapping

# The ops a layer's `activation:` key accepts (each defines AsActivation in specgen/kinds/ops;
# tests/test_op_registry.py checks the two agree). Kept as a literal here for the JSON schema's enum.
Activation = Literal["relu", "leaky_relu", "gelu", "gelu_approximate", "sigmoid", "tanh", "softmax", "relu6", "elu",
                     "selu", "softplus", "swish", "silu", "hard_sigmoid", "hard_swish", "hard_silu", "linear"]
Padding = Literal["same", "valid"]
Size2 = by_shape(scalar_or_list, "an integer or a list of 2 integers",
                 scalar=PositiveInt, list=Annotated[list[PositiveInt], Field(min_length=2, max_length=2)])


class Constant(SpecModel):
    kind: Literal["constant"]
    value: Float


class Zeros(SpecModel):
    kind: Literal["zeros"]


class Ones(SpecModel):
    kind: Literal["ones"]


class Normal(SpecModel):
    kind: Literal["random_normal", "truncated_normal"]
    mean: Float = 0.0
    stddev: PositiveFloat = 0.05


class Uniform(SpecModel):
    kind: Literal["random_uniform"]
    minval: Float = -0.05
    maxval: Float = 0.05

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.minval >= self.maxval:
            raise ValueError(f"minval {self.minval} must be below maxval {self.maxval}")
        return self


class VarianceScaling(SpecModel):
    """Keras' fan-based initializers, computed from the variable's shape."""

    kind: Literal["glorot_uniform", "glorot_normal", "he_normal", "he_uniform"]


class Orthogonal(SpecModel):
    """Keras' Orthogonal: a random orthogonal matrix (QR of a normal draw) times `gain`."""

    kind: Literal["orthogonal"]
    gain: Float = 1.0


InitializerName = Literal[
    "zeros", "ones", "glorot_uniform", "glorot_normal", "he_normal", "he_uniform",
    "random_normal", "truncated_normal", "random_uniform", "orthogonal",
]
Initializer = Annotated[
    Constant | Zeros | Ones | Normal | Uniform | VarianceScaling | Orthogonal, Field(discriminator="kind")
]
# `kernel_init: he_normal` is short for `kernel_init: {kind: he_normal}`.
InitializerSpec = by_shape(scalar_or_mapping, "an initializer name or a mapping with 'kind'",
                           scalar=InitializerName, mapping=Initializer)


# A layer with `share:` is a second call of another layer: its owner's variables, op and configuration
# (docs/spec.md, "Shared layers"; checked in specgen/ir/shares.py).
SHARE_DESCRIPTION = ("Reuse this layer's variables (a layer called twice): same op, and every other key "
                     "equal to that layer's or left out (left out: that layer's value).")


class LayerBase(SpecModel):
    name: LayerName
    input: LayerName | None = Field(None, description="Input layer or spec input; defaults to the previous layer.")
    share: LayerName | None = Field(None, description=SHARE_DESCRIPTION)


class MultiInputBase(SpecModel):
    name: LayerName
    inputs: Annotated[list[LayerName], Field(min_length=2)]
    share: LayerName | None = Field(None, description=SHARE_DESCRIPTION)
