"""`specgen data`: the pipeline as training runs it (files, examples, class counts, batches), and one line for a
stage the spec lacks or a glob that matches nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tfrecord_helpers import digits, write_shards

from specgen.cli import main

SPEC = """\
specgen: 1
name: stream_mlp
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 16, seed: 5, shuffle_buffer: 32}
data:
  train: {tfrecord: "shards/train-*.tfrecord", features: {image: x}, labels: {label: y}}
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    x, y = digits(40)
    write_shards(folder / "shards", x, y, shards=2)
    (folder / "spec.yaml").write_text(SPEC)
    return folder / "spec.yaml"


def test_the_training_pipeline_is_printed_with_class_counts(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = np.bincount(digits(40)[1], minlength=10)
    assert main(["data", str(spec)]) == 0
    shards = spec.parent / "shards"
    assert capsys.readouterr().out == f"""\
stream_mlp ({spec}): data.train

source    tfrecord {shards}/train-*.tfrecord: features image <- x; labels label <- y
files     2: {shards}/train-00000.tfrecord, {shards}/train-00001.tfrecord
examples  40
classes   10 of label 'label': {", ".join(f"{i}: {c}" for i, c in enumerate(counts))}
tfrecord  streamed, up to 4 shard(s) read at once (cycle_length), cache none
augment   none
batches   16 examples, full batches only, shuffled (buffer 32, seed 5): 2 a pass; the 8 examples left out of a pass \
rotate from pass to pass (buffer 32 < 40 examples), so every example is trained on over the passes
          image [16, 8, 8, 1] float32
          label [16] int64
"""


def test_a_missing_stage_and_an_empty_glob_are_one_line(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", str(spec), "--stage", "eval"]) == 1
    assert capsys.readouterr().err == (f"{spec}: error: the spec has no data.eval section; `specgen data` shows a "
                                       "declared stage (--stage train or eval)\n1 error found\n")
    other = spec.parent / "other.yaml"
    other.write_text(SPEC.replace("shards/train-*", "shards/val-*"))
    assert main(["data", str(other)]) == 1
    assert capsys.readouterr().err == (
        f"{other}:12:21: error: data.train ({spec.parent}/shards/val-*.tfrecord): the glob 'shards/val-*.tfrecord' "
        "matches no file; expected .tfrecord shards relative to the spec's folder\n1 error found\n")


def test_accumulation_shows_the_updates_a_pass_is_cut_into(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """40 examples in batches of 8 are 5 micro-batches; accumulate 2 cuts them into 2 updates and leaves 1 out of
    the pass (runtime/data.py's cut, which training runs): the line says so instead of a bare batch count."""
    other = spec.parent / "accumulate.yaml"
    other.write_text(SPEC.replace("train: {batch_size: 16,", "train: {batch_size: 8, accumulate: 2,"))
    assert main(["data", str(other)]) == 0
    out = capsys.readouterr().out
    assert ("batches   8 examples, full batches only, shuffled (buffer 32, seed 5): 5 a pass, 2 updates of 2 "
            "(train.accumulate; 1 left out of the pass); the 8 examples left out of a pass rotate from pass to pass "
            "(buffer 32 < 40 examples), so every example is trained on over the passes\n") in out
