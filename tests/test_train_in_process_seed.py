"""`specgen train` inside a long-lived process gives the weights of a fresh process, whatever ran before it.

tf.data's shuffle pairs its seed with TensorFlow's global seed; five test files call `keras.utils.set_random_seed`,
and a training run later in the same pytest worker got another data order (81% of one kernel differed in CI).
The run now trains without the caller's global seed and sets it back afterwards (runtime/commands/train.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: NAME
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: UNITS, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.003}}
train: {{batch_size: 16, seed: SEED, shuffle_buffer: 64}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 1000}}
"""


def write(folder: Path, name: str, units: int, seed: int) -> Path:
    folder.mkdir()
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.replace("NAME", name).replace("UNITS", str(units)).replace("SEED", str(seed)))
    return spec


def weights(spec: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(spec.parent / "run" / "ckpt-00000006" / "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.slow
def test_a_training_after_set_random_seed_and_another_training_equals_a_fresh_process(tmp_path: Path) -> None:
    import keras
    from tensorflow.python.eager import context  # TensorFlow exports no getter of the global seed

    first, second = write(tmp_path / "a", "other", 16, 5), write(tmp_path / "b", "mlp", 32, 3)
    fresh = write(tmp_path / "fresh", "mlp", 32, 3)
    done = subprocess.run([sys.executable, "-m", "specgen", "train", str(fresh), "--steps", "6", "--quiet"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr
    keras.utils.set_random_seed(1234)  # as test_flatten_order.py and four other files do in a shared worker
    assert main(["train", str(first), "--steps", "1", "--quiet"]) == 0
    assert main(["train", str(second), "--steps", "6", "--quiet"]) == 0
    assert context.global_seed() == 1234  # the caller's seed is set back
    here, reference = weights(second), weights(fresh)
    assert here.keys() == reference.keys()
    for name, value in reference.items():  # bitwise: the same spec, seed and data in the same TensorFlow
        np.testing.assert_array_equal(here[name], value, err_msg=name)
