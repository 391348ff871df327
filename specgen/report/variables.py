"""`specgen report`'s variables and collections tables: every variable, then each collection's size."""

from __future__ import annotations

from specgen import text
from specgen.ir.model import ModelIR


def variables_table(ir: ModelIR) -> str:
    rows = [(v.path, text.shape(v.shape), v.dtype, ", ".join(v.collections)) for v in ir.variables]
    return text.table(("variable", "shape", "dtype", "collections"), rows)


def collections_table(ir: ModelIR) -> str:
    size = {v.path: v.size for v in ir.variables}
    rows = [(name, str(len(paths)), f"{sum(size[p] for p in paths):,}") for name, paths in ir.collections.items()]
    return text.table(("collection", "variables", "parameters"), rows, right={1, 2})
