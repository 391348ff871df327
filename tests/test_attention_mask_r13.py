"""multi_head_attention's masked scores at large score magnitudes, against keras.layers.MultiHeadAttention with the
same weights (checker's report r13, numerics finding 1), in the generated TensorFlow, in onnxruntime at opset 21
(plain nodes) and 23 (the Attention node), and under the mixed precision policies.

Keras 3 masks on two paths: with `dropout: 0` its ops.dot_product_attention replaces masked scores by
-0.7 * float32's max, so a masked key never gets weight; with `dropout > 0` its Softmax layer replaces them by
-1e9 (-3e4 in float16) and zeroes their weights afterwards. specgen used -1e9 on both paths and gave the opset-23
node an additive 0 / -1e9 mask, so at scores of ~1e10 step 0 of a causal attention read the future steps (TF,
opset 21), and a masked key whose score beat the allowed one by more than 1e9 won (opset 23).

The weights are chosen so that a score is the product of the first features of the query and key steps (one head,
key_dim 1, so the 1/sqrt(key_dim) scale is 1 and exact) and a value the second feature: every weight Keras gives is
then 0 or 1 exactly (exp of -1e10 underflows), except in one row where two O(1) scores share it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

OUTPUT_BIAS = np.array([0.25, -0.5], np.float32)
# float32, two runtimes: each output is a weighted sum of at most three values of size <= 3 through a kernel of
# size <= 1; the weights differ by a few float32 ulps (2**-24 relative) between softmax implementations, so the
# outputs by ~1e-6; 1e-5 holds that, and every wrong answer here is off by at least 0.5 (another value read).
TOLERANCE = 1e-5
# Step 0's only allowed key: score -1e10 (key kernel -1) or +1e10 beside a masked key at +3e10 (key kernel +1).
CASES = {"negative": (-1.0, [[1e5, 1.0], [2.0, 3.0], [-1.0, 0.5]]),
         "positive": (1.0, [[1e5, 1.0], [3e5, 2.0], [1.0, 3.0]])}


def weights(sign: float) -> dict[str, np.ndarray]:
    """query = first feature, key = sign * first feature, value = second feature, output = value * [1, 0.5]."""
    first, second = np.array([[[1.0]], [[0.0]]], np.float32), np.array([[[0.0]], [[1.0]]], np.float32)
    return {"att/query/kernel": first, "att/query/bias": np.zeros((1, 1), np.float32),
            "att/key/kernel": sign * first, "att/key/bias": np.zeros((1, 1), np.float32),
            "att/value/kernel": second, "att/value/bias": np.zeros((1, 1), np.float32),
            "att/attention_output/kernel": np.array([[[1.0, 0.5]]], np.float32), "att/attention_output/bias": OUTPUT_BIAS}


def spec(explicit: bool, dropout: float, opset: int) -> str:
    layer: dict[str, Any] = {"name": "att", "op": "multi_head_attention", "input": "x", "num_heads": 1, "key_dim": 1,
                             "dropout": dropout}
    inputs: dict[str, Any] = {"x": {"shape": ["seq", 2]}}
    if explicit:
        layer["attention_mask"] = "m"
        inputs["m"] = {"shape": ["seq", "seq"], "dtype": "int32"}
    else:
        layer["causal"] = True
    document = {"specgen": 1, "name": "att", "inputs": inputs, "outputs": {"y": "att"}, "layers": [layer],
                "export": {"onnx": {"opset": opset}}}
    return yaml.safe_dump(document, sort_keys=False)


def feeds(case: str, explicit: bool) -> dict[str, np.ndarray]:
    """One example; with `explicit`, query 0 may read key 0 only and the others every key."""
    x = np.array([CASES[case][1]], np.float32)
    found = {"x": x}
    if explicit:
        mask = np.ones((1, 3, 3), np.int32)
        mask[0, 0, 1:] = 0
        found["m"] = mask
    return found


def keras_layer(sign: float, dropout: float, dtype: str = "float32") -> Any:
    theirs = keras.layers.MultiHeadAttention(num_heads=1, key_dim=1, dropout=dropout, dtype=dtype)
    theirs.build((None, 3, 2), (None, 3, 2))
    values = weights(sign)
    theirs.set_weights([values[f"att/{role}/{part}"] for role in ("query", "key", "value", "attention_output")
                        for part in ("kernel", "bias")])
    return theirs


def keras_output(theirs: Any, x: dict[str, np.ndarray], explicit: bool) -> np.ndarray:
    mask = x["m"].astype(bool) if explicit else None
    out = theirs(x["x"], x["x"], attention_mask=mask, use_causal_mask=not explicit, training=False)
    return np.asarray(out, np.float64)


def generated(text: str, tmp_path: Path) -> tuple[Any, Any, dict[str, bytes]]:
    from specgen.runtime import parity

    ir = build_ir(load_spec_text(text, "att.yaml"))
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    return parity.load_generated(tmp_path / "model.py").Att(seed=0), ir, files


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["dot_product_path", "softmax_layer_path"])
@pytest.mark.parametrize("explicit", [False, True], ids=["causal", "attention_mask"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_masked_keys_at_large_scores_match_keras(case: str, explicit: bool, dropout: float, opset: int,
                                                 tmp_path: Path) -> None:
    from specgen.runtime import parity

    sign = CASES[case][0]
    model, ir, files = generated(spec(explicit, dropout, opset), tmp_path)
    parity.assign(model, weights(sign))
    x = feeds(case, explicit)
    want = keras_output(keras_layer(sign, dropout), x, explicit)
    # Step 0 reads key 0 alone (its value 1), except on Keras' Softmax-layer path with an allowed score of -1e10:
    # there the masked keys' -1e9 takes the weight and is then zeroed, leaving the output bias.
    silenced = case == "negative" and dropout > 0
    np.testing.assert_array_equal(want[0, 0], OUTPUT_BIAS if silenced else np.float32([1.25, 0.0]))
    tf_out = parity.run_tf(model, x)["y"]
    onnx_out = parity.run_onnx(files["model.onnx"], ir, weights(sign), x)["y"]
    assert np.max(np.abs(tf_out - want)) <= TOLERANCE
    if opset == 23 and silenced:
        # Documented (docs/spec.md, multi_head_attention): the Attention node takes the mask as a boolean, so it
        # reads the allowed keys only, as Keras' dot_product_attention does; the Softmax layer's silencing of a row
        # whose allowed scores all lie below about -1e9 has no Attention-node form.
        assert np.max(np.abs(onnx_out - keras_output(keras_layer(sign, 0.0), x, explicit))) <= TOLERANCE
    else:
        assert np.max(np.abs(onnx_out - want)) <= TOLERANCE


def test_future_steps_do_not_reach_step_0(tmp_path: Path) -> None:
    """Under `causal: true` step 0's output does not change when the later steps do (the checker's second look)."""
    from specgen.runtime import parity

    model, ir, files = generated(spec(False, 0.0, 21), tmp_path)
    parity.assign(model, weights(-1.0))
    x = feeds("negative", False)
    zeroed = {"x": x["x"].copy()}
    zeroed["x"][:, 1:] = 0
    for run in (lambda f: parity.run_tf(model, f)["y"], lambda f: parity.run_onnx(files["model.onnx"], ir,
                                                                                   weights(-1.0), f)["y"]):
        np.testing.assert_array_equal(run(x)[0, 0], run(zeroed)[0, 0])


# float16: allowed score -4e4, below the Softmax layer's -3e4 and within float16's range; bfloat16: -1e10 as above.
MIXED = {"mixed_float16": [[200.0, 1.0], [2.0, 3.0], [-1.0, 0.5]], "mixed_bfloat16": CASES["negative"][1]}


@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["dot_product_path", "softmax_layer_path"])
@pytest.mark.parametrize("policy", sorted(MIXED))
def test_mixed_precision_masks_as_keras(policy: str, dropout: float, tmp_path: Path) -> None:
    """Keras' masked value per path and compute type: dot_product_attention masks the float32 scores (-0.7 *
    float32's max) under either policy; the Softmax layer masks in the compute type (-3e4 in float16, -1e9 in
    bfloat16). Step 0's only allowed score is -4e4 (float16) or -1e10 (bfloat16)."""
    import tensorflow as tf

    from specgen.runtime import parity
    from specgen.runtime.lib.precision import CastModel

    model, _, _ = generated(spec(False, dropout, 21), tmp_path)
    parity.assign(model, weights(-1.0))
    x = {"x": np.array([MIXED[policy]], np.float32)}
    want = keras_output(keras_layer(-1.0, dropout, policy), x, False)
    ours = CastModel(model, policy, keep=[])({"x": tf.constant(x["x"])})["y"].numpy()
    np.testing.assert_array_equal(want[0, 0], OUTPUT_BIAS if dropout else np.float32([1.25, 0.0]))
    # Reduced precision, softmax in float32 (Keras' Softmax layer: in the compute type): a few units in the last
    # place of bfloat16 (2**-8) on outputs of size <= 3; the wrong answers differ by 0.5 or more.
    assert np.max(np.abs(ours - want)) <= 3 * 4 * 2.0**-8
