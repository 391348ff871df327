"""The start of a fine-tuning run: a new run of a spec with `checkpoint.restore` takes its model variables from
those checkpoints, by the plan restore.py makes (the same plan `specgen restore-plan` prints)."""

from __future__ import annotations

from typing import Any

from specgen.ir.model import ModelIR
from specgen.runtime import hooks
from specgen.runtime.commands.restore import RestorePlan, apply_plan, plan_restore, read_plan, summary_line
from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer
from specgen.spec.load import LoadedSpec


def plan_and_read(loaded: LoadedSpec, ir: ModelIR) -> tuple[RestorePlan | None, dict[str, Any]]:
    """The plan of `checkpoint.restore` (its sources read and matched) and its values; (None, {}) without one.

    Every value is read now, before the run folder's first write: a source that fails only when its values are
    read (a shard changed or swapped since the plan) is refused with nothing of the run written."""
    if ir.training is None or not ir.training.checkpoint.restore:
        return None, {}
    plan = plan_restore(loaded, hooks.fine_tuning_targets(ir))
    return plan, read_plan(plan)


def restore(plan: RestorePlan, ir: ModelIR, model: GeneratedModel, trainer: GeneratedTrainer,
            values: dict[str, Any]) -> str:
    """Assign the plan's values; the line `specgen train` prints.

    Only model variables (and what features keep beside them, pruning masks): a fine-tuning run starts its own
    step, optimizer slots and accumulators; what the trainer derived from the initial weights (EMA shadows, target
    copies) is derived again by the features' `after_restore`.
    """
    variables = hooks.fine_tuning_variables(ir, model)
    apply_plan(plan, variables, values)
    restored = frozenset(row.path for row in plan.rows if row.status == "restored")
    hooks.after_restore(model, trainer, variables, restored)
    return summary_line(plan) + _initialized_lines(plan)


def _initialized_lines(plan: RestorePlan) -> str:
    """The variables a fine-tuning run starts from their initializers (a new head, say), as `specgen export`
    names them: the restored ones are the expected case and stay a count (`specgen restore-plan` lists all)."""
    fresh = [row.path for row in plan.rows if row.status == "initialized"]
    return f"; initialized: {', '.join(fresh)}" if fresh else ""
