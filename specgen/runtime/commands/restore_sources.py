"""Where restore plans read from: TensorFlow checkpoints (TF1 name-based, TF2 object-based, specgen's own)
and Keras weight files (keras_weights.py), told apart by suffix and content, both as key -> Entry."""

from __future__ import annotations

import glob
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.restore_rules import Entry
from specgen.paths import shown
from specgen.runtime import keras_weights
from specgen.runtime.checkpoint import resolve_prefix
from specgen.runtime.sources.base import MISSING, REGULAR, file_kind

OBJECT_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
BOOKKEEPING = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter")


def read_source(path: Path, declared: int | None = None) -> tuple[Path, dict[str, Entry]]:
    """The prefix and its tensors by key, object-based keys without their '/.ATTRIBUTES/...' suffix;
    for a Keras weight file, the file and its weights by `<layer>/<weight>` (`declared`, the bytes of
    the spec's variables, bounds what a .keras may inflate to: keras_files.weights_cap)."""
    if keras_weights.is_keras_file(path):
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
    first that is not: TensorFlow's reader blocks forever on a FIFO and reads a device without end. Missing files
    are left to TensorFlow, whose message names them."""
    try:
        shards = sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"))
    except OSError:
        shards = []
    for path in [prefix.with_name(prefix.name + ".index"), *shards]:
        kind = file_kind(path)
        if kind not in (MISSING, REGULAR):
            raise ValueError(f"cannot read checkpoint {shown(prefix)}: {shown(path)} is {kind}, not a regular file")


def list_checkpoint(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Key -> (shape, dtype name) of a checkpoint prefix or folder (TF1 name-based or TF2 object-based)
    or of a Keras weight file."""
    try:
        _, entries = read_source(path)
    except ValueError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None
    return {key: (e.shape, e.dtype) for key, e in entries.items()}


def open_reader(prefix: Path, stack: ExitStack, declared: int | None = None) -> Any:
    """A reader with `get_tensor(raw_key)`; a Keras file stays open until `stack` closes."""
    if keras_weights.is_keras_file(prefix):
        return stack.enter_context(keras_weights.Reader(prefix, declared))
    return tf.train.load_checkpoint(str(prefix))
