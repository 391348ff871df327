"""fp16: the graph in float16 with float32 inputs and outputs, normalizations and softmax kept in float32.

Softmax inside an ONNX `Attention` node (opset 23 and later: `multi_head_attention` at `export.onnx.opset: 23`)
is kept in float32 through the node's `softmax_precision` attribute (1, FLOAT): without it ONNX computes it in
the precision of Q and K, float16 after conversion. Not by blocking the node, which would keep its two matmuls,
a transformer's largest, in float32 too: Keras' mixed_float16 keeps only the softmax.

The converter is onnxruntime's own (`onnxruntime.transformers.float16`), not onnxconverter-common's:
it ships in the onnxruntime package specgen already needs (no new dependency, no second protobuf/onnx
pin), it is the copy onnxruntime maintains and uses in its transformer optimizer, and it keeps the
graph's IO types with `keep_io_types` as Triton configs and callers expect (FP32 at the IO).
"""

from __future__ import annotations

from typing import Any

import onnx
import onnxruntime as ort
from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

from specgen.kinds.precisions import REGISTRY
from specgen.runtime.precision.base import Calibration, PrecisionDef, PrecisionRefusal
from specgen.runtime.precision.fp16_emulation import emulate, tensor_types
from specgen.runtime.precision.optimized import label, op_counts, optimized_graph, runs_as_float32
from specgen.runtime.precision.valid import sort_graph

# float16's 10-bit mantissa and 65504 ceiling lose the sums of squares and exponentials these compute
# (Keras' mixed_float16 policy keeps them in float32 for the same reason).
KEEP_FLOAT32 = ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization", "BatchNormalization",
                "InstanceNormalization", "GroupNormalization", "Softmax", "LogSoftmax")
# Nodes that move, select or convert values without arithmetic: float16 there computes nothing
MOVES_DATA = frozenset({"Cast", "CastLike", "Identity", "Constant", "ConstantOfShape", "Shape", "Size", "Reshape",
                        "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather",
                        "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth"})
INSERTED_CAST = "InsertedPrecisionFreeCast_"  # onnxruntime's name for a Cast it adds around a node with no fp16 kernel


ATTENTION_DOMAINS = ("", "ai.onnx")  # the standard Attention (onnxruntime's com.microsoft ones have no such attribute)


def _nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes and its subgraphs' (If, Loop, Scan bodies)."""
    found = list(graph.node)
    for node in graph.node:
        for attribute in node.attribute:
            for inner in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                found += _nodes(inner)
    return found


def _float32_softmax(node: onnx.NodeProto) -> None:
    """An Attention node's softmax in float32 (`softmax_precision` = FLOAT), whatever the converter left."""
    for k, attribute in enumerate(node.attribute):
        if attribute.name == "softmax_precision":
            del node.attribute[k]
            break
    node.attribute.append(onnx.helper.make_attribute("softmax_precision", onnx.TensorProto.FLOAT))


def convert(model_bytes: bytes, calibration: Calibration) -> tuple[bytes, dict[str, Any]]:
    model = convert_float_to_float16(onnx.load_from_string(model_bytes), keep_io_types=True,
                                     op_block_list=sorted(set(DEFAULT_OP_BLOCK_LIST) | set(KEEP_FLOAT32)))
    nodes = _nodes(model.graph)
    attention = [n for n in nodes if n.op_type == "Attention" and n.domain in ATTENTION_DOMAINS]
    for node in attention:
        _float32_softmax(node)
    sort_graph(model.graph)  # the converter appends its Casts at the end of the node list (valid.py)
    kept = sorted({n.op_type for n in nodes if n.op_type in KEEP_FLOAT32} | ({"Attention"} if attention else set()))
    return model.SerializeToString(deterministic=True), {"kept_float32": kept}


def check(model_bytes: bytes, provider: str) -> dict[str, Any]:
    """Refuse ops onnxruntime runs only by casting back to float32 on `provider` (no fp16 kernel there)."""
    graph = optimized_graph(model_bytes, provider, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    casts = {o for n in graph.node if n.op_type == "Cast" and n.name.startswith(INSERTED_CAST) for o in n.output}
    missing = [label(n).replace(INSERTED_CAST, "") for n in graph.node
               if n.op_type != "Cast" and any(i in casts for i in n.input)]
    if missing:
        raise PrecisionRefusal(f"fp16: {len(missing)} node(s) have no float16 kernel on the {provider} provider "
                               f"(onnxruntime would cast them back to float32): {', '.join(missing[:5])}"
                               f"{' ...' if len(missing) > 5 else ''}; fp16 pays off with --provider cuda")
    kept = _float32_compute(model_bytes)
    if kept is not None:  # every node with a kernel runs it, and none computes in float16 (int8's rule, optimized.py)
        listed = f"; in float32: {', '.join(kept[:5])}{' ...' if len(kept) > 5 else ''}" if kept else ""
        raise runs_as_float32("fp16", provider, "float16 compute node",
                              f"(no node but Casts and data movement reads or writes float16{listed})")
    return {"optimized_ops": op_counts(graph)}


def _float32_compute(model_bytes: bytes) -> list[str] | None:
    """The variant's compute nodes, when none of them reads or writes a float16 tensor (None when one does).

    Read on the variant's own graph, by the types ONNX infers: a node with a float16 tensor that the provider has
    no kernel for is what `check` refused before, so the nodes found here are the ones that run in float16."""
    model = onnx.load_from_string(model_bytes)
    types = tensor_types(model)
    compute = [n for n in model.graph.node if n.op_type not in MOVES_DATA]
    if any(types.get(t) == onnx.TensorProto.FLOAT16 for n in compute for t in (*n.input, *n.output) if t):
        return None
    return [label(n) for n in compute]


DEF = PrecisionDef(REGISTRY["fp16"], convert, check, emulate)  # emulate: the CPU gate's float16 arithmetic
