"""The `tfrecord` reader: `tf.train.Example` records, read once up front to count and check them, then streamed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specgen.runtime.sources.base import Source, Wanted
from specgen.runtime.sources.context import SourceContext

if TYPE_CHECKING:
    import tensorflow as tf

SCAN_CHUNK = 1024  # records parsed together while checking a file


def read(context: SourceContext) -> Source:
    import tensorflow as tf

    context.require_file()
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

    dataset = tf.data.TFRecordDataset(str(context.path))
    count = _scan(context, dataset, spec, wanted)
    return Source(dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE), count)


def _scan(context: SourceContext, dataset: tf.data.Dataset, spec: dict[str, Any], wanted: dict[str, Wanted]) -> int:
    """Read every record once, parse and check it in chunks; the number of records.

    A full pass costs one epoch's reading, and buys what a stream cannot: a bad value or
    a bad record is reported with its record number before the first step, not mid-run.
    """
    import tensorflow as tf

    count, chunk = 0, []
    try:
        for record in dataset:
            chunk.append(record.numpy())
            if len(chunk) == SCAN_CHUNK:
                count = _check_chunk(context, chunk, count, spec, wanted)
                chunk = []
    except tf.errors.DataLossError as exc:
        raise context.fail((context.kind,), f"cannot read record {count + len(chunk)}: "
                           f"{exc.message.splitlines()[0]}; the file is damaged or not a TFRecord file") from None
    return _check_chunk(context, chunk, count, spec, wanted) if chunk else count


def _check_chunk(context: SourceContext, chunk: list[bytes], start: int, spec: dict[str, Any],
                 wanted: dict[str, Wanted]) -> int:
    import tensorflow as tf

    try:
        parsed = tf.io.parse_example(tf.constant(chunk), spec)
    except tf.errors.InvalidArgumentError:
        for offset, record in enumerate(chunk):  # find the record, for the message
            try:
                tf.io.parse_single_example(record, spec)
            except tf.errors.InvalidArgumentError as exc:
                raise context.fail((context.kind,), f"cannot parse record {start + offset}: "
                                   f"{exc.message.splitlines()[0]}") from None
        raise context.fail((context.kind,), f"cannot parse records {start} to {start + len(chunk) - 1}") from None
    for name, (_, ref) in context.names().items():
        if name in wanted:
            context.check_values(name, parsed[ref].numpy(), wanted[name],
                                 lambda n, index, flat, ref=ref: f"record {start + index[0]}, key '{ref}'"
                                 + (f" (element {list(index[1:])})" if len(index) > 1 else ""))
    return start + len(chunk)
