"""`specgen report`'s optimizers table: each optimizer's weights and how the spec chose them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specgen import text
from specgen.ir.collections import takes_the_rest
from specgen.ir.model import ModelIR


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
    return text.table(("optimizer", "kind", "variables", "parameters", "selection", "takes"), rows,
                      right={2, 3}) + note
