"""Render-ready facts for the generated training module (templates/tf/train.py.j2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.ir.collections import optimizer_slots
from specgen.ir.model import ModelIR
from specgen.render.environment import py_literal
from specgen.spec.model import Spec

LOSS_TARGETS = {"sparse_softmax_cross_entropy": "sparse", "softmax_cross_entropy": "onehot",
                "sigmoid_cross_entropy": "binary", "mean_squared_error": "regression",
                "mean_absolute_error": "regression"}


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
    slots: tuple[tuple[str, str, float], ...]  # (attribute, path prefix, initial value)
    update: str  # the optimizers.* call
    weight_decay: float
    clip: str | None  # an optimizers.clip(...) keyword list


def _schedule(rate: Any) -> tuple[float, str | None]:
    if isinstance(rate, int | float):
        return float(rate), None
    kind = rate.schedule
    args = rate.model_dump(exclude={"schedule", "warmup_steps"})
    if kind == "constant":
        call = f"schedules.constant({py_literal(rate.initial)})"
    else:
        call = f"schedules.{kind}({', '.join(f'{k}={py_literal(v)}' for k, v in args.items())})"
    if rate.warmup_steps:
        call = f"schedules.warmup({call}, warmup_steps={rate.warmup_steps})"
    first = rate.values[0] if kind == "piecewise_constant" else rate.initial
    return float(first), call


def _clip(clip: Any) -> str | None:
    if clip is None:
        return None
    return f"global_norm={py_literal(clip.global_norm)}" if hasattr(clip, "global_norm") else f"value={py_literal(clip.value)}"


def _update(attr: str, opt: Any, slots: tuple[str, ...]) -> str:
    vs, gs = f"self.{attr}_variables", f"{attr}_gradients"
    slot = {s: f"self.{attr}_{s}" for s in slots}
    if opt.kind == "sgd":
        return (f"optimizers.sgd({vs}, {gs}, lr, {slot.get('momentum', '[]')}, momentum={py_literal(opt.momentum)}, "
                f"nesterov={opt.nesterov})")
    if opt.kind in ("adam", "adamw"):
        return (f"optimizers.adam({vs}, {gs}, lr, {slot['m']}, {slot['v']}, self.{attr}_iterations, "
                f"beta_1={py_literal(opt.beta_1)}, beta_2={py_literal(opt.beta_2)}, epsilon={py_literal(opt.epsilon)})")
    if opt.kind == "rmsprop":
        return (f"optimizers.rmsprop({vs}, {gs}, lr, {slot['rms']}, {slot.get('momentum', '[]')}, "
                f"{slot.get('mg', '[]')}, rho={py_literal(opt.rho)}, momentum={py_literal(opt.momentum)}, "
                f"epsilon={py_literal(opt.epsilon)})")
    return f"optimizers.adagrad({vs}, {gs}, lr, {slot['accumulator']}, epsilon={py_literal(opt.epsilon)})"


def optimizer_plans(ir: ModelIR, spec: Spec) -> list[OptimizerPlan]:
    plans, start = [], 0
    for name, opt in spec.optimizers.items():
        paths = ir.optimizers[name]
        attr = f"opt_{name}"
        initial, schedule = _schedule(opt.learning_rate)
        slots = optimizer_slots(opt)
        slot_init = {"accumulator": opt.initial_accumulator_value} if opt.kind == "adagrad" else {}
        decay = opt.weight_decay
        plans.append(OptimizerPlan(
            name, attr, opt.kind, paths, start, start + len(paths), initial, schedule,
            tuple((f"{attr}_{s}", f"optimizers/{name}/{s}", slot_init.get(s, 0.0)) for s in slots),
            _update(attr, opt, slots), decay, _clip(opt.clip)))
        start += len(paths)
    return plans


def train_context(ir: ModelIR, spec: Spec) -> dict[str, Any]:
    train, loss = spec.train, spec.loss
    assert train is not None and loss is not None
    output = getattr(loss, "logits", None) or loss.predictions
    plans = optimizer_plans(ir, spec)
    return {
        "ir": ir, "optimizers": plans, "accumulate": train.accumulate, "batch_size": train.batch_size,
        "seed": train.seed, "loss_kind": loss.kind, "label": loss.labels, "output": output,
        "target": LOSS_TARGETS[loss.kind], "metrics": list(dict.fromkeys(train.metrics)),
        "clip": _clip(train.clip), "ema_decay": train.ema.decay if train.ema else None,
        "ema_eval": bool(train.ema and train.ema.eval),
        "trainable": [p for plan in plans for p in plan.paths],
    }
