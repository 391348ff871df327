"""What a fine-tuning restore fills, from the IR alone (no TensorFlow): the model variables and, for a spec that
prunes, the masks (`pruning/<weight path>`, ir/training/keys.py).

One definition for `specgen restore-plan`, `export`, `report`, the pruning feature's runtime hook and `specgen
diff`'s checkpoint section (review/checkpoint.py), which must not import TensorFlow.
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
