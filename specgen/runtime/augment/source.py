"""A training source's augmentation, checked against what the data holds (runtime/data.py's read_stage).

Validate knows an image's size only where the source declares it (`image_size`); the rest (an npz or
tfrecord image smaller than a crop) is checked here, before the first step, against the dataset's shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from specgen.kinds.augment import at_eval, image_inputs, kind_of
from specgen.runtime.augment import apply, inference
from specgen.runtime.sources.base import Source
from specgen.runtime.sources.context import SourceContext

Pipeline = Callable[[tf.data.Dataset], tf.data.Dataset]


def for_source(context: SourceContext, source: Source) -> Pipeline | None:
    """The augmentation of `data.train` (None without one); a crop larger than the images is an error."""
    items, spec = list(context.source.augment), context.loaded.spec
    if not items or context.stage != "train":  # validate refuses augment elsewhere
        return None
    image = image_inputs(context.source.features, spec.inputs)[0]  # validate: exactly one
    _check_sizes(context, items, image, source.dataset.element_spec[0][image].shape)
    label, classes = _mixed_label(context) if any(kind_of(i).mixes_labels for i in items) else (None, None)
    return apply(items, context.training.train.seed if context.training.train else 0, image, label, classes)


def for_eval(context: SourceContext, source: Source) -> tf.data.Dataset:
    """The eval examples as the model sees them: each image through the inference of train's entries that act
    there (random_crop: Keras' centered window resized to the crop), unless it is the crop's size already."""
    data = context.loaded.spec.data
    train = data.train if data is not None else None
    items = at_eval(getattr(train, "augment", None))
    if train is None or not items:  # read_stage calls this only when some entry of data.train acts at eval
        return source.dataset
    image = image_inputs(train.features, context.loaded.spec.inputs)[0]  # validate: exactly one
    shape = source.dataset.element_spec[0][image].shape
    wanted = context.loaded.spec.inputs[image].shape[:2]
    if shape.rank == 3 and [shape[0], shape[1]] == list(wanted):
        return source.dataset  # already the model's size: Keras' transform would only cast it
    return inference(items, image)(source.dataset)


def _check_sizes(context: SourceContext, items: list[Any], image: str, shape: tf.TensorShape) -> None:
    if shape.rank != 3 or shape[0] is None or shape[1] is None:
        return  # a size known per image only: Keras' layer center-crops what is smaller
    size = (int(shape[0]), int(shape[1]))
    for i, item in enumerate(items):
        kind = kind_of(item)
        if (why := kind.refuse(kind.value(item), size)) is not None:
            raise context.fail(("augment", i, kind.name), f"{why} (the images in the file are {list(size)})")
        size = kind.size(kind.value(item), size)
    wanted = context.loaded.spec.inputs[image].shape[:2]
    if any(isinstance(w, int) and w != s for w, s in zip(wanted, size, strict=True)):
        raise context.fail(("augment",), f"the augmented images are {list(size)}; input '{image}' is "
                           f"{list(wanted)}; expected a random_crop size equal to the input's")


def _mixed_label(context: SourceContext) -> tuple[str, int]:
    """The label mixup/cutmix mix: the loss's, one-hot over the classes of its logits."""
    loss, ir = context.training.loss, context.ir
    if loss is None or loss.target not in ("sparse", "onehot"):
        raise context.fail(("augment",), "mixup and cutmix mix class labels; expected a "
                           "sparse_softmax_cross_entropy or softmax_cross_entropy loss reading a data label")
    classes = ir.node(ir.outputs[loss.output]).shape[-1]
    if not isinstance(classes, int):  # a named dynamic dimension: the one-hot depth is unknown before run time
        raise context.fail(("augment",), f"mixup and cutmix mix one-hot labels over the classes of output "
                           f"'{loss.output}', whose last dimension is dynamic ({classes}); expected a fixed size")
    return loss.labels, classes
