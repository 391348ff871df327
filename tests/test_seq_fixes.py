"""Sequence fixes checked against Keras 3 and the exported model's input checks.

- `multiply` of masked tensors computes Keras' Multiply values (keras/src/layers/merging/multiply.py): a masked
  input counts as 1 at its masked steps, the output is 0 where every input is masked. TF and onnxruntime.
- An export records the smallest length a named dimension takes (`specgen.min_lengths`) and the ids an
  embedding takes (`specgen.id_ranges`); the Predictor (`specgen infer` and `serve`) refuses inputs outside them
  in one line, and a model without the keys runs as before.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime import parity
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.predictor import InputError, Predictor
from specgen.spec.load import load_spec_text

V, D = 11, 4
# Row 1 of a is all padding; b pads other steps, so some steps are padded in one input only, some in both.
A = np.array([[0, 3, 0, 5, 2, 0], [0, 0, 0, 0, 0, 0], [4, 0, 0, 1, 0, 6]], np.int32)
B = np.array([[1, 0, 0, 5, 2, 7], [0, 0, 3, 0, 0, 0], [0, 0, 0, 0, 0, 9]], np.int32)


def _ir(doc: dict[str, Any]) -> ModelIR:
    return build_ir(load_spec_text(yaml.safe_dump({"specgen": 1, **doc}, sort_keys=False), f"{doc['name']}.yaml"))


@pytest.mark.parametrize("b_masked", [True, False], ids=["both_masked", "one_masked"])
def test_multiply_of_masked_embeddings_equals_keras(b_masked: bool, tmp_path: Path) -> None:
    """Every step of the product (no pool, so padded steps are compared too) equals Keras' Multiply; on the old
    code the difference was the raw padded rows' product, of order 1 with N(0, 1) tables."""
    keras = pytest.importorskip("keras")
    ir = _ir({"name": f"mul{int(b_masked)}", "inputs": {"a": {"shape": ["t"], "dtype": "int32"},
                                                        "b": {"shape": ["t"], "dtype": "int32"}},
              "outputs": {"y": "m"}, "layers": [
                  {"name": "ea", "op": "embedding", "input": "a", "vocab_size": V, "dim": D, "mask_zero": True},
                  {"name": "eb", "op": "embedding", "input": "b", "vocab_size": V, "dim": D, "mask_zero": b_masked},
                  {"name": "m", "op": "multiply", "inputs": ["ea", "eb"]}]})
    files = render_files(ir)
    path = tmp_path / "model.py"
    path.write_bytes(files["model.py"])
    model = getattr(parity.load_generated(path), ir.class_name)(seed=0)
    values = parity.random_weights(ir, np.random.default_rng(0))
    values = {k: np.random.default_rng(1).standard_normal(v.shape).astype(np.float32) for k, v in values.items()}
    parity.assign(model, values)
    K = keras.layers
    ia, ib = keras.Input((None,), dtype="int32", name="a"), keras.Input((None,), dtype="int32", name="b")
    ea, eb = K.Embedding(V, D, mask_zero=True), K.Embedding(V, D, mask_zero=b_masked)
    reference = keras.Model({"a": ia, "b": ib}, K.Multiply()([ea(ia), eb(ib)]))
    ea.embeddings.assign(values["ea/embeddings"])
    eb.embeddings.assign(values["eb/embeddings"])
    feeds = {"a": A, "b": B}
    theirs = np.asarray(reference.predict(feeds, verbose=0))
    ours = parity.run_tf(model, feeds)["y"]
    onnx_out = parity.run_onnx(files["model.onnx"], ir, values, feeds)["y"]
    assert np.abs(ours - theirs).max() <= 1e-6
    assert np.abs(onnx_out - theirs).max() <= 1e-6
    # The rule itself, on Keras' numbers: a step padded in b only is a's row alone (b counts as 1); padded in both,
    # 0 when both are masked, else b's raw row 0 (a counts as 1); row 1 of a is all padding.
    table_a, table_b = values["ea/embeddings"], values["eb/embeddings"]
    np.testing.assert_allclose(theirs[0, 3], table_a[5] * table_b[5], rtol=1e-6)
    np.testing.assert_allclose(theirs[0, 1], table_a[3] if b_masked else table_a[3] * table_b[0], rtol=1e-6)
    np.testing.assert_allclose(theirs[0, 2], 0 if b_masked else table_b[0], rtol=1e-6)
    row = np.where(B[1, :, None] > 0, table_b[B[1]], 0) if b_masked else table_b[B[1]]
    np.testing.assert_allclose(theirs[1], row, rtol=1e-6)


def _export(ir: ModelIR) -> bytes:
    """The model as `specgen export` writes it: with_weights stamps runtime/lengths.py's metadata."""
    values = parity.random_weights(ir, np.random.default_rng(0))
    return with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, values).SerializeToString()


def _without(model_bytes: bytes, key: str) -> bytes:
    """The same model exported before `key` existed."""
    model = onnx.load_from_string(model_bytes)
    kept = [p for p in model.metadata_props if p.key != key]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    return model.SerializeToString()


SHORT = {"name": "short", "inputs": {"x": {"shape": ["t", 6]}}, "outputs": {"logits": "out"}, "layers": [
    {"name": "c", "op": "conv1d", "filters": 4, "kernel": 4}, {"name": "p", "op": "max_pool1d", "size": 5},
    {"name": "g", "op": "global_avg_pool"}, {"name": "out", "op": "dense", "units": 2}]}


def test_export_refuses_lengths_below_the_smallest() -> None:
    """conv1d kernel 4 (valid) then max_pool1d 5 need t >= 8. onnxruntime alone answers t = 5 with one pooled
    step (TensorFlow refuses it); the stamped minimum makes the Predictor refuse it in one line."""
    model_bytes = _export(_ir(SHORT))
    meta = {p.key: p.value for p in onnx.load_from_string(model_bytes).metadata_props}
    assert meta == {"specgen.min_lengths": '{"t": [8, "p", "max_pool1d"]}'}
    predictor = Predictor(model_bytes, "cpu")
    x = np.random.default_rng(0).standard_normal((2, 5, 6)).astype(np.float32)
    with pytest.raises(InputError, match=re.escape(
            "input 'x': received 5 steps along 't' (shape [2, 5, 6]), expected at least 8: layer 'p' (max_pool1d) "
            "needs at least 8")):
        predictor({"x": x})
    assert predictor.out_of_range({"x": x[:, :4]}) is not None
    assert predictor({"x": np.zeros((2, 8, 6), np.float32)})["logits"].shape == (2, 2)
    assert predictor({"x": np.zeros((1, 13, 6), np.float32)})["logits"].shape == (1, 2)
    old = Predictor(_without(model_bytes, "specgen.min_lengths"), "cpu")  # an older export: answered as before
    assert old({"x": x})["logits"].shape == (2, 2)


def test_min_lengths_only_where_one_symbol_decides() -> None:
    """A plain dense model records only 1 (no empty axis); a strided same conv (a period, not a bound) neither."""
    from specgen.runtime import lengths

    plain = {"name": "plain", "inputs": {"x": {"shape": ["t", 3]}}, "outputs": {"y": "d"},
             "layers": [{"name": "d", "op": "dense", "units": 2}]}
    strided = {"name": "strided", "inputs": {"x": {"shape": ["t", 3]}}, "outputs": {"y": "c"},
               "layers": [{"name": "c", "op": "conv1d", "filters": 2, "kernel": 3, "strides": 2, "padding": "same"}]}
    assert lengths.minima(_ir(plain)) == {"t": (1, "d", "dense")}
    assert lengths.minima(_ir(strided)) == {"t": (1, "c", "conv1d")}
    assert lengths.minima(_ir(SHORT)) == {"t": (8, "p", "max_pool1d")}


IDS = {"name": "ids", "inputs": {"ids": {"shape": ["t"], "dtype": "int32"}}, "outputs": {"y": "r"}, "layers": [
    {"name": "emb", "op": "embedding", "vocab_size": 5, "dim": 3, "mask_zero": True},
    {"name": "r", "op": "lstm", "units": 2}]}


def test_export_refuses_ids_outside_the_table() -> None:
    """ONNX Gather reads id -1 as row 4 (the generated TensorFlow model refuses it): the Predictor refuses a
    negative id and one >= vocab_size with the same one line; 0 (padding) and vocab_size - 1 run."""
    model_bytes = _export(_ir(IDS))
    meta = {p.key: p.value for p in onnx.load_from_string(model_bytes).metadata_props}
    assert meta == {"specgen.min_lengths": '{"t": [1, "emb", "embedding"]}',
                    "specgen.id_ranges": '{"ids": [0, 5, "emb", "embedding"]}'}
    predictor = Predictor(model_bytes, "cpu")
    for bad, at in ((-1, "[0, 1]"), (5, "[0, 1]"), (-5, "[0, 1]")):
        with pytest.raises(InputError, match=re.escape(
                f"input 'ids': received id {bad} at {at}, expected ids in [0, 4]: layer 'emb' (embedding) takes "
                "ids below 5")):
            predictor({"ids": np.array([[1, bad, 2]], np.int32)})
    assert predictor({"ids": np.array([[0, 4, 1]], np.int32)})["y"].shape == (1, 2)
    old = Predictor(_without(model_bytes, "specgen.id_ranges"), "cpu")  # an older export: -1 wraps to row 4
    np.testing.assert_array_equal(old({"ids": np.array([[1, -1, 2]], np.int32)})["y"],
                                  old({"ids": np.array([[1, 4, 2]], np.int32)})["y"])


def test_limits_metadata_is_read_as_data() -> None:
    """Entries of another shape in a hand-edited file are ignored, never a crash."""
    from specgen.runtime import lengths

    assert lengths.read_minima({"specgen.min_lengths": "{bad"}) == {}
    assert lengths.read_minima({"specgen.min_lengths": '{"t": [8, "p"], "u": [3, "c", "conv1d"]}'}) == \
        {"u": (3, "c", "conv1d")}
    assert lengths.read_ids({"specgen.id_ranges": '{"ids": [0, "5", "e", "embedding"], "k": [0, 7, "e", "x"]}'}) == \
        {"k": (0, 7, "e", "x")}
