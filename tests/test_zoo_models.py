"""keras.applications models end to end: `import keras` by constructor name, then `export` (the restore
plan, onnxruntime against TensorFlow), then onnxruntime against Keras itself (bench/zoo.py does all 40).

Each constructor is imported once (module fixture) at 32x32 with 10 classes. Keras' fresh weights give
nearly uniform softmax outputs, which would compare equal whatever the graph did, so the .keras file the
spec restores from is overwritten with random weights and batch-norm statistics first (the spec reads
its weights at export time); the outputs are then checked to be far from uniform.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from specgen.importers.keras import import_keras  # noqa: E402
from specgen.pipeline import build  # noqa: E402
from specgen.runtime.commands.export import export, scaled_diff  # noqa: E402
from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

TOLERANCE = 1e-4  # max |ORT - Keras| / max |Keras|, the target
FAST = ["MobileNetV3Small", "EfficientNetB0", "DenseNet121", "NASNetMobile", "ConvNeXtTiny"]


def randomize(model: Any, scale: float = 0.2) -> None:
    """Random weights (positive variances): with Keras' fresh ones every model outputs ~1/classes."""
    rng = np.random.default_rng(1)
    for weight in model.weights:
        value = rng.standard_normal(tuple(weight.shape)).astype(np.float32) * scale
        if "variance" in weight.path:
            value = np.abs(value) + 0.5
        weight.assign(value)


def end_to_end(name: str, folder: Path, size: int = 32) -> tuple[dict[str, Any], float, np.ndarray]:
    spec = folder / "model.yaml"
    result = import_keras(name, spec, input_shape=(size, size, 3), classes=10)
    assert result.weights_written == folder / "model.keras" and result.weights == result.weights_written
    net = keras.models.load_model(result.weights_written, compile=False)  # Keras' own file, written by the import
    randomize(net)
    net.save(result.weights_written)
    report = export(build(load_spec(spec)), None, folder / "out")
    x = np.random.default_rng(0).standard_normal((2, size, size, 3)).astype(np.float32)
    expected = net(x, training=False).numpy()
    (actual,) = Predictor(str(folder / "out" / "model.onnx"), provider="cpu")({"input_layer": x}).values()
    return report, float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected))), expected


# InceptionResNetV2 (41 s here, the suite's second-slowest test) left the list for CI's 20 minutes: what it adds over
# these five is covered by smaller tests (its CustomScaleLayer bitwise below, its scale=False batch norms'
# .weights.h5 in test_import_bare_weights.py) and the whole model by bench/zoo.py with the other 39 constructors.
@pytest.fixture(scope="module", params=FAST)
def zoo_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    name = request.param
    return name, end_to_end(name, tmp_path_factory.mktemp(name), 32)


def test_export_matches_keras(zoo_model: tuple[str, Any]) -> None:
    name, (report, rel, expected) = zoo_model
    summary = report["restore"]["summary"]
    assert "initialized 0," in summary, summary  # every spec variable restored (unused: Normalization's count)
    assert expected.max() - expected.min() > 0.05, "outputs near uniform: the comparison would prove nothing"
    print(f"{name}: max rel diff {rel:.2g}, export gate {report['parity_scaled_diff']:.2g}")
    assert rel <= TOLERANCE


def test_custom_scale_layer_is_bitwise(tmp_path: Path) -> None:
    """InceptionResNetV2's CustomScaleLayer (x[0] + x[1] * scale) as rescale + add: Keras' own float32 order."""
    from keras.src.applications.inception_resnet_v2 import CustomScaleLayer

    a, b = keras.Input((4, 4, 3), name="a"), keras.Input((4, 4, 3), name="b")
    out = CustomScaleLayer(0.17, name="mix")([a, b])  # on the inputs: a conv's last bit may differ in onnxruntime
    model = keras.Model([a, b], out, name="scaled")
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    import_keras(str(tmp_path / "m.keras"), spec)
    text = spec.read_text()
    assert "{name: mix_scaled, op: rescale, input: b, scale: 0.17}" in text
    assert "{name: mix, op: add, inputs: [a, mix_scaled]}" in text and "Renamed" not in text
    export(build(load_spec(spec)), None, tmp_path / "out")
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((3, 4, 4, 3)).astype(np.float32) for k in ("a", "b")}
    (actual,) = Predictor(str(tmp_path / "out" / "model.onnx"), provider="cpu")(feeds).values()
    np.testing.assert_array_equal(actual, model([feeds["a"], feeds["b"]]).numpy())


def test_parity_gate_is_relative_to_output_magnitude() -> None:
    """Absolute up to magnitude 1, relative above; per output; NaN never passes."""
    small, big = np.array([0.5, -0.25], np.float32), np.array([4e14, 1.0], np.float32)
    assert scaled_diff({"p": small}, {"p": small + 5e-5}) == pytest.approx(5e-5, rel=1e-3)
    assert scaled_diff({"p": big}, {"p": big + np.float32(1e9)}) == pytest.approx(1e9 / 4e14, rel=0.02)
    both = scaled_diff({"p": small, "q": big}, {"p": small + 2e-4, "q": big})  # a big output loosens nothing
    assert both == pytest.approx(2e-4, rel=1e-3)
    assert np.isnan(scaled_diff({"p": small}, {"p": np.array([np.nan, 0.0], np.float32)}))
