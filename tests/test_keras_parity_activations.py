"""pad, crop and the activations of issue 10 against Keras' own layers (tests/keras_parity.py).

Each case is the spec layer and the Keras layer with the same configuration; the harness gives
them the same weights and inputs and compares the forward pass and the gradients (<= 1e-5).
The activation-value form is checked through Dense and Conv2D with `activation=...` (their
pre-activations, of scale about 3.5, reach past -3, 3 and 6); softmax on a conv is over the
channel axis in both. The ONNX side: tests/op_cases_activations.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare  # noqa: E402

IMAGE = [9, 7, 3]  # odd height and width: swapped axes or sides change the shape or the values
ACTIVATIONS = ("relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "sigmoid", "hard_sigmoid", "tanh", "softplus",
               "swish", "silu", "hard_swish", "hard_silu", "softmax")

# (Keras layer factory, spec layer, input shape) per case
LAYER_CASES: dict[str, tuple[Callable[[], Any], dict[str, Any], list[int]]] = {
    "pad_int": (lambda: keras.layers.ZeroPadding2D(2), {"op": "pad", "padding": 2}, IMAGE),
    "pad_default": (lambda: keras.layers.ZeroPadding2D(), {"op": "pad"}, IMAGE),
    "pad_hw": (lambda: keras.layers.ZeroPadding2D((2, 1)), {"op": "pad", "padding": [2, 1]}, IMAGE),
    "pad_pairs": (lambda: keras.layers.ZeroPadding2D(((1, 2), (0, 3))), {"op": "pad", "padding": [[1, 2], [0, 3]]},
                  IMAGE),
    "crop_int": (lambda: keras.layers.Cropping2D(1), {"op": "crop", "cropping": 1}, IMAGE),
    "crop_default": (lambda: keras.layers.Cropping2D(), {"op": "crop"}, IMAGE),
    "crop_hw": (lambda: keras.layers.Cropping2D((1, 2)), {"op": "crop", "cropping": [1, 2]}, IMAGE),
    "crop_pairs": (lambda: keras.layers.Cropping2D(((2, 1), (0, 3))), {"op": "crop", "cropping": [[2, 1], [0, 3]]},
                   IMAGE),
    "crop_to_one_pixel": (lambda: keras.layers.Cropping2D(((4, 4), (3, 3))),
                          {"op": "crop", "cropping": [[4, 4], [3, 3]]}, IMAGE),
    "relu_max_value": (lambda: keras.layers.ReLU(max_value=0.5), {"op": "relu", "max_value": 0.5}, [12]),
    "relu_max_value_6": (lambda: keras.layers.ReLU(max_value=6.0), {"op": "relu", "max_value": 6}, IMAGE),
    "relu_max_value_0": (lambda: keras.layers.ReLU(max_value=0.0), {"op": "relu", "max_value": 0}, [12]),
    "elu": (lambda: keras.layers.ELU(), {"op": "elu"}, [12]),
    "elu_alpha": (lambda: keras.layers.ELU(alpha=0.3), {"op": "elu", "alpha": 0.3}, IMAGE),
    **{act: (lambda act=act: keras.layers.Activation(act), {"op": act}, IMAGE)
       for act in ("relu6", "selu", "softplus", "swish", "silu", "hard_sigmoid", "hard_swish", "hard_silu")},
}


@pytest.mark.parametrize("case", sorted(LAYER_CASES))
def test_layer_matches_keras(case: str, tmp_path: Path) -> None:
    make, layer, shape = LAYER_CASES[case]
    # Inputs of scale 4 reach every piece of the hard and clipped activations (beyond -3, 3 and 6).
    x = 4.0 * np.random.default_rng(1).standard_normal((5, *shape)).astype(np.float32)
    diffs = compare(make(), [{"name": "a", **layer}], shape, tmp_path, inputs=x)
    assert set(diffs) == {"forward", "grad input"}
    assert_close(diffs)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_dense_activation_matches_keras(act: str, tmp_path: Path) -> None:
    diffs = compare(keras.layers.Dense(6, activation=act),
                    [{"name": "fc", "op": "dense", "units": 6, "activation": act}], [12], tmp_path)
    assert set(diffs) == {"forward", "grad fc/kernel", "grad fc/bias", "grad input"}
    assert_close(diffs)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_conv2d_activation_matches_keras(act: str, tmp_path: Path) -> None:
    diffs = compare(keras.layers.Conv2D(4, 3, padding="same", activation=act),
                    [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", "activation": act}],
                    IMAGE, tmp_path)
    assert_close(diffs)
