"""`specgen import keras` of Embedding(mask_zero=True) keeps the mask: a real Keras model saved to .keras,
imported, restored from the file, equals `model.predict` on ids padded at the end, at the start and with
holes; a Keras layer after the embedding that cannot take the mask is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import compare, randomize, refusal, run_import  # noqa: E402

RTOL = 1e-5  # relative to the largest output: float32 summation order differs over the steps


def masked_model() -> Any:
    layers = keras.layers
    ids = keras.Input((None,), dtype="int32", name="ids")
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    h = layers.LSTM(6, return_sequences=True, name="enc")(h)
    back = layers.GRU(4, return_sequences=True, go_backwards=True, name="back")(h)
    pooled = layers.GlobalAveragePooling1D(name="pool")(back)
    last = layers.SimpleRNN(3, name="last")(h)
    out = layers.Dense(2, name="head")(layers.Concatenate(name="cat")([pooled, last]))
    model = keras.Model(ids, out, name="masked")
    randomize(model)
    return model


def test_mask_zero_import_equals_predict(tmp_path: Path) -> None:
    model = masked_model()
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert {k: v for k, v in doc["layers"][0].items() if k != "embeddings_init"} == {
        "name": "emb", "op": "embedding", "vocab_size": 12, "dim": 5, "mask_zero": True}
    assert "not_equal" not in {layer["name"] for layer in doc["layers"]}  # Keras' mask op: specgen makes its own
    ids = np.random.default_rng(3).integers(1, 12, (4, 9)).astype(np.int32)
    ids[0, 6:] = 0  # trailing
    ids[1, :4] = 0  # leading
    ids[2, 1::2] = 0  # holes
    for steps in (9, 5):  # the named time dimension: two lengths
        assert compare(spec, tmp_path, model, {"ids": ids[:, :steps]}) < RTOL


def test_a_layer_that_cannot_take_the_imported_mask_is_refused(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    ids = keras.Input((None,), dtype="int32", name="ids")
    h = keras.layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    err = refusal(tmp_path, keras.Model(ids, keras.layers.GlobalMaxPooling1D(name="peak")(h)), capsys)
    assert "layer 'peak' (global_max_pool): its input 'emb' carries the padding mask of embedding 'emb' " \
           "(mask_zero: true), and global_max_pool cannot take a mask: Keras' GlobalMaxPooling1D ignores the " \
           "mask, so padded steps would enter the max" in err, err
