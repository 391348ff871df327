"""What a precision variant is: one runtime module per kind of specgen/kinds/precisions (fp16.py, int8.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgen.errors import SpecgenError
from specgen.kinds.precisions import PrecisionKind

SAMPLE_SEED = 0  # the draw of `spread_rows`: fixed, so the same eval set always gives the same rows


def spread_rows(total: int, count: int) -> np.ndarray:
    """`count` row indices of `total`, drawn without replacement (seeded: SAMPLE_SEED), in ascending order; all rows
    when `count` >= `total`.

    For int8 calibration and the gate sample recorded for the server: never the first rows, since an `images` eval
    set lists its files class by class (its first 40 rows are one class). A seeded draw rather than a stride: a
    stride can alias with a periodic order (classes interleaved every k rows)."""
    if count >= total:
        return np.arange(total)
    return np.sort(np.random.default_rng(SAMPLE_SEED).choice(total, size=count, replace=False))


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
    `emulate(variant_bytes, inputs)`, for a precision the CPU provider has no kernels for (fp16), returns the
    variant's outputs with its arithmetic emulated on the CPU and figures for the report (PrecisionRefusal
    where that arithmetic fails, a float16 overflow): the accuracy gate of a variant written unverified runs on
    it, since the CPU provider would run such a variant in float32 (fp16_emulation.py says why).
    """

    kind: PrecisionKind
    convert: Callable[[bytes, Calibration], tuple[bytes, dict[str, Any]]]
    check: Callable[[bytes, str], dict[str, Any]]
    emulate: Callable[[bytes, dict[str, np.ndarray]], tuple[dict[str, np.ndarray], dict[str, Any]]] | None = None

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
