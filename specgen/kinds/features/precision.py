"""`train.precision: mixed_float16 | mixed_bfloat16`: compute in a reduced type, variables kept float32.

A setting, not a row of the pairwise feature table (kinds/features/__init__.py SETTINGS): it renders at the
skeleton's hooks like a feature and combines with every feature but levenberg_marquardt. Everything of it
but its runtime library (specgen/runtime/lib/precision.py: TensorFlow code, which validate and build never
import) lives here: its spec key and IR field (`TRAIN_KEY`), its validate refusal, its checkpoint keys, its
training state, its render plan.

The model is called through specgen.runtime.lib.precision.CastModel (float32 variables read as casts,
normalizations in float32, outputs back in float32 for the losses); under mixed_float16 the step scales the
loss, apply() unscales once and skips the whole update on non-finite gradients (templates/tf/features/precision.py.j2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from specgen.diagnostics import Diagnostic
from specgen.kinds.features.base import FeatureDef, StateRow, TrainKey
from specgen.kinds.features.levenberg_marquardt import optimizer_name
from specgen.kinds.ops import op_def

# The compute precisions of training (Keras' mixed-precision policy names); float32 is the default.
Precision = Literal["float32", "mixed_float16", "mixed_bfloat16"]
TRAIN_KEY = TrainKey("precision", Precision, Field("float32", description=(
    "Keras' policy names: variables, slots, EMA shadows and checkpoints stay float32; mixed_* compute in float16 or "
    "bfloat16 (docs/training.md).")), after="distribute", ir_type=str, ir_default=lambda: "float32")


def of(train: Any) -> str:
    """train.precision of a TrainIR: float32, mixed_float16 or mixed_bfloat16."""
    return str(train.precision)


# mixed_float16's dynamic loss scale, its run of finite updates and its count of skipped ones.
KEYS = ("loss_scale/scale", "loss_scale/good_steps", "loss_scale/skipped_updates")
DTYPES = ("float32", "int64", "int64")  # KEYS'


def check(loaded: Any) -> list[Diagnostic]:
    """A mixed policy beside a levenberg_marquardt optimizer, refused at train.precision (loaded: a LoadedSpec)."""
    train = loaded.spec.train
    lm = optimizer_name(loaded.spec)
    if train is None or train.precision == "float32" or lm is None:
        return []
    return [loaded.diagnostic(("train", "precision"), (
        f"levenberg_marquardt optimizer '{lm}' solves in float32: its Jacobian and damped Gauss-Newton solve "
        f"would lose in {train.precision} the digits that decide whether a step is kept, and its residuals "
        f"have no loss scale; received {train.precision}, expected float32"))]


def refusal(ir: Any, beside: str) -> str | None:
    """Why train.precision does not combine with `beside`, a feature a command adds; None when it does."""
    if beside == "probe" and of(ir.training.train) == "mixed_float16":
        return ("--probe shows unscaled gradients and applies them as one update, and mixed_float16's update "
                "expects the loss-scaled ones: probe this spec with train.precision: float32 (its checkpoints "
                "are interchangeable)")
    return None


def variables(training: Any, trainable: list[str], shapes: dict[str, tuple[int, ...]]) -> list[StateRow]:
    """The loss scale's state (mixed_float16 only), in the optimizer collection."""
    if training.train is None or of(training.train) != "mixed_float16":
        return []
    return [(key, (), dtype, ("optimizer",)) for key, dtype in zip(KEYS, DTYPES, strict=True)]


@dataclass(frozen=True)
class PrecisionPlan:
    """templates/tf/features/precision.py.j2's context."""

    precision: str
    compute: str  # float16 or bfloat16
    keep: tuple[str, ...]  # variables read as they are, not cast: their layers compute in float32
    scaling: bool  # mixed_float16: dynamic loss scaling
    scale_keys: tuple[str, ...]
    # mixed_float16: the backward pass starts from the loss scale instead of 1 (the scaled loss's gradients),
    # divided by the replica count under a strategy (runtime/lib/optimizers.py global_gradients says why); added
    # to the step's optimizers.global_gradients call.
    gradient_options: str


def plan(ir: Any) -> PrecisionPlan:
    """The render plan of a spec under a mixed policy (ir: its ModelIR)."""
    precision = of(ir.training.train)
    scaling = precision == "mixed_float16"
    # Layers that compute in float32 under a mixed policy (OpDef.compute_dtype; runtime/lib/layers.py's in_float32).
    keep = tuple(v.path for n in ir.nodes if op_def(n.op).compute_dtype == "float32" for v in n.variables.values())
    return PrecisionPlan(precision, precision.removeprefix("mixed_"), keep, scaling, KEYS,
                         ", scale=self.loss_scale.read_value()" if scaling else "")


SETTING = FeatureDef(
    name="precision",
    doc="mixed precision: compute in float16 or bfloat16, float32 variables; dynamic loss scaling for float16",
    spec_keys=("train.precision",),
    enabled=lambda ir: of(ir.training.train) != "float32",
    train_key=TRAIN_KEY,
    state=("specgen.kinds.features.precision.KEYS",),
    partial="tf/features/precision.py.j2",
    hooks=("init", "before_update", "methods", "state"),
    lib=("precision",),
    runtime=("specgen.runtime.lib.precision.CastModel", "specgen.runtime.lib.precision.unscale",
             "specgen.runtime.lib.precision.adjust", "specgen.runtime.lib.precision.guarded"),
    after=("accumulate",),  # unscales the accumulated gradients once, before any stage reads them
    plan=plan,
    variables=variables,
    roots=(KEYS[0].split("/")[0],),
    refusal=refusal,
    check=check,
    report="specgen.report.precision.precision_table",
)
