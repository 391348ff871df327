"""The training data's position in a checkpoint, and whether a resume restores it (Session's part: kept apart from
session.py so that each file stays readable on its own).

A checkpoint saves the data iterator's position, which fits only the data it was saved on: the data settings
(Session.data_settings: batch size, examples, seed, shuffle buffer), train.accumulate (it cuts each pass into
whole updates), under multi_worker the files each worker reads (runtime/placement/positions.py) and the training
files' bytes (a TFRecord shard's byte offsets, the examples in the shuffle
buffer). When one of them differs the position is not restored: the data starts a new pass, with a note that
says why.

The training files are hashed once a start, and only where that is needed (`TrainingFiles`): for the run's record
and each checkpoint's `train_files_sha256` where the checkpoint is kept (the chief), and for a resume's comparison
(every worker: each restores its own position). Never in the middle of training, where a worker hashing gigabytes
would hold up every other one at the next collective.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import tensorflow as tf

from specgen.kinds.features import accumulate
from specgen.runtime import provenance
from specgen.runtime.placement.positions import position_prefix, shares_changed
from specgen.spec.load import LoadedSpec


class Resuming(Protocol):
    """What a resume's data position reads of session.Session (a Protocol: session.py imports this module)."""

    iterator: Any  # the training batches' tf.data iterator, which restore() replaces by a new pass
    files: TrainingFiles
    folder: Path

    @property
    def begin(self) -> Any: ...  # session.Start: the checkpoint's meta.json

    @property
    def train_ir(self) -> Any: ...  # ir.training.TrainIR: its seed and accumulate

    @property
    def distribution(self) -> Any: ...  # runtime.placement's Distribution: positions, workers

    def data_settings(self) -> dict[str, Any]: ...

    def training_batches(self, seed: int) -> Iterator[Any]: ...


class TrainingFiles:
    """Each data file's size and sha256 (provenance.data_fingerprint), hashed at most once a start."""

    def __init__(self, loaded: LoadedSpec):
        self.loaded = loaded
        self._record: dict[str, Any] | None = None

    def fingerprint(self) -> dict[str, Any]:
        """For the record of the start (provenance.record), the resume's comparison and the digest below."""
        if self._record is None:
            self._record = provenance.data_fingerprint(self.loaded)
        return self._record

    def digest(self) -> str | None:
        """The training files' one digest (provenance.content_digest): a checkpoint's `train_files_sha256`."""
        return provenance.content_digest(self.fingerprint().get("train"))

    def changed(self, folder: Path, meta: dict[str, Any]) -> list[str]:
        """The training files when their bytes differ from those of the checkpoint (`meta`: its meta.json, whose
        `train_files_sha256` resume.py validated; provenance.data_change), named in the note."""
        saved = meta.get("train_files_sha256")
        what = provenance.data_change(folder, self.fingerprint(), saved if isinstance(saved, str) else None)
        return [] if what is None else [f"the training files: {what}"]


def restore(session: Resuming, path: Path, attempts: int) -> tuple[str, int]:
    """The data iterator's saved position (into `session.iterator`), or a new pass, with a note why, when what it
    depends on changed; and where the data's current pass began (meta.json `pass_start`, in attempted updates).
    `attempts`: the checkpoint's attempted updates.

    A pass's pipeline is shuffled with train.seed + its start (0 for the run's first pass), and a saved position is
    restored into a pipeline built with that seed: tf.data saves a shuffle's buffer and its count of draws, not
    its seed, so under another seed the batches after the position differ (by how many the prefetch had drawn when
    the checkpoint was saved, so not even the same ones twice: a resume inside a new pass went elsewhere)."""
    begin = session.begin
    saved, now = begin.meta.get("data"), session.data_settings()
    if isinstance(saved, dict):
        changed = [f"{k} {saved.get(k)} -> {v}" for k, v in now.items() if saved.get(k) != v]
    else:  # written before data settings were saved: find a batch-size change by reading one batch
        changed = [] if _position_fits(session, path) else ["batch_size"]
    changed += _accumulate_changed(begin.meta, accumulate.of(session.train_ir))
    changed += session.files.changed(session.folder, begin.meta)
    distribution = session.distribution
    # Other files than its positions were saved on (another split, shares against all the data either way;
    # positions.py): a new pass, as for any changed setting.
    moved = shares_changed(begin.meta, distribution.positions, distribution.workers, distribution.unsharded)
    changed += moved
    position = None if moved else position_prefix(path, begin.meta, distribution.positions, distribution.workers)
    if not changed and position is not None:
        start = int(begin.meta.get("pass_start", 0))  # an older checkpoint's: passes from step 0
        if start:
            session.iterator = iter(session.training_batches(session.train_ir.seed + start))
        try:
            tf.train.Checkpoint(iterator=session.iterator).read(str(position)).assert_consumed()
            return "", start
        except tf.errors.NotFoundError:  # an older specgen's pipeline: before data.py cut each pass, or rotated
            changed = ["the position was saved by an older specgen, whose passes were not cut into whole updates of "
                       "train.accumulate micro-batches or left the same rows out of every pass"]
    seed = session.train_ir.seed + attempts
    session.iterator = iter(session.training_batches(seed))
    step = int(begin.meta["step"])
    counted = "train.seed + step" if attempts == step else f"train.seed + its {attempts} attempted updates"
    return (f"the data settings changed since {path.name} ({', '.join(changed)}), so its saved data position "
            f"does not apply: the training data starts a new pass here, shuffled with seed {seed} ({counted})"), attempts


def _accumulate_changed(meta: dict[str, Any], now: int) -> list[str]:
    """train.accumulate cuts each pass (runtime/data.py): under another value the saved position would leave
    an update that reads two passes. Recorded in meta.json since passes were cut; unknown before."""
    saved = meta.get("accumulate")
    return [f"accumulate {saved} -> {now}"] if isinstance(saved, int) and saved != now else []


def _position_fits(session: Resuming, path: Path) -> bool:
    """Whether the saved position reads a batch under this run's pipeline (a checkpoint without data settings)."""
    probe = iter(session.training_batches(session.train_ir.seed))
    tf.train.Checkpoint(iterator=probe).read(str(path / "data")).assert_consumed()
    try:
        next(probe)
    except tf.errors.InvalidArgumentError:
        return False
    return True
