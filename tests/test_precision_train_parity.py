"""train.precision: mixed_bfloat16 and train.jit_compile each against float32 training of the digits CNN, 20 steps.

The CNN as in examples/specs/digits_cnn.yaml (two optimizers, clip, EMA, batch norm) with two changes that keep
the comparison about arithmetic: dropout off (under XLA TensorFlow draws other stateless-dropout masks for the
same seed: a different but equally valid run) and avg_pool for max_pool (XLA refuses max_pool's gradient under
op determinism: specgen/ir/training/jit_compile.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from precision_train_cases import build, snapshot, spec_text, train

tf = pytest.importorskip("tensorflow")

STEPS = 20
# bfloat16 keeps 8 significant bits: rounding a value to it changes it by at most u = 2**-8 relative. The first
# step's loss comes from the same weights, so it differs by the forward pass's rounding, under u (measured
# 0.07%). Each later step adds one more rounded gradient, whose error moves the weights apart, and those errors
# add up: after n steps the loss may differ by n * u relative. Measured on this CPU (AVX2, oneDNN off): at most
# 0.88% (steps 9 and 16), a quarter of n * u at its closest.
BF16_U = 2.0**-8
# XLA fuses and reorders the float32 reductions: each op's result moves by a few ulps (float32's ulp at 1.0 is
# 1.2e-7) and 20 updates carry them along. Measured: checkpointed values within 8.5e-7, losses within 2.4e-7;
# 1e-5 (about 80 ulps at 1.0) leaves room for another CPU's kernels (AVX-512 sums in another order).
XLA_ATOL = 1e-5


def _run(folder: Path, precision: str, jit: bool) -> dict[str, Any]:
    model, trainer = build(folder, spec_text(precision, jit=jit, dropout=0.0, pool="avg_pool"))
    return {"losses": np.array(train(trainer, STEPS)), "values": snapshot(model, trainer)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("precision_parity")
    return {name: _run(root / name, precision, jit) for name, precision, jit in
            (("float32", "float32", False), ("bfloat16", "mixed_bfloat16", False), ("xla", "float32", True))}


def test_bfloat16_losses_stay_within_n_roundings_of_float32(runs: dict[str, dict[str, Any]]) -> None:
    reference, bf16 = runs["float32"]["losses"], runs["bfloat16"]["losses"]
    allowed = np.arange(1, STEPS + 1) * BF16_U * np.abs(reference)
    assert np.all(np.abs(bf16 - reference) <= allowed), np.abs(bf16 - reference) / np.abs(reference)
    assert not np.array_equal(bf16, reference)  # the run did compute in bfloat16
    assert reference[-1] < 0.7 * reference[0] and bf16[-1] < 0.7 * bf16[0]  # and both trained (2.46 -> 1.56)


def test_bfloat16_keeps_every_variable_and_slot_float32(runs: dict[str, dict[str, Any]]) -> None:
    dtypes = {k: v.dtype for k, v in runs["bfloat16"]["values"].items()}
    assert dtypes == {k: v.dtype for k, v in runs["float32"]["values"].items()}
    assert {d.name for d in dtypes.values()} == {"float32", "int64"}


def test_xla_matches_float32_training(runs: dict[str, dict[str, Any]]) -> None:
    np.testing.assert_allclose(runs["xla"]["losses"], runs["float32"]["losses"], rtol=0, atol=XLA_ATOL)
    reference = runs["float32"]["values"]
    for key, value in runs["xla"]["values"].items():
        np.testing.assert_allclose(value, reference[key], rtol=0, atol=XLA_ATOL, err_msg=key)
    assert int(runs["xla"]["values"]["global_step"]) == STEPS
