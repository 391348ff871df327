"""`precision: fp16`: float16 weights and compute, float32 IO (specgen/runtime/precision/fp16.py converts)."""

from __future__ import annotations

from specgen.kinds.precisions.base import PrecisionKind

KINDS = (PrecisionKind("fp16", "model.fp16.onnx",
                       "float16 weights and compute, float32 IO; normalizations and softmax in float32", for_gpu=True),)
