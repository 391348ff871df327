"""The shards a `tfrecord` source names, and how they are opened (runtime/sources/tfrecord.py reads them).

`find_shards` turns the spec's entries (files, globs, a list of both) into the ordered list of regular files
it names, refusing at the entry what names nothing or something that is not a file; `opener` opens one shard
as TensorFlow's record reader, with the source's compression, leaving out the records the checking pass set
aside (skip_bad).
"""

from __future__ import annotations

import functools
import glob
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.kinds.sources.tfrecord import entries
from specgen.paths import shown
from specgen.runtime.sources.base import MISSING, REGULAR, file_kind
from specgen.runtime.sources.context import SourceContext
from specgen.runtime.sources.framing import COMPRESSION_TYPE

if TYPE_CHECKING:
    import tensorflow as tf

GLOB = "*?["  # characters that make an entry a glob
SHOWN = 5  # names of one file listed again, said in the note


def find_shards(context: SourceContext, model: Any) -> list[Path]:
    """Every file the entries name, in order (a glob's matches sorted), each once; a positioned error for an
    entry that names no file, or names something that is not a regular file (a FIFO, a device, a folder: each
    refused by what it is, found without opening it).

    "Once" is by what the file is, not how it is spelled: two names of one file (a symbolic link, a `..` path,
    a hard link) have one os.stat (st_dev, st_ino), and the first name listed is kept; the others are said in
    one line. Every later use (the example count, `specgen data`'s list, the training files' digest, a file
    cache's key, multi_worker's split) takes this list, so none of them sees the file twice."""
    listed = isinstance(model.tfrecord, list)
    shards: dict[tuple[int, int] | Path, Path] = {}
    again: list[tuple[Path, Path]] = []  # (a later name, the name kept) of one file
    for index, entry in enumerate(entries(model)):
        for found in _entry_files(context, (context.kind, index) if listed else (context.kind,), entry):
            kept = shards.setdefault(_identity(found), found)
            if kept != found and (found, kept) not in again:
                again.append((found, kept))
    _say_again(context, again)
    return list(shards.values())


def _entry_files(context: SourceContext, loc: tuple[str | int, ...], entry: str) -> list[Path]:
    """The regular files one entry names (a glob's matches sorted), or its positioned error."""
    path = context.loaded.folder / entry
    if any(c in entry for c in GLOB):
        found = sorted(Path(p) for p in glob.glob(str(path)))
        if not found:
            raise context.fail(loc, f"the glob '{entry}' matches no file; expected .tfrecord shards relative to "
                               "the spec's folder")
        for match in found:
            if (what := file_kind(match)) != REGULAR:
                raise context.fail(loc, f"the glob '{entry}' matches {shard_name(context, match)}, which is "
                                   f"{what}, not a regular file; expected .tfrecord shards (narrow the glob)")
        return found
    if (what := file_kind(path)) == MISSING:
        raise context.fail(loc, f"no such file: '{entry}'; expected a .tfrecord file relative to the spec's folder")
    if what != REGULAR:
        raise context.fail(loc, f"'{entry}' is {what}, not a regular file; expected a .tfrecord file")
    return [path]


def _identity(path: Path) -> tuple[int, int] | Path:
    """The file itself (links followed): its device and inode, which every name of it shares (its name if it
    went away since it was found: reading it then says so, naming the shard)."""
    try:
        facts = os.stat(path)
    except OSError:
        return path
    return facts.st_dev, facts.st_ino


def _say_again(context: SourceContext, again: list[tuple[Path, Path]]) -> None:
    """One line naming the names that were another name of a file already listed (the same spelling twice, or
    `./x` for `x`, is one Path and unsaid, as before)."""
    if not again:
        return
    pairs = [f"{shard_name(context, later)} is {shard_name(context, kept)}" for later, kept in again]
    print(f"data.{context.stage}: read once: {', '.join(pairs[:SHOWN])}{', ...' if len(pairs) > SHOWN else ''} "
          "(another name of a file listed already: a link, a '..' path or a hard link)")


def shard_name(context: SourceContext, shard: Path) -> str:
    """A shard as messages show it: relative to the spec's folder when under it, escaped (paths.shown)."""
    try:
        return shown(shard.relative_to(context.loaded.folder))
    except ValueError:
        return shown(shard)


def file_names(paths: list[Path]) -> list[bytes]:
    """File names as TensorFlow takes them: the bytes on disk (a str with bytes that are not UTF-8, as Python
    holds such a name, does not convert to a tf.string)."""
    return [os.fsencode(p) for p in paths]


def records(compression: str) -> Any:
    """TensorFlow's record reader for the source's `compression` (none, gzip, zlib)."""
    import tensorflow as tf

    return functools.partial(tf.data.TFRecordDataset, compression_type=COMPRESSION_TYPE[compression])


def opener(skipped: dict[Path, list[int]], shards: list[Path], compression: str) -> Any:
    """Shard path -> its records, less the records the checks skipped (skip_bad): each record is numbered in
    its shard (as the checks numbered it) and dropped when (shard, number) is in one sorted table of keys.
    enumerate and filter keep their positions in a saved iterator, so resuming stays exact."""
    import tensorflow as tf

    read = records(compression)
    if not any(skipped.values()):
        return read
    paths = tf.constant(file_names(shards))  # a shard's number: its position here (stateless ops only, so
    # the pipeline serializes into a checkpoint, which a lookup table's resource would not)
    keys = tf.constant(sorted(i * 2**32 + r for i, s in enumerate(shards) for r in skipped.get(s, [])), tf.int64)

    def open_shard(path: tf.Tensor) -> tf.data.Dataset:
        shard = tf.argmax(tf.cast(tf.equal(paths, path), tf.int64)) * 2**32

        def kept(index: tf.Tensor, _: tf.Tensor) -> tf.Tensor:
            at = tf.minimum(tf.searchsorted(keys, tf.reshape(shard + index, [1]))[0], len(keys) - 1)
            return tf.not_equal(keys[at], shard + index)

        return read(path).enumerate().filter(kept).map(lambda _, record: record)

    return open_shard
