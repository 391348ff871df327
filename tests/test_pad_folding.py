"""Zero pads read only by convs (or by a max pool after a relu) become the readers' ONNX `pads`.

ir/pad_folding.py: `ZeroPadding2D -> Conv2D(valid)` is `Conv(pads=...)` exactly, and after a relu a
MaxPool's -inf pads give the same windows as zeros. A pad before a max pool over values that may be
negative stays a Pad (with max_pool's Max(x, x) guard), and so does a pad that something else reads.
Checked against Keras' own outputs through `specgen import keras` + `specgen export`.
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


def stem_model() -> Any:
    """ResNet's stem (pad, conv, bn, relu, pad, max pool), a padded strided depthwise conv (MobileNet), a
    pad before a max pool over a conv's possibly negative output (ResNetV2), and a pad an Add reads too."""
    keras.utils.set_random_seed(0)
    layers = keras.layers
    image = keras.Input((17, 15, 3), name="image")
    x = layers.ZeroPadding2D(3, name="conv1_pad")(image)
    x = layers.Conv2D(8, 7, strides=2, name="conv1")(x)
    x = layers.ReLU(name="relu1")(layers.BatchNormalization(name="bn1")(x))
    x = layers.MaxPooling2D(3, strides=2, name="pool1")(layers.ZeroPadding2D(1, name="pool1_pad")(x))
    dw = layers.DepthwiseConv2D(3, strides=2, name="dw")(layers.ZeroPadding2D(((0, 1), (0, 1)), name="dw_pad")(x))
    raw = layers.Conv2D(4, 1, bias_initializer=keras.initializers.Constant(-3.0), name="raw")(x)  # mostly negative
    pooled = layers.MaxPooling2D(3, strides=2, name="pool2")(layers.ZeroPadding2D(1, name="pool2_pad")(raw))
    shared = layers.ZeroPadding2D(1, name="shared_pad")(raw)
    summed = layers.Add(name="sum")([layers.Conv2D(4, 1, name="c3")(shared), shared])
    return keras.Model(image, {"dw": dw, "pooled": pooled, "summed": summed}, name="stems")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pads")
    model = stem_model()
    model.save(folder / "stems.keras")
    assert main(["import", "keras", str(folder / "stems.keras"), "-o", str(folder / "stems.yaml")]) == 0
    assert main(["export", str(folder / "stems.yaml"), "-o", str(folder / "out")]) == 0
    return {"keras": model, "folder": folder, "onnx": onnx.load(str(folder / "out" / "model.onnx")),
            "ir": build_ir(load_spec(folder / "stems.yaml"))}


def test_onnx_outputs_equal_keras(exported: dict[str, Any]) -> None:
    x = np.random.default_rng(2).standard_normal((3, 17, 15, 3)).astype(np.float32)
    expected = {k: v.numpy() for k, v in exported["keras"](x, training=False).items()}
    actual = Predictor(str(exported["folder"] / "out" / "model.onnx"), provider="cpu")({"image": x})
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert np.max(np.abs(actual[name] - value)) / np.max(np.abs(value)) <= TOLERANCE, name


def test_only_pads_that_cannot_fold_remain(exported: dict[str, Any]) -> None:
    folded = exported["ir"].folded_pads
    assert folded.pads == {"conv1_pad", "pool1_pad", "dw_pad"}
    assert folded.extra == {"conv1": (3, 3, 3, 3), "pool1": (1, 1, 1, 1), "dw": (0, 0, 1, 1)}
    nodes = exported["onnx"].graph.node
    assert [n.op_type for n in nodes].count("Pad") == 2  # pool2_pad (negative input) and shared_pad (an Add reads it)
    assert [n.op_type for n in nodes].count("Max") == 1  # pool2's guard against onnxruntime's PadFusion
    conv1 = next(n for n in nodes if n.op_type == "Conv" and n.input[0] == "image___nchw")  # the pad's input
    assert list(next(a.ints for a in conv1.attribute if a.name == "pads")) == [3, 3, 3, 3]
