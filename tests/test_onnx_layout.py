"""Layout of concat-heavy graphs (DenseNet-style blocks): what bench/RESULTS.md's layout section relies on.

A concat of channels-first conv outputs stays channels-first, so the pre-activation batch norm, the
convs and pools after it need no Transpose; the only ones are the graph input's and, for a 4-D
output, the output's. onnxruntime then runs the whole block in its blocked NCHWc layout: the
unfoldable batch norm after a Concat becomes an NCHWc depthwise Conv (with the ReLU fused), like
tf2onnx's Mul+Add spelling of it, and no ReorderInput/ReorderOutput pairs sit between the blocks.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5

# Two dense layers and a transition, as keras.applications.DenseNet121 writes them (growth 8, 16 channels
# in, so every Concat has a multiple of 8 channels, the NCHWc block size on AVX2 and below).
DENSE = """\
specgen: 1
name: dense_block
inputs:
  image: {shape: [12, 12, 3]}
outputs:
  y: out
layers:
  - {name: stem, op: conv2d, input: image, filters: 16, kernel: 3, padding: same, use_bias: false}
  - {name: stem_bn, op: batch_norm, activation: relu}
  - {name: b1_bn, op: batch_norm, activation: relu}
  - {name: b1_conv1, op: conv2d, filters: 32, kernel: 1, use_bias: false}
  - {name: b1_bn2, op: batch_norm, activation: relu}
  - {name: b1_conv2, op: conv2d, filters: 8, kernel: 3, padding: same, use_bias: false}
  - {name: b1_cat, op: concat, inputs: [stem_bn, b1_conv2]}
  - {name: b2_bn, op: batch_norm, activation: relu}
  - {name: b2_conv1, op: conv2d, filters: 32, kernel: 1, use_bias: false}
  - {name: b2_bn2, op: batch_norm, activation: relu}
  - {name: b2_conv2, op: conv2d, filters: 8, kernel: 3, padding: same, use_bias: false}
  - {name: b2_cat, op: concat, inputs: [b1_cat, b2_conv2]}
  - {name: t_bn, op: batch_norm, activation: relu}
  - {name: t_conv, op: conv2d, filters: 16, kernel: 1, use_bias: false}
  - {name: t_pool, op: avg_pool, size: 2}
  - {name: b3_bn, op: batch_norm, activation: relu}
  - {name: b3_conv, op: conv2d, filters: 8, kernel: 3, padding: same, use_bias: false}
  - {name: b3_cat, op: concat, inputs: [t_pool, b3_conv]}
  - {name: gap, op: global_avg_pool}
  - {name: out, op: dense, units: 5}
"""


def exported() -> onnx.ModelProto:
    from specgen.render.files import render_files
    from specgen.runtime import parity
    from specgen.runtime.onnx_export import with_weights

    ir = build_ir(load_spec_text(DENSE, "s.yaml"))
    values = parity.random_weights(ir, np.random.default_rng(0))
    return with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, values)


def test_concat_stays_channels_first_with_no_transposes_around_it() -> None:
    from specgen.render.onnx_plan import onnx_plan

    steps = onnx_plan(build_ir(load_spec_text(DENSE, "s.yaml"))).steps
    transposes = [s for s in steps if s.template == "transpose"]
    assert [s.ins for s in transposes] == [("image",)]  # the graph input only; the output is 2-D
    concats = [s for s in steps if s.template == "concat"]
    assert [s.attrs.axis for s in concats] == [1, 1, 1]  # the channel axis, channels-first


def test_export_folds_what_follows_a_conv_and_keeps_the_rest() -> None:
    model = exported()
    counts = Counter(n.op_type for n in model.graph.node)
    # stem_bn, b1_bn2 and b2_bn2 follow a conv that nothing else reads; the pre-activation ones do not.
    assert counts["BatchNormalization"] == 4
    assert counts["Transpose"] == 1


def test_onnxruntime_runs_the_blocks_in_nchwc_without_reorders() -> None:
    """The graph onnxruntime runs (level all, as Predictor): batch norms turned into Conv, one Reorder out."""
    import onnxruntime as ort

    model = exported()
    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(options.optimized_model_filepath)
    counts = Counter(n.op_type for n in optimized.graph.node)
    if not any(n.domain == "com.microsoft.nchwc" for n in optimized.graph.node):
        pytest.skip("this CPU's onnxruntime build has no NCHWc transformer")
    assert "BatchNormalization" not in counts and "Relu" not in counts
    assert counts["ReorderInput"] + counts["ReorderOutput"] <= 2  # in at the stem (or none), out before the mean
    assert counts["Transpose"] <= 1


def test_tf_and_onnxruntime_agree(tmp_path: Path) -> None:
    from test_op_parity import check_parity

    assert check_parity(load_spec_text(DENSE, "s.yaml"), tmp_path) <= TOLERANCE
