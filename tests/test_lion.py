"""`kind: lion` against keras.optimizers.Lion: five steps from the same weights, gradients and config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_training_numerics import BATCH, build, data, reference_gradients, spec_doc, train_step, weight_copy

keras = pytest.importorskip("keras")

STEPS = 5
TOLERANCE = 1e-6  # float32 weights; both sides compute the same float32 operations in the same order

# case -> (the spec's optimizer entry, the Keras optimizer with the same settings)
CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "defaults": ({"kind": "lion", "learning_rate": 0.01}, lambda: keras.optimizers.Lion(0.01)),
    "betas_weight_decay": ({"kind": "lion", "learning_rate": 0.02, "beta_1": 0.5, "beta_2": 0.8, "weight_decay": 0.1},
                           lambda: keras.optimizers.Lion(0.02, beta_1=0.5, beta_2=0.8, weight_decay=0.1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lion_matches_keras_for_five_steps(case: str, tmp_path: Path) -> None:
    entry, make_keras = CASES[case]
    built = build(tmp_path, spec_doc(f"lion_{case}", {"all": {"variables": ["*"], **entry}}))
    model, trainer = built.model, built.trainer
    paths = list(trainer.trainable_paths)
    copy, reference = weight_copy(model), make_keras()
    start = {p: v.numpy().copy() for p, v in model.variables_by_path().items()}
    for step in range(STEPS):
        x, y = data(BATCH, seed=900 + step)
        train_step(trainer, x, y)
        reference.apply_gradients(zip(reference_gradients(copy, paths, x, y), [copy[p] for p in paths], strict=True))
        for path, var in model.variables_by_path().items():
            np.testing.assert_allclose(var.numpy(), copy[path].numpy(), rtol=0, atol=TOLERANCE,
                                       err_msg=f"lion {case}: {path} after update {step + 1}")
    assert any(not np.allclose(start[p], v.numpy()) for p, v in model.variables_by_path().items()), "nothing moved"
    state = trainer.state_by_path()
    assert {k for k in state if k.startswith("optimizers/all/m/")} == {f"optimizers/all/m/{p}" for p in paths}
    assert not any(k.startswith("optimizers/all/v/") for k in state)
    assert int(state["optimizers/all/iterations"].numpy()) == STEPS
