"""What a precision variant is: one runtime module per kind of specgen/kinds/precisions (fp16.py, int8.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgen.errors import SpecgenError
from specgen.kinds.precisions import PrecisionKind


class PrecisionRefusal(SpecgenError, ValueError):
    """Why a variant cannot be made or may not ship: one line, turned into a positioned diagnostic by the caller."""


@dataclass(frozen=True)
class Calibration:
    """How int8 calibrates: the method (spec `export.onnx.calibration`) and the examples (eval set rows)."""

    method: str = "minmax"
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class PrecisionDef:
    """One export precision: its declaration (`kind`: name, file, traits; specgen/kinds/precisions) and how the
    float32 graph becomes it.

    `convert(model_bytes, calibration)` returns the variant's bytes and a report (what was done);
    `check(variant_bytes, provider)` returns what onnxruntime's optimizer made of it (kernel counts),
    raising PrecisionRefusal where an op has no kernel of this precision on that provider.
    """

    kind: PrecisionKind
    convert: Callable[[bytes, Calibration], tuple[bytes, dict[str, Any]]]
    check: Callable[[bytes, str], dict[str, Any]]

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def file_name(self) -> str:
        return self.kind.file_name

    @property
    def doc(self) -> str:
        return self.kind.doc

    @property
    def for_gpu(self) -> bool:
        return self.kind.for_gpu

    @property
    def calibrated(self) -> bool:
        return self.kind.calibrated
