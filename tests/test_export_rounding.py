"""Export's parity gate on a model that amplifies float32 rounding (bench/zoo.py's EfficientNetV2L case).

A deep tanh stack with weights of gain 4 (N(0, 16 / fan_in)) is chaotic: Keras' own float32 output
differs from the same network in numpy float64 by far more than the gate's 1e-4, so onnxruntime and
TensorFlow cannot agree either. The gate still refuses, and says that TensorFlow moves as much under a
one-step change of its inputs, instead of asking for a bug report. The same stack at gain 0.5 exports.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from specgen.cli import main  # noqa: E402
from specgen.runtime.commands.export import PARITY_LIMIT  # noqa: E402
from specgen.runtime.rounding import nudged, refusal  # noqa: E402

DEPTH, UNITS = 32, 64


def tanh_stack(folder: Path, gain: float) -> tuple[Path, float]:
    """Spec imported from a saved Keras tanh stack; and max |Keras float32 - numpy float64| over the export sample."""
    keras.utils.set_random_seed(0)
    init = keras.initializers.RandomNormal(stddev=gain / np.sqrt(UNITS), seed=0)
    x = inputs = keras.Input((UNITS,), name="x")
    for i in range(DEPTH):
        x = keras.layers.Dense(UNITS, activation="tanh", kernel_initializer=init, name=f"d{i}")(x)
    net = keras.Model(inputs, keras.layers.Dense(4, name="out")(x), name="chaos")
    net.save(folder / "chaos.keras")
    assert main(["import", "keras", str(folder / "chaos.keras"), "-o", str(folder / "chaos.yaml")]) == 0
    sample = np.random.default_rng(0).standard_normal((16, UNITS)).astype(np.float32)  # export's random sample
    h = sample.astype(np.float64)
    for layer in net.layers[1:]:
        kernel, bias = (np.asarray(w, np.float64) for w in layer.get_weights())
        h = h @ kernel + bias if layer.name == "out" else np.tanh(h @ kernel + bias)
    return folder / "chaos.yaml", float(np.max(np.abs(net(sample).numpy() - h)))


def test_chaotic_model_is_refused_as_float32_amplification(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, float64_gap = tanh_stack(tmp_path, gain=4.0)
    assert float64_gap > 100 * PARITY_LIMIT  # Keras float32 itself is off: no runtime could pass the gate
    capsys.readouterr()
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 1
    line, count = capsys.readouterr().err.splitlines()
    assert count == "1 error found"
    match = re.fullmatch(
        rf"{tmp_path / 'out'}: error: onnxruntime and TensorFlow disagree by (\S+) \(that is (\S+) relative to max\(1, "
        r"max \|TensorFlow output\|\); limit 0\.0001\); nothing was written\. TensorFlow alone moves by (\S+) \(same "
        r"scale\) when each input moves by one float32 step: with these weights the model amplifies float32 rounding, "
        r"so no two float32 runtimes can agree on its outputs, and this is not a conversion error\. Trained weights "
        r"rarely do this; look for batch-norm statistics or weights far from a trained model's", line)
    assert match, line
    assert float(match[2]) > PARITY_LIMIT and float(match[3]) > PARITY_LIMIT
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_same_stack_with_trained_scale_weights_exports(tmp_path: Path) -> None:
    spec, float64_gap = tanh_stack(tmp_path, gain=0.5)
    assert float64_gap < 1e-6
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "model.onnx").is_file()


def test_refusal_names_the_cause_only_when_tensorflow_moves_past_the_limit() -> None:
    head = ("onnxruntime and TensorFlow disagree by 0.5 (that is 0.25 relative to max(1, max |TensorFlow output|); "
            "limit 0.0001); nothing was written. ")
    assert refusal(0.5, 0.25, 1e-4, 2e-7) == head + (
        "TensorFlow alone moves by only 2e-07 (same scale) when each input moves by one float32 step, so the "
        "difference is not float32 rounding: please report this with the spec.")
    assert refusal(0.5, 0.25, 1e-4, None) == head + "Please report this with the spec."
    assert refusal(0.5, 0.25, 1e-4, float("nan")) == head + "Please report this with the spec."
    assert refusal(0.5, 0.25, 1e-4, 0.03).startswith(head + "TensorFlow alone moves by 0.03 (same scale)")


def test_nudged_moves_each_float_input_one_step_and_leaves_integers() -> None:
    inputs = {"image": np.array([0.0, 1.0, -3.5], np.float32), "ids": np.array([1, 2], np.int64)}
    moved = nudged(inputs)
    assert moved is not None
    np.testing.assert_array_equal(moved["ids"], inputs["ids"])
    assert moved["image"].dtype == np.float32
    # one float32 step above 1.0 is 2**-23; above -3.5 it is 2**-22 (towards zero); above 0 the smallest subnormal
    assert moved["image"].astype(np.float64).tolist() == [2.0**-149, 1.0 + 2.0**-23, -3.5 + 2.0**-22]
    assert nudged({"ids": inputs["ids"]}) is None
