"""Run-time bounds of named dimensions: a positional_embedding takes at most `max_length` time steps.

ONNX has no way to declare a bound on a dim_param, and a graph that sliced would clip a longer
sequence into a wrong answer. `specgen export` writes each bounded symbol into the model's metadata
(`specgen.max_lengths`: {"seq": [16, "pos"]}, the smallest max_length reading that symbol, and its
layer); `Predictor.check` (so `specgen infer` and `specgen serve`) reads it back and refuses a longer
input before onnxruntime runs. A time dimension that is an expression of a symbol (after a strided
conv1d) is not recorded: the graph's Gather then refuses it (kinds/ops/positional_embedding.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specgen.kinds.dims import SYMBOL

KEY = "specgen.max_lengths"
Bounds = dict[str, tuple[int, str]]  # symbol -> (largest size, the layer that bounds it)


def bounds(ir: Any) -> Bounds:
    """The bounded symbols of a ModelIR: the time dimension of an op that bounds it (OpDef.bounds_steps: a
    positional_embedding's), when it is a plain symbol."""
    # Imported here: the predictor reads bounds (read, violation) without loading the op registry.
    from specgen.kinds.ops import op_def

    found: Bounds = {}
    for node in ir.nodes:
        steps = node.params.get("steps") if op_def(node.op).bounds_steps else None
        if isinstance(steps, str) and SYMBOL.fullmatch(steps):
            limit = (node.params["max_length"], node.name)
            found[steps] = min(found.get(steps, limit), limit)
    return found


def stamp(model: Any, ir: Any) -> None:
    """Write the bounds into an onnx.ModelProto's metadata (nothing when there are none)."""
    found = bounds(ir)
    if found:
        entry = model.metadata_props.add()
        entry.key, entry.value = KEY, json.dumps({k: list(v) for k, v in sorted(found.items())})


def read(metadata: Mapping[str, str]) -> Bounds:
    """The bounds of a loaded model's metadata; entries of another shape (a hand-edited file) are ignored."""
    try:
        raw = json.loads(metadata.get(KEY, "{}"))
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: (v[0], v[1]) for k, v in raw.items()
            if isinstance(v, list) and len(v) == 2 and type(v[0]) is int and isinstance(v[1], str)}


def violation(found: Bounds, declared: Mapping[str, tuple[Any, ...]], shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """The first input whose size along a bounded symbol exceeds the bound, as an error message."""
    for name, dims in declared.items():
        for axis, dim in enumerate(dims):
            if dim in found and axis < len(shapes[name]) and shapes[name][axis] > found[dim][0]:
                limit, layer = found[dim]
                return (f"input '{name}': received {shapes[name][axis]} steps along '{dim}' (shape "
                        f"{list(shapes[name])}), expected at most {limit}: the max_length of layer '{layer}' "
                        "(positional_embedding)")
    return None
