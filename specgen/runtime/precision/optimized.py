"""The graph onnxruntime actually runs (SessionOptions.optimized_model_filepath), for kernel checks.

The fusions that make a variant fast (QDQ pairs into QLinearConv / QGemm, fp16 nodes without a
kernel wrapped in Casts) happen only inside a session, so the checks read the graph it writes back.
"""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path

import onnx
import onnxruntime as ort

from specgen.runtime.buckets import CUDA_WORK
from specgen.runtime.precision.base import PrecisionRefusal

# predictor.py's names, not imported from it: bench/precision.py --onnx-only runs where only onnx and
# onnxruntime are installed (the precision package imports neither pydantic nor TensorFlow)
CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"

PROVIDERS = {"cpu": [CPU], "cuda": [CUDA, CPU]}


def optimized_model(model_bytes: bytes, provider: str, level: ort.GraphOptimizationLevel) -> onnx.ModelProto:
    """The model a session on `provider` ('cpu' or 'cuda') runs after optimizations up to `level`."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "optimized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.optimized_model_filepath = str(path)
        options.log_severity_level = 3  # the "hardware specific optimizations" warning is expected here
        with CUDA_WORK.shared() if provider == "cuda" else nullcontext():  # never beside a graph capture
            ort.InferenceSession(model_bytes, options, providers=PROVIDERS[provider])
        return onnx.load(str(path), load_external_data=False)


def optimized_graph(model_bytes: bytes, provider: str, level: ort.GraphOptimizationLevel) -> onnx.GraphProto:
    return optimized_model(model_bytes, provider, level).graph


def op_counts(graph: onnx.GraphProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def label(node: onnx.NodeProto) -> str:
    """A node as messages show it: its op and its name, which the export gives after the layer's tensor.

    The name, not the tensor it writes: converters rename tensors but keep node names (the float16 converter
    writes the output layer's result to `graph_output_cast_0` and its Cast back to float32 to `logits`; a node
    kept in float32 writes `<name>_cast_to_fp16`; onnxruntime's inserted Casts prefix theirs). A node with no
    name (one onnxruntime or a converter adds) by the tensor it writes."""
    return f"{node.op_type} '{node.name or (node.output[0] if node.output else '')}'"


class RunsAsFloat32(PrecisionRefusal):
    """A verdict on the graph itself, on any provider: unlike fp16's missing CPU kernels (which say only that the
    CPU cannot check it), `--force` does not write such a variant."""


def runs_as_float32(name: str, provider: str, none_of: str, detail: str) -> RunsAsFloat32:
    """The rule every precision's kernel check ends with: the variant must compute something in its own precision
    on `provider`. One that computes nothing in it (a float32 graph labelled int8 or fp16, or conversions around
    nodes all kept in float32) would run as float32, paying for its conversions and gaining nothing, and its
    accuracy gate would pass vacuously: refused at export and at load alike. `none_of`: what was not found."""
    return RunsAsFloat32(f"{name}: the graph has no {none_of} on the {provider} provider {detail}: it would run "
                         "as float32")
