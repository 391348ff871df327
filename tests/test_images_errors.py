"""Bad image folders: each is one error line naming the file, before the first step; skip_bad skips and says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from images_helpers import encoded, pixels, spec_text, write_tree

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SOURCE = "{images: photos, image_size: [4, 4]}"
GOOD = {f"{c}/{i}.png": encoded(pixels(10 * k + i, 5, 6), "PNG") for k, c in enumerate("abc") for i in range(2)}


def read(folder: Path, train: str = SOURCE, eval_: str | None = None, stage: str = "train") -> int:
    from specgen.runtime import data

    path = folder / "spec.yaml"
    loaded = load_spec_text(spec_text(train, eval_), str(path), path)
    source = data.read_stage(loaded, build_ir(loaded), stage)
    assert source is not None
    return source.examples


def error(folder: Path, files: dict[str, bytes], **kwargs: str) -> str:
    write_tree(folder / "photos", files)
    with pytest.raises(SpecError) as caught:
        read(folder, **kwargs)
    text = str(caught.value)
    assert text.count("\n") == 0, text  # one line
    return text


def truncated_jpeg(keep: int = -40) -> bytes:
    """A JPEG cut short: by default inside its scan data (the header reads, the pixels do not)."""
    whole = encoded(pixels(1, 16, 16, 3), "JPEG")
    return whole[:keep]


def test_the_good_folder_reads(tmp_path: Path) -> None:
    write_tree(tmp_path / "photos", GOOD)
    assert read(tmp_path) == 6


@pytest.mark.parametrize(("files", "message"), [
    ({**GOOD, "b/2.jpg": truncated_jpeg()},
     "b/2.jpg does not decode: jpeg::Uncompress failed. Invalid JPEG data or crop window.; replace or remove the "
     "file (or set skip_bad: true on the source)"),
    ({**GOOD, "b/3.jpg": truncated_jpeg(200)}, "b/3.jpg is damaged: its header does not read (Truncated File Read)"),
    ({**GOOD, "c/notes.png": b"these are my notes\n"}, "c/notes.png is not an image (JPEG, PNG, BMP or GIF expected)"),
    ({**GOOD, "a/big.png": encoded(np.zeros((4000, 10001), np.uint8), "PNG")},
     "a/big.png is 10001x4000 (40,004,000 pixels), over the bound of 40,000,000 decoded pixels per image; raise "
     "max_pixels on the source if the image is trusted"),
    ({**GOOD, "d/0.png": GOOD["a/0.png"]}, "4 classes (a, b, c, d) but output 'logits' has 3 classes; the output "
     "needs one unit per class"),
    ({**{k: v for k, v in GOOD.items() if not k.startswith("c/")}, "c/readme.txt": b"no images here"},
     "class folder 'c' holds no images (files ending in .bmp, .gif, .jpeg, .jpg, .png); add images or remove the "
     "folder"),
])
def test_bad_file_is_named(tmp_path: Path, files: dict[str, bytes], message: str) -> None:
    photos = tmp_path / "photos"
    assert error(tmp_path, files) == f"{tmp_path / 'spec.yaml'}:12:19: error: data.train ({photos}): {message}"


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        read(tmp_path)
    assert str(caught.value) == (f"{tmp_path / 'spec.yaml'}:12:19: error: data.train ({tmp_path / 'photos'}): no "
                                 "such folder; expected a folder with one subfolder of images per class, relative to "
                                 "the spec's folder")


def test_eval_class_that_train_lacks(tmp_path: Path) -> None:
    write_tree(tmp_path / "photos", GOOD)
    write_tree(tmp_path / "held", {"a/0.png": GOOD["a/0.png"], "zebra/0.png": GOOD["b/0.png"]})
    with pytest.raises(SpecError) as caught:
        read(tmp_path, eval_="{images: held, image_size: [4, 4]}", stage="eval")
    assert str(caught.value) == (f"{tmp_path / 'spec.yaml'}:13:18: error: data.eval ({tmp_path / 'held'}): class "
                                 "folder 'zebra' is not a class of data.train (a, b, c); eval classes must be train's "
                                 "(or list them in `classes`)")


def test_skip_bad_skips_undecodable_images_and_says_which(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = {"a/x.png": b"not a png", "b/y.jpg": truncated_jpeg(), "c/z.gif": b"GIF89a"}
    write_tree(tmp_path / "photos", {**GOOD, **bad})
    assert read(tmp_path, train="{images: photos, image_size: [4, 4], skip_bad: true}") == 6
    assert capsys.readouterr().out == ("data.train: skipped 3 of 9 images that do not decode (skip_bad): a/x.png, "
                                       "b/y.jpg, c/z.gif\n")


def test_train_stops_before_the_first_step_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path / "photos", {**GOOD, "c/notes.png": b"these are my notes\n"})
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(SOURCE))
    assert main(["train", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err == (f"{spec}:12:19: error: data.train ({tmp_path / 'photos'}): c/notes.png is not an image "
                   "(JPEG, PNG, BMP or GIF expected)\n1 error found\n")
    # Nothing written: `specgen train` reads and checks the data before its run folder's first write.
    assert [str(p.relative_to(tmp_path)) for p in sorted(tmp_path.rglob("*")) if "photos" not in p.parts] == [
        "spec.yaml"]
