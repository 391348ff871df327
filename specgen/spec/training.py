"""The `loss`, `optimizers` and `train` sections."""

from __future__ import annotations

from difflib import get_close_matches
from typing import Annotated, Literal

from pydantic import Field, model_validator

from specgen.spec.base import (
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
from specgen.spec.levenberg_marquardt import LevenbergMarquardtKeys
from specgen.spec.losses import Loss, Selection  # noqa: F401 (Loss: the section spec/model.py reads)
from specgen.spec.unions import by_key, by_shape, scalar_or_mapping


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


class WeightDecay(SpecModel):
    """Decoupled weight decay with exceptions (biases and norm parameters, usually)."""

    rate: NonNegativeFloat
    exclude: Annotated[list[Pattern], Field(min_length=1, description=(
        "Collection names or glob patterns over this optimizer's weights that get no decay; each must match one."))]


Decay = by_shape(scalar_or_mapping, "a number or a mapping {rate, exclude}", scalar=NonNegativeFloat,
                 mapping=WeightDecay)


class OptimizerBase(SpecModel):
    # Left out (or `trainable`, as users of tf.trainable_variables() write it): every weight that is
    # not frozen and not claimed by another optimizer; at most one optimizer may do so (ir/collections.py).
    variables: Selection | None = Field(None, description=(
        "A collection name, a glob pattern, or a list of them. Left out, or 'trainable': every weight that is "
        "not frozen and not claimed by another optimizer (one optimizer at most)."))
    learning_rate: LearningRate
    weight_decay: Decay = 0.0
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
    weight_decay: Decay = 0.004


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


class LevenbergMarquardt(LevenbergMarquardtKeys):
    """Levenberg-Marquardt: damped Gauss-Newton steps for a mean_squared_error fit on the whole training set
    (train.batch_size: full). It takes no learning rate: the damping sets the step."""

    # Its keys and the refusals of learning_rate, weight_decay and clip: spec/levenberg_marquardt.py.

    kind: Literal["levenberg_marquardt"]
    variables: Selection | None = Field(None, description=OptimizerBase.model_fields["variables"].description)


Optimizer = Annotated[Sgd | Adam | AdamW | RmsProp | Adagrad | LevenbergMarquardt, Field(discriminator="kind")]


class Ema(SpecModel):
    decay: UnitInterval
    eval: bool = Field(True, description="Evaluate with the shadow weights.")


Metric = Literal["accuracy", "mean_loss", "auc", "precision", "recall"]


def _batch_size_shape(value: object) -> str | None:
    """A string near 'full' is a misspelling of it (did you mean 'full'?); other strings fit neither branch."""
    if isinstance(value, str):
        return "full" if get_close_matches(value, ["full"], cutoff=0.6) else None
    return "count"


# `full`: the whole training set is one batch (levenberg_marquardt needs it; any optimizer may use it).
BatchSize = by_shape(_batch_size_shape, "a positive integer or 'full'", count=PositiveInt, full=Literal["full"])


class Train(SpecModel):
    batch_size: BatchSize = Field(description="Examples per micro-batch, or 'full': the whole training set.")
    epochs: NonNegativeInt = 1
    accumulate: PositiveInt = Field(1, description="Micro-batches per optimizer update.")
    clip: Clip | None = None
    ema: Ema | None = None
    metrics: list[Metric] = Field(default_factory=list)
    seed: NonNegativeInt = 0
    shuffle_buffer: PositiveInt = 10_000
    distribute: Distribute = Field(default_factory=Distribute, description="Training under tf.distribute "
                                   "(docs/distributed.md); batch_size is the global batch.")
