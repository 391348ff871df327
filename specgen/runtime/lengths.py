"""Run-time limits of an exported model's inputs, which ONNX cannot declare and onnxruntime does not all enforce.

- Upper bounds of named dimensions: a positional_embedding takes at most `max_length` time steps, and a graph
  that sliced would clip a longer sequence into a wrong answer. `specgen.max_lengths`: {"seq": [16, "pos"]}, the
  smallest max_length reading that symbol, and its layer. A time dimension that is an expression of one symbol
  (after a strided or `valid` conv1d or pool, an upsample) bounds that symbol too: `ceil(seq/3) <= 8` is `seq <= 24`
  (runtime/sample_sizes.py `upper_bounds`), recorded with the expression and the max_length: {"seq": [24, "pos",
  "ceil(seq/3)", 8]} (a specgen that reads only two items ignores the entry: the graph then refuses it). A bound
  over several symbols limits none alone: not recorded, and `specgen diff` says it does not compare it.
- Lower bounds: `valid` windows shrink an axis, so a conv1d of kernel 4 then a max_pool1d of 5 need t >= 8
  (runtime/sample_sizes.py), and an op that reads an axis at an index needs that many steps (OpDef.needs_sizes:
  a take of index 4 needs t >= 5). TensorFlow refuses a shorter input, but onnxruntime answers some of them (a pool whose
  window no longer fits gives one step). `specgen.min_lengths`: {"t": [8, "p", "max_pool1d"]}: the smallest size
  of a symbol that alone decides a lower bound, and the layer that needs it. A stride product (the `period` of
  sample_sizes.py) is no constraint: every size from the smallest on runs, SAME windows just pad differently.
  Every other named dimension of an input gets 1, with the first layer reading it: an empty axis is refused
  before onnxruntime runs, where its ops disagree (opset 21's attention nodes answer an empty sequence with an
  empty output, opset 23's fused Attention node fails with an internal message, a pool or a recurrent node
  differs again), so one model answers the same at every opset and on every provider.
- Id ranges: an embedding's ids (and a gather's indices) must be in [0, rows). onnxruntime's Gather reads a
  negative id as counted from the end, where TensorFlow refuses it. `specgen.id_ranges`: {"ids": [0, 20, "emb",
  "embedding"]}, for each graph input read directly as ids, the tightest range over the layers reading it.

`specgen export` writes them into the model's metadata; `Predictor.out_of_range` (so `specgen infer` and `specgen
serve`) reads them back and refuses an input outside them before onnxruntime runs, in one line. A model exported
before a key existed has no such entry and runs as before. The data sources of `specgen train` (and of every command
that reads data) check their examples against the same minima and bounds (`below`, `above`) before the first update
(runtime/sources/sizes.py).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

KEY = "specgen.max_lengths"
MIN_KEY = "specgen.min_lengths"
IDS_KEY = "specgen.id_ranges"
# symbol -> (largest size, the layer that bounds it), and where the layer reads an expression of the symbol, that
# expression and the layer's max_length
Bound = tuple[int, str] | tuple[int, str, str, int]
Bounds = dict[str, Bound]
Minima = dict[str, tuple[int, str, str]]  # symbol -> (smallest size, the layer that needs it, its op)
IdRanges = dict[str, tuple[int, int, str, str]]  # input -> (lowest id, one past the highest, layer, op)


def bounds(ir: Any) -> Bounds:
    """The bounded symbols of a ModelIR: the time dimension of an op that bounds it (OpDef.bounds_steps: a
    positional_embedding's), a plain symbol or an expression of one (runtime/sample_sizes.py `upper_bounds`);
    the tightest per symbol (of a tie, the layer first by name, as exports have always recorded it)."""
    from specgen.runtime.sample_sizes import upper_bounds

    found: Bounds = {}
    for symbol, largest, test in upper_bounds(ir):
        bound: Bound = (largest, test.layer) if test.dim == symbol else (largest, test.layer, test.dim, test.bound)
        if symbol not in found or (largest, test.layer) < found[symbol][:2]:
            found[symbol] = bound
    return found


def minima(ir: Any) -> Minima:
    """Each named dimension of the ModelIR's inputs and its smallest size: runtime/sample_sizes.py's lower bound
    above 1 where a window needs one, else 1 (no empty axis), with the first layer reading an input that has it."""
    from specgen.runtime.sample_sizes import lower_bounds, symbols

    found = {symbol: (size, layer, ir.node(layer).op) for symbol, (size, layer) in lower_bounds(ir).items()}
    holders = {i.name: set(i.shape[1:]) for i in ir.inputs}
    for symbol in symbols(ir):
        reader = next((n for n in ir.nodes if any(symbol in holders.get(s, ()) for s in n.inputs)), None)
        if symbol not in found and reader is not None:
            found[symbol] = (1, reader.name, reader.op)
    return {symbol: found[symbol] for symbol in symbols(ir) if symbol in found}


def id_ranges(ir: Any) -> IdRanges:
    """Graph inputs an op reads as row indices (OpDef.id_limit with a fixed size): an embedding's one input, a
    gather's indices (its last input, kinds/ops/gather.py). Ids reaching them through other layers are not checked."""
    from specgen.kinds.ops import op_def

    graph_inputs = {i.name for i in ir.inputs}
    found: IdRanges = {}
    for node in ir.nodes:
        op = op_def(node.op)
        limit = node.params.get(op.id_limit) if op.id_limit else None
        source = node.inputs[0] if op.ids_checked else node.inputs[-1]
        if type(limit) is int and source in graph_inputs and limit < found.get(source, (0, limit + 1))[1]:
            found[source] = (0, limit, node.name, node.op)
    return found


def stamp(model: Any, ir: Any) -> None:
    """Write the limits into an onnx.ModelProto's metadata (no entry for a kind there is none of)."""
    for key, found in ((KEY, bounds(ir)), (MIN_KEY, minima(ir)), (IDS_KEY, id_ranges(ir))):
        if found:
            entry = model.metadata_props.add()
            entry.key, entry.value = key, json.dumps({k: list(v) for k, v in sorted(found.items())})


def read(metadata: Mapping[str, str]) -> Bounds:
    """The bounds of a loaded model's metadata; entries of another shape (a hand-edited file) are ignored."""
    plain: Bounds = {k: (v[0], v[1]) for k, v in _entries(metadata, KEY, (int, str)).items()}  # types checked there
    return plain | {k: (v[0], v[1], v[2], v[3]) for k, v in _entries(metadata, KEY, (int, str, str, int)).items()}


def violation(found: Bounds, declared: Mapping[str, tuple[Any, ...]], shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """The first input whose size along a bounded symbol exceeds the bound, as an error message."""
    return _refusal(declared, shapes, lambda dims, shape: above(found, dims, shape), lambda dim: limit_text(found, dim))


def above(found: Bounds, dims: Sequence[Any], shape: Sequence[int]) -> tuple[int, str] | None:
    """The first axis of one shape longer than the bound of its named dimension: (axis, dimension), or None.
    `dims` and `shape` are aligned (both with the batch axis, or both without)."""
    return _first_axis(found, dims, shape, operator.gt)


def limit_text(found: Bounds, dim: str) -> str:
    """What an input past a bound is told: `expected at most 16: the max_length of layer 'pos' (...)`, or where the
    layer reads an expression of the dimension, `...: layer 'pos' (positional_embedding) takes at most 8 steps of
    ceil(seq/3)`."""
    bound = found[dim]
    if len(bound) == 4:
        return f"expected at most {bound[0]}: {cap_text(bound)}"
    return f"expected at most {bound[0]}: the max_length of layer '{bound[1]}' (positional_embedding)"


def cap_text(bound: Bound) -> str:
    """Why a bound holds, from its layer: `layer 'pos' (positional_embedding) takes at most 16` (of its symbol), or
    `... takes at most 8 steps of ceil(seq/3)` (its max_length, of the expression it reads)."""
    if len(bound) == 4:
        return f"layer '{bound[1]}' (positional_embedding) takes at most {bound[3]} steps of {bound[2]}"
    return f"layer '{bound[1]}' (positional_embedding) takes at most {bound[0]}"


def _entries(metadata: Mapping[str, str], key: str, kinds: tuple[type, ...]) -> dict[str, tuple[Any, ...]]:
    """A metadata entry's lists whose items have exactly these types; anything else (a hand-edited file) ignored."""
    try:
        raw = json.loads(metadata.get(key, "{}"))
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: tuple(v) for k, v in raw.items() if isinstance(v, list) and len(v) == len(kinds)
            and all(type(item) is kind for item, kind in zip(v, kinds, strict=True))}


def read_minima(metadata: Mapping[str, str]) -> Minima:
    return _entries(metadata, MIN_KEY, (int, str, str))


def read_ids(metadata: Mapping[str, str]) -> IdRanges:
    return _entries(metadata, IDS_KEY, (int, int, str, str))


def too_short(found: Minima, declared: Mapping[str, tuple[Any, ...]], shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """The first input whose size along a symbol is below the smallest the model takes, as an error message."""
    return _refusal(declared, shapes, lambda dims, shape: below(found, dims, shape), lambda dim: need_text(found, dim))


def below(found: Minima, dims: Sequence[Any], shape: Sequence[int]) -> tuple[int, str] | None:
    """The first axis of one shape shorter than the smallest size of its named dimension: (axis, dimension), or
    None. `dims` and `shape` are aligned. The one comparison behind infer's, serve's and the data sources' checks."""
    return _first_axis(found, dims, shape, operator.lt)


def _first_axis(found: Mapping[str, tuple[Any, ...]], dims: Sequence[Any], shape: Sequence[int],
                beyond: Callable[[int, int], bool]) -> tuple[int, str] | None:
    """The first axis whose size is `beyond` the limit its named dimension has in `found`: (axis, dimension)."""
    for axis, dim in enumerate(dims):
        if dim in found and axis < len(shape) and beyond(shape[axis], found[dim][0]):
            return axis, dim
    return None


def _refusal(declared: Mapping[str, tuple[Any, ...]], shapes: Mapping[str, tuple[int, ...]],
             hit_of: Callable[[Sequence[Any], Sequence[int]], tuple[int, str] | None],
             told: Callable[[str], str]) -> str | None:
    """The message for the first input `hit_of` finds an axis of: its size, the shape, and what it is `told`."""
    for name, dims in declared.items():
        hit = hit_of(dims, shapes[name])
        if hit is not None:
            axis, dim = hit
            return (f"input '{name}': received {shapes[name][axis]} steps along '{dim}' (shape "
                    f"{list(shapes[name])}), {told(dim)}")
    return None


def unequal(declared: Mapping[str, tuple[Any, ...]], shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """The first input whose size along a named dimension it shares with an input before it (the batch, two sequences'
    `seq`) differs from that input's, as an error message. ONNX reads one dim_param in several places as one size
    (TensorRT enforces it), but onnxruntime checks no such link: a graph that adds the two fails with its internal
    broadcast message, and a size of 1 is broadcast over the other input's steps or rows. specgen's Keras importer
    names every open axis by its position (`dim1`), so two inputs of independent lengths import tied; the message
    says how to untie them (docs/import.md)."""
    first: dict[str, tuple[str, int]] = {}  # dimension -> (the input that gave it a size, that size)
    for name, dims in declared.items():
        shape = shapes[name]
        for axis, dim in enumerate(dims[: len(shape)]):
            if not isinstance(dim, str):
                continue
            other, size = first.setdefault(dim, (name, shape[axis]))
            if size != shape[axis]:
                if axis == 0 and dim == "batch":
                    return (f"input '{name}': received batch size {shape[axis]} (shape {list(shape)}), expected "
                            f"{size} like input '{other}'")
                return (f"input '{name}': received size along '{dim}' {shape[axis]} (shape {list(shape)}), expected "
                        f"{size} like input '{other}' (the model names both axes '{dim}': one length; inputs of "
                        "independent lengths need a name each in the spec)")
    return None


def need_text(found: Minima, dim: str) -> str:
    """What an input below a minimum is told: `expected at least 9: layer 'c' (conv2d) needs at least 9`."""
    limit, layer, op = found[dim]
    why = f"layer '{layer}' ({op}) needs at least {limit}" if limit > 1 else f"the model takes no empty '{dim}' axis"
    return f"expected at least {limit}: {why}"


def bad_id(found: IdRanges, arrays: Mapping[str, Any]) -> str | None:
    """The first input holding an id outside its range (the first such value in reading order), as an error."""
    import numpy as np

    for name, (low, high, layer, op) in found.items():
        array = arrays.get(name)
        if array is None or not np.size(array) or np.asarray(array).dtype.kind not in "iu":
            continue
        outside = (array < low) | (array >= high)
        if outside.any():
            at = tuple(int(i) for i in np.argwhere(outside)[0])
            return (f"input '{name}': received id {array[at]} at {list(at)}, expected ids in [{low}, {high - 1}]: "
                    f"layer '{layer}' ({op}) takes ids below {high}")
    return None
