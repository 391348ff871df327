"""`specgen report`'s masks table: the layers that take a mask_zero embedding's padding mask, and its ids."""

from __future__ import annotations

from specgen import text
from specgen.ir.model import ModelIR


def masks_table(ir: ModelIR) -> str | None:
    """Every layer that consumes a padding mask (Node.mask, ir/masks.py); None when no layer takes one."""
    rows = [(n.name, n.op, ", ".join(n.mask)) for n in ir.nodes if n.mask]
    if not rows:
        return None
    return text.table(("layer", "op", "mask: a step is real where any of these ids is non-zero"), rows) + (
        "\nPadded steps leave a recurrent state unchanged and are left out of means and attention, as in Keras "
        "(docs/spec.md#masks).")
