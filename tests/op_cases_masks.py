"""Parity cases (TensorFlow vs onnxruntime) for layers that take a mask_zero embedding's mask; tests/test_op_parity.py
picks up `CASES`. Its random ids put zeros anywhere (holes, leading padding), which the ONNX graph must handle
as TensorFlow does (tests/test_masks.py covers the padding layouts one by one)."""

from __future__ import annotations

from typing import Any

IDS = {"ids": {"shape": [9], "dtype": "int32"}}
EMBEDDING = {"name": "emb", "op": "embedding", "input": "ids", "vocab_size": 5, "dim": 4, "mask_zero": True}

CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "masked_lstm": (IDS, [EMBEDDING, {"name": "r", "op": "lstm", "units": 3}]),
    "masked_gru_seq_back": (IDS, [EMBEDDING, {"name": "r", "op": "gru", "units": 3, "return_sequences": True,
                                              "go_backwards": True}]),
    "masked_simple_rnn_seq": (IDS, [EMBEDDING, {"name": "r", "op": "simple_rnn", "units": 3, "return_sequences": True}]),
    "masked_global_avg_pool": (IDS, [EMBEDDING, {"name": "fc", "op": "dense", "units": 3, "activation": "relu"},
                                     {"name": "p", "op": "global_avg_pool"}]),
    "masked_attention": (IDS, [EMBEDDING, {"name": "att", "op": "multi_head_attention", "num_heads": 2,
                                           "key_dim": 2}]),
}
