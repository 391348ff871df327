"""train.jit_compile with train.precision mixed_bfloat16 compiles and trains on a CPU: the digits MLP's first
steps against float32 without XLA, within bfloat16's rounding (as tests/test_precision_train_parity.py argues)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from precision_train_cases import DIGITS, EXAMPLE, build, train

tf = pytest.importorskip("tensorflow")

STEPS = 5
# bfloat16 keeps 8 significant bits (u = 2**-8): the first loss differs by the forward pass's rounding, under u;
# each later step adds one rounded gradient, so step n's loss may differ by n * u relative. XLA's reordering of
# float32 sums (a few float32 ulps, tests/test_precision_train_parity.py) is far below it.
BF16_U = 2.0**-8


def mlp(precision: str, jit: bool) -> str:
    """digits_mlp.yaml without dropout (under XLA TensorFlow draws other stateless-dropout masks for a seed) and
    with plain SGD at a constant rate: a smaller step for XLA to compile (CI time), the same question."""
    text = EXAMPLE.with_name("digits_mlp.yaml").read_text().replace("../data/digits.npz", str(DIGITS))
    text = text.replace("{name: drop, op: dropout, rate: 0.1}", "{name: drop, op: dropout, rate: 0.0}")
    text = re.sub(r"    kind: adam\n    learning_rate: .*\n", "    kind: sgd\n    learning_rate: 0.1\n", text)
    return text.replace("  seed: 1\n", f"  seed: 1\n  precision: {precision}\n  jit_compile: {str(jit).lower()}\n")


def test_mixed_bfloat16_under_xla_trains_like_float32(tmp_path: Path) -> None:
    _, reference = build(tmp_path / "float32", mlp("float32", jit=False))
    _, compiled = build(tmp_path / "bf16_xla", mlp("mixed_bfloat16", jit=True))
    expected, actual = np.array(train(reference, STEPS)), np.array(train(compiled, STEPS))
    relative = np.abs(actual - expected) / expected
    assert np.all(relative <= BF16_U * np.arange(1, STEPS + 1)), relative
    assert not np.array_equal(actual, expected)  # bfloat16 did compute: the losses are not float32's
