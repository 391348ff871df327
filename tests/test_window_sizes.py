"""Size-dependent lowerings at every size: the exported ONNX graph (onnxruntime) against the Keras layer.

- `padding: same` windows with a stride larger than the window on named dimensions: TensorFlow clamps a
  negative pad total to 0, ONNX's auto_pad SAME_UPPER does not (kinds/ops/shapes.py `upper_is_exact`). Each
  op is scanned over sizes 1 .. 2*stride*window + 3 with one window of at most 2 (fixed pads) and one larger
  (pads computed in the graph, templates/onnx/same_pads.onnx.j2); the control has windows >= strides.
- `resize` nearest: TensorFlow's float32 source index, bit for bit, over 1..40 x 1..40 sizes.
- The sizes a parity check draws (runtime/sample_sizes.py): inside what the model accepts, several per name.
One ONNX session per case, every size run through it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx.parser
import onnxruntime as ort
import pytest
import yaml

from specgen.ir.exported import exported
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.kinds.ops import op_def
from specgen.render.files import render_files
from specgen.runtime import parity, sample_sizes
from specgen.runtime.lib.onnx_layout import onnx_feeds
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5  # float32 sums in another order
CHANNELS = 3
KERAS_ARGS = {"kernel": "kernel_size", "size": "pool_size", "filters": "filters", "strides": "strides",
              "depth_multiplier": "depth_multiplier", "padding": "padding"}

# op -> (layer a: a window of at most 2, fixed pads; layer b: a larger window, pads computed in the graph)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "conv2d": ({"op": "conv2d", "filters": 2, "kernel": 1, "strides": 4},
               {"op": "conv2d", "filters": 2, "kernel": [3, 2], "strides": [4, 3]}),
    "depthwise_conv2d": ({"op": "depthwise_conv2d", "kernel": 1, "strides": 4},
                         {"op": "depthwise_conv2d", "kernel": 3, "strides": 4, "depth_multiplier": 2}),
    "separable_conv2d": ({"op": "separable_conv2d", "filters": 2, "kernel": [1, 2], "strides": 4},
                         {"op": "separable_conv2d", "filters": 2, "kernel": 3, "strides": 5}),
    "max_pool": ({"op": "max_pool", "size": [1, 2], "strides": [2, 3]}, {"op": "max_pool", "size": 3, "strides": 4}),
    "avg_pool": ({"op": "avg_pool", "size": 1, "strides": 3}, {"op": "avg_pool", "size": [2, 3], "strides": 4}),
    "conv1d": ({"op": "conv1d", "filters": 2, "kernel": 1, "strides": 4},
               {"op": "conv1d", "filters": 2, "kernel": 3, "strides": 4}),
    "max_pool1d": ({"op": "max_pool1d", "size": 2, "strides": 3}, {"op": "max_pool1d", "size": 3, "strides": 4}),
    "avg_pool1d": ({"op": "avg_pool1d", "size": 1, "strides": 3}, {"op": "avg_pool1d", "size": 3, "strides": 5}),
    "control_window_not_below_stride": ({"op": "conv2d", "filters": 2, "kernel": 3, "strides": 2},
                                        {"op": "max_pool", "size": 3, "strides": 3}),
}


def _span(spec: dict[str, Any]) -> int:
    """The largest stride times the largest window of a layer: the scan runs to twice it (and 3 more)."""
    return _largest(spec["strides"]) * _largest(spec.get("kernel", spec.get("size")))


def _largest(value: int | list[int]) -> int:
    return value if isinstance(value, int) else max(value)


def _model(name: str, shape: list[Any], layers: list[dict[str, Any]]) -> tuple[ModelIR, bytes]:
    document = {"specgen": 1, "name": name, "inputs": {"x": {"shape": shape}},
                "outputs": {layer["name"]: layer["name"] for layer in layers}, "layers": layers}
    ir = build_ir(load_spec_text(yaml.safe_dump(document, sort_keys=False), f"{name}.yaml"))
    return ir, render_files(ir)["model.onnx"]


class Graph:
    """One onnxruntime session of a rendered graph, its weights fed as inputs (as parity.run_onnx)."""

    def __init__(self, ir: ModelIR, model: bytes, values: dict[str, np.ndarray]):
        self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        self.view, self.weights = exported(ir), onnx_feeds(ir.model_variables, values)

    def __call__(self, x: np.ndarray) -> dict[str, np.ndarray]:
        names = list(self.view.outputs)
        return dict(zip(names, self.session.run(names, {"x": x} | self.weights), strict=True))


def _keras_layer(spec: dict[str, Any], ir: ModelIR, values: dict[str, np.ndarray], rank: int) -> Any:
    import keras

    node = ir.node(spec["name"])
    layer = getattr(keras.layers, op_def(node.op).keras[0])(**{KERAS_ARGS[k]: v for k, v in spec.items()
                                                               if k in KERAS_ARGS})
    layer.build((None, *[None] * rank, CHANNELS))
    if node.variables:  # Keras' weight order is the spec's variable order (kernels, then the bias)
        layer.set_weights([values[v.path] for v in node.variables.values()])
    return layer


def _disagreement(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, Keras {want.shape}"
    diff = float(np.max(np.abs(got - want), initial=0.0))
    return "" if diff <= TOLERANCE else f"max |onnxruntime - Keras| {diff:.3g}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_window_matches_keras_at_every_size(case: str) -> None:
    """Failed before (auto_pad SAME_UPPER): every case but the control, e.g. conv2d 1/4 at 4x24 wrong by ~2,
    max_pool 1x2/2x3 refused by onnxruntime ("padding values must be non-negative")."""
    layers = [{"name": name, "input": "x", "padding": "same", **spec}
              for name, spec in zip("ab", CASES[case], strict=True)]
    rank = 1 if layers[0]["op"].endswith("1d") else 2
    ir, model = _model(case, [*(["seq"] if rank == 1 else ["h", "w"]), CHANNELS], layers)
    values = parity.random_weights(ir, np.random.default_rng(0))
    graph = Graph(ir, model, values)
    keras_layers = {spec["name"]: _keras_layer(spec, ir, values, rank) for spec in layers}
    top = 2 * max(_span(spec) for spec in layers) + 3
    rng, wrong = np.random.default_rng(1), []
    for n in range(1, top + 1):
        spatial = [n] if rank == 1 else [n, top + 1 - n]  # both axes through every size, in different pairs
        x = rng.standard_normal((2, *spatial, CHANNELS)).astype(np.float32)
        try:
            got = graph(x)
        except Exception as exc:  # onnxruntime refusing a size Keras runs is one of the failures looked for
            wrong.append(f"{spatial}: onnxruntime failed: {str(exc).splitlines()[-1][:120]}")
            continue
        wrong += [f"{name} at {spatial}: {problem}" for name, layer in keras_layers.items()
                  if (problem := _disagreement(got[name], np.asarray(layer(x))))]
    assert not wrong, f"{case}: {len(wrong)} disagreements with Keras, e.g. {wrong[:4]}"


RESIZE_SIZES = range(1, 41)


def test_nearest_resize_matches_keras_bit_for_bit() -> None:
    """Failed before (ONNX Resize nearest, half_pixel, round_prefer_ceil): 12 of the 1600 (in, out) pairs read a
    neighbouring pixel, e.g. 6 -> 37, 30 -> 9, 36 -> 10."""
    import keras

    layers = [{"name": f"r{out}", "op": "resize", "input": "x", "height": out, "width": out,
               "interpolation": "nearest"} for out in RESIZE_SIZES]
    ir, model = _model("nearest", ["h", "w", 1], layers)
    graph = Graph(ir, model, {})
    resizing = {out: keras.layers.Resizing(out, out, interpolation="nearest") for out in RESIZE_SIZES}
    wrong = []
    for n in RESIZE_SIZES:
        image = np.arange(n * n, dtype=np.float32).reshape(1, n, n, 1)  # each pixel its index: the source is readable
        got = graph(image)
        wrong += [(n, out) for out, layer in resizing.items() if not np.array_equal(got[f"r{out}"], np.asarray(layer(image)))]
    assert not wrong, f"{len(wrong)} (in, out) size pairs differ from Keras' Resizing: {wrong[:10]}"


def _spec(name: str, shape: list[Any], layers: list[dict[str, Any]]) -> ModelIR:
    return _model(name, shape, layers)[0]


def test_parity_sizes_fit_a_valid_stem() -> None:
    """Failed before: random inputs drew 11x11, and TensorFlow's conv refused them ("output size would be
    negative"); the stem needs 19x19 (checker finding 5)."""
    ir = _spec("stem", ["h", "w", 3], [{"name": "stem", "op": "conv2d", "filters": 4, "kernel": 7, "strides": 2},
                                       {"name": "pool", "op": "max_pool", "size": 3, "strides": 2},
                                       {"name": "conv", "op": "conv2d", "filters": 4, "kernel": 3}])
    sets = sample_sizes.size_sets(ir)
    assert sets[0] == {"h": 19, "w": 19}  # the smallest size it runs at, where 11 does not fit
    assert {s["h"] for s in sets} == {19, 20, 21}  # a multiple of the strides (2 * 2) and one above it
    assert parity.random_inputs(ir, 2, np.random.default_rng(0))["x"].shape == (2, 19, 19, 3)


def test_parity_sizes_respect_a_sequence_limit() -> None:
    """Failed before: 11 steps for a positional_embedding of max_length 8 (KerasHub GPT2Backbone with
    max_sequence_length 8): the generated model's length assert raised."""
    ir = _spec("limited", ["seq", 4], [{"name": "down", "op": "conv1d", "filters": 4, "kernel": 3, "strides": 2,
                                        "padding": "same"},
                                       {"name": "pos", "op": "positional_embedding", "max_length": 4}])
    sets = sample_sizes.size_sets(ir)
    assert [s["seq"] for s in sets] == [8, 2, 3, 1]  # ceil(seq/2) <= 4; the stride's multiple and one above
    assert parity.random_inputs(ir, 2, np.random.default_rng(0))["x"].shape == (2, 8, 4)


def test_no_fitting_size_is_one_line() -> None:
    """Failed before (no such check): a Python traceback from TensorFlow."""
    ir = _spec("nofit", ["seq", 4], [{"name": "pos", "op": "positional_embedding", "max_length": 8, "input": "x"},
                                     {"name": "wide", "op": "conv1d", "filters": 4, "kernel": 12, "input": "x"}])
    with pytest.raises(sample_sizes.NoSizeFits) as caught:
        parity.random_inputs(ir, 2, np.random.default_rng(0))
    assert str(caught.value) == ("nofit.yaml: the named dimension 'seq' has no size this model runs at: layer 'wide' "
                                 "(conv1d) needs at least 12 and layer 'pos' (positional_embedding) takes at most 8")


def test_size_check_catches_a_graph_wrong_at_other_sizes() -> None:
    """The old lowering of a 1x1 stride-4 conv (auto_pad SAME_UPPER) is right at 11 and wrong at 4: the check runs
    4 (a multiple of the stride) and says so; the graph rendered now passes. Failed before: no check_sizes."""
    layer = {"name": "c", "op": "conv2d", "filters": 2, "kernel": 1, "strides": 4, "padding": "same", "input": "x"}
    ir, model = _model("strided", ["h", "w", CHANNELS], [layer])
    values = parity.random_weights(ir, np.random.default_rng(0))
    conv = _keras_layer(layer, ir, values, 2)
    old = onnx.parser.parse_model(render_files(ir)["model.onnx.txt"].decode().replace(
        "pads = [0, 0, 0, 0]", 'auto_pad = "SAME_UPPER"')).SerializeToString()

    def keras_side(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"c": np.asarray(conv(inputs["x"]))}

    def run(graph: Graph) -> parity.Runner:
        return lambda inputs: graph(inputs["x"])

    assert sample_sizes.size_sets(ir) == [{"h": 11, "w": 11}, {"h": 4, "w": 4}, {"h": 5, "w": 5}, {"h": 1, "w": 1}]
    problem = parity.check_sizes(ir, keras_side, run(Graph(ir, old, values)), 1e-4, np.random.default_rng(1))
    assert problem is not None and problem.startswith("output 'c' at h=4, w=4: max |TensorFlow - onnxruntime|")
    assert parity.check_sizes(ir, keras_side, run(Graph(ir, model, values)), 1e-4, np.random.default_rng(1)) is None
