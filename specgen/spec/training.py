"""The `loss`, `optimizers` and `train` sections."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from specgen.spec.base import (
    Identifier,
    NonNegativeFloat,
    NonNegativeInt,
    Pattern,
    PositiveFloat,
    PositiveInt,
    SpecModel,
    UnitInterval,
    number,
)
from specgen.spec.distribute import Distribute
from specgen.spec.unions import by_key, by_shape, scalar_or_list, scalar_or_mapping


class ClassificationLoss(SpecModel):
    kind: Literal["sparse_softmax_cross_entropy", "softmax_cross_entropy", "sigmoid_cross_entropy"]
    logits: Identifier = Field(description="An output name.")
    labels: Identifier = Field(description="A label name from the data section.")


class RegressionLoss(SpecModel):
    kind: Literal["mean_squared_error", "mean_absolute_error"]
    predictions: Identifier = Field(description="An output name.")
    labels: Identifier


Loss = Annotated[ClassificationLoss | RegressionLoss, Field(discriminator="kind")]


class ScheduleBase(SpecModel):
    warmup_steps: NonNegativeInt = Field(0, description="Linear warm-up from 0 in front of the schedule.")


class ConstantSchedule(ScheduleBase):
    schedule: Literal["constant"]
    initial: NonNegativeFloat


class ExponentialDecay(ScheduleBase):
    schedule: Literal["exponential_decay"]
    initial: NonNegativeFloat
    decay_steps: PositiveInt
    decay_rate: PositiveFloat
    staircase: bool = False


class CosineDecay(ScheduleBase):
    schedule: Literal["cosine_decay"]
    initial: NonNegativeFloat
    decay_steps: PositiveInt
    alpha: number(float, ge=0, le=1) = 0.0


class PiecewiseConstant(ScheduleBase):
    schedule: Literal["piecewise_constant"]
    boundaries: Annotated[list[PositiveInt], Field(min_length=1)]
    values: Annotated[list[NonNegativeFloat], Field(min_length=2)]

    @model_validator(mode="after")
    def _consistent(self) -> PiecewiseConstant:
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError(f"piecewise_constant needs one more value than boundaries; received "
                             f"{len(self.boundaries)} boundaries and {len(self.values)} values")
        if any(b >= a for b, a in zip(self.boundaries, self.boundaries[1:], strict=False)):
            raise ValueError(f"boundaries must increase strictly; received {self.boundaries}")
        return self


Schedule = Annotated[
    ConstantSchedule | ExponentialDecay | CosineDecay | PiecewiseConstant,
    Field(discriminator="schedule"),
]
LearningRate = by_shape(scalar_or_mapping, "a number or a schedule mapping", scalar=NonNegativeFloat, mapping=Schedule)


class ClipGlobalNorm(SpecModel):
    global_norm: PositiveFloat


class ClipValue(SpecModel):
    value: PositiveFloat


Clip = by_shape(by_key("global_norm", "value"), "a mapping with exactly one of 'global_norm' or 'value'",
                global_norm=ClipGlobalNorm, value=ClipValue)
Selection = by_shape(scalar_or_list, "a collection name, a pattern or a list of them",
                     scalar=Pattern, list=Annotated[list[Pattern], Field(min_length=1)])


class OptimizerBase(SpecModel):
    # Left out (or `trainable`, as users of tf.trainable_variables() write it): every weight that is
    # not frozen and not claimed by another optimizer; at most one optimizer may do so (ir/collections.py).
    variables: Selection | None = Field(None, description=(
        "A collection name, a glob pattern, or a list of them. Left out, or 'trainable': every weight that is "
        "not frozen and not claimed by another optimizer (one optimizer at most)."))
    learning_rate: LearningRate
    weight_decay: NonNegativeFloat = 0.0
    clip: Clip | None = None


class Sgd(OptimizerBase):
    kind: Literal["sgd"]
    momentum: number(float, ge=0, lt=1) = 0.0
    nesterov: bool = False


class Adam(OptimizerBase):
    kind: Literal["adam"]
    beta_1: UnitInterval = 0.9
    beta_2: UnitInterval = 0.999
    epsilon: PositiveFloat = 1e-7


class AdamW(Adam):
    """Adam with Keras' AdamW default of decoupled weight decay."""

    kind: Literal["adamw"]  # type: ignore[assignment]
    weight_decay: NonNegativeFloat = 0.004


class RmsProp(OptimizerBase):
    kind: Literal["rmsprop"]
    rho: UnitInterval = 0.9
    momentum: number(float, ge=0, lt=1) = 0.0
    epsilon: PositiveFloat = 1e-7
    centered: bool = False


class Adagrad(OptimizerBase):
    kind: Literal["adagrad"]
    initial_accumulator_value: NonNegativeFloat = 0.1
    epsilon: PositiveFloat = 1e-7


Optimizer = Annotated[Sgd | Adam | AdamW | RmsProp | Adagrad, Field(discriminator="kind")]


class Ema(SpecModel):
    decay: UnitInterval
    eval: bool = Field(True, description="Evaluate with the shadow weights.")


Metric = Literal["accuracy", "mean_loss", "auc", "precision", "recall"]


class Train(SpecModel):
    batch_size: PositiveInt
    epochs: NonNegativeInt = 1
    accumulate: PositiveInt = Field(1, description="Micro-batches per optimizer update.")
    clip: Clip | None = None
    ema: Ema | None = None
    metrics: list[Metric] = Field(default_factory=list)
    seed: NonNegativeInt = 0
    shuffle_buffer: PositiveInt = 10_000
    distribute: Distribute = Field(default_factory=Distribute, description="Training under tf.distribute "
                                   "(docs/distributed.md); batch_size is the global batch.")
