"""train.precision: the softmax op and `activation: softmax` compute in float32 under mixed_float16 (cast in,
cast back to float16), so the model's probabilities are the exact softmax of its float16 logits rounded once;
computed in float16 (Keras 3's Softmax layer under the same policy) they are off by more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

tf = pytest.importorskip("tensorflow")

CLASSES = 20  # enough terms that float16's rounding of exp and of their running sum shows
SPEC = f"""specgen: 1
name: softmax_mixed
inputs:
  logits: {{shape: [{CLASSES}]}}
outputs:
  probs: probs
  dense_probs: fc
layers:
  - {{name: probs, op: softmax, input: logits}}
  - {{name: fc, op: dense, input: logits, units: {CLASSES}, activation: softmax}}
"""


def ulps(values: np.ndarray, reference: np.ndarray) -> float:
    """The largest |values - reference| in float16 units in the last place of the reference (2**-24 below
    float16's smallest normal, where the spacing stops shrinking)."""
    spacing = np.spacing(reference.astype(np.float16)).astype(np.float64)
    return float(np.max(np.abs(values.astype(np.float64) - reference) / spacing))


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from specgen.runtime.lib.generated import load_generated
    from specgen.runtime.lib.precision import CastModel

    folder: Path = tmp_path_factory.mktemp("softmax")
    ir = build_ir(load_spec_text(SPEC, "spec.yaml", folder / "spec.yaml"))
    for name, content in render_files(ir).items():
        (folder / name).write_bytes(content)
    model = getattr(load_generated(folder / "model.py"), ir.class_name)(seed=0)
    weights = model.variables_by_path()
    weights["fc/kernel"].assign(np.eye(CLASSES, dtype=np.float32))  # the dense layer passes the logits through
    weights["fc/bias"].assign(np.zeros(CLASSES, np.float32))
    logits = (np.random.default_rng(0).normal(size=(64, CLASSES)) * 4).astype(np.float32)
    outputs = CastModel(model, "mixed_float16", keep=[])({"logits": tf.constant(logits)})
    rounded = logits.astype(np.float16).astype(np.float64)  # what the model reads under the policy
    exact = np.exp(rounded - rounded.max(axis=1, keepdims=True))
    return {"logits": logits, "outputs": {k: v.numpy() for k, v in outputs.items()},
            "exact": exact / exact.sum(axis=1, keepdims=True)}


def test_softmax_op_and_activation_round_the_float32_softmax_once(case: dict[str, Any]) -> None:
    for name in ("probs", "dense_probs"):
        assert case["outputs"][name].dtype == np.float32  # cast back to float32 at the model's outputs
        # Half a unit is the rounding of one cast to float16; the float32 softmax's own error (a few float32
        # units, 2**-13 of a float16 unit) may carry a value just past a rounding midpoint.
        assert ulps(case["outputs"][name], case["exact"]) <= 0.5 + 2**-10, name


def test_a_float16_softmax_is_off_by_more(case: dict[str, Any]) -> None:
    import keras

    half = tf.constant(case["logits"].astype(np.float16))
    in_float16 = tf.nn.softmax(half).numpy()  # what the op computed before it was cast to float32
    # 7.4 units measured here (float16 exp terms and their running sum each rounded to 11 bits); the bound leaves
    # room for another CPU's summation order.
    assert ulps(in_float16, case["exact"]) > 2
    # Keras 3's Softmax layer under the mixed_float16 policy computes in float16: these same numbers.
    keras_layer = keras.layers.Softmax(dtype=keras.DTypePolicy("mixed_float16"))
    assert np.array_equal(keras_layer(case["logits"]).numpy(), in_float16)
    # A float32 Softmax layer (Keras' advice for an output softmax under a mixed policy), fed the float16 logits
    # and rounded to float16 once, gives specgen's numbers bit for bit.
    float32_layer = keras.layers.Softmax(dtype="float32")
    rounded = float32_layer(tf.cast(half, tf.float32)).numpy().astype(np.float16).astype(np.float32)
    assert np.array_equal(rounded, case["outputs"]["probs"])
    assert np.array_equal(rounded, case["outputs"]["dense_probs"])


ATTENTION = """specgen: 1
name: attention_mixed
inputs:
  ids: {shape: [6], dtype: int32}
outputs:
  out: att
layers:
  - {name: emb, op: embedding, input: ids, vocab_size: 5, dim: 8, mask_zero: true}
  - {name: att, op: multi_head_attention, num_heads: 2, key_dim: 4, causal: true, rotary: {}}
"""


def test_attention_masks_and_rotates_under_mixed_float16(tmp_path: Path) -> None:
    """Padded query steps (rows with no key allowed) and rotary under mixed_float16: the scores are masked in
    float32 (-1e9 is -inf in float16: such a row was NaN) and rotary's cos and sin cast to float16 (the float32
    angles met float16 queries: an error)."""
    from specgen.runtime.lib.generated import load_generated
    from specgen.runtime.lib.precision import CastModel

    ir = build_ir(load_spec_text(ATTENTION, "spec.yaml", tmp_path / "spec.yaml"))
    for name, content in render_files(ir).items():
        (tmp_path / name).write_bytes(content)
    model = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    ids = {"ids": tf.constant([[1, 2, 3, 0, 0, 0], [0, 0, 4, 1, 2, 3]], tf.int32)}
    reference = model(ids)["out"].numpy()
    mixed = CastModel(model, "mixed_float16", keep=[])(ids)["out"].numpy()
    assert np.isfinite(mixed).all()
    # Each float16 rounding (embedding, projections, probabilities, output) moves a value by at most 2**-11
    # relative; 16 of them on the largest output bound the chain (measured: 2.2e-5 on outputs up to 0.025,
    # a ninth of the bound).
    assert np.max(np.abs(mixed - reference)) <= 16 * 2**-11 * np.max(np.abs(reference))
    assert not np.array_equal(mixed, reference)  # float16 did compute
