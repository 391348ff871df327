"""Parity cases (TensorFlow vs onnxruntime) for multi_head_attention; tests/test_op_parity.py picks up
`CASES`. With and without bias and the causal mask, value_dim apart from key_dim, one head, and a
layer feeding attention (a dense over the sequence) and one after it, and layer_norm on its rank-3 output;
cross-attention with a value of another length and size, and with a key. Masks, rotary, named lengths and
opset 23 (the Attention node): tests/test_attention_onnx.py."""

from __future__ import annotations

from typing import Any

SEQUENCE = {"x": {"shape": [7, 6]}}  # [time, features]; 7 steps, so a wrong mask or transpose shows
CROSS = {"x": {"shape": [7, 6]}, "v": {"shape": [5, 4]}, "k": {"shape": [5, 3]}}  # query, value, key lengths differ


def mha(**params: Any) -> dict[str, Any]:
    return {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 3, **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "mha": (SEQUENCE, [mha()]),
    "mha_causal": (SEQUENCE, [mha(causal=True)]),
    "mha_no_bias": (SEQUENCE, [mha(use_bias=False)]),
    "mha_causal_no_bias_value_dim": (SEQUENCE, [mha(causal=True, use_bias=False, value_dim=5)]),
    "mha_one_head_dropout": (SEQUENCE, [mha(num_heads=1, key_dim=4, dropout=0.5)]),  # dropout: identity at inference
    "mha_between_dense": (SEQUENCE, [{"name": "fc", "op": "dense", "units": 8}, mha(num_heads=4, causal=True),
                                     {"name": "out", "op": "dense", "units": 2}]),
    # The transformer block's norm: layer_norm over the last axis of a rank-3 tensor.
    "mha_layer_norm": (SEQUENCE, [mha(), {"name": "ln", "op": "layer_norm", "epsilon": 1e-5}]),
    "mha_cross_causal": (CROSS, [mha(inputs=["x", "v"], causal=True)]),
    "mha_cross_key_value_dim": (CROSS, [mha(inputs=["x", "v", "k"], value_dim=2)]),
}
