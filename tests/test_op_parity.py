"""Every op: the generated TensorFlow module and onnxruntime on the generated ONNX graph agree.

Same random weights, same random inputs, batch 1 and batch 7; float32 outputs must
agree to a max abs diff of 1e-5.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
import yaml

from specgen.fields.layers import Activation
from specgen.ir.exported import exported
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec, load_spec_text

TOLERANCE = 1e-5  # max |ORT - TF|: two float32 evaluations of one graph, different summation orders
IMAGE = {"image": {"shape": [9, 7, 3]}}  # odd sizes exercise asymmetric SAME padding
VECTOR = {"x": {"shape": [12]}}
SEQUENCE = {"x": {"shape": [12]}}


def conv(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", **params}


def reshaped(*layers: dict[str, Any]) -> list[dict[str, Any]]:
    """[12] -> [4, 3] so that ops see a rank-3 tensor."""
    return [{"name": "seq", "op": "reshape", "shape": [4, 3]}, *layers]


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "dense": (VECTOR, [{"name": "fc", "op": "dense", "units": 5}]),
    "dense_no_bias": (VECTOR, [{"name": "fc", "op": "dense", "units": 5, "use_bias": False}]),
    "dense_rank3": (SEQUENCE, reshaped({"name": "fc", "op": "dense", "units": 5})),
    "dense_rank3_no_bias": (SEQUENCE, reshaped({"name": "fc", "op": "dense", "units": 5, "use_bias": False})),
    **{f"dense_{act}": (VECTOR, [{"name": "fc", "op": "dense", "units": 5, "activation": act}])
       for act in get_args(Activation) if act != "linear"},
    "conv2d_same": (IMAGE, [conv("c")]),
    "conv2d_valid_stride2": (IMAGE, [conv("c", padding="valid", strides=2)]),
    "conv2d_dilated": (IMAGE, [conv("c", dilation=2)]),
    "conv2d_rect_stride": (IMAGE, [conv("c", kernel=[3, 2], strides=[2, 1], activation="relu")]),
    "conv2d_no_bias": (IMAGE, [conv("c", use_bias=False, kernel=1)]),
    "depthwise_conv2d": (IMAGE, [{"name": "d", "op": "depthwise_conv2d", "kernel": 3, "depth_multiplier": 2,
                                  "padding": "same", "strides": 2}]),
    "depthwise_conv2d_valid": (IMAGE, [{"name": "d", "op": "depthwise_conv2d", "kernel": [2, 3]}]),
    "max_pool_same": (IMAGE, [{"name": "p", "op": "max_pool", "size": 3, "strides": 2, "padding": "same"}]),
    "max_pool_valid": (IMAGE, [{"name": "p", "op": "max_pool", "size": 2}]),
    "avg_pool_same": (IMAGE, [{"name": "p", "op": "avg_pool", "size": 3, "strides": 2, "padding": "same"}]),
    "avg_pool_valid": (IMAGE, [{"name": "p", "op": "avg_pool", "size": [2, 3], "strides": 1}]),
    "global_avg_pool": (IMAGE, [conv("c"), {"name": "g", "op": "global_avg_pool"}]),
    "flatten_after_conv": (IMAGE, [conv("c"), {"name": "f", "op": "flatten"}, {"name": "fc", "op": "dense", "units": 3}]),
    "reshape": (IMAGE, [{"name": "r", "op": "reshape", "shape": [-1, 9]}]),
    "batch_norm_4d": (IMAGE, [conv("c"), {"name": "bn", "op": "batch_norm", "epsilon": 0.01}]),
    "batch_norm_2d": (VECTOR, [{"name": "bn", "op": "batch_norm"}]),
    "batch_norm_3d": (SEQUENCE, reshaped({"name": "bn", "op": "batch_norm"})),
    "layer_norm_2d": (VECTOR, [{"name": "ln", "op": "layer_norm"}]),
    "layer_norm_after_conv": (IMAGE, [conv("c"), {"name": "ln", "op": "layer_norm", "epsilon": 1e-5}]),
    "dropout": (VECTOR, [{"name": "fc", "op": "dense", "units": 5}, {"name": "drop", "op": "dropout", "rate": 0.5}]),
    "embedding_int32": ({"ids": {"shape": [6], "dtype": "int32"}},
                        [{"name": "emb", "op": "embedding", "vocab_size": 11, "dim": 4}]),
    "embedding_int64": ({"ids": {"shape": [6], "dtype": "int64"}},
                        [{"name": "emb", "op": "embedding", "vocab_size": 11, "dim": 4},
                         {"name": "fc", "op": "dense", "units": 2}]),
    "relu": (VECTOR, [{"name": "a", "op": "relu"}]),
    "leaky_relu": (VECTOR, [{"name": "a", "op": "leaky_relu", "alpha": 0.1}]),
    "gelu": (VECTOR, [{"name": "a", "op": "gelu"}]),
    "sigmoid": (VECTOR, [{"name": "a", "op": "sigmoid"}]),
    "tanh": (VECTOR, [{"name": "a", "op": "tanh"}]),
    "softmax": (VECTOR, [{"name": "a", "op": "softmax"}]),
    "softmax_after_conv": (IMAGE, [conv("c"), {"name": "a", "op": "softmax"}]),
    "relu_after_conv_as_output": (IMAGE, [conv("c"), {"name": "a", "op": "relu"}]),
    "add": (IMAGE, [conv("a", input="image"), conv("b", input="image"), conv("c", input="image"),
                    {"name": "sum", "op": "add", "inputs": ["a", "b", "c"]}]),
    "add_mixed_layouts": (SEQUENCE, reshaped({"name": "a", "op": "relu"}, {"name": "bn", "op": "batch_norm", "input": "seq"},
                                            {"name": "sum", "op": "add", "inputs": ["a", "bn"]})),
    "multiply": (VECTOR, [{"name": "a", "op": "dense", "units": 4, "input": "x"},
                          {"name": "b", "op": "dense", "units": 4, "input": "x"},
                          {"name": "c", "op": "sigmoid", "input": "b"},
                          {"name": "m", "op": "multiply", "inputs": ["a", "b", "c"]}]),
    "concat_channels_after_conv": (IMAGE, [conv("a", input="image"), conv("b", input="image", filters=2),
                                           {"name": "cat", "op": "concat", "inputs": ["a", "b"]}]),
    "concat_height": (IMAGE, [{"name": "cat", "op": "concat", "inputs": ["image", "image"], "axis": 1}]),
    "concat_2d": (VECTOR, [{"name": "a", "op": "tanh", "input": "x"}, {"name": "cat", "op": "concat", "inputs": ["x", "a"]}]),
}

# Cases of later op families live in tests/op_cases_<family>.py (a CASES dict each, beside that
# family's Keras parity tests), so that engineers adding ops in parallel never edit the same lines.
for _path in sorted(Path(__file__).parent.glob("op_cases_*.py")):
    CASES.update(importlib.import_module(_path.stem).CASES)


def spec_text(name: str, inputs: dict[str, Any], layers: list[dict[str, Any]], opset: int = 21) -> str:
    document = {"specgen": 1, "name": name, "inputs": inputs, "outputs": {"y": layers[-1]["name"]},
                "layers": layers, "export": {"onnx": {"opset": opset}}}
    return yaml.safe_dump(document, sort_keys=False)


def check_parity(loaded: Any, tmp_path: Path, seed: int = 0) -> float:
    """Largest max-abs-diff over batch 1 and batch 7 for one spec."""
    from specgen.runtime import parity

    ir = build_ir(loaded)
    files = render_files(ir)
    model_py = tmp_path / f"{ir.name}_model.py"
    model_py.write_bytes(files["model.py"])
    module = parity.load_generated(model_py)
    model = getattr(module, ir.class_name)(seed=seed)
    rng = np.random.default_rng(seed)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    worst = 0.0
    for batch in (1, 7):
        inputs = parity.random_inputs(ir, batch, rng)
        # TensorFlow computes every output; the ONNX graph those of export.onnx.outputs (ir/exported.py)
        expected = {k: v for k, v in parity.run_tf(model, inputs).items() if k in exported(ir).outputs}
        actual = parity.run_onnx(files["model.onnx"], ir, values, inputs)
        assert {k: v.shape for k, v in actual.items()} == {k: v.shape for k, v in expected.items()}
        worst = float(np.max([worst, parity.max_abs_diff(expected, actual)]))  # Python's max(0.0, nan) is 0.0
    return worst


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_parity(case: str, tmp_path: Path) -> None:
    inputs, layers = CASES[case]
    diff = check_parity(load_spec_text(spec_text(case, inputs, layers), f"{case}.yaml"), tmp_path)
    assert diff <= TOLERANCE, f"{case}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("opset", [18, 19, 20, 21])
def test_gelu_parity_on_every_supported_opset(opset: int, tmp_path: Path) -> None:
    """Opsets before 20 have no Gelu operator; the spelled-out formula must match too."""
    text = spec_text(f"gelu{opset}", VECTOR, [{"name": "fc", "op": "dense", "units": 5, "activation": "gelu"}], opset)
    assert check_parity(load_spec_text(text, "gelu.yaml"), tmp_path) <= TOLERANCE


def covered_ops() -> set[str]:
    """Every op some parity case runs as a layer (tests/test_op_registry.py checks this too)."""
    return {layer["op"] for _, layers in CASES.values() for layer in layers}


def test_every_op_is_covered() -> None:
    from specgen.kinds.ops import REGISTRY

    missing = sorted(set(REGISTRY) - covered_ops())
    assert not missing, f"no parity case in tests/test_op_parity.py CASES runs op(s) {missing}"


@pytest.mark.parametrize("spec_path", sorted((Path(__file__).parents[1] / "examples" / "specs").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_example_parity(spec_path: Path, tmp_path: Path) -> None:
    assert check_parity(load_spec(spec_path), tmp_path) <= TOLERANCE
