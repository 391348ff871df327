"""gelu_approximate against Keras' gelu(approximate=True) (forward and gradients, tests/keras_parity.py's 1e-5),
as a layer and as dense's activation; the ONNX formula of opsets below 20 against TensorFlow; and that it is
not the exact gelu (the two differ by up to ~1e-3 near |x| = 2, far above the tolerance)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare, generated_model, layer_spec  # noqa: E402
from test_op_parity import TOLERANCE, check_parity, spec_text  # noqa: E402

from specgen.spec.load import load_spec_text  # noqa: E402


def approximate(x: object) -> object:
    return keras.activations.gelu(x, approximate=True)


def test_layer_matches_keras(tmp_path: Path) -> None:
    x = 3.0 * np.random.default_rng(1).standard_normal((5, 7, 6)).astype(np.float32)
    diffs = compare(keras.layers.Activation(approximate), [{"name": "a", "op": "gelu_approximate"}], [7, 6],
                    tmp_path, inputs=x)
    assert set(diffs) == {"forward", "grad input"}
    assert_close(diffs)


def test_dense_activation_matches_keras(tmp_path: Path) -> None:
    diffs = compare(keras.layers.Dense(6, activation=approximate),
                    [{"name": "fc", "op": "dense", "units": 6, "activation": "gelu_approximate"}], [7, 12], tmp_path)
    assert set(diffs) == {"forward", "grad fc/kernel", "grad fc/bias", "grad input"}
    assert_close(diffs)


def test_differs_from_exact_gelu(tmp_path: Path) -> None:
    import tensorflow as tf

    x = tf.constant(np.linspace(-4, 4, 81, dtype=np.float32).reshape(1, 81))
    outs = [generated_model(layer_spec(op, [81], [{"name": "a", "op": op}]), tmp_path)({"x": x})["y"].numpy()
            for op in ("gelu", "gelu_approximate")]
    assert 1e-4 < float(np.max(np.abs(outs[0] - outs[1]))) < 1e-2


@pytest.mark.parametrize("opset", [18, 21])
def test_onnx_formula_and_node(opset: int, tmp_path: Path) -> None:
    layers = [{"name": "fc", "op": "dense", "units": 5, "activation": "gelu_approximate"},
              {"name": "g", "op": "gelu_approximate"}]
    text = spec_text(f"gelu_approximate{opset}", {"x": {"shape": [6, 4]}}, layers, opset)
    assert check_parity(load_spec_text(text, "g.yaml"), tmp_path) <= TOLERANCE
