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
filtered out by their number in their shard; runtime/data.py shuffles and batches.
"""

from __future__ import annotations

import functools
import glob
import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specgen.kinds.sources.tfrecord import entries, images
from specgen.paths import shown
from specgen.runtime.sources.base import MISSING, REGULAR, DataError, Source, Wanted, WorkerShare, file_kind
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
from specgen.runtime.sources.framing import FramingError, offset_of, walk

if TYPE_CHECKING:
    import tensorflow as tf

# Records read back and parsed together while checking a shard: as many as fit in SCAN_BYTES (at least one),
# at most SCAN_RECORDS (enough that the per-call cost of small records is shared). A batch is held about four
# times over (the records, their copy into the parse, the parsed values, a numpy copy of one feature), so the
# pass holds about 64 MiB above one record, whatever the records' size.
SCAN_BYTES = 16 << 20
SCAN_RECORDS = 1024
GLOB = "*?["  # characters that make an entry a glob
SHOWN = 5  # skipped records named in the message


def read(context: SourceContext) -> Source:
    import tensorflow as tf

    model = getattr(context.loaded.spec.data, context.stage)
    shards = find_shards(context, model)
    spec, parse = _parser(context, model)
    wanted, named = context.expected(), len(shards) > 1 or any(c in entries(model)[0] for c in GLOB)
    scan = Scan(context, model, spec, wanted)
    counts = []  # records kept in each shard (for multi_worker's shares: worker_share)
    for shard in shards:
        before = scan.count
        scan.shard(shard, f"shard {_name(context, shard)}, " if named else "")
        counts.append(scan.count - before)
    scan.say_skipped()
    files = tf.data.Dataset.from_tensor_slices(_names(shards))
    train = context.training.train
    if train is not None and _shuffles_files(context, model, shards):
        # Shards in a seeded order, the same each epoch (the buffer reshuffles examples every epoch). Not reshuffled:
        # a reshuffling shuffle nested under training's reshuffling one does not restore exactly from a saved
        # iterator (TensorFlow 2.x; a resumed run diverged at 8 of 21 save points), which exact resume needs.
        files = files.shuffle(len(shards), seed=train.seed, reshuffle_each_iteration=False)
    opener = _opener(scan.skipped, shards)
    records = files.interleave(opener, cycle_length=min(model.cycle_length, len(shards)),
                               block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)  # deterministic: the order is the order read
    if model.cache is not None:
        dataset = dataset.cache("" if model.cache == "memory" else os.fsencode(context.loaded.folder / model.cache))
    split = functools.partial(worker_share, context, model, (shards, counts), files, opener, parse)
    return Source(dataset, scan.count, tuple(shards), split=split)


def _shuffles_files(context: SourceContext, model: Any, shards: list[Path]) -> bool:
    return context.stage == "train" and context.training.train is not None and model.cache is None and len(shards) > 1


def worker_share(context: SourceContext, model: Any, shards: tuple[list[Path], list[int]], files: tf.data.Dataset,
                 opener: Any, parse: Any, index: int, workers: int) -> WorkerShare:
    """Worker `index` of `workers` (under multi_worker): shards index, index + workers, ... of the seeded file order
    (the same on every worker), streamed like the whole source with cycle_length / workers shards open at once, so
    that with equal shards each global batch holds the one-process examples (docs/training.md says when).
    `shards`: every shard and the records it keeps."""
    import tensorflow as tf

    order = [Path(os.fsdecode(p)) for p in files.as_numpy_iterator()]  # after the seeded shuffle, if any
    mine, size = order[index::workers], dict(zip(*shards, strict=True))
    cycle = min(model.cycle_length, len(size))
    records = tf.data.Dataset.from_tensor_slices(_names(mine)).interleave(
        opener, cycle_length=max(cycle // workers, 1), block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True)
    dataset = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if model.cache is not None:  # one cache per worker: workers sharing a cache file would clash
        where = "" if model.cache == "memory" else f"{context.loaded.folder / model.cache}.w{index}-of-{workers}"
        dataset = dataset.cache(os.fsencode(where))
    return WorkerShare(dataset, sum(size[s] for s in mine), tuple(mine), len(size), cycle, len(set(size.values())) == 1)


def _names(paths: list[Path]) -> list[bytes]:
    """File names as TensorFlow takes them: the bytes on disk (a str with bytes that are not UTF-8, as Python
    holds such a name, does not convert to a tf.string)."""
    return [os.fsencode(p) for p in paths]


def _opener(skipped: dict[Path, list[int]], shards: list[Path]) -> Any:
    """Shard path -> its records, less the records the checks skipped (skip_bad): each record is numbered in
    its shard (as the checks numbered it) and dropped when (shard, number) is in one sorted table of keys.
    enumerate and filter keep their positions in a saved iterator, so resuming stays exact."""
    import tensorflow as tf

    if not any(skipped.values()):
        return tf.data.TFRecordDataset
    paths = tf.constant(_names(shards))  # a shard's number: its position here (stateless ops only, so
    # the pipeline serializes into a checkpoint, which a lookup table's resource would not)
    keys = tf.constant(sorted(i * 2**32 + r for i, s in enumerate(shards) for r in skipped.get(s, [])), tf.int64)

    def open_shard(path: tf.Tensor) -> tf.data.Dataset:
        shard = tf.argmax(tf.cast(tf.equal(paths, path), tf.int64)) * 2**32

        def kept(index: tf.Tensor, _: tf.Tensor) -> tf.Tensor:
            at = tf.minimum(tf.searchsorted(keys, tf.reshape(shard + index, [1]))[0], len(keys) - 1)
            return tf.not_equal(keys[at], shard + index)

        return tf.data.TFRecordDataset(path).enumerate().filter(kept).map(lambda _, record: record)

    return open_shard


def find_shards(context: SourceContext, model: Any) -> list[Path]:
    """Every file the entries name, in order (a glob's matches sorted), each once; a positioned error for an
    entry that names no file, or names something that is not a regular file (a FIFO, a device, a folder: each
    refused by what it is, found without opening it)."""
    listed = isinstance(model.tfrecord, list)
    shards: list[Path] = []
    for index, entry in enumerate(entries(model)):
        loc = (context.kind, index) if listed else (context.kind,)
        path = context.loaded.folder / entry
        if any(c in entry for c in GLOB):
            found = sorted(Path(p) for p in glob.glob(str(path)))
            if not found:
                raise context.fail(loc, f"the glob '{entry}' matches no file; expected .tfrecord shards relative to "
                                   "the spec's folder")
            for match in found:
                if (what := file_kind(match)) != REGULAR:
                    raise context.fail(loc, f"the glob '{entry}' matches {_name(context, match)}, which is {what}, "
                                       "not a regular file; expected .tfrecord shards (narrow the glob)")
        elif (what := file_kind(path)) == MISSING:
            raise context.fail(loc, f"no such file: '{entry}'; expected a .tfrecord file relative to the spec's folder")
        elif what != REGULAR:
            raise context.fail(loc, f"'{entry}' is {what}, not a regular file; expected a .tfrecord file")
        else:
            found = [path]
        shards += [f for f in found if f not in shards]
    return shards


def _name(context: SourceContext, shard: Path) -> str:
    """A shard as messages show it: relative to the spec's folder when under it, escaped (paths.shown)."""
    try:
        return shown(shard.relative_to(context.loaded.folder))
    except ValueError:
        return shown(shard)


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


def _unparsed(exc: Exception, record: bytes, spec: dict[str, Any]) -> str:
    """Why a record does not parse: read from the record itself where it is a tf.train.Example (the key
    missing, of the other list kind, of another length), else TensorFlow's reason."""
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(record)
    except Exception:  # protobuf's DecodeError: TensorFlow's message would quote the record's bytes
        return "it is not a tf.train.Example"
    for key, feature in spec.items():
        if (why := _feature_problem(example, key, feature)) is not None:
            return why
    return _reason(exc)


# The tf.train.Example list each parsed dtype reads. A float input reads a float_list only: TensorFlow's
# parser takes one list kind per key, and a writer that stored a float input as int64 disagrees with the spec
# on every record, which skip_bad would otherwise take for damage one record at a time.
_LISTS = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}
_FIX = {"float_list": "write the key as a float_list (tf.train.FloatList), or declare the input or label with an "
                      "integer dtype",
        "int64_list": "write the key as an int64_list (tf.train.Int64List), or declare the input or label float32",
        "bytes_list": "write the encoded image as a bytes_list"}


def _a(held: str | None) -> str:
    return "no list" if held is None else f"{'an' if held[0] in 'aeiou' else 'a'} {held}"


def _feature_problem(example: Any, key: str, feature: Any) -> str | None:
    """What is wrong with one key of a parsed Example against the FixedLenFeature the spec reads it as."""
    want = _LISTS[feature.dtype.name]
    if key not in example.features.feature:
        return f"it has no key '{key}'"
    held = example.features.feature[key].WhichOneof("kind")
    if held != want:
        return f"key '{key}' holds {_a(held)}, and the spec reads it as {_a(want)}: {_FIX[want]}"
    values, size = len(getattr(example.features.feature[key], held).value), int(np.prod(feature.shape))
    if values != size:
        return f"key '{key}' holds {values} value(s), and the spec reads {size} (shape {list(feature.shape)})"
    return None


def _reason(exc: Any) -> str:
    """TensorFlow's reason without the op and function names it wraps around it."""
    line = re.sub(r"\{\{[^}]*\}\}\s*", "", exc.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", line).strip()


def scan_batch(largest: int) -> int:
    """Records the checking pass reads back together when the largest record holds `largest` bytes."""
    return max(1, min(SCAN_RECORDS, SCAN_BYTES // max(largest, 1)))


def _readable(shard: Path, start: int) -> int:
    """How many records after `start` read whole (the index of the bad one, for the message; error path only)."""
    import tensorflow as tf

    readable = 0
    try:
        for _ in tf.data.TFRecordDataset(os.fsencode(shard)).skip(start):
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

        try:
            frames = walk(shard)
        except FramingError as exc:  # never skipped: after a bad frame nothing can be found (framing.py)
            raise self.context.fail((self.context.kind,), f"{where}{exc}; the file is damaged or not a TFRecord "
                                    "file") from None
        except DataError as exc:  # no longer a regular file (replaced since find_shards looked)
            raise self.context.fail((self.context.kind,), f"{where}{exc}") from None
        start, batches = 0, iter(tf.data.TFRecordDataset(os.fsencode(shard)).batch(scan_batch(frames.largest)))
        while True:
            try:
                chunk = next(batches)
            except StopIteration:
                self.total += start
                return
            except tf.errors.DataLossError as exc:  # a record's checksum (framing.py leaves it to TensorFlow)
                index = start + _readable(shard, start)
                at = "" if (offset := offset_of(shard, index)) is None else f" (at byte {offset:,})"
                raise self.context.fail((self.context.kind,), f"{where}cannot read record {index}{at}: "
                                        f"{_reason(exc)}; the file is damaged or not a TFRecord file") from None
            self._chunk(shard, chunk, start, where)
            start += int(chunk.shape[0])

    def say_skipped(self) -> None:
        """How many records skip_bad left out, and the first few (said, never silent)."""
        shown = [f"{_name(self.context, shard)} record {index}" for shard, indexes in self.skipped.items()
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
                    why = _unparsed(exc, records[offset].numpy(), self.spec)
                if not self.model.skip_bad:
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
