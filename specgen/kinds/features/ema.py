"""`train.ema`: moving-average shadows of every trainable weight, updated after each optimizer update.

Everything of it but its runtime library lives here: its spec key and IR entry (`Ema`, `EmaIR`, `TRAIN_KEY`),
its checkpoint keys, its training state, its render plan. `specgen export` (export.onnx.weights: ema)
and restore maps read the shadows by `shadow(path)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from specgen.diagnostics import Diagnostic
from specgen.fields.base import Flag, SpecModel, UnitInterval
from specgen.kinds.features.base import FeatureDef, StateRow, TrainKey

ROOT = "ema"  # first part of every shadow's checkpoint key, and its collection


class Ema(SpecModel):
    decay: UnitInterval
    eval: Flag = Field(True, description="Evaluate with the shadow weights.")


@dataclass(frozen=True)
class EmaIR:
    decay: float
    eval: bool  # evaluate with the shadows


def resolve(ema: Ema | None) -> EmaIR | None:
    return EmaIR(ema.decay, ema.eval) if ema else None


def of(train: Any) -> EmaIR | None:
    """train.ema of a TrainIR (None: no shadows)."""
    ema: EmaIR | None = train.ema
    return ema


TRAIN_KEY = TrainKey("ema", Ema | None, Field(None), after="clip", ir_type=EmaIR | None, ir_default=lambda: None,
                     resolve=resolve)


def shadow(path: str) -> str:
    """The checkpoint key of a trainable weight's EMA shadow."""
    return f"{ROOT}/{path}"


def check(loaded: Any) -> list[Diagnostic]:
    """`export.onnx.weights: ema` without train.ema, refused at its position (loaded: a LoadedSpec)."""
    spec = loaded.spec
    if spec.export.onnx.weights != "ema" or (spec.train and spec.train.ema):
        return []
    return [loaded.diagnostic(("export", "onnx", "weights"),
                              "export weights 'ema' needs 'train.ema' (no shadow weights exist without it)")]


def variables(training: Any, trainable: list[str], shapes: dict[str, tuple[int, ...]]) -> list[StateRow]:
    """One float32 shadow per trainable weight, in the `ema` collection (training: TrainingIR)."""
    if training.train is None or of(training.train) is None:
        return []
    return [(shadow(p), shapes[p], "float32", (ROOT,)) for p in trainable]


@dataclass(frozen=True)
class EmaPlan:
    """templates/tf/features/ema.py.j2's context."""

    key: str  # the shadows' key prefix (ROOT)
    decay: float


def plan(ir: Any) -> EmaPlan:
    """The render plan of a spec with train.ema (ir: its ModelIR)."""
    shadows = of(ir.training.train)
    assert shadows is not None  # rendered only when enabled
    return EmaPlan(ROOT, shadows.decay)


FEATURE = FeatureDef(
    name="ema",
    doc="moving-average shadows of the trainable weights, for evaluation and export",
    spec_keys=("train.ema", "export.onnx.weights: ema"),
    enabled=lambda ir: of(ir.training.train) is not None,
    train_key=TRAIN_KEY,
    table=(("ema", "`train.ema`"),),
    state=("specgen.kinds.features.ema.shadow",),
    partial="tf/features/ema.py.j2",
    hooks=("init", "after_step", "ema_variables", "state"),
    runtime=("specgen.runtime.lib.optimizers.ema",),
    after=("weight_decay",),  # averages the weights after every update
    plan=plan,
    variables=variables,
    roots=(ROOT,),
    collections=(ROOT,),
    check=check,
    runtime_hooks=(("after_restore", "specgen.runtime.lib.ema.after_restore"),
                   ("evaluation_weights", "specgen.runtime.lib.ema.evaluation_weights")),
)
