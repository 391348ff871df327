"""Every optimizer kind on an `embedding`'s sparse gradient (a tf.IndexedSlices), under every clip setting and
accumulate value, against Keras 3's optimizer of the same configuration (red-team round 11, numerics).

`rmsprop` with `centered: true` and `lion` crashed on the first update of any spec with an embedding at
`train.accumulate: 1` (`(1 - rho) * grad`: a Python float times an IndexedSlices is a TypeError); the other kinds
only reached the gradient through TensorFlow ops that densify it, and `accumulate: 2`'s dense accumulators hid it.
Now `optimizers.global_gradients` densifies it once for every kind (runtime/lib/optimizers.py `dense`), as
docs/training.md "Adam on an embedding" says.

The reference is Keras 3's optimizer fed the densified gradient (repeated ids summed: the gradient the loss
defines), which docs/training.md documents as specgen's update; Keras fed the IndexedSlices itself squares each
occurrence separately, so it is the reference only on batches where no id repeats (the last test).

The cases are parametrized over the optimizer registry: a new kind fails here until VARIANTS names its Keras
counterpart (or, without a learning rate, it is a gradient-free kind tested below as levenberg_marquardt is).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.kinds.optimizers import REGISTRY
from specgen.render.files import render_files
from specgen.runtime.lib.generated import load_generated
from specgen.spec.load import load_spec_text

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

VOCAB, IDS, CLASSES, ROWS = 8, 2, 3, 3
# Three batches of 3 rows x 2 ids: ids repeat within a batch (5 twice, 2 three times...) and 7 never occurs.
BATCHES = [np.array([[0, 2], [2, 5], [5, 2]], np.int32), np.array([[1, 1], [3, 0], [6, 1]], np.int32),
           np.array([[4, 4], [4, 2], [0, 3]], np.int32), np.array([[5, 6], [6, 6], [1, 0]], np.int32),
           np.array([[3, 2], [2, 2], [4, 5]], np.int32), np.array([[0, 0], [1, 3], [3, 6]], np.int32)]
# Batches in which no id occurs twice: there Keras fed the slices computes the same as fed the dense gradient.
UNIQUE_BATCHES = [np.array([[0, 2], [5, 1], [6, 3]], np.int32), np.array([[4, 1], [3, 0], [6, 5]], np.int32),
                  np.array([[2, 4], [1, 6], [0, 3]], np.int32)]
LABELS = [np.array([0, 1, 2]), np.array([2, 0, 1]), np.array([1, 2, 0]), np.array([0, 0, 2]), np.array([1, 2, 2]),
          np.array([2, 1, 0])]
UPDATES = 3
# Weights of order 0.05-1 after three updates of about ten float32 operations each: a difference past a few ulps
# of 1 (1.2e-7 each) is a formula slip, not rounding (test_training_numerics.py uses the same bound on dense ones).
TOLERANCE = 1e-6
CLIP_VALUE, CLIP_NORM = 0.03, 0.1  # both active on these batches (checked by the reference below)

Keras = Callable[..., Any]  # the Keras optimizer's constructor with the spec's settings, clip keywords added


def _keras(name: str, rate: float, **settings: Any) -> Keras:
    return lambda **clip: getattr(keras.optimizers, name)(rate, **settings, **clip)


# kind -> variant -> (the spec's optimizer entry without `kind`, its Keras counterpart); Keras' defaults are
# specgen's (epsilon 1e-7, AdamW's weight decay 0.004, Adagrad's initial accumulator 0.1).
VARIANTS: dict[str, dict[str, tuple[dict[str, Any], Keras]]] = {
    "sgd": {"plain": ({"learning_rate": 0.5}, _keras("SGD", 0.5)),
            "nesterov": ({"learning_rate": 0.5, "momentum": 0.8, "nesterov": True},
                         _keras("SGD", 0.5, momentum=0.8, nesterov=True))},
    "adam": {"default": ({"learning_rate": 0.05}, _keras("Adam", 0.05))},
    "adamw": {"default": ({"learning_rate": 0.05}, _keras("AdamW", 0.05))},
    "rmsprop": {"plain": ({"learning_rate": 0.01}, _keras("RMSprop", 0.01)),
                "momentum": ({"learning_rate": 0.01, "momentum": 0.9}, _keras("RMSprop", 0.01, momentum=0.9)),
                "centered": ({"learning_rate": 0.01, "centered": True}, _keras("RMSprop", 0.01, centered=True)),
                "centered_momentum": ({"learning_rate": 0.01, "centered": True, "momentum": 0.9},
                                      _keras("RMSprop", 0.01, centered=True, momentum=0.9))},
    "adagrad": {"default": ({"learning_rate": 0.1}, _keras("Adagrad", 0.1))},
    "lion": {"default": ({"learning_rate": 0.01}, _keras("Lion", 0.01))},
}
GRADIENT_KINDS = [kind for kind, definition in REGISTRY.items() if definition.learning_rate]
GRADIENT_FREE = [kind for kind, definition in REGISTRY.items() if not definition.learning_rate]
CASES = [(kind, variant) for kind in GRADIENT_KINDS for variant in VARIANTS.get(kind, {"missing": None})]
# clip setting -> (where the spec puts it, its mapping, the Keras optimizer's keyword): the optimizer's own clip
# and train.clip render through different hooks (templates/tf/features/clip.py.j2).
CLIPS: dict[str, tuple[str, dict[str, float], dict[str, float]]] = {
    "none": ("", {}, {}),
    "value": ("optimizer", {"value": CLIP_VALUE}, {"clipvalue": CLIP_VALUE}),
    "global_norm": ("train", {"global_norm": CLIP_NORM}, {"global_clipnorm": CLIP_NORM}),
}


def spec(kind: str, entry: dict[str, Any], clip: str = "none", accumulate: int = 1) -> dict[str, Any]:
    where, mapping, _ = CLIPS[clip]
    optimizer = {"kind": kind, "variables": ["*"], **entry, **({"clip": mapping} if where == "optimizer" else {})}
    train: dict[str, Any] = {"batch_size": ROWS, "accumulate": accumulate}
    if where == "train":
        train["clip"] = mapping
    return {
        "specgen": 1, "name": "sparse_r11", "inputs": {"ids": {"shape": [IDS], "dtype": "int32"}},
        "outputs": {"logits": "out"},
        "layers": [{"name": "emb", "op": "embedding", "vocab_size": VOCAB, "dim": 3},
                   {"name": "flat", "op": "flatten"}, {"name": "out", "op": "dense", "units": CLASSES}],
        "loss": {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"},
        "optimizers": {"all": optimizer}, "train": train,
    }


def generated(tmp_path: Path, doc: dict[str, Any]) -> tuple[Any, Any]:
    """The spec's model (seed 0) and its trainer, from the files `specgen build` writes."""
    ir = build_ir(load_spec_text(yaml.safe_dump(doc, sort_keys=False), "sparse_r11.yaml"))
    for name, content in render_files(ir).items():
        if name in ("model.py", "train.py"):
            (tmp_path / name).write_bytes(content)
    model = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    return model, getattr(load_generated(tmp_path / "train.py"), f"{ir.class_name}Training")(model)


def gradients(weights: dict[str, Any], ids: np.ndarray, labels: np.ndarray) -> list[Any]:
    """The same network written out, and its gradients as TensorFlow's tape gives them (the embedding's sparse)."""
    with tf.GradientTape() as tape:
        flat = tf.reshape(tf.gather(weights["emb/embeddings"], ids), [len(ids), -1])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels, flat @ weights["out/kernel"] + weights["out/bias"]))
    grads = tape.gradient(loss, list(weights.values()))
    assert isinstance(grads[0], tf.IndexedSlices)  # the sparse form the optimizers receive
    return list(grads)


def dense_mean(micro_batches: list[list[Any]]) -> list[Any]:
    """The mean of micro-batches' gradients, densified: what an update of `train.accumulate` applies."""
    return [tf.add_n([tf.convert_to_tensor(g) for g in column]) / len(micro_batches) for column in zip(*micro_batches,
                                                                                                        strict=True)]


def clip_is_active(clip: str, grads: list[Any]) -> bool:
    if clip == "value":
        return bool(max(float(tf.reduce_max(tf.abs(g))) for g in grads) > CLIP_VALUE)
    return clip == "none" or float(tf.linalg.global_norm(grads)) > CLIP_NORM


def train(trainer: Any, batches: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """One update of the generated trainer from `batches` (one micro-batch each)."""
    seed = tf.constant([0, 0], tf.int64)
    if len(batches) == 1:
        trainer.train_step({"ids": tf.constant(batches[0][0])}, {"label": tf.constant(batches[0][1])}, seed)
        return
    for ids, labels in batches:
        trainer.accumulate_step({"ids": tf.constant(ids)}, {"label": tf.constant(labels)}, seed)
    trainer.apply_accumulated()


def test_every_gradient_kind_has_a_keras_counterpart() -> None:
    missing = [kind for kind in GRADIENT_KINDS if kind not in VARIANTS]
    assert not missing, f"add the Keras optimizer of these kinds to VARIANTS: {missing}"


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("clip", list(CLIPS))
@pytest.mark.parametrize(("kind", "variant"), CASES)
def test_update_on_an_embedding_matches_keras_on_the_dense_gradient(
        kind: str, variant: str, clip: str, accumulate: int, tmp_path: Path) -> None:
    assert kind in VARIANTS, f"no Keras counterpart for optimizer kind {kind!r}: add it to VARIANTS"
    entry, make_keras = VARIANTS[kind][variant]
    model, trainer = generated(tmp_path, spec(kind, entry, clip, accumulate))
    start = {path: v.numpy() for path, v in model.variables_by_path().items()}
    copy = {path: tf.Variable(value) for path, value in start.items()}
    reference = make_keras(**CLIPS[clip][2])
    batches = list(zip(BATCHES, LABELS, strict=True))
    for update in range(UPDATES):
        micro = batches[update * accumulate:(update + 1) * accumulate] if accumulate > 1 else [batches[update]]
        train(trainer, micro)
        grads = dense_mean([gradients(copy, ids, labels) for ids, labels in micro])
        assert clip_is_active(clip, grads), f"clip {clip} does nothing at update {update + 1}: tighten it"
        reference.apply_gradients(zip(grads, copy.values(), strict=True))
    after = model.variables_by_path()
    for path, var in copy.items():
        np.testing.assert_allclose(after[path].numpy(), var.numpy(), rtol=0, atol=TOLERANCE,
                                   err_msg=f"{kind} {variant}, clip {clip}, accumulate {accumulate}: {path}")
    assert not np.array_equal(after["emb/embeddings"].numpy(), start["emb/embeddings"]), "the embedding did not move"


@pytest.mark.parametrize(("kind", "variant"), CASES)
def test_update_on_unrepeated_ids_matches_keras_fed_the_slices(kind: str, variant: str, tmp_path: Path) -> None:
    """Keras 3's optimizer receiving the embedding lookup's IndexedSlices, as a Keras model's fit gives it: the
    same update as specgen's where no id repeats within a batch (with repeats, docs/training.md says how and
    why the squaring kinds differ)."""
    assert kind in VARIANTS, f"no Keras counterpart for optimizer kind {kind!r}: add it to VARIANTS"
    entry, make_keras = VARIANTS[kind][variant]
    model, trainer = generated(tmp_path, spec(kind, entry))
    copy = {path: tf.Variable(v.numpy()) for path, v in model.variables_by_path().items()}
    reference = make_keras()
    for ids, labels in zip(UNIQUE_BATCHES, LABELS[:3], strict=True):
        train(trainer, [(ids, labels)])
        reference.apply_gradients(zip(gradients(copy, ids, labels), copy.values(), strict=True))
    after = model.variables_by_path()
    for path, var in copy.items():
        np.testing.assert_allclose(after[path].numpy(), var.numpy(), rtol=0, atol=TOLERANCE,
                                   err_msg=f"{kind} {variant}: {path}")


@pytest.mark.parametrize("kind", GRADIENT_FREE)
def test_gradient_free_kind_fits_an_embedding(kind: str, tmp_path: Path) -> None:
    """levenberg_marquardt differentiates the residuals itself (a Jacobian, dense): an embedding trains, the fit
    improves, and the row of an id that never occurs stays where it was (its Jacobian column is zero)."""
    doc = spec(kind, {})
    doc["optimizers"]["all"] = {"kind": kind, "variables": ["*"]}
    doc["loss"] = {"kind": "mean_squared_error", "predictions": "logits", "labels": "label"}
    doc["train"] = {"batch_size": "full"}
    model, trainer = generated(tmp_path, doc)
    ids = np.concatenate(BATCHES[:3])
    targets = np.random.default_rng(0).normal(size=(len(ids), CLASSES)).astype(np.float32)
    start = model.variables_by_path()["emb/embeddings"].numpy()
    features, labels = {"ids": tf.constant(ids)}, {"label": tf.constant(targets)}
    losses = [float(trainer.iterate(features, labels)[0]) for _ in range(3)]
    assert losses[-1] < losses[0], losses
    after = model.variables_by_path()["emb/embeddings"].numpy()
    assert np.array_equal(after[VOCAB - 1], start[VOCAB - 1]) and not np.array_equal(after, start)


def test_global_gradients_are_dense() -> None:
    """The one source of the generated steps' gradients hands every update a dense tensor, the slices of a
    repeated id summed, whatever the kind's arithmetic (plain Python operators included)."""
    from specgen.runtime.lib.optimizers import global_gradients

    table = tf.Variable(tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1, 1, 2]))
    (grad,) = global_gradients(tape, loss, [table])
    assert isinstance(grad, tf.Tensor)
    np.testing.assert_array_equal(grad.numpy(), [[0, 0], [2, 2], [1, 1]])
    assert isinstance(0.1 * grad, tf.Tensor)  # what rmsprop centered and lion do with it


@pytest.mark.parametrize(("kind", "variant"), CASES)
def test_the_probes_first_update_on_an_embedding_is_the_dense_steps(kind: str, variant: str, tmp_path: Path) -> None:
    """`specgen train --probe` applies the trainer's step to the generated `gradients` (the tape's, an embedding's
    sparse) and puts everything back: it crashed on rmsprop centered and lion (found verifying round 11's fix,
    which covered the training step only). Its update equals Keras' step on the dense gradient, and nothing moves."""
    from specgen.runtime.commands.probe import first_update

    entry, make_keras = VARIANTS[kind][variant]
    model, trainer = generated(tmp_path, spec(kind, entry))
    start = {path: v.numpy() for path, v in model.variables_by_path().items()}
    ids, labels = BATCHES[0], LABELS[0]
    features, targets = {"ids": tf.constant(ids)}, {"label": tf.constant(labels, tf.int64)}
    _, grads = trainer.gradients(features, targets)
    assert isinstance(grads[0], tf.IndexedSlices)
    moved = first_update(model, trainer, list(grads))
    copy = {path: tf.Variable(value) for path, value in start.items()}
    make_keras().apply_gradients(zip(dense_mean([gradients(copy, ids, labels)]), copy.values(), strict=True))
    expected = np.linalg.norm((copy["emb/embeddings"].numpy() - start["emb/embeddings"]).astype(np.float64))
    assert moved["emb/embeddings"] == pytest.approx(expected, rel=1e-5, abs=TOLERANCE)
    for path, var in model.variables_by_path().items():
        np.testing.assert_array_equal(var.numpy(), start[path], err_msg=f"{path} was not put back")
