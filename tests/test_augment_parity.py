"""Each augmentation is the Keras 3 layer of its name: with the layer's seed k, Keras' own call and
specgen's (its stateless seeds based at [k, 0], the state a SeedGenerator(k) starts from) give the same
bytes; the flip's and the contrast's draws are also checked against their documented distributions (p = 0.5
per image; a factor uniform in [1 - f, 1 + f])."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from specgen.kinds.augment import Augment

SEED = 7
ITEMS: list[dict[str, Any]] = [
    {"random_flip": "horizontal_and_vertical"},
    {"random_crop": {"size": [8, 8], "pad": 2}},
    {"random_rotation": 0.1},
    {"random_zoom": {"factor": 0.2, "width": 0.1, "fill_mode": "constant"}},
    {"random_translation": 0.2},
    {"random_brightness": {"factor": 0.3, "value_range": [0, 255]}},
    {"random_contrast": 0.5},
    {"mixup": 0.4},
    {"cutmix": 1.0},
]


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (6, 8, 8, 3)).astype(np.float32)
    return images, np.eye(4, dtype=np.float32)[rng.integers(0, 4, 6)]


@pytest.mark.parametrize("entry", ITEMS, ids=[next(iter(e)) for e in ITEMS])
def test_specgen_draws_what_the_keras_layer_draws(entry: dict[str, Any]) -> None:
    import keras
    import tensorflow as tf

    from specgen.runtime.augment import steps

    [step] = steps([TypeAdapter(Augment).validate_python(entry)])
    name, kwargs = step.layer.__class__.__name__, step.layer.get_config()
    kwargs.pop("name", None)
    reference = getattr(keras.layers, name).from_config({**kwargs, "seed": SEED})
    images, labels = batch()
    padded = np.pad(images, [(0, 0), (step.pad, step.pad), (step.pad, step.pad), (0, 0)])
    if step.mixes_labels:
        want = reference({"images": padded, "labels": labels}, training=True)
        want_images, want_labels = want["images"], want["labels"]
    else:
        want_images, want_labels = reference(padded, training=True), labels
    got_images, got_labels = step(tf.constant(images), tf.constant(labels), tf.constant([SEED, 0]))
    np.testing.assert_array_equal(np.asarray(got_images), np.asarray(want_images))
    np.testing.assert_array_equal(np.asarray(got_labels), np.asarray(want_labels))
    assert not np.array_equal(np.asarray(got_images), padded[:, :got_images.shape[1], :got_images.shape[2]])


def test_the_flip_fraction_is_one_half() -> None:
    import tensorflow as tf

    from specgen.runtime.augment import batch_seed, steps

    [step] = steps([TypeAdapter(Augment).validate_python({"random_flip": "horizontal"})])
    images = tf.reshape(tf.range(4, dtype=tf.float32), [1, 1, 4, 1]) * tf.ones([500, 1, 1, 1])
    flipped = 0
    for b in range(8):  # 8 batches of 500 draws: the seeds of consecutive batches differ
        out, _ = step(images, None, batch_seed(SEED, tf.constant(b), 0))
        flipped += int(tf.reduce_sum(tf.cast(out[:, 0, 0, 0] == 3.0, tf.int32)))
    n = 8 * 500
    # Binomial(n, 0.5): a fair flip lands within 4 standard deviations (sqrt(n)/2) but for 6e-5 of seeds.
    assert abs(flipped - n / 2) <= 4 * (n ** 0.5) / 2, flipped


@pytest.mark.parametrize("factor", [0.5, 0.2])
def test_the_contrast_factor_spans_one_minus_to_one_plus_f(factor: float) -> None:
    """The factor of each image, read back from two pixels about their mean (no clipping: they stay in
    [0, 255]), over N = 4,000 draws. For N uniform draws on a range of width w = 2f, the smallest lies more
    than t above the lower end with probability (1 - t / w)^N <= exp(-N t / w): t = w ln(1e9) / N bounds it
    but for one seed in 1e9 (t = 0.0052 at f = 0.5), and the largest likewise. Keras' scalar factor draws in
    [1, 1 + f]: its smallest factor would be 1, far above 1 - f + t."""
    import tensorflow as tf

    from specgen.runtime.augment import batch_seed, steps

    [step] = steps([TypeAdapter(Augment).validate_python({"random_contrast": factor})])
    images = tf.constant([117.5, 137.5], shape=[1, 1, 2, 1]) * tf.ones([500, 1, 1, 1])  # mean 127.5
    drawn = []
    for b in range(8):
        out, _ = step(images, None, batch_seed(SEED, tf.constant(b), 0))
        drawn.append((out[:, 0, 1, 0] - out[:, 0, 0, 0]).numpy() / 20.0)
    factors = np.concatenate(drawn)
    n, width = factors.size, 2 * factor
    t = width * np.log(1e9) / n
    rounding = 1e-5  # float32 pixels of order 128 (ulp 1.5e-5), two of them over a difference of 20: < 2e-6
    assert 1 - factor - rounding <= factors.min() <= 1 - factor + t, factors.min()
    assert 1 + factor - t <= factors.max() <= 1 + factor + rounding, factors.max()



@pytest.mark.parametrize("factor", [0.3, 1.0])
def test_cutmix_draws_from_beta_of_the_factor_itself(factor: float) -> None:
    """Keras' CutMix draws its Beta's alpha uniformly in its `factor` range for each batch; specgen hands it the
    range (f, f), so alpha is f and the area ratio is Beta(f, f), as docs/spec.md says (a scalar f would make it
    a mixture over alpha in [0, f])."""
    from specgen.runtime.augment import steps

    [step] = steps([TypeAdapter(Augment).validate_python({"cutmix": factor})])
    assert tuple(step.layer.factor) == (factor, factor)


def test_a_cutmix_factor_keras_refuses_is_refused_at_validation() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="less than or equal to 1"):
        TypeAdapter(Augment).validate_python({"cutmix": 2.0})
