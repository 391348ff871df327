"""LoadedSpec -> TrainingIR: the spec's training sections resolved once (defaults, paths, schedules, slots).

Runs after the cross-section checks of `build_ir` (ir/resolve.py), which report positioned
errors; what reaches here is consistent, so building never fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgen.ir.training import keys, levenberg_marquardt
from specgen.ir.training.distribute import build_distribute
from specgen.ir.training.model import (
    CheckpointIR,
    ClipIR,
    DataSourceIR,
    EmaIR,
    ExportIR,
    LossIR,
    OptimizerIR,
    RestoreIR,
    ScheduleIR,
    SlotIR,
    TrainingIR,
    TrainIR,
)
from specgen.ir.training.terms import LossTermIR, primary
from specgen.kinds import sources
from specgen.spec.io import Checkpoint
from specgen.spec.load import LoadedSpec

IR_VERSION = {18: 8, 19: 9, 20: 9, 21: 10}  # the IR version that introduced each opset
SLOTS = {"sgd": ("momentum",), "adam": ("m", "v"), "adamw": ("m", "v"), "adagrad": ("accumulator",)}
# Optimizer spec keys that are not kind-specific hyperparameters.
COMMON_KEYS = {"kind", "variables", "learning_rate", "weight_decay", "clip"}


def loss_output(loss: Any) -> tuple[str, str] | None:
    """(spec key, output name) of the first loss term that reads an output; every term's: ir/loss_terms.py."""
    for term in loss if isinstance(loss, list) else [] if loss is None else [loss]:
        for field in ("logits", "predictions"):
            if hasattr(term, field):
                return field, getattr(term, field)
    return None


def optimizer_slots(kind: str, hyper: dict[str, Any]) -> tuple[str, ...]:
    """The slot names an optimizer kind keeps per variable (`optimizers/<name>/<slot>/<path>`)."""
    if kind == "sgd":
        return ("momentum",) if hyper["momentum"] > 0 else ()
    if kind == "rmsprop":
        slots = ("rms",) + (("momentum",) if hyper["momentum"] > 0 else ())
        return slots + (("mg",) if hyper["centered"] else ())
    return SLOTS[kind]


def checkpoint_of(loaded: LoadedSpec) -> CheckpointIR:
    """The checkpoint section with its defaults (the pydantic model's: written nowhere else)."""
    spec = loaded.spec
    section = spec.checkpoint or Checkpoint.model_validate({"dir": f"runs/{spec.name}"})
    restore = tuple(RestoreIR(loaded.folder / s.from_, s) for s in section.restore)
    return CheckpointIR((loaded.folder / section.dir).resolve(), section.every_steps, section.keep, restore)


def _clip(clip: Any) -> ClipIR | None:
    if clip is None:
        return None
    return ClipIR("global_norm", clip.global_norm) if hasattr(clip, "global_norm") else ClipIR("value", clip.value)


def _schedule(rate: Any) -> tuple[float, ScheduleIR | None]:
    """The first learning rate, and the schedule that moves it (None for a constant number)."""
    if isinstance(rate, int | float):
        return float(rate), None
    args = tuple(rate.model_dump(exclude={"schedule", "warmup_steps"}).items())
    first = rate.values[0] if rate.schedule == "piecewise_constant" else rate.initial
    return float(first), ScheduleIR(rate.schedule, args, rate.warmup_steps)


def _optimizer(name: str, opt: Any, paths: tuple[str, ...], excluded: tuple[str, ...] = ()) -> OptimizerIR:
    if opt.kind == "levenberg_marquardt":
        return levenberg_marquardt.optimizer(name, opt, paths)
    hyper = opt.model_dump(exclude=COMMON_KEYS)
    first, schedule = _schedule(opt.learning_rate)
    initial = {"accumulator": hyper["initial_accumulator_value"]} if opt.kind == "adagrad" else {}
    slots = tuple(SlotIR(s, keys.slot_prefix(name, s), initial.get(s, 0.0)) for s in optimizer_slots(opt.kind, hyper))
    decay = float(getattr(opt.weight_decay, "rate", opt.weight_decay))  # a number, or {rate, exclude}
    return OptimizerIR(name, opt.kind, paths, first, schedule, tuple(hyper.items()), slots, decay,
                       _clip(opt.clip), keys.learning_rate(name), keys.iterations(name), excluded)


def _source(loaded: LoadedSpec, stage: str, source: Any) -> DataSourceIR:
    """The kind resolves its own paths and names (specgen/kinds/sources/<kind>.py)."""
    kind = sources.kind_of(source)
    resolved = kind.resolve(source, loaded.folder)
    return DataSourceIR(stage, kind.name, resolved.path, resolved.features, resolved.labels)


def _train(train: Any) -> TrainIR | None:
    if train is None:
        return None
    ema = EmaIR(train.ema.decay, train.ema.eval) if train.ema else None
    batch_size = None if train.batch_size == "full" else train.batch_size  # None: the whole training set
    return TrainIR(batch_size, train.epochs, train.accumulate, train.seed, train.shuffle_buffer,
                   tuple(dict.fromkeys(train.metrics)), _clip(train.clip), ema, build_distribute(train.distribute))


def build_training(loaded: LoadedSpec, claims: dict[str, tuple[str, ...]], terms: tuple[LossTermIR, ...] = (),
                   decay_excluded: dict[str, tuple[str, ...]] | None = None) -> TrainingIR:
    """`claims`: optimizer name -> the weights it trains (resolved with the collections); `terms`: the
    loss terms (ir/loss_terms.py); `decay_excluded`: optimizer name -> weights without weight decay."""
    spec = loaded.spec
    first = primary(terms)
    loss = LossIR(first.kind, first.output, first.field, first.labels) if first and first.output and first.field else None
    excluded = decay_excluded or {}
    onnx = spec.export.onnx
    data = {stage: _source(loaded, stage, s) for stage in ("train", "eval")
            if spec.data is not None and (s := getattr(spec.data, stage)) is not None}
    return TrainingIR(
        checkpoint=checkpoint_of(loaded),
        export=ExportIR(onnx.opset, IR_VERSION[onnx.opset], onnx.weights, onnx.dynamic_batch, tuple(onnx.outputs or ())),
        loss=loss,
        optimizers=tuple(_optimizer(n, o, claims.get(n, ()), excluded.get(n, ())) for n, o in spec.optimizers.items()),
        train=_train(spec.train),
        data=data,
        terms=terms,
    )


def run_folder(loaded: LoadedSpec) -> Path:
    """Where `specgen train` writes: checkpoint.dir, or runs/<spec name>, beside the spec."""
    return checkpoint_of(loaded).dir
