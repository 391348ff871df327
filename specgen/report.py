"""`specgen report`: variables, collection sizes and per-layer FLOPs as plain-text tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specgen import text
from specgen.ir.collections import takes_the_rest
from specgen.ir.lints import momentum_note, ratio_column
from specgen.ir.model import ModelIR
from specgen.ir.ops import backward_flops
from specgen.loss_report import loss_table
from specgen.report_pruning import pruning_table
from specgen.report_targets import targets_table


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int] = frozenset()) -> str:
    return "\n".join(text.table(header, rows, right))


def variables_table(ir: ModelIR) -> str:
    rows = [(v.path, text.shape(v.shape), v.dtype, ", ".join(v.collections)) for v in ir.variables]
    return table(("variable", "shape", "dtype", "collections"), rows)


def collections_table(ir: ModelIR) -> str:
    size = {v.path: v.size for v in ir.variables}
    rows = [(name, str(len(paths)), f"{sum(size[p] for p in paths):,}") for name, paths in ir.collections.items()]
    return table(("collection", "variables", "parameters"), rows, right={1, 2})


def optimizers_table(ir: ModelIR, optimizers: Mapping[str, Any]) -> str:
    """Each optimizer's weights and how they were chosen, so that a left-out `variables` shows what it took."""
    size = {v.path: v.size for v in ir.variables}
    rows, rest = [], False
    for name, paths in ir.optimizers.items():
        written = optimizers[name].variables if name in optimizers else None
        if name in optimizers and takes_the_rest(written):
            how, rest = ("trainable" if written is not None else "left out") + " (the rest)", True
        else:
            how = written if isinstance(written, str) else ", ".join(written or [])
        shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
        rows.append((name, optimizers[name].kind if name in optimizers else "", str(len(paths)),
                     f"{sum(size[p] for p in paths):,}", how, shown))
    note = "\nThe rest: every weight that is not frozen and not claimed by another optimizer." if rest else ""
    return table(("optimizer", "kind", "variables", "parameters", "selection", "takes"), rows, right={2, 3}) + note


def flops_table(ir: ModelIR) -> str:
    std = ratio_column(ir)
    rows, total_f, total_b, total_p = [], 0, 0, 0
    for node in ir.nodes:
        # A shared layer's weights are counted once, under their owner; its FLOPs (and the weight
        # gradients of its call, which add to the owner's) count like any layer's.
        params = 0 if node.shares else sum(v.size for v in node.variables.values())
        backward = backward_flops(node.flops, any("trainable" in v.collections for v in node.variables.values()))
        op = node.op + (f"+{node.activation}" if node.activation else "") + (f", shares {node.shares}" if node.shares else "")
        rows.append((node.name, op, text.shape(node.shape),
                     f"{params:,}", f"{node.flops:,}", f"{backward:,}", std[node.name]))
        total_f, total_b, total_p = total_f + node.flops, total_b + backward, total_p + params
    rows.append(("total", "", "", f"{total_p:,}", f"{total_f:,}", f"{total_b:,}", ""))
    return table(("layer", "op", "output", "params", "forward FLOPs", "backward FLOPs (est.)", "activation std (init)"),
                 rows, right={3, 4, 5, 6})


def report(ir: ModelIR, path: str, optimizers: Mapping[str, Any] | None = None,
           measured: Mapping[str, int] | None = None) -> str:
    """The report tables; `optimizers` (the spec's section) adds which weights each optimizer took and why;
    `measured` (pruned weight path -> zeros in its mask in a checkpoint) adds a column to the pruning table."""
    return "\n\n".join([
        f"{ir.name} ({path}): {len(ir.nodes)} layers, {len(ir.variables)} variables",
        variables_table(ir),
        collections_table(ir),
        *([optimizers_table(ir, optimizers)] if optimizers and ir.optimizers else []),
        *([targets_table(ir)] if ir.training and ir.training.targets else []),
        *([terms] if (terms := loss_table(ir)) else []),
        *([pruning_table(ir, table, measured)] if ir.pruning else []),
        flops_table(ir) + "\nFLOPs are per example (batch 1); a multiply-add counts 2. The backward estimate is 2x "
        "the forward FLOPs for layers with trainable weights (input and weight gradients) and 1x otherwise. "
        "The activation std is each output's at initialization over the input's, for unit-variance inputs "
        "(docs/spec.md#lints; '-': not measured, after a softmax).",
        *([note] if (note := momentum_note(ir)) else []),
    ]) + "\n"
