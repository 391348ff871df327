"""Whether a model's rows are independent of each other: what joining unrelated requests in one run relies on.

The dynamic batcher (batcher.py) stacks the rows of unrelated requests into one onnxruntime run and splits the
outputs back by rows. That gives each request its own answer only if every output row depends on its own input
row alone. A dynamically quantized graph breaks this: onnxruntime's `quantize_dynamic` (what `specgen export
--precision int8` uses for a recurrent model, runtime/precision/int8.py) writes `DynamicQuantizeLinear` nodes,
which compute one scale and zero point from the min and max of their whole input tensor (every row of the run),
and `DynamicQuantizeLSTM` / `DynamicQuantizeMatMul`, which do the same inside. Joined with another request, a
request's activations are quantized with a scale its batch-mates chose: two ordinary digits beside it moved its
logits by 0.02, a batch-mate of NaN or 1000.0 images by units (the top class changed in 28 of 40 rows).

Decision: such a version never has requests joined. `specgen export --triton` writes its config.pbtxt without
`dynamic_batching` and says why in the parameter `specgen_dynamic_batching` (runtime/triton.py), which Triton
honours too; and the server reads the graph of the file it serves when it loads a version (a config can ask for
batching anyway: written by hand, or kept from a float32 version 1 when the variant is exported as version 2)
and then runs each request alone, with one warning line (`batching_off`, registry.py). The graph is read rather
than the config or variant.json trusted, because the graph is what computes the scale.

The rows of ONE request still share the scale (one run quantizes them together): that is dynamic quantization
itself, not the server; a client that needs each row independent sends one row per request, or serves the
static int8 (QDQ, fixed ranges) or fp16 variant, whose rows are bitwise independent.

Detected: nodes of the types in BATCH_SCALE_OPS, in the graph or any subgraph (If, Loop, Scan bodies). A
hand-made graph that mixes rows otherwise (a ReduceMean over the batch axis) is not recognized.
"""

from __future__ import annotations

import mmap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Nodes that quantize a tensor with a scale computed at run time from the tensor itself (all its rows).
BATCH_SCALE_OPS = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul"})
_MARKER = b"DynamicQuantize"  # in the bytes of any model holding one (op types are plain protobuf strings)


def _nodes(graph: Any) -> Iterator[Any]:
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for sub in attribute.graphs:
                yield from _nodes(sub)


def _has_marker(model: bytes | Path) -> bool:
    """A cheap first look: a model without the op types' common prefix anywhere in its bytes has none of them."""
    if isinstance(model, bytes):
        return _MARKER in model
    with open(model, "rb") as file:
        try:
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return view.find(_MARKER) >= 0
        except ValueError:  # an empty file: no model, and nothing to find
            return False


def rows_coupled(model: bytes | Path) -> str | None:
    """Why the rows of one run of `model` (its bytes, or its file) are not independent of each other, or None.

    The reason names the nodes: `the graph quantizes activations at run time with one scale for the whole run
    (DynamicQuantizeLSTM x1, DynamicQuantizeLinear x1): requests joined in one batch would change each other's
    answers`. A file onnx cannot parse is not judged here (None): loading it fails on its own, with its message."""
    if not _has_marker(model):
        return None
    import onnx

    try:
        proto = (onnx.load_from_string(model) if isinstance(model, bytes)
                 else onnx.load(str(model), load_external_data=False))
    except Exception:  # a damaged file: onnxruntime refuses it with its own message
        return None
    found = Counter(node.op_type for node in _nodes(proto.graph) if node.op_type in BATCH_SCALE_OPS)
    if not found:
        return None
    nodes = ", ".join(f"{op} x{count}" for op, count in sorted(found.items()))
    return (f"the graph quantizes activations at run time with one scale for the whole run ({nodes}): "
            "requests joined in one batch would change each other's answers")
