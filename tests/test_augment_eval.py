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
    # the whole eval set, at the model's input size (the "; ... of the output's magnitude" part is printed only
    # where the outputs exceed 1, which depends on the two trained steps)
    assert re.search(r"TensorFlow on 3 examples[; ]", out), out
    assert re.search(r"^eval accuracy: onnxruntime (\S+), TensorFlow \1$", out, re.M), out


NPZ_CROP = "{npz: d.npz, features: {image: x}, labels: {label: y}, augment: [{random_crop: {size: [6, 6]}}]}"
NPZ_EVAL = "{npz: d.npz, features: {image: %s}, labels: {label: ye}}"


def npz_folder(tmp_path: Path, eval_name: str = "xe", channels: int = 1) -> Path:
    """12 train images of 8x8 (every pixel value distinct, so a window's offset reads back from its first
    pixel) and 3 eval images of 8x8 (`xe`) and of the crop's 6x6 (`xs`); the spec's input is the crop's size."""
    rng = np.random.default_rng(0)
    x = (np.arange(12 * 8 * 8 * channels, dtype=np.float32) / 8).reshape(12, 8, 8, channels)
    np.savez(tmp_path / "d.npz", x=x, y=rng.integers(0, 3, 12), xe=rng.uniform(0, 16, (3, 8, 8, 1)).astype(np.float32),
             xs=rng.uniform(0, 16, (3, 6, 6, 1)).astype(np.float32), ye=np.arange(3))
    path = tmp_path / "spec.yaml"
    text = spec_text(NPZ_CROP, NPZ_EVAL % eval_name, shape="[6, 6, 1]", batch=4)
    path.write_text(text.replace("seed: 3}", "seed: 3, metrics: [accuracy]}") + "checkpoint: {dir: run}\n")
    return path


def test_an_npz_train_set_larger_than_the_crop_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: an npz of 8x8 images, random_crop [6, 6], input [6, 6, 1] validated, then `train`
    refused it ('image' has shape [N, 8, 8, 1] but the spec declares [N, 6, 6, 1]); now it trains, each batch
    a 6x6 window of its images at one random offset (Keras' RandomCrop draws one per batch, docs/spec.md),
    and evaluates the 8x8 eval images through the crop's inference."""
    from specgen.cli import main

    path = npz_folder(tmp_path)
    assert main(["train", str(path), "--steps", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^eval at step 2: accuracy (0\.0000|0\.3333|0\.6667|1\.0000)\s", out, re.M), out


def test_npz_batches_are_random_windows(tmp_path: Path) -> None:
    from specgen.runtime import data

    path = npz_folder(tmp_path)
    loaded = load_spec_text(path.read_text(), str(path), path)
    source = data.read_stage(loaded, build_ir(loaded), "train")
    assert source is not None
    images = np.load(tmp_path / "d.npz")["x"]
    offsets = set()
    for features, _ in data.training_batches(source, 4, 3, 12).take(12):
        batch = features["image"].numpy()
        assert batch.shape == (4, 6, 6, 1)
        found = set()
        for window in batch:
            flat = round(float(window[0, 0, 0]) * 8)  # the source pixel the window starts at
            example, top, left = flat // 64, flat % 64 // 8, flat % 8
            np.testing.assert_array_equal(window, images[example, top:top + 6, left:left + 6])
            found.add((top, left))
        assert len(found) == 1  # one offset per batch
        offsets |= found
    # 12 batches over the 9 possible offsets: one offset every time has probability 9 * (1/9)^12, about 3e-11
    assert len(offsets) > 1, offsets


@pytest.mark.parametrize("name", ["xe", "xs"])
def test_npz_eval_images_reach_the_model_as_an_images_source_gives_them(tmp_path: Path, name: str) -> None:
    """Eval images at the training size get Keras' inference of the crop (for a square image the whole image
    resized, bilinear), as an `images` eval source's do; those at the crop's size pass unchanged."""
    from specgen.runtime import data

    path = npz_folder(tmp_path, name)
    loaded = load_spec_text(path.read_text(), str(path), path)
    source = data.read_stage(loaded, build_ir(loaded), "eval")
    assert source is not None
    got = [f["image"].numpy() for f, _ in source.dataset]
    for image, pixel in zip(np.load(tmp_path / "d.npz")[name], got, strict=True):
        np.testing.assert_array_equal(pixel, image if name == "xs" else expected(image, 6, 6))


def test_npz_images_of_other_channels_are_refused(tmp_path: Path) -> None:
    from specgen.runtime import data

    path = npz_folder(tmp_path, channels=3)
    loaded = load_spec_text(path.read_text(), str(path), path)
    with pytest.raises(SpecError) as caught:
        data.read_stage(loaded, build_ir(loaded), "train")
    assert str(caught.value) == (
        f"{path}:12:41: error: data.train ({tmp_path / 'd.npz'}): 'image' has shape [N, 8, 8, 3]; expected images "
        "[N, height, width, 1] (any height and width of at least 1: data.train's random_crop makes them [6, 6])")
