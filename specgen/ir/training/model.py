"""Resolved training settings: loss, optimizers, EMA, metrics, data, checkpoint and export.

Built once from the spec next to the model IR (specgen/ir/training/build.py); `render/` and
`runtime/` read these, never the pydantic spec's training sections.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from specgen.ir.training.terms import LossTermIR
from specgen.kinds.features import TRAIN_KEYS
from specgen.kinds.features.clip import ClipIR
from specgen.kinds.losses import REGISTRY as LOSSES


@dataclass(frozen=True)
class LossIR:
    kind: str
    output: str  # the output name the loss reads
    field: str  # the spec key that names it ('logits' or 'predictions'), for messages
    labels: str  # the label name in the data section

    @property
    def target(self) -> str:
        """The label form metrics compare the output with (specgen/kinds/losses/)."""
        return LOSSES[self.kind].target or ""

    @property
    def logits(self) -> str | None:
        """The output, for classification losses (accuracy is measured on it); None for regression."""
        return self.output if self.field == "logits" else None


@dataclass(frozen=True)
class ScheduleIR:
    kind: str  # a specgen.runtime schedules function name
    args: tuple[tuple[str, Any], ...]  # its keyword arguments, in spec order
    warmup_steps: int = 0


@dataclass(frozen=True)
class SlotIR:
    name: str  # 'm', 'v', 'momentum', ...
    key: str  # checkpoint-key prefix: `<key>/<weight path>`
    initial: float = 0.0


@dataclass(frozen=True)
class OptimizerIR:
    name: str
    kind: str
    paths: tuple[str, ...]  # the weights it claims, in variable order
    learning_rate: float  # the learning-rate variable's first value
    schedule: ScheduleIR | None  # None: a constant rate held in the variable
    hyper: tuple[tuple[str, Any], ...]  # kind-specific hyperparameters (momentum, beta_1, ...)
    slots: tuple[SlotIR, ...]
    weight_decay: float = 0.0
    clip: ClipIR | None = None
    learning_rate_key: str = ""  # empty for levenberg_marquardt, which has no learning rate
    iterations_key: str = ""
    decay_excluded: tuple[str, ...] = ()  # weights of `paths` that get no weight decay (weight_decay.exclude)
    damping_key: str = ""  # levenberg_marquardt only: its damping variable λ
    step_bound_key: str = ""  # ... and its trust-region bound Δ (both: OptimizerDef.damping)

    @property
    def levenberg_marquardt(self) -> bool:
        return bool(self.damping_key)  # the one kind with a damping variable (kinds/optimizers/levenberg_marquardt.py)

    def param(self, name: str) -> Any:
        return dict(self.hyper)[name]


@dataclass(frozen=True)
class MetricIR:
    """One metric of `train.metrics` (specgen/kinds/metrics/<name>.py) and its keys."""

    name: str
    args: tuple[tuple[str, Any], ...] = ()  # keyword arguments of its runtime class, in its model's order


@dataclass(frozen=True)
class TrainShared:
    """The `train` settings that are no feature's (spec/training.py TrainShared); `TrainIR` adds each feature's."""

    batch_size: int | None  # None: the whole training set is one batch (`batch_size: full`)
    epochs: int
    seed: int
    shuffle_buffer: int
    metrics: tuple[MetricIR, ...]  # without repeats, in spec order
    jit_compile: bool = False  # train.jit_compile: the training step compiled with XLA


def _train_ir() -> type[TrainShared]:
    """TrainShared and one field per feature key (kinds/features/<name>.py TRAIN_KEY), in pipeline order: templates
    and the runtime read `train.ema`, `train.precision`, ... as attributes; typed code asks the feature (`ema.of`)."""
    extra = [(k.name, k.ir_type, field(default_factory=k.ir_default)) for k in TRAIN_KEYS]
    made = make_dataclass("TrainIR", extra, bases=(TrainShared,), frozen=True)
    made.__module__ = __name__  # pickles and prints as specgen.ir.training.model.TrainIR
    made.__doc__ = "Every `train` setting of a spec, resolved: the shared ones and each feature's."
    return made


if TYPE_CHECKING:
    TrainIR: TypeAlias = TrainShared
else:
    TrainIR = _train_ir()


@dataclass(frozen=True)
class DataSourceIR:
    stage: str  # 'train' or 'eval'
    kind: str  # a name of the data-source registry (specgen/kinds/sources)
    path: Path  # resolved against the spec's folder
    features: dict[str, str | tuple[str, ...]]  # input name -> array, column(s) or feature key
    labels: dict[str, str | tuple[str, ...]]
    augment: tuple[Any, ...] = ()  # the validated `augment` entries (specgen/kinds/augment), in order


@dataclass(frozen=True)
class RestoreIR:
    path: Path  # resolved against the spec's folder
    source: Any  # the spec's RestoreSource (renames and excludes are applied by runtime/commands/restore.py)


@dataclass(frozen=True)
class CheckpointIR:
    dir: Path  # resolved against the spec's folder
    every_steps: int
    keep: int
    restore: tuple[RestoreIR, ...] = ()


@dataclass(frozen=True)
class ExportIR:
    opset: int
    ir_version: int
    weights: str  # 'raw' or 'ema'
    dynamic_batch: bool
    outputs: tuple[str, ...] = ()  # export.onnx.outputs; empty: every output (ir/exported.py)
    precision: str = "fp32"  # export.onnx.precision: fp32, fp16 or int8 (specgen/runtime/precision/)
    calibration: str = "minmax"  # int8 activation-range method
    calibration_examples: int | None = None  # None: 512, or the whole eval set when smaller
    budget: float = 1.0  # accuracy points (classifier) or percent relative output error a variant may lose


@dataclass(frozen=True)
class TrainingIR:
    """Every training-side setting of one spec, resolved."""

    checkpoint: CheckpointIR
    export: ExportIR
    loss: LossIR | None = None  # the primary term: the first with data labels (metrics read it)
    optimizers: tuple[OptimizerIR, ...] = ()
    train: TrainIR | None = None
    data: dict[str, DataSourceIR] = field(default_factory=dict)  # stage -> source
    targets: tuple[Any, ...] = ()  # specgen.ir.targets.TargetIR: copies updated after each optimizer update
    terms: tuple[LossTermIR, ...] = ()  # every loss term, in spec order (ir/loss_terms.py)

    @property
    def can_train(self) -> bool:
        """Whether train.py is generated: a loss, optimizers and a train section."""
        return bool(self.terms or self.loss) and bool(self.optimizers) and self.train is not None

    @property
    def trainable_paths(self) -> tuple[str, ...]:
        return tuple(p for o in self.optimizers for p in o.paths)

    def optimizer(self, name: str) -> OptimizerIR:
        return next(o for o in self.optimizers if o.name == name)
