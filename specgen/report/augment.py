"""The report's augmentation section: `data.train.augment`, one line per entry (specgen/kinds/augment)."""

from __future__ import annotations

from specgen.ir.model import ModelIR
from specgen.kinds.augment import describe


def augment_table(ir: ModelIR) -> str | None:
    source = ir.training.data.get("train") if ir.training else None
    if source is None or not source.augment:
        return None
    lines = [f"  {i}. {describe(item)}" for i, item in enumerate(source.augment, 1)]
    return ("augmentation (data.train; training batches only, never eval or export; drawn from train.seed "
            "and the batch count):\n" + "\n".join(lines))
