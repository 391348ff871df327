"""Where restore plans read from: TensorFlow checkpoints (TF1 name-based, TF2 object-based, specgen's own)
and Keras weight files (keras_weights.py), told apart by suffix and content (weight_files.py), both as key -> Entry."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.restore_rules import Entry
from specgen.paths import shown
from specgen.runtime import keras_weights, weight_files
from specgen.runtime.bundle_index import short_shard
from specgen.runtime.checkpoint import resolve_prefix
from specgen.runtime.integrity import Unreadable, check_kinds

OBJECT_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
BOOKKEEPING = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter")


def read_source(path: Path, declared: int | None = None) -> tuple[Path, dict[str, Entry]]:
    """The prefix and its tensors by key, object-based keys without their '/.ATTRIBUTES/...' suffix;
    for a Keras weight file, the file and its weights by `<layer>/<weight>` (`declared`, the bytes of
    the spec's variables, bounds what a .keras may inflate to: keras_files.weights_cap)."""
    if weight_files.is_keras_file(path):
        found = keras_weights.read_weights(path, declared)
        return path, {key: Entry(w.dataset, w.shape, w.dtype, w.hint) for key, w in found.items()}
    prefix = resolve_prefix(path)
    require_checkpoint_files(prefix)
    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except (tf.errors.OpError, ValueError) as exc:
        raise ValueError(f"cannot read checkpoint {shown(prefix)}: {str(exc).splitlines()[0]}") from None
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    entries: dict[str, Entry] = {}
    for raw in sorted(shapes):
        key = raw.removesuffix(OBJECT_SUFFIX)
        if raw in BOOKKEEPING or key in BOOKKEEPING or (key == raw and "/.ATTRIBUTES/" in raw):
            continue
        entries[key] = Entry(raw, tuple(int(d) for d in shapes[raw]), dtypes[raw].name)
    return prefix, entries


def require_checkpoint_files(prefix: Path) -> None:
    """The checkpoint's `.index` and every `.data-*` shard that exists are regular files, or ValueError naming the
    first that is not (integrity.check_kinds); run again right before TensorFlow opens them (open_reader)."""
    try:
        check_kinds(prefix)
    except Unreadable as exc:
        raise ValueError(f"cannot read checkpoint {shown(prefix)}: {shown(exc.file)} "
                         f"{exc.problem.removeprefix('the file ')}") from None


def list_checkpoint(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Key -> (shape, dtype name) of a checkpoint prefix or folder (TF1 name-based or TF2 object-based)
    or of a Keras weight file."""
    try:
        _, entries = read_source(path)
    except ValueError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None
    return {key: (e.shape, e.dtype) for key, e in entries.items()}


def require_restorable(prefix: Path, raw_keys: set[str]) -> None:
    """ValueError, one line, when a data shard of a TensorFlow checkpoint is too short for the bytes the index
    places there for `raw_keys` (a truncated copy): a plan that read the index alone would promise values the
    restore cannot read. Keras weight files are read whole when planned (keras_weights.py)."""
    if raw_keys and not weight_files.is_keras_file(prefix) and (why := short_shard(prefix, raw_keys)):
        raise ValueError(f"cannot restore from checkpoint {shown(prefix)}: {why}")


def open_reader(prefix: Path, stack: ExitStack, declared: int | None = None) -> Any:
    """A reader with `get_tensor(raw_key)`; a Keras file stays open until `stack` closes. The files' kinds are
    checked again here, when the values are read: one swapped for a FIFO since the plan is refused, never waited on."""
    if weight_files.is_keras_file(prefix):
        return stack.enter_context(keras_weights.Reader(prefix, declared))
    require_checkpoint_files(prefix)
    return tf.train.load_checkpoint(str(prefix))
