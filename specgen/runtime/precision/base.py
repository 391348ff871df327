"""What a precision variant is: one registered kind per module (fp16.py, int8.py), as the other registries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgen.errors import SpecgenError


class PrecisionRefusal(SpecgenError, ValueError):
    """Why a variant cannot be made or may not ship: one line, turned into a positioned diagnostic by the caller."""


@dataclass(frozen=True)
class Calibration:
    """How int8 calibrates: the method (spec `export.onnx.calibration`) and the examples (eval set rows)."""

    method: str = "minmax"
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class PrecisionDef:
    """One export precision: the file it is written to and how the float32 graph becomes it.

    `convert(model_bytes, calibration)` returns the variant's bytes and a report (what was done);
    `check(variant_bytes, provider)` returns what onnxruntime's optimizer made of it (kernel counts),
    raising PrecisionRefusal where an op has no kernel of this precision on that provider. `for_gpu`: the
    variant is made for the CUDA provider, so the CPU's refusal says only that it cannot be checked there
    (`--force` then writes it unverified, precision/verify.py); for the others a refusal is a verdict.
    """

    name: str
    file_name: str
    convert: Callable[[bytes, Calibration], tuple[bytes, dict[str, Any]]]
    check: Callable[[bytes, str], dict[str, Any]]
    doc: str
    for_gpu: bool = False
