"""Declared augmentation at run time: each `data.train.augment` entry is the Keras 3 layer of its name,
applied to training batches (runtime/data.py's training_batches), never at eval or export.

Keras' layers draw their randomness from a stateful SeedGenerator, which a resumed run could not replay.
Here each layer's own `get_random_transformation` draws from `StatelessSeeds` instead: the seed of batch
`b` and entry `j` is derived from (train.seed, b, j) alone, and batch b is counted by the checkpointed data
iterator (`enumerate` after `repeat`), so a resumed run draws the very numbers an uninterrupted run draws.
The transform itself is the layer's `transform_images` / `transform_labels`: Keras' semantics by
construction (tests/test_augment_parity.py compares with the layer's own call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf
from keras.random import SeedGenerator

from specgen.kinds.augment import kind_of


class StatelessSeeds(SeedGenerator):  # type: ignore[misc]  # keras ships no types: SeedGenerator is Any
    """A SeedGenerator without a variable: its n-th draw is `base + [0, n]`, as a Keras SeedGenerator whose
    state is `base` draws (Keras' draw_seed accepts only SeedGenerator instances, hence the subclass)."""

    def __init__(self, base: tf.Tensor) -> None:  # no super().__init__: that makes the state variable
        self.base, self.drawn = tf.cast(base, "int32"), 0

    def next(self, ordered: bool = True) -> tf.Tensor:
        seed = self.base + tf.constant([0, self.drawn], "int32")
        self.drawn += 1
        return seed


@dataclass(frozen=True)
class Step:
    """One entry: its Keras layer and the zero padding a random_crop adds before it."""

    layer: Any
    pad: int
    mixes_labels: bool

    def __call__(self, images: tf.Tensor, labels: tf.Tensor | None, base: tf.Tensor) -> tuple[tf.Tensor, Any]:
        if self.pad:
            p = self.pad
            images = tf.pad(images, [[0, 0], [p, p], [p, p], [0, 0]])
        data = {"images": images, "labels": labels} if self.mixes_labels else images
        transform = self.layer.get_random_transformation(data, training=True, seed=StatelessSeeds(base))
        images = self.layer.transform_images(images, transform, training=True)
        if self.mixes_labels:
            labels = self.layer.transform_labels(labels, transform, training=True)
        return images, labels


def steps(items: Sequence[Any]) -> list[Step]:
    """The Keras layers of a validated augment list."""
    out = []
    for item in items:
        kind = kind_of(item)
        value = kind.value(item)
        name, kwargs = kind.keras(value)
        out.append(Step(getattr(keras.layers, name)(**kwargs), kind.pad(value), kind.mixes_labels))
    return out


def batch_seed(seed: int, batch: tf.Tensor, entry: int) -> tf.Tensor:
    """The base seed pair of one entry on one batch: a function of (train.seed, batch index, entry) alone."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(batch, tf.int64) * 1024 + entry])  # < 1024 entries
    pair = tf.random.stateless_uniform([2], seed=key, minval=0, maxval=2**31 - 1, dtype=tf.int64)
    return tf.cast(pair, tf.int32)


def apply(items: Sequence[Any], seed: int, image: str, label: str | None, classes: int | None
          ) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """A transformation of a repeated dataset of (features, labels) batches into augmented batches."""
    layers = steps(items)
    mixed = label if any(s.mixes_labels for s in layers) else None  # the label mixup/cutmix mix (for_source's)

    def one(index: tf.Tensor, batch: tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]) -> Any:
        features, labels = dict(batch[0]), dict(batch[1])
        images = tf.cast(features[image], tf.float32)
        soft = tf.one_hot(tf.reshape(tf.cast(labels[mixed], tf.int32), [-1]), classes) if mixed is not None else None
        for j, step in enumerate(layers):
            images, soft = step(images, soft, batch_seed(seed, index, j))
        features[image] = tf.cast(images, features[image].dtype)
        if mixed is not None:
            labels[mixed] = soft
        return features, labels

    return lambda batches: batches.enumerate().map(one)


def inference(items: Sequence[Any], image: str) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """A transformation of a dataset of eval (features, labels) examples by the Keras layers that stand for
    `items` at inference (AugmentDef.inference: random_crop's centered window resized to its size)."""
    layers = []
    for item in items:
        kind = kind_of(item)
        if kind.inference is None:  # no layer at inference (at_eval leaves such entries out)
            continue
        name, kwargs = kind.inference(kind.value(item))
        layers.append(getattr(keras.layers, name)(**kwargs))

    def one(features: dict[str, tf.Tensor], labels: Any) -> Any:
        features = dict(features)
        pixels, dtype = tf.cast(features[image], tf.float32), features[image].dtype
        for layer in layers:
            pixels = layer(pixels)
        # an integer input takes the resized pixels rounded (a plain cast would truncate them)
        features[image] = tf.cast(pixels, dtype) if dtype.is_floating else tf.saturate_cast(tf.round(pixels), dtype)
        return features, labels

    return lambda examples: examples.map(one, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
