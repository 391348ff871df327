"""Parity cases (TensorFlow vs onnxruntime) for take and padding_attention_mask; tests/test_op_parity.py picks
up `CASES`. take: the first step (BERT's pooler), the last (negative index), a middle axis of a rank-4 tensor,
on a named time axis. padding_attention_mask: a mask with zeros (relu of a random input: about half are 0)
alone and feeding a causal attention, as KerasHub's decoder uses it."""

from __future__ import annotations

from typing import Any

SEQUENCE = {"x": {"shape": [7, 6]}}  # [time, features]
NAMED = {"x": {"shape": ["seq", 6]}}


def take(index: int, **params: Any) -> dict[str, Any]:
    return {"name": "pick", "op": "take", "index": index, **params}


MASKED = {"x": {"shape": [5, 4]}, "m": {"shape": [5]}}
MASK = [{"name": "keep", "op": "relu", "input": "m"},
        {"name": "mask", "op": "padding_attention_mask", "input": "keep"}]

CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "take_first": (SEQUENCE, [take(0), {"name": "pool", "op": "dense", "units": 3, "activation": "tanh"}]),
    "take_last": (SEQUENCE, [take(-1)]),
    "take_rank4": ({"image": {"shape": [4, 5, 3]}}, [take(-2, axis=2)]),
    "take_named": (NAMED, [take(2)]),
    "padding_attention_mask": (MASKED, MASK),
    "padding_attention_mask_causal": (MASKED, [*MASK, {
        "name": "att", "op": "multi_head_attention", "input": "x", "attention_mask": "mask", "num_heads": 2,
        "key_dim": 3, "causal": True}]),
}
