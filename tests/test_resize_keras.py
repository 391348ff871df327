"""resize against keras.layers.Resizing: same configuration, forward and input gradient (tests/keras_parity.py).

Both run TensorFlow's own resize kernels (Keras' TensorFlow backend calls tf.image.resize with
antialias=False, as the generated model.py does), so the forward pass is compared for exact equality;
the input gradient within keras_parity's 1e-5 (the same kernels, but Keras may sum in another order).
"""

from __future__ import annotations

from pathlib import Path

import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare  # noqa: E402

IMAGE = [9, 7, 3]

# case -> (Keras arguments, spec layer): down, up, a single row, each interpolation
CASES = {
    "bilinear_down": ((4, 5, "bilinear"), {"height": 4, "width": 5}),
    "bilinear_up_one_row": ((1, 16, "bilinear"), {"height": 1, "width": 16}),
    "nearest_down": ((3, 2, "nearest"), {"height": 3, "width": 2, "interpolation": "nearest"}),
    "nearest_up": ((20, 15, "nearest"), {"height": 20, "width": 15, "interpolation": "nearest"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resize_matches_keras_resizing(case: str, tmp_path: Path) -> None:
    (height, width, interpolation), layer = CASES[case]
    keras_layer = keras.layers.Resizing(height, width, interpolation=interpolation)
    diffs = compare(keras_layer, [{"name": "l", "op": "resize", **layer}], IMAGE, tmp_path)
    assert diffs["forward"] == 0.0, diffs
    assert "grad input" in diffs
    assert_close(diffs)
