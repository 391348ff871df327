"""Export precisions: one module per kind (fp16.py, int8.py), this registry, the gates and the export step.

float32 is the export itself (`model.onnx`); a variant is made from it, checked by onnxruntime's
optimizer, gated on accuracy and speed against it (gates.py), and written beside it.
"""

from __future__ import annotations

from specgen.runtime.precision import fp16, int8
from specgen.runtime.precision.base import PrecisionDef

REGISTRY: dict[str, PrecisionDef] = {d.name: d for d in (fp16.DEF, int8.DEF)}
NAMES = ("fp32", *REGISTRY)  # the spec's `export.onnx.precision` literal lists the same names (tests check it)

__all__ = ["NAMES", "REGISTRY", "PrecisionDef"]
