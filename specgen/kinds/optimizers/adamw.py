"""`kind: adamw`: Adam with Keras' AdamW default of decoupled weight decay (0.004); the same update."""

from __future__ import annotations

from typing import Literal

from specgen.kinds.optimizers.adam import Adam, slots, update
from specgen.kinds.optimizers.base import Decay, OptimizerDef


class AdamW(Adam):
    """Adam with Keras' AdamW default of decoupled weight decay."""

    kind: Literal["adamw"]  # type: ignore[assignment]
    weight_decay: Decay = 0.004


KINDS = (OptimizerDef("adamw", AdamW, "specgen.runtime.lib.optimizers.adam", update, slots),)
