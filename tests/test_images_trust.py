"""An image folder is confined and bounded (issue 28): animated GIFs count every frame against max_pixels, links
out of the folder are refused, pipes and devices are never opened, and any file name prints escaped and reaches
TensorFlow unmangled. Each case goes through the real CLI (`specgen data`; `specgen train` where it matters),
with the exact lines."""

from __future__ import annotations

import io
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from images_helpers import encoded, gif, pixels, spec_text, write_tree

from specgen.cli import main
from specgen.paths import shown
from specgen.runtime.sources.decode import MAX_BLOCKS, OverBound, check_header

GOOD = {f"{c}/{i}.png": encoded(pixels(10 * k + i, 5, 6), "PNG") for k, c in enumerate("abc") for i in range(2)}
IRREGULAR = "an image must be a regular file (replace it with the image, or remove it)"
OUTSIDE = ("outside the folder; an images source reads only what lies inside its folder (copy what the link points "
           "to into the folder, or remove the link)")
ANIMATED = ("over the bound of {bound} decoded pixels per image: TensorFlow's decoder reads every frame before it "
            "keeps the first (the one used); keep its first frame only, or raise max_pixels on the source if the "
            "image is trusted")


@pytest.fixture(autouse=True)
def never_blocks() -> Iterator[None]:
    """A FIFO opened for reading blocks until a writer comes: a regression must fail here, not hang CI."""
    def late(*_: object) -> None:
        raise TimeoutError("the images source blocked (on a named pipe?)")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def folder(tmp_path: Path, files: dict[str, bytes], source: str = "{images: photos, image_size: [4, 4]}") -> Path:
    """The spec, beside `photos/` holding `files`; returns the spec's path."""
    write_tree(tmp_path / "photos", files)
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(source))
    return spec


def refused(spec: Path, capsys: pytest.CaptureFixture[str], command: str = "data", out: str = "") -> str:
    """The one message `specgen <command>` prints (after `data.train (<folder>): `), exit 1, `out` on stdout."""
    assert main([command, str(spec)]) == 1
    captured = capsys.readouterr()
    prefix = f"{spec}:12:19: error: data.train ({spec.parent / 'photos'}): "
    assert captured.err.startswith(prefix) and captured.err.endswith("\n1 error found\n"), captured.err
    assert captured.out == out
    message = captured.err[len(prefix):-len("\n1 error found\n")]
    assert "\n" not in message
    return message


def summary(spec: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    """`specgen data`'s lines before the report (what the source said), and the report's classes row."""
    assert main(["data", str(spec)]) == 0
    out = capsys.readouterr().out.splitlines()
    said = out[:out.index(f"folders ({spec}): data.train")]
    return said, next(line for line in out if line.startswith("classes"))


# -- animated GIFs: every frame counts ------------------------------------------------------------------------


def test_an_animated_gif_counts_every_frame(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 12 frames of 6x5: each frame fits max_pixels 100, the 360 pixels TensorFlow's decoder reads do not.
    spec = folder(tmp_path, {**GOOD, "c/anim.gif": gif([(6, 5)] * 12)},
                  "{images: photos, image_size: [4, 4], max_pixels: 100, skip_bad: true}")
    assert refused(spec, capsys) == ("c/anim.gif is an animated GIF of 12 frames up to 6x5 (360 pixels in all), "
                                     + ANIMATED.format(bound=100))


def test_an_animated_gif_within_the_bound_trains_on_its_first_frame(tmp_path: Path) -> None:
    from specgen.ir.resolve import build_ir
    from specgen.runtime import data
    from specgen.spec.load import load_spec

    # Class c is the GIF alone: frame k is filled with grey 7k, so the first frame is black.
    files = {**{k: v for k, v in GOOD.items() if not k.startswith("c/")}, "c/anim.gif": gif([(6, 5)] * 12)}
    spec = folder(tmp_path, files, "{images: photos, image_size: [4, 4], max_pixels: 360}")
    loaded = load_spec(spec)
    source = data.read_stage(loaded, build_ir(loaded), "train")
    assert source is not None and source.examples == 5
    images = [features["image"] for features, labels in source.dataset.as_numpy_iterator() if labels["label"] == 2]
    assert len(images) == 1 and not np.any(images[0])


def test_a_frame_larger_than_the_gif_header_counts_at_its_size(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # The header (and Pillow) say 4x4; TensorFlow decodes onto the largest frame's 40x30.
    wide = gif([(4, 4), (40, 30)], screen=(4, 4))
    spec = folder(tmp_path, {**GOOD, "b/wide.gif": wide}, "{images: photos, image_size: [4, 4], max_pixels: 1000}")
    assert refused(spec, capsys) == ("b/wide.gif is 40x30 (1,200 pixels), over the bound of 1,000 decoded pixels per "
                                     "image; raise max_pixels on the source if the image is trusted")


def test_a_gif_of_a_hundred_thousand_blocks_is_refused() -> None:
    # 200 KB that giflib would keep as 100,001 allocations (10 MB of them took its decoder 280 MB): the comment
    # extension, its 1-byte sub-blocks and the frame each count one.
    flood = gif([(4, 4)], comment_blocks=MAX_BLOCKS - 1)
    with pytest.raises(OverBound) as caught:
        check_header(io.BytesIO(flood), 40_000_000)
    assert str(caught.value) == (f"is a GIF of more than {MAX_BLOCKS:,} frames and extension blocks, which "
                                 "TensorFlow's decoder keeps in memory; keep its first frame only (the one used)")
    assert check_header(io.BytesIO(gif([(4, 4)], comment_blocks=MAX_BLOCKS - 2)), 16).blocks == MAX_BLOCKS


# -- links: confined to the folder ------------------------------------------------------------------------------


def outside(tmp_path: Path) -> Path:
    """A folder beside `photos/` holding two images: what a link out of the folder would read."""
    return write_tree(tmp_path / "elsewhere", {f"{i}.png": GOOD["c/0.png"] for i in range(2)})


def test_a_class_folder_linked_out_of_the_folder_is_refused_before_training(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder(tmp_path, {k: v for k, v in GOOD.items() if not k.startswith("c/")})
    (tmp_path / "photos" / "c").symlink_to(outside(tmp_path), target_is_directory=True)
    target = shown(os.path.realpath(tmp_path / "elsewhere"))
    assert refused(spec, capsys, "train") == f"c is a symbolic link to {target}, {OUTSIDE}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "photos", "spec.yaml"]  # no run folder


@pytest.mark.parametrize(("link", "points_to"), [
    ("a/x.png", "elsewhere/0.png"),  # a file
    ("b/more", "elsewhere"),  # a folder below a class folder
    ("c/deep.png", "photos/.hidden/0.png"),  # inside by its path, outside once the (unlisted) .hidden is resolved
])
def test_a_link_out_of_the_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str,
                                             points_to: str) -> None:
    spec = folder(tmp_path, GOOD)
    outside(tmp_path)
    (tmp_path / "photos/.hidden").symlink_to(tmp_path / "elsewhere")  # a dot-name: never listed, never read
    (tmp_path / "photos" / link).symlink_to(tmp_path / points_to)
    real = shown(os.path.realpath(tmp_path / points_to))
    assert real.endswith(points_to.replace("photos/.hidden", "elsewhere"))
    assert refused(spec, capsys) == f"{link} is a symbolic link to {real}, {OUTSIDE}"


def test_links_inside_the_folder_are_read_and_folder_links_named(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder(tmp_path, GOOD)
    (tmp_path / "photos/c/again.png").symlink_to("../a/0.png")
    (tmp_path / "photos/c/more").symlink_to("../a", target_is_directory=True)
    said, classes = summary(spec, capsys)
    assert said == ["data.train: ignored 1 entry that is not an image file: c/more (a link to a folder, not followed)"]
    assert classes == "classes   3 of label 'label': a: 2, b: 2, c: 3"


def test_a_broken_link_named_as_an_image_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder(tmp_path, GOOD)
    (tmp_path / "photos/b/gone.png").symlink_to("nothing.png")
    real = shown(os.path.realpath(tmp_path / "photos/b/nothing.png"))
    assert refused(spec, capsys) == f"b/gone.png is a symbolic link to {real}, which does not exist; {IRREGULAR}"


# -- pipes and devices: never opened ----------------------------------------------------------------------------


def test_a_named_pipe_is_refused_unopened_and_one_without_an_image_name_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder(tmp_path, GOOD)
    os.mkfifo(tmp_path / "photos/b/x.png")
    assert refused(spec, capsys) == f"b/x.png is a FIFO (named pipe), not a regular file; {IRREGULAR}"
    (tmp_path / "photos/b/x.png").unlink()
    os.mkfifo(tmp_path / "photos/b/pipe")
    assert summary(spec, capsys)[0] == ["data.train: ignored 1 entry that is not an image file: b/pipe"]


def test_a_device_is_never_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder(tmp_path, GOOD, "{images: /dev/zero, image_size: [4, 4]}")
    assert main(["data", str(spec)]) == 1
    assert capsys.readouterr().err == (f"{spec}:12:19: error: data.train (/dev/zero): the path is a character "
                                       "device, not a folder; expected a folder with one subfolder of images per "
                                       "class\n1 error found\n")
    spec = folder(tmp_path, GOOD)
    (tmp_path / "photos/a/zero.png").symlink_to("/dev/zero")
    assert refused(spec, capsys) == f"a/zero.png is a symbolic link to /dev/zero, {OUTSIDE}"
    (tmp_path / "photos/a/zero.png").unlink()
    try:
        os.mknod(tmp_path / "photos/a/zero.png", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("making a device needs CAP_MKNOD")
    assert refused(spec, capsys) == f"a/zero.png is a character device, not a regular file; {IRREGULAR}"


# -- names: printed escaped, handed to TensorFlow as bytes ------------------------------------------------------


def test_control_characters_and_bidi_overrides_in_names_print_escaped(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    title = "\x1b]0;pwned\x07"  # would set the terminal's title
    files = {**{k.replace("c/", f"c{title}/"): v for k, v in GOOD.items()}, f"a/{title}.txt": b"notes",
             "b/\u202egnp.png": b"not an image"}
    spec = folder(tmp_path, files, "{images: photos, image_size: [4, 4], skip_bad: true}")
    said, classes = summary(spec, capsys)
    assert said == ["data.train: ignored 1 entry that is not an image file: a/\\x1b]0;pwned\\x07.txt",
                    "data.train: skipped 1 of 7 images that do not decode (skip_bad): b/\\u202egnp.png"]
    assert classes == "classes   3 of label 'label': a: 2, b: 2, c\\x1b]0;pwned\\x07: 2"
    spec.write_text(spec_text("{images: photos, image_size: [4, 4]}"))
    assert refused(spec, capsys, out=said[0] + "\n") == ("b/\\u202egnp.png is not an image (JPEG, PNG, BMP or GIF "
                                                         "expected)")


def test_a_file_name_that_is_not_utf8_reads_and_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder(tmp_path, GOOD)
    name = os.fsdecode(b"\xff\xfe.png")  # bytes no encoding decodes: Python holds them as surrogates
    try:
        (tmp_path / "photos/a" / name).write_bytes(GOOD["b/1.png"])
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    assert summary(spec, capsys) == ([], "classes   3 of label 'label': a: 3, b: 2, c: 2")
    assert main(["train", str(spec), "--steps", "1"]) == 0
    assert "done: 1 updates" in capsys.readouterr().out
    (tmp_path / "photos/a" / name).write_bytes(b"not an image")
    assert refused(spec, capsys) == "a/\\udcff\\udcfe.png is not an image (JPEG, PNG, BMP or GIF expected)"
