"""Adam on an `embedding` (issue 17, §4; docs/training.md "Adam on an embedding").

The generated step's gradient for `embeddings` is a tf.IndexedSlices with one slice per occurrence of an id
in the batch. specgen's Adam densifies it (duplicate ids summed: the gradient of the loss with respect to the
row) and applies Keras' dense formulas to every row. Keras 3's own Adam fed the IndexedSlices squares each
occurrence's slice before summing them into the second moment (its `ops.square` is elementwise on the slices'
values), so rows whose id repeats in a batch get sum(g_i^2) where Adam's definition has (sum g_i)^2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.lib.generated import load_generated
from specgen.spec.load import load_spec_text

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

RATE = 1e-2
SPEC = {
    "specgen": 1, "name": "emb_adam", "inputs": {"ids": {"shape": [4], "dtype": "int32"}}, "outputs": {"logits": "out"},
    "layers": [{"name": "emb", "op": "embedding", "vocab_size": 6, "dim": 3},
               {"name": "flat", "op": "flatten"}, {"name": "out", "op": "dense", "units": 3}],
    "loss": {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"},
    "optimizers": {"all": {"variables": ["*"], "kind": "adam", "learning_rate": RATE}},
    "train": {"batch_size": 4},
}
# Ids repeat within and across rows (0 four times, 1 three times); 5 never occurs.
BATCHES = [np.array([[0, 0, 1, 2], [0, 1, 1, 3], [4, 0, 2, 2], [3, 3, 4, 1]], np.int32),
           np.array([[2, 2, 2, 0], [1, 0, 4, 4], [3, 1, 0, 0], [0, 2, 3, 1]], np.int32),
           np.array([[1, 1, 1, 1], [0, 0, 3, 2], [2, 4, 4, 0], [3, 0, 1, 2]], np.int32)]
LABELS = [np.array([0, 1, 2, 1]), np.array([2, 0, 1, 1]), np.array([1, 2, 0, 0])]
# float32 rounding through one Adam step (about ten operations on values of order 1e-2), three steps: the
# specgen-vs-Keras tolerance test_training_numerics.py uses for every optimizer on dense gradients.
TOLERANCE = 1e-6


def generated(tmp_path: Path, spec: dict[str, object] = SPEC) -> tuple[Any, Any]:
    loaded = load_spec_text(yaml.safe_dump(spec, sort_keys=False), "emb_adam.yaml")
    ir = build_ir(loaded)
    for name, content in render_files(ir).items():
        if name in ("model.py", "train.py"):
            (tmp_path / name).write_bytes(content)
    model = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    return model, getattr(load_generated(tmp_path / "train.py"), f"{ir.class_name}Training")(model)


def gradients(weights: dict[str, tf.Variable], ids: np.ndarray, labels: np.ndarray) -> list[object]:
    """The loss of the same network, written out, and its gradients as TensorFlow's tape gives them."""
    with tf.GradientTape() as tape:
        flat = tf.reshape(tf.gather(weights["emb/embeddings"], ids), [len(ids), -1])
        logits = flat @ weights["out/kernel"] + weights["out/bias"]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return tape.gradient(loss, list(weights.values()))


def test_specgen_adam_on_an_embedding_is_keras_adam_on_the_densified_gradient(tmp_path: Path) -> None:
    model, trainer = generated(tmp_path)
    start = {path: v.numpy() for path, v in model.variables_by_path().items()}
    dense = {path: tf.Variable(value) for path, value in start.items()}
    sliced = {path: tf.Variable(value) for path, value in start.items()}
    keras_dense, keras_sliced = keras.optimizers.Adam(RATE), keras.optimizers.Adam(RATE)
    for ids, labels in zip(BATCHES, LABELS, strict=True):
        trainer.train_step({"ids": tf.constant(ids)}, {"label": tf.constant(labels)}, tf.constant([0, 0], tf.int64))
        grads = gradients(dense, ids, labels)
        assert isinstance(grads[0], tf.IndexedSlices) and grads[0].values.shape[0] == 16  # one slice per occurrence
        keras_dense.apply_gradients(zip([tf.convert_to_tensor(g) for g in grads], dense.values(), strict=True))
        keras_sliced.apply_gradients(zip(gradients(sliced, ids, labels), sliced.values(), strict=True))
    after = {path: v.numpy() for path, v in model.variables_by_path().items()}
    for path, var in dense.items():
        np.testing.assert_allclose(after[path], var.numpy(), rtol=0, atol=TOLERANCE, err_msg=path)
    # Keras 3 fed the slices moves repeated rows elsewhere: far beyond rounding, on the embedding only at first.
    apart = np.abs(after["emb/embeddings"] - sliced["emb/embeddings"].numpy()).max(axis=1)
    assert apart[:5].min() > 1e-4 and apart.max() > 1e-3, apart
    assert np.array_equal(after["emb/embeddings"][5], start["emb/embeddings"][5])  # id 5 never occurs: m, v stay 0


@pytest.mark.parametrize("clip", [{"value": 0.002}, {"global_norm": 0.05}])
def test_clipping_an_embedding_s_gradient_clips_the_summed_gradient(tmp_path: Path, clip: dict[str, float]) -> None:
    """Clipping sees the gradient the loss defines (each id's slices summed), as the dense accumulators of
    `train.accumulate` do: on the slices, `value` bounded each occurrence (a row moved by 4x the bound for an id
    seen 4 times) and `global_norm` measured the occurrences. Reference: tf's own clip on the dense gradient, then
    Keras' SGD (one update of values of order 1e-2: a few float32 roundings)."""
    spec = {**SPEC, "optimizers": {"all": {"variables": ["*"], "kind": "sgd", "learning_rate": 1.0, "clip": clip}}}
    model, trainer = generated(tmp_path, spec)
    reference = {path: tf.Variable(v.numpy()) for path, v in model.variables_by_path().items()}
    ids, labels = BATCHES[0], LABELS[0]
    trainer.train_step({"ids": tf.constant(ids)}, {"label": tf.constant(labels)}, tf.constant([0, 0], tf.int64))
    dense = [tf.convert_to_tensor(g) for g in gradients(reference, ids, labels)]
    clipped = (tf.clip_by_global_norm(dense, clip["global_norm"])[0] if "global_norm" in clip
               else [tf.clip_by_value(g, -clip["value"], clip["value"]) for g in dense])
    keras.optimizers.SGD(1.0).apply_gradients(zip(clipped, reference.values(), strict=True))
    after = model.variables_by_path()
    for path, var in reference.items():
        np.testing.assert_allclose(after[path].numpy(), var.numpy(), rtol=0, atol=1e-7, err_msg=path)
