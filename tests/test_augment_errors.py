"""Bad augment lists are one positioned error line each: at validate (no data file opened) where the spec
says enough, else before the first step; soft labels reach the loss as the cross entropy of the mix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from images_helpers import spec_text

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

NPZ = "{npz: d.npz, features: {image: x}, labels: {label: y}, augment: %s}"


def refused(path: Path, text: str) -> str:
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, str(path), path))
    message = str(caught.value)
    assert message.count("\n") == 0, message
    return message


@pytest.mark.parametrize(("train", "eval_", "shape", "message"), [
    (NPZ % "[{random_flip: horizontal}]", NPZ % "[{random_flip: horizontal}]", "[4, 4, 1]",
     "spec.yaml:13:73: error: augmentation runs on training batches only; received data.eval.augment; expected it under "
     "data.train"),
    (NPZ % "[{random_contrast: 0.2}]", None, "[16]",
     "spec.yaml:12:74: error: augmentation needs exactly one image input ([height, width, channels]) among the features; "
     "received 0 (features: 'image' [16])"),
    ("{images: photos, image_size: [4, 4], augment: [{random_flip: vertical}, {random_crop: {size: [7, 4], pad: 1}}]}",
     None, "[7, 4, 1]",
     "spec.yaml:12:96: error: random_crop size [7, 4] is larger than the image: [4, 4] plus pad 1 on each side is [6, 6]; "
     "expected a size of at most [6, 6]"),
    ("{images: photos, image_size: [6, 6], augment: [{random_crop: {size: [4, 4]}}]}", None, "[6, 6, 1]",
     "spec.yaml:12:39: error: input 'image' has shape [6, 6, 1]; an images source with image_size [6, 6] and its augment "
     "(a crop to [4, 4]) feeds [4, 4, 1 or 3] (channels: 1 grayscale, 3 RGB)"),
    (NPZ % "[{random_rotation: 1.5}]", None, "[4, 4, 1]",
     "spec.yaml:12:93: error: random_rotation: received 1.5, expected a value <= 1.0"),
])
def test_validate_refuses(tmp_path: Path, train: str, eval_: str | None, shape: str, message: str) -> None:
    got = refused(tmp_path / "spec.yaml", spec_text(train, eval_, shape=shape))
    assert got.startswith(f"{tmp_path}/{message}"), got


def test_a_crop_larger_than_the_npz_images_stops_before_the_first_step(tmp_path: Path) -> None:
    from specgen.runtime import data

    np.savez(tmp_path / "d.npz", x=np.zeros((4, 4, 4, 1), np.float32), y=np.array([0, 1, 2, 0]))
    path = tmp_path / "spec.yaml"
    loaded = load_spec_text(spec_text(NPZ % "[{random_crop: {size: [5, 5]}}]", shape="[4, 4, 1]"), str(path), path)
    with pytest.raises(SpecError) as caught:
        data.read_stage(loaded, build_ir(loaded), "train")
    assert str(caught.value) == (
        f"{path}:12:89: error: data.train ({tmp_path / 'd.npz'}): random_crop size [5, 5] is larger than the image: "
        "[4, 4] plus pad 0 on each side is [4, 4]; expected a size of at most [4, 4] (the images in the file are [4, 4])")


def test_mixed_labels_take_the_soft_cross_entropy_and_argmax_accuracy() -> None:
    import tensorflow as tf

    from specgen.runtime.lib.losses import sparse_softmax_cross_entropy
    from specgen.runtime.lib.metrics import _predicted_and_true

    logits = tf.constant([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    soft = tf.constant([[0.75, 0.25, 0.0], [0.0, 0.4, 0.6]])
    want = -np.mean(np.sum(soft.numpy() * tf.nn.log_softmax(logits).numpy(), axis=-1))
    assert float(sparse_softmax_cross_entropy(soft, logits)) == pytest.approx(want, rel=1e-6)  # float32 sums
    predicted, true = _predicted_and_true("sparse", soft, logits)
    assert predicted.numpy().tolist() == [0, 1] and true.numpy().tolist() == [0, 2]
    hard = sparse_softmax_cross_entropy(tf.constant([0, 1]), logits)  # integer labels keep the sparse path
    assert float(hard) == pytest.approx(float(tf.reduce_mean(-tf.reduce_max(tf.nn.log_softmax(logits), -1))), rel=1e-6)


def test_a_crop_that_misses_the_input_size_stops_before_the_first_step(tmp_path: Path) -> None:
    from specgen.runtime import data

    np.savez(tmp_path / "d.npz", x=np.zeros((4, 4, 4, 1), np.float32), y=np.array([0, 1, 2, 0]))
    path = tmp_path / "spec.yaml"
    loaded = load_spec_text(spec_text(NPZ % "[{random_crop: {size: [3, 3], pad: 1}}]"), str(path), path)
    with pytest.raises(SpecError) as caught:
        data.read_stage(loaded, build_ir(loaded), "train")
    assert str(caught.value) == (
        f"{path}:12:74: error: data.train ({tmp_path / 'd.npz'}): the augmented images are [3, 3]; input 'image' is "
        "[4, 4]; expected a random_crop size equal to the input's")
