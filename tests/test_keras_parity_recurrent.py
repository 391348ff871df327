"""Keras parity of lstm, gru and simple_rnn: Keras' own LSTM / GRU / SimpleRNN layers with the same
configuration and weights (forward and the gradients of every weight and the input within 1e-5;
tests/keras_parity.py), both output selections and both directions; positioned spec errors; the
orthogonal and unit-forget-bias initializers against Keras' own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir.gains import init_moments
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare, generated_model, layer_spec  # noqa: E402

KERAS = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
SHAPE = [6, 5]  # [time, features]
DIRECTIONS = [pytest.param(seq, back, id=f"{'seq' if seq else 'last'}-{'back' if back else 'fwd'}")
              for seq in (False, True) for back in (False, True)]


def _both(op: str, **params: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Keras' layer and the spec layer with the same keys (Keras' names but `use_bias`, which match)."""
    layer = getattr(keras.layers, KERAS[op])(4, **params)
    return layer, [{"name": "r", "op": op, "units": 4, **params}]


def _check(op: str, tmp_path: Path, **params: Any) -> None:
    keras_layer, spec_layers = _both(op, **params)
    diffs = compare(keras_layer, spec_layers, SHAPE, tmp_path)
    roles = ("kernel", "recurrent_kernel", "bias") if params.get("use_bias", True) else ("kernel", "recurrent_kernel")
    assert set(diffs) == {"forward", "grad input", *(f"grad r/{r}" for r in roles)}
    assert_close(diffs)


@pytest.mark.parametrize(("return_sequences", "go_backwards"), DIRECTIONS)
@pytest.mark.parametrize("op", ["lstm", "simple_rnn"])
def test_matches_keras(op: str, return_sequences: bool, go_backwards: bool, tmp_path: Path) -> None:
    _check(op, tmp_path, return_sequences=return_sequences, go_backwards=go_backwards)


@pytest.mark.parametrize(("return_sequences", "go_backwards"), DIRECTIONS)
@pytest.mark.parametrize("reset_after", [True, False], ids=["reset_after", "reset_before"])
def test_gru_matches_keras(reset_after: bool, return_sequences: bool, go_backwards: bool, tmp_path: Path) -> None:
    _check("gru", tmp_path, reset_after=reset_after, return_sequences=return_sequences, go_backwards=go_backwards)


@pytest.mark.parametrize(("op", "params"), [
    ("lstm", {"use_bias": False, "recurrent_activation": "hard_sigmoid", "activation": "relu"}),
    ("gru", {"use_bias": False, "reset_after": False}),
    ("gru", {"recurrent_activation": "hard_sigmoid", "return_sequences": True}),
    ("simple_rnn", {"activation": "relu", "return_sequences": True}),
])
def test_options_match_keras(op: str, params: dict[str, Any], tmp_path: Path) -> None:
    _check(op, tmp_path, **params)


def test_initial_weights_follow_keras(tmp_path: Path) -> None:
    """orthogonal recurrent kernels (Q^T Q = I) and unit_forget_bias' ones on the forget gate only."""
    text = layer_spec("init", SHAPE, [{"name": "l", "op": "lstm", "units": 3, "bias_init": {"kind": "constant",
                                                                                             "value": 0.5}},
                                      {"name": "w", "op": "simple_rnn", "units": 2, "input": "x",
                                       "recurrent_init": {"kind": "orthogonal", "gain": 2.0}}])
    weights = {k: v.numpy() for k, v in generated_model(text, tmp_path).variables_by_path().items()}
    ir = build_ir(load_spec_text(text, "init.yaml"))
    np.testing.assert_array_equal(weights["l/bias"], np.array([0.5] * 3 + [1.0] * 3 + [0.5] * 6, np.float32))
    q = weights["l/recurrent_kernel"]  # [3, 12]: orthonormal rows, as Keras' Orthogonal for a wide matrix
    np.testing.assert_allclose(q @ q.T, np.eye(3), atol=1e-6)  # float32 QR: identity to ~1e-7 per entry
    w = weights["w/recurrent_kernel"]
    np.testing.assert_allclose(w.T @ w, 4.0 * np.eye(2), atol=1e-5)  # gain 2: columns of norm 2
    # The init-scale lint's moments (ir/gains.py): E[w^2] is exact for orthonormal rows or columns (the mean
    # is 0 in expectation only) and both are exact for the fixed bias; 1e-6 is float32 rounding.
    for path, exact_mean in (("l/recurrent_kernel", False), ("w/recurrent_kernel", False), ("l/bias", True)):
        variable = next(v for v in ir.variables if v.path == path)
        mean, square = init_moments(variable.init, variable.shape)
        value = weights[path].astype(np.float64)
        assert square == pytest.approx((value * value).mean(), abs=1e-6), path
        assert mean == (pytest.approx(value.mean(), abs=1e-6) if exact_mean else 0.0), path


LAYERS = """specgen: 1
name: bad
inputs:
  x: {shape: [6, 5]}
  v: {shape: [5]}
outputs:
  y: last
layers:
LAST
"""

ERRORS = [
    ("rank2", "  - {name: last, op: lstm, input: v, units: 4}",
     "9:35: error: layer 'last' (lstm): lstm needs a rank-3 input (batch, time, features); "
     "received [batch, 5]"),
    ("units_zero", "  - {name: last, op: gru, input: x, units: 0}",
     "9:44: error: units: received 0, expected a value > 0 (in layer 'last')"),
    ("units_float", "  - {name: last, op: simple_rnn, input: x, units: 2.5}",
     "9:51: error: units: expected an integer, received 2.5 (float) (in layer 'last')"),
    ("initial_state", "  - {name: last, op: lstm, input: x, units: 4, initial_state: [x]}",
     "9:63: error: layer 'last' (lstm): initial_state of lstm needs 2 tensor(s) (state_h, state_c); received 1"),
    ("forget_bias_random", "  - {name: last, op: lstm, input: x, units: 4, bias_init: he_normal}",
     "9:59: error: layer 'last' (lstm): unit_forget_bias: true needs a fixed bias_init (zeros, ones or "
     "constant); received he_normal; set unit_forget_bias: false to draw the whole bias from he_normal"),
    ("bad_activation", "  - {name: last, op: gru, input: x, units: 4, activation: softmax}",
     "9:59: error: activation: received 'softmax', expected 'hard_sigmoid', 'relu', 'sigmoid' or 'tanh' "
     "(in layer 'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(LAYERS.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["1 error found"] and err[0].endswith(f"spec.yaml:{expected}"), err
    assert list(tmp_path.iterdir()) == [path]  # nothing written
