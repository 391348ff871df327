"""TF-vs-onnxruntime parity cases of rms_norm (tests/test_op_parity.py picks up `CASES`): on a vector,
on a sequence with a named time dimension (run at runtime/parity.py's SYMBOL_SIZE steps), after a
dense over the sequence, and with Keras' epsilon and a large one (so a dropped epsilon shows)."""

from __future__ import annotations

from typing import Any

SEQ = {"x": {"shape": ["seq", 6]}}


def rms(**params: Any) -> dict[str, Any]:
    return {"name": "rn", "op": "rms_norm", **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "rms_norm_vector": ({"x": {"shape": [12]}}, [rms()]),
    "rms_norm_sequence_eps": (SEQ, [rms(epsilon=0.5)]),
    "rms_norm_after_dense": (SEQ, [{"name": "fc", "op": "dense", "units": 8}, rms()]),
}
