"""Layer models: one class per `op`, joined in a discriminated union."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specgen.spec.base import (
    Float,
    Int,
    LayerName,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    SpecModel,
    number,
)
from specgen.spec.unions import by_shape, scalar_or_list, scalar_or_mapping

Activation = Literal["relu", "leaky_relu", "gelu", "sigmoid", "tanh", "softmax", "linear"]
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


InitializerName = Literal[
    "zeros", "ones", "glorot_uniform", "glorot_normal", "he_normal", "he_uniform",
    "random_normal", "truncated_normal", "random_uniform",
]
Initializer = Annotated[
    Constant | Zeros | Ones | Normal | Uniform | VarianceScaling, Field(discriminator="kind")
]
# `kernel_init: he_normal` is short for `kernel_init: {kind: he_normal}`.
InitializerSpec = by_shape(scalar_or_mapping, "an initializer name or a mapping with 'kind'",
                           scalar=InitializerName, mapping=Initializer)


class LayerBase(SpecModel):
    name: LayerName
    input: LayerName | None = Field(None, description="Input layer or spec input; defaults to the previous layer.")


class MultiInputBase(SpecModel):
    name: LayerName
    inputs: Annotated[list[LayerName], Field(min_length=2)]


class Dense(LayerBase):
    op: Literal["dense"]
    units: PositiveInt
    activation: Activation | None = None
    use_bias: bool = True
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


class ConvBase(LayerBase):
    """What conv2d and depthwise_conv2d share."""

    kernel: Size2
    strides: Size2 = 1
    padding: Padding = "valid"
    dilation: Size2 = 1
    activation: Activation | None = None
    use_bias: bool = True
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


class Conv2D(ConvBase):
    op: Literal["conv2d"]
    filters: PositiveInt


class DepthwiseConv2D(ConvBase):
    op: Literal["depthwise_conv2d"]
    depth_multiplier: PositiveInt = 1


class Pool(LayerBase):
    op: Literal["max_pool", "avg_pool"]
    size: Size2
    strides: Size2 | None = Field(None, description="Defaults to `size`.")
    padding: Padding = "valid"


class GlobalAvgPool(LayerBase):
    op: Literal["global_avg_pool"]


class Flatten(LayerBase):
    op: Literal["flatten"]


class Reshape(LayerBase):
    op: Literal["reshape"]
    shape: Annotated[list[number(int, ge=-1)],
                     Field(min_length=1, description="Without the batch dimension; one -1 allowed.")]


class BatchNorm(LayerBase):
    op: Literal["batch_norm"]
    momentum: number(float, gt=0, lt=1) = 0.99
    epsilon: PositiveFloat = 1e-3


class LayerNorm(LayerBase):
    op: Literal["layer_norm"]
    epsilon: PositiveFloat = 1e-3


class Dropout(LayerBase):
    op: Literal["dropout"]
    rate: number(float, ge=0, lt=1)


class Embedding(LayerBase):
    op: Literal["embedding"]
    vocab_size: PositiveInt
    dim: PositiveInt
    embeddings_init: InitializerSpec = "random_uniform"


class ActivationLayer(LayerBase):
    op: Literal["relu", "gelu", "sigmoid", "tanh"]


class LeakyRelu(LayerBase):
    op: Literal["leaky_relu"]
    alpha: NonNegativeFloat = 0.2


class Softmax(LayerBase):
    op: Literal["softmax"]
    axis: Int = -1


class Elementwise(MultiInputBase):
    op: Literal["add", "multiply"]


class Concat(MultiInputBase):
    op: Literal["concat"]
    axis: Int = Field(-1, description="Counted with the batch dimension as axis 0, which cannot be concatenated.")


Layer = Annotated[
    Dense | Conv2D | DepthwiseConv2D | Pool | GlobalAvgPool | Flatten | Reshape | BatchNorm
    | LayerNorm | Dropout | Embedding | ActivationLayer | LeakyRelu | Softmax | Elementwise | Concat,
    Field(discriminator="op"),
]

OPS: tuple[str, ...] = (
    "dense", "conv2d", "depthwise_conv2d", "max_pool", "avg_pool", "global_avg_pool", "flatten",
    "reshape", "batch_norm", "layer_norm", "dropout", "embedding", "relu", "leaky_relu", "gelu",
    "sigmoid", "tanh", "softmax", "add", "multiply", "concat",
)
