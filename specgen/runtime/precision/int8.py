"""int8: onnxruntime's static quantization in QDQ form (dynamic for recurrent models), checked for fusion.

Static: per-channel int8 weights, uint8 activations, QDQ pairs around each Conv / Gemm / MatMul, ranges
calibrated on eval-set examples. uint8 activations with int8 weights is the type pair onnxruntime's CPU
kernels (QLinearConv, QGemm) cover; with int8 activations it left 20 of ResNet50's 53 convs in float32
(1.0-1.16x fp32 instead of 2.5-2.9x, docs/export.md). The exported graph's layout (batch norm folded,
no dropout) leaves each Conv/Gemm between a DequantizeLinear and a QuantizeLinear, which is what
onnxruntime's optimizer fuses into an integer kernel; `check` reads the optimized graph to prove it did.
Dynamic (weights int8, activations quantized per batch at run time) is for recurrent graphs, whose
activations vary too much per step for fixed ranges. Its DynamicQuantizeLinear / DynamicQuantizeLSTM nodes take
one scale from the min and max of a whole run, so the rows of a run set each other's precision: its Triton
config gets no dynamic_batching and the server never joins requests into it (serve/coupling.py); a static
variant's rows stay independent (fixed ranges; bitwise equal alone and batched on the digits models).
"""

from __future__ import annotations

import io
import logging
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    create_calibrator,
    quantize_dynamic,
    quantize_static,
    save_tensors_data,
)
from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

from specgen.kinds.precisions import REGISTRY
from specgen.runtime import quantized_inputs
from specgen.runtime.graph_runs import graph_batch
from specgen.runtime.precision.base import Calibration, PrecisionDef, PrecisionRefusal
from specgen.runtime.precision.optimized import label, op_counts, optimized_graph, optimized_model, runs_as_float32

# Each `export.onnx.calibration` method: onnxruntime's calibrator and every setting it takes, given here (and
# recorded in export.json) rather than left to its defaults. Entropy's default histogram, 128 bins into 128
# quantized bins, leaves its KL search one candidate, the whole range, so it calibrated exactly as minmax;
# TensorRT's recipe (2048 bins into 128, the symmetric KL search over thresholds) gives it 961. `quantize_static`
# passes no bin counts to its calibrator, hence _ranges. Percentile: onnxruntime's documented defaults.
CALIBRATORS: dict[str, tuple[CalibrationMethod, dict[str, Any]]] = {
    "minmax": (CalibrationMethod.MinMax, {"symmetric": False}),
    "entropy": (CalibrationMethod.Entropy, {"num_bins": 2048, "num_quantized_bins": 128, "symmetric": False}),
    "percentile": (CalibrationMethod.Percentile, {"num_bins": 2048, "percentile": 99.999, "symmetric": True}),
}
# the node types quantize_static calibrates the inputs and outputs of (its own default list), sorted
CALIBRATED_OPS = sorted(set(QLinearOpsRegistry) | set(QDQRegistry))
RECURRENT = {"LSTM", "GRU", "RNN"}
INTEGER_KERNELS = {"QLinearConv", "QGemm", "QLinearMatMul", "ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul",
                   "DynamicQuantizeLSTM", "MatMulIntegerToFloat", "QAttention"}
FLOAT_COMPUTE = {"Conv", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul", "LSTM", "GRU", "RNN"}


@cache
def has_vnni() -> bool:
    """Whether this CPU has VNNI (AVX-512 or AVX): onnxruntime's uint8 x int8 kernels sum in int32 there.

    Without VNNI (AVX2 only) they sum pairs with vpmaddubsw into int16, which can saturate: on one trained
    digits CNN 8-bit weights cost 1.39 points of accuracy (docs/export.md). onnxruntime's `reduce_range`
    (7-bit weights) avoids the saturation, and is what its docs advise for non-VNNI machines.
    """
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags.split() for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


class _Reader(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime.quantization ships no types
    """Equal-sized batches: the entropy and percentile collectors stack them and fail on a short last one.
    A graph with a fixed batch (export.onnx.dynamic_batch: false) takes batches of exactly that many rows."""

    def __init__(self, inputs: dict[str, np.ndarray], batch: int | None = None):
        rows = len(next(iter(inputs.values())))
        step = batch if batch is not None and rows % batch == 0 else math.gcd(rows, 32)
        self.batches = iter([{k: v[i:i + step] for k, v in inputs.items()} for i in range(0, rows, step)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


@contextmanager
def _quiet() -> Iterator[None]:
    """The quantizer logs pre-processing advice on the root logger at WARNING on every call, and the entropy
    and percentile calibrators print their progress: hold both back (export prints its own lines)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


def _prepared(model_bytes: bytes) -> onnx.ModelProto:
    """Constants folded (onnxruntime's basic level, portable ONNX, what its quant_pre_process runs), every node
    named after the tensor it writes (the quantizer keys its choices by name).

    Folding matters for recurrent graphs: specgen's LSTM reads its gate kernels through a Concat, and the
    quantizer only quantizes an LSTM whose weights are stored (DynamicQuantizeLSTM); unfolded it stays float32.
    """
    model = optimized_model(model_bytes, "cpu", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    for node in model.graph.node:
        if not node.name:
            node.name = node.output[0]
    return model


def _keep_header(source: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """The export's metadata (named-dimension bounds, runtime/lengths.py) and opset imports, plus only the
    domains the quantized nodes use: onnxruntime's saved graph imports every domain it knows."""
    used = {n.domain for n in model.graph.node} - {d.domain for d in source.opset_import}
    imports = [*source.opset_import, *(d for d in model.opset_import if d.domain in used)]
    del model.opset_import[:]
    model.opset_import.extend(imports)
    del model.metadata_props[:]
    model.metadata_props.extend(source.metadata_props)


def _ranges(source: Path, folder: Path, calibration: Calibration, batch: int | None) -> Path:
    """The activation ranges, calibrated with CALIBRATORS' settings, in onnxruntime's calibration cache (a JSON
    file of float32 values, read back exactly) for quantize_static to read instead of calibrating itself."""
    method, settings = CALIBRATORS[calibration.method]
    calibrator = create_calibrator(source, CALIBRATED_OPS, augmented_model_path=str(folder / "augmented.onnx"),
                                   calibrate_method=method, extra_options=settings)
    calibrator.collect_data(_Reader(calibration.inputs, batch))
    cache = folder / "ranges.json"
    save_tensors_data(calibrator.compute_data(), cache)
    return cache


def convert(model_bytes: bytes, calibration: Calibration) -> tuple[bytes, dict[str, Any]]:
    model = _prepared(model_bytes)
    ops = {n.op_type for n in model.graph.node}
    dynamic = bool(ops & RECURRENT) and "Conv" not in ops
    with tempfile.TemporaryDirectory() as folder, _quiet():
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        onnx.save(model, str(source))
        if dynamic:  # 7-bit weights without VNNI here too: the dynamic kernels add int16 pairs just the same
            quantize_dynamic(source, target, per_channel=True, reduce_range=not has_vnni(), weight_type=QuantType.QInt8)
        else:
            ranges = _ranges(source, Path(folder), calibration, graph_batch(model))
            quantize_static(source, target, None, quant_format=QuantFormat.QDQ, calibration_cache_path=ranges,
                            per_channel=True, reduce_range=not has_vnni(), activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, calibrate_method=CALIBRATORS[calibration.method][0])
        data = onnx.load(str(target))
    _keep_header(onnx.load_from_string(model_bytes), data)
    # 8-bit integers hold no NaN or inf: the Predictor (infer, serve) refuses them in these inputs (quantized_inputs.py)
    quantized_inputs.stamp(data, quantized_inputs.reaching(data.graph))
    report: dict[str, Any] = {"mode": "dynamic" if dynamic else "static QDQ",
                              "calibration": None if dynamic else calibration.method,
                              "calibration_examples": None if dynamic else len(next(iter(calibration.inputs.values()))),
                              "reduce_range": not has_vnni()}
    if not dynamic:  # how the ranges were calibrated: a dynamic variant measures them per run
        report["calibration_settings"] = CALIBRATORS[calibration.method][1]
    return data.SerializeToString(deterministic=True), report


def calibrated_ranges(model_bytes: bytes) -> bool:
    """Whether a variant quantizes activations at ranges fixed by calibration on the eval set (static QDQ: a
    QuantizeLinear node). A dynamic one (DynamicQuantizeLinear) measures them per run, an fp16 one has none: a
    constant input calibrates nothing there (degenerate.py)."""
    return any(node.op_type == "QuantizeLinear" for node in onnx.load_from_string(model_bytes).graph.node)


def check(model_bytes: bytes, provider: str) -> dict[str, Any]:
    """Count the integer kernels onnxruntime fused; refuse a quantized node left to run in float32."""
    graph = optimized_graph(model_bytes, provider, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    left = [label(n) for n in graph.node if n.op_type in FLOAT_COMPUTE and any(i in dequantized for i in n.input)]
    integer = sum(1 for n in graph.node if n.op_type in INTEGER_KERNELS)
    if left:
        raise PrecisionRefusal(f"int8: {len(left)} quantized node(s) have no integer kernel on the {provider} provider "
                               f"and would run in float32 between Dequantize/Quantize pairs: {', '.join(left[:5])}"
                               f"{' ...' if len(left) > 5 else ''}")
    if integer == 0:  # nothing quantized (a float32 graph labelled int8): int8 would gain nothing, so refused
        raise runs_as_float32("int8", provider, "integer kernel", "after onnxruntime's fusion (no quantized Conv, "
                              "Gemm, MatMul or recurrent node)")
    # Nodes the quantizer did not touch (an LSTM whose weights are computed, not stored) stay float32:
    # not a refusal, since no Dequantize/Quantize pair was paid for them, but reported
    unquantized = [label(n) for n in graph.node if n.op_type in FLOAT_COMPUTE]
    return {"integer_kernels": integer, "float32_compute": unquantized, "optimized_ops": op_counts(graph)}


DEF = PrecisionDef(REGISTRY["int8"], convert, check)
