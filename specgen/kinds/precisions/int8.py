"""`precision: int8`: static QDQ quantization calibrated on the eval set (specgen/runtime/precision/int8.py)."""

from __future__ import annotations

from specgen.kinds.precisions.base import PrecisionKind

KINDS = (PrecisionKind("int8", "model.int8.onnx",
                       "int8 weights, uint8 activations (static QDQ, per-channel); dynamic for recurrent graphs",
                       calibrated=True),)
