"""File-level sharding under `multi_worker`: two workers on loopback each read their own 2 of 4 equal TFRecord
shards (batches of 8 of the global 16) and end where one process reading all 4 ends; each saves its own data
position into the checkpoint, and a checkpoint without every worker's position, or resumed with another worker
count, is refused in one line.

Why the weights agree (the same reasoning as tests/test_distributed.py): with equal shards, every shard open at
once (cycle_length 4 in one process, 2 per worker) and no record shuffle (`shuffle_buffer: 1`), worker w's n-th
batch is the records of the one-process global batch n that come from its shards, so each update sees the same
SET of examples; the all-reduced mean gradient then differs only in float32 summation order.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_distributed import ENV, SPEC, TOLERANCE, checkpoint_values, command, finish, workers
from tfrecord_helpers import digits, write_shards

from specgen.diagnostics import SpecError
from specgen.runtime.parity import max_abs_diff
from specgen.spec.load import load_spec

STEPS = 12  # 320 examples in batches of 16, 2 micro-batches an update: 10 updates an epoch, so the run crosses one
TRAIN = ('  train: {tfrecord: "shards/train-*.tfrecord", features: {image: x}, labels: {label: y}}\n')
SHARDED = (SPEC.replace("  seed: 3\n", "  seed: 3\n  shuffle_buffer: 1\n")
           .replace(next(line for line in SPEC.splitlines(True) if line.startswith("  train: {npz")), TRAIN)
           .replace(next(line for line in SPEC.splitlines(True) if line.startswith("  eval: {npz")), "")  # cost
           .replace("every_steps: 5", "every_steps: 6"))


def write_spec(folder: Path, count: int = 320, shards: int = 4, text: str = SHARDED) -> Path:
    x, y = digits(count)
    write_shards(folder / "shards", x, y, shards=shards)
    (folder / "spec.yaml").write_text(text)
    return folder / "spec.yaml"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One process and two workers, trained once for every test here."""
    one = write_spec(tmp_path_factory.mktemp("one"))
    reference = subprocess.Popen(command(one, "--steps", str(STEPS)), text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=ENV)
    two = write_spec(tmp_path_factory.mktemp("two"))
    results = finish([*workers(two, "--steps", str(STEPS)), reference])
    assert [code for code, _, _ in results] == [0, 0, 0], "\n\n".join(err[-1500:] for _, _, err in results)
    return {"one": checkpoint_values(one.parent / "run"), "two": two, "outputs": [out for _, out, _ in results[:2]]}


@pytest.mark.slow
def test_two_workers_read_disjoint_shards_and_match_one_process(runs: dict[str, object]) -> None:
    chief_out, out = runs["outputs"]  # type: ignore[misc]
    # Each worker names the shards it opens (every second of the seeded file order, from its index).
    exact = "batches of 8 of the global 16; each global batch holds the one-process examples\n"
    assert ("data.train: file-sharded: worker 0 of 2 reads 2 of 4 shards (train-00003.tfrecord, train-00001.tfrecord), "
            "160 examples, " + exact) in chief_out
    assert ("data.train: file-sharded: worker 1 of 2 reads 2 of 4 shards (train-00002.tfrecord, train-00000.tfrecord), "
            "160 examples, " + exact) in out
    run = runs["two"].parent / "run"  # type: ignore[attr-defined]
    newest = run / f"ckpt-{STEPS:08d}"
    assert sorted(p.name for p in newest.iterdir() if p.name.startswith("data")) == [
        "data-w0.data-00000-of-00001", "data-w0.index", "data-w1.data-00000-of-00001", "data-w1.index"]
    assert json.loads((newest / "meta.json").read_text())["data_workers"] == 2
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]  # the staged positions were moved in
    expected, actual = runs["one"], checkpoint_values(run)
    assert sorted(actual) == sorted(expected)  # type: ignore[call-overload]
    assert int(actual["global_step"]) == STEPS
    worst = max_abs_diff(expected, actual)  # type: ignore[arg-type]
    assert worst <= TOLERANCE, f"two file-sharded workers differ from one process by {worst}"


def test_a_checkpoint_without_every_workers_position_is_refused(runs: dict[str, object], tmp_path: Path) -> None:
    from specgen.runtime.commands.resume import verified_meta

    spec = runs["two"]
    folder = tmp_path / f"ckpt-{STEPS:08d}"
    shutil.copytree(spec.parent / "run" / folder.name, folder)  # type: ignore[attr-defined]
    for path in folder.glob("data-w1.*"):
        path.unlink()
    with pytest.raises(SpecError) as caught:
        verified_meta(folder, load_spec(spec))  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"{folder / 'data-w1.index'}: error: checkpoint {folder.name} is unreadable: the file is missing (the data "
        "iterator's position: without it a resumed run would not continue the data where it stopped). Nothing was "
        "changed; no intact checkpoint is beside it; start over with --fresh (it moves this run aside, deleting "
        "nothing)")


def test_a_malformed_worker_count_is_refused_at_its_key(runs: dict[str, object], tmp_path: Path) -> None:
    from specgen.runtime.commands.resume import verified_meta

    spec = runs["two"]
    folder = tmp_path / f"ckpt-{STEPS:08d}"
    shutil.copytree(spec.parent / "run" / folder.name, folder)  # type: ignore[attr-defined]
    text = (folder / "meta.json").read_text()
    (folder / "meta.json").write_text(text.replace('"data_workers": 2', '"data_workers": "two"'))
    line = next(i for i, row in enumerate(text.splitlines(), 1) if '"data_workers"' in row)
    with pytest.raises(SpecError) as caught:
        verified_meta(folder, load_spec(spec))  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"{folder / 'meta.json'}:{line}:3: error: checkpoint {folder.name} is unreadable: 'data_workers' is 'two'; "
        "expected the number of workers (2 or more) whose data positions it holds. Nothing was changed; no intact "
        "checkpoint is beside it; start over with --fresh (it moves this run aside, deleting nothing)")


def test_resuming_with_another_worker_count_is_refused(runs: dict[str, object]) -> None:
    from specgen.runtime.placement.positions import position_prefix

    folder = runs["two"].parent / "run" / f"ckpt-{STEPS:08d}"  # type: ignore[attr-defined]
    meta = json.loads((folder / "meta.json").read_text())
    with pytest.raises(SpecError) as caught:
        position_prefix(folder, meta, None, 1)
    assert str(caught.value) == (
        f"{folder / 'meta.json'}: error: checkpoint {folder.name} holds the data positions of 2 workers that read "
        "disjoint shards, but this run has 1 worker reading all the data: its data positions do not apply. To "
        "continue it, relaunch 2 workers with --resume; or start over with --fresh")



def rows(batches: object, count: int) -> list[set[bytes]]:
    """The first `count` batches, each as the set of its examples' bytes (an example's pixels and label)."""
    return [{x.tobytes() + y.tobytes() for x, y in zip(f["image"].numpy(), labels["label"].numpy(), strict=True)}
            for (f, labels), _ in zip(batches, range(count), strict=False)]  # type: ignore[call-overload]


@pytest.mark.parametrize("shards, count, buffer, note", [
    # 8 shards, 4 open at once: each worker reads 2 of its 4 at once, as one process reads 4 of 8 (in turn).
    (8, 320, 1, "file-sharded: worker {w} of 2 reads 4 of 8 shards ({files}), 160 examples, batches of 8 of the "
                "global 16; each global batch holds the one-process examples"),
    # 80, 81, 80, 81 records: balanced by count (runtime/sources/tfrecord.py's assign), 161 a worker. Shard counts
    # that do not divide among the workers: tests/test_data_r12.py (3 shards of 107 do not balance: read whole).
    (4, 322, 10_000, "file-sharded: worker {w} of 2 reads {mine} of 4 shards ({files}), {examples} examples, batches "
                     "of 8 of the global 16; deterministic for this worker count, not the one-process order (train."
                     "shuffle_buffer 10000 shuffles records within each worker; the shards hold different numbers "
                     "of records)"),
    (1, 320, 1, "each of the 2 workers reads all of train-*.tfrecord (1 shard(s) for 2 workers: fewer than one "
                "each) and keeps its replicas' slices of each global batch")],
    ids=["exact", "not the one-process order", "fallback"])
def test_worker_shares(tmp_path: Path, shards: int, count: int, buffer: int, note: str) -> None:
    """In one process, without training: each worker's share of the pipeline, its startup line, and (when exact)
    that worker batches n of both workers make up one-process global batch n, over two passes of the data."""
    from specgen.ir.resolve import build_ir
    from specgen.runtime import data

    text = SHARDED.replace("shuffle_buffer: 1", f"shuffle_buffer: {buffer}")
    loaded = load_spec(write_spec(tmp_path, count, shards, text))
    ir = build_ir(loaded)
    source = data.read_stage(loaded, ir, "train")
    assert source is not None
    shares = [data.for_worker(source, "train-*.tfrecord", w, 2, 16, buffer) for w in range(2)]
    for w, share in enumerate(shares):
        files = ", ".join(f.name for f in share.source.files)
        assert share.note == "data.train: " + note.format(w=w, files=files, mine=len(share.source.files),
                                                          examples=share.source.examples)
    if shards == 1:
        assert [(s.sharded, s.batch, s.source) for s in shares] == [(False, 16, source)] * 2
        return
    files = [set(s.source.files) for s in shares]
    assert not files[0] & files[1] and files[0] | files[1] == set(source.files)  # disjoint, every shard read
    assert sum(s.source.examples for s in shares) == source.examples == count
    if buffer == 1:
        passes = 2 * count // 16
        one = rows(data.training_batches(source, 16, 3, buffer), passes)
        mine = [rows(data.training_batches(s.source, s.batch, 3, buffer), passes) for s in shares]
        assert [a | b for a, b in zip(*mine, strict=True)] == one
