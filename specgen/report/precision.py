"""`specgen report`'s precision section: the spec's `train.precision`, `train.jit_compile` and
`export.onnx.precision`; with a run (`specgen report --html --run RUN`) the loss scale and skipped updates it
logged, and the precision variants its export folder holds with their gates' figures.

No TensorFlow or onnxruntime here: the run's figures come from its TensorBoard scalars (what `specgen train`
logs beside its progress line) and from export.json, as `specgen export` wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from specgen import text
from specgen.ir.model import ModelIR
from specgen.ir.training.model import ExportIR
from specgen.kinds.features import precision
from specgen.report.export_check import FP32, Checked
from specgen.report.export_lines import variant_lines

# Keras' LossScaleOptimizer defaults, as specgen/runtime/lib/precision.py (INITIAL_SCALE, GROWTH_INTERVAL) uses
# them; restated here because that module imports TensorFlow (tests/test_report_precision.py checks they agree).
INITIAL_SCALE = 2**15
GROWTH_INTERVAL = 2000
COMPUTE = {"float32": "float32 throughout",
           "mixed_float16": "float16 compute with dynamic loss scaling",
           "mixed_bfloat16": "bfloat16 compute"}
KEPT = "; variables, optimizer slots, EMA shadows and checkpoints float32; normalizations, softmax and losses in float32"
# The TensorBoard tags of the trainer's progress_values (templates/tf/features/precision.py.j2), stage `train`.
SCALE_TAG, SKIPPED_TAG = "loss_scale", "skipped_updates"


class Scalars(Protocol):
    """One logged scalar of a run (specgen/pictures/curves.py's Series, a frozen dataclass: read-only here too)."""

    @property
    def stage(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def steps(self) -> tuple[int, ...]: ...
    @property
    def values(self) -> tuple[float, ...]: ...


def _export(export: ExportIR) -> str:
    if export.precision == "fp32":
        return "fp32: model.onnx only"
    gate = (f"kept only if it loses at most {export.budget:g} points of accuracy (classifiers) or "
            f"{export.budget:g}% relative error, and runs faster than float32")
    if export.precision == "int8":
        count = export.calibration_examples or "512 (or all, when fewer)"
        return f"int8: model.int8.onnx beside model.onnx, calibrated ({export.calibration}) on {count} eval examples, {gate}"
    return f"{export.precision}: model.{export.precision}.onnx beside model.onnx, {gate}"


def precision_table(ir: ModelIR, logged: Sequence[Scalars] = ()) -> str | None:
    """The precision settings (and, from a run's `logged` scalars, the loss scale); None when all are float32."""
    training = ir.training
    if training is None:
        return None
    train, export = training.train, training.export
    if train is None:
        return None
    policy = precision.of(train)
    if policy == "float32" and not train.jit_compile and export.precision == "fp32":
        return None
    rows = [("train.precision", f"{policy}: {COMPUTE[policy]}" + ("" if policy == "float32" else KEPT)),
            ("train.jit_compile", "true: the training step compiled with XLA" if train.jit_compile else "false")]
    if policy == "mixed_float16":
        rows.append(("loss scale", f"dynamic: starts at {INITIAL_SCALE}, halved on an update with non-finite "
                     f"gradients (the update is skipped), doubled after {GROWTH_INTERVAL} finite ones in a row"))
        rows += _logged_scale(logged)
    rows.append(("export.onnx.precision", _export(export)))
    return text.table(("setting", "value"), rows)


def _logged_scale(logged: Sequence[Scalars]) -> list[tuple[str, str]]:
    last = {s.tag: (s.steps[-1], s.values[-1]) for s in logged if s.stage == "train" and s.tag in (SCALE_TAG, SKIPPED_TAG)}
    if SCALE_TAG not in last or SKIPPED_TAG not in last:
        return []
    (step, scale), (_, skipped) = last[SCALE_TAG], last[SKIPPED_TAG]
    return [("run's loss scale", f"{scale:g} at step {step}, {int(skipped)} updates skipped so far")]


def variants_lines(folder: Path, shown_folder: str, report: Mapping[str, Any], checked: Checked | None = None) -> list[str]:
    """The precision variants an export folder holds; the gates' figures of the one export.json describes, unless
    its file (or model.onnx, the float32 side of every figure) is not the one they were measured on (`checked`: the
    folder's files against export.json, as the report's other figures read them)."""
    described: Mapping[str, Any] = report.get("precision") or {"precision": "fp32"}
    files = sorted(p.name for p in folder.glob("model.*.onnx"))
    lines = [f"precision variants: {', '.join(['model.onnx (fp32)', *files])}"]
    if described["precision"] != "fp32":
        checked = checked or Checked(folder, report)
        lines += checked.figures(("gate",), (described["file"], FP32), f"specgen export --precision {described['precision']}",
                                 "gate it", variant_lines(shown_folder, described))
    for name in files:
        if name != described.get("file"):  # an earlier export's file: export.json holds only the last export
            lines.append(f"{name}: no gate figures (export.json describes the last export, {described['precision']}); "
                         f"run specgen export --precision {name.split('.')[1]} again to gate it")
    return lines
