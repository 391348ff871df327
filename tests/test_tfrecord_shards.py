"""`tfrecord:` as a glob or a list of shards: every example streamed once per pass, counted exactly, and bad
shards named (with the record) before the first step, in one line at the spec's entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tfrecord_helpers import example, write_shards

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.runtime.sources.base import Source
from specgen.spec.load import load_spec_text

ROWS = 12
MODEL = """\
specgen: 1
name: shards
inputs: {x: {shape: [3]}}
outputs: {logits: out}
layers:
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: "*", kind: sgd, learning_rate: 0.1}}
"""
EVAL = """\
train: {{batch_size: 4}}
data:
  eval:
    tfrecord: {entry}
    features: {{x: x}}
    labels: {{label: y}}
"""
X = np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)
Y = np.arange(ROWS) % 2


def source(folder: Path, entry: str) -> Source:
    from specgen.runtime import data

    loaded = load_spec_text(MODEL + EVAL.format(entry=entry), str(folder / "s.yaml"), folder / "s.yaml")
    found = data.read_stage(loaded, build_ir(loaded), "eval")
    assert found is not None
    return found


def failure(folder: Path, entry: str) -> str:
    with pytest.raises(SpecError) as info:
        source(folder, entry)
    assert len(info.value.diagnostics) == 1 and "\n" not in str(info.value), str(info.value)
    return str(info.value)


def test_a_glob_streams_every_shard_interleaved(tmp_path: Path) -> None:
    write_shards(tmp_path / "d", X, Y, shards=3)
    found = source(tmp_path, "d/train-*.tfrecord")
    assert found.examples == ROWS and [p.name for p in found.files] == [f"train-0000{i}.tfrecord" for i in range(3)]
    rows = [int(f["x"].numpy()[0]) // 3 for f, _ in found.dataset]
    # Eval is not shuffled: cycle_length 4 >= 3 shards, one record of each in turn (shards hold rows 0-3, 4-7, 8-11).
    assert rows == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]


def test_a_list_names_files_and_globs_once_each_in_order(tmp_path: Path) -> None:
    write_shards(tmp_path, X, Y, shards=3)
    found = source(tmp_path, "[train-00002.tfrecord, 'train-*.tfrecord']")
    assert [p.name for p in found.files] == ["train-00002.tfrecord", "train-00000.tfrecord", "train-00001.tfrecord"]
    assert found.examples == ROWS


def test_a_glob_that_matches_nothing_is_a_positioned_error(tmp_path: Path) -> None:
    listed = f"[{tmp_path / 'a.tfrecord'}, {tmp_path / 'val-*.tfrecord'}]"  # a list is named as the list
    assert failure(tmp_path, "[a.tfrecord, 'val-*.tfrecord']") == (
        f"{tmp_path / 's.yaml'}:12:16: error: data.eval ({listed}): no such file: 'a.tfrecord'; expected a "
        ".tfrecord file relative to the spec's folder")
    (tmp_path / "a.tfrecord").write_bytes(b"")
    assert failure(tmp_path, "[a.tfrecord, 'val-*.tfrecord']") == (
        f"{tmp_path / 's.yaml'}:12:28: error: data.eval ({listed}): the glob 'val-*.tfrecord' matches no "
        "file; expected .tfrecord shards relative to the spec's folder")


def test_a_truncated_shard_is_named_with_its_record(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, X, Y, shards=3)
    paths[1].write_bytes(paths[1].read_bytes()[:-5])  # the 4th record of the middle shard loses its tail
    message = failure(tmp_path, "train-*.tfrecord")
    head = f"{tmp_path / 's.yaml'}:12:15: error: data.eval ({tmp_path / 'train-*.tfrecord'}): "
    # Found by the framing walk (runtime/sources/framing.py) before TensorFlow reads the shard: each record
    # is 37 bytes in a 53-byte frame, so the 4th starts at byte 159 and has 36 of its 41 bytes left.
    assert message == head + ("shard train-00001.tfrecord, cannot read record 3 (at byte 159): it declares 37 bytes, "
                              "but the file has 36 after its header, fewer than the record and its 4-byte checksum; "
                              "the file is damaged or not a TFRecord file"), message


def test_a_bad_value_and_a_missing_key_name_the_shard_and_record(tmp_path: Path) -> None:
    import tensorflow as tf

    paths = write_shards(tmp_path, X, Y, shards=2)
    with tf.io.TFRecordWriter(str(paths[1])) as writer:
        writer.write(example(X[0], 1))
        writer.write(example(X[1], 7))  # class 7 of a 2-class output
    assert failure(tmp_path, "train-*.tfrecord").endswith(
        "'label' is 7 at shard train-00001.tfrecord, record 1, key 'y', but output "
        "'logits' has 2 classes: values must be integers in [0, 2)")
    with tf.io.TFRecordWriter(str(paths[1])) as writer:
        writer.write(tf.train.Example().SerializeToString())  # no key at all
    assert failure(tmp_path, "train-*.tfrecord").endswith(
        "shard train-00001.tfrecord, cannot parse record 0: it has no key 'x'")


TRAIN = """\
train: {{batch_size: 4, seed: {seed}}}
data:
  train: {{tfrecord: d/train-*.tfrecord, features: {{x: x}}, labels: {{label: y}}, cycle_length: 1{cache}}}
"""


@pytest.mark.parametrize("cache", [", cache: memory", ", cache: tfcache"])
def test_a_cache_keeps_the_seeded_shard_order(tmp_path: Path, cache: str) -> None:
    """A cache saves the reading, never changes the run: its examples come in the seeded shard order of the same
    spec without one (the old code read cached shards in sorted order, so every batch differed). cycle_length 1
    reads one shard after another, so the rows show the order."""
    from specgen.runtime import data

    write_shards(tmp_path / "d", X, Y, shards=3)

    def rows(extra: str, seed: int) -> list[int]:
        loaded = load_spec_text(MODEL + TRAIN.format(seed=seed, cache=extra), str(tmp_path / "s.yaml"), tmp_path / "s.yaml")
        found = data.read_stage(loaded, build_ir(loaded), "train")
        assert found is not None
        return [int(f["x"].numpy()[0]) // 3 for f, _ in found.dataset]

    # Seeds found, not fixed: the order is the shuffle's op seed with TensorFlow's global seed, which a test run
    # earlier in this process may have set (a run sets it from train.seed); of 6 orders, a seed gives the sorted
    # one, or another seed's, 1 time in 6. `base` orders the 3 shards other than sorted (so a cache read in sorted
    # order fails), `seed` other than `base` (so a cache not keyed to the seed fails).
    base, plain = next((s, found) for s in range(3, 30) if (found := rows("", s)) != list(range(ROWS)))
    assert sorted(plain) == list(range(ROWS))
    assert rows(cache, base) == plain
    assert rows(cache, base) == plain  # a file cache read back (the second read finds it complete)
    seed, other = next((s, found) for s in range(30) if s != base and (found := rows("", s)) != plain)
    assert rows(cache, seed) == other  # another seed, another order: a file cache is keyed to it
    assert rows(cache, base) == plain  # and each seed keeps its own (a sweep over seeds shares the path)
    if "tfcache" in cache:
        families = sorted({p.name.split(".")[1] for p in tmp_path.glob("tfcache.*.index")})
        assert families == sorted([f"s{seed}", f"s{base}"])
