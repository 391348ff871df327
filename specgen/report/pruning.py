"""`specgen report`'s pruning table: each pruned weight's planned sparsity (the spec's `prune` section)."""

from __future__ import annotations

from collections.abc import Mapping

from specgen import text
from specgen.ir.model import ModelIR, PruningIR
from specgen.ir.pruning import pruned_count, steps_text


def _when(pruning: PruningIR) -> str:
    s = pruning.schedule
    how = (f"constant_sparsity {s.final_sparsity}" if s.kind == "constant_sparsity" else
           f"polynomial_decay from {s.initial_sparsity} to {s.final_sparsity}, power {s.power}")
    # Step b is the b-th update, as TF Model Optimization 0.8 counts (ir/pruning.py): the steps named are real ones.
    return f"Masks are recomputed {steps_text(s)}: {how}; step b is update b (docs/pruning.md)."


def pruning_table(ir: ModelIR, measured: Mapping[str, int] | None = None) -> str | None:
    """Per pruned weight: its layer, size, and the sparsity and pruned count after the last mask update;
    with `measured` (path -> entries its mask prunes in a checkpoint), the checkpoint's sparsity too.
    None for a spec without pruning."""
    pruning = ir.pruning
    if pruning is None:
        return None
    s = pruning.schedule
    # Without an end the masks keep the constant target; with one, the last update's target is what stays.
    final = s.sparsity_at(s.last_step) if s.last_step is not None else s.final_sparsity
    rows, size, zeros = [], 0, 0
    for w in pruning.weights:
        count = pruned_count(w.size, final)
        now = [f"{measured[w.path] / w.size:.4f}"] if measured is not None else []
        rows.append((w.path, w.layer, f"{w.size:,}", f"{count / w.size:.4f}", f"{count:,}", f"{w.size - count:,}", *now))
        size, zeros = size + w.size, zeros + count
    now = [f"{sum(measured.values()) / size:.4f}"] if measured is not None else []
    rows.append(("total", "", f"{size:,}", f"{zeros / size:.4f}", f"{zeros:,}", f"{size - zeros:,}", *now))
    header = ("pruned weight", "layer", "parameters", "final sparsity", "pruned", "kept",
              *(["checkpoint sparsity"] if measured is not None else []))
    return text.table(header, rows, {2, 3, 4, 5, 6}) + "\n" + _when(pruning)
