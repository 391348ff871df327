"""Data for a `uint8` input (raw pixels): whole numbers 0..255 reach the model as uint8, anything else is one
error line naming the file and where the value is (never wrapped to 0..255 or rounded); `specgen infer` refuses
pixels a uint8 input cannot hold. Real files written here, real TensorFlow datasets, real onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.parity import random_weights
from specgen.runtime.predictor import InputError, Predictor
from specgen.spec.load import load_spec_text

pytest.importorskip("tensorflow")

SPEC = """\
specgen: 1
name: pixels
inputs: {{image: {{shape: [2, 2, 1], dtype: uint8}}}}
outputs: {{logits: out}}
layers:
  - {{name: scale, op: rescale, input: image, scale: 0.00392156862745098}}
  - {{name: flat, op: flatten}}
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 2}}
data:
  train: {source}
"""
NPZ = "{npz: t.npz, features: {image: x}, labels: {label: y}}"
CSV = "{csv: t.csv, features: {image: [a, b, c, d]}, labels: {label: y}}"


def read(folder: Path, source: str) -> tuple[object, object]:
    """The train source's first two examples (features, labels) as the trainer gets them."""
    from specgen.runtime import data

    loaded = load_spec_text(SPEC.format(source=source), str(folder / "s.yaml"), folder / "s.yaml")
    found = data.read_stage(loaded, build_ir(loaded), "train")
    assert found is not None
    return next(iter(found.dataset.batch(2)))


def npz(folder: Path, x: np.ndarray) -> None:
    np.savez(folder / "t.npz", x=x.reshape(2, 2, 2, 1), y=np.array([0, 1]))


def test_whole_numbers_0_to_255_reach_the_model_as_uint8(tmp_path: Path) -> None:
    npz(tmp_path, np.array([0, 1, 254, 255, 7, 8, 9, 10], dtype=np.float32))  # floats holding whole numbers
    features, _ = read(tmp_path, NPZ)
    assert features["image"].dtype.name == "uint8"
    assert features["image"].numpy().ravel().tolist() == [0, 1, 254, 255, 7, 8, 9, 10]


@pytest.mark.parametrize(("values", "message"), [
    ([0, 1, 2, 3, 4, 5, 6, 256], "'image' is 256 at row 1 of array 'x' (element [1, 1, 1, 0]), but input 'image' is "
                                 "declared uint8 (raw pixels): values must be integers in [0, 256)"),
    ([0, 1, 2, 3, -1, 5, 6, 7], "'image' is -1 at row 1 of array 'x' (element [1, 0, 0, 0]), but input 'image' is "
                                "declared uint8 (raw pixels): values must be integers in [0, 256)"),
    ([0, 1, 2.5, 3, 4, 5, 6, 7], "'image' is 2.5 at row 0 of array 'x' (element [0, 1, 0, 0]); integers are expected"),
])
def test_an_npz_value_that_is_not_a_pixel_is_one_error_line(tmp_path: Path, values: list[float], message: str) -> None:
    npz(tmp_path, np.array(values, dtype=np.float64 if 2.5 in values else np.int64))
    with pytest.raises(SpecError) as info:
        read(tmp_path, NPZ)
    assert str(info.value) == f"{tmp_path / 's.yaml'}:13:41: error: data.train ({tmp_path / 't.npz'}): {message}"


def test_a_csv_value_that_is_not_a_pixel_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("a,b,c,d,y\n0,1,2,3,0\n4,300,6,7,1\n")
    with pytest.raises(SpecError) as info:
        read(tmp_path, CSV)
    assert str(info.value).endswith("but input 'image' is declared uint8 (raw pixels): values must be integers in "
                                    "[0, 256)")
    assert f"data.train ({tmp_path / 't.csv'}): 'image' is 300 at line 3, column 'b'" in str(info.value)


def test_infer_takes_uint8_and_refuses_other_pixels(tmp_path: Path) -> None:
    ir = build_ir(load_spec_text(SPEC.format(source=NPZ), "pixels.yaml"))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir,
                         random_weights(ir, np.random.default_rng(0)))
    predictor = Predictor(model.SerializeToString(), provider="cpu")
    pixels = np.array([[0, 255], [17, 128]], dtype=np.uint8).reshape(1, 2, 2, 1)
    assert predictor({"image": pixels})["logits"].shape == (1, 2)
    with pytest.raises(InputError, match=r"^input 'image': received dtype float32, expected uint8$"):
        predictor({"image": pixels.astype(np.float32)})
    with pytest.raises(InputError, match=r"^input 'image': received 300, expected uint8 values in \[0, 255\]$"):
        predictor({"image": np.full((1, 2, 2, 1), 300, dtype=np.uint16)})
