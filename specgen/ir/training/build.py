"""LoadedSpec -> TrainingIR: the spec's training sections resolved once (defaults, paths, schedules, slots).

Runs after the cross-section checks of `build_ir` (ir/resolve.py), which report positioned
errors; what reaches here is consistent, so building never fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgen.ir.training import keys
from specgen.ir.training.model import (
    CheckpointIR,
    DataSourceIR,
    ExportIR,
    LossIR,
    MetricIR,
    OptimizerIR,
    RestoreIR,
    ScheduleIR,
    SlotIR,
    TrainingIR,
    TrainIR,
)
from specgen.ir.training.terms import LossTermIR, primary
from specgen.kinds import sources
from specgen.kinds.features import TRAIN_KEYS
from specgen.kinds.features.clip import resolve as clip_ir
from specgen.kinds.metrics import args_of, name_of
from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS
from specgen.kinds.schedules import REGISTRY as SCHEDULES
from specgen.spec.io import Checkpoint
from specgen.spec.load import LoadedSpec

IR_VERSION = {18: 8, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11}  # the IR version that introduced each opset


def checkpoint_of(loaded: LoadedSpec) -> CheckpointIR:
    """The checkpoint section with its defaults (the pydantic model's: written nowhere else)."""
    spec = loaded.spec
    section = spec.checkpoint or Checkpoint.model_validate({"dir": f"runs/{spec.name}"})
    restore = tuple(RestoreIR(loaded.folder / s.from_, s) for s in section.restore)
    return CheckpointIR((loaded.folder / section.dir).resolve(), section.every_steps, section.keep, restore)


def _schedule(rate: Any) -> tuple[float, ScheduleIR | None]:
    """The first learning rate, and the schedule that moves it (None for a constant number)."""
    if isinstance(rate, int | float):
        return float(rate), None
    kind = SCHEDULES[rate.schedule]
    return float(kind.first(rate)), ScheduleIR(rate.schedule, kind.args(rate), rate.warmup_steps)


def _optimizer(name: str, opt: Any, paths: tuple[str, ...], excluded: tuple[str, ...] = ()) -> OptimizerIR:
    """The entry resolved through its kind (specgen/kinds/optimizers/): its keys, slots and state keys."""
    kind = OPTIMIZERS[opt.kind]
    hyper = kind.hyper(opt)
    slots = tuple(SlotIR(s, keys.slot_prefix(name, s), initial) for s, initial in kind.slots(hyper))
    damping_key, step_bound_key = (keys.damping(name), keys.step_bound(name)) if kind.damping else ("", "")
    if not kind.learning_rate:  # levenberg_marquardt: the damping sets the step; no decay or clip
        return OptimizerIR(name, opt.kind, paths, 0.0, None, tuple(hyper.items()), slots,
                           iterations_key=keys.iterations(name), damping_key=damping_key, step_bound_key=step_bound_key)
    first, schedule = _schedule(opt.learning_rate)
    decay = float(getattr(opt.weight_decay, "rate", opt.weight_decay))  # a number, or {rate, exclude}
    return OptimizerIR(name, opt.kind, paths, first, schedule, tuple(hyper.items()), slots, decay,
                       clip_ir(opt.clip), keys.learning_rate(name), keys.iterations(name), excluded,
                       damping_key=damping_key, step_bound_key=step_bound_key)


def _source(loaded: LoadedSpec, stage: str, source: Any) -> DataSourceIR:
    """The kind resolves its own paths and names (specgen/kinds/sources/<kind>.py)."""
    kind = sources.kind_of(source)
    resolved = kind.resolve(source, loaded.folder)
    return DataSourceIR(stage, kind.name, resolved.path, resolved.features, resolved.labels,
                        tuple(getattr(source, "augment", None) or ()))


def _metrics(items: list[Any]) -> tuple[MetricIR, ...]:
    """Each metric once, in spec order (validate refuses one listed twice with different keys)."""
    return tuple(dict.fromkeys(MetricIR(name_of(item), args_of(item)) for item in items))


def _train(train: Any) -> TrainIR | None:
    """The shared settings, and each feature's key resolved by its TrainKey (kinds/features/<name>.py)."""
    if train is None:
        return None
    batch_size = None if train.batch_size == "full" else train.batch_size  # None: the whole training set
    features = {k.name: k.resolve(getattr(train, k.name)) for k in TRAIN_KEYS}
    return TrainIR(batch_size, train.epochs, train.seed, train.shuffle_buffer, _metrics(train.metrics),
                   train.jit_compile, **features)


def build_training(loaded: LoadedSpec, claims: dict[str, tuple[str, ...]], terms: tuple[LossTermIR, ...] = (),
                   decay_excluded: dict[str, tuple[str, ...]] | None = None) -> TrainingIR:
    """`claims`: optimizer name -> the weights it trains (resolved with the collections); `terms`: the
    loss terms (ir/loss_terms.py); `decay_excluded`: optimizer name -> weights without weight decay."""
    spec = loaded.spec
    first = primary(terms)  # a term with data labels: its `labels` is set
    loss = (LossIR(first.kind, first.output, first.field, first.labels)
            if first and first.output and first.field and first.labels is not None else None)
    excluded = decay_excluded or {}
    onnx = spec.export.onnx
    data = {stage: _source(loaded, stage, s) for stage in ("train", "eval")
            if spec.data is not None and (s := getattr(spec.data, stage)) is not None}
    return TrainingIR(
        checkpoint=checkpoint_of(loaded),
        export=ExportIR(onnx.opset, IR_VERSION[onnx.opset], onnx.weights, onnx.dynamic_batch, tuple(onnx.outputs or ()),
                        onnx.precision, onnx.calibration, onnx.calibration_examples, onnx.budget),
        loss=loss,
        optimizers=tuple(_optimizer(n, o, claims.get(n, ()), excluded.get(n, ())) for n, o in spec.optimizers.items()),
        train=_train(spec.train),
        data=data,
        terms=terms,
    )


def run_folder(loaded: LoadedSpec) -> Path:
    """Where `specgen train` writes: checkpoint.dir, or runs/<spec name>, beside the spec."""
    return checkpoint_of(loaded).dir
