"""`specgen report`'s FLOPs table: per layer, its parameters, forward and backward FLOPs and activation std."""

from __future__ import annotations

from specgen import text
from specgen.ir.model import ModelIR
from specgen.ir.scales import Scale, propagate, ratio_column, unmodelled_note
from specgen.kinds import dims
from specgen.kinds.ops import backward_flops

NOTE = ("FLOPs are per example (batch 1); a multiply-add counts 2. The backward estimate is 2x the forward FLOPs "
        "for layers with trainable weights (input and weight gradients) and 1x otherwise. The activation std is "
        "each output's at initialization over the input's, for unit-variance inputs, as the model of "
        "docs/spec.md#lints estimates it: weights, inputs and units independent; the positions that pools, resizes "
        "and attention combine taken as equal, as in images (over n independent positions an average has 1/sqrt(n) "
        "of the std shown); a recurrent layer's input steps taken as independent (smooth ones give it up to 2x the "
        "std shown).")


def flops_table(ir: ModelIR) -> str:
    scales = propagate(ir)  # once: the column and its note read the same propagation
    std = ratio_column(scales)
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
    return text.table(("layer", "op", "output", "params", "forward FLOPs", "backward FLOPs (est.)",
                       "activation std (init)"), rows, right={3, 4, 5, 6}) + "\n" + NOTE + _unmodelled(ir, scales) + \
        _symbols_note(ir)


def _unmodelled(ir: ModelIR, scales: dict[str, Scale]) -> str:
    """Why the column shows '-' where it does (ir/scales.py), for specs with such layers."""
    note = unmodelled_note(ir, scales)
    return " " + note if note else ""


def _symbols_note(ir: ModelIR) -> str:
    """How FLOPs count named dynamic dimensions (kinds/dims.py), for specs that declare some."""
    declared = list(dict.fromkeys(n for i in ir.inputs for d in i.shape if isinstance(d, str) for n in dims.names(d)))
    if not declared:
        return ""
    return (f" Named dynamic dimensions ({', '.join(declared)}) count as size 1: a layer that reads or makes one "
            "(or an expression of one, e.g. ceil(seq/2)) reports FLOPs per position along it; multiply by "
            "the run-time size.")
