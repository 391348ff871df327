"""conv1d, max_pool1d, avg_pool1d and the global pools over time against Keras' own layers:
same configuration, same weights, forward and gradients within 1e-5 (tests/keras_parity.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare  # noqa: E402

SEQ = [9, 6]  # 9 steps: odd, so strided SAME windows pad asymmetrically; 6 channels: groups 2 and 3


def conv(*args: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: keras.layers.Conv1D(*args, **kwargs)


# case -> (Keras layer factory, spec layer); Keras layers are built lazily (no TensorFlow at collection).
CASES: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    "conv1d_valid": (conv(4, 3), {"op": "conv1d", "filters": 4, "kernel": 3}),
    "conv1d_same_stride2_relu": (conv(4, 3, strides=2, padding="same", activation="relu"),
                                 {"op": "conv1d", "filters": 4, "kernel": 3, "strides": 2, "padding": "same",
                                  "activation": "relu"}),
    "conv1d_causal": (conv(5, 4, padding="causal"), {"op": "conv1d", "filters": 5, "kernel": 4, "padding": "causal"}),
    "conv1d_causal_dilated": (conv(4, 3, padding="causal", dilation_rate=2),
                              {"op": "conv1d", "filters": 4, "kernel": 3, "padding": "causal", "dilation": 2}),
    "conv1d_same_dilated": (conv(4, 2, padding="same", dilation_rate=3),
                            {"op": "conv1d", "filters": 4, "kernel": 2, "padding": "same", "dilation": 3}),
    "conv1d_groups2_causal": (conv(4, 3, padding="causal", groups=2),
                              {"op": "conv1d", "filters": 4, "kernel": 3, "padding": "causal", "groups": 2}),
    "conv1d_groups3_valid_no_bias": (conv(6, 2, groups=3, use_bias=False),
                                     {"op": "conv1d", "filters": 6, "kernel": 2, "groups": 3, "use_bias": False}),
    "max_pool1d_valid": (lambda: keras.layers.MaxPooling1D(2), {"op": "max_pool1d", "size": 2}),
    "max_pool1d_same_stride2": (lambda: keras.layers.MaxPooling1D(3, strides=2, padding="same"),
                                {"op": "max_pool1d", "size": 3, "strides": 2, "padding": "same"}),
    "avg_pool1d_valid_stride1": (lambda: keras.layers.AveragePooling1D(3, strides=1),
                                 {"op": "avg_pool1d", "size": 3, "strides": 1}),
    "avg_pool1d_same": (lambda: keras.layers.AveragePooling1D(2, padding="same"),
                        {"op": "avg_pool1d", "size": 2, "padding": "same"}),
    "global_avg_pool_time": (lambda: keras.layers.GlobalAveragePooling1D(), {"op": "global_avg_pool"}),
    "global_max_pool_time_keepdims": (lambda: keras.layers.GlobalMaxPooling1D(keepdims=True),
                                      {"op": "global_max_pool", "keepdims": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_keras(case: str, tmp_path: Path) -> None:
    make, layer = CASES[case]
    diffs = compare(make(), [{"name": "l", **layer}], SEQ, tmp_path)
    print(case, diffs)  # the measured differences, shown with `pytest -s`
    assert "grad input" in diffs
    if layer["op"] == "conv1d":
        assert {"grad l/kernel"} <= set(diffs)
    assert_close(diffs)
