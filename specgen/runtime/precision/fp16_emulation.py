"""float16 arithmetic measured on the CPU: the fp16 variant run with float32 kernels, each float16 tensor rounded.

Why not run the variant itself on the CPU provider: onnxruntime's x86-64 CPU provider has no float16 Conv or
Gemm, so it wraps them in Casts to float32 (InsertCastTransformer) and then removes every back-to-back Cast pair
it made, the input's Cast included. That transformer is required: it runs at ORT_DISABLE_ALL too. The variant
then computes in float32 with float16-rounded weights, and a hidden layer reaching 134,606 (float16 holds at most
65,504) gives finite outputs there where the CUDA provider gives inf and NaN (tests/test_export_leftovers.py).

So the gate runs an emulation instead (`emulated`): the variant's own graph (its weights as the converter clamped
and rounded them, its Casts around the nodes kept in float32) with every tensor typed float16 computed in float32
and then rounded through an explicit Cast to float16 and back, which onnxruntime keeps (a lossy pair; checked on
onnxruntime 1.31, and the session runs with ORT_DISABLE_ALL besides). Each node thus sees float16 inputs and
writes a float16 output, as on the GPU; what it does not see is a kernel's internal precision (cuBLAS and cuDNN
accumulate float16 products in float32, which is what float32 kernels do here; a reduction that accumulates in
float16 on the GPU would lose more there). Beside each rounded tensor the emulation reports its largest |x|
before rounding, so an overflow is refused naming the tensor (`run`), not only through its effect on the outputs.
An overflow is judged as float16 rounds: round-to-nearest-even gives inf only from 65,520 (65,504, the largest
float16, plus half its 32-wide step) on, and 65,504 < |x| < 65,520 rounds to a finite 65,504. Rounding is monotonic
and odd, so the largest |x| after rounding is the rounded largest |x| before: `run` rounds the peaks it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from specgen.runtime.buckets import Arrays, pad_rows
from specgen.runtime.graph_runs import graph_batch
from specgen.runtime.precision.base import PrecisionRefusal
from specgen.runtime.precision.optimized import CPU, label
from specgen.runtime.precision.valid import topological

# onnxruntime's input type names (predictor.py's DTYPES, not imported: the precision package runs where only onnx
# and onnxruntime are installed, bench/precision.py --onnx-only)
DTYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(uint8)": np.uint8,
          "tensor(double)": np.float64}
FLOAT16_MAX = 65504.0
FLOAT16_INF_FROM = 65520.0  # the smallest |x| that rounds to inf: FLOAT16_MAX plus half of float16's step there (32)
RANGE = "specgen_fp16_range/"  # the extra outputs: largest |x| of each float16 tensor before its rounding
ROWS_PER_RUN = 256  # a dynamic batch runs in pieces of this many rows: memory stays bounded on large eval sets
ARITHMETIC = ("float16 emulated on the CPU: float32 kernels, every float16 tensor of the variant rounded to float16 "
              "(docs/export.md)")


@dataclass(frozen=True)
class Emulation:
    """The emulating graph, its float16 tensors (pre-rounding name -> how messages name it), its fixed batch."""

    model_bytes: bytes
    watched: dict[str, str]
    batch: int | None


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type: the variant's own value_info, completed by ONNX shape inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # onnx's own errors: the converter's value_info alone
        inferred = model.graph
    graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for value in (*inferred.value_info, *graph.value_info, *graph.input, *graph.output):
        if value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    return types


def _float_attributes(node: onnx.NodeProto) -> None:
    """float16 tensors held in attributes (Constant's value) to float32; a subgraph cannot be emulated here."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH or attribute.type == onnx.AttributeProto.GRAPHS:
            raise PrecisionRefusal(f"fp16 cannot be emulated on the CPU: {label(node)} holds a subgraph")
        if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == TensorProto.FLOAT16:
            value = numpy_helper.to_array(attribute.t).astype(np.float32)
            attribute.t.CopyFrom(numpy_helper.from_array(value, attribute.t.name))
        if node.op_type == "Cast" and attribute.name == "to" and attribute.i == TensorProto.FLOAT16:
            attribute.i = TensorProto.FLOAT  # the rounding pair after it does the float16 part


def _labels(graph: onnx.GraphProto) -> dict[str, str]:
    """How messages name each node's outputs: `Gemm 'd1'`, by the node's name (optimized.label), which the
    converter keeps where it renames the tensor (`graph_output_cast_0` for the Cast to a float32 graph output,
    `<name>_cast_to_fp16` after a node kept in float32). A node with several outputs (an LSTM) by each output,
    one renamed for a graph output's Cast by that graph output's name, as the float32 export names it."""
    outputs = {o.name for o in graph.output}
    alias = {n.input[0]: n.output[0] for n in graph.node if n.op_type == "Cast" and n.input and n.output[0] in outputs}
    return {out: label(node) if len(node.output) == 1 else f"{node.op_type} '{alias.get(out, out)}'"
            for node in graph.node for out in node.output}


def _described(node: onnx.NodeProto, output: str, labels: dict[str, str]) -> str:
    """How a message names a float16 tensor: a Cast to float16 (the converter's, at an input or after a node kept
    in float32) by what it rounds, `input 'x'` or that node; any other node by itself."""
    if node.op_type != "Cast" or not node.input:
        return labels[output]
    source = node.input[0]
    return labels.get(source, f"input '{source}'")


def emulated(variant_bytes: bytes) -> Emulation:
    """The variant with float32 tensors everywhere, each of its float16 tensors rounded through float16."""
    model = onnx.load_from_string(variant_bytes)
    types = tensor_types(model)
    graph = model.graph
    labels = _labels(graph)
    nodes: list[onnx.NodeProto] = []
    watched: dict[str, str] = {}  # in topological order: the first overflow named is where it starts
    for original in topological(graph.node):  # sorted by the export already; any graph here
        node = onnx.NodeProto()
        node.CopyFrom(original)
        _float_attributes(node)
        nodes.append(node)
        for k, name in enumerate(original.output):
            if types.get(name) != TensorProto.FLOAT16:
                continue
            raw, half = f"{name}__specgen_fp32", f"{name}__specgen_fp16"
            node.output[k] = raw
            nodes += [helper.make_node("Cast", [raw], [half], to=TensorProto.FLOAT16),
                      helper.make_node("Cast", [half], [name], to=TensorProto.FLOAT),
                      helper.make_node("Abs", [raw], [f"{raw}__abs"]),
                      helper.make_node("ReduceMax", [f"{raw}__abs"], [RANGE + raw], keepdims=0)]
            watched[raw] = _described(original, name, labels)
    for k, initializer in enumerate(graph.initializer):
        if initializer.data_type == TensorProto.FLOAT16:
            graph.initializer[k].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(initializer).astype(np.float32), initializer.name))
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # float16 types there no longer hold: onnxruntime infers them again
    graph.output.extend(helper.make_tensor_value_info(RANGE + raw, TensorProto.FLOAT, []) for raw in watched)
    return Emulation(model.SerializeToString(deterministic=True), watched, graph_batch(model))


def run(emulation: Emulation, inputs: Arrays) -> tuple[Arrays, dict[str, Any]]:
    """The variant's outputs under float16 arithmetic, and the report's figures (`float16_peak`: the largest |x| a
    float16 tensor held, a float16 value); PrecisionRefusal naming the first tensor (in graph order: where it starts)
    whose values float16 rounds to inf (|x| >= 65,520; below that they round to at most 65,504, finite)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no pass may drop the rounding
    options.log_severity_level = 3
    session = ort.InferenceSession(emulation.model_bytes, options, providers=[CPU])
    dtypes = {i.name: DTYPES.get(i.type, np.float32) for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    rows = len(next(iter(inputs.values())))
    step = emulation.batch or ROWS_PER_RUN
    parts: list[Arrays] = []
    peaks = dict.fromkeys(emulation.watched, 0.0)
    for start in range(0, rows, step):
        piece = {k: np.ascontiguousarray(v[start:start + step], dtype=dtypes[k]) for k, v in inputs.items()}
        count = len(next(iter(piece.values())))
        values = dict(zip(names, session.run(names, pad_rows(piece, step) if emulation.batch else piece), strict=True))
        parts.append({n: v[:count] for n, v in values.items() if not n.startswith(RANGE)})
        for raw in peaks:  # NaN is left out: it comes from an inf upstream, which is named there
            peaks[raw] = max(peaks[raw], float(values[RANGE + raw]))
    rounded = {raw: _as_float16(peak) for raw, peak in peaks.items()}
    _refuse_overflow(emulation, peaks, rounded)
    top = max(rounded, key=lambda raw: rounded[raw]) if rounded else None
    report = {"arithmetic": ARITHMETIC, **({"float16_peak": {"tensor": emulation.watched[top], "abs": rounded[top]}}
                                           if top is not None else {})}
    return {n: np.concatenate([p[n] for p in parts]) for n in parts[0]}, report


def _refuse_overflow(emulation: Emulation, peaks: dict[str, float], rounded: dict[str, float]) -> None:
    """PrecisionRefusal naming the first watched tensor (graph order) that float16 rounds to inf. A peak already
    inf before rounding is left out, as NaN is: it comes from an inf upstream, which is named there."""
    overflow = next((raw for raw in emulation.watched if np.isfinite(peaks[raw]) and np.isinf(rounded[raw])), None)
    if overflow is None:
        return
    raise PrecisionRefusal(f"fp16: {emulation.watched[overflow]} overflows float16 on the eval set: |x| reaches "
                           f"{peaks[overflow]:,.0f} before rounding, and float16 rounds |x| >= {FLOAT16_INF_FROM:,.0f} "
                           f"to inf (its largest finite value is {FLOAT16_MAX:,.0f}), so the variant computes inf "
                           "there (measured with float16 arithmetic emulated on the CPU); keep this model in float32, "
                           "or scale its activations down")


def _as_float16(peak: float) -> float:
    """`peak` as float16 holds it: IEEE round-to-nearest-even (numpy's cast, as CUDA's __float2half_rn), inf from
    65,520 on. NaN stays NaN."""
    with np.errstate(over="ignore"):  # the overflow to inf is what is asked
        return float(np.float16(peak))


def emulate(variant_bytes: bytes, inputs: Arrays) -> tuple[Arrays, dict[str, Any]]:
    """PrecisionDef.emulate for fp16: `run(emulated(variant_bytes), inputs)`."""
    return run(emulated(variant_bytes), inputs)
