"""Why a TFRecord record does not parse, said from the record itself (runtime/sources/tfrecord.py's error path).

TensorFlow's parse error names the first key it failed on in its own terms; reading the record as a
`tf.train.Example` says which key is missing, of the other list kind or of another length, and what to do.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# The tf.train.Example list each parsed dtype reads. A float input reads a float_list only: TensorFlow's
# parser takes one list kind per key, and a writer that stored a float input as int64 disagrees with the spec
# on every record, which skip_bad would otherwise take for damage one record at a time.
LISTS = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}
# What to do, by (the list the spec reads, the list the record holds): declaring the other number dtype helps only
# where the record holds the other number list; a bytes_list is read as an encoded image only (decode: image).
WRITE = {"float_list": "write the key as a float_list (tf.train.FloatList)",
         "int64_list": "write the key as an int64_list (tf.train.Int64List)",
         "bytes_list": "write the encoded image as a bytes_list"}
OTHER_DTYPE = {("float_list", "int64_list"): ", or declare the input or label with an integer dtype",
               ("int64_list", "float_list"): ", or declare the input or label float32",
               ("float_list", "bytes_list"): ", or, if it holds an encoded image, read it as one "
                                             "({key: <key>, decode: image, size: [<height>, <width>]})"}


def unparsed(exc: Exception, record: bytes, spec: dict[str, Any]) -> str:
    """Why a record does not parse: read from the record itself where it is a tf.train.Example (the key
    missing, of the other list kind, of another length), else TensorFlow's reason."""
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(record)
    except Exception:  # protobuf's DecodeError: TensorFlow's message would quote the record's bytes
        return "it is not a tf.train.Example"
    for key, feature in spec.items():
        if (why := feature_problem(example, key, feature)) is not None:
            return why
    return reason(exc)


def _a(held: str | None) -> str:
    return "no list" if held is None else f"{'an' if held[0] in 'aeiou' else 'a'} {held}"


def feature_problem(example: Any, key: str, feature: Any) -> str | None:
    """What is wrong with one key of a parsed Example against the FixedLenFeature the spec reads it as."""
    want = LISTS[feature.dtype.name]
    if key not in example.features.feature:
        return f"it has no key '{key}'"
    held = example.features.feature[key].WhichOneof("kind")
    if held != want:
        fix = WRITE[want] + OTHER_DTYPE.get((want, str(held)), "")
        return f"key '{key}' holds {_a(held)}, and the spec reads it as {_a(want)}: {fix}"
    values, size = len(getattr(example.features.feature[key], held).value), int(np.prod(feature.shape))
    if values != size:
        return f"key '{key}' holds {values} value(s), and the spec reads {size} (shape {list(feature.shape)})"
    return None


def reason(exc: Any) -> str:
    """TensorFlow's reason without the op and function names it wraps around it."""
    line = re.sub(r"\{\{[^}]*\}\}\s*", "", exc.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", line).strip()
