"""multi_head_attention where a query step has no allowed key (an all-zero row of the explicit attention_mask),
against keras.layers.MultiHeadAttention with the same weights, in the generated TensorFlow and in onnxruntime
at opset 21 (plain nodes) and 23 (the Attention node) (issue 28, defect 10).

Keras: with dropout > 0 its Softmax-layer path zeroes masked weights (the row is zeros, in inference too); with
dropout 0 ops.dot_product_attention gives a softmax of equal -1e9 scores (the mean of the values). The weights are
scaled so scores reach the hundreds: the Attention node adds its mask to the scores and -1e9 + s rounds to a
multiple of 64 once |s| > 32. Before the fix: 0.54 of the output's magnitude with dropout (both opsets, TensorFlow
too: a uniform row where Keras has zeros) and 0.64 at opset 23 without it (a row far from uniform).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

ROLES = ("query", "key", "value", "attention_output")  # Keras' weight order: kernel then bias of each
# float32 in another summation order: scores of order 100 round within 100 * 2^-24 * (key_dim 4) ~ 2.4e-5 absolute,
# a relative change of the weights of that size on saturated rows; 1e-4 of the output's magnitude holds it.
# Measured: 1.6e-7 in every case.
RELATIVE = 1e-4
STEPS = 6


def relative(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def feeds() -> dict[str, np.ndarray]:
    """Queries of 3 examples; a mask where example 0's first 3 steps and example 2's first 5 have no key, under
    the causal mask as left padding gives them (example 1 is all real)."""
    rng = np.random.default_rng(5)
    real = np.arange(STEPS) >= np.array([[3], [0], [5]])
    mask = real[:, None, :] & np.tril(np.ones((STEPS, STEPS), bool))[None]
    return {"q": rng.standard_normal((3, STEPS, 8)).astype(np.float32), "m": mask.astype(np.int32)}


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("dropout", [0.3, 0.0], ids=["zero_rows", "uniform_rows"])
def test_rows_without_a_key_match_keras(dropout: float, opset: int, tmp_path: Path) -> None:
    from specgen.runtime import parity

    layer = {"name": "att", "op": "multi_head_attention", "input": "q", "attention_mask": "m", "num_heads": 2,
             "key_dim": 4, "dropout": dropout}
    document = {"specgen": 1, "name": "att", "outputs": {"y": "att"}, "layers": [layer],
                "inputs": {"q": {"shape": [STEPS, 8]}, "m": {"shape": [STEPS, STEPS], "dtype": "int32"}},
                "export": {"onnx": {"opset": opset}}}
    ir = build_ir(load_spec_text(yaml.safe_dump(document), "att.yaml"))
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    model = parity.load_generated(tmp_path / "model.py").Att(seed=0)
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=dropout)
    theirs.build((None, STEPS, 8), (None, STEPS, 8))
    rng = np.random.default_rng(3)
    order = [f"att/{role}/{part}" for role in ROLES for part in ("kernel", "bias")]
    values = {p: (3.0 * rng.standard_normal(tuple(v.shape))).astype(np.float32)
              for p, v in model.variables_by_path().items()}
    theirs.set_weights([values[p] for p in order])
    parity.assign(model, values)
    x = feeds()
    want = np.asarray(theirs(x["q"], x["q"], attention_mask=x["m"].astype(bool), training=False))
    empty = ~x["m"].any(axis=-1)
    assert empty.sum() == 8  # the rows under test
    if dropout:  # Keras' zero row: the step's output is the output bias alone
        np.testing.assert_array_equal(want[empty], np.broadcast_to(values["att/attention_output/bias"], (8, 8)))
    tf_out = parity.run_tf(model, x)["y"]
    onnx_out = parity.run_onnx(files["model.onnx"], ir, values, x)["y"]
    assert relative(tf_out, want) <= RELATIVE
    assert relative(onnx_out, want) <= RELATIVE
