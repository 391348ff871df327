"""multi_head_attention, generated TensorFlow vs onnxruntime on the generated ONNX graph: self- and
cross-attention, an explicit attention_mask (0/1 floats and integers), causal, rotary, at opset 21 (plain
nodes) and 23 (one Attention node), each graph run at two sequence lengths (named dimensions `t` and `s`,
query and key lengths different). Same weights and inputs; max abs diff over max abs value <= 1e-5."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5  # relative: two float32 evaluations of one graph in different summation orders
LENGTHS = ({"t": 5, "s": 9}, {"t": 11, "s": 3})  # two sequence lengths through one graph, query != key


def spec(layer: dict[str, Any], opset: int, mask: str | None = None, cross: int = 0) -> str:
    inputs: dict[str, Any] = {"q": {"shape": ["t", 6]}}
    if cross:
        inputs["v"] = {"shape": ["s", 4]}
    if cross > 1:
        inputs["k"] = {"shape": ["s", 5]}
    if mask:
        inputs["m"] = {"shape": ["t", "s" if cross else "t"], "dtype": mask}
    wiring = {"inputs": ["q", "v", "k"][:cross + 1]} if cross else {"input": "q"}
    wiring |= {"attention_mask": "m"} if mask else {}
    document = {"specgen": 1, "name": "att", "inputs": inputs, "outputs": {"y": "att"},
                "layers": [{"name": "att", "op": "multi_head_attention", **wiring, **layer}],
                "export": {"onnx": {"opset": opset}}}
    return yaml.safe_dump(document, sort_keys=False)


def run_both(text: str, tmp_path: Path, seed: int = 0) -> tuple[list[float], bytes]:
    """Relative max diffs (one per length) and the ONNX graph's bytes."""
    from specgen.runtime import parity

    ir = build_ir(load_spec_text(text, "case.yaml"))
    files = render_files(ir)
    (tmp_path / "att_model.py").write_bytes(files["model.py"])
    model = parity.load_generated(tmp_path / "att_model.py").Att(seed=seed)
    rng = np.random.default_rng(seed)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    diffs = []
    for sizes in LENGTHS:
        inputs = random_inputs(ir, rng, sizes)
        want = parity.run_tf(model, inputs)["y"]
        got = parity.run_onnx(files["model.onnx"], ir, values, inputs)["y"]
        assert got.shape == want.shape == (3, sizes["t"], 6)
        diffs.append(float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
    return diffs, files["model.onnx"]


def random_inputs(ir: Any, rng: np.random.Generator, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Normal floats for q, v, k; the mask `m` 0/1 in its dtype, every query step keeping key step 0
    (a fully masked row is Keras' uniform average over -1e9 scores, not a case these graphs are for)."""
    found = {}
    for node_input in ir.inputs:
        shape = (3, *(sizes[d] if isinstance(d, str) else d for d in node_input.shape[1:]))
        if node_input.name == "m":
            keep = rng.random(shape) > 0.4
            keep[..., 0] = True
            found["m"] = keep.astype(node_input.dtype)
        else:
            found[node_input.name] = rng.standard_normal(shape).astype(np.float32)
    return found


CASES = {
    "self": ({}, None, 0),
    "self_causal": ({"causal": True}, None, 0),
    "cross": ({}, None, 1),
    "cross_key_value_dim_no_bias": ({"value_dim": 3, "use_bias": False}, None, 2),
    "cross_mask_float": ({}, "float32", 1),
    "cross_mask_int_causal": ({"causal": True}, "int32", 2),
    "self_mask_int64": ({}, "int64", 0),
    "cross_causal": ({"causal": True}, None, 1),
    "rotary_self_causal": ({"rotary": {}, "causal": True}, None, 0),
    "rotary_cross_scaled": ({"rotary": {"max_wavelength": 100, "scaling_factor": 2.0}}, "float32", 2),
}


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tf_matches_onnxruntime(case: str, opset: int, tmp_path: Path) -> None:
    params, mask, cross = CASES[case]
    layer = {"num_heads": 2, "key_dim": 4, **params}
    diffs, graph = run_both(spec(layer, opset, mask, cross), tmp_path)
    assert max(diffs) <= TOLERANCE, diffs
    ops = [n.op_type for n in onnx.load_from_string(graph).graph.node]
    assert ops.count("Attention") == (1 if opset >= 23 else 0)
    assert ("Softmax" in ops) == (opset < 23)


def test_encoder_block_at_opset_23(tmp_path: Path) -> None:
    """A post-norm encoder block at opset 23: one Attention, one LayerNormalization and one Gelu node per use
    (single nodes, no decomposition), the same numbers as TensorFlow at both lengths."""
    layers = [{"name": "att", "op": "multi_head_attention", "input": "q", "num_heads": 2, "key_dim": 3},
              {"name": "res", "op": "add", "inputs": ["q", "att"]},
              {"name": "ln", "op": "layer_norm", "epsilon": 1e-5},
              {"name": "ff", "op": "dense", "units": 6, "activation": "gelu"}]
    text = yaml.safe_dump({"specgen": 1, "name": "att", "inputs": {"q": {"shape": ["t", 6]}}, "outputs": {"y": "ff"},
                           "layers": layers, "export": {"onnx": {"opset": 23}}}, sort_keys=False)
    diffs, graph = run_both(text, tmp_path)
    assert max(diffs) <= TOLERANCE, diffs
    model = onnx.load_from_string(graph)
    ops = [n.op_type for n in model.graph.node]
    assert (ops.count("Attention"), ops.count("LayerNormalization"), ops.count("Gelu"), ops.count("Softmax")) == (1, 1, 1, 0)
    assert (model.ir_version, model.opset_import[0].version) == (11, 23)
