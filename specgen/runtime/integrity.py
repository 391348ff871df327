"""Is a checkpoint folder whole? Checks that read every byte, and one-line errors that point at an intact one.

A checkpoint specgen writes is renamed into place only once complete, so a ckpt-* folder with a
missing, empty, truncated or garbled file was damaged afterwards (a disk, a copy, a person).
Such a folder is never used: the error names the file and the intact checkpoint beside it,
with the command that uses that one. TensorFlow's readers check each tensor's CRC, so reading
every tensor once finds zeroed or garbled data; sstable magic numbers catch broken index files.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.diagnostics import Diagnostic, Position, SpecError
from specgen.diagnostics import describe as describe_value
from specgen.errors import SpecgenError
from specgen.ir.training import keys
from specgen.runtime.sources.base import MISSING, REGULAR, DataError, file_kind, open_regular

META = "meta.json"
META_LIMIT = 1 << 20  # step, serial, overrides, data settings, target names: a few KiB in practice
# What TensorFlow's checkpoint readers raise on damaged files: OpError (bad magic number, CRC
# mismatch, missing file), IndexError ("Read less bytes than requested" on a truncated data file).
READ_ERRORS = (tf.errors.OpError, IndexError, ValueError, OSError)


class Unreadable(SpecgenError):
    """A damaged checkpoint: which file, what is wrong with it, and where in it when known."""

    verdict = "is unreadable"  # how `describe` says it: "checkpoint ckpt-00000030 is unreadable: <problem>"

    def __init__(self, file: Path, problem: str, position: Position | None = None):
        super().__init__(f"{file}: {problem}")
        self.file, self.problem, self.position = file, problem, position


class Malformed(Unreadable):
    """A meta.json that reads as JSON but holds a key that orders the checkpoints (`step`, `serial`) in a form
    specgen never writes: its save order is unknown, so it is neither chosen, stepped past nor pruned."""

    verdict = "has a malformed meta.json"


# What the keys that order checkpoints must hold, as the one-line errors say it (resume.py's check_meta too).
EXPECTED_STEP = "an integer, 0 or more"
EXPECTED_SERIAL = "an integer, 1 or more (the save order)"
# Every specgen that writes `serial` writes these beside it (since save serials began, 2026-11-24): a meta.json
# with one of them and no valid `serial` was damaged. One with neither is an older run's, ordered by step.
WITH_SERIAL = ("overrides", "data")


@dataclass(frozen=True)
class Saved:
    """A ckpt-* folder whose meta.json reads with a valid `step` and `serial` (read_meta checks both); `order` is
    save order: serial, then step (an older run's checkpoints, written before serials, count as serial 0)."""

    path: Path
    meta: dict[str, Any]

    @property
    def order(self) -> tuple[int, int, str]:
        return (self.meta.get("serial", 0), self.meta["step"], self.path.name)


def key_position(text: str, key: str) -> Position | None:
    """Where `"key":` sits in a JSON text (meta.json is written one key per line)."""
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf'\s*"{re.escape(key)}"\s*:', line):
            return Position(number, len(line) - len(line.lstrip()) + 1)
    return None


def file_problem(path: Path) -> str | None:
    """None for a regular file (links followed); else what it is, as a message goes on after the path: 'is
    missing', 'is a FIFO (named pipe), not a regular file', 'is a symbolic link loop, not a regular file'."""
    kind = file_kind(path)
    if kind == REGULAR:
        return None
    if kind == MISSING:
        return "is missing"
    return f"is {kind}, not a regular file"


def read_small(path: Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of a file every checkpoint reader here goes through (`latest`, meta.json, an
    index): a regular file, or Unreadable saying what it is. A FIFO is never waited on and a device never read
    (/dev/zero behind a link would fill memory); open_regular checks the opened descriptor again, so a swap
    after the check is refused too. The caller says what more than `limit` bytes means."""
    if (problem := file_problem(path)) is not None:
        raise Unreadable(path, f"the file {problem}")
    try:
        with open_regular(path) as handle:
            return handle.read(limit + 1)
    except (OSError, DataError) as exc:
        raise Unreadable(path, f"cannot be read ({exc})") from None


def meta_text(folder: Path) -> str:
    """meta.json's text (bounded: META_LIMIT); Unreadable when it is not a regular file or not UTF-8."""
    path = folder / META
    raw = read_small(path, META_LIMIT)
    if len(raw) > META_LIMIT:
        raise Unreadable(path, f"the file is over {META_LIMIT // 2**20} MiB, far more than a checkpoint's "
                         "meta.json holds")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(path, f"cannot be read ({exc})") from None


def read_meta(folder: Path) -> dict[str, Any]:
    """A checkpoint's meta.json: a JSON object whose `step` and `serial`, which order the checkpoints, are what
    specgen writes; Unreadable (Malformed for a bad key, at the key) otherwise."""
    path = folder / META
    text = meta_text(folder)
    if not text.strip():
        raise Unreadable(path, "the file is empty")
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unreadable(path, f"not valid JSON ({exc.msg.removesuffix(' at')})", Position(exc.lineno, exc.colno)) from None
    if not isinstance(meta, dict):
        raise Unreadable(path, f"it holds {type(meta).__name__}, not a JSON object (of step, serial, spec, ...)")
    if (bad := _order_problem(meta)) is not None:
        key, expected = bad
        received = "nothing (the key is missing)" if key not in meta else describe_value(meta[key])
        raise Malformed(path, f"'{key}' is {received}; expected {expected}, as specgen writes it",
                        key_position(text, key))
    return meta


def _order_problem(meta: dict[str, Any]) -> tuple[str, str] | None:
    """The key that orders checkpoints and is not as specgen writes it, with what it must be; None when both are.
    `type(...) is int`: JSON's true and false are ints to Python, and 5.0 is no serial."""
    step, serial = meta.get("step"), meta.get("serial")
    if type(step) is not int or step < 0:
        return "step", EXPECTED_STEP
    if ("serial" in meta or any(key in meta for key in WITH_SERIAL)) and (type(serial) is not int or serial < 1):
        return "serial", EXPECTED_SERIAL
    return None


def meta_damage(folder: Path) -> Unreadable | None:
    """What is wrong with a checkpoint's meta.json (read_meta's error, to raise or report), None when it reads."""
    try:
        read_meta(folder)
    except Unreadable as exc:
        return exc
    return None


def saved(folder: Path) -> Saved | None:
    try:
        return Saved(folder, read_meta(folder))
    except Unreadable:
        return None


def damaged_file(prefix: Path, message: str) -> Path:
    """The file of a checkpoint prefix that a reader error is about: a missing one, else the one the message names.

    By what TensorFlow says, most specific first, so every kind of file is named by its own failure: a file the
    message names by path or name ("Unable to read file (<prefix>.index)" for an index whose block is garbled
    mid-file); a data shard by number ("TensorBundle at <prefix> shard 1 (...): Checksum does not match"); the
    index for sstable errors ("not an sstable (bad magic number)", "file is too short to be an sstable"); else
    the first data shard, whose reads fail without a name ("Read less bytes than requested", a variant's checksum).
    """
    index = Path(f"{prefix}.index")
    data = sorted(prefix.parent.glob(f"{prefix.name}.data-*"))
    if not index.is_file():
        return index
    if not data:
        return Path(f"{prefix}.data-00000-of-00001")
    named = [file for file in (index, *data) if str(file) in message or re.search(
        rf"(^|[\s(/'\"]){re.escape(file.name)}($|[\s)'\":,.])", message)]
    if named:
        return named[0]
    if shard := re.search(rf"{re.escape(prefix.name)} shard (\d+)\b", message):
        numbered = [file for file in data if re.search(rf"\.data-0*{int(shard.group(1))}-of-", file.name)]
        if numbered:
            return numbered[0]
    return index if re.search(r"sstable|magic", message) else data[0]


def reader_failure(prefix: Path, exc: BaseException) -> Unreadable:
    """A TensorFlow reader's error as Unreadable: the file it is about, and its first line without op names."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\].*", "", str(exc).strip()).strip()
    message = (text.splitlines() or [type(exc).__name__])[0]
    file = damaged_file(prefix, message)
    problem = "the file is missing" if not file.is_file() else f"damaged ({message[:200]})"
    return Unreadable(file, problem)


def check_kinds(prefix: Path) -> None:
    """The `.index` and every `.data-*` shard of a prefix that exist are regular files, or Unreadable naming the
    first that is not: TensorFlow's reader, which opens them itself, blocks forever on a FIFO and reads a device
    without end. Missing files are left to the reader, whose message names them."""
    try:
        shards = sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"))
    except OSError:
        shards = []
    for path in [Path(f"{prefix}.index"), *shards]:
        if (problem := file_problem(path)) not in (None, "is missing"):
            raise Unreadable(path, f"the file {problem}")


def read_all(prefix: Path) -> dict[str, Any]:
    """Every tensor under a prefix (each CRC-checked by the reader); Unreadable names the damaged file."""
    check_kinds(prefix)
    try:
        dtypes = tf.train.load_checkpoint(str(prefix)).get_variable_to_dtype_map()
        names = sorted(dtypes)
        # RestoreV2, not reader.get_tensor: the data iterator's state is a variant tensor numpy cannot hold.
        tensors = tf.raw_ops.RestoreV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                                       dtypes=[dtypes[n] for n in names])
        return dict(zip(names, tensors, strict=True))
    except READ_ERRORS as exc:
        raise reader_failure(prefix, exc) from None


def verify(folder: Path, need_data: bool = True) -> dict[str, Any]:
    """meta.json of a checkpoint folder whose every file reads back whole, and whose step matches its variables."""
    meta = read_meta(folder)
    values = read_all(folder / "variables")
    for name in _positions(folder, meta) if need_data else []:
        if not (folder / f"{name}.index").is_file():
            # Refused rather than resumed with a fresh iterator: that would break the promise that a resumed
            # run ends bitwise where an uninterrupted one does, and a missing file means the folder was damaged.
            raise Unreadable(folder / f"{name}.index", "the file is missing (the data iterator's position: without "
                             "it a resumed run would not continue the data where it stopped)")
        read_all(folder / name)
    step = values.get(keys.STEP)
    if step is not None and int(step.numpy()) != meta["step"]:
        text = meta_text(folder)
        raise Unreadable(folder / META, f"'step' is {meta['step']}, but the checkpoint's global_step is "
                         f"{int(step.numpy())}", key_position(text, "step"))
    return meta


def _positions(folder: Path, meta: dict[str, Any]) -> list[str]:
    """The data positions a checkpoint must hold: `data`, or one `data-w{i}` per worker of a file-sharded run."""
    workers = meta.get("data_workers")
    if workers is None:
        return ["data"]
    if type(workers) is not int or workers < 2:
        text = meta_text(folder)
        raise Unreadable(folder / META, f"'data_workers' is {workers!r}; expected the number of workers (2 or more) "
                         "whose data positions it holds", key_position(text, "data_workers"))
    return [f"data-w{i}" for i in range(workers)]


def intact_beside(folder: Path, need_data: bool = True) -> Path | None:
    """The newest (in save order) checkpoint beside `folder` that reads back whole."""
    others = [s for p in folder.parent.glob("ckpt-*") if p != folder and p.is_dir() and (s := saved(p))]
    for other in sorted(others, key=lambda s: s.order, reverse=True):
        try:
            verify(other.path, need_data)
        except Unreadable:
            continue
        return other.path
    return None


def describe(exc: Unreadable, folder: Path, use: Callable[[Path], str], otherwise: str, need_data: bool = True) -> str:
    """What is wrong, and the intact checkpoint beside it with the command to use it."""
    intact = intact_beside(folder, need_data)
    where = (f"the intact checkpoint beside it is {intact.name}: {use(intact)}" if intact is not None
             else f"no intact checkpoint is beside it; {otherwise}")
    return f"checkpoint {folder.name} {exc.verdict}: {exc.problem}. Nothing was changed; {where}"


def unreadable_error(exc: Unreadable, folder: Path, use: Callable[[Path], str], otherwise: str,
                     need_data: bool = True) -> SpecError:
    """`describe` as one diagnostic on the damaged file (at the position in it, when known)."""
    return SpecError([Diagnostic(str(exc.file), exc.position, describe(exc, folder, use, otherwise, need_data))])
