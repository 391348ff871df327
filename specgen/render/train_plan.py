"""Render-ready facts for the generated training module (templates/tf/train.py.j2), from the training IR."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.ir.model import ModelIR
from specgen.ir.training import ClipIR, OptimizerIR, ScheduleIR, TrainingIR, keys
from specgen.render.environment import py_literal
from specgen.render.loss_plan import loss_context
from specgen.render.target_plan import target_plans


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
    max_tries: int = 0


def _schedule(schedule: ScheduleIR | None) -> str | None:
    if schedule is None:
        return None
    if schedule.kind == "constant":
        call = f"schedules.constant({py_literal(dict(schedule.args)['initial'])})"
    else:
        call = f"schedules.{schedule.kind}({', '.join(f'{k}={py_literal(v)}' for k, v in schedule.args)})"
    if schedule.warmup_steps:
        call = f"schedules.warmup({call}, warmup_steps={schedule.warmup_steps})"
    return call


def _clip(clip: ClipIR | None) -> str | None:
    return None if clip is None else f"{clip.kind}={py_literal(clip.value)}"


def _update(attr: str, opt: OptimizerIR) -> str:
    vs, gs, p = f"self.{attr}_variables", f"{attr}_gradients", opt.param
    slot = {s.name: f"self.{attr}_{s.name}" for s in opt.slots}
    if opt.kind == "sgd":
        return (f"optimizers.sgd({vs}, {gs}, lr, {slot.get('momentum', '[]')}, momentum={py_literal(p('momentum'))}, "
                f"nesterov={p('nesterov')})")
    if opt.kind in ("adam", "adamw"):
        return (f"optimizers.adam({vs}, {gs}, lr, {slot['m']}, {slot['v']}, self.{attr}_iterations, "
                f"beta_1={py_literal(p('beta_1'))}, beta_2={py_literal(p('beta_2'))}, "
                f"epsilon={py_literal(p('epsilon'))})")
    if opt.kind == "rmsprop":
        return (f"optimizers.rmsprop({vs}, {gs}, lr, {slot['rms']}, {slot.get('momentum', '[]')}, "
                f"{slot.get('mg', '[]')}, rho={py_literal(p('rho'))}, momentum={py_literal(p('momentum'))}, "
                f"epsilon={py_literal(p('epsilon'))})")
    if opt.levenberg_marquardt:
        return (f"levenberg_marquardt.step({vs}, residuals, self.{attr}_damping, self.{attr}_step_bound, "
                f"{slot['scale']}, tf.equal(self.{attr}_iterations, 0), max_tries={p('max_tries')})")
    return f"optimizers.adagrad({vs}, {gs}, lr, {slot['accumulator']}, epsilon={py_literal(p('epsilon'))})"


def optimizer_plans(training: TrainingIR) -> list[OptimizerPlan]:
    plans, start = [], 0
    for opt in training.optimizers:
        attr = f"opt_{opt.name}"
        plans.append(OptimizerPlan(
            opt.name, attr, opt.kind, opt.paths, start, start + len(opt.paths), opt.learning_rate,
            _schedule(opt.schedule), tuple((f"{attr}_{s.name}", s.key, s.initial) for s in opt.slots),
            _update(attr, opt), opt.weight_decay, _clip(opt.clip), opt.learning_rate_key, opt.iterations_key,
            tuple(p for p in opt.paths if p not in opt.decay_excluded) if opt.decay_excluded else None,
            opt.damping_key, (opt.param("initial_damping") or 0.0) if opt.levenberg_marquardt else 0.0,
            keys.step_bound(opt.name) if opt.levenberg_marquardt else "",
            opt.param("max_tries") if opt.levenberg_marquardt else 0))
        start += len(opt.paths)
    return plans


def train_context(ir: ModelIR) -> dict[str, Any]:
    training = ir.training
    assert training is not None and training.can_train
    train, loss = training.train, training.loss
    assert train is not None
    plans = optimizer_plans(training)
    # Without a term that reads data labels (targets computed from outputs only), OUTPUT is the first
    # term's output and no metric reads it (ir/resolve.py refuses metrics then).
    output = loss.output if loss else next(t.output for t in training.terms if t.output)
    return {
        "ir": ir, "optimizers": plans, "accumulate": train.accumulate, "batch_size": train.batch_size,
        "seed": train.seed, "loss_kind": loss.kind if loss else None, "label": loss.labels if loss else None,
        "output": output, "target": loss.target if loss else None, "metrics": list(train.metrics),
        **loss_context(training),
        "levenberg_marquardt": any(o.levenberg_marquardt for o in training.optimizers),
        "clip": _clip(train.clip), "ema_decay": train.ema.decay if train.ema else None,
        "ema_eval": bool(train.ema and train.ema.eval),
        "trainable": [p for plan in plans for p in plan.paths],
        "targets": target_plans(training),
        "keys": {"step": keys.STEP, "accumulators": keys.ACCUMULATORS, "micro_batches": keys.MICRO_BATCHES,
                 "ema": keys.EMA},
    }
