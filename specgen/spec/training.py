"""The `train` section: its shared keys here, each training feature's key from its module (specgen/kinds/features/).

`Train` is built from `TrainShared` and every feature's `TrainKey`, in the order `features.place_keys` gives (the
JSON schema's and `specgen validate --resolved`'s), so adding a feature adds no field here. Statically `Train` is
`TrainShared`: code outside a feature's module reads the feature's value through the IR and its typed accessor.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import Field, create_model

from specgen.fields.base import Flag, NonNegativeInt, PositiveInt, SpecModel
from specgen.fields.unions import by_shape
from specgen.kinds.features import TRAIN_KEYS, place_keys
from specgen.kinds.metrics import Metric
from specgen.spec.tracking import Tracking


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


class TrainShared(SpecModel):
    """The keys of `train` that are no feature's: the features' keys join them in `Train`."""

    batch_size: BatchSize = Field(description="Examples per micro-batch, or 'full': the whole training set.")
    epochs: NonNegativeInt = 1
    metrics: list[Metric] = Field(default_factory=list)
    seed: NonNegativeInt = 0
    shuffle_buffer: PositiveInt = 10_000
    jit_compile: Flag = Field(False, description="Compile the training step with XLA (tf.function(jit_compile=True)).")
    tracking: Tracking | None = Field(None, description="Experiment tracking besides TensorBoard (docs/tracking.md).")


def _train_model() -> type[SpecModel]:
    """TrainShared's fields and every feature's key, as one model named `Train` (its schema's title)."""
    shared = TrainShared.model_fields
    taken = [k.name for k in TRAIN_KEYS if k.name in shared]
    if taken:
        raise RuntimeError(f"training features add train keys that are shared keys: {taken}")
    fields = {name: (info.annotation, info) for name, info in shared.items()}
    # A feature's switch, even one a plugin declares as a plain `bool`, takes true or false only (fields.base.Flag).
    fields |= {k.name: (Flag if k.annotation is bool else k.annotation, k.field) for k in TRAIN_KEYS}
    ordered: dict[str, Any] = {name: fields[name] for name in place_keys(list(shared))}
    return create_model("Train", __base__=SpecModel, __module__=__name__, **ordered)


if TYPE_CHECKING:
    Train: TypeAlias = TrainShared
else:
    Train = _train_model()
