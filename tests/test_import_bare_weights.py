"""`specgen import keras MODEL --weights FILE.weights.h5`: a bare Keras 3 weights file, named by the model's config.

Keras stores each layer's variables by index in a `.weights.h5`; for a BatchNormalization with scale=False
or center=False three arrays fit two orders, so the reader cannot name them alone. The importer maps them
by the layer's config (importers/keras/bare_weights.py). Before, 6 of these 13 variables were silently
left to their initializers. Both files are written by Keras itself (`model.save`, `model.save_weights`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from specgen.cli import main  # noqa: E402
from specgen.runtime.predictor import Predictor  # noqa: E402

TOLERANCE = 1e-5  # max |ORT - Keras| / max |Keras|


def model(first_norm: dict[str, bool]) -> Any:
    keras.utils.set_random_seed(0)
    image = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(4, 3, use_bias=False, name="conv")(image)
    x = keras.layers.BatchNormalization(name="bn_a", **first_norm)(x)
    x = keras.layers.BatchNormalization(center=False, name="bn_b")(x)
    x = keras.layers.BatchNormalization(name="bn_c")(x)
    net = keras.Model(image, keras.layers.Dense(3, name="fc")(keras.layers.GlobalAveragePooling2D(name="gap")(x)))
    rng = np.random.default_rng(0)
    for weight in net.weights:  # every value distinct and away from the initializers' 0 and 1
        weight.assign(rng.uniform(0.5, 1.5, weight.shape).astype(np.float32))
    return net


def test_scale_false_and_center_false_are_named_by_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    net = model({"scale": False})
    net.save(tmp_path / "net.keras")
    net.save_weights(tmp_path / "net.weights.h5")
    assert main(["import", "keras", str(tmp_path / "net.keras"), "--weights", str(tmp_path / "net.weights.h5"),
                 "-o", str(tmp_path / "net.yaml")]) == 0
    spec = (tmp_path / "net.yaml").read_text()
    assert ("    - from: net.weights.h5\n      strict: true\n      map:\n"
            "        - {from: bn_a/vars/0, to: bn_a/beta}\n"
            "        - {from: bn_a/vars/1, to: bn_a/moving_mean}\n"
            "        - {from: bn_a/vars/2, to: bn_a/moving_variance}\n"
            "        - {from: bn_b/vars/0, to: bn_b/gamma}\n"
            "        - {from: bn_b/vars/1, to: bn_b/moving_mean}\n"
            "        - {from: bn_b/vars/2, to: bn_b/moving_variance}\n\n") in spec
    capsys.readouterr()
    assert main(["export", str(tmp_path / "net.yaml"), "-o", str(tmp_path / "out")]) == 0
    assert "restore: restored 13, initialized 0, unused 0, mismatched 0" in capsys.readouterr().out
    x = np.random.default_rng(1).standard_normal((4, 8, 8, 3)).astype(np.float32)
    expected = net(x, training=False).numpy()
    (actual,) = Predictor(str(tmp_path / "out" / "model.onnx"), provider="cpu")({"image": x}).values()
    assert np.max(np.abs(actual - expected)) / np.max(np.abs(expected)) <= TOLERANCE


def test_a_file_from_another_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model({"scale": False}).save_weights(tmp_path / "other.weights.h5")  # bn_a: 3 variables
    model({}).save(tmp_path / "net.keras")  # bn_a: 4
    capsys.readouterr()
    assert main(["import", "keras", str(tmp_path / "net.keras"), "--weights", str(tmp_path / "other.weights.h5"),
                 "-o", str(tmp_path / "net.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / 'net.keras'}: error: Keras layer 'bn_a' (BatchNormalization): --weights other.weights.h5 holds 3 "
        "variables for this layer, but its config gives 4 (gamma, beta, moving_mean, moving_variance): the file was "
        "written by a different model", "1 error found"]
    assert not (tmp_path / "net.yaml").exists()


def test_an_unreadable_weights_file_is_refused_at_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model({}).save(tmp_path / "net.keras")
    (tmp_path / "empty.weights.h5").write_bytes(b"")
    capsys.readouterr()
    assert main(["import", "keras", str(tmp_path / "net.keras"), "--weights", str(tmp_path / "empty.weights.h5"),
                 "-o", str(tmp_path / "net.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / 'net.keras'}: error: --weights: cannot read Keras weight file {tmp_path / 'empty.weights.h5'}: "
        "neither an HDF5 file nor a .keras archive", "1 error found"]
    assert not (tmp_path / "net.yaml").exists()
