"""The precision step of `specgen export`: make the variant, check its kernels, gate it; all before any write."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.model import ModelIR
from specgen.runtime.precision import REGISTRY
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.gates import accuracy_gate, interleaved_medians, speed_verdict
from specgen.runtime.predictor import Predictor
from specgen.spec.load import LoadedSpec

DEFAULT_CALIBRATION = 512
SPEED_BATCH = 8  # the batch the speed gate times: a serving batch, as bench/precision.py's second point


@dataclass(frozen=True)
class PrecisionRequest:
    """What the command line asks; None leaves the spec's `export.onnx` value."""

    precision: str | None = None
    calibration: int | None = None
    force: bool = False
    provider: str = "cpu"


@dataclass(frozen=True)
class Variant:
    name: str
    file_name: str
    model_bytes: bytes
    report: dict[str, Any]


def _where(loaded: LoadedSpec, request: PrecisionRequest, flag: str, key: str, value: Any) -> Callable[[str], SpecError]:
    """A refusal pointing at the flag when the command line gave the value, else at the spec key."""
    given = request.calibration if key == "calibration_examples" else request.precision

    def refuse(message: str) -> SpecError:
        text = f"{message}; nothing was written"
        if given is not None:
            return SpecError([Diagnostic(loaded.display, None, f"{flag} {value}: {text}")])
        return SpecError([loaded.diagnostic(("export", "onnx", key), f"export.onnx.{key} {value}: {text}")])
    return refuse


def _calibration(loaded: LoadedSpec, ir: ModelIR, request: PrecisionRequest, inputs: dict[str, np.ndarray],
                 rows: int) -> Calibration:
    export = ir.training.export if ir.training else None
    asked = request.calibration or (export.calibration_examples if export else None)
    if asked is not None and asked > rows:
        where = _where(loaded, request, "--calibration", "calibration_examples", asked)
        raise where(f"int8 calibration asks for {asked} examples; the eval set has {rows}: ask for {rows} or fewer")
    count = asked or min(DEFAULT_CALIBRATION, rows)
    return Calibration(export.calibration if export else "minmax", {k: v[:count] for k, v in inputs.items()})


def make_variant(loaded: LoadedSpec, ir: ModelIR, model_bytes: bytes, inputs: dict[str, np.ndarray],
                 labels: np.ndarray | None, sample: str, request: PrecisionRequest) -> Variant | None:
    """The gated variant the spec or `--precision` asks for; None for fp32; SpecError (nothing written) else."""
    assert ir.training is not None
    export = ir.training.export
    name = request.precision or export.precision
    if name == "fp32":
        return None
    where = _where(loaded, request, "--precision", "precision", name)
    if sample != "eval set":
        raise where(f"{name} is calibrated and gated on the eval set, and the spec has none: add 'data.eval'")
    definition = REGISTRY[name]
    rows = len(next(iter(inputs.values())))
    calibration = _calibration(loaded, ir, request, inputs, rows) if name == "int8" else Calibration()
    loss = ir.training.loss
    try:
        variant_bytes, converted = definition.convert(model_bytes, calibration)
        fp32 = Predictor(model_bytes, request.provider)  # first: a CUDA that cannot start is said before any check
        kernels = definition.check(variant_bytes, request.provider)
        variant = Predictor(variant_bytes, request.provider)
        gated = accuracy_gate(name, export.budget, fp32(inputs), variant(inputs), labels,
                              loss.logits if loss and loss.target == "sparse" and labels is not None else None)
        batch = {k: v[:SPEED_BATCH] for k, v in inputs.items()}
        times = interleaved_medians(lambda: fp32(batch), lambda: variant(batch))
        speed = speed_verdict(name, variant.provider, len(next(iter(batch.values()))), *times, request.force)
    except PrecisionRefusal as exc:
        raise where(str(exc)) from None
    report = {"precision": name, "file": definition.file_name, "bytes": len(variant_bytes),
              "fp32_bytes": len(model_bytes), **converted, **kernels, "accuracy": gated, "speed": speed}
    return Variant(name, definition.file_name, variant_bytes, report)

