"""`tfrecord`: `tf.train.Example` records in one file, a glob or a list of shards, streamed (never read whole).

Shards are interleaved (`cycle_length` read at once), shuffled with `train.shuffle_buffer` and prefetched
with autotuning (runtime/sources/tfrecord.py, runtime/data.py); `cache` keeps the parsed examples after
the first pass, in memory or in files at a path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from specgen.kinds.sources.base import Resolved, SourceDef, SourceSpec, refs
from specgen.spec.base import FilePath, Identifier, PositiveInt

CYCLE_LENGTH = 4  # shards read at once by default: enough to mix shards, few open files


class TfRecordSource(SourceSpec):
    tfrecord: FilePath | Annotated[list[FilePath], Field(min_length=1)] = Field(
        description="A .tfrecord file, a glob of shards (train-*.tfrecord) or a list of files and globs.")
    features: dict[Identifier, Identifier] = Field(description="Input name -> feature key.")
    labels: dict[Identifier, Identifier] = Field(default_factory=dict)
    cycle_length: PositiveInt = Field(CYCLE_LENGTH, description="Shards read at once (interleaved).")
    cache: FilePath | None = Field(None, description="`memory`, or a path: the parsed examples kept after the "
                                                     "first pass (a path writes TensorFlow cache files there).")


def entries(source: TfRecordSource) -> list[str]:
    """The declared files and globs, in order."""
    return [source.tfrecord] if isinstance(source.tfrecord, str) else list(source.tfrecord)


def resolve(source: TfRecordSource, folder: Path) -> Resolved:
    """The path messages show: the one entry, or the first of a list (the reader names each shard itself)."""
    return Resolved(folder / entries(source)[0], refs(source.features), refs(source.labels))


def describe(source: Any) -> list[str]:
    """`specgen data`'s lines for this kind's own keys."""
    cache = source.cache or "none"
    return [f"streamed, {source.cycle_length} shard(s) read at once (cycle_length), cache {cache}"]


KINDS = (SourceDef(
    name="tfrecord",
    spec=TfRecordSource,
    doc="`tfrecord: <path, glob or list>`, `features: {<input name>: <feature key>}` (required), "
        f"`labels: {{<label name>: <feature key>}}` (default `{{}}`), `cycle_length` (default {CYCLE_LENGTH}), "
        "`cache` (`memory` or a path; default none)",
    expects="a .tfrecord file, a glob of shards or a list of them",
    example={"tfrecord": "data.tfrecord", "features": {"x": "x"}, "labels": {"label": "y"}},
    reader="specgen.runtime.sources.tfrecord.read",
    resolve=resolve,
    describe=describe,
),)
