"""What a `specgen train` run starts from, decided before the model is built (so a refusal costs no training).

In order: the run folder is locked for this process (run_lock.py: a second `specgen train` on it is refused at
once), it must be writable (checked with a probe file, nothing left behind, folder times set back); a new run
(unless `--fresh`, which moves an earlier run aside once the data is checked) refuses a folder that holds
checkpoints; a resumed run picks its checkpoint (the newest in save order, saying so when
`latest` names another), reads every byte of it back, checks meta.json against it and the
spec, and applies the `--set` overrides saved with it before this command's own. Nothing here writes:
`open_run_folder` makes the run's first writes (the folder, removing an interrupted save's files, rewriting
TensorFlow's state file an interrupted save left stale, the --fresh move) after the data, the restore sources
and the checkpoint's fit to the spec (resume_fit.py) have been read and checked, so bad input changes nothing.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from specgen.atomic import probe_writable
from specgen.diagnostics import Diagnostic, SpecError, describe, quoted
from specgen.ir.training import keys
from specgen.ir.training.build import run_folder
from specgen.kinds.features import precision
from specgen.paths import shown as printed  # `shown` names a local of check_writable
from specgen.runtime.checkpoint import LATEST, STATE, CheckpointFolder, aside_folder, key_shapes, read_arrays
from specgen.runtime.integrity import (
    EXPECTED_SERIAL,
    EXPECTED_STEP,
    META,
    Unreadable,
    key_position,
    meta_damage,
    unreadable_error,
    verify,
)
from specgen.runtime.run_lock import RunLock
from specgen.runtime.sources.base import MISSING, REGULAR, file_kind
from specgen.spec.load import LoadedSpec
from specgen.spec.overrides import load_with_overrides, merge_overrides

SUBFOLDERS = ("code", "tensorboard", "tensorboard/train", "tensorboard/eval")


@dataclass
class Options:
    epochs: int | None = None
    steps: int | None = None
    resume: bool = False
    resume_from: Path | None = None
    fresh: bool = False
    overrides: list[str] = field(default_factory=list)
    quiet: bool = False
    strategy: str | None = None  # --strategy: replaces train.distribute.strategy for this command
    resume_or_start: bool = False  # --resume when the run folder holds a checkpoint, a new run otherwise
    track: str | None = None  # --track mlflow:URI's URI: replaces train.tracking.mlflow.uri (docs/tracking.md)


@dataclass
class Start:
    """A run's starting point: the spec (with every override applied) and the checkpoint to resume, if any."""

    loaded: LoadedSpec
    checkpoint: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # in effect; saved with every checkpoint of the run
    kept: list[str] = field(default_factory=list)  # of those, the ones that came from the checkpoint
    notes: list[str] = field(default_factory=list)
    lock: RunLock | None = None  # the run folder's, held until the command ends (train.py releases it)
    # Called just before the run folder's first write: a Ctrl-C noted during start-up stops there (train.py), so
    # nothing is written for a run that was stopped before it began.
    before_writes: Callable[[], None] = lambda: None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def check_writable(folder: Path, loaded: LoadedSpec | None = None) -> None:
    """Create and remove a probe file in the run folder and its existing subfolders (or, for a new run, in the
    nearest folder above it that exists): a refusal before anything is read, trained or written. A real write, not
    os.access: that misses what only a write finds (sysfs, some FUSE and network file systems). Inside the run
    folder each probed folder's times are put back after, so a refused command leaves it as it was, modification
    times included (the run lock keeps other writers out meanwhile). A run folder that is a file (or a file on its
    way) is said as such first, at `checkpoint.dir` when `loaded` is given: "make it writable" would not help."""
    if (blocking := _not_a_folder(folder)) is not None:
        raise _file_in_the_way(folder, blocking, loaded)
    where = folder
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), None)
    try:
        if existing is None:
            raise NotADirectoryError(0, "no existing folder above it", str(folder))
        for where in [existing, *(folder / s for s in SUBFOLDERS if (folder / s).is_dir())]:
            probe_writable(where, keep_times=where == folder or folder in where.parents)
    except OSError as exc:
        raise _unwritable(exc, folder if where == existing and existing != folder else where) from None


def _unwritable(exc: OSError, where: Path) -> SpecError:
    shown = exc.filename if isinstance(exc.filename, str) and not Path(exc.filename).name.startswith(".") else where
    return SpecError([Diagnostic(printed(shown), None, f"cannot write the run folder ({exc.strerror or exc}); "
                                 "make it writable, or train into another folder with --set checkpoint.dir=PATH. "
                                 "Nothing was trained.")])


def _not_a_folder(folder: Path) -> Path | None:
    """The first of `folder` and the folders above it that is there but is no folder (a file, a dangling link, a
    FIFO); None when the first one there is a folder (or a link to one: a run folder may be a link)."""
    for path in (folder, *folder.parents):
        if path.is_dir():
            return None
        if path.is_symlink() or path.exists():
            return path
    return None


def _what(path: Path) -> str:
    """What a path that is no folder is, as a message says it: 'a file', 'a FIFO (named pipe)', ..."""
    found = file_kind(path)
    if found == REGULAR:
        return "a file"
    return "a symbolic link to nothing" if found == MISSING else found


def _file_in_the_way(folder: Path, blocking: Path, loaded: LoadedSpec | None) -> SpecError:
    what = f"is {_what(blocking)}, not a folder" if blocking == folder else \
        f"cannot be made: {printed(blocking)} is {_what(blocking)}, not a folder"
    message = (f"checkpoint.dir {printed(folder)} {what}; move {printed(blocking)} away, or train into another "
               "folder with --set checkpoint.dir=PATH. Nothing was changed.")
    if loaded is None:
        return SpecError([Diagnostic(printed(folder), None, message)])
    return SpecError([loaded.diagnostic(("checkpoint", "dir"), message)])


# What each save rewrites in the run folder besides the new checkpoint (CheckpointFolder.save), by write_atomic, which
# never replaces a folder, a link or a device: found only after a checkpoint interval of training otherwise.
REWRITTEN = {LATEST: "the name of the newest checkpoint", STATE: "TensorFlow's state file"}


def check_rewritten(folder: Path) -> None:
    """`latest` and `checkpoint` are regular files or absent, or one line naming the first that is not."""
    for name, role in REWRITTEN.items():
        path = folder / name
        mode = path.lstat().st_mode if path.is_symlink() or path.exists() else None
        if mode is None or stat.S_ISREG(mode):
            continue
        what = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else _what(path)
        raise SpecError([Diagnostic(printed(path), None, f"{what}, not a file: every checkpoint save replaces "
                                    f"'{name}' ({role}), and replaces only a file. Remove it, then run again (--resume "
                                    "takes the newest checkpoint without it). Nothing was changed.")])


def open_run_folder(start: Start, folder: Path, fresh: bool) -> None:
    """The first writes of a run, once every check on the spec, the data and the restore sources has passed:
    create the folder, remove what an interrupted save left (and rewrite TensorFlow's state file it left stale),
    and move an earlier run aside for --fresh."""
    checkpoints = CheckpointFolder(folder, 1)
    start.before_writes()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(exc, folder) from None
    if start.lock is not None and not start.lock.held:  # a new folder, made just now: locked before any other write
        start.lock.acquire()
        # Another run may have made it and saved into it between `prepare` and here (two new runs at once).
        if start.checkpoint is None and not fresh and (held := checkpoints.holds_checkpoints()):
            raise _refuse_new_run(folder, held)
    if removed := checkpoints.remove_temporaries(locked=start.lock is None or start.lock.held):
        start.notes.append(f"removed what an interrupted save left in {printed(folder)}: {', '.join(removed)}")
    if not fresh and (repaired := checkpoints.repair_state()):  # --fresh moves the state file aside as it is
        start.notes.append(repaired)
    if fresh and any(not p.name.startswith("previous-") for p in folder.iterdir()):
        target, moved = checkpoints.move_aside()
        start.notes.append(f"--fresh: moved the previous run ({', '.join(moved)}) to {printed(target)}; nothing was deleted")


def _refuse_new_run(folder: Path, held: list[str]) -> SpecError:
    checkpoints = [name for name in held if name.startswith("ckpt-")] or held
    more = f" and {len(checkpoints) - 1} more" if len(checkpoints) > 1 else ""
    return SpecError([Diagnostic(printed(folder), None, f"the run folder already holds {checkpoints[-1]}{more}; pass "
                                 "--resume to continue it, or --fresh to start a new run (the old one is moved to "
                                 f"{printed(aside_folder(folder))}, nothing is deleted)")])


def _chosen(options: Options, checkpoints: CheckpointFolder, display: str) -> tuple[Path, str]:
    if options.resume_from is not None:
        path = options.resume_from.resolve()
        if not path.is_dir():
            raise SpecError([Diagnostic(printed(options.resume_from), None, "--resume-from: not a checkpoint folder "
                                        "(expected a ckpt-* folder holding meta.json and variables.*)")])
        return path, ""
    newest, note = checkpoints.newest()
    if (damaged := checkpoints.damaged_after(newest)) is not None:
        raise _damaged_newer(damaged, display)
    if newest is None:
        raise SpecError([Diagnostic(printed(checkpoints.directory), None, "--resume: no checkpoint in this run folder")])
    return newest, note  # a newest whose meta.json does not read is refused by verified_meta, at the key


def _damaged_newer(damaged: Path, display: str) -> SpecError:
    """--resume never steps back silently past a damaged newer checkpoint (its meta.json does not read, so its save
    order is unknown and its name says it is newer): refused at its meta.json, naming the intact one to use
    instead (--resume-from; or move the damaged folder out of the run folder, and --resume takes the intact one)."""
    exc = meta_damage(damaged) or Unreadable(damaged / META, "its meta.json does not read")  # `saved()` could not
    return unreadable_error(exc, damaged, lambda p: f"specgen train {display} --resume-from {printed(p)} (or move "
                            f"{damaged.name} out of the run folder, then --resume)",
                            "start over with --fresh (it moves this run aside, deleting nothing)")


def damage_notes(checkpoints: CheckpointFolder, chosen: Path) -> list[str]:
    """One note per other ckpt-* folder whose meta.json does not read: its save order is unknown, so the run goes
    on beside it and pruning never removes it. Said, so that it is neither passed over nor kept in silence (by
    `--probe --resume` too, probe.py)."""
    notes = []
    for folder in checkpoints.unreadable():
        if folder != chosen and (exc := meta_damage(folder)) is not None:
            notes.append(f"{printed(exc.file)}: checkpoint {folder.name} {exc.verdict}: {exc.problem}; it is left as "
                         "it is (pruning never removes a checkpoint whose save order it cannot read)")
    return notes


class DataSettings(BaseModel):
    """What the saved data position depends on (Session.data_settings)."""

    model_config = ConfigDict(extra="forbid")
    batch_size: StrictInt
    examples: StrictInt
    seed: StrictInt
    shuffle_buffer: StrictInt


INT64_MAX = 2**63 - 1


class Meta(BaseModel):
    """meta.json as Session.save (and CheckpointFolder.save, hooks.checkpoint_meta) writes it: one field per key it
    writes, each with the type it writes (tests/test_state_r11.py fails for a key a real checkpoint holds that has no
    field here). Keys a later specgen may add are left alone; `serial`, `overrides`, `data`, `accumulate`, `targets`,
    `optimizers`, `train_files_sha256`, `pass_start` and the `until_*` keys are missing from checkpoints of older
    versions, which still resume; none of them is ever written as null but `train_files_sha256`."""

    model_config = ConfigDict(extra="ignore")
    step: Annotated[StrictInt, Field(ge=0)]
    spec: StrictStr
    serial: Annotated[StrictInt, Field(ge=1)] | None = None
    overrides: list[StrictStr] = []
    data: DataSettings | None = None
    # train.accumulate, which cuts each pass (data_position.py): read as "not recorded" unless an integer, so a
    # damaged one silently applied a saved data position cut for another value.
    accumulate: Annotated[StrictInt, Field(ge=1)] | None = None
    targets: dict[StrictStr, StrictStr] | None = None
    optimizers: dict[StrictStr, StrictStr] | None = None  # name -> kind (resume_fit.py); older checkpoints lack it
    data_workers: Annotated[StrictInt, Field(ge=2)] | None = None  # file-sharded data (integrity.py checks it first)
    # Beside data_workers: each worker's files (placement/positions.py); without it an older specgen's split.
    data_shares: list[Annotated[StrictStr, Field(pattern="^[0-9a-f]{64}$")]] | None = None
    # The run's end, where a plain --resume goes on to (run_end.py), and what it counts: made updates (`steps`, also
    # when `until_by` is missing) or attempted ones (`epochs`). Older checkpoints lack both: train.epochs from step 0.
    until_step: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = None  # the global step is an int64
    until_by: Literal["steps", "epochs"] | None = None
    until_per_epoch: Annotated[StrictInt, Field(ge=1)] | None = None  # what the end was counted in (run_end.py)
    # Where the data's current pass began, in attempted updates (session.py): the loop's epochs end on its pass ends.
    pass_start: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = None
    # The training files' digest (provenance.content_digest) that the data position belongs to (data_position.py):
    # a malformed one is refused here, as it would otherwise read as "not recorded" and be compared with another.
    train_files_sha256: Annotated[StrictStr, Field(pattern="^[0-9a-f]{64}$")] | None = None

    @field_validator("serial", "data", "accumulate", "targets", "optimizers", "data_workers", "data_shares",
                     "until_step", "until_by", "until_per_epoch", "pass_start", mode="before")
    @classmethod
    def _written(cls, value: Any) -> Any:
        """specgen writes these keys or (an older version) not at all: a null is an edit, which read as "not
        recorded" (no end: train.epochs from step 0; no data settings or accumulate: the saved data position applied
        unchecked). (A non-chief worker's train_files_sha256 is null.)"""
        if value is None:
            raise ValueError("null")
        return value


def check_meta(path: Path, meta: dict[str, Any], loaded: LoadedSpec) -> None:
    """meta.json whole (the types Session.save writes) and written for this spec; one line at the key otherwise."""
    text = (path / META).read_text()
    try:
        Meta.model_validate(meta)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = str(error["loc"][0]) if error["loc"] else "step"
        where = ".".join(str(part) for part in error["loc"])
        received = "nothing (the key is missing)" if error["type"] == "missing" else describe(error["input"])
        raise _malformed(path, text, key, received, _EXPECTED[key], where) from None
    if meta["spec"] != loaded.spec.name:
        raise SpecError([Diagnostic(printed(path / META), key_position(text, "spec"), f"this checkpoint belongs to "
                                    f"spec {quoted(meta['spec'])}, not {quoted(loaded.spec.name)}; resume it with that "
                                    "spec, or give this one its own folder (checkpoint.dir)")])
    _check_optimizer_record(path, meta, text)
    _check_pass_start(path, meta, text)
    _check_data_shares(path, meta, text)


def _check_data_shares(path: Path, meta: dict[str, Any], text: str) -> None:
    """`data_shares` one per worker of `data_workers`, as the chief writes them: a missing one would compare
    nothing, and the key without data_workers holds no positions to belong to (data_position.py)."""
    shares, workers = meta.get("data_shares"), meta.get("data_workers")
    if shares is not None and len(shares) != workers:
        raise _malformed(path, text, "data_shares", describe(shares), _EXPECTED["data_shares"] + (
            f": {workers} of them" if workers else ", only beside 'data_workers'"))


def _check_pass_start(path: Path, meta: dict[str, Any], text: str) -> None:
    """`pass_start` at most the checkpoint's attempted updates (its step plus those mixed_float16 skipped, as
    session.py counts them): a pass cannot begin after its checkpoint, and an edit past it would shuffle the resumed
    data with another seed (train.seed + pass_start, data_position.py) in silence."""
    start = meta.get("pass_start")
    if start is None:
        return
    attempts = meta["step"] + skipped_updates(path / "variables", set(key_shapes(path / "variables")))
    if start > attempts:
        raise _malformed(path, text, "pass_start", describe(start), f"an integer from 0 to {attempts} (the update "
                         "the data's current pass began at, at most the checkpoint's attempted updates)")


def skipped_updates(prefix: Path, saved: set[str]) -> int:
    """The updates skipped before a checkpoint (mixed_float16's count, `saved`: its keys), read from the checkpoint
    whatever this run's precision: its data position counts them, so the loop's position in a pass does too."""
    key, dtype = precision.KEYS[2], precision.DTYPES[2]
    return int(read_arrays(prefix, {key: ((), dtype)})[key]) if key in saved else 0


def _check_optimizer_record(path: Path, meta: dict[str, Any], text: str) -> None:
    """`optimizers` names exactly the optimizers whose state the checkpoint holds (each saves its `iterations`), as
    Session.save writes it: with one left out, that optimizer's kind went unchecked (resume_fit.py compares the
    recorded ones only). Against the checkpoint's own keys, not the spec: a spec that gained or lost an optimizer
    since is resume_fit's refusal, with its own words."""
    record = meta.get("optimizers")
    if record is None:  # an older specgen's checkpoint: resume_fit.py notes it
        return
    held = sorted(parts[1] for key in key_shapes(path / "variables")
                  if len(parts := key.split("/")) == 3 and key == keys.iterations(parts[1]))
    if sorted(record) != held:
        raise _malformed(path, text, "optimizers", describe(record), "an object of each optimizer whose state the "
                         f"checkpoint holds ({', '.join(held) or 'none'}) to its kind (strings)")


def _malformed(path: Path, text: str, key: str, received: str, expected: str, where: str | None = None) -> SpecError:
    return SpecError([Diagnostic(printed(path / META), key_position(text, key), f"checkpoint {path.name} has a "
                                 f"malformed meta.json: '{where or key}' is {received}; expected {expected}, as "
                                 "specgen writes it. Resume from another checkpoint (--resume-from) or start over "
                                 "with --fresh")])


_EXPECTED = {"step": EXPECTED_STEP, "spec": "the name of the spec that wrote it (a string)",
             "serial": EXPECTED_SERIAL, "overrides": "a list of --set texts (strings)",
             "data": "an object of batch_size, examples, seed and shuffle_buffer (integers)",
             "accumulate": "an integer, 1 or more (train.accumulate, which cuts each pass of the data)",
             "data_workers": "the number of workers (2 or more) whose data positions it holds",
             "data_shares": "a list of one sha256 (64 lowercase hexadecimal digits) per worker of 'data_workers', "
                            "of the shards it reads",
             "targets": "an object of target variable path to online variable path (strings)",
             "optimizers": "an object of optimizer name to its kind (strings)",
             "until_step": f"an integer from 0 to {INT64_MAX} (the step the run ends at)",
             "until_by": "'steps' or 'epochs' (what the run's end counts)",
             "until_per_epoch": "an integer, 1 or more (the updates per epoch the run's end was counted in)",
             "pass_start": f"an integer from 0 to {INT64_MAX} (the update the data's current pass began at)",
             "train_files_sha256": "a sha256 of the training files (64 lowercase hexadecimal digits)"}


def verified_meta(path: Path, loaded: LoadedSpec) -> dict[str, Any]:
    """meta.json of a checkpoint that reads back whole and belongs to this spec; one-line errors otherwise."""
    try:
        meta = verify(path, need_data=True)
    except Unreadable as exc:
        raise unreadable_error(exc, path, lambda p: f"specgen train {loaded.display} --resume-from {printed(p)}",
                               "start over with --fresh (it moves this run aside, deleting nothing)") from None
    check_meta(path, meta, loaded)
    return meta


def with_kept_overrides(start: Start, meta: dict[str, Any], new: list[str]) -> Start:
    """The overrides saved with the checkpoint, then this command's (which replace kept ones of the same key); also
    `--probe --resume`'s (probe.py), so that it probes the spec --resume trains."""
    saved = meta.get("overrides", [])
    kept = [t for t in saved if isinstance(t, str)] if isinstance(saved, list) else []
    merged = merge_overrides(kept, new)
    start.overrides, start.kept = merged, merged[: len(merged) - len(new)]
    if start.kept:
        try:
            start.loaded = load_with_overrides(start.loaded.path, merged)
        except SpecError as exc:
            raise SpecError([Diagnostic(d.path, d.position, f"{d.message} (with the overrides kept from "
                                        f"{printed(start.checkpoint or '')}: replace one with --set KEY=VALUE)")
                             for d in exc.diagnostics]) from None
    return start


def prepare(loaded: LoadedSpec, options: Options, chief: bool = True) -> Start:
    """`chief`: this process writes the run folder (the other workers of a multi-worker run only read it).
    The chief's Start holds the run folder's lock: `release()` it when the command ends (a refusal here does)."""
    start = Start(loaded, overrides=list(options.overrides))
    if chief:  # first, before any of the folder is read: a run another process holds is refused, nothing written
        start.lock = RunLock(run_folder(loaded))
        start.lock.acquire()
    try:
        return _prepare(start, options, chief)
    except BaseException:
        start.release()
        raise


def _prepare(start: Start, options: Options, chief: bool) -> Start:
    loaded = start.loaded
    folder = run_folder(loaded)
    checkpoints = CheckpointFolder(folder, 1)
    if chief:  # checks only: open_run_folder writes, after the data and restore sources are checked too
        check_writable(folder, loaded)
        if not options.fresh:  # --fresh moves them aside with the rest of the earlier run
            check_rewritten(folder)
    # --fresh moves the folder's run aside (open_run_folder), so neither resumes nor collides with it
    resume = options.resume or (options.resume_or_start and not options.fresh and bool(checkpoints.newest()[0]))
    if not resume and options.resume_from is None:
        if not options.fresh and (held := checkpoints.holds_checkpoints()):
            raise _refuse_new_run(folder, held)
        return start
    start.checkpoint, note = _chosen(options, checkpoints, loaded.display)
    if note:
        start.notes.append(note)
    start.meta = verified_meta(start.checkpoint, loaded)
    if chief:
        start.notes += damage_notes(checkpoints, start.checkpoint)
    return with_kept_overrides(start, start.meta, list(options.overrides))
