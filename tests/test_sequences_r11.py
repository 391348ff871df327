"""Checker round 11, sequences: the shipped decoder blocks after a mask_zero embedding against KerasHub's
TransformerDecoder at padded and real steps (multi_head_attention's `query_mask: false`), TF and ONNX; the Keras
importer's lengths shared by a query and a value, and its mask merges; a KerasHub weights file holding more than
its config; the oneDNN DT_BOOL notice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

# Padding at the end, in a hole, and at the start (under the causal mask a padded first step allows no key:
# Keras gives it the mean of the values, as the spec does).
IDS = np.array([[3, 5, 7, 2, 0, 0, 0, 0], [4, 0, 6, 9, 1, 0, 0, 0], [0, 0, 3, 8, 1, 2, 0, 0]], np.int32)
MEMORY_IDS = np.array([[1, 2, 3, 0, 0], [5, 0, 6, 7, 0], [9, 9, 0, 0, 0]], np.int32)
# float32 through two transformer sublayers, a conv and a pool with weights of std 0.5 (outputs of order 1-10):
# two evaluations differ by a few ulps of the largest intermediate (measured 2e-6); the bug was 0.38-1.4.
TOLERANCE = 2e-5


def _spec(cross: bool, normalize_first: bool, opset: int) -> str:
    """The finding's model: a mask_zero embedding, a decoder block, then an unmasked add (Keras drops the mask
    there, so padded steps reach the conv, the pool and the head); the decoder's sequence is an output too."""
    inputs: dict[str, Any] = {"ids": {"shape": ["seq"], "dtype": "int32"}}
    block: dict[str, Any] = {"name": "dec", "block": "transformer_decoder_cross" if cross else "transformer_decoder",
                             "with": {"hidden_dim": 8, "intermediate_dim": 16, "num_heads": 2,
                                      "normalize_first": normalize_first}}
    layers: list[dict[str, Any]] = [{"name": "emb", "op": "embedding", "input": "ids", "vocab_size": 20, "dim": 8,
                                     "mask_zero": True}]
    if cross:
        inputs["mem"] = {"shape": ["src"], "dtype": "int32"}
        layers.append({"name": "memb", "op": "embedding", "input": "mem", "vocab_size": 20, "dim": 8,
                       "mask_zero": True})
        block["inputs"] = ["emb", "memb"]
    else:
        block["input"] = "emb"
    layers += [block, {"name": "pos", "op": "positional_embedding", "max_length": 16},
               {"name": "mixed", "op": "add", "inputs": ["dec", "pos"]},
               {"name": "conv", "op": "conv1d", "filters": 4, "kernel": 3, "padding": "same"},
               {"name": "pool", "op": "global_avg_pool"}, {"name": "head", "op": "dense", "units": 3}]
    document = {"specgen": 1, "name": "dec", "inputs": inputs, "outputs": {"seq": "dec", "y": "head"},
                "layers": layers, "export": {"onnx": {"opset": opset}}}
    return yaml.safe_dump(document, sort_keys=False)


def _keras_model(cross: bool, normalize_first: bool) -> Any:
    keras = pytest.importorskip("keras")
    keras_hub = pytest.importorskip("keras_hub")
    from keras import layers as kl

    ids = keras.Input((None,), dtype="int32", name="ids")
    e = kl.Embedding(20, 8, mask_zero=True, name="emb")(ids)
    decoder = keras_hub.layers.TransformerDecoder(16, 2, normalize_first=normalize_first, name="dec")
    inputs = [ids]
    if cross:
        mem = keras.Input((None,), dtype="int32", name="mem")
        inputs.append(mem)
        d = decoder(e, kl.Embedding(20, 8, mask_zero=True, name="memb")(mem))
    else:
        d = decoder(e)
    p = keras_hub.layers.PositionEmbedding(16, name="pos")(d)
    x = kl.Conv1D(4, 3, padding="same", name="conv")(kl.Add(name="mixed")([d, p]))
    out = kl.Dense(3, name="head")(kl.GlobalAveragePooling1D(name="pool")(x))
    return keras.Model(inputs, [d, out])


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("cross", [False, True], ids=["decoder", "decoder_cross"])
def test_decoder_blocks_match_keras_hub_at_padded_steps(cross: bool, normalize_first: bool, opset: int,
                                                        tmp_path: Path) -> None:
    """KerasHub's decoder attends from a padded query step to the real keys (its CachedMultiHeadAttention takes no
    query_mask): the sequence output at padded and real steps, and the head output those steps reach, in TF and
    in onnxruntime, equal KerasHub's (the old blocks masked the query rows: 0.38 at the head, 1.4 at padded steps)."""
    from specgen.runtime import parity

    keras_model = _keras_model(cross, normalize_first)
    ir = build_ir(load_spec_text(_spec(cross, normalize_first, opset), "dec.yaml"))
    files = render_files(ir)
    (tmp_path / "dec_model.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "dec_model.py"), ir.class_name)(seed=0)
    rng, by_path = np.random.default_rng(0), {w.path: w for w in keras_model.weights}
    values = {}
    for path, variable in model.variables_by_path().items():
        values[path] = rng.normal(0, 0.5, tuple(variable.shape)).astype(np.float32) + (1 if "gamma" in path else 0)
        by_path[path].assign(values[path])
    parity.assign(model, values)
    inputs = {"ids": IDS} | ({"mem": MEMORY_IDS} if cross else {})
    sequence, head = keras_model.predict([inputs[k] for k in sorted(inputs, key=["ids", "mem"].index)], verbose=0)
    real = IDS != 0
    for got in (parity.run_tf(model, inputs), parity.run_onnx(files["model.onnx"], ir, values, inputs)):
        assert np.abs(got["seq"] - sequence)[~real].max() <= TOLERANCE  # padded steps
        assert np.abs(got["seq"] - sequence)[real].max() <= TOLERANCE
        assert np.abs(got["y"] - head).max() <= TOLERANCE * max(1.0, float(np.abs(head).max()))


def test_query_mask_false_is_keras_attention_with_the_keys_mask(tmp_path: Path) -> None:
    """multi_head_attention `query_mask: false` after a mask_zero embedding is Keras' MultiHeadAttention called on
    unmasked tensors with attention_mask = the keys' padding AND causal (what KerasHub's decoder passes); the
    default is Keras' MHA on the masked tensors (query rows masked too)."""
    pytest.importorskip("keras")
    from keras import layers as kl

    from specgen.runtime import parity

    layers = [{"name": "emb", "op": "embedding", "input": "ids", "vocab_size": 20, "dim": 8, "mask_zero": True},
              {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 4, "causal": True,
               "query_mask": False}]
    document = {"specgen": 1, "name": "att", "inputs": {"ids": {"shape": ["seq"], "dtype": "int32"}},
                "outputs": {"y": "att"}, "layers": layers}
    ir = build_ir(load_spec_text(yaml.safe_dump(document, sort_keys=False), "att.yaml"))
    (tmp_path / "att_model.py").write_bytes(render_files(ir)["model.py"])
    model = getattr(parity.load_generated(tmp_path / "att_model.py"), ir.class_name)(seed=0)
    embedding, attention = kl.Embedding(20, 8, name="emb"), kl.MultiHeadAttention(2, 4, name="att")
    x = embedding(IDS)
    attention(x, x)  # builds its weights
    keys, causal = IDS != 0, np.tril(np.ones((IDS.shape[1],) * 2, bool))
    by_path = {w.path: w for w in [*embedding.weights, *attention.weights]}
    rng = np.random.default_rng(1)
    values = {p: rng.normal(0, 0.5, tuple(v.shape)).astype(np.float32) for p, v in model.variables_by_path().items()}
    for path, value in values.items():
        by_path[path].assign(value)
    parity.assign(model, values)
    x = embedding(IDS)  # a plain tensor: Keras fills in no query mask
    expected = attention(x, x, attention_mask=keys[:, None, :] & causal[None]).numpy()
    got = parity.run_tf(model, {"ids": IDS})["y"]
    assert np.abs(got - expected).max() <= 1e-5


def _import_compare(tmp_path: Path, model: Any, feeds: dict[str, np.ndarray], by_path: bool = True
                    ) -> tuple[dict[str, Any], float]:
    """The imported spec and its max relative difference from Keras; weights by Keras' paths (`mha/query/kernel`)
    or, `by_path` false, by the last name part (test_import_keras's keras_weights: `lstm/kernel`)."""
    from test_import_keras import compare, randomize, run_import

    randomize(model)
    model.save(tmp_path / "m.keras")
    assert run_import(tmp_path / "m.keras", "-o", tmp_path / "m.yaml") == 0
    weights = {w.path: np.asarray(w.numpy()) for w in model.weights} if by_path else None
    return yaml.safe_load((tmp_path / "m.yaml").read_text()), compare(tmp_path / "m.yaml", tmp_path, model, feeds,
                                                                      weights)


@pytest.mark.parametrize("merge", ["Add", "Multiply", "Subtract"])
def test_a_value_that_is_also_part_of_the_query_keeps_the_query_length(tmp_path: Path, merge: str) -> None:
    """mha(merge(x, y), x): x reaches the query through a merge, so its steps are the query's (it was named
    dim1_kv1 and the merge then refused as 'dim1_kv1' vs 'dim1'); a memory only a value reads keeps its own name."""
    keras = pytest.importorskip("keras")
    from keras import layers as kl

    x, y, m = (keras.Input((None, 8), name=n) for n in ("x", "y", "m"))
    query = getattr(kl, merge)(name="merged")([x, y])
    out = kl.MultiHeadAttention(2, 4, name="mha")(query, x)
    out = kl.MultiHeadAttention(2, 4, name="cross")(out, m)  # m: the value only, its own length
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(2, 5, 8)), "y": rng.normal(size=(2, 5, 8)), "m": rng.normal(size=(2, 3, 8))}
    doc, diff = _import_compare(tmp_path, keras.Model([x, y, m], out), {k: v.astype(np.float32) for k, v in feeds.items()})
    assert {k: v["shape"][0] for k, v in doc["inputs"].items()} == {"x": "dim1", "y": "dim1", "m": "dim1_kv1"}
    assert diff < 1e-5


def test_concatenate_of_masked_embeddings_imports_as_concat(tmp_path: Path) -> None:
    """Keras' Concatenate mask merge (ExpandDims, ZerosLike, LogicalOr, Concatenate, Any ops) imports as the spec's
    concat, whose mask is the OR of its inputs' (it was refused as 'a mask other than an Embedding's' naming the
    LSTM); equal to Keras on padded ids."""
    keras = pytest.importorskip("keras")
    from keras import layers as kl

    a = keras.Input((5,), dtype="int32", name="a")  # concat needs fixed sizes
    e1, e2 = (kl.Embedding(10, 4, mask_zero=True, name=n)(a) for n in ("e1", "e2"))
    h = kl.LSTM(3, return_sequences=True, name="lstm")(kl.Concatenate(name="cat")([e1, e2]))
    out = kl.GRU(2, name="gru")(kl.Concatenate(name="cat2")([h, kl.Dense(3, name="d")(e1)]))  # a mask of a merge
    ids = np.array([[3, 4, 0, 0, 0], [0, 0, 5, 6, 7], [1, 0, 2, 0, 3]], np.int32)
    doc, diff = _import_compare(tmp_path, keras.Model(a, out), {"a": ids}, by_path=False)
    assert [(layer["name"], layer["op"]) for layer in doc["layers"] if layer["op"] == "concat"] == [
        ("cat", "concat"), ("cat2", "concat")]
    assert diff < 1e-5


def test_a_keras_hub_weights_file_of_a_deeper_backbone_is_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """config.json gives 1 layer, the weights file holds 2: refused in one line naming the unused weights (it was
    imported, and only the export said 'unused 16')."""
    keras = pytest.importorskip("keras")
    keras_hub = pytest.importorskip("keras_hub")
    from test_import_keras import run_import

    keras.utils.set_random_seed(0)
    sizes = {"vocabulary_size": 50, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64,
             "max_sequence_length": 16}
    keras_hub.models.BertBackbone(num_layers=1, **sizes).save(tmp_path / "bert1.keras")
    keras_hub.models.BertBackbone(num_layers=2, **sizes).save_weights(tmp_path / "bert2.weights.h5")
    capsys.readouterr()
    assert run_import(tmp_path / "bert1.keras", "--weights", tmp_path / "bert2.weights.h5", "-o",
                      tmp_path / "b.yaml") == 1
    group = "'transformer_layer_1/feedforward_"
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / 'bert1.keras'}: error: the weights hold 16 ({group}intermediate_dense/vars/0', "
        f"{group}intermediate_dense/vars/1', {group}layer_norm/vars/0', {group}layer_norm/vars/1', "
        f"{group}output_dense/vars/0' and 11 more) that none of the 23 variables config.json gives reads (a backbone "
        "with more layers or other sizes wrote them): config.json and the weights disagree", "1 error found"]
    assert not (tmp_path / "b.yaml").exists()


def test_the_onednn_dt_bool_notice_is_filtered_and_other_util_lines_are_not() -> None:
    """TensorFlow's AVX2-machine notice at every masked model's graph is start-up chatter (it printed an 'E' line
    before specgen's own); another util.cc line, or the notice with more after it, still reaches the user."""
    from specgen.native_logs import NOISE

    line = (b"E0000 00:00:1796667918.202745   23230 util.cc:131] oneDNN supports DT_BOOL only on platforms with "
            b"AVX-512. Falling back to the default Eigen-based implementation if present.")
    assert NOISE.match(line)
    assert not NOISE.match(line + b" And something else.")
    assert not NOISE.match(b"E0000 00:00:1796667918.202745   23230 util.cc:131] something went wrong")
