"""`specgen report`'s targets table: every target variable beside the online variable it follows."""

from __future__ import annotations

from specgen import text
from specgen.ir.model import ModelIR


def targets_table(ir: ModelIR) -> str | None:
    """The target pairs; None for a spec without target networks."""
    targets = ir.training.targets if ir.training else ()
    if not targets:
        return None
    shapes = {v.path: v.shape for v in ir.variables}
    rows = []
    for t in targets:
        how = f"soft, tau {t.tau!r}" if t.tau is not None else f"hard, every {t.every_steps} steps"
        rows += [(t.name, how, online, target, text.shape(shapes[target]))
                 for online, target in t.pairs]
    return text.table(("target", "update", "online variable", "target variable", "shape"), rows) + (
        "\nTarget variables start as copies of their online variables and are updated after every optimizer "
        "update (soft) or every N-th (hard); no optimizer trains them.")
