"""Batch-norm folding for every layer with a kernel, and onnxruntime failures during export as one line.

- The fold against Keras: each producer (conv1d plain, grouped and causal without bias, conv2d plain,
  strided and grouped, depthwise, separable, conv2d_transpose with and without bias, dense on 2-D, 3-D and
  4-D inputs, dense after flatten) followed by batch_norm with non-trivial moving statistics, exported by
  `with_weights` and run by onnxruntime, against the Keras model holding the same weights. Every batch norm
  is folded, and every rewritten initializer keeps its shape (a fold that would change one is an internal
  error naming the node). The spec language has no conv3d, no conv1d_transpose and no grouped transposed
  conv: those (and a Gemm with transB) are hand-built graphs, folded against the same graph with its batch norm.
- An onnxruntime failure while export runs the exported graph (parity, precision gates) is one error line
  naming the node, exit 1, nothing written.

Fixed-batch graphs (`export.onnx.dynamic_batch: false`) are tests/test_export_fixed_batch.py.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.errors import RenderError
from specgen.render.files import render_files
from specgen.runtime.onnx_export import fold_batch_norms, node_counts, with_weights
from specgen.spec.load import load_spec_text
from specgen.spec.overrides import load_with_overrides

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "specs"
DIGITS = ROOT / "examples" / "data" / "digits.npz"
BATCH = 3

# (producer layer, batch_norm options): each producer's output is read by its batch norm only
PRODUCERS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"op": "conv1d", "input": "seq", "filters": 6, "kernel": 3, "padding": "same"}, {}),
    ({"op": "conv1d", "input": "seq", "filters": 6, "kernel": 3, "groups": 2, "strides": 2, "padding": "same"}, {}),
    ({"op": "conv1d", "input": "seq", "filters": 3, "kernel": 2, "padding": "causal", "dilation": 2,
      "use_bias": False}, {"scale": False}),
    ({"op": "conv2d", "input": "image", "filters": 5, "kernel": 3, "padding": "same"}, {}),
    ({"op": "conv2d", "input": "image", "filters": 4, "kernel": 3, "strides": 2, "groups": 2}, {"center": False}),
    ({"op": "depthwise_conv2d", "input": "image", "kernel": 3, "depth_multiplier": 2, "padding": "same"}, {}),
    ({"op": "separable_conv2d", "input": "image", "filters": 3, "kernel": 3, "padding": "same"}, {}),
    ({"op": "conv2d_transpose", "input": "image", "filters": 3, "kernel": 3, "strides": 2, "padding": "same"}, {}),
    ({"op": "conv2d_transpose", "input": "image", "filters": 2, "kernel": 2, "use_bias": False}, {}),
    ({"op": "dense", "input": "flat", "units": 5}, {}),
    ({"op": "dense", "input": "seq", "units": 5}, {}),
    ({"op": "dense", "input": "image", "units": 3, "use_bias": False}, {}),
    ({"op": "dense", "input": "image_flat", "units": 4}, {}),
]


def fold_doc() -> dict[str, Any]:
    layers: list[dict[str, Any]] = [{"name": "image_flat", "op": "flatten", "input": "image"}]
    outputs = {}
    for k, (producer, norm) in enumerate(PRODUCERS):
        layers += [{"name": f"p{k}", **producer}, {"name": f"bn{k}", "op": "batch_norm", "epsilon": 0.01, **norm}]
        outputs[f"o{k}"] = f"bn{k}"
    return {"specgen": 1, "name": "bn_fold", "outputs": outputs, "layers": layers,
            "inputs": {"seq": {"shape": [7, 4]}, "image": {"shape": [5, 6, 4]}, "flat": {"shape": [6]}}}


def keras_layer(keras: Any, name: str, layer: dict[str, Any]) -> Any:
    """The Keras layer a spec layer declares (the options PRODUCERS uses)."""
    L, op = keras.layers, layer["op"]
    common = {"name": name, "padding": layer.get("padding", "valid"), "strides": layer.get("strides", 1)}
    bias = layer.get("use_bias", True)
    if op == "conv1d":
        return L.Conv1D(layer["filters"], layer["kernel"], groups=layer.get("groups", 1),
                        dilation_rate=layer.get("dilation", 1), use_bias=bias, **common)
    if op == "conv2d":
        return L.Conv2D(layer["filters"], layer["kernel"], groups=layer.get("groups", 1), use_bias=bias, **common)
    if op == "depthwise_conv2d":
        return L.DepthwiseConv2D(layer["kernel"], depth_multiplier=layer["depth_multiplier"], **common)
    if op == "separable_conv2d":
        return L.SeparableConv2D(layer["filters"], layer["kernel"], **common)
    if op == "conv2d_transpose":
        return L.Conv2DTranspose(layer["filters"], layer["kernel"], use_bias=bias, **common)
    return L.Dense(layer["units"], use_bias=bias, name=name)


def keras_fold_model(keras: Any) -> Any:
    inputs = {"seq": keras.Input((7, 4), name="seq"), "image": keras.Input((5, 6, 4), name="image"),
              "flat": keras.Input((6,), name="flat")}
    tensors = {**inputs, "image_flat": keras.layers.Flatten(name="image_flat")(inputs["image"])}
    outputs = {}
    for k, (producer, norm) in enumerate(PRODUCERS):
        hidden = keras_layer(keras, f"p{k}", producer)(tensors[producer["input"]])
        outputs[f"o{k}"] = keras.layers.BatchNormalization(epsilon=0.01, name=f"bn{k}", **norm)(hidden)
    return keras.Model(inputs, outputs)


def random_values(model: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Weights set in the Keras model, by spec path: moving statistics far from (0, 1), variances positive."""
    values = {}
    for layer in model.layers:
        for weight in layer.weights:
            value = rng.standard_normal(tuple(weight.shape)).astype(np.float32)
            value = np.abs(value) + 0.3 if "variance" in weight.name else value
            weight.assign(value)
            values[f"{layer.name}/{weight.name}"] = value
    return values


def test_every_batch_norm_folds_and_equals_keras() -> None:
    """Old code: conv1d's 3-D kernel times a [F, 1, 1, 1] scale broadcast to [F, F, C, k] and onnxruntime
    refused the Conv; conv2d_transpose and dense on 3-D/4-D inputs were left unfolded."""
    keras = pytest.importorskip("keras")
    import onnxruntime as ort

    ir = build_ir(load_spec_text(yaml.safe_dump(fold_doc(), sort_keys=False), "bn_fold.yaml"))
    model = keras_fold_model(keras)
    values = random_values(model, np.random.default_rng(0))
    assert sorted(values) == sorted(v.path for v in ir.model_variables)
    exported = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, values)
    assert "BatchNormalization" not in node_counts(exported)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal((BATCH, *i.shape[1:])).astype(np.float32) for i in ir.inputs}
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    actual = dict(zip(ir.outputs, session.run(list(ir.outputs), feeds), strict=True))
    expected = {k: np.asarray(v) for k, v in model(feeds, training=False).items()}
    for name, producer in zip(ir.outputs, PRODUCERS, strict=True):
        scale = max(1.0, float(np.max(np.abs(expected[name]))))
        diff = float(np.max(np.abs(actual[name] - expected[name])))
        assert diff <= 1e-5 * scale, f"{producer[0]['op']} ({name}): {diff} of {scale}"


# Producers no spec op writes yet, built by hand: (node, kernel shape, input shape, output channels)
HAND_BUILT = {
    "conv3d": (("Conv", {"kernel_shape": [2, 2, 2]}), (4, 3, 2, 2, 2), (2, 3, 4, 4, 4), 4),
    "conv1d_transpose_grouped": (("ConvTranspose", {"kernel_shape": [3], "group": 2}), (4, 3, 3), (2, 4, 5), 6),
    "conv2d_transpose_grouped": (("ConvTranspose", {"kernel_shape": [2, 2], "group": 3}), (6, 2, 2, 2), (2, 6, 3, 3),
                                 6),
    "gemm_transposed_kernel": (("Gemm", {"transB": 1}), (5, 7), (2, 7), 5),
}


@pytest.mark.parametrize("case", sorted(HAND_BUILT))
def test_folding_producers_no_spec_op_writes_yet(case: str) -> None:
    """A 3-D conv, grouped transposed convs (output channels on axis 1, per group) and a Gemm with transB: the
    folded graph equals the graph with its BatchNormalization, in onnxruntime."""
    import onnxruntime as ort
    from onnx import numpy_helper

    (op, attributes), kernel_shape, input_shape, channels = HAND_BUILT[case]
    helper, rng = onnx.helper, np.random.default_rng(0)
    weights = {"k": rng.standard_normal(kernel_shape).astype(np.float32),
               "bias": rng.standard_normal(channels).astype(np.float32),
               **{n: rng.standard_normal(channels).astype(np.float32) for n in ("g", "b", "m")},
               "v": rng.uniform(0.3, 2.0, channels).astype(np.float32)}

    def model(folded: bool) -> bytes:
        graph = helper.make_graph(
            [helper.make_node(op, ["x", "k", "bias"], ["c"], **attributes),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], epsilon=0.01)],
            case, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
        values = {k: v.copy() for k, v in weights.items()}
        if folded:
            assert fold_batch_norms(graph, values) == 1 and [n.op_type for n in graph.node] == [op]
        used = {name for node in graph.node for name in node.input}
        graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in values.items() if k in used)
        return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()

    x = rng.standard_normal(input_shape).astype(np.float32)
    unfolded, folded = (ort.InferenceSession(model(f), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                        for f in (False, True))
    np.testing.assert_allclose(folded, unfolded, rtol=1e-5, atol=1e-5)


def test_folding_never_changes_an_initializers_shape() -> None:
    """A batch norm of 3 channels after a Conv of 1 output channel (a graph specgen does not write): its scale
    would broadcast the kernel [1, 2, 3] to [3, 2, 3]; the fold refuses it as an internal error naming the node
    (old code exported the broadcast kernel)."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[3]),
         helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"])],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 3])])
    weights = {"k": np.ones((1, 2, 3), np.float32), **{n: np.ones(3, np.float32) for n in "gbmv"}}
    with pytest.raises(RenderError) as caught:
        fold_batch_norms(graph, weights)
    assert str(caught.value).startswith("folding BatchNormalization 'y' into Conv 'c' would change the weights' shapes")


CONV1D_BN = """\
specgen: 1
name: conv1d_bn
inputs: {seq: {shape: [16, 3]}}
outputs: {y: bn}
layers:
  - {name: conv, op: conv1d, input: seq, filters: 8, kernel: 3, padding: same}
  - {name: bn, op: batch_norm}
"""


def broken_kernel(model: onnx.ModelProto) -> onnx.ModelProto:
    """The first Conv kernel broadcast to one more axis ([F, C, k] -> [F, F, C, k]), as the old fold did for
    conv1d: onnx.checker passes it and onnxruntime fails when it runs the Conv."""
    from onnx import numpy_helper

    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    index = next(k for k, i in enumerate(model.graph.initializer) if i.name == conv.input[1])
    kernel = numpy_helper.to_array(model.graph.initializer[index])
    broken = kernel * np.ones((kernel.shape[0], *[1] * kernel.ndim), np.float32)
    model.graph.initializer[index].CopyFrom(numpy_helper.from_array(broken, conv.input[1]))
    return model


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": error: " in line]


def test_onnxruntime_failure_in_the_parity_check_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: onnxruntime's exception escaped as a traceback."""
    from test_export import write_checkpoint  # sibling module, by bare name as CI runs it

    from specgen.runtime import onnx_export

    spec = tmp_path / "conv1d_bn.yaml"
    spec.write_text(CONV1D_BN)
    write_checkpoint(tmp_path / "ckpt", build_ir(load_spec_text(CONV1D_BN, str(spec))), np.random.default_rng(0))
    monkeypatch.setattr("specgen.runtime.commands.export.with_weights",
                        lambda *args, **kwargs: broken_kernel(onnx_export.with_weights(*args, **kwargs)))
    code = main(["export", str(spec), "--checkpoint", str(tmp_path / "ckpt"), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    (line,) = error_lines(err)
    head = f"{spec}: error: onnxruntime failed on the exported graph (the parity check against TensorFlow): "
    # Which node onnxruntime names is its graph optimizer's choice, not specgen's: the Conv itself, or on a CPU where
    # it lays the convolution out in NCHWc blocks, the ReorderInput it put before it. Any node kind is accepted.
    assert re.fullmatch(re.escape(head) + r"\w+ node '\w+': .+; nothing was written; please report this with "
                        "the spec", line), line
    assert not (tmp_path / "out").exists()


def test_onnxruntime_failure_in_a_precision_gate_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A variant onnxruntime cannot run (its conversion broken here on purpose): one line, nothing written, the
    output folder left as it was (old code: a traceback)."""
    from test_export import write_checkpoint

    from specgen.runtime.precision import REGISTRY

    spec = digits_spec(tmp_path, "digits_cnn")
    write_checkpoint(tmp_path / "ckpt", build_ir(load_with_overrides(spec, [])), np.random.default_rng(0))

    def convert(model_bytes: bytes, calibration: Any) -> tuple[bytes, dict[str, Any]]:
        return broken_kernel(onnx.load_from_string(model_bytes)).SerializeToString(), {}

    monkeypatch.setitem(REGISTRY, "int8", dataclasses.replace(REGISTRY["int8"], convert=convert,
                                                              check=lambda model_bytes, provider: {}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("kept")
    code = main(["export", str(spec), "--checkpoint", str(tmp_path / "ckpt"), "-o", str(out), "--precision", "int8",
                 "--force", "--triton"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    (line,) = error_lines(err)
    head = f"{spec}: error: onnxruntime failed on the exported graph (the int8 variant's calibration and gates): "
    assert re.fullmatch(re.escape(head) + r"\w+ node '\w+': .+; nothing was written; please report this with "
                        "the spec", line), line
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def digits_spec(folder: Path, name: str, fixed_batch: bool = False) -> Path:
    """An example spec copied into `folder`: its data path absolute, its run folder inside, its batch fixed to 1."""
    text = (EXAMPLES / f"{name}.yaml").read_text().replace("../data/digits.npz", str(DIGITS))
    text = text.replace(f"dir: ../../runs/{name}", "dir: run")
    spec = folder / f"{name}.yaml"
    spec.write_text(text.replace("dynamic_batch: true", "dynamic_batch: false") if fixed_batch else text)
    return spec
