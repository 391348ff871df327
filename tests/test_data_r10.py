"""Data sources, checker round 10: files changed while training runs, resume after a shard was rewritten, an images
folder's own problems before its class count, CSV floats rounded once, and the smaller messages (F2-F6)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from images_helpers import encoded, pixels, write_tree
from tfrecord_helpers import digits, example, write_shards

from specgen.cli import main

IMAGES_SPEC = """\
specgen: 1
name: ri
inputs: {image: {shape: [4, 4, 1], dtype: float32}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.01}}
train: {batch_size: 4, seed: 2, shuffle_buffer: 4}
data: {train: {images: imgs, image_size: [4, 4]}}
checkpoint: {dir: run, every_steps: 3, keep: 2}
"""
RECORDS_SPEC = """\
specgen: 1
name: rt
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 4, seed: 5, shuffle_buffer: 2}
data:
  train: {tfrecord: SOURCE, features: {image: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 4, keep: 2}
"""
ADVICE = "training stopped; the newest checkpoint, {}, is whole: restore or fix the file, then continue with --resume"
CHANGED = "the data passed its checks before the first step, so a file changed while training ran"


@pytest.fixture(autouse=True)
def _keep_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def _images(root: Path, per_class: int = 4) -> None:
    write_tree(root, {f"{c}/{i}.png": encoded(pixels(10 * k + i, 4, 4), "PNG")
                      for k, c in enumerate("abc") for i in range(per_class)})


def _after_first_save(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """`change()` once, right after the run's first checkpoint: every later pass reads the data files again."""
    from specgen.runtime.commands import session

    save, done = session.Session.save, []

    def save_then_change(self: Any) -> Path:
        path: Path = save(self)
        if not done:
            change()
            done.append(True)
        return path

    monkeypatch.setattr(session.Session, "save", save_then_change)


def _failed(args: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """A run that stops with one error: its last two stderr lines, and no traceback."""
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines[-1] == "1 error found", err
    return lines[-2:]


def _newest(run: Path) -> str:
    """The newest checkpoint `latest` names, checked whole (its variables and meta.json are there)."""
    name = (run / "latest").read_text().strip()
    assert (run / name / "meta.json").is_file() and (run / name / "variables.index").is_file()
    return f"run/{name}"


# ---- F2: a data file changed or removed while training runs -------------------------------------------------------


def test_an_image_removed_while_training_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _images(tmp_path / "imgs")
    (tmp_path / "spec.yaml").write_text(IMAGES_SPEC)
    _after_first_save(monkeypatch, lambda: os.remove("imgs/b/2.png"))
    line, _ = _failed(["train", "spec.yaml", "--steps", "30", "--quiet"], capsys)
    # The checks run again and pass (11 images still make whole batches): TensorFlow's reason names the file.
    assert line == (f"spec.yaml: error: a data file could not be read during training (imgs/b/2.png: No such file or "
                    f"directory); {CHANGED}; {ADVICE.format(_newest(tmp_path / 'run'))}")


def test_an_image_rewritten_while_training_is_named_by_the_checks_run_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _images(tmp_path / "imgs")
    (tmp_path / "spec.yaml").write_text(IMAGES_SPEC)
    _after_first_save(monkeypatch, lambda: Path("imgs/b/2.png").write_bytes(b"not an image any more"))
    line, _ = _failed(["train", "spec.yaml", "--steps", "30", "--quiet"], capsys)
    assert line == ("spec.yaml:11:24: error: data.train (imgs): b/2.png is not an image (JPEG, PNG, BMP or GIF "
                    f"expected); {ADVICE.format(_newest(tmp_path / 'run'))}")


def test_a_shard_removed_while_training_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    x, y = digits(32)
    write_shards(tmp_path / "shards", x, y, shards=2)
    (tmp_path / "spec.yaml").write_text(RECORDS_SPEC.replace("SOURCE", "[shards/train-00000.tfrecord, "
                                                                       "shards/train-00001.tfrecord]"))
    _after_first_save(monkeypatch, lambda: os.rename("shards/train-00001.tfrecord", "moved.tfrecord"))
    line, _ = _failed(["train", "spec.yaml", "--steps", "40", "--quiet"], capsys)
    assert line == ("spec.yaml:12:51: error: data.train ([shards/train-00000.tfrecord, shards/train-00001.tfrecord]): "
                    "no such file: "
                    "'shards/train-00001.tfrecord'; expected a .tfrecord file relative to the spec's folder; "
                    f"{ADVICE.format(_newest(tmp_path / 'run'))}")


def test_a_shard_removed_from_a_glob_while_training_names_it_from_tensorflow(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = digits(32)
    write_shards(tmp_path / "shards", x, y, shards=2)
    (tmp_path / "spec.yaml").write_text(RECORDS_SPEC.replace("SOURCE", "shards/*.tfrecord"))
    _after_first_save(monkeypatch, lambda: os.rename("shards/train-00001.tfrecord", "moved.tfrecord"))
    line, _ = _failed(["train", "spec.yaml", "--steps", "40", "--quiet"], capsys)
    assert line == ("spec.yaml: error: a data file could not be read during training (shards/train-00001.tfrecord: "
                    f"No such file or directory); {CHANGED}; {ADVICE.format(_newest(tmp_path / 'run'))}")


def test_an_error_of_the_models_step_is_not_taken_for_the_datas(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    import tensorflow as tf

    from specgen.runtime.commands import session

    _images(tmp_path / "imgs")
    (tmp_path / "spec.yaml").write_text(IMAGES_SPEC)
    message = ("Graph execution error:\n\nMatrix size-incompatible: In[0]: [4,16], In[1]: [5,3]\n"
               "\t [[{{node while/body/_1/while/out/MatMul}}]] [Op:__inference_train_steps_481]")

    def broken(self: Any, count: int) -> Any:
        raise tf.errors.InvalidArgumentError(None, None, message)

    monkeypatch.setattr(session.Session, "updates", broken)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Matrix size-incompatible"):
        main(["train", "spec.yaml", "--steps", "3", "--quiet"])


@pytest.mark.parametrize(("kind", "message", "reason"), [
    ("NotFoundError", "Graph execution error:\n\nDetected at node ReadFile defined at (most recent call last):\n"
     "<stack traces unavailable>\nError in user-defined function passed to ParallelMapDatasetV2:7 transformation "
     "with iterator: Iterator::Root::Prefetch::ForeverRepeat[1]::BatchV2::Shuffle::ParallelMapV2: /x/imgs/b/7.png; "
     "No such file or directory\n\t [[{{node ReadFile}}]]\n\t [[while/body/_1/while/IteratorGetNext]] "
     "[Op:__inference_train_steps_481]", "/x/imgs/b/7.png: No such file or directory"),
    ("InvalidArgumentError", "Graph execution error:\n\nDetected at node decode_image/DecodeImage defined at (most "
     "recent call last):\n<stack traces unavailable>\nUnknown image file format. One of JPEG, PNG, GIF, BMP "
     "required.\n\t [[{{node decode_image/DecodeImage}}]]\n\t [[while/IteratorGetNext]]",
     "Unknown image file format. One of JPEG, PNG, GIF, BMP required."),
    ("DataLossError", "corrupted record at 79512 [Op:IteratorGetNext] name: ", "corrupted record at 79512"),
    ("PermissionDeniedError", "/x/t.tfrecord; Permission denied [Op:IteratorGetNext]",
     "/x/t.tfrecord: Permission denied"),
    ("OutOfRangeError", "Read less bytes than requested\n\t [[{{node MultiDeviceIteratorGetNextFromShard}}]]",
     "Read less bytes than requested"),
])
def test_errors_of_the_pipeline_are_told_from_where_they_come(kind: str, message: str, reason: str) -> None:
    import tensorflow as tf

    from specgen.runtime import data

    assert data.from_pipeline(getattr(tf.errors, kind)(None, None, message))
    assert data.pipeline_reason(message) == reason
    # The same kind from the model's step (its own node), or a kind no changed file raises, stays as it is.
    assert not data.from_pipeline(getattr(tf.errors, kind)(None, None, "boom\n\t [[{{node while/out/MatMul}}]]"))
    assert not data.from_pipeline(tf.errors.ResourceExhaustedError(None, None, "OOM [Op:IteratorGetNext]"))


# ---- F3: resume after a shard was rewritten with the same example count ------------------------------------------


def _rewrite(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """The same examples in another order, every third record longer: the same count, other byte offsets."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for k in range(len(x) - 1, -1, -1):
            record = tf.train.Example.FromString(example(x[k], int(y[k])))
            if k % 3 == 0:
                record.features.feature["note"].bytes_list.value.append(b"z" * 13)
            writer.write(record.SerializeToString())


def test_a_resume_after_a_shard_was_rewritten_starts_a_new_pass_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.spec.load import load_spec

    x, y = digits(32)
    (shard,) = write_shards(tmp_path / "shards", x, y, shards=1)
    (tmp_path / "spec.yaml").write_text(RECORDS_SPEC.replace("SOURCE", "shards/train-00000.tfrecord")
                                        .replace("keep: 2", "keep: 5"))
    assert main(["train", "spec.yaml", "--steps", "6", "--quiet"]) == 0  # stopped mid-pass: 6 of 8 updates
    old = json.loads(Path("run/provenance.json").read_text())["data"]["train"]["list"][0]["sha256"]
    _rewrite(shard, x, y)
    # A start that failed after recording the new file (as one did before): the checkpoint decides, not the record.
    from specgen.runtime import provenance

    provenance.record(tmp_path / "run", load_spec(tmp_path / "spec.yaml"), [], [], 6)
    recorded = Path("run/provenance.json").read_bytes()
    new = json.loads(recorded)["data"]["train"]["list"][0]["sha256"]
    capsys.readouterr()
    for _ in range(2):  # and again: the second resume is told the same
        assert main(["train", "spec.yaml", "--resume-from", "run/ckpt-00000006", "--steps", "4", "--quiet"]) == 0
        out = capsys.readouterr().out
        assert (f"note: the data settings changed since ckpt-00000006 (the training files: shards/train-00000.tfrecord "
                f"changed (sha256 {old[:12]} -> {new[:12]})), so its saved data position does not apply: the training "
                "data starts a new pass here, shuffled with seed 11 (train.seed + step)") in out.splitlines(), out
        assert "the training data differs" not in out  # said once, by the resume


def test_a_file_renamed_is_named_as_renamed(tmp_path: Path) -> None:
    from specgen.runtime import provenance

    _images(tmp_path / "imgs", per_class=2)
    before = {"train": provenance._files(tmp_path, "images", "imgs")}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "provenance.json").write_text(json.dumps({"data": before, "starts": [{"step": 0,
                                                                                            "data": before}]}))
    saved = provenance.content_digest(before["train"])
    os.rename("imgs/a/0.png", "imgs/a/zz.png")
    now = {"train": provenance._files(tmp_path, "images", "imgs")}
    assert provenance.data_change(tmp_path / "run", now, saved) == "imgs/a/0.png was renamed imgs/a/zz.png"
    os.rename("imgs/a/zz.png", "imgs/a/0.png")
    Path("imgs/c/1.png").write_bytes(Path("imgs/c/0.png").read_bytes())
    sha = [f["sha256"][:12] for f in before["train"]["list"]]
    assert provenance.data_change(tmp_path / "run", {"train": provenance._files(tmp_path, "images", "imgs")},
                                  saved) == f"imgs/c/1.png changed (sha256 {sha[5]} -> {sha[4]})"
    os.remove("imgs/b/0.png")
    assert provenance.data_change(tmp_path / "run", {"train": provenance._files(tmp_path, "images", "imgs")},
                                  saved) == f"imgs/c/1.png changed (sha256 {sha[5]} -> {sha[4]}) (2 files differ)"
    assert provenance.data_change(tmp_path / "run", before, saved) is None


# ---- F4: an images folder's own problems before its class count --------------------------------------------------


@pytest.mark.parametrize(("make", "why"), [
    (lambda: os.mkdir("imgs/d"), "class folder 'd' holds no images (files ending in .bmp, .gif, .jpeg, .jpg, .png); "
                                 "add images or remove the folder"),
    (lambda: os.symlink("/usr/share", "imgs/d"), "d is a symbolic link to /usr/share, outside the folder; an images "
     "source reads only what lies inside its folder (copy what the link points to into the folder, or remove the "
     "link)"),
])
def test_a_class_folder_is_named_for_its_own_problem_before_the_class_count(
        tmp_path: Path, make: Any, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    _images(tmp_path / "imgs")
    make()
    (tmp_path / "spec.yaml").write_text(IMAGES_SPEC)
    assert _failed(["data", "spec.yaml"], capsys)[0] == f"spec.yaml:11:24: error: data.train (imgs): {why}"


def test_images_beside_the_class_folders_are_said_to_be_left_out(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _images(tmp_path / "imgs")
    Path("imgs/stray.png").write_bytes(Path("imgs/a/0.png").read_bytes())
    (tmp_path / "spec.yaml").write_text(IMAGES_SPEC)
    assert main(["data", "spec.yaml"]) == 0
    assert ("data.train: ignored 1 entry that is not an image file: stray.png (beside the class folders, in none)"
            in capsys.readouterr().out.splitlines())


# ---- F5: CSV floats rounded once, as TensorFlow's CSV reader -----------------------------------------------------


def test_csv_floats_round_once_as_tensorflows_reader(tmp_path: Path) -> None:
    import tensorflow as tf

    from specgen.pipeline import build
    from specgen.runtime.data import read_stage
    from specgen.spec.load import load_spec

    cells = ["1.0000000596046447753906250001",  # just above the midpoint of 1 and 1 + 2**-23: float64 lands on it
             "1.0000000596046447753906249999",  # just below
             "1.000000059604644775390625",  # the midpoint itself: ties to even
             "-3.0000001788139343261718750001", "0.1", "16777217.0000000000000001", "1e-45", "7.00000041723251342773437501"]
    rows = "".join(f"{c},{c},{c},0\n" for c in cells)
    (tmp_path / "f.csv").write_text("a,b,c,y\n" + rows)
    (tmp_path / "spec.yaml").write_text(RECORDS_SPEC.replace("{shape: [8, 8, 1]}", "{shape: [3]}")
                                        .replace("units: 10", "units: 3")
                                        .replace("{tfrecord: SOURCE, features: {image: x}, labels: {label: y}}",
                                                 "{csv: f.csv, features: {image: [a, b, c]}, labels: {label: y}}"))
    loaded = load_spec(tmp_path / "spec.yaml")
    source = read_stage(loaded, build(loaded).ir, "train")
    assert source is not None
    got = np.stack([f["image"].numpy()[0] for f, _ in source.dataset])
    defaults: list[Any] = [tf.constant([], tf.float32)] * 3 + [tf.constant([], tf.int32)]
    want = np.stack([tf.io.decode_csv(f"{c},{c},{c},0", defaults)[0].numpy() for c in cells])
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    assert got[0] == np.float32(1 + 2**-23) and got[1] == got[2] == np.float32(1)  # the twice-rounded value was 1.0


# ---- F6: the smaller messages ------------------------------------------------------------------------------------


def _records(path: Path, records: list[bytes]) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


def test_a_bytes_list_read_as_floats_is_not_told_to_declare_an_integer_dtype(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tensorflow as tf

    x, y = digits(8)
    records = [example(x[k], int(y[k])) for k in range(8)]
    bad = tf.train.Example.FromString(records[3])
    bad.features.feature["x"].Clear()
    bad.features.feature["x"].bytes_list.value.append(b"png bytes")
    records[3] = bad.SerializeToString()
    _records(tmp_path / "t.tfrecord", records)
    (tmp_path / "spec.yaml").write_text(RECORDS_SPEC.replace("SOURCE", "t.tfrecord"))
    assert _failed(["data", "spec.yaml"], capsys)[0] == (
        "spec.yaml:12:21: error: data.train (t.tfrecord): cannot parse record 3: key 'x' holds a bytes_list, and the "
        "spec reads it as a float_list: write the key as a float_list (tf.train.FloatList), or, if it holds an encoded "
        "image, read it as one ({key: <key>, decode: image, size: [<height>, <width>]})")


def test_the_first_bad_record_is_named_first_whatever_check_finds_it(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    x, y = digits(12)
    records = [example(x[k], int(y[k])) for k in range(12)]
    x[5, 0, 0, 0] = np.nan  # record 5: a value no input takes (found after parsing)
    records[5] = example(x[5], int(y[5]))
    records[9] = b"not an Example"  # record 9: does not parse (found first, before this fix)
    _records(tmp_path / "t.tfrecord", records)
    (tmp_path / "spec.yaml").write_text(RECORDS_SPEC.replace("SOURCE", "t.tfrecord"))
    assert _failed(["data", "spec.yaml"], capsys)[0] == (
        "spec.yaml:12:51: error: data.train (t.tfrecord): 'image' is NaN at record 5, key 'x' (element [0, 0, 0]); "
        "features and labels must be finite numbers (fill in or drop those rows)")
