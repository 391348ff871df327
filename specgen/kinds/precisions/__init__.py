"""The export-precision registry: one module per precision besides float32, found by listing this package.

Each module defines a `KINDS` tuple of `PrecisionKind`s (base.py): its file, its traits and, by its name, its
runtime module specgen/runtime/precision/<name>.py (the conversion and kernel check; it imports onnxruntime,
so this half stays apart for `specgen validate`). Derived here: `REGISTRY` (name -> PrecisionKind), `NAMES`
(with `fp32`, the export itself) and `PrecisionName`, the spec's `export.onnx.precision` type;
specgen/runtime/precision/__init__.py derives its registry of `PrecisionDef`s from this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

from specgen.kinds.collect import collect
from specgen.kinds.precisions.base import PrecisionKind

__all__ = ["FLOAT32", "NAMES", "REGISTRY", "PrecisionKind", "PrecisionName", "calibration_mistake"]

# The first precisions, in the order the published JSON schema lists them; later ones follow alphabetically.
SCHEMA_ORDER = ("fp16", "int8")
FLOAT32 = "fp32"  # no variant: model.onnx itself

REGISTRY: dict[str, PrecisionKind] = collect(__name__, __path__, SCHEMA_ORDER)
NAMES = (FLOAT32, *REGISTRY)
if TYPE_CHECKING:  # the registry's names, known at run time
    PrecisionName: TypeAlias = str
else:
    PrecisionName = Literal[NAMES]


def calibration_mistake(precision: str | None, calibration: int | None) -> str | None:
    """Why `--calibration N` means nothing with `precision` (fp32, or a precision whose conversion reads no
    examples: fp16), or None. Refused rather than ignored: the user expected it to change something. Here, not in
    runtime/precision/: `specgen export` says it before any extra is needed (a base install has no onnxruntime)."""
    if calibration is None or precision is None:
        return None
    calibrated = [n for n, d in REGISTRY.items() if d.calibrated]
    if precision in calibrated:
        return None
    return (f"--calibration {calibration}: --calibration sets how many eval examples calibrate "
            f"{' and '.join(calibrated)}; --precision {precision} calibrates nothing: drop --calibration, or ask "
            f"for --precision {calibrated[0]}")
