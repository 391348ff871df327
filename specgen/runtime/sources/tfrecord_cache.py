"""A `tfrecord` source's `cache: <path>`: TensorFlow's file cache, keyed to what it caches and written whole.

TensorFlow's cache (`Dataset.cache(prefix)`) reads `<prefix>.index` whenever it exists, whatever the shards now
hold, so rewritten shards would train on the old examples while the checking pass, `specgen data` and
provenance.json describe the new ones. It also writes a partial shard (`<prefix>_<n>`, with a lockfile) at
every iterator save of an unfinished pass, and refuses to start writing where such files exist (a traceback
for the next new run of a run stopped mid-pass). So specgen owns the files:

- The prefix is `<path>.<key>`: the key is 16 hex digits of a sha256 over the shards (absolute paths, sizes,
  modification times in ns), what is parsed from them (keys, dtypes, shapes, image sizes, compression,
  cycle_length, the records skip_bad leaves out) and the specgen and TensorFlow versions. A record of those
  facts, `<prefix>.json`, lies beside it. A worker's share under multi_worker has its own family,
  `<path>.w<i>-of-<n>.<key>`.
- The cache is written whole before the first step (one pass that parses the checked shards into it, as
  training's first pass would have), into a private prefix (`.partial-<host>-<pid>`) renamed into place with
  its index last: a cache is complete exactly when its index is there. Training then only ever reads a
  complete cache, so no checkpoint holds a cache writer and no run stopped mid-pass leaves partial files.
- Anything else of the family at the path is removed first, with a note: a cache of another key (other shards
  or settings: the note says which), TensorFlow's own unkeyed files (an earlier specgen), and what a process
  that stopped while writing left. A partial file of a process still running (on this host: another run
  filling the same cache) is left alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specgen.atomic import pid_alive
from specgen.paths import shown
from specgen.runtime.sources.context import SourceContext
from specgen.runtime.sources.record_problems import reason

if TYPE_CHECKING:
    import tensorflow as tf

KEY_DIGITS = 16
# What TensorFlow writes under a prefix: its index, data shards (and their temporary names), a lockfile, the
# numbered partial shards of an unfinished pass; and specgen's record.
_TF_SUFFIX = r"(?:_\d+)?\.(?:index|data-\d{5}-of-\d{5}(?:\.tempstate\d+)?|lockfile)"
_SUFFIX = rf"(?:{_TF_SUFFIX}|\.json)"
SHOWN = 3  # changed shards named in a note


@dataclass(frozen=True)
class Family:
    """The cache files at one `cache` path for one reader: the whole source (tag '') or a worker's share."""

    path: Path
    tag: str  # '', 's<seed>.' (a seeded shard order: tfrecord.seed_tag), then 'w<i>-of-<n>.' for a worker's share

    def prefix(self, key: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{self.tag}{key}")

    def partial(self, key: str) -> Path:
        return self.prefix(key).with_name(f"{self.prefix(key).name}.partial-{_host()}-{os.getpid()}")

    def keyed(self) -> re.Pattern[str]:
        return re.compile(rf"{re.escape(self.path.name)}\.{re.escape(self.tag)}(?P<key>[0-9a-f]{{{KEY_DIGITS}}})"
                          rf"(?:\.partial-(?P<host>[A-Za-z0-9-]+)-(?P<pid>\d+))?{_SUFFIX}")

    def legacy(self) -> re.Pattern[str]:
        """TensorFlow's own files at the path, unkeyed (specgen before keys; worker files too)."""
        return re.compile(rf"{re.escape(self.path.name)}(?:\.w\d+-of-\d+)?{_TF_SUFFIX}")


def cached(context: SourceContext, dataset: tf.data.Dataset, shards: list[Path], settings: dict[str, Any],
           examples: int, tag: str = "") -> tf.data.Dataset:
    """`dataset` through the file cache at the source's `cache` path, keyed to `shards` and `settings` (what the
    reader parses), written whole now when no complete cache of that key is there."""
    model = getattr(context.loaded.spec.data, context.stage)
    family = Family(context.loaded.folder / model.cache, tag)
    record = _record(context, shards, settings)
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:KEY_DIGITS]
    _clean(context, family, key, record)
    final = family.prefix(key)
    if not _name(final, ".index").exists():
        _fill(context, dataset, family, key, record, examples)
    return dataset.cache(os.fsencode(final))


def _record(context: SourceContext, shards: list[Path], settings: dict[str, Any]) -> dict[str, Any]:
    """What the cache is made from: each shard's absolute path, size and modification time, the reader's settings,
    the versions that parse them."""
    import tensorflow as tf

    import specgen

    files = []
    for shard in shards:
        try:
            facts = shard.stat()
        except OSError as exc:  # gone since the checking pass read it
            raise context.fail((context.kind,), f"{shown(shard)} cannot be read any more ({exc.strerror})") from None
        files.append([os.fsdecode(shard.resolve()), facts.st_size, facts.st_mtime_ns])
    return {"shards": files, "settings": settings,
            "versions": {"specgen": specgen.__version__, "tensorflow": tf.__version__}}


def _clean(context: SourceContext, family: Family, key: str, record: dict[str, Any]) -> None:
    """Remove what of the family is not the complete cache of `key` (nor a live process's partial files),
    saying why in one note."""
    stale: dict[str, list[Path]] = {}
    complete = _name(family.prefix(key), ".index").exists()
    keyed, legacy = family.keyed(), family.legacy()
    unseeded = Family(family.path, "").keyed() if family.tag.startswith("s") else None
    for entry in _entries(family.path.parent):
        if (match := keyed.fullmatch(entry.name)) is not None:
            why = _why_stale(match, key, family, record)
        elif unseeded is not None and (match := unseeded.fullmatch(entry.name)) is not None and match["pid"] is None:
            why = "a cache of the shards in another order (written before caches kept the seeded shard order)"
        else:
            why = "TensorFlow cache files with no record of what they hold (an earlier specgen wrote them)" \
                if family.tag == "" and legacy.fullmatch(entry.name) else None
        if why is not None:
            stale.setdefault(why, []).append(entry)
    if not stale:
        return
    for paths in stale.values():
        for path in paths:
            _remove(context, path)
    files = sum(len(p) for p in stale.values())
    then = "" if complete else "; the cache is written again from the checked shards before the first step"
    print(f"note: data.{context.stage}: removed {files} cache file(s) at {shown(family.path)}: {'; '.join(stale)}{then}")


def _why_stale(match: re.Match[str], key: str, family: Family, record: dict[str, Any]) -> str | None:
    """Why one keyed file goes, or None when it stays (the complete cache of `key`, a live process's partial)."""
    if match["pid"] is not None:
        if match["host"] != _host() or (int(match["pid"]) != os.getpid() and pid_alive(int(match["pid"]))):
            return None  # being written by another process now
        return "a cache left unfinished by a process that stopped while writing it"
    if match["key"] != key:
        return f"a cache made from {_changed(_name(family.prefix(match['key']), '.json'), record)}"
    # This key's files without their index (a process stopped between its renames, or renaming now: a worker
    # beside this one): left, since the fill's renames replace them.
    return None


def _changed(old_record: Path, record: dict[str, Any]) -> str:
    """What differs between the record of a stale cache and this one, for the note."""
    try:
        old = json.loads(old_record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "other shards or settings"
    if old.get("shards") != record["shards"]:
        before = {f[0]: f[1:] for f in old.get("shards") or [] if isinstance(f, list) and f}
        now = {f[0]: f[1:] for f in record["shards"]}
        names = [shown(n) for n in sorted(set(before) | set(now)) if before.get(n) != now.get(n)]
        listed = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
        return f"other shards ({listed} added, removed or rewritten since)" if names else "other shards"
    if old.get("settings") != record["settings"]:
        keys = sorted(k for k in {**old.get("settings", {}), **record["settings"]}
                      if old.get("settings", {}).get(k) != record["settings"].get(k))
        return f"other settings ({', '.join(keys)})"
    return "another specgen or TensorFlow version"


def _fill(context: SourceContext, dataset: tf.data.Dataset, family: Family, key: str, record: dict[str, Any],
          examples: int) -> None:
    """The cache of `key` written whole: into a private prefix, then renamed into place with its index last."""
    import tensorflow as tf

    partial, final = family.partial(key), family.prefix(key)
    try:
        partial.parent.mkdir(parents=True, exist_ok=True)
        written = int(dataset.cache(os.fsencode(partial)).reduce(np.int64(0), lambda count, _: count + 1))
    except (OSError, tf.errors.OpError) as exc:
        _remove_prefix(context, partial)
        why = exc.strerror if isinstance(exc, OSError) else reason(exc)
        raise context.fail(("cache",), f"cannot write the cache at {shown(family.path)}: {why}; free space or "
                           "give `cache` a writable path") from None
    if written != examples:  # the shards changed between the check and this pass
        _remove_prefix(context, partial)
        raise context.fail((context.kind,), f"the shards changed while they were read: the checking pass counted "
                           f"{examples} examples and the cache pass {written}; run again once they are written")
    parts = sorted(_entries(partial.parent), key=lambda p: p.name.endswith(".index"))  # the index last
    for part in (p for p in parts if p.name.startswith(partial.name + ".")):
        if part.name.endswith(".index"):
            _name(final, ".json").write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(part, _name(final, part.name[len(partial.name):]))


def _name(prefix: Path, suffix: str) -> Path:
    return prefix.with_name(prefix.name + suffix)


def _entries(folder: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)]
    except OSError:  # no folder yet: nothing cached
        return []


def _remove_prefix(context: SourceContext, prefix: Path) -> None:
    for path in _entries(prefix.parent):
        if path.name.startswith(prefix.name + ".") or path.name.startswith(prefix.name + "_"):
            _remove(context, path)


def _remove(context: SourceContext, path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise context.fail(("cache",), f"cannot remove the stale cache file {shown(path)} ({exc.strerror}); remove "
                           "it by hand") from None


def _host() -> str:
    """This machine's name as a file name part (a partial cache's owner is a process on a host)."""
    return re.sub(r"[^A-Za-z0-9]", "-", socket.gethostname()) or "host"
