"""Catalogue models written with blocks: their parameter counts equal Keras' `count_params()`.

The Keras figures were measured in this repository's environment (Keras 3.15, TensorFlow 2.21) with

    keras.applications.ResNet50(weights=None).count_params()          # 25,636,712
    keras.applications.MobileNetV3Small(weights=None).count_params()  # 2,554,968

and are hard-coded so that this test needs no TensorFlow. Keras counts every weight of every layer,
batch-norm moving statistics included: that is the spec's built-in `model` collection.
"""

from __future__ import annotations

import re
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


def test_a_catalogue_model_trains_at_small_resolution(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MobileNetV3Small (full width, 10 classes) at 32x32: batch norm, dropout, hard swish, squeeze-excite
    and the blocks' layers train. A few Adam steps on 16 fixed examples must lower the loss, and the
    batch-norm statistics must move away from their initial values (the update ops run)."""
    import numpy as np

    from specgen.pipeline import build
    from specgen.runtime.commands.train import Options, train
    from specgen.spec.load import load_spec_text

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.uniform(0, 255, (16, 32, 32, 3)).astype("float32"),
             y=rng.integers(0, 10, 16).astype("int64"))
    text = (SPECS / "mobilenet_v3_small.yaml").read_text()
    text = text.replace("shape: [64, 64, 3]", "shape: [32, 32, 3]").replace("filters: 1000", "filters: 10")
    text = text.replace("learning_rate: 0.001", "learning_rate: 0.01").replace("batch_size: 32", "batch_size: 8")
    text += ("data:\n  train: {npz: d.npz, features: {image: x}, labels: {label: y}}\n"
             "checkpoint: {dir: run, every_steps: 1000}\n")
    (tmp_path / "spec.yaml").write_text(text)
    loaded = load_spec_text(text, "spec.yaml", tmp_path / "spec.yaml")
    summary = train(build(loaded), Options(steps=12))
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", capsys.readouterr().out)]
    assert len(losses) >= 2 and all(np.isfinite(losses))
    assert losses[-1] < losses[0], losses

    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(Path(summary["checkpoint"]) / "variables"))
    keys = {k.split("/.ATTRIBUTES")[0]: k for k in reader.get_variable_to_shape_map()}
    moving = [k for k in keys if k.endswith("stage4/3/project/bn/moving_mean") or "stage4/3/project/bn/moving_mean" in k]
    assert moving, sorted(keys)[:20]
    assert np.abs(reader.get_tensor(keys[moving[0]])).max() > 0  # moved from zeros
