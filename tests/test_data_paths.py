"""What a data path names, and what a record holds, for the tfrecord, csv and npz sources (issue 28, defect 9):
a FIFO, a device and a folder are refused by what they are (never opened as a file: a FIFO would block,
/dev/zero never end); a file name that is not UTF-8 reads (TensorFlow takes the bytes) and prints escaped; a
record that is not a tf.train.Example, even one whose bytes are not text, is one line, or skipped and counted
with `skip_bad`. Through the real CLI (`specgen data`), in process."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tfrecord_helpers import digits, example

from specgen.cli import main

SPEC = """\
specgen: 1
name: paths
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 4, seed: 5, shuffle_buffer: 8}
data:
  train: SOURCE
"""
SOURCES = {
    "tfrecord": "{tfrecord: PATH, features: {image: x}, labels: {label: y}}",
    "csv": "{csv: PATH, features: {image: [" + ", ".join(f"p{i}" for i in range(64)) + "]}, labels: {label: y}}",
    "npz": "{npz: PATH, features: {image: x}, labels: {label: y}}",
}
NOT_UTF8 = os.fsdecode(b"caf\xe9")  # Latin-1 'café': a name Python holds with a lone surrogate


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging if a FIFO is opened (the open would wait for a writer that never comes)."""
    def expired(*_: Any) -> None:
        raise AssertionError(f"blocked for {seconds} s: a FIFO was opened")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_data(folder: Path, source: str, capsys: pytest.CaptureFixture[str],
             spec: str = "spec.yaml") -> tuple[int, str, str]:
    """`specgen data` run in `folder` on `spec` (relative to it) holding `source`: exit code, stdout, stderr."""
    (folder / spec).write_text(SPEC.replace("SOURCE", source))
    os.chdir(folder)
    with deadline(60):
        code = main(["data", spec])
    out, err = capsys.readouterr()
    return code, out, err


def write_records(path: Path, records: list[bytes]) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(os.fsencode(path)) as writer:
        for record in records:
            writer.write(record)


@pytest.fixture(autouse=True)
def _keep_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(os.getcwd())  # run_data changes it; this puts it back


@pytest.mark.parametrize("kind", ["tfrecord", "csv", "npz"])
@pytest.mark.parametrize("what", ["fifo", "device", "folder"])
def test_a_path_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path: Path, kind: str, what: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path, described = {"fifo": ("pipe", "a FIFO (named pipe)"), "device": ("/dev/zero", "a character device"),
                       "folder": ("sub", "a directory")}[what]
    if what == "fifo":
        os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    code, out, err = run_data(tmp_path, SOURCES[kind].replace("PATH", path), capsys)
    column = 21 if kind == "tfrecord" else 16
    message = (f"'{path}' is {described}, not a regular file; expected a .tfrecord file" if kind == "tfrecord" else
               f"the path is {described}, not a regular file; expected a .{kind} file")
    assert (code, out, err) == (1, "", f"spec.yaml:12:{column}: error: data.train ({path}): {message}\n"
                                       "1 error found\n")


def test_a_glob_that_matches_a_fifo_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not left out in silence: a glob's match that is not a regular file is named."""
    x, y = digits(8)
    write_records(tmp_path / "a.tfrecord", [example(x[k], int(y[k])) for k in range(8)])
    os.mkfifo(tmp_path / "b.tfrecord")
    code, _, err = run_data(tmp_path, SOURCES["tfrecord"].replace("PATH", "'*.tfrecord'"), capsys)
    assert (code, err) == (1, "spec.yaml:12:21: error: data.train (*.tfrecord): the glob '*.tfrecord' matches "
                              "b.tfrecord, which is a FIFO (named pipe), not a regular file; expected .tfrecord "
                              "shards (narrow the glob)\n1 error found\n")


def test_a_shard_named_in_no_encoding_streams_and_skips_what_is_not_an_example(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard whose name is not UTF-8 (TensorFlow once raised ValueError converting it) holding records that are
    not tf.train.Examples, one of them bytes that are not text (TensorFlow's message quoting them once raised
    UnicodeDecodeError): with skip_bad both are skipped, counted and named, and the rest streamed."""
    x, y = digits(10)
    records = [example(x[k], int(y[k])) for k in range(10)]
    records[3], records[7] = b"not a tf.train.Example", bytes(range(256))
    write_records(tmp_path / f"{NOT_UTF8}.tfrecord", records)
    code, out, err = run_data(tmp_path, SOURCES["tfrecord"].replace("PATH", "'*.tfrecord'").replace(
        "}}", "}, skip_bad: true}"), capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("data.train: skipped 2 of 10 records that do not parse or whose image does not decode "
                        r"(skip_bad): caf\udce9.tfrecord record 3; caf\udce9.tfrecord record 7 "
                        r"(the first found: shard caf\udce9.tfrecord, record 3 does not parse: it is not a "
                        "tf.train.Example)")
    assert r"files     1: caf\udce9.tfrecord" in lines
    assert "examples  8" in lines
    counts = np.bincount(np.delete(y, [3, 7]), minlength=10)  # the labels streamed: every kept record, once
    assert "classes   10 of label 'label': " + ", ".join(f"{i}: {c}" for i, c in enumerate(counts)) in lines


def test_a_record_that_is_not_an_example_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = digits(6)
    records = [example(x[k], int(y[k])) for k in range(6)]
    records[4] = b"\xff\xfe" + bytes(200)
    write_records(tmp_path / "s.tfrecord", records)
    code, _, err = run_data(tmp_path, SOURCES["tfrecord"].replace("PATH", "s.tfrecord"), capsys)
    assert (code, err) == (1, "spec.yaml:12:21: error: data.train (s.tfrecord): cannot parse record 4: it is not a "
                              "tf.train.Example\n1 error found\n")


def test_a_shard_of_bad_records_only_is_skipped_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every record of a read chunk bad (a whole shard of them, beside a good one): the chunk's kept records were an
    empty list, which TensorFlow took for float indices (a traceback); now all three are skipped and counted."""
    x, y = digits(10)
    write_records(tmp_path / "r-0.tfrecord", [example(x[k], int(y[k])) for k in range(10)])
    write_records(tmp_path / "r-1.tfrecord", [b"not an Example %d" % k for k in range(3)])
    code, out, err = run_data(tmp_path, SOURCES["tfrecord"].replace("PATH", "'r-*.tfrecord'").replace(
        "}}", "}, skip_bad: true}"), capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("data.train: skipped 3 of 13 records that do not parse or whose image does not decode "
                        "(skip_bad): r-1.tfrecord record 0; r-1.tfrecord record 1; r-1.tfrecord record 2 (the first "
                        "found: shard r-1.tfrecord, record 0 does not parse: it is not a tf.train.Example)")
    assert "examples  10" in lines


def _feature(values: list[Any]) -> Any:
    import tensorflow as tf

    if values and isinstance(values[0], int):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


@pytest.mark.parametrize(("x", "y", "why"), [
    ([3] * 64, [1], "key 'x' holds an int64_list, and the spec reads it as a float_list: write the key as a "
                    "float_list (tf.train.FloatList)"),
    ([0.5] * 64, [1.0], "key 'y' holds a float_list, and the spec reads it as an int64_list: label 'label' holds "
                        "class ids for loss sparse_softmax_cross_entropy, read as integers only: write the key as an "
                        "int64_list (tf.train.Int64List)"),
    ([0.5] * 63, [1], "key 'x' holds 63 value(s), and the spec reads 64 (shape [8, 8, 1])"),
    (None, [1], "it has no key 'x'"),
])
def test_a_key_the_spec_reads_otherwise_is_named_with_the_fix(tmp_path: Path, x: list[Any] | None, y: list[Any],
                                                              why: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Read from the record itself (its tf.train.Example), not TensorFlow's message: which key, what it holds, what
    the spec reads, what to change. With skip_bad the first skipped record's reason is said with the count."""
    import tensorflow as tf

    a, b = digits(8)
    good = [example(a[k], int(b[k])) for k in range(8)]
    feature = {"y": _feature(y), **({} if x is None else {"x": _feature(x)})}
    bad = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
    write_records(tmp_path / "s.tfrecord", [*good[:2], bad, *good[2:]])
    code, out, err = run_data(tmp_path, SOURCES["tfrecord"].replace("PATH", "s.tfrecord"), capsys)
    assert (code, out, err) == (1, "", f"spec.yaml:12:21: error: data.train (s.tfrecord): cannot parse record 2: "
                                       f"{why}\n1 error found\n")
    code, out, err = run_data(tmp_path, SOURCES["tfrecord"].replace("PATH", "s.tfrecord").replace(
        "}}", "}, skip_bad: true}"), capsys)
    assert code == 0, err
    assert out.splitlines()[0] == ("data.train: skipped 1 of 9 records that do not parse or whose image does not "
                                   f"decode (skip_bad): s.tfrecord record 2 (the first found: record 2 does not parse: "
                                   f"{why})")


@pytest.mark.parametrize("kind", ["csv", "npz"])
def test_a_folder_named_in_no_encoding_reads(tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = digits(8)
    folder = tmp_path / NOT_UTF8
    folder.mkdir()
    if kind == "npz":
        np.savez(folder / "d.npz", x=x, y=y)
    else:
        rows = [",".join([*(f"p{i}" for i in range(64)), "y"])]
        rows += [",".join([*(f"{v:g}" for v in x[k].reshape(-1)), str(y[k])]) for k in range(8)]
        (folder / "d.csv").write_text("\n".join(rows) + "\n")
    code, out, err = run_data(tmp_path, SOURCES[kind].replace("PATH", f"d.{kind}"), capsys, f"{NOT_UTF8}/spec.yaml")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == r"paths (caf\udce9/spec.yaml): data.train"
    assert rf"files     1: caf\udce9/d.{kind}" in lines and "examples  8" in lines
