"""Parity cases (TensorFlow vs onnxruntime) for positional_embedding; tests/test_op_parity.py picks up `CASES`.
Shorter than max_length (rows sliced), exactly max_length, and KerasHub's TokenAndPositionEmbedding
(embedding, positional_embedding of it, add) feeding a dense. Named lengths: tests/test_positional_embedding.py."""

from __future__ import annotations

from typing import Any

SEQUENCE = {"x": {"shape": [7, 6]}}  # [time, features]


def pe(max_length: int, **params: Any) -> dict[str, Any]:
    return {"name": "pos", "op": "positional_embedding", "max_length": max_length, **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "positional_embedding_sliced": (SEQUENCE, [pe(11)]),
    "positional_embedding_full": (SEQUENCE, [pe(7)]),
    "positional_embedding_tokens": ({"ids": {"shape": [5], "dtype": "int32"}}, [
        {"name": "tok", "op": "embedding", "input": "ids", "vocab_size": 13, "dim": 4}, pe(8, input="tok"),
        {"name": "sum", "op": "add", "inputs": ["tok", "pos"]}, {"name": "out", "op": "dense", "units": 3}]),
}
