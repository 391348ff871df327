"""Inputs an int8 variant quantizes: 8-bit integers hold no NaN or infinity, so such an input takes finite values only.

A float32 (or fp16) model passes NaN and inf through its arithmetic, as docs/serve.md says. An int8 variant does not:
a static one's QuantizeLinear saturates NaN to the quantized 0 (the low end of the calibrated range) and +-inf to
the range's ends, so NaN answers the finite logits of the range's minimum; a dynamic one's DynamicQuantizeLinear
reads NaN as a value too and turns every value of a run holding inf into NaN (the rows of a batch spoil each other).
Either way the answer is not the float32 model's, silently. So `int8.convert` records, in the variant's metadata
(`KEY`: a JSON list), the float inputs whose values reach a quantizing node, and `Predictor.out_of_range` (so
`specgen infer`, the Python Predictor and both protocols of `specgen serve`, which call it on every request) refuses
a NaN or inf in one of them, in one line, before onnxruntime runs. A model without the key (float32, fp16, an int8
variant exported before it existed) takes NaN as before.

Only numpy and json here: the Predictor imports this module, and the precision package (onnxruntime's quantizer) is
too heavy for every `specgen infer`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

KEY = "specgen.quantized_inputs"
# nodes that turn float values into integers: static QDQ's QuantizeLinear, and quantize_dynamic's nodes, which
# quantize their float input themselves
QUANTIZING = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul"})
SHAPE_ONLY = frozenset({"Shape", "Size"})  # read a tensor's shape, never its values: a NaN does not pass them
FLOATS = frozenset({1, 10, 11, 16})  # onnx.TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16 (onnx not imported: light)


def reaching(graph: Any) -> list[str]:
    """The float inputs of an onnx.GraphProto whose values reach a quantizing node, in input order."""
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return [value.name for value in graph.input
            if value.type.tensor_type.elem_type in FLOATS and _reaches(value.name, readers)]


def _reaches(start: str, readers: dict[str, list[Any]]) -> bool:
    """Whether values of tensor `start` flow into a quantizing node (a walk along the nodes that read them)."""
    seen, todo = {start}, [start]
    while todo:
        for node in readers.get(todo.pop(), ()):
            if node.op_type in QUANTIZING:
                return True
            if node.op_type in SHAPE_ONLY:
                continue
            fresh = [out for out in node.output if out and out not in seen]
            seen.update(fresh)
            todo += fresh
    return False


def stamp(model: Any, names: list[str]) -> None:
    """Record `names` in an onnx.ModelProto's metadata (no entry when there are none), replacing an earlier one."""
    kept = [entry for entry in model.metadata_props if entry.key != KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    if names:
        entry = model.metadata_props.add()
        entry.key, entry.value = KEY, json.dumps(names)


def read(metadata: Mapping[str, str]) -> tuple[str, ...]:
    """The quantized inputs a loaded model's metadata names; a value of another shape (hand-edited) names none."""
    try:
        raw = json.loads(metadata.get(KEY, "[]"))
    except ValueError:
        return ()
    return tuple(n for n in raw if isinstance(n, str)) if isinstance(raw, list) else ()


def non_finite(names: tuple[str, ...], arrays: Mapping[str, Any]) -> str | None:
    """The refusal for the first NaN or inf (reading order) in an input of `names`, or None."""
    for name in names:
        array = arrays.get(name)
        if array is None or np.asarray(array).dtype.kind != "f":
            continue
        bad = ~np.isfinite(array)
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"input '{name}': received {array[at]} at {list(at)}, expected finite numbers: this int8 variant "
                    f"quantizes '{name}' to 8-bit integers, which hold no NaN or infinity, so its answer would not be "
                    "the float32 model's (which passes NaN through); send finite values, or use the float32 model")
    return None
