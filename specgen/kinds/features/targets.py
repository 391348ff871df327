"""`targets`: copies of online variables that follow them after each update, softly (tau) or every n steps.

Its IR is specgen/ir/targets.py (TargetIR: the pairs are model variables, their keys are their paths); its render
plan is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.kinds.features.base import FeatureDef


@dataclass(frozen=True)
class TargetPlan:
    """One target network of templates/tf/features/targets.py.j2."""

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


@dataclass(frozen=True)
class TargetsPlan:
    """templates/tf/features/targets.py.j2's context: the spec's target networks, in `targets:` order."""

    targets: tuple[TargetPlan, ...]


def plan(ir: Any) -> TargetsPlan:
    """The render plan of a spec with targets (ir: its ModelIR)."""
    return TargetsPlan(tuple(TargetPlan(t.name, f"target_{t.name}", t.tau, t.every_steps, t.pairs)
                             for t in ir.training.targets))


FEATURE = FeatureDef(
    name="targets",
    doc="target networks: copies that follow their online weights (soft or hard updates)",
    spec_keys=("targets",),
    table=(("targets", "a `targets` section"),),
    enabled=lambda ir: bool(ir.training.targets),
    ir="specgen.ir.targets (TargetIR)",
    partial="tf/features/targets.py.j2",
    hooks=("init", "after_step", "methods"),
    lib=("target_networks",),  # on train.py's one `from specgen.runtime.lib import` line (isort's layout)
    runtime=("specgen.runtime.lib.target_networks.copy", "specgen.runtime.lib.target_networks.soft",
             "specgen.runtime.lib.target_networks.hard"),
    report="specgen.report.targets.targets_table",
    after=("ema",),  # copies follow the updated weights
    collections=("target",),  # the copies (ir/collections.py)
    runtime_hooks=(("after_restore", "specgen.runtime.lib.target_networks.after_restore"),
                   ("checkpoint_meta", "specgen.runtime.lib.target_networks.checkpoint_meta")),
    plan=plan,
)
