"""The `tfrecord` reader: shards found and checked in one pass that keeps nothing, then streamed.

Before the first step every shard is framed (runtime/sources/framing.py: each header's length checked
against the bytes left, in Python, before TensorFlow's reader, which sizes its buffer from that length, opens
the file), then read once in batches of records, each batch parsed and its values checked
(runtime/sources/context.py; an encoded image: its header, then a decode, runtime/sources/decode.py), so a
damaged frame, a missing key, a bad value or an image that does not decode is one line naming the shard and
the record before training, and the example count is exact (`skip_bad` records left out: `Scan`). That pass
holds one batch of records at a time, bounded in bytes (SCAN_BYTES): memory stays flat in the size of the
data and of its records (bench/data.py measures the first; tests/test_tfrecord_framing.py the second).
Training then streams the shards: interleaved `cycle_length` at a time in a fixed order (the checkpointed
iterator resumes it exactly), parsed (images decoded and resized) in parallel, skipped records
filtered out by their number in their shard; runtime/data.py shuffles and batches. Every read passes the
source's `compression` (none, gzip, zlib) to TensorFlow's reader and to the framing walk; a file `cache` is
keyed to the shards and these settings and written whole before the first step (tfrecord_cache.py).

Beside it: tfrecord_files.py (the shards the entries name, and the opener that skips records),
record_problems.py (why a record does not parse), framing.py.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specgen.kinds.sources import clashes, kind_of
from specgen.kinds.sources.tfrecord import entries, images
from specgen.runtime.sources import record_problems, sizes
from specgen.runtime.sources.base import DataError, Source, Wanted, WorkerShare
from specgen.runtime.sources.context import SourceContext
from specgen.runtime.sources.decode import (
    OverBound,
    as_input,
    channels_of,
    check_header,
    decode_error,
    decode_image,
    undecodable,
)
from specgen.runtime.sources.framing import FramingError, compressed_as, offset_of, walk
from specgen.runtime.sources.tfrecord_cache import cached
from specgen.runtime.sources.tfrecord_files import GLOB, file_names, find_shards, opener, records, shard_name

if TYPE_CHECKING:
    import tensorflow as tf

# Records read back and parsed together while checking a shard: as many as fit in SCAN_BYTES (at least one),
# at most SCAN_RECORDS (enough that the per-call cost of small records is shared). A batch is held about four
# times over (the records, their copy into the parse, the parsed values, a numpy copy of one feature), so the
# pass holds about 64 MiB above one record, whatever the records' size.
SCAN_BYTES = 16 << 20
SCAN_RECORDS = 1024
SHOWN = 5  # skipped records named in the message


def read(context: SourceContext) -> Source:
    import tensorflow as tf

    model = getattr(context.loaded.spec.data, context.stage)
    for loc, message in clashes(context.loaded.spec.data):  # validate says it too; a spec built in code reaches here
        if loc[1] == context.stage:
            raise context.fail(loc[2:], message)
    sizes.resized(context, *kind_of(model).resized(model))
    shards = find_shards(context, model)
    spec, parse = _parser(context, model)
    wanted, named = context.expected(), len(shards) > 1 or any(c in entries(model)[0] for c in GLOB)
    scan = Scan(context, model, spec, wanted)
    counts = []  # records kept in each shard (for multi_worker's balanced shares: worker_share)
    for shard in shards:
        before = scan.count
        scan.shard(shard, f"shard {shard_name(context, shard)}, " if named else "")
        counts.append(scan.count - before)
    scan.say_skipped()
    files = tf.data.Dataset.from_tensor_slices(file_names(shards))
    train = context.training.train
    order_seed = train.seed if train is not None and _shuffles_files(context, shards) else None
    if order_seed is not None:
        # Shards in a seeded order, the same each epoch (the buffer reshuffles examples every epoch). Not reshuffled:
        # a reshuffling shuffle nested under training's reshuffling one does not restore exactly from a saved
        # iterator (TensorFlow 2.x; a resumed run diverged at 8 of 21 save points), which exact resume needs.
        # Before a cache too, which then holds the examples in this order: a cache only saves the reading, the
        # batches are those of the same spec without one (it is keyed to the seed, _settings).
        files = files.shuffle(len(shards), seed=order_seed, reshuffle_each_iteration=False)
    read_shard = opener(scan.skipped, shards, model.compression)
    dataset = files.interleave(read_shard, cycle_length=min(model.cycle_length, len(shards)), block_length=1,
                               num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).map(
        parse, num_parallel_calls=tf.data.AUTOTUNE)  # deterministic: the order is the order read
    settings = _settings(context, model, spec, scan.skipped) | {"shard_order_seed": order_seed}
    if model.cache == "memory":
        dataset = dataset.cache()
    elif model.cache is not None:
        dataset = cached(context, dataset, shards, settings, scan.count, tag=seed_tag(order_seed))
    split = functools.partial(worker_share, context, model, (shards, counts), files, read_shard, parse, settings)
    return Source(dataset, scan.count, tuple(shards), split=split)


def _settings(context: SourceContext, model: Any, spec: dict[str, Any], skipped: dict[Path, list[int]]) -> dict[str, Any]:
    """What the parsed examples depend on beyond the shards' bytes: a file cache is keyed to it (tfrecord_cache)."""
    inputs = {i.name: i for i in context.ir.inputs}
    return {"parse": {ref: [f.dtype.name, list(f.shape)] for ref, f in spec.items()},
            "names": {n: [section, ref if isinstance(ref, str) else list(ref)]
                      for n, (section, ref) in context.names().items()},
            "dtypes": {n: str(i.dtype) for n, i in inputs.items()},
            "images": {n: [f.size, channels_of(inputs[n])] for n, f in images(model).items() if n in inputs},
            "compression": model.compression, "cycle_length": model.cycle_length,
            "skipped": {os.fsdecode(s): sorted(i) for s, i in skipped.items() if i}}


def seed_tag(order_seed: int | None) -> str:
    """A file cache holds its examples in one seeded shard order: each `train.seed` has a family of its own
    (`<cache>.s<seed>.<key>`), so that runs or sweep trials with other seeds sharing the path keep theirs, never
    removing a complete cache another process may be reading."""
    return "" if order_seed is None else f"s{order_seed}."


def _shuffles_files(context: SourceContext, shards: list[Path]) -> bool:
    return context.stage == "train" and context.training.train is not None and len(shards) > 1


def assign(counts: list[int], workers: int) -> list[list[int]]:
    """Each worker's shards, as positions in the seeded shard order, balanced by record counts: the largest shard
    first to the worker holding the fewest records (ties: the earlier shard of the seeded order, then the lower
    worker), each worker's shards then read in the seeded order. A pure function of the counts (in that order) and
    the worker count, so every worker computes the same split and a resume the same one again; with shards of
    equal counts it is every `workers`-th shard (the split that keeps the one-process batches, docs/training.md)."""
    loads, mine = [0] * workers, [list[int]() for _ in range(workers)]
    for shard in sorted(range(len(counts)), key=lambda i: -counts[i]):  # a stable sort: ties keep the seeded order
        worker = min(range(workers), key=lambda w: (loads[w], w))
        mine[worker].append(shard)
        loads[worker] += counts[shard]
    return [sorted(shards) for shards in mine]


def worker_share(context: SourceContext, model: Any, shards: tuple[list[Path], list[int]], files: tf.data.Dataset,
                 read_shard: Any, parse: Any, settings: dict[str, Any], index: int, workers: int) -> WorkerShare:
    """Worker `index` of `workers` (under multi_worker): its shards of the seeded file order (the same on every
    worker) as `assign` balances them, from the counts alone; its dataset streams them like the whole source with
    cycle_length / workers shards open at once, so that with equal shards each global batch holds the one-process
    examples (docs/training.md says when). `shards`: every shard and the records it keeps."""
    order = [Path(os.fsdecode(p)) for p in files.as_numpy_iterator()]  # after the seeded shuffle, if any
    size, place = dict(zip(*shards, strict=True)), {shard: i for i, shard in enumerate(shards[0])}
    split = assign([size[s] for s in order], workers)
    mine = [order[i] for i in split[index]]
    cycle = min(model.cycle_length, len(size))
    examples = sum(size[s] for s in mine)
    build = functools.partial(_share_dataset, context, model, mine, (read_shard, parse), settings,
                              (cycle, examples), (index, workers))
    return WorkerShare(examples, tuple(mine), len(size), cycle, len(set(size.values())) == 1,
                       tuple(sum(size[order[i]] for i in worker) for worker in split),
                       tuple(tuple(place[order[i]] for i in worker) for worker in split), build)


def _share_dataset(context: SourceContext, model: Any, mine: list[Path], readers: tuple[Any, Any],
                   settings: dict[str, Any], sizes: tuple[int, int], worker: tuple[int, int]) -> tf.data.Dataset:
    """A worker's shards streamed (`readers`: the shard opener and the parser; `sizes`: the whole source's shards
    read at once and the share's examples; `worker`: its index and the worker count), cached as the source says."""
    import tensorflow as tf

    (read_shard, parse), (cycle, examples), (index, workers) = readers, sizes, worker
    dataset = tf.data.Dataset.from_tensor_slices(file_names(mine)).interleave(
        read_shard, cycle_length=max(cycle // workers, 1), block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if model.cache == "memory":
        return dataset.cache()
    if model.cache is None:
        return dataset
    share = {**settings, "worker": [index, workers]}  # one cache per worker: workers sharing cache files would clash
    tag = f"{seed_tag(settings['shard_order_seed'])}w{index}-of-{workers}."
    return cached(context, dataset, mine, share, examples, tag=tag)


def _parser(context: SourceContext, model: Any) -> tuple[dict[str, Any], Any]:
    import tensorflow as tf

    wanted, spec, names, pictures = context.expected(), {}, context.names(), images(model)
    for name, (_, ref) in names.items():
        if name in pictures:  # one encoded image: a bytes feature
            spec[ref] = tf.io.FixedLenFeature([], tf.string)
            continue
        want = wanted.get(name, Wanted((), "float"))
        context.refuse_named_dims(name, want.shape)  # a fixed-length feature has no length of its own
        spec[ref] = tf.io.FixedLenFeature(list(want.shape), tf.int64 if want.kind == "int" else tf.float32)
    inputs = {i.name: i for i in context.ir.inputs}

    def value(name: str, parsed: tf.Tensor) -> tf.Tensor:
        if name not in pictures:
            return tf.cast(parsed, inputs[name].dtype)
        size, channels = pictures[name].size, channels_of(inputs[name])  # validate: 1 or 3 (kinds/sources)
        return as_input(decode_image(parsed, size, channels), inputs[name].dtype)

    def parse(record: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        parsed = tf.io.parse_single_example(record, spec)
        features = {n: value(n, parsed[ref]) for n, (_, ref) in names.items() if n in inputs}
        labels = {n: parsed[ref] for n, (_, ref) in names.items() if n not in inputs}
        return features, labels

    return spec, parse


def scan_batch(largest: int) -> int:
    """Records the checking pass reads back together when the largest record holds `largest` bytes."""
    return max(1, min(SCAN_RECORDS, SCAN_BYTES // max(largest, 1)))


def _not_framed(shard: Path, exc: FramingError, compression: str) -> str:
    """What a frame that does not read says: the file is compressed (a first frame; with the key to set), or
    damaged."""
    found = compressed_as(shard) if compression == "none" and exc.index == 0 else None
    if found is None:
        return f"{exc}; the file is damaged or not a TFRecord file"
    return (f"the file is {found.upper()}-compressed (it starts with the {found} header) and the source reads it "
            f"uncompressed; set `compression: {found}` on the source")


def _readable(shard: Path, start: int, compression: str) -> int:
    """How many records after `start` read whole (the index of the bad one, for the message; error path only)."""
    import tensorflow as tf

    readable = 0
    try:
        for _ in records(compression)(os.fsencode(shard)).skip(start):
            readable += 1
    except tf.errors.DataLossError:
        pass
    return readable


class Scan:
    """The pass before the first step: every record parsed and checked a chunk at a time, the records kept
    counted, and (skip_bad) the records that do not parse or whose image does not decode set aside.

    What skip_bad skips is a record whose frame reads whole (its length and checksums are right) but whose
    content is wrong: not a tf.train.Example, a key missing or of the wrong type or length, an image that is
    not an image or does not decode. A frame that does not read (a truncated or corrupt shard: a wrong length
    leaves no way to find the next frame), a value that is wrong (NaN, a label out of range) and an image over
    max_pixels still stop the run.
    """

    def __init__(self, context: SourceContext, model: Any, spec: dict[str, Any], wanted: dict[str, Wanted]):
        self.context, self.model, self.spec, self.wanted = context, model, spec, wanted
        self.pictures = {name: ref for name, (_, ref) in context.names().items() if name in images(model)}
        self.channels = {i.name: channels_of(i) for i in context.ir.inputs if i.name in self.pictures}
        self.count = self.total = 0
        self.skipped: dict[Path, list[int]] = {}
        self.first_reason = ""  # which record skip_bad set aside first and why, said with the count

    def shard(self, shard: Path, where: str) -> None:
        """Frame one shard (framing.walk: no header may declare more than the file holds), then read it once
        through TensorFlow, a batch of at most SCAN_BYTES at a time (memory flat in the data's size and in the
        record's size beyond one record)."""
        import tensorflow as tf

        compression = self.model.compression
        try:
            frames = walk(shard, compression)
        except FramingError as exc:  # never skipped: after a bad frame nothing can be found (framing.py)
            raise self.context.fail((self.context.kind,), f"{where}{_not_framed(shard, exc, compression)}") from None
        except DataError as exc:  # compressed data that does not inflate; not a regular file any more
            raise self.context.fail((self.context.kind,), f"{where}{exc}") from None
        read = records(compression)(os.fsencode(shard)).batch(scan_batch(frames.largest))
        start, batches = 0, iter(read)
        while True:
            try:
                chunk = next(batches)
            except StopIteration:
                self.total += start
                return
            except tf.errors.DataLossError as exc:  # a record's checksum (framing.py leaves it to TensorFlow)
                index = start + _readable(shard, start, compression)
                offset = offset_of(shard, index, compression)
                at = "" if offset is None else f" (at byte {offset:,}{'' if compression == 'none' else ' inflated'})"
                raise self.context.fail((self.context.kind,), f"{where}cannot read record {index}{at}: "
                                        f"{record_problems.reason(exc)}; the file is damaged or not a TFRecord file") from None
            self._chunk(shard, chunk, start, where)
            start += int(chunk.shape[0])

    def say_skipped(self) -> None:
        """How many records skip_bad left out, and the first few (said, never silent)."""
        shown = [f"{shard_name(self.context, shard)} record {index}" for shard, indexes in self.skipped.items()
                 for index in sorted(indexes)][:SHOWN]
        if shown:
            skipped = sum(len(i) for i in self.skipped.values())
            print(f"data.{self.context.stage}: skipped {skipped} of {self.total} records that do not parse or whose "
                  f"image does not decode (skip_bad): {'; '.join(shown)}{'; ...' if skipped > SHOWN else ''}"
                  f"{self.first_reason}")

    def _skip(self, shard: Path, index: int) -> None:
        if index not in self.skipped.setdefault(shard, []):
            self.skipped[shard].append(index)

    def _chunk(self, shard: Path, records: tf.Tensor, start: int, where: str) -> None:
        parsed, kept = self._parse(shard, records, start, where)
        good = np.ones(len(kept), bool)
        for name, ref in self.pictures.items():
            def image_at(i: int, ref: str = ref) -> str:
                return f"{where}record {kept[i]}, key '{ref}'"

            good &= self._images(parsed[ref], self.channels[name], image_at)
        for shard_index in kept[~good]:
            self._skip(shard, int(shard_index))
        kept = kept[good]
        for name, (_, ref) in self.context.names().items():
            if name in self.wanted and name not in self.pictures:
                def value_at(n: str, index: tuple[int, ...], flat: int, ref: str = ref) -> str:
                    return f"{where}record {kept[index[0]]}, key '{ref}'" + (
                        f" (element {list(index[1:])})" if len(index) > 1 else "")

                self.context.check_values(name, parsed[ref].numpy()[good], self.wanted[name], value_at)
        self.count += len(kept)

    def _parse(self, shard: Path, records: tf.Tensor, start: int, where: str) -> tuple[dict[str, Any], np.ndarray]:
        """The batch parsed, and each parsed row's record index; a record that does not parse is an error, or
        skipped."""
        import tensorflow as tf

        # A record that is not an Example at all: TensorFlow's message quotes its bytes, and raises
        # UnicodeDecodeError instead when they are not text.
        unparsed, count = (tf.errors.InvalidArgumentError, UnicodeDecodeError), int(records.shape[0])
        try:
            return tf.io.parse_example(records, self.spec), np.arange(start, start + count)
        except unparsed:
            pass
        bad = []
        for offset in range(count):  # find the records, for the message
            try:
                tf.io.parse_single_example(records[offset], self.spec)
            except unparsed as exc:
                if not self.model.skip_bad or not self.first_reason:
                    why = record_problems.unparsed(exc, records[offset].numpy(), self.spec, self.context)
                if not self.model.skip_bad:  # the records before it are checked first: the first problem is named
                    if offset:                # (a bad image or value there), whichever check finds it
                        self._chunk(shard, records[:offset], start, where)
                    raise self.context.fail((self.context.kind,), f"{where}cannot parse record {start + offset}: "
                                            f"{why}") from None
                if not self.first_reason:
                    self._first(f"{where}record {start + offset} does not parse: {why}")
                bad.append(offset)
                self._skip(shard, start + offset)
        if not bad:
            raise self.context.fail((self.context.kind,), f"{where}cannot parse records {start} to "
                                    f"{start + count - 1}") from None
        keep = [o for o in range(count) if o not in bad]
        # int64 indices: an empty list (every record of the chunk bad) would otherwise become float32 ones
        kept = tf.gather(records, tf.constant(keep, tf.int64))
        return tf.io.parse_example(kept, self.spec), start + np.array(keep, np.int64)

    def _images(self, encoded: tf.Tensor, channels: int, where: Callable[[int], str]) -> np.ndarray:
        """Which encoded images pass their header check and decode; the others are an error, or skipped."""
        import tensorflow as tf

        blobs = encoded.numpy()
        good = np.ones(len(blobs), bool)
        for i, blob in enumerate(blobs):
            try:
                check_header(io.BytesIO(blob), self.model.max_pixels)
            except DataError as exc:
                if not self.model.skip_bad or isinstance(exc, OverBound):  # an image over the bound: never skipped
                    raise self.context.fail((self.context.kind,), f"{where(i)} {exc}") from None
                if not self.first_reason:
                    self._first(f"{where(i)} {exc}")
                good[i] = False
        checked = np.flatnonzero(good)
        for i in (checked[j] for j in undecodable(tf.gather(encoded, checked), channels)):
            if not self.model.skip_bad or not self.first_reason:
                why = decode_error(blobs[i], channels) or "does not decode"
            if not self.model.skip_bad:
                raise self.context.fail((self.context.kind,), f"{where(i)} does not decode: {why}; "
                                        "replace or drop the record (or set skip_bad: true on the source)")
            if not self.first_reason:
                self._first(f"{where(i)} does not decode: {why}")
            good[i] = False
        return good

    def _first(self, reason: str) -> None:
        """The first record set aside, with its reason: said after the count, so a whole source skipped for one
        cause (a key of the other list kind in every record) says the cause."""
        self.first_reason = f" (the first found: {reason})"
