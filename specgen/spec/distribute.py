"""The `train.distribute` section: which tf.distribute strategy `specgen train` runs under."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import PositiveInt, SpecModel

Strategy = Literal["default", "mirrored", "multi_worker"]


class Distribute(SpecModel):
    strategy: Strategy = Field("default", description="default: one device; mirrored: every GPU of this machine "
                               "(or its CPU); multi_worker: the workers TF_CONFIG names, each with its GPUs or CPU.")
    sync_batch_norm: bool = Field(False, description="Batch-norm statistics over the global batch (an all-reduce per "
                                  "layer and step) instead of each replica's slice.")
    cpu_devices: PositiveInt = Field(1, le=64, description="On a machine without GPUs, split the CPU into this many "
                                     "logical devices, one replica each (to try a strategy out; it is not faster).")
