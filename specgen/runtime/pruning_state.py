"""Pruning masks outside training: what export, restore and report read of the `pruning` collection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import numpy as np

from specgen.diagnostics import Diagnostic, SpecError, quoted
from specgen.ir.model import ModelIR
from specgen.ir.restore_targets import mask_targets
from specgen.paths import shown
from specgen.runtime.lib.interface import GeneratedModel, PrunedModel
from specgen.spec.load import LoadedSpec
from specgen.text import printable


def masked_values(ir: ModelIR, values: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`values` (by model variable path) with each pruned weight's pruned entries set to exactly +0.0.

    Training keeps the raw weights masked after every update, but EMA shadows and weights restored
    without their masks need not be: the export applies the checkpoint's masks itself.
    """
    out = dict(values)
    for weight in ir.pruning.weights if ir.pruning else ():
        value = values[weight.path]
        out[weight.path] = np.where(masks[weight.mask_key] > 0, value, np.zeros_like(value))
    return out


def mask_variables(ir: ModelIR, model: GeneratedModel) -> dict[str, Any]:
    """The generated model's mask variables by checkpoint key; empty when the spec prunes nothing."""
    if ir.pruning is None:
        return {}
    masks = cast(PrunedModel, model).masks
    return {w.mask_key: masks[w.path] for w in ir.pruning.weights}


def checkpoint_sparsity(loaded: LoadedSpec, ir: ModelIR, checkpoint: Path, specs: int) -> dict[str, int]:
    """Pruned weight path -> how many entries its mask in `checkpoint` prunes (`specgen report --checkpoint`)."""
    if specs != 1 or ir.pruning is None:
        why = "one spec at a time" if specs != 1 else "a spec with a 'prune' section (this one prunes nothing)"
        raise SpecError([Diagnostic(loaded.display, None, f"report --checkpoint reads pruning masks: it takes {why}")])
    from specgen.runtime.checkpoint import checkpoint_prefix, read_arrays  # imports TensorFlow

    prefix = checkpoint_prefix(checkpoint)
    arrays = read_arrays(prefix, mask_targets(ir))
    _note_other_spec(prefix, ir.name)
    return {w.path: int(np.count_nonzero(arrays[w.mask_key] == 0)) for w in ir.pruning.weights}


def _note_other_spec(prefix: Path, name: str) -> None:
    """A note when the checkpoint's meta.json names another spec: its masks fit (names and shapes were checked),
    so a variant's or a fine-tuned run's checkpoint is read, but its sparsity is not this spec's run's."""
    from specgen.runtime.integrity import META, Unreadable, read_meta  # imports TensorFlow, as the caller did

    if prefix.name != "variables" or not (prefix.parent / META).is_file():
        return  # a bare TensorFlow checkpoint: no meta.json to say whose it is
    try:
        wrote = read_meta(prefix.parent).get("spec")
    except (Unreadable, OSError):
        return  # its masks were read whole; a damaged meta.json is train --resume's concern
    if isinstance(wrote, str) and wrote != name:
        print(printable(f"note: {shown(prefix.parent / META)}: this checkpoint was saved by spec {quoted(wrote)}, "
                        f"not {quoted(name)}; the checkpoint sparsity column is that run's masks"), file=sys.stderr)
