"""Layout of concat-heavy graphs (DenseNet-style blocks): what bench/RESULTS.md's layout section relies on.

A concat of channels-first conv outputs stays channels-first, so the pre-activation batch norm, the
convs and pools after it need no Transpose; the only ones are the graph input's and, for a 4-D
output, the output's. Between that Transpose and the global mean, specgen's graph holds only ops on
NCHW tensors that onnxruntime's NCHWc transformer can take into its blocked layout (Conv,
BatchNormalization, Relu, Concat on axis 1, AveragePool), each ReLU right after the op it can fuse
into. Whether onnxruntime then does so is its own choice, which depends on the CPU and the build
(on AVX-512 it kept 2 BatchNormalization and 2 Relu nodes): the tests assert specgen's graph only.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5  # max |ORT - TF|: two float32 evaluations of one graph, different summation orders

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


def test_the_blocks_are_channels_first_ops_only() -> None:
    """Every op from the input's Transpose to the mean, with its output shape: all NCHW, nothing in between."""
    model = onnx.shape_inference.infer_shapes(exported(), strict_mode=True)
    shapes = {v.name: tuple(d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim)
              for v in [*model.graph.value_info, *model.graph.output]}
    ops = [(n.op_type, shapes[n.output[0]]) for n in model.graph.node]
    conv_relu = [("Conv", ("batch", 32, 12, 12)), ("Relu", ("batch", 32, 12, 12))]  # the 1x1 conv, its BN folded
    assert ops == [
        ("Transpose", ("batch", 3, 12, 12)),
        ("Conv", ("batch", 16, 12, 12)), ("Relu", ("batch", 16, 12, 12)),  # stem, stem_bn folded into it
        ("BatchNormalization", ("batch", 16, 12, 12)), ("Relu", ("batch", 16, 12, 12)),  # b1_bn: stem_bn has 2 readers
        *conv_relu, ("Conv", ("batch", 8, 12, 12)), ("Concat", ("batch", 24, 12, 12)),
        ("BatchNormalization", ("batch", 24, 12, 12)), ("Relu", ("batch", 24, 12, 12)),  # b2_bn after the Concat
        *conv_relu, ("Conv", ("batch", 8, 12, 12)), ("Concat", ("batch", 32, 12, 12)),
        ("BatchNormalization", ("batch", 32, 12, 12)), ("Relu", ("batch", 32, 12, 12)),  # t_bn
        ("Conv", ("batch", 16, 12, 12)), ("AveragePool", ("batch", 16, 6, 6)),
        ("BatchNormalization", ("batch", 16, 6, 6)), ("Relu", ("batch", 16, 6, 6)),  # b3_bn: t_pool has 2 readers
        ("Conv", ("batch", 8, 6, 6)), ("Concat", ("batch", 24, 6, 6)),
        ("ReduceMean", ("batch", 24)), ("Gemm", ("batch", 5)),
    ]
    assert [onnx.helper.get_attribute_value(n.attribute[0]) for n in model.graph.node if n.op_type == "Concat"] == [1, 1, 1]
    # each Relu reads the op right before it and nothing else does: onnxruntime may fuse the pair
    readers = Counter(name for n in model.graph.node for name in n.input)
    for before, relu in zip(model.graph.node, model.graph.node[1:], strict=False):
        if relu.op_type == "Relu":
            assert list(relu.input) == [before.output[0]] and readers[before.output[0]] == 1, relu.name


def test_tf_and_onnxruntime_agree(tmp_path: Path) -> None:
    from test_op_parity import check_parity

    assert check_parity(load_spec_text(DENSE, "s.yaml"), tmp_path) <= TOLERANCE
