"""Round 12's data findings, each checked on the real pipeline (runtime/data.py, runtime/sources/):

- multi_worker file sharding deals shards out balancing their record counts (tfrecord.py's `assign`), cuts each
  worker's pass to the whole set's updates (so an epoch is one pass on every worker), states the over-sampling that
  remains, and reads everything on every worker when the shares do not balance (counted per pass, by unique ids);
- with a shuffle buffer smaller than the data the examples a pass leaves out rotate, so every example is trained on
  (counted per pass, by unique ids), exact on resume, and `specgen data` says so;
- a `tfrecord:` list is named as the list, not its first entry;
- a CSV column is named as its header spells it (`sepal length (cm)`), and what is refused says it is the header.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.spec.load import load_spec

tf = pytest.importorskip("tensorflow")

SPEC = """\
specgen: 1
name: tiny
inputs:
  x: {shape: [2]}
outputs:
  logits: out
layers:
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: sgd, learning_rate: 0.01}
train: {batch_size: BATCH, epochs: 1, seed: 0, shuffle_buffer: BUFFER, accumulate: ACCUMULATE}
data:
  train: {tfrecord: SOURCE, features: {x: x}, labels: {label: y}}
checkpoint: {dir: runs/tiny}
"""


def example(i: int) -> bytes:
    """Record `i`: x = [i, i % 7] (x[0] is its id), label i % 3."""
    feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i), float(i % 7)])),
               "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3]))}
    return bytes(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def write(folder: Path, counts: list[int], batch: int = 4, buffer: int = 1, accumulate: int = 1,
          source: str = '"sh/t-*.tfrecord"') -> Path:
    """Shards sh/t-<i>.tfrecord holding `counts[i]` records with ids counted on from shard to shard; the spec."""
    (folder / "sh").mkdir(parents=True, exist_ok=True)
    first = 0
    for i, count in enumerate(counts):
        with tf.io.TFRecordWriter(str(folder / "sh" / f"t-{i}.tfrecord")) as writer:
            for k in range(first, first + count):
                writer.write(example(k))
        first += count
    text = (SPEC.replace("BATCH", str(batch)).replace("BUFFER", str(buffer)).replace("ACCUMULATE", str(accumulate))
            .replace("SOURCE", source))
    (folder / "spec.yaml").write_text(text)
    return folder / "spec.yaml"


def read(spec: Path) -> tuple[Any, Any]:
    from specgen.ir.resolve import build_ir
    from specgen.runtime import data

    loaded = load_spec(spec)
    ir = build_ir(loaded)
    source = data.read_stage(loaded, ir, "train")
    assert source is not None and ir.training is not None and ir.training.train is not None
    return source, ir.training.train


def passes(batches: Any, per_pass: int, count: int) -> list[list[int]]:
    """The ids each of `count` passes reads, `per_pass` batches a pass."""
    iterator, read_ids = iter(batches), []
    for _ in range(count):
        ids: list[int] = []
        for _ in range(per_pass):
            features, _labels = next(iterator)
            ids += [int(v) for v in features["x"][:, 0].numpy()]
        read_ids.append(ids)
    return read_ids


# --- multi_worker: shards dealt out by record count -------------------------------------------------------------

def test_assign_balances_record_counts_and_keeps_every_wth_for_equal_shards() -> None:
    from specgen.runtime.sources.tfrecord import assign

    assert assign([10, 13, 7], 2) == [[1], [0, 2]]  # 13 | 10 + 7 (the old split: 10 + 7 | 13, every other one)
    assert assign([21, 20, 20, 20], 2) == [[0, 3], [1, 2]]
    assert assign([5] * 6, 3) == [[0, 3], [1, 4], [2, 5]]  # equal shards: every W-th, the one-process order's split
    assert assign([5, 0, 0], 2) == [[0], [1, 2]]  # an empty share: for_worker reads everything on every worker
    assert assign([3, 9, 9, 3], 2) == assign([3, 9, 9, 3], 2)  # pure: every worker, every resume, the same


def test_unbalanced_shards_are_read_whole_by_every_worker(tmp_path: Path) -> None:
    """The checker's 10, 13 and 7 records: the balanced split is 13 | 17, and a worker reads 14 a pass (7 updates of
    2), so worker 0 would read some records twice a pass: both workers read everything (exact, as one process)."""
    from specgen.runtime import data

    source, _ = read(write(tmp_path, [10, 13, 7]))
    shares = [data.for_worker(source, "t-*.tfrecord", w, 2, 4, 1) for w in range(2)]
    assert [(s.sharded, s.batch, s.source) for s in shares] == [(False, 4, source)] * 2
    assert {s.note for s in shares} == {
        "data.train: each of the 2 workers reads all of t-*.tfrecord (3 shards whose records do not balance among 2 "
        "workers: the balanced split's shares hold 13 to 17 examples, and each worker reads 14 a pass) and keeps its "
        "replicas' slices of each global batch, reading 2x the records of a share; shards of equal record counts, a "
        "multiple of 2 of them, are split"}


def test_shares_over_sampled_beyond_the_bound_are_read_whole(tmp_path: Path) -> None:
    """4 and 7 records, batches of 8: each share holds the 4 a worker reads a pass, but a record of the 4 would be
    trained on 1.75x as often as one of the 7: over MAX_OVERSAMPLING (1.10), so everything on every worker."""
    from specgen.runtime import data

    source, _ = read(write(tmp_path, [4, 7], batch=8))
    note = data.for_worker(source, "t-*.tfrecord", 1, 2, 8, 1).note
    assert note == ("data.train: each of the 2 workers reads all of t-*.tfrecord (2 shards whose records do not balance "
                    "among 2 workers: the balanced split's shares hold 4 to 7 examples, so a record of the smallest would "
                    "be trained on 1.75x as often as one of the largest (at most 1.10x)) and keeps its replicas' slices "
                    "of each global batch, reading 2x the records of a share; shards of equal record counts, a multiple "
                    "of 2 of them, are split")


def test_balanced_shares_read_the_whole_sets_pass_and_every_record(tmp_path: Path) -> None:
    """21, 20, 20 and 20 records (81; 20 updates of 4 a pass): shares of 41 and 40. Each worker's pass is cut to the
    whole set's 20 updates (40 records), so an epoch is one pass on each; worker 0's left-out record rotates, and over
    41 passes it reads every one of its 41; the note states the factor (41 / 40)."""
    from specgen.runtime import data

    source, train = read(write(tmp_path, [21, 20, 20, 20]))
    assert data.updates_per_pass(source.examples, 4) == 20
    shares = [data.for_worker(source, "t-*.tfrecord", w, 2, 4, train.shuffle_buffer) for w in range(2)]
    for w, share in enumerate(shares):
        files = ", ".join(f.name for f in share.source.files)
        assert share.note == (
            f"data.train: file-sharded: worker {w} of 2 reads 2 of 4 shards ({files}), {share.source.examples} "
            "examples (the shares hold 40 to 41: each worker's pass is the whole set's 20 updates, so a record of the "
            "smallest share is trained on 1.02x as often as one of the largest), batches of 2 of the global 4; "
            "deterministic for this worker count, not the one-process order (the shards hold different numbers of "
            "records)")
    assert sorted(s.source.examples for s in shares) == [40, 41]
    seen = []
    for share in shares:
        read_ids = passes(data.training_batches(share.source, 2, 0, 1), 20, 41)
        assert {len(ids) for ids in read_ids} == {40} and {len(set(ids)) for ids in read_ids} == {40}
        counts = Counter(i for ids in read_ids for i in ids)
        assert len(counts) == share.source.examples  # every record of the share, over the passes
        seen.append(set(counts))
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(range(81))


def test_shard_counts_that_do_not_divide_still_shard_when_they_balance(tmp_path: Path) -> None:
    from specgen.runtime import data

    source, _ = read(write(tmp_path, [20, 10, 10]))
    shares = [data.for_worker(source, "t-*.tfrecord", w, 2, 4, 1) for w in range(2)]
    assert [s.source.examples for s in shares] == [20, 20] and all(s.sharded for s in shares)
    assert shares[1].note == (
        f"data.train: file-sharded: worker 1 of 2 reads 2 of 3 shards "
        f"({', '.join(f.name for f in shares[1].source.files)}), 20 examples, batches of 2 of the global 4; "
        "deterministic for this worker count, not the one-process order (the shards hold different numbers of "
        "records; 3 shards do not divide among 2 workers; 3 shards read at once do not divide among 2 workers)")


def test_equal_shards_with_a_left_out_remainder_keep_the_one_process_batches(tmp_path: Path) -> None:
    """4 shards of 9 (36; batches of 8 leave 4 out of a pass, 2 of each worker's 18): the rotation is the same on
    one process and on each worker, so worker batches n of both workers make up one-process batch n, pass after
    pass, and the sharded line says the run is exact."""
    from specgen.runtime import data

    source, _ = read(write(tmp_path, [9, 9, 9, 9], batch=8))
    shares = [data.for_worker(source, "t-*.tfrecord", w, 2, 8, 1) for w in range(2)]
    assert all(s.note.endswith("; each global batch holds the one-process examples") for s in shares)
    one = passes(data.training_batches(source, 8, 0, 1), 1, 4 * 5)
    mine = [passes(data.training_batches(s.source, 4, 0, 1), 1, 4 * 5) for s in shares]
    assert [sorted(a + b) for a, b in zip(*mine, strict=True)] == [sorted(ids) for ids in one]
    assert {len({i for ids in one[p:p + 4] for i in ids}) for p in range(0, 20, 4)} == {32}  # a pass: 32 of 36
    assert {i for ids in one for i in ids} == set(range(36))  # over 5 passes: every one


# --- the examples a pass leaves out rotate ----------------------------------------------------------------------

@pytest.mark.parametrize("buffer, accumulate, read_a_pass", [(1, 1, 28), (2, 2, 24), (4, 1, 28)])
def test_a_small_buffer_leaves_other_examples_out_each_pass(tmp_path: Path, buffer: int, accumulate: int,
                                                             read_a_pass: int) -> None:
    """The checker's 30 records in 3 shards: with buffer 1, ids 21 and 22 were left out of all 20 passes (2, 2:
    five never read). Now each pass reads `read_a_pass` distinct ids and every id is read within 15 passes."""
    from specgen.runtime import data

    source, train = read(write(tmp_path, [10, 13, 7], buffer=buffer, accumulate=accumulate))
    per_pass = data.updates_per_pass(source.examples, 4, accumulate) * accumulate
    read_ids = passes(data.training_batches(source, 4, train.seed, buffer, accumulate), per_pass, 15)
    assert {len(ids) for ids in read_ids} == {read_a_pass} == {len(set(ids)) for ids in read_ids}
    assert {i for ids in read_ids for i in ids} == set(range(30))


def test_a_buffer_holding_the_pass_keeps_its_pipeline(tmp_path: Path) -> None:
    """Where the shuffle already moves every example (buffer >= examples), the pipeline is the one before: the
    same batches as a plain shuffle, batch and repeat (so the iterators saved from it still restore)."""
    from specgen.runtime import data

    source, _ = read(write(tmp_path, [10, 13, 7], buffer=64))
    plain = source.dataset.shuffle(30, seed=0, reshuffle_each_iteration=True).batch(4, drop_remainder=True).repeat()
    assert passes(data.training_batches(source, 4, 0, 64), 7, 3) == passes(plain, 7, 3)


def test_the_rotation_resumes_exactly(tmp_path: Path) -> None:
    """A saved iterator (enumerate's count and the shuffle's buffer) restored into a new pipeline continues with the
    same ids as one that never stopped, across pass ends."""
    from specgen.runtime import data

    source, _ = read(write(tmp_path, [10, 13, 7], buffer=2))
    straight = passes(data.training_batches(source, 4, 0, 2), 1, 40)
    first = iter(data.training_batches(source, 4, 0, 2))
    for _ in range(17):
        next(first)
    saved = tf.train.Checkpoint(iterator=first).write(str(tmp_path / "ckpt" / "data"))
    again = iter(data.training_batches(source, 4, 0, 2))
    tf.train.Checkpoint(iterator=again).read(saved).assert_consumed()
    assert passes(again, 1, 23) == straight[17:]


def test_specgen_data_says_the_left_out_examples_rotate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, [10, 13, 7])
    assert main(["data", str(tmp_path / "spec.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ("batches   4 examples, full batches only, shuffled (buffer 1, seed 0): 7 a pass; the 2 examples left out "
            "of a pass rotate from pass to pass (buffer 1 < 30 examples), so every example is trained on over the "
            "passes") in lines


# --- a tfrecord list is named as the list -----------------------------------------------------------------------

def test_a_list_is_named_as_the_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, [10, 13], source='["sh/t-0.tfrecord", "bad.tfrecord"]')
    with tf.io.TFRecordWriter(str(tmp_path / "bad.tfrecord")) as writer:
        writer.write(b"not an example")
    assert main(["data", str(spec)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{spec}:14:21: error: data.train ([{tmp_path}/sh/t-0.tfrecord, {tmp_path}/bad.tfrecord]): shard bad.tfrecord, "
        "cannot parse record 0: it is not a tf.train.Example")
    spec.write_text(spec.read_text().replace('"bad.tfrecord"', '"sh/t-1.tfrecord"'))
    assert main(["data", str(spec)]) == 0
    assert (f"source    tfrecord [{tmp_path}/sh/t-0.tfrecord, {tmp_path}/sh/t-1.tfrecord]: features x <- x; labels "
            "label <- y") in capsys.readouterr().out.splitlines()


def test_a_long_list_is_named_by_its_first_entries_and_a_count(tmp_path: Path) -> None:
    from specgen.ir.resolve import build_ir
    from specgen.runtime.sources.base import source_text

    listed = "[" + ", ".join(f"sh/t-{i}.tfrecord" for i in range(5)) + "]"
    loaded = load_spec(write(tmp_path, [4] * 5, source=listed))
    facts = build_ir(loaded).training.data["train"]  # type: ignore[union-attr]
    assert source_text(loaded, facts, lambda path: path.name) == "[t-0.tfrecord, t-1.tfrecord, t-2.tfrecord, ... (2 more)]"
    glob = load_spec(write(tmp_path / "g", [4]))
    assert source_text(glob, build_ir(glob).training.data["train"], lambda path: path.name) == "t-*.tfrecord"  # type: ignore[union-attr]


# --- CSV columns are named as the header spells them ------------------------------------------------------------

CSV_SPEC = SPEC.replace("  train: {tfrecord: SOURCE, features: {x: x}, labels: {label: y}}",
                        "  train: {csv: c.csv, features: {x: [a, COLUMN]}, labels: {label: y}}")


def csv_spec(folder: Path, column: str) -> Path:
    (folder / "c.csv").write_text("a,sepal length (cm),y\n" + "".join(f"{i},{i + 1},{i % 3}\n" for i in range(8)))
    text = CSV_SPEC.replace("BATCH", "4").replace("BUFFER", "8").replace("ACCUMULATE", "1").replace("COLUMN", column)
    (folder / "spec.yaml").write_text(text)
    return folder / "spec.yaml"


def test_a_csv_header_that_is_no_identifier_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = csv_spec(tmp_path, '"sepal length (cm)"')
    assert main(["data", str(spec)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "source    csv " + str(tmp_path / "c.csv") + ": features x <- [a, sepal length (cm)]; labels label <- y" in out
    source, _ = read(spec)
    assert [list(f["x"].numpy()) for f, _ in source.dataset.take(2)] == [[0.0, 1.0], [1.0, 2.0]]


@pytest.mark.parametrize("column, message", [
    ('"sepal\\tlength"', "x[1]: invalid CSV column name 'sepal\\tlength': a column is named as the file's header row "
                         "spells it, in printable text without control characters; rename the header column (in the "
                         "file and here)"),
    ('"  "', "x[1]: received '  ' (only spaces), expected a column name of the CSV's header row")])
def test_a_column_no_header_can_spell_is_refused_as_a_csv_column(tmp_path: Path, column: str, message: str) -> None:
    spec = csv_spec(tmp_path, column)
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    assert str(caught.value) == f"{spec}:14:41: error: {message}"
