"""What an export precision declares where `specgen validate` can read it: its name, file and traits.

No onnx or onnxruntime here (the spec's `export.onnx.precision` is built from these); the conversion and the
kernel check live in the runtime module the kind points to, specgen/runtime/precision/<name>.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrecisionKind:
    """One export precision besides float32 (the export itself, `model.onnx`).

    - `file_name`: the variant written beside model.onnx.
    - `doc`: one line on what it is.
    - `for_gpu`: made for the CUDA provider, so the CPU's kernel refusal says only that it cannot be checked
      there (`--force` then writes it unverified, runtime/precision/verify.py); for the others it is a verdict.
    - `calibrated`: its conversion reads eval examples (`export.onnx.calibration`, `calibration_examples`).
    The runtime module `specgen.runtime.precision.<name>` defines `DEF`, its `PrecisionDef` (convert, check).
    """

    name: str
    file_name: str
    doc: str
    for_gpu: bool = False
    calibrated: bool = False

    @property
    def runtime(self) -> str:
        return f"specgen.runtime.precision.{self.name}"
