"""Catalogue models written with blocks: their parameter counts equal Keras' `count_params()`.

The Keras figures were measured in this repository's environment (Keras 3.15, TensorFlow 2.21) with

    keras.applications.ResNet50(weights=None).count_params()          # 25,636,712
    keras.applications.MobileNetV3Small(weights=None).count_params()  # 2,554,968

and are hard-coded so that this test needs no TensorFlow. Keras counts every weight of every layer,
batch-norm moving statistics included: that is the spec's built-in `model` collection.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"

KERAS_PARAMS = {"resnet50": 25_636_712, "mobilenet_v3_small": 2_554_968}
# Keras layer types -> spec ops, counted in the Keras model (InputLayer left out).
KERAS_LAYERS = {
    "resnet50": {"conv2d": 53, "batch_norm": 53, "add": 16, "pad": 2, "max_pool": 1, "global_avg_pool": 1, "dense": 1},
    # MobileNetV3Small: also 23 ReLU (14 relu + 9 hard_sigmoid, which Keras builds from ReLU(6)) and 20 Activation
    # (19 hard_swish + the softmax).
    "mobilenet_v3_small": {"conv2d": 43, "batch_norm": 34, "depthwise_conv2d": 11, "global_avg_pool": 10,
                           "multiply": 9, "add": 6, "pad": 4, "rescale": 1, "dropout": 1, "flatten": 1,
                           "relu": 14, "hard_sigmoid": 9, "hard_swish": 19, "softmax": 1},
}


@pytest.mark.parametrize("name", sorted(KERAS_PARAMS))
def test_model_collection_matches_keras_count_params(name: str) -> None:
    ir = build_ir(load_spec(SPECS / f"{name}.yaml"))
    size = {v.path: v.size for v in ir.variables}
    assert sum(size[p] for p in ir.collections["model"]) == KERAS_PARAMS[name]


@pytest.mark.parametrize("name", sorted(KERAS_LAYERS))
def test_the_expanded_layers_are_keras_layers(name: str) -> None:
    ops = Counter(node.op for node in build_ir(load_spec(SPECS / f"{name}.yaml")).nodes)
    assert {op: ops[op] for op in KERAS_LAYERS[name]} == KERAS_LAYERS[name]


def test_resnet50_is_written_with_blocks_in_well_under_100_lines() -> None:
    text = (SPECS / "resnet50.yaml").read_text()
    assert len(text.splitlines()) < 100 and "blocks:" in text
    ir = build_ir(load_spec(SPECS / "resnet50.yaml"))
    assert len(ir.nodes) == 177  # Keras' 176 layers after its InputLayer, and a softmax of our own (probabilities)
    assert ir.node("stage3/1/res/c1/conv").params["strides"] != ir.node("stage3/2/res/c1/conv").params["strides"]
    assert "stage3/4/res/c3/conv/kernel" in ir.collections["backbone"]
