"""The `tfrecord` reader: shards found and checked in one pass that keeps nothing, then streamed.

Before the first step every shard is read once in batches of records, each batch parsed and its values
checked (runtime/sources/context.py), so a missing key, a bad value or a truncated shard is one line naming
the shard and the record before training, and the example count is exact. That pass holds one batch of
records at a time: memory stays flat in the size of the data (bench/data.py measures it). Training then
streams the shards: interleaved `cycle_length` at a time in a fixed order (the checkpointed iterator resumes
it exactly), parsed in parallel; runtime/data.py shuffles and batches.
"""

from __future__ import annotations

import functools
import glob
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.kinds.sources.tfrecord import entries
from specgen.runtime.sources.base import Source, Wanted, WorkerShare
from specgen.runtime.sources.context import SourceContext

if TYPE_CHECKING:
    import tensorflow as tf

SCAN_CHUNK = 1024  # records parsed together while checking a shard
GLOB = "*?["  # characters that make an entry a glob


def read(context: SourceContext) -> Source:
    import tensorflow as tf

    model = getattr(context.loaded.spec.data, context.stage)
    shards = find_shards(context, model)
    spec, parse = _parser(context)
    wanted, named = context.expected(), len(shards) > 1 or any(c in entries(model)[0] for c in GLOB)
    counts = [_scan(context, shard, spec, wanted, f"shard {_name(context, shard)}, " if named else "")
              for shard in shards]
    files = tf.data.Dataset.from_tensor_slices([str(s) for s in shards])
    if _shuffles_files(context, model, shards):
        # Shards in a seeded order, the same each epoch (the buffer reshuffles examples every epoch). Not reshuffled:
        # a reshuffling shuffle nested under training's reshuffling one does not restore exactly from a saved
        # iterator (TensorFlow 2.x; a resumed run diverged at 8 of 21 save points), which exact resume needs.
        files = files.shuffle(len(shards), seed=context.training.train.seed, reshuffle_each_iteration=False)
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=min(model.cycle_length, len(shards)),
                               block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)  # deterministic: the order is the order read
    if model.cache is not None:
        dataset = dataset.cache("" if model.cache == "memory" else str(context.loaded.folder / model.cache))
    split = functools.partial(worker_share, context, model, shards, counts, files, parse)
    return Source(dataset, sum(counts), tuple(shards), split=split)


def _shuffles_files(context: SourceContext, model: Any, shards: list[Path]) -> bool:
    return context.stage == "train" and context.training.train is not None and model.cache is None and len(shards) > 1


def worker_share(context: SourceContext, model: Any, shards: list[Path], counts: list[int], files: tf.data.Dataset,
                 parse: Any, index: int, workers: int) -> WorkerShare:
    """Worker `index` of `workers` (under multi_worker): shards index, index + workers, ... of the seeded file order
    (the same on every worker), streamed like the whole source with cycle_length / workers shards open at once, so
    that with equal shards each global batch holds the one-process examples (docs/training.md says when)."""
    import tensorflow as tf

    order = [Path(p.decode()) for p in files.as_numpy_iterator()]  # after the seeded shuffle, if any
    mine = order[index::workers]
    cycle = min(model.cycle_length, len(shards))
    records = tf.data.Dataset.from_tensor_slices([str(s) for s in mine]).interleave(
        tf.data.TFRecordDataset, cycle_length=max(cycle // workers, 1), block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if model.cache is not None:  # one cache per worker: workers sharing a cache file would clash
        where = "" if model.cache == "memory" else f"{context.loaded.folder / model.cache}.w{index}-of-{workers}"
        dataset = dataset.cache(where)
    size = dict(zip(shards, counts, strict=True))
    return WorkerShare(dataset, sum(size[s] for s in mine), tuple(mine), len(shards), cycle, len(set(counts)) == 1)


def find_shards(context: SourceContext, model: Any) -> list[Path]:
    """Every file the entries name, in order (a glob's matches sorted), each once; a positioned error for an
    entry that names no file."""
    listed = isinstance(model.tfrecord, list)
    shards: list[Path] = []
    for index, entry in enumerate(entries(model)):
        loc = (context.kind, index) if listed else (context.kind,)
        path = context.loaded.folder / entry
        if any(c in entry for c in GLOB):
            found = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_file())
            if not found:
                raise context.fail(loc, f"the glob '{entry}' matches no file; expected .tfrecord shards relative to "
                                   "the spec's folder")
        elif path.is_file():
            found = [path]
        else:
            raise context.fail(loc, f"no such file: '{entry}'; expected a .tfrecord file relative to the spec's folder")
        shards += [f for f in found if f not in shards]
    return shards


def _name(context: SourceContext, shard: Path) -> str:
    try:
        return str(shard.relative_to(context.loaded.folder))
    except ValueError:
        return str(shard)


def _parser(context: SourceContext) -> tuple[dict[str, Any], Any]:
    import tensorflow as tf

    wanted, spec, names = context.expected(), {}, context.names()
    for name, (_, ref) in names.items():
        want = wanted.get(name, Wanted((), "float"))
        context.refuse_named_dims(name, want.shape)  # a fixed-length feature has no length of its own
        spec[ref] = tf.io.FixedLenFeature(list(want.shape), tf.int64 if want.kind == "int" else tf.float32)
    inputs = {i.name: i.dtype for i in context.ir.inputs}

    def parse(record: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        parsed = tf.io.parse_single_example(record, spec)
        features = {n: tf.cast(parsed[ref], inputs[n]) for n, (_, ref) in names.items() if n in inputs}
        labels = {n: parsed[ref] for n, (_, ref) in names.items() if n not in inputs}
        return features, labels

    return spec, parse


def _scan(context: SourceContext, shard: Path, spec: dict[str, Any], wanted: dict[str, Wanted], where: str) -> int:
    """Read one shard once, parsing and checking its records a batch at a time; its number of records."""
    import tensorflow as tf

    count, batches = 0, iter(tf.data.TFRecordDataset(str(shard)).batch(SCAN_CHUNK))
    while True:
        try:
            chunk = next(batches)
        except StopIteration:
            return count
        except tf.errors.DataLossError as exc:
            index = count + _readable(shard, count)
            raise context.fail((context.kind,), f"{where}cannot read record {index}: {_reason(exc)}; "
                               "the file is damaged or not a TFRecord file") from None
        count = _check_chunk(context, chunk, count, spec, wanted, where)


def _reason(exc: Any) -> str:
    """TensorFlow's reason without the op and function names it wraps around it."""
    line = re.sub(r"\{\{[^}]*\}\}\s*", "", exc.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", line).strip()


def _readable(shard: Path, start: int) -> int:
    """How many records after `start` read whole (the index of the bad one, for the message; error path only)."""
    import tensorflow as tf

    readable = 0
    try:
        for _ in tf.data.TFRecordDataset(str(shard)).skip(start):
            readable += 1
    except tf.errors.DataLossError:
        pass
    return readable


def _check_chunk(context: SourceContext, chunk: tf.Tensor, start: int, spec: dict[str, Any],
                 wanted: dict[str, Wanted], where: str) -> int:
    import tensorflow as tf

    try:
        parsed = tf.io.parse_example(chunk, spec)
    except tf.errors.InvalidArgumentError:
        for offset, record in enumerate(chunk.numpy()):  # find the record, for the message
            try:
                tf.io.parse_single_example(record, spec)
            except tf.errors.InvalidArgumentError as exc:
                raise context.fail((context.kind,), f"{where}cannot parse record {start + offset}: {_reason(exc)}") \
                    from None
        raise context.fail((context.kind,), f"{where}cannot parse records {start} to "
                           f"{start + int(chunk.shape[0]) - 1}") from None
    for name, (_, ref) in context.names().items():
        if name in wanted:
            context.check_values(name, parsed[ref].numpy(), wanted[name],
                                 lambda n, index, flat, ref=ref: f"{where}record {start + index[0]}, key '{ref}'"
                                 + (f" (element {list(index[1:])})" if len(index) > 1 else ""))
    return start + int(chunk.shape[0])
