"""A flatten after channels-first convs, read only by dense layers, costs no Transpose (ir/flatten_order.py).

Keras flattens NHWC; the ONNX graph holds conv outputs NCHW. Exporting flattens NCHW and reorders the
first dense kernel's rows instead of transposing the activations back. Checked against Keras' own
model.predict through `specgen import keras` + `specgen export`, with the node count (VGG16's head has
this shape; zoo.py's VGG16 row goes from 40 to 39 nodes, tf2onnx's count).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

keras = pytest.importorskip("keras")

from specgen.cli import main  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

TOLERANCE = 1e-5  # max |ORT - Keras| / max |Keras|: two float32 evaluations, different summation orders


def vgg_like(head: str) -> Any:
    """conv-bn-relu-pool twice, flatten, then `head`: dense layers (with a dropout) or a flatten output too."""
    keras.utils.set_random_seed(0)
    image = keras.Input((12, 10, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv1")(image)
    x = keras.layers.MaxPooling2D(2, name="pool1")(keras.layers.ReLU(name="relu1")(x))
    x = keras.layers.Conv2D(6, 3, padding="same", name="conv2")(x)
    x = keras.layers.BatchNormalization(name="bn2")(x)
    x = keras.layers.MaxPooling2D(2, name="pool2")(keras.layers.ReLU(name="relu2")(x))  # [3, 2, 6]: H, W, C differ
    flat = keras.layers.Flatten(name="flat")(x)
    hidden = keras.layers.Dense(16, activation="relu", name="fc1")(keras.layers.Dropout(0.5, name="drop")(flat))
    logits = keras.layers.Dense(5, name="fc2")(hidden)
    outputs = {"logits": logits, "features": flat} if head == "flat too" else {"logits": logits}
    model = keras.Model(image, outputs, name="vgg_like")
    for weight in model.weights:  # statistics and biases away from 0 and 1, so their order matters
        if weight.path.endswith(("moving_mean", "beta", "bias")):
            weight.assign(np.random.default_rng(1).normal(0, 0.3, weight.shape).astype(np.float32))
    return model


@pytest.fixture(scope="module", params=["dense only", "flat too"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("flatten")
    model = vgg_like(request.param)
    model.save(folder / "vgg_like.keras")
    assert main(["import", "keras", str(folder / "vgg_like.keras"), "-o", str(folder / "vgg_like.yaml")]) == 0
    assert main(["export", str(folder / "vgg_like.yaml"), "-o", str(folder / "out")]) == 0
    x = np.random.default_rng(2).standard_normal((4, 12, 10, 3)).astype(np.float32)
    return {"head": request.param, "keras": model, "x": x, "folder": folder,
            "onnx": onnx.load(str(folder / "out" / "model.onnx")),
            "ir": build_ir(load_spec(folder / "vgg_like.yaml"))}


def test_onnx_outputs_equal_keras(exported: dict[str, Any]) -> None:
    expected = {k: v.numpy() for k, v in exported["keras"](exported["x"], training=False).items()}
    actual = Predictor(str(exported["folder"] / "out" / "model.onnx"), provider="cpu")({"image": exported["x"]})
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert np.max(np.abs(actual[name] - value)) / np.max(np.abs(value)) <= TOLERANCE, name


def test_transpose_only_where_keras_order_is_observable(exported: dict[str, Any]) -> None:
    ops = [n.op_type for n in exported["onnx"].graph.node]
    if exported["head"] == "dense only":  # the input's Transpose only; bn2 folded into conv2
        assert ops == ["Transpose", "Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool", "Flatten", "Gemm", "Relu",
                       "Gemm"]
        assert exported["ir"].nchw_flattens == {"flat"}
    else:  # `features` is an output: it must be Keras' NHWC order, so the Transpose stays and no kernel moves
        assert ops.count("Transpose") == 2 and len(ops) == 12
        assert exported["ir"].nchw_flattens == frozenset()


def test_first_dense_kernel_rows_are_reordered(exported: dict[str, Any]) -> None:
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in exported["onnx"].graph.initializer}
    kernel = exported["keras"].get_layer("fc1").kernel.numpy()  # rows in Keras' (h, w, c) order
    if exported["head"] == "dense only":  # rows in (c, h, w) order: a permutation, so bitwise the same values
        np.testing.assert_array_equal(initializers["fc1__kernel"], kernel.reshape(3, 2, 6, 16).transpose(2, 0, 1, 3)
                                      .reshape(36, 16))
    else:
        np.testing.assert_array_equal(initializers["fc1__kernel"], kernel)
    np.testing.assert_array_equal(initializers["fc2__kernel"], exported["keras"].get_layer("fc2").kernel.numpy())
