"""The `train` section; the `loss` and `optimizers` unions come from the registries (specgen/kinds/)."""

from __future__ import annotations

from difflib import get_close_matches
from typing import TYPE_CHECKING, Literal, TypeAlias

from pydantic import Field

from specgen.fields.base import NonNegativeInt, PositiveInt, SpecModel, UnitInterval
from specgen.fields.unions import by_shape
from specgen.kinds.metrics import Metric
from specgen.kinds.optimizers import Clip
from specgen.spec.distribute import Distribute
from specgen.spec.tracking import Tracking

# The compute precisions of training (Keras' mixed-precision policy names); float32 is the default.
Precision = Literal["float32", "mixed_float16", "mixed_bfloat16"]


class Ema(SpecModel):
    decay: UnitInterval
    eval: bool = Field(True, description="Evaluate with the shadow weights.")


def _batch_size_shape(value: object) -> str | None:
    """A string near 'full' is a misspelling of it (did you mean 'full'?); other strings fit neither branch."""
    if isinstance(value, str):
        return "full" if get_close_matches(value, ["full"], cutoff=0.6) else None
    return "count"


# `full`: the whole training set is one batch (levenberg_marquardt needs it; any optimizer may use it).
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    BatchSize: TypeAlias = int | Literal["full"]
else:
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
    precision: Precision = Field("float32", description="Keras' policy names: variables, slots, EMA shadows and "
                                 "checkpoints stay float32; mixed_* compute in float16 or bfloat16 (docs/training.md).")
    jit_compile: bool = Field(False, description="Compile the training step with XLA (tf.function(jit_compile=True)).")
    tracking: Tracking | None = Field(None, description="Experiment tracking besides TensorBoard (docs/tracking.md).")
