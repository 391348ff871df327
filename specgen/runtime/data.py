"""Datasets from the spec's `data` section through tf.data, checked before training starts.

The shared pipeline; it never names a source kind. Each kind's reader is its own module of
specgen/runtime/sources/ (named by the kind's `SourceDef.reader` in specgen/kinds/sources), read
through one interface: `read(SourceContext) -> Source`, a dataset of examples and its size. Here the
stage's reader is looked up and run, the size is checked, and the examples are batched, shuffled with
the spec's seed and repeated into the iterator that checkpoints save (so a resumed run continues
bit-identically). Distribution slices the global batches this builds (runtime/distribute.py).

TensorFlow is imported only where a dataset is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.model import ModelIR
from specgen.kinds import augment, pointers
from specgen.kinds.sources import REGISTRY
from specgen.runtime.sources.base import DataError, Source
from specgen.runtime.sources.context import SourceContext
from specgen.spec.load import LoadedSpec

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["DataError", "Source", "eval_batches", "read_stage", "training_batches", "unreadable_mid_run"]


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
        from specgen.runtime.augment.source import for_source  # imports Keras: only where data is read

        source.augment = for_source(context, source)
    elif augment.at_eval(getattr(loaded.spec.data.train, "augment", None)):  # a train random_crop acts at eval too
        from specgen.runtime.augment.source import for_eval

        source.dataset = for_eval(context, source)
    return source


def training_batches(source: Source, batch: int, seed: int, buffer: int) -> tf.data.Dataset:
    """Shuffled with the spec's seed, full batches only, repeated, augmented when declared (its draws count
    the batches after `repeat`, so they are part of the iterator that checkpoints save)."""
    import tensorflow as tf

    batches = (source.dataset.shuffle(min(buffer, max(source.examples, 1)), seed=seed, reshuffle_each_iteration=True)
               .batch(batch, drop_remainder=True).repeat())
    return (source.augment(batches) if source.augment else batches).prefetch(tf.data.AUTOTUNE)


def eval_batches(source: Source, batch: int) -> tf.data.Dataset:
    import tensorflow as tf

    return source.dataset.batch(batch).prefetch(tf.data.AUTOTUNE)


def unreadable_mid_run(loaded: LoadedSpec, ir: ModelIR, reason: str) -> SpecError:
    """A record that could not be read during training (the data passed its checks before the first step, so a
    file changed since): the stages are read and checked again, which names the file and the record; when
    they now pass, one line with TensorFlow's reason."""
    for stage in ("train", "eval"):
        try:
            read_stage(loaded, ir, stage)
        except SpecError as exc:
            return exc
    return SpecError([Diagnostic(loaded.display, None, f"a data record could not be read during training ({reason}); "
                                 "the data passed its checks before the first step: was a file changed while training?")])
