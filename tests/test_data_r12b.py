"""Round 12's review of the multi_worker shares (rt12 review findings 2, 3, 9, 10, 11), on the real pipeline:

2. A checkpoint records which shards each worker read (meta.json `data_shares`, placement/positions.py); a resume
   whose workers read other shards starts a new pass, naming it, where TensorFlow restored each worker's position
   into other files without a word. A checkpoint of an older specgen (no `data_shares`) on shards of different
   record counts was split in turn, not by count: a new pass too; on equal shards the split is the same, restored.
3. A checkpoint whose workers read shares, resumed where this specgen has every worker read all the data (the
   shares do not balance), starts a new pass naming why, where it was refused with advice that could not help;
   the startup line of that fallback says what the reading costs.
9. One rule (`data.rotates`) for whether the examples a pass leaves out rotate: the pipeline and `specgen data`.
10. A WorkerShare is made with every worker's share counts (no empty default).
11. A share's dataset (its file cache) is built only after the shares are found to stand.

The restores drive data_position.restore with each worker's real positions, written by tf.train.Checkpoint from the
pipelines an older split (or this one) builds; a real two-worker run is tests/test_distributed_shards.py's (slow).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_data_r12 import passes, read, write

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.spec.load import load_spec

tf = pytest.importorskip("tensorflow")

STEP = 5
CKPT = f"ckpt-{STEP:08d}"


def in_turn(counts: list[int], workers: int) -> list[list[int]]:
    """The split of an older specgen: every `workers`-th shard of the seeded order, whatever their counts."""
    return [list(range(len(counts)))[w::workers] for w in range(workers)]


def shares(spec: Path) -> tuple[Any, list[Any]]:
    """Both workers' WorkerData (batches of 2 of the global 4) and the TrainIR."""
    from specgen.runtime import data

    source, train = read(spec)
    return train, [data.for_worker(source, "t-*.tfrecord", w, 2, 4, 1) for w in range(2)]


def older(spec: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Both workers' data as an older specgen read it: the shards dealt out in turn, and no balance check."""
    from specgen.runtime import data
    from specgen.runtime.sources import tfrecord

    source, _ = read(spec)
    with monkeypatch.context() as patched:
        patched.setattr(tfrecord, "assign", in_turn)
        split = [source.split(w, 2) for w in range(2)]  # type: ignore[misc]
    updates = data.updates_per_pass(source.examples, 4)
    return [SimpleNamespace(source=replace(source, dataset=s.build(), examples=s.examples, files=s.files,
                                           pass_updates=updates), share=s) for s in split]


def batches(worker: Any, seed: int = 0) -> Any:
    from specgen.runtime import data

    return data.training_batches(worker.source, 2, seed, 1)


def save(folder: Path, workers: list[Any], meta: dict[str, Any]) -> Path:
    """A checkpoint folder holding each worker's position after STEP batches, and `meta` as its meta.json."""
    checkpoint = folder / CKPT
    checkpoint.mkdir(parents=True)
    for w, worker in enumerate(workers):
        iterator = iter(batches(worker))
        for _ in range(STEP):
            next(iterator)
        tf.train.Checkpoint(iterator=iterator).write(str(checkpoint / f"data-w{w}"))
    (checkpoint / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return checkpoint


SETTINGS = {"batch_size": 4, "examples": 81, "seed": 0, "shuffle_buffer": 1}


def meta(**extra: Any) -> dict[str, Any]:
    return {"step": STEP, "spec": "tiny", "data": SETTINGS, "accumulate": 1, "pass_start": 0, "data_workers": 2,
            **extra}


def resume(checkpoint: Path, train: Any, index: int, worker: Any | None, unsharded: str = "",
           workers: int = 2) -> tuple[str, int, Any]:
    """data_position.restore as worker `index` of a resumed run whose worker reads `worker` (None: all the data,
    `unsharded` saying why): the note, the pass start and the iterator it leaves."""
    from specgen.runtime.commands import data_position
    from specgen.runtime.placement.positions import Positions, share_digests

    positions = None if worker is None or worker.share is None else Positions(
        index, workers, checkpoint.parent, lambda: None, share_digests(worker.share), worker.share.equal)
    saved = json.loads((checkpoint / "meta.json").read_text())
    session = SimpleNamespace(
        iterator=iter(batches(worker)) if worker is not None else None, folder=checkpoint.parent,
        files=SimpleNamespace(changed=lambda folder, meta: []), begin=SimpleNamespace(meta=saved), train_ir=train,
        distribution=SimpleNamespace(positions=positions, workers=workers, unsharded=unsharded),
        data_settings=lambda: saved["data"],  # unchanged: the shares are what these tests change
        training_batches=lambda seed: iter(batches(worker, seed)) if worker is not None else iter(()))
    note, start = data_position.restore(session, checkpoint, STEP)  # type: ignore[arg-type]
    return note, start, session.iterator


def new_pass(why: str) -> str:
    return (f"the data settings changed since {CKPT} ({why}), so its saved data position does not apply: the "
            f"training data starts a new pass here, shuffled with seed {STEP} (train.seed + step)")


# --- 2: a position restored only into the shards it was saved on ------------------------------------------------

UNEQUAL = [21, 20, 20, 20]  # split in turn: 41 | 40; by count: also 41 | 40, but other shards (the reviewer's case)


def test_an_older_split_of_unequal_shards_starts_a_new_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker's position was saved on the shards an older specgen dealt out in turn: the same pipeline, so
    TensorFlow would restore it into this split's other files; both workers start a new pass, with one note."""
    spec = write(tmp_path, UNEQUAL)
    old = older(spec, monkeypatch)
    train, new = shares(spec)
    assert [w.source.files for w in old] != [w.source.files for w in new]
    assert [w.source.examples for w in old] == [w.source.examples for w in new] == [41, 40]
    checkpoint = save(tmp_path / "run", old, meta())
    for index in range(2):
        note, start, _ = resume(checkpoint, train, index, new[index])
        assert (note, start) == (new_pass(
            "which shards each worker reads: its positions were saved by an older specgen, which dealt shards of "
            "different record counts out in turn, where this one balances their counts"), STEP)


def test_recorded_shares_of_another_split_start_a_new_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.runtime.placement.positions import share_digests

    spec = write(tmp_path, UNEQUAL)
    old = older(spec, monkeypatch)
    train, new = shares(spec)
    checkpoint = save(tmp_path / "run", old, meta(data_shares=list(share_digests(old[0].share))))
    notes = {resume(checkpoint, train, index, new[index])[0] for index in range(2)}
    assert notes == {new_pass("which shards each worker reads: workers 0 and 1 read other shards than their "
                              "positions were saved on")}


def test_recorded_shares_of_this_split_resume_exactly(tmp_path: Path) -> None:
    from specgen.runtime.placement.positions import share_digests

    spec = write(tmp_path, UNEQUAL)
    train, new = shares(spec)
    digests = share_digests(new[0].share)
    assert digests == share_digests(new[1].share) and len(digests) == 2  # every worker records every worker's
    checkpoint = save(tmp_path / "run", new, meta(data_shares=list(digests)))
    for index, worker in enumerate(new):
        note, start, iterator = resume(checkpoint, train, index, worker)
        assert (note, start) == ("", 0)
        assert passes(iterator, 1, 30) == passes(batches(worker), 1, STEP + 30)[STEP:]


def test_an_older_split_of_equal_shards_is_this_split_and_resumes(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write(tmp_path, [20, 20, 20, 20])
    old = older(spec, monkeypatch)
    train, new = shares(spec)
    assert [w.source.files for w in old] == [w.source.files for w in new]
    checkpoint = save(tmp_path / "run", old, meta(data=SETTINGS | {"examples": 80}))
    resumed = [resume(checkpoint, train, index, new[index]) for index in range(2)]
    assert [(note, start) for note, start, _ in resumed] == [("", 0), ("", 0)]


# --- 3: shares that no longer stand: a new pass naming why -------------------------------------------------------

def test_a_sharded_checkpoint_resumed_where_every_worker_reads_all_starts_a_new_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """10, 13 and 7 records: an older specgen dealt them out in turn (17 | 13); this one has both workers read all."""
    spec = write(tmp_path, [10, 13, 7])
    old = older(spec, monkeypatch)
    train, new = shares(spec)
    assert [w.sharded for w in new] == [False, False]
    checkpoint = save(tmp_path / "run", old, meta(data=SETTINGS | {"examples": 30}))
    for index, worker in enumerate(new):
        note, start, _ = resume(checkpoint, train, index, worker, worker.why)
        assert (note, start) == (new_pass(
            "which shards each worker reads: its 2 workers read their own, this run's each read all the data (3 shards "
            "whose records do not balance among 2 workers: the balanced split's shares hold 13 to 17 examples, and "
            "each worker reads 14 a pass)"), STEP)


def test_another_worker_count_is_still_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write(tmp_path, [10, 13, 7])
    old = older(spec, monkeypatch)
    train, _ = shares(spec)
    checkpoint = save(tmp_path / "run", old, meta(data=SETTINGS | {"examples": 30}))
    with pytest.raises(SpecError) as caught:
        resume(checkpoint, train, 0, None, workers=1)
    assert str(caught.value) == (
        f"{checkpoint / 'meta.json'}: error: checkpoint {CKPT} holds the data positions of 2 workers that read "
        "disjoint shards, but this run has 1 worker reading all the data: its data positions do not apply. To "
        "continue it, relaunch 2 workers with --resume; or start over with --fresh")


# --- 2: data_shares is written, and checked as every meta.json key is --------------------------------------------

def test_a_sharded_checkpoint_records_every_workers_share(tmp_path: Path) -> None:
    from specgen.runtime.checkpoint import CheckpointFolder
    from specgen.runtime.placement.positions import Positions

    folder = CheckpointFolder(tmp_path, 1)
    folder.positions = Positions(0, 2, tmp_path, lambda: None, ("a" * 64, "b" * 64), False)
    folder._write(tmp_path / "ckpt", {"v": tf.Variable(1.0)}, None, {"step": 0})
    written = json.loads((tmp_path / "ckpt" / "meta.json").read_text())
    assert written == {"step": 0, "data_workers": 2, "data_shares": ["a" * 64, "b" * 64]}


@pytest.mark.parametrize("shares_value, workers, received, expected", [
    (["a" * 64], 2, "['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'] (list)", ": 2 of them"),
    (["a" * 64, "A" * 64], 2, "'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' (str)", ""),
    (None, 2, "None (NoneType)", ""),
    (["a" * 64, "b" * 64], None, "['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', "
                                 "'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'] (list)",
     ", only beside 'data_workers'"),
])
def test_a_malformed_data_shares_is_refused_at_its_key(tmp_path: Path, shares_value: Any, workers: int | None,
                                                       received: str, expected: str) -> None:
    from specgen.runtime.commands.resume import check_meta
    from specgen.runtime.integrity import key_position

    loaded = load_spec(write(tmp_path, [4, 4]))
    record: dict[str, Any] = {"step": 0, "spec": "tiny", "data_shares": shares_value}
    if workers is not None:
        record["data_workers"] = workers
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "meta.json").write_text(text)
    position = key_position(text, "data_shares")
    assert position is not None
    where = "data_shares.1" if "A" in received else "data_shares"
    with pytest.raises(SpecError) as caught:
        check_meta(tmp_path / "ckpt", record, loaded)
    assert str(caught.value) == (
        f"{tmp_path / 'ckpt' / 'meta.json'}:{position.line}:{position.col}: error: checkpoint ckpt has a malformed "
        f"meta.json: '{where}' is {received}; expected a list of one sha256 (64 lowercase hexadecimal digits) per "
        f"worker of 'data_workers', of the shards it reads{expected}, as specgen writes it. Resume from another "
        "checkpoint (--resume-from) or start over with --fresh")


# --- 3: the fallback's startup line says what reading everything costs -------------------------------------------

def test_equal_shards_not_a_multiple_of_the_workers_are_read_whole_at_the_stated_cost(tmp_path: Path) -> None:
    """5 equal shards over 2 workers: a share of 2 shards cannot give the half of the set a worker reads a pass (it
    would read records twice a pass, 1.5x as often as the other's): both workers read everything (the one-process
    run), and the line says that is twice a share's reading."""
    source, _ = read(write(tmp_path, [6] * 5, batch=4))
    from specgen.runtime import data

    note = data.for_worker(source, "t-*.tfrecord", 0, 2, 4, 1).note
    assert note == (
        "data.train: each of the 2 workers reads all of t-*.tfrecord (5 shards whose records do not balance among 2 "
        "workers: the balanced split's shares hold 12 to 18 examples, and each worker reads 14 a pass) and keeps its "
        "replicas' slices of each global batch, "
        "reading 2x the records of a share; shards of equal record counts, a multiple of 2 of them, are split")


# --- 11: a share's dataset is built (its cache filled) only when the shares stand ---------------------------------

CACHED = '"sh/t-*.tfrecord", cache: cache/train'


@pytest.mark.parametrize("counts, built", [([10, 13, 7], False), ([20, 20, 20, 20], True)])
def test_a_share_cache_is_filled_only_for_shares_that_stand(tmp_path: Path, counts: list[int], built: bool) -> None:
    from specgen.runtime import data

    (tmp_path / "cache").mkdir()
    source, _ = read(write(tmp_path, counts, source=CACHED))
    whole = sorted(p.name for p in (tmp_path / "cache").iterdir())  # the whole source's cache, read_stage's
    worker = data.for_worker(source, "t-*.tfrecord", 0, 2, 4, 1)
    assert worker.sharded is built
    added = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name not in whole)
    assert bool(added) is built and all(".w0-of-2." in name for name in added)


# --- 10: a share is made with every worker's counts ---------------------------------------------------------------

def test_a_worker_share_needs_every_workers_counts() -> None:
    from specgen.runtime.sources.base import WorkerShare

    with pytest.raises(TypeError, match="missing 3 required positional arguments: 'shares', 'layout', and 'build'"):
        WorkerShare(10, (), 2, 2, True)  # type: ignore[call-arg]


# --- 9: one rule for the rotation, read by the pipeline and by `specgen data` -------------------------------------

@pytest.mark.parametrize("counts, buffer, accumulate, rotates", [
    ([10, 13, 7], 1, 1, True),  # 2 left out, buffer 1 < 30
    ([10, 13, 7], 64, 1, False),  # the buffer holds the pass: it reshuffles
    ([8, 8, 8], 1, 1, False),  # 24 in batches of 4: nothing left out
    ([8, 8, 8], 1, 4, True),  # 6 batches, updates of 4: 2 batches (8 examples) left out
])
def test_one_rule_says_whether_a_pass_rotates(tmp_path: Path, capsys: pytest.CaptureFixture[str], counts: list[int],
                                               buffer: int, accumulate: int, rotates: bool) -> None:
    from specgen.runtime import data

    spec = write(tmp_path, counts, buffer=buffer, accumulate=accumulate)
    source, _ = read(spec)
    assert data.rotates(source, 4, accumulate, buffer) is rotates
    assert main(["data", str(spec)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("batches ")]
    assert len(said) == 1 and ("rotate from pass to pass" in said[0]) is rotates


# --- 2: a real two-worker resume ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_workers_record_their_shares_and_resume_other_shares_as_a_new_pass(tmp_path: Path) -> None:
    """Two workers on loopback, 4 equal shards: the checkpoint records both shares; resumed as written it goes on
    without a note; with worker 1's share recorded as another (as another split would), both start a new pass."""
    import shutil

    from test_distributed import finish, workers
    from test_distributed_shards import write_spec

    from specgen.runtime.placement.positions import share_digests

    spec = write_spec(tmp_path / "a")
    results = finish(workers(spec, "--steps", "6"))
    assert [code for code, _, _ in results] == [0, 0], "\n\n".join(err[-1500:] for _, _, err in results)
    checkpoint = spec.parent / "run" / "ckpt-00000006"
    recorded = json.loads((checkpoint / "meta.json").read_text())["data_shares"]
    _, new = shares_of(spec)
    assert recorded == list(share_digests(new[0].share))
    shutil.copytree(spec.parent, tmp_path / "b")
    tampered = tmp_path / "b" / "run" / "ckpt-00000006" / "meta.json"
    tampered.write_text(tampered.read_text().replace(recorded[1], recorded[0]))

    def resumed(folder: Path) -> list[str]:
        results = finish(workers(folder / "spec.yaml", "--resume", "--steps", "8"))
        assert [code for code, _, _ in results] == [0, 0], "\n\n".join(err[-1500:] for _, _, err in results)
        return [line for _, out, _ in results for line in out.splitlines() if line.startswith("note: the data")]

    assert resumed(spec.parent) == []
    assert resumed(tmp_path / "b") == [
        "note: the data settings changed since ckpt-00000006 (which shards each worker reads: worker 1 reads other "
        "shards than its position was saved on), so its saved data position does not apply: the training data starts "
        "a new pass here, shuffled with seed 9 (train.seed + step)"] * 2


def shares_of(spec: Path) -> tuple[Any, list[Any]]:
    """Both workers' WorkerData of tests/test_distributed_shards.py's spec (batches of 8 of the global 16)."""
    from specgen.ir.resolve import build_ir
    from specgen.runtime import data

    loaded = load_spec(spec)
    ir = build_ir(loaded)
    source = data.read_stage(loaded, ir, "train")
    assert source is not None and ir.training is not None and ir.training.train is not None
    return ir.training.train, [data.for_worker(source, "train-*.tfrecord", w, 2, 16, 1) for w in range(2)]
