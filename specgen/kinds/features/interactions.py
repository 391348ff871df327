"""Where two features' code meets: each interaction declared once, and rendered from here.

A feature's partial reads only its own context; when one feature's code must change because another
is on, the change is an entry here, rendered (partial) after the later feature's code at each of its
hooks, or a value added to one feature's context.
"""

from __future__ import annotations

from specgen.kinds.features.base import Interaction

INTERACTIONS: tuple[Interaction, ...] = (
    Interaction(
        ("ema", "pruning"),
        "the shadows of pruned weights are masked too, so that EMA evaluation and export see the same zeros",
        partial="tf/interactions/ema_pruning.py.j2", hooks=("init", "after_step")),
    Interaction(
        ("accumulate", "pruning"),
        "masks are recomputed only before the first micro-batch of an update, so that every micro-batch of "
        "one update sees the same masks",
        context=(("pruning", "when", ", when=self.micro_batches == 0"),)),
    Interaction(
        ("pruning", "probe"),
        "the probe's batch runs after the masks are recomputed, as train_step's does at a pruning step; before, "
        "--probe printed the unpruned model's loss, gradients and update",
        partial="tf/interactions/pruning_probe.py.j2", hooks=("step_methods",)),
    Interaction(
        ("accumulate", "targets"),
        "targets follow the weights in apply(), once per optimizer update: no code (apply_accumulated calls it)"),
    Interaction(
        ("accumulate", "ema"),
        "shadows move once per optimizer update, in apply(): no code (apply_accumulated calls it)"),
)
