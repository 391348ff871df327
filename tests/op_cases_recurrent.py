"""Parity cases (TensorFlow vs onnxruntime) for lstm, gru and simple_rnn; tests/test_op_parity.py picks
up `CASES`. Every direction and output selection, both GRU bias layouts, no bias, a non-default
activation, and a recurrent layer feeding another (sequences in, sequences out)."""

from __future__ import annotations

from typing import Any

SEQUENCE = {"x": {"shape": [7, 5]}}  # [time, features]; 7 steps, odd so a wrong reversal shows


def rnn(op: str, **params: Any) -> dict[str, Any]:
    return {"name": "r", "op": op, "units": 4, **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    **{f"{op}{'_seq' if seq else ''}{'_back' if back else ''}": (
        SEQUENCE, [rnn(op, return_sequences=seq, go_backwards=back)])
       for op in ("lstm", "gru", "simple_rnn") for seq in (False, True) for back in (False, True)},
    "gru_reset_before": (SEQUENCE, [rnn("gru", reset_after=False)]),
    "gru_reset_before_seq_back": (SEQUENCE, [rnn("gru", reset_after=False, return_sequences=True, go_backwards=True)]),
    "lstm_no_bias": (SEQUENCE, [rnn("lstm", use_bias=False)]),
    "gru_no_bias": (SEQUENCE, [rnn("gru", use_bias=False, return_sequences=True)]),
    "simple_rnn_relu_no_bias": (SEQUENCE, [rnn("simple_rnn", activation="relu", use_bias=False)]),
    "lstm_hard_sigmoid_relu": (SEQUENCE, [rnn("lstm", recurrent_activation="hard_sigmoid", activation="relu")]),
    "gru_hard_sigmoid": (SEQUENCE, [rnn("gru", recurrent_activation="hard_sigmoid", reset_after=False)]),
    "lstm_stacked_dense": (SEQUENCE, [{"name": "a", "op": "lstm", "units": 6, "return_sequences": True},
                                      {"name": "b", "op": "gru", "units": 3, "go_backwards": True},
                                      {"name": "fc", "op": "dense", "units": 2}]),
}
