"""Render-ready facts for the generated training module (templates/tf/train.py.j2), from the training IR."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from specgen.ir.model import ModelIR
from specgen.ir.training import ClipIR, OptimizerIR, ScheduleIR, TrainingIR, keys
from specgen.kinds.features import accumulate, ema
from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS
from specgen.kinds.optimizers import UpdateCall
from specgen.kinds.pointers import call_name
from specgen.kinds.schedules import REGISTRY as SCHEDULES
from specgen.kinds.schedules import WARMUP
from specgen.render.environment import py_literal
from specgen.render.features_plan import SkeletonPlan, skeleton_plan
from specgen.render.loss_plan import label_and_output, single_loss_call


@dataclass(frozen=True)
class OptimizerPlan:
    name: str
    attr: str  # attribute prefix in the generated module
    kind: str
    paths: tuple[str, ...]
    start: int  # slice of the trainable list
    stop: int
    initial_rate: float  # the learning-rate variable's first value
    schedule: str | None  # a schedules.* call, or None for a constant held in the variable
    slots: tuple[tuple[str, str, float], ...]  # (attribute, checkpoint-key prefix, initial value)
    update: str  # the optimizers.* call
    weight_decay: float
    clip: str | None  # an optimizers.clip(...) keyword list
    rate_key: str  # checkpoint keys of the learning rate ('' for levenberg_marquardt) and the iteration count
    iterations_key: str
    decayed: tuple[str, ...] | None = None  # with weight_decay.exclude: the weights that still decay; None: all
    damping_key: str = ""  # levenberg_marquardt: its damping variable's key and first value, its step bound's key
    initial_damping: float = 0.0
    step_bound_key: str = ""
    hyper: tuple[tuple[str, Any], ...] = ()  # the kind's own keys, resolved (OptimizerIR.hyper)

    def param(self, name: str) -> Any:
        """One of the kind's own keys, for its templates (levenberg_marquardt's step logs max_tries)."""
        return dict(self.hyper)[name]


def _schedule(schedule: ScheduleIR | None) -> str | None:
    """The schedule's runtime call (specgen/kinds/schedules/), wrapped in the shared warm-up when it has one."""
    if schedule is None:
        return None
    call = SCHEDULES[schedule.kind].render(schedule.args, py_literal)
    if schedule.warmup_steps:
        call = f"{call_name(WARMUP)}({call}, warmup_steps={schedule.warmup_steps})"
    return call


def _first_rate(opt: OptimizerIR) -> float:
    """The learning-rate variable's value before the first update: the schedule's at step 0, which a warm-up makes
    0 (a checkpoint or a reading taken before that update shows the rate the first update runs at). Each update
    assigns the schedule's value before it reads the variable, so no trained number depends on it."""
    return 0.0 if opt.schedule is not None and opt.schedule.warmup_steps else opt.learning_rate


def _clip(clip: ClipIR | None) -> str | None:
    return None if clip is None else f"{clip.kind}={py_literal(clip.value)}"


def _update(attr: str, opt: OptimizerIR) -> str:
    """The optimizer's update call in the generated step, written by its kind (specgen/kinds/optimizers/)."""
    kind = OPTIMIZERS[opt.kind]
    call = UpdateCall(kind.function, f"self.{attr}_variables", f"{attr}_gradients", attr,
                      {s.name: f"self.{attr}_{s.name}" for s in opt.slots}, dict(opt.hyper), py_literal)
    return kind.update(call)


def optimizer_plans(training: TrainingIR) -> list[OptimizerPlan]:
    plans, start = [], 0
    for opt in training.optimizers:
        attr = f"opt_{opt.name}"
        plans.append(OptimizerPlan(
            opt.name, attr, opt.kind, opt.paths, start, start + len(opt.paths), _first_rate(opt),
            _schedule(opt.schedule), tuple((f"{attr}_{s.name}", s.key, s.initial) for s in opt.slots),
            _update(attr, opt), opt.weight_decay, _clip(opt.clip), opt.learning_rate_key, opt.iterations_key,
            tuple(p for p in opt.paths if p not in opt.decay_excluded) if opt.decay_excluded else None,
            # initial_damping left out: 0, and the first step bound is lmder's (runtime/lib/levenberg_marquardt.py)
            opt.damping_key, (opt.param("initial_damping") or 0.0) if opt.levenberg_marquardt else 0.0,
            opt.step_bound_key, opt.hyper))
        start += len(opt.paths)
    return plans


@dataclass(frozen=True)
class TrainPlan:
    """What templates/tf/train.py.j2 reads. render/files.py renders it with `**plan.names()`, so the template and the
    feature partials it includes read each field by its bare name (`optimizers`, `hooks`), as they always have."""

    ir: ModelIR
    optimizers: list[OptimizerPlan]
    accumulate: int | None
    batch_size: int | None
    seed: int | None
    loss_kind: str | None
    label: str | None
    output: str | None
    target: str | None
    metrics: list[Any]  # train.metrics as written (names or keyed mappings)
    loss_call: str | None
    ema_eval: bool
    trainable: list[str]
    keys: dict[str, str]
    jit: bool  # the step functions compiled with XLA
    skeleton: SkeletonPlan  # what the active features add (render/features_plan.py)

    def names(self) -> dict[str, Any]:
        """The template's names: the fields, with the skeleton's spread beside them (hooks, step, ...)."""
        names = {field.name: getattr(self, field.name) for field in fields(self) if field.name != "skeleton"}
        return names | vars(self.skeleton)


def train_plan(ir: ModelIR) -> TrainPlan:
    training = ir.training
    assert training is not None and training.can_train
    train, loss = training.train, training.loss
    assert train is not None
    plans = optimizer_plans(training)
    label, output = label_and_output(training)
    return TrainPlan(
        ir=ir, optimizers=plans, accumulate=accumulate.of(train), batch_size=train.batch_size, seed=train.seed,
        loss_kind=loss.kind if loss else None, label=label, output=output,
        target=loss.target if loss else None, metrics=list(train.metrics), loss_call=single_loss_call(training),
        ema_eval=bool((shadows := ema.of(train)) and shadows.eval), trainable=[p for plan in plans for p in plan.paths],
        keys={"step": keys.STEP}, jit=train.jit_compile, skeleton=skeleton_plan(ir))

