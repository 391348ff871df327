"""Encoded images in TFRecord shards (`features: {image: {key, decode: image, size}}`): the same pixels the images
source gives for the same PNGs, a short train, one line per bad record, and skip_bad's skipping (said, exact count,
resumable). Shards are written at test time from the bundled digits; the broken records are made here."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from images_helpers import encoded, write_tree
from tfrecord_helpers import digits

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]
KEY, LABEL = "image/encoded", "image/class/label"  # TF Object Detection's keys, as in the example
IMAGE = "{key: image/encoded, decode: image, size: [%d, %d]}"
COUNT = 24  # digits written; 4 batches of 6


def pngs() -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The first COUNT digits as 8x8 grayscale PNGs (0-1 stored as 0-255, as examples/data/make_digits_folder.py)."""
    x, y = digits(COUNT)
    pixels = np.round(x[..., 0] * 255).astype(np.uint8)
    return [encoded(p, "PNG") for p in pixels], pixels, y


def record(image: bytes | None, label: int) -> bytes:
    import tensorflow as tf

    feature = {LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
    if image is not None:
        feature[KEY] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[image]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write(path: Path, records: list[bytes]) -> Path:
    import tensorflow as tf

    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for item in records:
            writer.write(item)
    return path


def spec_text(train: str, eval_: str | None = None, shape: str = "[8, 8, 1]", dtype: str = "float32") -> str:
    return f"""\
specgen: 1
name: recs
inputs: {{image: {{shape: {shape}, dtype: {dtype}}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten, input: image}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.0001}}}}
train: {{batch_size: 6, seed: 3, shuffle_buffer: 8}}
data:
  train: {train}
""" + (f"  eval: {eval_}\n" if eval_ else "")


def source(shards: str, size: tuple[int, int] = (8, 8), extra: str = "") -> str:
    return f"{{tfrecord: {shards}, features: {{image: {IMAGE % size}}}, labels: {{label: {LABEL}}}{extra}}}"


def read(folder: Path, text: str, stage: str = "train") -> object:
    from specgen.runtime import data

    path = folder / "spec.yaml"
    loaded = load_spec_text(text, str(path), path)
    found = data.read_stage(loaded, build_ir(loaded), stage)
    assert found is not None
    return found


def error(folder: Path, text: str) -> str:
    with pytest.raises(SpecError) as caught:
        read(folder, text)
    message = str(caught.value)
    assert message.count("\n") == 0, message  # one line
    return message.split(": ", 3)[3]  # after "spec.yaml:L:C: error: data.train (<path>)"


@pytest.fixture(scope="module")
def good() -> tuple[list[bytes], np.ndarray, np.ndarray]:
    return pngs()


def test_the_same_pixels_as_the_images_source(tmp_path: Path, good: tuple[list[bytes], np.ndarray, np.ndarray]) -> None:
    images, pixels, labels = good
    order = sorted(range(COUNT), key=lambda k: (int(labels[k]), k))  # the folder's order: class, then file name
    write_tree(tmp_path / "folder", {f"{labels[k]}/{k:03d}.png": images[k] for k in order})
    write(tmp_path / "s.tfrecord", [record(images[k], int(labels[k])) for k in order])
    size = (10, 7)  # neither 8 nor square: every image is resized, as the images source resizes it
    folder = f"{{images: folder, image_size: [{size[0]}, {size[1]}]}}"
    text = spec_text(source("s.tfrecord", size), source("s.tfrecord", size), shape=f"[{size[0]}, {size[1]}, 1]")
    ours = read(tmp_path, text, "eval")
    theirs = read(tmp_path, text.replace(f"  eval: {source('s.tfrecord', size)}", f"  eval: {folder}"), "eval")
    got = [(f["image"].numpy(), int(y["label"])) for f, y in ours.dataset]  # type: ignore[attr-defined]
    want = [(f["image"].numpy(), int(y["label"])) for f, y in theirs.dataset]  # type: ignore[attr-defined]
    present = sorted({int(y) for y in labels})  # the folder's class ids: positions among the classes present
    assert [y for _, y in got] == [present[y] for _, y in want] == [int(labels[k]) for k in order]
    for (image, _), (folder_image, _) in zip(got, want, strict=True):
        assert image.dtype == folder_image.dtype == np.float32 and image.shape == (10, 7, 1)
        assert image.tobytes() == folder_image.tobytes()  # the same decode and resize kernels on the same bytes
    raw = read(tmp_path, spec_text(source("s.tfrecord"), source("s.tfrecord"), dtype="uint8"), "eval")
    stored = np.stack([f["image"].numpy() for f, _ in raw.dataset])  # type: ignore[attr-defined]
    assert stored.dtype == np.uint8 and stored[..., 0].tobytes() == pixels[order].tobytes()  # raw pixels, unchanged


def test_a_short_train_skips_the_bad_records_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        good: tuple[list[bytes], np.ndarray, np.ndarray]) -> None:
    images, _, labels = good
    records = [record(images[k], int(labels[k])) for k in range(COUNT)]
    records[3] = record(images[3][:-30], 1)  # a PNG cut short: its header reads, its pixels do not
    records[9] = b"not a tf.train.Example"  # a whole frame whose content does not parse
    write(tmp_path / "shards" / "a-0.tfrecord", records[:12])
    write(tmp_path / "shards" / "a-1.tfrecord", [*records[12:], record(b"GIF89a no more", 2)])
    (tmp_path / "spec.yaml").write_text(spec_text(source("shards/a-*.tfrecord", extra=", skip_bad: true")))
    assert main(["train", str(tmp_path / "spec.yaml"), "--steps", "6"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("data.train: skipped 3 of 25 records that do not parse or whose image does not "
                                   "decode (skip_bad): shards/a-0.tfrecord record 3; shards/a-0.tfrecord record 9; "
                                   "shards/a-1.tfrecord record 12 (the first found: shard shards/a-0.tfrecord, "
                                   "record 9 does not parse: it is not a tf.train.Example)"), out
    # The count after skipping is the count training sees: 22 examples, 3 full batches of 6 an epoch.
    assert out.splitlines()[2] == "training recs: step 0 -> 6 (3 updates per epoch, 22 examples)", out
    loss = float(re.findall(r"step 6/6 .* loss (\S+)", out)[0])
    assert math.isfinite(loss), out


def test_skipped_records_leave_the_stream_and_resume_exactly(tmp_path: Path,
                                                             good: tuple[list[bytes], np.ndarray, np.ndarray]) -> None:
    import tensorflow as tf

    from specgen.runtime import data

    images, pixels, labels = good
    records = [record(images[k], int(labels[k])) for k in range(COUNT)]
    bad = {2, 7, 15}
    for k in bad:
        records[k] = record(b"this is not a PNG", 0)
    write(tmp_path / "s-0.tfrecord", records[:12])
    write(tmp_path / "s-1.tfrecord", records[12:])
    text = spec_text(source("s-*.tfrecord", extra=", skip_bad: true"), source("s-*.tfrecord", extra=", skip_bad: true"))
    evaluated = read(tmp_path, text, "eval")
    kept = [k for k in range(COUNT) if k not in bad]
    assert evaluated.examples == len(kept) == 21  # type: ignore[attr-defined]
    # One kept record of each shard in turn (cycle_length 4 > 2 shards; the skipped ones are left out inside each
    # shard's reader): 0, 12, 1, 13, 3, 14, ...
    first, second = [k for k in range(12) if k not in bad], [k for k in range(12, 24) if k not in bad]
    order = [k for pair in zip(first, second[:len(first)], strict=True) for k in pair] + second[len(first):]
    got = np.stack([f["image"].numpy() for f, _ in evaluated.dataset])  # type: ignore[attr-defined]
    assert got[..., 0].astype(np.uint8).tobytes() == pixels[order].tobytes()

    train = read(tmp_path, text, "train")

    def batches() -> object:
        return iter(data.training_batches(train, 6, 3, 8))  # type: ignore[arg-type]

    uninterrupted = batches()
    straight = [next(uninterrupted)[0]["image"].numpy().tobytes() for _ in range(9)]  # type: ignore[call-overload]
    stopped = batches()
    for _ in range(4):
        next(stopped)
    saved = tf.train.Checkpoint(data=stopped).write(str(tmp_path / "it" / "ckpt"))
    resumed = batches()
    tf.train.Checkpoint(data=resumed).read(saved).assert_consumed()
    # 9 batches of 6 cross the 21-example epoch (3 full batches a pass) on both sides of the save.
    assert [next(resumed)[0]["image"].numpy().tobytes() for _ in range(5)] == straight[4:]  # type: ignore[call-overload]


@pytest.mark.parametrize(("records", "extra", "message"), [
    ({5: record(b"these are my notes\n", 1)}, "",
     "record 5, key 'image/encoded' is not an image (JPEG, PNG, BMP or GIF expected)"),
    ({5: "cut"}, "", "record 5, key 'image/encoded' does not decode: "),
    ({1: record(None, 1)}, "", "cannot parse record 1: it has no key 'image/encoded'"),
    ({}, ", max_pixels: 50", "record 0, key 'image/encoded' is 8x8 (64 pixels), over the bound of 50 decoded pixels "
     "per image; raise max_pixels on the source if the image is trusted"),
    ({}, ", max_pixels: 50, skip_bad: true", "record 0, key 'image/encoded' is 8x8 (64 pixels), over the bound of 50 "
     "decoded pixels per image; raise max_pixels on the source if the image is trusted"),  # never skipped
], ids=["not-an-image", "truncated-png", "missing-key", "over-the-bound", "over-the-bound-skip-bad"])
def test_a_bad_record_is_one_line(tmp_path: Path, good: tuple[list[bytes], np.ndarray, np.ndarray],
                                  records: dict[int, object], extra: str, message: str) -> None:
    images, _, labels = good
    written = [record(images[k], int(labels[k])) for k in range(COUNT)]
    for k, item in records.items():
        written[k] = record(images[k][:-30], 1) if item == "cut" else item  # type: ignore[assignment]
    write(tmp_path / "shards" / "s-0.tfrecord", written)
    text = error(tmp_path, spec_text(source("shards/s-*.tfrecord", extra=extra)))
    assert text.startswith(f"shard shards/s-0.tfrecord, {message}"), text
    if message.endswith("decode: "):  # the rest is libpng's reason, then what to do
        assert text.endswith("; replace or drop the record (or set skip_bad: true on the source)"), text


def test_a_damaged_shard_is_not_skipped(tmp_path: Path, good: tuple[list[bytes], np.ndarray, np.ndarray]) -> None:
    images, _, labels = good
    shard = write(tmp_path / "s.tfrecord", [record(images[k], int(labels[k])) for k in range(COUNT)])
    shard.write_bytes(shard.read_bytes()[:-5])  # the last frame cut short, as a copy stopped early
    text = error(tmp_path, spec_text(source("s.tfrecord", extra=", skip_bad: true")))
    assert text.startswith("cannot read record 23 (at byte "), text
    assert text.endswith("; the file is damaged or not a TFRecord file"), text


@pytest.mark.parametrize(("feature", "position", "message"), [
    (IMAGE % (6, 8), "12:93", "input 'image' has shape [8, 8, 1]; an image feature with size [6, 8] feeds [6, 8, 1 or "
     "3] (channels: 1 grayscale, 3 RGB); make the input's shape and the size agree"),
    ("{key: image/encoded, decode: jpeg, size: [8, 8]}", "12:80", "decode: received 'jpeg', expected 'image'"),
    ("{key: image/encoded, size: [8, 8]}", "12:51", "image: a feature mapping is an encoded image and needs `decode: "
     "image`; received the keys key, size; a number-array feature is the key alone (x: some/key)"),
    ("{key: image/encoded, decode: image, size: [8]}", "12:93", "size: expected at least 2 item(s), received 1"),
    ("[image/encoded]", "12:51", "image: expected a feature key or {key: <feature key>, decode: image, size: "
     "[<height>, <width>]}, received [image/encoded] (a list)"),
])
def test_a_bad_image_feature_is_refused_at_its_position(tmp_path: Path, feature: str, position: str,
                                                        message: str) -> None:
    text = spec_text(f"{{tfrecord: s.tfrecord, features: {{image: {feature}}}, labels: {{label: {LABEL}}}}}")
    path = tmp_path / "spec.yaml"
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, str(path), path))
    assert str(caught.value) == f"{path}:{position}: error: {message}"


def test_validate_opens_no_data_file(tmp_path: Path, good: tuple[list[bytes], np.ndarray, np.ndarray]) -> None:
    images, _, labels = good
    write(tmp_path / "s.tfrecord", [record(images[k], int(labels[k])) for k in range(COUNT)])
    (tmp_path / "spec.yaml").write_text(spec_text(source("s.tfrecord", extra=", skip_bad: true")))
    # Every file Python opens is recorded through the audit hook (PEP 578) in a fresh process: TensorFlow, whose
    # C++ reader the hook would not see, must not be imported at all.
    script = ("import json, sys\nopened = []\nsys.addaudithook(lambda e, a: opened.append(str(a[0])) if e == 'open' "
              "else None)\nfrom specgen.cli import main\ncode = main(['validate', sys.argv[1]])\n"
              "print(json.dumps([code, 'tensorflow' in sys.modules, [p for p in opened if p.endswith('.tfrecord')]]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "spec.yaml")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert json.loads(done.stdout.splitlines()[-1]) == [0, False, []], done.stdout + done.stderr
