"""The start of a fine-tuning run: a new run of a spec with `checkpoint.restore` takes its model variables from
those checkpoints, by the plan restore.py makes (the same plan `specgen restore-plan` prints).

`new_weights` is the one way fresh variables get the plan: `specgen train` (through `restore`), `export` without
--checkpoint and `train --probe` all assign the plan's values and then run the features' after-restore step
(pruning masks applied, target networks copied from the restored online weights, EMA shadows re-derived), so the
weights each computes with are the run's step 0.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from specgen.ir.model import ModelIR
from specgen.ir.restore_rules import target_copies
from specgen.paths import shown
from specgen.runtime import hooks, weight_files
from specgen.runtime.commands.restore import RestorePlan, apply_plan, plan_restore, read_plan, summary_line
from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer
from specgen.spec.load import LoadedSpec


def plan_and_read(loaded: LoadedSpec, ir: ModelIR) -> tuple[RestorePlan | None, dict[str, Any]]:
    """The plan of `checkpoint.restore` (its sources read and matched) and its values; (None, {}) without one.

    Every value is read now, before the run folder's first write: a source that fails only when its values are
    read (a shard changed or swapped since the plan) is refused with nothing of the run written."""
    if ir.training is None or not ir.training.checkpoint.restore:
        return None, {}
    plan = plan_restore(loaded, hooks.fine_tuning_targets(ir), copies=target_copies(ir))
    return plan, read_plan(plan)


def restore(plan: RestorePlan, ir: ModelIR, model: GeneratedModel, trainer: GeneratedTrainer,
            values: dict[str, Any]) -> str:
    """Assign the plan's values; the line `specgen train` prints.

    Only model variables (and what features keep beside them, pruning masks): a fine-tuning run starts its own
    step, optimizer slots and accumulators; what the trainer derived from the initial weights (EMA shadows, target
    copies: the plan's `copied` rows) is derived again by the features' `after_restore`.
    """
    variables = hooks.fine_tuning_variables(ir, model)
    apply_plan(plan, variables, values)
    restored = frozenset(row.path for row in plan.rows if row.status == "restored")
    hooks.after_restore(model, trainer, variables, restored)
    return summary_line(plan) + _initialized_lines(plan)


def new_weights(loaded: LoadedSpec, ir: ModelIR, model: GeneratedModel, trainer: GeneratedTrainer
                ) -> RestorePlan | None:
    """Fresh variables (`model`, `trainer`: just built, seeded as `specgen train` seeds them) made what a new run's
    step 0 holds: the `checkpoint.restore` plan applied, then the after-restore step. None without a restore."""
    plan, values = plan_and_read(loaded, ir)
    if plan is not None:
        restore(plan, ir, model, trainer, values)
    return plan


def record(plan: RestorePlan, values: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per `checkpoint.restore` entry, for provenance.json: what its `from` resolved to (a run folder's `latest`
    moves as that run trains), how many variables it restored and a sha256 over them (each variable's path, dtype,
    shape and the bytes of its value as assigned), so two runs restored from other weights differ in `specgen diff`."""
    found = []
    for index, (declared, prefix) in enumerate(plan.read):
        rows = sorted((r for r in plan.rows if r.status == "restored" and r.entry == index), key=lambda r: r.path)
        digest = hashlib.sha256()
        for row in rows:
            value = np.ascontiguousarray(values[row.path])
            digest.update(f"{row.path}\0{value.dtype.name}\0{list(value.shape)}\n".encode())
            digest.update(value.tobytes())
        kind = "keras weight file" if weight_files.is_keras_file(prefix) else "checkpoint"
        found.append({"from": declared, "read": shown(prefix), "kind": kind, "restored": len(rows),
                      "values_sha256": digest.hexdigest()})
    return found


def _initialized_lines(plan: RestorePlan) -> str:
    """The variables a fine-tuning run starts from their initializers (a new head, say), as `specgen export`
    names them: the restored ones are the expected case and stay a count (`specgen restore-plan` lists all); the
    copied ones (target networks) are counted too, as they hold restored weights."""
    fresh = [row.path for row in plan.rows if row.status == "initialized"]
    return f"; initialized: {', '.join(fresh)}" if fresh else ""
