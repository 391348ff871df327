"""An augmented run (flip, padded crop, rotation, mixup) stopped after 3 updates and resumed with --resume
ends bitwise equal to an uninterrupted 6-update run: the draws depend on train.seed and the batch count
the checkpointed data iterator holds, nothing else. (A clean stop: kill -9 during streamed reads is
tests of the tfrecord source's; the data position saved is the same here.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: augmented
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten, input: image}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: adam, learning_rate: 0.01}}}}
train: {{batch_size: 16, seed: 5, metrics: [accuracy]}}
data:
  train:
    npz: {DIGITS}
    features: {{image: x_train}}
    labels: {{label: y_train}}
    augment:
      - {{random_flip: horizontal}}
      - {{random_crop: {{size: [8, 8], pad: 1}}}}
      - {{random_rotation: 0.05}}
      - {{mixup: 0.2}}
checkpoint: {{dir: run, every_steps: 3, keep: 5}}
"""


def weights(run: Path, step: int) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(run / f"ckpt-{step:08d}" / "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def train(folder: Path, *args: str, spec: str = SPEC) -> None:
    from specgen.cli import main

    folder.mkdir(exist_ok=True)
    (folder / "spec.yaml").write_text(spec)
    assert main(["train", str(folder / "spec.yaml"), "--quiet", *args]) == 0


def test_a_resumed_augmented_run_ends_bitwise_equal(tmp_path: Path) -> None:
    train(tmp_path / "whole", "--steps", "6")
    train(tmp_path / "halves", "--steps", "3")
    train(tmp_path / "halves", "--resume", "--steps", "3")
    whole, halves = weights(tmp_path / "whole" / "run", 6), weights(tmp_path / "halves" / "run", 6)
    assert sorted(whole) == sorted(halves)
    for name in whole:
        np.testing.assert_array_equal(halves[name], whole[name], err_msg=name)
    # The training batches are augmented: mixup's labels arrive mixed, one row of 10 class shares per example.
    from specgen.ir.resolve import build_ir
    from specgen.runtime import data
    from specgen.spec.load import load_spec_text

    path = tmp_path / "whole" / "spec.yaml"
    loaded = load_spec_text(SPEC, str(path), path)
    source = data.read_stage(loaded, build_ir(loaded), "train")
    assert source is not None
    _, labels = next(iter(data.training_batches(source, 16, 5, 64)))
    assert labels["label"].shape == (16, 10) and labels["label"].dtype.name == "float32"
    np.testing.assert_allclose(np.sum(labels["label"], axis=-1), np.ones(16), rtol=1e-6)  # float32 sums of shares
