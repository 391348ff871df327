"""A train random_crop at eval: the issue's example (train images decoded at one size and cropped, eval images
at that size or another) validates, and eval examples are Keras' inference of RandomCrop: the largest
centered window of the crop's aspect ratio, resized to the crop (not the layer at training=False, which
Keras 3.15 leaves unchanged: keras-team/keras#21868)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from images_helpers import encoded, pixels, spec_text, write_tree

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

TRAIN = "{images: train, image_size: [6, 6], augment: [{random_flip: horizontal}, {random_crop: {size: [4, 4], pad: 1}}]}"
EVAL = "{images: eval, image_size: [%d, %d]}"


def folder(root: Path, height: int, width: int, per_class: int) -> None:
    write_tree(root, {f"{c}/{i}.png": encoded(pixels(10 * k + i, height, width), "PNG")
                      for k, c in enumerate("abc") for i in range(per_class)})


def refused(path: Path, text: str) -> str:
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, str(path), path))
    return str(caught.value)


@pytest.mark.parametrize("eval_size", [(6, 6), (9, 5)])
def test_an_eval_source_at_the_image_size_validates(tmp_path: Path, eval_size: tuple[int, int]) -> None:
    path = tmp_path / "spec.yaml"
    ir = build_ir(load_spec_text(spec_text(TRAIN, EVAL % eval_size, shape="[4, 4, 1]"), str(path), path))
    assert ir.inputs[0].shape == (None, 4, 4, 1)


def test_sizes_that_cannot_fit_are_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    # No crop in train: the eval images reach the model at their own size.
    got = refused(path, spec_text("{images: train, image_size: [4, 4]}", EVAL % (6, 6), shape="[4, 4, 1]"))
    assert got == (f"{path}:13:36: error: input 'image' has shape [4, 4, 1]; an images source with image_size [6, 6] "
                   "feeds [6, 6, 1 or 3] (channels: 1 grayscale, 3 RGB)")
    # A crop that is not the input's size: each source is refused where it says its size (eval feeds the crop).
    got = refused(path, spec_text(TRAIN, EVAL % (6, 6), shape="[5, 5, 1]"))
    assert got.splitlines() == [
        f"{path}:{line}: error: input 'image' has shape [5, 5, 1]; an images source with image_size [6, 6] and its "
        "augment (a crop to [4, 4]) feeds [4, 4, 1 or 3] (channels: 1 grayscale, 3 RGB)" for line in ("12:38", "13:36")]


def expected(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """RandomCrop's documented inference, from the layer's own window: its start (get_random_transformation at
    training=False), the largest window of the target aspect ratio, resized bilinearly to the target."""
    import keras
    import tensorflow as tf

    layer = keras.layers.RandomCrop(height, width)
    top, left = layer.get_random_transformation(image[None], training=False)
    rows = max(min(image.shape[0], int(image.shape[1] * height / width)), 1)
    cols = max(min(image.shape[1], int(image.shape[0] * width / height)), 1)
    window = image[top:top + rows, left:left + cols]
    return tf.image.resize(window[None], (height, width)).numpy()[0]  # bilinear, as Keras resizes


def test_eval_examples_are_keras_inference_of_the_crop(tmp_path: Path) -> None:
    import keras

    from specgen.runtime import data

    folder(tmp_path / "train", 6, 6, 2)
    folder(tmp_path / "eval", 9, 5, 1)
    path = tmp_path / "spec.yaml"
    loaded = load_spec_text(spec_text(TRAIN, EVAL % (9, 5), shape="[4, 4, 1]"), str(path), path)
    source = data.read_stage(loaded, build_ir(loaded), "eval")
    assert source is not None
    got = [f["image"].numpy() for f, _ in source.dataset]
    decoded = [pixels(10 * k, 9, 5)[..., None].astype(np.float32) for k in range(3)]  # PNG is lossless
    assert [g.shape for g in got] == [(4, 4, 1)] * 3
    for image, pixel in zip(decoded, got, strict=True):
        np.testing.assert_array_equal(pixel, expected(image, 4, 4))  # exact: the same TF resize op
    # Why not the layer itself: at training=False Keras 3.15's RandomCrop returns its input (#21868). When this
    # fails, Keras crops there again: compare with the layer and call it directly instead.
    layer_out = keras.layers.RandomCrop(4, 4)(decoded[0][None], training=False)
    assert tuple(layer_out.shape) == (1, 9, 5, 1)


def test_train_then_eval_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.cli import main

    folder(tmp_path / "train", 6, 6, 2)
    folder(tmp_path / "eval", 6, 6, 1)
    text = spec_text(TRAIN, EVAL % (6, 6), shape="[4, 4, 1]").replace("seed: 3}", "seed: 3, metrics: [accuracy]}")
    (tmp_path / "spec.yaml").write_text(text + "checkpoint: {dir: run}\n")
    assert main(["train", str(tmp_path / "spec.yaml"), "--steps", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    # the eval set's 3 images (one per class), each counted once: accuracy is k/3
    assert re.search(r"^eval at step 2: accuracy (0\.0000|0\.3333|0\.6667|1\.0000)\s", out, re.M), out
    # export checks the ONNX graph against TensorFlow on the eval set: the cropped eval images fit its input
    assert main(["export", str(tmp_path / "spec.yaml"), "--checkpoint", str(tmp_path / "run"), "-o",
                 str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "TensorFlow on 3 examples;" in out, out  # the whole eval set, at the model's input size
    assert re.search(r"^eval accuracy: onnxruntime (\S+), TensorFlow \1$", out, re.M), out
