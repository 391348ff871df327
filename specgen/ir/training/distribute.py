"""The resolved `train.distribute` section: the strategy a run uses and how replicas meet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STRATEGIES = ("default", "mirrored", "multi_worker")


@dataclass(frozen=True)
class DistributeIR:
    strategy: str = "default"  # one of STRATEGIES
    sync_batch_norm: bool = False  # batch-norm moments all-reduced over the global batch
    cpu_devices: int = 1  # logical CPU devices (one replica each) when there is no GPU

    @property
    def distributed(self) -> bool:
        return self.strategy != "default"


def build_distribute(section: Any) -> DistributeIR:
    """From the spec's `train.distribute` (always present: pydantic fills the defaults)."""
    return DistributeIR(section.strategy, section.sync_batch_norm, section.cpu_devices)
