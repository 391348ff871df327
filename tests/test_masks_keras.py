"""Keras parity of masks: Keras' own Embedding(mask_zero=True) followed by LSTM / GRU / SimpleRNN /
GlobalAveragePooling1D / MultiHeadAttention (a functional model, so Keras propagates the mask itself) against
the generated module with the same weights: forward and the gradients of every weight (embeddings included)
within 1e-5, on ids padded at the end, at the start, with holes and (where Keras gives a finite answer) not at
all, at two sequence lengths through one traced graph (tf.function over [batch, None] ids)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_parity import generated_model  # noqa: E402

VOCAB, DIM = 11, 6
# Same float32 ops in different orders (tests/keras_parity.py); gradients of order > 1 compared relative to
# their size, as tests/test_keras_parity_attention.py does (a softmax's gradients grow with the scores).
TOLERANCE = 1e-5


def ids_batch(steps: int, rng: np.random.Generator, empty_row: bool) -> np.ndarray:
    """Rows padded at the end, at the start, with holes, not at all (and all padding when `empty_row`)."""
    real = rng.integers(1, VOCAB, (5, steps)).astype(np.int32)
    real[0, steps - 2:] = 0  # trailing
    real[1, :3] = 0  # leading
    real[2, 1::3] = 0  # holes
    if empty_row:
        real[4] = 0
    return real


def spec_text(layer: dict[str, Any], steps: int | str) -> str:
    import yaml

    document = {"specgen": 1, "name": "masked", "inputs": {"ids": {"shape": [steps], "dtype": "int32"}},
                "outputs": {"y": layer["name"]},
                "layers": [{"name": "emb", "op": "embedding", "input": "ids", "vocab_size": VOCAB, "dim": DIM,
                            "mask_zero": True}, layer]}
    return yaml.safe_dump(document, sort_keys=False)


def keras_model(layer: Any, steps: int | None, causal: bool = False) -> Any:
    ids = keras.Input((steps,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="emb")(ids)
    attention = isinstance(layer, keras.layers.MultiHeadAttention)
    y = layer(x, x, use_causal_mask=causal) if attention else layer(x)
    return keras.Model(ids, y)


def _share_weights(model: Any, theirs: Any, rng: np.random.Generator) -> dict[str, tuple[Any, Any]]:
    """Same values on both sides, each of our variables paired with Keras' weight whose path ends in its role."""
    pairs = {}
    weights = {w.path: w for w in theirs.weights}
    for path, variable in model.variables_by_path().items():
        layer, role = path.split("/", 1)
        direction, _, last = role.rpartition("/")  # Bidirectional: Keras' '<layer>/forward_cell/<cell>/kernel'
        match = [w for p, w in weights.items() if p.startswith(layer + "/") and p.endswith("/" + last)
                 and (not direction or p.startswith(f"{layer}/{direction}_cell/") or f"/{role}" in p)]
        assert len(match) == 1, f"{path}: Keras weights {sorted(weights)}"
        scale = 1.0 / np.sqrt(variable.shape[0])  # glorot-sized: keeps an attention softmax unsaturated
        value = (rng.standard_normal(tuple(variable.shape)) * scale).astype(np.float32)
        variable.assign(value)
        match[0].assign(value)
        pairs[path] = (variable, match[0])
    assert len(pairs) == len(weights)
    return pairs


def _diff(a: Any, b: Any) -> float:
    import tensorflow as tf

    a, b = tf.convert_to_tensor(a).numpy().astype(np.float64), tf.convert_to_tensor(b).numpy().astype(np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def parity(layer: dict[str, Any], keras_layer: Any, tmp_path: Path, lengths: tuple[int, ...], *,
           named: bool = True, empty_row: bool = True) -> dict[str, float]:
    """Largest differences over `lengths`, all run through one tf.function of the generated model."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    model = generated_model(spec_text(layer, "seq" if named else lengths[0]), tmp_path)
    theirs = keras_model(keras_layer, None if named else lengths[0], layer.get("causal", False))
    pairs = _share_weights(model, theirs, rng)
    variables = [v for v, _ in pairs.values()]

    # The tape runs inside the traced graph, so TensorFlow builds the gradient once while tracing; a tape
    # around the call rebuilds the function's forward and backward pair per call (most of the time here).
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec(None, tf.float32)])
    def step(ids: Any, projection: Any) -> tuple[Any, list[Any]]:
        with tf.GradientTape() as tape:
            tape.watch(variables)  # generated variables are not trainable without optimizers
            ours = model({"ids": ids})["y"]
            loss = tf.reduce_sum(ours * projection)
        return ours, tape.gradient(loss, variables)

    diffs: dict[str, float] = {}
    for steps in lengths:
        ids = tf.constant(ids_batch(steps, rng, empty_row))
        with tf.GradientTape() as tape:
            keras_out = theirs(ids)
            projection = tf.constant(rng.standard_normal(tuple(keras_out.shape)).astype(np.float32))
            loss_theirs = tf.reduce_sum(keras_out * projection)
        keras_grads = tape.gradient(loss_theirs, [w for _, w in pairs.values()])
        ours, grads = step(ids, projection)
        found = {"forward": _diff(ours, keras_out)}
        found |= {f"grad {p}": _diff(g, k) for p, g, k in zip(pairs, grads, keras_grads, strict=True)}
        diffs = {k: max(v, diffs.get(k, 0.0)) for k, v in found.items()}
    assert step.experimental_get_tracing_count() == 1  # both lengths through the same graph
    return diffs


def _assert_close(diffs: dict[str, float], roles: int) -> None:
    assert len(diffs) == 1 + roles, sorted(diffs)
    for key, value in diffs.items():
        assert value <= TOLERANCE, f"{key}: {value:.3g} (limit {TOLERANCE})"


KERAS_RNN = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
DIRECTIONS = [pytest.param(seq, back, id=f"{'seq' if seq else 'last'}-{'back' if back else 'fwd'}")
              for seq in (False, True) for back in (False, True)]


@pytest.mark.parametrize(("return_sequences", "go_backwards"), DIRECTIONS)
@pytest.mark.parametrize("op", sorted(KERAS_RNN))
def test_recurrent_masked_like_keras(op: str, return_sequences: bool, go_backwards: bool, tmp_path: Path) -> None:
    params = {"return_sequences": return_sequences, "go_backwards": go_backwards}
    keras_layer = getattr(keras.layers, KERAS_RNN[op])(4, name="r", **params)
    diffs = parity({"name": "r", "op": op, "units": 4, **params}, keras_layer, tmp_path, (7, 12))
    _assert_close(diffs, 4)  # embeddings, kernel, recurrent_kernel, bias


def test_gru_reset_before_masked_like_keras(tmp_path: Path) -> None:
    keras_layer = keras.layers.GRU(3, reset_after=False, return_sequences=True, name="r")
    diffs = parity({"name": "r", "op": "gru", "units": 3, "reset_after": False, "return_sequences": True},
                   keras_layer, tmp_path, (6, 9))
    _assert_close(diffs, 4)


@pytest.mark.parametrize("keepdims", [False, True])
def test_global_avg_pool_masked_like_keras(keepdims: bool, tmp_path: Path) -> None:
    # No all-padding row: Keras' masked mean is 0/0 (NaN) there, as ours; NaN never compares equal.
    keras_layer = keras.layers.GlobalAveragePooling1D(keepdims=keepdims, name="p")
    diffs = parity({"name": "p", "op": "global_avg_pool", "keepdims": keepdims}, keras_layer, tmp_path, (5, 10),
                   empty_row=False)
    _assert_close(diffs, 1)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["fused", "softmax_layer"])
def test_attention_masked_like_keras(causal: bool, dropout: float, tmp_path: Path) -> None:
    """Keras takes two paths: without dropout its fused attention (a fully masked query row is uniform), with
    dropout its Softmax layer (the row is zeros); inference, so no dropout is drawn either way."""
    layer = {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 3, "causal": causal,
             "dropout": dropout}
    keras_layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3, dropout=dropout, name="att")
    diffs = parity(layer, keras_layer, tmp_path, (8,), named=False)
    _assert_close(diffs, 9)  # embeddings and query/key/value/attention_output kernels and biases


def test_masked_stack_like_keras(tmp_path: Path) -> None:
    """Mask through dense (rank 3), a residual add and an LSTM with sequences, consumed by the pool."""
    import tensorflow as tf
    import yaml

    spec = {"specgen": 1, "name": "stack", "inputs": {"ids": {"shape": ["seq"], "dtype": "int32"}},
            "outputs": {"y": "pool"},
            "layers": [{"name": "emb", "op": "embedding", "input": "ids", "vocab_size": VOCAB, "dim": DIM,
                        "mask_zero": True},
                       {"name": "fc", "op": "dense", "units": DIM, "activation": "tanh"},
                       {"name": "sum", "op": "add", "inputs": ["emb", "fc"]},
                       {"name": "r", "op": "lstm", "units": 5, "return_sequences": True},
                       {"name": "pool", "op": "global_avg_pool"}]}
    model = generated_model(yaml.safe_dump(spec, sort_keys=False), tmp_path)
    ids = keras.Input((None,), dtype="int32")
    e = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="emb")(ids)
    s = keras.layers.Add(name="sum")([e, keras.layers.Dense(DIM, activation="tanh", name="fc")(e)])
    y = keras.layers.GlobalAveragePooling1D(name="pool")(keras.layers.LSTM(5, return_sequences=True, name="r")(s))
    theirs = keras.Model(ids, y)
    _share_weights(model, theirs, np.random.default_rng(1))
    batch = ids_batch(9, np.random.default_rng(2), empty_row=False)
    np.testing.assert_allclose(model({"ids": tf.constant(batch)})["y"].numpy(), theirs(batch).numpy(),
                               rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["fused", "softmax_layer"])
def test_cross_attention_masks_like_keras(dropout: float, tmp_path: Path) -> None:
    """Query and value from two mask_zero embeddings: Keras' query mask as rows AND value mask as columns."""
    import tensorflow as tf
    import yaml

    spec = {"specgen": 1, "name": "cross", "outputs": {"y": "att"},
            "inputs": {"q": {"shape": [7], "dtype": "int32"}, "v": {"shape": [5], "dtype": "int32"}},
            "layers": [{"name": "eq", "op": "embedding", "input": "q", "vocab_size": VOCAB, "dim": DIM,
                        "mask_zero": True},
                       {"name": "ev", "op": "embedding", "input": "v", "vocab_size": VOCAB, "dim": DIM,
                        "mask_zero": True},
                       {"name": "att", "op": "multi_head_attention", "inputs": ["eq", "ev"], "num_heads": 2,
                        "key_dim": 3, "dropout": dropout}]}
    model = generated_model(yaml.safe_dump(spec, sort_keys=False), tmp_path)
    q, v = keras.Input((7,), dtype="int32"), keras.Input((5,), dtype="int32")
    eq = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="eq")(q)
    ev = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="ev")(v)
    theirs = keras.Model([q, v], keras.layers.MultiHeadAttention(2, 3, dropout=dropout, name="att")(eq, ev))
    pairs = _share_weights(model, theirs, np.random.default_rng(4))
    rng = np.random.default_rng(5)
    q_ids, v_ids = ids_batch(7, rng, empty_row=True), ids_batch(5, rng, empty_row=False)
    v_ids[3] = 0  # a query row with no key to attend to (uniform without dropout, zeros with it, in Keras)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([ours for ours, _ in pairs.values()])
        ours = model({"q": tf.constant(q_ids), "v": tf.constant(v_ids)})["y"]
        keras_out = theirs([q_ids, v_ids])
        projection = tf.constant(rng.standard_normal(tuple(keras_out.shape)).astype(np.float32))
        loss_ours, loss_theirs = tf.reduce_sum(ours * projection), tf.reduce_sum(keras_out * projection)
    diffs = {"forward": _diff(ours, keras_out)}
    diffs |= {f"grad {p}": _diff(tape.gradient(loss_ours, o), tape.gradient(loss_theirs, w))
              for p, (o, w) in pairs.items()}
    _assert_close(diffs, 10)  # two embeddings, query/key/value/attention_output kernels and biases


@pytest.mark.parametrize("merge_mode", ["concat", "ave"])
@pytest.mark.parametrize(("op", "return_sequences"), [("lstm", True), ("simple_rnn", False), ("gru", True)])
def test_bidirectional_masked_like_keras(op: str, return_sequences: bool, merge_mode: str, tmp_path: Path) -> None:
    inner = getattr(keras.layers, KERAS_RNN[op])(3, return_sequences=return_sequences, name="cell")
    keras_layer = keras.layers.Bidirectional(inner, merge_mode=merge_mode, name="b")
    layer = {"name": "b", "op": "bidirectional", "merge_mode": merge_mode,
             "layer": {"op": op, "units": 3, "return_sequences": return_sequences}}
    diffs = parity(layer, keras_layer, tmp_path, (6, 9))
    _assert_close(diffs, 7)  # embeddings and both directions' kernel, recurrent_kernel, bias
