"""An exported graph run on a sample: in chunks of the graph's fixed batch, and onnxruntime's failures as one line.

`export.onnx.dynamic_batch: false` fixes the graph's batch to 1, and onnxruntime (and Predictor.check) refuse
any other number of rows. Every place that runs an exported graph on a sample of many rows (export's parity
and accuracy, a precision variant's calibration and gates, the server's gates at load, `specgen infer`) goes
through `run_sample`, which runs it in chunks of that batch; a dynamic batch runs in one call, as before.

onnxruntime failing on a graph specgen exported and checked (`onnx.checker` passed) is a specgen bug: `reported`
turns it into one line naming what was running and the node, never a traceback.

Only numpy, onnx and onnxruntime here: the precision package imports this (bench/precision.py --onnx-only
runs where neither TensorFlow nor pydantic is installed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from specgen.errors import SpecgenError
from specgen.runtime.buckets import Arrays, chunks, pad_rows, take_rows

if TYPE_CHECKING:  # predictor.py is not imported at run time: the precision package imports this module alone
    from specgen.runtime.predictor import Predictor

# onnxruntime's exception types share no base class but Exception: every one its C++ layer raises
ORT_ERRORS: tuple[type[Exception], ...] = tuple(
    value for value in vars(ort_state).values() if isinstance(value, type) and issubclass(value, Exception))
# how onnxruntime names the node that failed: running it, or inferring shapes while the session loads
NODE_FAILURES = (re.compile(r"running (?P<op>\w+) node\. Name:'(?P<name>[^']*)' Status Message: (?P<message>.*)", re.S),
                 re.compile(r"Node \((?P<name>[^)]*)\) Op \((?P<op>\w+)\) (?P<message>.*)", re.S))
ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")


class GraphRunError(SpecgenError, RuntimeError):
    """onnxruntime failed on a graph specgen exported: one line saying what ran, the node, and to report it."""


def fixed_batch(shapes: Iterable[Sequence[object]]) -> int | None:
    """The batch size the inputs' shapes fix (1 under `dynamic_batch: false`); None where the batch is dynamic
    (a symbol, or no dimension value), or where the inputs disagree (no chunk size fits them all)."""
    firsts = {shape[0] if len(shape) else None for shape in shapes}
    batch = firsts.pop() if len(firsts) == 1 else None
    return batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None


def graph_batch(model: onnx.ModelProto) -> int | None:
    """`fixed_batch` of a model's data inputs (its initializers are not inputs a caller feeds)."""
    weights = {i.name for i in model.graph.initializer}
    shapes = [[d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input if i.name not in weights]
    return fixed_batch(shapes)


def predictor_batch(predictor: Predictor) -> int | None:
    """The fixed batch of a Predictor's model (its inputs' shapes as onnxruntime reads them), or None."""
    return fixed_batch(shape for shape, _ in predictor.inputs.values())


def run_rows(predictor: Predictor, inputs: Arrays) -> Arrays:
    """A Predictor over every row of `inputs`, in chunks of its model's fixed batch where it has one."""
    return run_sample(predictor, inputs, predictor_batch(predictor))


def run_sample(run: Callable[[Arrays], Arrays], inputs: Arrays, batch: int | None) -> Arrays:
    """`run` over every row of `inputs`: in one call where `batch` is None (dynamic), else in chunks of `batch`
    rows (the last one padded with its last row, its outputs sliced back), the outputs joined in row order."""
    rows = len(next(iter(inputs.values())))
    if batch is None or rows == batch:
        return run(inputs)
    parts = []
    for start, stop, size in chunks((batch,), rows):
        piece = pad_rows({name: array[start:stop] for name, array in inputs.items()}, size)
        parts.append(take_rows(run(piece), stop - start, size))
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def failure_detail(exc: BaseException) -> str:
    """"Conv node 'x': <its message>": the node onnxruntime names and the first line of its status, without the
    error-code prefix; else the first line of the exception."""
    text = str(exc).strip()
    match = next((m for m in (pattern.search(text) for pattern in NODE_FAILURES) if m), None)
    if match:
        message = match["message"].strip()
        detail = f"{match['op']} node '{match['name']}': {message.splitlines()[0] if message else 'no message'}"
    else:
        detail = ORT_PREFIX.sub("", text.splitlines()[0]) if text else type(exc).__name__
    return detail[:400]


def failure_line(exc: BaseException, what: str) -> str:
    """'onnxruntime failed on the exported graph (what): <failure_detail>; ...please report this with the spec'."""
    return (f"onnxruntime failed on the exported graph ({what}): {failure_detail(exc)}; nothing was written; "
            "please report this with the spec")


@contextmanager
def reported(what: str) -> Iterator[None]:
    """onnxruntime's exceptions inside become a GraphRunError of one line (`failure_line`)."""
    try:
        yield
    except ORT_ERRORS as exc:
        raise GraphRunError(failure_line(exc, what)) from None
