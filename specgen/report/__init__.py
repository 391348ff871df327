"""`specgen report`: variables, collection sizes, optimizers, precision, feature sections and per-layer FLOPs as
plain text.

One module per section. The training features' sections (targets, loss terms, pruning) are what their
FeatureDef.report points at (specgen/kinds/features); each returns None for a spec without the feature.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specgen.ir.lints import momentum_note
from specgen.ir.model import ModelIR
from specgen.report.augment import augment_table
from specgen.report.flops import flops_table
from specgen.report.loss_terms import loss_table
from specgen.report.masks import masks_table
from specgen.report.optimizers import optimizers_table
from specgen.report.precision import Scalars, precision_table
from specgen.report.pruning import pruning_table
from specgen.report.targets import targets_table
from specgen.report.variables import collections_table, variables_table


def report(ir: ModelIR, path: str, optimizers: Mapping[str, Any] | None = None,
           measured: Mapping[str, int] | None = None, logged: Sequence[Scalars] = (),
           layers: Sequence[Any] | None = None) -> str:
    """The report; `optimizers` (the spec's section) adds which weights each optimizer took and why;
    `measured` (pruned weight path -> zeros in its mask in a checkpoint) adds a column to the pruning table;
    `logged` (a run's TensorBoard scalars, pictures/curves.read_run) the loss scale the run logged last;
    `layers` (LoadedSpec.layers) exact FLOPs formulas in named dynamic dimensions (report/formulas.py)."""
    sections = [
        f"{ir.name} ({path}): {ir.layer_count} layers, {len(ir.variables)} variables",
        variables_table(ir),
        collections_table(ir),
        optimizers_table(ir, optimizers) if optimizers and ir.optimizers else None,
        precision_table(ir, logged),
        targets_table(ir),
        loss_table(ir),
        augment_table(ir),
        pruning_table(ir, measured),
        flops_table(ir, layers),
        masks_table(ir),
        momentum_note(ir),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"
