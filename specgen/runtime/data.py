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
fill no whole update are left out of that pass the same way). Other rows are left out each pass: a shuffle
whose buffer holds the whole pass reshuffles it, and with a smaller buffer (which cannot bring the stream's last
rows to its front) the positions left out rotate from pass to pass (`_rotated`), so every row is trained on over
the passes. An update therefore never reads a row twice nor mixes two passes, and the loop's epoch ends
(Session.updates_per_epoch) fall on pass ends; a multi_worker share's pass is cut to the whole set's updates, so
they fall on every worker's pass ends too (`for_worker`).

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

__all__ = ["DataError", "Source", "WorkerData", "eval_batches", "for_worker", "from_pipeline", "left_out",
           "pass_updates", "read_stage", "rotates", "training_batches", "unreadable_mid_run", "updates_per_pass"]


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

    updates = pass_updates(source, batch, micro_batches)
    shuffled = source.dataset.shuffle(min(buffer, max(source.examples, 1)), seed=seed, reshuffle_each_iteration=True)
    if rotates(source, batch, micro_batches, buffer):
        left = left_out(source, batch, micro_batches)
        batches = _rotated(shuffled, source.examples, left).batch(batch, drop_remainder=True)
    else:
        batches = shuffled.batch(batch, drop_remainder=True)
        # Cut only where a pass ends mid-update or a multi_worker share holds more than the whole set's pass: every
        # other pipeline, and the iterators saved from it, stays as it was.
        if updates and source.examples // batch > updates * micro_batches:
            batches = batches.take(updates * micro_batches)
        batches = batches.repeat()
    return (source.augment(batches) if source.augment else batches).prefetch(tf.data.AUTOTUNE)


def pass_updates(source: Source, batch: int, micro_batches: int = 1) -> int:
    """The updates a pass of `source` holds: its own, or a multi_worker share's cut to the whole set's (for_worker)."""
    own = updates_per_pass(source.examples, batch, micro_batches)
    return own if source.pass_updates is None else source.pass_updates


def rotates(source: Source, batch: int, micro_batches: int, buffer: int) -> bool:
    """Whether a pass leaves examples out at positions that move from pass to pass (`_rotated`), the rule
    training_batches builds and `specgen data` states: some are left out, and the shuffle `buffer`, smaller than the
    pass, cannot move the stream's last examples to its front, so a fixed cut would leave the same ones out of every
    pass (the file and row order is fixed, for exact resume)."""
    return bool(left_out(source, batch, micro_batches)) and buffer < source.examples


def left_out(source: Source, batch: int, micro_batches: int = 1) -> int:
    """Examples a pass reads in no update (the partial batch, the micro-batches of no whole update, a share's
    excess over the whole set's pass); 0 when the source has no whole update (the refusal's case)."""
    updates = pass_updates(source, batch, micro_batches)
    return source.examples - updates * micro_batches * batch if updates else 0


def _rotated(shuffled: tf.data.Dataset, examples: int, left: int) -> tf.data.Dataset:
    """The passes of `shuffled` repeated, `left` examples of each left out at positions that move from pass to pass:
    pass p leaves out positions [start, start + left) (mod examples), start = examples - left * (p + 1) (mod
    examples), so pass 0 leaves out its last `left`, as a plain cut does, and each later pass the `left` before the
    last pass's, round the pass: every position is left out equally often, and every example of a fixed order is
    trained on. Stateless but for `enumerate`'s count, which a saved iterator holds: a resume continues exactly."""
    import tensorflow as tf

    size = tf.constant(examples, tf.int64)

    def kept(index: tf.Tensor, _: object) -> tf.Tensor:
        turn = (index // size + 1) % size  # (p + 1) mod examples: the product below stays within int64
        start = (size - turn * left % size) % size
        return (index % size - start) % size >= left

    return shuffled.repeat().enumerate().filter(kept).map(lambda _, example: example)


@dataclass(frozen=True)
class WorkerData:
    """What one worker of a multi_worker run trains on: its source, its batch and the line that says how."""

    source: Source
    batch: int  # this worker's batches (the global batch when every worker reads everything)
    note: str
    # The shares, when each worker reads its own files; None when every worker reads all and keeps its replicas'
    # slices, and then `why` says why (a checkpoint whose workers read shares resumes as a new pass, naming it).
    share: WorkerShare | None
    why: str = ""

    @property
    def sharded(self) -> bool:
        return self.share is not None


# How much more often a record of the smallest share may be trained on than one of the largest before the workers
# read all the data instead of their shares (for_worker). Not a refusal: reading all is correct, only slower (each
# worker reads W times its share), while a spec refused here would not run at all. Not silent either: shares within
# it are stated, with their factor, on the startup line; beyond it the data's distribution would shift visibly.
# The common N equal shards, N no multiple of W (5 over 2: shares of 3 and 2 shards) falls back whatever this bound:
# a share of 2 cannot give the half of the set a worker reads a pass, so it would read its records twice a pass (1.5x
# as often as the other share's), training a model of another data set. Reading all is the one-process run at W
# times a share's reading, which the startup line states with the way to get shares; splitting a shard's records
# among workers would cut that, at the price of the one-process batches and of a new position format.
MAX_OVERSAMPLING = 1.1


def for_worker(source: Source, name: str, index: int, workers: int, batch: int, buffer: int,
               micro_batches: int = 1) -> WorkerData:
    """Worker `index` of `workers`: its disjoint share of the files when the source has at least one per worker and
    the shares balance (batches of batch / workers, each pass cut to the whole set's updates), else all of it (the
    fallback). `name`: the source, for the note; `micro_batches`: train.accumulate."""
    count = len(source.files) or 1
    share = source.split(index, workers) if source.split is not None and count >= workers else None
    updates = updates_per_pass(source.examples, batch, micro_batches)
    why = ("its kind is not sharded by file" if source.split is None
           else f"{count} shard(s) for {workers} workers: fewer than one each" if share is None
           else _unbalanced(share, updates * micro_batches * (batch // workers)))
    if share is None or why:
        # Shards that do not balance: say what reading all costs, and how to get the shares.
        cost = (f", reading {workers}x the records of a share; shards of equal record counts, a multiple of {workers} "
                "of them, are split" if share is not None else "")
        return WorkerData(source, batch, f"data.train: each of the {workers} workers reads all of {name} ({why}) "
                          f"and keeps its replicas' slices of each global batch{cost}", None, why)
    names = ", ".join(f.name for f in share.files)
    inexact = _inexact(source, share, workers, buffer)
    how = ("each global batch holds the one-process examples" if not inexact
           else f"deterministic for this worker count, not the one-process order ({inexact})")
    # Built only now: a fallback above reads no share, and fills no file cache for one.
    return WorkerData(replace(source, dataset=share.build(), examples=share.examples, files=share.files,
                              pass_updates=updates), batch // workers,
                      f"data.train: file-sharded: worker {index} of {workers} reads {len(share.files)} of "
                      f"{share.shards} shards ({names}), {share.examples} examples{_balance(share, updates)}, "
                      f"batches of {batch // workers} of the global {batch}; {how}", share)


def _unbalanced(share: WorkerShare, need: int) -> str:
    """Why the shares cannot stand for the whole set (the workers then read all of it), "" when they can: each must
    hold the whole set's pass (`need` examples each worker reads a pass) and none may be read MAX_OVERSAMPLING
    times as often as another."""
    low, high = min(share.shares), max(share.shares)
    split = (f"{share.shards} shards whose records do not balance among {len(share.shares)} workers: the balanced "
             f"split's shares hold {low} to {high} examples")
    if low < need:
        return f"{split}, and each worker reads {need} a pass"
    if high > low * MAX_OVERSAMPLING:
        return (f"{split}, so a record of the smallest would be trained on {high / low:.2f}x as often as one of the "
                f"largest (at most {MAX_OVERSAMPLING:.2f}x)")
    return ""


def _balance(share: WorkerShare, updates: int) -> str:
    """What the note adds when the shares differ: how they are read and the over-sampling that remains."""
    low, high = min(share.shares), max(share.shares)
    if low == high:
        return ""
    return (f" (the shares hold {low} to {high}: each worker's pass is the whole set's {updates} updates, so a "
            f"record of the smallest share is trained on {high / low:.2f}x as often as one of the largest)")


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
