"""npz, csv and TFRecord sources give the same examples; bad sources fail before training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

ROWS = 10


def spec(source: str) -> str:
    return f"""\
specgen: 1
name: tabular
inputs: {{x: {{shape: [3]}}}}
outputs: {{logits: out}}
layers:
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 4}}
data:
  train: {source}
"""


@pytest.fixture(scope="module")
def arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((ROWS, 3)).astype(np.float32), rng.integers(0, 2, ROWS)


def read(folder: Path, source: str) -> list[tuple[np.ndarray, int]]:
    from specgen.runtime import data

    loaded = load_spec_text(spec(source), str(folder / "tabular.yaml"), folder / "tabular.yaml")
    stage = data.read_stage(loaded, build_ir(loaded), "train")
    assert stage is not None and stage.examples == ROWS
    return [(features["x"].numpy(), int(labels["label"].numpy())) for features, labels in stage.dataset]


def write_sources(folder: Path, x: np.ndarray, y: np.ndarray) -> None:
    import tensorflow as tf

    np.savez(folder / "t.npz", features=x, labels=y)
    lines = ["a,b,c,label"] + [",".join(f"{v:.9g}" for v in row) + f",{label}" for row, label in zip(x, y, strict=True)]
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    with tf.io.TFRecordWriter(str(folder / "t.tfrecord")) as writer:
        for row, label in zip(x, y, strict=True):
            example = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=row.tolist())),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }))
            writer.write(example.SerializeToString())


def test_three_formats_give_the_same_examples(tmp_path: Path, arrays: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = arrays
    write_sources(tmp_path, x, y)
    npz = read(tmp_path, "{npz: t.npz, features: {x: features}, labels: {label: labels}}")
    csv = read(tmp_path, "{csv: t.csv, features: {x: [a, b, c]}, labels: {label: label}}")
    tfrecord = read(tmp_path, "{tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}}")
    for i in range(ROWS):
        np.testing.assert_array_equal(npz[i][0], x[i])
        assert npz[i][1] == csv[i][1] == tfrecord[i][1] == y[i]
        np.testing.assert_allclose(csv[i][0], x[i], rtol=1e-7)
        np.testing.assert_array_equal(tfrecord[i][0], x[i])


@pytest.mark.parametrize(("source", "message"), [
    ("{csv: t.csv, features: {x: [a, b, lable]}, labels: {label: label}}",
     "column 'lable' not found; did you mean 'label'? (columns: a, b, c, label)"),
    ("{csv: t.csv, features: {x: [a, b]}, labels: {label: label}}",
     "'x' has shape [N, 2] but the spec declares [N, 3]"),
    ("{npz: t.npz, features: {x: labels}, labels: {label: labels}}",
     "'x' has shape [N] but the spec declares [N, 3]"),
    ("{npz: missing.npz, features: {x: features}, labels: {label: labels}}", "no such file"),
    ("{tfrecord: t.tfrecord, features: {x: nope}, labels: {label: y}}", "cannot parse record 0"),
    # The images source's own cases read real folders: tests/test_images_*.py.
    ("{images: photos, image_size: [3, 1]}", "input 'x' has shape [3]; an images source "
     "with image_size [3, 1] feeds [3, 1, 1 or 3] (channels: 1 grayscale, 3 RGB)"),
])
def test_bad_sources_are_errors_naming_source_and_array(tmp_path: Path, arrays: tuple[np.ndarray, np.ndarray],
                                                        source: str, message: str) -> None:
    write_sources(tmp_path, *arrays)
    with pytest.raises(SpecError) as info:
        read(tmp_path, source)
    text = str(info.value)
    assert message in text, text
    assert text.startswith(f"{tmp_path / 'tabular.yaml'}:11:")
