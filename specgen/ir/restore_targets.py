"""What a fine-tuning restore fills, from the IR alone (no TensorFlow): the model variables and, for a spec that
prunes, the masks (`pruning/<weight path>`, ir/training/keys.py).

One definition for `specgen restore-plan`, `export`, `report`, the pruning feature's runtime hook and `specgen
diff`'s checkpoint section (review/checkpoint.py), which must not import TensorFlow. `saved_keys`, what a
checkpoint of a spec holds, is the one list `--resume` checks a real checkpoint against and `specgen diff` plans
over in place of a real checkpoint.
"""

from __future__ import annotations

from specgen.ir.model import ModelIR

Targets = dict[str, tuple[tuple[int, ...], str]]  # checkpoint key -> (shape, dtype name)


def mask_targets(ir: ModelIR) -> Targets:
    """Mask checkpoint key -> (shape, dtype); empty when the spec prunes nothing."""
    return {w.mask_key: (w.shape, "float32") for w in ir.pruning.weights} if ir.pruning else {}


def restore_targets(ir: ModelIR) -> Targets:
    """What a restore plan fills: the model variables and, for a spec that prunes, the masks (`pruning/<path>`).
    A mask the plan leaves `initialized` (no key maps to it, or an `exclude` pattern drops it) stays all ones."""
    return {v.path: (v.shape, v.dtype) for v in ir.model_variables} | mask_targets(ir)


def saved_keys(ir: ModelIR) -> Targets:
    """What a checkpoint of this spec holds, every key a restore map can name: every variable (model variables,
    masks, EMA shadows, optimizer slots, the loss scale, the step) but the metrics' accumulators (never saved)."""
    return {v.path: (tuple(v.shape), v.dtype) for v in ir.variables if "metrics" not in v.collections}
