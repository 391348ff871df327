"""return_state of lstm / gru / simple_rnn: the states as outputs `<layer>/state_h`, `<layer>/state_c`
(lstm) and `<layer>/state` (gru, simple_rnn), against Keras' own layers with return_state=True.

Forward values and one step's gradients of every weight and the input, taken through the output AND the
states together, within 1e-5 (tests/keras_parity.py's tolerances), at two sequence lengths through one
traced graph; TF vs onnxruntime on the generated ONNX; the refusals' exact messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

from keras_parity import FORWARD_TOLERANCE, GRADIENT_TOLERANCE, generated_model  # noqa: E402
from test_op_parity import TOLERANCE, check_parity  # noqa: E402

KERAS = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
STATES = {"lstm": ["state_h", "state_c"], "gru": ["state"], "simple_rnn": ["state"]}
FEATURES, LENGTHS = 5, (6, 9)  # two lengths through one graph: the time axis is the named dimension `seq`


def spec_text(layers: list[dict[str, Any]], outputs: dict[str, str], name: str = "rs") -> str:
    document = {"specgen": 1, "name": name, "inputs": {"x": {"shape": ["seq", FEATURES]}}, "outputs": outputs,
                "layers": layers}
    return yaml.safe_dump(document, sort_keys=False)


def state_outputs(op: str, layer: str = "r") -> dict[str, str]:
    """Spec outputs in Keras' order: y (the layer's output), then its states."""
    return {"y": layer, **{state: f"{layer}/{state}" for state in STATES[op]}}


def keras_diffs(op: str, params: dict[str, Any], tmp_path: Path) -> dict[str, float]:
    layers = [{"name": "r", "op": op, "units": 4, "return_state": True, **params}]
    theirs = getattr(keras.layers, KERAS[op])(4, return_state=True, **params)
    return compare_outputs(layers, state_outputs(op), theirs, lambda w: w.name, tmp_path)


def compare_outputs(layers: list[dict[str, Any]], outputs: dict[str, str], theirs: Any, weight_key: Any,
                    tmp_path: Path, path_key: Any = lambda p: p.split("/", 1)[1]) -> dict[str, float]:
    """Max abs diffs of every output (Keras' list, in `outputs`' order) and of every gradient of the sum of
    random projections of all of them, worst over both lengths. A spec path `<layer>/<key>` meets the Keras
    weight whose weight_key(w) is `<key>`."""
    import tensorflow as tf

    model = generated_model(spec_text(layers, outputs), tmp_path)
    theirs.build((None, None, FEATURES))
    rng = np.random.default_rng(0)
    ours = model.variables_by_path()
    by_key = {weight_key(w): w for w in theirs.weights}
    assert sorted(by_key) == sorted(path_key(p) for p in ours)
    for path, variable in ours.items():
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32)
        variable.assign(value)
        by_key[path_key(path)].assign(value)
    pairs = [(v, by_key[path_key(p)]) for p, v in ours.items()]
    # One traced graph for both lengths: the generated module under a signature with a dynamic time axis.
    # The tape runs inside it, so TensorFlow builds the gradient while tracing (once); a tape around the
    # call instead rebuilds the function's forward and backward pair per call, most of this file's time.
    @tf.function(input_signature=[tf.TensorSpec([None, None, FEATURES], tf.float32),
                                  [tf.TensorSpec(None, tf.float32)] * len(outputs)])
    def run(x: Any, projections: list[Any]) -> tuple[list[Any], list[Any]]:
        with tf.GradientTape() as tape:
            tape.watch([x, *ours.values()])  # generated variables may be non-trainable tf.Variables
            mine = [model({"x": x})[k] for k in outputs]
            loss = sum(tf.reduce_sum(o * p) for o, p in zip(mine, projections, strict=True))
        return mine, tape.gradient(loss, [x, *ours.values()])

    diffs: dict[str, float] = {}
    for steps in LENGTHS:
        x = tf.Variable(rng.standard_normal((3, steps, FEATURES)).astype(np.float32))
        with tf.GradientTape() as tape:
            keras_out = theirs(x)
            projections = [tf.constant(rng.standard_normal(tuple(o.shape)).astype(np.float32)) for o in keras_out]
            loss_keras = sum(tf.reduce_sum(o * p) for o, p in zip(keras_out, projections, strict=True))
        keras_grads = tape.gradient(loss_keras, [x, *(b for _, b in pairs)])
        mine, grads = run(x, projections)
        for key, a, b in zip(outputs, mine, keras_out, strict=True):
            assert tuple(a.shape) == tuple(b.shape), f"{key}: {a.shape} here, {b.shape} in Keras"
            _worst(diffs, f"forward {key}", a, b)
        for path, a, b in zip(ours, grads[1:], keras_grads[1:], strict=True):
            _worst(diffs, f"grad {path}", a, b)
        _worst(diffs, "grad input", grads[0], keras_grads[0])
    return diffs


def assert_within(diffs: dict[str, float]) -> None:
    for key, value in diffs.items():
        limit = FORWARD_TOLERANCE if key.startswith("forward") else GRADIENT_TOLERANCE
        assert value <= limit, f"{key}: max abs diff {value:.3g} (limit {limit})"


def _worst(diffs: dict[str, float], key: str, a: Any, b: Any) -> None:
    value = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
    diffs[key] = max(diffs.get(key, 0.0), value) if value == value else value  # keep a NaN: it must fail


CASES = [pytest.param(op, {"return_sequences": seq, "go_backwards": back},
                      id=f"{op}-{'seq' if seq else 'last'}-{'back' if back else 'fwd'}")
         for op in KERAS for seq in (False, True) for back in (False, True)]
CASES.append(pytest.param("gru", {"reset_after": False}, id="gru-reset_before"))


@pytest.mark.parametrize(("op", "params"), CASES)
def test_states_match_keras(op: str, params: dict[str, Any], tmp_path: Path) -> None:
    diffs = keras_diffs(op, params, tmp_path)
    roles = ("kernel", "recurrent_kernel", "bias")
    assert set(diffs) == {*(f"forward {k}" for k in state_outputs(op)), "grad input", *(f"grad r/{r}" for r in roles)}
    assert_within(diffs)


@pytest.mark.parametrize(("op", "params"), CASES)
def test_states_tf_vs_onnxruntime(op: str, params: dict[str, Any], tmp_path: Path) -> None:
    # A reader of a state (a dense on it) and the states as graph outputs.
    layers = [{"name": "r", "op": op, "units": 4, "return_state": True, **params},
              {"name": "fc", "op": "dense", "units": 2, "input": f"r/{STATES[op][-1]}"}]
    text = spec_text(layers, {**state_outputs(op), "fc": "fc"})
    assert check_parity(load_spec_text(text, "rs.yaml"), tmp_path) <= TOLERANCE


def errors(layers: list[dict[str, Any]], outputs: dict[str, str]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(spec_text(layers, outputs), "rs.yaml"))
    return str(caught.value).splitlines()


def test_unknown_state_is_refused_naming_the_outputs() -> None:
    layers = [{"name": "r", "op": "lstm", "units": 4, "return_state": True},
              {"name": "fc", "op": "dense", "units": 2, "input": "r/state"}]
    assert errors(layers, {"y": "fc"}) == [
        "rs.yaml:18:10: error: layer 'fc' reads 'r/state'; layer 'r' has no output 'state' "
        "(its outputs are r, r/state_h, r/state_c)"]


def test_state_without_return_state_is_refused() -> None:
    layers = [{"name": "r", "op": "gru", "units": 4}]
    assert errors(layers, {"y": "r", "h": "r/state"}) == [
        "rs.yaml:10:6: error: output 'h' names 'r/state'; layer 'r' has no output 'state' (its one output is r)"]


def test_layer_named_like_a_state_is_refused() -> None:
    layers = [{"name": "r", "op": "gru", "units": 4, "return_state": True},
              {"name": "r/state", "op": "relu", "input": "r"}]
    assert errors(layers, {"y": "r/state"}) == [
        "rs.yaml:15:9: error: layer 'r/state' and output 'r/state' of layer 'r' both become 'r__state' in the "
        "generated ONNX graph; rename one of them",
        "rs.yaml:15:9: error: layer 'r/state' and output 'r/state' of layer 'r' both become 'r_state' in the "
        "generated Python code; rename one of them"]


SEQ2SEQ = {"lstm": ["enc/state_h", "enc/state_c"], "gru": ["enc/state"], "simple_rnn": ["enc/state"]}


def seq2seq_layers(op: str, back: bool) -> list[dict[str, Any]]:
    """An encoder's states start a decoder (both read x: one input keeps the helpers' signature)."""
    return [{"name": "enc", "op": op, "units": 4, "return_state": True, "go_backwards": back},
            {"name": "dec", "op": op, "units": 4, "return_sequences": True, "input": "x",
             "initial_state": SEQ2SEQ[op]}]


@pytest.mark.parametrize("back", [False, True], ids=["fwd", "back"])
@pytest.mark.parametrize("op", list(KERAS))
def test_initial_state_matches_keras(op: str, back: bool, tmp_path: Path) -> None:
    """Keras' decoder(x, initial_state=encoder states): outputs and gradients reach the encoder's weights."""
    x = keras.Input((None, FEATURES))
    encoder = getattr(keras.layers, KERAS[op])(4, return_state=True, go_backwards=back)
    decoder = getattr(keras.layers, KERAS[op])(4, return_sequences=True)
    enc_out, *states = encoder(x)
    theirs = keras.Model(x, [decoder(x, initial_state=states), enc_out])
    owner = {id(w): "enc" for w in encoder.weights} | {id(w): "dec" for w in decoder.weights}
    diffs = compare_outputs(seq2seq_layers(op, back), {"y": "dec", "e": "enc"}, theirs,
                            lambda w: f"{owner[id(w)]}/{w.name}", tmp_path, path_key=lambda p: p)
    roles = ("kernel", "recurrent_kernel", "bias")
    assert set(diffs) == {"forward y", "forward e", "grad input", *(f"grad {n}/{r}" for n in ("enc", "dec")
                                                                     for r in roles)}
    assert_within(diffs)


@pytest.mark.parametrize("op", list(KERAS))
def test_initial_state_tf_vs_onnxruntime(op: str, tmp_path: Path) -> None:
    layers = seq2seq_layers(op, True)
    layers[1]["use_bias"] = False  # ONNX's B then an empty input before initial_h
    text = spec_text(layers, {"y": "dec"})
    assert check_parity(load_spec_text(text, "rs.yaml"), tmp_path) <= TOLERANCE
    text = spec_text(seq2seq_layers(op, False), {"y": "dec", **state_outputs(op, "enc")})
    assert check_parity(load_spec_text(text, "rs.yaml"), tmp_path) <= TOLERANCE


def test_initial_state_of_the_wrong_size_is_refused() -> None:
    layers = [{"name": "enc", "op": "gru", "units": 3, "return_state": True},
              {"name": "dec", "op": "lstm", "units": 4, "input": "x", "initial_state": ["enc/state", "enc/state"]}]
    assert errors(layers, {"y": "dec"}) == [
        "rs.yaml:20:3: error: layer 'dec' (lstm): initial_state: its state_h must be float32 [batch, 4] (units); "
        "received float32 [batch, 3]"]
    layers[1]["initial_state"] = ["enc/state"]
    assert errors(layers, {"y": "dec"}) == [
        "rs.yaml:20:3: error: layer 'dec' (lstm): initial_state of lstm needs 2 tensor(s) (state_h, state_c); "
        "received 1"]
