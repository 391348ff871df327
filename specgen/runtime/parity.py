"""Compare the generated TensorFlow module with onnxruntime on the generated ONNX graph.

Also the numeric gates every command shares (`within`, `max_abs_diff`, `first_non_finite`,
`accuracy`): each is False or an error on NaN and infinities. A plain `diff > limit` test
passes NaN (every comparison with NaN is False), and Python's `max` drops a NaN that is not
its first argument, so a gate built from them lets a broken model through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from specgen.ir.exported import exported
from specgen.ir.model import ModelIR
from specgen.kinds.ops import op_def
from specgen.runtime import sample_sizes
from specgen.runtime.lib.generated import load_generated
from specgen.runtime.lib.onnx_layout import onnx_feeds

__all__ = ["load_generated"]


def random_weights(ir: ModelIR, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random values for every model variable, scaled like trained weights.

    Kernels get a 1/sqrt(fan-in) scale so activations stay near 1, as in a trained
    model (outputs in the tens would put float32 rounding above the 1e-5 budget);
    variances (batch_norm, normalize) stay positive.
    """
    values = {}
    for var in ir.model_variables:
        scale = 1.0 / np.sqrt(np.prod(var.shape[:-1])) if len(var.shape) > 1 else 0.5
        value = (rng.standard_normal(var.shape) * scale).astype(np.float32)
        if var.path.endswith(("/moving_variance", "/variance")):  # batch_norm, normalize
            value = rng.uniform(0.5, 1.5, var.shape).astype(np.float32)
        values[var.path] = value
    return values


SYMBOL_SIZE = sample_sizes.PREFERRED  # a named dimension's size where the caller names none and the model takes it


def _size(dim: int | str | None, sizes: Mapping[str, int]) -> int:
    """One example dimension's size: a named dynamic one's from `sizes`."""
    if isinstance(dim, str):
        return sizes[dim]
    assert dim is not None  # only index 0, the batch, is None (kinds/ops/nodes.py Shape)
    return dim


def random_inputs(ir: ModelIR, batch: int, rng: np.random.Generator,
                  sizes: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Random inputs; `sizes` gives named dynamic dimensions (kinds/dims.py) their run-time sizes, which default
    to the first of runtime/sample_sizes.py's: SYMBOL_SIZE where the model runs at it, else the nearest size it
    does (NoSizeFits, one line, where a dimension has none)."""
    chosen = dict(sizes or {})
    if any(d not in chosen for d in sample_sizes.symbols(ir)):
        chosen = sample_sizes.size_sets(ir)[0] | chosen
    inputs = {}
    for node_input in ir.inputs:
        shape = (batch, *(_size(d, chosen) for d in node_input.shape[1:]))
        if node_input.dtype == "uint8":  # raw pixels
            inputs[node_input.name] = rng.integers(0, 256, shape).astype(np.uint8)
        elif node_input.dtype.startswith("int"):
            # Ids index an embedding's table (vocab_size) or a gather's axis (index_limit): draw valid ones
            # (OpDef.id_limit). Any other integer input is a mask (a padding_mask): 0 or 1.
            vocab = min((n.params[limit] for n in ir.nodes if (limit := op_def(n.op).id_limit)
                         and node_input.name in n.inputs), default=2)
            inputs[node_input.name] = rng.integers(0, vocab, shape).astype(node_input.dtype)
        else:
            inputs[node_input.name] = rng.standard_normal(shape).astype(np.float32)
    return inputs


Outputs = dict[str, np.ndarray]
Runner = Callable[[dict[str, np.ndarray]], Outputs]
SWEEP_BATCH = 2  # examples per further size: the main sample has checked the batch


def check_sizes(ir: ModelIR, tensorflow: Runner, onnx: Runner, limit: float,
                rng: np.random.Generator) -> str | None:
    """Run both sides at each further size set of runtime/sample_sizes.py (the main sample ran the first) and
    return the first disagreement as one line, or None. Where the graph is right at one size and wrong at
    another (a strided SAME window's pads move with the size) only such a run shows it.

    `onnx` returns the exported outputs, `tensorflow` at least those; each output's largest |difference| is taken
    over max(1, max |TensorFlow output|), as export's gate, with a non-finite value at the same place on both
    sides counted equal (a fully masked step at a short length is NaN in Keras too). An exception from either
    side becomes the line: onnxruntime refusing a size that TensorFlow runs is the finding, not a traceback.
    """
    for sizes in sample_sizes.size_sets(ir)[1:]:
        inputs = random_inputs(ir, SWEEP_BATCH, rng, sizes)
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())
        try:
            expected = tensorflow(inputs)
        except Exception as exc:  # any failure of either side is the finding: one line
            return f"TensorFlow failed at {at}: {_first_line(exc)}"
        try:
            actual = onnx(inputs)
        except Exception as exc:
            return f"onnxruntime failed at {at} (TensorFlow ran): {_first_line(exc)}"
        for name, value in actual.items():
            diff = _scaled(expected[name], value)
            if not within(diff, limit):
                return (f"output '{name}' at {at}: max |TensorFlow - onnxruntime| {diff:.3g} of its magnitude "
                        f"(limit {limit:g})")
    return None


def _scaled(expected: np.ndarray, actual: np.ndarray) -> float:
    """max |expected - actual| / max(1, max |expected|) over the finite places; inf where shapes or the
    places of non-finite values differ."""
    if expected.shape != actual.shape:
        return math.inf
    finite = np.isfinite(expected)
    if not np.array_equal(finite, np.isfinite(actual)) or not np.array_equal(expected[~finite], actual[~finite]):
        return math.inf
    a, b = expected[finite].astype(np.float64), actual[finite].astype(np.float64)
    return float(np.max(np.abs(a - b), initial=0.0) / max(1.0, float(np.max(np.abs(a), initial=0.0))))


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[-1][:300] if lines else type(exc).__name__


def assign(model: Any, values: dict[str, np.ndarray]) -> None:
    for path, variable in model.variables_by_path().items():
        variable.assign(values[path])


def run_tf(model: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import tensorflow as tf

    outputs = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)
    return {k: v.numpy() for k, v in outputs.items()}


def run_onnx(model_bytes: bytes, ir: ModelIR, values: dict[str, np.ndarray],
             inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    ir = exported(ir)  # the graph's inputs, weights and outputs
    feeds = {i.onnx_name: inputs[i.name] for i in ir.inputs} | onnx_feeds(ir.model_variables, values)
    names = list(ir.outputs)
    return dict(zip(names, session.run(names, feeds), strict=True))


def within(value: float, limit: float) -> bool:
    """True only for a finite `value` <= `limit`: the one way a numeric gate compares against its limit."""
    return math.isfinite(value) and value <= limit


def max_abs_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest |a - b| over every output; NaN or inf when any element of either side is not finite."""
    diffs = [np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)), initial=0.0) for k in a]
    return float(np.max(diffs, initial=0.0))  # np.max keeps NaN wherever it is; Python's max does not


def first_non_finite(values: dict[str, np.ndarray]) -> str | None:
    """'name' is NaN at [3, 1] (and 4 more): the first array of `values` holding NaN or inf, or None."""
    for name, value in values.items():
        bad = ~np.isfinite(value)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            element = value[index]
            what = "NaN" if np.isnan(element) else ("infinite" if element > 0 else "-infinite")
            more = f" (and {int(bad.sum()) - 1} more non-finite values)" if bad.sum() > 1 else ""
            return f"'{name}' is {what} at {list(index)}{more}"
    return None


def accuracy(logits: np.ndarray, labels: np.ndarray, name: str = "output") -> float:
    """Share of rows whose arg-max is the label; ValueError where that figure would mean nothing.

    np.argmax picks the first NaN, and `==` broadcasts or compares floats silently, so logits
    and labels are checked first: one integer label in [0, classes) per row, finite logits.
    """
    labels = np.asarray(labels)
    flat = labels.reshape(-1)
    rows, classes = logits.shape[0], logits.shape[-1]
    if flat.size != rows:
        raise ValueError(f"{flat.size} labels (shape {list(labels.shape)}) for {rows} examples; one label per "
                         "example is expected")
    problem = first_non_finite({name: logits})
    if problem is not None:
        raise ValueError(f"{problem}; no accuracy on non-finite outputs")
    if flat.dtype.kind not in "iuf":
        raise ValueError(f"labels have dtype {flat.dtype}; integer class labels are expected")
    bad = (flat < 0) | (flat >= classes)
    if flat.dtype.kind == "f":
        bad |= ~np.isfinite(flat) | (flat != np.round(flat))
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"label {flat[row].item()} at row {row} is not a class of an output with {classes} classes "
                         f"(integers in [0, {classes}) are expected)")
    return float(np.mean(np.argmax(logits, axis=-1) == flat))
