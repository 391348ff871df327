"""The images source gives the pixels and class ids Keras' image_dataset_from_directory gives for the same folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from images_helpers import encoded, pixels, spec_text, write_tree

from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SIZE = (6, 5)  # neither the images' sizes nor their aspect ratios: every image is resized, up or down


def folder(root: Path) -> Path:
    """Two classes in all four formats, RGB, of different sizes (Keras decodes GIF and BMP to RGB only)."""
    files = {}
    for k, (fmt, ext) in enumerate([("PNG", "png"), ("JPEG", "jpg"), ("BMP", "bmp"), ("GIF", "gif")]):
        files[f"cat/{k}.{ext}"] = encoded(pixels(k, 7 + k, 11 - k, 3), fmt)
        files[f"dog/{k}.{ext}"] = encoded(pixels(10 + k, 3 + k, 4, 3), fmt)
    return write_tree(root / "photos", files)


def test_same_pixels_and_classes_as_keras(tmp_path: Path) -> None:
    import keras

    from specgen.runtime import data

    photos = folder(tmp_path)
    path = tmp_path / "spec.yaml"
    source = f"{{images: photos, image_size: [{SIZE[0]}, {SIZE[1]}]}}"
    loaded = load_spec_text(spec_text(source, eval_=source, shape=f"[{SIZE[0]}, {SIZE[1]}, 3]"), str(path), path)
    ours = data.read_stage(loaded, build_ir(loaded), "eval")  # eval: in file order, as Keras without shuffle
    assert ours is not None and ours.examples == 8
    theirs = keras.utils.image_dataset_from_directory(photos, image_size=SIZE, batch_size=None, shuffle=False,
                                                      verbose=False)
    got = [(f["image"].numpy(), int(labels["label"])) for f, labels in ours.dataset]
    want = [(image.numpy(), int(label)) for image, label in theirs]
    assert [label for _, label in got] == [label for _, label in want] == [0, 0, 0, 0, 1, 1, 1, 1]
    for (image, _), (keras_image, _) in zip(got, want, strict=True):
        # Exact: the same TensorFlow decode and bilinear resize kernels run on the same bytes in one process.
        assert image.dtype == keras_image.dtype == np.float32
        np.testing.assert_array_equal(image, keras_image)
