"""`specgen import keras` of MultiHeadAttention from real saved .keras models: self-attention, cross-attention
with a key and an attention_mask input, causal; the imported spec, restored from the file through its own
restore section, equals `model.predict` at two sequence lengths; arguments with no spec form are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import compare, randomize, refusal, run_import  # noqa: E402

from specgen.cli import main  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.runtime.commands.restore import plan_restore  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

RTOL = 1e-5  # relative to the largest output: float32 summation orders differ (two attention layers)


def attention_model() -> Any:
    layers = keras.layers
    q = keras.Input((None, 6), name="q")
    v = keras.Input((None, 4), name="v")
    k = keras.Input((None, 5), name="k")
    m = keras.Input((None, None), name="m")
    h = layers.MultiHeadAttention(2, 4, name="self_att")(q, q, use_causal_mask=True)
    h = layers.MultiHeadAttention(3, 2, value_dim=5, use_bias=False, name="cross")(h, v, k, attention_mask=m)
    h = layers.MultiHeadAttention(2, 3, name="plain_cross", dropout=0.1)(h, v)
    model = keras.Model([q, v, k, m], layers.Dense(2, name="head")(h), name="att")
    randomize(model, scale=0.3)  # scores of order 1: an unsaturated softmax, whose gradients stay small
    return model


def test_attention_import_equals_predict(tmp_path: Path) -> None:
    model = attention_model()
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    keys = {layer["name"]: {k: v for k, v in layer.items() if k != "name"} for layer in doc["layers"]}
    assert keys == {
        "self_att": {"op": "multi_head_attention", "input": "q", "num_heads": 2, "key_dim": 4, "causal": True},
        "cross": {"op": "multi_head_attention", "inputs": ["self_att", "v", "k"], "attention_mask": "m",
                  "num_heads": 3, "key_dim": 2, "value_dim": 5, "use_bias": False},
        "plain_cross": {"op": "multi_head_attention", "inputs": ["cross", "v"], "num_heads": 2, "key_dim": 3,
                        "dropout": 0.1},
        "head": {"op": "dense", "units": 2}}  # input: the previous layer
    # The key/value inputs' steps are named apart from the query's (onnxruntime holds one dim_param to one size).
    assert {n: i["shape"] for n, i in doc["inputs"].items()} == {
        "q": ["dim1", 6], "v": ["dim1_kv1", 4], "k": ["dim1_kv2", 5], "m": ["dim1", "dim2"]}
    loaded = load_spec(spec)
    plan = plan_restore(loaded, {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables})
    assert plan.ok and plan.count("restored") == 8 + 4 + 8 + 2 and not plan.unused  # every weight, from the file
    # By Keras' weight paths (`cross/query/kernel`): test_import_keras's keras_weights keys by the last name part only.
    weights = {w.path: np.asarray(w.numpy()) for w in model.weights}
    rng = np.random.default_rng(6)
    for t, s in ((5, 7), (9, 3)):  # two lengths through one spec; query and key lengths differ
        keep = rng.random((2, t, s)) > 0.4
        keep[..., 0] = True  # every query step attends somewhere
        feeds = {"q": rng.standard_normal((2, t, 6)), "v": rng.standard_normal((2, s, 4)),
                 "k": rng.standard_normal((2, s, 5)), "m": keep}
        assert compare(spec, tmp_path, model, {n: x.astype(np.float32) for n, x in feeds.items()}, weights) < RTOL


@pytest.mark.parametrize("opset", [21, 23])
def test_exported_onnx_equals_predict(opset: int, tmp_path: Path) -> None:
    """`specgen export` of the imported spec (restored from the .keras file) at the plain-node opset and at the
    Attention-node one: onnxruntime equals model.predict at two lengths (query and key lengths differ)."""
    import onnx
    import onnxruntime as ort

    model = attention_model()
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    doc["export"] = {"onnx": {"opset": opset}}
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    graph = onnx.load(tmp_path / "out" / "model.onnx")
    assert [n.op_type for n in graph.graph.node].count("Attention") == (3 if opset == 23 else 0)
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for t, s in ((5, 7), (9, 3)):
        keep = rng.random((2, t, s)) > 0.4
        keep[..., 0] = True  # every query step attends somewhere
        feeds = {"q": rng.standard_normal((2, t, 6)), "v": rng.standard_normal((2, s, 4)),
                 "k": rng.standard_normal((2, s, 5)), "m": keep}
        feeds = {n: x.astype(np.float32) for n, x in feeds.items()}
        theirs = model.predict(feeds, verbose=0)
        (ours,) = session.run(None, feeds)
        assert ours.shape == theirs.shape == (2, t, 2)
        assert float(np.abs(ours - theirs).max() / np.abs(theirs).max()) < RTOL


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"output_shape": 3}, "argument output_shape=[3] cannot be expressed in a spec (no spec form for an output size "
                          "other than the query's)"),
    ({"attention_axes": (1, 2)}, "argument attention_axes=[1, 2] cannot be expressed in a spec (attention over the "
                                 "time axis only)"),
])
def test_attention_arguments_refused(kwargs: dict[str, Any], message: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    shape = (4, 4, 6) if "attention_axes" in kwargs else (None, 6)
    x = keras.Input(shape, name="x")
    model = keras.Model(x, keras.layers.MultiHeadAttention(2, 4, name="att", **kwargs)(x, x))
    err = refusal(tmp_path, model, capsys)
    assert f"Keras layer 'att' (MultiHeadAttention): {message}" in err, err
