"""Datasets from the spec's `data` section through tf.data, checked before training starts.

The shared pipeline; it never names a source kind. Each kind's reader is its own module of
specgen/runtime/sources/ (named by the kind's `SourceDef.reader` in specgen/kinds/sources), read
through one interface: `read(SourceContext) -> Source`, a dataset of examples and its size. Here the
stage's reader is looked up and run, the size is checked, and the examples are batched, shuffled with
the spec's seed and repeated into the iterator that checkpoints save (so a resumed run continues
bit-identically). Distribution slices the global batches this builds (runtime/placement/replicas.py); under
`multi_worker` a sharded source gives each worker its own files instead (`for_worker`).

An epoch is one pass over the training data, defined here once (`updates_per_pass`) and built into the
pipeline: a pass is shuffled, cut into full batches (the rows of a partial last batch are left out of that
pass) and, with `train.accumulate: K`, cut again into whole updates of K micro-batches (the micro-batches that
fill no whole update are left out of that pass the same way). The next pass reshuffles, so with a shuffle
other rows are left out each pass. An update therefore never reads a row twice nor mixes two passes, and the
loop's epoch ends (Session.updates_per_epoch) fall on pass ends.

TensorFlow is imported only where a dataset is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.model import ModelIR
from specgen.kinds import augment, pointers
from specgen.kinds.features import accumulate
from specgen.kinds.sources import REGISTRY
from specgen.paths import shown
from specgen.runtime.sources.base import DataError, Source, WorkerShare
from specgen.runtime.sources.context import SourceContext
from specgen.spec.load import LoadedSpec

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["DataError", "Source", "WorkerData", "eval_batches", "for_worker", "from_pipeline", "read_stage",
           "training_batches", "unreadable_mid_run", "updates_per_pass"]


def reader(kind: str) -> Callable[[SourceContext], Source]:
    """The runtime function a source kind's registry entry points at."""
    function: Callable[[SourceContext], Source] = pointers.resolve(REGISTRY[kind].reader)
    return function


def read_stage(loaded: LoadedSpec, ir: ModelIR, stage: str) -> Source | None:
    """One stage's checked data; None when the spec has no source for it. `loaded` places the errors."""
    if ir.training is None or stage not in ir.training.data:
        return None
    context = SourceContext(loaded, ir, stage)
    source = reader(context.kind)(context)
    context.enough(source.examples)
    if stage == "train":
        _refuse_empty_pass(loaded, ir, source.examples)
    data = loaded.spec.data
    if stage == "train":
        from specgen.runtime.augment.source import for_source  # imports Keras: only where data is read

        source.augment = for_source(context, source)
    elif data is not None and augment.at_eval(getattr(data.train, "augment", None)):  # train's random_crop acts at eval
        from specgen.runtime.augment.source import for_eval

        source.dataset = for_eval(context, source)
    return source


def updates_per_pass(examples: int, batch: int, micro_batches: int = 1) -> int:
    """The updates of one pass (an epoch): its full batches cut into whole updates of `micro_batches` each."""
    return examples // batch // micro_batches


def _refuse_empty_pass(loaded: LoadedSpec, ir: ModelIR, examples: int) -> None:
    """A pass must hold one whole update: with fewer full batches than train.accumulate an epoch would be none."""
    assert ir.training is not None and ir.training.train is not None
    train = ir.training.train
    micro, batch = accumulate.of(train), train.batch_size or examples
    if updates_per_pass(examples, batch, micro) == 0:
        size = f"{batch}" if train.batch_size else f"full ({batch})"
        raise SpecError([loaded.diagnostic(("train", "accumulate"), (
            f"train.accumulate {micro} x train.batch_size {size} = {micro * batch} examples per update, more than "
            f"the {examples} training examples: an epoch (one pass) holds no whole update; lower train.accumulate "
            "or train.batch_size"))])


def training_batches(source: Source, batch: int, seed: int, buffer: int, micro_batches: int = 1) -> tf.data.Dataset:
    """Shuffled with the spec's seed, full batches only, each pass cut to whole updates of `micro_batches`
    (train.accumulate; see the module docstring), repeated, augmented when declared (its draws count the batches
    after `repeat`, so they are part of the iterator that checkpoints save)."""
    import tensorflow as tf

    batches = (source.dataset.shuffle(min(buffer, max(source.examples, 1)), seed=seed, reshuffle_each_iteration=True)
               .batch(batch, drop_remainder=True))
    full = source.examples // batch
    # Cut only where a pass ends mid-update: every other pipeline, and the iterators saved from it, stays as it was.
    # A multi_worker share of unequal shards may hold less than one update where the whole set holds one (read_stage
    # checked the whole set): that worker's updates read on into its next pass, as every update did before the cut.
    if full % micro_batches and full >= micro_batches:
        batches = batches.take(updates_per_pass(source.examples, batch, micro_batches) * micro_batches)
    batches = batches.repeat()
    return (source.augment(batches) if source.augment else batches).prefetch(tf.data.AUTOTUNE)


@dataclass(frozen=True)
class WorkerData:
    """What one worker of a multi_worker run trains on: its source, its batch and the line that says how."""

    source: Source
    batch: int  # this worker's batches (the global batch when every worker reads everything)
    sharded: bool  # True: disjoint files per worker; False: every worker reads all and keeps its replicas' slices
    note: str


def for_worker(source: Source, name: str, index: int, workers: int, batch: int, buffer: int) -> WorkerData:
    """Worker `index` of `workers`: its disjoint share of the files when the source has at least one per worker
    (batches of batch / workers), else all of it (the fallback). `name`: the source, for the note."""
    count = len(source.files) or 1
    if source.split is None or count < workers:
        why = ("its kind is not sharded by file" if source.split is None
               else f"{count} shard(s) for {workers} workers: fewer than one each")
        return WorkerData(source, batch, False, f"data.train: each of the {workers} workers reads all of {name} ({why}) "
                          "and keeps its replicas' slices of each global batch")
    share = source.split(index, workers)
    names = ", ".join(f.name for f in share.files)
    inexact = _inexact(source, share, workers, buffer)
    how = ("each global batch holds the one-process examples" if not inexact
           else f"deterministic for this worker count, not the one-process order ({inexact})")
    return WorkerData(replace(source, dataset=share.dataset, examples=share.examples, files=share.files),
                      batch // workers, True, f"data.train: file-sharded: worker {index} of {workers} reads "
                      f"{len(share.files)} of {share.shards} shards ({names}), {share.examples} examples, batches of "
                      f"{batch // workers} of the global {batch}; {how}")


def _inexact(source: Source, share: WorkerShare, workers: int, buffer: int) -> str:
    """Why a file-sharded run does not see the one-process batches, "" when it does (docs/training.md)."""
    return "; ".join(why for bad, why in (
        (source.augment is not None, "augmentation draws for each worker's batch"),
        (buffer != 1, f"train.shuffle_buffer {buffer} shuffles records within each worker"),
        (not share.equal, "the shards hold different numbers of records"),
        (share.shards % workers != 0, f"{share.shards} shards do not divide among {workers} workers"),
        (share.cycle % workers != 0, f"{share.cycle} shards read at once do not divide among {workers} workers"))
        if bad)


def eval_batches(source: Source, batch: int) -> tf.data.Dataset:
    import tensorflow as tf

    return source.dataset.batch(batch).prefetch(tf.data.AUTOTUNE)


# Where an error comes from: TensorFlow names the op that raised it in its message. A tf.data error reaches the
# training step through the iterator's get_next (`[[while/IteratorGetNext]]` inside the graph of updates,
# `[Op:IteratorGetNext]` where Python calls next(), `MultiDeviceIteratorGetNextFromShard` under a strategy), and
# one raised inside a dataset's own function says `... transformation with iterator: Iterator::Root::...`. An error
# of the model's step (a MatMul, an assert) names its own node and none of these.
_PIPELINE = re.compile(r"\[\[(?:\{\{node )?[\w/]*IteratorGetNext\w*(?:\}\})?\]\]|\[Op:\w*IteratorGetNext\w*\]"
                       r"|transformation with iterator: Iterator::")
# What a data file changed, removed or made unreadable while training reads raises through the pipeline: a file
# gone (NotFound), not permitted (PermissionDenied), bytes that no longer decode or parse (InvalidArgument), a
# checksum or a frame (DataLoss), a file cut short (OutOfRange: the training iterator repeats, so it has no normal
# end; an eval pass's end is StopIteration, never raised), a file that is no longer what it was (FailedPrecondition).
_DATA_ERRORS = ("NotFoundError", "PermissionDeniedError", "InvalidArgumentError", "DataLossError", "OutOfRangeError",
                "FailedPreconditionError")


def from_pipeline(exc: Exception) -> bool:
    """Whether a TensorFlow error was raised by the input pipeline (the iterator's get_next or a dataset's ops), and
    is of a kind a data file that changed while training causes; an error of the model's step is not."""
    import tensorflow as tf

    kinds = tuple(getattr(tf.errors, name) for name in _DATA_ERRORS)
    return isinstance(exc, kinds) and bool(_PIPELINE.search(str(getattr(exc, "message", ""))))


def pipeline_reason(message: str) -> str:
    """TensorFlow's reason in a pipeline error, without its wrapping (the op names, the transformation and iterator
    path, the graph's node lines), a file it names shown as the user wrote it (relative to the working folder)."""
    kept = [line.strip() for line in message.splitlines()
            if line.strip() and not line.lstrip().startswith(("[[", "Detected at node", "<stack traces", "File \""))
            and line.strip() != "Graph execution error:"]
    text = re.sub(r"^.*? transformation with iterator: \S+: ", "", " ".join(kept) or message)
    text = re.sub(r"\s*\[Op:[^\]]*\](?: name:\s*\S*)?\s*$", "", text).strip()
    named = re.fullmatch(r"([^;]*/[^;]*); (.+)", text)  # `<path>; No such file or directory` (NotFound, PermissionDenied)
    if named:
        text = f"{shown(named[1])}: {named[2]}"
    return text[:300] or "no reason given"


def unreadable_mid_run(loaded: LoadedSpec, ir: ModelIR, exc: Exception, folder: Path) -> SpecError:
    """A data file that could not be read during training (the data passed its checks before the first step, so a
    file changed since): the stages are read and checked again, which names the file (and the record or image);
    when they now pass, one line with TensorFlow's reason and the file it names. Either way the line ends with
    where the run stands (`folder`: the run folder): its newest checkpoint, whole (saves are atomic), and how to
    go on."""
    from specgen.runtime.checkpoint import CheckpointFolder  # imports TensorFlow

    newest = CheckpointFolder(folder, 1).newest()[0]
    advice = (f"training stopped; the newest checkpoint, {shown(newest)}, is whole: restore or fix the file, then "
              "continue with --resume" if newest is not None else
              "training stopped before its first checkpoint: fix the data, then start the run again")
    for stage in ("train", "eval"):
        try:
            read_stage(loaded, ir, stage)
        except SpecError as found:
            return SpecError([replace(d, message=f"{d.message}; {advice}") for d in found.diagnostics])
    reason = pipeline_reason(str(getattr(exc, "message", exc)))
    return SpecError([Diagnostic(loaded.display, None, f"a data file could not be read during training ({reason}); "
                                 f"the data passed its checks before the first step, so a file changed while "
                                 f"training ran; {advice}")])
