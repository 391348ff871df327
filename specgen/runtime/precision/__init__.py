"""Export precisions: one runtime module per kind of specgen/kinds/precisions (fp16.py, int8.py), gates, step.

float32 is the export itself (`model.onnx`); a variant is made from it, checked by onnxruntime's
optimizer, gated on accuracy and speed against it (gates.py), and written beside it.
"""

from __future__ import annotations

import importlib

from specgen.kinds.precisions import NAMES
from specgen.kinds.precisions import REGISTRY as KINDS
from specgen.runtime.precision.base import PrecisionDef

# Each declared precision's runtime module (specgen/runtime/precision/<name>.py) defines its DEF.
REGISTRY: dict[str, PrecisionDef] = {name: importlib.import_module(kind.runtime).DEF for name, kind in KINDS.items()}

__all__ = ["NAMES", "REGISTRY", "PrecisionDef"]
