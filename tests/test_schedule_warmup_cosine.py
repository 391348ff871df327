"""Keras' CosineDecay with warm-up is already `cosine_decay` with `warmup_steps` (so no `warmup_cosine` kind).

keras.optimizers.schedules.CosineDecay(0.0, decay_steps, alpha, warmup_target=T, warmup_steps=W) rises
linearly from 0 to T over W steps, then decays T by the cosine over decay_steps: specgen's
`{schedule: cosine_decay, initial: T, decay_steps: D, alpha: a, warmup_steps: W}`. Checked on the call
the generated trainer makes, every step from 0 to past the end of the decay.
"""

from __future__ import annotations

import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.train_plan import optimizer_plans
from specgen.runtime.lib import schedules
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

TOLERANCE = 1e-7  # float32 rates of ~0.1: a few ulps


def _rendered_schedule(schedule: dict[str, object]) -> str:
    doc = {"specgen": 1, "name": "warmup_cosine", "inputs": {"x": {"shape": [3]}}, "outputs": {"y": "out"},
           "layers": [{"name": "out", "op": "dense", "input": "x", "units": 1}],
           "loss": {"kind": "mean_squared_error", "predictions": "y", "labels": "t"},
           "optimizers": {"all": {"kind": "adam", "learning_rate": schedule}}, "train": {"batch_size": 4}}
    ir = build_ir(load_spec_text(yaml.safe_dump(doc), "warmup_cosine.yaml"))
    (plan,) = optimizer_plans(ir.training)
    assert plan.schedule is not None
    return plan.schedule


@pytest.mark.parametrize(("target", "decay_steps", "alpha", "warmup"), [(0.1, 20, 0.0, 5), (0.3, 7, 0.25, 12)])
def test_cosine_decay_with_warmup_steps_is_keras_cosine_decay_with_warmup(target: float, decay_steps: int,
                                                                            alpha: float, warmup: int) -> None:
    call = _rendered_schedule({"schedule": "cosine_decay", "initial": target, "decay_steps": decay_steps,
                               "alpha": alpha, "warmup_steps": warmup})
    assert call == (f"schedules.warmup(schedules.cosine_decay(initial={target}, decay_steps={decay_steps}, "
                    f"alpha={alpha}), warmup_steps={warmup})")
    rate = eval(call, {"schedules": schedules})  # the rendered call, as generated code runs it
    keras_rate = keras.optimizers.schedules.CosineDecay(0.0, decay_steps, alpha=alpha, warmup_target=target,
                                                        warmup_steps=warmup)
    for step in range(warmup + decay_steps + 5):
        ours, theirs = float(rate(step)), float(keras_rate(step))
        assert abs(ours - theirs) <= TOLERANCE, f"step {step}: {ours!r} vs Keras {theirs!r}"
