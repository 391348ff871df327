"""Why a TFRecord record does not parse, said from the record itself (runtime/sources/tfrecord.py's error path).

TensorFlow's parse error names the first key it failed on in its own terms; reading the record as a
`tf.train.Example` says which key is missing, of the other list kind or of another length, and what to do.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from specgen.kinds.ops import op_def
from specgen.runtime.sources.context import SourceContext

# The tf.train.Example list each parsed dtype reads. A float input reads a float_list only: TensorFlow's
# parser takes one list kind per key, and a writer that stored a float input as int64 disagrees with the spec
# on every record, which skip_bad would otherwise take for damage one record at a time.
LISTS = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}
# What to do, by the list the spec reads; a bytes_list is read as an encoded image only (decode: image).
WRITE = {"float_list": "write the key as a float_list (tf.train.FloatList)",
         "int64_list": "write the key as an int64_list (tf.train.Int64List)",
         "bytes_list": "write the encoded image as a bytes_list"}
IMAGE = (", or, if it holds an encoded image, read it as one ({key: <key>, decode: image, size: [<height>, "
         "<width>]})")


def unparsed(exc: Exception, record: bytes, spec: dict[str, Any], context: SourceContext | None = None) -> str:
    """Why a record does not parse: read from the record itself where it is a tf.train.Example (the key
    missing, of the other list kind, of another length), else TensorFlow's reason. `context` says which input
    or label reads each key, for the remedy (without it, the remedy names no input or label)."""
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(record)
    except Exception:  # protobuf's DecodeError: TensorFlow's message would quote the record's bytes
        return "it is not a tf.train.Example"
    for key, feature in spec.items():
        if (why := feature_problem(example, key, feature, context)) is not None:
            return why
    return reason(exc)


def _a(held: str | None) -> str:
    return "no list" if held is None else f"{'an' if held[0] in 'aeiou' else 'a'} {held}"


def feature_problem(example: Any, key: str, feature: Any, context: SourceContext | None = None) -> str | None:
    """What is wrong with one key of a parsed Example against the FixedLenFeature the spec reads it as."""
    want = LISTS[feature.dtype.name]
    if key not in example.features.feature:
        return f"it has no key '{key}'"
    held = example.features.feature[key].WhichOneof("kind")
    if held != want:
        return f"key '{key}' holds {_a(held)}, and the spec reads it as {_a(want)}: {remedy(context, key, want, held)}"
    values, size = len(getattr(example.features.feature[key], held).value), int(np.prod(feature.shape))
    if values != size:
        return f"key '{key}' holds {values} value(s), and the spec reads {size} (shape {list(feature.shape)})"
    return None


def remedy(context: SourceContext | None, key: str, want: str, held: str | None) -> str:
    """What the user can do about key `key` holding list `held` where the spec reads list `want`: store the list
    the spec reads; for an integer input that no embedding reads, declaring it float32 too (where its layers take
    floats). Nothing else: a label has no dtype to declare (its loss decides, and class ids are integers), an
    embedding's ids are integers, and a float input's layers (dense, conv) refuse an integer input."""
    name, section = _reader(context, key)
    other = IMAGE if (want, held) == ("float_list", "bytes_list") and section != "labels" else ""
    if context is None or name is None:
        return WRITE[want] + other
    if section == "labels":
        return f"{_label_use(context, name, want)}: {WRITE[want]}"
    if (ids := _ids_reader(context, name)) is not None:
        return f"input '{name}' holds the ids {ids} reads, which are integers: {WRITE[want]}"
    if (want, held) == ("int64_list", "float_list"):
        other = f", or declare input '{name}' float32 if the layers it feeds take floats"
    return WRITE[want] + other


def _reader(context: SourceContext | None, key: str) -> tuple[str | None, str]:
    """The first input or label that reads `key` (spec name, `features` or `labels`); (None, "") without one."""
    if context is None:
        return None, ""
    return next(((name, section) for name, (section, ref) in context.names().items() if ref == key), (None, ""))


def _label_use(context: SourceContext, name: str, want: str) -> str:
    """How label `name` is read, and why: by the loss term that reads it (the first, as context.expected)."""
    term = next((t for t in context.training.terms if t.labels == name and t.data_labels), None)
    if want == "int64_list":  # only a loss of class ids reads a label as integers (context.expected)
        return f"label '{name}' holds class ids{f' for loss {term.kind}' if term else ''}, read as integers only"
    by = f"by loss {term.kind} " if term is not None else "(no loss reads it) "
    return f"label '{name}' is read as float32 {by}(a label has no dtype to declare)"


def _ids_reader(context: SourceContext, name: str) -> str | None:
    """The layer that reads input `name` as ids (an embedding: OpDef.ids_checked), as a message names it."""
    for node in context.ir.nodes:
        if op_def(node.op).ids_checked and node.inputs[0] == name:
            return f"{node.op} '{node.name}'"
    return None


def reason(exc: Any) -> str:
    """TensorFlow's reason without the op and function names it wraps around it."""
    line = re.sub(r"\{\{[^}]*\}\}\s*", "", exc.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", line).strip()
