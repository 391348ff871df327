"""TF-vs-onnxruntime parity cases of resize (keras.layers.Resizing) and of uint8 inputs cast at the model's entry;
picked up by tests/test_op_parity.py."""

from __future__ import annotations

from typing import Any

IMAGE = {"image": {"shape": [9, 7, 3]}}
ANY_SIZE = {"image": {"shape": ["height", "width", 3]}}  # the parity run gives each named dimension 11
PIXELS = {"image": {"shape": [9, 7, 3], "dtype": "uint8"}}


def resize(height: int, width: int, interpolation: str = "bilinear") -> dict[str, Any]:
    return {"name": "r", "op": "resize", "height": height, "width": width, "interpolation": interpolation}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "resize_bilinear_down": (IMAGE, [resize(4, 5)]),
    "resize_bilinear_up": (IMAGE, [resize(13, 16)]),
    "resize_bilinear_to_one_row": (IMAGE, [resize(1, 4)]),  # half_pixel, not pytorch_half_pixel (which maps to 0)
    "resize_nearest_down": (IMAGE, [resize(3, 2, "nearest")]),  # 9 -> 3: whole-number source positions
    "resize_nearest_up": (IMAGE, [resize(20, 15, "nearest")]),
    "resize_any_size_after_conv": (ANY_SIZE, [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3},
                                              resize(6, 6)]),
    "uint8_rescale_normalize_resize": (PIXELS, [{"name": "s", "op": "rescale", "input": "image", "scale": 0.00392156862745098},
                                                {"name": "n", "op": "normalize", "mean": [0.5, 0.4, 0.3],
                                                 "variance": [0.1, 0.2, 0.3]},
                                                resize(5, 5)]),
}
