"""Render-ready facts for the target-network updates in train.py (templates/tf/features/targets.py.j2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.ir.model import ModelIR
from specgen.ir.training import TrainingIR


@dataclass(frozen=True)
class TargetPlan:
    name: str
    attr: str  # attribute prefix in the generated module
    tau: float | None  # soft update rate, or None for a hard copy
    every_steps: int | None
    pairs: tuple[tuple[str, str], ...]  # (online path, target path)

    @property
    def online(self) -> list[str]:
        return [o for o, _ in self.pairs]

    @property
    def copies(self) -> list[str]:
        return [t for _, t in self.pairs]

    @property
    def how(self) -> str:
        """A comment's description of the rule."""
        if self.tau is not None:
            return f"soft, after every update: target <- (1 - {self.tau!r}) * target + {self.tau!r} * online"
        return f"hard, after every {self.every_steps}-th update: target <- online"


def target_plans(training: TrainingIR) -> list[TargetPlan]:
    return [TargetPlan(t.name, f"target_{t.name}", t.tau, t.every_steps, t.pairs) for t in training.targets]


def targets_context(ir: ModelIR) -> dict[str, Any]:
    """The targets partial's context."""
    assert ir.training is not None
    return {"targets": target_plans(ir.training)}
