"""Parity cases (TensorFlow vs onnxruntime) for bidirectional; tests/test_op_parity.py picks up `CASES`.
Every cell with every merge mode, both output selections (tests/test_bidirectional.py runs the same at two
lengths through one graph), both GRU bias layouts, no bias, and a bidirectional layer feeding another."""

from __future__ import annotations

from typing import Any

SEQUENCE = {"x": {"shape": [7, 5]}}  # [time, features]; 7 steps, odd so a wrong reversal shows
MERGES = ("concat", "sum", "mul", "ave")


def bidir(op: str, merge_mode: str = "concat", name: str = "b", **params: Any) -> dict[str, Any]:
    return {"name": name, "op": "bidirectional", "merge_mode": merge_mode, "layer": {"op": op, "units": 4, **params}}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    **{f"bidirectional_{op}_{merge}{'_seq' if seq else ''}": (SEQUENCE, [bidir(op, merge, return_sequences=seq)])
       for op in ("lstm", "gru", "simple_rnn") for merge in MERGES for seq in (False, True)},
    "bidirectional_gru_reset_before": (SEQUENCE, [bidir("gru", reset_after=False, return_sequences=True)]),
    "bidirectional_lstm_no_bias": (SEQUENCE, [bidir("lstm", "sum", use_bias=False)]),
    "bidirectional_lstm_hard_sigmoid_relu": (SEQUENCE, [bidir("lstm", recurrent_activation="hard_sigmoid",
                                                              activation="relu", return_sequences=True)]),
    "bidirectional_stacked": (SEQUENCE, [bidir("lstm", name="a", return_sequences=True),
                                         bidir("gru", "ave", name="b"), {"name": "fc", "op": "dense", "units": 2}]),
}
