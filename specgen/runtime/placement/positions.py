"""Data positions of a run whose workers read disjoint files (multi_worker, file-sharded data: runtime/data.py).

Each worker's iterator is its own, so a checkpoint holds one position per worker, `data-w{i}.*`, and its
meta.json says `"data_workers": W`. Each worker stages its position in `.ckpt-<step>.positions.tmp/` of the
run folder (the shared folder every worker resumes from); after a collective barrier the chief moves them into
its unpublished checkpoint folder, which it publishes by rename only when every worker's position is there.
A position belongs to the files its worker read: a checkpoint of per-worker positions resumes only with the worker
count that wrote it, and its meta.json's `"data_shares"` records which files each worker read (`share_digests`):
where this run's workers read other ones (another split, or every worker all the data), the data starts a new pass
(`shares_changed`); so does a checkpoint of one position of all the data resumed where the workers read shares.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.atomic import fsync_folder
from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.runtime.integrity import META
from specgen.runtime.sources.base import WorkerShare


@dataclass(frozen=True)
class Positions:
    """The data positions of a run whose workers read disjoint files: one per worker (`data-w{index}.*`)."""

    index: int  # this worker's (0: the chief, which publishes the checkpoint)
    workers: int
    run: Path  # the run folder every worker can write (the positions are staged there for the chief)
    barrier: Callable[[], None]  # returns once every worker has reached it (a collective)
    shares: tuple[str, ...]  # every worker's files (share_digests), worker 0 first: meta.json's `data_shares`
    equal: bool  # every shard holds the same number of records: any split specgen made gave each worker these files

    def stage(self, step: int) -> Path:
        return self.run / f".ckpt-{step:08d}.positions.tmp"  # a save's temporary: remove_temporaries clears it


def gather(positions: Positions, temp: Path, step: int, iterator: Any) -> None:
    """Every worker's data position into `temp` (the chief's) before it is published; each worker stages its
    own in the run folder first. A position missing after the barrier fails the save (one line): a checkpoint
    without every worker's position is never published (its unpublished folder is cleared at the next start)."""
    stage = positions.stage(step)
    stage.mkdir(parents=True, exist_ok=True)
    own = f"data-w{positions.index}"
    tf.train.Checkpoint(iterator=iterator).write(str(stage / own))
    # Only its own files: the other workers are writing theirs here at the same time (temporaries renamed away).
    fsync_files(stage, own + ".")
    positions.barrier()
    if positions.index != 0:
        return
    for worker in range(positions.workers):
        if not (stage / f"data-w{worker}.index").is_file():  # not published: the next save or start clears it
            raise SpecError([Diagnostic(shown(stage), None, f"worker {worker}'s data position is missing after "
                                        "every worker saved: under multi_worker with file-sharded data every "
                                        "worker writes its position into the run folder, which must be one "
                                        "folder shared by all of them")])
    for path in stage.iterdir():
        os.rename(path, temp / path.name)
    fsync_files(temp)
    shutil.rmtree(stage)


def share_digests(share: WorkerShare) -> tuple[str, ...]:
    """Each worker's files as a checkpoint's `data_shares` records them: a sha256 of their places in the source's
    file list, in the order the worker reads them. Places, not names: the same files named from another folder
    are the same share (their bytes are `train_files_sha256`'s part, data_position.py)."""
    return tuple(hashlib.sha256(f"{share.shards}:{','.join(map(str, places))}".encode()).hexdigest()
                 for places in share.layout)


def shares_changed(meta: dict[str, Any], positions: Positions | None, workers: int, unsharded: str) -> list[str]:
    """Why the saved data positions do not apply to the files this run's workers read, [] when they do (or a
    checkpoint of per-worker positions meets another worker count: position_prefix refuses that). `unsharded`: why
    this run's workers each read all the data, "" when they read shares. TensorFlow restores a position into other
    files without a word (the iterator's file index and byte offsets, applied to them), so a changed share starts a
    new pass instead, whichever way it changed."""
    saved = meta.get("data_workers")
    if saved is None:  # one position of all the data, the same for any worker count (each worker read all of it)
        return [] if positions is None else [
            f"which shards each worker reads: every worker read all the data when it was saved, and this run's "
            f"{positions.workers} workers read their own"]
    if saved != workers:
        return []
    if positions is None:
        return [f"which shards each worker reads: its {saved} workers read their own, this run's each read all the "
                f"data ({unsharded})"] if unsharded else []
    recorded = meta.get("data_shares")
    if recorded is None:  # an older specgen's: it dealt the shards out in turn, as `assign` does only for equal ones
        return [] if positions.equal else [
            "which shards each worker reads: its positions were saved by an older specgen, which dealt shards of "
            "different record counts out in turn, where this one balances their counts"]
    moved = [str(worker) for worker, (old, new) in enumerate(zip(recorded, positions.shares, strict=True))
             if old != new]
    if not moved:
        return []
    who = (f"worker {moved[0]} reads other shards than its position was" if len(moved) == 1 else
           f"workers {', '.join(moved[:-1])} and {moved[-1]} read other shards than their positions were")
    return [f"which shards each worker reads: {who} saved on"]


def position_prefix(folder: Path, meta: dict[str, Any], positions: Positions | None, workers: int) -> Path:
    """This worker's data position in a checkpoint (`workers`: this run's), once shares_changed found none changed
    (so a checkpoint of one position of all the data meets workers that each read all the data too). One line when
    the checkpoint holds the positions of another number of workers: a position belongs to the files its worker
    read, so no re-shard continues exactly."""
    saved = meta.get("data_workers")
    now = positions.workers if positions is not None else None
    if saved == now:
        return folder / ("data" if positions is None else f"data-w{positions.index}")
    here = (f"{now} workers that read disjoint shards" if now
            else f"{workers} worker{'s' if workers > 1 else ''} reading all the data")
    raise SpecError([Diagnostic(shown(folder / META), None, f"checkpoint {folder.name} holds the data positions of "
                                f"{saved} workers that read disjoint shards, but this run has {here}: its data "
                                f"positions do not apply. To continue it, relaunch {saved} workers with --resume; or "
                                "start over with --fresh")])


def fsync_files(folder: Path, prefix: str = "") -> None:
    """Every file of `folder` (whose name starts with `prefix`), then the folder: a rename must not publish bytes
    still in flight."""
    for path in folder.iterdir():
        if not path.name.startswith(prefix):
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_folder(folder)
