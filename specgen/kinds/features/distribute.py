"""`train.distribute`: a mirrored or multi-worker strategy. Nothing in train.py: the runtime places the steps.

Its spec key (`Distribute`), its IR (`DistributeIR`) and its refusal beside `batch_size: full` live here; the
runtime that places the steps is specgen/runtime/placement/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from specgen.fields.base import Flag, PositiveInt, SpecModel
from specgen.kinds.features.base import FeatureDef, Refusal, TrainKey

Strategy = Literal["default", "mirrored", "multi_worker"]


class Distribute(SpecModel):
    strategy: Strategy = Field("default", description="default: one device; mirrored: every GPU of this machine "
                               "(or its CPU); multi_worker: the workers TF_CONFIG names, each with its GPUs or CPU.")
    sync_batch_norm: Flag = Field(False, description="Batch-norm statistics over the global batch (an all-reduce per "
                                  "layer and step) instead of each replica's slice.")
    cpu_devices: PositiveInt = Field(1, le=64, description="On a machine without GPUs, split the CPU into this many "
                                     "logical devices, one replica each (to try a strategy out; it is not faster).")


@dataclass(frozen=True)
class DistributeIR:
    strategy: str = "default"  # one of Strategy
    sync_batch_norm: bool = False  # batch-norm moments all-reduced over the global batch
    cpu_devices: int = 1  # logical CPU devices (one replica each) when there is no GPU

    @property
    def distributed(self) -> bool:
        return self.strategy != "default"


def resolve(section: Distribute) -> DistributeIR:
    """From the spec's `train.distribute` (always present: pydantic fills the defaults)."""
    return DistributeIR(section.strategy, section.sync_batch_norm, section.cpu_devices)


def of(train: Any) -> DistributeIR:
    """train.distribute of a TrainIR."""
    settings: DistributeIR = train.distribute
    return settings


def cpu_devices(train: Any | None) -> int:
    """The logical CPU devices a run splits a GPU-less machine into (TrainIR, or None without a train section)."""
    return 1 if train is None else of(train).cpu_devices


# train.distribute keys that act only under a strategy (one device has no CPU to split and no replicas' moments to
# sync). A --set of them is kept with the run (meta.json) while --strategy is per command, so a run started with
# `--strategy mirrored --set train.distribute.cpu_devices=2` and resumed with a plain --resume trains on one
# device. The resume line says so (`without_strategy`) rather than dropping the kept --set: dropped, a later
# `--resume --strategy mirrored` would lose the run's replica count without a word.
STRATEGY_ONLY = ("train.distribute.cpu_devices", "train.distribute.sync_batch_norm")
IDLE = "no effect without --strategy mirrored or multi_worker"


def without_strategy(override: str) -> bool:
    """Whether `--set KEY=VALUE` sets a key that does nothing in a run without a strategy."""
    return override.split("=", 1)[0].strip() in STRATEGY_ONLY


TRAIN_KEY = TrainKey("distribute", Distribute, Field(default_factory=Distribute, description=(
    "Training under tf.distribute (docs/distributed.md); batch_size is the global batch.")),
    after="shuffle_buffer", ir_type=DistributeIR, ir_default=DistributeIR, resolve=resolve)

FEATURE = FeatureDef(
    name="distribute",
    doc="data-parallel replicas (mirrored, multi_worker) with all-reduced gradients",
    spec_keys=("train.distribute.strategy", "train.distribute.sync_batch_norm"),
    enabled=lambda ir: of(ir.training.train).distributed,
    train_key=TRAIN_KEY,
    table=(("distribute", "`train.distribute.strategy`: mirrored or multi_worker"),),
    refuses=(("distribute", "full_batch", Refusal("specgen train, at train.batch_size", (
        "batch_size: full under the {strategy} strategy: give the global batch as a number that splits evenly "
        "among the {replicas} replicas"))),),
    runtime=("specgen.runtime.placement.replicas", "specgen.runtime.lib.optimizers.global_gradients"),
    after=("loss_terms",),  # runtime placement around the whole step
)
